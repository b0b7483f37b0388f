#!/usr/bin/env bash
# Builds the Python hooks of the repository (git-ignored outputs, paths from the repo root):
#
#   templates/examples/credit-assessment/credit_assessment_py.wasm  the credit policy
#   target/hooks/python/quickstart.wasm   docs/hooks-python.md's quick start hook
#   target/hooks/python/hostile.wasm      tests/fixtures/hooks/python/hostile.py
#   target/hooks/python/wasi.wasm         tests/fixtures/hooks/python/wasi.py, built WITH
#                                         WASI imports so the engine's refusal can be tested
#
# Each build is ~15 s of one core when its inputs changed and a copy from build.sh's cache
# otherwise; two run at a time (the development machines have two cores).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="$root/target/hooks/python"
mkdir -p "$out"
bash "$here/setup.sh"

# "build.sh arguments" per component, paths relative to the repo root.
builds=(
    "templates/examples/credit-assessment/hook-py/credit_policy.py
     templates/examples/credit-assessment/credit_assessment_py.wasm"
    "guest-sdk/python/examples/quickstart/my_hook.py target/hooks/python/quickstart.wasm"
    "tests/fixtures/hooks/python/hostile.py target/hooks/python/hostile.wasm"
    "--with-wasi tests/fixtures/hooks/python/wasi.py target/hooks/python/wasi.wasm"
)

cd "$root"
pids=()
for args in "${builds[@]}"; do
    # shellcheck disable=SC2086 # the arguments are words without spaces, split on purpose
    bash "$here/build.sh" $args &
    pids+=($!)
    if ((${#pids[@]} == 2)); then
        wait "${pids[0]}"
        pids=("${pids[@]:1}")
    fi
done
for pid in "${pids[@]}"; do
    wait "$pid"
done
echo "python hooks built"
