#!/bin/bash
# The event log is bounded and listed whole (docs/runtime.md "Retention",
# docs/protocol.md "Paged listings"): 120,000 events an earlier head left
# in state.db are listed by `corral events` in pages of at most
# CR_MSG_MAX_LIST (100,000) items, where one answer of small events was
# refused as an invalid message; `--limit N` gives the newest N, in two
# pages too where N is above one; a head started with --keep-events 100
# trims them to the newest 100 at its first tick, and keeps trimming as
# jobs add more; a bound below 100 is a usage error.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" events_bound
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
command -v sqlite3 >/dev/null || { fail "no sqlite3 (scripts/deps.sh installs it)"; finish; }
rows() { sqlite3 "$CORRAL_HOME/session_latest/state.db" 'SELECT count(*) FROM events'; }

out=$("$CORRAL" start --head --hw-spec "$SPEC" --keep-events 50 2>&1)
[ $? -ne 0 ] && grep -q -- "--keep-events: expected 100\.\.100000000, got '50'" <<<"$out" &&
    ok "--keep-events 50: refused: $(head -2 <<<"$out" | tr '\n' ' ')" ||
    fail "--keep-events 50: $out"

out=$("$CORRAL" start --head --hw-spec "$SPEC" --keep-events 1000000 2>&1) || { fail "start: $out"; finish; }
"$CORRAL" run -- true >/dev/null || fail "a first job"
kill_head
N=120000
sqlite3 "$CORRAL_HOME/session_latest/state.db" "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < $N)
    INSERT INTO events (time_ms, kind, node_id, message) SELECT 1, 'test', 'x', 'e' || i FROM n;" ||
    fail "filling state.db"
out=$("$CORRAL" start --head --hw-spec "$SPEC" --keep-events 1000000 --dashboard-port any 2>&1) ||
    { fail "restart: $out"; finish; }
have=$(rows)
[ "$have" -gt "$N" ] || fail "state.db holds $have events"
json=$("$CORRAL" events --json 2>"$CORRAL_HOME/err") || fail "events --json: $(cat "$CORRAL_HOME/err")"
got=$(jq length <<<"$json" 2>/dev/null || echo 0)
[ "$got" -ge "$have" ] && [ "$(jq '[.[] | select(.kind == "test")] | length' <<<"$json")" -eq $N ] &&
    ok "events --json: all $got events (the $N added), over two pages" ||
    fail "events --json: $got of $have"
# following from the start: a first page of 100,000, then the other
# 20,008 pushed a pump (EVENTS_PUMP_MAX, 4096) at a time, in order, each once
follow_events "$have" "$CORRAL_HOME/follow"
fseq=$(jq -r .seq "$CORRAL_HOME/follow" 2>/dev/null | head -n "$have")
[ "$(wc -l <<<"$fseq")" -eq "$have" ] && [ "$fseq" = "$(jq -r '.[].seq' <<<"$json" | head -n "$have")" ] &&
    ok "events -f: all $have, the last $((have - 100000)) pushed after the first page, in order, each once" ||
    fail "events -f: $(wc -l <"$CORRAL_HOME/follow") lines of $have: $(tail -c 300 "$CORRAL_HOME/follow")"

# the newest N: read alone (not the whole log), and over two pages where
# N is above a page's 100,000
newest() { jq -r --argjson k "$1" '[.[-$k:][].seq] | join(" ")' <<<"$json"; }
got5=$("$CORRAL" events --limit 5 --json | jq -r '[.[].seq] | join(" ")')
[ -n "$got5" ] && [ "$got5" = "$(newest 5)" ] && ok "events --limit 5: the newest 5 ($got5)" ||
    fail "events --limit 5: $got5, want $(newest 5)"
big=$("$CORRAL" events --limit 110000 --json | jq -r '[length, .[0].seq, .[-1].seq] | join(" ")')
want=$(jq -r '.[-110000:] | [length, .[0].seq, .[-1].seq] | join(" ")' <<<"$json")
[ "$big" = "$want" ] && ok "events --limit 110000: the newest 110000 over two pages ($big)" ||
    fail "events --limit 110000: $big, want $want"
# the event stream from now on (no since): none of the old ones, where it
# once read the whole log to find the newest and, past 1 MiB of them,
# stopped short and then sent the rest
if command -v curl >/dev/null; then
    L=$("$CORRAL" dashboard)
    B=${L%%\?*}
    curl -sN --max-time 3 -H "Authorization: Bearer $(tr -d '\n' <"$CORRAL_HOME/session_latest/token")" \
        "${B%/}/api/v1/events/stream" >"$CORRAL_HOME/sse" 2>/dev/null &
    sp=$!
    sleep 1
    "$CORRAL" run --name after-stream -- true >/dev/null || fail "a job during the stream"
    wait "$sp"
    grep -q after-stream "$CORRAL_HOME/sse" && ! grep -q '"kind":"test"' "$CORRAL_HOME/sse" &&
        ok "events/stream from now on: the new job's events, none of the $N old ones" ||
        fail "events/stream: $(grep -c '^id:' "$CORRAL_HOME/sse") events: $(head -c 300 "$CORRAL_HOME/sse")"
fi
grep -q "not sending an invalid event_list" "$CORRAL_HOME"/session_latest/logs/corrald.log &&
    fail "the head refused its own answer: $(grep -m1 'invalid event_list' "$CORRAL_HOME"/session_latest/logs/corrald.log)"

# bounded: the newest 100, from the first tick on
kill_head
out=$("$CORRAL" start --head --hw-spec "$SPEC" --keep-events 100 2>&1) || { fail "restart: $out"; finish; }
for _ in $(seq 100); do [ "$(rows)" -le 100 ] && break; sleep 0.05; done
have=$(rows)
last=$("$CORRAL" events --json | jq -r '.[-1].kind')
[ "$have" -le 100 ] && [ "$have" -ge 90 ] && [ "$last" = recovered ] &&
    ok "--keep-events 100: $have events left after the first tick, the restart's own the newest" ||
    fail "--keep-events 100: $have events, the newest $last"
for i in $(seq 40); do "$CORRAL" run --name "late-$i" -- true >/dev/null || fail "job $i"; done
for _ in $(seq 100); do [ "$(rows)" -le 100 ] && break; sleep 0.05; done
have=$(rows)
json=$("$CORRAL" events --json)
[ "$have" -le 100 ] && [ "$(jq length <<<"$json")" -le 100 ] &&
    jq_true '[.[] | select(.message | test("late-40"))] | length > 0' <<<"$json" &&
    [ "$(jq '[.[] | select(.kind == "test")] | length' <<<"$json")" -eq 0 ] &&
    ok "40 jobs later: $have events, the last job's among them, none of the old ones" ||
    fail "40 jobs later: $have events: $(jq -c '[.[-3:][] | .message]' <<<"$json")"
finish
