#!/usr/bin/env bash
# Builds the project's native pieces into dist/ next to the JavaScript that loads them, each
# skipped when it is newer than its inputs:
# - the SQLite watchdog extension of `query`/`find` (pipelines/search/sql/watchdog.c), compiled
#   against the SQLite headers that better-sqlite3 ships, and its PRAGMA guard (pragma-guard.c);
# - the kill-point shim of the crash tests (lib/testing/killpoint.c), an LD_PRELOAD library;
# - malloc_trim for actor nodes (framework/core/reclaim.c), a Node-API module (no Node headers needed);
# - sandboxd's in-kernel relay of proxied downloads (daemon/api/splice-relay.c), another.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# build OUT SRC [DEPENDENCY...] -- [GCC ARGUMENTS...]: a shared object from one C file.
build() {
  local out=$1 src=$2 fresh=1
  shift 2
  local inputs=("$src")
  while [ "$1" != -- ]; do inputs+=("$1"); shift; done
  shift
  for input in "${inputs[@]}"; do [ -f "$out" ] && [ "$out" -nt "$input" ] || fresh=0; done
  [ "$fresh" = 1 ] && return 0
  mkdir -p "$(dirname "$out")"
  gcc -O2 -Wall -Wextra -Werror -shared -fPIC -o "$out.tmp" "$src" "$@"
  mv "$out.tmp" "$out"
}

headers=node_modules/better-sqlite3/deps/sqlite3
build dist/pipelines/search/sql/watchdog.so pipelines/search/sql/watchdog.c "$headers/sqlite3ext.h" -- -I "$headers" -lpthread
build dist/pipelines/search/sql/pragma-guard.so pipelines/search/sql/pragma-guard.c "$headers/sqlite3ext.h" -- -I "$headers"
build dist/lib/testing/killpoint.so lib/testing/killpoint.c -- -ldl
build dist/framework/core/reclaim.node framework/core/reclaim.c --
build dist/daemon/api/splice-relay.node daemon/api/splice-relay.c -- -lpthread
