#!/bin/bash
# The static corral (issue 18, CORRAL_STATIC_EXE in CMakeLists.txt;
# docs/install.md): where the build could link it with gcc -static, corral
# has no program interpreter (no dynamic loader at its start); TLS makes it
# exec corral-dynamic (the same CLI on the shared libc, which can load the
# TLS shim); a host name resolves through the files that glibc reads
# without NSS modules (localhost); `corral hw` still runs corral-tools.
# Skips (77) where the build links corral dynamically (a sanitizer build,
# -DCORRAL_STATIC_EXE=OFF, no static libc).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" staticcli
cache=$CORRAL_BUILD_DIR/CMakeCache.txt
grep -q '^CORRAL_CLI_LINK:INTERNAL=dynamic' "$cache" &&
    { echo "skip: this build links corral dynamically (CMake said why)"; exit 77; }
command -v readelf >/dev/null || { echo "skip: no readelf (binutils)"; exit 77; }

! readelf -lW "$CORRAL" | grep -q 'INTERP' && readelf -lW "$CORRAL_BUILD_DIR/corral-dynamic" | grep -q 'INTERP' &&
    ok "corral has no program interpreter; corral-dynamic has one" ||
    fail "corral: $(readelf -lW "$CORRAL" | grep -A1 INTERP)"
# the shared libc initialised: only a dynamic executable does (LD_DEBUG)
libc_init() { LD_DEBUG=libs "$@" 2>&1 >/dev/null | grep -c 'calling init: .*libc\.so'; }
n=$(libc_init "$CORRAL" --version)
m=$(CORRAL_TLS_FINGERPRINT="sha256:$(printf '%064d' 0)" libc_init "$CORRAL" --version)
[ "$n" = 0 ] && [ "$m" -ge 1 ] && ok "TLS asked for: corral execs corral-dynamic" ||
    fail "libc initialised $n times plain, $m with TLS asked for"
v=$(CORRAL_TLS_CA=/nonexistent "$CORRAL" --version)
[ "$v" = "$("$CORRAL" --version)" ] && ok "corral-dynamic answers as corral does" || fail "version: $v"

"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" >/dev/null 2>&1 ||
    { fail "head did not start"; finish; }
S=$CORRAL_HOME/session_latest
port=$(sed 's/.*://' "$S/address")
out=$("$CORRAL" run -- sh -c 'echo local; exit 3' 2>/dev/null); rc=$?
[ "$rc" = 3 ] && [ "$out" = local ] && ok "a local run: its output and exit code" || fail "local run: $rc $out"
out=$(CORRAL_ADDRESS=localhost:$port CORRAL_TOKEN_FILE=$S/token "$CORRAL" run -- echo by-name 2>&1)
[ "$out" = by-name ] && ok "a head by host name (localhost:$port)" || fail "by name: $out"
"$CORRAL" hw --json >"$TDATA/hw.json" 2>&1 && grep -q '"schema": "corral.node/v1"' "$TDATA/hw.json" &&
    ok "corral hw runs corral-tools" || fail "hw: $(head -c 300 "$TDATA/hw.json")"
"$CORRAL" stop >/dev/null 2>&1
finish
