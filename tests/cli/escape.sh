#!/bin/bash
# User strings in tables are escaped (issue 12): a job name with a newline
# and terminal escapes neither spoofs a row of `corral job list` nor
# reaches the terminal raw, in the list, in `job status` and in `events`.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" escape
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" >/dev/null 2>&1 ||
    { fail "head start"; finish; }
name=$'evil\n9      SUCCEEDED  0     1       spoofed\e[2J\xc2\x9b31m'
id=$("$CORRAL" run --detach --name "$name" -- true) || fail "run --name"
"$CORRAL" job wait "$id" >/dev/null 2>&1
list=$("$CORRAL" job list)
[ "$(wc -l <<<"$list")" -eq 2 ] && ok "job list: one row for the job, no spoofed row" || fail "job list rows: $list"
grep -qF 'evil\n9      SUCCEEDED' <<<"$list" && grep -qF '\x1b[2J\u009b31m' <<<"$list" &&
    ok "the newline, ESC and a C1 CSI are shown as escapes" || fail "escapes: $list"
for out in "$list" "$("$CORRAL" job status "$id")" "$("$CORRAL" events)"; do
    LC_ALL=C grep -q $'\e\|\xc2\x9b' <<<"$out" && fail "a raw escape reached the output: $(od -c <<<"$out" | head)"
done
[ "$("$CORRAL" job status "$id" | grep -c spoofed)" -eq 1 ] && ok "job status shows the name on one line" ||
    fail "job status: $("$CORRAL" job status "$id")"
[ "$("$CORRAL" job list --json | jq -r '.[0].name')" = "$name" ] && ok "JSON keeps the name as it is" ||
    fail "json name: $("$CORRAL" job list --json)"
finish
