// gemvb.cu — the balanced GEMV (pipe = 4 of gemv, gemvz and router), m <= 32.
//
// Why: the row-block GEMVs give each CTA whole row blocks, so the grid is
// ceil(n / 16) x ks CTAs over 132 SMs (288 for qkv_gate: some SMs carry
// three CTAs, most two) and the launch ends with a tail in which a few SMs
// still stream while the rest idle; ncu saw 50-65 % of DRAM peak averaged
// over the launch. Here the work is cut into units of 16 rows x 64 k and
// every warp of a persistent grid (CTAs per SM x SMs) streams one contiguous
// run of units, all runs equal to within one unit, so every SM reads the
// same bytes and finishes at the same time.
//
// A run crosses row blocks; each (row block, warp) piece leaves its 16 x m
// fp32 partial in the workspace, and the warp whose piece of a row block
// arrives last (a counter per block) sums the block's partials in a fixed
// order (panel, then warp), applies the z12 exceptions in list order and
// stores bf16. The order never depends on timing: the result is
// deterministic, and a one-hot x through an exception column is exact.
//
// K may be cut into P panels (knob ks): each panel has its own CTAs and the
// CTA stages only its panel of x (m x K / P bf16) in shared memory; x is
// read from there by ldmatrix (z12: the format's k order is the mma's) or
// as 16-byte pieces at the GEMV's permuted k (bf16: lane (g, t) holds 8
// consecutive k of rows g and g + 8, and of token g at the same k).
//
// Loads: a warp keeps two batches of U units in flight (registers), the
// first two issued before x is staged.
#include "kernels/engint.cuh"
#include "kernels/pjdev.cuh"
#include "kernels/z12dev.cuh"

template <int KIND> struct GbRegs {
    // 16-byte loads per lane per unit: three z12 planes, or rows g and g + 8
    // at two 32-k chunks (x2 for the router's lo).
    static constexpr int n = KIND == PJ_GB_Z12 ? 3 : (KIND == PJ_GB_BF16 ? 4 : 8);
};

template <int KIND, int U> struct GbBatch {
    uint4 v[U][GbRegs<KIND>::n];
};

// The warp that owns unit u of a panel (runs are [w T / W, (w + 1) T / W)).
static __device__ __forceinline__ uint32_t gb_owner(uint32_t u, uint32_t W, uint32_t T)
{
    return (uint32_t)(((uint64_t)(u + 1) * W - 1) / T);
}

size_t gemvb_smem(uint32_t m, uint32_t K, uint32_t panels)
{
    return (size_t)m * (K / panels + 8) * 2;
}

template <int KIND, int NW, int U, int MT>
__global__ void __launch_bounds__(NW * 32) gemvb_kernel(const GemvbArgs a)
{
    constexpr int MTOK = MT * 8;
    constexpr int NR = GbRegs<KIND>::n;
    extern __shared__ __align__(16) unsigned char sm[];
    uint16_t *xs = (uint16_t *)sm;

    const uint32_t lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const uint32_t g = lane >> 2, t = lane & 3;
    const uint32_t P = a.panels, cpp = a.ctas_pp;
    const uint32_t p = blockIdx.x / cpp, cl = blockIdx.x - p * cpp;
    const uint32_t KTP = a.kt_total / P, KP = KTP * 64;
    const uint32_t T = a.nblk * KTP, W = cpp * NW, w = cl * NW + warp;
    const uint32_t u0 = (uint32_t)((uint64_t)w * T / W);
    const uint32_t u1 = (uint32_t)((uint64_t)(w + 1) * T / W);
    const uint32_t XSTR = KP + 8; // padded: ldmatrix rows fall in distinct banks
    const uint32_t nbt = (u1 - u0 + U - 1) / U;
    const uint32_t B4 = a.z.base * 0x01010101u;

    auto load_unit = [&](uint4(&v)[NR], uint32_t uu) {
        const uint32_t rb = uu / KTP, kt = p * KTP + (uu - rb * KTP);
        if constexpr (KIND == PJ_GB_Z12) {
            const uint8_t *pp =
                a.z.tiles + ((size_t)rb * a.kt_total + kt) * PJ_Z12_TILE_BYTES + lane * 16;
            v[0] = ld_stream16(pp);
            v[1] = ld_stream16(pp + PJ_Z12_PLANE_BYTES);
            v[2] = ld_stream16(pp + 2 * PJ_Z12_PLANE_BYTES);
        } else {
            // Rows past N read row N - 1: their outputs are never stored.
            const uint32_t r0 = min(rb * 16 + g, a.N - 1), r1 = min(rb * 16 + g + 8, a.N - 1);
            const size_t k = (size_t)kt * 64 + t * 8;
            const size_t o0 = (size_t)r0 * a.ldw + k, o1 = (size_t)r1 * a.ldw + k;
            v[0] = ld_stream16(a.w0 + o0);
            v[1] = ld_stream16(a.w0 + o1);
            v[2] = ld_stream16(a.w0 + o0 + 32);
            v[3] = ld_stream16(a.w0 + o1 + 32);
            if constexpr (KIND == PJ_GB_DUAL) {
                v[4] = ld_stream16(a.w1 + o0);
                v[5] = ld_stream16(a.w1 + o1);
                v[6] = ld_stream16(a.w1 + o0 + 32);
                v[7] = ld_stream16(a.w1 + o1 + 32);
            }
        }
    };

    float acc[MT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
        acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;

    auto compute_unit = [&](const uint4(&v)[NR], uint32_t uu) {
        const uint32_t rb = uu / KTP, kl = (uu - rb * KTP) * 64; // k within the panel
        if constexpr (KIND == PJ_GB_Z12) {
            uint32_t bx[MT][8];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                const uint32_t row = min(mt * 8 + (lane & 7), a.m - 1);
                const uint32_t base = smem_u32(xs) + (row * XSTR + kl + (lane >> 3) * 8) * 2;
                z12_ldsm_b64(bx[mt], base, base + 64);
            }
            z12_tile_mma<MT>(acc, v, bx, B4);
        } else {
#pragma unroll
            for (int c = 0; c < 2; c++)
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    const uint32_t tok = min(mt * 8 + g, a.m - 1);
                    const uint4 xv = *(const uint4 *)(xs + tok * XSTR + kl + c * 32 + t * 8);
                    const uint4 wa = v[2 * c], wb = v[2 * c + 1];
                    mma_bf16(acc[mt], wa.x, wb.x, wa.y, wb.y, xv.x, xv.y);
                    mma_bf16(acc[mt], wa.z, wb.z, wa.w, wb.w, xv.z, xv.w);
                    if constexpr (KIND == PJ_GB_DUAL) {
                        const uint4 wc = v[4 + 2 * c], wd = v[5 + 2 * c];
                        mma_bf16(acc[mt], wc.x, wd.x, wc.y, wd.y, xv.x, xv.y);
                        mma_bf16(acc[mt], wc.z, wd.z, wc.w, wd.w, xv.z, xv.w);
                    }
                }
        }
    };

    const uint32_t rb_first = u0 / KTP;
    uint32_t cur = rb_first;
    // Leave this warp's partial of row block rb. Arrival is counted after
    // the main loop: a fence and an atomic round trip here would stall the
    // warp with its next batch not yet issued.
    auto flush = [&](uint32_t rb) {
        float *dst = a.ws + (size_t)(p * (a.nblk + W) + rb + w) * 16 * MTOK;
        // Token-major (tok * 16 + row): the finisher's loads are coalesced.
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            float *d0 = dst + (mt * 8 + 2 * t) * 16 + g;
            d0[0] = acc[mt][0];
            d0[16] = acc[mt][1];
            d0[8] = acc[mt][2];
            d0[24] = acc[mt][3];
            acc[mt][0] = acc[mt][1] = acc[mt][2] = acc[mt][3] = 0.f;
        }
    };

    GbBatch<KIND, U> A, B;
    auto load = [&](GbBatch<KIND, U> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t uu = u0 + i * U + u;
            if (uu < u1)
                load_unit(b.v[u], uu);
        }
    };
    auto compute = [&](const GbBatch<KIND, U> &b, uint32_t i) {
#pragma unroll
        for (int u = 0; u < U; u++) {
            const uint32_t uu = u0 + i * U + u;
            if (uu < u1) {
                const uint32_t rb = uu / KTP;
                if (rb != cur) {
                    flush(cur);
                    cur = rb;
                }
                compute_unit(b.v[u], uu);
            }
        }
    };

    if (nbt > 0)
        load(A, 0);
    if (nbt > 1)
        load(B, 1);
    {
        const uint32_t cpr = KP / 8; // 16-byte pieces per token row
        const uint16_t *src = a.x + (size_t)p * KP;
        for (uint32_t c = threadIdx.x; c < a.m * cpr; c += NW * 32) {
            const uint32_t tok = c / cpr, ch = c - tok * cpr;
            cp_async16(smem_u32(xs + tok * XSTR + ch * 8), src + (size_t)tok * a.ldx + ch * 8);
        }
        cp_async_commit();
        cp_async_wait<0>();
        __syncthreads();
    }
    for (uint32_t i = 0; i < nbt;) {
        compute(A, i);
        if (++i >= nbt)
            break;
        if (i + 1 < nbt)
            load(A, i + 1);
        compute(B, i);
        if (++i >= nbt)
            break;
        if (i + 1 < nbt)
            load(B, i + 1);
    }
    if (u0 >= u1)
        return;
    flush(cur);

    // One fence for all of this warp's partials, then one arrival per piece
    // (lane j: row block rb_first + j), all in flight at once.
    __threadfence();
    __syncwarp();
    const uint32_t npieces = cur - rb_first + 1; // <= 32 (engine check)
    bool last = false;
    if (lane < npieces) {
        const uint32_t rb = rb_first + lane;
        const uint32_t segs =
            P * (gb_owner(rb * KTP + KTP - 1, W, T) - gb_owner(rb * KTP, W, T) + 1);
        last = atomicAdd(a.cnt + rb, 1u) == segs - 1;
        if (last)
            a.cnt[rb] = 0; // no other piece of rb arrives in this launch
    }
    uint32_t finmask = __ballot_sync(0xffffffffu, last);
    if (!finmask)
        return;
    __threadfence();

    // Finish the row blocks whose last piece was this warp's.
    while (finmask) {
        const uint32_t rb = rb_first + (uint32_t)(__ffs(finmask) - 1);
        finmask &= finmask - 1;
        // The block's exception slots, two per lane, loaded in one round with
        // the partials below (a loop of dependent loads here would be the
        // launch's last microseconds).
        uint32_t nx = 0, rkA = 0xffffffffu, rkB = 0xffffffffu;
        float c1A = 0.f, c2A = 0.f, c1B = 0.f, c2B = 0.f;
        bool table = false;
        if constexpr (KIND == PJ_GB_Z12) {
            if (a.z.zx_rk) {
                const size_t o = (size_t)rb * PJ_GEMVZ_XCAP + lane;
                nx = a.z.zx_n[rb];
                rkA = a.z.zx_rk[o];
                c1A = a.z.zx_c1[o];
                c2A = a.z.zx_c2[o];
                rkB = a.z.zx_rk[o + 32];
                c1B = a.z.zx_c1[o + 32];
                c2B = a.z.zx_c2[o + 32];
                table = nx <= PJ_GEMVZ_XCAP;
            }
        }
        const uint32_t wf = gb_owner(rb * KTP, W, T), wl = gb_owner(rb * KTP + KTP - 1, W, T);
        // Lane's outputs: idx = lane + 32 j, row = lane % 16 for every j,
        // token = lane / 16 + 2 j. Partials summed in (panel, warp) order;
        // every slot's loads are independent of the sums.
        constexpr int J = MTOK / 2;
        const uint32_t r = lane & 15, row = rb * 16 + r, nout = 16 * a.m;
        float sv[J];
#pragma unroll
        for (int j = 0; j < J; j++)
            sv[j] = 0.f;
        const uint32_t per = wl - wf + 1, nslot = P * per;
#pragma unroll 2
        for (uint32_t q = 0; q < nslot; q++) {
            const uint32_t pp = q / per, ww = wf + (q - pp * per);
            const float *src = a.ws + (size_t)(pp * (a.nblk + W) + rb + ww) * 16 * MTOK;
#pragma unroll
            for (int j = 0; j < J; j++)
                if (lane + 32 * j < nout)
                    sv[j] += ld_cg_f32(src + lane + 32 * j);
        }
        if constexpr (KIND == PJ_GB_Z12) {
            // c1 * x then c2 * x of each exception of the row, list order; x
            // from the staged panel when it holds all of K.
            if (table) {
                for (uint32_t e = 0; e < nx; e++) {
                    const uint32_t rk = __shfl_sync(0xffffffffu, e < 32 ? rkA : rkB, e & 31);
                    const float c1 = __shfl_sync(0xffffffffu, e < 32 ? c1A : c1B, e & 31);
                    const float c2 = __shfl_sync(0xffffffffu, e < 32 ? c2A : c2B, e & 31);
                    if ((rk >> 28) != r)
                        continue;
                    const uint32_t k = rk & 0x0fffffffu;
#pragma unroll
                    for (int j = 0; j < J; j++) {
                        const uint32_t tok = (lane >> 4) + 2 * j;
                        if (tok >= a.m)
                            continue;
                        const float xv =
                            bf2f(P == 1 ? xs[tok * XSTR + k] : a.x[(size_t)tok * a.ldx + k]);
                        sv[j] = __fadd_rn(sv[j], __fmul_rn(c1, xv));
                        sv[j] = __fadd_rn(sv[j], __fmul_rn(c2, xv));
                    }
                }
            } else {
                for (uint32_t e = a.z.blk_exc[rb]; e < a.z.blk_exc[rb + 1]; e++) {
                    const pj_z12_exc ex = a.z.exc[e];
                    if ((ex.rk >> 28) != r)
                        continue;
                    const uint32_t k = ex.rk & 0x0fffffffu;
#pragma unroll
                    for (int j = 0; j < J; j++) {
                        const uint32_t tok = (lane >> 4) + 2 * j;
                        if (tok >= a.m)
                            continue;
                        const float xv = bf2f(a.x[(size_t)tok * a.ldx + k]);
                        sv[j] = __fadd_rn(sv[j], __fmul_rn(ex.c1, xv));
                        sv[j] = __fadd_rn(sv[j], __fmul_rn(ex.c2, xv));
                    }
                }
            }
        }
        if (row < a.n) {
#pragma unroll
            for (int j = 0; j < J; j++) {
                const uint32_t tok = (lane >> 4) + 2 * j;
                if (tok < a.m)
                    a.y[(size_t)tok * a.ldy + row] = f2bf(sv[j]);
            }
        }
    }
}

// Variants: KIND, NW in {4, 8, 16}, U in {1, 2, 4} (8 for z12's three
// registers per unit: two batches of 8 x 3 x 16 bytes still fit), MT.
// Combinations that spill at every MT are not compiled: NW = 16 with U > 2
// (U > 1 for the router's two matrices), the router with U = 4.
template <int KIND, int NW, int U> static GemvbFn gb_pick_mt(int mt)
{
    if constexpr ((NW == 16 && U > (KIND == PJ_GB_DUAL ? 1 : 2)) || (KIND == PJ_GB_DUAL && U > 2))
        return nullptr;
    else
        switch (mt) {
        case 1:
            return &gemvb_kernel<KIND, NW, U, 1>;
        case 2:
            return &gemvb_kernel<KIND, NW, U, 2>;
        case 4:
            return &gemvb_kernel<KIND, NW, U, 4>;
        }
    return nullptr;
}
template <int KIND, int NW> static GemvbFn gb_pick_u(int u, int mt)
{
    switch (u) {
    case 1:
        return gb_pick_mt<KIND, NW, 1>(mt);
    case 2:
        return gb_pick_mt<KIND, NW, 2>(mt);
    case 4:
        return gb_pick_mt<KIND, NW, 4>(mt);
    case 8:
        if constexpr (KIND == PJ_GB_Z12)
            return gb_pick_mt<KIND, NW, 8>(mt);
        else
            return nullptr;
    }
    return nullptr;
}
template <int KIND> static GemvbFn gb_pick_nw(int nw, int u, int mt)
{
    switch (nw) {
    case 4:
        return gb_pick_u<KIND, 4>(u, mt);
    case 8:
        return gb_pick_u<KIND, 8>(u, mt);
    case 16:
        return gb_pick_u<KIND, 16>(u, mt);
    }
    return nullptr;
}

GemvbFn gemvb_pick(int kind, int nw, int u, int mt)
{
    switch (kind) {
    case PJ_GB_Z12:
        return gb_pick_nw<PJ_GB_Z12>(nw, u, mt);
    case PJ_GB_BF16:
        return gb_pick_nw<PJ_GB_BF16>(nw, u, mt);
    case PJ_GB_DUAL:
        return gb_pick_nw<PJ_GB_DUAL>(nw, u, mt);
    }
    return nullptr;
}
