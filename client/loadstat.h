/* loadstat.h — projload's results: latency histograms, percentiles,
 * throughput, grouped tables and the JSON report.
 *
 * Every completed request is recorded once, into the overall group and
 * into the groups it belongs to (its request shape, and each (layer,
 * m-set) its ops touch — a multi-op request's latency counts for each of
 * them, since the client waits for the whole request). Recording takes a
 * mutex, so any thread may record.
 *
 * Histograms are log-linear: exact below 256 ns, then 128 buckets per power
 * of two, so a percentile is within 1/256 of the true sample value (the
 * bucket's midpoint, clamped to the observed min and max). Percentiles use
 * the nearest-rank definition: the smallest sample with at least q of all
 * samples at or below it.
 */
#ifndef PJ_LOADSTAT_H
#define PJ_LOADSTAT_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct cJSON cJSON;

#define PJ_LS_SUB_BITS 7
#define PJ_LS_MAX_LOG2 40 /* values above 2^41 ns (36 minutes) land in the top bucket */
#define PJ_LS_BUCKETS  ((PJ_LS_MAX_LOG2 - PJ_LS_SUB_BITS + 2) << PJ_LS_SUB_BITS)

typedef struct pj_ls_hist {
    uint64_t count, sum, min, max;
    uint64_t b[PJ_LS_BUCKETS];
} pj_ls_hist;

void pj_ls_hist_init(pj_ls_hist *h);
void pj_ls_hist_add(pj_ls_hist *h, uint64_t v);
void pj_ls_hist_merge(pj_ls_hist *dst, const pj_ls_hist *src);

/* Nearest-rank quantile q in [0, 1] (q = 1: the max); 0 when empty. */
uint64_t pj_ls_hist_quantile(const pj_ls_hist *h, double q);

/* Mean of the samples; 0 when empty. */
double pj_ls_hist_mean(const pj_ls_hist *h);

/* The bucket a value falls in, and that bucket's value range [lo, hi]. */
size_t pj_ls_bucket_of(uint64_t v);
void pj_ls_bucket_range(size_t idx, uint64_t *lo, uint64_t *hi);

/* The nearest-rank quantile of n sorted values (the definition the
 * histogram approximates); 0 when n is 0. */
uint64_t pj_ls_quantile_sorted(const uint64_t *sorted, size_t n, double q);

/* Writes the empirical CDF as "value fraction" lines, one per non-empty
 * bucket (value = the bucket's upper end clamped to max, divided by
 * scale, e.g. 1e3 for µs). Returns 0 or -EIO. */
int pj_ls_hist_write_cdf(const pj_ls_hist *h, FILE *f, double scale);

/* ---- m-sets --------------------------------------------------------------
 * Ops are grouped by the m range that ends at each of the daemon's graph
 * shapes: with shapes 1 8 16 32 128 256 the sets are 1, 2-8, 9-16, 17-32,
 * 33-128, 129-256 (and max_m's range above the largest shape when it is
 * bigger). Without shapes, powers of two bound the sets. */
#define PJ_LS_MAX_MSETS 96

typedef struct pj_ls_msets {
    uint32_t n;
    uint32_t hi[PJ_LS_MAX_MSETS]; /* ascending upper bounds; set i is (hi[i-1], hi[i]] */
} pj_ls_msets;

void pj_ls_msets_init(pj_ls_msets *s, const uint32_t *shapes, uint32_t n_shapes, uint32_t max_m);
/* The set holding m: its index and [lo, hi]. m above the last bound falls
 * in a set of its own range (last + 1 .. m). */
uint32_t pj_ls_mset_of(const pj_ls_msets *s, uint32_t m, uint32_t *lo, uint32_t *hi);
/* "8" for a one-value set, "9-16" otherwise. */
void pj_ls_mset_label(uint32_t lo, uint32_t hi, char *out, size_t cap);

/* ---- groups and samples ---------------------------------------------------- */

typedef enum pj_ls_kind {
    PJ_LS_OVERALL = 0,
    PJ_LS_SHAPE = 1,   /* key: the request's op-list signature */
    PJ_LS_LAYER_M = 2, /* key: "layer m=set" */
} pj_ls_kind;

#define PJ_LS_KEY_MAX 256

typedef struct pj_ls_group {
    pj_ls_kind kind;
    char key[PJ_LS_KEY_MAX];
    char layer[64];      /* PJ_LS_LAYER_M */
    uint32_t m_lo, m_hi; /* PJ_LS_LAYER_M */
    uint64_t count;      /* requests completed, errors included */
    uint64_t errors;     /* requests that failed (any reason) */
    uint64_t ops;        /* ops of this group in the completed requests */
    uint64_t ok_ops;     /* ... in the requests that succeeded */
    uint64_t checked, mismatches;
    /* The histograms (about 35 KB each) are allocated when the group's
     * first request is recorded (the overall group's at init), so groups
     * no request reaches cost no memory; NULL until then. */
    pj_ls_hist *lat;   /* client latency of requests that succeeded, ns */
    pj_ls_hist *queue; /* the daemon's queue time (DONE), ns */
    pj_ls_hist *exec;  /* the daemon's execution time (DONE), ns */
} pj_ls_group;

typedef struct pj_ls_sample {
    uint64_t t_start_ns; /* when the request was due (open loop) or sent */
    uint64_t t_end_ns;   /* when its reply arrived */
    uint64_t queue_ns, exec_ns;
    uint32_t n_ops;
    int ok;       /* 1: DONE with PJ_OK */
    int checked;  /* compared against the CPU reference */
    int mismatch; /* ... and differed */
} pj_ls_sample;

/* A group a request counts in, and how many of its ops belong there. */
typedef struct pj_ls_ref {
    uint32_t group;
    uint32_t ops;
} pj_ls_ref;

typedef struct pj_loadstat {
    pthread_mutex_t mu;
    pj_ls_group *g; /* g[0] is the overall group */
    size_t n, cap;
    uint64_t t0_ns, t1_ns; /* measured window: first start .. last end */
    int have_window;
} pj_loadstat;

/* Empty results with only the overall group. 0 or -ENOMEM. */
int pj_loadstat_init(pj_loadstat *ls);
void pj_loadstat_free(pj_loadstat *ls);

/* The id of the group (kind, key), created when new (layer and m range
 * are kept for PJ_LS_LAYER_M). Returns the id (>= 1), or -ENOMEM. A
 * linear search: for a few groups (tests); see pj_loadstat_group_add. */
int pj_loadstat_group(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                      uint32_t m_lo, uint32_t m_hi);

/* Appends a group without looking for an existing one (the caller's keys
 * are distinct). Returns the id (>= 1), or -ENOMEM. */
int pj_loadstat_group_add(pj_loadstat *ls, pj_ls_kind kind, const char *key, const char *layer,
                          uint32_t m_lo, uint32_t m_hi);

/* Records one completed request in the overall group (with s->n_ops ops)
 * and in each of refs. Thread-safe. */
void pj_loadstat_record(pj_loadstat *ls, const pj_ls_ref *refs, size_t n_refs,
                        const pj_ls_sample *s);

/* Records the outcome of a check that finished after its request was
 * recorded (checks run on other threads): checked, and mismatches when
 * mismatch, in the overall group and each of refs. Thread-safe. */
void pj_loadstat_record_check(pj_loadstat *ls, const pj_ls_ref *refs, size_t n_refs, int mismatch);

/* Seconds of the measured window (0 when nothing was recorded). */
double pj_loadstat_window_s(const pj_loadstat *ls);

/* The readers below (window, summary, print, json) take no lock: call them
 * once the threads that record have stopped. */

/* One group's figures, as the table prints them and the JSON holds them.
 * req_per_s and ops_per_s count only the requests that succeeded (and
 * their ops) over the measured window; failed requests are in errors. */
typedef struct pj_ls_summary {
    uint64_t count, errors, ops, checked, mismatches;
    uint64_t lat_count; /* successful requests behind the latency figures */
    double req_per_s, ops_per_s;
    double mean_us, min_us, p50_us, p90_us, p99_us, p999_us, max_us;
    double queue_p50_us, queue_p99_us, exec_p50_us, exec_p99_us;
} pj_ls_summary;

void pj_loadstat_summary(const pj_loadstat *ls, size_t group, pj_ls_summary *out);

/* Snapshot for a progress line: recorded requests, errors, latency p50 in
 * µs (thread-safe). */
void pj_loadstat_progress(pj_loadstat *ls, uint64_t *done, uint64_t *errors, double *p50_us);

/* Prints the tables: by (layer, m-set), by request shape, overall, and the
 * daemon's side (queue vs exec from DONE). Latencies in µs, one decimal
 * ("-" when no request of the group succeeded). req/s and ops/s count the
 * requests that succeeded. Groups no request reached are left out (here
 * and in the JSON). */
void pj_loadstat_print(const pj_loadstat *ls, FILE *f);

/* The same as JSON: {"window_s", "overall": {...}, "by_shape": [...],
 * "by_layer_m": [...]}, each group {"key", "count", "errors", "ok", "ops",
 * "checked", "mismatches", "req_per_s", "ops_per_s", "latency_us": {"mean",
 * "min", "p50", "p90", "p99", "p99_9", "max"}, "daemon_us": {"queue_p50",
 * "queue_p99", "exec_p50", "exec_p99"}} (+ "layer", "m_lo", "m_hi" in
 * by_layer_m). count includes errors; ok = count - errors; req_per_s and
 * ops_per_s count the ok requests only. latency_us and daemon_us values
 * are null when no request of the group succeeded. NULL on ENOMEM. The
 * caller deletes it. */
cJSON *pj_loadstat_json(const pj_loadstat *ls);

#endif
