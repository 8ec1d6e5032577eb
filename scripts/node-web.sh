#!/bin/sh
# The dashboard's npm packages (pinned) in the per-machine cache
# (scripts/npm-cache.sh); prints their node_modules folder. cytoscape and
# uPlot are copied into the build (web/CMakeLists.txt embeds them in
# corrald); playwright-core drives Debian's chromium in
# tests/cli/dashboard.sh and downloads no browser. The browser fetches
# nothing from outside. [--path]: only where it would be.
set -eu
CY="${CORRAL_CYTOSCAPE_VERSION:-3.35.0}"
UP="${CORRAL_UPLOT_VERSION:-1.6.32}"
PW="${CORRAL_PLAYWRIGHT_VERSION:-1.65.2}"
exec "$(dirname "$0")/npm-cache.sh" ${1:+"$1"} "web-cy$CY-up$UP-pw$PW" \
    "cytoscape@$CY" "uplot@$UP" "playwright-core@$PW"
