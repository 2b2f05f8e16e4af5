/* bf16.h — bfloat16 <-> float conversions and the fp32 -> (hi, lo) split.
 *
 * Usable from host C and from CUDA device code (PJ_HD). bf16 values travel
 * as raw uint16_t bit patterns everywhere in projd: no compiler bf16 type is
 * assumed on the host.
 */
#ifndef PJ_BF16_H
#define PJ_BF16_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define PJ_HD __host__ __device__ __forceinline__
#else
#define PJ_HD static inline
#endif

PJ_HD float pj_bf16_to_f32(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* Round to nearest, ties to even; NaN stays NaN (quiet), infinities stay. */
PJ_HD uint16_t pj_f32_to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* IEEE half -> float, exact. */
PJ_HD float pj_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    uint32_t u;
    if (exp == 0x1f) {
        u = sign | 0x7f800000u | (man << 13);
    } else if (exp != 0) {
        u = sign | ((exp + 112u) << 23) | (man << 13);
    } else if (man == 0) {
        u = sign;
    } else { /* subnormal half: normalise */
        exp = 113;
        while (!(man & 0x400u)) {
            man <<= 1;
            exp--;
        }
        u = sign | (exp << 23) | ((man & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

#ifndef __CUDACC__
/* Split fp32 weights into two bf16 tensors with hi = bf16(w) and
 * lo = bf16(w - hi). w - hi is exact in fp32, so the only error left is the
 * rounding of lo (unit roundoff 2^-8 on |w - hi| <= 2^-8 * 2^e(w)):
 * |w - (hi + lo)| <= 2^-16 * 2^e(w) <= 2^-16 * |w|, where 2^e(w) is w's
 * leading power of two; where lo falls in the bf16 subnormal range the
 * bound is instead half the smallest subnormal, 2^-134.
 * Non-finite w: hi carries it, lo = 0. A finite w whose bf16 rounding would
 * overflow (|w| >= 0x1.ffp127) gets hi = +-max bf16 and lo = bf16(w - hi);
 * the bound holds, but fp32 hi + lo overflows for |w| >= 2^128 - 2^111. */
void pj_split_f32(const float *w, size_t count, uint16_t *hi, uint16_t *lo);
#endif

#endif
