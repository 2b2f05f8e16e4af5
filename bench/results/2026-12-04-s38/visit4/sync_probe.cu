// sync_probe.cu — which host call waits for a stream held behind an
// unpassed event (session 38). test_cuda_backend --q: a staged direct
// request (host memory, a shape without a graph, cuBLAS) took the whole
// 3 s of the client's wait in projd's event loop, with lazy module loading
// or eager. Each case here makes one call while stream s waits on an event
// recorded behind a 1.5 s host function, and says whether the call
// returned at once or only when the wait passed.
// Build: nvcc -O2 -arch=sm_90a -o sync_probe sync_probe.cu -lcublas -lcublasLt
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void CUDART_CB sleep_host(void *arg)
{
    usleep((useconds_t)(size_t)arg);
}

__global__ void never_launched(float *p)
{
    p[threadIdx.x] *= 2.f;
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static cudaStream_t holder, s;
static cudaEvent_t gate;
static cublasHandle_t h;
static __nv_bfloat16 *W, *X, *Y;

static void hold(double sec)
{
    CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(sec * 1e6)));
    CK(cudaEventRecord(gate, holder));
    CK(cudaStreamWaitEvent(s, gate, 0));
}

static int gemm(int m, int n, int k, int ldx, int ldy)
{
    const float one = 1.f, zero = 0.f;
    return cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &one, W, CUDA_R_16BF, k, X,
                        CUDA_R_16BF, ldx, &zero, Y, CUDA_R_16BF, ldy, CUBLAS_COMPUTE_32F,
                        CUBLAS_GEMM_DEFAULT);
}

int main(void)
{
    CK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CK(cudaMalloc(&W, 8192ull * 4096 * 2));
    CK(cudaMalloc(&X, 256ull * 4200 * 2));
    CK(cudaMalloc(&Y, 256ull * 8300 * 2));
    void *ws;
    CK(cudaMalloc(&ws, 32 << 20));
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS || cublasSetStream(h, s) != CUBLAS_STATUS_SUCCESS ||
        cublasSetWorkspace(h, ws, 32 << 20) != CUBLAS_STATUS_SUCCESS)
        return 1;
    // One warm call, as projd's start-up makes for its graphs.
    gemm(1, 320, 256, 256, 320);
    CK(cudaStreamSynchronize(s));
    void *hostbuf = malloc(1 << 22), *pinned = NULL;
    CK(cudaHostRegister(hostbuf, 1 << 22, cudaHostRegisterDefault));
    CK(cudaMallocHost(&pinned, 1 << 20));
    float *dp = NULL;
    const char *names[] = {
        "cublasGemmEx m8 n317 k256 ld 256/317 (first)",
        "cublasGemmEx m8 n317 k256 ld 256/317 (again)",
        "cublasGemmEx m8 n317 k256 ld 261/324 (first)",
        "cublasGemmEx m8 n4608 k4096 (first)",
        "cublasGemmEx m200 n4608 k4096 (first)",
        "cublasGemmEx m200 n4608 k4096 (again)",
        "a kernel of this program, first launch",
        "cudaMemcpy2DAsync host->dev, pitch 522",
        "cudaMemcpy2DAsync dev->host, pitch 648",
        "cudaMalloc 1 MB",
        "cudaFree of that",
        "cudaMallocHost 1 MB",
    };
    const int n_cases = (int)(sizeof names / sizeof names[0]);
    for (int c = 0; c < n_cases; c++) {
        hold(1.5);
        const double a = now_s();
        int bad = 0;
        switch (c) {
        case 0: bad = gemm(8, 317, 256, 256, 317); break;
        case 1: bad = gemm(8, 317, 256, 256, 317); break;
        case 2: bad = gemm(8, 317, 256, 261, 324); break;
        case 3: bad = gemm(8, 4608, 4096, 4096, 4608); break;
        case 4: bad = gemm(200, 4608, 4096, 4096, 4608); break;
        case 5: bad = gemm(200, 4608, 4096, 4096, 4608); break;
        case 6: never_launched<<<1, 32, 0, s>>>((float *)Y); break;
        case 7: bad = cudaMemcpy2DAsync(X, 512, hostbuf, 522, 512, 8, cudaMemcpyDefault, s); break;
        case 8: bad = cudaMemcpy2DAsync(hostbuf, 648, Y, 634, 634, 8, cudaMemcpyDefault, s); break;
        case 9: bad = cudaMalloc(&dp, 1 << 20); break;
        case 10: bad = cudaFree(dp); break;
        case 11: bad = cudaFreeHost(pinned) || cudaMallocHost(&pinned, 1 << 20); break;
        }
        const double dt = now_s() - a;
        printf("%-48s: %s %.3f s%s\n", names[c], dt > 0.5 ? "WAITED" : "returned in", dt,
               bad ? " (failed)" : "");
        CK(cudaStreamSynchronize(s));
    }
    return 0;
}
