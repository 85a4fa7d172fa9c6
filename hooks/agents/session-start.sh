#!/bin/sh
# Agent session start: print the memories relevant to the agent's task as a prompt block on stdout.
#
#   session-start.sh "deploy v2.15.1 to the web tier"      # the task as arguments
#   echo "deploy v2.15.1" | session-start.sh                # or on stdin
#
# stdin may also be an agent harness's JSON hook payload (Claude Code's UserPromptSubmit sends
# {"prompt": "...", ...}): its "prompt" (or "task") field is the task. With no task at all (Claude Code's
# SessionStart payload has none) $MEMVAULT_TASK is used, and with none of those nothing is printed.
#
# Environment: MEMVAULT (the command, default "memvault"; e.g. "python3 -m memvault"), MEMVAULT_DIR (the
# vault), MEMVAULT_BUDGET (tokens for the block, default 1500), MEMVAULT_PYTHON (reads JSON payloads,
# default python3).
set -eu

if [ "$#" -gt 0 ]; then
    task="$*"
elif [ -t 0 ]; then
    task=""
else
    task=$(cat)
fi

case "$task" in
    "{"*)  # a JSON hook payload, not a task
        task=$(printf '%s' "$task" | "${MEMVAULT_PYTHON:-python3}" -c '
import json, sys
try:
    payload = json.load(sys.stdin)
except ValueError:
    sys.exit(0)
if isinstance(payload, dict):
    print(payload.get("prompt") or payload.get("task") or "")
')
        ;;
esac
[ -n "$(printf '%s' "$task" | tr -d '[:space:]')" ] || task=${MEMVAULT_TASK:-}
[ -n "$task" ] || exit 0  # nothing to recall for

# $MEMVAULT is split into words on purpose ("python3 -m memvault").
# shellcheck disable=SC2086
exec ${MEMVAULT:-memvault} recall --format prompt --budget "${MEMVAULT_BUDGET:-1500}" -- "$task"
