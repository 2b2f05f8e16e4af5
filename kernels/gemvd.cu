// gemvd.cu — the router's GEMV form: hi and lo weights into one fp32
// accumulator per output (see gemv.cuh, DUAL = 1). Its own file so the two
// variant sets compile in parallel.
#include "kernels/gemv.cuh"

GemvFn gemv_pick_dual(int nw, int u, int mt, int pipe, int minb, int rb, int cl);

GemvFn gemv_pick_dual(int nw, int u, int mt, int pipe, int minb, int rb, int cl)
{
    if (cl)
        return rb == 1 ? gemv_pick_cl_t<1>(nw, u, mt, pipe, minb) : nullptr;
    return gemv_pick_t<1>(nw, u, mt, pipe, minb, rb);
}
