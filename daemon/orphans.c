/* orphans.c — see orphans.h. */
#include "daemon/orphans.h"

#include <inttypes.h>
#include <stdlib.h>

#include "daemon/log.h"
#include "daemon/peercred.h"

struct pj_orphan {
    pj_orphan *next;
    pj_backend_stream *bs;
    pj_peer_watch peer;
    uint64_t serial;
    int lost;
};

int pj_orphans_adopt(pj_orphans *o, pj_backend *be, pj_backend_stream *bs, int32_t pid,
                     uint64_t serial)
{
    const pj_backend_ops *ops = be->ops;
    if (!bs || !ops->stream_client_waits)
        return 0;
    uint32_t n = ops->stream_client_waits(be, bs);
    if (!n)
        return 0;
    pj_orphan *w = calloc(1, sizeof *w);
    if (!w)
        return 0;
    w->bs = bs;
    w->serial = serial;
    /* Opened now, while the pid is still the client's (see peercred.h). */
    pj_peer_watch_open(&w->peer, pid);
    w->next = o->head;
    o->head = w;
    o->count++;
    o->adopted++;
    pj_log_info("connection #%" PRIu64 ": %u of its jobs still wait on the device for its "
                "client's events; watching pid %d until they pass or it exits",
                serial, n, (int)pid);
    pj_orphans_sweep(o, be, 0);
    return 1;
}

void pj_orphans_sweep(pj_orphans *o, pj_backend *be, int final)
{
    const pj_backend_ops *ops = be->ops;
    for (pj_orphan **pp = &o->head; *pp;) {
        pj_orphan *w = *pp;
        uint32_t n = ops->stream_client_waits(be, w->bs);
        if (n && !w->lost && pj_peer_exited(&w->peer) == 1) {
            w->lost = 1;
            o->lost++;
            o->lost_total++;
            o->lost_serial = w->serial;
            o->lost_pid = w->peer.pid;
            o->lost_jobs = n;
            pj_log_err("connection #%" PRIu64 ": pid %d exited while %u of its jobs waited on "
                       "the device for its events: they can never run, and the jobs queued "
                       "behind them on their lane neither; restart projd (with WatchdogSec= "
                       "systemd does)",
                       w->serial, (int)w->peer.pid, n);
        }
        if (n && !final) {
            pp = &w->next;
            continue;
        }
        if (!n && w->lost)
            pj_log_warn("connection #%" PRIu64 ": the jobs of exited pid %d passed their waits "
                        "after all",
                        w->serial, (int)w->peer.pid);
        *pp = w->next;
        o->count--;
        if (w->lost)
            o->lost--;
        pj_peer_watch_close(&w->peer);
        ops->stream_destroy(be, w->bs);
        free(w);
    }
}
