#!/bin/bash
# The dashboard (docs/dashboard.md) in Debian's headless chromium, driven by
# npm playwright-core (tests/cli/lib/dashboard.mjs), against a real head on
# a simulated DGX H100 with a running job: login through the URL `corral
# dashboard` prints, every page without console errors or outside fetches,
# the topology graph with the GPUs and the NVLink/NVSwitch links `corral
# topo --json` has, the telemetry chart updating, and the job's devices
# drawn as held. Screenshots go to
# $CORRAL_DASHBOARD_SHOTS (docs/img/ to refresh the committed ones).
set -u
CHROMIUM=${CORRAL_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "SKIP: no $CHROMIUM (Debian chromium; scripts/deps.sh installs it)"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" dashboard
SPEC=$CORRAL_SOURCE_DIR/specs/dgx-h100.yaml
TMP=$(mktemp -d /tmp/corral-dashboard-XXXXXX)
trap 'cleanup; rm -rf "$TMP"' EXIT
SHOTS=${CORRAL_DASHBOARD_SHOTS:-$TMP}
NM=$("$CORRAL_SOURCE_DIR/scripts/node-web.sh") || { fail "scripts/node-web.sh could not install playwright-core"; finish; }
export CORRAL_WEB_NODE_MODULES=$NM CORRAL_CHROMIUM=$CHROMIUM

"$CORRAL" start --head --hw-spec "$SPEC" --dashboard-port any >/dev/null || { fail "start"; finish; }
"$CORRAL" run --resources GPU=2 -- sleep 120 >"$TMP/job.out" 2>&1 &
WPIDS="$WPIDS $!"
for _ in $(seq 200); do
    [ "$("$CORRAL" job list --json | jq '[.[] | select(.state == "RUNNING")] | length')" = 1 ] && break
    sleep 0.05
done
JOB=$("$CORRAL" job list --json | jq -r '.[0].job_id')
HELD=$("$CORRAL" job status "$JOB" --json | jq -c '.workers[0].devices | split(",") | map(tonumber)')
NODE=$("$CORRAL" nodes --json | jq -r '.[0].node_id')
LOGIN=$("$CORRAL" dashboard) || { fail "corral dashboard"; finish; }
# the head's telemetry history has 2 samples (one at start, one 5 s on)
# before the browser opens: the chart must start with them
B=${LOGIN%%\?*}
for _ in $(seq 300); do
    n=$(curl -sf -H "Authorization: Bearer $(cat "$CORRAL_HOME/session_latest/token")" \
        "${B}api/v1/nodes/$NODE/telemetry" | jq '[.devices[].time_ms | length] | min' 2>/dev/null)
    [ "${n:-0}" -ge 2 ] 2>/dev/null && break
    sleep 0.1
done

node "$CORRAL_SOURCE_DIR/tests/cli/lib/dashboard.mjs" "$LOGIN" "$NODE" "$JOB" "$SHOTS" >"$TMP/out.json" 2>"$TMP/err" ||
    { fail "the browser run: $(tail -5 "$TMP/err")"; finish; }
O=$(cat "$TMP/out.json")
[ "$(jq -r .landed <<<"$O")" = / ] && ok "the login URL lands on / without the token" ||
    fail "landed on $(jq -r .landed <<<"$O")"
[ "$(jq '.errors | length' <<<"$O")" = 0 ] && ok "every page loads without console errors or outside fetches" ||
    fail "errors: $(jq -c .errors <<<"$O")"
grep -q "dgx-h100-01" <<<"$(jq -r .pages.overview.text <<<"$O")" &&
    grep -q "H100" <<<"$(jq -r .pages.overview.text <<<"$O")" && ok "overview lists the node and its H100s" ||
    fail "overview: $(jq -c .pages.overview <<<"$O")"

# the graph against corral topo --json: GPUs, the NVSwitch fabric and each
# GPU's link into it, direct NVLink pairs, NICs, NUMA nodes
T=$("$CORRAL" topo --spec "$SPEC" --json)
G=$(jq -c .pages.node.graph <<<"$O")
want=$(jq -c '. as $t | ($t.names | length) as $n | [range($n)] as $r |
  {accelerators: (.devices | length),
   nvswitch_gpus: [.devices[].name as $a | ($t.names | index($a)) as $i |
       select(any($r[]; $t.kinds[$i][.] == "nvswitch"))] | length,
   nvlink_pairs: [$r[] as $i | $r[] | select(. > $i and $t.kinds[$i][.] == "nvlink")] | length,
   nics: (.nics | length), numa: (.numa | length)}' <<<"$T")
got=$(jq -c '{accelerators, nvswitch_gpus: .edges.nvswitch, nvlink_pairs: .edges.nvlink, nics, numa}' <<<"$G")
[ "$(jq .accelerators <<<"$want")" = 8 ] && [ "$(jq .nvswitch_gpus <<<"$want")" = 8 ] ||
    fail "the DGX spec is not what this test expects: $want"
[ "$got" = "$want" ] && ok "the topology graph has what corral topo --json has ($got)" ||
    fail "graph $got, corral topo --json $want"
[ "$(jq .nvswitches <<<"$G")" = 1 ] && ok "one NVSwitch fabric node" || fail "NVSwitch nodes: $G"
[ "$(jq .accelerators <<<"$G")" -gt 0 ] 2>/dev/null && ok "the graph is not empty" || fail "the graph is empty: $G"

c=$(jq -c .pages.node.first_chart <<<"$O")
[ "$(jq .history <<<"$c")" -ge 2 ] 2>/dev/null && [ "$(jq '.history_points | min' <<<"$c")" -ge 2 ] 2>/dev/null &&
    ok "the chart starts with the head's history: 2+ points of each device on first load ($c)" ||
    fail "chart on first load: $c"
c=$(jq -c .pages.node.chart <<<"$O")
[ "$(jq .series <<<"$c")" = 8 ] && [ "$(jq .points - .history <<<"$c")" -ge 3 ] 2>/dev/null &&
    ok "the telemetry chart has 8 devices and keeps updating ($c)" || fail "telemetry chart: $c"

# the running job, drawn onto the node's graph
[ "$(jq -c .pages.job.graph.held <<<"$O")" = "$HELD" ] && ok "the job's devices $HELD are drawn as held" ||
    fail "held on the graph: $(jq -c .pages.job.graph.held <<<"$O"), the job has $HELD"
[ "$(jq -c .pages.node.graph.held <<<"$O")" = "$HELD" ] && ok "the node page marks them too" ||
    fail "node page held: $(jq -c .pages.node.graph.held <<<"$O")"
grep -q "$JOB" <<<"$(jq -r .pages.jobs.text <<<"$O")" && ok "jobs page lists the job" || fail "jobs page"
[ "$(jq .pages.events.events <<<"$O")" -gt 0 ] 2>/dev/null &&
    grep -q placed <<<"$(jq -r .pages.events.text <<<"$O")" && ok "the event stream shows events live" ||
    fail "events page: $(jq -c .pages.events <<<"$O")"
for p in overview node node-telemetry jobs job events; do
    [ -s "$SHOTS/dashboard-$p.png" ] || fail "no screenshot $p"
done
finish
