// queue_probe3.cu — how a cudaEventBlockingSync record shares a stream's
// queue (session 38). queue_probe2: 56 such records behind an unpassed
// wait block the next one, as do 56 daemon jobs of 1 or of 4 ops. Is that
// ~18 of the 1021 launch entries each, or a limit of their own, and is it
// per stream or per context?
// Build: nvcc -O2 -arch=sm_90a -o queue_probe3 queue_probe3.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
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

__global__ void tiny(float *p)
{
    p[threadIdx.x] += 1.f;
}

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

enum { NEV = 2048 };
static cudaStream_t holder, s, s2;
static cudaEvent_t gate, bl[NEV];
static float *d;

static void hold(cudaStream_t st, double sec)
{
    CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(sec * 1e6)));
    CK(cudaEventRecord(gate, holder));
    CK(cudaStreamWaitEvent(st, gate, 0));
}

// Enqueue up to n calls of kind k on st; the index of the first one that
// blocked (over 50 ms), or -1.
static int fill(int k, int n, cudaStream_t st, int ev0)
{
    for (int i = 0; i < n; i++) {
        const double a = now_s();
        if (k == 0)
            tiny<<<1, 32, 0, st>>>(d);
        else
            CK(cudaEventRecord(bl[ev0 + i], st));
        if (now_s() - a > 0.05)
            return i;
    }
    return -1;
}

int main(void)
{
    CK(cudaMalloc(&d, 1 << 20));
    CK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    for (int i = 0; i < NEV; i++)
        CK(cudaEventCreateWithFlags(&bl[i], cudaEventDisableTiming | cudaEventBlockingSync));
    tiny<<<1, 32, 0, s>>>(d); // load the module before any hold
    CK(cudaDeviceSynchronize());
    const double H = 1.5;
    // 1. Kernels alone, the control.
    hold(s, H);
    int a = fill(0, 1100, s, 0);
    CK(cudaDeviceSynchronize());
    printf("kernels alone behind the wait: call %d blocked\n", a);
    // 2. 40 blocking records, then kernels on the same stream.
    hold(s, H);
    int b0 = fill(1, 40, s, 0), b = fill(0, 1100, s, 0);
    CK(cudaDeviceSynchronize());
    printf("40 BlockingSync records (blocked at %d), then kernels: kernel %d blocked "
           "(1021 - 40 x 18 = 301 if they share the entries)\n",
           b0, b);
    // 3. 500 kernels, then blocking records on the same stream.
    hold(s, H);
    int c0 = fill(0, 500, s, 0), c = fill(1, 200, s, 0);
    CK(cudaDeviceSynchronize());
    printf("500 kernels (blocked at %d), then BlockingSync records: record %d blocked "
           "(~28 if they share the entries, ~56 if not)\n",
           c0, c);
    // 4. 40 blocking records on the held stream, then records on another,
    // unheld stream: does the other stream block (a per-context limit)?
    hold(s, H);
    int d0 = fill(1, 40, s, 0);
    const double t4 = now_s();
    int d1 = fill(1, 200, s2, 40);
    const double t4e = now_s() - t4;
    CK(cudaDeviceSynchronize());
    printf("40 BlockingSync records held (blocked at %d); 200 on another stream: record %d "
           "blocked, %.3f s\n",
           d0, d1, t4e);
    // 5. The same two streams, both held: 40 on s, then on s2.
    hold(s, H);
    hold(s2, H);
    int e0 = fill(1, 40, s, 0), e1 = fill(1, 200, s2, 40);
    CK(cudaDeviceSynchronize());
    printf("both streams held, 40 records on the first (blocked at %d): the second's record %d "
           "blocked (~16 if per context, ~56 if per stream)\n",
           e0, e1);
    return 0;
}
