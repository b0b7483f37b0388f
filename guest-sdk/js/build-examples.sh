#!/usr/bin/env bash
# Builds the JavaScript and TypeScript hooks of the repository into components (each with
# guest-sdk/js/build.sh; a component whose sources did not change comes from its cache):
#
#   templates/examples/credit-assessment/hook-ts/credit_policy.ts
#       -> templates/examples/credit-assessment/credit_assessment_js.wasm
#   guest-sdk/js/examples/quickstart/my_hook.ts   -> target/hooks/js/quickstart.wasm
#   tests/fixtures/hooks/js/hostile.js            -> target/hooks/js/hostile.wasm
#   tests/fixtures/hooks/js/wasi.js (test-only build with its WASI imports, --no-stub-wasi)
#                                                 -> target/hooks/js/wasi.wasm
#
# Paths are the repository root's, whatever the working directory.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
build="$here/build.sh"

echo "== js: credit-assessment, quickstart, hostile fixtures"
"$build" "$root/templates/examples/credit-assessment/hook-ts/credit_policy.ts" \
    "$root/templates/examples/credit-assessment/credit_assessment_js.wasm"
"$build" "$root/guest-sdk/js/examples/quickstart/my_hook.ts" "$root/target/hooks/js/quickstart.wasm"
"$build" "$root/tests/fixtures/hooks/js/hostile.js" "$root/target/hooks/js/hostile.wasm"
"$build" --no-stub-wasi "$root/tests/fixtures/hooks/js/wasi.js" "$root/target/hooks/js/wasi.wasm"
