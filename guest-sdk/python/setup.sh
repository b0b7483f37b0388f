#!/usr/bin/env bash
# Installs the Python hook toolchain once: a virtualenv with componentize-py, pinned, outside
# the clone (so a fresh clone or `git clean` does not cost a reinstall, and CI runs share it).
# Idempotent and quiet: nothing happens when the pinned version is already there.
#
#   COLLOQUY_GUEST_TOOLS   base directory of the guest toolchains
#                          (default: ~/.cache/colloquy-guest-tools)
set -euo pipefail

# Pinned: componentize-py bundles its own CPython and the component it builds depends on both;
# build.sh puts this version in its cache key, so a bump rebuilds every hook.
COMPONENTIZE_PY_VERSION=0.25.1

tools="${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}"
venv="$tools/python-venv"

# The pinned version's dist-info directory: a glob, not `pip show` (half a second a call).
installed() {
    [ -x "$venv/bin/componentize-py" ] &&
        compgen -G "$venv/lib/python3*/site-packages/componentize_py-$COMPONENTIZE_PY_VERSION.dist-info" \
            >/dev/null
}

if installed; then
    exit 0
fi
echo "== componentize-py $COMPONENTIZE_PY_VERSION into $venv"
mkdir -p "$tools"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check \
    "componentize-py==$COMPONENTIZE_PY_VERSION"
installed || { echo "setup.sh: componentize-py $COMPONENTIZE_PY_VERSION did not install" >&2; exit 1; }
