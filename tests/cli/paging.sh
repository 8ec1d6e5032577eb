#!/bin/bash
# Listings larger than the frame limit are paged (issue 12): with the
# head's frame limit lowered to 512 KiB, 1,000 jobs with 1,000-character
# names (and their 5,000 events) make answers well above it; `corral job
# list` and `corral events` still show every one (the CLI pages), `job
# list --limit N` shows one page and how to go on, a token stays right
# when jobs are added between pages, and a bad, foreign or expired token
# gets a clear error.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" paging
"$CORRAL" start --head --hw-spec "$CORRAL_SOURCE_DIR/specs/cpu-only.yaml" --max-frame 524288 \
    >/dev/null 2>&1 || { fail "head start"; finish; }
N=1000
long=$(printf 'n%.0s' $(seq 1000))
for i in $(seq $N); do
    "$CORRAL" run --detach --name "$long-$i" -- true >/dev/null || { fail "submit $i"; finish; }
done
json=$("$CORRAL" job list --json) || fail "job list --json: $json"
[ "$(jq length <<<"$json")" -eq $N ] && [ "$(jq -r '.[].job_id' <<<"$json" | sort -u | wc -l)" -eq $N ] &&
    ok "job list --json: all $N jobs, each once, in $(wc -c <<<"$json") bytes" ||
    fail "job list --json: $(jq length <<<"$json") jobs"
[ "$(jq -r '.[-1].name' <<<"$json")" = "$long-$N" ] && ok "oldest first, the newest last" ||
    fail "last: $(jq -r '.[-1].job_id' <<<"$json")"
rows=$("$CORRAL" job list | wc -l)
[ "$rows" -eq $((N + 1)) ] && ok "job list: a header and $N rows" || fail "job list rows: $rows"

# one page, and the command for the next
page=$("$CORRAL" job list --limit 300 2>"$CORRAL_HOME/hint")
hint=$(cat "$CORRAL_HOME/hint")
[ "$(wc -l <<<"$page")" -eq 301 ] && ok "--limit 300: 300 rows" || fail "--limit 300: $(wc -l <<<"$page") lines"
grep -q "^corral job list: $((N - 300)) more; the next page: corral job list --limit 300 --continue " <<<"$hint" &&
    ok "the hint: $hint" || fail "hint: $hint"
token=${hint##* }
# jobs added between pages come at the end, nothing repeats, nothing is skipped
for i in 1 2 3; do "$CORRAL" run --detach --name "late-$i" -- true >/dev/null || fail "late submit"; done
ids=$(awk 'NR > 1 {print $1}' <<<"$page")
pages=1
while [ -n "$token" ]; do
    page=$("$CORRAL" job list --limit 300 --continue "$token" 2>"$CORRAL_HOME/hint") ||
        { fail "page after $token: $(cat "$CORRAL_HOME/hint")"; break; }
    ids+=$'\n'$(awk 'NR > 1 {print $1}' <<<"$page")
    hint=$(cat "$CORRAL_HOME/hint")
    token=""
    [ -n "$hint" ] && token=${hint##* }
    pages=$((pages + 1))
    [ $pages -gt 20 ] && { fail "more pages than there can be"; break; }
done
[ "$pages" -eq 4 ] && [ "$(wc -l <<<"$ids")" -eq $((N + 3)) ] && [ "$(sort -u <<<"$ids" | wc -l)" -eq $((N + 3)) ] &&
    ok "4 pages: $((N + 3)) jobs, each once, the 3 added meanwhile too" ||
    fail "paged through: $pages pages, $(wc -l <<<"$ids") ids, $(sort -u <<<"$ids" | wc -l) distinct"

# tokens that are not one of this listing of this head
err=$("$CORRAL" job list --limit 5 --continue bogus 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q "invalid continue token 'bogus'.*list again without it" <<<"$err" &&
    ok "a malformed token: $err" || fail "bogus token: $err"
good=$("$CORRAL" job list --limit 5 2>&1 >/dev/null)
good=${good##* }
err=$("$CORRAL" job list --limit 5 --continue "events.${good#jobs.}" 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q "not one of a jobs listing" <<<"$err" && ok "another listing's token: $err" ||
    fail "foreign token: $err"
tag=$(cut -d. -f2 <<<"$good")
other=00000000
[ "$tag" = "$other" ] && other=ffffffff
err=$("$CORRAL" job list --limit 5 --continue "jobs.$other.6" 2>&1 >/dev/null)
[ $? -ne 0 ] && grep -q "the continue token has expired.*earlier head.*list again from the start" <<<"$err" &&
    ok "an earlier head's token: $err" || fail "expired token: $err"

# events: the 5 of each job, each submitted one naming it, above the limit too
ev=$("$CORRAL" events --json) || fail "events --json"
n=$(jq '[.[] | select(.kind == "submitted")] | length' <<<"$ev")
[ "$n" -eq $((N + 3)) ] && [ "$(jq -r '.[].seq' <<<"$ev" | sort -u | wc -l)" -eq "$(jq length <<<"$ev")" ] &&
    ok "events: $(jq length <<<"$ev") events in $(wc -c <<<"$ev") bytes, each once, $n submissions" ||
    fail "events: $n submissions of $((N + 3))"
# following: the first page, then the rest of the backlog pushed, each once
nev=$(jq length <<<"$ev")
follow_events "$nev" "$CORRAL_HOME/follow"
seqs=$(jq -r .seq "$CORRAL_HOME/follow" 2>/dev/null | head -n "$nev")
[ "$(wc -l <<<"$seqs")" -eq "$nev" ] && [ "$(sort -un <<<"$seqs" | wc -l)" -eq "$nev" ] &&
    [ "$seqs" = "$(jq -r '.[].seq' <<<"$ev")" ] &&
    ok "events -f: the $nev events of the backlog in order, each once" ||
    fail "events -f: $(wc -l <"$CORRAL_HOME/follow") lines of $nev: $(head -c 300 "$CORRAL_HOME/follow")"
last=$("$CORRAL" events --limit 3 --json | jq -r '.[].seq' | tr '\n' ' ')
[ "$last" = "$(jq -r '.[-3:][].seq' <<<"$ev" | tr '\n' ' ')" ] && ok "events --limit 3: the newest 3" ||
    fail "events --limit 3: $last"
finish
