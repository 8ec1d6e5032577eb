#!/usr/bin/env bash
# Where a sequential `corral run -- true` spends its time (issue 18,
# "Requests near the socket's round trip"), beside the posix_spawn floor:
# N runs of each under `perf record` of a few tracepoints (the system
# calls clone, clone3, execve, connect and exit_group on entry, the head's
# writes, wait4 on return, and each process's exec and exit), then the
# median of each step of a run from the timestamps:
#   spawn the CLI      the spawner's clone to the CLI's exec
#   CLI start          exec to its connect (the C library's start, the
#                      session and token files, the loop)
#   handshake          connect to the head's Welcome (Hello, Challenge,
#                      Proof)
#   submit             the Welcome to the head's answer to the submit (the
#                      CLI's spec and send, the head's checks, the job's
#                      rows, the commit)
#   start              the answer to the head's clone of the worker
#   spawn the worker   clone to the worker's exec (the child's set-up in
#                      the head's memory: signals, session, namespace,
#                      descriptors, capabilities; then execve)
#   the worker         exec to exit (`true`)
#   finish             its exit to the head's write of the result (reap,
#                      the job's end, the commit)
#   CLI end            the result to the CLI's exit_group
#   spawner wakes      exit_group to the spawner's wait4 returning
# and the floor's clone, exec, exit and wait the same way. Tracing adds a
# few microseconds to each traced system call, so the steps are a little
# longer than untraced runs. Every process's writes are not traced: perf's
# own, traced, kept a CPU busy and made the worker's execve 750 us, not
# 150.
# The head's home is under BENCH_DIR (default /tmp); what creating a file
# in its logs/ costs is printed first (create_p50.py): each run makes two.
# Needs perf with tracepoints (root). Prints `figure NAME VALUE us`.
#
#   bench/runtime/timeline.sh            (N=200)
set -euo pipefail
SRC="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
BUILD="${CORRAL_BUILD_DIR:-$SRC/build}"
N="${N:-200}"
CORRAL="$BUILD/corral"
SPAWN="$SRC/build/bench/bench_runtime_spawn"
command -v perf >/dev/null || { echo "bench/runtime/timeline: needs perf" >&2; exit 2; }
perf list 2>/dev/null | grep raw_syscalls:sys_enter >/dev/null ||
    { echo "bench/runtime/timeline: perf has no raw_syscalls tracepoints here (run as root)" >&2; exit 2; }
base="${BENCH_DIR:-/tmp}"
TMP="$(mktemp -d "$base/bench-timeline.XXXXXX")"
export CORRAL_HOME="$TMP/home"
cleanup() { "$CORRAL" stop >/dev/null 2>&1 || true; rm -rf "$TMP"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir -p "$CORRAL_HOME"
"$CORRAL" start --head --hw-spec "$SRC/specs/dgx-h100.yaml" >/dev/null
HP="$(cat "$CORRAL_HOME/session_latest/corrald.pid")"
setsid -w "$SPAWN" seq 100 "$CORRAL" run -- true >/dev/null # warm
rec() { # OUT CMD...: the tracepoints of CMD, as text
    local out="$1"
    shift
    perf record -q -a -o "$out.data" -e raw_syscalls:sys_enter --filter \
        "id == 56 || id == 435 || id == 59 || id == 42 || id == 231 || (id == 1 && common_pid == $HP)" \
        -e raw_syscalls:sys_exit --filter 'id == 61' \
        -e sched:sched_process_exec -e sched:sched_process_exit -- setsid -w "$@" >/dev/null 2>&1
    perf script -i "$out.data" -F comm,pid,time,event,trace 2>/dev/null > "$out.txt"
}
python3 "$SRC/bench/runtime/create_p50.py" "$CORRAL_HOME/session_latest/logs" timeline_log_dir_file_create_p50
rec "$TMP/corral" "$SPAWN" seq "$N" "$CORRAL" run -- true
rec "$TMP/floor" "$SPAWN" seq "$N" /bin/true
python3 - "$TMP/corral.txt" "$TMP/floor.txt" "$HP" <<'PY'
import re, statistics, sys
rx = re.compile(r"^\s*(\S+)\s+(\d+)\s+([\d.]+):\s+(\S+):\s+(.*)$")

def events(path):
    for line in open(path):
        m = rx.match(line)
        if m:
            comm, pid, t, ev, rest = m.groups()
            if comm != "perf":
                yield comm, pid, float(t) * 1e6, ev, rest

def nr_args(rest):
    nr = int(rest.split()[1])
    args = rest[rest.index("(") + 1:rest.index(")")].split(", ") if "(" in rest else []
    return nr, args

head = sys.argv[3]
runs, cur = [], None
for comm, pid, t, ev, rest in events(sys.argv[1]):
    if ev == "raw_syscalls:sys_enter":
        nr, args = nr_args(rest)
        if comm.startswith("bench_runtime") and nr in (56, 435):
            cur = {"clone": t}
            runs.append(cur)
        elif cur is None:
            continue
        elif comm == "corral" and nr == 42:
            cur.setdefault("connect", t)
        elif pid == head and nr == 1 and "connect" in cur and "answer" not in cur:
            # its writes on the connection: Challenge, Welcome, the answer
            cur["writes"] = cur.get("writes", 0) + 1
            if cur["writes"] == 2:
                cur["welcome"] = t
            elif cur["writes"] == 3:
                cur["answer"] = t
        elif pid == head and nr in (56, 435) and "answer" in cur:
            cur.setdefault("wclone", t)
        elif pid == head and nr == 1 and "wexit" in cur:
            cur.setdefault("result", t)
        elif comm == "corral" and nr == 231:
            cur["cexit"] = t
    elif cur is None:
        continue
    elif ev == "sched:sched_process_exec":
        cur.setdefault("wexec" if "wclone" in cur else "exec", t)
    elif ev == "sched:sched_process_exit" and "comm=true" in rest:
        cur.setdefault("wexit", t)
    elif ev == "raw_syscalls:sys_exit" and comm.startswith("bench_runtime"):
        cur["wait"] = t
steps = [("spawn_cli", "clone", "exec"), ("cli_start", "exec", "connect"),
         ("handshake", "connect", "welcome"), ("submit", "welcome", "answer"),
         ("start", "answer", "wclone"), ("spawn_worker", "wclone", "wexec"),
         ("worker", "wexec", "wexit"), ("finish", "wexit", "result"),
         ("cli_end", "result", "cexit"), ("spawner_wakes", "cexit", "wait"),
         ("whole", "clone", "wait")]
ok = [r for r in runs if all(k in r for _, a, b in steps for k in (a, b))]
print("note: %d of %d corral runs traced whole" % (len(ok), len(runs)), file=sys.stderr)
for name, a, b in steps:
    print("figure timeline_corral_%s_p50 %.1f us" % (name, statistics.median(r[b] - r[a] for r in ok)))
fl, cur = [], None
for comm, pid, t, ev, rest in events(sys.argv[2]):
    if ev == "raw_syscalls:sys_enter" and comm.startswith("bench_runtime") and nr_args(rest)[0] in (56, 435):
        cur = {"clone": t}
        fl.append(cur)
    elif cur is None:
        continue
    elif ev == "sched:sched_process_exec":
        cur.setdefault("exec", t)
    elif ev == "sched:sched_process_exit" and "comm=true" in rest:
        cur.setdefault("exit", t)
    elif ev == "raw_syscalls:sys_exit" and comm.startswith("bench_runtime"):
        cur["wait"] = t
ok = [r for r in fl if all(k in r for k in ("clone", "exec", "exit", "wait"))]
for name, a, b in (("spawn", "clone", "exec"), ("worker", "exec", "exit"),
                   ("spawner_wakes", "exit", "wait"), ("whole", "clone", "wait")):
    print("figure timeline_floor_%s_p50 %.1f us" % (name, statistics.median(r[b] - r[a] for r in ok)))
PY
