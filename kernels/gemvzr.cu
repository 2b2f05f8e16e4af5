// gemvzr.cu — the gemvz variants with a shallower prefetch ring (knob st =
// 2 or 3 stages instead of 4) for m > 8: at m = 16 a 4-stage ring with the
// tiles' x held two CTAs per SM by shared memory (kernels/NOTES.md, round
// 12). A separate unit so that it compiles in parallel with gemvz.cu and
// gemvzx.cu.
#include "kernels/gemvz.cuh"

template <int NW, int U, int MT, int S> static GemvzFn gzr_pick_xs(int xs, int rb)
{
    if constexpr (NW == 4 || NW == 8) {
        if (xs == 2 && rb == 1)
            return &gemvz_kernel<NW, U, MT, 2, 2, 1, 0, 0, S>;
        if (xs == 2 && rb == 2)
            return &gemvz_kernel<NW, U, MT, 2, 2, 2, 0, 0, S>;
    }
    if constexpr (NW == 2 || NW == 4)
        if (xs == 4 && rb == 1)
            return &gemvz_kernel<NW, U, MT, 2, 4, 1, 0, 0, S>;
    return nullptr;
}
template <int NW, int U, int S> static GemvzFn gzr_pick_mt(int mt, int xs, int rb)
{
    if (mt == 2)
        return gzr_pick_xs<NW, U, 2, S>(xs, rb);
    if (mt == 4)
        return gzr_pick_xs<NW, U, 4, S>(xs, rb);
    return nullptr;
}
template <int NW, int S> static GemvzFn gzr_pick_u(int u, int mt, int xs, int rb)
{
    if (u == 1)
        return gzr_pick_mt<NW, 1, S>(mt, xs, rb);
    if (u == 2)
        return gzr_pick_mt<NW, 2, S>(mt, xs, rb);
    return nullptr;
}
template <int S> static GemvzFn gzr_pick_nw(int nw, int u, int mt, int xs, int rb)
{
    switch (nw) {
    case 2:
        return gzr_pick_u<2, S>(u, mt, xs, rb);
    case 4:
        return gzr_pick_u<4, S>(u, mt, xs, rb);
    case 8:
        return gzr_pick_u<8, S>(u, mt, xs, rb);
    }
    return nullptr;
}

GemvzFn gemvz_pick_st(int nw, int u, int mt, int pipe, int xs, int rb, int st)
{
    if (pipe != 5)
        return nullptr;
    if (st == 2)
        return gzr_pick_nw<2>(nw, u, mt, xs, rb);
    if (st == 3)
        return gzr_pick_nw<3>(nw, u, mt, xs, rb);
    return nullptr;
}
