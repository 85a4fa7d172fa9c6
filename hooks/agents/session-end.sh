#!/bin/sh
# Agent session end: store the session summary read from stdin as a "summary" episode of agent:$AGENT_NAME.
#
#   printf '%s\n' "Deployed v2.15.1; web3 needed a manual drain." | AGENT_NAME=deployer session-end.sh
#
# Empty input stores nothing. The text goes through memvault's secret check like any other write: a summary
# that quotes a token is refused (exit 1) rather than pushed to git.
#
# Environment: AGENT_NAME (required: who is summarising), MEMVAULT (the command, default "memvault"),
# MEMVAULT_DIR (the vault).
set -eu

: "${AGENT_NAME:?set AGENT_NAME to the agent whose session this summarises (the source is agent:\$AGENT_NAME)}"
summary=$(cat)
[ -n "$(printf '%s' "$summary" | tr -d '[:space:]')" ] || exit 0

# $MEMVAULT is split into words on purpose ("python3 -m memvault").
# shellcheck disable=SC2086
printf '%s\n' "$summary" | ${MEMVAULT:-memvault} episode add - --kind summary --source "agent:${AGENT_NAME}" --tag session
