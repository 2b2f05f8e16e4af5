// gemvz.cu — GEMV over z12 weights: the variants of kernels/gemvz.cuh
// with x from global memory, staged, or through the prefetch ring (xs
// 0..3); gemvzx.cu holds those with x shared by the CTA (xs = 4), gemvzr.cu
// those with a shallower ring (knob st).
#include "kernels/gemvz.cuh"

size_t gemvz_smem(int nw, int mt, int xs, uint32_t r, uint32_t rb, uint32_t kc, int u, int pipe,
                  uint32_t m, int st)
{
    const int s = st ? st : PJ_GZ_STAGES;
    const size_t ring = pipe == 5 ? (size_t)r * nw * gemvz_ring_bytes(s, u, rb, xs == 2 ? mt : 0)
                                  : 0; // knob 5 = PIPE 2
    return gemvz_layout(nw, mt, xs, r, r * rb, kc, ring, m, u, s).total;
}

// Variants: NW in {4, 8, 16}, U in {1, 2, 4}, MT in {1, 2, 4}, PIPE, XS,
// RB in {1, 2} (RB = 2 only with U <= 2: registers).
template <int NW, int U, int MT, int P, int XS> static GemvzFn gz_pick_rb(int rb)
{
    if (rb == 1)
        return &gemvz_kernel<NW, U, MT, P, XS, 1>;
    if constexpr (U <= 2) {
        if (rb == 2)
            return &gemvz_kernel<NW, U, MT, P, XS, 2>;
        // Four row blocks per warp only with the prefetch (one register batch).
        if constexpr (P == 2)
            if (rb == 4)
                return &gemvz_kernel<NW, U, MT, P, XS, 4>;
    }
    return nullptr;
}
template <int NW, int U, int MT, int P> static GemvzFn gz_pick_xs(int xs, int rb)
{
    switch (xs) {
    case 0:
        return gz_pick_rb<NW, U, MT, P, 0>(rb);
    case 1:
        return gz_pick_rb<NW, U, MT, P, 1>(rb);
    case 2: // x through the prefetch ring: only with it
        if constexpr (P == 2)
            return gz_pick_rb<NW, U, MT, P, 2>(rb);
        else
            return nullptr;
    case 3: // the m real tokens staged: with the ring, m <= 8, NW 4/8, rb 1
        if constexpr (P == 2 && MT == 1 && NW < 16)
            return rb == 1 ? &gemvz_kernel<NW, U, MT, P, 3, 1> : nullptr;
        else
            return nullptr;
    }
    return nullptr;
}
template <int NW, int U, int MT> static GemvzFn gz_pick_p(int pipe, int xs, int rb)
{
    switch (pipe) {
    case 0:
        return gz_pick_xs<NW, U, MT, 0>(xs, rb);
    case 1:
        return gz_pick_xs<NW, U, MT, 1>(xs, rb);
    case 5:
        return gz_pick_xs<NW, U, MT, 2>(xs, rb);
    }
    return nullptr;
}
template <int NW, int U> static GemvzFn gz_pick_mt(int mt, int pipe, int xs, int rb)
{
    switch (mt) {
    case 1:
        return gz_pick_p<NW, U, 1>(pipe, xs, rb);
    case 2:
        return gz_pick_p<NW, U, 2>(pipe, xs, rb);
    case 4:
        return gz_pick_p<NW, U, 4>(pipe, xs, rb);
    }
    return nullptr;
}
template <int NW> static GemvzFn gz_pick_u(int u, int mt, int pipe, int xs, int rb)
{
    switch (u) {
    case 1:
        return gz_pick_mt<NW, 1>(mt, pipe, xs, rb);
    case 2:
        return gz_pick_mt<NW, 2>(mt, pipe, xs, rb);
    case 4:
        return gz_pick_mt<NW, 4>(mt, pipe, xs, rb);
    }
    return nullptr;
}

// Cluster variants: pipe = 5 (PIPE 2), rb = 1, x from global or the ring.
template <int NW, int U> static GemvzFn gz_pick_cl_mt(int mt, int xs)
{
    switch (mt * 4 + xs) {
    case 4:
        return &gemvz_kernel<NW, U, 1, 2, 0, 1, 1>;
    case 6:
        return &gemvz_kernel<NW, U, 1, 2, 2, 1, 1>;
    case 8:
        return &gemvz_kernel<NW, U, 2, 2, 0, 1, 1>;
    case 10:
        return &gemvz_kernel<NW, U, 2, 2, 2, 1, 1>;
    case 16:
        return &gemvz_kernel<NW, U, 4, 2, 0, 1, 1>;
    case 18:
        return &gemvz_kernel<NW, U, 4, 2, 2, 1, 1>;
    }
    return nullptr;
}
template <int NW> static GemvzFn gz_pick_cl_u(int u, int mt, int xs)
{
    switch (u) {
    case 1:
        return gz_pick_cl_mt<NW, 1>(mt, xs);
    case 2:
        return gz_pick_cl_mt<NW, 2>(mt, xs);
    case 4:
        return gz_pick_cl_mt<NW, 4>(mt, xs);
    }
    return nullptr;
}

GemvzFn gemvz_pick_cl(int nw, int u, int mt, int pipe, int xs, int rb)
{
    if (pipe != 5 || rb != 1)
        return nullptr;
    switch (nw) {
    case 4:
        return gz_pick_cl_u<4>(u, mt, xs);
    case 8:
        return gz_pick_cl_u<8>(u, mt, xs);
    case 16:
        return gz_pick_cl_u<16>(u, mt, xs);
    }
    return nullptr;
}

// Tail-split variants: pipe = 5 (PIPE 2), rb = 1, NW 4 or 8 (the 96
// registers of NW = 16 have no room), U 1 or 2, x from global or the ring.
template <int NW, int U, int MT> static GemvzFn gz_pick_ts_xs(int xs)
{
    if (xs == 0)
        return &gemvz_kernel<NW, U, MT, 2, 0, 1, 0, 1>;
    if (xs == 2)
        return &gemvz_kernel<NW, U, MT, 2, 2, 1, 0, 1>;
    return nullptr;
}
template <int NW, int U> static GemvzFn gz_pick_ts_mt(int mt, int xs)
{
    switch (mt) {
    case 1:
        return gz_pick_ts_xs<NW, U, 1>(xs);
    case 2:
        return gz_pick_ts_xs<NW, U, 2>(xs);
    case 4:
        return gz_pick_ts_xs<NW, U, 4>(xs);
    }
    return nullptr;
}
template <int NW> static GemvzFn gz_pick_ts_u(int u, int mt, int xs)
{
    if (u == 1)
        return gz_pick_ts_mt<NW, 1>(mt, xs);
    if (u == 2)
        return gz_pick_ts_mt<NW, 2>(mt, xs);
    return nullptr;
}

GemvzFn gemvz_pick_ts(int nw, int u, int mt, int pipe, int xs, int rb)
{
    if (pipe != 5 || rb != 1)
        return nullptr;
    if (nw == 4)
        return gz_pick_ts_u<4>(u, mt, xs);
    if (nw == 8)
        return gz_pick_ts_u<8>(u, mt, xs);
    return nullptr;
}

GemvzFn gemvz_pick(int nw, int u, int mt, int pipe, int xs, int rb)
{
    switch (nw) {
    case 4:
        return gz_pick_u<4>(u, mt, pipe, xs, rb);
    case 8:
        return gz_pick_u<8>(u, mt, pipe, xs, rb);
    case 16:
        return gz_pick_u<16>(u, mt, pipe, xs, rb);
    }
    return nullptr;
}
