/* refgemm.c — the CPU reference projection (numerical definition in refgemm.h).
 *
 * Every output y[i, r] is one fp32 sum taken in increasing k, so the work is
 * vectorised across rows instead of along k: a block of REF_RB weight rows is
 * transposed to k-major floats, and for each token the REF_RB independent
 * sums advance together (one k step = a broadcast of x[i, k] times a
 * contiguous vector of REF_RB weights). Written with GNU vector types so the
 * 2 x 4 accumulators stay in registers (plain arrays left gcc keeping them
 * in memory: about 1.3x slower at m = 16..64); nothing is reassociated.
 * Products of two bf16 values are exact in fp32 (8 + 8 significant bits), so
 * a contracted multiply-add would give the same sums except where a product
 * underflows.
 */
#include "kernels/refgemm.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

#define REF_RB 16 /* weight rows per block; a multiple of every SIMD width */

const char *pj_format_name(pj_format f)
{
    switch (f) {
    case PJ_FMT_BF16:
        return "bf16";
    case PJ_FMT_Z12:
        return "z12";
    case PJ_FMT_SPLIT:
        return "split";
    }
    return "unknown";
}

/* Layout of the scratch area: x as floats (m x k), then the transposed hi and
 * lo weight blocks (k x REF_RB floats each), then REF_RB unpacked z12 rows
 * (REF_RB x k bf16). */
size_t pj_ref_scratch_floats(uint32_t m, uint32_t k)
{
    return (size_t)m * k + 2 * (size_t)REF_RB * k + (size_t)REF_RB * k / 2 + 1;
}

/* Fill k x REF_RB blocks wt (and wl for SPLIT) from rows [r, r + nr) of w;
 * columns past nr are 0. Reading the REF_RB rows side by side writes the
 * block sequentially. */
static void ref_load_block(const pj_weights *w, uint32_t r, uint32_t nr, float *wt, float *wl,
                           uint16_t *rowbuf)
{
    uint32_t k = w->k;
    const uint16_t *src[REF_RB], *srcl[REF_RB];
    for (uint32_t j = 0; j < nr; j++) {
        size_t off = (size_t)(r + j) * k;
        switch (w->fmt) {
        case PJ_FMT_Z12:
            pj_z12_unpack_row(w->z, r + j, rowbuf + (size_t)j * k);
            src[j] = rowbuf + (size_t)j * k;
            break;
        case PJ_FMT_SPLIT:
            src[j] = w->hi + off;
            srcl[j] = w->lo + off;
            break;
        default:
            src[j] = w->bf16 + off;
            break;
        }
    }
    for (uint32_t c = 0; c < k; c++) {
        float *o = wt + (size_t)c * REF_RB;
        for (uint32_t j = 0; j < nr; j++)
            o[j] = pj_bf16_to_f32(src[j][c]);
        for (uint32_t j = nr; j < REF_RB; j++)
            o[j] = 0.0f;
    }
    if (w->fmt != PJ_FMT_SPLIT)
        return;
    for (uint32_t c = 0; c < k; c++) {
        float *o = wl + (size_t)c * REF_RB;
        for (uint32_t j = 0; j < nr; j++)
            o[j] = pj_bf16_to_f32(srcl[j][c]);
        for (uint32_t j = nr; j < REF_RB; j++)
            o[j] = 0.0f;
    }
}

/* Four fp32 lanes (GNU vector extension): each lane is an ordinary IEEE
 * multiply and add, so a vector of REF_RB / 4 of them computes exactly the
 * REF_RB scalar sums, with the accumulators held in registers. */
typedef float ref_v4 __attribute__((vector_size(16)));

static inline ref_v4 ref_ld(const float *p)
{
    ref_v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void ref_st(float *p, ref_v4 v)
{
    memcpy(p, &v, sizeof v);
}

static inline ref_v4 ref_splat(float f)
{
    ref_v4 v = {f, f, f, f};
    return v;
}

static void ref_store(uint16_t *y, const ref_v4 *acc, uint32_t nr)
{
    float a[REF_RB];
    for (uint32_t q = 0; q < REF_RB / 4; q++)
        ref_st(a + 4 * q, acc[q]);
    for (uint32_t j = 0; j < nr; j++)
        y[j] = pj_f32_to_bf16(a[j]);
}

/* Tokens [i0, i1) against one block, two tokens per pass so that
 * 2 * REF_RB / 4 independent vector sums hide the add latency. */
static void ref_block_plain(const float *xf, uint32_t k, uint32_t i0, uint32_t i1, const float *wt,
                            uint16_t *y, size_t ldy, uint32_t nr)
{
    uint32_t i = i0;
    for (; i + 2 <= i1; i += 2) {
        ref_v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        ref_v4 b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
        const float *x0 = xf + (size_t)i * k, *x1 = x0 + k;
        for (uint32_t c = 0; c < k; c++) {
            const float *wc = wt + (size_t)c * REF_RB;
            ref_v4 w0 = ref_ld(wc), w1 = ref_ld(wc + 4), w2 = ref_ld(wc + 8), w3 = ref_ld(wc + 12);
            ref_v4 u = ref_splat(x0[c]), v = ref_splat(x1[c]);
            a0 += u * w0;
            a1 += u * w1;
            a2 += u * w2;
            a3 += u * w3;
            b0 += v * w0;
            b1 += v * w1;
            b2 += v * w2;
            b3 += v * w3;
        }
        ref_v4 ra[4] = {a0, a1, a2, a3}, rb[4] = {b0, b1, b2, b3};
        ref_store(y + (size_t)i * ldy, ra, nr);
        ref_store(y + (size_t)(i + 1) * ldy, rb, nr);
    }
    for (; i < i1; i++) {
        ref_v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *x0 = xf + (size_t)i * k;
        for (uint32_t c = 0; c < k; c++) {
            const float *wc = wt + (size_t)c * REF_RB;
            ref_v4 u = ref_splat(x0[c]);
            a0 += u * ref_ld(wc);
            a1 += u * ref_ld(wc + 4);
            a2 += u * ref_ld(wc + 8);
            a3 += u * ref_ld(wc + 12);
        }
        ref_v4 ra[4] = {a0, a1, a2, a3};
        ref_store(y + (size_t)i * ldy, ra, nr);
    }
}

/* As ref_block_plain, adding x*hi then x*lo at each k. */
static void ref_block_split(const float *xf, uint32_t k, uint32_t i0, uint32_t i1, const float *wt,
                            const float *wl, uint16_t *y, size_t ldy, uint32_t nr)
{
    for (uint32_t i = i0; i < i1; i++) {
        ref_v4 a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
        const float *x0 = xf + (size_t)i * k;
        for (uint32_t c = 0; c < k; c++) {
            const float *hc = wt + (size_t)c * REF_RB, *lc = wl + (size_t)c * REF_RB;
            ref_v4 u = ref_splat(x0[c]);
            a0 += u * ref_ld(hc);
            a1 += u * ref_ld(hc + 4);
            a2 += u * ref_ld(hc + 8);
            a3 += u * ref_ld(hc + 12);
            a0 += u * ref_ld(lc);
            a1 += u * ref_ld(lc + 4);
            a2 += u * ref_ld(lc + 8);
            a3 += u * ref_ld(lc + 12);
        }
        ref_v4 ra[4] = {a0, a1, a2, a3};
        ref_store(y + (size_t)i * ldy, ra, nr);
    }
}

static int ref_check(const pj_weights *w, uint32_t r0, uint32_t r1, size_t ldx, size_t ldy)
{
    if (!w || r0 > r1 || r1 > w->n || ldx < w->k || ldy < r1)
        return -EINVAL;
    switch (w->fmt) {
    case PJ_FMT_BF16:
        return w->bf16 ? 0 : -EINVAL;
    case PJ_FMT_Z12:
        return (w->z && w->z->n == w->n && w->z->k == w->k) ? 0 : -EINVAL;
    case PJ_FMT_SPLIT:
        return (w->hi && w->lo) ? 0 : -EINVAL;
    }
    return -EINVAL;
}

int pj_ref_project_rows(const pj_weights *w, uint32_t m, uint32_t r0, uint32_t r1,
                        const uint16_t *x, size_t ldx, uint16_t *y, size_t ldy, float *scratch)
{
    int rc = ref_check(w, r0, r1, ldx, ldy);
    if (rc)
        return rc;
    if (m == 0 || r0 == r1)
        return 0;
    uint32_t k = w->k;
    float *owned = NULL;
    if (!scratch) {
        size_t nf = pj_ref_scratch_floats(m, k);
        if (nf > SIZE_MAX / sizeof(float))
            return -ENOMEM;
        owned = malloc(nf * sizeof(float));
        if (!owned)
            return -ENOMEM;
        scratch = owned;
    }
    float *xf = scratch;
    float *wt = xf + (size_t)m * k;
    float *wl = wt + (size_t)REF_RB * k;
    uint16_t *rowbuf = (uint16_t *)(wl + (size_t)REF_RB * k);

    for (uint32_t i = 0; i < m; i++)
        for (uint32_t c = 0; c < k; c++)
            xf[(size_t)i * k + c] = pj_bf16_to_f32(x[(size_t)i * ldx + c]);

    for (uint32_t r = r0; r < r1; r += REF_RB) {
        uint32_t nr = r1 - r < REF_RB ? r1 - r : REF_RB;
        ref_load_block(w, r, nr, wt, wl, rowbuf);
        if (w->fmt == PJ_FMT_SPLIT)
            ref_block_split(xf, k, 0, m, wt, wl, y + r, ldy, nr);
        else
            ref_block_plain(xf, k, 0, m, wt, y + r, ldy, nr);
    }
    free(owned);
    return 0;
}

int pj_ref_project(const pj_weights *w, uint32_t m, uint32_t n, const uint16_t *x, size_t ldx,
                   uint16_t *y, size_t ldy)
{
    return pj_ref_project_rows(w, m, 0, n, x, ldx, y, ldy, NULL);
}
