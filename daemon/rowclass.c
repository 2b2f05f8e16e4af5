/* rowclass.c — see rowclass.h. */
#include "daemon/rowclass.h"

#include <string.h>

void pj_rowclass_make(const pj_tune_table *table, const char *table_name, uint32_t n_rows,
                      uint32_t k, uint32_t max_n, const uint32_t *cfg_rows, uint32_t n_cfg,
                      pj_rowclass_set *out)
{
    memset(out, 0, sizeof *out);
    uint32_t tab[PJ_ROWCLASS_MAX];
    const uint32_t tab_total =
        pj_tune_rows_below(table, table_name, n_rows, k, max_n, tab, PJ_ROWCLASS_MAX);
    const uint32_t n_tab = tab_total < PJ_ROWCLASS_MAX ? tab_total : PJ_ROWCLASS_MAX;
    /* Both lists ascending: merged, each value once, the smallest kept.
     * The table's list holds its smallest values, so the union's smallest
     * PJ_ROWCLASS_MAX are among the two. */
    uint32_t i = 0, j = 0;
    while (i < n_cfg || j < n_tab) {
        uint32_t v;
        int tabled = 0;
        if (j == n_tab || (i < n_cfg && cfg_rows[i] <= tab[j])) {
            v = cfg_rows[i++];
            if (j < n_tab && tab[j] == v)
                j++;
            if (v == 0 || v >= max_n)
                continue; /* max_n's own graphs (or nothing) */
        } else {
            v = tab[j++];
            tabled = 1;
        }
        out->total++;
        if (out->n < PJ_ROWCLASS_MAX) {
            out->rows[out->n++] = v;
            out->from_table += (uint32_t)tabled;
        }
    }
    out->total += tab_total - n_tab; /* the table's values past its smallest */
}

int pj_rowclass_pick(const pj_rowclass_set *s, uint32_t n)
{
    for (uint32_t c = 0; c < s->n; c++)
        if (s->rows[c] >= n)
            return (int)c;
    return -1;
}
