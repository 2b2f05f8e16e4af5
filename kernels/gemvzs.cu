// gemvzs.cu — the slab GEMV over z12 weights (gemvz pipe = 6), m <= 8.
//
// An experiment (kernels/NOTES.md, round 18): correct and validated, a
// tuner candidate, but slower than the row-block GEMVs on the reference
// shapes, so no table entry uses it.
//
// Why it was built: the row-block GEMVs hand out whole row blocks (288 on
// 132 SMs for qkv_gate), so SMs stream unequal bytes and every CTA pays its
// own ramp and finish; a read that streams one contiguous slab per SM by
// bulk copies reaches the cold read floor. This kernel is that read with
// the GEMV inside, without round 5's per-unit costs (one warp per
// scheduler, a run-time division and a row-block switch per unit, every
// row block finished through L2):
//
// - The layer's tiles (row-block major, so the whole matrix is one
//   contiguous run) are cut into groups of G = nw * u tiles, G dividing the
//   row block's K tiles, so that a group never straddles row blocks; CTA c
//   of C takes groups [c T / C, (c + 1) T / C): equal slabs to one group.
// - A producer thread streams the slab into a ring of S stages, one bulk
//   copy of G tiles per stage (mbarriers: "full" per stage, completed by
//   the copy's bytes; "empty" per stage, one arrival per consumer warp once
//   its tiles are in registers). x (knob xs): 0 all of it first, 1 all of
//   it before the weights start, 2 each stage's own x with the stage.
// - nw consumer warps take u tiles each per stage, decode and multiply as
//   gemvz does (ldmatrix of x). A row-block change falls between stages,
//   for every warp at once; each warp leaves its partial in shared memory
//   and arrives on the row block's barrier, and never waits for a finish.
// - A finisher warp gathers the slab's exceptions (and the x they multiply)
//   at the start, then finishes each row block as its last consumer leaves
//   it: partials summed in warp order, exceptions applied in list order,
//   bf16 stored.
// - Only a slab's first and last row blocks can be shared with the
//   neighbouring CTA (a slab holds at least one row block's tiles). The
//   next CTA's share of a row block (its head) is ready early in its run
//   and goes out as 64-bit words {value, tag}, single-copy atomic; the CTA
//   that ends the block (its tail) reads them ahead, and finishes without
//   a fence or an atomic when every tag is set; otherwise a counter
//   decides who finishes, without waiting on a CTA that may not have
//   started. The sum is always tail part + head part, then the exceptions:
//   the result does not depend on who finishes, and a one-hot x through an
//   exception column is exact.
#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"
#include "kernels/z12dev.cuh"

struct GzsSmem {
    size_t ring, stage, xs, part, misc, bars, total;
    ZxArea zx; // the exceptions' lists, row starts and block bounds
};

// nc consumer warps, u tiles per warp and stage, s stages, m tokens, K,
// jmax row blocks per slab at most, xm the x mode (kernel comment). A
// stage holds the G tiles and, with xm = 2, their x: m rows of G * 64 k
// padded by 8 (ldmatrix rows in distinct banks).
static __host__ __device__ inline GzsSmem gzs_layout(int nc, int u, int s, uint32_t m, uint32_t K,
                                                     uint32_t jmax, int xm)
{
    GzsSmem L;
    const size_t g = (size_t)nc * u;
    size_t off = 0;
    L.stage = g * PJ_Z12_TILE_BYTES + (xm == 2 ? al16((size_t)m * (g * 64 + 8) * 2) : 0);
    L.ring = off;
    off += (size_t)s * L.stage;
    L.xs = off;
    off += xm == 2 ? 0 : al16((size_t)m * (K + 8) * 2);
    L.part = off;
    off += al16((size_t)jmax * nc * 16 * m * 4);
    off = zx_area(L.zx, off, PJ_GZS_ECAP, m, jmax, jmax + 1);
    L.misc = off;
    off += 16;
    L.bars = off;
    off += (2 * (size_t)s + jmax + 1) * 8;
    L.total = off;
    return L;
}

size_t gemvzs_smem(int nc, int u, int s, int xm, uint32_t m, uint32_t K, uint32_t jmax)
{
    return gzs_layout(nc, u, s, m, K, jmax, xm).total;
}

static __device__ __forceinline__ unsigned long long ld_relaxed64(const unsigned long long *p)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
    return v;
}
static __device__ __forceinline__ void st_relaxed64(unsigned long long *p, unsigned long long v)
{
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(p), "l"(v) : "memory");
}
// A partial sum as the neighbour reads it: the value's bits and a tag.
static __device__ __forceinline__ unsigned long long gzs_word(float v)
{
    return (1ull << 32) | __float_as_uint(v);
}
static __device__ __forceinline__ bool gzs_valid(unsigned long long w)
{
    return (w >> 32) != 0;
}
static __device__ __forceinline__ float gzs_value(unsigned long long w)
{
    return __uint_as_float((uint32_t)w);
}

// Threads: NC consumer warps, one producer warp, one finisher warp.
template <int NC, int U, int S, int XM>
__global__ void __launch_bounds__(NC * 32 + 64, 1) gemvzs_kernel(const GemvzsArgs a)
{
    constexpr uint32_t G = NC * U;
    constexpr uint32_t SB = G * PJ_Z12_TILE_BYTES;
    extern __shared__ __align__(128) unsigned char sm[];
    const uint32_t m = a.m, KTP = a.kt_total, K = KTP * 64, XSTR = K + 8;
    const GzsSmem L = gzs_layout(NC, U, S, m, K, a.jmax, XM);
    const uint32_t XRS = G * 64 + 8; // xm = 2: a stage's x row stride (elements)
    uint16_t *xs = (uint16_t *)(sm + L.xs);
    float *part = (float *)(sm + L.part);
    const ZxArrays zx = zx_arrays(sm, L.zx);
    int *glob = (int *)(sm + L.misc);
    // mbarriers: full[S] (the copy's bytes), empty[S] (NC arrivals),
    // done[jmax] (local row block j: NC arrivals, one per consumer warp),
    // then x's (its copy's bytes).
    const uint32_t bars = smem_u32(sm + L.bars);
    const uint32_t dones = bars + 2 * S * 8;
    const uint32_t xbar = dones + a.jmax * 8;

    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t C = gridDim.x, c = blockIdx.x;
    const uint32_t g0 = (uint32_t)((uint64_t)c * a.tgroups / C);
    const uint32_t g1 = (uint32_t)((uint64_t)(c + 1) * a.tgroups / C);
    const uint32_t ng = g1 - g0, t0 = g0 * G, t1 = g1 * G;
    const uint32_t rb_first = t0 / KTP, rb_last = (t1 - 1) / KTP, nrb = rb_last - rb_first + 1;
    const bool head = t0 % KTP != 0; // rb_first was begun by CTA c - 1
    const bool tail = t1 % KTP != 0; // rb_last is ended by CTA c + 1

    if (threadIdx.x == 0) {
        for (int s = 0; s < S; s++) {
            mbar_init(bars + s * 8, 1);
            mbar_init(bars + (S + s) * 8, NC);
        }
        for (uint32_t j = 0; j < nrb; j++)
            mbar_init(dones + j * 8, NC);
        mbar_init(xbar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    if (warp == NC) {
        // The producer. x: XM = 0 first (the m real tokens of all of K, one
        // bulk copy per token into its padded row; ldmatrix rows past m
        // repeat the last token, whose outputs are not stored), then the
        // weights; XM = 1 the same, but the weights only once x has
        // landed (to keep x from queueing behind every SM's first stages;
        // it did not pay, kernels/NOTES.md rounds 18-19); XM = 2 a stage's
        // own x with each stage. Then one bulk copy of G tiles per stage.
        if (lane == 0) {
            if (XM != 2) {
                mbar_expect_tx(xbar, m * K * 2);
                for (uint32_t tok = 0; tok < m; tok++)
                    bulk_g2s(smem_u32(xs + tok * XSTR), a.x + (size_t)tok * a.ldx, K * 2, xbar);
                if (XM == 1)
                    mbar_wait(xbar, 0);
            }
            const uint8_t *src = a.z.tiles + (size_t)t0 * PJ_Z12_TILE_BYTES;
            for (uint32_t i = 0; i < ng; i++) {
                const uint32_t s = i % S;
                if (i >= S)
                    mbar_wait(bars + (S + s) * 8, ((i / S) - 1) & 1);
                unsigned char *st = sm + L.ring + s * L.stage;
                if (XM == 2) {
                    const uint32_t k0 = (t0 + i * G) % KTP * 64;
                    mbar_expect_tx(bars + s * 8, SB + m * G * 128);
                    for (uint32_t tok = 0; tok < m; tok++)
                        bulk_g2s(smem_u32(st + SB + tok * XRS * 2), a.x + (size_t)tok * a.ldx + k0,
                                 G * 128, bars + s * 8);
                } else {
                    mbar_expect_tx(bars + s * 8, SB);
                }
                bulk_g2s(smem_u32(st), src + (size_t)i * SB, SB, bars + s * 8);
            }
        }
        return;
    }
    const uint32_t B4 = a.z.base * 0x01010101u;
    const uint32_t g = lane >> 2, t = lane & 3;
    const uint32_t xbase = smem_u32(xs) + (min(lane & 7, m - 1) * XSTR + (lane >> 3) * 8) * 2;
    // XM = 2: this lane's ldmatrix row within a stage's x.
    const uint32_t xrow = (min(lane & 7, m - 1) * XRS + (lane >> 3) * 8) * 2;
    const uint32_t nout = 16 * m;

    // Output idx (= tok * 16 + row) of local row block j, summed: the
    // exceptions of the row in list order, then bf16 into y.
    auto store_out = [&](uint32_t j, uint32_t idx, float s) {
        const uint32_t r = idx & 15, tok = idx >> 4, row = (rb_first + j) * 16 + r;
        const int e1 = zx.rowst[j * 16 + r + 1];
        for (int e = zx.rowst[j * 16 + r]; e < e1; e++) {
            uint32_t rk;
            float c1, c2;
            if (glob[0]) {
                const pj_z12_exc ex = a.z.exc[glob[1] + e];
                rk = ex.rk;
                c1 = ex.c1;
                c2 = ex.c2;
            } else {
                rk = zx.e_rk[e];
                c1 = zx.e_c1[e];
                c2 = zx.e_c2[e];
            }
            const float xv =
                glob[0] ? bf2f(a.x[(size_t)tok * a.ldx + (rk & 0x0fffffffu)]) : zx.e_x[e * m + tok];
            s = __fadd_rn(s, __fmul_rn(c1, xv));
            s = __fadd_rn(s, __fmul_rn(c2, xv));
        }
        if (row < a.n)
            a.y[(size_t)tok * a.ldy + row] = f2bf(s);
    };

    // The boundary with CTA c (slot c): [0, 128) the head's words (written
    // by CTA c + 1), [128, 256) the tail's (by CTA c when it finds the head
    // missing). All words are zero between launches: whoever reads a word
    // set clears it.
    // pre: the head's words as read ahead by the finisher (tail only).
    auto finish = [&](uint32_t j, const unsigned long long(&pre)[4]) {
        float sv[4];
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const uint32_t idx = lane + 32 * q;
            float s = 0.f;
            if (idx < nout)
#pragma unroll 4
                for (int w = 0; w < NC; w++)
                    s += part[((size_t)j * NC + w) * nout + idx];
            sv[q] = s;
        }
        const bool is_head = j == 0 && head, is_tail = j == nrb - 1 && tail;
        if (!is_head && !is_tail) {
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (lane + 32 * q < nout)
                    store_out(j, lane + 32 * q, sv[q]);
            return;
        }
        // Slot of the boundary: c - 1 for a head, c for a tail.
        const uint32_t slot = is_head ? c - 1 : c;
        unsigned long long *hw = a.tag + (size_t)slot * 256, *tw = hw + 128;
        unsigned *cnt = a.cnt + slot;
        // A word the other side has posted or is posting: wait until it is
        // set, clear it, return its value.
        auto take = [](unsigned long long *p) {
            unsigned long long v;
            do
                v = ld_relaxed64(p);
            while (!gzs_valid(v));
            st_relaxed64(p, 0);
            return gzs_value(v);
        };
        if (is_head) {
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (lane + 32 * q < nout)
                    st_relaxed64(hw + lane + 32 * q, gzs_word(sv[q]));
            __threadfence();
            __syncwarp();
            unsigned old = 0;
            if (lane == 0)
                old = atomicAdd(cnt, 1u);
            old = __shfl_sync(0xffffffffu, old, 0);
            // 0: the tail has not looked at the counter and will finish;
            // 0xffffffff: it found every word and has finished.
            if (old != 1)
                return;
                // The tail came first and is posting its part: wait for it.
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const uint32_t idx = lane + 32 * q;
                if (idx >= nout)
                    continue;
                store_out(j, idx, __fadd_rn(take(tw + idx), sv[q]));
                st_relaxed64(hw + idx, 0);
            }
            __syncwarp();
            if (lane == 0)
                *cnt = 0; // the tail's two arrivals are in
            return;
        }
        // The tail: the head's words, usually read ahead while this block
        // was streamed (they stay set until this tail clears them), else
        // read now.
        unsigned long long w[4];
        bool all = true;
#pragma unroll
        for (int q = 0; q < 4; q++) {
            w[q] = lane + 32 * q < nout ? pre[q] : gzs_word(0.f);
            all = all && gzs_valid(w[q]);
        }
        if (!__all_sync(0xffffffffu, all)) {
            all = true;
#pragma unroll
            for (int q = 0; q < 4; q++) {
                w[q] = lane + 32 * q < nout ? ld_relaxed64(hw + lane + 32 * q) : gzs_word(0.f);
                all = all && gzs_valid(w[q]);
            }
        }
        if (__all_sync(0xffffffffu, all)) {
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (lane + 32 * q < nout) {
                    store_out(j, lane + 32 * q, __fadd_rn(sv[q], gzs_value(w[q])));
                    st_relaxed64(hw + lane + 32 * q, 0);
                }
            __syncwarp();
            if (lane == 0)
                atomicSub(cnt, 1u); // cancels the head's arrival, before or after it
            return;
        }
        unsigned old = 0;
        if (lane == 0)
            old = atomicAdd(cnt, 1u);
        old = __shfl_sync(0xffffffffu, old, 0);
        if (old == 0) {
            // The head has not arrived: leave this part; the head finishes.
#pragma unroll
            for (int q = 0; q < 4; q++)
                if (lane + 32 * q < nout)
                    st_relaxed64(tw + lane + 32 * q, gzs_word(sv[q]));
            return;
        }
        // The head has arrived (its words were fenced before its arrival).
        __threadfence();
#pragma unroll
        for (int q = 0; q < 4; q++) {
            const uint32_t idx = lane + 32 * q;
            if (idx < nout)
                store_out(j, idx, __fadd_rn(sv[q], take(hw + idx)));
        }
        __syncwarp();
        if (lane == 0)
            *cnt = 0;
    };

    // This warp's partial of local row block j into shared memory, then its
    // arrival on j's barrier.
    float acc[1][4] = {{0.f, 0.f, 0.f, 0.f}};
    auto leave = [&](uint32_t j) {
        float *pw = part + ((size_t)j * NC + warp) * nout;
        const uint32_t k0 = 2 * t, k1 = 2 * t + 1;
        if (k0 < m) {
            pw[k0 * 16 + g] = acc[0][0];
            pw[k0 * 16 + g + 8] = acc[0][2];
        }
        if (k1 < m) {
            pw[k1 * 16 + g] = acc[0][1];
            pw[k1 * 16 + g + 8] = acc[0][3];
        }
        acc[0][0] = acc[0][1] = acc[0][2] = acc[0][3] = 0.f;
        __threadfence_block();
        __syncwarp();
        if (lane == 0)
            mbar_arrive(dones + j * 8);
    };

    if (warp == NC + 1) {
        // The finisher. First the exceptions of the slab's row blocks into
        // shared memory, in list order (row block, row, k), with bnd[j] =
        // the first entry of local row block j: from the derived slot table
        // in one round of loads per four row blocks (a chain of dependent
        // loads here waits behind the stream's traffic), else through
        // blk_exc and the list (the entries stay in global memory if more
        // than PJ_GZS_ECAP).
        bool have = false;
        if (a.z.zx_rk) {
            const uint32_t cv = lane < nrb ? a.z.zx_n[rb_first + lane] : 0;
            uint32_t incl = cv;
#pragma unroll
            for (int d = 1; d < 32; d <<= 1) {
                const uint32_t v = __shfl_up_sync(0xffffffffu, incl, d);
                if (lane >= (uint32_t)d)
                    incl += v;
            }
            const uint32_t tot = __shfl_sync(0xffffffffu, incl, 31);
            if (!__any_sync(0xffffffffu, cv > PJ_GEMVZ_XCAP) && tot <= PJ_GZS_ECAP) {
                if (lane <= nrb)
                    zx.bnd[lane] = incl - cv;
                for (uint32_t j0 = 0; j0 < nrb; j0 += 4) {
                    uint32_t rk[8];
                    float c1[8], c2[8];
#pragma unroll
                    for (int it = 0; it < 8; it++) {
                        const uint32_t jj = j0 + it / 2;
                        rk[it] = 0xffffffffu;
                        c1[it] = c2[it] = 0.f;
                        if (jj < nrb) {
                            const size_t o =
                                (size_t)(rb_first + jj) * PJ_GEMVZ_XCAP + (it & 1) * 32 + lane;
                            rk[it] = a.z.zx_rk[o];
                            c1[it] = a.z.zx_c1[o];
                            c2[it] = a.z.zx_c2[o];
                        }
                    }
#pragma unroll
                    for (int it = 0; it < 8; it++) {
                        const uint32_t jj = j0 + it / 2, sl = (it & 1) * 32 + lane;
                        const uint32_t cj = __shfl_sync(0xffffffffu, cv, jj & 31);
                        const uint32_t bj = __shfl_sync(0xffffffffu, incl - cv, jj & 31);
                        if (jj < nrb && sl < cj) {
                            zx.e_rk[bj + sl] = rk[it];
                            zx.e_c1[bj + sl] = c1[it];
                            zx.e_c2[bj + sl] = c2[it];
                        }
                    }
                }
                if (lane == 0)
                    glob[0] = 0;
                have = true;
            }
        }
        if (!have) {
            const uint32_t bv = lane <= nrb ? a.z.blk_exc[rb_first + lane] : 0;
            const uint32_t e0 = __shfl_sync(0xffffffffu, bv, 0);
            const uint32_t ne = __shfl_sync(0xffffffffu, bv, nrb) - e0;
            const bool gl = ne > PJ_GZS_ECAP;
            if (lane <= nrb)
                zx.bnd[lane] = bv - e0;
            if (!gl)
                for (uint32_t e = lane; e < ne; e += 32) {
                    const pj_z12_exc ex = a.z.exc[e0 + e];
                    zx.e_rk[e] = ex.rk;
                    zx.e_c1[e] = ex.c1;
                    zx.e_c2[e] = ex.c2;
                }
            if (lane == 0) {
                glob[0] = gl;
                glob[1] = (int)e0;
            }
        }
        __syncwarp();
        // Where each row's entries start (rows are sorted within a block).
        for (uint32_t rr = lane; rr < nrb * 16; rr += 32) {
            const uint32_t j = rr / 16, r = rr % 16;
            uint32_t lo = zx.bnd[j], hi = zx.bnd[j + 1];
            while (lo < hi) {
                const uint32_t mid = (lo + hi) / 2;
                const uint32_t rk = glob[0] ? a.z.exc[glob[1] + mid].rk : zx.e_rk[mid];
                if ((rk >> 28) < r)
                    lo = mid + 1;
                else
                    hi = mid;
            }
            zx.rowst[rr] = (int)lo;
        }
        if (lane == 0)
            zx.rowst[nrb * 16] = (int)zx.bnd[nrb];
        __syncwarp();
        // Then each row block as its last consumer warp leaves it: the
        // consumers never wait for a finish.
        // x of every (exception, token) pair, in rounds of eight loads
        // per lane (each round one memory latency).
        if (!glob[0]) {
            const uint32_t n = zx.bnd[nrb] * m;
            for (uint32_t i0 = lane; i0 < n; i0 += 256) {
                uint16_t v[8];
#pragma unroll
                for (int q = 0; q < 8; q++) {
                    const uint32_t i = i0 + 32 * q;
                    v[q] = 0;
                    if (i < n)
                        v[q] = a.x[(size_t)(i % m) * a.ldx + (zx.e_rk[i / m] & 0x0fffffffu)];
                }
#pragma unroll
                for (int q = 0; q < 8; q++)
                    if (i0 + 32 * q < n)
                        zx.e_x[i0 + 32 * q] = bf2f(v[q]);
            }
            __syncwarp();
        }
        for (uint32_t j = 0; j < nrb; j++) {
            unsigned long long pre[4] = {0, 0, 0, 0};
            if (j == nrb - 1 && tail) {
                // Read the head's words ahead: off the launch's last step.
                const unsigned long long *hw = a.tag + (size_t)c * 256;
#pragma unroll
                for (int q = 0; q < 4; q++)
                    if (lane + 32 * q < nout)
                        pre[q] = ld_relaxed64(hw + lane + 32 * q);
            }
            mbar_wait(dones + j * 8, 0);
            finish(j, pre);
        }
        return;
    }

    // Consumers.
    if (XM != 2)
        mbar_wait(xbar, 0);
    uint32_t kt = t0 % KTP, j = 0;
#pragma unroll 1
    for (uint32_t i = 0; i < ng; i++) {
        const uint32_t s = i % S;
        mbar_wait(bars + s * 8, (i / S) & 1);
        const uint32_t sb = smem_u32(sm + L.ring + s * L.stage) + lane * 16;
        uint4 p[U][3];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int q = 0; q < 3; q++)
                p[u][q] = lds128(sb + (warp + u * NC) * PJ_Z12_TILE_BYTES + q * PJ_Z12_PLANE_BYTES);
        // x's fragments too before the release: with XM = 2 they are in
        // the stage, which the producer refills once every warp has left it.
        uint32_t bx[U][1][8];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t xa = XM == 2 ? sb - lane * 16 + SB + xrow + (warp + u * NC) * 128
                                        : xbase + (kt + warp + u * NC) * 128;
            z12_ldsm_b64(bx[u][0], xa, xa + 64);
        }
        __syncwarp();
        if (lane == 0)
            mbar_arrive(bars + (S + s) * 8); // this warp's part is in registers
#pragma unroll
        for (int u = 0; u < U; u++)
            z12_tile_mma<1>(acc, p[u], bx[u], B4);
        kt += G;
        if (kt == KTP) {
            leave(j);
            kt = 0;
            j++;
        }
    }
    if (kt != 0)
        leave(j);
}

template <int NC, int U, int XM> static GemvzsFn gzs_pick_s(int s)
{
    switch (s) {
    case 4:
        return &gemvzs_kernel<NC, U, 4, XM>;
    case 6:
        return &gemvzs_kernel<NC, U, 6, XM>;
    case 8:
        return &gemvzs_kernel<NC, U, 8, XM>;
    }
    return nullptr;
}

template <int NC, int U> static GemvzsFn gzs_pick_x(int s, int xm)
{
    switch (xm) {
    case 0:
        return gzs_pick_s<NC, U, 0>(s);
    case 1:
        return gzs_pick_s<NC, U, 1>(s);
    case 2:
        return gzs_pick_s<NC, U, 2>(s);
    }
    return nullptr;
}

GemvzsFn gemvzs_pick(int nc, int u, int s, int xm)
{
    if (nc == 8)
        return u == 1 ? gzs_pick_x<8, 1>(s, xm) : (u == 2 ? gzs_pick_x<8, 2>(s, xm) : nullptr);
    if (nc == 16)
        return u == 1 ? gzs_pick_x<16, 1>(s, xm) : (u == 2 ? gzs_pick_x<16, 2>(s, xm) : nullptr);
    return nullptr;
}
