/* metrics.c — STATS as Prometheus text (see metrics.h). */
#include "client/metrics.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Label names projd's own series use: a constant label of the same name
 * would make a series with the name twice, which Prometheus refuses. */
static const char *const own_labels[] = {
    "version",  "backend", "device", "state", "result", "type",  "code",   "layer",
    "quantile", "phase",   "le",     "lane",  "uuid",   "table", "engine", NULL};

static int is_label_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

static int is_label_char(char c)
{
    return is_label_start(c) || (c >= '0' && c <= '9');
}

/* The value as the format wants it inside quotes: \, " and newline
 * escaped; everything else as is. */
static void put_escaped(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '\\')
            fputs("\\\\", f);
        else if (*s == '"')
            fputs("\\\"", f);
        else if (*s == '\n')
            fputs("\\n", f);
        else
            fputc(*s, f);
    }
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
    put_escaped(f, eq + 1);
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
} mw;

static void family(mw *w, const char *name, const char *type, const char *help)
{
    fprintf(w->f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* One sample: name, the pairs of dynamic labels (key, value, ..., NULL),
 * the constant labels, the value. */
static void sample(mw *w, const char *name, const char *const *kv, double v)
{
    fputs(name, w->f);
    const char *sep = "{";
    for (size_t i = 0; kv && kv[i]; i += 2) {
        fprintf(w->f, "%s%s=\"", sep, kv[i]);
        put_escaped(w->f, kv[i + 1]);
        fputc('"', w->f);
        sep = ",";
    }
    if (w->l && w->l->text[0]) {
        fprintf(w->f, "%s%s", sep, w->l->text);
        sep = ",";
    }
    if (sep[0] == ',')
        fputc('}', w->f);
    if (isnan(v))
        fputs(" NaN\n", w->f);
    else if (isinf(v))
        fputs(v > 0 ? " +Inf\n" : " -Inf\n", w->f);
    else
        fprintf(w->f, " %.15g\n", v);
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

/* A metric without labels from obj.key, times scale. */
static void one(mw *w, const cJSON *obj, const char *key, const char *name, const char *type,
                double scale, const char *help)
{
    double v;
    if (!get_num(obj, key, &v))
        return;
    family(w, name, type, help);
    sample(w, name, NULL, v * scale);
}

/* One family over several keys of obj, told apart by one label: pairs are
 * (key in obj, label value), NULL-terminated. */
static void by_label(mw *w, const cJSON *obj, const char *name, const char *type, const char *label,
                     const char *const *pairs, const char *help)
{
    int any = 0;
    double v;
    for (size_t i = 0; pairs[i]; i += 2) {
        if (!get_num(obj, pairs[i], &v))
            continue;
        if (!any++)
            family(w, name, type, help);
        const char *kv[] = {label, pairs[i + 1], NULL};
        sample(w, name, kv, v);
    }
}

/* Every numeric child of obj but "total", by its key as the label. */
static void by_key(mw *w, const cJSON *obj, const char *name, const char *label, const char *help)
{
    int any = 0;
    for (const cJSON *c = obj ? obj->child : NULL; c; c = c->next) {
        if (!cJSON_IsNumber(c) || !c->string || !strcmp(c->string, "total"))
            continue;
        if (!any++)
            family(w, name, "counter", help);
        const char *kv[] = {label, c->string, NULL};
        sample(w, name, kv, c->valuedouble);
    }
}

/* The samples of a summary from a STATS histogram ({count, mean, p50,
 * p99, max} in microseconds); kv labels it (may be NULL). */
static void summary_samples(mw *w, const char *name, const cJSON *h, const char *lk, const char *lv)
{
    double count, mean, p50, p99;
    if (!get_num(h, "count", &count) || !get_num(h, "mean", &mean) || !get_num(h, "p50", &p50) ||
        !get_num(h, "p99", &p99))
        return;
    char sum_name[128], count_name[128];
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
    sample(w, sum_name, lk ? plain : NULL, mean * count / 1e6);
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
        double c;
        if (!get_num(h, "count", &c))
            continue;
        family(w, phases[i].name, "summary", phases[i].help);
        summary_samples(w, phases[i].name, h, NULL, NULL);
    }
    int any = 0;
    for (size_t i = 0; i < 3; i++) {
        double v;
        if (!get_num(cJSON_GetObjectItemCaseSensitive(lat, phases[i].key), "max", &v))
            continue;
        if (!any++)
            family(w, "projd_request_max_seconds", "gauge",
                   "The longest PROJECT request phase since the daemon started");
        const char *kv[] = {"phase", phases[i].key, NULL};
        sample(w, "projd_request_max_seconds", kv, v / 1e6);
    }
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
        family(w, counters[i].name, "counter", counters[i].help);
        for (const cJSON *l = ls->child; l; l = l->next) {
            double v;
            if (l->string && get_num(l, counters[i].key, &v)) {
                const char *kv[] = {"layer", l->string, NULL};
                sample(w, counters[i].name, kv, v);
            }
        }
    }
    family(w, "projd_layer_exec_seconds", "summary",
           "Execution time of one-op requests on the layer, since the daemon started");
    for (const cJSON *l = ls->child; l; l = l->next)
        if (l->string)
            summary_samples(w, "projd_layer_exec_seconds",
                            cJSON_GetObjectItemCaseSensitive(l, "exec_us"), "layer", l->string);
}

/* ---- backend_stats, flattened ------------------------------------------ */

static void metric_name(char *out, size_t cap, const char *prefix, const char *key)
{
    int n = snprintf(out, cap, "%s_%s", prefix, key);
    size_t len = n < 0 ? 0 : (size_t)n < cap ? (size_t)n : cap - 1;
    for (size_t i = strlen(prefix) + 1; i < len; i++)
        if (!is_label_char(out[i]))
            out[i] = '_';
}

/* A label name for key: its characters made legal, and kept apart from
 * the constant labels. */
static void label_name(const mw *w, char *out, size_t cap, const char *key)
{
    snprintf(out, cap, "%s%s", is_label_start(key[0]) ? "" : "_", key);
    for (char *p = out; *p; p++)
        if (!is_label_char(*p))
            *p = '_';
    for (int clash = 1; clash;) {
        clash = 0;
        for (unsigned i = 0; w->l && i < w->l->n && !clash; i++)
            clash = !strcmp(out, w->l->keys[i]);
        if (clash) {
            char tmp[128];
            snprintf(tmp, sizeof tmp, "backend_%s", out);
            snprintf(out, cap, "%s", tmp);
        }
    }
}

static void backend_walk(mw *w, const cJSON *obj, const char *prefix, const char *path);

/* An array of objects: one family per numeric field, the element's index
 * as a label named after the array. */
static void backend_array(mw *w, const cJSON *arr, const char *name, const char *path)
{
    char lab[128];
    label_name(w, lab, sizeof lab, arr->string);
    for (const cJSON *e = arr->child; e; e = e->next) {
        for (const cJSON *f = cJSON_IsObject(e) ? e->child : NULL; f; f = f->next) {
            if (!(cJSON_IsNumber(f) || cJSON_IsBool(f)) || !f->string)
                continue;
            /* Only where the field first appears: each family once. */
            int first = 1;
            for (const cJSON *p = arr->child; p != e && first; p = p->next)
                first = !cJSON_GetObjectItemCaseSensitive(p, f->string);
            if (!first)
                continue;
            char fname[256], help[300];
            metric_name(fname, sizeof fname, name, f->string);
            snprintf(help, sizeof help, "backend_stats.%s[].%s", path, f->string);
            family(w, fname, "untyped", help);
            int idx = 0;
            for (const cJSON *q = arr->child; q; q = q->next, idx++) {
                double v;
                if (!get_num(q, f->string, &v))
                    continue;
                char is[16];
                snprintf(is, sizeof is, "%d", idx);
                const char *kv[] = {lab, is, NULL};
                sample(w, fname, kv, v);
            }
        }
    }
}

static void backend_walk(mw *w, const cJSON *obj, const char *prefix, const char *path)
{
    for (const cJSON *c = obj->child; c; c = c->next) {
        if (!c->string)
            continue;
        char name[256], sub[256];
        metric_name(name, sizeof name, prefix, c->string);
        snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", c->string);
        if (cJSON_IsNumber(c) || cJSON_IsBool(c)) {
            char help[300];
            snprintf(help, sizeof help, "backend_stats.%s", sub);
            family(w, name, "untyped", help);
            sample(w, name, NULL, cJSON_IsTrue(c) ? 1 : cJSON_IsNumber(c) ? c->valuedouble : 0);
        } else if (cJSON_IsObject(c)) {
            backend_walk(w, c, name, sub);
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
     * labels of one info series. */
    const char *kv[2 * 16 + 1];
    char labs[16][128];
    size_t n = 0;
    for (const cJSON *c = bs->child; c && n < 16; c = c->next)
        if (cJSON_IsString(c) && c->string) {
            label_name(w, labs[n], sizeof labs[n], c->string);
            kv[2 * n] = labs[n];
            kv[2 * n + 1] = c->valuestring;
            n++;
        }
    kv[2 * n] = NULL;
    if (n) {
        family(w, "projd_backend_info", "gauge", "The backend's strings from STATS, as labels");
        sample(w, "projd_backend_info", kv, 1);
    }
    backend_walk(w, bs, "projd_backend", "");
}

/* ---- the document ---------------------------------------------------------- */

static void up(mw *w, int is_up)
{
    family(w, "projd_up", "gauge", "Whether projd answered STATS (1) or not (0)");
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
    {"connections", "lost_now", "projd_clients_lost", 0, 1,
     "Closed connections whose client died before its GPU work (held until it ends)"},
    {"connections", "lost_clients", "projd_clients_lost_total", 1, 1,
     "Clients that died before their GPU work, since the start"},
    {"connections", "total", "projd_connections_total", 1, 1, "Connections accepted"},
    {"connections", "refused", "projd_connections_refused_total", 1, 1,
     "Connections refused (credentials, limits, draining)"},
    {"connections", "hello_timeouts", "projd_hello_timeouts_total", 1, 1,
     "Connections closed for not saying HELLO in time"},
    {"connections", "listener_restarts", "projd_listener_restarts_total", 1, 1,
     "Times the socket's listener was set up again"},
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
    family(w, "projd_info", "gauge", "The daemon's version, backend and device");
    const char *info[] = {"version", str(d, "version"), "backend", str(d, "backend"),
                          "device",  str(d, "device"),  NULL};
    sample(w, "projd_info", info, 1);
    one(w, d, "uptime_s", "projd_uptime_seconds", "gauge", 1, "Seconds since the daemon started");
    one(w, d, "draining", "projd_draining", "gauge", 1,
        "1 while the daemon drains to stop (SIGTERM), else 0");

    const cJSON *cn = cJSON_GetObjectItemCaseSensitive(d, "connections");
    static const char *const conn_states[] = {
        "current", "open", "closing", "closing", "closed_waiting", "closed_waiting", NULL};
    by_label(w, cn, "projd_connections", "gauge", "state", conn_states,
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
    if (cJSON_IsArray(ml)) {
        family(w, "projd_model_layers", "gauge", "Layers the daemon serves");
        sample(w, "projd_model_layers", NULL, cJSON_GetArraySize(ml));
    }

    by_key(w, cJSON_GetObjectItemCaseSensitive(d, "requests"), "projd_requests_total", "type",
           "Messages answered, by type");
    by_key(w, cJSON_GetObjectItemCaseSensitive(d, "errors"), "projd_errors_total", "code",
           "Errors replied, by status code");
    one(w, d, "ops", "projd_ops_total", "counter", 1, "Operations run (a request holds 1 or more)");
    requests(w, d);
    layers(w, d);

    backend(w, cJSON_GetObjectItemCaseSensitive(d, "backend_stats"));
}

/* Closes the stream of *text (open_memstream sets *text at the close). */
static char *finish(FILE *f, char **text)
{
    if (fclose(f) != 0) {
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
    FILE *f = open_memstream(&text, &size);
    if (!f) {
        snprintf(err, errlen, "out of memory");
        cJSON_Delete(d);
        return NULL;
    }
    mw w = {.f = f, .l = l};
    render(&w, d);
    cJSON_Delete(d);
    text = finish(f, &text);
    if (!text)
        snprintf(err, errlen, "out of memory");
    return text;
}

char *pj_metrics_render_down(const pj_metrics_labels *l)
{
    char *text = NULL;
    size_t size = 0;
    FILE *f = open_memstream(&text, &size);
    if (!f)
        return NULL;
    mw w = {.f = f, .l = l};
    up(&w, 0);
    return finish(f, &text);
}
