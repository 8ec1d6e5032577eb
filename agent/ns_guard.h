/* agent/ns_guard: what a root agent's worker namespace closes besides the
 * corral home (docs/workers.md "What a worker can reach").
 *
 * A worker of a root agent is root with a trimmed bounding set. The
 * capabilities it keeps still let it write the kernel's sysctls (a
 * core_pattern of "|/path" runs a program as full root) and sysfs, and
 * read a disk's raw blocks through its device node (opening a block device
 * checks only the file's mode), where the corral home and its token lie.
 * So in the workers' namespace:
 *
 *   - /proc/sys and every mount under it, /sys and every mount under it
 *     are read-only;
 *   - /proc/sysrq-trigger, every block device under /dev and every
 *     character device that passes commands through to a disk (SCSI
 *     generic, bsg, NVMe generic, MTD) read as /dev/null.
 *
 * The lists are gathered here in the agent (they allocate); applying them
 * (cr_ns_guard_apply) makes system calls only, so that it can run in a
 * child cloned with CLONE_VM, in a namespace being made or, to repair one
 * a worker already runs in, entered with setns. */
#ifndef CORRAL_AGENT_NS_GUARD_H
#define CORRAL_AGENT_NS_GUARD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct cr_ns_guard {
    char **cover; /* device nodes and files that read as /dev/null */
    size_t ncover;
    char **ro; /* mounts made read-only, parents before children */
    size_t nro;
    uint64_t generation;  /* grows whenever either list changes */
    uint64_t mounts_seen; /* grows with each change of the agent's mounts seen */
    bool mounts_watched;  /* the agent's /proc/self/mountinfo is open for POLLPRI */
    bool truncated;       /* /dev held more than the bound: the rest is not covered */
} cr_ns_guard_t;

/* The agent's guard, gathered at the first call and again when /dev or
 * the agent's mounts changed since. Returns true when the lists changed
 * (then namespaces made before need repair). */
bool cr_ns_guard_refresh(void);
const cr_ns_guard_t *cr_ns_guard(void);

/* Applies g in the calling process's mount namespace: each path of ro
 * made read-only where it is not (bound onto itself first where it is
 * not a mount of its own, as /proc/sys), each path of cover bound over
 * with /dev/null where it does not read as /dev/null already. A path that
 * does not exist is skipped. System calls only (no allocation). Returns 0,
 * or -errno with *step naming what failed. */
int cr_ns_guard_apply(const cr_ns_guard_t *g, const char **step);

/* The same for single paths: /dev/null over path unless it reads as
 * /dev/null already (0 when path does not exist). System calls only. */
int cr_ns_cover(const char *path);

#endif
