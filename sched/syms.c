/* Interning: strings to dense ids, so that the scheduler compares ints. */
#include "sched.h"

static uint32_t hash_str(const char *s, size_t len)
{
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++)
        h = (h ^ (uint8_t)s[i]) * 16777619u;
    return h;
}

void sched_syms_init(sched_syms_t *s)
{
    memset(s, 0, sizeof(*s));
}

void sched_syms_fini(sched_syms_t *s)
{
    for (size_t i = 0; i < s->n; i++)
        free(s->str[i]);
    free(s->str);
    free(s->hash);
    free(s->slots);
    memset(s, 0, sizeof(*s));
}

static void rehash(sched_syms_t *s, size_t nslots)
{
    free(s->slots);
    s->slots = cr_malloc(nslots * sizeof(*s->slots));
    memset(s->slots, 0xff, nslots * sizeof(*s->slots));
    s->nslots = nslots;
    for (size_t i = 0; i < s->n; i++) {
        size_t k = s->hash[i] & (nslots - 1);
        while (s->slots[k] >= 0)
            k = (k + 1) & (nslots - 1);
        s->slots[k] = (int32_t)i;
    }
}

int sched_syms_find(const sched_syms_t *s, const char *str, size_t len)
{
    if (!s->nslots)
        return -1;
    uint32_t h = hash_str(str, len);
    for (size_t k = h & (s->nslots - 1);; k = (k + 1) & (s->nslots - 1)) {
        int32_t id = s->slots[k];
        if (id < 0)
            return -1;
        if (s->hash[id] == h && strncmp(s->str[id], str, len) == 0 && s->str[id][len] == '\0')
            return id;
    }
}

int sched_syms_intern(sched_syms_t *s, const char *str, size_t len)
{
    int id = sched_syms_find(s, str, len);
    if (id >= 0)
        return id;
    if (s->n == s->cap) {
        s->cap = s->cap ? s->cap * 2 : 16;
        s->str = cr_realloc(s->str, s->cap * sizeof(*s->str));
        s->hash = cr_realloc(s->hash, s->cap * sizeof(*s->hash));
    }
    s->str[s->n] = cr_strndup(str, len);
    s->hash[s->n] = hash_str(str, len);
    s->n++;
    /* keep the table at most half full */
    if (s->n * 2 > s->nslots)
        rehash(s, s->nslots ? s->nslots * 2 : 32);
    else {
        size_t k = s->hash[s->n - 1] & (s->nslots - 1);
        while (s->slots[k] >= 0)
            k = (k + 1) & (s->nslots - 1);
        s->slots[k] = (int32_t)(s->n - 1);
    }
    return (int)(s->n - 1);
}
