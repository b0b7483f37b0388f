#!/usr/bin/env bash
# The web inspector's browser tests: headless Chromium from Debian (scripts/setup.sh installs
# `chromium` and `chromium-driver`, and wabt's wat2wasm for a hook) driven by Selenium against a real `colloquy serve` on
# loopback. Needs the debug binary (`cargo build -p colloquy`, or `cargo test
# --workspace`, which builds it) at ${CARGO_TARGET_DIR:-target}/debug/colloquy.
# Selenium lives in a virtualenv outside the clone, created once, with pinned versions.
# Screenshots and the size/render report: ${COLLOQUY_INSPECTOR_OUT:-TARGET/inspector-screenshots}.
set -euo pipefail
cd "$(dirname "$0")/../.."

venv="${COLLOQUY_INSPECTOR_VENV:-$HOME/.cache/colloquy-inspector-venv}"
requirements=tests/inspector/requirements.txt
if [ ! -x "$venv/bin/python" ]; then
    python3 -m venv "$venv"
fi
# Installs again only when the pins changed.
if ! cmp -s "$requirements" "$venv/installed-requirements.txt"; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$venv/installed-requirements.txt"
fi
for tool in chromium chromedriver wat2wasm; do
    command -v "$tool" >/dev/null || { echo "$tool is missing: run scripts/setup.sh" >&2; exit 1; }
done

# Selenium must use Debian's browser and driver, never download its own.
export SE_OFFLINE=true
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
"$venv/bin/python" -m unittest -v tests/inspector/test_inspector.py 2>&1 | tee "$log" || status=$?
ran="$(sed -n 's/^Ran \([0-9]*\) tests\{0,1\} in.*/\1/p' "$log" | tail -1)"
if [ "$status" -eq 0 ]; then
    echo "inspector browser tests: ${ran:-0} passed"
else
    echo "inspector browser tests: FAILED (${ran:-?} run)"
fi
exit "$status"
