#!/bin/bash
# The head's HTTP server (docs/api.md, docs/metrics.md) with curl against a
# real head on a simulated DGX H100: access (nothing without a credential
# but /healthz, a wrong token, the login cookie, a job's credential only
# for its own job), every /api/v1 endpoint with the shapes the CLI's
# --json prints, the event stream, bad requests, and /metrics through
# Debian's promtool.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" web_api
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
command -v curl >/dev/null || { echo "SKIP: no curl (scripts/deps.sh installs it)"; exit 77; }
command -v promtool >/dev/null || { echo "SKIP: no promtool (Debian prometheus; scripts/deps.sh)"; exit 77; }
TMP=$(mktemp -d /tmp/corral-web-api-XXXXXX)
trap 'cleanup; rm -rf "$TMP"' EXIT

# options: a bad port is a usage error (off loopback it serves HTTPS: web_tls.sh)
out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-port 70000 2>&1); rc=$?
[ $rc -ne 0 ] && grep -q "dashboard-port: expected a port" <<<"$out" && ok "--dashboard-port 70000 refused" ||
    fail "--dashboard-port 70000: rc=$rc $out"

out=$("$CORRAL" start --head --hw-spec "$SPEC" --dashboard-port any 2>&1) || { fail "start: $out"; finish; }
grep -Eq "^corral: dashboard and API on http://127\.0\.0\.1:[0-9]+/ " <<<"$out" &&
    ! grep -q "token=" <<<"$out" && ok "corral start prints the URL (not the login token)" ||
    fail "start output: $out"
LOGIN=$("$CORRAL" dashboard); rc=$?
[ $rc -eq 0 ] && [[ "$LOGIN" =~ ^http://127\.0\.0\.1:[0-9]+/\?token=[0-9a-f]{64}$ ]] &&
    ok "corral dashboard prints the login URL" || fail "corral dashboard: rc=$rc $LOGIN"
[ "$(stat -c %a "$CORRAL_HOME/session_latest/dashboard")" = 600 ] && ok "the login URL file is 0600" ||
    fail "dashboard file mode $(stat -c %a "$CORRAL_HOME/session_latest/dashboard")"
B=${LOGIN%%\?*}
B=${B%/}
HEX=$(tr -d '\n' <"$CORRAL_HOME/session_latest/token")
AUTH="Authorization: Bearer $HEX"
# (--max-time: a stream answered where a refusal is due must not hang the test)
code() { curl -s --max-time 20 -o "$TMP/body" -w '%{http_code}' "$@"; }
api() { curl -sf --max-time 20 -H "$AUTH" "$B$1"; }

# ---- access ----
[ "$(code "$B/healthz")" = 200 ] && [ "$(cat "$TMP/body")" = ok ] && ok "/healthz without a credential" ||
    fail "/healthz: $(cat "$TMP/body")"
for p in / /metrics /api/v1/cluster /api/v1/summary /api/v1/nodes /api/v1/jobs /api/v1/events/stream /api/v1/nosuch; do
    c=$(code "$B$p")
    [ "$c" = 401 ] && grep -q "authentication required" "$TMP/body" && ok "no credential: $p is 401" ||
        fail "no credential $p: $c $(cat "$TMP/body")"
done
c=$(code -i "$B/api/v1/cluster")
grep -qi '^WWW-Authenticate: Bearer' "$TMP/body" && ok "401 says WWW-Authenticate: Bearer" || fail "no WWW-Authenticate"
wrong=$(printf '%064d' 0)
for h in "Authorization: Bearer $wrong" "Authorization: Bearer ${HEX:0:63}" "Authorization: Basic $HEX" \
    "Authorization: Bearer ${HEX}00" "Cookie: corral_session=$HEX"; do
    c=$(code -H "$h" "$B/api/v1/cluster")
    [ "$c" = 401 ] && grep -q "credential is wrong" "$TMP/body" && ok "wrong credential refused: ${h:0:30}..." ||
        fail "wrong credential ${h:0:40}: $c $(cat "$TMP/body")"
done
[ "$(code -H "$AUTH" "$B/api/v1/cluster")" = 200 ] && ok "the cluster token as a Bearer" || fail "bearer: $(cat "$TMP/body")"

# the login: the token in the URL sets an HttpOnly, SameSite=Strict cookie
# and redirects to the same URL without it
curl -s -D "$TMP/h" -o /dev/null "$B/api/v1/jobs?token=${LOGIN##*token=}&x=1"
grep -q '^HTTP/1.1 303' "$TMP/h" && grep -qi '^Location: /api/v1/jobs?x=1' "$TMP/h" &&
    ok "login redirects without the token" || fail "login: $(cat "$TMP/h")"
cookie=$(sed -n 's/^Set-Cookie: \(corral_session=[0-9a-f]*\);.*/\1/ip' "$TMP/h" | tr -d '\r')
grep -i '^Set-Cookie:' "$TMP/h" | grep -q 'HttpOnly' && grep -i '^Set-Cookie:' "$TMP/h" | grep -q 'SameSite=Strict' &&
    [ -n "$cookie" ] && ! grep -i '^Set-Cookie:' "$TMP/h" | grep -q Secure &&
    ok "the cookie is HttpOnly and SameSite=Strict (not Secure on plain loopback HTTP)" || fail "cookie: $(cat "$TMP/h")"
[ "$(code -H "Cookie: $cookie" "$B/api/v1/cluster")" = 200 ] && ok "the cookie authenticates" ||
    fail "cookie: $(cat "$TMP/body")"
[ "$(code -H "Cookie: a=b; $cookie; c=d" "$B/")" = 200 ] && grep -q '/api/v1/jobs' "$TMP/body" &&
    ok "the cookie among others; / answers" || fail "/ with cookies: $(cat "$TMP/body")"
c=$(code "$B/?token=$wrong")
[ "$c" = 401 ] && grep -q "login token is wrong" "$TMP/body" && ok "a wrong login token is refused" ||
    fail "wrong login: $c $(cat "$TMP/body")"
c=$(code "$B/?token=$HEX")
[ "$c" = 401 ] && ok "the cluster token is not a login token" || fail "cluster token as login: $c"

# ---- the API, in the CLI's shapes ----
"$CORRAL" pg create g1 --bundles 'GPU=1;GPU=1' >/dev/null || fail "pg create"
"$CORRAL" run --resources GPU=2 -- sh -c 'echo "tok=$CORRAL_JOB_TOKEN"; exec sleep 60' >"$TMP/job.out" 2>&1 &
WPIDS="$WPIDS $!"
for _ in $(seq 200); do
    [ "$("$CORRAL" job list --json | jq '[.[] | select(.state == "RUNNING")] | length')" = 1 ] && break
    sleep 0.05
done
JOB=$("$CORRAL" job list --json | jq -r '.[0].job_id')
same() { # what the CLI printed, what the API answered
    if [ "$(jq -S . <<<"$2")" = "$(jq -S . <<<"$3")" ]; then ok "$1: the API answers what the CLI prints"
    else fail "$1 differs: CLI $(jq -c . <<<"$2") API $(jq -c . <<<"$3")"; fi
}
same "status" "$("$CORRAL" status --json)" "$(api /api/v1/cluster | jq 'del(.pending_groups)')"
same "nodes" "$("$CORRAL" nodes --json)" "$(api /api/v1/nodes | jq .nodes)"
same "job list" "$("$CORRAL" job list --json)" "$(api /api/v1/jobs | jq .jobs)"
same "job status" "$("$CORRAL" job status "$JOB" --json)" "$(api /api/v1/jobs/$JOB)"
same "job workers" "$("$CORRAL" job status "$JOB" --json | jq '{job_id, workers}')" "$(api /api/v1/jobs/$JOB/workers)"
same "pg list" "$("$CORRAL" pg list --json)" "$(api /api/v1/pgs | jq .groups)"
same "pg by name" "$("$CORRAL" pg list --json | jq '.[0]')" "$(api /api/v1/pgs/g1)"
NODE=$("$CORRAL" nodes --json | jq -r '.[0].node_id')
same "hw" "$("$CORRAL" hw --spec "$SPEC" --json)" "$(api /api/v1/nodes/$NODE)"
same "topo" "$("$CORRAL" topo --spec "$SPEC" --json)" "$(api /api/v1/nodes/$NODE/topology)"
same "events" "$("$CORRAL" events --json | jq -s flatten)" "$(api /api/v1/events | jq .events)"
same "the newest 3 events" "$("$CORRAL" events --limit 3 --json | jq -s flatten)" "$(api '/api/v1/events?limit=3' | jq .events)"
[ "$(api /api/v1/cluster | jq .pending_groups)" = 0 ] && ok "cluster: pending_groups" || fail "pending_groups"
# a job's credential: its own events only, the newest 2 of them (it has
# at least submitted, placed and started by then: not the first)
jid=$("$CORRAL" run --detach -- sh -c 'curl -sf --max-time 10 -H "Authorization: Bearer $CORRAL_JOB_TOKEN" "$1"' sh \
    "$B/api/v1/events?limit=2")
for _ in $(seq 200); do
    case $(status "$jid" | jq -r .state) in SUCCEEDED | FAILED | STOPPED) break ;; esac
    sleep 0.05
done
got=$("$CORRAL" job logs "$jid" --no-prefix | jq -c '[.events[] | [.seq, .job_id]]')
first=$("$CORRAL" events --json | jq -s flatten | jq --arg j "$jid" '[.[] | select(.job_id == $j)][0].seq')
[ "$(jq length <<<"$got")" = 2 ] && [ "$(jq -c '[.[][1]] | unique' <<<"$got")" = "[\"$jid\"]" ] &&
    [ "$(jq --argjson f "$first" '[.[][0] | select(. > $f)] | length' <<<"$got")" = 2 ] &&
    ok "events with a job's credential: its own, the newest 2 ($got)" ||
    fail "events with a job's credential: $got (its first event $first)"

# nodes, paged (one node here; tests/cluster/prometheus.sh pages three)
[ "$(api '/api/v1/nodes?limit=1' | jq -c '[.total, (.nodes | length), .continue]')" = '[1,1,null]' ] &&
    ok "nodes?limit=1: the last page has no continue" || fail "nodes paging: $(api '/api/v1/nodes?limit=1')"
[ "$(api '/api/v1/nodes?label=corral.io/accelerator-type=H100' | jq '.nodes | length')" = 1 ] &&
    [ "$(api '/api/v1/nodes?label=corral.io/accelerator-type=TPU-V6E' | jq -c '[(.nodes | length), .continue]')" = '[0,null]' ] &&
    [ "$(code -H "$AUTH" "$B/api/v1/nodes?label=nokey")" = 400 ] &&
    ok "nodes?label=k=v: only the nodes with that label" || fail "nodes label filter"

# the overview's summary: the cluster's totals and holders, accelerators by type
S=$(api /api/v1/summary)
C=$(api /api/v1/cluster)
[ "$(jq -c '[.resources, .holders, .running_jobs, .pending_jobs]' <<<"$S")" = \
    "$(jq -c '[.resources, .holders, .running_jobs, .pending_jobs]' <<<"$C")" ] &&
    [ "$(jq -c '[.nodes_total, .nodes_by_state.ALIVE]' <<<"$S")" = '[1,1]' ] &&
    [ "$(jq -c '.accelerators' <<<"$S")" = "$(jq -c '[{type: "H100", resource: "GPU", total: .resources.GPU.total,
        used: .resources.GPU.used, free: .resources.GPU.free, nodes: 1}]' <<<"$C")" ] &&
    [ "$(jq '.accelerators[0].used >= 2' <<<"$S")" = true ] &&
    [ "$(jq -c '[.slices, .accelerators_not_listed, .slices_not_listed]' <<<"$S")" = '[[],0,0]' ] &&
    ok "summary: the cluster's totals and holders, the H100s with the job's in use" || fail "summary: $S"

# devices with telemetry (simulated: labelled so), the job's own marked
d=$(api /api/v1/devices)
[ "$(jq '.devices | length' <<<"$d")" = 8 ] &&
    [ "$(jq '[.devices[] | select(.simulated and .telemetry_source == "simulated")] | length' <<<"$d")" = 8 ] &&
    ok "devices: 8, simulated telemetry labelled" || fail "devices: $d"
held=$(jq -r --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .index] | map(tostring) | join(",")' <<<"$d")
[ "$held" = "$("$CORRAL" job status "$JOB" --json | jq -r '.workers[0].devices')" ] &&
    [ "$(jq --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .telemetry.utilization_percent] | unique' <<<"$d" | jq -c .)" = '[100]' ] &&
    ok "devices: the job's devices carry its id (and are busy)" || fail "devices held: $held in $d"
[ "$(api /api/v1/nodes/$NODE/devices | jq -c '.devices | length')" = 8 ] && ok "a node's devices" || fail "node devices"

# the head's telemetry history (docs/api.md "Telemetry"): a sample at start
# and every 5 s, columns of equal length, the job's devices busy in it
for _ in $(seq 300); do
    h=$(api /api/v1/nodes/$NODE/telemetry)
    [ "$(jq '[.devices[].time_ms | length] | min' <<<"$h")" -ge 2 ] 2>/dev/null && break
    sleep 0.1
done
first=$(jq -r '.workers[0].devices | split(",")[0]' <<<"$("$CORRAL" job status "$JOB" --json)")
[ "$(jq '.devices | length' <<<"$h")" = 8 ] && [ "$(jq .period_ms <<<"$h")" = 5000 ] &&
    [ "$(jq '[.devices[].time_ms | length] | min' <<<"$h")" -ge 2 ] &&
    [ "$(jq '[.devices[] | [.time_ms, .utilization_percent, .power_watts, .memory_used_bytes] | map(length) | unique | length] | unique' <<<"$h" | jq -c .)" = '[1]' ] &&
    [ "$(jq --argjson i "$first" '.devices[$i].utilization_percent[-1]' <<<"$h")" = 100 ] &&
    ok "telemetry history: 8 devices, 2+ samples each, the job's device busy" || fail "history: $h"
last=$(jq '.devices[0].time_ms[-1]' <<<"$h")
[ "$(api "/api/v1/nodes/$NODE/telemetry?since=$last" | jq '.devices[0].time_ms | min')" = "$last" ] &&
    [ "$(api "/api/v1/nodes/$NODE/telemetry?since=$((last + 1))" | jq '.devices[0].time_ms | length')" -le 1 ] &&
    ok "telemetry history: since= keeps the samples from then on" || fail "since: $last"
[ "$(code -H "$AUTH" "$B/api/v1/nodes/$NODE/telemetry?since=-5")" = 400 ] && grep -q "since" "$TMP/body" &&
    [ "$(code -H "$AUTH" "$B/api/v1/nodes/nosuch/telemetry")" = 404 ] &&
    ok "telemetry history: a bad since is 400, an unknown node 404" || fail "telemetry errors: $(cat "$TMP/body")"
grep -q '^corral_telemetry_history_bytes [1-9]' <<<"$(api /metrics)" && ok "/metrics: the history's bytes" ||
    fail "no corral_telemetry_history_bytes"

# bad requests: a clear 4xx, the head stays up
for t in "400 /api/v1/nodes?limit=0 limit" "400 /api/v1/nodes?limit=x limit" "400 /api/v1/nodes?continue=zz continue" \
    "400 /api/v1/events?since=-1 since" "404 /api/v1/nodes/nosuch no.node" "404 /api/v1/jobs/999 no.job" \
    "404 /api/v1/pgs/nosuch no.placement" "404 /api/v1/nosuch no.such.resource" "400 /api/v1/nodes/%zz %-encoding" \
    "404 /api/v1/nodes/a%2Fb no.node"; do
    set -- $t
    c=$(code -H "$AUTH" "$B$2")
    [ "$c" = "$1" ] && grep -Eq "\"error\":\".*$3" "$TMP/body" && ok "$2: $1 ($3)" || fail "$2: $c $(cat "$TMP/body")"
done
c=$(code -X POST -H "$AUTH" "$B/api/v1/jobs")
[ "$c" = 405 ] && ok "POST is 405" || fail "POST: $c $(cat "$TMP/body")"
c=$(code -H "$AUTH" "$B/api/v1/$(head -c 2000 /dev/zero | tr '\0' a)")
[ "$c" = 414 ] && ok "a long path is 414" || fail "long path: $c"
[ "$(code -H "$AUTH" "$B/api/v1/cluster")" = 200 ] && ok "the head answers after bad requests" || fail "head down"

# ---- a job's credential reads its own job only ----
JT=$(sed -n 's/^tok=//p' "$TMP/job.out" | head -1)
if [ -z "$JT" ]; then
    echo "note: this build gives workers no CORRAL_JOB_TOKEN; the job credential checks wait for it"
else
    J="Authorization: Bearer $JT"
    [ "$(code -H "$J" "$B/api/v1/jobs/$JOB")" = 200 ] && ok "a job credential reads its job" || fail "own job: $(cat "$TMP/body")"
    [ "$(code -H "$J" "$B/api/v1/jobs" && jq -r '[.jobs[].job_id] | join(",")' "$TMP/body")" = "200$JOB" ] &&
        ok "a job credential lists only its job" || fail "job list with job credential: $(cat "$TMP/body")"
    "$CORRAL" run -- true >/dev/null
    OTHER=$("$CORRAL" job list --json | jq -r --arg j "$JOB" '[.[] | select(.job_id != $j)][0].job_id')
    c=$(code -H "$J" "$B/api/v1/jobs/$OTHER")
    [ "$c" = 403 ] && ok "another job's credential is refused (403)" || fail "other job: $c $(cat "$TMP/body")"
    for p in /api/v1/nodes /api/v1/cluster /metrics /api/v1/pgs; do
        c=$(code -H "$J" "$B$p")
        [ "$c" = 403 ] && ok "a job credential may not read $p" || fail "job credential $p: $c"
    done
    JOB_CRED=$J # tried again once the job has ended, below
fi

# ---- the event stream ----
curl -sN -H "$AUTH" "$B/api/v1/events/stream" >"$TMP/sse" 2>/dev/null &
SSE=$!
WPIDS="$WPIDS $SSE"
for _ in $(seq 100); do [ -s "$TMP/sse" ] && break; sleep 0.05; done
"$CORRAL" run --name streamed -- true >/dev/null
for _ in $(seq 200); do grep -q '"message":"streamed' "$TMP/sse" && grep -q '^event: exited' "$TMP/sse" && break; sleep 0.05; done
kill "$SSE" 2>/dev/null; wait "$SSE" 2>/dev/null
grep -q '^event: submitted' "$TMP/sse" && grep -q '"message":"streamed' "$TMP/sse" && grep -q '^id: [0-9]' "$TMP/sse" &&
    ! grep -q '"kind":"started","job_id":"","node_id":"[^"]*","message":"head on' "$TMP/sse" &&
    ok "events/stream: new events as they happen, none from before" || fail "stream: $(cat "$TMP/sse")"
timeout 5 curl -sN -H "$AUTH" "$B/api/v1/events/stream?since=0" >"$TMP/sse0" 2>/dev/null
grep -q '"message":"head on' "$TMP/sse0" && ok "events/stream?since=0 replays from the start" || fail "since=0: $(head -c 300 "$TMP/sse0")"
if [ -n "${JOB_CRED:-}" ]; then # (its job still runs)
    timeout 3 curl -sN -H "$JOB_CRED" "$B/api/v1/events/stream?since=0" >"$TMP/ssej" 2>/dev/null
    ids=$(sed -n 's/^data: //p' "$TMP/ssej" | jq -r .job_id | sort -u | tr '\n' ' ')
    grep -q '^event: submitted' "$TMP/ssej" && [ "$ids" = "$JOB " ] &&
        ok "events/stream?since=0 with a job credential: its job's events only" ||
        fail "job credential's stream: job ids '$ids': $(head -c 300 "$TMP/ssej")"
fi
curl -s -H "$AUTH" -D "$TMP/h" -o /dev/null --max-time 1 "$B/api/v1/events/stream"
grep -qi '^Content-Type: text/event-stream' "$TMP/h" && ok "the stream is text/event-stream" || fail "stream type: $(cat "$TMP/h")"

# ---- /metrics ----
api /metrics >"$TMP/metrics" || fail "/metrics"
promtool check metrics <"$TMP/metrics" >"$TMP/lint" 2>&1 && ok "promtool check metrics: the head's /metrics" ||
    fail "promtool: $(cat "$TMP/lint")"
grep -q '^corral_nodes{state="ALIVE"} 1$' "$TMP/metrics" && grep -q '^corral_resource_used{resource="GPU"} 4$' "$TMP/metrics" &&
    grep -q '^corral_jobs_running 1$' "$TMP/metrics" && grep -Eq '^corral_placement_seconds_count [1-9]' "$TMP/metrics" &&
    grep -Eq '^corral_state_commits_total [1-9]' "$TMP/metrics" &&
    ok "head metrics: nodes, resources used, jobs, placements, commits" || fail "head metrics: $(grep -v '^#' "$TMP/metrics" | head -20)"
n=$(grep -c "^corral_device_utilization_percent{.*simulated=\"true\"" "$TMP/metrics")
busy=$(grep -c "^corral_device_utilization_percent{.*job_id=\"$JOB\".*} 100$" "$TMP/metrics")
[ "$n" = 8 ] && [ "$busy" = 2 ] && ok "device metrics: 8 simulated, the job's 2 labelled with it" ||
    fail "device metrics: $n simulated, $busy of job $JOB"

# the Grafana dashboard names only metrics that are served (device
# metrics: the head's own node has them, as every agent does)
bad=""
for m in $(jq -r '.panels[].targets[].expr' "$CORRAL_SOURCE_DIR/deploy/grafana/corral.json" |
    grep -o 'corral_[a-z_]*' | sed 's/_bucket$//' | sort -u); do
    grep -q "^# TYPE $m " "$TMP/metrics" || bad="$bad $m"
done
[ -z "$bad" ] && ok "deploy/grafana/corral.json names served metrics only" || fail "grafana names unserved:$bad"
# docs/openapi.yaml has every route of head/web.c
bad=""
for r in $(sed -n 's/^    {"GET", "\([^"]*\)".*/\1/p' "$CORRAL_SOURCE_DIR/head/web.c"); do
    [ "$r" = / ] && continue
    p=${r//\{\}/\{id\}}
    p=${p/%\*/\{path\}} # a final * (the dashboard's /static/*) is one {path}
    grep -qxF "  $p:" "$CORRAL_SOURCE_DIR/docs/openapi.yaml" || bad="$bad $r"
done
[ -z "$bad" ] && ok "docs/openapi.yaml describes every route" || fail "openapi lacks:$bad"

# ---- a job's credential ends with its job ----
if [ -n "${JOB_CRED:-}" ]; then
    "$CORRAL" job stop "$JOB" >/dev/null
    c=$(code -H "$JOB_CRED" "$B/api/v1/jobs/$JOB")
    [ "$c" = 401 ] && ok "the credential of a job that ended is refused" || fail "ended job's credential: $c $(cat "$TMP/body")"
fi

# ---- telemetry of real backends: NVML (the stand-in) and amdgpu's sysfs ----
"$CORRAL" stop >/dev/null
for m in dgx-h100:97 mi300x-8:0 tpu-v6e-4x4-w0:none; do
    (
        eval "$("$CORRAL_SOURCE_DIR/scripts/fixture-env.sh" "${m%%:*}" "$CORRAL_BUILD_DIR")"
        "$CORRAL" start --head --dashboard-port any >/dev/null || exit 1
        L=$("$CORRAL" dashboard) && b=${L%%\?*} &&
            curl -sf -H "Authorization: Bearer $(cat "$CORRAL_HOME/session_latest/token")" "${b}metrics"
        "$CORRAL" stop >/dev/null
    ) >"$TMP/$m.metrics" 2>&1
    if [ "${m#*:}" = none ]; then # a backend without telemetry says so, never zeros
        promtool check metrics <"$TMP/$m.metrics" >/dev/null 2>&1 &&
            grep -q '^corral_device_telemetry_available{[^}]*index="0"[^}]*} 0$' "$TMP/$m.metrics" &&
            ! grep -Eq '^corral_device_(utilization_percent|memory_used_bytes|power_watts|temperature_celsius)\{' "$TMP/$m.metrics" &&
            grep -q '^# device 0 of .*: no telemetry: the backend reads no telemetry$' "$TMP/$m.metrics" &&
            grep -q '^corral_device_info{' "$TMP/$m.metrics" &&
            ok "${m%%:*}: no telemetry, said so, no zeros" || fail "${m%%:*} metrics: $(grep -v '^#' "$TMP/$m.metrics" | grep device | head -5)"
        continue
    fi
    u=$(sed -n 's/^corral_device_utilization_percent{[^}]*index="0"[^}]*simulated="false"} //p' "$TMP/$m.metrics")
    promtool check metrics <"$TMP/$m.metrics" >/dev/null 2>&1 && [ "$u" = "${m#*:}" ] &&
        grep -Eq '^corral_device_(power_watts|temperature_celsius)\{' "$TMP/$m.metrics" &&
        ok "${m%%:*}: telemetry from its backend (utilization $u)" || fail "${m%%:*} metrics: u=$u $(head -c 600 "$TMP/$m.metrics")"
done
finish
