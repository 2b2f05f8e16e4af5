// gemvzr.cu — the gemvz variants with a 2-stage prefetch ring (knob st = 2)
// for m > 8, x through the warp's ring (xs = 2): half the shared memory of
// the default 4 stages, so twice the CTAs per SM, or nw = 8 in one wave
// (kernels/NOTES.md, round 12). A separate unit so that it compiles in
// parallel with gemvz.cu and gemvzx.cu.
#include "kernels/gemvz.cuh"

template <int NW, int U, int MT> static GemvzFn gzr_pick_rb(int rb)
{
    if (rb == 1)
        return &gemvz_kernel<NW, U, MT, 2, 2, 1, 0, 0, 2>;
    if (rb == 2)
        return &gemvz_kernel<NW, U, MT, 2, 2, 2, 0, 0, 2>;
    return nullptr;
}
template <int NW, int U> static GemvzFn gzr_pick_mt(int mt, int rb)
{
    if (mt == 2)
        return gzr_pick_rb<NW, U, 2>(rb);
    if (mt == 4)
        return gzr_pick_rb<NW, U, 4>(rb);
    return nullptr;
}
template <int NW> static GemvzFn gzr_pick_u(int u, int mt, int rb)
{
    if (u == 1)
        return gzr_pick_mt<NW, 1>(mt, rb);
    if (u == 2)
        return gzr_pick_mt<NW, 2>(mt, rb);
    return nullptr;
}

GemvzFn gemvz_pick_st(int nw, int u, int mt, int pipe, int xs, int rb, int st)
{
    if (pipe != 5 || xs != 2 || st != 2)
        return nullptr;
    if (nw == 4)
        return gzr_pick_u<4>(u, mt, rb);
    if (nw == 8)
        return gzr_pick_u<8>(u, mt, rb);
    return nullptr;
}
