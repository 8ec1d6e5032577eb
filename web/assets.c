/* The dashboard's static files, built into the binary (web/README.md
 * "Static assets"): web_assets[] is generated at build time by
 * web/embed.cmake from web/ui/ and the vendored npm files. */
#include <string.h>

#include "web.h"

const web_asset_t *web_asset_find(const char *name)
{
    for (const web_asset_t *a = web_assets; a->name; a++)
        if (strcmp(a->name, name) == 0)
            return a;
    return NULL;
}
