// fault.cu — a kernel that faults on purpose, for testing how the cuda
// backend handles a sticky device error (PROJD_CUDA_FAULT_AFTER, see
// daemon/CUDA.md). Never launched unless that variable is set.
#include <cuda_runtime_api.h>

__global__ void pj_fault_kernel(unsigned *p)
{
    // An address no allocation has: an illegal-address fault, which leaves
    // the context unusable (a sticky error).
    *(volatile unsigned *)p = 1u;
}

extern "C" int pj_cuda_fault_launch(cudaStream_t s)
{
    pj_fault_kernel<<<1, 1, 0, s>>>(reinterpret_cast<unsigned *>(0x8));
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
