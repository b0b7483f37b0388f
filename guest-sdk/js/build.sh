#!/usr/bin/env bash
# Builds a Colloquy hook written in JavaScript or TypeScript into a WebAssembly component of
# the world colloquy:hooks@1.0.0 (guest-sdk/wit/hooks.wit), with QuickJS:
#
#     guest-sdk/js/build.sh HOOK.(js|ts) OUT.wasm
#
# The hook imports the kit as `colloquy-hook` (guest-sdk/js/colloquy-hook.js); TypeScript is
# type-checked against guest-sdk/js/colloquy-hook.d.ts. The pinned tools live outside the
# clone, in ${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}/js (installed here by
# setup.sh on first use), and built components are cached next to them, in js-cache/, keyed
# by the SHA-256 of their sources, the kit, the WIT and the tool versions: a second build of
# the same sources is a copy. Steps: tools/build-hook.mjs. Reference: docs/hooks-js.md.
#
# Test-only: `--no-stub-wasi` keeps QuickJS's WASI imports in the component, which the
# engine refuses at load; only the refusal's test fixture (tests/fixtures/hooks/js/wasi.js)
# is built so.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
bash "$here/setup.sh"
exec node "$here/tools/build-hook.mjs" "$@"
