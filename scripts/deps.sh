#!/bin/sh
# Installs the Debian packages corral's build, tests and demo need, when missing.
set -eu
PKGS="build-essential cmake pkg-config clang libclang-rt-14-dev \
libhwloc-dev hwloc libjansson-dev libfyaml-dev libcmocka-dev python3 \
libuv1-dev nettle-dev libprotobuf-c-dev protobuf-c-compiler libsqlite3-dev sqlite3 jq valgrind \
python3-torch iproute2 libssl-dev openssl libmicrohttpd-dev prometheus curl"
missing=""
for p in $PKGS; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
    echo "deps.sh: missing packages:$missing; run as root or install them" >&2
    exit 1
fi
echo "deps.sh: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq || true
# shellcheck disable=SC2086
apt-get install -y -qq --no-install-recommends $missing
