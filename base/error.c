/* The one table of corral error codes and their messages. */
#include <corral/error.h>
#include <string.h>

const char *cr_strerror(int err)
{
    switch (err) {
#define CR__ERR_MSG(name, value, msg)                                                              \
    case value:                                                                                    \
        return msg;
        CR_ERRNO_MAP(CR__ERR_MSG)
#undef CR__ERR_MSG
    case 0:
        return "success";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

const char *cr_err_name(int err)
{
    switch (err) {
#define CR__ERR_NAME(name, value, msg)                                                             \
    case value:                                                                                    \
        return "CR_E" #name;
        CR_ERRNO_MAP(CR__ERR_NAME)
#undef CR__ERR_NAME
    case 0:
        return "OK";
    }
    return "CR_EUNKNOWN";
}
