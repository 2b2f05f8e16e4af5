/* conn.c — see conn.h. */
#include "daemon/conn.h"

#include <stdlib.h>

#include "daemon/ringsrv.h"

pj_conn *pj_conn_new(uint32_t pipe_id, uint64_t serial, uint32_t uid, uint32_t gid, int32_t pid,
                     pj_backend *be)
{
    pj_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->pipe_id = pipe_id;
    c->serial = serial;
    c->uid = uid;
    c->gid = gid;
    pj_peer_watch_open(&c->peer, pid);
    pj_bufreg_init(&c->reg, be, uid, pid);
    return c;
}

void pj_conn_free(pj_conn *c, pj_backend *be)
{
    if (!c)
        return;
    /* The poller goes first: it hands requests to the loop, which has
     * none of this connection's any more. */
    pj_ringsrv_free(c->ring);
    pj_bufreg_clear(&c->reg);
    if (c->stream && be)
        be->ops->stream_destroy(be, c->stream);
    pj_peer_watch_close(&c->peer);
    free(c);
}

static unsigned bucket(uint32_t pipe_id)
{
    /* nng pipe ids are sequential from a random start: low bits spread. */
    return (pipe_id * 2654435761u) >> 24;
}

void pj_conn_table_add(pj_conn_table *t, pj_conn *c)
{
    unsigned i = bucket(c->pipe_id) % PJ_CONN_BUCKETS;
    c->next = t->b[i];
    t->b[i] = c;
    t->count++;
}

pj_conn *pj_conn_table_find(const pj_conn_table *t, uint32_t pipe_id)
{
    for (pj_conn *c = t->b[bucket(pipe_id) % PJ_CONN_BUCKETS]; c; c = c->next)
        if (c->pipe_id == pipe_id)
            return c;
    return NULL;
}

pj_conn *pj_conn_table_remove(pj_conn_table *t, uint32_t pipe_id)
{
    pj_conn **pp = &t->b[bucket(pipe_id) % PJ_CONN_BUCKETS];
    for (; *pp; pp = &(*pp)->next) {
        if ((*pp)->pipe_id == pipe_id) {
            pj_conn *c = *pp;
            *pp = c->next;
            c->next = NULL;
            t->count--;
            return c;
        }
    }
    return NULL;
}
