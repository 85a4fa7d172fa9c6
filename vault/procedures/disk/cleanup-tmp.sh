#!/usr/bin/env bash
# description: Delete temporary files older than N days (default 7) to free disk space
# tags: disk, cleanup, maintenance

# Demo-safe: creates files with old mtimes inside a scratch directory and deletes only there.
# On a real host the target would be /var/tmp/acme-shop (upload and report scratch files).
# Usage: cleanup-tmp.sh [DAYS]   (default 7)
set -euo pipefail

DAYS="${1:-7}"
if ! [[ "$DAYS" =~ ^[0-9]+$ ]]; then
    echo "usage: $(basename "$0") [DAYS]" >&2
    exit 2
fi

if [[ -n "${MEMVAULT_DEMO_ROOT:-}" ]]; then
    ROOT="$MEMVAULT_DEMO_ROOT"
else
    ROOT="$(mktemp -d)"
    trap 'rm -rf -- "$ROOT"' EXIT
fi
TMPDIR_SIM="$ROOT/cleanup-tmp/var/tmp/acme-shop"
mkdir -p "$TMPDIR_SIM/reports" "$TMPDIR_SIM/uploads"

echo "step 1/3: creating simulated scratch files in $TMPDIR_SIM"
for age in 1 3 6 8 14 30; do
    f="$TMPDIR_SIM/reports/orders-export-${age}d.csv"
    head -c $((age * 512)) /dev/zero > "$f"
    touch -d "$age days ago" "$f"
    g="$TMPDIR_SIM/uploads/upload-${age}d.part"
    head -c 1024 /dev/zero > "$g"
    touch -d "$age days ago" "$g"
done
before="$(du -sk "$TMPDIR_SIM" | cut -f1)"
echo "         $(find "$TMPDIR_SIM" -type f | wc -l) files, ${before} KiB"

echo "step 2/3: deleting files older than $DAYS days"
deleted="$(find "$TMPDIR_SIM" -type f -mtime +"$DAYS" -print -delete | wc -l)"
echo "         deleted $deleted files"

echo "step 3/3: summary"
after="$(du -sk "$TMPDIR_SIM" | cut -f1)"
echo "         ${before} KiB -> ${after} KiB, $(find "$TMPDIR_SIM" -type f | wc -l) files kept"
echo "done: cleanup finished"
