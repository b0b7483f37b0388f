#!/usr/bin/env bash
# The main job: installs the guest toolchains if missing, builds the example hooks from
# source, then runs `colloquy demo` (the HTTP service in-process on a loopback port, the
# three built-in protocols and the credit-assessment hook example played by SDK agents).
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's old cargo (installed by setup.sh for guests) must not shadow rustup's.
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/setup.sh
bash templates/examples/build.sh
cargo run --release -p colloquy --bin colloquy -- demo "$@"
