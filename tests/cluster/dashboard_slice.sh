#!/bin/bash
# The dashboard's TPU slice page (docs/dashboard.md) in Debian's headless
# chromium (playwright-core, tests/cluster/lib/slice.mjs): a head and the
# four hosts of a simulated v6e 4x4 slice (specs/tpu-v6e-4x4-w*.yaml) as
# agents, a job holding a chip of one host and a placement group holding
# two of another. The page must draw the 16 chips at their mesh
# coordinates across the hosts, ICI links between neighbours, the job's
# chip held and the group's chips reserved, at the coordinates the API
# gives those devices. An MI300X node beside them: its page draws its 8
# GPUs and the xGMI links corral topo --json has. The screenshot goes to
# $CORRAL_DASHBOARD_SHOTS.
CHROMIUM=${CORRAL_CHROMIUM:-/usr/bin/chromium}
[ -x "$CHROMIUM" ] || { echo "SKIP: no $CHROMIUM (Debian chromium; scripts/deps.sh installs it)"; exit 77; }
command -v curl >/dev/null || { echo "SKIP: no curl"; exit 77; }
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cslice
TMP=$(mktemp -d /tmp/corral-slice-XXXXXX)
slice_cleanup() {
    cluster_cleanup
    rm -rf "$TMP"
}
trap slice_cleanup EXIT
SHOTS=${CORRAL_DASHBOARD_SHOTS:-$TMP}
NM=$("$CORRAL_SOURCE_DIR/scripts/node-web.sh") || { fail "scripts/node-web.sh could not install playwright-core"; finish; }
export CORRAL_WEB_NODE_MODULES=$NM CORRAL_CHROMIUM=$CHROMIUM

head_up "$SPECS/cpu-only.yaml" --dashboard-port any
for w in 2 0 3 1; do agent_up "tpu-w$w" "$SPECS/tpu-v6e-4x4-w$w.yaml" "127.0.0.$((30 + w))"; done
agent_up mi300x "$SPECS/mi300x-8.yaml" 127.0.0.40
for w in 0 1 2 3; do wait_node "tpu-w$w" 10 ALIVE || fail "tpu-w$w not ALIVE"; done
wait_node mi300x 10 ALIVE || fail "mi300x not ALIVE"
JOB=$("$CORRAL" run --detach --resources TPU=1 --label-selector corral.io/node-id=tpu-w2 -- sleep 120)
wait_started "$JOB" || fail "job $JOB did not start"
"$CORRAL" pg create g1 --bundles 'TPU=2' --label-selector corral.io/node-id=tpu-w1 >/dev/null ||
    fail "pg create g1"
LOGIN=$("$CORRAL" dashboard) || { fail "corral dashboard"; finish; }
B=${LOGIN%%\?*}
d=$(curl -sf -H "Authorization: Bearer $(cat "$TOKEN")" "${B}api/v1/devices")
# what the API says: the job's chip and the group's chips, as "x,y"
want_held=$(jq -c --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .coords | map(tostring) | join(",")] | sort' <<<"$d")
g=$(curl -sf -H "Authorization: Bearer $(cat "$TOKEN")" "${B}api/v1/pgs/g1")
want_grouped=$(jq -c --argjson g "$g" '[$g.bundles[] as $b | .devices[] | select(.node_id == $b.node_id and
    (.index as $i | $b.devices | index($i))) | .coords | map(tostring) | join(",")] | sort' <<<"$d")
[ "$(jq length <<<"$want_held")" = 1 ] && [ "$(jq length <<<"$want_grouped")" = 2 ] ||
    fail "the API: held $want_held grouped $want_grouped"

node "$CORRAL_SOURCE_DIR/tests/cluster/lib/slice.mjs" "$LOGIN" v6e-s1 "$SHOTS" mi300x >"$TMP/out.json" 2>"$TMP/err" ||
    { fail "the browser run: $(tail -5 "$TMP/err")"; finish; }
O=$(cat "$TMP/out.json")
S=$(jq -c '.pages.slice | del(.text)' <<<"$O")
[ "$(jq '.errors | length' <<<"$O")" = 0 ] && ok "the slice page loads without console errors or outside fetches" ||
    fail "errors: $(jq -c .errors <<<"$O")"
[ "$(jq .pages.overview.slice_link <<<"$O")" = true ] && ok "the overview links the slice" || fail "no slice link"
all=$(jq -nc '[range(4) as $x | range(4) as $y | "\($x),\($y)"] | sort')
[ "$(jq .chips <<<"$S")" = 16 ] && [ "$(jq .hosts <<<"$S")" = 4 ] && [ "$(jq -c .coords <<<"$S")" = "$all" ] &&
    ok "the mesh: 16 chips on 4 hosts, each (x,y) of 4x4 once" || fail "mesh: $S"
[ "$(jq .ici <<<"$S")" = 24 ] && ok "24 ICI links between mesh neighbours" || fail "ici: $(jq .ici <<<"$S")"
[ "$(jq -c .held <<<"$S")" = "$want_held" ] && ok "the job's chip drawn held at $want_held" ||
    fail "held: $(jq -c .held <<<"$S"), the API: $want_held"
[ "$(jq -c .grouped <<<"$S")" = "$want_grouped" ] && ok "the group's chips drawn reserved at $want_grouped" ||
    fail "grouped: $(jq -c .grouped <<<"$S"), the API: $want_grouped"
grep -q "v6e-16, topology 4x4" <<<"$(jq -r .pages.slice.text <<<"$O")" && ok "the page names the slice's type and topology" ||
    fail "text: $(jq -r .pages.slice.text <<<"$O" | head -3)"
# the MI300X node's page: what corral topo --json says of the same spec
T=$("$CORRAL" topo --spec "$SPECS/mi300x-8.yaml" --json)
want=$(jq -c '. as $t | ($t.names | length) as $n | [range($n)] as $r |
  {accelerators: (.devices | length),
   xgmi_pairs: [$r[] as $i | $r[] | select(. > $i and $t.kinds[$i][.] == "xgmi")] | length}' <<<"$T")
got=$(jq -c '.pages.node.graph | {accelerators, xgmi_pairs: .edges.xgmi}' <<<"$O")
[ "$(jq .accelerators <<<"$want")" = 8 ] && [ "$got" = "$want" ] &&
    ok "the MI300X node's graph has what corral topo --json has ($got)" || fail "MI300X graph $got, topo $want"
[ -s "$SHOTS/dashboard-slice.png" ] || fail "no screenshot"
"$CORRAL" job stop "$JOB" >/dev/null
finish
