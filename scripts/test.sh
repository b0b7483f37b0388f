#!/usr/bin/env bash
# The test command: installs the guest toolchains (once), builds every example hook from
# source, then runs the whole workspace's tests (the hook tests load the fresh modules), then
# the Python SDK's, the TypeScript SDK's (beside Python SDK agents), the MCP server's (MCP
# clients of the official Python SDK, the MCP conformance suite), the web inspector's (in
# headless Chromium), the A2A conformance kit's and the A2A Python SDK interop tests against
# the binary those tests built.
set -euo pipefail
cd "$(dirname "$0")/.."
# Debian's old cargo (installed by setup.sh for guests) must not shadow rustup's.
export PATH="$HOME/.cargo/bin:$PATH"

bash scripts/setup.sh
bash templates/examples/build.sh
# The guest kits' own tests (no wasm needed), then the workspace's.
python3 -m unittest discover -s guest-sdk/python/tests
node --test guest-sdk/js/test/
cargo test --workspace
# Every template test file, the built-ins' and the examples' (each hook build), with coverage.
cargo run --quiet -p colloquy -- templates test templates --coverage
bash sdk/python/run-tests.sh
bash sdk/js/run-tests.sh
bash tests/mcp/run.sh
bash tests/inspector/run.sh
bash tests/a2a-tck/run.sh
bash tests/a2a-interop/run.sh
