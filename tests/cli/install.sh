#!/bin/bash
# make install's rules (cmake --install): into a DESTDIR, the binaries, libcorral.so
# with corral.pc, the headers and the Python package; a C program builds against
# the installed tree with pkg-config alone and runs on the installed library; the
# installed corral runs, and finds its corral-tools beside it.
set -u
: "${CORRAL:?built corral binary}" "${CORRAL_SOURCE_DIR:?source tree}" "${CORRAL_BUILD_DIR:?build tree}"
command -v pkg-config >/dev/null || { echo "SKIP: no pkg-config"; exit 77; }
command -v cc >/dev/null || { echo "SKIP: no C compiler"; exit 77; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
DEST=$TMP/root
PREFIX=/opt/corral-test
ROOT=$DEST$PREFIX

DESTDIR=$DEST cmake --install "$CORRAL_BUILD_DIR" --prefix "$PREFIX" >"$TMP/install.log" 2>&1 ||
    { cat "$TMP/install.log"; fail "cmake --install: exit $?"; exit 1; }
# nothing outside DESTDIR: every path installed lies under it
grep -- "-- Installing: \|-- Up-to-date: " "$TMP/install.log" | grep -v -- " $DEST/" &&
    fail "installed outside DESTDIR"

for f in bin/corral bin/corral-dynamic bin/corral-tools bin/corrald; do
    [ -x "$ROOT/$f" ] || fail "$f not installed"
done
for h in corral.h error.h accel.h tasks.h; do
    cmp -s "$ROOT/include/corral/$h" "$CORRAL_SOURCE_DIR/include/corral/$h" || fail "include/corral/$h"
done
pc=$(find "$ROOT" -name corral.pc)
[ -n "$pc" ] || { fail "no corral.pc"; exit 1; }
libdir=$(dirname "$(dirname "$pc")")
[ -e "$libdir/libcorral.so" ] || fail "no libcorral.so in $libdir"
grep -qx "prefix=$PREFIX" "$pc" || fail "corral.pc: prefix is not $PREFIX: $(grep prefix= "$pc")"

# libcorral exports the API of corral.h, tasks.h and error.h, nothing of its layers
nm -D --defined-only "$libdir/libcorral.so" | awk '$2 == "T" {sub(/@.*/, "", $3); print $3}' |
    sort >"$TMP/exported"
{ grep -ho '\bcorral_[a-z_]*(' "$ROOT/include/corral/corral.h" "$ROOT/include/corral/tasks.h" |
      tr -d '(' | grep -v '^corral__'
  echo cr_err_name; echo cr_strerror; } | sort -u >"$TMP/declared"
cmp -s "$TMP/exported" "$TMP/declared" ||
    fail "libcorral.so exports other than the header declares: $(diff "$TMP/declared" "$TMP/exported" | head)"

# a program on the public API, built from the installed tree by pkg-config
# alone: PKG_CONFIG_SYSROOT_DIR puts DESTDIR in front of the .pc's paths
flags=$(PKG_CONFIG_PATH=$(dirname "$pc") PKG_CONFIG_SYSROOT_DIR=$DEST PKG_CONFIG_LIBDIR=/nonexistent \
    pkg-config --cflags --libs corral) || fail "pkg-config corral: exit $?"
case $flags in *"-I$ROOT/include"*"-L$libdir"*"-lcorral"*) ;; *) fail "pkg-config flags: $flags" ;; esac
san=
grep -q '^CORRAL_SANITIZE:BOOL=ON' "$CORRAL_BUILD_DIR/CMakeCache.txt" && san="-fsanitize=address,undefined"
# shellcheck disable=SC2086 # the flags are words
cc $san -Wall -Werror -o "$TMP/gang" "$CORRAL_SOURCE_DIR/examples/libcorral_gang.c" $flags \
    2>"$TMP/cc.err" || fail "the example does not build against the installed tree: $(cat "$TMP/cc.err")"
if [ -x "$TMP/gang" ]; then
    ldd "$TMP/gang" | grep -q "libcorral.so.0 => $libdir/" || LD_LIBRARY_PATH=$libdir ldd "$TMP/gang" |
        grep -q "libcorral.so.0 => $libdir/" || fail "the example does not use the installed libcorral"
    # no head in an empty session directory: the library answers, and says so
    mkdir -m 700 "$TMP/home"
    out=$(CORRAL_HOME=$TMP/home LD_LIBRARY_PATH=$libdir "$TMP/gang" 2>&1)
    rc=$?
    [ "$rc" -eq 1 ] || fail "the example without a head: exit $rc: $out"
    grep -qi "no head" <<<"$out" || fail "the example without a head: $out"
fi

# the installed corral, with nothing of the build on PATH
v=$(env -i PATH=/usr/bin:/bin "$ROOT/bin/corral" --version 2>&1) || fail "corral --version: exit $?: $v"
grep -q "^corral 0\.[0-9.]*" <<<"$v" || fail "corral --version: $v"
out=$(env -i PATH=/usr/bin:/bin "$ROOT/bin/corral" hw --check "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" 2>&1) ||
    fail "installed corral hw: $out"
grep -q "^ok: " <<<"$out" || fail "installed corral hw --check: $out"

# the TLS shim, which the installed programs load from the tree they are in
# (not the build folder, nor the configured prefix: this tree is staged)
[ -e "$libdir/corral/libcorral_tls.so" ] || fail "no corral/libcorral_tls.so in $libdir"
mkdir -m 700 "$TMP/tlshome"
ienv() { env -i PATH=/usr/bin:/bin CORRAL_HOME="$TMP/tlshome" "$@"; }
out=$(ienv "$ROOT/bin/corral" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" --tls 2>&1) ||
    fail "installed corral start --tls: $out"
s=$TMP/tlshome/session_latest
out=$(ienv CORRAL_ADDRESS="$(cat "$s/address")" CORRAL_TOKEN_FILE="$s/token" \
    CORRAL_TLS_FINGERPRINT="$(cat "$s/tls_fingerprint")" LD_DEBUG=libs "$ROOT/bin/corral" run -- echo over-tls 2>&1)
grep -q "^over-tls$" <<<"$out" && grep -q "calling init: $ROOT/.*corral/libcorral_tls.so" <<<"$out" ||
    fail "installed corral over TLS: $(grep -v 'find library\|search path\|trying file' <<<"$out" | tail -5)"
ienv "$ROOT/bin/corral" stop >/dev/null 2>&1

# the Python package, importable from where the install said it went
init=$(find "$ROOT" -path '*-packages/corral/__init__.py')
[ -n "$init" ] || fail "no Python package under $ROOT"
if [ -n "$init" ]; then
    site=$(dirname "$(dirname "$init")")
    grep -qF "the Python package corral" "$TMP/install.log" || fail "the install does not say where Python went"
    PYTHONPATH=$site python3 -c 'import corral.train, sys; sys.exit(0 if corral.train.__file__.startswith(sys.argv[1]) else 1)' "$site" ||
        fail "corral.train does not import from $site"
fi

if [ "$fails" -ne 0 ]; then
    echo "$fails failure(s)"
    exit 1
fi
echo "ok"
