/* rowclass.h — a layer's row classes: the row counts below its max_n that
 * the cuda backend captures graphs at as well as at max_n, and the class
 * that serves a request of n rows.
 *
 * A request computes the rows of the graph that serves it. With graphs at
 * max_n alone, a row-prefix request (the reference unpooler's first 1024
 * of 8192 rows) computed all max_n through the staging buffers; on an H100
 * that took a decode trace's p50 round trip from 117 to 159 µs
 * (bench/results/2026-12-07-s61/visit1). The classes come from the
 * layer's config (graph_rows) and from the rows its tuning table entries
 * were timed on (pj_tune_rows_below). Pure functions: the CI suite tests
 * them without a GPU (tests/test_rowclass.c). */
#ifndef PJ_ROWCLASS_H
#define PJ_ROWCLASS_H

#include <stdint.h>

#include "kernels/dispatch.h"

#define PJ_ROWCLASS_MAX 8 /* classes a layer, below max_n */

typedef struct pj_rowclass_set {
    uint32_t n;                     /* classes kept, */
    uint32_t rows[PJ_ROWCLASS_MAX]; /* their rows, ascending, each below max_n */
    uint32_t from_table;            /* how many of those came from the table alone */
    uint32_t total;                 /* classes there were (> n: the largest dropped) */
} pj_rowclass_set;

/* The classes of a layer of shape n_rows x k whose requests may use max_n
 * rows: cfg_rows (config graph_rows: ascending, each at most max_n; one
 * equal to max_n is max_n's own graphs) merged with the rows the entries
 * of table (may be NULL) under table_name were timed on below max_n, each
 * value once; the smallest PJ_ROWCLASS_MAX kept. */
void pj_rowclass_make(const pj_tune_table *table, const char *table_name, uint32_t n_rows,
                      uint32_t k, uint32_t max_n, const uint32_t *cfg_rows, uint32_t n_cfg,
                      pj_rowclass_set *out);

/* The class that serves a request of n rows: the index of the smallest
 * with rows >= n, or -1 when none holds n (max_n's graphs serve it). */
int pj_rowclass_pick(const pj_rowclass_set *s, uint32_t n);

#endif
