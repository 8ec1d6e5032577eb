#!/bin/sh
# Installs the Debian packages corral's build, tests and demo need, when missing.
#   scripts/deps.sh [PKG...]   also those packages (a benchmark's peers: wrk,
#                              nginx-light, ...), from Debian as the rest
set -eu
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev \
libhwloc-dev hwloc libjansson-dev libfyaml-dev libcmocka-dev python3 \
libuv1-dev nettle-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev sqlite3 jq valgrind strace \
python3-torch python3-cloudpickle iproute2 libssl-dev openssl libmicrohttpd-dev prometheus curl python3-numpy \
chromium chromium-driver $*"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
serve_deps() {
    # the serving tests' engine and client (docs/serve.md "Tests"): built or
    # installed once per machine into a cache outside the tree. The engine's
    # build (about 10 minutes on 2 cores) goes on in the background: the
    # serving tests wait for it.
    [ "${CORRAL_DEPS_SERVE:-1}" = 0 ] && return 0
    d=$(dirname "$0")
    "$d/llama-server.sh" --background || echo "deps.sh: llama-server not started (scripts/llama-server.sh)" >&2
    "$d/node-openai.sh" >/dev/null || echo "deps.sh: npm openai not installed (scripts/node-openai.sh)" >&2
}
web_deps() {
    # the dashboard's cytoscape (embedded by web/CMakeLists.txt; cmake again
    # after the first install) and the test's playwright-core
    "$(dirname "$0")/node-web.sh" >/dev/null || echo "deps.sh: dashboard npm packages not installed (scripts/node-web.sh)" >&2
}
if [ -z "$missing" ]; then web_deps; serve_deps; exit 0; fi
if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages:$missing; run as root or install them" >&2
    exit 1
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
web_deps
serve_deps
