#!/usr/bin/env bash
# The A2A v1.0 conformance kit (a2a-tck, ../shared/a2a-tck) against a real `colloquy serve`:
# the agent `tck` (sut_agent.py, written with the project's Python SDK) behind the engine's
# A2A endpoint, JSON-RPC and HTTP+JSON, every requirement level. Fails when a MUST
# requirement fails; SHOULD and MAY results are counted in the closing line and written to
# the report directory.
#
# Skipped, saying so, when the kit is absent, except under CI=true, where it is required.
# Needs the debug binary (`cargo test --workspace` builds it) and the Python SDK's venv
# (sdk/python/run-tests.sh creates it).
#
#   COLLOQUY_A2A_TCK        the kit (default: shared/a2a-tck in the nearest folder above
#                           the clone that has one: ../shared/a2a-tck beside a working copy)
#   COLLOQUY_TCK_VENV       the kit's virtualenv (default: ~/.cache/colloquy-a2a-tck-venv)
#   COLLOQUY_TCK_OUT        reports (default: TARGET/a2a-tck-reports)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"

# The kit sits in the workplace's shared/ folder, beside the working copy or a few levels
# above a clone made elsewhere in the workplace: the nearest one up the tree is taken. A
# clone outside the workplace names it with COLLOQUY_A2A_TCK.
kit="${COLLOQUY_A2A_TCK:-}"
if [ -z "$kit" ]; then
    dir="$root"
    while [ "$dir" != "/" ]; do
        dir="$(dirname "$dir")"
        if [ -f "$dir/shared/a2a-tck/run_tck.py" ]; then kit="$dir/shared/a2a-tck"; break; fi
    done
    kit="${kit:-$root/../shared/a2a-tck}"
fi
if [ ! -f "$kit/run_tck.py" ]; then
    if [ "${CI:-}" = "true" ]; then
        echo "a2a tck: the kit is missing at $kit, and CI=true requires it" >&2
        exit 1
    fi
    echo "a2a tck: SKIPPED (no kit at $kit; set COLLOQUY_A2A_TCK)"
    exit 0
fi
target="${CARGO_TARGET_DIR:-$root/target}"
binary="$target/debug/colloquy"
[ -x "$binary" ] || { echo "a2a tck: no binary at $binary: run cargo build" >&2; exit 1; }
sdk_venv="${COLLOQUY_PYSDK_VENV:-$HOME/.cache/colloquy-pysdk-venv}"
[ -x "$sdk_venv/bin/python" ] || { echo "a2a tck: no SDK venv at $sdk_venv: run sdk/python/run-tests.sh" >&2; exit 1; }
out="${COLLOQUY_TCK_OUT:-$target/a2a-tck-reports}"
export PIP_ROOT_USER_ACTION=ignore

# The kit writes reports/ where it runs: run a scratch copy.
work="$(mktemp -d)"
pids=()
cleanup() {
    for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$work"
}
trap cleanup EXIT
cp -r "$kit" "$work/kit"

# Its dependencies from PyPI, into a venv outside the clone, again only when they changed.
venv="${COLLOQUY_TCK_VENV:-$HOME/.cache/colloquy-a2a-tck-venv}"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
stamp="$venv/colloquy-tck-pyproject.sha256"
if ! (cd "$work/kit" && sha256sum --status -c "$stamp" 2>/dev/null); then
    echo "== a2a tck: installing its dependencies into $venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$work/kit"
    (cd "$work/kit" && sha256sum pyproject.toml >"$stamp")
fi

free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
port="$(free_port)"
url="http://127.0.0.1:$port"
# The kit's webhook receiver listens on loopback: push notifications must be allowed there.
"$binary" serve --listen "127.0.0.1:$port" --store memory --templates "$root/templates" \
    --a2a-template a2a-task --a2a-push-allow-private >"$work/serve.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    curl -fsS "$url/readyz" >/dev/null 2>&1 && break
    sleep 0.1
done
curl -fsS "$url/readyz" >/dev/null || { cat "$work/serve.log" >&2; echo "a2a tck: the server did not start" >&2; exit 1; }
PYTHONPATH="$root/sdk/python/src" "$sdk_venv/bin/python" "$root/tests/a2a-tck/sut_agent.py" \
    "$url" tck >"$work/agent.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
    grep -q "serving its inbox" "$work/agent.log" && break
    sleep 0.1
done

# pytest's own status counts SHOULD and MAY failures too: the summary decides, from the
# kit's report, and fails on a MUST failure (or on no report at all).
(cd "$work/kit" && timeout 600 "$venv/bin/python" run_tck.py --sut-host "$url/a2a/tck" \
    --transport jsonrpc,http_json -- -p no:cacheprovider) >"$work/tck.log" 2>&1 || true
mkdir -p "$out"
rm -f "$out/compatibility.json"
cp -r "$work/kit/reports/." "$out/" 2>/dev/null || true
cp "$work/serve.log" "$work/agent.log" "$work/tck.log" "$out/"
status=0
if [ ! -f "$out/compatibility.json" ]; then
    tail -20 "$work/tck.log" >&2
    echo "a2a tck: FAILED (the kit wrote no report)" >&2
    status=1
else
    "$venv/bin/python" "$root/tests/a2a-tck/summary.py" "$out/compatibility.json" || status=$?
fi
echo "(reports in $out)"
exit "$status"
