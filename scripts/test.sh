#!/usr/bin/env bash
# The whole test suite on a fresh or prepared machine: set-up (idempotent), then the type check,
# the TypeScript tests and the Rust tests. Arguments go to the runner (see scripts/run-tests.ts).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
# The slow tier boots the guest firmware under QEMU: only `--tier slow|all` installs its Debian packages.
slow_tier() {
  local prev=""
  for arg in "$@"; do
    [ "$prev" = --tier ] && { [ "$arg" = slow ] || [ "$arg" = all ]; } && return 0
    prev="$arg"
  done
  return 1
}
if slow_tier "$@"; then export SETUP_SLOW_TIER=1; fi
# Type errors must not stop the build here: the runner reports them as a failed check.
SETUP_ALLOW_TYPE_ERRORS=1 bash "$REPO_ROOT/scripts/setup.sh"
exec node "$REPO_ROOT/dist/scripts/run-tests.js" "$@"
