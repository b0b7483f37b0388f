#!/usr/bin/env bash
# The TypeScript/JavaScript SDK's tests: a type check of index.d.ts with the TypeScript that
# scripts/setup.sh installs for the JavaScript hooks (skipped when it is not there: the SDK
# itself needs no build step), then `node --test` against real `colloquy serve` processes
# started from the built binary (see test/harness.mjs for where it is looked for), beside
# Python SDK agents run by the virtualenv that sdk/python/run-tests.sh makes. Ends with one
# line counting the tests.
#
#   COLLOQUY_PYSDK_VENV    the Python SDK's virtualenv (default: ~/.cache/colloquy-pysdk-venv)
#   COLLOQUY_PYSDK_PYTHON  or its python directly
#   COLLOQUY_GUEST_TOOLS   where setup.sh put the JavaScript tools (default: ~/.cache/colloquy-guest-tools)
set -euo pipefail
cd "$(dirname "$0")"

# Global fetch without a flag, and the test runner's reporters, came in Node 18.19.
node -e '
const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 18 || (major === 18 && minor < 19)) {
  console.error(`sdk/js needs Node 18.19 or later; this is ${process.version}`);
  process.exit(1);
}'

tsc="${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}/js/node_modules/typescript/bin/tsc"
if [ -f "$tsc" ]; then
    echo "== tsc: index.d.ts and test/types-check.ts"
    node "$tsc" -p tsconfig.json
else
    echo "== no TypeScript at $tsc (bash scripts/setup.sh installs it): type check skipped"
fi

export COLLOQUY_PYSDK_PYTHON="${COLLOQUY_PYSDK_PYTHON:-${COLLOQUY_PYSDK_VENV:-$HOME/.cache/colloquy-pysdk-venv}/bin/python}"

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
status=0
node --test \
    --test-reporter=spec --test-reporter-destination=stdout \
    --test-reporter=tap --test-reporter-destination="$report" \
    "$@" test/*.test.mjs || status=$?
count() { sed -n "s/^# $1 \([0-9]*\)$/\1/p" "$report" | tail -1; }
total="$(count tests)"; passed="$(count pass)"; failed="$(count fail)"
skipped="$(count skipped)"; cancelled="$(count cancelled)"
# A suite skipped as a whole (no binary, no Python SDK) counts none of its tests: say so.
suites_skipped="$(awk '/^ *ok [0-9]+ - .* # SKIP/ { skip = 1; next } skip && /type: .suite./ { n++ } /^ *\.\.\.$/ { skip = 0 } END { print n + 0 }' "$report")"
echo "js sdk: ${total:-0} tests, ${passed:-0} passed, $(( ${failed:-0} + ${cancelled:-0} )) failed, ${skipped:-0} skipped, ${suites_skipped} suites skipped"
exit "$status"
