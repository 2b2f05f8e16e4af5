/* orphans.h — closed connections whose jobs still wait on the device for
 * their client's events.
 *
 * A WAIT_EVENT job is queued on the device behind a wait for an IPC event
 * that the client records. A client that exits before that record has run
 * leaves the wait unpassable: the job, and everything queued behind it on
 * its lane, stays on the device for good, and a call that waits for the
 * device (cudaHostUnregister when another connection closes) then blocks
 * the event loop. Nothing in the daemon can pass such a wait: recording
 * the dead client's event from here does not (measured, daemon/DAEMON.md
 * "A client that dies before its event"). What it can do is know it at
 * once and say so: when such a connection closes, the server hands its
 * backend stream here instead of destroying it; every sweep (the loop's
 * 100 ms housekeeping) destroys the stream once no job waits any more, and
 * marks it lost once the client's process has exited with jobs still
 * waiting. The systemd watchdog takes a lost stream for a stall at once
 * (projd is restarted), rather than after 2 x WatchdogSec. A client that
 * closed its connection but still runs is left to record its events.
 * Loop thread only.
 */
#ifndef PJ_ORPHANS_H
#define PJ_ORPHANS_H

#include <stdint.h>

#include "daemon/backend.h"
#include "daemon/peercred.h"

typedef struct pj_orphan pj_orphan;

typedef struct pj_orphans {
    pj_orphan *head;
    uint32_t count;       /* watched now */
    uint32_t lost;        /* of those, whose client has exited */
    uint64_t adopted;     /* streams ever watched */
    uint64_t lost_total;  /* streams ever marked lost */
    uint64_t lost_serial; /* the oldest lost one now: its connection, */
    int32_t lost_pid;     /* its client's pid */
    uint32_t lost_jobs;   /* and its jobs still waiting (0: none lost) */
} pj_orphans;

/* Watch bs when jobs of it still wait for its client's events: returns 1
 * and owns bs and *peer from now on (the caller must destroy neither;
 * *peer is left closed), else 0 (also when the backend cannot tell, or on
 * out of memory). peer: the connection's watch on its client, opened at
 * accept (peercred.h); serial names the connection in the log. */
int pj_orphans_adopt(pj_orphans *o, pj_backend *be, pj_backend_stream *bs, pj_peer_watch *peer,
                     uint64_t serial);

/* One pass over the watched streams (see above). final: the daemon stops;
 * every stream is destroyed. */
void pj_orphans_sweep(pj_orphans *o, pj_backend *be, int final);

#endif
