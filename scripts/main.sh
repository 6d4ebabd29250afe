#!/usr/bin/env bash
# The main job on an embedded default: set-up (idempotent), then trajstore imports the bundled sample
# trajectories (testdata/samples/) and the local agent session logs behind @agenta (Codex) and
# @agentb-code (Claude Code), when this machine has them, into the default dataset, and prints what it
# imported: runs, steps, tool calls and tokens by format.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$REPO_ROOT/scripts/setup.sh"
trajstore() { node "$REPO_ROOT/dist/bin/trajstore.js" "$@"; }

echo "== bundled samples ($REPO_ROOT/testdata/samples) -> the default dataset"
trajstore import -f "$REPO_ROOT/testdata/samples" --mode replace --yes

# Local agent sessions: appended when this machine has any (the pins say where their roots are).
for source in agenta:agenta agentb-code:agentb-code; do
  pin="@${source%%:*}"
  format="${source##*:}"
  root="$(trajstore dataset show "${pin#@}" --format json | node -e 'let s="";process.stdin.on("data",d=>s+=d).on("end",()=>console.log(JSON.parse(s).uri))')"
  echo
  echo "== $pin (local $format sessions in $root) -> the default dataset"
  if ! find "$root" -name '*.jsonl' -print -quit 2>/dev/null | grep -q .; then
    echo "(no session logs there on this machine: skipped)"
    continue
  fi
  # A failure is reported and the samples stay imported.
  trajstore import -f "$pin" -i "$format" --mode append ||
    echo "(import of $pin failed with exit $?: see the message above; the default dataset keeps what was imported)"
done
