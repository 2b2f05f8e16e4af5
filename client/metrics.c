/* metrics.c — STATS as Prometheus text (see metrics.h).
 *
 * The document comes from a daemon over a socket: whatever it holds, the
 * text must stay valid, since node_exporter drops a whole file that is not,
 * projd_up with it. So every name is checked against the ones written
 * before (a family twice, or a name cut short, is left out), keys repeated
 * in one object count once, label values and HELP texts are escaped and
 * made UTF-8, and the generic part (backend_stats) is bounded. */
#include "client/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "daemon/log.h"
#include "protocol/wire.h"

/* Label names projd's own series use: a constant label of the same name
 * would make a series with the name twice, which Prometheus refuses. */
static const char *const own_labels[] = {
    "version", "backend", "device", "state", "result", "type",   "code", "layer",  "quantile",
    "phase",   "le",      "lane",   "uuid",  "table",  "engine", "step", "reason", NULL};

/* Families at most (a hostile document's backend_stats could name
 * millions); elements of one backend array and children of one object
 * read at most. projd's own STATS has about 100 families, 1024 layers. */
#define MAX_FAMILIES 4096
#define MAX_ELEMENTS 256
#define MAX_CHILDREN 4096
#define NAME_MAX_LEN 200

static int is_label_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_label_char(char c)
{
    return is_label_start(c) || (c >= '0' && c <= '9');
}

/* s as UTF-8: each byte that does not start a well-formed character
 * becomes '?'. esc_quote: also escape '"' (label values, not HELP). */
static void put_text(FILE *f, const char *s, int esc_quote)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        unsigned char c = p[i];
        if (c == '\\') {
            fputs("\\\\", f);
        } else if (c == '\n') {
            fputs("\\n", f);
        } else if (c == '"' && esc_quote) {
            fputs("\\\"", f);
        } else if (c >= 0x80) {
            size_t len = pj_utf8_char_len(p + i, n - i);
            if (len) {
                fwrite(p + i, 1, len, f);
                i += len;
                continue;
            }
            fputc('?', f);
        } else {
            fputc(c, f);
        }
        i++;
    }
}

static int valid_utf8(const char *s)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t len = p[i] < 0x80 ? 1 : pj_utf8_char_len(p + i, n - i);
        if (!len)
            return 0;
        i += len;
    }
    return 1;
}

int pj_metrics_label_add(pj_metrics_labels *l, const char *kv, char *err, size_t errlen)
{
    const char *eq = strchr(kv, '=');
    size_t kl = eq ? (size_t)(eq - kv) : strlen(kv);
    if (!eq) {
        snprintf(err, errlen, "label \"%.64s\": expected KEY=VALUE", kv);
        return -EINVAL;
    }
    int ok = kl > 0 && kl < sizeof l->keys[0] && is_label_start(kv[0]);
    for (size_t i = 1; ok && i < kl; i++)
        ok = is_label_char(kv[i]);
    if (!ok) {
        snprintf(err, errlen,
                 "label \"%.*s\": a label name is 1..%zu characters of [a-zA-Z0-9_], not "
                 "starting with a digit",
                 (int)(kl > 64 ? 64 : kl), kv, sizeof l->keys[0] - 1);
        return -EINVAL;
    }
    char key[sizeof l->keys[0]];
    memcpy(key, kv, kl);
    key[kl] = '\0';
    if (key[0] == '_' && key[1] == '_') {
        snprintf(err, errlen, "label \"%s\": names starting with \"__\" are Prometheus's own", key);
        return -EINVAL;
    }
    for (size_t i = 0; own_labels[i]; i++)
        if (!strcmp(key, own_labels[i])) {
            snprintf(err, errlen, "label \"%s\": projd's own series use that name", key);
            return -EINVAL;
        }
    for (unsigned i = 0; i < l->n; i++)
        if (!strcmp(key, l->keys[i])) {
            snprintf(err, errlen, "label \"%s\" given twice", key);
            return -EINVAL;
        }
    if (!valid_utf8(eq + 1)) {
        snprintf(err, errlen, "label \"%s\": the value is not UTF-8 text", key);
        return -EINVAL;
    }
    if (l->n >= PJ_METRICS_MAX_LABELS) {
        snprintf(err, errlen, "more than %d labels", PJ_METRICS_MAX_LABELS);
        return -EINVAL;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    fprintf(f, "%s%s=\"", l->text[0] ? "," : "", key);
    put_text(f, eq + 1, 1);
    fputc('"', f);
    if (fclose(f) != 0 || strlen(l->text) + len >= sizeof l->text) {
        free(text);
        snprintf(err, errlen, "label \"%s\": the labels exceed %zu bytes", key, sizeof l->text - 1);
        return -EINVAL;
    }
    strcat(l->text, text);
    free(text);
    snprintf(l->keys[l->n++], sizeof l->keys[0], "%s", key);
    return 0;
}

/* ---- writing ------------------------------------------------------------ */

typedef struct mw {
    FILE *f;
    const pj_metrics_labels *l;
    /* The families written: open addressing over their names (owned). */
    char *fam[2 * MAX_FAMILIES];
    size_t n_fam;
} mw;

/* Starts family name: 0, or -1 when it may not (written before, or the
 * table full: its samples are then left out too). */
static int family(mw *w, const char *name, const char *type, const char *help)
{
    const size_t cap = sizeof w->fam / sizeof w->fam[0];
    size_t i = pj_str_hash(name) & (cap - 1);
    for (; w->fam[i]; i = (i + 1) & (cap - 1))
        if (!strcmp(w->fam[i], name))
            return -1;
    if (w->n_fam >= MAX_FAMILIES || !(w->fam[i] = strdup(name)))
        return -1;
    w->n_fam++;
    fprintf(w->f, "# HELP %s ", name);
    put_text(w->f, help, 0);
    fprintf(w->f, "\n# TYPE %s %s\n", name, type);
    return 0;
}

static void put_value(FILE *f, double v)
{
    if (isnan(v)) {
        fputs(" NaN\n", f);
    } else if (isinf(v)) {
        fputs(v > 0 ? " +Inf\n" : " -Inf\n", f);
    } else {
        /* The shortest of 15 or 17 digits that reads back the same. */
        char b[40];
        snprintf(b, sizeof b, "%.15g", v);
        if (strtod(b, NULL) != v)
            snprintf(b, sizeof b, "%.17g", v);
        fprintf(f, " %s\n", b);
    }
}

/* One sample: name, the pairs of dynamic labels (key, value, ..., NULL),
 * the constant labels, the value. */
static void sample(mw *w, const char *name, const char *const *kv, double v)
{
    fputs(name, w->f);
    const char *sep = "{";
    for (size_t i = 0; kv && kv[i]; i += 2) {
        fprintf(w->f, "%s%s=\"", sep, kv[i]);
        put_text(w->f, kv[i + 1], 1);
        fputc('"', w->f);
        sep = ",";
    }
    if (w->l && w->l->text[0]) {
        fprintf(w->f, "%s%s", sep, w->l->text);
        sep = ",";
    }
    if (sep[0] == ',')
        fputc('}', w->f);
    put_value(w->f, v);
}

static int get_num(const cJSON *o, const char *key, double *v)
{
    const cJSON *j = o ? cJSON_GetObjectItemCaseSensitive(o, key) : NULL;
    if (cJSON_IsNumber(j))
        *v = j->valuedouble;
    else if (cJSON_IsBool(j))
        *v = cJSON_IsTrue(j) ? 1 : 0;
    else
        return 0;
    return 1;
}

/* 1 when no earlier child of c's object has c's key (cJSON keeps a key
 * given twice; its series would be written twice). */
static int first_of_key(const cJSON *c)
{
    /* The first child's prev is the last one, whose next is NULL. */
    for (const cJSON *p = c->prev; p && p->next; p = p->prev)
        if (p->string && !strcmp(p->string, c->string))
            return 0;
    return 1;
}

/* A metric without labels from obj.key, times scale. */
static void one(mw *w, const cJSON *obj, const char *key, const char *name, const char *type,
                double scale, const char *help)
{
    double v;
    if (get_num(obj, key, &v) && family(w, name, type, help) == 0)
        sample(w, name, NULL, v * scale);
}

/* A family of labelled samples started at its first sample, so that a
 * family with none is not written at all. */
typedef struct lazy_family {
    const char *name, *type, *help;
    int state; /* 0 not started, 1 started, -1 refused (its samples left out) */
} lazy_family;

/* One sample of f labelled lk = lv. 0, or -1 once the family was refused
 * (written before, or the table full): its callers stop there. */
static int lazy_sample(mw *w, lazy_family *f, const char *lk, const char *lv, double v)
{
    if (!f->state)
        f->state = family(w, f->name, f->type, f->help) == 0 ? 1 : -1;
    if (f->state < 0)
        return -1;
    const char *kv[] = {lk, lv, NULL};
    sample(w, f->name, kv, v);
    return 0;
}

/* One family over several keys of obj, told apart by one label: pairs are
 * (key in obj, label value), NULL-terminated. */
static void by_label(mw *w, const cJSON *obj, const char *name, const char *type, const char *label,
                     const char *const *pairs, const char *help)
{
    lazy_family f = {name, type, help, 0};
    double v;
    for (size_t i = 0; pairs[i]; i += 2)
        if (get_num(obj, pairs[i], &v) && lazy_sample(w, &f, label, pairs[i + 1], v))
            break;
}

/* Every numeric child of obj but "total", by its key as the label, into f.
 * 0, or -1 once f was refused. */
static int by_key_into(mw *w, lazy_family *f, const cJSON *obj, const char *label)
{
    int seen = 0;
    for (const cJSON *c = obj ? obj->child : NULL; c && seen < MAX_CHILDREN; c = c->next, seen++) {
        if (!cJSON_IsNumber(c) || !c->string || !strcmp(c->string, "total") || !first_of_key(c))
            continue;
        if (lazy_sample(w, f, label, c->string, c->valuedouble))
            return -1;
    }
    return 0;
}

/* by_key, with each of known (NULL-terminated) that obj lacks written at
 * 0: STATS counts a request type or an error code from its first, and a
 * series that appears at its first gives rate() and increase() nothing to
 * compare it with (an alert on errors misses the first burst). */
static void by_key_known(mw *w, const cJSON *obj, const char *name, const char *label,
                         const char *const *known, const char *help)
{
    if (!cJSON_IsObject(obj))
        return;
    lazy_family f = {name, "counter", help, 0};
    if (by_key_into(w, &f, obj, label))
        return;
    for (size_t i = 0; known[i]; i++)
        if (!cJSON_IsNumber(cJSON_GetObjectItemCaseSensitive(obj, known[i])) &&
            lazy_sample(w, &f, label, known[i], 0))
            return;
}

static void requests_and_errors(mw *w, const cJSON *d)
{
    /* The requests a client sends, counted as they arrive: one dropped
     * with its connection (a client killed before its turn) counts and
     * gets no reply, so these need not sum to STATS' requests.total, the
     * replies sent. */
    static const char *const types[] = {"HELLO", "REGISTER", "UNREGISTER",  "PROJECT",
                                        "STATS", "PING",     "RING_ATTACH", NULL};
    by_key_known(w, cJSON_GetObjectItemCaseSensitive(d, "requests"), "projd_requests_total", "type",
                 types, "Requests received, by type");
    /* Every status code this build knows. */
    const char *codes[64];
    size_t n = 0;
    for (int code = 1; code < 256 && n + 1 < sizeof codes / sizeof codes[0]; code++)
        if (strcmp(pj_status_name(code), "E_UNKNOWN") != 0)
            codes[n++] = pj_status_name(code);
    codes[n] = NULL;
    by_key_known(w, cJSON_GetObjectItemCaseSensitive(d, "errors"), "projd_errors_total", "code",
                 codes, "Errors replied, by status code");
}

/* Whether h is a STATS histogram ({count, mean, p50, p99} at least). */
static int is_hist(const cJSON *h)
{
    double v;
    return get_num(h, "count", &v) && get_num(h, "mean", &v) && get_num(h, "p50", &v) &&
           get_num(h, "p99", &v);
}

/* The samples of a summary from a STATS histogram ({count, mean, p50,
 * p99, max} in microseconds; is_hist); lk = lv labels it (lk may be NULL). */
static void summary_samples(mw *w, const char *name, const cJSON *h, const char *lk, const char *lv)
{
    double count = 0, mean = 0, p50 = 0, p99 = 0, sum_us = 0;
    get_num(h, "count", &count);
    get_num(h, "mean", &mean);
    get_num(h, "p50", &p50);
    get_num(h, "p99", &p99);
    char sum_name[NAME_MAX_LEN + 16], count_name[NAME_MAX_LEN + 16];
    snprintf(sum_name, sizeof sum_name, "%s_sum", name);
    snprintf(count_name, sizeof count_name, "%s_count", name);
    const char *q50[5], *q99[5], *plain[3] = {lk, lv, NULL};
    size_t i = 0;
    if (lk) {
        q50[0] = q99[0] = lk;
        q50[1] = q99[1] = lv;
        i = 2;
    }
    q50[i] = q99[i] = "quantile";
    q50[i + 1] = "0.5";
    q99[i + 1] = "0.99";
    q50[i + 2] = q99[i + 2] = NULL;
    /* No observation has no quantile: NaN, as Prometheus's own clients
     * write it, not a 0 that reads as a fast request. */
    sample(w, name, q50, count > 0 ? p50 / 1e6 : NAN);
    sample(w, name, q99, count > 0 ? p99 / 1e6 : NAN);
    /* The exact sum where projd gives it: mean x count, each rounded,
     * went down a few ulps when an observation of 0 (a refused job) came,
     * which rate() takes for a counter reset. */
    const double sum = get_num(h, "sum_us", &sum_us) ? sum_us : mean * count;
    sample(w, sum_name, lk ? plain : NULL, sum / 1e6);
    sample(w, count_name, lk ? plain : NULL, count);
}

static void requests(mw *w, const cJSON *doc)
{
    const cJSON *lat = cJSON_GetObjectItemCaseSensitive(doc, "latency_us");
    static const struct {
        const char *key, *name, *help;
    } phases[] = {
        {"queue", "projd_request_queue_seconds",
         "PROJECT requests: from received to started, since the daemon started"},
        {"exec", "projd_request_exec_seconds",
         "PROJECT requests: from started to finished, since the daemon started"},
        {"total", "projd_request_seconds",
         "PROJECT requests: from received to replied, since the daemon started"},
    };
    for (size_t i = 0; i < 3; i++) {
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(lat, phases[i].key);
        if (is_hist(h) && family(w, phases[i].name, "summary", phases[i].help) == 0)
            summary_samples(w, phases[i].name, h, NULL, NULL);
    }
    lazy_family max = {"projd_request_max_seconds", "gauge",
                       "The longest PROJECT request phase since the daemon started", 0};
    for (size_t i = 0; i < 3; i++) {
        double v;
        if (get_num(cJSON_GetObjectItemCaseSensitive(lat, phases[i].key), "max", &v) &&
            lazy_sample(w, &max, "phase", phases[i].key, v / 1e6))
            break;
    }
}

/* A layer of STATS "layers" that is written: an object, named, the first
 * of its name, within the bound. */
static int layer_ok(const cJSON *l, int index)
{
    return index < MAX_CHILDREN && cJSON_IsObject(l) && l->string && first_of_key(l);
}

/* Per layer: field-major, since a family's samples must be together. */
static void layers(mw *w, const cJSON *doc)
{
    const cJSON *ls = cJSON_GetObjectItemCaseSensitive(doc, "layers");
    if (!cJSON_IsObject(ls) || !ls->child)
        return;
    static const struct {
        const char *key, *name, *help;
    } counters[] = {
        {"ops", "projd_layer_ops_total", "Operations run on the layer"},
        {"rows", "projd_layer_rows_total", "Rows of x (tokens) projected by the layer"},
    };
    for (size_t i = 0; i < 2; i++) {
        if (family(w, counters[i].name, "counter", counters[i].help))
            continue;
        int idx = 0;
        for (const cJSON *l = ls->child; l; l = l->next, idx++) {
            double v;
            if (layer_ok(l, idx) && get_num(l, counters[i].key, &v)) {
                const char *kv[] = {"layer", l->string, NULL};
                sample(w, counters[i].name, kv, v);
            }
        }
    }
    if (family(w, "projd_layer_exec_seconds", "summary",
               "Execution time of one-op requests on the layer, since the daemon started"))
        return;
    int idx = 0;
    for (const cJSON *l = ls->child; l; l = l->next, idx++) {
        const cJSON *h = layer_ok(l, idx) ? cJSON_GetObjectItemCaseSensitive(l, "exec_us") : NULL;
        if (is_hist(h))
            summary_samples(w, "projd_layer_exec_seconds", h, "layer", l->string);
    }
}

/* ---- backend_stats, flattened ------------------------------------------ */

/* prefix_key with every character a name may not hold made '_'; -1 when
 * it does not fit (a name cut short could meet another). */
static int metric_name(char *out, size_t cap, const char *prefix, const char *key)
{
    int n = snprintf(out, cap, "%s_%s", prefix, key);
    if (n < 0 || (size_t)n >= cap || (size_t)n > NAME_MAX_LEN)
        return -1;
    for (size_t i = strlen(prefix) + 1; i < (size_t)n; i++)
        if (!is_label_char(out[i]))
            out[i] = '_';
    return 0;
}

/* A label name for key: its characters made legal, "backend_" before one
 * that would start with "__" (Prometheus's) or meet a constant label. -1
 * when it does not fit. */
static int label_name(const mw *w, char *out, size_t cap, const char *key)
{
    int n = snprintf(out, cap, "%s%s", is_label_start(key[0]) ? "" : "_", key);
    if (n < 0 || (size_t)n >= cap)
        return -1;
    for (char *p = out; *p; p++)
        if (!is_label_char(*p))
            *p = '_';
    int clash = out[0] == '_' && out[1] == '_';
    for (unsigned i = 0; w->l && i < w->l->n && !clash; i++)
        clash = !strcmp(out, w->l->keys[i]);
    if (clash) {
        char tmp[128];
        if ((size_t)snprintf(tmp, sizeof tmp, "backend_%s", out) >= sizeof tmp ||
            strlen(tmp) >= cap)
            return -1;
        snprintf(out, cap, "%s", tmp);
        for (unsigned i = 0; w->l && i < w->l->n; i++)
            if (!strcmp(out, w->l->keys[i]))
                return -1;
    }
    return 0;
}

static int is_scalar(const cJSON *j)
{
    return cJSON_IsNumber(j) || cJSON_IsBool(j);
}

/* What the backends' numbers are (cu_stats_json in daemon/backend_cuda.c,
 * cpu_stats_json in backend_cpu.c), by their path in backend_stats ("a.b"
 * nested, "arr[].f" a field of an array's elements; a path ending in '.'
 * covers what is under it): a counter's name ends in _total. A path not
 * here (a backend's newer field) stays untyped, as the text format allows. */
typedef struct backend_kind {
    const char *path;
    int counter;
    const char *help; /* NULL: "backend_stats.<path>" */
} backend_kind;

static const backend_kind backend_kinds[] = {
    {"jobs", 1, "Jobs (PROJECT requests) the backend took (cuda: launched; cpu: finished)"},
    {"ops", 1, "Operations the backend took (cuda: launched; cpu: finished)"},
    {"accepted", 1, "Jobs answered when launched (ACCEPT), before they finished"},
    {"waits_put_off", 1, "WAIT_EVENT jobs put off while a buffer release waited to start"},
    {"waits_on_host", 1, "WAIT_EVENT jobs whose client event was waited for on the host"},
    {"queue_put_off", 1, "Jobs put off because their lane's queue was at its launch budget"},
    {"queue_refused", 1, "Jobs refused because their lane's queue was at its launch budget"},
    {"failed", 1, "Jobs that failed on the device"},
    {"fatal", 1, "Device errors that end the backend (a restart is due)"},
    {"paths.", 1, "Operations by how they ran (graph or direct, staged or not)"},
    {"lane[].jobs", 1, "Jobs run on the lane"},
    {"chunks", 1, "Pieces of work the cpu backend's threads ran"},
    {"busy_ms", 1, "Seconds the cpu backend's threads spent on operations"},
    {"lanes", 0, "Lanes (streams with their own graphs) the backend runs"},
    {"ipc_open", 0, "CUDA IPC allocations of clients open now"},
    {"dead", 0, "1 once the device failed for good (the daemon must restart)"},
    {"lane[].connections", 0, "Connections on the lane"},
    {"lane[].held", 0, "1 while the lane waits behind a client that died"},
    {"lane[].pending", 0, "Jobs queued on the lane now"},
    {"memory.", 0, NULL},
    {"threads", 0, "Worker threads of the cpu backend"},
    {"min_op_us", 0, "The cpu backend's minimum time per operation (a test setting)"},
};

static const backend_kind *backend_kind_of(const char *path)
{
    for (size_t i = 0; i < sizeof backend_kinds / sizeof backend_kinds[0]; i++) {
        const char *k = backend_kinds[i].path;
        size_t n = strlen(k);
        if (k[n - 1] == '.' ? !strncmp(path, k, n) : !strcmp(path, k))
            return &backend_kinds[i];
    }
    return NULL;
}

/* Starts the family of a backend number at path: its type from
 * backend_kinds, and _total after a counter's name (name has cap bytes).
 * 0, or -1 as family() (or when the name does not fit). */
static int backend_family(mw *w, char *name, size_t cap, const char *path, const char *dflt_help)
{
    const backend_kind *k = backend_kind_of(path);
    if (k && k->counter) {
        size_t n = strlen(name);
        if (n + strlen("_total") >= cap || n + strlen("_total") > NAME_MAX_LEN)
            return -1;
        strcpy(name + n, "_total");
    }
    return family(w, name,
                  !k           ? "untyped"
                  : k->counter ? "counter"
                               : "gauge",
                  k && k->help ? k->help : dflt_help);
}

/* An array of objects: one family per numeric field (in the order the
 * fields first appear), the element's index as a label named after the
 * array. */
static void backend_array(mw *w, const cJSON *arr, const char *name, const char *path)
{
    char lab[128];
    if (label_name(w, lab, sizeof lab, arr->string))
        return;
    int ne = 0;
    for (const cJSON *e = arr->child; e && ne < MAX_ELEMENTS; e = e->next, ne++) {
        int nf = 0;
        for (const cJSON *f = cJSON_IsObject(e) ? e->child : NULL; f && nf < MAX_CHILDREN;
             f = f->next, nf++) {
            char fname[NAME_MAX_LEN + 1], help[NAME_MAX_LEN + 96];
            if (!is_scalar(f) || !f->string || !first_of_key(f) ||
                metric_name(fname, sizeof fname, name, f->string))
                continue;
            char fpath[NAME_MAX_LEN + 64];
            snprintf(fpath, sizeof fpath, "%.120s[].%.60s", path, f->string);
            snprintf(help, sizeof help, "backend_stats.%s", fpath);
            if (backend_family(w, fname, sizeof fname, fpath, help)) /* written, or refused */
                continue;
            int idx = 0;
            for (const cJSON *q = arr->child; q && idx < MAX_ELEMENTS; q = q->next, idx++) {
                double v;
                if (!cJSON_IsObject(q) || !get_num(q, f->string, &v))
                    continue;
                char is[16];
                snprintf(is, sizeof is, "%d", idx);
                const char *kv[] = {lab, is, NULL};
                sample(w, fname, kv, v);
            }
        }
    }
}

/* A key ending in _ms or _us is a time in that unit: the name ends in
 * _seconds instead, and *scale says the factor. 0, or -1 when the name
 * does not fit. */
static int time_name(char *name, size_t cap, double *scale)
{
    size_t n = strlen(name);
    *scale = 1;
    if (n < 3 || name[n - 3] != '_' || name[n - 1] != 's' ||
        (name[n - 2] != 'm' && name[n - 2] != 'u'))
        return 0;
    *scale = name[n - 2] == 'm' ? 1e-3 : 1e-6;
    if (n - 3 + strlen("_seconds") >= cap)
        return -1;
    strcpy(name + n - 3, "_seconds");
    return 0;
}

/* cuda's startup_ms: the start's steps in milliseconds, as one family with
 * the step as its label, and the one count among them by itself. */
static void backend_startup(mw *w, const cJSON *su)
{
    lazy_family f = {"projd_backend_startup_seconds", "gauge",
                     "Seconds each step of the backend's start took", 0};
    int nc = 0;
    for (const cJSON *c = su->child; c && nc < MAX_CHILDREN; c = c->next, nc++) {
        if (!cJSON_IsNumber(c) || !c->string || !first_of_key(c) ||
            !strcmp(c->string, "warmed_shapes"))
            continue;
        if (lazy_sample(w, &f, "step", c->string, c->valuedouble / 1e3))
            break;
    }
    one(w, su, "warmed_shapes", "projd_backend_startup_warmed_shapes", "gauge", 1,
        "Shapes the start warmed (run once) on every lane");
}

static void backend_walk(mw *w, const cJSON *obj, const char *prefix, const char *path, int depth)
{
    int nc = 0;
    for (const cJSON *c = obj->child; c && nc < MAX_CHILDREN; c = c->next, nc++) {
        char name[NAME_MAX_LEN + 1], sub[NAME_MAX_LEN + 64];
        double scale;
        if (!c->string || metric_name(name, sizeof name, prefix, c->string))
            continue;
        snprintf(sub, sizeof sub, "%.120s%s%.60s", path, path[0] ? "." : "", c->string);
        if (is_scalar(c)) {
            char help[NAME_MAX_LEN + 96];
            snprintf(help, sizeof help, "backend_stats.%.190s", sub);
            if (time_name(name, sizeof name, &scale) == 0 &&
                backend_family(w, name, sizeof name, sub, help) == 0)
                sample(w, name, NULL,
                       cJSON_IsTrue(c)     ? 1
                       : cJSON_IsNumber(c) ? c->valuedouble * scale
                                           : 0);
        } else if (cJSON_IsObject(c) && !strcmp(sub, "startup_ms")) {
            backend_startup(w, c);
        } else if (cJSON_IsObject(c) && depth < 8) {
            backend_walk(w, c, name, sub, depth + 1);
        } else if (cJSON_IsArray(c) && strcmp(sub, "engines") != 0) {
            backend_array(w, c, name, sub);
        }
    }
}

static void backend(mw *w, const cJSON *bs)
{
    if (!cJSON_IsObject(bs))
        return;
    /* The strings of the top level (device, uuid, table, engine) as the
     * labels of one info series; a name met twice is left out. */
    enum { MAX_INFO = 16 };
    const char *kv[2 * MAX_INFO + 1];
    char labs[MAX_INFO][128];
    size_t n = 0;
    int nc = 0;
    for (const cJSON *c = bs->child; c && n < MAX_INFO && nc < MAX_CHILDREN; c = c->next, nc++) {
        if (!cJSON_IsString(c) || !c->string || label_name(w, labs[n], sizeof labs[n], c->string))
            continue;
        int dup = 0;
        for (size_t i = 0; i < n && !dup; i++)
            dup = !strcmp(labs[i], labs[n]);
        if (dup)
            continue;
        kv[2 * n] = labs[n];
        kv[2 * n + 1] = c->valuestring;
        n++;
    }
    kv[2 * n] = NULL;
    if (n && family(w, "projd_backend_info", "gauge",
                    "The backend's strings from STATS, as labels") == 0)
        sample(w, "projd_backend_info", kv, 1);
    backend_walk(w, bs, "projd_backend", "", 0);
}

/* ---- the document ---------------------------------------------------------- */

static void up(mw *w, int is_up)
{
    if (family(w, "projd_up", "gauge",
               "Whether projd answered (1: STATS, or a refusal of the connection at a limit or in "
               "a drain) or not (0)") == 0)
        sample(w, "projd_up", NULL, is_up);
}

static const char *str(const cJSON *o, const char *key)
{
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(j) ? j->valuestring : "";
}

/* The metrics that are one number of STATS each: section (NULL: the top
 * level), key, name, counter or gauge, the factor to the name's unit. */
typedef struct plain_metric {
    const char *section, *key, *name;
    int counter;
    double scale;
    const char *help;
} plain_metric;

static const plain_metric plain[] = {
    {"connections", "lost_now", "projd_clients_lost_held", 0, 1,
     "Closed connections whose client died before its GPU work (held until it ends)"},
    {"connections", "lost_clients", "projd_clients_lost_total", 1, 1,
     "Clients that died before their GPU work, since the start"},
    {"connections", "total", "projd_connections_total", 1, 1, "Connections accepted"},
    {"connections", "refused", "projd_connections_refused_total", 1, 1,
     "Connections refused (credentials, limits, draining)"},
    {"connections", "limit", "projd_connections_limit", 0, 1,
     "limits.max_connections: connections past it are refused"},
    {"connections", "hello_timeouts", "projd_hello_timeouts_total", 1, 1,
     "Connections closed for not saying HELLO in time"},
    {"connections", "listener_restarts", "projd_listener_restarts_total", 1, 1,
     "Times the socket's listener was set up again"},
    {"connections", "reaper_probes", "projd_reaper_probes_total", 1, 1,
     "Probe pipes nng's reaper was seen to retire (projd exits 1 when one is not in 30 s)"},
    {"buffers", "current", "projd_buffers", 0, 1, "Registered buffers"},
    {"buffers", "mapped_bytes", "projd_buffer_mapped_bytes", 0, 1,
     "Bytes of registered buffers mapped"},
    {"buffers", "releasing", "projd_buffers_releasing", 0, 1,
     "Buffers handed to the closer, not yet released"},
    {"buffers", "release_wait_ms", "projd_buffer_release_wait_seconds", 0, 1e-3,
     "How long the running release has taken"},
    {NULL, "inflight", "projd_inflight_requests", 0, 1, "PROJECT requests in flight"},
    {NULL, "submits_deferred", "projd_submits_deferred_total", 1, 1,
     "Jobs put off by the backend and tried again"},
    {"watchdog", "usec", "projd_watchdog_interval_seconds", 0, 1e-6,
     "systemd's WatchdogSec as the daemon got it (0: off)"},
    {"watchdog", "withheld", "projd_watchdog_withheld", 0, 1,
     "1 while the daemon withholds its watchdog pings (a stall)"},
    {"watchdog", "stalls", "projd_watchdog_stalls_total", 1, 1,
     "Stalls: pings withheld for work that did not finish in time"},
    {"watchdog", "client_waits", "projd_watchdog_client_waits_total", 1, 1,
     "Long waits for a client's event that were not counted as stalls"},
    {"memory", "rss_bytes", "projd_resident_memory_bytes", 0, 1, "Resident set size of the daemon"},
    {"memory", "weights_bytes", "projd_weights_bytes", 0, 1,
     "Bytes of the weights as stored for serving"},
    {"ring", "enabled", "projd_ring_enabled", 0, 1, "Whether rings may attach"},
    {"ring", "attached", "projd_rings_attached", 0, 1, "Rings attached now"},
    {"ring", "broken", "projd_rings_broken", 0, 1, "Attached rings closed as corrupt"},
    {"ring", "attaches_total", "projd_ring_attaches_total", 1, 1, "Ring attaches"},
    {"ring", "requests", "projd_ring_requests_total", 1, 1, "Requests over rings"},
    {"ring", "replies_lost", "projd_ring_replies_lost_total", 1, 1,
     "Ring replies that found the completion queue full"},
    {"ring", "poller_sleeps", "projd_ring_poller_sleeps_total", 1, 1,
     "Times a ring's poller went to sleep"},
    {"ring", "wakes", "projd_ring_wakes_total", 1, 1, "Wakes through the rings' FIFOs"},
};

static void render(mw *w, const cJSON *d)
{
    up(w, 1);
    if (family(w, "projd_info", "gauge", "The daemon's version, backend and device") == 0) {
        const char *info[] = {"version", str(d, "version"), "backend", str(d, "backend"),
                              "device",  str(d, "device"),  NULL};
        sample(w, "projd_info", info, 1);
    }
    one(w, d, "uptime_s", "projd_uptime_seconds", "gauge", 1,
        "Seconds since the daemon began serving (after its model load and backend start)");
    one(w, d, "draining", "projd_draining", "gauge", 1,
        "1 while the daemon drains to stop (SIGTERM), else 0");

    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(d, "connections");
    static const char *const conn_states[] = {
        "current", "open", "closing", "closing", "closed_waiting", "closed_waiting", NULL};
    by_label(w, cn, "projd_connections_by_state", "gauge", "state", conn_states,
             "Connections: open, closing, and closed with work still running");
    for (size_t i = 0; i < sizeof plain / sizeof plain[0]; i++) {
        const plain_metric *p = &plain[i];
        const cJSON *obj = p->section ? cJSON_GetObjectItemCaseSensitive(d, p->section) : d;
        one(w, obj, p->key, p->name, p->counter ? "counter" : "gauge", p->scale, p->help);
    }

    const cJSON *rl = cJSON_GetObjectItemCaseSensitive(d, "reload");
    static const char *const results[] = {"applied", "applied", "refused", "refused",
                                          "failed",  "failed",  NULL};
    by_label(w, rl, "projd_reloads_total", "counter", "result", results,
             "SIGHUP reloads by outcome");
    one(w, cJSON_GetObjectItemCaseSensitive(rl, "last"), "unix_time",
        "projd_reload_last_timestamp_seconds", "gauge", 1, "When the last reload ran");

    const cJSON *md = cJSON_GetObjectItemCaseSensitive(d, "model");
    one(w, md, "file_bytes", "projd_model_file_bytes", "gauge", 1, "Size of the served model file");
    const cJSON *ml = cJSON_GetObjectItemCaseSensitive(md, "layers");
    if (cJSON_IsArray(ml) &&
        family(w, "projd_model_layers", "gauge", "Layers the daemon serves") == 0)
        sample(w, "projd_model_layers", NULL, cJSON_GetArraySize(ml));

    requests_and_errors(w, d);
    one(w, d, "ops", "projd_ops_total", "counter", 1, "Operations run (a request holds 1 or more)");
    requests(w, d);
    layers(w, d);

    backend(w, cJSON_GetObjectItemCaseSensitive(d, "backend_stats"));
}

static mw *mw_open(const pj_metrics_labels *l, char **text, size_t *size)
{
    mw *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->l = l;
    w->f = open_memstream(text, size);
    if (!w->f) {
        free(w);
        return NULL;
    }
    return w;
}

/* Closes w; the text (open_memstream sets *text at the close), or NULL. */
static char *mw_close(mw *w, char **text)
{
    for (size_t i = 0; i < sizeof w->fam / sizeof w->fam[0]; i++)
        free(w->fam[i]);
    int failed = fclose(w->f) != 0;
    free(w);
    if (failed) {
        free(*text);
        return NULL;
    }
    return *text;
}

char *pj_metrics_render(const char *stats_json, size_t len, const pj_metrics_labels *l, char *err,
                        size_t errlen)
{
    cJSON *d = cJSON_ParseWithLength(stats_json, len);
    if (!cJSON_IsObject(d) || !cJSON_IsString(cJSON_GetObjectItemCaseSensitive(d, "version"))) {
        snprintf(err, errlen,
                 "the STATS reply is not a STATS document (a JSON object with a "
                 "\"version\")");
        cJSON_Delete(d);
        return NULL;
    }
    char *text = NULL;
    size_t size = 0;
    mw *w = mw_open(l, &text, &size);
    if (w)
        render(w, d);
    cJSON_Delete(d);
    if (!w || !mw_close(w, &text)) {
        snprintf(err, errlen, "out of memory");
        return NULL;
    }
    return text;
}

/* The document without STATS: projd_up alone (reason NULL: it did not
 * answer), or up with the refusal's reason. */
static char *render_without_stats(const pj_metrics_labels *l, const char *reason)
{
    char *text = NULL;
    size_t size = 0;
    mw *w = mw_open(l, &text, &size);
    if (!w)
        return NULL;
    up(w, reason != NULL);
    const char *kv[] = {"reason", reason, NULL};
    if (reason && family(w, "projd_scrape_refused", "gauge",
                         "1 when projd answered this scrape's connection with a refusal (reason "
                         "E_LIMIT: a connection limit reached; E_SHUTDOWN: draining): it is up, "
                         "and its other series are absent") == 0)
        sample(w, "projd_scrape_refused", kv, 1);
    return mw_close(w, &text);
}

char *pj_metrics_render_down(const pj_metrics_labels *l)
{
    return render_without_stats(l, NULL);
}

char *pj_metrics_render_refused(const pj_metrics_labels *l, const char *reason)
{
    return render_without_stats(l, reason);
}
