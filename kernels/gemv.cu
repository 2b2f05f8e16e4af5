// gemv.cu — the bf16 GEMV variants (one weight matrix); see gemv.cuh.
#include "kernels/gemv.cuh"

GemvFn gemv_pick_dual(int nw, int u, int mt, int pipe, int minb, int rb, int cl);

GemvFn gemv_pick(int dual, int nw, int u, int mt, int pipe, int minb, int rb, int cl)
{
    if (dual)
        return gemv_pick_dual(nw, u, mt, pipe, minb, rb, cl);
    if (cl)
        return rb == 1 ? gemv_pick_cl_t<0>(nw, u, mt, pipe, minb) : nullptr;
    return gemv_pick_t<0>(nw, u, mt, pipe, minb, rb);
}
