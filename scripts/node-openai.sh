#!/bin/sh
# Installs the official OpenAI client from npm (pinned) into a per-machine
# cache outside the tree, once; prints its node_modules folder (NODE_PATH).
set -eu
VER="${CORRAL_OPENAI_VERSION:-4.104.0}"
if [ -n "${CORRAL_CACHE:-}" ]; then ROOT="$CORRAL_CACHE"
elif [ "$(id -u)" = 0 ]; then ROOT=/var/cache/corral
else ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/corral"; fi
DIR="$ROOT/npm-openai-$VER"
[ "${1:-}" = --path ] && { echo "$DIR/node_modules"; exit 0; }
if [ -f "$DIR/.done" ]; then echo "$DIR/node_modules"; exit 0; fi
mkdir -p "$ROOT"
if [ "$(stat -c %u "$ROOT")" != "$(id -u)" ] || [ -L "$ROOT" ]; then
    echo "node-openai.sh: $ROOT is not owned by you (or is a link); set CORRAL_CACHE" >&2; exit 1
fi
exec 9>"$ROOT/npm-openai-$VER.lock"
flock 9
if [ ! -f "$DIR/.done" ]; then
    rm -rf "$DIR"; mkdir -p "$DIR"
    (cd "$DIR" && npm init -y >/dev/null && npm i -E "openai@$VER" --omit=optional --no-audit --no-fund >&2)
    touch "$DIR/.done"
fi
echo "$DIR/node_modules"
