// gemvzq.cu — the z12 GEMV with x held in registers (gemvz pipe = 7),
// m <= 32.
//
// Why (kernels/NOTES.md, round 40): from m = 16 on, every z12 GEMV so far
// fetched x again for each 16 x 64 weight tile — per tile, per warp — so
// its instructions per tile grew with m (round 22: 117 at m = 8, ~170 at
// m = 16) and the forms that shared x instead lost their warps (rounds 11,
// 28). Here the roles of the mma operands are swapped: x is the A operand
// (16 tokens x k16) and the weights the B operand (k16 x 8 rows), so a
// warp that owns one K range of the layer loads that range's x once, into
// registers, and keeps it for every row block it streams. The decoded
// tile's A fragments are the B fragments of its two 8-row halves as they
// stand (rows g and g + 8 of the same k pairs), so the decode is z12dev's.
//
// - A CTA has nw streaming warps that split K in equal ranges (K = nw x
//   tpw x 64: the whole K in one CTA, no split across CTAs) and one
//   staging warp. The grid is persistent: CTA c takes row blocks c, c + G,
//   c + 2G, ... (a unit each).
// - A streaming warp runs its tiles — unit after unit, tpw per unit —
//   through a per-lane cp.async ring of S tiles (each lane copies and reads
//   only its own three 16-byte pieces, so no barrier orders copy and use),
//   and leaves each unit's partial (16 tokens x 16 rows per 16 tokens) in
//   one of two shared buffers, counted on that buffer's "full" mbarrier.
// - Each warp then finishes its own rows (16 / nw of them) of the unit
//   before: the nw partials summed in warp order, each exception's c1 x
//   and then c2 x added in list order, y stored; and releases the buffer
//   ("empty") for the unit after next. The sum order is fixed:
//   deterministic, and a one-hot x on an exception column gives the
//   weight's own bits. (A single finisher warp was the kernel's critical
//   path: round 40, visit 3.)
// - The staging warp copies the exceptions of all the CTA's units and the
//   x they multiply into shared memory while the first unit streams.
#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"
#include "kernels/z12dev.cuh"

// Floats per token row of a partial: 16 rows and a pad, so that the
// fragments' stores fall in distinct banks and rows stay 16-byte aligned.
#define PJ_GZQ_PSTR 20

struct GzqSmem {
    size_t ring, part, e_rk, e_c1, e_c2, e_x, units, bars, total;
};

// nw streaming warps, s ring stages (tiles per warp), mq tiles of 16 tokens.
static __host__ __device__ inline GzqSmem gzq_layout(int nw, int s, int mq)
{
    GzqSmem L;
    size_t off = 0;
    L.ring = off;
    off += (size_t)nw * s * PJ_Z12_TILE_BYTES;
    L.part = off;
    off += (size_t)2 * nw * 16 * mq * PJ_GZQ_PSTR * 4;
    L.e_rk = off;
    off += PJ_GZQ_ECAP * 4;
    L.e_c1 = off;
    off += PJ_GZQ_ECAP * 4;
    L.e_c2 = off;
    off += PJ_GZQ_ECAP * 4;
    L.e_x = off;
    off += (size_t)PJ_GZQ_ECAP * 16 * mq * 4;
    L.units = off; // per unit (32 at most): list start and count, staged
                   // start and count, 17 row starts
    off += (4 * 32 + 32 * 17) * 4;
    L.bars = off;
    off += 5 * 8;
    L.total = off;
    return L;
}

size_t gemvzq_smem(int nw, int s, int mq)
{
    return gzq_layout(nw, s, mq).total;
}

static __device__ __forceinline__ uint2 lds64(uint32_t saddr)
{
    uint2 v;
    asm volatile("ld.shared.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "r"(saddr) : "memory");
    return v;
}
static __device__ __forceinline__ uint32_t lds32(uint32_t saddr)
{
    uint32_t v;
    asm volatile("ld.shared.u32 %0, [%1];" : "=r"(v) : "r"(saddr) : "memory");
    return v;
}

template <int NW, int TPW, int MQ, int S>
__global__ void __launch_bounds__(NW * 32 + 32, 1) gemvzq_kernel(const GemvzqArgs a)
{
    constexpr uint32_t PW = 16 * MQ * PJ_GZQ_PSTR; // floats of one warp's partial
    constexpr uint32_t MT = 16 * MQ;               // tokens a unit computes
    constexpr uint32_t RPW = 16 / NW;              // rows of a unit each warp finishes
    extern __shared__ __align__(128) unsigned char sm[];
    const GzqSmem L = gzq_layout(NW, S, MQ);
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g = lane >> 2, t = lane & 3;
    const uint32_t G = gridDim.x;
    const uint32_t nunits = a.nblk > blockIdx.x ? (a.nblk - blockIdx.x + G - 1) / G : 0;
    float *part = (float *)(sm + L.part);
    uint32_t *e_rk = (uint32_t *)(sm + L.e_rk);
    float *e_c1 = (float *)(sm + L.e_c1), *e_c2 = (float *)(sm + L.e_c2);
    uint32_t *e_xw = (uint32_t *)(sm + L.e_x);
    // Per unit (the first 32): list start and count in global memory,
    // staged start and count, and the staged start of each of its 16 rows
    // and one past the last.
    uint32_t *u_lo = (uint32_t *)(sm + L.units), *u_cnt = u_lo + 32, *u_st = u_cnt + 32,
             *u_ns = u_st + 32, *u_rs = u_ns + 32;
    // mbarriers: full[p] (every streaming lane, once its partial of a unit
    // with parity p is in), empty[p] (every streaming lane, once it has
    // finished its rows of that unit), staged (the staging warp's lanes).
    const uint32_t full0 = smem_u32(sm + L.bars), empty0 = full0 + 16, staged = full0 + 32;
    if (threadIdx.x == 0) {
        mbar_init(full0, NW * 32);
        mbar_init(full0 + 8, NW * 32);
        mbar_init(empty0, NW * 32);
        mbar_init(empty0 + 8, NW * 32);
        mbar_init(staged, 32);
    }
    __syncthreads();

    if (warp == NW) {
        // The staging warp: the exceptions of all the CTA's units (up to
        // 32 units and PJ_GZQ_ECAP entries) in three rounds whose loads are
        // all in flight at once — the units' list bounds, the entries, the
        // 4-byte words of x that hold each (entry, token)'s bf16 — and each
        // unit's row starts in the staged list. A chain of dependent loads
        // per unit in the finish set the kernel's pace (round 40, visit 1).
        const uint32_t nu = min(nunits, 32u);
        uint32_t lo = 0, cnt = 0;
        if (lane < nu) {
            const uint32_t rb = blockIdx.x + lane * G;
            lo = a.z.blk_exc[rb];
            cnt = a.z.blk_exc[rb + 1] - lo;
        }
        uint32_t incl = cnt; // inclusive prefix of the counts over the lanes
#pragma unroll
        for (int d = 1; d < 32; d <<= 1) {
            const uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
            if (lane >= (uint32_t)d)
                incl += v;
        }
        const uint32_t st0 = min(incl - cnt, (uint32_t)PJ_GZQ_ECAP);
        const uint32_t tot = __shfl_sync(0xffffffffu, min(incl, (uint32_t)PJ_GZQ_ECAP), 31);
        u_lo[lane] = lo;
        u_cnt[lane] = cnt;
        u_st[lane] = st0;
        u_ns[lane] = min(incl, (uint32_t)PJ_GZQ_ECAP) - st0;
        __syncwarp();
        for (uint32_t u = 0; u < nu; u++) {
            const uint32_t ulo = u_lo[u], ust = u_st[u], uns = u_ns[u];
            for (uint32_t e = lane; e < uns; e += 32) {
                const pj_z12_exc *ex = a.z.exc + ulo + e;
                cp_async4(smem_u32(e_rk + ust + e), &ex->rk);
                cp_async4(smem_u32(e_c1 + ust + e), &ex->c1);
                cp_async4(smem_u32(e_c2 + ust + e), &ex->c2);
            }
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncwarp();
        for (uint32_t i = lane; i < tot * MT; i += 32) {
            const uint32_t e = i / MT, tok = i - e * MT;
            if (tok < a.m)
                cp_async4(smem_u32(e_xw + i),
                          a.x + (size_t)tok * a.ldx + ((e_rk[e] & 0x0fffffffu) & ~1u));
            else
                e_xw[i] = 0;
        }
        cp_async_commit();
        // Row starts while the x words travel. A unit's list is sorted by
        // row: entry e starts rows (row(e - 1), row(e)]; rows past the last
        // entry's start at the end.
        for (uint32_t u = 0; u < nu; u++) {
            const uint32_t ust = u_st[u], uns = u_ns[u];
            for (uint32_t e = lane; e <= uns; e += 32) {
                const int prev = e ? (int)(e_rk[ust + e - 1] >> 28) : -1;
                const int row = e < uns ? (int)(e_rk[ust + e] >> 28) : 16;
                for (int r = prev + 1; r <= row; r++)
                    u_rs[u * 17 + r] = ust + e;
            }
        }
        cp_async_wait<0>();
        __syncwarp();
        mbar_arrive(staged);
        return;
    }

    const uint8_t *tb = a.z.tiles + (size_t)warp * TPW * PJ_Z12_TILE_BYTES + lane * 16;
    unsigned char *ring = sm + L.ring + (size_t)warp * S * PJ_Z12_TILE_BYTES + lane * 16;
    const uint32_t total = nunits * TPW;
    auto issue = [&](uint32_t i) {
        if (i < total) {
            const uint32_t u = i / TPW, j = i - u * TPW;
            const uint8_t *src =
                tb + ((size_t)(blockIdx.x + u * G) * a.kt_total + j) * PJ_Z12_TILE_BYTES;
            const uint32_t dst = smem_u32(ring + (i % S) * PJ_Z12_TILE_BYTES);
            cp_async16_mem(dst, src);
            cp_async16_mem(dst + PJ_Z12_PLANE_BYTES, src + PJ_Z12_PLANE_BYTES);
            cp_async16_mem(dst + 2 * PJ_Z12_PLANE_BYTES, src + 2 * PJ_Z12_PLANE_BYTES);
        }
        cp_async_commit(); // every step commits, so group counts stay aligned
    };
    // This warp's rows of unit uu, finished: the nw partials summed in warp
    // order, then each exception of the row (c1 x, then c2 x) in list order;
    // from the staged copy when the whole list of the unit is there, else
    // from global memory. Then the unit's buffer is released.
    auto finish = [&](uint32_t uu) {
        const uint32_t pb = uu & 1;
        mbar_wait(full0 + 8 * pb, (uu >> 1) & 1);
        const uint32_t rb = blockIdx.x + uu * G;
        const float *pp = part + (size_t)pb * NW * PW;
        uint32_t e0, ne, uns = 0;
        if (uu < 32) {
            e0 = u_lo[uu];
            ne = u_cnt[uu];
            uns = u_ns[uu];
        } else {
            e0 = a.z.blk_exc[rb];
            ne = a.z.blk_exc[rb + 1] - e0;
        }
#pragma unroll
        for (uint32_t o0 = 0; o0 < RPW * MT; o0 += 32) {
            const uint32_t o = o0 + lane;
            if (o >= RPW * MT)
                break;
            const uint32_t row = warp * RPW + o / MT, tok = o % MT;
            float v = 0.f;
#pragma unroll
            for (int w = 0; w < NW; w++)
                v += pp[w * PW + tok * PJ_GZQ_PSTR + row];
            if (uu < 32 && uns == ne) {
                const uint32_t eb = u_rs[uu * 17 + row], ee = u_rs[uu * 17 + row + 1];
                for (uint32_t e = eb; e < ee; e++) {
                    const uint32_t xw = e_xw[e * MT + tok];
                    const float xv = bf2f((uint16_t)(e_rk[e] & 1u ? xw >> 16 : xw));
                    v = fmaf(e_c2[e], xv, fmaf(e_c1[e], xv, v));
                }
            } else if (tok < a.m) {
                for (uint32_t e = 0; e < ne; e++) {
                    const pj_z12_exc ex = a.z.exc[e0 + e];
                    if ((ex.rk >> 28) == row) {
                        const float xv = bf2f(a.x[(size_t)tok * a.ldx + (ex.rk & 0x0fffffffu)]);
                        v = fmaf(ex.c2, xv, fmaf(ex.c1, xv, v));
                    }
                }
            }
            if (tok < a.m && rb * 16 + row < a.n)
                a.y[(size_t)tok * a.ldy + rb * 16 + row] = f2bf(v);
        }
        mbar_arrive(empty0 + 8 * pb);
    };
    // This warp's K range of x as A fragments, its loads issued before the
    // first tiles' copies (behind them, half of visit 6's samples waited
    // for x): lane (g, t) holds, for each k16 step, the k
    // pairs at 2t and 2t + 8 of tokens g and g + 8 (zeros past m), i.e.
    // word t of every 16-byte piece of those token rows. The four lanes of
    // a quad load four consecutive pieces of a row with 16-byte loads and
    // transpose them among themselves (a rotation by t makes every shuffle's
    // register index static). A 4-byte load per word was 64 loads per lane
    // that filled the load queue: 40 % of visit 3's samples at m = 16.
    uint32_t xa[MQ][TPW * 4][4];
    uint4 xraw[MQ][2][TPW * 2];
    const uint32_t qbase = lane & ~3u;
#pragma unroll
    for (int q = 0; q < MQ; q++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
            const uint32_t tok = q * 16 + hr * 8 + g;
            const uint4 *row =
                (const uint4 *)(a.x + (size_t)min(tok, a.m - 1) * a.ldx + (size_t)warp * TPW * 64);
#pragma unroll
            for (int b = 0; b < TPW * 2; b++)
                xraw[q][hr][b] = tok < a.m ? ld_x16(row + 4 * b + t) : make_uint4(0u, 0u, 0u, 0u);
        }
#pragma unroll 1
    for (uint32_t i = 0; i + 1 < S; i++)
        issue(i);
#pragma unroll
    for (int q = 0; q < MQ; q++)
#pragma unroll
        for (int hr = 0; hr < 2; hr++) {
#pragma unroll
            for (int b = 0; b < TPW * 2; b++) {
                const uint4 c = xraw[q][hr][b];
                uint32_t w0 = c.x, w1 = c.y, w2 = c.z, w3 = c.w, tmp;
                // The rotations here and below are spelled out: through a
                // shared helper (an array of four, or four references) ptxas
                // allocated the m = 32 variants' registers worse (stack
                // frames 12 -> 32 bytes at nw 8, st 6).
                if (t & 1) { // w[i] = piece[(i + t) & 3]
                    tmp = w0;
                    w0 = w1;
                    w1 = w2;
                    w2 = w3;
                    w3 = tmp;
                }
                if (t & 2) {
                    tmp = w0;
                    w0 = w2;
                    w2 = tmp;
                    tmp = w1;
                    w1 = w3;
                    w3 = tmp;
                }
                // z[r] = word t of the piece of lane (t + r) & 3
                uint32_t z0 = w0;
                uint32_t z1 = __shfl_sync(0xffffffffu, w3, qbase | ((t + 1) & 3));
                uint32_t z2 = __shfl_sync(0xffffffffu, w2, qbase | ((t + 2) & 3));
                uint32_t z3 = __shfl_sync(0xffffffffu, w1, qbase | ((t + 3) & 3));
                if (t & 1) { // o[j] = z[(j - t) & 3]
                    tmp = z3;
                    z3 = z2;
                    z2 = z1;
                    z1 = z0;
                    z0 = tmp;
                }
                if (t & 2) {
                    tmp = z0;
                    z0 = z2;
                    z2 = tmp;
                    tmp = z1;
                    z1 = z3;
                    z3 = tmp;
                }
                // Piece 4b + j: step 2b + j / 2, the k pair at 2t (j even)
                // or 2t + 8 (j odd).
                xa[q][2 * b][hr] = z0;
                xa[q][2 * b][2 + hr] = z1;
                xa[q][2 * b + 1][hr] = z2;
                xa[q][2 * b + 1][2 + hr] = z3;
            }
        }
    const uint32_t B4 = a.z.base * 0x01010101u;
    uint32_t i = 0;
#pragma unroll 1
    for (uint32_t u = 0; u < nunits; u++) {
        float acc[MQ][2][4];
#pragma unroll
        for (int q = 0; q < MQ; q++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                acc[q][h][0] = acc[q][h][1] = acc[q][h][2] = acc[q][h][3] = 0.f;
#pragma unroll
        for (int j = 0; j < TPW; j++, i++) {
            issue(i + S - 1);
            cp_async_wait<S - 1>(); // tile i has landed
            const uint32_t sa = smem_u32(ring + (i % S) * PJ_Z12_TILE_BYTES);
#pragma unroll
            for (int s = 0; s < 4; s++) {
                // z12_afrag's arithmetic one k16 step at a time, its bytes
                // read from the ring as they are needed: a few registers
                // live instead of the tile's twelve and sixteen (the K
                // range's x holds most of them).
                const uint2 lo = lds64(sa + (s >> 1) * PJ_Z12_PLANE_BYTES + (s & 1) * 8);
                const uint32_t L0 = lo.x, L1 = lo.y;
                const uint32_t N = lds32(sa + 2 * PJ_Z12_PLANE_BYTES + 4 * s);
                const uint32_t H0 = ((N & 0x07070707u) + B4) | ((N << 4) & 0x80808080u);
                const uint32_t H1 = (((N >> 4) & 0x07070707u) + B4) | (N & 0x80808080u);
                // Rows 0..7 of the tile are B fragment {a0a1, a4a5}, rows
                // 8..15 {a2a3, a6a7}.
                const uint32_t r0 = prmt(L0, H0, 0x5140), r8 = prmt(L0, H0, 0x7362);
                const uint32_t r0h = prmt(L1, H1, 0x5140), r8h = prmt(L1, H1, 0x7362);
#pragma unroll
                for (int q = 0; q < MQ; q++) {
                    const uint32_t(&xr)[4] = xa[q][j * 4 + s];
                    mma_bf16(acc[q][0], xr[0], xr[1], xr[2], xr[3], r0, r0h);
                    mma_bf16(acc[q][1], xr[0], xr[1], xr[2], xr[3], r8, r8h);
                }
            }
        }
        // The buffer of unit u - 2 is free once every warp finished its
        // rows of it (each does so one unit later, below).
        const uint32_t pb = u & 1;
        if (u >= 2)
            mbar_wait(empty0 + 8 * pb, ((u >> 1) - 1) & 1);
        float *pw = part + ((size_t)pb * NW + warp) * PW;
#pragma unroll
        for (int q = 0; q < MQ; q++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                *(float2 *)(pw + (q * 16 + g) * PJ_GZQ_PSTR + h * 8 + 2 * t) =
                    make_float2(acc[q][h][0], acc[q][h][1]);
                *(float2 *)(pw + (q * 16 + g + 8) * PJ_GZQ_PSTR + h * 8 + 2 * t) =
                    make_float2(acc[q][h][2], acc[q][h][3]);
            }
        mbar_arrive(full0 + 8 * pb);
        // Finish the unit before, whose partials the other warps have
        // written by now or soon: a unit's wait is one unit late.
        if (u >= 1) {
            if (u == 1)
                mbar_wait(staged, 0);
            finish(u - 1);
        }
    }
    if (nunits) {
        if (nunits == 1)
            mbar_wait(staged, 0);
        finish(nunits - 1);
    }
    cp_async_wait<0>();
}

// Variants: nw 8 or 16 streaming warps, tpw 2..4 tiles per warp and unit
// (K = nw * tpw * 64), mq 1 or 2 tiles of 16 tokens, ring stages 4 or 6.
template <int NW, int TPW, int MQ> static GemvzqFn gzq_pick_s(int s)
{
    if (s == 4)
        return &gemvzq_kernel<NW, TPW, MQ, 4>;
    if (s == 6)
        return &gemvzq_kernel<NW, TPW, MQ, 6>;
    return nullptr;
}
template <int NW, int TPW> static GemvzqFn gzq_pick_mq(int mq, int s)
{
    if (mq == 1)
        return gzq_pick_s<NW, TPW, 1>(s);
    // 32 tokens' x over 3 or 4 tiles takes 96 or 128 registers: beside
    // 16 warps' cap of 120 it spills hundreds of bytes (not compiled).
    if constexpr (NW == 8 || TPW == 2)
        if (mq == 2)
            return gzq_pick_s<NW, TPW, 2>(s);
    return nullptr;
}
template <int NW> static GemvzqFn gzq_pick_tpw(int tpw, int mq, int s)
{
    if (tpw == 2)
        return gzq_pick_mq<NW, 2>(mq, s);
    if (tpw == 3)
        return gzq_pick_mq<NW, 3>(mq, s);
    if (tpw == 4)
        return gzq_pick_mq<NW, 4>(mq, s);
    return nullptr;
}

GemvzqFn gemvzq_pick(int nw, int tpw, int mq, int s)
{
    if (nw == 8)
        return gzq_pick_tpw<8>(tpw, mq, s);
    if (nw == 16)
        return gzq_pick_tpw<16>(tpw, mq, s);
    return nullptr;
}
