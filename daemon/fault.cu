// fault.cu — kernels that misbehave on purpose, for testing the cuda
// backend: one that faults (a sticky device error, PROJD_CUDA_FAULT_AFTER)
// and one that holds the stream (a stalled job, PROJD_CUDA_STALL_AFTER, for
// the systemd watchdog); daemon/CUDA.md. Never launched unless those
// variables are set.
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

__global__ void pj_stall_kernel(unsigned long long ns)
{
    // One thread sleeping in steps: the stream (and the lane's later jobs)
    // wait behind it as behind a kernel that never ends, for ns.
    unsigned long long now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    const unsigned long long end = now + ns;
    while (now < end) {
        __nanosleep(100000);
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    }
}

extern "C" int pj_cuda_stall_launch(cudaStream_t s, unsigned long long ns)
{
    pj_stall_kernel<<<1, 1, 0, s>>>(ns);
    return cudaGetLastError() == cudaSuccess ? 0 : -1;
}
