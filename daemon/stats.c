/* stats.c — see stats.h. */
#include "daemon/stats.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

uint64_t pj_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Values below 16 have a bucket each; above, 8 buckets per power of two. */
static unsigned bucket_of(uint64_t v)
{
    if (v < 16)
        return (unsigned)v;
    unsigned e = 63u - (unsigned)__builtin_clzll(v);
    unsigned sub = (unsigned)(v >> (e - 3)) & 7u;
    return 16u + (e - 4u) * 8u + sub;
}

static uint64_t bucket_mid(unsigned i)
{
    if (i < 16)
        return i;
    unsigned e = (i - 16u) / 8u + 4u, sub = (i - 16u) % 8u;
    uint64_t lo = (uint64_t)(8u + sub) << (e - 3);
    uint64_t width = (uint64_t)1 << (e - 3);
    return lo + width / 2;
}

void pj_hist_add(pj_hist *h, uint64_t v)
{
    h->count++;
    h->sum += v;
    if (v > h->max)
        h->max = v;
    h->b[bucket_of(v)]++;
}

uint64_t pj_hist_quantile(const pj_hist *h, double q)
{
    if (h->count == 0)
        return 0;
    double want = q * (double)h->count;
    uint64_t need = (uint64_t)want;
    if ((double)need < want || need == 0)
        need++;
    if (need >= h->count)
        return h->max; /* the top quantile is known exactly */
    uint64_t seen = 0;
    for (unsigned i = 0; i < PJ_HIST_BUCKETS; i++) {
        seen += h->b[i];
        if (seen >= need) {
            uint64_t mid = bucket_mid(i);
            return mid > h->max ? h->max : mid;
        }
    }
    return h->max;
}

int pj_stats_init(pj_stats *s, uint32_t n_layers)
{
    memset(s, 0, sizeof *s);
    s->start_ns = pj_now_ns();
    if (n_layers) {
        s->layer = calloc(n_layers, sizeof *s->layer);
        if (!s->layer)
            return -ENOMEM;
        s->n_layers = n_layers;
    }
    return 0;
}

void pj_stats_free(pj_stats *s)
{
    free(s->layer);
    s->layer = NULL;
    s->n_layers = 0;
}

void pj_stats_error(pj_stats *s, int code)
{
    if (code > 0 && code < PJ_STATS_CODES)
        s->errors[code]++;
}

static void add_hist(cJSON *obj, const char *name, const pj_hist *h)
{
    cJSON *o = cJSON_AddObjectToObject(obj, name);
    if (!o)
        return;
    cJSON_AddNumberToObject(o, "count", (double)h->count);
    /* Never lower than the last (the ns sum only grows): what a
     * Prometheus summary's _sum needs, which mean x count is not. */
    cJSON_AddNumberToObject(o, "sum_us", (double)h->sum / 1e3);
    cJSON_AddNumberToObject(o, "mean", h->count ? (double)h->sum / (double)h->count / 1e3 : 0);
    cJSON_AddNumberToObject(o, "p50", (double)pj_hist_quantile(h, 0.50) / 1e3);
    cJSON_AddNumberToObject(o, "p99", (double)pj_hist_quantile(h, 0.99) / 1e3);
    cJSON_AddNumberToObject(o, "max", (double)h->max / 1e3);
}

void pj_stats_json(const pj_stats *s, const char *const *layer_names, uint32_t n_layers, cJSON *obj)
{
    cJSON_AddNumberToObject(obj, "uptime_s", (double)(pj_now_ns() - s->start_ns) / 1e9);
    cJSON *req = cJSON_AddObjectToObject(obj, "requests");
    if (req) {
        cJSON_AddNumberToObject(req, "total", (double)s->requests);
        for (int t = 1; t < PJ_STATS_TYPES; t++)
            if (s->by_type[t] && pj_msg_type_valid(t))
                cJSON_AddNumberToObject(req, pj_msg_type_name(t), (double)s->by_type[t]);
    }
    cJSON *err = cJSON_AddObjectToObject(obj, "errors");
    if (err) {
        uint64_t total = 0;
        for (int c = 1; c < PJ_STATS_CODES; c++) {
            total += s->errors[c];
            if (s->errors[c])
                cJSON_AddNumberToObject(err, pj_status_name(c), (double)s->errors[c]);
        }
        cJSON_AddNumberToObject(err, "total", (double)total);
    }
    cJSON_AddNumberToObject(obj, "ops", (double)s->ops);
    cJSON *layers = cJSON_AddObjectToObject(obj, "layers");
    for (uint32_t i = 0; layers && i < n_layers && i < s->n_layers; i++) {
        cJSON *l = cJSON_AddObjectToObject(layers, layer_names[i]);
        if (!l)
            continue;
        cJSON_AddNumberToObject(l, "ops", (double)s->layer[i].ops);
        cJSON_AddNumberToObject(l, "rows", (double)s->layer[i].rows);
        add_hist(l, "exec_us", &s->layer[i].exec_ns);
    }
    cJSON *lat = cJSON_AddObjectToObject(obj, "latency_us");
    if (lat) {
        add_hist(lat, "queue", &s->queue_ns);
        add_hist(lat, "exec", &s->exec_ns);
        add_hist(lat, "total", &s->total_ns);
    }
}

uint64_t pj_stats_rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return 0;
    unsigned long long size = 0, rss = 0;
    int n = fscanf(f, "%llu %llu", &size, &rss);
    fclose(f);
    if (n != 2)
        return 0;
    return (uint64_t)rss * (uint64_t)sysconf(_SC_PAGESIZE);
}
