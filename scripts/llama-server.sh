#!/bin/sh
# Builds llama.cpp's llama-server from the sources npm's node-llama-cpp ships (a git bundle)
# into a per-machine cache keyed by the version, once. Prints the binary's path on success.
# Nothing of llama.cpp ever enters corral's tree.
#   scripts/llama-server.sh            build if missing, print path
#   scripts/llama-server.sh --path     print the path it would have (built or not)
#   scripts/llama-server.sh --bundle   print the source checkout (for gguf-py)
#   scripts/llama-server.sh --background  start the build detached unless built or
#                                      building (log: CACHE/llama-VERSION.log); returns
# Env: CORRAL_LLAMA_VERSION (default 3.21.1), CORRAL_CACHE (cache root).
set -eu
VER="${CORRAL_LLAMA_VERSION:-3.21.1}"
if [ -n "${CORRAL_CACHE:-}" ]; then ROOT="$CORRAL_CACHE"
elif [ "$(id -u)" = 0 ]; then ROOT=/var/cache/corral
else ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/corral"; fi
DIR="$ROOT/llama-$VER"
BIN="$DIR/bin/llama-server"
case "${1:-}" in
    --path) echo "$BIN"; exit 0 ;;
    --bundle) echo "$DIR/src"; exit 0 ;;
esac
if [ -x "$BIN" ] && [ -f "$DIR/.done" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$ROOT"
if [ "${1:-}" = --background ]; then
    if flock -n "$ROOT/llama-$VER.lock" true 2>/dev/null; then
        nohup "$0" >"$ROOT/llama-$VER.log" 2>&1 </dev/null &
        echo "llama-server.sh: building llama-server $VER in the background (log: $ROOT/llama-$VER.log)" >&2
    fi
    exit 0
fi
chmod 755 "$ROOT"
# The cache must be ours and not writable by others: we run what it holds.
owner=$(stat -c %u "$ROOT")
mode=$(stat -c %a "$ROOT")
if [ "$owner" != "$(id -u)" ] || [ -L "$ROOT" ]; then
    echo "llama-server.sh: $ROOT is not owned by you (or is a link); set CORRAL_CACHE" >&2; exit 1
fi
case "$mode" in *[2367]?|*[2367]) echo "llama-server.sh: $ROOT is group/other writable ($mode)" >&2; exit 1 ;; esac
# One builder at a time per machine.
LOCK="$ROOT/llama-$VER.lock"
exec 9>"$LOCK"
if ! flock -n 9; then
    echo "llama-server.sh: another build holds $LOCK; waiting" >&2
    flock 9
fi
if [ -x "$BIN" ] && [ -f "$DIR/.done" ]; then echo "$BIN"; exit 0; fi
mkdir -p "$DIR"
cd "$DIR"
if [ ! -f npm/node_modules/node-llama-cpp/llama/gitRelease.bundle ]; then
    rm -rf npm; mkdir npm
    (cd npm && npm init -y >/dev/null &&
        npm i -E "node-llama-cpp@$VER" --ignore-scripts --omit=optional --no-audit --no-fund >&2)
fi
if [ ! -d src/.git ]; then
    rm -rf src
    git clone -q npm/node_modules/node-llama-cpp/llama/gitRelease.bundle src >&2
fi
JOBS="${CORRAL_LLAMA_JOBS:-2}"
nice -n 19 cmake -S src -B build -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF \
    -DLLAMA_CURL=OFF >&2
nice -n 19 cmake --build build --target llama-server -j"$JOBS" >&2
mkdir -p bin
cp build/bin/llama-server bin/llama-server.tmp
mv bin/llama-server.tmp "$BIN"
touch .done
echo "$BIN"
