#!/usr/bin/env bash
# The A2A benchmark (tests/src/bin/a2a_bench.rs): colloquy with a Rust SDK agent next to the
# A2A Python SDK's own server, SendMessage round trips and streams, on this machine, in one
# run. Builds nothing: build the release binaries first,
#
#   cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin a2a-bench
#
# then `bash tests/a2a-bench/run.sh` (arguments go to a2a-bench; default `--pin`: servers on
# CPU 0, the load on the others). The baseline's venv (a2a-sdk 1.3, uvicorn with uvloop and
# httptools; requirements.txt) is made outside the clone, from PyPI the first time and again
# only when requirements.txt changes.
#
#   COLLOQUY_A2A_BENCH_VENV  the baseline's venv (default: ~/.cache/colloquy-a2a-bench-venv)
#   CARGO_TARGET_DIR         where the release binaries are (default: target/)
set -euo pipefail
cd "$(dirname "$0")/../.."
root="$PWD"
here="$root/tests/a2a-bench"
target="${CARGO_TARGET_DIR:-$root/target}"
bench="$target/release/a2a-bench"
for binary in "$bench" "$target/release/colloquy"; do
    [ -x "$binary" ] || {
        echo "a2a bench: no $binary: cargo build --release -p colloquy --bin colloquy -p colloquy-tests --bin a2a-bench" >&2
        exit 1
    }
done
venv="${COLLOQUY_A2A_BENCH_VENV:-$HOME/.cache/colloquy-a2a-bench-venv}"
stamp="$venv/colloquy-a2a-bench-requirements.sha256"
digest="$(sha256sum <"$here/requirements.txt" | cut -d' ' -f1)"
[ -x "$venv/bin/python" ] || { mkdir -p "$(dirname "$venv")"; python3 -m venv "$venv"; }
if [ "$(cat "$stamp" 2>/dev/null)" != "$digest" ]; then
    echo "== a2a bench: installing requirements.txt into $venv" >&2
    PIP_ROOT_USER_ACTION=ignore "$venv/bin/python" -m pip install --quiet \
        --disable-pip-version-check -r "$here/requirements.txt"
    echo "$digest" >"$stamp"
fi
[ "$#" -gt 0 ] || set -- --pin
exec "$bench" --colloquy "$target/release/colloquy" --templates "$root/templates" \
    --python "$venv/bin/python" --sdk-server "$here/sdk_server.py" "$@"
