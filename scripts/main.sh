#!/usr/bin/env bash
# The main job on an embedded default: set-up (idempotent), then the tools' own overview.
# It becomes trajstore's sample import when the import lands.
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
bash "$REPO_ROOT/scripts/setup.sh"
for tool in trajstore actorctl sandboxd; do
  node "$REPO_ROOT/dist/cli/$tool.js" --help
  echo
done
