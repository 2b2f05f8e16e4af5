/* plot.h — projload's plots: data files plus a gnuplot script per plot,
 * drawn to PNG when gnuplot is installed.
 *
 * The data (.dat) and the script (.gp) are always written, so a plot can be
 * drawn later on another machine; the PNG appears only when a `gnuplot`
 * executable is found in PATH.
 */
#ifndef PJ_PLOT_H
#define PJ_PLOT_H

#include <stddef.h>
#include <stdint.h>

#include "client/loadstat.h"

/* One latency distribution to draw: its legend and histogram (ns). */
typedef struct pj_plot_series {
    const char *label; /* "nng", "nng c=4": letters, digits, '=', '-', ' ' and '.' */
    const pj_ls_hist *lat;
} pj_plot_series;

/* One step of a concurrency sweep. */
typedef struct pj_plot_sweep_point {
    uint32_t concurrency;
    double req_per_s, ops_per_s, p50_us, p99_us;
} pj_plot_sweep_point;

/* 1 when a gnuplot executable is in PATH. */
int pj_plot_have_gnuplot(void);

/* DIR/latency_cdf.png: one CDF curve per series (log-scaled µs axis).
 * Creates dir when missing. Returns 1 when the PNG was drawn, 0 when
 * gnuplot is missing (data and script written), or a negative errno with
 * msg saying what failed. */
int pj_plot_latency_cdf(const char *dir, const pj_plot_series *s, size_t n, char *msg,
                        size_t msglen);

/* DIR/sweep.png: throughput (req/s) and p50/p99 latency against
 * concurrency. Same returns. */
int pj_plot_sweep(const char *dir, const pj_plot_sweep_point *p, size_t n, char *msg,
                  size_t msglen);

#endif
