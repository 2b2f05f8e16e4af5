/* closer.h — client buffers released on a thread of their own.
 *
 * Releasing a buffer on the cuda backend waits for the whole device:
 * cudaHostUnregister (and cudaIpcCloseMemHandle) return only once the
 * work queued before them has run. On the event loop that wait stopped
 * every connection for as long as the device was busy with other
 * clients' work, and for good when a lane was held by a client that died
 * before recording its event (daemon/orphans.h; session 31 measured the
 * loop blocked within a second of such a death, when the dead client's
 * idle buffers were closed). The registry (bufreg.c) therefore hands each
 * release here; one thread runs them in the order given. The wait does
 * not stay on this thread alone: while it runs, those calls hold a lock
 * of the driver's that the loop's own CUDA calls wait for, so the cuda
 * backend starts a release only when no client wait is pending (see
 * release_begin in backend_cuda.c), and it is then bounded by the
 * device's queued work. A release that cannot start (behind a dead
 * client) holds this thread, and every later release queues behind it
 * (STATS buffers.releasing; their memory and shm slots stay held) until
 * projd restarts, while the loop keeps serving.
 *
 * Process-wide, like the registry's totals. Before pj_closer_start (unit
 * tests, tools) and after a failed start, releases run on the caller's
 * thread, as they did before this module.
 */
#ifndef PJ_CLOSER_H
#define PJ_CLOSER_H

#include <stddef.h>
#include <stdint.h>

typedef void (*pj_closer_fn)(void *arg);

/* Start the thread. 0, or -errno with err set (releases then run on the
 * caller's thread). Calling it again while it runs does nothing. */
int pj_closer_start(char *err, size_t errlen);

/* Run fn(arg) on the closer thread after what is already queued; on the
 * caller's thread when the closer is not running or out of memory. */
void pj_closer_run(pj_closer_fn fn, void *arg);

/* Releases handed over and not finished (queued and running). Any thread. */
uint32_t pj_closer_pending(void);

/* How long the release running now has run, in ms (0: none runs). Any
 * thread. */
uint64_t pj_closer_running_ms(void);

/* Wait up to wait_ms for every release to finish, then stop the thread.
 * Returns 0, or how many are left: the thread is then given up (detached,
 * left as it is: it may be inside a call that never returns; later starts
 * and stops do nothing), nothing a release uses may be freed, and the
 * process should exit without closing the backend. */
uint32_t pj_closer_stop(int wait_ms);

#endif
