// gemvs.cu — the streamed bf16 GEMV (gemv / router knob pipe = 2), m <= 32.
//
// Why: the register-batched GEMV (gemv.cuh) keeps at most U x 16 bytes per
// lane in flight and runs 2.2 CTAs per SM with a ragged last wave; ncu saw
// 65 % of DRAM peak. Here one producer warp streams the weights through a
// shared-memory ring with bulk async copies (cp.async.bulk, completion on an
// mbarrier), so the bytes in flight per SM are the ring's size (up to ~200
// KB), not a register budget, and the grid is persistent: G = SMs x cps
// CTAs, each walking a contiguous range of work units.
//
// Work unit = (row group of RB row blocks = 16 RB rows, K chunk of kc).
// Units are numbered group-major; CTA c takes [c T / G, (c + 1) T / G), so
// every CTA streams the same number of bytes (+-1 unit). A ring slot holds a
// unit's weight rows (both matrices when DUAL) and x[0..m, chunk], each row
// at a pitch of 2 kc + 64 bytes (the 64 puts rows g and g + 1 in different
// bank halves for the 16-byte fragment reads below).
//
// Consumers (NW warps) split a slot's kc among themselves: the same
// fragment scheme as gemv.cuh (lane g, t reads 16 bytes of rows g, g + 8 and
// token g at k0 + 8 t). A warp's partial sums stay in registers across the
// units of one group; at the group's end the warps sum in warp order through
// shared memory. A group split between CTAs (at most the first and last of
// a CTA's range) goes through fp32 partial slots; the last CTA to arrive
// adds them in CTA order. Every order is fixed: deterministic.
//
// TILED (pipe = 3, not DUAL): the weights come from the layer's
// fragment-major copy (engine.h, wt), where a unit's 16 rows x kc of one row
// block are one contiguous run of 32 kc bytes: a unit is RB bulk copies of
// 8-64 KB (plus m copies of x) instead of 16 RB row copies of 2 kc bytes,
// and consumers read their fragments as 512 contiguous bytes per warp.
#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"

#include <errno.h>
#include <stdio.h>
#include <string.h>

// Debug build flag PJ_GEMVS_TRACE (off in every normal build): two CTAs (0
// and G / 2) stamp clock64 per unit i < 256 at five points: the producer
// before its empty-barrier wait (0) and after issuing the unit's copies (1),
// consumer warp 0 after its full-barrier wait (2) and at its release (3),
// the last consumer warp at its release (4); plus %globaltimer and clock64
// at the CTA's start and end, to convert cycles to ns. Each launch
// overwrites; pj_gemvs_trace_dump prints the last one.
#define PJ_TR_UNITS 256
#ifdef PJ_GEMVS_TRACE
__device__ unsigned long long g_gemvs_tr[2][5][PJ_TR_UNITS];
__device__ unsigned long long g_gemvs_trmeta[2][8];
__device__ __forceinline__ int tr_slot()
{
    return blockIdx.x == 0 ? 0 : (blockIdx.x == gridDim.x / 2 ? 1 : -1);
}
__device__ __forceinline__ unsigned long long gtimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
#define TR(ev, i)                                                                                  \
    do {                                                                                           \
        const int tb_ = tr_slot();                                                                 \
        if (tb_ >= 0 && (i) < PJ_TR_UNITS)                                                         \
            g_gemvs_tr[tb_][ev][i] = (unsigned long long)clock64();                                \
    } while (0)
#define TRMETA(j, v)                                                                               \
    do {                                                                                           \
        const int tb_ = tr_slot();                                                                 \
        if (tb_ >= 0)                                                                              \
            g_gemvs_trmeta[tb_][j] = (v);                                                          \
    } while (0)
#else
#define TR(ev, i)    ((void)0)
#define TRMETA(j, v) ((void)0)
#endif

__device__ __forceinline__ uint4 lds16(uint32_t a)
{
    uint4 r;
    asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "r"(a));
    return r;
}
__device__ __forceinline__ void bar_consumers(int nthreads)
{
    asm volatile("bar.sync 1, %0;" ::"r"(nthreads) : "memory");
}

// The CTA whose unit range holds unit u (inverse of u0(c) = c T / G).
__device__ __forceinline__ uint32_t owner_of(uint32_t u, uint32_t T, uint32_t G)
{
    return (uint32_t)((((uint64_t)u + 1) * G + T - 1) / T) - 1;
}

template <int NW, int MT, int DUAL, int RB, int TILED = 0>
__global__ void __launch_bounds__(NW * 32 + 32) gemvs_kernel(const GemvsArgs a)
{
    constexpr int MTOK = MT * 8, RS = MTOK + 1, ROWS = RB * 16, WR = (DUAL + 1) * ROWS;
    constexpr int NOUT = ROWS * MTOK;
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ int s_last;
    const uint32_t bar0 = smem_u32(sm); // full[s] at 8 s, empty[s] at 64 + 8 s
    float *red = (float *)(sm + 128);
    const uint32_t ring =
        smem_u32(sm) + 128 + (uint32_t)(((size_t)NW * ROWS * RS * 4 + 127) / 128 * 128);

    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const uint32_t G = gridDim.x, T = a.ngroups * a.nkc;
    const uint32_t u0 = (uint32_t)((uint64_t)blockIdx.x * T / G);
    const uint32_t u1 = (uint32_t)((uint64_t)(blockIdx.x + 1) * T / G);
    const uint32_t S = a.stages, pitch = a.pitch;
    if (threadIdx.x == 0) {
        for (uint32_t s = 0; s < S; s++) {
            mbar_init(bar0 + 8 * s, 1);
            mbar_init(bar0 + 64 + 8 * s, NW);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (u0 >= u1)
        return;
#ifdef PJ_GEMVS_TRACE
    if (threadIdx.x == 0) {
        TRMETA(0, gtimer());
        TRMETA(1, (unsigned long long)clock64());
        TRMETA(4, u1 - u0);
        TRMETA(5, S);
        TRMETA(6, blockIdx.x);
    }
#endif

    // TILED: weight block j of a slot at j * 32 kc, x rows after them.
    const uint32_t xbase = TILED ? (uint32_t)RB * 32 * a.kc : (uint32_t)WR * pitch;
    if (warp == NW) {
        // Producer: one slot per unit, refilled once its consumers let go.
        const uint32_t bytes = a.kc * 2;
        for (uint32_t i = 0; u0 + i < u1; i++) {
            const uint32_t s = i % S;
            if (lane == 0)
                TR(0, i);
            if (i >= S)
                mbar_wait(bar0 + 64 + 8 * s, ((i / S) & 1) ^ 1);
            const uint32_t u = u0 + i, grp = u / a.nkc;
            const size_t k0 = (size_t)(u % a.nkc) * a.kc;
            const uint32_t slot = ring + s * a.stage_bytes;
            if (lane == 0)
                mbar_expect_tx(bar0 + 8 * s, (WR + a.m) * bytes);
            __syncwarp();
            if constexpr (TILED) {
                const uint32_t ks32 = a.nkc * a.kc / 32, nblk = (a.N + 15) / 16;
                for (uint32_t r = (uint32_t)lane; r < RB + a.m; r += 32) {
                    if (r < (uint32_t)RB) {
                        // Blocks past the layer repeat its last: never stored.
                        const uint32_t b = min(grp * RB + r, nblk - 1);
                        bulk_g2s(slot + r * 32 * a.kc, a.wt + ((size_t)b * ks32 + k0 / 32) * 512,
                                 32 * a.kc, bar0 + 8 * s);
                    } else {
                        bulk_g2s(slot + xbase + (r - RB) * pitch,
                                 a.x + (size_t)(r - RB) * a.ldx + k0, bytes, bar0 + 8 * s);
                    }
                }
            } else {
                for (uint32_t r = (uint32_t)lane; r < WR + a.m; r += 32) {
                    const uint16_t *src;
                    if (r < (uint32_t)WR) {
                        // Rows past N copy row N - 1: their outputs are never stored.
                        const uint32_t row = min(grp * ROWS + r % ROWS, a.N - 1);
                        src =
                            (DUAL && r >= (uint32_t)ROWS ? a.w1 : a.w0) + (size_t)row * a.ldw + k0;
                    } else {
                        src = a.x + (size_t)(r - WR) * a.ldx + k0;
                    }
                    bulk_g2s(slot + r * pitch, src, bytes, bar0 + 8 * s);
                }
            }
#ifdef PJ_GEMVS_TRACE
            __syncwarp();
            if (lane == 0)
                TR(1, i);
#endif
        }
        return;
    }

    // Consumers.
    const int g = lane >> 2, t = lane & 3;
    const uint32_t kw = a.kc / NW; // k per warp per unit, a multiple of 32
    const uint32_t lane_off = (warp * kw + t * 8) * 2;
    uint32_t xrow[MT];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) // tokens past m read token m - 1 (never stored)
        xrow[mt] = xbase + min((uint32_t)(mt * 8 + g), a.m - 1) * pitch;
    // TILED: this warp's and lane's 16 bytes of k step 0, rows g (+ 512: g + 8).
    const uint32_t wt_off = (warp * kw / 32) * 1024 + lane * 16 - lane_off;

    float acc[RB][MT][4];
    auto zero = [&]() {
#pragma unroll
        for (int j = 0; j < RB; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                acc[j][mt][0] = acc[j][mt][1] = acc[j][mt][2] = acc[j][mt][3] = 0.f;
    };
    const uint32_t first_grp = u0 / a.nkc;
    auto flush = [&](uint32_t grp) {
        float *rw = red + warp * ROWS * RS;
#pragma unroll
        for (int j = 0; j < RB; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                rw[(j * 16 + g) * RS + mt * 8 + 2 * t] = acc[j][mt][0];
                rw[(j * 16 + g) * RS + mt * 8 + 2 * t + 1] = acc[j][mt][1];
                rw[(j * 16 + g + 8) * RS + mt * 8 + 2 * t] = acc[j][mt][2];
                rw[(j * 16 + g + 8) * RS + mt * 8 + 2 * t + 1] = acc[j][mt][3];
            }
        bar_consumers(NW * 32);
        const bool whole = grp * a.nkc >= u0 && (grp + 1) * a.nkc <= u1;
        const uint32_t tid = threadIdx.x;
        if (whole) {
            for (uint32_t idx = tid; idx < (uint32_t)NOUT; idx += NW * 32) {
                const uint32_t row = idx % ROWS, tok = idx / ROWS, grow = grp * ROWS + row;
                float s = 0.f;
#pragma unroll
                for (int w = 0; w < NW; w++)
                    s += red[w * ROWS * RS + row * RS + tok];
                if (grow < a.n && tok < a.m)
                    a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
            }
            bar_consumers(NW * 32); // red is rewritten by the next flush
            return;
        }
        const uint32_t myslot = grp == first_grp ? 0 : 1;
        float *mine = a.ws + ((size_t)blockIdx.x * 2 + myslot) * NOUT;
        for (uint32_t idx = tid; idx < (uint32_t)NOUT; idx += NW * 32) {
            const uint32_t row = idx % ROWS, tok = idx / ROWS;
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < NW; w++)
                s += red[w * ROWS * RS + row * RS + tok];
            mine[idx] = s;
        }
        __threadfence();
        bar_consumers(NW * 32);
        const uint32_t cf = owner_of(grp * a.nkc, T, G), cl = owner_of((grp + 1) * a.nkc - 1, T, G);
        if (tid == 0) {
            const unsigned prev = atomicAdd(a.cnt + grp, 1u);
            const int last = prev == cl - cf;
            if (last)
                a.cnt[grp] = 0; // nobody else touches it in this launch any more
            s_last = last;
        }
        bar_consumers(NW * 32);
        if (s_last) {
            __threadfence();
            for (uint32_t idx = tid; idx < (uint32_t)NOUT; idx += NW * 32) {
                const uint32_t row = idx % ROWS, tok = idx / ROWS, grow = grp * ROWS + row;
                if (grow >= a.n || tok >= a.m)
                    continue;
                float s = 0.f;
                for (uint32_t c = cf; c <= cl; c++) {
                    const uint32_t cfirst = (uint32_t)((uint64_t)c * T / G) / a.nkc;
                    const uint32_t sl = grp == cfirst ? 0 : 1;
                    s += ld_cg_f32(a.ws + ((size_t)c * 2 + sl) * NOUT + idx);
                }
                a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
            }
        }
        bar_consumers(NW * 32);
    };

    zero();
    uint32_t cur = first_grp;
    for (uint32_t i = 0; u0 + i < u1; i++) {
        const uint32_t s = i % S, grp = (u0 + i) / a.nkc;
        if (grp != cur) {
            flush(cur);
            zero();
            cur = grp;
        }
        mbar_wait(bar0 + 8 * s, (i / S) & 1);
        if (warp == 0 && lane == 0)
            TR(2, i);
        const uint32_t base = ring + s * a.stage_bytes + lane_off;
#pragma unroll 2
        for (uint32_t c = 0; c < kw / 32; c++) {
            const uint32_t off = base + c * 64;
            uint4 wa[RB], wb[RB], wc[DUAL ? RB : 1], wd[DUAL ? RB : 1], xv[MT];
#pragma unroll
            for (int j = 0; j < RB; j++) {
                if (TILED) {
                    const uint32_t wo = base + wt_off + c * 1024 + j * 32 * a.kc;
                    wa[j] = lds16(wo);
                    wb[j] = lds16(wo + 512);
                    continue;
                }
                wa[j] = lds16(off + (j * 16 + g) * pitch);
                wb[j] = lds16(off + (j * 16 + g + 8) * pitch);
                if (DUAL) {
                    wc[DUAL ? j : 0] = lds16(off + (ROWS + j * 16 + g) * pitch);
                    wd[DUAL ? j : 0] = lds16(off + (ROWS + j * 16 + g + 8) * pitch);
                }
            }
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
                xv[mt] = lds16(off + xrow[mt]);
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int j = 0; j < RB; j++) {
                    mma_bf16(acc[j][mt], wa[j].x, wb[j].x, wa[j].y, wb[j].y, xv[mt].x, xv[mt].y);
                    mma_bf16(acc[j][mt], wa[j].z, wb[j].z, wa[j].w, wb[j].w, xv[mt].z, xv[mt].w);
                    if (DUAL) {
                        const uint4 c0 = wc[DUAL ? j : 0], d0 = wd[DUAL ? j : 0];
                        mma_bf16(acc[j][mt], c0.x, d0.x, c0.y, d0.y, xv[mt].x, xv[mt].y);
                        mma_bf16(acc[j][mt], c0.z, d0.z, c0.w, d0.w, xv[mt].z, xv[mt].w);
                    }
                }
        }
        __syncwarp();
        if (lane == 0) {
            mbar_arrive(bar0 + 64 + 8 * s);
            if (warp == 0)
                TR(3, i);
            if (warp == NW - 1)
                TR(4, i);
        }
    }
    flush(cur);
#ifdef PJ_GEMVS_TRACE
    if (threadIdx.x == 0) {
        TRMETA(2, gtimer());
        TRMETA(3, (unsigned long long)clock64());
    }
#endif
}

// Print the last traced launch (PJ_GEMVS_TRACE builds): per traced CTA a
// header (units, slots, ns per cycle) and one line per unit with the five
// stamps in ns since the CTA's start. -ENOSYS in normal builds.
extern "C" int pj_gemvs_trace_dump(void)
{
#ifdef PJ_GEMVS_TRACE
    static unsigned long long tr[2][5][PJ_TR_UNITS], meta[2][8];
    if (cudaDeviceSynchronize() != cudaSuccess ||
        cudaMemcpyFromSymbol(tr, g_gemvs_tr, sizeof tr) != cudaSuccess ||
        cudaMemcpyFromSymbol(meta, g_gemvs_trmeta, sizeof meta) != cudaSuccess)
        return -EIO;
    for (int b = 0; b < 2; b++) {
        const double cyc = (double)(meta[b][3] - meta[b][1]);
        const double nspc = cyc > 0 ? (double)(meta[b][2] - meta[b][0]) / cyc : 0.0;
        const unsigned n = (unsigned)meta[b][4] < PJ_TR_UNITS ? (unsigned)meta[b][4] : PJ_TR_UNITS;
        printf("trace cta %llu units %llu slots %llu span %.0f ns (%.4f ns/cycle)\n", meta[b][6],
               meta[b][4], meta[b][5], (double)(meta[b][2] - meta[b][0]), nspc);
        printf("trace   i  ready  issued  full0  rel0  relL   (ns from CTA start)\n");
        for (unsigned i = 0; i < n; i++) {
            printf("trace %3u", i);
            for (int e = 0; e < 5; e++)
                printf(" %7.0f", (double)(long long)(tr[b][e][i] - meta[b][1]) * nspc);
            printf("\n");
        }
    }
    memset(tr, 0, sizeof tr);
    cudaMemcpyToSymbol(g_gemvs_tr, tr, sizeof tr);
    return 0;
#else
    return -ENOSYS;
#endif
}

size_t gemvs_smem(int dual, int nw, int mt, int rb, uint32_t m, uint32_t kc, uint32_t stages,
                  uint32_t *pitch, uint32_t *stage_bytes, int tiled)
{
    const uint32_t p = kc * 2 + 64;
    const uint32_t rows = (uint32_t)((dual + 1) * rb * 16) + m;
    const uint32_t sb =
        tiled ? ((uint32_t)rb * 32 * kc + m * p + 127) / 128 * 128 : (rows * p + 127) / 128 * 128;
    if (pitch)
        *pitch = p;
    if (stage_bytes)
        *stage_bytes = sb;
    const size_t red = ((size_t)nw * rb * 16 * (mt * 8 + 1) * 4 + 127) / 128 * 128;
    return 128 + red + (size_t)stages * sb;
}

template <int DUAL, int NW, int MT> static GemvsFn gemvs_pick_rb(int rb)
{
    switch (rb) {
    case 1:
        return &gemvs_kernel<NW, MT, DUAL, 1>;
    case 2:
        return &gemvs_kernel<NW, MT, DUAL, 2>;
    case 4:
        if constexpr (!DUAL)
            return &gemvs_kernel<NW, MT, DUAL, 4>;
        else
            return nullptr;
    }
    return nullptr;
}
template <int DUAL, int NW> static GemvsFn gemvs_pick_mt(int mt, int rb)
{
    switch (mt) {
    case 1:
        return gemvs_pick_rb<DUAL, NW, 1>(rb);
    case 2:
        return gemvs_pick_rb<DUAL, NW, 2>(rb);
    case 4:
        return gemvs_pick_rb<DUAL, NW, 4>(rb);
    }
    return nullptr;
}

GemvsFn gemvs_pick(int dual, int nw, int mt, int rb)
{
    if (dual)
        return nw == 4 ? gemvs_pick_mt<1, 4>(mt, rb)
                       : (nw == 8 ? gemvs_pick_mt<1, 8>(mt, rb) : nullptr);
    return nw == 4 ? gemvs_pick_mt<0, 4>(mt, rb)
                   : (nw == 8 ? gemvs_pick_mt<0, 8>(mt, rb) : nullptr);
}

// pipe = 3 (fragment-major weights): single matrix, m <= 8 only.
GemvsFn gemvs_pick_tiled(int nw, int rb)
{
    switch (nw * 8 + rb) {
    case 4 * 8 + 1:
        return &gemvs_kernel<4, 1, 0, 1, 1>;
    case 4 * 8 + 2:
        return &gemvs_kernel<4, 1, 0, 2, 1>;
    case 4 * 8 + 4:
        return &gemvs_kernel<4, 1, 0, 4, 1>;
    case 8 * 8 + 1:
        return &gemvs_kernel<8, 1, 0, 1, 1>;
    case 8 * 8 + 2:
        return &gemvs_kernel<8, 1, 0, 2, 1>;
    case 8 * 8 + 4:
        return &gemvs_kernel<8, 1, 0, 4, 1>;
    }
    return nullptr;
}
