// queue_probe.cu — how much work a stream queues behind a wait that has
// not passed before the host call that enqueues more blocks (session 37).
// The stream waits on an event recorded behind a host function that
// sleeps HOLD seconds; then one kind of work is enqueued in a loop and
// each call timed. Prints, per kind, the index of the first call that took
// over 50 ms (the queue full), or that none did within N calls.
// Build: nvcc -O2 -arch=sm_90a -o queue_probe queue_probe.cu
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

int main(int argc, char **argv)
{
    const int n = argc > 1 ? atoi(argv[1]) : 20000;
    const double hold = 6.0;
    const char *kinds[] = {"kernel", "memcpy", "event", "graph", "job"};
    float *d;
    CK(cudaMalloc(&d, 1 << 20));
    cudaStream_t holder, s;
    CK(cudaStreamCreateWithFlags(&holder, cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t gate, rec;
    CK(cudaEventCreateWithFlags(&gate, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&rec, cudaEventDisableTiming));
    // A graph of one kernel and one copy (the daemon's replays are graphs).
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    tiny<<<1, 32, 0, s>>>(d);
    CK(cudaMemcpyAsync(d + 1024, d, 4096, cudaMemcpyDeviceToDevice, s));
    CK(cudaStreamEndCapture(s, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    for (int k = 0; k < 5; k++) {
        CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(hold * 1e6)));
        CK(cudaEventRecord(gate, holder));
        CK(cudaStreamWaitEvent(s, gate, 0));
        const double t0 = now_s();
        int first = -1;
        double worst = 0;
        for (int i = 0; i < n; i++) {
            const double a = now_s();
            switch (k) {
            case 0: tiny<<<1, 32, 0, s>>>(d); break;
            case 1: CK(cudaMemcpyAsync(d + 2048, d, 4096, cudaMemcpyDeviceToDevice, s)); break;
            case 2: CK(cudaEventRecord(rec, s)); break;
            case 3: CK(cudaGraphLaunch(ge, s)); break;
            case 4: // the daemon's staged job: copy in, replay, copy out, record
                CK(cudaMemcpyAsync(d + 2048, d, 4096, cudaMemcpyDeviceToDevice, s));
                CK(cudaGraphLaunch(ge, s));
                CK(cudaMemcpyAsync(d + 4096, d, 4096, cudaMemcpyDeviceToDevice, s));
                CK(cudaEventRecord(rec, s));
                break;
            }
            const double dt = now_s() - a;
            if (dt > worst)
                worst = dt;
            if (dt > 0.05 && first < 0)
                first = i;
            if (now_s() - t0 > hold - 0.5)
                break;
        }
        CK(cudaStreamSynchronize(s));
        if (first >= 0)
            printf("%-7s: call %d blocked (%.2f s); %.2f s in all\n", kinds[k], first, worst,
                   now_s() - t0);
        else
            printf("%-7s: %d calls, none over 50 ms (worst %.3f ms)\n", kinds[k], n, worst * 1e3);
    }
    // Event records of distinct events (the daemon records a slot's own
    // event per job), and the daemon's whole job: the wait on a client
    // event, its marker, the staged copy in, the replay, the copy out, the
    // client's event and the slot's own.
    enum { NEV = 8192 };
    cudaEvent_t *evs = (cudaEvent_t *)malloc(NEV * sizeof *evs);
    for (int i = 0; i < NEV; i++)
        CK(cudaEventCreateWithFlags(&evs[i], cudaEventDisableTiming));
    cudaEvent_t client;
    CK(cudaEventCreateWithFlags(&client, cudaEventDisableTiming));
    CK(cudaEventRecord(client, holder));
    for (int k = 0; k < 3; k++) {
        CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(hold * 1e6)));
        CK(cudaEventRecord(gate, holder));
        CK(cudaStreamWaitEvent(s, gate, 0));
        const double t0 = now_s();
        int first = -1;
        for (int i = 0; i < NEV / 2 - 1; i++) {
            const double a = now_s();
            if (k == 0) {
                CK(cudaEventRecord(evs[i], s));
            } else if (k == 1) {
                CK(cudaStreamWaitEvent(s, client, 0));
            } else {
                CK(cudaStreamWaitEvent(s, client, 0));
                CK(cudaEventRecord(evs[2 * i], s));
                CK(cudaMemcpyAsync(d + 2048, d, 4096, cudaMemcpyDeviceToDevice, s));
                CK(cudaGraphLaunch(ge, s));
                CK(cudaMemcpyAsync(d + 4096, d, 4096, cudaMemcpyDeviceToDevice, s));
                CK(cudaEventRecord(client, s));
                CK(cudaEventRecord(evs[2 * i + 1], s));
            }
            if (now_s() - a > 0.05 && first < 0)
                first = i;
            if (now_s() - t0 > hold - 0.5)
                break;
        }
        CK(cudaStreamSynchronize(s));
        const char *names[] = {"distinct event records", "waits on one event",
                               "daemon jobs (wait, 4 records, 2 copies, replay)"};
        if (first >= 0)
            printf("%s: call %d blocked\n", names[k], first);
        else
            printf("%s: %d calls, none blocked\n", names[k], NEV / 2 - 1);
    }
    // Per stream or per context? 900 kernels queued behind the gate on s,
    // then 3000 on another stream s2 that waits for nothing.
    cudaStream_t s2;
    CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
    CK(cudaLaunchHostFunc(holder, sleep_host, (void *)(size_t)(hold * 1e6)));
    CK(cudaEventRecord(gate, holder));
    CK(cudaStreamWaitEvent(s, gate, 0));
    for (int i = 0; i < 900; i++)
        tiny<<<1, 32, 0, s>>>(d);
    const double t0 = now_s();
    int first = -1;
    for (int i = 0; i < 3000; i++) {
        const double a = now_s();
        tiny<<<1, 32, 0, s2>>>(d + 8192);
        if (now_s() - a > 0.05 && first < 0)
            first = i;
    }
    printf("another stream, 900 queued on the held one: %s (call %d), 3000 launches in %.3f s\n",
           first < 0 ? "never blocked" : "blocked", first, now_s() - t0);
    CK(cudaDeviceSynchronize());
    return 0;
}
