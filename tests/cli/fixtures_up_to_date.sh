#!/usr/bin/env bash
# The committed hwloc.xml, etc/hostname and NIC speeds of every fixture
# machine are what tests/fixtures/hw/mkhost.py generates from its host.json.
set -euo pipefail
: "${CORRAL_SOURCE_DIR:?}"
python3 "$CORRAL_SOURCE_DIR/tests/fixtures/hw/mkhost.py" --check
# and the check can fail: a stale copy of one machine is caught
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/hw/cpu-only"
cp "$CORRAL_SOURCE_DIR/tests/fixtures/hw/mkhost.py" "$tmp/hw/"
cp -r "$CORRAL_SOURCE_DIR/tests/fixtures/hw/cpu-only/." "$tmp/hw/cpu-only/"
python3 "$tmp/hw/mkhost.py" --check cpu-only
sed -i 's/"64GiB"/"32GiB"/' "$tmp/hw/cpu-only/host.json"
if python3 "$tmp/hw/mkhost.py" --check cpu-only 2>"$tmp/err"; then
    echo "mkhost.py --check passed a stale hwloc.xml" >&2
    exit 1
fi
grep -q "cpu-only/hwloc.xml differs" "$tmp/err"
echo "fixtures up to date"
