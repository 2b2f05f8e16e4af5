// gemvzx.cu — the gemvz variants with x shared by the CTA (knob xs = 4):
// the prefetch ring (pipe = 5), NW in {1, 2, 4} warps per row block, U in
// {1, 2}, MT in {1, 2, 4}, RB in {1, 2}; the cluster split-K reduction
// (cl = 1) with RB = 1. A separate unit from gemvz.cu so that the two
// compile in parallel.
#include "kernels/gemvz.cuh"

template <int NW, int U, int MT, int CL> static GemvzFn gzx_pick_rb(int rb)
{
    if (rb == 1)
        return &gemvz_kernel<NW, U, MT, 2, 4, 1, CL>;
    if constexpr (!CL)
        if (rb == 2)
            return &gemvz_kernel<NW, U, MT, 2, 4, 2>;
    return nullptr;
}
template <int NW, int U, int CL> static GemvzFn gzx_pick_mt(int mt, int rb)
{
    switch (mt) {
    case 1:
        return gzx_pick_rb<NW, U, 1, CL>(rb);
    case 2:
        return gzx_pick_rb<NW, U, 2, CL>(rb);
    case 4:
        return gzx_pick_rb<NW, U, 4, CL>(rb);
    }
    return nullptr;
}
template <int NW, int CL> static GemvzFn gzx_pick_u(int u, int mt, int rb)
{
    if (u == 1)
        return gzx_pick_mt<NW, 1, CL>(mt, rb);
    if (u == 2)
        return gzx_pick_mt<NW, 2, CL>(mt, rb);
    return nullptr;
}
template <int CL> static GemvzFn gzx_pick_nw(int nw, int u, int mt, int rb)
{
    switch (nw) {
    case 1:
        return gzx_pick_u<1, CL>(u, mt, rb);
    case 2:
        return gzx_pick_u<2, CL>(u, mt, rb);
    case 4:
        return gzx_pick_u<4, CL>(u, mt, rb);
    }
    return nullptr;
}

GemvzFn gemvz_pick_xr(int nw, int u, int mt, int pipe, int rb, int cl)
{
    if (pipe != 5)
        return nullptr;
    return cl ? gzx_pick_nw<1>(nw, u, mt, rb) : gzx_pick_nw<0>(nw, u, mt, rb);
}
