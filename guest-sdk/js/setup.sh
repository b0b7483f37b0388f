#!/usr/bin/env bash
# Installs the pinned JavaScript hook tools (componentize-qjs, esbuild, typescript,
# jco-transpile: guest-sdk/js/package.json and package-lock.json) outside the clone, in
# ${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}/js, with `npm ci`. Idempotent
# and quiet: nothing is done while the installed lock file is this one. Needs Node 18.19 or
# later and npm; when `node` is missing, installs Debian's (`apt-get install nodejs npm`).
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
tools="${COLLOQUY_GUEST_TOOLS:-$HOME/.cache/colloquy-guest-tools}/js"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
    echo "== apt-get install nodejs npm"
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq nodejs npm >/dev/null
fi
# module.register (the unit tests' stand-in host) came in Node 18.19.
node -e '
const [major, minor] = process.versions.node.split(".").map(Number);
if (major < 18 || (major === 18 && minor < 19)) {
  console.error(`guest-sdk/js needs Node 18.19 or later; this is ${process.version}`);
  process.exit(1);
}'

# The stamp is the lock file's hash, written only after a complete install: an interrupted
# one is redone.
want="$(sha256sum "$here/package-lock.json" | cut -d' ' -f1)"
if [ -d "$tools/node_modules" ] && [ "$(cat "$tools/.installed" 2>/dev/null)" = "$want" ]; then
    exit 0
fi
echo "== npm ci (guest-sdk/js tools) in $tools"
mkdir -p "$tools"
rm -f "$tools/.installed"
cp "$here/package.json" "$here/package-lock.json" "$tools/"
# No install scripts: none of the tools needs one (esbuild's only checks its binary), and a
# dependency's script would run with the user's rights.
(cd "$tools" && npm ci --ignore-scripts --no-audit --no-fund --loglevel=error >/dev/null)
echo "$want" > "$tools/.installed"
