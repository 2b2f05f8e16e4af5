// queue_probe2.cu — which per-job call of projd fills a stream's queue
// (session 38). test_cuda_backend --q found every job form blocking the
// daemon at its 57th job behind a held wait, whatever its op count, so the
// cost is per job, not per launch. Per job projd records two events: the
// client's interprocess event (SIGNAL_EVENT) and its slot's own
// cudaEventBlockingSync event. Each case enqueues one kind of call behind a
// wait that has not passed and reports the first call that blocked.
// Build: nvcc -O2 -arch=sm_90a -o queue_probe2 queue_probe2.cu
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

enum { NEV = 4096 };

int main(void)
{
    // A child process owns an interprocess event, as a client would.
    int fd[2];
    if (pipe(fd) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {
        cudaEvent_t ce;
        cudaIpcEventHandle_t h;
        CK(cudaEventCreateWithFlags(&ce, cudaEventDisableTiming | cudaEventInterprocess));
        CK(cudaIpcGetEventHandle(&h, ce));
        if (write(fd[1], &h, sizeof h) != sizeof h)
            _exit(1);
        pause();
        _exit(0);
    }
    cudaIpcEventHandle_t h;
    if (read(fd[0], &h, sizeof h) != sizeof h)
        return 1;
    const double hold = 2.5;
    float *d;
    CK(cudaMalloc(&d, 1 << 20));
    cudaStream_t holder, s;
    CK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t gate, own_ipc, opened, blocking, plain;
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&own_ipc, cudaEventDisableTiming | cudaEventInterprocess));
    CK(cudaIpcOpenEventHandle(&opened, h));
    CK(cudaEventCreateWithFlags(&blocking, cudaEventDisableTiming | cudaEventBlockingSync));
    CK(cudaEventCreateWithFlags(&plain, cudaEventDisableTiming));
    cudaEvent_t *bl = (cudaEvent_t *)malloc(NEV * sizeof *bl);
    for (int i = 0; i < NEV; i++)
        CK(cudaEventCreateWithFlags(&bl[i], cudaEventDisableTiming | cudaEventBlockingSync));
    const char *names[] = {
        "kernel (control)",
        "record: plain event",
        "record: this process's interprocess event",
        "record: a child's interprocess event (opened)",
        "record: one BlockingSync event",
        "record: distinct BlockingSync events",
        "wait: the child's event (opened)",
        "job: kernel + opened IPC record + BlockingSync record",
        "job: kernel + plain record + BlockingSync record",
        "job: kernel + opened IPC record + plain record",
    };
    const int n_cases = (int)(sizeof names / sizeof names[0]);
    for (int k = 0; k < n_cases; k++) {
        CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(hold * 1e6)));
        CK(cudaEventRecord(gate, holder));
        CK(cudaStreamWaitEvent(s, gate, 0));
        const double t0 = now_s();
        int first = -1, calls = 0;
        double worst = 0;
        for (int i = 0; i < NEV; i++) {
            const double a = now_s();
            switch (k) {
            case 0: tiny<<<1, 32, 0, s>>>(d); break;
            case 1: CK(cudaEventRecord(plain, s)); break;
            case 2: CK(cudaEventRecord(own_ipc, s)); break;
            case 3: CK(cudaEventRecord(opened, s)); break;
            case 4: CK(cudaEventRecord(blocking, s)); break;
            case 5: CK(cudaEventRecord(bl[i], s)); break;
            case 6: CK(cudaStreamWaitEvent(s, opened, 0)); break;
            case 7:
                tiny<<<1, 32, 0, s>>>(d);
                CK(cudaEventRecord(opened, s));
                CK(cudaEventRecord(bl[i], s));
                break;
            case 8:
                tiny<<<1, 32, 0, s>>>(d);
                CK(cudaEventRecord(plain, s));
                CK(cudaEventRecord(bl[i], s));
                break;
            case 9:
                tiny<<<1, 32, 0, s>>>(d);
                CK(cudaEventRecord(opened, s));
                CK(cudaEventRecord(plain, s));
                break;
            }
            calls++;
            const double dt = now_s() - a;
            if (dt > worst)
                worst = dt;
            if (dt > 0.05 && first < 0) {
                first = i;
                break;
            }
            if (now_s() - t0 > hold - 0.4)
                break;
        }
        CK(cudaStreamSynchronize(s));
        if (first >= 0)
            printf("%-52s: call %4d blocked (%.2f s): %.1f-%.1f entries a call\n", names[k], first,
                   worst, 1021.0 / (first + 1), 1021.0 / (first > 0 ? first : 1));
        else
            printf("%-52s: %d calls, none blocked (worst %.3f ms)\n", names[k], calls,
                   worst * 1e3);
    }
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    return 0;
}
