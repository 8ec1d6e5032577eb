#!/bin/bash
# A root agent's worker is root with a trimmed bounding set; what it keeps
# would still let it write the kernel's sysctls (a core_pattern of "|PROG"
# runs PROG as full root), write sysfs, and read a disk's raw blocks through
# its device node (where the corral home and its token lie). In the
# workers' namespace /proc/sys and /sys (and every mount under them) are
# read-only, and /proc/sysrq-trigger and every disk's device node read as
# /dev/null (docs/workers.md "What a worker can reach"). What the host
# changes under a running worker is mended within the agent's next look
# (250 ms): a token file replaced by a rename (the kernel drops the
# /dev/null mount on it in other namespaces) and a filesystem mounted
# under /sys later (it arrives writable through slave propagation). Run as
# PID 1 of a private mount, PID and network namespace (lib/private_ns.sh).
set -u
. "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
. "$CORRAL_SOURCE_DIR/tests/cli/lib/join.sh"
SPEC=$CORRAL_SOURCE_DIR/specs/cpu-only.yaml
T=$(mktemp -d /tmp/guard-XXXXXX)
# a writable filesystem under /sys, in this test's namespace only
mount -t tmpfs -o size=64k tmpfs /sys/kernel/debug && mkdir /sys/kernel/debug/late &&
    touch /sys/kernel/debug/host-can || { fail "cannot mount a tmpfs on /sys/kernel/debug"; finish; }
# a disk's device node, if this machine shows one
DISK=$(find /dev -maxdepth 1 -type b 2>/dev/null | sort | head -n 1)
out=$("$CORRAL" start --head --hw-spec "$SPEC" 2>&1) || { fail "head: $out"; finish; }
H=/run/corral
TOKEN=$(realpath $H/session_latest/token)

cat >"$T/probe.sh" <<EOS
#!/bin/sh
v=\$(cat /proc/sys/kernel/core_pattern)
printf '%s\n' "\$v" >/proc/sys/kernel/core_pattern 2>/dev/null && echo "sysctl: written" || echo "sysctl: refused"
touch /sys/kernel/debug/worker-can 2>/dev/null && echo "sysfs: written" || echo "sysfs: refused"
[ ! -e /proc/sysrq-trigger ] || echo "sysrq: \$(stat -c %t:%T /proc/sysrq-trigger)"
[ -z "$DISK" ] || echo "disk: \$(stat -L -c %t:%T $DISK)"
EOS
chmod +x "$T/probe.sh"
"$CORRAL" run -- "$T/probe.sh" >"$T/probe.out" 2>&1 || fail "probe job: $(cat "$T/probe.out")"
cat "$T/probe.out"
grep -q "^sysctl: refused" "$T/probe.out" && ok "a worker cannot write /proc/sys (core_pattern)" ||
    fail "$(grep sysctl: "$T/probe.out")"
grep -q "^sysfs: refused" "$T/probe.out" && [ ! -e /sys/kernel/debug/worker-can ] &&
    ok "nor a filesystem mounted under /sys, which the host can write" ||
    fail "$(grep sysfs: "$T/probe.out")"
if [ -e /proc/sysrq-trigger ]; then
    grep -q "^sysrq: 1:3" "$T/probe.out" && ok "/proc/sysrq-trigger reads as /dev/null" ||
        fail "$(grep sysrq: "$T/probe.out")"
else
    echo "note: this kernel has no /proc/sysrq-trigger"
fi
if [ -n "$DISK" ]; then
    grep -q "^disk: 1:3" "$T/probe.out" && ok "the disk $DISK reads as /dev/null" ||
        fail "$DISK: $(grep disk: "$T/probe.out") (the host's: $(stat -c %t:%T "$DISK"))"
else
    echo "note: no block device under /dev here; the disk check is skipped"
fi

# a worker already running on a joined agent whose token file lies outside
# the home, while the host replaces that file by a rename and mounts a
# filesystem under /sys
cp "$TOKEN" "$T/cluster.token" && chmod 600 "$T/cluster.token"
join_token_file far "$T/cluster.token" "$SPEC"
cat >"$T/mend.sh" <<EOS
#!/bin/sh
echo "before: \$(wc -c <$T/cluster.token)"
touch $T/ready
while [ ! -e $T/go ]; do sleep 0.02; done
i=0
while [ \$i -lt 250 ]; do
    n=\$(wc -c <$T/cluster.token)
    if [ "\$n" = 0 ] && ! touch /sys/kernel/debug/late/worker-can 2>/dev/null; then
        echo "mended"; exit 0
    fi
    i=\$((i + 1)); sleep 0.02
done
echo "exposed: token \$n bytes, \$(ls /sys/kernel/debug/late)"
EOS
chmod +x "$T/mend.sh"
"$CORRAL" run --label-selector corral.io/node-id=far -- "$T/mend.sh" >"$T/mend.out" 2>&1 &
RUN=$!
for _ in $(seq 200); do [ -e "$T/ready" ] && break; sleep 0.05; done
[ -e "$T/ready" ] || fail "the worker on far did not start: $(cat "$T/mend.out")"
cp "$T/cluster.token" "$T/new.token" && mv "$T/new.token" "$T/cluster.token" || fail "rename"
mount -t tmpfs -o size=16k tmpfs /sys/kernel/debug/late || fail "cannot mount on /sys/kernel/debug/late"
touch "$T/go"
wait $RUN || fail "the mend job failed: $(cat "$T/mend.out")"
cat "$T/mend.out"
grep -q "^before: 0" "$T/mend.out" && grep -q "^mended" "$T/mend.out" &&
    ok "a running worker: the renamed token file and the later mount are mended" ||
    fail "a running worker after the host's changes: $(cat "$T/mend.out")"
[ ! -e /sys/kernel/debug/late/worker-can ] || fail "the worker wrote the later mount"
kill -TERM "$(cat $H/agent_far/corrald.pid)"
stop_head $H
finish
