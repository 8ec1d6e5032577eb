/* hw: discovery of a node's accelerators and host topology (internal API).
 * Pure library: reads files under a root prefix and the environment through
 * an injected getter; starts no daemons, opens no sockets. */
#ifndef CORRAL_HW_H
#define CORRAL_HW_H

#include <corral/accel.h>
#include <jansson.h>
#include "base/base.h"

/* ---- the node description ---- */
cr_node_t *hw_node_new(void);
void hw_node_free(cr_node_t *node);
/* Moves everything src holds into dst, renumbering src's devices after
 * dst's; src is left empty (free it with hw_node_free). */
void hw_node_merge(cr_node_t *dst, cr_node_t *src);
void hw_domain_fini(cr_domain_t *d);
int hw_device_find(const cr_node_t *node, const char *backend, int vendor_index);
const cr_link_t *hw_node_find_link(const cr_node_t *node, int a, int b);
const char *hw_health_name(cr_health_t h);
/* A reading with every field unknown (-1, health UNKNOWN), what a
 * telemetry op is given (<corral/accel.h> cr_telemetry_t). */
void hw_telemetry_init(cr_telemetry_t *t);
int hw_health_parse(const char *s, cr_health_t *out);
const char *hw_link_kind_name(cr_link_kind_t k);
int hw_link_kind_parse(const char *s, cr_link_kind_t *out);
/* Sorts labels by key, for stable output. */
void hw_node_sort_labels(cr_node_t *node);

/* ---- JSON (the documented schema, docs/node-description.md) ---- */
json_t *hw_node_to_json(const cr_node_t *node);
/* Where a JSON document did not match the schema: the path of the value
 * ("devices[3].memory") and what was expected there. */
typedef struct hw_json_error {
    char path[256];
    char msg[512];
} hw_json_error_t;
/* What a JSON value is, in a person's words ("a mapping", "a list", ...). */
const char *hw_json_kind(const json_t *j);
/* Fills an empty node from JSON. On failure returns CR_ESCHEMA and fills err. */
int hw_node_from_json(const json_t *j, cr_node_t *node, hw_json_error_t *err);

/* ---- backends ---- */
extern const cr_accel_component_t hw_backend_nvidia, hw_backend_amd, hw_backend_intel,
    hw_backend_tpu, hw_backend_neuron, hw_backend_gaudi, hw_backend_sim;
/* Whether the nvidia backend may find anything (backend_nvidia.c): the
 * registry skips its isolated probe, and the fork, when not. */
bool hw_nvidia_present(const cr_hw_env_t *env);
/* Checks a component against the ABI; returns 0 or CR_EABI / CR_EINVAL
 * with why in msg. */
int hw_component_validate(const cr_accel_component_t *c, char *msg, size_t msgsize);
/* Loads external backends from CORRAL_PLUGIN_PATH (directories or .so
 * files, ':'-separated), once. Refused ones are logged and skipped. */
void hw_plugins_load(const cr_hw_env_t *env);
/* All components, built-in and loaded, by priority (highest first). */
size_t hw_components(const cr_accel_component_t *const **out);
const cr_accel_component_t *hw_component_find(const char *name);

/* ---- discovery ---- */
typedef struct hw_options {
    const char *root;                                   /* NULL or "/" for the real machine */
    const char *(*getenv)(void *ctx, const char *name); /* NULL: getenv(3) */
    void *getenv_ctx;
    const char *spec_path; /* a hardware spec: simulated node, no probing */
    bool no_host;          /* skip hwloc (tests of one backend) */
    bool no_plugins;
} hw_options_t;

/* Discovers this node (or the fixture under root, or the spec). Backend
 * failures become warnings in node->warnings; only a bad spec or an
 * unusable root fails the whole call. *errmsg (malloc'ed) says why. */
int hw_discover(const hw_options_t *opts, cr_node_t **out, char **errmsg);
/* The environment backends read through for these options: the root
 * (opts, else CORRAL_SYSFS_ROOT, else "/") and the getenv. Telemetry
 * (web/devices.c) reads the node it was discovered from this way. */
void hw_env_from_opts(const hw_options_t *opts, cr_hw_env_t *env);
/* The vendors' rules on which devices one process may hold together: a
 * MIG instance alone; where the node has "module-set" domains (Gaudi),
 * more than one of their devices only as exactly one set. CR_EINVAL with
 * *why (malloc'ed) saying which rule; devs are valid and distinct. */
int hw_isolate_rules(const cr_node_t *node, const int *devs, size_t ndevs, char **why);
/* The GCE metadata server's instance attributes keys[0..n) into values
 * (malloc'ed, trimmed; NULL when it has none), as the tpu backend reads
 * them: only on a GCE VM (the DMI product name under env->root says
 * "Google"), never with CORRAL_GCE_METADATA=off, at the A.B.C.D:PORT it
 * names when it names one, and within budget_ms for all of them (the
 * probe itself allows 300). 0; CR_ENODEV when the server is not to be
 * asked; CR_EIO when it stopped answering (the values read before are
 * kept). */
int hw_gce_attributes(const cr_hw_env_t *env, const char *const *keys, char **values, size_t n,
                      int budget_ms);
/* Environment for a worker given devices devs (node indices); refuses
 * what hw_isolate_rules refuses. */
int hw_isolate(const hw_options_t *opts, const cr_node_t *node, const int *devs, size_t ndevs,
               cr_envlist_t *out, char **errmsg);
/* Runs one component's probe into a fresh node, in a child process when
 * the component asks for it; the node comes back whole or not at all. On
 * failure why says what happened ("it crashed during its probe (signal 11:
 * Segmentation fault)"). */
int hw_probe_component(const cr_accel_component_t *c, const cr_hw_env_t *env, cr_node_t **out,
                       char *why, size_t whysize);

/* ---- where the node runs (hw/platform.c) ---- */
/* Fills node->platform from DMI strings under env->root and the operator's
 * CORRAL_PROVIDER/REGION/ZONE/RACK/MARKET/INSTANCE_TYPE/K8S_NODE; keeps
 * what is already set. */
void hw_platform_probe(const cr_hw_env_t *env, cr_node_t *node);

/* ---- host topology through hwloc (hw/host.c) ---- */
/* Fills CPU, NUMA, memory and NICs, and each device's NUMA node, local
 * cpus, PCI path and nearest NIC. */
int hw_host_probe(const cr_hw_env_t *env, cr_node_t *node);

/* ---- topology queries (hw/topo.c) ---- */
/* How devices a and b are connected: the fastest link kind between them
 * and its count (NV18: CR_LINK_NVSWITCH, 18). */
cr_link_kind_t hw_topo_pair(const cr_node_t *node, int a, int b, int *count);

/* ---- accelerator types (hw/sku.c) ---- */
/* The canonical types a name stands for: itself when canonical, the type
 * of an alias (Ray's "AMD-Instinct-MI300X-OAM" is MI300X), the types of a
 * family alias (Ray's "Intel-GAUDI": Gaudi, Gaudi2, Gaudi3). Returns how
 * many went into out (0: an unknown name); the strings live on. */
size_t hw_sku_expand(const char *name, const char **out, size_t max);
/* The one canonical type of name, or NULL (unknown, or a family). */
const char *hw_sku_canonical(const char *name);
/* The SKU directory: $CORRAL_SKU_DIR, else $CORRAL_CONF/skus.d, else
 * /etc/corral/skus.d (buf holds the composed path). */
const char *hw_skus_dir(const cr_hw_env_t *env, char *buf, size_t size);
/* (Re)loads the SKU files (*.yaml, *.yml, *.json) of that directory, in
 * name order, replacing rows loaded before; their rows are consulted
 * before the built-in ones. A file that does not validate adds nothing
 * and becomes a warning (on warn_to, else the log) that says
 * FILE:LINE:COL and what to fix; returns its error, 0 when all loaded.
 * *nrows (may be NULL): the rows loaded. */
int hw_skus_load(const cr_hw_env_t *env, cr_node_t *warn_to, size_t *nrows);
/* Validates one SKU file's text without loading it (tests, fuzzing). */
int hw_skus_check_buffer(const char *name, const char *data, size_t len, size_t *nrows,
                         char **errmsg);

/* "80Gi", "512MiB", "1.5T" or a plain number of bytes. */
int hw_parse_size(const char *s, uint64_t *out);

/* ---- YAML or JSON files checked against a schema (hw/spec.c) ---- */
/* Checks a parsed document (NULL when empty); on a mismatch fills je with
 * the path of the bad value and what was expected there. */
typedef int (*hw_yaml_check_fn)(const json_t *root, void *ctx, hw_json_error_t *je);
/* Parses YAML (or JSON, by a .json name) and runs check; on failure
 * returns a negative code and *errmsg says "FILE:LINE:COL: path: what". */
int hw_yaml_check_buffer(const char *name, const char *what, const char *data, size_t len,
                         hw_yaml_check_fn check, void *ctx, char **errmsg);
int hw_yaml_check_file(const char *path, const char *what, hw_yaml_check_fn check, void *ctx,
                       char **errmsg);

/* ---- the spec loader (sim backend, hw/spec.c) ---- */
/* Loads a YAML or JSON hardware spec into node. On failure returns a
 * negative code and *errmsg says "FILE:LINE:COL: what was expected". */
int hw_spec_load(const char *path, cr_node_t *node, char **errmsg);
int hw_spec_load_buffer(const char *name, const char *data, size_t len, cr_node_t *node,
                        char **errmsg);

#endif
