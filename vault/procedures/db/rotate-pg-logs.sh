#!/usr/bin/env bash
# description: Rotate and compress PostgreSQL logs older than a day, dropping archives past the keep window
# tags: postgres, logs, maintenance

# Demo-safe: works only inside a scratch directory (MEMVAULT_DEMO_ROOT or a fresh mktemp -d).
# On db1/db2 the real log directory is /var/log/postgresql; this script only simulates it.
# Usage: rotate-pg-logs.sh [KEEP_DAYS]   (default 7)
set -euo pipefail

KEEP_DAYS="${1:-7}"
if ! [[ "$KEEP_DAYS" =~ ^[0-9]+$ ]]; then
    echo "usage: $(basename "$0") [KEEP_DAYS]" >&2
    exit 2
fi

if [[ -n "${MEMVAULT_DEMO_ROOT:-}" ]]; then
    ROOT="$MEMVAULT_DEMO_ROOT"
else
    ROOT="$(mktemp -d)"
    trap 'rm -rf -- "$ROOT"' EXIT
fi
LOGDIR="$ROOT/rotate-pg-logs/var/log/postgresql"
mkdir -p "$LOGDIR"

echo "step 1/4: preparing simulated log directory $LOGDIR"
for age in 0 1 2 3 9 12; do
    day="$(date -u -d "$age days ago" +%Y-%m-%d)"
    f="$LOGDIR/postgresql-$day.log"
    printf '%s 03:15:02 UTC [2211] LOG:  checkpoint complete: wrote 1843 buffers\n' "$day" > "$f"
    printf '%s 03:27:41 UTC [2211] LOG:  duration: 1204.332 ms  statement: SELECT count(*) FROM orders\n' "$day" >> "$f"
    touch -d "$age days ago" "$f"
done
# two archives from an earlier rotation, one outside the keep window
for age in 10 15; do
    day="$(date -u -d "$age days ago" +%Y-%m-%d)"
    printf 'old log %s\n' "$day" | gzip -c > "$LOGDIR/postgresql-$day.log.gz"
    touch -d "$age days ago" "$LOGDIR/postgresql-$day.log.gz"
done
echo "         $(find "$LOGDIR" -type f | wc -l) files present"

echo "step 2/4: compressing plain logs older than 1 day"
compressed=0
while IFS= read -r -d '' f; do
    gzip -9 -f -- "$f"
    echo "         gzip $(basename "$f")"
    compressed=$((compressed + 1))
done < <(find "$LOGDIR" -type f -name 'postgresql-*.log' -mtime +0 -print0 | sort -z)

echo "step 3/4: removing archives older than $KEEP_DAYS days"
removed=0
while IFS= read -r -d '' f; do
    rm -f -- "$f"
    echo "         rm $(basename "$f")"
    removed=$((removed + 1))
done < <(find "$LOGDIR" -type f -name 'postgresql-*.log.gz' -mtime +"$KEEP_DAYS" -print0 | sort -z)

echo "step 4/4: summary"
echo "         compressed=$compressed removed=$removed remaining=$(find "$LOGDIR" -type f | wc -l)"
echo "done: log rotation finished"
