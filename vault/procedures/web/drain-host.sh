#!/usr/bin/env bash
# description: Drain a web host in HAProxy before maintenance or deploy (simulated state file)
# tags: haproxy, web, deploy, maintenance

# Demo-safe: the real command is `set server web_backend/HOST state drain` on /run/haproxy/admin.sock on lb1;
# this script only records the state in a scratch directory.
# Usage: drain-host.sh HOST [drain|ready]   HOST is web1, web2 or web3
set -euo pipefail

usage() { echo "usage: $(basename "$0") HOST [drain|ready]   (HOST: web1|web2|web3)" >&2; }

if [[ $# -lt 1 || $# -gt 2 ]]; then
    usage
    exit 2
fi
HOST="$1"
STATE="${2:-drain}"
case "$HOST" in
    web1) IP=10.8.0.11 ;;
    web2) IP=10.8.0.12 ;;
    web3) IP=10.8.0.13 ;;
    *) echo "unknown host: $HOST" >&2; usage; exit 2 ;;
esac
case "$STATE" in drain|ready) ;; *) usage; exit 2 ;; esac

if [[ -n "${MEMVAULT_DEMO_ROOT:-}" ]]; then
    ROOT="$MEMVAULT_DEMO_ROOT"
else
    ROOT="$(mktemp -d)"
    trap 'rm -rf -- "$ROOT"' EXIT
fi
STATEDIR="$ROOT/drain-host/haproxy-state"
mkdir -p "$STATEDIR"

echo "step 1/3: checking other backends stay up before changing $HOST ($IP)"
up=0
for h in web1 web2 web3; do
    [[ "$h" == "$HOST" ]] && continue
    s="$(cat "$STATEDIR/$h" 2>/dev/null || echo ready)"
    echo "         $h: $s"
    [[ "$s" == "ready" ]] && up=$((up + 1))
done
if [[ "$STATE" == "drain" && "$up" -lt 1 ]]; then
    echo "refusing to drain $HOST: no other web host is ready" >&2
    exit 1
fi

echo "step 2/3: set server web_backend/$HOST state $STATE (simulated)"
printf '%s\n' "$STATE" > "$STATEDIR/$HOST"
printf '%s %s %s\n' "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$HOST" "$STATE" >> "$STATEDIR/history.log"

echo "step 3/3: waiting for active sessions on $HOST to finish"
for n in 12 5 0; do
    echo "         scur=$n"
done
echo "done: $HOST is now '$STATE' (state file $STATEDIR/$HOST)"
