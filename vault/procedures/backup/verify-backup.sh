#!/usr/bin/env bash
# description: Verify the nightly pg_dump against its SHA-256 manifest before restic uploads it
# tags: backup, postgres, checksum, restic

# Demo-safe: builds a fake dump and manifest in a scratch directory and checks them with sha256sum.
# Usage: verify-backup.sh [--corrupt]   (--corrupt flips a byte to show the failure path, exit 1)
set -euo pipefail

CORRUPT=0
case "${1:-}" in
    "") ;;
    --corrupt) CORRUPT=1 ;;
    *) echo "usage: $(basename "$0") [--corrupt]" >&2; exit 2 ;;
esac

if [[ -n "${MEMVAULT_DEMO_ROOT:-}" ]]; then
    ROOT="$MEMVAULT_DEMO_ROOT"
else
    ROOT="$(mktemp -d)"
    trap 'rm -rf -- "$ROOT"' EXIT
fi
DUMPDIR="$ROOT/verify-backup/var/backups/pg"
mkdir -p "$DUMPDIR"
STAMP="$(date -u +%Y%m%d)"
DUMP="acme_shop-$STAMP-0315.dump"

echo "step 1/3: creating simulated dump $DUMPDIR/$DUMP"
{
    printf 'PGDMP-simulated acme_shop %s\n' "$STAMP"
    for t in orders order_items customers products events sessions_audit; do
        printf 'TABLE DATA public %s rows=%d\n' "$t" $(( ${#t} * 1021 ))
    done
} > "$DUMPDIR/$DUMP"
(cd "$DUMPDIR" && sha256sum "$DUMP" > "$DUMP.sha256")
echo "         size=$(wc -c < "$DUMPDIR/$DUMP") bytes, manifest $DUMP.sha256 written"

if [[ "$CORRUPT" -eq 1 ]]; then
    echo "         (--corrupt) appending a stray byte to the dump"
    printf 'X' >> "$DUMPDIR/$DUMP"
fi

echo "step 2/3: comparing dump with manifest"
if (cd "$DUMPDIR" && sha256sum --quiet -c "$DUMP.sha256"); then
    echo "         checksum OK: $(cut -c1-16 "$DUMPDIR/$DUMP.sha256")..."
else
    echo "step 3/3: FAILED - checksum mismatch, do not upload; re-run the 03:15 UTC dump on db2" >&2
    exit 1
fi

echo "step 3/3: dump is safe to hand to restic (bucket acme-backups-eu)"
echo "done: backup verified"
