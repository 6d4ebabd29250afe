#!/usr/bin/env bash
# Builds the project's native pieces into dist/ next to the JavaScript that loads them:
# the SQLite watchdog extension of `query`/`find` (pipelines/search/sql/watchdog.c), compiled
# against the SQLite headers that better-sqlite3 ships. Skipped when up to date.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
src=pipelines/search/sql/watchdog.c
out=dist/pipelines/search/sql/watchdog.so
headers=node_modules/better-sqlite3/deps/sqlite3
[ -f "$out" ] && [ "$out" -nt "$src" ] && [ "$out" -nt "$headers/sqlite3ext.h" ] && exit 0
mkdir -p "$(dirname "$out")"
gcc -O2 -Wall -Wextra -Werror -shared -fPIC -I "$headers" -o "$out.tmp" "$src" -lpthread
mv "$out.tmp" "$out"
