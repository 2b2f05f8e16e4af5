/* dispatch.c — engine names, knob strings and the tuned-table loader
 * (see dispatch.h). */
#include "kernels/dispatch.h"

#include "config/config.h"
#include "config/replacefile.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const eng_names[PJ_ENG_COUNT] = {"gemv", "gemvz", "splitk", "router", "cublas"};

const char *pj_eng_name(pj_eng_kind k)
{
    return (unsigned)k < PJ_ENG_COUNT ? eng_names[k] : "unknown";
}

int pj_eng_from_name(const char *name)
{
    for (int i = 0; i < PJ_ENG_COUNT; i++)
        if (name && strcmp(name, eng_names[i]) == 0)
            return i;
    return -1;
}

/* One row per knob: its name, where it lives, its largest legal value and the
 * engines that read it (bit mask). */
typedef struct knob_def {
    const char *name;
    size_t off;
    unsigned max; /* above 255: the knob is a uint16_t */
    unsigned engines;
    int quiet; /* written out only when not 0 (cuBLAS's explicit configuration) */
} knob_def;

#define EB(k) (1u << (k))
static const knob_def knob_defs[] = {
    {"nw", offsetof(pj_eng_knobs, nw), 16, EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER),
     0},
    {"ks", offsetof(pj_eng_knobs, ks), 64,
     EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER) | EB(PJ_ENG_SPLITK), 0},
    {"u", offsetof(pj_eng_knobs, u), 8, EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER), 0},
    {"pipe", offsetof(pj_eng_knobs, pipe), 7,
     EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER) | EB(PJ_ENG_SPLITK), 0},
    {"minb", offsetof(pj_eng_knobs, minb), 1, EB(PJ_ENG_GEMV) | EB(PJ_ENG_ROUTER), 0},
    {"xs", offsetof(pj_eng_knobs, xs), 4, EB(PJ_ENG_GEMVZ), 0},
    {"r", offsetof(pj_eng_knobs, r), 4, EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER), 0},
    {"tile", offsetof(pj_eng_knobs, tile), 15, EB(PJ_ENG_SPLITK) | EB(PJ_ENG_ROUTER), 0},
    {"algo", offsetof(pj_eng_knobs, algo), PJ_ENG_CUBLAS_MAX_ALGO, EB(PJ_ENG_CUBLAS), 0},
    {"rb", offsetof(pj_eng_knobs, rb), 4, EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ), 0},
    {"cl", offsetof(pj_eng_knobs, cl), 1,
     EB(PJ_ENG_GEMV) | EB(PJ_ENG_GEMVZ) | EB(PJ_ENG_ROUTER) | EB(PJ_ENG_SPLITK), 0},
    {"ts", offsetof(pj_eng_knobs, ts), 16, EB(PJ_ENG_GEMVZ), 0},
    {"st", offsetof(pj_eng_knobs, st), 8, EB(PJ_ENG_GEMVZ), 0},
    {"lt", offsetof(pj_eng_knobs, lt), 1, EB(PJ_ENG_CUBLAS), 1},
    {"lid", offsetof(pj_eng_knobs, lid), 255, EB(PJ_ENG_CUBLAS), 1},
    {"ltile", offsetof(pj_eng_knobs, ltile), 65535, EB(PJ_ENG_CUBLAS), 1},
    {"lst", offsetof(pj_eng_knobs, lst), 255, EB(PJ_ENG_CUBLAS), 1},
    {"lsk", offsetof(pj_eng_knobs, lsk), 16, EB(PJ_ENG_CUBLAS), 1},
    {"lcu", offsetof(pj_eng_knobs, lcu), 255, EB(PJ_ENG_CUBLAS), 1},
    {"lcl", offsetof(pj_eng_knobs, lcl), 255, EB(PJ_ENG_CUBLAS), 1},
    {"lsw", offsetof(pj_eng_knobs, lsw), 1, EB(PJ_ENG_CUBLAS), 1},
};
#define N_KNOBS (sizeof knob_defs / sizeof knob_defs[0])

static unsigned knob_get(const pj_eng_knobs *kn, const knob_def *d)
{
    const char *p = (const char *)kn + d->off;
    if (d->max > 255) {
        uint16_t v;
        memcpy(&v, p, sizeof v);
        return v;
    }
    return *(const uint8_t *)p;
}

static void knob_set(pj_eng_knobs *kn, const knob_def *d, unsigned v)
{
    char *p = (char *)kn + d->off;
    if (d->max > 255) {
        const uint16_t w = (uint16_t)v;
        memcpy(p, &w, sizeof w);
    } else
        *(uint8_t *)p = (uint8_t)v;
}

void pj_eng_knobs_str(pj_eng_kind k, const pj_eng_knobs *kn, char *buf, size_t len)
{
    size_t used = 0;
    if (len)
        buf[0] = 0;
    for (size_t i = 0; i < N_KNOBS; i++) {
        const knob_def *d = &knob_defs[i];
        unsigned v = knob_get(kn, d);
        if (!(d->engines & EB(k)) || (d->quiet && !v))
            continue;
        int w = snprintf(buf + used, used < len ? len - used : 0, "%s%s=%u", used ? "," : "",
                         d->name, v);
        if (w < 0)
            return;
        used += (size_t)w;
    }
}

pj_eng_knobs pj_tune_entry_knobs(const pj_tune_entry *e, uint32_t m)
{
    pj_eng_knobs kn = e->knobs;
    if (e->eng != PJ_ENG_CUBLAS || e->m == m)
        return kn;
    if (kn.lt) {
        kn.lt = kn.lid = kn.lst = kn.lsk = kn.lcu = kn.lcl = kn.lsw = 0;
        kn.ltile = 0;
    }
    if (kn.algo >= 2)
        kn.algo = 0;
    return kn;
}

/* A cuBLASLt configuration's knobs (lid .. lsw) name one only with lt = 1;
 * without it the engine never reads them, and a table or a forced knob
 * string that sets them would say what does not run. 0, or -EINVAL with
 * the first of them named. */
static int lt_knobs_check(const pj_eng_knobs *kn, char *why, size_t whylen)
{
    if (kn->lt)
        return 0;
    for (size_t i = 0; i < N_KNOBS; i++) {
        const knob_def *d = &knob_defs[i];
        if (d->quiet && d->off != offsetof(pj_eng_knobs, lt) && knob_get(kn, d)) {
            snprintf(why, whylen, "%s=%u names a cuBLASLt configuration: it needs lt=1", d->name,
                     knob_get(kn, d));
            return -EINVAL;
        }
    }
    return 0;
}

/* Text from the file as a message shows it: printable, one line, cut. */
#define SHOWN_MAX 200
static const char *shown_max(const char *s, size_t max, char *buf)
{
    size_t len = 0;
    buf[0] = '\0';
    pj_append_escaped(buf, SHOWN_MAX, &len, s, max);
    return buf;
}

static const char *shown(const char *s, char *buf)
{
    return shown_max(s, 40, buf);
}

int pj_eng_knobs_parse(const char *s, int eng, pj_eng_knobs *kn, char *err, size_t errlen)
{
    pj_eng_knobs tmp = *kn;
    uint32_t seen = 0; /* by index in knob_defs: a knob named twice is refused */
    const char *p = s;
    char ss[SHOWN_MAX]; /* s as messages show it */
    while (p && *p) {
        const char *eq = strchr(p, '=');
        const char *end = strchr(p, ',');
        if (!end)
            end = p + strlen(p);
        if (end == p || (*end == ',' && !end[1])) {
            snprintf(err, errlen, "knobs \"%s\": an empty item (two commas, or one at an end)",
                     shown_max(s, 96, ss));
            return -EINVAL;
        }
        if (!eq || eq > end) {
            char at[SHOWN_MAX], item[64];
            snprintf(item, sizeof item, "%.*s", (int)(end - p), p);
            snprintf(err, errlen, "knobs \"%s\": expected name=value at \"%s\"",
                     shown_max(s, 96, ss), shown(item, at));
            return -EINVAL;
        }
        const knob_def *d = NULL;
        size_t di = 0;
        for (size_t i = 0; i < N_KNOBS; i++)
            if (strlen(knob_defs[i].name) == (size_t)(eq - p) &&
                strncmp(knob_defs[i].name, p, (size_t)(eq - p)) == 0) {
                d = &knob_defs[i];
                di = i;
            }
        if (!d) {
            char at[SHOWN_MAX], item[64];
            snprintf(item, sizeof item, "%.*s", (int)(eq - p), p);
            snprintf(err, errlen, "knobs \"%s\": unknown knob \"%s\"", shown_max(s, 96, ss),
                     shown(item, at));
            return -EINVAL;
        }
        /* A knob the engine never reads would be accepted and ignored:
         * the run would not be what the string says. */
        if (eng >= 0 && !(d->engines & EB(eng))) {
            snprintf(err, errlen, "knobs \"%s\": engine %s has no knob \"%s\"",
                     shown_max(s, 96, ss), pj_eng_name((pj_eng_kind)eng), d->name);
            return -EINVAL;
        }
        if (seen & (1u << di)) {
            snprintf(err, errlen, "knobs \"%s\": %s is given twice", shown_max(s, 96, ss), d->name);
            return -EINVAL;
        }
        seen |= 1u << di;
        char *stop;
        /* strtoul takes leading blanks and a sign ("nw= +8", "u=-1"). */
        unsigned long v = isdigit((unsigned char)eq[1]) ? strtoul(eq + 1, &stop, 10) : 0;
        if (!isdigit((unsigned char)eq[1]) || stop != end || v > d->max) {
            snprintf(err, errlen, "knobs \"%s\": %s expects an integer in 0..%u",
                     shown_max(s, 96, ss), d->name, d->max);
            return -EINVAL;
        }
        knob_set(&tmp, d, (unsigned)v);
        p = *end ? end + 1 : end;
    }
    char why[160];
    if (lt_knobs_check(&tmp, why, sizeof why)) {
        snprintf(err, errlen, "knobs \"%s\": %s", shown_max(s, 96, ss), why);
        return -EINVAL;
    }
    *kn = tmp;
    return 0;
}

static void emit(pj_tune_msg_fn msg, void *ctx, const char *text)
{
    if (msg)
        msg(ctx, text);
}

/* A layer name as the config allows one ([A-Za-z0-9_.-]): an entry of any
 * other name could never serve a layer. */
static int is_layer_name(const char *s)
{
    if (!*s)
        return 0;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '_' && *s != '.' && *s != '-')
            return 0;
    return 1;
}

/* An informational time, if given: a number of microseconds under 1e9 in
 * magnitude (a float holds it; 1e39 would not). */
static int get_time(const cJSON *v, float *out)
{
    /* null is what the writer makes of a time that is not finite (a
     * baseline that never ran): no time, as when the key is left out. */
    if (!v || cJSON_IsNull(v))
        return 0;
    if (!cJSON_IsNumber(v) || !(fabs(v->valuedouble) < 1e9))
        return -EINVAL;
    /* The bound holds for the float too, so what is written back loads. */
    float f = (float)v->valuedouble;
    if (!(fabsf(f) < 1e9f))
        return -EINVAL;
    *out = f;
    return 0;
}

/* One entry from JSON; 0 or -EINVAL with why. */
/* A key of obj that is not in names (NULL-terminated), or one given twice:
 * cJSON keeps both and its lookups take the first, so a repeated or
 * misspelt key would go unseen. NULL when every key is known and single. */
static const char *odd_key(const cJSON *obj, const char *const *names, int *twice)
{
    for (const cJSON *a = obj->child; a; a = a->next) {
        int known = 0;
        for (size_t i = 0; names && names[i] && !known; i++)
            known = strcmp(a->string, names[i]) == 0;
        *twice = 0;
        for (const cJSON *b = obj->child; b != a && !*twice; b = b->next)
            *twice = strcmp(a->string, b->string) == 0;
        if ((names && !known) || *twice)
            return a->string;
    }
    return NULL;
}

/* Keys of obj. odd_key's repeat check is quadratic in them: an object
 * with a hundred thousand (a stray vocab.json among the tables) would hold
 * the start for minutes, so the table and a knobs object are bounded
 * first (an entry's scan stops at its first unknown key). */
static size_t n_keys(const cJSON *obj)
{
    size_t n = 0;
    for (const cJSON *a = obj->child; a; a = a->next)
        n++;
    return n;
}

#define MAX_TABLE_KEYS 64
/* A file of a million bad entries says the first ones and a count, not a
 * million lines in the journal. */
#define MAX_REJECTS_SAID 32
#define MAX_KNOB_KEYS    64

static int parse_entry(const cJSON *je, pj_tune_entry *e, char *why, size_t whylen)
{
    memset(e, 0, sizeof *e);
    static const char *const entry_keys[] = {"layer",  "n",     "k",  "rows",    "m",
                                             "engine", "knobs", "us", "base_us", NULL};
    int twice;
    const char *odd = odd_key(je, entry_keys, &twice);
    char sh[SHOWN_MAX];
    if (odd) {
        snprintf(why, whylen, "%s key \"%s\" (an entry has %s)", twice ? "repeated" : "unknown",
                 shown(odd, sh), "layer, n, k, rows, m, engine, knobs, us, base_us");
        return -EINVAL;
    }
    const cJSON *layer = cJSON_GetObjectItemCaseSensitive(je, "layer");
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(je, "m");
    const cJSON *eng = cJSON_GetObjectItemCaseSensitive(je, "engine");
    if (!cJSON_IsString(layer) || !is_layer_name(layer->valuestring) ||
        strlen(layer->valuestring) >= PJ_TUNE_NAME) {
        snprintf(why, whylen,
                 "\"layer\" must be a layer name: 1..%d characters from [A-Za-z0-9_.-]",
                 PJ_TUNE_NAME - 1);
        return -EINVAL;
    }
    snprintf(e->layer, sizeof e->layer, "%s", layer->valuestring);
    if (!cJSON_IsNumber(m) || m->valuedouble < 1 || m->valuedouble > 65536 ||
        m->valuedouble != (double)(uint32_t)m->valuedouble) {
        snprintf(why, whylen, "%s: \"m\" must be an integer in 1..65536", e->layer);
        return -EINVAL;
    }
    e->m = (uint32_t)m->valuedouble;
    int k = cJSON_IsString(eng) ? pj_eng_from_name(eng->valuestring) : -1;
    if (k < 0) {
        snprintf(why, whylen, "%s m=%u: unknown engine %s%s%s", e->layer, e->m,
                 cJSON_IsString(eng) ? "\"" : "",
                 cJSON_IsString(eng) ? shown(eng->valuestring, sh) : "(none)",
                 cJSON_IsString(eng) ? "\"" : "");
        return -EINVAL;
    }
    e->eng = (pj_eng_kind)k;
    static const char *const dims[] = {"n", "k", "rows"};
    uint32_t *dst[] = {&e->n, &e->k, &e->rows};
    for (int i = 0; i < 3; i++) {
        const cJSON *d = cJSON_GetObjectItemCaseSensitive(je, dims[i]);
        if (!d)
            continue;
        if (!cJSON_IsNumber(d) || d->valuedouble < 0 || d->valuedouble > 4294967295.0 ||
            d->valuedouble != (double)(uint32_t)d->valuedouble) {
            snprintf(why, whylen, "%s m=%u: \"%s\" must be a non-negative integer", e->layer, e->m,
                     dims[i]);
            return -EINVAL;
        }
        *dst[i] = (uint32_t)d->valuedouble;
    }
    if (e->rows && e->n && e->rows > e->n) {
        snprintf(why, whylen,
                 "%s m=%u: \"rows\" %u is more than the layer's n %u (a row prefix "
                 "of it is at most n)",
                 e->layer, e->m, e->rows, e->n);
        return -EINVAL;
    }
    const cJSON *us = cJSON_GetObjectItemCaseSensitive(je, "us");
    const cJSON *bus = cJSON_GetObjectItemCaseSensitive(je, "base_us");
    if (get_time(us, &e->us) || get_time(bus, &e->base_us)) {
        snprintf(why, whylen, "%s m=%u: \"%s\" must be a time in microseconds, |t| < 1e9", e->layer,
                 e->m, get_time(us, &e->us) ? "us" : "base_us");
        return -EINVAL;
    }
    const cJSON *kn = cJSON_GetObjectItemCaseSensitive(je, "knobs");
    if (kn && !cJSON_IsObject(kn)) {
        snprintf(why, whylen, "%s m=%u: \"knobs\" must be an object", e->layer, e->m);
        return -EINVAL;
    }
    if (kn && n_keys(kn) > MAX_KNOB_KEYS) {
        snprintf(why, whylen, "%s m=%u: \"knobs\" has %zu keys; no engine has more than %d knobs",
                 e->layer, e->m, n_keys(kn), MAX_KNOB_KEYS);
        return -EINVAL;
    }
    if (kn && (odd = odd_key(kn, NULL, &twice)) != NULL) {
        snprintf(why, whylen, "%s m=%u: knob \"%s\" is given twice", e->layer, e->m,
                 shown(odd, sh));
        return -EINVAL;
    }
    const cJSON *it;
    cJSON_ArrayForEach(it, kn)
    {
        const knob_def *d = NULL;
        for (size_t i = 0; i < N_KNOBS; i++)
            if (strcmp(knob_defs[i].name, it->string) == 0)
                d = &knob_defs[i];
        if (!d || !(d->engines & EB(e->eng))) {
            snprintf(why, whylen, "%s m=%u: engine %s has no knob \"%s\"", e->layer, e->m,
                     pj_eng_name(e->eng), shown(it->string, sh));
            return -EINVAL;
        }
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > d->max ||
            it->valuedouble != (double)(unsigned)it->valuedouble) {
            snprintf(why, whylen, "%s m=%u: knob %s must be an integer in 0..%u", e->layer, e->m,
                     d->name, d->max);
            return -EINVAL;
        }
        knob_set(&e->knobs, d, (unsigned)it->valuedouble);
    }
    /* gemvz pipe = 4 is the balanced GEMV, which reads none of the ring
     * form's knobs: an entry that sets them says what does not run. (Not
     * in the engine's check: forced knobs lie over defaults that set xs.) */
    if (e->eng == PJ_ENG_GEMVZ && e->knobs.pipe == 4 &&
        (e->knobs.cl || e->knobs.xs || e->knobs.ts || e->knobs.st)) {
        snprintf(why, whylen,
                 "%s m=%u: gemvz pipe=4 (the balanced GEMV) reads none of cl, xs, ts, st", e->layer,
                 e->m);
        return -EINVAL;
    }
    char lwhy[160];
    if (lt_knobs_check(&e->knobs, lwhy, sizeof lwhy)) {
        snprintf(why, whylen, "%s m=%u: %s", e->layer, e->m, lwhy);
        return -EINVAL;
    }
    return 0;
}

/* The entry that e would duplicate: same layer, shape and m, or -1. The
 * shape is part of the key because one table may cover several models
 * whose layers share names (tables are per GPU); pj_dispatch_choose keeps
 * those apart by shape too. */
/* What makes two entries the same one: the layer, its shape and m. */
typedef struct tune_key {
    char layer[PJ_TUNE_NAME];
    uint32_t n, k, m;
} tune_key;

static int same_key(const char *layer, uint32_t n, uint32_t k, uint32_t m, const pj_tune_entry *e)
{
    return m == e->m && n == e->n && k == e->k && strcmp(layer, e->layer) == 0;
}

static int find_same(const pj_tune_table *t, const pj_tune_entry *e)
{
    for (uint32_t i = 0; i < t->n; i++)
        if (same_key(t->e[i].layer, t->e[i].n, t->e[i].k, t->e[i].m, e))
            return (int)i;
    return -1;
}

static int seen_before(const tune_key *keys, int nkeys, const pj_tune_entry *e)
{
    for (int i = 0; i < nkeys; i++)
        if (same_key(keys[i].layer, keys[i].n, keys[i].k, keys[i].m, e))
            return 1;
    return 0;
}

int pj_tune_parse(const char *json, size_t len, pj_tune_table *t, pj_tune_check_fn check,
                  void *check_ctx, pj_tune_msg_fn msg, void *msg_ctx, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    /* What cJSON would misread: a name cut at its NUL ("nw\u0000x" read as
     * the knob nw) and bytes JSON does not allow. A NUL outside the strings
     * ends the text, as it would for a C string. */
    long at = pj_json_nul_escape(json, len);
    if (at >= 0) {
        snprintf(err, errlen, "tuning table: a string holds %s at byte %ld; no name has one",
                 json[at] == '\0' ? "a NUL byte" : "\\u0000", at);
        return -EINVAL;
    }
    len = strnlen(json, len);
    char what[96];
    if ((at = pj_json_strict(json, len, 0, what, sizeof what)) >= 0) {
        snprintf(err, errlen, "tuning table: %s at byte %ld", what, at);
        return -EINVAL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!root) {
        snprintf(err, errlen, "tuning table: not valid JSON near byte %ld",
                 cJSON_GetErrorPtr() ? (long)(cJSON_GetErrorPtr() - json) : -1L);
        return -EINVAL;
    }
    int rc = 0;
    /* cJSON stops after the first value; anything but white space after it
     * (two tables concatenated into one file) would be dropped unseen.
     * A NUL ends the text as it would for a C string. */
    while (end && end < json + len && (*end == ' ' || *end == '\t' || *end == '\n' || *end == '\r'))
        end++;
    if (end && end < json + len && *end != 0) {
        snprintf(err, errlen, "tuning table: unexpected text after the table at byte %ld",
                 (long)(end - json));
        rc = -EINVAL;
        goto out;
    }
    const cJSON *entries = cJSON_GetObjectItemCaseSensitive(root, "entries");
    if (!cJSON_IsObject(root) || !cJSON_IsArray(entries)) {
        snprintf(err, errlen, "tuning table: expected an object with an \"entries\" array");
        rc = -EINVAL;
        goto out;
    }
    if (n_keys(root) > MAX_TABLE_KEYS) {
        snprintf(err, errlen,
                 "tuning table: the top-level object has %zu keys; a table has 6 (device, "
                 "sm_count, compute_capability, commit, date, entries)",
                 n_keys(root));
        rc = -EINVAL;
        goto out;
    }
    int twice;
    const char *odd = odd_key(root, NULL, &twice);
    if (odd) {
        char sh[SHOWN_MAX];
        snprintf(err, errlen, "tuning table: key \"%s\" is given twice", shown(odd, sh));
        rc = -EINVAL;
        goto out;
    }
    static const char *const table_keys[] = {
        "device", "sm_count", "compute_capability", "commit", "date", "entries", NULL};
    if ((odd = odd_key(root, table_keys, &twice)) != NULL) {
        char line[240], sh[SHOWN_MAX];
        snprintf(line, sizeof line, "tuning table: unknown key \"%s\" ignored", shown(odd, sh));
        emit(msg, msg_ctx, line);
    }
    /* A device or an SM count of the wrong kind fails the load rather than
     * reading as "none": a table with no device is taken on any GPU, and
     * the SM count places the nearest-table search. */
    const cJSON *dev = cJSON_GetObjectItemCaseSensitive(root, "device");
    const cJSON *sms = cJSON_GetObjectItemCaseSensitive(root, "sm_count");
    if (dev && !cJSON_IsString(dev)) {
        snprintf(err, errlen, "tuning table: \"device\" must be a string (a GPU's name)");
        rc = -EINVAL;
        goto out;
    }
    if (sms && !(cJSON_IsNumber(sms) && sms->valuedouble >= 0 && sms->valuedouble <= 4096 &&
                 sms->valuedouble == (double)(int)sms->valuedouble)) {
        snprintf(err, errlen,
                 "tuning table: \"sm_count\" must be a whole number 0..4096 (0: not known)");
        rc = -EINVAL;
        goto out;
    }
    if (cJSON_IsString(dev)) {
        /* Printed in messages (projload --compare): printable ASCII, as
         * every GPU's name is; anything else can match no device anyway. */
        snprintf(t->device, sizeof t->device, "%s", dev->valuestring);
        for (char *p = t->device; *p; p++)
            if ((unsigned char)*p < 0x20 || (unsigned char)*p >= 0x7f)
                *p = '?';
    }
    if (sms)
        t->sm_count = sms->valueint;
    const cJSON *cc = cJSON_GetObjectItemCaseSensitive(root, "compute_capability");
    if (cc) {
        /* digits, one dot, digits ("9.0"; not " 9.0" or "9.-0") */
        const char *v = cJSON_IsString(cc) ? cc->valuestring : "";
        const size_t d1 = strspn(v, "0123456789");
        const size_t d2 = v[d1] == '.' ? strspn(v + d1 + 1, "0123456789") : 0;
        if (d1 < 1 || d1 > 2 || d2 < 1 || d2 > 2 || v[d1 + 1 + d2] || atoi(v) < 1) {
            char sh[SHOWN_MAX];
            snprintf(err, errlen,
                     "tuning table: \"compute_capability\" must be a string like \"9.0\", not %s",
                     cJSON_IsString(cc) ? shown(cc->valuestring, sh) : "a non-string");
            memset(t, 0, sizeof *t);
            rc = -EINVAL;
            goto out;
        }
        t->cc_major = atoi(v);
        t->cc_minor = atoi(v + d1 + 1);
    }

    int idx = 0, rejected = 0, parsed = 0;
    /* Every entry that parsed, kept or not: a copy of one the device's
     * check refused is still a duplicate, as it is in a load without the
     * check (which would have kept the first). */
    tune_key keys[PJ_TUNE_MAX];
    const cJSON *je;
    cJSON_ArrayForEach(je, entries)
    {
        char why[256], line[320];
        pj_tune_entry e;
        int erc = cJSON_IsObject(je) ? parse_entry(je, &e, why, sizeof why) : -EINVAL;
        if (erc && !cJSON_IsObject(je))
            snprintf(why, sizeof why, "not an object");
        if (!erc && seen_before(keys, parsed, &e)) {
            snprintf(why, sizeof why, "%s %ux%u m=%u: duplicate entry", e.layer, e.n, e.k, e.m);
            erc = -EEXIST;
        }
        /* Counted before the device's check, so that a load without one
         * (the daemon's first look, the nearest-table search, --check-config)
         * comes to the same verdict as the vetted load. Not the rest dropped
         * one by one: that could cut a layer's ladder in the middle (its m
         * above the cut routed to an entry below it). The whole table goes,
         * said. */
        if (!erc && ++parsed > PJ_TUNE_MAX) {
            snprintf(err, errlen,
                     "tuning table: more than %d entries (entries[%d] is one too many); a table "
                     "holds %d: split it, one table per model",
                     PJ_TUNE_MAX, idx, PJ_TUNE_MAX);
            memset(t, 0, sizeof *t);
            rc = -ENOSPC;
            goto out;
        }
        if (!erc) {
            tune_key *key = &keys[parsed - 1];
            memcpy(key->layer, e.layer, sizeof key->layer);
            key->n = e.n;
            key->k = e.k;
            key->m = e.m;
        }
        if (!erc && check)
            erc = check(check_ctx, &e, why, sizeof why);
        if (erc && ++rejected <= MAX_REJECTS_SAID) {
            snprintf(line, sizeof line, "tuning table: entries[%d] rejected: %s", idx, why);
            emit(msg, msg_ctx, line);
        } else if (!erc) {
            t->e[t->n++] = e;
        }
        idx++;
    }
    if (rejected > MAX_REJECTS_SAID) {
        char line[160];
        snprintf(line, sizeof line, "tuning table: %d more entries rejected (the first %d said)",
                 rejected - MAX_REJECTS_SAID, MAX_REJECTS_SAID);
        emit(msg, msg_ctx, line);
    }
    rc = (int)t->n;
out:
    cJSON_Delete(root);
    return rc;
}

int pj_tune_load(const char *path, pj_tune_table *t, pj_tune_check_fn check, void *check_ctx,
                 pj_tune_msg_fn msg, void *msg_ctx, char *err, size_t errlen)
{
    memset(t, 0, sizeof *t);
    /* Read only if a regular file: a FIFO (or a device) in a tables'
     * folder would otherwise hold the start. */
    struct stat sb;
    const char *failed;
    int fd = pj_open_regular(path, &sb, &failed);
    if (fd < 0) {
        snprintf(err, errlen, "tuning table %s: %s", path,
                 failed || fd == -EISDIR ? strerror(-fd) : "not a regular file");
        return fd;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        const int e = errno;
        close(fd);
        snprintf(err, errlen, "tuning table %s: %s", path, strerror(e));
        return -e;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 > cap) {
            size_t ncap = cap ? cap * 2 : 65536;
            if (ncap > (64u << 20)) {
                snprintf(err, errlen, "tuning table %s: larger than 64 MiB", path);
                free(buf);
                fclose(f);
                return -EFBIG;
            }
            char *nb = realloc(buf, ncap);
            if (!nb) {
                free(buf);
                fclose(f);
                snprintf(err, errlen, "tuning table %s: out of memory", path);
                return -ENOMEM;
            }
            buf = nb;
            cap = ncap;
        }
        errno = 0;
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0)
            break;
    }
    /* The reason, not only that the read failed. */
    const int rerr = ferror(f) ? (errno ? errno : EIO) : 0;
    fclose(f);
    if (rerr) {
        snprintf(err, errlen, "tuning table %s: cannot read: %s", path, strerror(rerr));
        free(buf);
        return -rerr;
    }
    char inner[256];
    int rc = pj_tune_parse(buf, len, t, check, check_ctx, msg, msg_ctx, inner, sizeof inner);
    if (rc < 0)
        snprintf(err, errlen, "%s (%s)", inner, path);
    free(buf);
    return rc;
}

int pj_tune_put(pj_tune_table *t, const pj_tune_entry *e)
{
    const int i = find_same(t, e);
    if (i >= 0) {
        t->e[i] = *e;
        return 0;
    }
    if (t->n >= PJ_TUNE_MAX)
        return -ENOSPC;
    t->e[t->n++] = *e;
    return 0;
}

/* A time in µs rounded to the nearest ns, in double: rounding through an
 * int overflowed above 2.1e6 µs and moved negative times the wrong way. */
static double to_ns(float us)
{
    return round((double)us * 1000.0) / 1000.0;
}

char *pj_tune_to_json(const pj_tune_table *t, const char *commit, const char *date)
{
    cJSON *root = cJSON_CreateObject();
    cJSON *arr = NULL;
    if (!root)
        return NULL;
    cJSON_AddStringToObject(root, "device", t->device);
    cJSON_AddNumberToObject(root, "sm_count", t->sm_count);
    if (t->cc_major > 0) {
        char cc[16];
        snprintf(cc, sizeof cc, "%d.%d", t->cc_major, t->cc_minor);
        cJSON_AddStringToObject(root, "compute_capability", cc);
    }
    cJSON_AddStringToObject(root, "commit", commit ? commit : "");
    cJSON_AddStringToObject(root, "date", date ? date : "");
    arr = cJSON_AddArrayToObject(root, "entries");
    for (uint32_t i = 0; arr && i < t->n; i++) {
        const pj_tune_entry *e = &t->e[i];
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddStringToObject(o, "layer", e->layer);
        cJSON_AddNumberToObject(o, "n", e->n);
        cJSON_AddNumberToObject(o, "k", e->k);
        if (e->rows)
            cJSON_AddNumberToObject(o, "rows", e->rows);
        cJSON_AddNumberToObject(o, "m", e->m);
        cJSON_AddStringToObject(o, "engine", pj_eng_name(e->eng));
        cJSON *kn = cJSON_AddObjectToObject(o, "knobs");
        for (size_t j = 0; kn && j < N_KNOBS; j++)
            if ((knob_defs[j].engines & EB(e->eng)) &&
                !(knob_defs[j].quiet && !knob_get(&e->knobs, &knob_defs[j])))
                cJSON_AddNumberToObject(kn, knob_defs[j].name, knob_get(&e->knobs, &knob_defs[j]));
        /* A time that is not finite (a baseline that never ran) is left
         * out: JSON has no spelling for it. */
        if (isfinite(e->us))
            cJSON_AddNumberToObject(o, "us", to_ns(e->us));
        if (isfinite(e->base_us))
            cJSON_AddNumberToObject(o, "base_us", to_ns(e->base_us));
        cJSON_AddItemToArray(arr, o);
    }
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

int pj_tune_save(const char *path, const pj_tune_table *t, const char *commit, const char *date,
                 char *err, size_t errlen)
{
    char *js = pj_tune_to_json(t, commit, date);
    if (!js) {
        snprintf(err, errlen, "tuning table %s: out of memory", path);
        return -ENOMEM;
    }
    /* Replaced whole: a failed write (full disk, quota) leaves the table
     * that was there, not half a table. */
    const size_t len = strlen(js);
    js[len] = '\n'; /* the text ends in a newline; its NUL is not written */
    char why[4096 + 256];
    int rc = pj_replace_file(path, js, len + 1, 0666, PJ_MODE_UMASKED, why, sizeof why);
    free(js);
    if (rc)
        snprintf(err, errlen, "tuning table %s", why);
    return rc;
}

int pj_tune_entry_has_shape(void *ctx, const pj_tune_entry *e, char *why, size_t whylen)
{
    (void)ctx;
    if (e->n && e->k)
        return 0;
    snprintf(why, whylen, "%s m=%u: entry has no layer shape (n, k)", e->layer, e->m);
    return -EINVAL;
}

const char *pj_tune_msg_text(const char *msg)
{
    static const char lead[] = "tuning table: ";
    return strncmp(msg, lead, sizeof lead - 1) ? msg : msg + sizeof lead - 1;
}

int pj_tune_entry_fits(const pj_tune_entry *e, uint32_t n, uint32_t k)
{
    return (!e->n || !n || e->n == n) && (!e->k || !k || e->k == k);
}

/* Is e an entry of layer, for a layer of shape n x k? */
static int entry_of(const pj_tune_entry *e, const char *layer, uint32_t n, uint32_t k)
{
    return strcmp(e->layer, layer) == 0 && pj_tune_entry_fits(e, n, k);
}

uint32_t pj_tune_rows_below(const pj_tune_table *t, const char *layer, uint32_t n, uint32_t k,
                            uint32_t below, uint32_t *out, uint32_t cap)
{
    /* Each value once (an earlier entry with the same rows counted it),
     * insertion-sorted into out; when out is full a smaller value pushes
     * the largest out, so that out holds the smallest cap. */
    uint32_t total = 0, kept = 0;
    for (uint32_t i = 0; t && layer && i < t->n; i++) {
        const pj_tune_entry *e = &t->e[i];
        if (!entry_of(e, layer, n, k) || !e->rows || e->rows >= below)
            continue;
        uint32_t j = 0;
        while (j < i && !(entry_of(&t->e[j], layer, n, k) && t->e[j].rows == e->rows))
            j++;
        if (j < i)
            continue; /* an earlier entry said these rows */
        total++;
        if (cap == 0 || (kept == cap && out[cap - 1] <= e->rows))
            continue;
        uint32_t at = kept < cap ? kept++ : cap - 1;
        while (at > 0 && out[at - 1] > e->rows) {
            out[at] = out[at - 1];
            at--;
        }
        out[at] = e->rows;
    }
    return total;
}

const pj_tune_entry *pj_dispatch_choose(const pj_tune_table *t, const char *layer, uint32_t n,
                                        uint32_t k, uint32_t m)
{
    const pj_tune_entry *above = NULL, *largest = NULL;
    if (!t || !layer)
        return NULL;
    for (uint32_t i = 0; i < t->n; i++) {
        const pj_tune_entry *e = &t->e[i];
        if (!entry_of(e, layer, n, k))
            continue;
        /* The router is a GEMV up to PJ_ENG_MAX_GEMV_M and a tiled GEMM
         * above it, and the same knobs mean other things in the two
         * forms: an entry serves only m of its own form. */
        if (e->eng == PJ_ENG_ROUTER && (e->m <= PJ_ENG_MAX_GEMV_M) != (m <= PJ_ENG_MAX_GEMV_M))
            continue;
        /* At equal m an entry of this very shape beats one for any shape
         * (n, k = 0), whichever the file lists first. */
        const int exact = e->n && e->k;
        if (e->m >= m &&
            (!above || e->m < above->m || (e->m == above->m && exact && !(above->n && above->k))))
            above = e;
        if (!largest || e->m > largest->m ||
            (e->m == largest->m && exact && !(largest->n && largest->k)))
            largest = e;
    }
    return above ? above : largest;
}
