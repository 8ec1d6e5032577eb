#!/bin/sh
# Installs pinned npm packages into a per-machine cache outside the tree,
# once, and prints their node_modules folder (NODE_PATH):
#   scripts/npm-cache.sh [--path] NAME PKG@VERSION...
# NAME names the cache folder (npm-NAME: put the versions in it). The
# cache is $CORRAL_CACHE, else /var/cache/corral for root, else
# $XDG_CACHE_HOME/corral; it must be a real folder of the caller's. --path
# only prints where it would be. Nothing here is committed.
set -eu
only_path=
[ "${1:-}" = --path ] && { only_path=1; shift; }
NAME=${1:?usage: npm-cache.sh [--path] NAME PKG@VERSION...}
shift
if [ -n "${CORRAL_CACHE:-}" ]; then ROOT="$CORRAL_CACHE"
elif [ "$(id -u)" = 0 ]; then ROOT=/var/cache/corral
else ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/corral"; fi
DIR="$ROOT/npm-$NAME"
[ -n "$only_path" ] && { echo "$DIR/node_modules"; exit 0; }
if [ -f "$DIR/.done" ]; then echo "$DIR/node_modules"; exit 0; fi
mkdir -p "$ROOT"
if [ "$(stat -c %u "$ROOT")" != "$(id -u)" ] || [ -L "$ROOT" ]; then
    echo "npm-cache.sh: $ROOT is not owned by you (or is a link); set CORRAL_CACHE" >&2; exit 1
fi
exec 9>"$DIR.lock"
flock 9
if [ ! -f "$DIR/.done" ]; then
    rm -rf "$DIR"; mkdir -p "$DIR"
    (cd "$DIR" && npm init -y >/dev/null && npm i -E "$@" --omit=optional --no-audit --no-fund >&2)
    touch "$DIR/.done"
fi
echo "$DIR/node_modules"
