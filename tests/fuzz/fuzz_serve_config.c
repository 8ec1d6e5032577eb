/* libFuzzer target for the deployment file of corral serve (serve/config.c):
 * any bytes must parse or fail with a FILE:LINE:COL message; never crash,
 * leak or print. */
#include "serve/serve.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    serve_config_t *c = NULL;
    char *msg = NULL;
    int err = serve_config_parse("fuzz.yaml", (const char *)data, size, &c, &msg);
    if (err) {
        if (c || !msg || strncmp(msg, "fuzz.yaml:", 10) != 0)
            __builtin_trap();
    } else {
        if (msg || !c || !c->models.n)
            __builtin_trap();
        for (size_t i = 0; i < c->models.n; i++)
            if (serve_config_model(c, c->models.v[i].model_id) != &c->models.v[i])
                __builtin_trap();
    }
    free(msg);
    serve_config_free(c);
    return 0;
}
