/* Prefix affinity (docs/serve.md "Prefix affinity"): which replica a
 * prompt prefix went to, so that the next prompt sharing it goes there
 * too and finds it in that engine's prefix cache (the idea of SGLang's
 * cache-aware router and Ray Serve LLM's PrefixCacheAffinityRouter, with
 * hashed blocks instead of a radix tree of characters).
 *
 * The table is set-associative: a hash picks a set of WAYS entries; a new
 * hash takes the set's least recently used entry. Memory is fixed when it
 * is made; time is a logical tick, no clock. */
#include "serve.h"

#define WAYS 8

typedef struct entry {
    uint64_t h; /* 0: empty */
    uint64_t tick;
    uint32_t rep;
} entry_t;

struct serve_affinity {
    entry_t *e;
    size_t nsets; /* a power of two */
    size_t nrep;
    size_t *held; /* entries per replica */
    uint64_t tick;
};

serve_affinity_t *serve_affinity_new(size_t entries, size_t nreplicas)
{
    serve_affinity_t *a = cr_calloc(1, sizeof(*a));
    a->nsets = 1;
    while (a->nsets * WAYS < entries)
        a->nsets <<= 1;
    a->e = cr_calloc(a->nsets * WAYS, sizeof(*a->e));
    a->nrep = nreplicas;
    a->held = cr_calloc(nreplicas ? nreplicas : 1, sizeof(*a->held));
    return a;
}

void serve_affinity_free(serve_affinity_t *a)
{
    if (!a)
        return;
    free(a->e);
    free(a->held);
    free(a);
}

static uint64_t mix(uint64_t x)
{
    /* splitmix64's finalizer */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

size_t serve_affinity_hashes(const char *text, size_t len, uint64_t *h, size_t max)
{
    uint64_t x = 0x6a09e667f3bcc908ULL;
    size_t n = 0;
    for (size_t off = 0; off < len && n < max; off += SERVE_AFFINITY_BLOCK) {
        size_t k = len - off < SERVE_AFFINITY_BLOCK ? len - off : SERVE_AFFINITY_BLOCK;
        /* FNV-1a over the block, chained from the prefix before it; the
         * length goes in so that a short last block differs from a whole one */
        x ^= k;
        for (size_t i = 0; i < k; i++) {
            x ^= (unsigned char)text[off + i];
            x *= 0x100000001b3ULL;
        }
        x = mix(x);
        h[n++] = x ? x : 1;
    }
    return n;
}

static entry_t *find(serve_affinity_t *a, uint64_t h)
{
    entry_t *set = &a->e[(h & (a->nsets - 1)) * WAYS];
    for (size_t w = 0; w < WAYS; w++)
        if (set[w].h == h)
            return &set[w];
    return NULL;
}

long serve_affinity_match(serve_affinity_t *a, const uint64_t *h, size_t n, size_t *blocks,
                          bool (*usable)(size_t rep, void *arg), void *arg)
{
    *blocks = 0;
    for (size_t k = n; k-- > 0;) {
        entry_t *e = find(a, h[k]);
        if (e && e->rep < a->nrep && usable(e->rep, arg)) {
            e->tick = ++a->tick;
            *blocks = k + 1;
            return (long)e->rep;
        }
    }
    return -1;
}

void serve_affinity_insert(serve_affinity_t *a, const uint64_t *h, size_t n, size_t rep,
                           bool (*usable)(size_t rep, void *arg), void *arg)
{
    if (rep >= a->nrep)
        return;
    uint64_t t = ++a->tick;
    for (size_t k = 0; k < n; k++) {
        entry_t *e = find(a, h[k]);
        if (e) {
            if (e->rep != rep && !(e->rep < a->nrep && usable(e->rep, arg))) {
                a->held[e->rep]--;
                e->rep = (uint32_t)rep;
                a->held[rep]++;
            }
            e->tick = t;
            continue;
        }
        entry_t *set = &a->e[(h[k] & (a->nsets - 1)) * WAYS], *old = &set[0];
        for (size_t w = 1; w < WAYS && old->h; w++)
            if (!set[w].h || set[w].tick < old->tick)
                old = &set[w];
        if (old->h)
            a->held[old->rep]--;
        old->h = h[k];
        old->rep = (uint32_t)rep;
        old->tick = t;
        a->held[rep]++;
    }
}

void serve_affinity_forget(serve_affinity_t *a, size_t rep)
{
    if (rep >= a->nrep || a->held[rep] == 0)
        return;
    for (size_t i = 0; i < a->nsets * WAYS; i++)
        if (a->e[i].h && a->e[i].rep == rep)
            a->e[i].h = 0;
    a->held[rep] = 0;
}

size_t serve_affinity_held(const serve_affinity_t *a, size_t rep)
{
    return rep < a->nrep ? a->held[rep] : 0;
}
