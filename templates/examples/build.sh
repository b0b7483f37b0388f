#!/usr/bin/env bash
# Builds every example hook from source into the .wasm file its template names (git-ignored).
# Needs the toolchains scripts/setup.sh installs: Debian's clang/lld (C), Debian's rustc and
# cargo with the wasm32 std and serde crates (Rust, offline), wabt (WAT), ziglang (Zig), and
# the component toolchains (guest-sdk/python, guest-sdk/js), whose outputs are cached by
# content outside the clone.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/hooks"
mkdir -p "$out"

# --- Rust (guest SDK), with Debian's Rust 1.63 by absolute path: rustup's toolchain has no
# wasm32 target, and rustup's cargo cannot drive Debian's rustc. Offline, against the crates
# Debian packages in /usr/share/cargo/registry.
export CARGO_HOME="$out/cargo-home"
mkdir -p "$CARGO_HOME"
cat > "$CARGO_HOME/config.toml" <<'TOML'
[source.crates-io]
replace-with = "debian"
[source.debian]
directory = "/usr/share/cargo/registry"
[net]
offline = true
TOML
# Debian's cargo cannot parse the main workspace's manifest (edition 2024, resolver 3), and
# it reads the workspace of every path dependency, so the guest crates are staged outside the
# tree with the same relative layout.
stage="${TMPDIR:-/tmp}/colloquy-hook-build"
rm -rf "$stage"
mkdir -p "$stage/templates/examples/credit-assessment"
cp -r "$root/guest-sdk" "$stage/guest-sdk"
cp -r "$here/credit-assessment/hook" "$stage/templates/examples/credit-assessment/hook"
echo "== rust: credit-assessment"
# bulk-memory: the moves of the SDK's event structs (a few hundred bytes each) become one
# `memory.copy` instead of calls to compiler_builtins' word-by-word `memcpy`, which was 15%
# of a call. Every engine that runs hooks (wasmtime) enables bulk memory by default.
RUSTFLAGS="-C target-feature=+bulk-memory" \
RUSTC=/usr/bin/rustc CARGO_TARGET_DIR="$out/rust" /usr/bin/cargo build --quiet --release \
    --lib --target wasm32-unknown-unknown \
    --manifest-path "$stage/templates/examples/credit-assessment/hook/Cargo.toml"
cp "$out/rust/wasm32-unknown-unknown/release/credit_assessment_hook.wasm" \
    "$here/credit-assessment/credit_assessment.wasm"

# --- C, freestanding (no libc, no WASI): clang straight to wasm32, linked by wasm-ld.
echo "== c: amount-guard"
clang --target=wasm32-unknown-unknown -O2 -nostdlib -ffreestanding -Wall -Wextra -Werror \
    -Wl,--no-entry -Wl,--export-dynamic -Wl,--strip-all \
    -o "$here/amount-guard/amount_guard.wasm" "$here/amount-guard/amount_guard.c"

# The benchmark's trivial hook (engine/hooks/benches/hooks.rs), same toolchain.
clang --target=wasm32-unknown-unknown -O2 -nostdlib -ffreestanding -Wall -Wextra -Werror \
    -Wl,--no-entry -Wl,--export-dynamic -Wl,--strip-all \
    -o "$out/trivial_hook.wasm" "$root/engine/hooks/benches/trivial_hook.c"

# --- WAT, assembled by wabt.
echo "== wat: auto-responder"
wat2wasm "$here/auto-responder/auto_responder.wat" -o "$here/auto-responder/auto_responder.wasm"
# The benchmark's set_vars hook (engine/hooks/benches/hooks.rs).
wat2wasm "$root/engine/hooks/benches/set_vars_hook.wat" -o "$out/set_vars_hook.wasm"

# --- Zig, from PyPI's ziglang package.
echo "== zig: lowest-price"
python3 -m ziglang build-exe "$here/lowest-price/lowest_price.zig" -target wasm32-freestanding \
    -fno-entry -rdynamic -O ReleaseSmall --cache-dir "$out/zig-cache" \
    --global-cache-dir "$out/zig-global-cache" \
    -femit-bin="$here/lowest-price/lowest_price.wasm"

# --- Components: the credit policy again in Python and TypeScript, the quick starts, the
# hostile fixtures.
bash "$root/guest-sdk/python/build-examples.sh"
bash "$root/guest-sdk/js/build-examples.sh"

echo "example hooks built"
