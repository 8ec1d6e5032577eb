/* Where the node runs: cloud provider and instance type from the DMI
 * strings firmware exposes, then what the operator states through
 * CORRAL_REGION, CORRAL_ZONE, CORRAL_RACK, CORRAL_MARKET,
 * CORRAL_INSTANCE_TYPE and CORRAL_K8S_NODE (or the downward-API NODE_NAME
 * inside Kubernetes). Backends may fill more (TPU from GCE metadata);
 * what is already set is kept. */
#include "hw.h"

static const struct dmi_row {
    const char *file;     /* under /sys/class/dmi/id */
    const char *contains; /* case-sensitive substring */
    const char *provider;
} dmi_rows[] = {
    {"product_name", "Google Compute Engine", "gcp"},
    {"sys_vendor", "Google", "gcp"},
    {"sys_vendor", "Amazon EC2", "aws"},
    {"bios_vendor", "Amazon EC2", "aws"},
    {"chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77", "azure"},
    {"sys_vendor", "Microsoft Corporation", "azure"},
    {"sys_vendor", "Oracle Corporation", "oci"},
    {"chassis_asset_tag", "OracleCloud.com", "oci"},
};

static void set_if_empty(char *dst, size_t size, const char *v)
{
    if (!dst[0] && v && *v)
        cr_strlcpy(dst, v, size);
}

#define SET(field, v) set_if_empty(p->field, sizeof(p->field), v)

void hw_platform_probe(const cr_hw_env_t *env, cr_node_t *node)
{
    cr_platform_t *p = &node->platform;
    char buf[128], path[128];
    for (size_t i = 0; i < CR_ARRAY_SIZE(dmi_rows) && !p->provider[0]; i++) {
        snprintf(path, sizeof(path), "/sys/class/dmi/id/%s", dmi_rows[i].file);
        if (cr_read_file(env->root, path, buf, sizeof(buf)) == 0 &&
            strstr(buf, dmi_rows[i].contains))
            SET(provider, dmi_rows[i].provider);
    }
    /* EC2 puts the instance type in product_name ("trn1.32xlarge") */
    if (strcmp(p->provider, "aws") == 0 &&
        cr_read_file(env->root, "/sys/class/dmi/id/product_name", buf, sizeof(buf)) == 0 &&
        strchr(buf, '.'))
        SET(instance_type, buf);
    static const struct {
        const char *var;
        size_t off, size;
    } vars[] = {
        {"CORRAL_PROVIDER", offsetof(cr_platform_t, provider), sizeof(p->provider)},
        {"CORRAL_REGION", offsetof(cr_platform_t, region), sizeof(p->region)},
        {"CORRAL_ZONE", offsetof(cr_platform_t, zone), sizeof(p->zone)},
        {"CORRAL_RACK", offsetof(cr_platform_t, rack), sizeof(p->rack)},
        {"CORRAL_MARKET", offsetof(cr_platform_t, market), sizeof(p->market)},
        {"CORRAL_INSTANCE_TYPE", offsetof(cr_platform_t, instance_type), sizeof(p->instance_type)},
        {"CORRAL_K8S_NODE", offsetof(cr_platform_t, k8s_node), sizeof(p->k8s_node)},
    };
    for (size_t i = 0; i < CR_ARRAY_SIZE(vars); i++)
        set_if_empty((char *)p + vars[i].off, vars[i].size, cr_hw_getenv(env, vars[i].var));
    if (cr_hw_getenv(env, "KUBERNETES_SERVICE_HOST"))
        SET(k8s_node, cr_hw_getenv(env, "NODE_NAME"));
    /* a zone names its region: us-east5-b is in us-east5 (GCP), us-east-1a in us-east-1 */
    if (!p->region[0] && p->zone[0]) {
        size_t n = strlen(p->zone);
        if (strcmp(p->provider, "gcp") == 0 && n > 2 && p->zone[n - 2] == '-')
            snprintf(p->region, sizeof(p->region), "%.*s", (int)(n - 2), p->zone);
        else if (strcmp(p->provider, "aws") == 0 && n > 1 && p->zone[n - 1] >= 'a' &&
                 p->zone[n - 1] <= 'z')
            snprintf(p->region, sizeof(p->region), "%.*s", (int)(n - 1), p->zone);
    }
}
