/* parfor.h — a parallel for over an index range, with pthreads.
 *
 * Used where start-up work (the model loader's z12 pack and verify) splits
 * into independent pieces. Chunks are deterministic: with w = the number of
 * workers (pj_parfor_workers), worker i gets [n * i / w, n * (i + 1) / w),
 * so a caller that keys scratch space by worker index, or wants the same
 * split on every run, can rely on it. The caller's thread is worker 0.
 */
#ifndef PJ_PARFOR_H
#define PJ_PARFOR_H

#include <stddef.h>

/* More threads than this are never started (the loader caps lower). */
#define PJ_PARFOR_MAX_THREADS 256

/* Runs [begin, end) of the range as worker `worker` (0 .. workers - 1). */
typedef void (*pj_parfor_fn)(void *ctx, size_t begin, size_t end, unsigned worker);

/* Workers pj_parfor uses for n indices and `threads` asked for:
 * min(n, threads, PJ_PARFOR_MAX_THREADS), at least 1 (0 when n == 0).
 * threads == 0 counts as 1. */
unsigned pj_parfor_workers(size_t n, unsigned threads);

/* Call fn once per chunk so that every index in [0, n) is covered exactly
 * once, on up to `threads` threads, and return when all chunks are done.
 * A thread that cannot be created does not lose work: the caller's thread
 * runs that chunk itself (same worker index), so the result is always
 * complete; only the speed suffers. Returns how many threads ran chunks at
 * the same time (1 when everything ran on the caller, 0 for n == 0). */
int pj_parfor(size_t n, unsigned threads, pj_parfor_fn fn, void *ctx);

/* CPUs this process may run on (sched_getaffinity, so systemd's
 * CPUAffinity= and taskset are honoured); at least 1. */
unsigned pj_cpu_count(void);

#endif
