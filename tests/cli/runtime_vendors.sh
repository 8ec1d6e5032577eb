#!/bin/bash
# Device isolation for every vendor, end to end: a real head (corrald) on
# each simulated node of specs/ (a TPU v6e host, trn1.32xlarge, Gaudi2,
# MI300X, DGX H100), real workers that print what they see, checked
# against the node description (`corral hw --spec FILE --json`): each
# worker's isolation variable names exactly the devices the head says it
# gave it, the gang's devices are distinct (or shared, for fractions), and
# its CPU affinity is its devices' cpulists intersected with the CPUs this
# machine lets us use, or unbound with a warning in the `started` event
# when nothing is left (docs/workers.md). Each head lives for its scenario.
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/head.sh" runtime_vendors
SPECS=$CORRAL_SOURCE_DIR/specs

SPEC=
start_head() {
    SPEC=$SPECS/$1
    local out
    out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "start on $1: $out"; return 1; }
    HW=$("$CORRAL" hw --spec "$SPEC" --json) || { fail "corral hw --spec $1"; return 1; }
}
stop_head() {
    local out
    out=$("$CORRAL" stop 2>&1) && ok "head on $(basename "$SPEC") stopped" || fail "stop: $out"
}

# ---- cpulists as sorted lists of CPU numbers, one a line ----
expand() {
    local r
    tr ',' '\n' <<<"$1" | while IFS=- read -r a b; do
        [ -n "$a" ] && seq "$a" "${b:-$a}"
    done | sort -n -u
}
# what this machine lets us (and so the head we start) use
MYCPUS=$(expand "$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)")

# Runs a job whose workers each print one line, " idx=I cpus=LIST V=VALUE..."
# for the variables named (V=<unset> when the variable is not set), into
# $OUT (prefixes "[i]" dropped), $RC and $JOB (its id).
PROBE='printf " idx=%s cpus=%s" "$CORRAL_WORKER_INDEX" "$(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"
for v; do
    kv=$(env | grep "^$v=") && printf " %s" "$kv" || printf " %s=<unset>" "$v"
done
echo'
probe() { # corral run options..., --, variables...
    local opts=()
    while [ "$1" != -- ]; do opts+=("$1"); shift; done
    shift
    OUT=$("$CORRAL" run "${opts[@]}" -- sh -c "$PROBE" sh CORRAL_ACCELERATOR_IDS "$@" 2>&1)
    RC=$?
    OUT=$(sed 's/^\[[0-9]*\]//' <<<"$OUT")
    JOB=$("$CORRAL" job list --json | jq -r 'max_by(.job_id | tonumber) | .job_id')
}
# field LINE KEY: the value of KEY= on a probe line
field() { sed -n "s/.* $2=\([^ ]*\).*/\1/p" <<<"$1"; }
# the probe line of worker I
line_of() { grep " idx=$1 " <<<"$OUT"; }
# the devices (node indices, comma-separated) the head gave worker I of $JOB
devs_of() { jq -r --argjson i "$1" '.workers[] | select(.index == $i) | .devices' <<<"$JSTAT"; }
# the isolation ids of devices "a,b", comma-separated, in the order given
ids_of() {
    local d out=
    for d in ${1//,/ }; do out+=${out:+,}$(jq -r --argjson d "$d" '.devices[$d].isolation_id' <<<"$HW"); done
    echo "$out"
}

# check_gang WHAT N VAR: the $N workers of $JOB succeeded, and each
# worker's VAR (and CORRAL_ACCELERATOR_IDS) names the devices the head
# gave it, and its CPU affinity is what docs/workers.md says
check_gang() {
    local what=$1 n=$2 var=$3 i l d want got bad=0 cpus common ev msg
    JSTAT=$("$CORRAL" job status "$JOB" --json)
    EVENTS=$("$CORRAL" events --json --limit 1000)
    if [ "$RC" -ne 0 ] || [ "$(grep -c ' idx=' <<<"$OUT")" -ne "$n" ] ||
        [ "$(jq -r .state <<<"$JSTAT")" != SUCCEEDED ]; then
        fail "$what: rc=$RC, $(jq -r .state <<<"$JSTAT"): $OUT"
        return
    fi
    for ((i = 0; i < n; i++)); do
        l=$(line_of "$i")
        d=$(devs_of "$i")
        want=$(ids_of "$d")
        [ -n "$d" ] || { bad=1; echo "  worker $i was given no device"; continue; }
        got=$(field "$l" "$var")
        [ "$got" = "$want" ] || { bad=1; echo "  worker $i: $var=$got, want $want (devices $d)"; }
        got=$(field "$l" CORRAL_ACCELERATOR_IDS)
        [ "$got" = "$want" ] || { bad=1; echo "  worker $i: CORRAL_ACCELERATOR_IDS=$got, want $want"; }
    done
    [ $bad = 0 ] && ok "$what: each worker's $var is its devices'" || fail "$what: $OUT"
    check_affinity "$what" "$n"
}

# check_affinity WHAT N: worker i of $JOB runs on the union of its devices'
# cpulists intersected with $MYCPUS and its `started` event says so; when
# the intersection is empty (or it has no device) it runs on $MYCPUS,
# the event saying "not bound to CPUs" (only when it has devices)
check_affinity() {
    local what=$1 n=$2 i d cpus common got msg evcpus bad=0 bound=0 unbound=0
    for ((i = 0; i < n; i++)); do
        d=$(devs_of "$i")
        cpus=
        for dd in ${d//,/ }; do cpus+=${cpus:+,}$(jq -r --argjson d "$dd" '.devices[$d].cpus' <<<"$HW"); done
        common=$(comm -12 <(expand "$cpus" | sort) <(sort <<<"$MYCPUS") | sort -n)
        got=$(expand "$(field "$(line_of "$i")" cpus)")
        msg=$(jq -r --arg j "$JOB" --arg w "worker $i " \
              'map(select(.kind == "started" and .job_id == $j and (.message | startswith($w)))) | last | .message // ""' <<<"$EVENTS")
        if [ -n "$common" ]; then
            bound=$((bound + 1))
            evcpus=$(sed -n 's/.* cpus \([0-9][0-9,-]*\)$/\1/p' <<<"$msg")
            [ "$got" = "$common" ] && [ "$(expand "$evcpus")" = "$common" ] ||
                { bad=1; echo "  worker $i (devices $d, cpus $cpus): bound to $(paste -sd, <<<"$got"), want $(paste -sd, <<<"$common"); event: $msg"; }
        else
            unbound=$((unbound + 1))
            [ "$got" = "$MYCPUS" ] || { bad=1; echo "  worker $i (devices $d, cpus $cpus): runs on $(paste -sd, <<<"$got"), want all of ours"; }
            if [ -n "$d" ]; then
                grep -q "cpus -: not bound to CPUs: none of the CPUs local to its devices ($cpus)" <<<"$msg" ||
                    { bad=1; echo "  worker $i (devices $d, cpus $cpus): no warning in its event: $msg"; }
            fi
        fi
    done
    [ $bad = 0 ] && ok "$what: CPU affinity ($bound bound to their devices' CPUs, $unbound unbound)" ||
        fail "$what: CPU affinity"
}
# distinct WHAT VAR N: the N workers' VAR values are set and distinct
distinct() {
    local v
    v=$(grep -o " $2=[^ ]*" <<<"$OUT" | grep -v "=<unset>$" | sed 's/.*=//' | grep . | sort -u | wc -l)
    [ "$v" = "$3" ] && ok "$1: $3 distinct $2" || fail "$1: $v distinct $2 of $3: $OUT"
}

# ---- a TPU v6e host: 4 chips in a 2x2 mesh ----
TPUVARS=(TPU_VISIBLE_CHIPS TPU_CHIPS_PER_PROCESS_BOUNDS TPU_PROCESS_BOUNDS TPU_CHIPS_PER_HOST_BOUNDS TPU_HOST_BOUNDS)
if start_head tpu-v6e-4x4-w0.yaml; then
    probe --tpus 1 --workers 4 -- "${TPUVARS[@]}"
    check_gang "TPU 4x1 chip" 4 TPU_VISIBLE_CHIPS
    distinct "TPU 4x1 chip" TPU_VISIBLE_CHIPS 4
    n=$(grep -c ' TPU_CHIPS_PER_PROCESS_BOUNDS=1,1,1 TPU_PROCESS_BOUNDS=1,1,1 TPU_CHIPS_PER_HOST_BOUNDS=1,1,1 TPU_HOST_BOUNDS=1,1,1$' <<<"$OUT")
    [ "$n" = 4 ] && ok "TPU 4x1 chip: 1-chip bounds" || fail "TPU 1-chip bounds: $OUT"

    # two workers of 2 chips: disjoint pairs, each a 1x2 or 2x1 sub-mesh
    # (docs/scheduling.md), with the backend's 2-chip bounds 1,2,1 (Ray's
    # values, hw/backend_tpu.c: the same whichever way the pair lies)
    probe --tpus 2 --workers 2 -- "${TPUVARS[@]}"
    check_gang "TPU 2x2 chips" 2 TPU_VISIBLE_CHIPS
    distinct "TPU 2x2 chips" TPU_VISIBLE_CHIPS 2
    bad=0
    for i in 0 1; do
        l=$(line_of $i)
        d=$(devs_of $i)
        shape=$(jq -r --arg d "$d" '[($d | split(",") | map(tonumber))[] as $k | .devices[$k].coords] |
                 "\((.[0][0] - .[1][0]) | fabs + 1),\((.[0][1] - .[1][1]) | fabs + 1),1"' <<<"$HW")
        [ "$shape" = "1,2,1" ] || [ "$shape" = "2,1,1" ] || { bad=1; echo "  worker $i: chips $d are no sub-mesh ($shape)"; }
        [ "$(field "$l" TPU_CHIPS_PER_PROCESS_BOUNDS)" = 1,2,1 ] && [ "$(field "$l" TPU_PROCESS_BOUNDS)" = 1,1,1 ] &&
            [ "$(field "$l" TPU_CHIPS_PER_HOST_BOUNDS)" = 1,2,1 ] && [ "$(field "$l" TPU_HOST_BOUNDS)" = 1,1,1 ] ||
            { bad=1; echo "  worker $i: chips $d of shape $shape: $l"; }
    done
    [ $bad = 0 ] && ok "TPU 2x2 chips: sub-meshes with their bounds" || fail "TPU 2-chip sub-meshes: $OUT"

    # the whole host: libtpu's defaults, no TPU_* variable at all
    probe --tpus 4 -- "${TPUVARS[@]}"
    JSTAT=$("$CORRAL" job status "$JOB" --json)
    n=$(grep -c " TPU_VISIBLE_CHIPS=<unset> TPU_CHIPS_PER_PROCESS_BOUNDS=<unset> TPU_PROCESS_BOUNDS=<unset> TPU_CHIPS_PER_HOST_BOUNDS=<unset> TPU_HOST_BOUNDS=<unset>$" <<<"$OUT")
    [ $RC = 0 ] && [ "$n" = 1 ] && [ "$(devs_of 0)" = 0,1,2,3 ] && [ "$(field "$OUT" CORRAL_ACCELERATOR_IDS)" = 0,1,2,3 ] &&
        ok "TPU whole host: all 4 chips, no TPU_VISIBLE_CHIPS" || fail "TPU --tpus 4: rc=$RC $OUT devices $(devs_of 0)"
    EVENTS=$("$CORRAL" events --json --limit 1000)
    check_affinity "TPU whole host" 1

    # 3 chips: refused with the scheduler's reason, no job made
    before=$("$CORRAL" job list --json | jq length)
    out=$("$CORRAL" run --tpus 3 -- true 2>&1); rc=$?
    after=$("$CORRAL" job list --json | jq length)
    ev=$("$CORRAL" events --json --limit 1000 | jq -r 'map(select(.kind == "refused")) | last | .message // ""')
    [ $rc = 1 ] && grep -q "TPU requests per host must be 1, 2, 4 or 8 chips" <<<"$out" && [ "$before" = "$after" ] &&
        grep -q "TPU requests per host must be 1, 2, 4 or 8" <<<"$ev" &&
        ok "TPU --tpus 3 refused: $out" || fail "--tpus 3: rc=$rc jobs $before -> $after: $out (event: $ev)"
    free=$("$CORRAL" status --json | jq -r '.resources.TPU.free')
    [ "$free" = 4 ] && ok "TPU chips all free again" || fail "TPU free afterwards: $free"
    stop_head
fi

# ---- trn1.32xlarge: 16 Trainium devices of 2 NeuronCores each ----
if start_head trn1-32xlarge.yaml; then
    probe --resources neuron_cores=2 --workers 4 -- NEURON_RT_VISIBLE_CORES
    JSTAT=$("$CORRAL" job status "$JOB" --json)
    EVENTS=$("$CORRAL" events --json --limit 1000)
    vals=$(grep -o ' NEURON_RT_VISIBLE_CORES=[^ ]*' <<<"$OUT" | sed 's/.*=//')
    if [ $RC != 0 ] || [ "$(grep -c ' idx=' <<<"$OUT")" != 4 ]; then
        fail "Neuron 4x2 cores: rc=$RC $OUT"
    else
        # each worker: a range of 2 cores, disjoint from the others', its
        # devices' isolation ids (neuron_cores is tracked by whole Trainium
        # devices of 2 cores, so the placement names them)
        bad=0
        all=$(for v in $vals; do expand "$v"; done | sort -n)
        [ "$(wc -l <<<"$all")" = 8 ] && [ "$(sort -u <<<"$all" | wc -l)" = 8 ] || bad=1
        for i in 0 1 2 3; do
            v=$(field "$(line_of $i)" NEURON_RT_VISIBLE_CORES)
            [ "$(expand "$v" | wc -l)" = 2 ] || bad=1
            [ "$v" = "$(ids_of "$(devs_of $i)")" ] || bad=1
        done
        [ $bad = 0 ] && ok "Neuron 4x2 cores: distinct NEURON_RT_VISIBLE_CORES ranges of 2" ||
            fail "Neuron 4x2 cores: $OUT"
    fi
    [ $RC = 0 ] && check_affinity "Neuron 4x2 cores" 4
    used=$("$CORRAL" status --json | jq -r '.resources.neuron_cores.used')
    [ "$used" = 0 ] && ok "NeuronCores free again" || fail "neuron_cores used afterwards: $used"
    stop_head
fi

# ---- Gaudi2: 8 HPUs, HABANA_VISIBLE_MODULES is the module id ----
if start_head gaudi2-8.yaml; then
    probe --resources HPU=1 --workers 8 -- HABANA_VISIBLE_MODULES
    check_gang "Gaudi 8x1 HPU" 8 HABANA_VISIBLE_MODULES
    distinct "Gaudi 8x1 HPU" HABANA_VISIBLE_MODULES 8
    stop_head
fi

# ---- MI300X: 8 GPUs, HIP_VISIBLE_DEVICES ----
if start_head mi300x-8.yaml; then
    probe --gpus 1 --workers 8 -- HIP_VISIBLE_DEVICES CUDA_VISIBLE_DEVICES
    check_gang "MI300X 8x1 GPU" 8 HIP_VISIBLE_DEVICES
    distinct "MI300X 8x1 GPU" HIP_VISIBLE_DEVICES 8
    n=$(grep -c ' CUDA_VISIBLE_DEVICES=<unset>$' <<<"$OUT")
    [ "$n" = 8 ] && ok "MI300X: no CUDA_VISIBLE_DEVICES (no NVIDIA device)" || fail "MI300X CUDA_VISIBLE_DEVICES: $OUT"
    stop_head
fi

# ---- DGX H100: whole GPUs with affinity, then fractions sharing one ----
wait_running() {
    local st
    for _ in $(seq 50); do
        st=$("$CORRAL" job status "$1" --json | jq -r .state); [ "$st" = RUNNING ] && return 0; sleep 0.1
    done
    return 1
}
if start_head dgx-h100.yaml; then
    probe --gpus 1 --workers 8 -- CUDA_VISIBLE_DEVICES
    check_gang "DGX 8x1 GPU" 8 CUDA_VISIBLE_DEVICES
    distinct "DGX 8x1 GPU" CUDA_VISIBLE_DEVICES 8

    # two workers of half a GPU share one
    probe --resources GPU=0.5 --workers 2 -- CUDA_VISIBLE_DEVICES
    check_gang "DGX 2x0.5 GPU" 2 CUDA_VISIBLE_DEVICES
    a=$(field "$(line_of 0)" CUDA_VISIBLE_DEVICES)
    [ -n "$a" ] && [ "$a" = "$(field "$(line_of 1)" CUDA_VISIBLE_DEVICES)" ] && [ "$(devs_of 0)" = "$(devs_of 1)" ] &&
        ok "DGX 2x0.5 GPU: both workers see the same GPU $a" || fail "DGX 2x0.5 GPU not shared: $OUT"

    # docs/scheduling.md: "Fractions go onto an already shared device they
    # fit (tightest first) before a free device is split". A half GPU, then
    # another: they share; a third half does not fit there and splits a
    # new device; two quarters then go onto that half-used one.
    dev() { "$CORRAL" job status "$1" --json | jq -r '[.workers[].devices] | unique | join(" ")'; }
    h1=$("$CORRAL" run --detach --resources GPU=0.5 -- sleep 30)
    wait_running "$h1"
    h2=$("$CORRAL" run --detach --resources GPU=0.5 -- sleep 30)
    wait_running "$h2"
    h3=$("$CORRAL" run --detach --resources GPU=0.5 -- sleep 30)
    wait_running "$h3"
    q=$("$CORRAL" run --detach --resources GPU=0.25 --workers 2 -- sleep 30)
    wait_running "$q"
    d1=$(dev "$h1") d2=$(dev "$h2") d3=$(dev "$h3") dq=$(dev "$q")
    [ -n "$d1" ] && [ "$d1" = "$d2" ] && ok "a second half GPU shares the first's GPU $d1" ||
        fail "half GPUs: job $h1 on '$d1', job $h2 on '$d2'"
    [ -n "$d3" ] && [ "$d3" != "$d1" ] && ok "a third half GPU goes to another GPU ($d3)" ||
        fail "third half GPU: on '$d3', the full one is '$d1'"
    [ "$dq" = "$d3" ] && ok "two quarters go onto the half-used GPU $d3, no free GPU split" ||
        fail "quarters on '$dq', the half-used GPU is '$d3'"
    g=$("$CORRAL" status --json | jq -c '.resources.GPU')
    [ "$(jq -r .used <<<"$g")" = 2 ] && [ "$(jq -r .free <<<"$g")" = 6 ] && ok "GPU used 2, free 6" ||
        fail "GPU accounting with fractions: $g"
    for j in "$h1" "$h2" "$h3" "$q"; do "$CORRAL" job stop "$j" --grace 500 >/dev/null || fail "stop $j"; done
    g=$("$CORRAL" status --json | jq -r '.resources.GPU.free')
    [ "$g" = 8 ] && ok "all 8 GPUs free again" || fail "GPU free after the fractions: $g"
    stop_head
fi

# ---- the same DGX with GPU 0 local to one CPU of ours only (the last):
# its worker runs there and nowhere else, where on the real spec a bound
# and an unbound worker look alike on a machine of 2 CPUs ----
last=$(tail -n 1 <<<"$MYCPUS")
if [ "$(wc -l <<<"$MYCPUS")" -ge 2 ]; then
    awk -v c="$last" '!done && /^    cpus: / { print "    cpus: \"" c "\""; done = 1; next } { print }' \
        "$SPECS/dgx-h100.yaml" >"$CORRAL_HOME/dgx-cpu$last.yaml"
    SPECS_SAVED=$SPECS SPECS=$CORRAL_HOME
    if start_head "dgx-cpu$last.yaml"; then
        [ "$(jq -r '.devices[0].cpus' <<<"$HW")" = "$last" ] || fail "the edited spec's GPU 0 is not on CPU $last"
        probe --gpus 1 --workers 8 -- CUDA_VISIBLE_DEVICES
        check_gang "DGX, GPU 0 on CPU $last" 8 CUDA_VISIBLE_DEVICES
        w=$(jq -r '.workers[] | select(.devices == "0") | .index' <<<"$JSTAT")
        got=$(field "$(line_of "$w")" cpus)
        [ "$got" = "$last" ] && ok "the worker of GPU 0 runs on CPU $last only" ||
            fail "the worker of GPU 0 (worker $w) runs on '$got', want $last"
        stop_head
    fi
    SPECS=$SPECS_SAVED
else
    echo "skip: one CPU here, a worker bound to its devices' CPUs cannot be told from an unbound one"
fi

finish
