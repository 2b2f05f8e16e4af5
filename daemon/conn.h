/* conn.h — one client connection (an nng pipe) and the table of them.
 *
 * Loop thread only. A connection is created when its pipe is accepted and
 * removed from the table when the pipe goes away; it is freed once no
 * request of it is in flight any more (until then it is a "zombie" that
 * still holds its buffers, because the backend may be using them).
 */
#ifndef PJ_CONN_H
#define PJ_CONN_H

#include <stdint.h>

#include "daemon/backend.h"
#include "daemon/bufreg.h"
#include "daemon/peercred.h"
#include "protocol/wire.h"

typedef struct pj_req pj_req; /* a PROJECT request, defined by the server */
struct pj_ringsrv;

typedef struct pj_conn {
    uint32_t pipe_id;
    uint64_t serial; /* connection number since start, for logs */
    uint32_t uid, gid;
    pj_peer_watch peer; /* its pid, and a watch opened at accept: has it exited? (orphans.h) */
    int hello;
    uint64_t t_accept_ns; /* pj_now_ns() at accept, for limits.hello_timeout_ms */
    uint64_t t_hello_ns;  /* pj_now_ns() at its HELLO, for announcing it (server.c) */
    int announced;        /* its connect was logged at info (announce_conn) */
    int hello_closed;     /* closed for saying no HELLO in time (once) */
    char client[PJ_WIRE_NAME_MAX + 1];
    pj_bufreg reg;
    pj_backend_stream *stream; /* created at the first HELLO */
    pj_req *q_head, *q_tail;   /* accepted, waiting for the stream */
    uint32_t n_queued, n_running;
    int deferred;            /* the backend put its queue's head off (submit -EAGAIN) */
    int pumping;             /* pump() is submitting its queue (a refused job's finish_req
                              * must not pump again from inside it) */
    uint32_t n_ctx;          /* server contexts holding its requests (until replies are sent) */
    uint32_t n_sending;      /* of those, replies handed to nng and not yet sent */
    uint64_t send_moved_ns;  /* pj_now_ns() when one of its replies last went out, or when
                                n_sending last rose from 0: how long its replies have stood */
    int ctx_closed;          /* closed for not reading its replies */
    int gone;                /* pipe removed */
    struct pj_ringsrv *ring; /* its shared-memory ring, NULL when none (owned) */
    void *ring_wake;         /* the loop's watch on the ring's wake FIFO (server.c) */
    uint64_t requests;
    /* Its failed requests' log lines (server.c, conn_say_failure), by
     * level (0 info, 1 warn): the window's start, the lines said in it,
     * those held back since the last one said. */
    uint64_t fail_window_ns[2];
    uint32_t fail_said[2];
    uint64_t fail_quiet[2];
    struct pj_conn *next; /* hash chain, or the zombie list */
} pj_conn;

#define PJ_CONN_BUCKETS 256

typedef struct pj_conn_table {
    pj_conn *b[PJ_CONN_BUCKETS];
    uint32_t count;
} pj_conn_table;

/* A new connection (calloc'd, registry initialised). NULL on ENOMEM. */
pj_conn *pj_conn_new(uint32_t pipe_id, uint64_t serial, uint32_t uid, uint32_t gid, int32_t pid,
                     pj_backend *be);

/* Release buffers and the stream, then free. No request may be in flight. */
void pj_conn_free(pj_conn *c, pj_backend *be);

void pj_conn_table_add(pj_conn_table *t, pj_conn *c);
pj_conn *pj_conn_table_find(const pj_conn_table *t, uint32_t pipe_id);
/* Unlink; returns the connection or NULL. */
pj_conn *pj_conn_table_remove(pj_conn_table *t, uint32_t pipe_id);

#endif
