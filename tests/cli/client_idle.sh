#!/bin/bash
# A libcorral connection left idle longer than its call timeout still
# answers its next call (tests/cli/client_idle.c): each call's timeout
# counts from the call, not from when the connection's loop last ran.
# CORRAL_CALL_TIMEOUT_MS (1 s here) stands for the default 60 s; a
# timeout below the client's idle time is what made the bug show.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" idle
out=$("$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" 2>&1) ||
    { fail "start: $out"; finish; }
C="$CORRAL_BUILD_DIR/tests/client_idle"
[ -x "$C" ] || { fail "no $C (make build)"; finish; }
out=$(CORRAL_CALL_TIMEOUT_MS=1000 "$C" 1500 2>&1) && ok "idle 1.5 s past a 1 s call timeout: $(tr '\n' ' ' <<<"$out")" ||
    fail "after an idle connection: $out"
# the variable's bounds: a value out of range leaves the default
out=$(CORRAL_CALL_TIMEOUT_MS=5 "$C" 200 2>&1) && ok "CORRAL_CALL_TIMEOUT_MS=5 (below 100): the default kept" ||
    fail "a timeout out of range: $out"
finish
