/* fuzz_tune.c — arbitrary bytes as a tuning table (kernels/dispatch.h).
 *
 * The table is an operator's file that projd reads at start and on
 * SIGHUP's checks, so a bad one must be refused or trimmed, never misread.
 * Beyond "does not crash" the harness checks:
 * - a refused table: a non-empty one-line message and an empty table;
 * - an accepted one: the count returned is the table's, no two entries
 *   share (layer, n, k, m), each entry's fields are in range, every
 *   rejection (the checker refuses some on purpose) was one line;
 * - the table written back (pj_tune_to_json) loads as the same table, and
 *   writing that gives the same text (the second trip is exact);
 * - each entry's knobs, printed and parsed for its engine, are the same;
 * - the dispatcher's choice for an entry's layer is an entry of that
 *   layer and shape, at every m. */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/dispatch.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

/* One line of printable ASCII: the file's own bytes arrive escaped. */
static void one_line(const char *s)
{
    check(s[0] != '\0');
    for (; *s; s++)
        check((unsigned char)*s >= 0x20 && (unsigned char)*s < 0x7f);
}

static void on_msg(void *ctx, const char *msg)
{
    (void)ctx;
    one_line(msg);
}

/* Refuses some entries, as a device checker would, so that path runs. */
static int refuse_some(void *ctx, const pj_tune_entry *e, char *why, size_t whylen)
{
    (void)ctx;
    if (e->m % 97 != 13)
        return 0;
    snprintf(why, whylen, "%s m=%u: refused by the harness", e->layer, e->m);
    return -EINVAL;
}

static void check_entries(const pj_tune_table *t)
{
    check(t->n <= PJ_TUNE_MAX);
    for (uint32_t i = 0; i < t->n; i++) {
        const pj_tune_entry *e = &t->e[i];
        size_t len = strnlen(e->layer, PJ_TUNE_NAME);
        check(len >= 1 && len < PJ_TUNE_NAME);
        check(e->m >= 1 && e->m <= 65536);
        check((unsigned)e->eng < PJ_ENG_COUNT);
        check(!e->n || e->rows <= e->n);
        check(e->m % 97 != 13);
        for (uint32_t j = 0; j < i; j++)
            check(!(t->e[j].m == e->m && t->e[j].n == e->n && t->e[j].k == e->k &&
                    strcmp(t->e[j].layer, e->layer) == 0));

        char s[512], err[256];
        pj_eng_knobs_str(e->eng, &e->knobs, s, sizeof s);
        pj_eng_knobs kn;
        memset(&kn, 0, sizeof kn);
        err[0] = '\0';
        check(pj_eng_knobs_parse(s, (int)e->eng, &kn, err, sizeof err) == 0);
        check(memcmp(&kn, &e->knobs, sizeof kn) == 0);

        static const uint32_t ms[] = {1, 2, 7, 8, 9, 16, 31, 32, 33, 64, 200, 256, 65536};
        for (size_t q = 0; q < sizeof ms / sizeof ms[0]; q++) {
            const pj_tune_entry *c = pj_dispatch_choose(t, e->layer, e->n, e->k, ms[q]);
            if (!c)
                continue;
            check(c >= t->e && c < t->e + t->n);
            check(strcmp(c->layer, e->layer) == 0);
            check(pj_tune_entry_fits(c, e->n, e->k));
        }
    }
}

/* The same table but for the informational times, which the writer rounds
 * to the nanosecond. */
static void check_same(const pj_tune_table *a, const pj_tune_table *b)
{
    check(a->n == b->n && a->sm_count == b->sm_count);
    check(strcmp(a->device, b->device) == 0);
    for (uint32_t i = 0; i < a->n; i++) {
        pj_tune_entry x = a->e[i], y = b->e[i];
        check(fabsf(x.us - y.us) <= 0.0006f + 1e-6f * fabsf(x.us));
        check(fabsf(x.base_us - y.base_us) <= 0.0006f + 1e-6f * fabsf(x.base_us));
        x.us = y.us = 0;
        x.base_us = y.base_us = 0;
        check(memcmp(&x, &y, sizeof x) == 0);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static pj_tune_table t, back;
    char err[256];
    err[0] = '\0';
    int rc = pj_tune_parse((const char *)data, size, &t, refuse_some, NULL, on_msg, NULL, err,
                           sizeof err);
    if (rc < 0) {
        one_line(err);
        check(t.n == 0);
        return 0;
    }
    check((uint32_t)rc == t.n);
    check_entries(&t);

    char *js = pj_tune_to_json(&t, "c0ffee", "2026-12-05");
    check(js != NULL);
    err[0] = '\0';
    check(pj_tune_parse(js, strlen(js), &back, refuse_some, NULL, on_msg, NULL, err, sizeof err) ==
          rc);
    check_same(&t, &back);
    char *js2 = pj_tune_to_json(&back, "c0ffee", "2026-12-05");
    check(js2 != NULL);
    check(strcmp(js, js2) == 0);
    free(js);
    free(js2);
    return 0;
}
