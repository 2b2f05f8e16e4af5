/* closer.h — client buffers released on a thread of their own.
 *
 * Releasing a buffer on the cuda backend can wait for the whole device:
 * cudaHostUnregister (and cudaIpcCloseMemHandle) return only once the work
 * queued before them has run. On the event loop that wait stops every
 * connection for as long as the device is busy with other clients' work,
 * and for good when a lane is held by a client that died before recording
 * its event (daemon/orphans.h): session 31 measured the loop blocked
 * within a second of such a death, when the dead client's idle buffers
 * were closed. The registry (bufreg.c) therefore hands each release here;
 * one thread runs them in the order given. A release that never returns
 * holds only this thread: later releases queue behind it (counted in
 * STATS as buffers.releasing) while the loop keeps serving.
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
 * Returns 0, or how many are left: the thread is then left as it is (it
 * may be inside a call that never returns), and nothing a release uses
 * may be freed; the process should exit without closing the backend. */
uint32_t pj_closer_stop(int wait_ms);

#endif
