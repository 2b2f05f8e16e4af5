// z12dev.cuh — device pieces shared by the z12 engines (gemvz.cu, gemvb.cu,
// tgemm.cu's pipe = 5):
// a tile's A fragments rebuilt from its three 16-byte pieces and fed to the
// mma, and the standard B fragments of 8 tokens x 64 k by two ldmatrix.x4.
#pragma once

#include <cstdint>

#include "kernels/pjdev.cuh"

// bx[0..3] = B fragments of k 0..31 (address of this lane's 8 x 8 row piece
// at a_lo), bx[4..7] of k 32..63 (a_hi).
__device__ __forceinline__ void z12_ldsm_b64(uint32_t (&bx)[8], uint32_t a_lo, uint32_t a_hi)
{
    uint32_t r4[4];
    ldmatrix_x4(r4, a_lo);
    bx[0] = r4[0];
    bx[1] = r4[1];
    bx[2] = r4[2];
    bx[3] = r4[3];
    ldmatrix_x4(r4, a_hi);
    bx[4] = r4[0];
    bx[5] = r4[1];
    bx[6] = r4[2];
    bx[7] = r4[3];
}

// The bf16 A fragments of a tile's four k16 steps (af[s] = a0a1, a2a3,
// a4a5, a6a7 of step s) from this lane's pieces p (low bytes of elements
// 0..15, 16..31, nibbles): zfmt.h's H0/H1 arithmetic and four byte permutes
// per step; b4 = the layer's exponent base in every byte.
__device__ __forceinline__ void z12_afrag(uint32_t (&af)[4][4], const uint4 (&p)[3], uint32_t b4)
{
#pragma unroll
    for (int s = 0; s < 4; s++) {
        const uint4 &lo = p[s >> 1];
        const uint4 &nb4 = p[2];
        const uint32_t L0 = (s & 1) ? lo.z : lo.x;
        const uint32_t L1 = (s & 1) ? lo.w : lo.y;
        const uint32_t N = s == 0 ? nb4.x : (s == 1 ? nb4.y : (s == 2 ? nb4.z : nb4.w));
        const uint32_t H0 = ((N & 0x07070707u) + b4) | ((N << 4) & 0x80808080u);
        const uint32_t H1 = (((N >> 4) & 0x07070707u) + b4) | (N & 0x80808080u);
        af[s][0] = prmt(L0, H0, 0x5140);
        af[s][1] = prmt(L0, H0, 0x7362);
        af[s][2] = prmt(L1, H1, 0x5140);
        af[s][3] = prmt(L1, H1, 0x7362);
    }
}

// acc[mt] += W_tile (16 x 64, decoded) * x (64 x 8 of n8 tile mt).
template <int MT>
__device__ __forceinline__ void z12_tile_mma(float (&acc)[MT][4], const uint4 (&p)[3],
                                             const uint32_t (&bx)[MT][8], uint32_t b4)
{
    uint32_t af[4][4];
    z12_afrag(af, p, b4);
#pragma unroll
    for (int s = 0; s < 4; s++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            mma_bf16(acc[mt], af[s][0], af[s][1], af[s][2], af[s][3], bx[mt][2 * s],
                     bx[mt][2 * s + 1]);
}
