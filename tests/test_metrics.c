/* test_metrics.c — projctl metrics' Prometheus text (client/metrics.h).
 *
 * Every rendering is read back by a strict reader of the exposition
 * format (0.0.4) written here: each line a HELP, a TYPE or a sample; a
 * family's TYPE before its samples and its samples together; legal names;
 * label values escaped; no series twice; every sample carrying the
 * constant labels. Then the values: what the STATS document says, in the
 * units the names promise. Documents: an H200 daemon's STATS (trimmed,
 * tests/data/stats-cuda-h200.json: lanes, nested backend objects, the
 * engine list) and a cpu one written here with hostile strings. */
#include <check.h>
#include <errno.h>
#include <locale.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wchar.h>

#include <cjson/cJSON.h>

#include "client/metrics.h"
#include "daemon/stats.h"
#include "tests/helpers/fixture.h"

#define MAX_SERIES   4096
#define MAX_FAMILIES 512

typedef struct series {
    char name[128];
    char labels[1024]; /* as read back, unescaped: k=v\x1fk=v... in order */
    double value;
} series;

typedef struct expo {
    size_t n;
    series s[MAX_SERIES];
    size_t n_fam;
    char fam[MAX_FAMILIES][128];
    char type[MAX_FAMILIES][16];
} expo;

static int name_start(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
}

static int name_char(char c)
{
    return name_start(c) || (c >= '0' && c <= '9');
}

static const char *read_name(const char *p, char *out, size_t cap)
{
    size_t n = 0;
    if (!name_start(*p))
        return NULL;
    while (name_char(*p) && n + 1 < cap)
        out[n++] = *p++;
    out[n] = '\0';
    return p;
}

/* Whether labels (k=v, separated by 0x1f) already name key. */
static int has_label(const char *labels, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = labels; *p;) {
        if (!strncmp(p, key, kl) && p[kl] == '=')
            return 1;
        const char *sep = strchr(p, '\x1f');
        if (!sep)
            break;
        p = sep + 1;
    }
    return 0;
}

/* The family a sample belongs to: a summary's _sum and _count are its. */
static int family_of(const expo *e, const char *name)
{
    for (size_t i = e->n_fam; i-- > 0;) {
        size_t l = strlen(e->fam[i]);
        if (!strcmp(name, e->fam[i]))
            return (int)i;
        if (!strcmp(e->type[i], "summary") && !strncmp(name, e->fam[i], l) &&
            (!strcmp(name + l, "_sum") || !strcmp(name + l, "_count")))
            return (int)i;
    }
    return -1;
}

/* Reads text into e; the first rule broken fails the test, naming the line. */
static void parse_expo(const char *text, expo *e, const char *const_labels)
{
    memset(e, 0, sizeof *e);
    int current = -1, lineno = 0;
    char help_name[128] = "";
    /* UTF-8 throughout (glibc's decoder as the judge, not projd's own). */
    ck_assert_ptr_nonnull(setlocale(LC_CTYPE, "C.UTF-8"));
    mbstate_t mb;
    memset(&mb, 0, sizeof mb);
    for (const char *p = text; *p;) {
        size_t r = mbrtowc(NULL, p, MB_CUR_MAX, &mb);
        ck_assert_msg(r != (size_t)-1 && r != (size_t)-2, "not UTF-8 at byte %td", p - text);
        p += r;
    }
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        ck_assert_msg(nl != NULL, "the text does not end in a newline");
        char line[2048];
        size_t len = (size_t)(nl - p);
        ck_assert_uint_lt(len, sizeof line);
        memcpy(line, p, len);
        line[len] = '\0';
        p = nl + 1;
        lineno++;
        if (!strncmp(line, "# HELP ", 7)) {
            const char *q = read_name(line + 7, help_name, sizeof help_name);
            ck_assert_msg(q && *q == ' ' && q[1], "line %d: HELP without a name and text: %s",
                          lineno, line);
            for (q++; *q; q++)
                if (*q == '\\') {
                    q++;
                    ck_assert_msg(*q == '\\' || *q == 'n', "line %d: HELP escape \\%c", lineno, *q);
                }
            continue;
        }
        if (!strncmp(line, "# TYPE ", 7)) {
            char name[128];
            const char *q = read_name(line + 7, name, sizeof name);
            ck_assert_msg(q && *q == ' ', "line %d: bad TYPE: %s", lineno, line);
            ck_assert_msg(!strcmp(name, help_name), "line %d: TYPE %s after HELP %s", lineno, name,
                          help_name);
            help_name[0] = '\0';
            q++;
            ck_assert_msg(!strcmp(q, "counter") || !strcmp(q, "gauge") || !strcmp(q, "summary") ||
                              !strcmp(q, "untyped"),
                          "line %d: unknown type %s", lineno, q);
            for (size_t i = 0; i < e->n_fam; i++)
                ck_assert_msg(strcmp(e->fam[i], name), "line %d: family %s typed twice", lineno,
                              name);
            ck_assert_uint_lt(e->n_fam, MAX_FAMILIES);
            snprintf(e->fam[e->n_fam], sizeof e->fam[0], "%s", name);
            snprintf(e->type[e->n_fam], sizeof e->type[0], "%s", q);
            current = (int)e->n_fam++;
            if (!strcmp(q, "counter"))
                ck_assert_msg(strlen(name) > 6 && !strcmp(name + strlen(name) - 6, "_total"),
                              "line %d: counter %s does not end in _total", lineno, name);
            continue;
        }
        ck_assert_msg(line[0] != '#', "line %d: a comment that is neither HELP nor TYPE", lineno);
        ck_assert_uint_lt(e->n, MAX_SERIES);
        series *s = &e->s[e->n];
        const char *q = read_name(line, s->name, sizeof s->name);
        ck_assert_msg(q != NULL, "line %d: no metric name: %s", lineno, line);
        int f = family_of(e, s->name);
        ck_assert_msg(f >= 0 && f == current,
                      "line %d: %s is not in the family typed just before it", lineno, s->name);
        size_t at = 0;
        if (*q == '{') {
            q++;
            while (*q != '}') {
                char key[128];
                q = read_name(q, key, sizeof key);
                ck_assert_msg(q && q[0] == '=' && q[1] == '"', "line %d: bad label: %s", lineno,
                              line);
                ck_assert_msg(strchr(key, ':') == NULL, "line %d: ':' in a label name", lineno);
                ck_assert_msg(strncmp(key, "__", 2), "line %d: reserved label name %s", lineno,
                              key);
                ck_assert_msg(!has_label(s->labels, key), "line %d: label %s twice", lineno, key);
                q += 2;
                at += (size_t)snprintf(s->labels + at, sizeof s->labels - at,
                                       "%s%s=", at ? "\x1f" : "", key);
                for (; *q != '"'; q++) {
                    ck_assert_msg(*q != '\0', "line %d: unterminated label value", lineno);
                    char c = *q;
                    if (c == '\\') {
                        q++;
                        ck_assert_msg(*q == '\\' || *q == '"' || *q == 'n',
                                      "line %d: bad escape \\%c", lineno, *q);
                        c = *q == 'n' ? '\n' : *q;
                    }
                    ck_assert_uint_lt(at + 1, sizeof s->labels);
                    s->labels[at++] = c;
                    s->labels[at] = '\0';
                }
                q++;
                if (*q == ',')
                    q++;
                else
                    ck_assert_msg(*q == '}', "line %d: labels not separated by ','", lineno);
            }
            q++;
        }
        ck_assert_msg(*q == ' ', "line %d: no space before the value", lineno);
        q++;
        if (!strcmp(q, "NaN"))
            s->value = NAN;
        else if (!strcmp(q, "+Inf"))
            s->value = INFINITY;
        else if (!strcmp(q, "-Inf"))
            s->value = -INFINITY;
        else {
            char *end;
            s->value = strtod(q, &end);
            ck_assert_msg(end != q && *end == '\0', "line %d: bad value \"%s\"", lineno, q);
        }
        if (const_labels)
            ck_assert_msg(strstr(s->labels, const_labels) != NULL,
                          "line %d: %s lacks the constant labels", lineno, s->name);
        for (size_t i = 0; i < e->n; i++)
            ck_assert_msg(strcmp(e->s[i].name, s->name) || strcmp(e->s[i].labels, s->labels),
                          "line %d: series %s{%s} twice", lineno, s->name, s->labels);
        e->n++;
    }
    ck_assert_uint_gt(e->n, 0);
}

/* The value of name whose labels contain want (NULL: any); fails if none. */
static double value_of(const expo *e, const char *name, const char *want)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->s[i].name, name) && (!want || strstr(e->s[i].labels, want)))
            return e->s[i].value;
    ck_abort_msg("no series %s with labels containing \"%s\"", name, want ? want : "");
    return NAN;
}

/* The TYPE of family name; fails if it was not written. */
static const char *type_of(const expo *e, const char *name)
{
    for (size_t i = 0; i < e->n_fam; i++)
        if (!strcmp(e->fam[i], name))
            return e->type[i];
    ck_abort_msg("no family %s", name);
    return "";
}

/* Whether a series name has labels containing want. */
static int has_series(const expo *e, const char *name, const char *want)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strcmp(e->s[i].name, name) && strstr(e->s[i].labels, want))
            return 1;
    return 0;
}

static int has_prefix(const expo *e, const char *prefix)
{
    for (size_t i = 0; i < e->n; i++)
        if (!strncmp(e->s[i].name, prefix, strlen(prefix)))
            return 1;
    return 0;
}

/* A file of the source tree, read whole. */
static char *read_source(const char *rel, size_t *len)
{
    const char *src = getenv("PJ_SRCDIR") ? getenv("PJ_SRCDIR") : ".";
    char path[512];
    snprintf(path, sizeof path, "%s/%s", src, rel);
    static char buf[1 << 16];
    long n = pj_fixture_read_text(path, buf, sizeof buf);
    ck_assert_msg(n > 0 && n < (long)sizeof buf - 1, "%s: cannot read it whole", path);
    *len = (size_t)n;
    return buf;
}

static expo E;

START_TEST(cuda_stats)
{
    size_t len;
    const char *js = read_source("tests/data/stats-cuda-h200.json", &len);
    pj_metrics_labels l = {0};
    char err[256];
    ck_assert_int_eq(pj_metrics_label_add(&l, "gpu=0", err, sizeof err), 0);
    ck_assert_int_eq(pj_metrics_label_add(&l, "node=gpu-node-7", err, sizeof err), 0);
    char *text = pj_metrics_render(js, len, &l, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    parse_expo(text, &E, "gpu=0\x1fnode=gpu-node-7");

    ck_assert_double_eq(value_of(&E, "projd_up", NULL), 1);
    ck_assert_double_eq(value_of(&E, "projd_info", "backend=cuda"), 1);
    ck_assert_double_eq(value_of(&E, "projd_connections_total", NULL), 14);
    /* no error yet: every code at 0, so that rate() sees the first */
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_SHAPE"), 0);
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_NOHELLO"), 0);
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_PROTO"), 0);
    ck_assert(!has_series(&E, "projd_errors_total", "code=total"));
    ck_assert(!has_series(&E, "projd_errors_total", "code=E_UNKNOWN"));
    /* request types: the counted ones, and the rest a client sends at 0 */
    ck_assert_double_eq(value_of(&E, "projd_requests_total", "type=PROJECT"), 600);
    ck_assert_double_eq(value_of(&E, "projd_requests_total", "type=RING_ATTACH"), 0);
    ck_assert(!has_series(&E, "projd_requests_total", "type=DONE"));
    ck_assert_double_eq(value_of(&E, "projd_listener_restarts_total", NULL), 7);
    ck_assert_double_eq(value_of(&E, "projd_reaper_probes_total", NULL), 12);
    ck_assert_double_eq(value_of(&E, "projd_connections_by_state", "state=open"), 1);
    ck_assert_double_eq(value_of(&E, "projd_resident_memory_bytes", NULL), 2051387392.0);
    ck_assert_double_eq(value_of(&E, "projd_ring_enabled", NULL), 1);
    ck_assert_double_eq(value_of(&E, "projd_requests_total", "type=PROJECT"), 600);
    ck_assert_double_eq(value_of(&E, "projd_ops_total", NULL), 600);
    ck_assert_double_eq(value_of(&E, "projd_model_layers", NULL), 3);
    /* microseconds in STATS, seconds here; sum = mean x count */
    ck_assert_double_eq_tol(value_of(&E, "projd_request_exec_seconds", "quantile=0.99"), 475.136e-6,
                            1e-12);
    ck_assert_double_eq_tol(value_of(&E, "projd_request_seconds_sum", NULL), 157.19185 * 600 / 1e6,
                            1e-9);
    ck_assert_double_eq(value_of(&E, "projd_request_seconds_count", NULL), 600);
    ck_assert_double_eq_tol(value_of(&E, "projd_request_max_seconds", "phase=total"), 1324.704e-6,
                            1e-12);
    const char *o = "layer=model.layers.0.self_attn.o_proj";
    ck_assert_double_eq(value_of(&E, "projd_layer_rows_total", o), 4800);
    ck_assert_double_eq_tol(value_of(&E, "projd_layer_exec_seconds",
                                     "layer=model.layers.0.self_attn.o_proj\x1fquantile=0.5"),
                            77.824e-6, 1e-12);
    ck_assert_double_eq(value_of(&E, "projd_layer_exec_seconds_count", o), 600);
    /* a layer that served nothing: no quantile (NaN), not a 0 */
    ck_assert(
        isnan(value_of(&E, "projd_layer_exec_seconds", "layer=model.layers.0.self_attn.qkv_proj")));
    /* the backend: nested objects, the lanes by index, strings as info */
    ck_assert_double_eq(value_of(&E, "projd_backend_lane_jobs_total", "lane=0"), 600);
    ck_assert_double_eq(value_of(&E, "projd_backend_lane_jobs_total", "lane=3"), 0);
    ck_assert_double_eq(value_of(&E, "projd_backend_lanes", NULL), 4);
    ck_assert_double_eq(value_of(&E, "projd_backend_paths_graph_staged_total", NULL), 600);
    /* typed as the backend means them: counters end in _total (the
     * reader checks that), the rest gauges */
    ck_assert_str_eq(type_of(&E, "projd_backend_jobs_total"), "counter");
    ck_assert_str_eq(type_of(&E, "projd_backend_fatal_total"), "counter");
    ck_assert_str_eq(type_of(&E, "projd_backend_lane_jobs_total"), "counter");
    ck_assert_str_eq(type_of(&E, "projd_backend_lane_pending"), "gauge");
    ck_assert_str_eq(type_of(&E, "projd_backend_lanes"), "gauge");
    ck_assert_str_eq(type_of(&E, "projd_backend_memory_device_free_bytes"), "gauge");
    ck_assert_str_eq(type_of(&E, "projd_backend_dead"), "gauge");
    for (size_t i = 0; i < E.n_fam; i++)
        ck_assert_msg(strcmp(E.type[i], "untyped") != 0, "%s is untyped", E.fam[i]);
    ck_assert_double_eq(value_of(&E, "projd_backend_memory_device_total_bytes", NULL),
                        150109880320.0);
    ck_assert_double_eq(value_of(&E, "projd_backend_dead", NULL), 0);
    /* the start's steps, milliseconds in STATS, seconds here */
    ck_assert_double_eq_tol(value_of(&E, "projd_backend_startup_seconds", "step=upload"),
                            0.904114696, 1e-12);
    ck_assert_double_eq(value_of(&E, "projd_backend_startup_warmed_shapes", NULL), 16000);
    ck_assert_double_eq(
        value_of(&E, "projd_backend_info", "uuid=GPU-2f31c83a-efc7-001e-44b4-f50462b52ba4"), 1);
    /* the engine list is configuration, left out */
    ck_assert(!has_prefix(&E, "projd_backend_engines"));
    free(text);
}
END_TEST

/* Strings from the daemon (a device name, layer names) and from the
 * command line reach the text escaped; a label named like a backend array
 * is kept apart; NaN and the infinities as the format spells them. */
START_TEST(hostile_strings)
{
    const char *js =
        "{\"version\":\"0.3.0\",\"backend\":\"cpu\",\"device\":\"a \\\"quoted\\\" \\\\ "
        "name\\nsecond line\",\"ops\":3,"
        "\"layers\":{\"x.y-z\":{\"ops\":3,\"rows\":9,\"exec_us\":{\"count\":3,\"mean\":2,"
        "\"p50\":2,\"p99\":3,\"max\":3}}},"
        "\"backend_stats\":{\"engine\":\"ref\",\"slot\":[{\"jobs\":1},{\"jobs\":2,\"x\":true}],"
        "\"a\":{\"b\":{\"c\":1e300}}}}";
    pj_metrics_labels l = {0};
    char err[256];
    ck_assert_int_eq(pj_metrics_label_add(&l, "site=rack \"3\"\\b\nc", err, sizeof err), 0);
    ck_assert_int_eq(pj_metrics_label_add(&l, "slot=7", err, sizeof err), 0);
    char *text = pj_metrics_render(js, strlen(js), &l, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    parse_expo(text, &E, "site=rack \"3\"\\b\nc\x1fslot=7");
    ck_assert_double_eq(value_of(&E, "projd_info", "device=a \"quoted\" \\ name\nsecond line"), 1);
    ck_assert_double_eq(value_of(&E, "projd_layer_rows_total", "layer=x.y-z"), 9);
    /* the array "slot" meets the constant label slot: its label is renamed */
    ck_assert_double_eq(value_of(&E, "projd_backend_slot_jobs", "backend_slot=1"), 2);
    ck_assert_double_eq(value_of(&E, "projd_backend_slot_x", "backend_slot=1"), 1);
    ck_assert_double_eq(value_of(&E, "projd_backend_a_b_c", NULL), 1e300);
    free(text);
}
END_TEST

START_TEST(down_and_refused)
{
    pj_metrics_labels l = {0};
    char err[256];
    ck_assert_int_eq(pj_metrics_label_add(&l, "gpu=3", err, sizeof err), 0);
    char *text = pj_metrics_render_down(&l);
    ck_assert_ptr_nonnull(text);
    parse_expo(text, &E, "gpu=3");
    ck_assert_uint_eq(E.n, 1);
    ck_assert_double_eq(value_of(&E, "projd_up", NULL), 0);
    free(text);
    /* no constant labels: a bare name */
    text = pj_metrics_render_down(NULL);
    ck_assert_ptr_nonnull(strstr(text, "\nprojd_up 0\n"));
    free(text);

    /* Refused at a limit: up, and the refusal's reason instead of STATS. */
    text = pj_metrics_render_refused(&l, "E_LIMIT");
    ck_assert_ptr_nonnull(text);
    parse_expo(text, &E, "gpu=3");
    ck_assert_uint_eq(E.n, 2);
    ck_assert_double_eq(value_of(&E, "projd_up", NULL), 1);
    ck_assert_double_eq(value_of(&E, "projd_scrape_refused", "reason=E_LIMIT"), 1);
    free(text);

    static const char *const not_stats[] = {"", "[]", "{\"ops\":1}", "not json", "{\"version\":1}"};
    for (size_t i = 0; i < sizeof not_stats / sizeof not_stats[0]; i++) {
        err[0] = '\0';
        ck_assert_ptr_null(
            pj_metrics_render(not_stats[i], strlen(not_stats[i]), &l, err, sizeof err));
        ck_assert_msg(strstr(err, "not a STATS document"), "%s: %s", not_stats[i], err);
    }
}
END_TEST

/* A summary's _sum never goes down while observations come, those of 0
 * ns included (a job the backend refused): it was mean x count, each
 * rounded, which fell a few ulps on 53 of 200 such renders, a counter
 * reset to rate(). projd's own STATS through the renderer. */
START_TEST(summary_sum_never_falls)
{
    pj_stats s;
    ck_assert_int_eq(pj_stats_init(&s, 0), 0);
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < 10000; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        pj_hist_add(&s.exec_ns, 20000 + x % 500000);
    }
    double last = -1;
    for (int i = 0; i <= 200; i++) {
        if (i)
            pj_hist_add(&s.exec_ns, 0);
        cJSON *doc = cJSON_CreateObject();
        ck_assert_ptr_nonnull(doc);
        cJSON_AddStringToObject(doc, "version", "test");
        pj_stats_json(&s, NULL, 0, doc);
        char *js = cJSON_PrintUnformatted(doc);
        cJSON_Delete(doc);
        ck_assert_ptr_nonnull(js);
        char err[256];
        char *text = pj_metrics_render(js, strlen(js), NULL, err, sizeof err);
        free(js);
        ck_assert_msg(text != NULL, "%s", err);
        parse_expo(text, &E, NULL);
        free(text);
        const double sum = value_of(&E, "projd_request_exec_seconds_sum", NULL);
        ck_assert_msg(sum >= last, "render %d: _sum %.17g after %.17g", i, sum, last);
        last = sum;
    }
    ck_assert_double_eq_tol(last, (double)s.exec_ns.sum / 1e9, 1e-12);
    pj_stats_free(&s);
}
END_TEST

START_TEST(label_rules)
{
    static const struct {
        const char *kv, *why;
    } bad[] = {
        {"gpu", "expected KEY=VALUE"},        {"=0", "a label name is"},
        {"1gpu=0", "a label name is"},        {"g-pu=0", "a label name is"},
        {"__name__=x", "Prometheus's own"},   {"layer=x", "projd's own series"},
        {"quantile=x", "projd's own series"}, {"lane=1", "projd's own series"},
        {"reason=x", "projd's own series"}, /* projd_scrape_refused's */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        pj_metrics_labels l = {0};
        char err[256] = "";
        ck_assert_int_eq(pj_metrics_label_add(&l, bad[i].kv, err, sizeof err), -EINVAL);
        ck_assert_msg(strstr(err, bad[i].why), "%s: \"%s\"", bad[i].kv, err);
        ck_assert_uint_eq(l.n, 0);
        ck_assert_str_eq(l.text, "");
    }
    pj_metrics_labels l = {0};
    char err[256];
    ck_assert_int_eq(pj_metrics_label_add(&l, "gpu=", err, sizeof err), 0); /* empty value */
    ck_assert_int_eq(pj_metrics_label_add(&l, "gpu=1", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "given twice"));
    for (int i = 1; i < PJ_METRICS_MAX_LABELS; i++) {
        char kv[32];
        snprintf(kv, sizeof kv, "k%d=v", i);
        ck_assert_int_eq(pj_metrics_label_add(&l, kv, err, sizeof err), 0);
    }
    ck_assert_int_eq(pj_metrics_label_add(&l, "one_more=v", err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "more than"));
    /* a value too long for the rendered labels is refused, the rest kept */
    pj_metrics_labels m = {0};
    static char big[5000];
    memset(big, 'v', sizeof big - 1);
    memcpy(big, "big=", 4);
    ck_assert_int_eq(pj_metrics_label_add(&m, big, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "exceed"));
    ck_assert_uint_eq(m.n, 0);
    ck_assert_str_eq(m.text, "");
}
END_TEST

/* What a daemon's document could hold that the text must survive (each
 * found by review with promtool and node_exporter, which drop a whole file
 * for one bad line): keys that flatten to one name, a key named like a
 * fixed family, label names that meet or are reserved, backslashes and
 * newlines in keys (HELP text), keys given twice, bytes that are not
 * UTF-8, a field that is first a string, and an array too large to walk
 * whole. The reader above fails on any of these. */
START_TEST(hostile_backend)
{
    const char *js =
        "{\"version\":\"0.3.0\",\"backend\":\"cuda\",\"device\":\"GPU \xe9\xff\","
        "\"requests\":{\"PING\":1,\"PING\":2},"
        "\"errors\":{\"E_SHAPE\":3,\"E_SHAPE\":5,\"E_WHATEVER\":4,\"total\":12},"
        "\"layers\":{\"l\xc3\":{\"ops\":1,\"rows\":1,\"exec_us\":{\"count\":1,\"mean\":1,"
        "\"p50\":1,\"p99\":1,\"max\":1}},\"l\xc3\":{\"ops\":5,\"rows\":5,\"exec_us\":{\"count\":1,"
        "\"mean\":1,\"p50\":1,\"p99\":1,\"max\":1}}},"
        "\"backend_stats\":{\"a-b\":\"x\",\"a.b\":\"y\",\"__name__\":\"evil\",\"table\":"
        "\"t\xe9t\xe9\","
        "\"a_b\":1,\"a\":{\"b\":2},\"a-c\":3,\"a.c\":4,\"info\":5,"
        "\"k\\\\x\":6,\"k\\ny\":7,\"dup\":8,\"dup\":9,"
        "\"lane\":[{\"jobs\":\"x\"},{\"jobs\":5}],\"lane_jobs\":10,"
        "\"deep\":{\"a\":{\"b\":{\"c\":{\"d\":{\"e\":{\"f\":{\"g\":{\"h\":{\"i\":{\"j\":1}}}}}}}}}}"
        "}}";
    pj_metrics_labels l = {0};
    char err[256];
    ck_assert_int_eq(pj_metrics_label_add(&l, "gpu=0", err, sizeof err), 0);
    char *text = pj_metrics_render(js, strlen(js), &l, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    parse_expo(text, &E, "gpu=0");
    /* the first of each clash stays, the rest is left out */
    ck_assert_double_eq(value_of(&E, "projd_backend_a_b", NULL), 1);
    ck_assert_double_eq(value_of(&E, "projd_backend_a_c", NULL), 3);
    ck_assert_double_eq(value_of(&E, "projd_backend_info", "a_b=x"), 1);
    ck_assert_double_eq(value_of(&E, "projd_backend_info", "backend___name__=evil"), 1);
    ck_assert_double_eq(value_of(&E, "projd_backend_info", "table=t?t?"), 1);
    ck_assert_double_eq(value_of(&E, "projd_backend_dup", NULL), 8);
    ck_assert_double_eq(value_of(&E, "projd_backend_k_x", NULL), 6);
    ck_assert_double_eq(value_of(&E, "projd_requests_total", "type=PING"), 1);
    /* errors: the counted ones as counted (the first of a key twice), the
     * rest at 0, each once (the reader fails on a series twice) */
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_SHAPE"), 3);
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_WHATEVER"), 4);
    ck_assert_double_eq(value_of(&E, "projd_errors_total", "code=E_BOUNDS"), 0);
    ck_assert_double_eq(value_of(&E, "projd_layer_ops_total", "layer=l?"), 1);
    ck_assert_double_eq(value_of(&E, "projd_info", "device=GPU ??"), 1);
    /* a field first seen as a string is still written where it is a number */
    ck_assert_double_eq(value_of(&E, "projd_backend_lane_jobs_total", "lane=1"), 5);
    /* a field no backend has: untyped */
    ck_assert_str_eq(type_of(&E, "projd_backend_lane_jobs"), "untyped");
    ck_assert_double_eq(value_of(&E, "projd_backend_lane_jobs", NULL), 10);
    free(text);

    /* An array of 100000 objects, each with a key of its own: bounded. */
    size_t cap = 100000 * 24 + 256, at = 0;
    char *big = malloc(cap);
    ck_assert_ptr_nonnull(big);
    at += (size_t)snprintf(big, cap, "{\"version\":\"x\",\"backend_stats\":{\"lane\":[");
    for (int i = 0; i < 100000; i++)
        at += (size_t)snprintf(big + at, cap - at, "%s{\"k%d\":%d}", i ? "," : "", i, i);
    at += (size_t)snprintf(big + at, cap - at, "]}}");
    text = pj_metrics_render(big, at, NULL, err, sizeof err);
    ck_assert_msg(text != NULL, "%s", err);
    parse_expo(text, &E, NULL);
    ck_assert_uint_le(E.n_fam, 300);
    free(text);
    free(big);
}
END_TEST

START_TEST(label_values_are_text)
{
    pj_metrics_labels l = {0};
    char err[256] = "";
    ck_assert_int_eq(pj_metrics_label_add(&l, "node=caf\xe9", err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "not UTF-8"), "%s", err);
    ck_assert_int_eq(pj_metrics_label_add(&l, "node=caf\xc3\xa9 \xe2\x82\xac", err, sizeof err), 0);
    char *text = pj_metrics_render_down(&l);
    ck_assert_ptr_nonnull(text);
    parse_expo(text, &E, "node=caf\xc3\xa9 \xe2\x82\xac");
    free(text);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("metrics");
    tcase_add_test(tc, cuda_stats);
    tcase_add_test(tc, summary_sum_never_falls);
    tcase_add_test(tc, hostile_strings);
    tcase_add_test(tc, down_and_refused);
    tcase_add_test(tc, label_rules);
    tcase_add_test(tc, hostile_backend);
    tcase_add_test(tc, label_values_are_text);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
