#!/usr/bin/env bash
# Interop with the official A2A Python SDK (a2a-sdk from PyPI), against real `colloquy serve`
# processes on loopback ports:
#   - test_client_v1.py: a2a-sdk 1.3's client (A2A v1.0, JSON-RPC and HTTP+JSON) calls the
#     Colloquy agent `tck` (tests/a2a-tck/sut_agent.py, on the project's Python SDK) of a
#     server in open development mode (--a2a-template a2a-task);
#   - test_client_v03.py: a2a-sdk 0.3's client (A2A v0.3, no A2A-Version header) calls it too;
#   - test_bridge_v1.py: an a2a-sdk 1.3 server (remote_agent.py) is the A2A agent `seller` of
#     a second server's agents file, and plays a fipa-request and a fipa-contract-net that
#     `alice` runs through the HTTP API.
# Ends with one line counting the tests of both SDKs; fails if any fails.
#
# Each SDK gets a virtualenv outside the clone, created once and installed again only when
# its pinned requirements file changes. Needs the debug binary (`cargo test --workspace`
# builds it) and the Python SDK's venv (sdk/python/run-tests.sh creates it).
#
#   COLLOQUY_A2A_INTEROP_VENV      a2a-sdk 1.3 (default: ~/.cache/colloquy-a2a-interop-venv)
#   COLLOQUY_A2A_INTEROP_V03_VENV  a2a-sdk 0.3 (default: ~/.cache/colloquy-a2a-interop-v03-venv)
#   COLLOQUY_PYSDK_VENV            the Python SDK's (default: ~/.cache/colloquy-pysdk-venv)
# Logs of the servers and agents land in TARGET/a2a-interop-logs.
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
here="$root/tests/a2a-interop"
target="${CARGO_TARGET_DIR:-$root/target}"
binary="$target/debug/colloquy"
[ -x "$binary" ] || { echo "a2a interop: no binary at $binary: run cargo build" >&2; exit 1; }
sdk_venv="${COLLOQUY_PYSDK_VENV:-$HOME/.cache/colloquy-pysdk-venv}"
[ -x "$sdk_venv/bin/python" ] || { echo "a2a interop: no SDK venv at $sdk_venv: run sdk/python/run-tests.sh" >&2; exit 1; }
v1_venv="${COLLOQUY_A2A_INTEROP_VENV:-$HOME/.cache/colloquy-a2a-interop-venv}"
v03_venv="${COLLOQUY_A2A_INTEROP_V03_VENV:-$HOME/.cache/colloquy-a2a-interop-v03-venv}"
logs="$target/a2a-interop-logs"
# CI runs as root; pip's warning about it says nothing here.
export PIP_ROOT_USER_ACTION=ignore

# venv VENV REQUIREMENTS: the virtualenv with exactly these pins, from PyPI the first time
# and again only when the file's digest differs from the one stamped at the last install
# (the digest alone, so a clone elsewhere reuses it).
venv() {
    local dir="$1" requirements="$2"
    local stamp="$dir/colloquy-a2a-interop-requirements.sha256"
    local digest
    digest="$(sha256sum <"$requirements" | cut -d' ' -f1)"
    if [ ! -x "$dir/bin/python" ]; then
        mkdir -p "$(dirname "$dir")"
        python3 -m venv "$dir"
    fi
    if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
        echo "== a2a interop: installing $(basename "$requirements") into $dir"
        "$dir/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
        echo "$digest" >"$stamp"
    fi
}
venv "$v1_venv" "$here/requirements-v1.txt"
venv "$v03_venv" "$here/requirements-v03.txt"

work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    mkdir -p "$logs"
    cp "$work"/*.log "$logs/" 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
# wait_for WHAT LOG COMMAND...: up to 10 s for COMMAND to succeed, else the log and a failure.
wait_for() {
    local what="$1" log="$2"
    shift 2
    for _ in $(seq 100); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.1
    done
    "$@" >/dev/null 2>&1 && return 0
    tail -20 "$log" >&2
    echo "a2a interop: $what did not start" >&2
    exit 1
}

# 1. Open development mode, the fixture agent `tck` at work, for the SDKs' clients.
port="$(free_port)"
url="http://127.0.0.1:$port"
"$binary" serve --listen "127.0.0.1:$port" --store memory --templates "$root/templates" \
    --a2a-template a2a-task >"$work/serve.log" 2>&1 &
pids+=($!)
wait_for "colloquy serve" "$work/serve.log" curl -fsS "$url/readyz"
PYTHONPATH="$root/sdk/python/src" "$sdk_venv/bin/python" "$root/tests/a2a-tck/sut_agent.py" \
    "$url" tck >"$work/tck-agent.log" 2>&1 &
pids+=($!)
wait_for "the agent tck" "$work/tck-agent.log" grep -q "serving its inbox" "$work/tck-agent.log"

# 2. The a2a-sdk agent `seller`, and a server whose agents file makes it an A2A agent.
remote_port="$(free_port)"
remote_url="http://127.0.0.1:$remote_port"
"$v1_venv/bin/python" "$here/remote_agent.py" "$remote_port" >"$work/seller-agent.log" 2>&1 &
pids+=($!)
wait_for "the a2a-sdk agent seller" "$work/seller-agent.log" \
    curl -fsS "$remote_url/.well-known/agent-card.json"
alice_token="interop-alice-$(python3 -c 'import secrets; print(secrets.token_hex(8))')"
cat >"$work/agents.yaml" <<EOF
agents:
  - id: alice
    token: "$alice_token"
  - id: seller
    a2a: "$remote_url/"
    a2a_timeout_s: 30
EOF
bridge_port="$(free_port)"
bridge_url="http://127.0.0.1:$bridge_port"
"$binary" serve --listen "127.0.0.1:$bridge_port" --store memory --templates "$root/templates" \
    --agents "$work/agents.yaml" >"$work/serve-bridge.log" 2>&1 &
pids+=($!)
wait_for "colloquy serve --agents" "$work/serve-bridge.log" curl -fsS "$bridge_url/readyz"

export COLLOQUY_A2A_INTEROP_URL="$url"
export COLLOQUY_A2A_INTEROP_BRIDGE_URL="$bridge_url"
export COLLOQUY_A2A_INTEROP_BRIDGE_TOKEN="$alice_token"
export COLLOQUY_A2A_INTEROP_REMOTE_URL="$remote_url"

# 3. Each SDK's tests with its own venv; a failure of the first does not skip the second.
# Arguments go to both pytest runs: one that selects none of a run's tests (its exit code 5)
# is no failure then, but without arguments every file must run.
status=0
run_tests() {
    local venv="$1" report="$2"
    shift 2
    local rc=0
    (cd "$here" && "$venv/bin/python" -m pytest -q -p no:cacheprovider \
        --junitxml="$report" "$@") || rc=$?
    if [ "$rc" -ne 0 ] && ! { [ "$rc" -eq 5 ] && [ "$selected" = yes ]; }; then status=1; fi
}
selected=no
[ "$#" -eq 0 ] || selected=yes
run_tests "$v1_venv" "$work/v1.xml" test_client_v1.py test_bridge_v1.py "$@"
run_tests "$v03_venv" "$work/v03.xml" test_client_v03.py "$@"

# Which protocol Colloquy's bridge spoke to the a2a-sdk agent (v0.3 today: no header).
curl -fsS "$remote_url/calls" 2>/dev/null | python3 -c '
import collections, json, sys
calls = collections.Counter((c["method"], c["a2a_version"] or "none") for c in json.load(sys.stdin))
print("a2a interop: the bridge called the a2a-sdk agent with "
      + (", ".join(f"{m} (A2A-Version {v}) x{n}" for (m, v), n in sorted(calls.items())) or "nothing"))
' || true

python3 - "$work/v1.xml" "$work/v03.xml" <<'PY' || status=1
import os
import sys
import xml.etree.ElementTree as ET

total = failed = skipped = 0
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print(f"a2a interop: no report {os.path.basename(path)}: pytest did not run",
              file=sys.stderr)
        sys.exit(1)
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    total += int(suite.get("tests", 0))
    failed += int(suite.get("failures", 0)) + int(suite.get("errors", 0))
    skipped += int(suite.get("skipped", 0))
print(f"a2a interop: {total} tests, {total - failed - skipped} passed, "
      f"{failed} failed, {skipped} skipped")
PY
[ "$status" -eq 0 ] || echo "a2a interop: FAILED (logs in $logs)" >&2
exit "$status"
