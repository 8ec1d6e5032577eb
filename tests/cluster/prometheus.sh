#!/usr/bin/env bash
# Metrics end to end (docs/metrics.md): a head and two agents with
# --metrics-port, each endpoint through Debian's `promtool check metrics`,
# then a real Prometheus server (Debian's prometheus, on loopback, its data
# in a temp dir, ended by its pid) scraping all three with the cluster
# token, queried through its HTTP API for device metrics: a simulated
# MI300X node's, labelled with the job that holds it, and a DGX fixture's
# read through the stand-in NVML. Also the head's node listing paged over
# three nodes, remote devices in /api/v1/devices with the telemetry their
# agents sent in heartbeats, and ECC counts from the stand-in NVML.
. "$CORRAL_SOURCE_DIR/tests/cluster/lib/cluster.sh" cprom
for t in curl promtool prometheus python3; do
    command -v $t >/dev/null || { echo "SKIP: no $t (scripts/deps.sh installs it)"; exit 77; }
done
TMP=$(mktemp -d /tmp/corral-prom-XXXXXX)
PROM=""
prom_cleanup() {
    [ -n "$PROM" ] && kill -TERM "$PROM" 2>/dev/null && wait "$PROM" 2>/dev/null
    cluster_cleanup
    rm -rf "$TMP"
}
trap prom_cleanup EXIT

head_up "$SPECS/cpu-only.yaml" --dashboard-port any
L=$("$CORRAL" dashboard) || { fail "no dashboard"; finish; }
HB=${L%%\?*}
HEX=$(cat "$TOKEN")
AUTH="Authorization: Bearer $HEX"
# an agent with its metrics port (a spec, or "fixture:MACHINE" for a
# recorded machine through scripts/fixture-env.sh): the address it printed
magent() { # ID IP SPEC
    local id=$1 ip=$2 spec=$3 out
    out=$(
        if [ "${spec#fixture:}" != "$spec" ]; then
            eval "$("$CORRAL_SOURCE_DIR/scripts/fixture-env.sh" "${spec#fixture:}" "$CORRAL_BUILD_DIR")"
            set --
        else
            set -- --hw-spec "$spec"
        fi
        "$CORRAL" start --address "$ADDR" --token-file "$TOKEN" --node-id "$id" --node-ip "$ip" \
            --metrics-port any "$@" 2>&1
    ) || { echo "FAIL: agent $id: $out" >&2; return 1; }
    sed -n 's|^corral: metrics on http://\(127\.0\.0\.1:[0-9]*\)/metrics$|\1|p' <<<"$out"
}
A1=$(magent a1 127.0.0.2 "$SPECS/mi300x-8.yaml") && WPIDS="$WPIDS $(agent_pid a1)"
A2=$(magent a2 127.0.0.3 fixture:dgx-h100) && WPIDS="$WPIDS $(agent_pid a2)"
[ -n "$A1" ] && [ -n "$A2" ] && ok "two agents with --metrics-port, their addresses printed" ||
    { fail "agents: a1=$A1 a2=$A2"; finish; }
wait_node a1 10 ALIVE && wait_node a2 10 ALIVE || fail "agents not ALIVE: $("$CORRAL" nodes)"

# every endpoint passes promtool; an agent's wants the token too
for t in "head ${HB}metrics" "a1 http://$A1/metrics" "a2 http://$A2/metrics"; do
    set -- $t
    curl -sf -H "$AUTH" "$2" >"$TMP/$1.prom" || fail "$1: no metrics"
    promtool check metrics <"$TMP/$1.prom" >"$TMP/$1.lint" 2>&1 && ok "promtool check metrics: $1" ||
        fail "promtool $1: $(cat "$TMP/$1.lint")"
done
[ "$(curl -s -o /dev/null -w '%{http_code}' "http://$A1/metrics")" = 401 ] &&
    [ "$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer $(printf '%064d' 0)" "http://$A1/metrics")" = 401 ] &&
    [ "$(curl -s "http://$A1/healthz")" = ok ] && ok "an agent's /metrics needs the token, /healthz does not" ||
    fail "agent access"
grep -q '^corral_nodes{state="ALIVE"} 3$' "$TMP/head.prom" && ok "head: 3 nodes ALIVE" || fail "head nodes"
n=$(grep -c '^corral_device_utilization_percent{node="a1",.*accelerator_type="MI300X",vendor="AMD".*simulated="true"}' "$TMP/a1.prom")
[ "$n" = 8 ] && ok "a1: 8 simulated MI300X devices, labelled so" || fail "a1 devices: $n"
grep -q '^corral_device_power_watts{node="a2",index="0",.*simulated="false"} 652.3$' "$TMP/a2.prom" &&
    ok "a2: power of GPU 0 from NVML (the stand-in's 652300 mW)" || fail "a2 power: $(grep power "$TMP/a2.prom" | head -3)"
grep -q '^corral_device_ecc_corrected_errors_total{node="a2",index="0",.*simulated="false"} 3$' "$TMP/a2.prom" &&
    grep -q '^corral_device_ecc_uncorrected_errors_total{node="a2",index="7",.*} 0$' "$TMP/a2.prom" &&
    grep -q '^corral_device_xid_last{node="a2",index="1",.*} 31$' "$TMP/a2.prom" &&
    grep -q '^corral_device_xid_last{node="a2",index="0",.*} 0$' "$TMP/a2.prom" &&
    ok "a2: ECC counts and the last XID of the GPUs from NVML (DCGM_FI_DEV_ECC_SBE/DBE_VOL_TOTAL, _XID_ERRORS)" ||
    fail "a2 ecc: $(grep ecc "$TMP/a2.prom" | head -3)"
! grep -q '^corral_device_ecc\|^corral_device_xid' "$TMP/a1.prom" && ok "a1 (simulated): no ECC counts rather than zeros" ||
    fail "a1 exports ECC counts"

# a job on a1: its devices carry the job and worker in a1's metrics
JOB=$("$CORRAL" run --detach --gpus 2 --label-selector corral.io/node-id=a1 -- sleep 60)
wait_started "$JOB" || fail "job $JOB did not start"
curl -sf -H "$AUTH" "http://$A1/metrics" >"$TMP/a1b.prom"
held=$(grep -c "^corral_device_utilization_percent{node=\"a1\",.*job_id=\"$JOB\",worker_id=\"job$JOB-w0\",simulated=\"true\"} 100$" "$TMP/a1b.prom")
[ "$held" = 2 ] && ok "a1: the job's 2 devices labelled with job and worker, busy" ||
    fail "held: $held $(grep "job_id=\"$JOB\"" "$TMP/a1b.prom" | head -3)"

# the head's API across nodes: paged, remote devices listed (their
# telemetry is the agent's)
p1=$(curl -sf -H "$AUTH" "${HB}api/v1/nodes?limit=2")
c=$(jq -r .continue <<<"$p1")
p2=$(curl -sf -H "$AUTH" "${HB}api/v1/nodes?limit=2&continue=$c")
[ "$(jq '.nodes | length' <<<"$p1")" = 2 ] && [ "$(jq '.nodes | length' <<<"$p2")" = 1 ] &&
    [ "$(jq .continue <<<"$p2")" = null ] &&
    [ "$( (jq -r '.nodes[].node_id' <<<"$p1"; jq -r '.nodes[].node_id' <<<"$p2") | sort | tr '\n' ' ')" = \
        "$("$CORRAL" nodes --json | jq -r '.[].node_id' | sort | tr '\n' ' ')" ] &&
    ok "nodes: two pages of 2 and 1, every node once" || fail "paging: $p1 $p2"
# remote nodes' live telemetry at the head (docs/api.md "Telemetry"): the
# agents send it in their heartbeats, a changed reading within 5 s
for _ in $(seq 200); do
    d=$(curl -sf -H "$AUTH" "${HB}api/v1/devices")
    [ "$(jq --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .telemetry.utilization_percent] | unique' <<<"$d" | jq -c .)" = '[100]' ] &&
        break
    sleep 0.1
done
[ "$(jq '[.devices[] | select(.node_id == "a1")] | length' <<<"$d")" = 8 ] &&
    [ "$(jq -r --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .node_id] | unique | join(",")' <<<"$d")" = a1 ] &&
    [ "$(jq --arg j "$JOB" '[.devices[] | select(.job_id == $j) | .telemetry.utilization_percent] | unique' <<<"$d" | jq -c .)" = '[100]' ] &&
    [ "$(jq '[.devices[] | select(.node_id == "a1" and .job_id == null) | .telemetry.utilization_percent] | unique' <<<"$d" | jq -c .)" = '[0]' ] &&
    ok "devices: a remote node's, the job's marked and busy in the telemetry its agent sent" ||
    fail "devices a1: $(jq -c '[.devices[] | select(.node_id == "a1") | {index, job_id, telemetry, telemetry_source}]' <<<"$d")"
g0=$(jq -c '.devices[] | select(.node_id == "a2" and .index == 0)' <<<"$d")
[ "$(jq .telemetry.power_watts <<<"$g0")" = 652.3 ] && [ "$(jq .telemetry.ecc_corrected <<<"$g0")" = 3 ] &&
    [ "$(jq .telemetry.ecc_uncorrected <<<"$g0")" = 0 ] && [ "$(jq -r .telemetry_source <<<"$g0")" = nvidia ] &&
    [ "$(jq '.telemetry_age_ms >= 0' <<<"$g0")" = true ] &&
    ok "devices: a2's GPU 0 from NVML through its agent's heartbeat (power, ECC counts)" || fail "a2 GPU 0: $g0"
h=$(curl -sf -H "$AUTH" "${HB}api/v1/nodes/a2/telemetry")
[ "$(jq '.devices | length' <<<"$h")" = 8 ] && [ "$(jq '.devices[0].power_watts[-1]' <<<"$h")" = 652.3 ] &&
    ok "the head's history of a remote node's devices" || fail "a2 history: $(jq -c '.devices[0]' <<<"$h")"

# a real Prometheus scraping the three
PP=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
cat >"$TMP/prometheus.yml" <<YML
global:
  scrape_interval: 1s
  scrape_timeout: 1s
scrape_configs:
  - job_name: corral-head
    authorization: {type: Bearer, credentials_file: $TOKEN}
    static_configs: [{targets: ['${HB#http://}']}]
  - job_name: corral-agents
    authorization: {type: Bearer, credentials_file: $TOKEN}
    static_configs: [{targets: ['$A1', '$A2']}]
YML
sed -i 's|/\x27\]|\x27]|' "$TMP/prometheus.yml"
promtool check config "$TMP/prometheus.yml" >"$TMP/cfg.lint" 2>&1 || fail "prometheus config: $(cat "$TMP/cfg.lint")"
prom_start "$TMP/prometheus.yml" "$PP" "$TMP"
got=$(prom_wait 'sum(up)' 3)
[ "$got" = 3 ] && ok "prometheus scrapes the head and both agents (up = 3)" ||
    fail "up: $got $(prom_q up) $(tail -5 "$TMP/prometheus.log")"
r=$(prom_q "corral_device_utilization_percent{node=\"a1\",job_id=\"$JOB\"}")
[ "$(jq '.data.result | length' <<<"$r")" = 2 ] &&
    [ "$(jq -r '[.data.result[].value[1]] | unique | join(",")' <<<"$r")" = 100 ] &&
    ok "prometheus: a1's devices held by the job, by their labels" || fail "query a1: $r"
r=$(prom_q 'corral_device_power_watts{node="a2",index="0"}')
[ "$(jq -r '.data.result[0].value[1]' <<<"$r")" = 652.3 ] && ok "prometheus: a2's GPU 0 power from NVML" ||
    fail "query a2: $r"
r=$(prom_q 'corral_device_ecc_corrected_errors_total{node="a2",index="0"}')
[ "$(jq -r '.data.result[0].value[1]' <<<"$r")" = 3 ] && ok "prometheus: a2's GPU 0 corrected ECC errors" ||
    fail "query ecc: $r"
r=$(prom_q 'corral_resource_used{resource="GPU",job="corral-head"}')
[ "$(jq -r '.data.result[0].value[1]' <<<"$r")" = 2 ] && ok "prometheus: the head's GPUs used" || fail "head query: $r"
"$CORRAL" job stop "$JOB" >/dev/null
finish
