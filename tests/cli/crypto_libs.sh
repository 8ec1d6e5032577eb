#!/bin/bash
# The handshake's HMAC-SHA256 is Nettle's (net/crypto.c, docs/protocol.md
# "The proofs"), not a hand-written hash nor libcrypto: the lean `corral`
# CLI loads libnettle, or has it linked in (CORRAL_STATIC_CLI, where the
# archive is installed: its nettle_ symbols are in the binary), and no
# libcrypto, and no SHA-256 round constant
# (FIPS 180-4 section 4.2.2: K[0] = 0x428a2f98) is left in the sources.
set -u
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
command -v ldd >/dev/null || { echo "skip: needs ldd"; exit 77; }
libs=$(ldd "$CORRAL")
if grep -q "libnettle" <<<"$libs"; then
    ok "corral loads libnettle"
elif command -v nm >/dev/null && nm "$CORRAL" 2>/dev/null | grep -q " T nettle_sha256_digest"; then
    ok "corral has Nettle linked in (static)"
else
    fail "corral neither loads libnettle nor has it linked in: $libs"
fi
grep -Eq "libcrypto|libssl" <<<"$libs" && fail "corral loads OpenSSL: $libs" || ok "and no libcrypto"
left=$(grep -rli "0x428a2f98" "$CORRAL_SOURCE_DIR"/net "$CORRAL_SOURCE_DIR"/base "$CORRAL_SOURCE_DIR"/client 2>/dev/null)
[ -z "$left" ] && ok "no hand-written SHA-256 in net/, base/, client/" || fail "hand-written SHA-256 in: $left"
[ $fails -eq 0 ] && echo "crypto_libs: all passed" || echo "crypto_libs: $fails failure(s)"
exit $((fails > 0))
