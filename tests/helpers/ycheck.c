/* ycheck.c — a GPU's y block against the CPU reference (ycheck.h). */
#include "tests/helpers/ycheck.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

double pjy_bound(double want, double sabs)
{
    return ldexp(fabs(want), -7) + ldexp(sabs, -12) + 1e-30;
}

int pjy_abs_w_row(const pj_weights *w, uint32_t r, float *out)
{
    const size_t K = w->k, base = (size_t)r * K;
    if (w->fmt == PJ_FMT_Z12) {
        uint16_t *b = malloc(K * 2);
        if (!b)
            return -1;
        pj_z12_unpack_row(w->z, r, b);
        for (size_t e = 0; e < K; e++)
            out[e] = fabsf(pj_bf16_to_f32(b[e]));
        free(b);
        return 0;
    }
    if (w->fmt == PJ_FMT_BF16) {
        for (size_t e = 0; e < K; e++)
            out[e] = fabsf(pj_bf16_to_f32(w->bf16[base + e]));
        return 0;
    }
    if (w->fmt == PJ_FMT_SPLIT) {
        for (size_t e = 0; e < K; e++)
            out[e] = fabsf(pj_bf16_to_f32(w->hi[base + e]) + pj_bf16_to_f32(w->lo[base + e]));
        return 0;
    }
    return -1;
}

void pjy_tally_init(pjy_tally *t)
{
    memset(t, 0, sizeof *t);
    t->first_bad = t->first_differ = (size_t)-1;
}

static void bad_at(pjy_tally *t, size_t e)
{
    if (t->first_bad == (size_t)-1)
        t->first_bad = e;
}

void pjy_tally_outside(pjy_tally *t, size_t e, uint16_t got)
{
    if (got != PJC_POISON) {
        t->outside++;
        bad_at(t, e);
    }
}

int pjy_tally_written(pjy_tally *t, size_t e, uint16_t got)
{
    t->in_block++;
    if (got == PJC_POISON)
        t->unwritten++;
    else if (isnan(pj_bf16_to_f32(got)))
        t->nans++;
    else
        return 1;
    bad_at(t, e);
    return 0;
}

void pjy_tally_judge(pjy_tally *t, size_t e, uint16_t got_bits, uint16_t want_bits, double sabs)
{
    const double got = pj_bf16_to_f32(got_bits), want = pj_bf16_to_f32(want_bits);
    if (!isfinite(want)) { /* the reference itself is unusable: never a pass */
        t->bad_ref++;
        bad_at(t, e);
        return;
    }
    t->judged++;
    if (got_bits != want_bits && t->differ++ == 0)
        t->first_differ = e;
    const double err = fabs(got - want), bound = pjy_bound(want, sabs);
    /* Written so that a NaN bound (an x or a w not finite) fails. */
    if (!(err <= bound)) {
        t->beyond++;
        bad_at(t, e);
    }
    if (err / bound > t->worst || isnan(bound))
        t->worst = err / bound;
    t->num += (got - want) * (got - want);
    t->den += want * want;
}

double pjy_tally_rel(const pjy_tally *t)
{
    return t->den > 0 ? sqrt(t->num / t->den) : sqrt(t->num);
}

static pthread_mutex_t g_seen_mu = PTHREAD_MUTEX_INITIALIZER;
static pjy_seen g_seen;

static void seen_add(const pjy_tally *t)
{
    pthread_mutex_lock(&g_seen_mu);
    g_seen.blocks++;
    g_seen.judged += t->judged;
    g_seen.differ += t->differ;
    /* differ / judged > worst_differ / worst_judged, without division */
    if (t->judged &&
        (g_seen.worst_judged == 0 || (double)t->differ * (double)g_seen.worst_judged >
                                         (double)g_seen.worst_differ * (double)t->judged)) {
        g_seen.worst_differ = t->differ;
        g_seen.worst_judged = t->judged;
    }
    pthread_mutex_unlock(&g_seen_mu);
}

void pjy_seen_get(pjy_seen *out)
{
    pthread_mutex_lock(&g_seen_mu);
    *out = g_seen;
    pthread_mutex_unlock(&g_seen_mu);
}

void pjy_seen_print(const char *suite)
{
    pjy_seen s;
    pjy_seen_get(&s);
    if (!s.blocks)
        return;
    printf("%s: ycheck: %zu blocks passed; %zu of their %zu elements (%.3f %%) differ from the "
           "reference in their bits; most in one block %zu of %zu (%.2f %%; the limit is "
           "max(%d, 1/%d of a block))\n",
           suite, s.blocks, s.differ, s.judged,
           s.judged ? 100.0 * (double)s.differ / (double)s.judged : 0.0, s.worst_differ,
           s.worst_judged,
           s.worst_judged ? 100.0 * (double)s.worst_differ / (double)s.worst_judged : 0.0,
           PJY_DIFFER_FLOOR, PJY_DIFFER_DIV);
}

int pjy_tally_verdict(const pjy_tally *t, const char *prefix, char *why, size_t whylen)
{
    const size_t differ_max = t->judged / PJY_DIFFER_DIV > PJY_DIFFER_FLOOR
                                  ? t->judged / PJY_DIFFER_DIV
                                  : PJY_DIFFER_FLOOR;
    if (!t->beyond && !t->unwritten && !t->nans && !t->bad_ref && !t->outside &&
        t->differ <= differ_max) {
        seen_add(t);
        return 0;
    }
    snprintf(why, whylen,
             "%s: of %zu elements (%zu judged) %zu beyond the bound (worst %.3g of it), %zu "
             "differ from the reference (at most %zu may), %zu unwritten, %zu NaN, %zu with a "
             "reference not finite; %zu written outside the block; rel err %.3g (first bad "
             "element %zu)",
             prefix, t->in_block, t->judged, t->beyond, t->worst, t->differ, differ_max,
             t->unwritten, t->nans, t->bad_ref, t->outside, pjy_tally_rel(t),
             t->first_bad != (size_t)-1 ? t->first_bad : t->first_differ);
    return -1;
}

int pjy_verify(const uint16_t *Y, size_t count, const pjc_shape *s, uint32_t m, const pj_weights *w,
               const uint16_t *x, const uint16_t *ref, double *rel_out, char *why, size_t whylen)
{
    const uint32_t N = w->n, K = w->k, n = s->n;
    /* |W| of the block's n rows, decoded once per call: the sums below
     * take m x n x K steps anyway, and nothing is kept between calls (no
     * cache to go stale when a model is freed and its address reused). */
    float *aw = n <= N ? malloc(((size_t)n + 1) * K * sizeof *aw) : NULL;
    float *ax = malloc((size_t)K * sizeof *ax);
    int rc = aw && ax ? 0 : -1;
    for (uint32_t c = 0; c < n && rc == 0; c++)
        rc = pjy_abs_w_row(w, c, aw + (size_t)c * K);
    if (rc != 0) {
        free(aw);
        free(ax);
        snprintf(why, whylen,
                 n > N ? "pjy_verify: the block's n %u is past the layer's %u rows"
                       : "pjy_verify: out of memory or an unknown weight format (n %u of %u)",
                 n, N);
        return -1;
    }
    pjy_tally t;
    pjy_tally_init(&t);
    uint64_t ax_row = UINT64_MAX;
    for (size_t e = 0; e < count; e++) {
        int in = 0;
        uint64_t r = 0, c = 0;
        if (e >= s->y_off) {
            r = (e - s->y_off) / s->y_ld;
            c = (e - s->y_off) % s->y_ld;
            in = r < m && c < n;
        }
        if (!in) {
            pjy_tally_outside(&t, e, Y[e]);
            continue;
        }
        if (!pjy_tally_written(&t, e, Y[e]))
            continue;
        if (r != ax_row) {
            for (uint32_t k = 0; k < K; k++)
                ax[k] = fabsf(pj_bf16_to_f32(x[r * K + k]));
            ax_row = r;
        }
        float sabs = 0;
        const float *wr = aw + c * K;
        for (uint32_t k = 0; k < K; k++)
            sabs += ax[k] * wr[k];
        pjy_tally_judge(&t, e, Y[e], ref[r * N + c], sabs);
    }
    free(aw);
    free(ax);
    if (rel_out)
        *rel_out = pjy_tally_rel(&t);
    char prefix[200];
    snprintf(prefix, sizeof prefix,
             "layer %u m %u n %u (x_off %llu x_ld %llu y_off %llu y_ld %llu)", s->layer, m, n,
             (unsigned long long)s->x_off, (unsigned long long)s->x_ld,
             (unsigned long long)s->y_off, (unsigned long long)s->y_ld);
    return pjy_tally_verdict(&t, prefix, why, whylen);
}
