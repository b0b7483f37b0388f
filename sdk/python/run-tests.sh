#!/usr/bin/env bash
# The Python SDK's tests: a virtualenv outside the clone (created once, reused), the package
# installed into it in editable mode with its pinned test dependencies from PyPI, then pytest
# against real `colloquy serve` processes started from the built binary (`cargo test
# --workspace` builds it and the Rust SDK's examples first; see tests/conftest.py for where
# the binary is looked for). Ends with one line counting the tests.
#
#   COLLOQUY_PYSDK_VENV   the virtualenv (default: ~/.cache/colloquy-pysdk-venv)
set -euo pipefail
cd "$(dirname "$0")"

venv="${COLLOQUY_PYSDK_VENV:-$HOME/.cache/colloquy-pysdk-venv}"
if [ ! -x "$venv/bin/python" ]; then
    echo "== python venv $venv"
    mkdir -p "$(dirname "$venv")"
    python3 -m venv "$venv"
    # Editable installs of a pyproject package need pip 21.3 or later.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --upgrade pip
fi
# CI runs as root; pip's warning about it says nothing here.
export PIP_ROOT_USER_ACTION=ignore
# The install is editable (the venv runs the code of the tree it was installed from), so it
# is needed again only when pyproject.toml changes or the venv runs another tree's code (an
# earlier clone's): a stamp of it spares each run a build and a trip to PyPI.
stamp="$venv/colloquy-sdk-pyproject.sha256"
this_tree='import colloquy, pytest_asyncio, pytest_timeout, pathlib, sys
sys.exit(not pathlib.Path(colloquy.__file__).resolve().is_relative_to(pathlib.Path("src").resolve()))'
if ! sha256sum --status -c "$stamp" 2>/dev/null \
        || ! "$venv/bin/python" -c "$this_tree" 2>/dev/null; then
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -e '.[test]'
    sha256sum "$PWD/pyproject.toml" >"$stamp"
fi

report="$(mktemp)"
trap 'rm -f "$report"' EXIT
status=0
"$venv/bin/python" -m pytest -q -p no:cacheprovider --junitxml="$report" "$@" || status=$?
"$venv/bin/python" - "$report" <<'PY'
import sys
import xml.etree.ElementTree as ET

suite = ET.parse(sys.argv[1]).getroot()
suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
total = int(suite.get("tests", 0))
failed = int(suite.get("failures", 0)) + int(suite.get("errors", 0))
skipped = int(suite.get("skipped", 0))
print(f"python sdk: {total} tests, {total - failed - skipped} passed, "
      f"{failed} failed, {skipped} skipped")
PY
exit "$status"
