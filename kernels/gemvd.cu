// gemvd.cu — the router's GEMV form: hi and lo weights into one fp32
// accumulator per output (see gemv.cuh, DUAL = 1). Its own file so the two
// variant sets compile in parallel.
#include "kernels/gemv.cuh"

GemvFn gemv_pick_dual(int nw, int u, int mt, int pipe, int minb, int rb);

GemvFn gemv_pick_dual(int nw, int u, int mt, int pipe, int minb, int rb)
{
    return gemv_pick_t<1>(nw, u, mt, pipe, minb, rb);
}
