/* refgemm.h — stored weights of one layer, and the CPU reference projection.
 *
 * y[i, r] = bf16( sum_k x[i, k] * W[r, k] ) for i < m, r < n, accumulated in
 * fp32 in increasing k. For PJ_FMT_SPLIT the accumulator takes x*hi then x*lo
 * at each k. This is the numerical definition every engine is checked against
 * and what the cpu backend runs.
 */
#ifndef PJ_REFGEMM_H
#define PJ_REFGEMM_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/zfmt.h"

typedef enum pj_format {
    PJ_FMT_BF16 = 0,  /* plain bf16, row-major n x k */
    PJ_FMT_Z12 = 1,   /* 12-bit lossless, zfmt.h */
    PJ_FMT_SPLIT = 2, /* fp32 (or f16) source as bf16 hi + bf16 lo */
} pj_format;

const char *pj_format_name(pj_format f);

/* A layer's weights in host memory. Borrowed pointers: whoever built it owns
 * the arrays (the model module). */
typedef struct pj_weights {
    pj_format fmt;
    uint32_t n, k;
    const uint16_t *bf16;    /* PJ_FMT_BF16: n x k, row stride k */
    const pj_z12 *z;         /* PJ_FMT_Z12 */
    const uint16_t *hi, *lo; /* PJ_FMT_SPLIT: n x k each, row stride k */
} pj_weights;

/* Rows [r0, r1) of y for all m tokens. x: m x k bf16, row stride ldx
 * elements; y: m x n bf16, row stride ldy elements (only columns r0..r1-1
 * written). Allocation-free when scratch (at least pj_ref_scratch_floats
 * floats) is given; pass NULL to let it allocate. Returns 0, -EINVAL (r0 > r1,
 * r1 > n, ldx < k, ldy < r1, unknown format or missing arrays) or -ENOMEM. */
size_t pj_ref_scratch_floats(uint32_t m, uint32_t k);
int pj_ref_project_rows(const pj_weights *w, uint32_t m, uint32_t r0, uint32_t r1,
                        const uint16_t *x, size_t ldx, uint16_t *y, size_t ldy, float *scratch);

/* All n rows (the row-prefix of W). */
int pj_ref_project(const pj_weights *w, uint32_t m, uint32_t n, const uint16_t *x, size_t ldx,
                   uint16_t *y, size_t ldy);

#endif
