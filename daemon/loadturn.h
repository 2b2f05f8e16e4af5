/* loadturn.h — daemons whose sockets share a directory load their models
 * one at a time.
 *
 * projd@0..7 start together at boot, their sockets all in /run/projd. Each
 * checks the host's memory before its load (daemon/model.h, "Host
 * memory"), and each sees the memory the others are about to take: eight
 * loads that each fit alone can together exceed the host, and the kernel
 * then kills one of them part way with no word. Taking turns makes each
 * check see what the loads before it took, so a model that does not fit
 * is refused with the figures, and the turn costs little time: a load is
 * bound by the host's memory bandwidth, which loads side by side share.
 *
 * The turn is an exclusive flock on "<dir>/.projd-load-turn" (mode 0600:
 * only the daemons' own uid may take it, since a read-only descriptor
 * would do for flock), held from
 * before the model's load until the start's host memory is taken, loaded
 * or not: the model's, then the backend's (cuda passes the turn on after
 * its upload and lanes; its graphs' capture and warm-up run beside the
 * next load). The file holds the holder's pid for the message of those
 * waiting; it stays in the directory (removing a lock file others may
 * have open would let two hold it). The kernel drops the lock of a
 * process that dies, so a killed holder blocks no one. A wait on one
 * holder longer than the limit goes on without the turn, said in the log:
 * a load that hangs (a stalled network file system) must not keep the
 * others from starting. Each new holder starts the limit again, so an
 * instance behind several loads waits them all out. The turns are not
 * served in order: a waiter polls every 100 ms and may lose to a later one. */
#ifndef PJ_DAEMON_LOADTURN_H
#define PJ_DAEMON_LOADTURN_H

#include <stddef.h>

/* Called while waiting, about every 100 ms: holder is the pid the holder
 * wrote (0: unknown), waited_ms the time waited so far. Nonzero stops the
 * wait (a stop signal during the start). */
typedef int (*pj_loadturn_wait_fn)(void *ctx, long holder, unsigned waited_ms);

/* The lock file's path for a socket directory, into out: 0, or
 * -ENAMETOOLONG. */
int pj_loadturn_path(const char *dir, char *out, size_t cap);

/* Take the turn of dir, waiting for it up to limit_ms on any one holder
 * (wait is called meanwhile, with the whole wait; may be NULL). 0: taken.
 * 1: not taken, and the load goes on without it: one holder kept it past
 * limit_ms, or the lock file cannot be made
 * (a directory this process may not write); err says which.
 * -ECANCELED: wait asked to stop. */
int pj_loadturn_take(const char *dir, unsigned limit_ms, pj_loadturn_wait_fn wait, void *ctx,
                     char *err, size_t errlen);

/* Give the turn to the next (a no-op when not held). */
void pj_loadturn_release(void);

#endif
