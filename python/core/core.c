/* corral._core: the head's calls of libcorral (include/corral/corral.h) for
 * the Python runtime (python/corral/_runtime.py). A Head object wraps one
 * connection; each call releases the GIL while libcorral waits on the
 * head, and the Python side serializes calls on one Head with a lock
 * (libcorral: one thread per handle at a time). Built against the stable
 * ABI (abi3), so one build serves every CPython 3.10 and later. */
#define Py_LIMITED_API 0x030A0000
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <corral/corral.h>
#include <stdlib.h>

#include "sched/gang.h"

const char *cr_strerror(int err); /* base/, linked in */
#include <string.h>

/* A head connection. libcorral's corral_t is not thread-safe and its calls
 * run with the GIL released: one thread at a time may use a Head, close
 * included (corral/_runtime.py serializes every use under its head_lock). */
typedef struct {
    PyObject_HEAD corral_t *c;
} HeadObject;

static PyObject *CorralError; /* corral._core.Error(code, message) */

static PyObject *raise_code(int rc, const char *msg)
{
    PyObject *v = Py_BuildValue("(is)", rc, msg && *msg ? msg : cr_strerror(rc));
    if (v) {
        PyErr_SetObject(CorralError, v);
        Py_DECREF(v);
    }
    return NULL;
}

static corral_t *head_of(PyObject *self)
{
    HeadObject *h = (HeadObject *)self;
    if (!h->c)
        PyErr_SetString(PyExc_RuntimeError, "corral: this head connection is closed");
    return h->c;
}

/* A list of str to a NULL-terminated vector whose strings borrow from the
 * list's items (valid while the list lives); free() the vector only. */
static const char **str_vector(PyObject *list, const char *what)
{
    if (list == Py_None)
        return NULL;
    if (!PyList_Check(list)) {
        PyErr_Format(PyExc_TypeError, "%s: a list of str", what);
        return NULL;
    }
    Py_ssize_t n = PyList_Size(list);
    const char **v = calloc((size_t)n + 1, sizeof(*v));
    if (!v)
        return (const char **)PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        v[i] = PyUnicode_AsUTF8AndSize(PyList_GetItem(list, i), NULL);
        if (!v[i]) {
            free(v);
            return NULL;
        }
    }
    return v;
}

static const char *opt_str(PyObject *o)
{
    return o == Py_None ? NULL : PyUnicode_AsUTF8AndSize(o, NULL);
}

static PyObject *head_submit(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"argv",         "env",
                             "resources",    "name",
                             "cwd",          "selector",
                             "strategy",     "placement_group",
                             "bundle_index", "restart",
                             "max_restarts", "bound",
                             "env_whole",    "wait_for_nodes",
                             "backoff_ms",   NULL};
    PyObject *argv_l, *env_l = Py_None, *res = Py_None, *name = Py_None, *cwd = Py_None,
                      *sel = Py_None, *strategy = Py_None, *pg = Py_None;
    int bundle = -1, restart = 0, max_restarts = 0, bound = 1, whole = 1, wfn = 0;
    unsigned backoff = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOOOOOiiiiiiI", kwlist, &argv_l, &env_l, &res,
                                     &name, &cwd, &sel, &strategy, &pg, &bundle, &restart,
                                     &max_restarts, &bound, &whole, &wfn, &backoff))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    corral_job_spec_t spec = {0};
    const char **argv = str_vector(argv_l, "argv");
    if (!argv)
        return PyErr_Occurred() ? NULL : raise_code(CR_EINVAL, "argv is empty");
    const char **env = str_vector(env_l, "env");
    if (!env && PyErr_Occurred()) {
        free(argv);
        return NULL;
    }
    spec.argv = argv;
    spec.env = env;
    spec.resources = opt_str(res);
    spec.name = opt_str(name);
    spec.cwd = opt_str(cwd);
    spec.selector = opt_str(sel);
    spec.placement_group = opt_str(pg);
    if (bundle >= 0) {
        spec.has_bundle = 1;
        spec.bundle_index = (unsigned)bundle;
    }
    spec.num_workers = 1;
    spec.restart = restart ? CORRAL_RESTART_WORKER : CORRAL_RESTART_NONE;
    spec.max_restarts = (unsigned)max_restarts;
    spec.backoff_ms = backoff;
    spec.bound = bound;
    spec.env_whole = whole;
    spec.wait_for_nodes = wfn;
    int rc = 0;
    if (strategy != Py_None) {
        const char *s = opt_str(strategy);
        rc = s ? corral_strategy_parse(s, &spec.strategy) : -1;
        if (rc < 0 && !PyErr_Occurred()) {
            free(argv), free(env);
            return raise_code(CR_EINVAL,
                              "unknown strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)");
        }
    }
    if (PyErr_Occurred()) {
        free(argv), free(env);
        return NULL;
    }
    char *id = NULL;
    Py_BEGIN_ALLOW_THREADS rc = corral_submit(c, &spec, &id);
    Py_END_ALLOW_THREADS free(argv);
    free(env);
    if (rc < 0)
        return raise_code(rc, corral_errmsg(c));
    PyObject *r = PyUnicode_FromString(id);
    free(id);
    return r;
}

static PyObject *job_dict(const corral_job_t *j)
{
    PyObject *ws = PyList_New(0);
    if (!ws)
        return NULL;
    for (size_t i = 0; i < j->nworkers; i++) {
        const corral_worker_t *w = &j->workers[i];
        PyObject *d = Py_BuildValue("{s:s,s:i,s:s,s:s,s:i,s:i,s:s,s:I,s:s}", "state", w->state,
                                    "pid", w->pid, "node", w->node_id, "devices", w->devices,
                                    "exit_code", w->exit_code, "signal", w->signal, "reason",
                                    w->reason, "attempt", w->attempt, "worker_id", w->worker_id);
        if (!d || PyList_Append(ws, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(ws);
            return NULL;
        }
        Py_DECREF(d);
    }
    PyObject *r = Py_BuildValue(
        "{s:s,s:z,s:z,s:s,s:z,s:i,s:I,s:N,s:z}", "job_id", j->job_id, "name", j->name, "command",
        j->command, "state", corral_job_state_name(j->state), "reason", j->reason, "exit_code",
        j->exit_code, "restarts", j->restarts, "workers", ws, "parent_job", j->parent_job);
    return r;
}

static PyObject *head_status(PyObject *self, PyObject *args)
{
    const char *id;
    int wait_ms = 0;
    if (!PyArg_ParseTuple(args, "s|i", &id, &wait_ms))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    corral_job_t j = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc =
        wait_ms ? corral_wait(c, id, wait_ms, &j) : corral_job_status(c, id, &j);
    Py_END_ALLOW_THREADS if (rc == CR_EAGAIN && wait_ms)
    {
        rc = corral_job_status(c, id, &j);
    }
    if (rc < 0)
        return raise_code(rc, corral_errmsg(c));
    PyObject *r = job_dict(&j);
    corral_job_free(&j);
    return r;
}

static PyObject *head_stop(PyObject *self, PyObject *args)
{
    const char *id;
    unsigned grace = 0;
    if (!PyArg_ParseTuple(args, "s|I", &id, &grace))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_stop(c, id, grace);
    Py_END_ALLOW_THREADS if (rc < 0) return raise_code(rc, corral_errmsg(c));
    Py_RETURN_NONE;
}

static PyObject *pg_dict(const corral_pg_t *g)
{
    PyObject *bs = PyList_New(0);
    if (!bs)
        return NULL;
    for (size_t i = 0; i < g->nbundles; i++) {
        const corral_bundle_t *b = &g->bundles[i];
        PyObject *d = Py_BuildValue("{s:s,s:s,s:O,s:s,s:s}", "resources", b->resources, "selector",
                                    b->selector, "placed", b->placed ? Py_True : Py_False, "node",
                                    b->node_id, "devices", b->devices);
        if (!d || PyList_Append(bs, d) < 0) {
            Py_XDECREF(d);
            Py_DECREF(bs);
            return NULL;
        }
        Py_DECREF(d);
    }
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:N}", "pg_id", g->pg_id, "name", g->name, "state",
                         g->state, "reason", g->reason, "strategy",
                         corral_strategy_name(g->strategy), "bundles", bs);
}

static PyObject *head_pg_create(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"bundles", "strategy", "name",  "selector",
                             "domain",  "wait",     "bound", NULL};
    PyObject *bl, *strategy = Py_None, *name = Py_None, *sel = Py_None, *dom = Py_None;
    int wait = 0, bound = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|OOOOii", kwlist, &bl, &strategy, &name, &sel,
                                     &dom, &wait, &bound))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    if (!PyList_Check(bl) || PyList_Size(bl) < 1) {
        PyErr_SetString(PyExc_ValueError, "bundles: a non-empty list of (resources, selector)");
        return NULL;
    }
    Py_ssize_t n = PyList_Size(bl);
    corral_bundle_spec_t *b = calloc((size_t)n, sizeof(*b));
    if (!b)
        return PyErr_NoMemory();
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GetItem(bl, i);
        PyObject *r = PyTuple_Check(t) && PyTuple_Size(t) == 2 ? PyTuple_GetItem(t, 0) : NULL;
        PyObject *s = r ? PyTuple_GetItem(t, 1) : NULL;
        if (!r || !(b[i].resources = PyUnicode_AsUTF8AndSize(r, NULL))) {
            free(b);
            if (!PyErr_Occurred())
                PyErr_SetString(PyExc_ValueError, "each bundle: (resources, selector or None)");
            return NULL;
        }
        b[i].selector = opt_str(s);
    }
    corral_pg_spec_t spec = {.bundles = b, .nbundles = (size_t)n, .wait = wait};
    spec.name = opt_str(name);
    spec.selector = opt_str(sel);
    spec.domain = opt_str(dom);
    spec.bound = bound ? CORRAL_PG_BOUND_ALWAYS : CORRAL_PG_BOUND_NONE;
    if (strategy != Py_None) {
        const char *s = opt_str(strategy);
        if (!s || corral_strategy_parse(s, &spec.strategy) < 0) {
            free(b);
            if (!PyErr_Occurred())
                raise_code(CR_EINVAL,
                           "unknown strategy (PACK, SPREAD, STRICT_PACK, STRICT_SPREAD)");
            return NULL;
        }
    }
    if (PyErr_Occurred()) {
        free(b);
        return NULL;
    }
    corral_pg_t g = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_pg_create(c, &spec, &g);
    Py_END_ALLOW_THREADS free(b);
    if (rc < 0)
        return raise_code(rc, corral_errmsg(c));
    PyObject *r = pg_dict(&g);
    corral_pg_free(&g);
    return r;
}

static PyObject *head_pg_get(PyObject *self, PyObject *args)
{
    const char *id;
    if (!PyArg_ParseTuple(args, "s", &id))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    corral_pg_t *v = NULL;
    size_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_pg_list(c, &v, &n);
    Py_END_ALLOW_THREADS if (rc < 0) return raise_code(rc, corral_errmsg(c));
    PyObject *r = NULL;
    for (size_t i = 0; i < n && !r; i++)
        if (!strcmp(v[i].pg_id, id) || !strcmp(v[i].name, id))
            r = pg_dict(&v[i]);
    corral_pg_list_free(v, n);
    if (!r && !PyErr_Occurred())
        return raise_code(CR_ENOENT, "no such placement group");
    return r;
}

static PyObject *head_pg_remove(PyObject *self, PyObject *args)
{
    const char *id;
    if (!PyArg_ParseTuple(args, "s", &id))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_pg_remove(c, id);
    Py_END_ALLOW_THREADS if (rc < 0) return raise_code(rc, corral_errmsg(c));
    Py_RETURN_NONE;
}

static PyObject *head_cluster(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    corral_status_t s = {0};
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_status(c, &s);
    Py_END_ALLOW_THREADS if (rc < 0) return raise_code(rc, corral_errmsg(c));
    PyObject *nodes = PyList_New(0);
    for (size_t i = 0; nodes && i < s.nnodes; i++) {
        const corral_node_t *n = &s.nodes[i];
        PyObject *total = PyDict_New(), *avail = PyDict_New(), *labels = PyList_New(0);
        for (size_t k = 0; total && avail && k < n->nres; k++) {
            PyObject *t = PyFloat_FromDouble(n->res[k].total),
                     *f = PyFloat_FromDouble(n->res[k].free);
            PyDict_SetItemString(total, n->res[k].name, t);
            PyDict_SetItemString(avail, n->res[k].name, f);
            Py_XDECREF(t), Py_XDECREF(f);
        }
        for (size_t k = 0; labels && k < n->nlabels; k++) {
            PyObject *l = PyUnicode_FromString(n->labels[k]);
            PyList_Append(labels, l);
            Py_XDECREF(l);
        }
        PyObject *d =
            Py_BuildValue("{s:s,s:s,s:s,s:N,s:N,s:N}", "node_id", n->node_id, "state", n->state,
                          "address", n->address, "total", total, "free", avail, "labels", labels);
        if (!d || PyList_Append(nodes, d) < 0)
            Py_CLEAR(nodes);
        Py_XDECREF(d);
    }
    corral_status_free(&s);
    return nodes;
}

/* The jobs not yet final, every page: [(job_id, name)]. The runtime finds
 * named actors by their lease job's name (docs/actors.md "Named actors").
 * jobs(True): the running and placing ones only (a worker may connect
 * before the head has its agent's word that it started), which is what
 * the owner's monitor asks each second about its connected workers' jobs:
 * a deep queue of pending jobs is not read again and again. */
static PyObject *head_jobs(PyObject *self, PyObject *args)
{
    int running_only = 0;
    if (!PyArg_ParseTuple(args, "|p", &running_only))
        return NULL;
    corral_t *c = head_of(self);
    if (!c)
        return NULL;
    static const corral_job_state_t live[] = {CORRAL_JOB_RUNNING, CORRAL_JOB_PLACING,
                                              CORRAL_JOB_PENDING};
    size_t nlive = running_only ? 2 : 3;
    PyObject *out = PyList_New(0);
    if (!out)
        return NULL;
    char *token = NULL;
    do {
        corral_page_t page = {.limit = 0, .continue_token = token};
        corral_job_t *v = NULL;
        size_t n = 0;
        int rc;
        Py_BEGIN_ALLOW_THREADS rc = corral_job_list_page(c, live, nlive, &page, &v, &n);
        Py_END_ALLOW_THREADS free(token);
        token = NULL;
        if (rc < 0) {
            Py_DECREF(out);
            return raise_code(rc, corral_errmsg(c));
        }
        for (size_t i = 0; i < n; i++) {
            PyObject *t = Py_BuildValue("(ss)", v[i].job_id, v[i].name ? v[i].name : "");
            if (!t || PyList_Append(out, t) < 0) {
                Py_XDECREF(t);
                corral_job_list_free(v, n);
                free(page.next_token);
                Py_DECREF(out);
                return NULL;
            }
            Py_DECREF(t);
        }
        corral_job_list_free(v, n);
        token = page.next_token;
    } while (token);
    return out;
}

static PyObject *head_close(PyObject *self, PyObject *noargs)
{
    (void)noargs;
    HeadObject *h = (HeadObject *)self;
    corral_disconnect(h->c);
    h->c = NULL;
    Py_RETURN_NONE;
}

static void head_dealloc(PyObject *self)
{
    HeadObject *h = (HeadObject *)self;
    corral_disconnect(h->c);
    PyTypeObject *tp = Py_TYPE(self);
    freefunc f = (freefunc)PyType_GetSlot(tp, Py_tp_free);
    f(self);
    Py_DECREF(tp);
}

static PyMethodDef head_methods[] = {
    {"submit", (PyCFunction)(void (*)(void))head_submit, METH_VARARGS | METH_KEYWORDS,
     "submit a one-worker job; returns its id"},
    {"status", head_status, METH_VARARGS, "status(job_id, wait_ms=0) -> dict"},
    {"stop", head_stop, METH_VARARGS, "stop(job_id, grace_ms=0)"},
    {"pg_create", (PyCFunction)(void (*)(void))head_pg_create, METH_VARARGS | METH_KEYWORDS,
     "create a placement group -> dict"},
    {"pg_get", head_pg_get, METH_VARARGS, "pg_get(id_or_name) -> dict"},
    {"pg_remove", head_pg_remove, METH_VARARGS, "pg_remove(id_or_name)"},
    {"cluster", head_cluster, METH_NOARGS, "the nodes: list of dict"},
    {"jobs", head_jobs, METH_VARARGS,
     "the jobs not yet final (jobs(True): the running ones): list of (job_id, name)"},
    {"close", head_close, METH_NOARGS, "close the connection"},
    {NULL, NULL, 0, NULL},
};

static PyType_Slot head_slots[] = {
    {Py_tp_dealloc, head_dealloc},
    {Py_tp_methods, head_methods},
    {Py_tp_doc, "a connection to a corral head"},
    {0, NULL},
};

static PyType_Spec head_spec = {"corral._core.Head", sizeof(HeadObject), 0, Py_TPFLAGS_DEFAULT,
                                head_slots};
static PyObject *HeadType;

static PyObject *core_connect(PyObject *mod, PyObject *args)
{
    (void)mod;
    const char *address = NULL, *token = NULL;
    if (!PyArg_ParseTuple(args, "|zz", &address, &token))
        return NULL;
    corral_t *c = NULL;
    char *why = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS rc = corral_connect(address, token, &c, &why);
    Py_END_ALLOW_THREADS if (rc < 0)
    {
        raise_code(rc, why);
        free(why);
        return NULL;
    }
    free(why);
    PyObject *o = PyType_GenericNew((PyTypeObject *)HeadType, NULL, NULL);
    if (!o) {
        corral_disconnect(c);
        return NULL;
    }
    ((HeadObject *)o)->c = c;
    return o;
}

/* gang_env(slots, run_id, master_port, jax_port, restart_count,
 * max_restarts, tpu, topology, job_env) -> (order, [env dict per rank]):
 * corral train's rank order and per-rank variables (sched/gang.c, the
 * code the head runs for a gang) for a gang the caller placed itself, as
 * corral.train.TorchTrainer does with its actors. slots: one (node key,
 * address, slice worker id or -1, first device index or -1, devices) per
 * worker; order[r] is the slot that gets rank r. */
static PyObject *core_gang_env(PyObject *mod, PyObject *args, PyObject *kw)
{
    (void)mod;
    static char *kwlist[] = {"slots",        "run_id", "master_port", "jax_port", "restart_count",
                             "max_restarts", "tpu",    "topology",    "job_env",  NULL};
    PyObject *slots, *job_env = NULL;
    const char *run_id, *topo = NULL;
    unsigned mport, jport;
    int restarts, max_restarts, tpu;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "OsIIiip|zO", kwlist, &slots, &run_id, &mport,
                                     &jport, &restarts, &max_restarts, &tpu, &topo, &job_env))
        return NULL;
    PyObject *seq = PySequence_List(slots); /* a list of (node, address, ...) tuples */
    if (!seq)
        return NULL;
    Py_ssize_t n = PyList_Size(seq);
    if (n < 1 || n > 100000) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_ValueError, "gang_env: 1 to 100000 slots");
        return NULL;
    }
    sched_gang_slot_t *s = calloc((size_t)n, sizeof(*s));
    sched_gang_slot_t *ranked = calloc((size_t)n, sizeof(*ranked));
    int *order = calloc((size_t)n, sizeof(*order));
    cr_envlist_t job = {0};
    PyObject *out = NULL, *envs = NULL, *ord = NULL;
    if (!s || !ranked || !order) {
        PyErr_NoMemory();
        goto out_free;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *t = PyList_GetItem(seq, i); /* borrowed; seq keeps it */
        if (!PyArg_ParseTuple(t,
                              "isiii;gang_env: a slot is (node, address, slice worker, "
                              "first device, devices)",
                              &s[i].node, &s[i].addr, &s[i].slice_worker, &s[i].first_dev,
                              &s[i].ndevs))
            goto out_free;
    }
    if (job_env && job_env != Py_None) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        if (!PyDict_Check(job_env)) {
            PyErr_SetString(PyExc_TypeError, "gang_env: job_env is a dict of str -> str");
            goto out_free;
        }
        while (PyDict_Next(job_env, &pos, &k, &v)) {
            const char *ks = PyUnicode_AsUTF8AndSize(k, NULL),
                       *vs = PyUnicode_AsUTF8AndSize(v, NULL);
            if (!ks || !vs)
                goto out_free;
            if (cr_envlist_set(&job, ks, vs) < 0) {
                PyErr_NoMemory();
                goto out_free;
            }
        }
    }
    sched_gang_order(s, (int)n, order);
    for (Py_ssize_t r = 0; r < n; r++)
        ranked[r] = s[order[r]];
    sched_gang_t g = {.slots = ranked,
                      .n = (int)n,
                      .run_id = run_id,
                      .master_port = mport,
                      .jax_port = jport,
                      .restart_count = restarts,
                      .max_restarts = max_restarts,
                      .job_env = &job,
                      .tpu = tpu != 0,
                      .tpu_topology = topo};
    envs = PyList_New(0);
    ord = PyList_New(0);
    if (!envs || !ord)
        goto out_free;
    for (Py_ssize_t r = 0; r < n; r++) {
        PyObject *o = PyLong_FromLong(order[r]);
        int bad = !o || PyList_Append(ord, o) < 0;
        Py_XDECREF(o);
        if (bad)
            goto out_free;
        cr_envlist_t e = {0};
        int rc = sched_gang_env(&g, (int)r, &e);
        PyObject *d = rc < 0 ? NULL : PyDict_New();
        for (size_t i = 0; d && i < e.vars.n; i++) {
            PyObject *v = PyUnicode_FromString(e.vars.v[i].value);
            if (!v || PyDict_SetItemString(d, e.vars.v[i].key, v) < 0)
                Py_CLEAR(d);
            Py_XDECREF(v);
        }
        cr_envlist_free(&e);
        if (rc < 0) {
            raise_code(rc, "gang_env: the rank variables do not fit");
            goto out_free;
        }
        bad = !d || PyList_Append(envs, d) < 0;
        Py_XDECREF(d);
        if (bad)
            goto out_free;
    }
    out = Py_BuildValue("(OO)", ord, envs);
out_free:
    Py_XDECREF(ord);
    Py_XDECREF(envs);
    cr_envlist_free(&job);
    free(order);
    free(ranked);
    free(s);
    Py_DECREF(seq);
    return out;
}

static PyMethodDef core_methods[] = {
    {"connect", core_connect, METH_VARARGS, "connect(address=None, token_file=None) -> Head"},
    {"gang_env", (PyCFunction)(void (*)(void))core_gang_env, METH_VARARGS | METH_KEYWORDS,
     "gang_env(slots, run_id, master_port, jax_port, restart_count, max_restarts, tpu, "
     "topology=None, job_env=None) -> (order, [env per rank]): corral train's rank variables"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {PyModuleDef_HEAD_INIT,
                                         "corral._core",
                                         "libcorral's head calls for corral's runtime",
                                         -1,
                                         core_methods,
                                         NULL,
                                         NULL,
                                         NULL,
                                         NULL};

PyMODINIT_FUNC PyInit__core(void)
{
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    HeadType = PyType_FromSpec(&head_spec);
    CorralError = PyErr_NewException("corral._core.Error", PyExc_RuntimeError, NULL);
    if (!HeadType || !CorralError || PyModule_AddObject(m, "Error", CorralError) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    Py_INCREF(CorralError);
    Py_INCREF(HeadType);
    PyModule_AddObject(m, "Head", HeadType);
    return m;
}
