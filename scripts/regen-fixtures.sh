#!/bin/sh
# Regenerates tests/fixtures/hw/<machine>/expected.json from what corral
# discovers on each recorded machine, and specs/<name>.yaml from that.
# Run after a deliberate change to discovery, then review `git diff`:
# these files are the golden truth tests/unit/test_fixtures.c checks.
set -eu
src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-$src/build}
corral=$build/corral
spec_name() {
    case $1 in
    pcie-a100) echo pcie-a100-nvlink-pairs ;;
    *) echo "$1" ;;
    esac
}
for dir in "$src"/tests/fixtures/hw/*/; do
    m=$(basename "$dir")
    [ -f "$dir/host.json" ] || continue
    (
        eval "$("$src/scripts/fixture-env.sh" "$m" "$build")"
        "$corral" hw --json >"$dir/expected.json.tmp"
    )
    mv "$dir/expected.json.tmp" "$dir/expected.json"
    # dgx-h100-mig has no spec of its own; gb200-tray's are written below
    if [ "$m" != "dgx-h100-mig" ] && [ "$m" != "gb200-tray" ]; then
        (cd "$src" && python3 scripts/spec-from-node.py "tests/fixtures/hw/$m/expected.json" \
            -o "specs/$(spec_name "$m").yaml")
    fi
    echo "regenerated $m"
done
# the 18 trays of one GB200 NVL72 rack, from the gb200-tray fixture
python3 "$src/scripts/nvl72-rack.py"
echo "regenerated specs/gb200-nvl72"
