#!/usr/bin/env bash
# The main job on an embedded default: set-up (idempotent), then trajstore imports the bundled sample
# trajectories (testdata/samples/) and the local agent session logs behind @agenta (Codex) and
# @agentb-code (Claude Code), when this machine has them, into the default dataset, and prints what it
# imported: runs, steps, tool calls and tokens by format.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$REPO_ROOT/scripts/setup.sh"
trajstore() { node "$REPO_ROOT/dist/cli/trajstore.js" "$@"; }

echo "== bundled samples ($REPO_ROOT/testdata/samples) -> the default dataset"
trajstore import -f "$REPO_ROOT/testdata/samples" --mode replace --yes

# Local agent sessions: appended when present. Exit 3 means the root does not exist on this machine;
# any other failure is reported and the samples stay imported.
for source in agenta:agenta agentb-code:agentb-code; do
  pin="@${source%%:*}"
  format="${source##*:}"
  echo
  echo "== $pin (local $format sessions) -> the default dataset"
  set +e
  trajstore import -f "$pin" -i "$format" --mode append
  rc=$?
  set -e
  case $rc in
    0) ;;
    3) echo "(no local sessions at $pin on this machine: skipped)" ;;
    *) echo "(import of $pin failed with exit $rc: see the message above; the default dataset keeps what was imported)" ;;
  esac
done
