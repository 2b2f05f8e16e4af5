/* stats.h — the daemon's counters and latency histograms (STATS reply).
 *
 * Owned by the server and touched only on the loop thread. Histograms are
 * log-linear (8 buckets per power of two), so a percentile is exact to
 * within 1/16 of its value.
 */
#ifndef PJ_STATS_H
#define PJ_STATS_H

#include <stdint.h>

#include "config/config.h"
#include "protocol/wire.h"

typedef struct cJSON cJSON;

#define PJ_HIST_BUCKETS 496
#define PJ_STATS_CODES  32 /* status codes counted (pj_status values below it) */
#define PJ_STATS_TYPES  16

typedef struct pj_hist {
    uint64_t count, sum, max;
    uint64_t b[PJ_HIST_BUCKETS];
} pj_hist;

void pj_hist_add(pj_hist *h, uint64_t v);
/* The value at quantile q (0..1): the middle of the bucket it falls in;
 * 0 when empty. */
uint64_t pj_hist_quantile(const pj_hist *h, double q);

typedef struct pj_layer_stats {
    uint64_t ops;
    uint64_t rows;   /* sum of m */
    pj_hist exec_ns; /* exec of one-op requests */
} pj_layer_stats;

typedef struct pj_stats {
    uint64_t start_ns;
    uint64_t conns_total, conns_refused;
    uint64_t hello_timeouts; /* closed for not saying HELLO (limits.hello_timeout_ms) */
    uint64_t requests;       /* messages answered */
    uint64_t by_type[PJ_STATS_TYPES];
    uint64_t errors[PJ_STATS_CODES]; /* ERROR replies and failed DONEs, by code */
    uint64_t ops;
    pj_hist queue_ns, exec_ns, total_ns; /* PROJECT: received->start, start->end, received->reply */
    /* By layer, n_layers of them: allocated to the model's count, since a
     * histogram is 4 KB and a daemon may serve a thousand layers. */
    uint32_t n_layers;
    pj_layer_stats *layer;
} pj_stats;

/* CLOCK_MONOTONIC in nanoseconds. */
uint64_t pj_now_ns(void);

/* Zeroes *s and allocates its n_layers per-layer counters. Returns 0 or
 * -ENOMEM (*s then holds none: n_layers 0). */
int pj_stats_init(pj_stats *s, uint32_t n_layers);
void pj_stats_free(pj_stats *s);
void pj_stats_error(pj_stats *s, int code);

/* Add "uptime_s", "requests", "errors", "ops", "layers" (names from
 * layer_names, n_layers of them, at most s->n_layers: ops, rows, exec_us
 * of one-op requests)
 * and "latency_us" (queue, exec, total; count, sum_us, mean, p50, p99,
 * max) to obj. */
void pj_stats_json(const pj_stats *s, const char *const *layer_names, uint32_t n_layers,
                   cJSON *obj);

/* Resident set size of this process in bytes (0 if unknown). */
uint64_t pj_stats_rss_bytes(void);

#endif
