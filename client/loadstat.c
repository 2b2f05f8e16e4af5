/* loadstat.c — histograms, grouped results, tables and JSON for projload. */
#include "client/loadstat.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- histogram ------------------------------------------------------------ */

#define SUB       (1u << PJ_LS_SUB_BITS)
#define EXACT_TOP (2u * SUB) /* values below this have a bucket each */

void pj_ls_hist_init(pj_ls_hist *h)
{
    memset(h, 0, sizeof *h);
}

size_t pj_ls_bucket_of(uint64_t v)
{
    if (v < EXACT_TOP)
        return (size_t)v;
    int e = 63 - __builtin_clzll(v);
    if (e > PJ_LS_MAX_LOG2) {
        e = PJ_LS_MAX_LOG2;
        v = (2ull << PJ_LS_MAX_LOG2) - 1;
    }
    int shift = e - PJ_LS_SUB_BITS;
    return ((size_t)(shift + 1) << PJ_LS_SUB_BITS) + (size_t)((v >> shift) - SUB);
}

void pj_ls_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi)
{
    if (idx < EXACT_TOP) {
        *lo = *hi = idx;
        return;
    }
    unsigned shift = (unsigned)(idx >> PJ_LS_SUB_BITS) - 1;
    uint64_t b = idx & (SUB - 1);
    *lo = (SUB + b) << shift;
    *hi = *lo + (1ull << shift) - 1;
}

void pj_ls_hist_add(pj_ls_hist *h, uint64_t v)
{
    if (h->count == 0 || v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
    h->count++;
    h->sum += v;
    h->b[pj_ls_bucket_of(v)]++;
}

void pj_ls_hist_merge(pj_ls_hist *dst, const pj_ls_hist *src)
{
    if (!src->count)
        return;
    if (dst->count == 0 || src->min < dst->min)
        dst->min = src->min;
    if (src->max > dst->max)
        dst->max = src->max;
    dst->count += src->count;
    dst->sum += src->sum;
    for (size_t i = 0; i < PJ_LS_BUCKETS; i++)
        dst->b[i] += src->b[i];
}

/* 1-based nearest rank of quantile q among n samples. The small slack
 * keeps q * n from landing one above an exact integer through rounding
 * (0.99 * 100 must be rank 99). */
static uint64_t rank_of(double q, uint64_t n)
{
    if (!(q > 0))
        return 1;
    double r = ceil(q * (double)n - 1e-9);
    if (r < 1)
        return 1;
    if (r > (double)n)
        return n;
    return (uint64_t)r;
}

uint64_t pj_ls_hist_quantile(const pj_ls_hist *h, double q)
{
    if (!h->count)
        return 0;
    uint64_t rank = rank_of(q, h->count);
    if (rank == h->count)
        return h->max;
    if (rank == 1)
        return h->min;
    uint64_t cum = 0;
    for (size_t i = 0; i < PJ_LS_BUCKETS; i++) {
        cum += h->b[i];
        if (cum >= rank) {
            uint64_t lo, hi;
            pj_ls_bucket_range(i, &lo, &hi);
            uint64_t v = lo + (hi - lo) / 2;
            if (v < h->min)
                v = h->min;
            if (v > h->max)
                v = h->max;
            return v;
        }
    }
    return h->max;
}

double pj_ls_hist_mean(const pj_ls_hist *h)
{
    return h->count ? (double)h->sum / (double)h->count : 0.0;
}

uint64_t pj_ls_quantile_sorted(const uint64_t *sorted, size_t n, double q)
{
    if (!n)
        return 0;
    return sorted[rank_of(q, n) - 1];
}

int pj_ls_hist_write_cdf(const pj_ls_hist *h, FILE *f, double scale)
{
    uint64_t cum = 0;
    for (size_t i = 0; i < PJ_LS_BUCKETS && h->count; i++) {
        if (!h->b[i])
            continue;
        cum += h->b[i];
        uint64_t lo, hi;
        pj_ls_bucket_range(i, &lo, &hi);
        if (hi > h->max)
            hi = h->max;
        fprintf(f, "%.3f %.6f\n", (double)hi / scale, (double)cum / (double)h->count);
    }
    return ferror(f) ? -EIO : 0;
}

/* ---- m-sets ------------------------------------------------------------------ */

static int cmp_u32(const void *a, const void *b)
{
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

void pj_ls_msets_init(pj_ls_msets *s, const uint32_t *shapes, uint32_t n_shapes, uint32_t max_m)
{
    memset(s, 0, sizeof *s);
    uint32_t tmp[PJ_LS_MAX_MSETS];
    uint32_t n = 0;
    for (uint32_t i = 0; i < n_shapes && n < PJ_LS_MAX_MSETS - 1; i++)
        if (shapes[i] >= 1)
            tmp[n++] = shapes[i];
    if (n == 0) {
        for (uint64_t p = 1; n < PJ_LS_MAX_MSETS - 1; p *= 2) {
            tmp[n++] = (uint32_t)p;
            if (p >= max_m || p >= (1u << 30))
                break;
        }
    }
    qsort(tmp, n, sizeof tmp[0], cmp_u32);
    for (uint32_t i = 0; i < n; i++)
        if (s->n == 0 || tmp[i] != s->hi[s->n - 1])
            s->hi[s->n++] = tmp[i];
    if (s->n && max_m > s->hi[s->n - 1])
        s->hi[s->n++] = max_m;
}

uint32_t pj_ls_mset_of(const pj_ls_msets *s, uint32_t m, uint32_t *lo, uint32_t *hi)
{
    uint32_t prev = 0;
    for (uint32_t i = 0; i < s->n; i++) {
        if (m <= s->hi[i]) {
            *lo = prev + 1;
            *hi = s->hi[i];
            return i;
        }
        prev = s->hi[i];
    }
    *lo = prev + 1;
    *hi = m;
    return s->n;
}

void pj_ls_mset_label(uint32_t lo, uint32_t hi, char *out, size_t cap)
{
    if (lo == hi)
        snprintf(out, cap, "%u", lo);
    else
        snprintf(out, cap, "%u-%u", lo, hi);
}

/* ---- groups ------------------------------------------------------------------ */

/* What a group without histograms reads as. */
static const pj_ls_hist empty_hist;

static const pj_ls_hist *hist_or_empty(const pj_ls_hist *h)
{
    return h ? h : &empty_hist;
}

/* Allocates g's three histograms; 0 or -ENOMEM. */
static int group_hists(pj_ls_group *g)
{
    if (g->lat)
        return 0;
    pj_ls_hist *h = calloc(3, sizeof *h);
    if (!h)
        return -ENOMEM;
    g->lat = &h[0];
    g->queue = &h[1];
    g->exec = &h[2];
    return 0;
}

int pj_loadstat_init(pj_loadstat *ls)
{
    memset(ls, 0, sizeof *ls);
    pthread_mutex_init(&ls->mu, NULL);
    ls->cap = 16;
    ls->g = calloc(ls->cap, sizeof *ls->g);
    if (!ls->g || group_hists(&ls->g[0]))
        return -ENOMEM;
    ls->n = 1;
    ls->g[0].kind = PJ_LS_OVERALL;
    snprintf(ls->g[0].key, sizeof ls->g[0].key, "all");
    return 0;
}

void pj_loadstat_free(pj_loadstat *ls)
{
    if (!ls->g && !ls->cap)
        return; /* already freed (or never initialised) */
    for (size_t i = 0; ls->g && i < ls->n; i++)
        free(ls->g[i].lat);
    free(ls->g);
    pthread_mutex_destroy(&ls->mu);
    memset(ls, 0, sizeof *ls);
}

static int group_append(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                        uint32_t m_lo, uint32_t m_hi);

int pj_loadstat_group(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                      uint32_t m_lo, uint32_t m_hi)
{
    int id;
    pthread_mutex_lock(&ls->mu);
    for (size_t i = 1; i < ls->n; i++) {
        if (ls->g[i].kind == kind && strncmp(ls->g[i].key, key, PJ_LS_KEY_MAX - 1) == 0) {
            id = (int)i;
            goto out;
        }
    }
    id = group_append(ls, kind, key, layer, m_lo, m_hi);
out:
    pthread_mutex_unlock(&ls->mu);
    return id;
}

int pj_loadstat_group_add(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                          uint32_t m_lo, uint32_t m_hi)
{
    pthread_mutex_lock(&ls->mu);
    int id = group_append(ls, kind, key, layer, m_lo, m_hi);
    pthread_mutex_unlock(&ls->mu);
    return id;
}

/* Appends a group (ls->mu held). */
static int group_append(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                        uint32_t m_lo, uint32_t m_hi)
{
    int id = -ENOMEM;
    if (ls->n == ls->cap) {
        pj_ls_group *ng = realloc(ls->g, 2 * ls->cap * sizeof *ng);
        if (!ng)
            goto out;
        ls->g = ng;
        ls->cap *= 2;
    }
    pj_ls_group *g = &ls->g[ls->n];
    memset(g, 0, sizeof *g);
    g->kind = kind;
    snprintf(g->key, sizeof g->key, "%s", key);
    snprintf(g->layer, sizeof g->layer, "%s", layer ? layer : "");
    g->m_lo = m_lo;
    g->m_hi = m_hi;
    id = (int)ls->n++;
out:
    return id;
}

static void group_add(pj_ls_group *g, uint32_t ops, const pj_ls_sample *s)
{
    g->count++;
    g->ops += ops;
    if (!s->ok) {
        g->errors++;
    } else {
        g->ok_ops += ops;
        /* Without memory for the histograms the counts still add up. */
        if (group_hists(g) == 0) {
            uint64_t lat = s->t_end_ns > s->t_start_ns ? s->t_end_ns - s->t_start_ns : 0;
            pj_ls_hist_add(g->lat, lat);
            pj_ls_hist_add(g->queue, s->queue_ns);
            pj_ls_hist_add(g->exec, s->exec_ns);
        }
    }
    g->checked += s->checked ? 1 : 0;
    g->mismatches += s->mismatch ? 1 : 0;
}

void pj_loadstat_record(pj_loadstat *ls, const pj_ls_ref *refs, size_t n_refs,
                        const pj_ls_sample *s)
{
    pthread_mutex_lock(&ls->mu);
    if (!ls->have_window || s->t_start_ns < ls->t0_ns)
        ls->t0_ns = s->t_start_ns;
    if (!ls->have_window || s->t_end_ns > ls->t1_ns)
        ls->t1_ns = s->t_end_ns;
    ls->have_window = 1;
    group_add(&ls->g[0], s->n_ops, s);
    for (size_t i = 0; i < n_refs; i++)
        if (refs[i].group > 0 && refs[i].group < ls->n)
            group_add(&ls->g[refs[i].group], refs[i].ops, s);
    pthread_mutex_unlock(&ls->mu);
}

void pj_loadstat_record_check(pj_loadstat *ls, const pj_ls_ref *refs, size_t n_refs, int mismatch)
{
    pthread_mutex_lock(&ls->mu);
    ls->g[0].checked++;
    ls->g[0].mismatches += mismatch ? 1 : 0;
    for (size_t i = 0; i < n_refs; i++) {
        if (refs[i].group > 0 && refs[i].group < ls->n) {
            ls->g[refs[i].group].checked++;
            ls->g[refs[i].group].mismatches += mismatch ? 1 : 0;
        }
    }
    pthread_mutex_unlock(&ls->mu);
}

double pj_loadstat_window_s(const pj_loadstat *ls)
{
    if (!ls->have_window || ls->t1_ns <= ls->t0_ns)
        return 0.0;
    return (double)(ls->t1_ns - ls->t0_ns) / 1e9;
}

void pj_loadstat_summary(const pj_loadstat *ls, size_t group, pj_ls_summary *o)
{
    memset(o, 0, sizeof *o);
    if (group >= ls->n)
        return;
    const pj_ls_group *g = &ls->g[group];
    double w = pj_loadstat_window_s(ls);
    o->count = g->count;
    o->errors = g->errors;
    o->ops = g->ops;
    o->checked = g->checked;
    o->mismatches = g->mismatches;
    /* Throughput is what was served: failed requests are not in it. */
    o->req_per_s = w > 0 ? (double)(g->count - g->errors) / w : 0;
    o->ops_per_s = w > 0 ? (double)g->ok_ops / w : 0;
    const pj_ls_hist *lat = hist_or_empty(g->lat), *queue = hist_or_empty(g->queue),
                     *exec = hist_or_empty(g->exec);
    o->lat_count = lat->count;
    o->mean_us = pj_ls_hist_mean(lat) / 1e3;
    o->min_us = (double)lat->min / 1e3;
    o->p50_us = (double)pj_ls_hist_quantile(lat, 0.50) / 1e3;
    o->p90_us = (double)pj_ls_hist_quantile(lat, 0.90) / 1e3;
    o->p99_us = (double)pj_ls_hist_quantile(lat, 0.99) / 1e3;
    o->p999_us = (double)pj_ls_hist_quantile(lat, 0.999) / 1e3;
    o->max_us = (double)lat->max / 1e3;
    o->queue_p50_us = (double)pj_ls_hist_quantile(queue, 0.50) / 1e3;
    o->queue_p99_us = (double)pj_ls_hist_quantile(queue, 0.99) / 1e3;
    o->exec_p50_us = (double)pj_ls_hist_quantile(exec, 0.50) / 1e3;
    o->exec_p99_us = (double)pj_ls_hist_quantile(exec, 0.99) / 1e3;
}

void pj_loadstat_progress(pj_loadstat *ls, uint64_t *done, uint64_t *errors, double *p50_us)
{
    pthread_mutex_lock(&ls->mu);
    *done = ls->g[0].count;
    *errors = ls->g[0].errors;
    *p50_us = (double)pj_ls_hist_quantile(hist_or_empty(ls->g[0].lat), 0.5) / 1e3;
    pthread_mutex_unlock(&ls->mu);
}

/* ---- table -------------------------------------------------------------------- */

static int key_width(const pj_loadstat *ls, pj_ls_kind kind, const char *title)
{
    size_t w = strlen(title);
    for (size_t i = 0; i < ls->n; i++)
        if (ls->g[i].kind == kind && strlen(ls->g[i].key) > w)
            w = strlen(ls->g[i].key);
    return (int)w;
}

static void print_kind(const pj_loadstat *ls, FILE *f, pj_ls_kind kind, const char *title,
                       const char *heading)
{
    int kw = key_width(ls, kind, title);
    int any = 0;
    for (size_t i = 0; i < ls->n; i++)
        any |= ls->g[i].kind == kind && (ls->g[i].count || kind == PJ_LS_OVERALL);
    if (!any)
        return;
    fprintf(f, "\n%s\n", heading);
    fprintf(f, "%-*s  %9s  %9s  %6s  %10s  %11s  %9s  %9s  %9s  %9s  %9s  %9s\n", kw, title,
            "requests", "ops", "errors", "req/s", "ops/s", "mean", "p50", "p90", "p99", "p99.9",
            "max");
    for (size_t i = 0; i < ls->n; i++) {
        if (ls->g[i].kind != kind || (!ls->g[i].count && kind != PJ_LS_OVERALL))
            continue;
        pj_ls_summary s;
        pj_loadstat_summary(ls, i, &s);
        fprintf(f, "%-*s  %9llu  %9llu  %6llu  %10.1f  %11.1f", kw, ls->g[i].key,
                (unsigned long long)s.count, (unsigned long long)s.ops,
                (unsigned long long)s.errors, s.req_per_s, s.ops_per_s);
        if (s.lat_count)
            fprintf(f, "  %9.1f  %9.1f  %9.1f  %9.1f  %9.1f  %9.1f\n", s.mean_us, s.p50_us,
                    s.p90_us, s.p99_us, s.p999_us, s.max_us);
        else
            fprintf(f, "  %9s  %9s  %9s  %9s  %9s  %9s\n", "-", "-", "-", "-", "-", "-");
    }
}

void pj_loadstat_print(const pj_loadstat *ls, FILE *f)
{
    fprintf(f, "\nmeasured window %.3f s; latencies in µs (client: due or sent -> reply)\n",
            pj_loadstat_window_s(ls));
    print_kind(ls, f, PJ_LS_LAYER_M, "layer m",
               "by (layer, m-set) — a request's latency counts for each of its ops:");
    print_kind(ls, f, PJ_LS_SHAPE, "shape", "by request shape:");
    print_kind(ls, f, PJ_LS_OVERALL, "overall", "overall:");

    int kw = key_width(ls, PJ_LS_SHAPE, "shape");
    fprintf(f, "\ndaemon side (from each DONE), µs:\n");
    fprintf(f, "%-*s  %9s  %9s  %9s  %9s  %9s  %9s\n", kw, "shape", "queue p50", "queue p99",
            "exec p50", "exec p99", "checked", "mismatch");
    for (size_t i = 0; i < ls->n; i++) {
        if (ls->g[i].kind != PJ_LS_OVERALL && (ls->g[i].kind != PJ_LS_SHAPE || !ls->g[i].count))
            continue;
        pj_ls_summary s;
        pj_loadstat_summary(ls, i, &s);
        if (s.lat_count)
            fprintf(f, "%-*s  %9.1f  %9.1f  %9.1f  %9.1f", kw, ls->g[i].key, s.queue_p50_us,
                    s.queue_p99_us, s.exec_p50_us, s.exec_p99_us);
        else
            fprintf(f, "%-*s  %9s  %9s  %9s  %9s", kw, ls->g[i].key, "-", "-", "-", "-");
        fprintf(f, "  %9llu  %9llu\n", (unsigned long long)s.checked,
                (unsigned long long)s.mismatches);
    }
}

/* ---- JSON ----------------------------------------------------------------------- */

/* A latency figure, or null when no request of the group succeeded (0
 * would read as a measurement). */
static void add_lat(cJSON *o, const char *name, double v, uint64_t n)
{
    if (n)
        cJSON_AddNumberToObject(o, name, v);
    else
        cJSON_AddNullToObject(o, name);
}

static cJSON *group_json(const pj_loadstat *ls, size_t i)
{
    const pj_ls_group *g = &ls->g[i];
    pj_ls_summary s;
    pj_loadstat_summary(ls, i, &s);
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "key", g->key);
    if (g->kind == PJ_LS_LAYER_M) {
        cJSON_AddStringToObject(o, "layer", g->layer);
        cJSON_AddNumberToObject(o, "m_lo", g->m_lo);
        cJSON_AddNumberToObject(o, "m_hi", g->m_hi);
    }
    cJSON_AddNumberToObject(o, "count", (double)s.count);
    cJSON_AddNumberToObject(o, "errors", (double)s.errors);
    cJSON_AddNumberToObject(o, "ok", (double)(s.count - s.errors));
    cJSON_AddNumberToObject(o, "ops", (double)s.ops);
    cJSON_AddNumberToObject(o, "checked", (double)s.checked);
    cJSON_AddNumberToObject(o, "mismatches", (double)s.mismatches);
    cJSON_AddNumberToObject(o, "req_per_s", s.req_per_s);
    cJSON_AddNumberToObject(o, "ops_per_s", s.ops_per_s);
    cJSON *l = cJSON_AddObjectToObject(o, "latency_us");
    if (l) {
        add_lat(l, "mean", s.mean_us, s.lat_count);
        add_lat(l, "min", s.min_us, s.lat_count);
        add_lat(l, "p50", s.p50_us, s.lat_count);
        add_lat(l, "p90", s.p90_us, s.lat_count);
        add_lat(l, "p99", s.p99_us, s.lat_count);
        add_lat(l, "p99_9", s.p999_us, s.lat_count);
        add_lat(l, "max", s.max_us, s.lat_count);
    }
    cJSON *d = cJSON_AddObjectToObject(o, "daemon_us");
    if (d) {
        add_lat(d, "queue_p50", s.queue_p50_us, s.lat_count);
        add_lat(d, "queue_p99", s.queue_p99_us, s.lat_count);
        add_lat(d, "exec_p50", s.exec_p50_us, s.lat_count);
        add_lat(d, "exec_p99", s.exec_p99_us, s.lat_count);
    }
    if (!l || !d) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

cJSON *pj_loadstat_json(const pj_loadstat *ls)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddNumberToObject(o, "window_s", pj_loadstat_window_s(ls));
    cJSON *all = group_json(ls, 0);
    cJSON *shapes = cJSON_AddArrayToObject(o, "by_shape");
    cJSON *lm = cJSON_AddArrayToObject(o, "by_layer_m");
    if (!all || !shapes || !lm) {
        cJSON_Delete(all);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToObject(o, "overall", all);
    for (size_t i = 1; i < ls->n; i++) {
        if (!ls->g[i].count)
            continue; /* the table leaves it out too */
        cJSON *g = group_json(ls, i);
        if (!g) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(ls->g[i].kind == PJ_LS_SHAPE ? shapes : lm, g);
    }
    return o;
}
