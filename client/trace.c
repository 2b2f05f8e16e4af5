/* trace.c — projload's JSON-lines traces: parser, resolver, generator, writer. */
#include "client/trace.h"

#include <cjson/cJSON.h>
#include "config/config.h"
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ---- storage --------------------------------------------------------------- */

void pj_trace_init(pj_trace *t, const char *file)
{
    memset(t, 0, sizeof *t);
    snprintf(t->file, sizeof t->file, "%s", file ? file : "<trace>");
}

void pj_trace_free(pj_trace *t)
{
    free(t->reqs);
    free(t->ops);
    free(t->names);
    free(t->name_slots);
    char file[sizeof t->file];
    memcpy(file, t->file, sizeof file);
    pj_trace_init(t, file);
}

/* Grows *arr (elements of size el) so it holds at least need; 0 or -ENOMEM. */
static int grow(void **arr, size_t *cap, size_t need, size_t el)
{
    if (need <= *cap)
        return 0;
    size_t nc = *cap ? *cap : 64;
    while (nc < need)
        nc *= 2;
    void *p = realloc(*arr, nc * el);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

/* At most PJ_WIRE_MAX_LAYERS_ALL names, so a table of twice that many
 * slots is never more than half full and never grows. */
#define NAME_SLOTS (2u * PJ_WIRE_MAX_LAYERS_ALL)

/* Index of name in t->names, or -1; *slot is where the probe ended (its
 * slot, or the free one it would take). */
static int32_t find_name(const pj_trace *t, const char *name, uint32_t *slot)
{
    uint32_t at = pj_str_hash(name) & (NAME_SLOTS - 1);
    for (; t->name_slots && t->name_slots[at]; at = (at + 1) & (NAME_SLOTS - 1)) {
        uint32_t i = t->name_slots[at] - 1u;
        if (strcmp(t->names[i], name) == 0) {
            *slot = at;
            return (int32_t)i;
        }
    }
    *slot = at;
    return -1;
}

/* Index of name in t->names, added when new; -ENOSPC when it would be
 * the (PJ_WIRE_MAX_LAYERS_ALL + 1)-th distinct name (no daemon serves
 * that many layers), -ENOMEM on failure. Every op of a trace is looked up
 * here: a hash, where a scan of up to 1024 names made parsing a trace of
 * a whole model's layers mostly strcmp. */
static int intern(pj_trace *t, const char *name, uint32_t *idx)
{
    _Static_assert(PJ_WIRE_MAX_LAYERS_ALL < UINT16_MAX, "slots hold 1 + index in 16 bits");
    _Static_assert((NAME_SLOTS & (NAME_SLOTS - 1)) == 0, "the probe masks by NAME_SLOTS - 1");
    if (!t->name_slots) {
        t->name_slots = calloc(NAME_SLOTS, sizeof *t->name_slots);
        if (!t->name_slots)
            return -ENOMEM;
    }
    uint32_t at;
    int32_t found = find_name(t, name, &at);
    if (found >= 0) {
        *idx = (uint32_t)found;
        return 0;
    }
    if (t->n_names >= PJ_WIRE_MAX_LAYERS_ALL)
        return -ENOSPC;
    void *arr = t->names;
    if (grow(&arr, &t->cap_names, t->n_names + 1, sizeof t->names[0]))
        return -ENOMEM;
    t->names = arr;
    snprintf(t->names[t->n_names], sizeof t->names[0], "%s", name);
    t->name_slots[at] = (uint16_t)(t->n_names + 1);
    *idx = (uint32_t)t->n_names++;
    return 0;
}

int pj_trace_add(pj_trace *t, int64_t t_us, uint32_t client, const char *const *layers,
                 const uint32_t *ms, const uint32_t *ns, uint32_t n_ops)
{
    if (n_ops < 1 || n_ops > PJ_TRACE_MAX_OPS || client > PJ_TRACE_MAX_CLIENT || t_us < -1 ||
        t_us > PJ_TRACE_MAX_T_US)
        return -EINVAL;
    for (uint32_t i = 0; i < n_ops; i++) {
        size_t len = strlen(layers[i]);
        if (len < 1 || len > PJ_TRACE_NAME_MAX || ms[i] < 1 || ms[i] > PJ_TRACE_MAX_M ||
            (ns && ns[i] > PJ_TRACE_MAX_N))
            return -EINVAL;
    }
    void *reqs = t->reqs, *ops = t->ops;
    if (grow(&reqs, &t->cap_reqs, t->n_reqs + 1, sizeof *t->reqs))
        return -ENOMEM;
    t->reqs = reqs;
    if (grow(&ops, &t->cap_ops, t->n_ops + n_ops, sizeof *t->ops))
        return -ENOMEM;
    t->ops = ops;
    pj_trace_op *o = t->ops + t->n_ops;
    for (uint32_t i = 0; i < n_ops; i++) {
        int rc = intern(t, layers[i], &o[i].name);
        if (rc)
            return rc == -ENOSPC ? -EINVAL : rc;
        o[i].m = ms[i];
        o[i].n_req = ns ? ns[i] : 0;
        o[i].n = o[i].n_req;
        o[i].layer = -1;
    }
    pj_trace_req *r = t->reqs + t->n_reqs;
    r->t_us = t_us;
    r->client = client;
    r->op0 = (uint32_t)t->n_ops;
    r->n_ops = n_ops;
    r->line = 0;
    t->n_ops += n_ops;
    t->n_reqs++;
    if (t_us >= 0)
        t->n_timed++;
    return 0;
}

/* ---- parser ------------------------------------------------------------------ */

/* A layer name as a JSON string ("o", "a\u001bb"): names come from the
 * file and may hold any byte but NUL, and messages go to a terminal. A
 * name is at most PJ_TRACE_NAME_MAX bytes, so QUOTED_MAX always fits. */
#define QUOTED_MAX (6 * PJ_TRACE_NAME_MAX + 3)

/* Does s begin with a C1 control in UTF-8 (C2 80 .. C2 9F)? */
static int is_c1(const char *s)
{
    return (unsigned char)s[0] == 0xc2 && (unsigned char)s[1] >= 0x80 &&
           (unsigned char)s[1] <= 0x9f;
}

static const char *quote_name(const char *s, char *out, size_t cap)
{
    size_t at = 0;
    out[at++] = '"';
    /* Room for one more escape (6), the closing quote and the NUL. */
    for (; *s && at + 8 <= cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            at += (size_t)snprintf(out + at, cap - at, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            at += (size_t)snprintf(out + at, cap - at, "\\u%04x", c);
        else if (is_c1(s)) /* U+0080..U+009F, which a terminal acts on too */
            at += (size_t)snprintf(out + at, cap - at, "\\u%04x", (unsigned char)*++s);
        else
            out[at++] = (char)c;
    }
    out[at++] = '"';
    out[at] = 0;
    return out;
}

/* The name bare where it prints as itself, else quoted. */
static const char *name_text(const char *s, char *out, size_t cap)
{
    for (const char *q = s; *q; q++) {
        unsigned char c = (unsigned char)*q;
        if (c < 0x21 || c == 0x7f || c == '"' || c == '\\' || c == ',' || is_c1(q))
            return quote_name(s, out, cap);
    }
    return s;
}

/* A JSON value as the message shows it: scalars verbatim (cut to ~40
 * characters), containers by kind. */
static void describe(const cJSON *v, char *out, size_t cap)
{
    if (cJSON_IsObject(v)) {
        snprintf(out, cap, "an object");
    } else if (cJSON_IsArray(v)) {
        snprintf(out, cap, "an array");
    } else {
        char *s = cJSON_PrintUnformatted(v);
        if (!s) {
            snprintf(out, cap, "a value");
            return;
        }
        if (strlen(s) > 40)
            snprintf(out, cap, "%.37s...", s);
        else
            snprintf(out, cap, "%s", s);
        cJSON_free(s);
    }
}

typedef struct perr {
    char *buf;
    size_t cap;
    const char *file;
    size_t line;
} perr;

__attribute__((format(printf, 3, 4))) static int fail(const perr *p, const char *field,
                                                      const char *fmt, ...)
{
    char why[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof why, fmt, ap);
    va_end(ap);
    if (field && field[0])
        snprintf(p->buf, p->cap, "%s:%zu: %s: %s", p->file, p->line, field, why);
    else
        snprintf(p->buf, p->cap, "%s:%zu: %s", p->file, p->line, why);
    return -EINVAL;
}

/* An integer in [lo, hi], or a message naming field, the bound and the value. */
static int get_int_range(const perr *p, const char *field, const cJSON *v, double lo, double hi,
                         int64_t *out)
{
    char got[64];
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) ||
        v->valuedouble != floor(v->valuedouble) || v->valuedouble < lo) {
        describe(v, got, sizeof got);
        return fail(p, field, "expected an integer >= %.0f, got %s", lo, got);
    }
    if (v->valuedouble > hi) {
        describe(v, got, sizeof got);
        return fail(p, field, "expected an integer <= %.0f, got %s", hi, got);
    }
    *out = (int64_t)v->valuedouble;
    return 0;
}

/* Checks that obj has only keys from allowed (NULL-terminated) and none
 * twice; field is the object's path ("" for the line). */
static int check_keys(const perr *p, const char *field, const cJSON *obj,
                      const char *const *allowed)
{
    char path[128];
    for (const cJSON *c = obj->child; c; c = c->next) {
        int known = 0;
        for (size_t i = 0; allowed[i]; i++)
            known |= strcmp(c->string, allowed[i]) == 0;
        char qk[72];
        snprintf(path, sizeof path, "%s%s%.60s", field, field[0] ? "." : "",
                 name_text(c->string, qk, sizeof qk));
        if (!known) {
            char list[128] = "";
            for (size_t i = 0; allowed[i]; i++)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "",
                         allowed[i]);
            return fail(p, path, "unknown key (expected one of %s)", list);
        }
        for (const cJSON *d = obj->child; d != c; d = d->next)
            if (strcmp(d->string, c->string) == 0)
                return fail(p, path, "key given twice");
    }
    return 0;
}

/* The first number of the JSON text s written with a fraction or an
 * exponent (1.0, 1e2), outside strings: its offset and length, or -1.
 * Every number of a valid request is an integer, and cJSON reads 1e2 and
 * 100 alike, so the spelling is checked on the text. */
static long non_integer_number(const char *s, size_t len, size_t *tok_len)
{
    int in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char c = s[i];
        if (in_str) {
            if (c == '\\')
                i++;
            else if (c == '"')
                in_str = 0;
            continue;
        }
        if (c == '"') {
            in_str = 1;
        } else if (c == '-' || (c >= '0' && c <= '9')) {
            size_t j = i, bad = 0;
            while (j < len && (s[j] == '-' || s[j] == '+' || s[j] == '.' || s[j] == 'e' ||
                               s[j] == 'E' || (s[j] >= '0' && s[j] <= '9'))) {
                bad |= s[j] == '.' || s[j] == 'e' || s[j] == 'E';
                j++;
            }
            /* A leading zero ("01"): not JSON, which cJSON takes as 1. */
            const size_t d = s[i] == '-' ? i + 1 : i;
            bad |= d + 1 < j && s[d] == '0' && s[d + 1] >= '0' && s[d + 1] <= '9';
            if (bad) {
                *tok_len = j - i;
                return (long)i;
            }
            i = j - 1;
        }
    }
    return -1;
}

/* The longest line a request can need (1024 ops of ~150 bytes, the layer
 * names at their longest): one longer is refused before cJSON builds its
 * tree, which takes ~40 times the line's bytes (a 256 MiB line took
 * 10 GB before the op count refused it). */
#define MAX_LINE_BYTES (1u << 20)

static int parse_line(pj_trace *t, const perr *p, const char *s, size_t len)
{
    const char *end = NULL;
    if (len > MAX_LINE_BYTES)
        return fail(p, NULL,
                    "a line of %zu bytes, more than any request needs (%u MiB at most): not a "
                    "request of 1..1024 ops",
                    len, MAX_LINE_BYTES >> 20);
    /* cJSON ends a string at a NUL, escaped or raw: "o\u0000x" would read
     * as "o". */
    long nul = pj_json_nul_escape(s, len);
    if (nul >= 0)
        return fail(p, NULL, "a string holds %s (column %ld); names cannot contain NUL",
                    s[nul] == '\0' ? "a NUL byte" : "\\u0000", nul + 1);
    char what[96];
    long bad = pj_json_strict(s, len, 0, what, sizeof what);
    if (bad >= 0)
        return fail(p, NULL, "%s (column %ld)", what, bad + 1);
    cJSON *root = cJSON_ParseWithLengthOpts(s, len, &end, 0);
    int rc = 0;
    if (!root) {
        size_t col = end && end >= s && end <= s + len ? (size_t)(end - s) + 1 : 1;
        return fail(p, NULL, "not valid JSON (column %zu)", col);
    }
    for (const char *q = end; q < s + len; q++) {
        if (*q != ' ' && *q != '\t' && *q != '\r') {
            rc = fail(p, NULL, "unexpected text after the request object (column %zu)",
                      (size_t)(q - s) + 1);
            goto out;
        }
    }
    if (!cJSON_IsObject(root)) {
        char got[64];
        describe(root, got, sizeof got);
        rc = fail(p, NULL, "expected a JSON object per line, got %s", got);
        goto out;
    }
    static const char *const top_keys[] = {"t_us", "client", "ops", NULL};
    static const char *const op_keys[] = {"layer", "m", "n", NULL};
    if ((rc = check_keys(p, "", root, top_keys)))
        goto out;

    int64_t t_us = -1, client = 0, v;
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(root, "t_us");
    if (j && (rc = get_int_range(p, "t_us", j, 0, (double)PJ_TRACE_MAX_T_US, &t_us)))
        goto out;
    j = cJSON_GetObjectItemCaseSensitive(root, "client");
    if (j && (rc = get_int_range(p, "client", j, 0, PJ_TRACE_MAX_CLIENT, &client)))
        goto out;
    const cJSON *ops = cJSON_GetObjectItemCaseSensitive(root, "ops");
    if (!ops) {
        rc = fail(p, "ops", "missing (every request needs a list of ops)");
        goto out;
    }
    if (!cJSON_IsArray(ops)) {
        char got[64];
        describe(ops, got, sizeof got);
        rc = fail(p, "ops", "expected an array of ops, got %s", got);
        goto out;
    }
    int n_ops = cJSON_GetArraySize(ops);
    if (n_ops < 1 || n_ops > PJ_TRACE_MAX_OPS) {
        rc = fail(p, "ops", "expected 1..%d ops, got %d", PJ_TRACE_MAX_OPS, n_ops);
        goto out;
    }
    const char *names[PJ_TRACE_MAX_OPS];
    uint32_t ms[PJ_TRACE_MAX_OPS], ns[PJ_TRACE_MAX_OPS];
    int i = 0;
    char field[96];
    for (const cJSON *op = ops->child; op; op = op->next, i++) {
        snprintf(field, sizeof field, "ops[%d]", i);
        if (!cJSON_IsObject(op)) {
            char got[64];
            describe(op, got, sizeof got);
            rc = fail(p, field, "expected an object {\"layer\": ..., \"m\": ...}, got %s", got);
            goto out;
        }
        if ((rc = check_keys(p, field, op, op_keys)))
            goto out;
        const cJSON *l = cJSON_GetObjectItemCaseSensitive(op, "layer");
        snprintf(field, sizeof field, "ops[%d].layer", i);
        if (!l) {
            rc = fail(p, field, "missing");
            goto out;
        }
        if (!cJSON_IsString(l) || !l->valuestring[0] ||
            strlen(l->valuestring) > PJ_TRACE_NAME_MAX) {
            char got[64];
            describe(l, got, sizeof got);
            rc = fail(p, field, "expected a layer name (1..%d characters), got %s",
                      PJ_TRACE_NAME_MAX, got);
            goto out;
        }
        names[i] = l->valuestring;
        uint32_t idx;
        int irc = intern(t, names[i], &idx);
        if (irc == -ENOSPC) {
            char qn[QUOTED_MAX];
            rc = fail(p, field,
                      "%s would be the trace's %d-th distinct layer name; a daemon serves "
                      "at most %d layers",
                      quote_name(names[i], qn, sizeof qn), PJ_WIRE_MAX_LAYERS_ALL + 1,
                      PJ_WIRE_MAX_LAYERS_ALL);
            goto out;
        } else if (irc) {
            rc = irc;
            snprintf(p->buf, p->cap, "%s:%zu: out of memory", p->file, p->line);
            goto out;
        }
        const cJSON *m = cJSON_GetObjectItemCaseSensitive(op, "m");
        snprintf(field, sizeof field, "ops[%d].m", i);
        if (!m) {
            rc = fail(p, field, "missing");
            goto out;
        }
        if ((rc = get_int_range(p, field, m, 1, PJ_TRACE_MAX_M, &v)))
            goto out;
        ms[i] = (uint32_t)v;
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(op, "n");
        snprintf(field, sizeof field, "ops[%d].n", i);
        ns[i] = 0;
        if (n) {
            if ((rc = get_int_range(p, field, n, 1, PJ_TRACE_MAX_N, &v)))
                goto out;
            ns[i] = (uint32_t)v;
        }
    }
    /* Every value is in range; now the spelling (1e2 and 1.0 are refused;
     * 2.5 was already refused as a non-integer above). */
    size_t tok = 0;
    long at = non_integer_number(s, (size_t)(end - s), &tok);
    if (at >= 0) {
        rc = fail(p, NULL,
                  "%.*s (column %ld): integers must be written as integers (digits only: no "
                  "fraction, exponent or leading zero)",
                  (int)(tok > 40 ? 40 : tok), s + at, at + 1);
        goto out;
    }
    rc = pj_trace_add(t, t_us, (uint32_t)client, names, ms, ns, (uint32_t)n_ops);
    if (rc == -ENOMEM)
        snprintf(p->buf, p->cap, "%s:%zu: out of memory", p->file, p->line);
    else if (rc == 0)
        t->reqs[t->n_reqs - 1].line = (uint32_t)p->line;
out:
    cJSON_Delete(root);
    return rc;
}

int pj_trace_parse(pj_trace *t, const char *text, size_t len, char *err, size_t errlen)
{
    perr p = {.buf = err, .cap = errlen, .file = t->file, .line = 0};
    size_t before = t->n_reqs;
    const char *s = text, *end = text + len;
    while (s < end) {
        const char *nl = memchr(s, '\n', (size_t)(end - s));
        const char *e = nl ? nl : end;
        p.line++;
        const char *q = s;
        while (q < e && (*q == ' ' || *q == '\t' || *q == '\r'))
            q++;
        if (q < e && *q != '#') {
            if (memchr(q, '\0', (size_t)(e - q)))
                return fail(&p, NULL, "line holds a NUL byte");
            int rc = parse_line(t, &p, q, (size_t)(e - q));
            if (rc)
                return rc;
        }
        s = nl ? nl + 1 : end;
    }
    if (t->n_reqs == before) {
        snprintf(err, errlen, "%s: no requests (every line is blank or a comment)", t->file);
        return -EINVAL;
    }
    return 0;
}

int pj_trace_load(pj_trace *t, const char *path, char *err, size_t errlen)
{
    return pj_trace_load_limit(t, path, PJ_TRACE_MAX_BYTES, err, errlen);
}

int pj_trace_load_limit(pj_trace *t, const char *path, size_t max_bytes, char *err, size_t errlen)
{
    const char *base = strrchr(path, '/');
    pj_trace_init(t, base ? base + 1 : path);
    FILE *f = fopen(path, "rb");
    if (!f) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    /* A directory opens for reading and fails at the first read. */
    struct stat sb;
    if (fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)) {
        snprintf(err, errlen, "%s: is a directory, not a trace file", path);
        fclose(f);
        return -EISDIR;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    int rc = 0, read_errno = 0;
    for (;;) {
        if (len > max_bytes) {
            snprintf(err, errlen, "%s: more than %zu bytes, the most a trace may have", path,
                     max_bytes);
            rc = -EFBIG;
            goto out;
        }
        if (len + 65536 > cap) {
            size_t nc = cap ? cap * 2 : 1 << 20;
            if (nc > max_bytes + 65536 + 1)
                nc = max_bytes + 65536 + 1; /* enough to see one byte too many */
            char *nb = realloc(buf, nc);
            if (!nb) {
                snprintf(err, errlen, "%s: out of memory reading it", path);
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap = nc;
        }
        errno = 0;
        size_t got = fread(buf + len, 1, cap - len, f);
        len += got;
        if (got == 0) {
            read_errno = errno;
            break;
        }
    }
    if (ferror(f)) {
        snprintf(err, errlen, "%s: read error: %s", path,
                 read_errno ? strerror(read_errno) : "unknown cause");
        rc = read_errno ? -read_errno : -EIO;
        goto out;
    }
    rc = pj_trace_parse(t, buf ? buf : "", len, err, errlen);
out:
    free(buf);
    fclose(f);
    return rc;
}

/* ---- resolver ------------------------------------------------------------- */

int pj_trace_resolve(pj_trace *t, const pj_welcome *w, char *err, size_t errlen)
{
    int32_t *map = malloc((t->n_names ? t->n_names : 1) * sizeof *map);
    if (!map) {
        snprintf(err, errlen, "%s: out of memory", t->file);
        return -ENOMEM;
    }
    int rc = 0;
    const pj_wire_layer *wls = pj_welcome_layers(w);
    for (size_t i = 0; i < t->n_names; i++)
        map[i] = -1;
    /* Each daemon layer looked up in the trace's name index (the last of
     * equal names wins, as a scan of them would find). */
    for (uint32_t l = 0; l < pj_welcome_n_layers(w); l++) {
        char name[sizeof wls[l].name + 1];
        snprintf(name, sizeof name, "%.*s", (int)sizeof wls[l].name, wls[l].name);
        uint32_t at;
        int32_t i = find_name(t, name, &at);
        if (i >= 0)
            map[i] = (int32_t)l;
    }
    for (size_t r = 0; r < t->n_reqs; r++) {
        const pj_trace_req *q = &t->reqs[r];
        perr p = {.buf = err, .cap = errlen, .file = t->file, .line = q->line};
        char field[64];
        if (q->n_ops > w->max_ops_per_request) {
            rc = fail(&p, "ops", "%u ops, the daemon allows at most %u per request", q->n_ops,
                      w->max_ops_per_request);
            goto out;
        }
        for (uint32_t i = 0; i < q->n_ops; i++) {
            pj_trace_op *o = &t->ops[q->op0 + i];
            int32_t l = map[o->name];
            if (l < 0) {
                char list[512] = "";
                for (uint32_t k = 0; k < pj_welcome_n_layers(w); k++)
                    snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", k ? ", " : "",
                             wls[k].name);
                snprintf(field, sizeof field, "ops[%u].layer", i);
                char qn[QUOTED_MAX];
                rc = fail(&p, field, "unknown layer %s (the daemon serves %s)",
                          quote_name(t->names[o->name], qn, sizeof qn),
                          list[0] ? list : "no layers");
                goto out;
            }
            if (o->m > w->max_m) {
                snprintf(field, sizeof field, "ops[%u].m", i);
                rc = fail(&p, field, "%u is more than the daemon's max_m (%u)", o->m, w->max_m);
                goto out;
            }
            const pj_wire_layer *wl = &wls[l];
            if (o->n_req > wl->n) {
                snprintf(field, sizeof field, "ops[%u].n", i);
                char qn[QUOTED_MAX];
                rc = fail(&p, field, "%u is more than layer %s allows (%u rows)", o->n_req,
                          quote_name(wl->name, qn, sizeof qn), wl->n);
                goto out;
            }
            o->layer = l;
            o->n = o->n_req ? o->n_req : wl->n;
        }
    }
out:
    free(map);
    return rc;
}

size_t pj_trace_signature(const pj_trace *t, size_t r, pj_trace_mset_fn mset_label, void *ctx,
                          char *out, size_t cap)
{
    const pj_trace_req *q = &t->reqs[r];
    char lab[64], first[64];
    int same = 1;
    size_t len = 0;
#define PUT(...)                                                                                   \
    do {                                                                                           \
        int w_ = snprintf(out + (len < cap ? len : cap), len < cap ? cap - len : 0, __VA_ARGS__);  \
        len += w_ > 0 ? (size_t)w_ : 0;                                                            \
    } while (0)
    if (cap)
        out[0] = '\0';
    for (uint32_t i = 0; i < q->n_ops; i++) {
        const pj_trace_op *o = &t->ops[q->op0 + i];
        if (mset_label)
            mset_label(ctx, o->m, lab, sizeof lab);
        else
            snprintf(lab, sizeof lab, "%u", o->m);
        if (i == 0)
            memcpy(first, lab, sizeof first);
        else if (strcmp(first, lab) != 0)
            same = 0;
    }
    for (uint32_t i = 0; i < q->n_ops;) {
        const pj_trace_op *o = &t->ops[q->op0 + i];
        if (!same) {
            if (mset_label)
                mset_label(ctx, o->m, lab, sizeof lab);
            else
                snprintf(lab, sizeof lab, "%u", o->m);
        }
        /* A run of the same op (layer, n and m label) is written once,
         * with its length: "qkv_gate*30". */
        uint32_t run = 1;
        char lab2[64];
        for (; i + run < q->n_ops; run++) {
            const pj_trace_op *p = &t->ops[q->op0 + i + run];
            if (p->name != o->name || p->n_req != o->n_req)
                break;
            if (!same) {
                if (mset_label)
                    mset_label(ctx, p->m, lab2, sizeof lab2);
                else
                    snprintf(lab2, sizeof lab2, "%u", p->m);
                if (strcmp(lab, lab2) != 0)
                    break;
            }
        }
        char qn[QUOTED_MAX];
        PUT("%s%s", i ? "," : "", name_text(t->names[o->name], qn, sizeof qn));
        if (o->n_req)
            PUT("/%u", o->n_req);
        if (run > 1)
            PUT("*%u", run);
        if (!same)
            PUT(" m=%s", lab);
        i += run;
    }
    if (same)
        PUT(" m=%s", first);
#undef PUT
    return len;
}

/* ---- writer ----------------------------------------------------------------- */

int pj_trace_write(const pj_trace *t, FILE *f, const char *header)
{
    if (header)
        fprintf(f, "# %s\n", header);
    for (size_t r = 0; r < t->n_reqs; r++) {
        const pj_trace_req *q = &t->reqs[r];
        fputc('{', f);
        if (q->t_us >= 0)
            fprintf(f, "\"t_us\":%lld,", (long long)q->t_us);
        fprintf(f, "\"client\":%u,\"ops\":[", q->client);
        for (uint32_t i = 0; i < q->n_ops; i++) {
            const pj_trace_op *o = &t->ops[q->op0 + i];
            char qn[QUOTED_MAX];
            fprintf(f, "%s{\"layer\":%s", i ? "," : "",
                    quote_name(t->names[o->name], qn, sizeof qn));
            fprintf(f, ",\"m\":%u", o->m);
            if (o->n_req)
                fprintf(f, ",\"n\":%u", o->n_req);
            fputc('}', f);
        }
        fputs("]}\n", f);
    }
    return ferror(f) ? -EIO : 0;
}

/* ---- generator -------------------------------------------------------------- */

const char *const pj_trace_gen_layers[5] = {"qkv_gate", "o", "pooler", "unpooler", "router"};
const uint32_t pj_trace_ref_m[6] = {1, 8, 16, 32, 128, 256};

void pj_trace_gen_defaults(pj_trace_gen *g)
{
    memset(g, 0, sizeof *g);
    g->kind = PJ_TRACE_DECODE;
    g->seed = 1;
    g->count = 1000;
    g->clients = 1;
    g->draft = 4;
    g->max_m = 256;
    g->max_batch = 0;
    g->unpooler_n = 1024;
    g->interval_us = 2000;
}

const char *pj_trace_kind_name(pj_trace_kind k)
{
    switch (k) {
    case PJ_TRACE_DECODE:
        return "decode";
    case PJ_TRACE_VERIFY:
        return "verify";
    case PJ_TRACE_REFERENCE:
        return "reference";
    }
    return NULL;
}

int pj_trace_kind_from_name(const char *name)
{
    for (int k = PJ_TRACE_DECODE; k <= PJ_TRACE_REFERENCE; k++)
        if (strcmp(name, pj_trace_kind_name((pj_trace_kind)k)) == 0)
            return k;
    return -1;
}

/* splitmix64: the generator's own PRNG, so a seed means the same trace
 * everywhere (no libc rand, no floating point in any decision). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n >= 1); the modulo bias is far below anything a
 * trace can show. */
static uint32_t rng_below(uint64_t *s, uint32_t n)
{
    return (uint32_t)(rng_next(s) % n);
}

/* Reflects b into [1, hi] as a ball bouncing between the walls, so a walk
 * does not stick to a bound. */
static int64_t reflect(int64_t b, int64_t hi)
{
    if (hi <= 1)
        return 1;
    int64_t period = 2 * (hi - 1);
    int64_t x = (b - 1) % period;
    if (x < 0)
        x += period;
    return x < hi ? x + 1 : period - x + 1;
}

/* One step of a batch walk: usually -2..+2 (sequences finish, arrive), now
 * and then a jump of up to 32 (a burst of arrivals or a wave of finishes). */
static uint32_t walk(uint64_t *s, uint32_t b, uint32_t hi)
{
    int64_t d;
    if (rng_below(s, 100) < 4) {
        d = 1 + rng_below(s, 32);
        if (rng_below(s, 2))
            d = -d;
    } else {
        d = (int64_t)rng_below(s, 5) - 2;
    }
    return (uint32_t)reflect((int64_t)b + d, hi);
}

typedef struct gen_item {
    int64_t t_us;
    uint64_t seq;
    uint32_t client, m;
} gen_item;

static int cmp_item(const void *a, const void *b)
{
    const gen_item *x = a, *y = b;
    if (x->t_us != y->t_us)
        return x->t_us < y->t_us ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

int pj_trace_generate(pj_trace *t, const pj_trace_gen *g, char *err, size_t errlen)
{
    pj_trace_init(t, "<generated>");
    const char *kind = pj_trace_kind_name(g->kind);
    if (!kind) {
        snprintf(err, errlen, "gen: unknown kind %d", (int)g->kind);
        return -EINVAL;
    }
    if (g->count < 1 || g->count > 100000000u) {
        snprintf(err, errlen, "gen: --count: expected 1..100000000, got %u", g->count);
        return -EINVAL;
    }
    if (g->clients < 1 || g->clients > PJ_TRACE_MAX_CLIENT + 1) {
        snprintf(err, errlen, "gen: --clients: expected 1..%d, got %u", PJ_TRACE_MAX_CLIENT + 1,
                 g->clients);
        return -EINVAL;
    }
    if (g->draft < 1 || g->draft > 64) {
        snprintf(err, errlen, "gen: --draft: expected 1..64, got %u", g->draft);
        return -EINVAL;
    }
    if (g->max_m < 1 || g->max_m > PJ_TRACE_MAX_M) {
        snprintf(err, errlen, "gen: --max-m: expected 1..%d, got %u", PJ_TRACE_MAX_M, g->max_m);
        return -EINVAL;
    }
    if (g->unpooler_n > PJ_TRACE_MAX_N) {
        snprintf(err, errlen, "gen: --unpooler-n: expected 0..%d, got %u", PJ_TRACE_MAX_N,
                 g->unpooler_n);
        return -EINVAL;
    }
    if (g->interval_us > 60000000u) {
        snprintf(err, errlen, "gen: --interval-us: expected 0..60000000, got %u", g->interval_us);
        return -EINVAL;
    }
    uint32_t per = 5;
    if (g->layers) {
        if (g->n_layers < 1 || g->n_layers > PJ_WIRE_MAX_LAYERS_ALL) {
            snprintf(err, errlen, "gen: --layers: expected 1..%d names, got %u",
                     PJ_WIRE_MAX_LAYERS_ALL, g->n_layers);
            return -EINVAL;
        }
        for (uint32_t i = 0; i < g->n_layers; i++) {
            size_t len = strlen(g->layers[i]);
            if (len < 1 || len > PJ_TRACE_NAME_MAX) {
                snprintf(err, errlen, "gen: --layers: name %u is %zu bytes; a layer name is 1..%d",
                         i + 1, len, PJ_TRACE_NAME_MAX);
                return -EINVAL;
            }
        }
        per = g->ops_per_request ? g->ops_per_request : g->n_layers;
        if (!g->ops_per_request && per > PJ_TRACE_GEN_MAX_OPS) {
            snprintf(err, errlen,
                     "gen: --layers: %u names are more than one request's %d ops: give "
                     "--ops-per-request (e.g. 4, a decoder layer's projections)",
                     g->n_layers, PJ_TRACE_GEN_MAX_OPS);
            return -EINVAL;
        }
        const uint32_t most =
            g->n_layers < PJ_TRACE_GEN_MAX_OPS ? g->n_layers : PJ_TRACE_GEN_MAX_OPS;
        if (per > most) {
            snprintf(
                err, errlen,
                "gen: --ops-per-request: expected 1..%u (the layers listed, at most %d), got %u",
                most, PJ_TRACE_GEN_MAX_OPS, per);
            return -EINVAL;
        }
    } else if (g->ops_per_request) {
        snprintf(err, errlen, "gen: --ops-per-request needs --layers");
        return -EINVAL;
    }
    uint32_t hi = g->max_batch;
    if (hi == 0)
        hi =
            g->kind == PJ_TRACE_VERIFY ? (g->max_m / g->draft ? g->max_m / g->draft : 1) : g->max_m;
    if (g->kind != PJ_TRACE_REFERENCE && hi > g->max_m) {
        snprintf(err, errlen, "gen: --max-batch %u is more than --max-m %u", hi, g->max_m);
        return -EINVAL;
    }
    if (g->kind == PJ_TRACE_REFERENCE && g->max_m < 256) {
        snprintf(err, errlen, "gen: reference loads go up to m = 256, more than --max-m %u allows",
                 g->max_m);
        return -EINVAL;
    }

    gen_item *items = malloc((size_t)g->count * sizeof *items);
    uint32_t *batch = malloc((size_t)g->clients * sizeof *batch);
    /* One stream per client, each with its own PRNG so adding a client
     * leaves the other streams' walks unchanged. */
    uint64_t *rs = malloc((size_t)g->clients * sizeof *rs);
    int rc = 0;
    if (!items || !batch || !rs) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t c = 0; c < g->clients; c++) {
        rs[c] = g->seed ^ (0x632be59bd9b4e019ull * (c + 1));
        rng_next(&rs[c]);
        batch[c] = 1 + rng_below(&rs[c], hi);
    }
    uint64_t iv = g->interval_us;
    for (uint32_t i = 0; i < g->count; i++) {
        uint32_t c = i % g->clients;
        uint64_t step = i / g->clients;
        gen_item *it = &items[i];
        it->seq = i;
        it->client = c;
        it->t_us = (int64_t)(step * iv + (uint64_t)c * iv / g->clients);
        switch (g->kind) {
        case PJ_TRACE_REFERENCE:
            it->m = pj_trace_ref_m[i % 6];
            break;
        case PJ_TRACE_DECODE:
        case PJ_TRACE_VERIFY: {
            if (step > 0)
                batch[c] = walk(&rs[c], batch[c], hi);
            uint64_t m = batch[c];
            if (g->kind == PJ_TRACE_VERIFY)
                m *= g->draft;
            it->m = (uint32_t)(m < g->max_m ? m : g->max_m);
            /* Steps are not perfectly regular: up to 10 % late. */
            it->t_us += rng_below(&rs[c], (uint32_t)(iv / 10 + 1));
            break;
        }
        }
    }
    qsort(items, g->count, sizeof *items, cmp_item);
    for (uint32_t i = 0; i < g->count; i++) {
        uint32_t ms[PJ_TRACE_GEN_MAX_OPS],
            ns[PJ_TRACE_GEN_MAX_OPS] = {0, 0, 0, g->layers ? 0 : g->unpooler_n, 0};
        const char *names[PJ_TRACE_GEN_MAX_OPS];
        /* a stream's step s runs the list from s * per on, wrapping */
        uint64_t at = items[i].seq / g->clients * per;
        for (uint32_t k = 0; k < per; k++) {
            ms[k] = items[i].m;
            names[k] = g->layers ? g->layers[(at + k) % g->n_layers] : pj_trace_gen_layers[k];
        }
        rc = pj_trace_add(t, items[i].t_us, items[i].client, names, ms, ns, per);
        if (rc)
            goto out;
    }
out:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "gen: out of memory for %u requests", g->count);
    else if (rc)
        snprintf(err, errlen,
                 "gen: a request's time (t_us) is past what a trace holds (2^50 us, 35 years): "
                 "fewer requests per client, or a shorter --interval-us");
    free(items);
    free(batch);
    free(rs);
    if (rc)
        pj_trace_free(t);
    return rc;
}
