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
    uint32_t waiting; /* its jobs behind waits, at the last sweep */
};

int pj_orphans_adopt(pj_orphans *o, pj_backend *be, pj_backend_stream *bs, pj_peer_watch *peer,
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
    w->peer = *peer;
    peer->pidfd = -1;
    /* The list is oldest last: new ones go to the front. */
    w->next = o->head;
    o->head = w;
    o->count++;
    o->adopted++;
    if (w->peer.pid > 0)
        pj_log_info("connection #%" PRIu64 ": %u of its jobs still wait on the device for its "
                    "client's events; watching pid %d until they pass or it exits",
                    serial, n, (int)w->peer.pid);
    else
        pj_log_warn("connection #%" PRIu64 ": %u of its jobs still wait on the device for its "
                    "client's events, and its pid is not known: if the client has died, the "
                    "watchdog finds the lane stuck after 2 x WatchdogSec",
                    serial, n);
    pj_orphans_sweep(o, be, 0);
    return 1;
}

void pj_orphans_sweep(pj_orphans *o, pj_backend *be, int final)
{
    const pj_backend_ops *ops = be->ops;
    for (pj_orphan **pp = &o->head; *pp;) {
        pj_orphan *w = *pp;
        uint32_t n = ops->stream_client_waits(be, w->bs);
        w->waiting = n;
        if (n && !w->lost && pj_peer_exited(&w->peer) == 1) {
            w->lost = 1;
            o->lost++;
            o->lost_total++;
            pj_log_err("connection #%" PRIu64 ": pid %d exited while %u of its jobs waited on "
                       "the device for its events: they can never run, and the jobs queued "
                       "behind them on their lane neither; restart projd (with WatchdogSec= "
                       "systemd does)",
                       w->serial, (int)w->peer.pid, n);
            if (ops->stream_lost)
                ops->stream_lost(be, w->bs);
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
    /* What STATUS and the watchdog name: the oldest lost one left. */
    o->lost_serial = 0;
    o->lost_pid = 0;
    o->lost_jobs = 0;
    for (pj_orphan *w = o->head; w; w = w->next) {
        if (w->lost) {
            o->lost_serial = w->serial;
            o->lost_pid = w->peer.pid;
            o->lost_jobs = w->waiting;
        }
    }
}
