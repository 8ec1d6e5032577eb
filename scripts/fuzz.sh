#!/bin/sh
# Runs every fuzz target in BUILD_DIR for SECONDS each, starting from the
# committed seeds. A crash fails the run and leaves the input in build-fuzz/crashes/.
set -eu
dir=$1
secs=${2:-10}
src=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$dir/crashes"
n=0
for f in "$dir"/tests/fuzz/fuzz_*; do
    [ -x "$f" ] || continue
    name=$(basename "$f")
    seeds="$src/tests/fuzz/corpus/${name#fuzz_}"
    work="$dir/corpus/$name"
    mkdir -p "$work"
    [ -d "$seeds" ] && set -- "$work" "$seeds" || set -- "$work"
    echo "fuzz: $name for ${secs}s"
    CORRAL_LOG_LEVEL=error "$f" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
        -artifact_prefix="$dir/crashes/$name-" -print_final_stats=0 "$@" >"$dir/$name.log" 2>&1 || {
        echo "fuzz: $name FAILED; see $dir/$name.log"; tail -30 "$dir/$name.log"; exit 1; }
    n=$((n + 1))
done
# the Python runtime's parsers (frames, multipart payloads, object headers):
# a mutation fuzzer of its own, since libFuzzer cannot see into CPython
if [ -x /usr/bin/python3 ]; then
    echo "fuzz: python/tests/fuzz_wire.py for ${secs}s"
    /usr/bin/python3 "$src/python/tests/fuzz_wire.py" --seconds "$secs" >"$dir/fuzz_wire_py.log" 2>&1 || {
        echo "fuzz: fuzz_wire.py FAILED; see $dir/fuzz_wire_py.log"; tail -30 "$dir/fuzz_wire_py.log"; exit 1; }
    n=$((n + 1))
fi
echo "fuzz: $n targets ran clean for ${secs}s each"
