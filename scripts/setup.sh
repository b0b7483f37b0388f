#!/usr/bin/env bash
# Installs what building the example hooks needs, once: Debian's clang/lld (C), Debian's
# Rust 1.63 with the wasm32 std and the serde crates (Rust guests, offline), wabt (WAT), Zig
# from PyPI, and the pinned component toolchains outside the clone (guest-sdk/python/setup.sh:
# componentize-py in a virtualenv; guest-sdk/js/setup.sh: Debian's Node and npm if missing,
# then componentize-qjs, esbuild and TypeScript from npm), and Debian's Chromium and its
# driver for the web inspector's browser tests (tests/inspector/run.sh). Idempotent: a tool
# already present is not installed again.
set -euo pipefail

packages=(clang lld wasi-libc libclang-rt-14-dev-wasm32 rustc cargo libstd-rust-dev-wasm32
          librust-serde-json-dev librust-serde-derive-dev wabt chromium chromium-driver)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" \
        || missing+=("$package")
done
# The Python SDK's tests (sdk/python/run-tests.sh) make a virtualenv: Debian splits venv and
# pip out of python3.
python3 -c 'import ensurepip, venv' 2>/dev/null || missing+=(python3-venv)
python3 -m pip --version >/dev/null 2>&1 || missing+=(python3-pip)
if ((${#missing[@]})); then
    echo "== apt-get install ${missing[*]}"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Pinned: Zig's language still changes between releases; the example is written for this one.
ZIG_VERSION=0.17.1
if [ "$(python3 -m ziglang version 2>/dev/null)" != "$ZIG_VERSION" ]; then
    echo "== pip install ziglang==$ZIG_VERSION"
    python3 -m pip install --quiet "ziglang==$ZIG_VERSION"
fi

# Components: Python and JavaScript/TypeScript hooks.
bash "$(dirname "$0")/../guest-sdk/python/setup.sh"
bash "$(dirname "$0")/../guest-sdk/js/setup.sh"
