// evhandle_probe.cu — can an IPC event handle's bytes come back for a new
// event after the old one is destroyed, and what does an import of the old
// handle then see? (Session 40: the daemon caches the events it opened per
// connection, keyed by the handle's bytes, daemon/CUDA.md "Per request".)
// Part 1: N interprocess events made and destroyed in turn (and with 16
// kept alive, oldest destroyed first): how many handles repeat an earlier
// one. Part 2: the parent sends event A's handle to a child, which opens
// it; the parent destroys A and makes events until one has A's bytes (B),
// records B behind a 1 s kernel and tells the child, which then queries
// its old import of A, a fresh import of the same bytes, and times a
// stream wait on the old import.
// Build: nvcc -O2 -arch=sm_90a -o evhandle_probe evhandle_probe.cu
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define CK(x)                                                                                      \
    do {                                                                                           \
        cudaError_t e_ = (x);                                                                      \
        if (e_ != cudaSuccess) {                                                                   \
            printf("%s: %s\n", #x, cudaGetErrorString(e_));                                        \
            exit(1);                                                                               \
        }                                                                                          \
    } while (0)

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

__global__ void spin(long long cycles)
{
    long long t0 = clock64();
    while (clock64() - t0 < cycles) {
    }
}

static cudaEvent_t ipc_event(cudaIpcEventHandle_t *h)
{
    cudaEvent_t e;
    CK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming | cudaEventInterprocess));
    CK(cudaIpcGetEventHandle(h, e));
    return e;
}

static int seen_before(const cudaIpcEventHandle_t *all, int n, const cudaIpcEventHandle_t *h)
{
    for (int i = 0; i < n; i++)
        if (memcmp(&all[i], h, sizeof *h) == 0)
            return i;
    return -1;
}

static void part1(void)
{
    enum { N = 2000, KEEP = 16 };
    static cudaIpcEventHandle_t all[N];
    int rep = 0, first = -1;
    for (int i = 0; i < N; i++) {
        cudaEvent_t e = ipc_event(&all[i]);
        if (seen_before(all, i, &all[i]) >= 0 && rep++ == 0)
            first = i;
        CK(cudaEventDestroy(e));
    }
    printf("part 1a: %d events made and destroyed in turn: %d handles repeat an earlier one "
           "(first at %d)\n", N, rep, first);
    cudaEvent_t ring[KEEP];
    rep = 0;
    first = -1;
    for (int i = 0; i < N; i++) {
        if (i >= KEEP)
            CK(cudaEventDestroy(ring[i % KEEP]));
        ring[i % KEEP] = ipc_event(&all[i]);
        if (seen_before(all, i, &all[i]) >= 0 && rep++ == 0)
            first = i;
    }
    for (int i = 0; i < KEEP; i++)
        CK(cudaEventDestroy(ring[i]));
    printf("part 1b: %d made, %d kept alive (oldest destroyed): %d handles repeat (first at %d)\n",
           N, KEEP, rep, first);
    printf("handle bytes 0..31 of the last: ");
    for (int i = 0; i < 32; i++)
        printf("%02x", (unsigned char)all[N - 1].reserved[i]);
    printf("\n");
}

static void child(int rd, int wr)
{
    cudaIpcEventHandle_t h;
    char c;
    if (read(rd, &h, sizeof h) != (ssize_t)sizeof h)
        exit(2);
    cudaEvent_t old_import, fresh;
    CK(cudaIpcOpenEventHandle(&old_import, h));
    c = 'o';
    if (write(wr, &c, 1) != 1)
        exit(2);
    if (read(rd, &c, 1) != 1)
        exit(2);
    if (c == 'n') {
        printf("part 2: no new event had A's bytes; nothing to check\n");
        exit(0);
    }
    cudaError_t q_old = cudaEventQuery(old_import);
    cudaError_t o = cudaIpcOpenEventHandle(&fresh, h);
    cudaError_t q_fresh = o == cudaSuccess ? cudaEventQuery(fresh) : o;
    cudaStream_t s;
    CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    double t0 = now_s();
    CK(cudaStreamWaitEvent(s, old_import, 0));
    CK(cudaStreamSynchronize(s));
    double waited = now_s() - t0;
    printf("part 2: B (A's bytes) recorded behind a 1 s kernel; in the other process, right "
           "after: query of the import of A: %s; a fresh import of the same bytes: %s (open %s); "
           "a stream wait on the import of A lasted %.3f s\n",
           cudaGetErrorName(q_old), cudaGetErrorName(q_fresh), cudaGetErrorName(o), waited);
    exit(0);
}

int main(void)
{
    int to_child[2], to_parent[2];
    if (pipe(to_child) || pipe(to_parent))
        return 1;
    pid_t pid = fork(); // before this process touches CUDA
    if (pid == 0) {
        close(to_child[1]);
        close(to_parent[0]);
        child(to_child[0], to_parent[1]);
    }
    close(to_child[0]);
    close(to_parent[1]);
    part1();
    cudaIpcEventHandle_t ha, hb;
    cudaEvent_t a = ipc_event(&ha);
    if (write(to_child[1], &ha, sizeof ha) != (ssize_t)sizeof ha)
        return 1;
    char c;
    if (read(to_parent[0], &c, 1) != 1)
        return 1;
    CK(cudaEventDestroy(a));
    enum { TRIES = 256 };
    cudaEvent_t made[TRIES], b = NULL;
    int n = 0;
    for (; n < TRIES; n++) {
        made[n] = ipc_event(&hb);
        if (memcmp(&ha, &hb, sizeof ha) == 0) {
            b = made[n];
            break;
        }
    }
    printf("part 2: after A was destroyed, %s\n",
           b ? "a new event had A's handle bytes" : "none of 256 new events had A's bytes");
    if (!b) {
        c = 'n';
        if (write(to_child[1], &c, 1) != 1)
            return 1;
    } else {
        printf("part 2: it was new event %d\n", n + 1);
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        int clk = 0;
        CK(cudaDeviceGetAttribute(&clk, cudaDevAttrClockRate, 0)); // kHz
        spin<<<1, 1, 0, s>>>((long long)clk * 1000);
        CK(cudaEventRecord(b, s));
        c = 'r';
        if (write(to_child[1], &c, 1) != 1)
            return 1;
        CK(cudaStreamSynchronize(s));
    }
    int st;
    waitpid(pid, &st, 0);
    printf("child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
    return 0;
}
