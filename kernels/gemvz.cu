// gemvz.cu — GEMV over z12 weights (kernels/zfmt.h), m <= 32.
//
// A CTA holds R row blocks; each row block is streamed by NW warps that
// split the CTA's K range in whole 16 x 64 tiles. A lane reads its three
// 16-byte pieces of a tile (low bytes of elements 0..15, 16..31, nibbles),
// rebuilds the bf16 A fragments with byte arithmetic (zfmt.h's H0/H1 and
// four byte permutes per k16 step) and feeds mma.m16n8k16. The format's k
// order is the mma's own, so x must come as the standard B fragment (pairs
// of k at 2t and 2t + 8): either staged in shared memory for the CTA's K
// range and read with ldmatrix (XS = 1), or read as 4-byte pairs from
// global/L1 (XS = 0).
//
// One extra warp prepares the exceptions while the others stream: it copies
// the CTA's entries and the x values they multiply into shared memory and
// finds where each row's run starts. At the end, the thread that owns
// output (row, token) adds c1*x and then c2*x of each exception of the row,
// in list order, to the finished sum (warp order, then split order): the
// sum order is fixed, so the result is deterministic, and for a one-hot x
// the decoded value is cancelled and restored exactly.
#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"

static __host__ __device__ inline size_t al16(size_t v)
{
    return (v + 15) & ~(size_t)15;
}

struct GemvzSmem {
    size_t xs, red, e_rk, e_c1, e_c2, e_x, rowst, flags, total;
};

static __host__ __device__ inline GemvzSmem gemvz_layout(int nw, int mt, int xs, uint32_t r,
                                                         uint32_t kc)
{
    const int mtok = mt * 8;
    GemvzSmem L;
    size_t off = 0;
    L.xs = off;
    if (xs)
        off += al16((size_t)mtok * (kc + 8) * 2);
    L.red = off;
    off += al16((size_t)r * nw * 16 * (mtok + 1) * 4);
    L.e_rk = off;
    off += al16(PJ_GEMVZ_ECAP * 4);
    L.e_c1 = off;
    off += al16(PJ_GEMVZ_ECAP * 4);
    L.e_c2 = off;
    off += al16(PJ_GEMVZ_ECAP * 4);
    L.e_x = off;
    off += al16((size_t)PJ_GEMVZ_ECAP * mtok * 4);
    L.rowst = off;
    off += al16((r * 16 + 1) * 4);
    L.flags = off;
    off += 16;
    L.total = off;
    return L;
}

size_t gemvz_smem(int nw, int mt, int xs, uint32_t r, uint32_t kc)
{
    return gemvz_layout(nw, mt, xs, r, kc).total;
}

template <int U> struct ZBatch {
    uint4 p[U][3];
};

// Threads: R * NW streaming warps + 1. NW = 16 takes R = 1 (544 threads);
// NW = 4 and 8 take R * NW <= 8 (288 threads), which leaves them up to 168
// registers per thread instead of 96.
template <int NW> struct GemvzBounds {
    static constexpr int threads = NW == 16 ? 544 : 288;
};

template <int NW, int U, int MT, int PIPE, int XS>
__global__ void __launch_bounds__(GemvzBounds<NW>::threads) gemvz_kernel(const GemvzArgs a)
{
    constexpr int MTOK = MT * 8;
    constexpr int RS = MTOK + 1;
    extern __shared__ __align__(16) unsigned char sm[];
    const uint32_t R = a.r;
    const GemvzSmem L = gemvz_layout(NW, MT, XS, R, a.kc);
    uint16_t *xs = (uint16_t *)(sm + L.xs);
    float *red = (float *)(sm + L.red);
    uint32_t *e_rk = (uint32_t *)(sm + L.e_rk);
    float *e_c1 = (float *)(sm + L.e_c1);
    float *e_c2 = (float *)(sm + L.e_c2);
    float *e_x = (float *)(sm + L.e_x);
    int *rowst = (int *)(sm + L.rowst);
    int *flags = (int *)(sm + L.flags);

    const uint32_t nstream = R * NW;
    const uint32_t NT = nstream * 32 + 32;
    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g = lane >> 2, t = lane & 3;
    const uint32_t rb0 = blockIdx.x * R, split = blockIdx.y;
    const bool streamer = warp < nstream;
    const uint32_t q = warp / NW, wq = warp % NW;
    const uint32_t rb = min(rb0 + q, a.nblk - 1);
    const uint32_t tpw = a.kc / (64 * NW); // tiles per warp, a multiple of U
    const uint32_t ktl0 = wq * tpw;        // first tile of this warp, within the split
    const uint32_t kt0 = split * (a.kc / 64) + ktl0;
    const uint8_t *tp = a.tiles + ((size_t)rb * a.kt_total + kt0) * PJ_Z12_TILE_BYTES + lane * 16;
    const uint32_t B4 = a.base * 0x01010101u;
    const uint32_t XSTR = a.kc + 8; // padded row: ldmatrix rows fall in distinct banks

    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

    auto load = [&](ZBatch<U> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint8_t *pp = tp + ((size_t)i * U + u) * PJ_Z12_TILE_BYTES;
            b.p[u][0] = ld_stream16(pp);
            b.p[u][1] = ld_stream16(pp + PJ_Z12_PLANE_BYTES);
            b.p[u][2] = ld_stream16(pp + 2 * PJ_Z12_PLANE_BYTES);
        }
    };
    auto compute = [&](const ZBatch<U> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t klocal = (ktl0 + i * U + u) * 64;
            const size_t kglob = (size_t)split * a.kc + klocal;
            uint32_t bx[MT][8];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                if (XS) {
                    uint32_t r4[4];
                    const uint32_t row = mt * 8 + (lane & 7);
                    const uint32_t base =
                        smem_u32(xs) + (row * XSTR + klocal + (lane >> 3) * 8) * 2;
                    ldmatrix_x4(r4, base);
                    bx[mt][0] = r4[0];
                    bx[mt][1] = r4[1];
                    bx[mt][2] = r4[2];
                    bx[mt][3] = r4[3];
                    ldmatrix_x4(r4, base + 64);
                    bx[mt][4] = r4[0];
                    bx[mt][5] = r4[1];
                    bx[mt][6] = r4[2];
                    bx[mt][7] = r4[3];
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
            for (int s = 0; s < 4; s++) {
                const uint4 &lo = b.p[u][s >> 1];
                const uint32_t L0 = (s & 1) ? lo.z : lo.x;
                const uint32_t L1 = (s & 1) ? lo.w : lo.y;
                const uint32_t N =
                    s == 0 ? b.p[u][2].x
                           : (s == 1 ? b.p[u][2].y : (s == 2 ? b.p[u][2].z : b.p[u][2].w));
                const uint32_t H0 = ((N & 0x07070707u) + B4) | ((N << 4) & 0x80808080u);
                const uint32_t H1 = (((N >> 4) & 0x07070707u) + B4) | (N & 0x80808080u);
                const uint32_t a0 = prmt(L0, H0, 0x5140), a1 = prmt(L0, H0, 0x7362);
                const uint32_t a2 = prmt(L1, H1, 0x5140), a3 = prmt(L1, H1, 0x7362);
#pragma unroll
                for (int mt = 0; mt < MT; mt++)
                    mma_bf16(acc[mt], a0, a1, a2, a3, bx[mt][2 * s], bx[mt][2 * s + 1]);
            }
        }
    };

    const uint32_t nb = tpw / U;
    ZBatch<U> A, B;
    if (streamer)
        load(A, 0); // in flight while x is staged
    if (XS) {
        const uint32_t cpr = a.kc / 8; // 16-byte chunks per token row
        const uint16_t *xsrc = a.x + (size_t)split * a.kc;
        for (uint32_t c = threadIdx.x; c < a.m * cpr; c += NT) {
            const uint32_t tok = c / cpr, ch = c - tok * cpr;
            cp_async16(smem_u32(xs + tok * XSTR + ch * 8), xsrc + (size_t)tok * a.ldx + ch * 8);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }

    if (streamer) {
        if (PIPE) {
            uint32_t i = 0;
            for (;;) {
                if (i + 1 < nb)
                    load(B, i + 1);
                compute(A, i);
                if (++i >= nb)
                    break;
                if (i + 1 < nb)
                    load(A, i + 1);
                compute(B, i);
                if (++i >= nb)
                    break;
            }
        } else {
            compute(A, 0);
#pragma unroll 1
            for (uint32_t i = 1; i < nb; i++) {
                load(A, i);
                compute(A, i);
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float *rw = red + (size_t)warp * 16 * RS;
            rw[g * RS + mt * 8 + 2 * t] = acc[mt][0];
            rw[g * RS + mt * 8 + 2 * t + 1] = acc[mt][1];
            rw[(g + 8) * RS + mt * 8 + 2 * t] = acc[mt][2];
            rw[(g + 8) * RS + mt * 8 + 2 * t + 1] = acc[mt][3];
        }
    } else {
        // The exception warp.
        const uint32_t rbe = min(rb0 + R, a.nblk_all);
        const uint32_t e_beg = a.blk_exc[rb0];
        const uint32_t ne = a.blk_exc[rbe] - e_beg;
        const bool glob = ne > PJ_GEMVZ_ECAP;
        for (uint32_t rr = lane; rr < R * 16; rr += 32) {
            const uint32_t blk = rb0 + rr / 16, rw = rr % 16;
            if (blk >= a.nblk_all) {
                rowst[rr] = (int)ne;
                continue;
            }
            const uint32_t b0 = a.blk_exc[blk], b1 = a.blk_exc[blk + 1];
            uint32_t below = 0;
            for (uint32_t e = b0; e < b1; e++)
                below += (a.exc[e].rk >> 28) < rw;
            rowst[rr] = (int)(b0 - e_beg + below);
        }
        if (lane == 0) {
            rowst[R * 16] = (int)ne;
            flags[1] = glob;
        }
        if (!glob) {
            for (uint32_t e = lane; e < ne; e += 32) {
                const pj_z12_exc ex = a.exc[e_beg + e];
                e_rk[e] = ex.rk;
                e_c1[e] = ex.c1;
                e_c2[e] = ex.c2;
                const uint32_t kk = ex.rk & 0x0fffffffu;
                for (uint32_t tok = 0; tok < a.m; tok++)
                    e_x[e * MTOK + tok] = bf2f(a.x[(size_t)tok * a.ldx + kk]);
            }
        }
    }
    __syncthreads();

    const uint32_t nrow = R * 16, nout = nrow * MTOK;
    const uint32_t e_beg = a.blk_exc[rb0];
    auto finish = [&](float s, uint32_t idx) {
        const uint32_t rr = idx % nrow, tok = idx / nrow;
        const uint32_t grow = rb0 * 16 + rr;
        if (grow >= a.n || tok >= a.m || rb0 + rr / 16 >= a.nblk)
            return;
        const int e1 = rowst[rr + 1];
        if (flags[1]) {
            for (int e = rowst[rr]; e < e1; e++) {
                const pj_z12_exc ex = a.exc[e_beg + e];
                const float v = bf2f(a.x[(size_t)tok * a.ldx + (ex.rk & 0x0fffffffu)]);
                s = __fadd_rn(s, __fmul_rn(ex.c1, v));
                s = __fadd_rn(s, __fmul_rn(ex.c2, v));
            }
        } else {
            for (int e = rowst[rr]; e < e1; e++) {
                const float v = e_x[e * MTOK + tok];
                s = __fadd_rn(s, __fmul_rn(e_c1[e], v));
                s = __fadd_rn(s, __fmul_rn(e_c2[e], v));
            }
        }
        a.y[(size_t)tok * a.ldy + grow] = f2bf(s);
    };
    auto warp_sum = [&](uint32_t idx) {
        const uint32_t rr = idx % nrow, tok = idx / nrow;
        const float *rp = red + (size_t)(rr / 16) * NW * 16 * RS + (rr % 16) * RS + tok;
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < NW; w++)
            s += rp[w * 16 * RS];
        return s;
    };

    if (a.ks == 1) {
        for (uint32_t idx = threadIdx.x; idx < nout; idx += NT)
            finish(warp_sum(idx), idx);
        return;
    }
    const size_t pbase = (size_t)blockIdx.x * a.ks * nout;
    for (uint32_t idx = threadIdx.x; idx < nout; idx += NT)
        a.ws[pbase + (size_t)split * nout + idx] = warp_sum(idx);
    if (!splitk_arrive_last(a.cnt + blockIdx.x, a.ks, flags))
        return;
    for (uint32_t idx = threadIdx.x; idx < nout; idx += NT) {
        float s = 0.f;
        for (uint32_t j = 0; j < a.ks; j++)
            s += ld_cg_f32(a.ws + pbase + (size_t)j * nout + idx);
        finish(s, idx);
    }
}

template <int NW, int U, int MT, int P> static GemvzFn gz_pick_xs(int xs)
{
    return xs ? &gemvz_kernel<NW, U, MT, P, 1> : &gemvz_kernel<NW, U, MT, P, 0>;
}
template <int NW, int U, int MT> static GemvzFn gz_pick_p(int pipe, int xs)
{
    return pipe ? gz_pick_xs<NW, U, MT, 1>(xs) : gz_pick_xs<NW, U, MT, 0>(xs);
}
template <int NW, int U> static GemvzFn gz_pick_mt(int mt, int pipe, int xs)
{
    switch (mt) {
    case 1:
        return gz_pick_p<NW, U, 1>(pipe, xs);
    case 2:
        return gz_pick_p<NW, U, 2>(pipe, xs);
    case 4:
        return gz_pick_p<NW, U, 4>(pipe, xs);
    }
    return nullptr;
}
template <int NW> static GemvzFn gz_pick_u(int u, int mt, int pipe, int xs)
{
    switch (u) {
    case 1:
        return gz_pick_mt<NW, 1>(mt, pipe, xs);
    case 2:
        return gz_pick_mt<NW, 2>(mt, pipe, xs);
    case 4:
        return gz_pick_mt<NW, 4>(mt, pipe, xs);
    }
    return nullptr;
}

GemvzFn gemvz_pick(int nw, int u, int mt, int pipe, int xs)
{
    switch (nw) {
    case 4:
        return gz_pick_u<4>(u, mt, pipe, xs);
    case 8:
        return gz_pick_u<8>(u, mt, pipe, xs);
    case 16:
        return gz_pick_u<16>(u, mt, pipe, xs);
    }
    return nullptr;
}
