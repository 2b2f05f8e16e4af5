// gemvz.cuh — the gemvz kernel template (GEMV over z12 weights, m <= 32);
// gemvz.cu and gemvzx.cu instantiate it (two units so they compile in
// parallel).
//
// A CTA holds R row blocks; each row block is streamed by NW warps that
// split the CTA's K range in whole 16 x 64 tiles. A lane reads its three
// 16-byte pieces of a tile (low bytes of elements 0..15, 16..31, nibbles),
// rebuilds the bf16 A fragments with byte arithmetic (zfmt.h's H0/H1 and
// four byte permutes per k16 step) and feeds mma.m16n8k16. The format's k
// order is the mma's own, so x must come as the standard B fragment (pairs
// of k at 2t and 2t + 8): either staged in shared memory for the CTA's K
// range and read with ldmatrix (XS = 1; XS = 3 for m <= 8 with PIPE = 2
// stages only the m real tokens, ldmatrix rows past m repeat the last one),
// read as 4-byte pairs from global/L1 (XS = 0), or (XS = 2, with PIPE = 2)
// copied per tile into the warp's prefetch ring next to the weights and
// read with ldmatrix, or (XS = 4, with PIPE = 2) copied per batch into a
// ring of the CTA by all its streaming warps and read by the R groups at
// the same K step, so that one copy of x serves R * RB row blocks instead
// of RB (kernels/NOTES.md, round 11).
//
// Loads: PIPE = 0 one register batch of U tiles at a time, PIPE = 1 two,
// PIPE = 2 (knob pipe = 5) a per-lane cp.async ring of S (knob st, 4 by
// default) batches in shared memory. K splits across CTAs meet in global
// memory, or (CL = 1, knob cl) in distributed shared memory within a
// cluster. The tail split (TS = 1, knob ts) splits only the row groups
// past the last whole wave of SMs, so that no SM streams a whole extra row
// block while the others wait (kernels/NOTES.md, round 10).
//
// One extra warp prepares the exceptions while the others stream: it copies
// the CTA's entries and the x values they multiply into shared memory and
// finds where each row's run starts. At the end, the thread that owns
// output (row, token) adds c1*x and then c2*x of each exception of the row,
// in list order, to the finished sum (warp order, then split order): the
// sum order is fixed, so the result is deterministic, and for a one-hot x
// the decoded value is cancelled and restored exactly.
#pragma once

#include <cooperative_groups.h>

#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"
#include "kernels/z12dev.cuh"

namespace cg = cooperative_groups;

struct GemvzSmem {
    size_t ring, xs, red, flags, total;
    ZxArea zx; // the exceptions' lists, row starts and block starts
};

// Stages of the shared-memory prefetch (PIPE = 2): batches in flight per
// warp. The default; knob st = 2 picks the variants of gemvzr.cu, whose
// smaller rings let more CTAs share an SM from m = 16 on.
#define PJ_GZ_STAGES 4

// Bytes of one warp's prefetch ring: s stages x u tiles x (rb row blocks x
// three 512-byte planes, plus with xs = 2 the tile's x: 8 tokens x 64 k per
// n8 tile, 1 KB).
static __host__ __device__ constexpr size_t gemvz_ring_bytes(int s, int u, uint32_t rbw, int mtx)
{
    return (size_t)s * u * (rbw * PJ_Z12_TILE_BYTES + mtx * 1024);
}

// Bytes of the CTA's x ring (xs = 4): s stages x u tiles x the NW warp
// positions' K steps x 1 KB per n8 tile.
static __host__ __device__ inline size_t gemvz_xring_bytes(int s, int u, int nw, int mtx)
{
    return (size_t)s * u * nw * mtx * 1024;
}

// nb = row blocks per CTA (R * RB); ring = bytes of the prefetch rings of
// all streaming warps (0 unless PIPE = 2); m = tokens (sizes x with xs = 3
// only); u = tiles per batch and s = stages (size the x ring of xs = 4).
// With a ring, the reduction buffer lives in it: a warp's partial sums
// (RB x 16 rows x MTOK + 1 floats, less than one stage) go to its own ring
// after its last batch has been read, so the buffer costs no shared memory
// (kernels/NOTES.md, round 12).
static __host__ __device__ inline GemvzSmem gemvz_layout(int nw, int mt, int xs, uint32_t r,
                                                         uint32_t nb, uint32_t kc, size_t ring,
                                                         uint32_t m, int u, int s)
{
    const int mtok = mt * 8;
    GemvzSmem L;
    size_t off = 0;
    L.ring = off;
    off += al16(ring);
    L.xs = off;
    if (xs == 1)
        off += al16((size_t)mtok * (kc + 8) * 2);
    else if (xs == 3)
        off += al16((size_t)m * (kc + 8) * 2);
    else if (xs == 4)
        off += gemvz_xring_bytes(s, u, nw, mt);
    L.red = ring ? L.ring : off;
    if (!ring)
        off += al16((size_t)r * nw * (nb / r) * 16 * (mtok + 1) * 4);
    off = zx_area(L.zx, off, PJ_GEMVZ_ECAP, mtok, nb, 8); // block starts: NB + 1 <= 5 used
    L.flags = off;
    off += 16;
    L.total = off;
    return L;
}

template <int U, int RB> struct ZBatch {
    uint4 p[U][RB][3];
};

// Threads: R * NW streaming warps + 1. NW = 16 takes R = 1 (544 threads);
// NW = 4 and 8 take R * NW <= 8 (288 threads), which leaves them up to 168
// registers per thread instead of 96. Each warp streams RB row blocks that
// share its x fragments.
template <int NW> struct GemvzBounds {
    static constexpr int threads = NW == 16 ? 544 : 288;
};

// CL = 1 (pipe = 5, rb = 1): the ks CTAs of a row group are one cluster and
// sum their partials through distributed shared memory (cl_reduce in
// pjdev.cuh).
// TS = 1 (knob ts > 1, ks = 1, cl = 0): CTAs past a.nfull are the parts of
// the tail's row groups (GemvzArgs).
// S (knob st): stages of the PIPE = 2 ring.
template <int NW, int U, int MT, int PIPE, int XS, int RB, int CL = 0, int TS = 0,
          int S = PJ_GZ_STAGES>
__global__ void __launch_bounds__(GemvzBounds<NW>::threads) gemvz_kernel(const GemvzArgs a)
{
    constexpr int MTOK = MT * 8;
    constexpr int RS = MTOK + 1;
    // One warp's ring; its partial sums (RB x 16 x RS floats) take the
    // ring's place at the end, so they must fit in it.
    constexpr size_t RINGW = PIPE == 2 ? gemvz_ring_bytes(S, U, RB, XS == 2 ? MT : 0) : 0;
    static_assert(PIPE != 2 || RINGW >= (size_t)RB * 16 * RS * 4, "partials outgrow the ring");
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t R = a.r;
    const uint32_t NB = R * RB; // row blocks of this CTA
    const GemvzSmem L = gemvz_layout(NW, MT, XS, R, NB, a.kc, R * NW * RINGW, a.m, U, S);
    uint16_t *xs = (uint16_t *)(sm + L.xs);
    // Warp wi's partial sums: in its ring (PIPE = 2) or in the buffer.
    auto redw = [&](uint32_t wi) {
        return PIPE == 2 ? (float *)(sm + L.ring + (size_t)wi * RINGW)
                         : (float *)(sm + L.red) + (size_t)wi * RB * 16 * RS;
    };
    const ZxArrays zx = zx_arrays(sm, L.zx);
    int *flags = (int *)(sm + L.flags);

    const uint32_t nstream = R * NW;
    const uint32_t NT = nstream * 32 + 32;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g = lane >> 2, t = lane & 3;
    // This CTA's row group, K split, split count, K width and partials slot.
    // Macros, not locals: with TS = 0 they read the launch values where they
    // are used, as the code did before TS existed; a local copy held in a
    // register for the whole kernel made 96-register NW = 16 variants spill.
    const bool tail = TS && blockIdx.x >= a.nfull;
    const uint32_t tix = TS ? blockIdx.x - a.nfull : 0;
#define GZ_GRP   (tail ? a.nfull + tix / a.ts : blockIdx.x)
#define GZ_SPLIT (tail ? tix % a.ts : blockIdx.y)
#define GZ_KS    (tail ? a.ts : a.ks)
#define GZ_KC    (tail ? a.kc / a.ts : a.kc)
#define GZ_SLOT  (tail ? tix / a.ts : blockIdx.x)
    const uint32_t rb0 = GZ_GRP * NB, split = GZ_SPLIT;
    if constexpr (CL)
        cl_started(); // this CTA's shared memory may take the others' partials
    const bool streamer = warp < nstream;
    const uint32_t q = warp / NW, wq = warp % NW;
    const uint32_t tpw = GZ_KC / (64 * NW); // tiles per warp, a multiple of U
    const uint32_t ktl0 = wq * tpw;         // first tile of this warp, within the split
    const uint32_t kt0 = split * (GZ_KC / 64) + ktl0;
    const uint8_t *tp[RB];
#pragma unroll
    for (int j = 0; j < RB; j++) {
        const uint32_t rb = min(rb0 + q * RB + j, a.nblk - 1); // past n: computed, not stored
        tp[j] = a.z.tiles + ((size_t)rb * a.kt_total + kt0) * PJ_Z12_TILE_BYTES + lane * 16;
    }
    const uint32_t B4 = a.z.base * 0x01010101u;
    const uint32_t XSTR = GZ_KC + 8; // padded row: ldmatrix rows fall in distinct banks

    float acc[RB][MT][4];
#pragma unroll
    for (int j = 0; j < RB; j++)
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
            acc[j][mt][0] = acc[j][mt][1] = acc[j][mt][2] = acc[j][mt][3] = 0.f;

    unsigned char *ring = sm + L.ring + (size_t)warp * RINGW;
    // xs = 2: the tile's x (8 tokens x 64 k per n8 tile) after the weights,
    // 16-byte chunk c of token row r at chunk c ^ r, so that ldmatrix's
    // eight rows fall in distinct banks.
    auto xpiece = [&](uint32_t i, int u, int mt) {
        return ring + (size_t)S * U * RB * PJ_Z12_TILE_BYTES +
               (((size_t)(i % S) * U + u) * MT + mt) * 1024;
    };
    // xs = 4: the same 1 KB pieces in the CTA's ring, one per warp position
    // wq (the K step of warp wq of every group), copied by all streamers.
    auto xpiece_cta = [&](uint32_t i, int u, uint32_t w, int mt) {
        return (unsigned char *)xs + ((((size_t)(i % S) * U + u) * NW + w) * MT + mt) * 1024;
    };
    auto piece = [&](uint32_t i, int u, int j, int q) {
        return ring + ((((size_t)(i % S) * U + u) * RB + j) * 3 + q) * PJ_Z12_PLANE_BYTES +
               lane * 16;
    };
    auto load = [&](ZBatch<U, RB> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < RB; j++) {
                const uint8_t *pp = tp[j] + ((size_t)i * U + u) * PJ_Z12_TILE_BYTES;
                b.p[u][j][0] = ld_stream16(pp);
                b.p[u][j][1] = ld_stream16(pp + PJ_Z12_PLANE_BYTES);
                b.p[u][j][2] = ld_stream16(pp + 2 * PJ_Z12_PLANE_BYTES);
            }
    };
    auto compute = [&](const ZBatch<U, RB> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t klocal = (ktl0 + i * U + u) * 64;
            const size_t kglob = (size_t)split * GZ_KC + klocal;
            uint32_t bx[MT][8];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if (XS == 2 || XS == 4) {
                    const uint32_t row = lane & 7, c = lane >> 3;
                    const uint32_t base =
                        smem_u32(XS == 2 ? xpiece(i, u, mt) : xpiece_cta(i, u, wq, mt)) + row * 128;
                    z12_ldsm_b64(bx[mt], base + ((c ^ row) << 4), base + (((c + 4) ^ row) << 4));
                } else if (XS == 1 || XS == 3) {
                    const uint32_t row =
                        XS == 3 ? min(lane & 7, a.m - 1) : mt * 8 + (lane & 7); // XS 3: MT = 1
                    const uint32_t base =
                        smem_u32(xs) + (row * XSTR + klocal + (lane >> 3) * 8) * 2;
                    z12_ldsm_b64(bx[mt], base, base + 64);
                } else {
                    const uint32_t tok = min((uint32_t)(mt * 8 + g), a.m - 1);
                    const uint16_t *xp = a.x + (size_t)tok * a.ldx + kglob + 2 * t;
#pragma unroll
                    for (int s = 0; s < 4; s++) {
                        bx[mt][2 * s] = ld_x4(xp + 16 * s);
                        bx[mt][2 * s + 1] = ld_x4(xp + 16 * s + 8);
                    }
                }
            }
#pragma unroll
            for (int j = 0; j < RB; j++)
                z12_tile_mma<MT>(acc[j], b.p[u][j], bx, B4);
        }
    };

    const uint32_t nbt = tpw / U;
    ZBatch<U, RB> A, B;
    // PIPE = 2: each lane copies exactly the 16-byte pieces it will read
    // (cp.async into its warp's ring), so no barrier is needed between
    // copy and use: cp.async.wait_group orders a thread's own copies.
    // S - 1 batches stay in flight without holding registers.
    // One 16-byte chunk (ch) of token row `row` of n8 tile mt's x at kglob
    // into a 1 KB x piece, chunk ch ^ row (xs = 2 and 4).
    auto x_chunk = [&](unsigned char *xp, uint32_t mt, uint32_t row, uint32_t ch, size_t kglob) {
        const uint32_t tok = min(mt * 8 + row, a.m - 1);
        // Through L1 up to 16 tokens: the CTAs sharing the SM copy the same
        // pieces at about the same time, and L1 serves the later ones
        // (qkv_gate and the pooler at m = 8 0.35-0.5 µs faster, the pooler
        // at m = 16 1.1). At 32 tokens the pieces outgrow what L1 keeps
        // beside the rings and .ca is slower (kernels/NOTES.md, round 26).
        cp_async16_mem<MT <= 2>(smem_u32(xp + row * 128 + ((ch ^ row) << 4)),
                                a.x + (size_t)tok * a.ldx + kglob + ch * 8);
    };
    auto issue = [&](uint32_t i) {
        if (i < nbt)
#pragma unroll
            for (int u = 0; u < U; u++)
#pragma unroll
                for (int j = 0; j < RB; j++)
#pragma unroll
                    for (int q = 0; q < 3; q++)
                        cp_async16_mem(smem_u32(piece(i, u, j, q)),
                                       tp[j] + ((size_t)i * U + u) * PJ_Z12_TILE_BYTES +
                                           q * PJ_Z12_PLANE_BYTES);
        if (XS == 2 && i < nbt)
#pragma unroll
            for (int u = 0; u < U; u++) {
                const size_t kglob = (size_t)split * GZ_KC + (ktl0 + i * U + u) * 64;
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
#pragma unroll
                    for (int h = 0; h < 2; h++) {
                        const uint32_t pc = lane + 32 * h;
                        x_chunk(xpiece(i, u, mt), mt, pc >> 3, pc & 7, kglob);
                    }
            }
        if (XS == 4 && i < nbt) {
            // The batch's x for every warp position: U * NW * MT pieces of
            // 64 16-byte chunks, spread over all streaming threads.
            const uint32_t nch = U * NW * MT * 64, sid = warp * 32 + lane;
            for (uint32_t c = sid; c < nch; c += nstream * 32) {
                const uint32_t pc = c & 63, pi = c >> 6, mt = pi % MT, w = (pi / MT) % NW,
                               u = pi / (MT * NW);
                const size_t kglob = (size_t)split * GZ_KC + (w * tpw + i * U + u) * 64;
                x_chunk(xpiece_cta(i, u, w, mt), mt, pc >> 3, pc & 7, kglob);
            }
        }
        cp_async_commit(); // every step commits, so group counts stay aligned
    };
    auto fetch = [&](ZBatch<U, RB> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int j = 0; j < RB; j++)
#pragma unroll
                for (int q = 0; q < 3; q++)
                    b.p[u][j][q] = *(const uint4 *)piece(i, u, j, q);
    };
    if (PIPE == 2) {
        if (streamer)
            for (uint32_t i = 0; i + 1 < S; i++)
                issue(i);
    } else if (streamer) {
        load(A, 0); // in flight while x is staged
    }
    if ((XS == 1 || XS == 3) && PIPE == 2) {
        // Plain loads: a cp.async group here would join the weight groups.
        const uint32_t cpr = GZ_KC / 8;
        const uint16_t *xsrc = a.x + (size_t)split * GZ_KC;
        for (uint32_t c = threadIdx.x; c < a.m * cpr; c += NT) {
            const uint32_t tok = c / cpr, ch = c - tok * cpr;
            *(uint4 *)(xs + tok * XSTR + ch * 8) = ld_x16(xsrc + (size_t)tok * a.ldx + ch * 8);
        }
        __syncthreads();
    } else if (XS == 1) {
        const uint32_t cpr = GZ_KC / 8; // 16-byte chunks per token row
        const uint16_t *xsrc = a.x + (size_t)split * GZ_KC;
        for (uint32_t c = threadIdx.x; c < a.m * cpr; c += NT) {
            const uint32_t tok = c / cpr, ch = c - tok * cpr;
            cp_async16(smem_u32(xs + tok * XSTR + ch * 8), xsrc + (size_t)tok * a.ldx + ch * 8);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }

    if (streamer) {
        if (PIPE == 2 && XS == 4) {
            // The x pieces of a batch come from every streamer, and a slot
            // is refilled while other warps may still read it: one barrier
            // of the streaming warps per batch, after this thread's own
            // copies of batch i have landed and before batch i - 1's slot
            // is reused (the exception warp takes no part).
#pragma unroll 1
            for (uint32_t i = 0; i < nbt; i++) {
                cp_async_wait<S - 2>();
                nbar_sync(1, nstream * 32);
                issue(i + S - 1);
                fetch(A, i);
                compute(A, i);
            }
        } else if (PIPE == 2) {
#pragma unroll 1
            for (uint32_t i = 0; i < nbt; i++) {
                issue(i + S - 1);
                cp_async_wait<S - 1>(); // batch i has landed
                if (XS == 2)
                    __syncwarp(); // x chunks were copied by other lanes
                fetch(A, i);
                compute(A, i);
            }
        } else if (PIPE) {
            uint32_t i = 0;
            for (;;) {
                if (i + 1 < nbt)
                    load(B, i + 1);
                compute(A, i);
                if (++i >= nbt)
                    break;
                if (i + 1 < nbt)
                    load(A, i + 1);
                compute(B, i);
                if (++i >= nbt)
                    break;
            }
        } else {
            compute(A, 0);
#pragma unroll 1
            for (uint32_t i = 1; i < nbt; i++) {
                load(A, i);
                compute(A, i);
            }
        }
        if (PIPE == 2) {
            // The partials overwrite this warp's ring: every copy has
            // landed (the groups past the last batch are empty) and every
            // lane has read its last batch.
            cp_async_wait<0>();
            __syncwarp();
        }
#pragma unroll
        for (int j = 0; j < RB; j++)
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                float *rw = redw(warp) + (size_t)j * 16 * RS;
                rw[g * RS + mt * 8 + 2 * t] = acc[j][mt][0];
                rw[g * RS + mt * 8 + 2 * t + 1] = acc[j][mt][1];
                rw[(g + 8) * RS + mt * 8 + 2 * t] = acc[j][mt][2];
                rw[(g + 8) * RS + mt * 8 + 2 * t + 1] = acc[j][mt][3];
            }
    } else {
        // The exception warp. Every step is one parallel round of loads: a
        // chain of dependent global loads here would be the CTA's critical
        // path, since DRAM latency is long while the other warps saturate
        // it. With the per-block slot table (pj_eng_layer_init) the entries
        // come in the first round, issued with the streaming warps' first
        // batch; without it (or when a block overflows its slots) the list
        // is found through blk_exc, one round later.
        // x of every (exception, token) pair into e_x. The loads of a round
        // (XB per lane) are all issued before any is used, so a round costs
        // one memory latency; one load-then-store per pair made a chain of
        // ne * m / 32 latencies, which from m = 8 on outlasted the streaming
        // warps (kernels/NOTES.md, round 11, visit 2).
        auto gather_x = [&](uint32_t ne) {
            // 8 where registers are tight (NW = 16: 96) or one round of 8 covers
            // the CTA (m <= 8: about 31 entries x 8 tokens).
            constexpr int XB = NW == 16 || MT == 1 ? 8 : 16;
            // A heavy CTA (more pairs than one such round: a block of 117
            // entries at m = 8 is 936) copies every pair's x at once with
            // 4-byte cp.async (the aligned word holding the bf16) and
            // converts its own words when they have landed: one memory
            // latency instead of one per round of XB, with no registers
            // held per pair (register arrays of 16 or 32 took the kernel
            // from 56 to 83-168 registers and qkv_gate's 288 CTAs past
            // one wave; kernels/NOTES.md, round 37).
            const uint32_t n = ne * a.m;
            if (n > 32 * XB) {
                // Pair i = e * m + tok; a lane's pairs step by 32 = q * m + r,
                // so entry and token advance by q and r, carrying once.
                const uint32_t q = 32 / a.m, r = 32 - q * a.m;
                const uint32_t e0 = lane / a.m, t0 = lane - e0 * a.m;
                uint32_t e = e0, tok = t0;
                for (uint32_t i = lane; i < n; i += 32) {
                    const uint32_t col = zx.e_rk[e] & 0x0ffffffeu;
                    cp_async4(smem_u32(zx.e_x + e * MTOK + tok), a.x + (size_t)tok * a.ldx + col);
                    e += q;
                    tok += r;
                    if (tok >= a.m) {
                        tok -= a.m;
                        e++;
                    }
                }
                cp_async_commit();
                cp_async_wait<0>();
                e = e0;
                tok = t0;
                for (uint32_t i = lane; i < n; i += 32) {
                    float *d = zx.e_x + e * MTOK + tok;
                    const uint32_t w = __float_as_uint(*d);
                    *d = bf2f((uint16_t)(zx.e_rk[e] & 1u ? w >> 16 : w));
                    e += q;
                    tok += r;
                    if (tok >= a.m) {
                        tok -= a.m;
                        e++;
                    }
                }
                return;
            }
            for (uint32_t i0 = lane; i0 < n; i0 += 32 * XB) {
                uint32_t v[XB], dst[XB];
#pragma unroll
                for (int j = 0; j < XB; j++) {
                    const uint32_t i = i0 + 32 * j;
                    if (i < n) {
                        const uint32_t e = i / a.m, tok = i - e * a.m;
                        dst[j] = e * MTOK + tok;
                        v[j] = a.x[(size_t)tok * a.ldx + (zx.e_rk[e] & 0x0fffffffu)];
                    }
                }
#pragma unroll
                for (int j = 0; j < XB; j++)
                    if (i0 + 32 * j < n)
                        zx.e_x[dst[j]] = bf2f((uint16_t)v[j]);
            }
        };
        bool done = false;
        if (a.z.zx_rk) {
            constexpr uint32_t CAP = PJ_GEMVZ_XCAP;
            constexpr int IT = 4 * CAP / 32; // NB <= 4
            uint32_t cntv = 0;
            if (lane < NB && rb0 + lane < a.nblk_all)
                cntv = a.z.zx_n[rb0 + lane];
            uint32_t rk[IT];
            float c1[IT], c2[IT];
#pragma unroll
            for (int it = 0; it < IT; it++) {
                const uint32_t idx = it * 32 + lane, blk = idx / CAP;
                rk[it] = 0xffffffffu;
                c1[it] = c2[it] = 0.f;
                if (blk < NB && rb0 + blk < a.nblk_all) {
                    const size_t o =
                        (size_t)rb0 * CAP + idx; // slots of consecutive blocks are adjacent
                    rk[it] = a.z.zx_rk[o];
                    c1[it] = a.z.zx_c1[o];
                    c2[it] = a.z.zx_c2[o];
                }
            }
            // Every lane has each block's start in the CTA's list (bnd) and
            // which blocks hold more than the first table's CAP (heavy; their
            // entries CAP .. 2 CAP - 1 are in the overflow table).
            uint32_t tot = 0, over = 0, heavy = 0, bnd[4];
#pragma unroll
            for (int qq = 0; qq < 4; qq++) {
                const uint32_t c = __shfl_sync(0xffffffffu, cntv, qq);
                if (lane == 0)
                    zx.bnd[qq] = tot;
                bnd[qq] = tot;
                tot += c;
                over |= c > 2 * CAP || (c > CAP && !a.z.zx2_rk);
                heavy |= (uint32_t)(c > CAP) << qq;
            }
            if (lane == 0)
                zx.bnd[4] = tot;
            if (!over && tot <= PJ_GEMVZ_ECAP) {
                // A block's entries fill its slots from 0 in list order, so
                // an entry's place is its block's start plus its slot.
#pragma unroll
                for (int it = 0; it < IT; it++) {
                    const uint32_t idx = it * 32 + lane, blk = idx / CAP;
                    const uint32_t pos = (blk == 0   ? bnd[0]
                                          : blk == 1 ? bnd[1]
                                          : blk == 2 ? bnd[2]
                                                     : bnd[3]) +
                                         idx % CAP;
                    if (rk[it] != 0xffffffffu) {
                        zx.e_rk[pos] = rk[it];
                        zx.e_c1[pos] = c1[it];
                        zx.e_c2[pos] = c2[it];
                    }
                }
                // The rare block past CAP: one more round, on its CTA only.
#pragma unroll
                for (int qq = 0; qq < 4; qq++) {
                    if (!((heavy >> qq) & 1))
                        continue;
                    const uint32_t c = __shfl_sync(0xffffffffu, cntv, qq) - CAP;
                    const size_t o = (size_t)(rb0 + qq) * CAP;
                    for (uint32_t j = lane; j < c; j += 32) {
                        zx.e_rk[bnd[qq] + CAP + j] = a.z.zx2_rk[o + j];
                        zx.e_c1[bnd[qq] + CAP + j] = a.z.zx2_c1[o + j];
                        zx.e_c2[bnd[qq] + CAP + j] = a.z.zx2_c2[o + j];
                    }
                }
                __syncwarp();
                for (uint32_t rr = lane; rr < NB * 16; rr += 32) {
                    const uint32_t b0 = zx.bnd[rr / 16], b1 = zx.bnd[rr / 16 + 1], rw = rr % 16;
                    uint32_t below = 0;
                    for (uint32_t e = b0; e < b1; e++)
                        below += (zx.e_rk[e] >> 28) < rw;
                    zx.rowst[rr] = (int)(b0 + below);
                }
                if (lane == 0) {
                    zx.rowst[NB * 16] = (int)tot;
                    flags[1] = 0;
                }
                gather_x(tot);
                done = true;
            }
            __syncwarp();
        }
        if (!done) {
            if (lane <= NB)
                zx.bnd[lane] = a.z.blk_exc[min(rb0 + lane, a.nblk_all)];
            __syncwarp();
            const uint32_t e_beg = zx.bnd[0];
            const uint32_t ne = zx.bnd[NB] - e_beg;
            const bool glob = ne > PJ_GEMVZ_ECAP;
            if (!glob)
                for (uint32_t e = lane; e < ne; e += 32) {
                    const pj_z12_exc ex = a.z.exc[e_beg + e];
                    zx.e_rk[e] = ex.rk;
                    zx.e_c1[e] = ex.c1;
                    zx.e_c2[e] = ex.c2;
                }
            __syncwarp();
            for (uint32_t rr = lane; rr < NB * 16; rr += 32) {
                const uint32_t b0 = zx.bnd[rr / 16], b1 = zx.bnd[rr / 16 + 1], rw = rr % 16;
                uint32_t below = 0;
                if (!glob)
                    for (uint32_t e = b0 - e_beg; e < b1 - e_beg; e++)
                        below += (zx.e_rk[e] >> 28) < rw;
                else
                    for (uint32_t e = b0; e < b1; e++)
                        below += (a.z.exc[e].rk >> 28) < rw;
                zx.rowst[rr] = (int)(b0 - e_beg + below);
            }
            if (lane == 0) {
                zx.rowst[NB * 16] = (int)ne;
                flags[1] = glob;
            }
            if (!glob)
                gather_x(ne);
        }
    }
    __syncthreads();

    // NB = R * RB is 1, 2 or 4, so an output's row and token come from a
    // mask and a shift; the run-time division they replace was ~4 % of the
    // m = 16 kernel's stall samples (kernels/NOTES.md, round 12).
    const uint32_t nrow = NB * 16, nout = nrow * MTOK, lgrow = __ffs(nrow) - 1;
    auto finish = [&](float s, uint32_t idx) {
        const uint32_t rr = idx & (nrow - 1), tok = idx >> lgrow;
        const uint32_t grow = rb0 * 16 + rr;
        if (grow >= a.n || tok >= a.m)
            return;
        const int e1 = zx.rowst[rr + 1];
        if (flags[1]) {
            const uint32_t e_beg = zx.bnd[0];
            for (int e = zx.rowst[rr]; e < e1; e++) {
                const pj_z12_exc ex = a.z.exc[e_beg + e];
                const float v = bf2f(a.x[(size_t)tok * a.ldx + (ex.rk & 0x0fffffffu)]);
                s = __fadd_rn(s, __fmul_rn(ex.c1, v));
                s = __fadd_rn(s, __fmul_rn(ex.c2, v));
            }
        } else {
            // Unrolled so that the shared-memory reads of the next entries
            // can issue before this one's adds (a row of a heavy block holds
            // up to ~100 entries); the sum order is the list's either way.
#pragma unroll 4
            for (int e = zx.rowst[rr]; e < e1; e++) {
                const float v = zx.e_x[e * MTOK + tok];
                s = __fadd_rn(s, __fmul_rn(zx.e_c1[e], v));
                s = __fadd_rn(s, __fmul_rn(zx.e_c2[e], v));
            }
        }
        a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
    };
    // Row rr of the CTA belongs to group (rr / 16) / RB, its block (rr / 16) % RB.
    auto warp_sum = [&](uint32_t idx) {
        const uint32_t rr = idx & (nrow - 1), tok = idx >> lgrow;
        const uint32_t blk = rr / 16, grp = blk / RB, j = blk % RB;
        const size_t o = (size_t)j * 16 * RS + (rr % 16) * RS + tok;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++)
            s += redw(grp * NW + w)[o];
        return s;
    };

    if constexpr (CL) {
        // Every rank holds the same row blocks' exception lists (its own
        // exception warp built them), so any rank can finish any output: the
        // partials meet by push (pjdev.cuh) at the output's owner.
        __shared__ float recv[4 * 16 * MTOK + 16]; // NB <= 4, ks <= 16
        cl_reduce(recv, nout, GZ_KS, cg::this_cluster().block_rank(), threadIdx.x, NT, warp_sum,
                  [&](uint32_t idx, float s) { finish(s, idx); });
        return;
    }
    if (GZ_KS == 1) {
        for (uint32_t idx = threadIdx.x; idx < nout; idx += NT)
            finish(warp_sum(idx), idx);
        return;
    }
    const size_t pbase = (size_t)GZ_SLOT * GZ_KS * nout;
    for (uint32_t idx = threadIdx.x; idx < nout; idx += NT)
        a.ws[pbase + (size_t)split * nout + idx] = warp_sum(idx);
    if (!splitk_arrive_last(a.cnt + GZ_SLOT, GZ_KS, flags))
        return;
    for (uint32_t idx = threadIdx.x; idx < nout; idx += NT) {
        float s = 0.f;
        for (uint32_t j = 0; j < GZ_KS; j++)
            s += ld_cg_f32(a.ws + pbase + (size_t)j * nout + idx);
        finish(s, idx);
    }
}
#undef GZ_GRP
#undef GZ_SPLIT
#undef GZ_KS
#undef GZ_KC
#undef GZ_SLOT
