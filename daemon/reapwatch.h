/* reapwatch.h — notices nng's reaper thread blocked, so that the daemon
 * restarts instead of losing track of closed connections.
 *
 * nng 1.5 retires every closed pipe on one thread, its reaper, which also
 * runs the REM_POST notices the server counts connections by. A pipe's stop
 * can wait there forever: seen (gdb) as the protocol's pipe stop waiting
 * on an aio that nothing will finish, after a client that had given up on
 * a stopped daemon exited mid-stream. The ipc transport resubmits a
 * transfer (a message's body after its header, the rest of a partial
 * write) without looking whether the pipe was closed in between; on an aio
 * already closed that submit is dropped without completing, and the
 * protocol's own aio waiting on it can no longer be stopped. From then on
 * no closed connection is retired: each keeps its place against
 * limits.max_connections until every client is refused, and nng_close
 * hangs. Nothing in nng's API tells.
 *
 * The watch keeps a pair of inproc sockets of its own, closes their pipe
 * every `every_ms` and expects that pipe's REM_POST back from the reaper,
 * and the dialer's next pipe (it redials from the reaper, once its own
 * pipe is retired): one still missing after `stuck_ms` means the reaper
 * is blocked (it normally takes microseconds). */
#ifndef PJ_REAPWATCH_H
#define PJ_REAPWATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct pj_reapwatch pj_reapwatch;

/* Opens the sockets and starts the dialer. NULL with err on failure. */
pj_reapwatch *pj_reapwatch_open(uint32_t every_ms, uint32_t stuck_ms, char *err, size_t errlen);

/* On the loop, every few milliseconds to seconds: closes the next probe
 * pipe when one is due, and returns how long (ns) the probe in flight has
 * waited for its retirement once that is past stuck_ms; 0 otherwise. Never
 * blocks. */
uint64_t pj_reapwatch_check(pj_reapwatch *w, uint64_t now_ns);

/* Probes closed, and retired, since the open. */
uint64_t pj_reapwatch_probes(const pj_reapwatch *w);

/* Closes the sockets and frees w. Waits for the reaper (nng_close): call
 * it only where such a wait is bounded (the server's exit guard). */
void pj_reapwatch_close(pj_reapwatch *w);

#endif
