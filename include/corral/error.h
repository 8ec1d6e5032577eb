/* corral error codes: 0 is success, negative values are failures.
 * Codes are -errno where one fits, else corral's own in [-4000, -3000). */
#ifndef CORRAL_ERROR_H
#define CORRAL_ERROR_H

#include <errno.h>

/* X(name, value, message) */
#define CR_ERRNO_MAP(X)                                                                            \
    X(NOMEM, -ENOMEM, "out of memory")                                                             \
    X(INVAL, -EINVAL, "invalid argument")                                                          \
    X(NOENT, -ENOENT, "no such file or directory")                                                 \
    X(ACCES, -EACCES, "permission denied")                                                         \
    X(IO, -EIO, "input/output error")                                                              \
    X(RANGE, -ERANGE, "value out of range")                                                        \
    X(NOSYS, -ENOSYS, "not implemented by this component")                                         \
    X(EXIST, -EEXIST, "already exists")                                                            \
    X(AGAIN, -EAGAIN, "try again later")                                                           \
    X(2BIG, -E2BIG, "too large")                                                                   \
    X(NOSPC, -ENOSPC, "no space left on device")                                                   \
    X(PARSE, -3000, "malformed input")                                                             \
    X(ABI, -3001, "component ABI version mismatch")                                                \
    X(NOLIB, -3002, "vendor library not available")                                                \
    X(VENDOR, -3003, "vendor library call failed")                                                 \
    X(CRASH, -3004, "component crashed")                                                           \
    X(NODEV, -3005, "no such device")                                                              \
    X(SCHEMA, -3006, "input does not match the expected schema")                                   \
    X(INFEASIBLE, -3007, "request can never be satisfied")                                         \
    X(TASKFAILED, -3020, "the remote function failed")                                             \
    X(WORKERDIED, -3021, "the worker running it died")                                             \
    X(ACTORDIED, -3022, "the actor is dead")                                                       \
    X(CANCELLED, -3023, "the task was cancelled")

enum {
#define CR__ERR_ENUM(name, value, msg) CR_E##name = (value),
    CR_ERRNO_MAP(CR__ERR_ENUM)
#undef CR__ERR_ENUM
};

/* A static, human-readable message for an error code (never NULL). */
const char *cr_strerror(int err);
/* The symbolic name ("CR_ENOENT") of an error code (never NULL). */
const char *cr_err_name(int err);

#endif
