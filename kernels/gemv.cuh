// gemv.cuh — the bf16 GEMV for m <= 32 (and its two-matrix router form).
//
// One CTA per 16-row block and K split; NW warps split the CTA's K range in
// contiguous pieces. mma.m16n8k16 with the weights as A (16 rows) and x as B
// (8 tokens per n8 tile). A lane (g = lane / 4, t = lane % 4) loads 16 bytes
// = 8 consecutive k of row g, of row g + 8 and of token g's x, all at
// k0 + 8 t: the same k positions in A and B, so the fragments come straight
// from the loads with no shuffles. (The mma sums over k; which k sits in
// which fragment slot does not matter as long as A and B agree.) The four
// lanes of a row read 64 contiguous bytes per load.
//
// Loads are batched U chunks of 32 k; PIPE = 1 issues the next batch
// before the current batch's mma; PIPE = 2 (knob pipe = 5) keeps
// PJ_GV_STAGES - 1 batches in flight in a per-lane cp.async ring in shared
// memory. Cross-warp sums go through shared memory in warp order; across
// CTAs (ks > 1) the last CTA to arrive sums the partials in split order, or
// (CL = 1) the ks CTAs of one cluster push them to the output's owner
// through distributed shared memory, which sums them in the same order.
// Both orders are fixed: the result is deterministic.
#pragma once

#include <cooperative_groups.h>

#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"

namespace cg = cooperative_groups;

template <int NW, int MINB> struct GemvBounds {
    // MINB = 1 caps registers at 128 per thread (two 256-thread CTAs per SM).
    static constexpr int min_blocks = MINB ? (NW == 4 ? 4 : (NW == 8 ? 2 : 1)) : 1;
};

template <int U, int MT, int DUAL, int RB> struct GemvBatch {
    uint4 wa[U][RB], wb[U][RB];
    uint4 wc[DUAL ? U : 1][DUAL ? RB : 1], wd[DUAL ? U : 1][DUAL ? RB : 1];
    uint4 xv[U][MT];
};

// RB row blocks per warp share each x fragment (x is read once per RB
// blocks: what keeps L2 -> SM traffic down at m = 16..32).
// CL = 1: the ks CTAs of a row group form one thread-block cluster and the
// split-K partials meet in distributed shared memory (pushed with st.async
// and counted on the owner's barrier: cl_reduce in pjdev.cuh) instead of
// global memory, a fence, an atomic and a re-read.
template <int NW, int U, int MT, int PIPE, int DUAL, int MINB, int RB, int CL = 0>
__global__ void __launch_bounds__(NW * 32, (GemvBounds<NW, MINB>::min_blocks))
    gemv_kernel(const GemvArgs a)
{
    constexpr int MTOK = MT * 8;
    constexpr int RS = MTOK + 1; // padded row of the reduction buffer
    constexpr int ROWS = RB * 16;
    __shared__ float red[NW][ROWS * RS];
    __shared__ int s_last;

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int g = lane >> 2, t = lane & 3;
    const uint32_t cb = blockIdx.x, split = blockIdx.y; // CTA = RB row blocks
    const uint32_t cpw = a.kc / (32 * NW);              // chunks per warp, a multiple of U
    if constexpr (CL)
        cl_started(); // this CTA's shared memory may take the others' partials
    const size_t k0 = (size_t)split * a.kc + (size_t)warp * cpw * 32 + t * 8;

    const uint16_t *pa[RB], *pb[RB], *pc[RB], *pd[RB];
#pragma unroll
    for (int j = 0; j < RB; j++) {
        // Rows past N read row N - 1: their outputs are never stored.
        const uint32_t r0 = min((cb * RB + j) * 16 + g, a.N - 1);
        const uint32_t r1 = min((cb * RB + j) * 16 + g + 8, a.N - 1);
        pa[j] = a.w0 + (size_t)r0 * a.ldw + k0;
        pb[j] = a.w0 + (size_t)r1 * a.ldw + k0;
        pc[j] = DUAL ? a.w1 + (size_t)r0 * a.ldw + k0 : pa[j];
        pd[j] = DUAL ? a.w1 + (size_t)r1 * a.ldw + k0 : pb[j];
    }
    const uint16_t *px[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        // Tokens past m read token m - 1: their columns are never stored.
        uint32_t tok = min((uint32_t)(mt * 8 + g), a.m - 1);
        px[mt] = a.x + (size_t)tok * a.ldx + k0;
    }

    float acc[RB][MT][4];
#pragma unroll
    for (int j = 0; j < RB; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            acc[j][mt][0] = acc[j][mt][1] = acc[j][mt][2] = acc[j][mt][3] = 0.f;

    auto load = [&](GemvBatch<U, MT, DUAL, RB> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const size_t off = ((size_t)i * U + u) * 32;
#pragma unroll
            for (int j = 0; j < RB; j++) {
                b.wa[u][j] = ld_stream16(pa[j] + off);
                b.wb[u][j] = ld_stream16(pb[j] + off);
                if (DUAL) {
                    b.wc[u][j] = ld_stream16(pc[j] + off);
                    b.wd[u][j] = ld_stream16(pd[j] + off);
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                b.xv[u][mt] = ld_x16(px[mt] + off);
        }
    };
    auto compute = [&](const GemvBatch<U, MT, DUAL, RB> &b) {
#pragma unroll
        for (int u = 0; u < U; u++) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint4 xv = b.xv[u][mt];
#pragma unroll
                for (int j = 0; j < RB; j++) {
                    const uint4 wa = b.wa[u][j], wb = b.wb[u][j];
                    mma_bf16(acc[j][mt], wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
                    mma_bf16(acc[j][mt], wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
                    if (DUAL) {
                        const uint4 wc = b.wc[u][j], wd = b.wd[u][j];
                        mma_bf16(acc[j][mt], wc.x, wd.x, wc.y, wd.y, xv.x, xv.y);
                        mma_bf16(acc[j][mt], wc.z, wd.z, wc.w, wd.w, xv.z, xv.w);
                    }
                }
            }
        }
    };

    const uint32_t nb = cpw / U;
    if (PIPE == 2) {
        // Each lane copies exactly the pieces it reads back (cp.async into
        // its warp's ring): no barrier between copy and use; PJ_GV_STAGES - 1
        // batches in flight without holding registers.
        extern __shared__ __align__(16) unsigned char gv_ring[];
        constexpr int NP = (DUAL ? 4 : 2) * RB + MT;
        unsigned char *ring = gv_ring + (size_t)warp * PJ_GV_STAGES * U * NP * 512;
        auto piece = [&](uint32_t i, int u, int q) {
            return ring + (((size_t)(i % PJ_GV_STAGES) * U + u) * NP + q) * 512 + lane * 16;
        };
        auto issue = [&](uint32_t i) {
            if (i < nb)
#pragma unroll
                for (int u = 0; u < U; u++) {
                    const size_t off = ((size_t)i * U + u) * 32;
                    int q = 0;
#pragma unroll
                    for (int j = 0; j < RB; j++) {
                        cp_async16_mem(smem_u32(piece(i, u, q++)), pa[j] + off);
                        cp_async16_mem(smem_u32(piece(i, u, q++)), pb[j] + off);
                        if (DUAL) {
                            cp_async16_mem(smem_u32(piece(i, u, q++)), pc[j] + off);
                            cp_async16_mem(smem_u32(piece(i, u, q++)), pd[j] + off);
                        }
                    }
#pragma unroll
                    for (int mt = 0; mt < MT; mt++)
                        cp_async16_mem(smem_u32(piece(i, u, q++)), px[mt] + off);
                }
            cp_async_commit(); // every step commits, so group counts stay aligned
        };
        auto fetch = [&](GemvBatch<U, MT, DUAL, RB> &b, uint32_t i) {
#pragma unroll
            for (int u = 0; u < U; u++) {
                int q = 0;
#pragma unroll
                for (int j = 0; j < RB; j++) {
                    b.wa[u][j] = *(const uint4 *)piece(i, u, q++);
                    b.wb[u][j] = *(const uint4 *)piece(i, u, q++);
                    if (DUAL) {
                        b.wc[u][j] = *(const uint4 *)piece(i, u, q++);
                        b.wd[u][j] = *(const uint4 *)piece(i, u, q++);
                    }
                }
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    b.xv[u][mt] = *(const uint4 *)piece(i, u, q++);
            }
        };
        for (uint32_t i = 0; i + 1 < PJ_GV_STAGES; i++)
            issue(i);
        GemvBatch<U, MT, DUAL, RB> A;
#pragma unroll 1
        for (uint32_t i = 0; i < nb; i++) {
            issue(i + PJ_GV_STAGES - 1);
            cp_async_wait<PJ_GV_STAGES - 1>(); // batch i has landed
            fetch(A, i);
            compute(A);
        }
    } else if (PIPE) {
        GemvBatch<U, MT, DUAL, RB> A, B;
        load(A, 0);
        uint32_t i = 0;
        for (;;) {
            if (i + 1 < nb)
                load(B, i + 1);
            compute(A);
            if (++i >= nb)
                break;
            if (i + 1 < nb)
                load(A, i + 1);
            compute(B);
            if (++i >= nb)
                break;
        }
    } else {
#pragma unroll 1
        for (uint32_t i = 0; i < nb; i++) {
            GemvBatch<U, MT, DUAL, RB> A;
            load(A, i);
            compute(A);
        }
    }

    // C fragment: c0, c1 = (row g, tokens 2t, 2t + 1); c2, c3 = row g + 8.
#pragma unroll
    for (int j = 0; j < RB; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float *rw = red[warp] + j * 16 * RS;
            rw[g * RS + mt * 8 + 2 * t] = acc[j][mt][0];
            rw[g * RS + mt * 8 + 2 * t + 1] = acc[j][mt][1];
            rw[(g + 8) * RS + mt * 8 + 2 * t] = acc[j][mt][2];
            rw[(g + 8) * RS + mt * 8 + 2 * t + 1] = acc[j][mt][3];
        }
    __syncthreads();

    // Output idx: row = idx % ROWS (fastest, so a token's rows are one
    // contiguous store), token = idx / ROWS.
    const uint32_t nout = ROWS * MTOK;
    const size_t pbase = (size_t)cb * a.ks * nout;
    auto warp_sum = [&](uint32_t idx) {
        const uint32_t row = idx % ROWS, tok = idx / ROWS;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++)
            s += red[w][row * RS + tok];
        return s;
    };
    if (a.ks == 1) {
        for (uint32_t idx = threadIdx.x; idx < nout; idx += NW * 32) {
            const uint32_t row = idx % ROWS, tok = idx / ROWS;
            const uint32_t grow = cb * ROWS + row;
            const float s = warp_sum(idx);
            if (grow < a.n && tok < a.m)
                a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
        }
        return;
    }
    if constexpr (CL) {
        // Cluster rank = split (cluster dims 1 x ks, ks <= 16); the partials
        // meet by push (pjdev.cuh), each output summed in split order as in
        // the global path.
        __shared__ float recv[ROWS * MTOK + 16];
        cl_reduce(recv, nout, a.ks, cg::this_cluster().block_rank(), threadIdx.x, NW * 32, warp_sum,
                  [&](uint32_t idx, float s) {
                      const uint32_t row = idx % ROWS, tok = idx / ROWS;
                      const uint32_t grow = cb * ROWS + row;
                      if (grow < a.n && tok < a.m)
                          a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
                  });
    } else {
        for (uint32_t idx = threadIdx.x; idx < nout; idx += NW * 32)
            a.ws[pbase + (size_t)split * nout + idx] = warp_sum(idx);
        if (!splitk_arrive_last(a.cnt + cb, a.ks, &s_last))
            return;
        for (uint32_t idx = threadIdx.x; idx < nout; idx += NW * 32) {
            const uint32_t row = idx % ROWS, tok = idx / ROWS;
            const uint32_t grow = cb * ROWS + row;
            if (grow >= a.n || tok >= a.m)
                continue;
            float s = 0.f;
            for (uint32_t j = 0; j < a.ks; j++)
                s += ld_cg_f32(a.ws + pbase + (size_t)j * nout + idx);
            a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
        }
    }
}

// Picker over the compiled variants: NW in {4, 8, 16}, U in {1, 2, 4, 8},
// MT in {1, 2, 4}, PIPE, MINB (NW = 16 has no MINB variant: 512 threads
// already cap registers at 128), RB in {1, 2, 4} with NW * RB <= 16 (the
// reduction buffer is static shared memory), RB > 1 only for MT > 1 (at
// m <= 8 x is half the weights' traffic already), U <= 4 and one matrix.
template <int DUAL, int NW, int U, int MT, int P, int MB> static GemvFn gemv_pick_rb(int rb)
{
    if constexpr (MB && NW == 16) {
        return nullptr;
    } else {
        switch (rb) {
        case 1:
            return &gemv_kernel<NW, U, MT, P, DUAL, MB, 1>;
        case 2:
            if constexpr (NW <= 8 && MT > 1 && U <= 4 && !DUAL)
                return &gemv_kernel<NW, U, MT, P, DUAL, MB, 2>;
            else
                return nullptr;
        case 4:
            if constexpr (NW <= 4 && MT > 1 && U <= 4 && !DUAL)
                return &gemv_kernel<NW, U, MT, P, DUAL, MB, 4>;
            else
                return nullptr;
        }
        return nullptr;
    }
}
template <int DUAL, int NW, int U, int MT, int P> static GemvFn gemv_pick_mb(int minb, int rb)
{
    return minb ? gemv_pick_rb<DUAL, NW, U, MT, P, 1>(rb) : gemv_pick_rb<DUAL, NW, U, MT, P, 0>(rb);
}
template <int DUAL, int NW, int U, int MT> static GemvFn gemv_pick_p(int pipe, int minb, int rb)
{
    switch (pipe) {
    case 0:
        return gemv_pick_mb<DUAL, NW, U, MT, 0>(minb, rb);
    case 1:
        return gemv_pick_mb<DUAL, NW, U, MT, 1>(minb, rb);
    case 5:
        if constexpr (U <= 4)
            return gemv_pick_mb<DUAL, NW, U, MT, 2>(minb, rb);
        else
            return nullptr;
    }
    return nullptr;
}
template <int DUAL, int NW, int U> static GemvFn gemv_pick_mt(int mt, int pipe, int minb, int rb)
{
    switch (mt) {
    case 1:
        return gemv_pick_p<DUAL, NW, U, 1>(pipe, minb, rb);
    case 2:
        return gemv_pick_p<DUAL, NW, U, 2>(pipe, minb, rb);
    case 4:
        return gemv_pick_p<DUAL, NW, U, 4>(pipe, minb, rb);
    }
    return nullptr;
}
template <int DUAL, int NW> static GemvFn gemv_pick_u(int u, int mt, int pipe, int minb, int rb)
{
    switch (u) {
    case 1:
        return gemv_pick_mt<DUAL, NW, 1>(mt, pipe, minb, rb);
    case 2:
        return gemv_pick_mt<DUAL, NW, 2>(mt, pipe, minb, rb);
    case 4:
        return gemv_pick_mt<DUAL, NW, 4>(mt, pipe, minb, rb);
    case 8:
        if constexpr (DUAL)
            return nullptr; // 8 chunks x 4 matrices x 2 batches cannot stay in registers
        else
            return gemv_pick_mt<DUAL, NW, 8>(mt, pipe, minb, rb);
    }
    return nullptr;
}
template <int DUAL> static GemvFn gemv_pick_t(int nw, int u, int mt, int pipe, int minb, int rb)
{
    switch (nw) {
    case 4:
        return gemv_pick_u<DUAL, 4>(u, mt, pipe, minb, rb);
    case 8:
        return gemv_pick_u<DUAL, 8>(u, mt, pipe, minb, rb);
    case 16:
        return gemv_pick_u<DUAL, 16>(u, mt, pipe, minb, rb);
    }
    return nullptr;
}

// Cluster variants (CL = 1): one row block per warp, register batches
// (PIPE 0/1), U <= 4.
template <int DUAL, int NW, int U, int MT> static GemvFn gemv_pick_cl_mb(int pipe, int minb)
{
    if (pipe > 1)
        return nullptr;
    if (!minb)
        return pipe ? &gemv_kernel<NW, U, MT, 1, DUAL, 0, 1, 1>
                    : &gemv_kernel<NW, U, MT, 0, DUAL, 0, 1, 1>;
    if constexpr (NW == 16)
        return nullptr; // 512 threads already cap registers at 128
    else
        return pipe ? &gemv_kernel<NW, U, MT, 1, DUAL, 1, 1, 1>
                    : &gemv_kernel<NW, U, MT, 0, DUAL, 1, 1, 1>;
}
template <int DUAL, int NW, int U> static GemvFn gemv_pick_cl_mt(int mt, int pipe, int minb)
{
    switch (mt) {
    case 1:
        return gemv_pick_cl_mb<DUAL, NW, U, 1>(pipe, minb);
    case 2:
        return gemv_pick_cl_mb<DUAL, NW, U, 2>(pipe, minb);
    case 4:
        return gemv_pick_cl_mb<DUAL, NW, U, 4>(pipe, minb);
    }
    return nullptr;
}
template <int DUAL, int NW> static GemvFn gemv_pick_cl_u(int u, int mt, int pipe, int minb)
{
    switch (u) {
    case 1:
        return gemv_pick_cl_mt<DUAL, NW, 1>(mt, pipe, minb);
    case 2:
        return gemv_pick_cl_mt<DUAL, NW, 2>(mt, pipe, minb);
    case 4:
        return gemv_pick_cl_mt<DUAL, NW, 4>(mt, pipe, minb);
    }
    return nullptr;
}
template <int DUAL> static GemvFn gemv_pick_cl_t(int nw, int u, int mt, int pipe, int minb)
{
    switch (nw) {
    case 4:
        return gemv_pick_cl_u<DUAL, 4>(u, mt, pipe, minb);
    case 8:
        return gemv_pick_cl_u<DUAL, 8>(u, mt, pipe, minb);
    case 16:
        return gemv_pick_cl_u<DUAL, 16>(u, mt, pipe, minb);
    }
    return nullptr;
}
