#!/bin/sh
# Installs the dashboard's npm packages (pinned) into a per-machine cache
# outside the tree, once; prints its node_modules folder. cytoscape and uPlot are
# copied into the build (web/CMakeLists.txt embeds them in corrald);
# playwright-core drives Debian's chromium in tests/cli/dashboard.sh.
# Nothing here is committed and the browser fetches nothing from outside.
set -eu
CY="${CORRAL_CYTOSCAPE_VERSION:-3.35.0}"
UP="${CORRAL_UPLOT_VERSION:-1.6.32}"
PW="${CORRAL_PLAYWRIGHT_VERSION:-1.65.2}"
if [ -n "${CORRAL_CACHE:-}" ]; then ROOT="$CORRAL_CACHE"
elif [ "$(id -u)" = 0 ]; then ROOT=/var/cache/corral
else ROOT="${XDG_CACHE_HOME:-$HOME/.cache}/corral"; fi
DIR="$ROOT/npm-web-cy$CY-up$UP-pw$PW"
[ "${1:-}" = --path ] && { echo "$DIR/node_modules"; exit 0; }
if [ -f "$DIR/.done" ]; then echo "$DIR/node_modules"; exit 0; fi
mkdir -p "$ROOT"
if [ "$(stat -c %u "$ROOT")" != "$(id -u)" ] || [ -L "$ROOT" ]; then
    echo "node-web.sh: $ROOT is not owned by you (or is a link); set CORRAL_CACHE" >&2; exit 1
fi
exec 9>"$DIR.lock"
flock 9
if [ ! -f "$DIR/.done" ]; then
    rm -rf "$DIR"; mkdir -p "$DIR"
    # playwright-core downloads no browser (the tests use /usr/bin/chromium)
    (cd "$DIR" && npm init -y >/dev/null &&
        npm i -E "cytoscape@$CY" "uplot@$UP" "playwright-core@$PW" --omit=optional --no-audit --no-fund >&2)
    touch "$DIR/.done"
fi
echo "$DIR/node_modules"
