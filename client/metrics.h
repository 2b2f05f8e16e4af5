/* metrics.h — a daemon's STATS as Prometheus text (exposition format
 * 0.0.4), for `projctl metrics` and node_exporter's textfile collector.
 *
 * Counters end in _total, times are in seconds, sizes in bytes. The
 * latency percentiles STATS gives (since the daemon started) become
 * summaries with quantiles 0.5 and 0.99 plus _sum and _count, and their
 * maxima gauges. backend_stats, whose keys differ between backends, is
 * flattened generically: each number or boolean at path a.b becomes
 * projd_backend_a_b (untyped; a key ending in _ms or _us is converted to
 * _seconds), an array of objects a label named after the array with the
 * element's index (lane="0"), the top level's strings the labels of
 * projd_backend_info, and cuda's startup_ms the family
 * projd_backend_startup_seconds{step=...}; the per-(layer, m) engine list
 * is the configuration, not a measurement, and is left out (projctl stats
 * shows it). Every series carries the caller's constant labels (--label),
 * e.g. gpu="0" when one node_exporter collects several daemons.
 *
 * The text stays valid whatever the document holds (node_exporter drops a
 * file with one bad line, projd_up included): a name met twice or too long
 * is written once or not at all, keys repeated in an object count once,
 * label values and HELP texts are escaped and made UTF-8 ('?' for a byte
 * that is not), and the generic part is bounded (4096 families, 256
 * elements of an array).
 */
#ifndef PJ_CLIENT_METRICS_H
#define PJ_CLIENT_METRICS_H

#include <stddef.h>

#define PJ_METRICS_MAX_LABELS 16

/* Constant labels, kept rendered: k1="v1",k2="v2". */
typedef struct pj_metrics_labels {
    unsigned n;
    char keys[PJ_METRICS_MAX_LABELS][64];
    char text[4096];
} pj_metrics_labels;

/* Adds "KEY=VALUE": KEY a Prometheus label name ([a-zA-Z_][a-zA-Z0-9_]*,
 * not starting with "__"), not one projd's own series use and not given
 * before; VALUE any UTF-8 text (escaped as the format says). 0, or -EINVAL
 * with err saying which rule it broke. */
int pj_metrics_label_add(pj_metrics_labels *l, const char *kv, char *err, size_t errlen);

/* The exposition of a STATS document (JSON text, len bytes), malloc'd and
 * NUL-terminated; NULL with err said when the text is not a STATS object
 * (-EINVAL) or memory ran out. projd_up is 1. */
char *pj_metrics_render(const char *stats_json, size_t len, const pj_metrics_labels *l, char *err,
                        size_t errlen);

/* The exposition when no STATS came: projd_up 0 and nothing else, so that
 * an alert on projd_up fires instead of the series going stale. NULL when
 * memory ran out. */
char *pj_metrics_render_down(const pj_metrics_labels *l);

/* The exposition when projd refused the connection (reason: "E_LIMIT" at a
 * connection limit, "E_SHUTDOWN" in a drain): it answered, so projd_up 1,
 * and projd_scrape_refused{reason} 1 instead of the STATS series. A node
 * whose clients hold every place must not read as down (ProjdDown). NULL
 * when memory ran out. */
char *pj_metrics_render_refused(const pj_metrics_labels *l, const char *reason);

#endif
