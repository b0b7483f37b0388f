#!/usr/bin/env bash
# Builds a Colloquy hook written in Python into a WebAssembly component of the world
# colloquy:hooks/hooks@1.0.0 (guest-sdk/wit/hooks.wit), importing only the host interface:
#
#   guest-sdk/python/build.sh APP.py OUT.wasm
#
# APP.py defines `WitWorld = export(MyHook)` (docs/hooks-python.md). The build sees the *.py
# files of APP.py's folder and its subfolders (hidden ones and __pycache__ aside) and the kit
# (guest-sdk/python/colloquy_hook), staged in a scratch folder so nothing is written beside
# the sources. componentize-py, pinned, comes from the virtualenv setup.sh installs outside
# the clone; it takes ~20 s, so finished components are kept in a cache beside it, keyed by
# the SHA-256 of everything that goes in (the staged sources, the WIT, the componentize-py
# version, this script), and a build whose inputs did not change is a copy.
#
#   COLLOQUY_GUEST_TOOLS   base of the toolchain and the cache
#                          (default: ~/.cache/colloquy-guest-tools)
#
# Test fixtures only: `build.sh --with-wasi APP.py OUT.wasm` leaves out --stub-wasi, so the
# component imports WASI, which the engine refuses; it exists to test that refusal. A hook
# built so never runs in Colloquy.
set -euo pipefail

# Finished components kept in the cache (~18 MB each); the least recently used go first.
CACHE_KEEP=24

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
usage() {
    echo "usage: $0 [--with-wasi] APP.py OUT.wasm" >&2
    exit 2
}
die() {
    echo "build.sh: $*" >&2
    exit 1
}

wasi=stub
if [ "${1:-}" = "--with-wasi" ]; then
    wasi=imported
    shift
fi
[ $# -eq 2 ] || usage
app="$1"
out="$2"
[ -f "$app" ] || die "no such file: $app"
[[ "$app" == *.py ]] || die "$app: the hook must be a .py file"
module="$(basename "$app" .py)"
[[ "$module" =~ ^[A-Za-z_][A-Za-z0-9_]*$ ]] || die "$app: '$module' is not a Python module name"
# `hooks` is the WIT world (componentize-py generates a module of that name), `wit_world`
# its bindings, `colloquy_hook` the kit: an app of the same name would shadow them.
case "$module" in
    hooks | wit_world | colloquy_hook) die "$app: name the file anything but $module.py" ;;
esac

tools="${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}"
venv="$tools/python-venv"
cache="$tools/python-cache"
bash "$here/setup.sh"
version="$(basename "$(compgen -G "$venv/lib/python3*/site-packages/componentize_py-*.dist-info")" \
    .dist-info)"

stage="$(mktemp -d "${TMPDIR:-/tmp}/colloquy-python-hook.XXXXXX")"
partial=""
# The scratch folder, and a component half written when the build failed or was stopped.
trap 'rm -rf "$stage"; [ -z "$partial" ] || rm -f "$partial"' EXIT
mkdir -p "$stage/app" "$stage/kit/colloquy_hook" "$stage/wit"
app_dir="$(cd "$(dirname "$app")" && pwd)"
(cd "$app_dir" && find . -name '*.py' -not -path '*/.*' -not -path '*/__pycache__/*' -print0 |
    tar --null -T - -cf -) | tar -xf - -C "$stage/app"
cp "$here"/colloquy_hook/*.py "$here/colloquy_hook/py.typed" "$stage/kit/colloquy_hook/"
cp "$root/guest-sdk/wit/hooks.wit" "$stage/wit/"

key="$(
    cd "$stage"
    find . -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
    echo "$version wasi=$wasi module=$module"
    sha256sum <"$here/build.sh"
)"
key="$(sha256sum <<<"$key" | cut -d' ' -f1)"
cached="$cache/$key.wasm"

mkdir -p "$cache" "$(dirname "$out")"
if [ -f "$cached" ]; then
    touch "$cached"
    cp "$cached" "$out"
    echo "$out (cached)"
    exit 0
fi

stub_wasi=(--stub-wasi)
[ "$wasi" = stub ] || stub_wasi=()
started=$SECONDS
partial="$(mktemp "$cache/.partial.XXXXXX")"
# The build's CPython writes __pycache__ next to what it imports: here, inside the stage.
# VIRTUAL_ENV unset: componentize-py would add another environment's site-packages. No Rust
# backtrace: the Python error above it says what is wrong.
if ! (cd "$stage" && env -u VIRTUAL_ENV RUST_BACKTRACE=0 RUST_LIB_BACKTRACE=0 \
    "$venv/bin/componentize-py" --quiet \
    --wit-path "$stage/wit/hooks.wit" --world hooks \
    componentize "${stub_wasi[@]}" "$module" \
    --python-path "$stage/app" --python-path "$stage/kit" --output "$partial"); then
    die "componentize-py could not build $app"
fi
chmod 0644 "$partial"  # mktemp made it private
mv -f "$partial" "$cached"
cp "$cached" "$out"
echo "$out (built in $((SECONDS - started)) s)"

# Keep the newest CACHE_KEEP components (their names are hex digests: no spaces).
# shellcheck disable=SC2012
ls -t "$cache"/*.wasm | tail -n +$((CACHE_KEEP + 1)) | xargs -r rm -f
