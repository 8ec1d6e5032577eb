#!/usr/bin/env bash
# Train start-up benchmark (issue 6, "Performance"): wall time from the
# launch command to every rank past init_process_group, for N ranks of
# examples/train/init_only.py (corral.train.torch.init_process_group, gloo
# on CPU) under /usr/bin/python3 with Debian's python3-torch:
#   floor     the N ranks started directly from this script with the
#             variables corral train sets (MASTER_ADDR/PORT, RANK, ...);
#   torchrun  torchrun --standalone --nproc_per_node=N --redirects 2 --tee 2
#             (Debian 12's torchrun needs those two under Python 3.11), with
#             its default --monitor_interval (5 s) and with 0.1 s;
#   corral    corral train --workers N -- /usr/bin/python3 init_only.py, only
#             when `corral train --help` exits 0 (the hook below), against a
#             head started as in bench/runtime/run.sh.
# Each rank writes its wall-clock time just past init to a stamp file
# (INIT_ONLY_STAMP_DIR); "start" is the latest stamp minus bash's
# $EPOCHREALTIME just before the launch, "total" the launcher's exit.
# Medians over RUNS rounds (the launchers taking turns) after one warm-up
# round. Prints `figure NAME VALUE UNIT` and `ratio NAME VALUE` lines
# (ratio: the first named over the second); notes go to stderr.
#
#   bench/train/run.sh                   (make bench-train)
#   RUNS=5 NS="2 4 8" bench/train/run.sh
#   TORCHRUN=0 RUNS=5 bench/train/run.sh   (the floor and corral only: no torchrun)
# Last, store_connect.py: how long a rank waits for rank 0's store once it
# listens, torch's own connect against corral's probe (medians, worst).
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
RUNS="${RUNS:-3}"
NS="${NS:-2 4 8}"
PY=/usr/bin/python3
CORRAL="$BUILD/corral"
SCRIPT="$SRC/examples/train/init_only.py"
export PYTHONPATH="$SRC/python${PYTHONPATH:+:$PYTHONPATH}"
if ! "$PY" -c 'import torch.distributed' >/dev/null 2>&1; then
    echo "note: bench/train skipped: $PY has no torch (apt-get install -y python3-torch)" >&2
    exit 0
fi
command -v torchrun >/dev/null || { echo "note: bench/train skipped: no torchrun (python3-torch installs it)" >&2; exit 0; }

TMP="$(mktemp -d /tmp/bench-train.XXXXXX)"
export CORRAL_HOME="$TMP/home"
head_up=0
cleanup() {
    if [ "$head_up" = 1 ]; then "$CORRAL" stop >/dev/null 2>&1 || true; fi
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
# ms from T0 ($EPOCHREALTIME) to the latest stamp ("S NS") in DIR; fails unless N stamps
latest_ms() {
    local t0="$1" dir="$2" n="$3"
    [ "$(ls "$dir" | wc -l)" = "$n" ] || { echo "bench/train: $(ls "$dir" | wc -l) of $n ranks stamped in $dir" >&2; return 1; }
    cat "$dir"/* | awk -v t0="$t0" 'BEGIN{split(t0,a,"."); s0=a[1]; us0=a[2]+0}
        {ms=($1-s0)*1000 + $2/1e6 - us0/1e3; if(NR==1||ms>m) m=ms} END{printf "%.1f\n", m}'
}
since_ms() { awk -v a="$1" -v b="$EPOCHREALTIME" 'BEGIN{printf "%.1f\n", (b-a)*1000}'; }
ratio() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN{if(b>0) printf "ratio %s %.2f\n", n, a/b}'; }
free_port() { "$PY" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# the floor: N ranks from this shell, the variables set as corral train sets
# them, each rank in a session of its own as corral's workers are (with the
# kernel's autogroup scheduling a session is a CPU-share unit: on a loaded
# machine ranks sharing this shell's session got a fraction of the CPU
# corral's got, and the floor took 2x to 3x corral's time)
floor() {
    local n="$1" port r pids=""
    port=$(free_port)
    for ((r = 0; r < n; r++)); do
        MASTER_ADDR=127.0.0.1 MASTER_PORT=$port RANK=$r WORLD_SIZE=$n LOCAL_RANK=$r \
            LOCAL_WORLD_SIZE=$n NODE_RANK=0 GROUP_RANK=0 CORRAL_RESTART_COUNT=0 \
            setsid -w "$PY" "$SCRIPT" >/dev/null &
        pids="$pids $!"
    done
    # shellcheck disable=SC2086
    wait $pids
}
torchrun_n() {
    local n="$1"; shift
    (cd "$TMP" && torchrun --standalone --nproc_per_node="$n" --redirects 2 --tee 2 "$@" "$SCRIPT" >/dev/null 2>&1)
}

# the corral hook: runs only once `corral train` exists
have_corral=0
if [ -x "$CORRAL" ] && "$CORRAL" train --help >/dev/null 2>&1; then
    have_corral=1
    mkdir -p "$CORRAL_HOME"
    "$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" >&2
    head_up=1
else
    note "corral train is not there yet ($CORRAL train --help failed): corral figures pending"
fi
corral_n() {
    "$CORRAL" train --workers "$1" --env "INIT_ONLY_STAMP_DIR=$INIT_ONLY_STAMP_DIR" \
        --env "PYTHONPATH=$PYTHONPATH" -- "$PY" "$SCRIPT" >/dev/null
}

note "$(nproc) CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')), load $(cut -d' ' -f1-3 /proc/loadavg); torch $("$PY" -c 'import torch; print(torch.__version__)'); RUNS=$RUNS NS=$NS"
KINDS="floor torchrun torchrun_mi01"
[ "${TORCHRUN:-1}" = 0 ] && KINDS="floor"   # TORCHRUN=0: only the floor and corral
[ "$have_corral" = 1 ] && KINDS="$KINDS corral"
run_kind() {   # KIND N -> appends "start total" to $TMP/KIND.N
    local kind="$1" n="$2" d t0 total
    d="$TMP/stamps"; rm -rf "$d"; mkdir "$d"
    export INIT_ONLY_STAMP_DIR="$d"
    t0=$EPOCHREALTIME
    case "$kind" in
        floor) floor "$n" ;;
        torchrun) torchrun_n "$n" ;;
        torchrun_mi01) torchrun_n "$n" --monitor_interval 0.1 ;;
        corral) corral_n "$n" ;;
    esac
    total=$(since_ms "$t0")
    echo "$(latest_ms "$t0" "$d" "$n") $total" >> "$TMP/$kind.$n"
}
for n in $NS; do
    for kind in $KINDS; do run_kind "$kind" "$n"; done   # warm-up round
    for kind in $KINDS; do : > "$TMP/$kind.$n"; done
    for _ in $(seq "$RUNS"); do
        for kind in $KINDS; do run_kind "$kind" "$n"; done
    done
    for kind in $KINDS; do
        echo "figure train_start_${kind}_$n $(awk '{print $1}' "$TMP/$kind.$n" | median) ms"
        echo "figure train_total_${kind}_$n $(awk '{print $2}' "$TMP/$kind.$n" | median) ms"
    done
    f=$(awk '{print $1}' "$TMP/floor.$n" | median)
    if [ "${TORCHRUN:-1}" != 0 ]; then
        ratio "train_start_torchrun_${n}_vs_floor" "$(awk '{print $1}' "$TMP/torchrun.$n" | median)" "$f"
        ratio "train_start_torchrun_mi01_${n}_vs_floor" "$(awk '{print $1}' "$TMP/torchrun_mi01.$n" | median)" "$f"
    fi
    if [ "$have_corral" = 1 ]; then
        # --- corral hook: the goal is corral within 0.2 s of the floor ---
        c=$(awk '{print $1}' "$TMP/corral.$n" | median)
        ratio "train_${n}_vs_floor" "$c" "$f"
        echo "figure train_start_corral_over_floor_$n $(awk -v a="$c" -v b="$f" 'BEGIN{printf "%.1f", a-b}') ms"
        # the goal holds in every run: the worst round (corral against the
        # floor of the same round; the launchers take turns)
        echo "figure train_start_corral_over_floor_worst_$n $(paste -d' ' "$TMP/corral.$n" "$TMP/floor.$n" |
            awk '{d=$1-$3; if(NR==1||d>m) m=d} END{printf "%.1f", m}') ms"
    fi
done
# --- gang restart after a failure: rank 1 fails just past init; from its
# exit to every rank past init again, against the floor's start-up of the
# same N (goal: under 1 s plus the script's own start)
if [ "$have_corral" = 1 ]; then
    for n in $NS; do
        : > "$TMP/restart.$n"
        for _ in $(seq "$RUNS"); do
            d="$TMP/stamps"; rm -rf "$d"; mkdir "$d"
            "$CORRAL" train --workers "$n" --max-failures 1 --env "INIT_ONLY_STAMP_DIR=$d" \
                --env INIT_ONLY_FAIL_RANK=1 --env "PYTHONPATH=$PYTHONPATH" -- "$PY" "$SCRIPT" >/dev/null 2>&1 ||
                { note "corral train with a failure did not succeed (n=$n)"; continue; }
            read -r fs fns < "$d/fail"
            rm "$d/fail"
            cat "$d"/* | awk -v s0="$fs" -v ns0="$fns" \
                '{ms=($1-s0)*1000 + ($2-ns0)/1e6; if(NR==1||ms>m) m=ms} END{printf "%.1f\n", m}' >> "$TMP/restart.$n"
        done
        r=$(median < "$TMP/restart.$n")
        f=$(awk '{print $1}' "$TMP/floor.$n" | median)
        echo "figure train_restart_corral_$n $r ms"
        echo "figure train_restart_corral_over_floor_start_$n $(awk -v a="$r" -v b="$f" 'BEGIN{printf "%.1f", a-b}') ms"
        echo "figure train_restart_corral_over_floor_start_worst_$n $(awk -v b="$f" '{d=$1-b; if(NR==1||d>m) m=d} END{printf "%.1f", m}' "$TMP/restart.$n") ms"
    done
else
    note "gang restart time after a failure: pending corral train"
fi

# --- rank 0's store, listening, to a rank connected: torch's client alone
# (it sleeps 1 s after a refused connect) against corral's probe first
# (corral.train.torch.init_process_group), same delays (store_connect.py)
"$PY" "$SRC/bench/train/store_connect.py" "$RUNS" 2>/dev/null || note "store_connect.py failed"
