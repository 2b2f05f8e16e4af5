// tgemm.cu — tiled GEMM with split-K for m > 32 (engines splitk and the
// router's split-K form).
//
// CTA tile: BM weight rows x BN tokens, K in 64-wide stages loaded with
// cp.async into a STAGES-deep ring (rows of 128 bytes, 16-byte chunks XOR-
// swizzled by row so ldmatrix reads are conflict-free). Warps WM x WN, each
// a (BM/WM) x (BN/WN) piece of m16n8k16 mma.sync; both operands are
// K-contiguous (W row-major, x row-major), so A and B fragments come from
// plain (non-transposed) ldmatrix.x4. DUAL adds a second weight tile (the
// router's lo) accumulated into the same registers.
//
// Epilogue: the accumulators go through shared memory as a [token][row]
// fp32 tile. ks == 1: converted and stored. ks > 1: added to the zeroed
// workspace with 16-byte red.add; the last CTA of the tile to arrive reads
// the sums, stores bf16 and writes zeros back, so the workspace is clean for
// the next launch. The atomic order varies between runs: not
// bit-deterministic. CL = 1: the ks CTAs of a tile form one thread-block
// cluster; each keeps its fp32 tile in shared memory and every rank sums a
// 1/ks slice of the outputs over the ks tiles in rank order through
// distributed shared memory: no workspace, no atomics, deterministic.
// MODE (knob pipe): 0 mma.sync; 1 the same with every copy asking L2 for
// the 256-byte block around it (a row's next K stage comes with this one);
// 2 the main loop in Hopper wgmma (kernels/wgmma.cuh): warpgroups of 64
// rows read both operands straight from the swizzled stages, no ldmatrix;
// 3 the same with one wgmma group left in flight across the barrier; 4 as
// 3 with the weight tiles copied by TMA (one thread per stage, completion on
// an mbarrier, the hardware writing the same 128-byte swizzle); 5 the z12
// form: the weight part of a stage holds the BM / 16 row blocks' z12 tiles
// (kernels/ZFORMAT.md) copied as they lie, each warp rebuilds its row
// block's A fragments in registers, puts the exceptions' own bf16 bits
// into them (the layer's by-tile exception table, ZFORMAT.md section 7) and
// feeds them to wgmma with x from the swizzled stage: the product is that
// of the bf16 weights, and nothing is left to correct after the sum.
#include <cooperative_groups.h>

#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"
#include "kernels/wgmma.cuh"
#include "kernels/z12dev.cuh"

namespace cg = cooperative_groups;

#define TG_BK 64
// z12 form, per row block of the CTA: exception entries of its K range
// copied to shared memory (more: read from global memory at use), and the
// most K steps whose tile offsets are copied (more: read at use). Both
// bounds are low enough that the test layers take both paths.
#define TG_ZCAP 64
#define TG_ZKT  16

// Tokens per warpgroup of the wgmma forms (BM / 64 warpgroups share the BN
// tokens of the tile).
static constexpr int tg_wt(int bm, int bn, int threads)
{
    return bn / (threads / 128 / (bm / 64 > 0 ? bm / 64 : 1));
}

// The z12 forms' exceptions (ZFORMAT.md section 7) for a CTA's NBK row
// blocks from rb0 over K tiles kt0 .. kt0 + nk: the range of row block j's
// entries is zt_ent[za[j] .. zb[j]) (plain loads at init); the tile
// offsets go to zo (nk <= TG_ZKT) and the entries to ze (at most TG_ZCAP
// per row block) by cp.async; larger ones are read at use.
template <int NBK> struct TgZExc {
    uint32_t za[NBK], zb[NBK];
    uint32_t *zo, *ze;
    uint32_t rb0, kt0, nk;

    static constexpr int smem_bytes = NBK * (TG_ZKT + 1 + TG_ZCAP) * 4;

    __device__ __forceinline__ uint32_t tile(const TgemmArgs &a, uint32_t j) const
    {
        return min(rb0 + j, a.nblk_all - 1) * a.kt_total + kt0;
    }
    __device__ __forceinline__ void init(const TgemmArgs &a, uint32_t rb0_, uint32_t kt0_,
                                         uint32_t nk_, unsigned char *smem)
    {
        rb0 = rb0_;
        kt0 = kt0_;
        nk = nk_;
        zo = (uint32_t *)smem;
        ze = zo + NBK * (TG_ZKT + 1);
#pragma unroll
        for (int j = 0; j < NBK; j++) {
            za[j] = a.zt_off[tile(a, j)];
            zb[j] = a.zt_off[tile(a, j) + nk];
        }
    }
    // Thread t of n: the tile offsets (no dependence on the loads above).
    __device__ __forceinline__ void stage_offsets(const TgemmArgs &a, uint32_t t, uint32_t n) const
    {
        if (nk <= TG_ZKT)
            for (uint32_t i = t; i < NBK * (nk + 1); i += n) {
                const uint32_t j = i / (nk + 1);
                cp_async4(smem_u32(zo + i), a.zt_off + tile(a, j) + (i - j * (nk + 1)));
            }
    }
    // The entries (waits on za / zb: issue after the other prologue copies).
    __device__ __forceinline__ void stage_entries(const TgemmArgs &a, uint32_t t, uint32_t n) const
    {
#pragma unroll
        for (int j = 0; j < NBK; j++)
            if (zb[j] - za[j] <= TG_ZCAP)
                for (uint32_t i = t; i < zb[j] - za[j]; i += n)
                    cp_async4(smem_u32(ze + j * TG_ZCAP + i), a.zt_ent + za[j] + i);
    }
    // Row block jw's exceptions of K step kstep into the A fragments af
    // just decoded by this warp (warp-uniform loop, usually empty): the
    // owning lane replaces one bf16 half (ZFORMAT.md section 2's inverse
    // map); 16 compares with constant indices keep af in registers.
    __device__ __forceinline__ void patch(const TgemmArgs &a, uint32_t (&af)[4][4], int jw,
                                          uint32_t kstep, uint32_t lane) const
    {
        uint32_t zaw = 0, zbw = 0, e0, e1;
#pragma unroll
        for (int j = 0; j < NBK; j++)
            if (j == jw) {
                zaw = za[j];
                zbw = zb[j];
            }
        if (nk <= TG_ZKT) {
            e0 = zo[jw * (nk + 1) + kstep];
            e1 = zo[jw * (nk + 1) + kstep + 1];
        } else {
            e0 = a.zt_off[tile(a, jw) + kstep];
            e1 = a.zt_off[tile(a, jw) + kstep + 1];
        }
        const bool staged = zbw - zaw <= TG_ZCAP;
        for (uint32_t e = e0; e < e1; e++) {
            const uint32_t ent = staged ? ze[jw * TG_ZCAP + (e - zaw)] : a.zt_ent[e];
            const uint32_t rr = ent >> 22, cc = (ent >> 16) & 63, q = cc & 15;
            const uint32_t jj = (q >> 3) << 2 | (rr >> 3) << 1 | (q & 1);
            const uint32_t fi =
                lane == 4 * (rr & 7) + ((q & 7) >> 1) ? (cc >> 4) * 4 + (jj >> 1) : 16u;
            const uint32_t sh = (jj & 1) * 16, keep = ~(0xffffu << sh), val = (ent & 0xffffu) << sh;
#pragma unroll
            for (int i = 0; i < 16; i++)
                af[i >> 2][i & 3] =
                    fi == (uint32_t)i ? (af[i >> 2][i & 3] & keep) | val : af[i >> 2][i & 3];
        }
    }
};

template <int BM, int BN, int WM, int WN, int STAGES, int DUAL, int Z = 0> struct TgCfg {
    static constexpr int threads = WM * WN * 32;
    static constexpr int MI = BM / WM / 16;
    static constexpr int NI = BN / WN / 8;
    // The weight part of a stage: bf16 rows (two matrices with DUAL) or the
    // z12 tiles of BM / 16 row blocks (Z); x follows.
    static constexpr int w_bytes = Z ? BM / 16 * PJ_Z12_TILE_BYTES : BM * (1 + DUAL) * TG_BK * 2;
    static constexpr int stage_bytes = w_bytes + BN * TG_BK * 2;
    static constexpr int pipe_bytes = STAGES * stage_bytes;
    static constexpr int epi_ld = BM + 4; // floats per token row of the epilogue tile
    static constexpr int epi_bytes = BN * epi_ld * 4;
    static constexpr int smem = pipe_bytes > epi_bytes ? pipe_bytes : epi_bytes;
    // Z: the CTA's tile offsets and exception entries, after the ring /
    // epilogue tile.
    static constexpr int zt_bytes = Z ? TgZExc<BM / 16>::smem_bytes : 0;
    static_assert(NI % 2 == 0, "B fragments are loaded two n8 tiles at a time");
    static_assert(w_bytes % 1024 == 0, "wgmma stages stay 1024-aligned");
};

__device__ __forceinline__ void red_add_v4(float *p, float a, float b, float c, float d)
{
    asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(p), "f"(a), "f"(b), "f"(c),
                 "f"(d)
                 : "memory");
}

// One m16n8 accumulator quad (v0, v1: row r, tokens tk, tk + 1; v2, v3:
// row r + 8) into the [token][row] fp32 tile ep of row stride ld.
__device__ __forceinline__ void tg_ep_quad(float *ep, int ld, int r, int tk, float v0, float v1,
                                           float v2, float v3)
{
    ep[tk * ld + r] = v0;
    ep[(tk + 1) * ld + r] = v1;
    ep[tk * ld + r + 8] = v2;
    ep[(tk + 1) * ld + r + 8] = v3;
}

// A warp's share of a warpgroup's m64nWT accumulators (wgmma.cuh's layout:
// d[4 j ..] = the quad of tokens tk0 + 8 j + 2 t, rows r and r + 8).
template <int WT, int LD>
__device__ __forceinline__ void tg_ep_wg(float *ep, const float *d, int r, int tk0, int t)
{
#pragma unroll
    for (int j = 0; j < WT / 8; j++)
        tg_ep_quad(ep, LD, r, tk0 + j * 8 + 2 * t, d[4 * j], d[4 * j + 1], d[4 * j + 2],
                   d[4 * j + 3]);
}

// The CL forms' landing area for the other ranks' partials (pjdev.cuh's
// push): BM x BN floats as float4 groups, plus up to ks - 1 <= 15 groups of
// the last piece's rounding. It lies past everything else the kernel uses,
// so a rank may push while its neighbours are still in their main loops.
static __host__ __device__ constexpr size_t tg_recv_bytes(int bm, int bn)
{
    return (size_t)bm * bn * 4 + 16 * 16;
}

// The epilogue of both tiled kernels: ep = the CTA's fp32 [token][row]
// tile (row stride EPI_LD), complete in shared memory (the caller's
// barrier). ks == 1: converted and stored; ks > 1: summed over the ks CTAs
// of the tile in rank order, pushed through distributed shared memory to
// the rank that owns each output (CL; recv = tg_recv_bytes), or by red.add
// into the workspace, the last CTA storing and re-zeroing.
template <int BM, int BN, int THREADS, int EPI_LD, int CL>
__device__ __forceinline__ void tg_epilogue(const TgemmArgs &a, const float *ep, float4 *recv,
                                            uint32_t tok0, uint32_t row0, int tid, int *s_last)
{
    constexpr int R4 = BM / 4; // 4-row groups per token row
    const bool vec_y = ((a.ldy & 3) == 0) && ((((uintptr_t)a.y) & 7) == 0);
    auto store_y = [&](uint32_t tk, uint32_t r, float v0, float v1, float v2, float v3) {
        uint16_t *yp = a.y + (size_t)tk * a.ldy + r;
        if (vec_y && r + 4 <= a.n) {
            uint2 pk;
            pk.x = (uint32_t)f2bf(v0) | ((uint32_t)f2bf(v1) << 16);
            pk.y = (uint32_t)f2bf(v2) | ((uint32_t)f2bf(v3) << 16);
            *(uint2 *)yp = pk;
        } else {
            const float v[4] = {v0, v1, v2, v3};
            for (int i = 0; i < 4 && r + i < a.n; i++)
                yp[i] = f2bf(v[i]);
        }
    };

    // Every 4-row output group of the tile that lies inside y, from c0 in
    // steps of step: f(token in tile, row in tile, token, row).
    auto each_out = [&](int c0, int step, auto &&f) {
        for (int c = c0; c < BN * R4; c += step) {
            const int tl = c / R4, rl = (c % R4) * 4;
            const uint32_t tk = tok0 + tl, r = row0 + rl;
            if (tk < a.m && r < a.n)
                f(tl, rl, tk, r);
        }
    };

    if (a.ks == 1) {
        each_out(tid, THREADS, [&](int tl, int rl, uint32_t tk, uint32_t r) {
            const float4 v = *(const float4 *)(ep + tl * EPI_LD + rl);
            store_y(tk, r, v.x, v.y, v.z, v.w);
        });
        return;
    }
    if constexpr (CL) {
        // Cluster dims 1 x 1 x ks: the rank is the split. Every 4-row group
        // of the tile (inside y or not: the owner skips those outside) is
        // pushed to its owner, which sums the ks partials in rank order.
        cl_reduce(
            recv, (uint32_t)(BN * R4), a.ks, cg::this_cluster().block_rank(), (uint32_t)tid,
            (uint32_t)THREADS,
            [&](uint32_t c) { return *(const float4 *)(ep + (c / R4) * EPI_LD + (c % R4) * 4); },
            [&](uint32_t c, float4 s) {
                const uint32_t tk = tok0 + c / R4, r = row0 + (c % R4) * 4;
                if (tk < a.m && r < a.n)
                    store_y(tk, r, s.x, s.y, s.z, s.w);
            });
    } else {
        each_out(tid, THREADS, [&](int tl, int rl, uint32_t tk, uint32_t r) {
            const float4 v = *(const float4 *)(ep + tl * EPI_LD + rl);
            red_add_v4(a.acc + (size_t)tk * a.acc_ld + r, v.x, v.y, v.z, v.w);
        });
        if (!splitk_arrive_last(a.cnt + blockIdx.y * gridDim.x + blockIdx.x, a.ks, s_last))
            return;
        each_out(tid, THREADS, [&](int, int, uint32_t tk, uint32_t r) {
            float4 *p = (float4 *)(a.acc + (size_t)tk * a.acc_ld + r);
            const float4 v = __ldcg(p);
            store_y(tk, r, v.x, v.y, v.z, v.w);
            __stcg(p, make_float4(0.f, 0.f, 0.f, 0.f));
        });
    }
}

// One 64-wide K step of a warpgroup over shared-memory stages: m64nWTk16
// per 16-wide slice, A = its 64 weight rows (the second matrix BM rows on
// with DUAL), B = the tokens, from their descriptors da, db (slot 0's moved
// by the slot's offset): a 16-wide K slice is 32 bytes on, 2 in the
// descriptor's address field (address / 16); the second matrix BM rows of
// 128 bytes on. The caller commits the group.
template <int WT, int BM, int DUAL>
__device__ __forceinline__ void tg_wg_step_desc(float *d, uint64_t da, uint64_t db)
{
    wg_fence();
#pragma unroll
    for (int kk = 0; kk < TG_BK / 16; kk++)
#pragma unroll
        for (int mat = 0; mat < 1 + DUAL; mat++)
            Wgmma<WT>::run(d, da + mat * (BM * 128 / 16) + kk * 2, db + kk * 2);
}

template <int BM, int BN, int WM, int WN, int STAGES, int DUAL, int CL, int MODE>
__global__ void __launch_bounds__(WM *WN * 32) tgemm_kernel(const __grid_constant__ TgemmArgs a)
{
    constexpr bool Z = MODE == 5;
    using C = TgCfg<BM, BN, WM, WN, STAGES, DUAL, Z>;
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int wm = warp / WN, wn = warp % WN;
    const uint32_t tok0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    const size_t kbeg = (size_t)blockIdx.z * a.kc;
    const int nk = (int)(a.kc / TG_BK);
    if constexpr (CL)
        cl_started(); // this CTA's landing area may take the others' partials
    // MODE 4: one mbarrier per stage counts the weight bytes TMA delivers.
    constexpr bool TMA = MODE == 4;
    __shared__ __align__(8) uint64_t s_bar[TMA ? STAGES : 1];
    if constexpr (TMA) {
        if (tid == 0) {
            for (int s = 0; s < STAGES; s++)
                mbar_init(smem_u32(&s_bar[s]), 1);
            asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        }
        __syncthreads();
    }

    // Copy assignments, fixed for the whole launch: chunk i of this thread
    // is row tid / 8 + i * RSTEP of a tile, 16-byte piece tid % 8 of it.
    // RSTEP is a multiple of 8, so all of a thread's chunks share row % 8
    // and with it the swizzled piece: their shared-memory offsets are
    // dst0 + i * RSTEP * 128. Rows past the matrix repeat its last row
    // (their results are never stored). Element offsets fit 32 bits (the
    // engine check refuses larger operands).
    constexpr int RSTEP = C::threads / 8, CA = BM / RSTEP, CB = BN / RSTEP;
    static_assert(RSTEP % 8 == 0 && BM % RSTEP == 0 && BN % RSTEP == 0, "copy layout");
    const int crow = tid >> 3, cpiece = tid & 7;
    const uint32_t dst0 = crow * 128 + ((cpiece ^ (crow & 7)) << 4);
    uint32_t aoff[CA], boff[CB];
#pragma unroll
    for (int i = 0; i < CA; i++)
        aoff[i] =
            min(row0 + crow + i * RSTEP, a.N - 1) * (uint32_t)a.ldw + (uint32_t)kbeg + cpiece * 8;
#pragma unroll
    for (int i = 0; i < CB; i++)
        boff[i] =
            min(tok0 + crow + i * RSTEP, a.m - 1) * (uint32_t)a.ldx + (uint32_t)kbeg + cpiece * 8;
    // wgmma reads the swizzle from address bits: its stages start 1024-aligned.
    const uint32_t sm0 = MODE >= 2 ? (smem_u32(sm) + 1023u) & ~1023u : smem_u32(sm);
    unsigned char *const smb = sm + (sm0 - smem_u32(sm));

    // Z: chunk i of this thread is 16-byte piece tid + i * threads of the
    // stage's z12 part (row block j = piece / ZPT of the tile, bytes as they
    // lie in the tile); zoff = its offset in a.z.tiles at the split's first
    // K tile (the engine check keeps the tiles under 2^32 bytes). Row blocks
    // past the matrix repeat its last (their results are never stored).
    constexpr int NBK = BM / 16, ZPT = PJ_Z12_TILE_BYTES / 16, ZCH = NBK * ZPT;
    constexpr int CZ = Z ? (ZCH + C::threads - 1) / C::threads : 1;
    uint32_t zoff[CZ];
    const uint32_t kt0 = (uint32_t)(kbeg / TG_BK), rb0 = row0 / 16;
    TgZExc<Z ? NBK : 1> zx;
    if constexpr (Z) {
        zx.init(a, rb0, kt0, nk, smb + C::smem);
#pragma unroll
        for (int i = 0; i < CZ; i++) {
            const uint32_t c = tid + i * C::threads;
            zoff[i] = zx.tile(a, c / ZPT) * PJ_Z12_TILE_BYTES + (c % ZPT) * 16;
        }
    }
    auto copy16 = [](uint32_t sa, const void *g) {
        if constexpr (MODE == 1)
            cp_async16_l2pf(sa, g);
        else
            cp_async16(sa, g);
    };
    auto load_stage = [&](int slot, int ks_) {
        const uint32_t st = sm0 + slot * C::stage_bytes + dst0;
        const uint32_t k = ks_ * TG_BK;
        if constexpr (Z) {
#pragma unroll
            for (int i = 0; i < CZ; i++)
                if (CZ * C::threads == ZCH || tid + i * C::threads < ZCH)
                    cp_async16(sm0 + slot * C::stage_bytes + (tid + i * C::threads) * 16,
                               a.z.tiles + zoff[i] + ks_ * PJ_Z12_TILE_BYTES);
        } else if constexpr (TMA) {
            // One thread asks for the weight tiles; rows past the matrix
            // arrive as zeros (their results are never stored).
            if (tid == 0) {
                const uint32_t bar = smem_u32(&s_bar[slot]);
                mbar_expect_tx(bar, (1 + DUAL) * BM * 128);
#pragma unroll
                for (int mat = 0; mat < 1 + DUAL; mat++)
                    tma_load_2d(sm0 + slot * C::stage_bytes + mat * BM * 128, &a.tw[mat],
                                (int)(kbeg + k), (int)row0, bar);
            }
        } else {
#pragma unroll
            for (int mat = 0; mat < 1 + DUAL; mat++) {
                const uint16_t *w = (mat ? a.w1 : a.w0) + k;
#pragma unroll
                for (int i = 0; i < CA; i++)
                    copy16(st + mat * BM * 128 + i * RSTEP * 128, w + aoff[i]);
            }
        }
        const uint16_t *x = a.x + k;
#pragma unroll
        for (int i = 0; i < CB; i++)
            copy16(st + C::w_bytes + i * RSTEP * 128, x + boff[i]);
    };

    // Stages copied ahead of the one being read: all but one of the ring,
    // two fewer with MODE 3, 4 (one wgmma group stays in flight and still
    // reads the stage before).
    constexpr bool INFLIGHT = MODE == 3 || MODE == 4;
    constexpr int AHEAD = INFLIGHT ? STAGES - 2 : STAGES - 1;
#pragma unroll
    for (int s = 0; s < AHEAD; s++) {
        if (s < nk)
            load_stage(s, s);
        if (Z && s == 0)
            zx.stage_offsets(a, tid, C::threads);
        if (Z && s == AHEAD - 1)
            zx.stage_entries(a, tid, C::threads); // the first K step waits for all groups
        cp_async_commit();
    }
    float *ep = (float *)smb; // the [token][row] fp32 tile, after the main loop

    if constexpr (MODE >= 2) {
        // Warpgroups WGM x WGN, each 64 rows x WT tokens, one m64nWTk16 per
        // 16-wide K slice (two with DUAL), issued by the whole warpgroup.
        constexpr int NWG = C::threads / 128, WGM = BM / 64, WGN = NWG / WGM, WT = BN / WGN;
        static_assert(WGM * WGN == NWG && WT % 8 == 0, "warpgroup layout");
        const int wg = tid >> 7, wgm = wg % WGM, wgn = wg / WGM;
        float d[WT / 2];
#pragma unroll
        for (int i = 0; i < WT / 2; i++)
            d[i] = 0.f;
        // The slot read, its phase (TMA) and the slot refilled as counters,
        // and slot 0's descriptors moved by the slot's offset: no division
        // by the ring depth and no descriptor rebuilt per step (round 34).
        const uint64_t da0 = wg_desc_sw128(sm0 + wgm * 64 * 128),
                       db0 = wg_desc_sw128(sm0 + C::w_bytes + wgn * WT * 128);
        uint32_t slot = 0, ph = 0, fill = AHEAD % STAGES;
#pragma unroll 1
        for (int kstep = 0; kstep < nk; kstep++) {
            if (Z && kstep == 0)
                cp_async_wait<0>(); // the exception entries came with the last group
            else
                cp_async_wait<AHEAD - 1>();
            if constexpr (TMA)
                mbar_wait(smem_u32(&s_bar[0]) + slot * 8, ph);
            fence_proxy_async_smem(); // this thread's copies, visible to wgmma
            __syncthreads();
            {
                // The slot refilled here was last read by wgmma groups that
                // every warpgroup waited for before this barrier (the
                // previous step's with MODE 2 and 5, the one before with
                // MODE 3 and 4).
                const int nxt = kstep + AHEAD;
                if (nxt < nk)
                    load_stage((int)fill, nxt);
                cp_async_commit();
                fill = fill + 1 == STAGES ? 0 : fill + 1;
            }
            uint32_t af[4][4]; // Z: this step's A fragments
            if constexpr (Z) {
                // This warp's row block: warp w4 of warpgroup wgm owns rows
                // 64 wgm + 16 w4 .. + 15, its tile's three planes at lane * 16.
                const uint32_t zp = sm0 + slot * C::stage_bytes +
                                    (wgm * 4 + ((tid & 127) >> 5)) * PJ_Z12_TILE_BYTES + lane * 16;
                uint4 p[3];
#pragma unroll
                for (int q = 0; q < 3; q++)
                    p[q] = lds128(zp + q * PJ_Z12_PLANE_BYTES);
                z12_afrag(af, p, a.z.base * 0x01010101u);
                zx.patch(a, af, wgm * 4 + ((tid & 127) >> 5), kstep, lane);
                wg_fence();
                const uint32_t sb = sm0 + slot * C::stage_bytes + C::w_bytes + wgn * WT * 128;
#pragma unroll
                for (int kk = 0; kk < TG_BK / 16; kk++)
                    WgmmaRA<WT>::run(d, af[kk], wg_desc_sw128(sb + kk * 32));
            } else {
                const uint64_t off = slot * (uint32_t)(C::stage_bytes / 16);
                tg_wg_step_desc<WT, BM, DUAL>(d, da0 + off, db0 + off);
            }
            wg_commit();
            // Z: af is read by the hardware after issue and is rebuilt next
            // step, so nothing stays in flight.
            wg_wait<INFLIGHT ? 1 : 0>();
            if constexpr (Z)
#pragma unroll
                for (int i = 0; i < 16; i++)
                    wg_keep(af[i / 4][i % 4]);
            if (++slot == STAGES)
                slot = 0, ph ^= 1;
        }
        wg_wait<0>();
        cp_async_wait<0>();
        __syncthreads();
        tg_ep_wg<WT, C::epi_ld>(ep, d, wgm * 64 + ((tid & 127) >> 5) * 16 + (lane >> 2), wgn * WT,
                                lane & 3);
    } else {
        float acc[C::MI][C::NI][4];
#pragma unroll
        for (int i = 0; i < C::MI; i++)
#pragma unroll
            for (int j = 0; j < C::NI; j++)
                acc[i][j][0] = acc[i][j][1] = acc[i][j][2] = acc[i][j][3] = 0.f;

        // ldmatrix lanes: A rows wrow + mi * 16 + lane % 16, piece kk * 2 + lane
        // / 16; B rows wtok + nj * 16 + lane % 8 + (lane / 16) * 8, piece kk * 2
        // + (lane / 8) % 2. Every such row is lane % 8 modulo 8, so the swizzled
        // piece is (kk * 2) ^ (lane's low piece bit ^ lane % 8): one XOR per kk,
        // and the mi / nj steps are immediate offsets.
        const int wrow = wm * (BM / WM), wtok = wn * (BN / WN), l7 = lane & 7;
        const uint32_t a_lane = (wrow + (lane & 15)) * 128,
                       b_lane = (wtok + l7 + ((lane >> 4) << 3)) * 128;
        const int a_x = (lane >> 4) ^ l7, b_x = ((lane >> 3) & 1) ^ l7;
#pragma unroll 1
        for (int kstep = 0; kstep < nk; kstep++) {
            cp_async_wait<STAGES - 2>();
            __syncthreads();
            {
                const int nxt = kstep + STAGES - 1;
                if (nxt < nk)
                    load_stage(nxt % STAGES, nxt);
                cp_async_commit();
            }
            const uint32_t sa = sm0 + (kstep % STAGES) * C::stage_bytes;
            const uint32_t sb = sa + (1 + DUAL) * BM * 128;
#pragma unroll
            for (int kk = 0; kk < TG_BK / 16; kk++) {
                uint32_t bf[C::NI][2];
                const uint32_t pb = sb + b_lane + (((kk << 1) ^ b_x) << 4);
#pragma unroll
                for (int nj = 0; nj < C::NI / 2; nj++) {
                    uint32_t r4[4];
                    ldmatrix_x4(r4, pb + nj * 16 * 128);
                    bf[2 * nj][0] = r4[0];
                    bf[2 * nj][1] = r4[1];
                    bf[2 * nj + 1][0] = r4[2];
                    bf[2 * nj + 1][1] = r4[3];
                }
                const uint32_t pa = sa + a_lane + (((kk << 1) ^ a_x) << 4);
#pragma unroll
                for (int mat = 0; mat < 1 + DUAL; mat++) {
#pragma unroll
                    for (int mi = 0; mi < C::MI; mi++) {
                        uint32_t af[4];
                        ldmatrix_x4(af, pa + mat * BM * 128 + mi * 16 * 128);
#pragma unroll
                        for (int ni = 0; ni < C::NI; ni++)
                            mma_bf16(acc[mi][ni], af[0], af[1], af[2], af[3], bf[ni][0], bf[ni][1]);
                    }
                }
            }
        }
        cp_async_wait<0>();
        __syncthreads();

        // Accumulators -> [token][row] tile in shared memory.
        {
            const int g = lane >> 2, t = lane & 3;
#pragma unroll
            for (int mi = 0; mi < C::MI; mi++)
#pragma unroll
                for (int ni = 0; ni < C::NI; ni++) {
                    tg_ep_quad(ep, C::epi_ld, wrow + mi * 16 + g, wtok + ni * 8 + 2 * t,
                               acc[mi][ni][0], acc[mi][ni][1], acc[mi][ni][2], acc[mi][ni][3]);
                }
        }
    } // MODE != 2
    __syncthreads();

    tg_epilogue<BM, BN, C::threads, C::epi_ld, CL>(
        a, ep, (float4 *)(smb + al16(C::smem + C::zt_bytes)), tok0, row0, tid, &s_last);
}

// The z12 tiled GEMM, warp-specialised (MODE 6, knob pipe = 6): 64 weight
// rows x BN tokens, 256 threads. Warpgroup 0 produces: warp p copies row
// block p's z12 tile of each K step (and, with the others, the step's x)
// D = S - 2 steps ahead into a ring of S slots, rebuilds the A fragments
// from its own copies, puts the exceptions' bits in, and writes the bf16
// tile into the slot in the 128-byte-swizzled K-major layout. Warpgroup 1
// consumes: shared-memory wgmma over each slot, one group in flight. Named
// barriers: full[s] (1 + s) when a slot is ready, empty[s] (1 + S + s)
// when the consumers are done with it. The copies no longer wait for the
// consumers' step, and the decode of step k overlaps the wgmma of k - 1.
// Its shared-memory layout, for the kernel and for the launch: a slot holds
// the four raw z12 tiles, the decoded bf16 weight tile and the x tile; the
// epilogue tile overlays the ring; the staged exceptions follow; alloc adds
// the 1024-byte alignment slack.
template <int BN, int S> struct TgZwsCfg {
    static constexpr int BM = 64, NBK = 4, THREADS = 256, EPI_LD = BM + 4;
    static constexpr int RAW = NBK * PJ_Z12_TILE_BYTES, WB = BM * 128, SLOT = RAW + WB + BN * 128;
    static constexpr int RING = S * SLOT, EPI = BN * EPI_LD * 4, SMEM = RING > EPI ? RING : EPI;
    static constexpr size_t alloc = (size_t)SMEM + TgZExc<NBK>::smem_bytes + 1024;
};

template <int BN, int S, int CL>
__global__ void __launch_bounds__(256) tgemm_zws_kernel(const __grid_constant__ TgemmArgs a)
{
    using C = TgZwsCfg<BN, S>;
    constexpr int BM = C::BM, NBK = C::NBK, THREADS = C::THREADS, EPI_LD = C::EPI_LD, D = S - 2;
    constexpr int RAW = C::RAW, WB = C::WB, SLOT = C::SLOT, SMEM = C::SMEM;
    constexpr int CX = (BN * 8 + 127) / 128; // x chunks per producer thread
    static_assert(S >= 3 && 2 * S + 1 < 15 && SLOT % 1024 == 0, "ring");
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t tok0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    const size_t kbeg = (size_t)blockIdx.z * a.kc;
    const int nk = (int)(a.kc / TG_BK);
    if constexpr (CL)
        cl_started(); // this CTA's landing area may take the others' partials
    const uint32_t sm0 = (smem_u32(sm) + 1023u) & ~1023u;
    unsigned char *const smb = sm + (sm0 - smem_u32(sm));
    const uint32_t kt0 = (uint32_t)(kbeg / TG_BK), rb0 = row0 / 16;
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.f;

    if (warp < 4) {
        const int p = warp;
        TgZExc<NBK> zx;
        zx.init(a, rb0, kt0, nk, smb + SMEM);
        const uint8_t *zsrc = a.z.tiles + (size_t)zx.tile(a, p) * PJ_Z12_TILE_BYTES + lane * 16;
        // x chunk c = tid + 128 i: token row c / 8 of the tile, piece c % 8,
        // swizzled by row; rows past m repeat the last.
        uint32_t xoff[CX], xdst[CX];
#pragma unroll
        for (int i = 0; i < CX; i++) {
            const uint32_t c = tid + 128 * i, r = c >> 3, pc = c & 7;
            xoff[i] = min(tok0 + r, a.m - 1) * (uint32_t)a.ldx + (uint32_t)kbeg + pc * 8;
            xdst[i] = RAW + WB + r * 128 + ((pc ^ (r & 7)) << 4);
        }
        auto issue = [&](int k) {
            const uint32_t slot = sm0 + (k % S) * SLOT + p * PJ_Z12_TILE_BYTES + lane * 16;
#pragma unroll
            for (int q = 0; q < 3; q++)
                cp_async16(slot + q * PJ_Z12_PLANE_BYTES,
                           zsrc + (size_t)k * PJ_Z12_TILE_BYTES + q * PJ_Z12_PLANE_BYTES);
#pragma unroll
            for (int i = 0; i < CX; i++)
                if (CX * 128 == BN * 8 || tid + 128 * i < BN * 8)
                    cp_async16(sm0 + (k % S) * SLOT + xdst[i], a.x + xoff[i] + (size_t)k * TG_BK);
        };
#pragma unroll
        for (int k = 0; k < D; k++) {
            if (k < nk)
                issue(k);
            if (k == 0)
                zx.stage_offsets(a, tid, 128);
            if (k == D - 1)
                zx.stage_entries(a, tid, 128);
            cp_async_commit();
        }
        const uint32_t g = lane >> 2, t = lane & 3;
#pragma unroll 1
        for (int k = 0; k < nk; k++) {
            const int i = k + D;
            if (i < nk) {
                if (i >= S)
                    nbar_sync(1 + S + i % S, THREADS); // the consumers are done with step i - S
                issue(i);
            }
            cp_async_commit();
            if (k == 0) {
                cp_async_wait<0>();
                nbar_sync(15, 128); // the staged exceptions, copied by all producers
            } else {
                cp_async_wait<D>();
            }
            const uint32_t slot = sm0 + (k % S) * SLOT;
            uint4 pp[3];
#pragma unroll
            for (int q = 0; q < 3; q++)
                pp[q] = lds128(slot + p * PJ_Z12_TILE_BYTES + q * PJ_Z12_PLANE_BYTES + lane * 16);
            uint32_t af[4][4];
            z12_afrag(af, pp, a.z.base * 0x01010101u);
            zx.patch(a, af, p, (uint32_t)k, lane);
            // af[s][r]: row g (+ 8 for r odd), k 16 s + 2 t (+ 8 for r >= 2).
#pragma unroll
            for (int s = 0; s < 4; s++)
#pragma unroll
                for (int r = 0; r < 4; r++) {
                    const uint32_t row = 16 * p + g + 8 * (r & 1), chunk = 2 * s + (r >> 1);
                    sts32(slot + RAW + row * 128 + ((chunk ^ (row & 7)) << 4) + 4 * t, af[s][r]);
                }
            fence_proxy_async_smem(); // the tile and this thread's x copies, visible to wgmma
            nbar_arrive(1 + k % S, THREADS);
        }
    } else {
#pragma unroll 1
        for (int k = 0; k < nk; k++) {
            nbar_sync(1 + k % S, THREADS);
            const uint32_t slot = sm0 + (k % S) * SLOT;
            wg_fence();
#pragma unroll
            for (int kk = 0; kk < TG_BK / 16; kk++)
                Wgmma<BN>::run(d, wg_desc_sw128(slot + RAW + kk * 32),
                               wg_desc_sw128(slot + RAW + WB + kk * 32));
            wg_commit();
            wg_wait<1>();
            // Step k - 1's group is done: free its slot where the producers
            // will wait for it (they refill slots only up to step nk - 1).
            if (k >= 1 && k - 1 < nk - S)
                nbar_arrive(1 + S + (k - 1) % S, THREADS);
        }
        wg_wait<0>();
    }
    __syncthreads(); // the ring is no longer read: the epilogue tile may overlay it
    float *ep = (float *)smb;
    if (warp >= 4)
        tg_ep_wg<BN, EPI_LD>(ep, d, (warp - 4) * 16 + (lane >> 2), 0, lane & 3);
    __syncthreads();
    tg_epilogue<BM, BN, THREADS, EPI_LD, CL>(
        a, ep, (float4 *)(smb + al16(SMEM + TgZExc<C::NBK>::smem_bytes)), tok0, row0, tid, &s_last);
}

// The warp-specialised bf16 tiled GEMM (MODE 7, knob pipe = 7): BM / 64
// consumer warpgroups (64 weight rows x BN tokens each) and one producer
// warp, the last, of which one lane asks TMA for every K step's weight
// tile(s) and x tile into a ring of S slots; a slot's full mbarrier counts
// the bytes in, its empty mbarrier the consumer warps that are done with
// it. The consumers never copy and never meet at a CTA barrier inside the
// main loop: each runs one wgmma group per step, keeps one in flight, and
// frees the slot of the step before once its wait says that group is done.
// The ring is as deep as the budget allows (at most 8 slots): about the
// whole shared memory for one CTA per SM, or half of it (two per SM) for
// the tiles whose table ring depth is 6; the cluster form's landing area
// comes out of it. The epilogue tile overlays the ring. The consumers keep
// the slot and its phase as counters and move slot 0's descriptors by the
// slot's offset: no division by the ring depth and no descriptor rebuilt
// from an address per step (round 33: 3-13 % faster than with both, most
// on the two-warpgroup tiles).
template <int BM, int BN, int ST, int DUAL, int CL> struct TgWsCfg {
    static constexpr int NWG = BM / 64, THREADS = NWG * 128 + 32;
    static constexpr int WB = BM * 128 * (1 + DUAL), STAGE = WB + BN * 128;
    static constexpr int EPI_LD = BM + 4, EPI = BN * EPI_LD * 4;
    static constexpr int RECV = CL ? (int)tg_recv_bytes(BM, BN) : 0;
    static constexpr int BUDGET = (ST == 6 ? 110 : 224) * 1024 - RECV;
    static constexpr int S = BUDGET / STAGE > 8 ? 8 : BUDGET / STAGE;
    static constexpr int RING = S * STAGE, SMEM = RING > EPI ? RING : EPI;
    static constexpr size_t alloc = (size_t)SMEM + 1024; // + the 1024-byte alignment slack
    static constexpr bool ok = S >= 2 && BM % 64 == 0 && STAGE % 1024 == 0;
};

template <int BM, int BN, int ST, int DUAL, int CL>
__global__ void __launch_bounds__(TgWsCfg<BM, BN, ST, DUAL, CL>::THREADS, 1)
    tgemm_ws_kernel(const __grid_constant__ TgemmArgs a)
{
    using C = TgWsCfg<BM, BN, ST, DUAL, CL>;
    constexpr int S = C::S, NWG = C::NWG, STAGE = C::STAGE;
    static_assert(C::ok, "ring");
    extern __shared__ __align__(128) unsigned char sm[];
    __shared__ __align__(8) uint64_t s_full[S], s_empty[S];
    __shared__ int s_last;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const uint32_t tok0 = blockIdx.x * BN, row0 = blockIdx.y * BM;
    const int kbeg = (int)(blockIdx.z * a.kc), nk = (int)(a.kc / TG_BK);
    if constexpr (CL)
        cl_started(); // this CTA's landing area may take the others' partials
    const uint32_t sm0 = (smem_u32(sm) + 1023u) & ~1023u; // TMA's swizzle: 1024-aligned slots
    unsigned char *const smb = sm + (sm0 - smem_u32(sm));
    if (tid == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(smem_u32(&s_full[s]), 1);
            mbar_init(smem_u32(&s_empty[s]), NWG * 4);
        }
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float d[BN / 2];
#pragma unroll
    for (int i = 0; i < BN / 2; i++)
        d[i] = 0.f;

    if (warp == NWG * 4) {
        if (lane == 0)
            for (int k = 0; k < nk; k++) {
                const int s = k % S;
                if (k >= S) // the consumers are done with step k - S
                    mbar_wait(smem_u32(&s_empty[s]), ((k / S) - 1) & 1);
                const uint32_t slot = sm0 + s * STAGE, bar = smem_u32(&s_full[s]);
                mbar_expect_tx(bar, STAGE);
#pragma unroll
                for (int mat = 0; mat < 1 + DUAL; mat++)
                    tma_load_2d(slot + mat * BM * 128, &a.tw[mat], kbeg + k * TG_BK, (int)row0,
                                bar);
                tma_load_2d(slot + C::WB, &a.tx, kbeg + k * TG_BK, (int)tok0, bar);
            }
    } else {
        const int wg = warp >> 2;
        const uint32_t full0 = smem_u32(&s_full[0]), empty0 = smem_u32(&s_empty[0]);
        // Slot 0's descriptors; slot s is s * STAGE bytes on. The address
        // field (bits 0-13) takes the offset / 16 without a carry: the
        // shared window lies below 256 KB.
        const uint64_t da0 = wg_desc_sw128(sm0 + wg * 64 * 128), db0 = wg_desc_sw128(sm0 + C::WB);
        uint32_t s = 0, ph = 0, fs = 0; // slot and phase of step k; slot to free next
#pragma unroll 1
        for (int k = 0; k < nk; k++) {
            mbar_wait(full0 + s * 8, ph);
            const uint64_t off = s * (uint32_t)(STAGE / 16);
            tg_wg_step_desc<BN, BM, DUAL>(d, da0 + off, db0 + off);
            wg_commit();
            wg_wait<1>();
            if (k >= 1) { // step k - 1's group is done: its slot is free
                if (lane == 0)
                    mbar_arrive(empty0 + fs * 8);
                fs = fs + 1 == S ? 0 : fs + 1;
            }
            if (++s == S)
                s = 0, ph ^= 1;
        }
        wg_wait<0>();
    }
    __syncthreads(); // every slot was consumed: the epilogue tile may overlay the ring
    float *ep = (float *)smb;
    if (warp < NWG * 4)
        tg_ep_wg<BN, C::EPI_LD>(ep, d, (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2), 0,
                                lane & 3);
    __syncthreads();
    tg_epilogue<BM, BN, C::THREADS, C::EPI_LD, CL>(a, ep, (float4 *)(smb + al16(C::SMEM)), tok0,
                                                   row0, tid, &s_last);
}

// Tile configurations (index = the "tile" knob), listed once: index, BM
// rows, BN tokens, warps WM x WN, ring depth, whether the router's two
// matrices fit (DUAL), whether a wgmma form exists (64-row warpgroups must
// cover BM: not for 256 rows with 256 threads).
//   0: warps 2 x 4, 64 x 32 each     1: 2 x 4, 32 x 32     2: 4 x 2, 32 x 32
//   3: 2 x 2, 32 x 32                4: 2 x 4, 64 x 64     5: 4 x 2, 64 x 64
//   6, 7: tiles 3, 1 with a 6-deep ring
//   8: 2 x 2, 32 x 16 (m <= 32)      9: 4 x 1, 16 x 16 (m <= 16)
#define TG_TILES(X)                                                                                \
    X(0, 128, 128, 2, 4, 4, 1, 1)                                                                  \
    X(1, 64, 128, 2, 4, 4, 1, 1)                                                                   \
    X(2, 128, 64, 4, 2, 4, 1, 1)                                                                   \
    X(3, 64, 64, 2, 2, 4, 1, 1)                                                                    \
    X(4, 128, 256, 2, 4, 3, 0, 1)                                                                  \
    X(5, 256, 128, 4, 2, 3, 0, 0)                                                                  \
    X(6, 64, 64, 2, 2, 6, 1, 1)                                                                    \
    X(7, 64, 128, 2, 4, 6, 1, 1)                                                                   \
    X(8, 64, 32, 2, 2, 6, 1, 1)                                                                    \
    X(9, 64, 16, 4, 1, 6, 1, 1)

#define TG_GEOM(i, bm, bn, wm, wn, st, d, w) {bm, bn, wm * wn * 32, st, d},
const TileGeom tgemm_geom[PJ_TGEMM_NTILES] = {TG_TILES(TG_GEOM)};
#undef TG_GEOM

template <int DUAL, int CL, int MODE> static TgemmFn tg_pick(int tile)
{
#define TG_PICK(i, bm, bn, wm, wn, st, d, w)                                                       \
    case i:                                                                                        \
        if constexpr ((DUAL && !d) || (MODE >= 2 && MODE != 7 && !w) ||                            \
                      (MODE == 5 && (DUAL || tg_wt(bm, bn, wm * wn * 32) > 64)) ||                 \
                      (MODE == 6 && (DUAL || bm != 64 || bn > 64)) ||                              \
                      (MODE == 7 && !TgWsCfg<bm, bn, st, DUAL, CL>::ok))                           \
            return nullptr;                                                                        \
        else if constexpr (MODE == 6)                                                              \
            return &tgemm_zws_kernel<bn, st, CL>;                                                  \
        else if constexpr (MODE == 7)                                                              \
            return &tgemm_ws_kernel<bm, bn, st, DUAL, CL>;                                         \
        else                                                                                       \
            return &tgemm_kernel<bm, bn, wm, wn, st, DUAL, CL, MODE>;
    switch (tile) {
        TG_TILES(TG_PICK)
    }
#undef TG_PICK
    return nullptr;
}

template <int DUAL, int CL> static TgemmFn tg_pick_mode(int tile, int mode)
{
    switch (mode) {
    case 0:
        return tg_pick<DUAL, CL, 0>(tile);
    case 1:
        return tg_pick<DUAL, CL, 1>(tile);
    case 2:
        return tg_pick<DUAL, CL, 2>(tile);
    case 3:
        return tg_pick<DUAL, CL, 3>(tile);
    case 4:
        return tg_pick<DUAL, CL, 4>(tile);
    case 5:
        return tg_pick<DUAL, CL, 5>(tile);
    case 6:
        return tg_pick<DUAL, CL, 6>(tile);
    case 7:
        return tg_pick<DUAL, CL, 7>(tile);
    }
    return nullptr;
}

TgemmFn tgemm_pick(int tile, int dual, int cl, int mode)
{
    if (dual)
        return cl ? tg_pick_mode<1, 1>(tile, mode) : tg_pick_mode<1, 0>(tile, mode);
    return cl ? tg_pick_mode<0, 1>(tile, mode) : tg_pick_mode<0, 0>(tile, mode);
}

template <int DUAL, int Z> static size_t tg_smem(int tile)
{
#define TG_SMEM(i, bm, bn, wm, wn, st, d, w)                                                       \
    case i:                                                                                        \
        return TgCfg<bm, bn, wm, wn, st, DUAL, Z>::smem +                                          \
               TgCfg<bm, bn, wm, wn, st, DUAL, Z>::zt_bytes;
    switch (tile) {
        TG_TILES(TG_SMEM)
    }
#undef TG_SMEM
    return 0;
}

static size_t tg_zws_smem_of(int tile)
{
#define TG_ZWS(i, bm, bn, wm, wn, st, d, w)                                                        \
    case i:                                                                                        \
        return bm == 64 && bn <= 64 ? TgZwsCfg<bn, st>::alloc : 0;
    switch (tile) {
        TG_TILES(TG_ZWS)
    }
#undef TG_ZWS
    return 0;
}

template <int DUAL, int CL> static size_t tg_ws_smem_of(int tile)
{
#define TG_WS(i, bm, bn, wm, wn, st, d, w)                                                         \
    case i:                                                                                        \
        return TgWsCfg<bm, bn, st, DUAL, CL>::ok ? TgWsCfg<bm, bn, st, DUAL, CL>::alloc : 0;
    switch (tile) {
        TG_TILES(TG_WS)
    }
#undef TG_WS
    return 0;
}

int tgemm_ws_threads(int tile)
{
    return tgemm_geom[tile].bm / 64 * 128 + 32;
}

size_t tgemm_smem(int tile, int dual, int mode, int cl)
{
    if (tile < 0 || tile >= PJ_TGEMM_NTILES)
        return 0;
    // The cluster forms' landing area follows the rest (tg_recv_bytes).
    const size_t recv = cl ? tg_recv_bytes(tgemm_geom[tile].bm, tgemm_geom[tile].bn) : 0;
    if (mode == 6) {
        const size_t z = tg_zws_smem_of(tile);
        return z ? al16(z) + recv : 0;
    }
    if (mode == 7) {
        const size_t w = dual ? (cl ? tg_ws_smem_of<1, 1>(tile) : tg_ws_smem_of<1, 0>(tile))
                              : (cl ? tg_ws_smem_of<0, 1>(tile) : tg_ws_smem_of<0, 0>(tile));
        return w ? al16(w) + recv : 0;
    }
    // The wgmma form aligns its stages to 1024 bytes inside the allocation.
    const size_t base =
        mode == 5 ? tg_smem<0, 1>(tile) : (dual ? tg_smem<1, 0>(tile) : tg_smem<0, 0>(tile));
    return al16(base) + recv + (mode >= 2 ? 1024 : 0);
}
