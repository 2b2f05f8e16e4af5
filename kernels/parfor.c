/* parfor.c — a parallel for over an index range (see parfor.h). */
#include "kernels/parfor.h"

#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

typedef struct parfor_job {
    pj_parfor_fn fn;
    void *ctx;
    size_t begin, end;
    unsigned worker;
} parfor_job;

static void *parfor_thread(void *arg)
{
    const parfor_job *j = arg;
    j->fn(j->ctx, j->begin, j->end, j->worker);
    return NULL;
}

unsigned pj_parfor_workers(size_t n, unsigned threads)
{
    if (n == 0)
        return 0;
    size_t w = threads ? threads : 1;
    if (w > PJ_PARFOR_MAX_THREADS)
        w = PJ_PARFOR_MAX_THREADS;
    return (unsigned)(w < n ? w : n);
}

/* Chunk i of w over [0, n): n * i / w without overflowing size_t. */
static size_t chunk_start(size_t n, unsigned i, unsigned w)
{
    return n / w * i + n % w * i / w;
}

int pj_parfor(size_t n, unsigned threads, pj_parfor_fn fn, void *ctx)
{
    unsigned w = pj_parfor_workers(n, threads);
    if (w == 0)
        return 0;
    if (w == 1) {
        fn(ctx, 0, n, 0);
        return 1;
    }
    parfor_job *jobs = malloc(w * sizeof *jobs);
    pthread_t *tid = malloc(w * sizeof *tid);
    unsigned char *started = calloc(w, 1);
    if (!jobs || !tid || !started) {
        /* No room to track threads: the whole range on this thread, as one
         * chunk per worker index, so per-worker scratch stays consistent. */
        free(jobs);
        free(tid);
        free(started);
        for (unsigned i = 0; i < w; i++)
            fn(ctx, chunk_start(n, i, w), chunk_start(n, i + 1, w), i);
        return 1;
    }
    for (unsigned i = 0; i < w; i++)
        jobs[i] = (parfor_job){fn, ctx, chunk_start(n, i, w), chunk_start(n, i + 1, w), i};

    /* Workers start with every signal blocked (they inherit this mask): a
     * signal meant for the process is then taken by a thread that is
     * there for it, not by a short-lived worker. */
    sigset_t all, old;
    sigfillset(&all);
    int masked = pthread_sigmask(SIG_SETMASK, &all, &old) == 0;
    unsigned running = 1;
    for (unsigned i = 1; i < w; i++)
        if (pthread_create(&tid[i], NULL, parfor_thread, &jobs[i]) == 0) {
            started[i] = 1;
            running++;
        }
    if (masked)
        pthread_sigmask(SIG_SETMASK, &old, NULL);

    fn(ctx, jobs[0].begin, jobs[0].end, 0);
    /* Chunks whose thread could not be created run here: never a partial
     * result. */
    for (unsigned i = 1; i < w; i++)
        if (!started[i])
            fn(ctx, jobs[i].begin, jobs[i].end, i);
    for (unsigned i = 1; i < w; i++)
        if (started[i])
            pthread_join(tid[i], NULL);
    free(jobs);
    free(tid);
    free(started);
    return (int)running;
}

unsigned pj_cpu_count(void)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) == 0) {
        int c = CPU_COUNT(&set);
        if (c > 0)
            return (unsigned)c;
    }
    /* More CPUs than cpu_set_t holds (1024), or no affinity call: what is
     * online is the best remaining guess. */
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    return on > 0 ? (unsigned)on : 1u;
}
