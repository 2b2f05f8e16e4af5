/* orphans.h — closed connections whose jobs still wait on the device for
 * their client's events.
 *
 * A WAIT_EVENT job is queued on the device behind a wait for an IPC event
 * that the client records. A client that exits before that record runs
 * leaves the wait unpassable: the job, and everything queued behind it on
 * its lane, would stay on the device for good, and calls that wait for the
 * device (cudaHostUnregister when another connection closes) would block
 * the event loop. When such a connection closes, the server hands its
 * backend stream here instead of destroying it; every sweep (the loop's
 * 100 ms housekeeping) destroys the stream once no job waits any more, or
 * has the backend release the waits once the client's process has exited.
 * A client that closed its connection but still runs is left to record its
 * events itself. Loop thread only.
 */
#ifndef PJ_ORPHANS_H
#define PJ_ORPHANS_H

#include <stdint.h>

#include "daemon/backend.h"

typedef struct pj_orphan pj_orphan;

typedef struct pj_orphans {
    pj_orphan *head;
    uint32_t count;    /* watched now */
    uint64_t adopted;  /* streams ever watched */
    uint64_t released; /* jobs whose waits were released */
} pj_orphans;

/* Watch bs when jobs of it still wait for its client's events: returns 1
 * and owns bs from now on (the caller must not destroy it), else 0 (also
 * when the backend has no such waits, or on out of memory). pid: the
 * client's, from SO_PEERCRED; serial names the connection in the log. */
int pj_orphans_adopt(pj_orphans *o, pj_backend *be, pj_backend_stream *bs, int32_t pid,
                     uint64_t serial);

/* One pass over the watched streams (see above). final: the daemon stops;
 * every stream is destroyed, after its waits are released where its
 * process has exited. */
void pj_orphans_sweep(pj_orphans *o, pj_backend *be, int final);

#endif
