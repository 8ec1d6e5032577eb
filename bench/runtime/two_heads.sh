# Sourced by bench/runtime/kept.sh and queue.sh, which time sequential
# runs on two heads beside the posix_spawn floor, each head in a
# CORRAL_HOME of its own under BENCH_DIR (default /tmp), both stopped and
# removed on exit:
#   . "$(dirname "${BASH_SOURCE[0]}")/two_heads.sh" NAME HOME_A HOME_B
# sets SRC, BUILD (CORRAL_BUILD_DIR, default build/), CORRAL, SPAWN, base,
# TMP and homes (TMP/HOME_A, TMP/HOME_B); gives note, median, seq_of,
# head_ticks, cpu_per_run, take_turns and rate_of.
BENCH_NAME=$1
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
CORRAL="$BUILD/corral"
SPAWN="$SRC/build/bench/bench_runtime_spawn"
command -v jq >/dev/null || { echo "bench/runtime/$BENCH_NAME: needs jq (scripts/deps.sh)" >&2; exit 2; }
for f in "$CORRAL" "$BUILD/corrald" "$SPAWN"; do
    [ -x "$f" ] || { echo "bench/runtime/$BENCH_NAME: no $f; run make build first" >&2; exit 2; }
done
base="${BENCH_DIR:-/tmp}"
TMP="$(mktemp -d "$base/bench-$BENCH_NAME.XXXXXX")"
homes=("$TMP/$2" "$TMP/$3")
cleanup() {
    for h in "${homes[@]}"; do CORRAL_HOME="$h" "$CORRAL" stop >/dev/null 2>&1 || true; done
    rm -rf "$TMP"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
note() { echo "note: $*" >&2; }
median() { sort -g | awk '{a[NR]=$1} END{if(NR==0){print "NA";exit} if(NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }
seq_of() { setsid -w "$SPAWN" seq "$@"; } # prints N SECONDS PER_SECOND P50_MS
# the CPU time (user + system, in clock ticks) the head of CORRAL_HOME $1 has used
head_ticks() { awk '{print $14 + $15}' "/proc/$(cat "$1/session_latest/corrald.pid")/stat"; }
# cpu_per_run HOME TICKS N: the head's CPU since it had used TICKS, in ms a
# run of N (its retention's sweeps included: moves less with the host's
# speed than the rates do)
cpu_per_run() {
    awk -v a="$2" -v b="$(head_ticks "$1")" -v n="$3" -v hz="$(getconf CLK_TCK)" \
        'BEGIN{printf "%.3f", (b - a) * 1000 / hz / n}'
}
# take_turns [--quiet] ARGS...: ROUNDS rounds of FLOOR_N `true`s
# (TMP/floor), then SEQ `corral ARGS` on each head (TMP/HOME.r; --quiet:
# their stdout to /dev/null), each line N SECONDS PER_SECOND P50_MS; the
# heads' CPU a run in cpu (an array, A then B)
take_turns() {
    local h r t0=() q=()
    if [ "$1" = --quiet ]; then
        q=(--quiet)
        shift
    fi
    : >"$TMP/floor"
    for h in "${homes[@]}"; do
        : >"$h.r"
        t0+=("$(head_ticks "$h")")
    done
    for r in $(seq "$ROUNDS"); do
        seq_of "$FLOOR_N" --setsid /bin/true >>"$TMP/floor"
        for h in "${homes[@]}"; do CORRAL_HOME="$h" seq_of "$SEQ" "${q[@]}" "$CORRAL" "$@" >>"$h.r"; done
        note "round $r: floor $(tail -1 "$TMP/floor" | cut -d' ' -f3)/s, $(basename "${homes[0]}") $(tail -1 "${homes[0]}.r" | cut -d' ' -f3)/s, $(basename "${homes[1]}") $(tail -1 "${homes[1]}.r" | cut -d' ' -f3)/s"
    done
    cpu=("$(cpu_per_run "${homes[0]}" "${t0[0]}" $((SEQ * ROUNDS)))"
        "$(cpu_per_run "${homes[1]}" "${t0[1]}" $((SEQ * ROUNDS)))")
}
# rate_of FILE: the median PER_SECOND of seq_of's lines in FILE
rate_of() { awk '{print $3}' "$1" | median; }
