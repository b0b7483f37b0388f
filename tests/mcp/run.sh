#!/usr/bin/env bash
# The MCP server's tests: the official MCP Python SDK's client (both protocol eras over
# Streamable HTTP, and the `colloquy mcp` stdio bridge), the MCP conformance suite and the
# MCP Inspector's CLI, against a real `colloquy serve` started from the debug binary (`cargo
# test --workspace` builds it) with the built-in templates and the credit-assessment example
# (built by templates/examples/build.sh). Outside the clone, created once and reused:
#   COLLOQUY_MCP_VENV         the Python virtualenv (pinned requirements.txt)
#   COLLOQUY_MCP_CONFORMANCE  an npm prefix holding the conformance suite, the MCP Inspector
#                             (its CLI) and Node 22 (npm's `node` package: both want Node 22,
#                             Debian has less)
# Ends with one line counting the tests.
set -euo pipefail
cd "$(dirname "$0")"

venv="${COLLOQUY_MCP_VENV:-$HOME/.cache/colloquy-mcp-venv}"
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
export PIP_ROOT_USER_ACTION=ignore
if ! cmp -s requirements.txt "$venv/installed-requirements.txt"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r requirements.txt
    cp requirements.txt "$venv/installed-requirements.txt"
fi

conformance="${COLLOQUY_MCP_CONFORMANCE:-$HOME/.cache/colloquy-mcp-conformance}"
export COLLOQUY_MCP_CONFORMANCE="$conformance"
wanted="@modelcontextprotocol/conformance@0.2.0-alpha.12 @modelcontextprotocol/inspector@2.12.0 node@22.23.3"
if [ "$(cat "$conformance/installed" 2>/dev/null)" != "$wanted" ]; then
    mkdir -p "$conformance"
    [ -f "$conformance/package.json" ] || echo '{"private": true}' >"$conformance/package.json"
    # shellcheck disable=SC2086 # two package specs
    (cd "$conformance" && npm install --silent --no-audit --no-fund $wanted)
    echo "$wanted" >"$conformance/installed"
fi

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
status=0
"$venv/bin/python" -m pytest -q --junitxml="$report" "$@" || status=$?
"$venv/bin/python" - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
total = int(suite.get("tests", 0))
failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
skipped = int(suite.get("skipped", 0))
print(f"mcp: {total} tests, {total - failed - skipped} passed, {failed} failed, {skipped} skipped")
PY
exit "$status"
