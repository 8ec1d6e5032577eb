# Sourced first by the tests that play another user against corral
# (tests/cli/session_trust.sh, tests/cli/adopt_trust.sh):
#   . "$CORRAL_SOURCE_DIR/tests/cli/lib/private_ns.sh" "$0" "$@"
# re-runs the test as PID 1 of a private mount, PID and network namespace
# (only its own loopback), with a fresh tmpfs on /tmp and on /run, so that
# the host's /tmp, /run and network are never touched and every process
# the test starts ends with it. Another
# user is a bare uid (no passwd entry needed): as_user UID CMD... runs CMD
# with that uid and gid and no supplementary groups. Needs root, unshare
# setpriv and ip; exits 77 (skipped) without them.
if [ -z "${CORRAL_PRIVATE_NS:-}" ]; then
    if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null || ! command -v setpriv >/dev/null ||
        ! command -v ip >/dev/null || ! unshare --mount --pid --net --fork --mount-proc true 2>/dev/null; then
        echo "skip: needs root, unshare (mount, PID and network namespaces), setpriv and ip"
        exit 77
    fi
    CORRAL_PRIVATE_NS=1 exec unshare --mount --pid --net --fork --mount-proc --propagation private \
        bash "$@"
fi
ip link set lo up || { echo "FAIL: cannot bring up the namespace's loopback"; exit 1; }
# The tree and the build may live under /tmp or /run (a CI clone, say):
# the old mounts stay reachable at /mnt/tmp and /mnt/run (this namespace's
# mounts only) and those folders are bound back where they were.
keep=""
for d in "${CORRAL_SOURCE_DIR:-}" "${CORRAL_BUILD_DIR:-}"; do
    case "$d" in /tmp/* | /run/*) keep="$keep $(cd "$d" && pwd -P)" ;; esac
done
if [ -n "$keep" ]; then
    mount -t tmpfs -o mode=0700 tmpfs /mnt && mkdir /mnt/tmp /mnt/run &&
        mount --bind /tmp /mnt/tmp && mount --bind /run /mnt/run ||
        { echo "FAIL: cannot keep the tree's folders under /tmp or /run"; exit 1; }
fi
mount -t tmpfs -o mode=1777 tmpfs /tmp || { echo "FAIL: cannot mount a tmpfs on /tmp"; exit 1; }
mount -t tmpfs -o mode=0755 tmpfs /run || { echo "FAIL: cannot mount a tmpfs on /run"; exit 1; }
for d in $keep; do
    mkdir -p "$d" && mount --bind "/mnt$d" "$d" || { echo "FAIL: cannot bind $d back"; exit 1; }
done
unset CORRAL_HOME XDG_RUNTIME_DIR CORRAL_ADDRESS CORRAL_TOKEN_FILE
as_user() {
    local uid=$1
    shift
    setpriv --reuid="$uid" --regid="$uid" --clear-groups env HOME=/tmp "$@"
}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
ok() { echo "ok: $*"; }
gone() { [ ! -e /proc/$1 ] || [ "$(awk '{print $3}' /proc/$1/stat 2>/dev/null)" = Z ]; }
# Stops the head of the session session_latest names in home $1, by its pid.
stop_head() {
    local pid
    pid=$(cat "$1/session_latest/corrald.pid" 2>/dev/null) || return 0
    kill -TERM "$pid" 2>/dev/null
    for _ in $(seq 50); do gone "$pid" && return 0; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null
}
finish() {
    echo "$(basename "$0"): $([ $fails -eq 0 ] && echo "all passed" || echo "$fails failure(s)")"
    exit $((fails > 0))
}
