/* bf16.c — the fp32 -> bf16 hi + bf16 lo split (see bf16.h for the bound). */
#include "kernels/bf16.h"

#define F32_EXP_MASK 0x7f800000u
#define BF16_MAX_MAG 0x7f7fu /* largest finite bf16 magnitude */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* hi = bf16(v) rounded to nearest even, except that a finite v whose rounding
 * would overflow to infinity keeps the largest finite bf16 of its sign: then
 * v - hi stays finite (and exact), so lo still carries the rest. */
static uint16_t split_hi(float v)
{
    uint16_t hi = pj_f32_to_bf16(v);
    if ((hi & 0x7fffu) == 0x7f80u && (f32_bits(v) & F32_EXP_MASK) != F32_EXP_MASK)
        hi = (uint16_t)((hi & 0x8000u) | BF16_MAX_MAG);
    return hi;
}

/* Per element: hi as above; w - hi is exact in fp32 (it fits in the 16 bits
 * of w's significand below hi's last bit), so lo = bf16(w - hi) loses only
 * its own rounding. */
void pj_split_f32(const float *w, size_t count, uint16_t *hi, uint16_t *lo)
{
    for (size_t i = 0; i < count; i++) {
        float v = w[i];
        if ((f32_bits(v) & F32_EXP_MASK) == F32_EXP_MASK) {
            hi[i] = pj_f32_to_bf16(v);
            lo[i] = 0;
            continue;
        }
        uint16_t h = split_hi(v);
        hi[i] = h;
        lo[i] = pj_f32_to_bf16(v - pj_bf16_to_f32(h));
    }
}
