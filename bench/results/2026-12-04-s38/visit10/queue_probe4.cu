// queue_probe4.cu — does a client's interprocess event created with
// cudaEventBlockingSync count against the 56 BlockingSync records a
// stream queues behind a wait, when projd records it (SIGNAL_EVENT)?
// (session 38; queue_probe2 measured a client event without the flag: a
// launch each, 1021.) The child creates the event, as a client would; the
// parent opens the handle and records it behind a held wait.
// Build: nvcc -O2 -arch=sm_90a -o queue_probe4 queue_probe4.cu
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
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

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

int main(void)
{
    int fd[2];
    if (pipe(fd) != 0)
        return 1;
    pid_t child = fork();
    if (child == 0) {
        cudaEvent_t a, b;
        cudaIpcEventHandle_t h[2];
        CK(cudaEventCreateWithFlags(&a, cudaEventDisableTiming | cudaEventInterprocess));
        CK(cudaEventCreateWithFlags(&b, cudaEventDisableTiming | cudaEventInterprocess |
                                            cudaEventBlockingSync));
        CK(cudaIpcGetEventHandle(&h[0], a));
        CK(cudaIpcGetEventHandle(&h[1], b));
        if (write(fd[1], h, sizeof h) != sizeof h)
            _exit(1);
        pause();
        _exit(0);
    }
    cudaIpcEventHandle_t h[2];
    if (read(fd[0], h, sizeof h) != sizeof h)
        return 1;
    cudaStream_t holder, s;
    CK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t gate, ev[2];
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CK(cudaIpcOpenEventHandle(&ev[0], h[0]));
    CK(cudaIpcOpenEventHandle(&ev[1], h[1]));
    const char *names[] = {"the child's interprocess event",
                           "the child's interprocess BlockingSync event"};
    for (int k = 0; k < 2; k++) {
        CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)1500000));
        CK(cudaEventRecord(gate, holder));
        CK(cudaStreamWaitEvent(s, gate, 0));
        int first = -1;
        for (int i = 0; i < 1100; i++) {
            const double a = now_s();
            CK(cudaEventRecord(ev[k], s));
            if (now_s() - a > 0.05) {
                first = i;
                break;
            }
        }
        CK(cudaStreamSynchronize(s));
        printf("records of %s: %s %d\n", names[k], first >= 0 ? "call blocked:" : "none blocked in",
               first >= 0 ? first : 1100);
    }
    kill(child, SIGTERM);
    waitpid(child, NULL, 0);
    return 0;
}
