/* libprojd.c — the client library: one nng REQ socket per connection, one
 * nng context + aio per request, so any number of threads can have requests
 * in flight on one connection. See client/projd.h for the contract.
 *
 * A request is a small state machine driven by its aio callback: send ->
 * receive -> parse -> user callback -> done. Every step is bounded by a
 * deadline fixed at submission, so every request completes.
 */
#include "client/projd.h"

#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/transport/ipc/ipc.h>
#include <nng/supplemental/util/platform.h>
#include <pthread.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/shmbuf.h"
#include "protocol/ring.h"
#include "protocol/sockpath.h"

#define URL_MAX         600
#define REPLY_MAX_BYTES (64u << 20) /* STATS_REPLY may be large; nothing else is */

typedef struct ring_cli ring_cli;

struct projd_conn {
    ring_cli *ring;    /* the fast path, once projd_ring_attach succeeded */
    unsigned fork_gen; /* g_fork_gen when opened (see conn_forked) */
    nng_socket sock;
    nng_dialer dialer;
    char url[URL_MAX];
    /* How projd_connect chose url when the caller gave none ("; the URL
     * is the default (step 4: ...)"), for its messages; "" otherwise. */
    char url_from[400]; /* the longest source text is ~260 bytes */
    projd_info info;
    /* Every layer the WELCOME named (info.layers_all points here); info's
     * inline array holds only the first PJ_WIRE_MAX_LAYERS. */
    pj_wire_layer *layers;
    atomic_int timeout_ms;
    atomic_uint_fast64_t next_id;
    atomic_int pipes_removed; /* peers that hung up on us; explains a silent HELLO */
    atomic_llong bad_peer;    /* uid of a daemon we refused (see peer_check), -1 = none */
    atomic_llong peer_uid;    /* the daemon's uid as its last pipe said, -1 = unknown */
    /* The pipe WELCOME came on, and the last pipes that went during the
     * connect: only the end of WELCOME's pipe loses the connection. HELLO
     * whose pipe was closed is sent again on the dialer's next one
     * (say_hello), and a WELCOME there makes a good connection. */
    atomic_uint hello_pipe;
    atomic_uint gone_pipes[4];
    atomic_uint n_gone_pipes;
    int trust_any_uid;   /* $PROJD_TRUST_ANY_UID=1 */
    long long trust_uid; /* $PROJD_TRUST_UID (a uid or user name), -1 when unset */
    /* HELLO done (set by projd_connect), then the pipe it was said on
     * went away: every later call fails locally (see conn_lost). lost is
     * set by the pipe-removed notification, or earlier by the first nng
     * request that fails because the pipe went (conn_mark_lost). */
    atomic_int established, lost;
    /* The dialer's redial was put off once the connection was lost
     * (conn_mark_lost). */
    atomic_int redial_stopped;
    pthread_mutex_t mu;    /* guards buffers, ring, closing, nng_live and nng_reqs */
    projd_buffer *buffers; /* doubly linked, for projd_close */
    /* nng requests not completed yet (req_list_push):
     * those conn_mark_lost aborts. A request is on it from just before its
     * send until req_complete, so one found here under mu is not freed. */
    projd_request *nng_reqs;
    /* projd_close has begun: submissions fail (a callback must not start
     * requests on a connection being freed). Written under mu. */
    atomic_int closing;
    /* nng requests whose callbacks have not returned yet: projd_close
     * waits for none, since nng runs them after nng_close returns. */
    unsigned nng_live;
    pthread_cond_t idle; /* nng_live reached 0, or sock_closed set */
    int sock_closed;     /* close_sock returned (close_sock_bounded), under mu */
    /* A RING_ATTACH was sent and then failed here (its reply timed out or
     * made no sense): the daemon may hold that ring for the connection's
     * life, and refuses another one in terms that would not say why. */
    atomic_int ring_unsure;
};

struct projd_buffer {
    projd_conn *c;
    pj_shmbuf shm;
    uint32_t id;
    projd_buffer *prev, *next;
};

struct projd_request {
    unsigned fork_gen; /* its connection's (conn_forked) */
    nng_ctx ctx;
    nng_aio *aio;
    const char *what; /* request type name, for messages */
    uint16_t expect;  /* reply type wanted, 0 = raw (not judged) */
    uint64_t req_id;
    uint64_t t_submit, deadline;
    int timeout_ms;
    int receiving; /* the send finished, a receive is in flight */
    /* Outcome, written by the callback before `finished`, immutable after. */
    int rc;
    projd_error err;
    nng_msg *reply;
    projd_result res;
    pj_op_result *op_res; /* n_ops entries, PROJECT only */
    projd_callback cb;
    void *arg;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int finished;       /* outcome available */
    int done;           /* callback returned */
    int in_cb;          /* the user callback is running on cb_thread */
    int free_requested; /* projd_request_free called from the callback */
    /* projd_request_free (outside a callback) is completing it: a free
     * from the callback it runs is the same free, not a second one. */
    int destroying;
    pthread_t cb_thread;
    projd_conn *conn; /* nng requests: counted in conn->nng_live until completed */
    int on_conn;      /* on conn->nng_reqs, under conn->mu */
    /* Sent through the ring: no nng context or aio. */
    ring_cli *ring;
    int in_pending; /* on ring->pending, under ring->mu */
    /* Links of the one list it is on: its connection's nng requests or its
     * ring's pending ones (req_list_push / req_list_unlink). */
    projd_request *lprev, *lnext;
};

/* The client's end of a shared-memory ring (protocol/ring.h). Requests are
 * pushed on the submission queue by the calling thread; a reaper thread
 * takes the replies off the completion queue and completes the requests,
 * as nng's threads do for the other transport. */
struct ring_cli {
    pj_ring ring;
    pj_shmbuf shm;
    pthread_mutex_t mu;     /* the submission queue, pending, inflight, dead */
    pthread_cond_t room;    /* a reply was taken: a slot may be free */
    projd_request *pending; /* submitted, reply not handled yet */
    uint32_t inflight;      /* pushed, reply not yet taken off the ring */
    /* The req_ids of requests that left `pending` before their replies
     * (timed out, freed, failed): their replies are still owed, and are
     * dropped when they come. A reply that is neither pending nor here
     * answers no request: the ring is corrupt. At most `inflight` of
     * them, so `slots` entries hold them all. */
    uint64_t *gone;
    uint32_t n_gone;
    int dead; /* the daemon closed the ring: requests go over nng */
    uint64_t spin_ns;
    int removed_at_attach; /* conn->pipes_removed then */
    int stop;
    /* pj_ring_wait's stop word for the reaper: set with stop, and by a
     * submit whose deadline comes before reaper_wake (under mu: when the
     * reaper means to look again), so that a short timeout is not kept
     * waiting for the reaper's 20 ms look. */
    int poke;
    uint64_t reaper_wake;
    pthread_t reaper;
    /* Whoever takes replies off the completion queue holds reap_mu: the
     * reaper, or a thread waiting for its own reply (ring_reap_own), which
     * then needs no wake-up of the reaper, nor the reaper of it. */
    pthread_mutex_t reap_mu;
    uint8_t *rbuf;    /* one reply, under reap_mu */
    int reaper_wants; /* the reaper is after reap_mu: waiters keep off it */
    /* The ring's wake FIFO (protocol/ring.h), written when a push finds the
     * daemon's poller asleep; -1 when none. */
    int wake_fd;
    uint64_t wait_ns; /* how long a waiter spins taking its own reply */
    projd_conn *c;
    /* The connection and every request made through the ring hold one;
     * the last frees the struct (requests may outlive projd_close). */
    atomic_int refs;
    /* Requests that projd_request_free took off `pending` and whose
     * callbacks run on its thread (req_destroy), under mu: projd_close
     * waits for them as it does for nng's (projd.h), since ring_fail_all
     * no longer sees them. `completed` is signalled as one returns. */
    unsigned completing;
    pthread_cond_t completed;
};

/* A request's list (its connection's nng requests, or its ring's pending
 * ones), under that list's mutex. */
static void req_list_push(projd_request **head, projd_request *r)
{
    r->lprev = NULL;
    r->lnext = *head;
    if (*head)
        (*head)->lprev = r;
    *head = r;
}

static void req_list_unlink(projd_request **head, projd_request *r)
{
    if (r->lprev)
        r->lprev->lnext = r->lnext;
    else
        *head = r->lnext;
    if (r->lnext)
        r->lnext->lprev = r->lprev;
    r->lprev = r->lnext = NULL;
}

/* The ring whose requests this thread completes: set on its reaper, and
 * on the thread of projd_close while that fails what is pending. A
 * pthread_t comparison would not do: glibc gives a joined reaper's id to
 * the next thread it creates. */
static __thread ring_cli *tl_completing;

/* How long a thread waiting for a ring request it made without a callback
 * spins, taking its own reply (by default; at least the reaper's spin). A reply comes
 * 20-100 µs after the request on the H200 host; past this the wait sleeps. */
#define RING_WAIT_NS 1000000ull

/* ---- small helpers -------------------------------------------------------------- */

/* A count of µs from the environment, in ns, at most 10 s. */
static uint64_t env_us_ns(const char *v)
{
    unsigned long long us = strtoull(v, NULL, 10);
    return (us > 10000000ull ? 10000000ull : us) * 1000u;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
fail(projd_error *e, int code, const char *fmt, ...)
{
    if (e) {
        va_list ap;
        va_start(ap, fmt);
        e->code = code;
        vsnprintf(e->msg, sizeof e->msg, fmt, ap);
        va_end(ap);
    }
    return code;
}

/* Blocking calls from completion callbacks on nng's threads. nng runs
 * every aio callback, its own pipes' included, on one pool of task threads
 * (nng 1.5: twice the online CPUs, at most 16). A callback that makes a
 * blocking call holds its thread until the reply, which needs a task
 * thread to be delivered: with every thread so held nothing completes
 * again, timeouts included, and the requests' frees then wait in
 * nng_aio_stop for ever. So at most half of the pool may be inside such
 * calls at once; one more fails -EDEADLK at once. tl_nng_callback is set
 * while this thread runs req_callback; tl_cb_claim while it holds one of
 * the places (a blocking call nests projd_request_wait: one place). */
static __thread int tl_nng_callback, tl_cb_claim;
static atomic_int g_cb_blocked;

static int nng_task_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    n = n < 1 ? 2 : 2 * n;
    return n > 16 ? 16 : (int)n;
}

/* 0 when this thread may block (not in an nng callback, or a place is
 * free: *claimed then says whether it took one, for cb_block_end), else
 * -EDEADLK with e said. */
static int cb_block_begin(const char *what, int *claimed, projd_error *e)
{
    *claimed = 0;
    if (!tl_nng_callback || tl_cb_claim)
        return 0;
    const int threads = nng_task_threads(), places = threads / 2 > 0 ? threads / 2 : 1;
    if (atomic_fetch_add(&g_cb_blocked, 1) >= places) {
        atomic_fetch_sub(&g_cb_blocked, 1);
        return fail(e, -EDEADLK,
                    "%s: a blocking call from a completion callback while %d others hold nng's "
                    "threads (%d, the replies need some free): submit it with projd_project_async, "
                    "or make it from a thread of your own",
                    what, places, threads);
    }
    *claimed = tl_cb_claim = 1;
    return 0;
}

static void cb_block_end(int claimed)
{
    if (claimed) {
        tl_cb_claim = 0;
        atomic_fetch_sub(&g_cb_blocked, 1);
    }
}

static void ok(projd_error *e)
{
    if (e) {
        e->code = 0;
        e->msg[0] = '\0';
    }
}

/* nng's error numbers as negative errnos (system errors pass through). */
static int nng_errno(int rv)
{
    if (rv & NNG_ESYSERR)
        return -(rv & ~NNG_ESYSERR);
    switch (rv) {
    case NNG_EINTR:
        return -EINTR;
    case NNG_ENOMEM:
        return -ENOMEM;
    case NNG_EINVAL:
    case NNG_EADDRINVAL:
    case NNG_ENOARG:
    case NNG_EAMBIGUOUS:
    case NNG_EBADTYPE:
        return -EINVAL;
    case NNG_EBUSY:
        return -EBUSY;
    case NNG_ETIMEDOUT:
        return -ETIMEDOUT;
    case NNG_ECONNREFUSED:
        return -ECONNREFUSED;
    case NNG_ECLOSED:
        return -EBADF;
    case NNG_EAGAIN:
        return -EAGAIN;
    case NNG_ENOTSUP:
        return -ENOTSUP;
    case NNG_EADDRINUSE:
        return -EADDRINUSE;
    case NNG_ESTATE:
        return -EALREADY;
    case NNG_ENOENT:
        return -ENOENT;
    case NNG_EPROTO:
        return -EPROTO;
    case NNG_EUNREACHABLE:
        return -EHOSTUNREACH;
    case NNG_EPERM:
        return -EPERM;
    case NNG_EMSGSIZE:
        return -EMSGSIZE;
    case NNG_ECONNABORTED:
        return -ECONNABORTED;
    case NNG_ECONNRESET:
        return -ECONNRESET;
    case NNG_ECANCELED:
        return -ECANCELED;
    case NNG_ENOFILES:
        return -EMFILE;
    case NNG_ENOSPC:
        return -ENOSPC;
    case NNG_EEXIST:
        return -EEXIST;
    case NNG_EREADONLY:
        return -EROFS;
    case NNG_EPEERAUTH:
        return -EACCES;
    case NNG_ECONNSHUT:
        return -ESHUTDOWN;
    default:
        return -EIO;
    }
}

const char *projd_strerror(int code)
{
    if (code >= 0)
        return pj_status_name(code);
    return strerror(-code);
}

const char *projd_backend_name(int backend)
{
    switch (backend) {
    case 1:
        return "cpu";
    case 2:
        return "cuda";
    default:
        return "unknown";
    }
}

const char *projd_format_name(int format)
{
    switch (format) {
    case 0:
        return "bf16";
    case 1:
        return "z12";
    case 2:
        return "split";
    default:
        return "unknown";
    }
}

/* ---- requests ----------------------------------------------------------------- */

static void ring_unlink(ring_cli *rc, projd_request *r);
static void ring_abandon(ring_cli *rc, projd_request *r);
static int ring_reap_own(ring_cli *rc, const projd_request *mine);
static void ring_expire_own(ring_cli *rc, projd_request *r);
static void ring_unref(ring_cli *rc);

/* Frees what req_new made. */
static void req_free_mem(projd_request *r)
{
    free(r->op_res);
    pthread_mutex_destroy(&r->mu);
    pthread_cond_destroy(&r->cv);
    free(r);
}

static void req_complete(projd_request *r);

static void req_destroy(projd_request *r, int from_callback)
{
    if (!from_callback) {
        pthread_mutex_lock(&r->mu);
        r->destroying = 1;
        pthread_mutex_unlock(&r->mu);
    }
    if (r->ring) {
        /* Freed before its reply came: forget it (the reply is dropped)
         * and complete it as cancelled, so that its callback runs once as
         * on nng. Otherwise the reaper or the close is completing it:
         * wait. */
        ring_cli *rc = r->ring;
        pthread_mutex_lock(&rc->mu);
        int was_pending = r->in_pending;
        if (was_pending) {
            ring_abandon(rc, r);
            rc->completing++;
        }
        pthread_mutex_unlock(&rc->mu);
        if (was_pending) {
            r->rc = fail(&r->err, -ECANCELED, "%s: freed before it completed", r->what);
            r->res.total_ns = now_ns() - r->t_submit;
            req_complete(r);
            pthread_mutex_lock(&rc->mu);
            if (--rc->completing == 0)
                pthread_cond_broadcast(&rc->completed);
            pthread_mutex_unlock(&rc->mu);
        } else if (!from_callback) {
            pthread_mutex_lock(&r->mu);
            while (!r->done && !r->free_requested)
                pthread_cond_wait(&r->cv, &r->mu);
            pthread_mutex_unlock(&r->mu);
        }
        ring_unref(r->ring);
    } else {
        if (!from_callback) {
            nng_aio_stop(r->aio);
            /* A stop that lands while the send's callback runs makes its
             * receive fail to start without another callback: the request
             * is then completed here, so its callback runs (and
             * projd_close stops waiting for it). */
            pthread_mutex_lock(&r->mu);
            int finished = r->finished;
            pthread_mutex_unlock(&r->mu);
            if (!finished) {
                r->rc = fail(&r->err, -ECANCELED, "%s: freed before it completed", r->what);
                req_complete(r);
            }
        }
        nng_ctx_close(r->ctx);
        /* From inside the aio's own callback the aio cannot be freed in
         * place (nng_aio_free waits for the callback): nng's reaper does it
         * later. */
        if (from_callback)
            nng_aio_reap(r->aio);
        else
            nng_aio_free(r->aio);
    }
    if (r->reply)
        nng_msg_free(r->reply);
    req_free_mem(r);
}

/* Judges the reply: header, req_id, ERROR or the expected type, and for DONE
 * the per-op results. Sets r->rc and r->err; keeps r->reply for the caller. */
static void req_parse(projd_request *r)
{
    const uint8_t *body = nng_msg_body(r->reply);
    size_t len = nng_msg_len(r->reply);
    char err[512];
    pj_hdr h;
    if (r->expect == 0) {
        r->rc = 0;
        return;
    }
    int st = pj_dec_hdr(body, len, REPLY_MAX_BYTES, &h, err, sizeof err);
    if (st != PJ_OK) {
        r->rc = fail(&r->err, -EPROTO, "reply to %s: %s", r->what, err);
        return;
    }
    if (h.req_id != r->req_id) {
        r->rc = fail(&r->err, -EPROTO, "reply to %s: req_id %llu, sent %llu", r->what,
                     (unsigned long long)h.req_id, (unsigned long long)r->req_id);
        return;
    }
    const uint8_t *b = body + PJ_WIRE_HDR_SIZE;
    if (h.type == PJ_MSG_ERROR) {
        pj_error_msg m;
        st = pj_dec_error(b, h.body_len, &m, err, sizeof err);
        if (st != PJ_OK) {
            r->rc = fail(&r->err, -EPROTO, "reply to %s: %s", r->what, err);
            return;
        }
        if (m.code <= 0) {
            r->rc = fail(&r->err, -EPROTO, "reply to %s: ERROR with code %d: %s", r->what, m.code,
                         m.msg);
            return;
        }
        r->res.status = m.code;
        /* the daemon's word: an index past the request's ops names none */
        r->res.failed_op = m.op_index < r->res.n_ops ? m.op_index : UINT32_MAX;
        /* The request was refused whole and no op ran: no op may read as
         * PJ_OK, so each carries the request's status. */
        for (uint32_t i = 0; r->op_res && i < r->res.n_ops; i++)
            r->op_res[i].status = m.code;
        r->rc = fail(&r->err, m.code, "%s", m.msg);
        return;
    }
    if (h.type != r->expect) {
        r->rc = fail(&r->err, -EPROTO, "reply to %s: got %s, expected %s", r->what,
                     pj_msg_type_name(h.type), pj_msg_type_name(r->expect));
        return;
    }
    if (h.type == PJ_MSG_DONE) {
        pj_done d = {.ops = r->op_res};
        st = pj_dec_done(b, h.body_len, r->res.n_ops, &d, err, sizeof err);
        if (st != PJ_OK || d.n_ops != r->res.n_ops) {
            r->rc = fail(&r->err, -EPROTO, "reply to PROJECT: %s",
                         st != PJ_OK ? err : "DONE has a different op count");
            return;
        }
        r->res.status = d.status;
        r->res.queue_ns = d.queue_ns;
        r->res.exec_ns = d.exec_ns;
        for (uint32_t i = 0; i < d.n_ops; i++) {
            if (r->op_res[i].status != PJ_OK) {
                r->res.failed_op = i;
                break;
            }
        }
        if (d.status != PJ_OK) {
            if (d.status < 0) {
                r->rc = fail(&r->err, -EPROTO, "reply to PROJECT: DONE status %d", d.status);
                return;
            }
            if (r->res.failed_op != UINT32_MAX)
                r->rc = fail(&r->err, d.status, "PROJECT: op %u failed: %s", r->res.failed_op,
                             pj_status_name(d.status));
            else
                r->rc = fail(&r->err, d.status, "PROJECT failed: %s", pj_status_name(d.status));
            return;
        }
    }
    r->rc = 0;
}

/* One nng request of c completed: the last one lets projd_close go on. */
static void conn_request_done(projd_conn *c)
{
    pthread_mutex_lock(&c->mu);
    if (--c->nng_live == 0)
        pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
}

static void req_complete(projd_request *r)
{
    projd_conn *conn = r->conn; /* r may be freed once done is set */
    if (conn) {
        pthread_mutex_lock(&conn->mu);
        if (r->on_conn) {
            req_list_unlink(&conn->nng_reqs, r);
            r->on_conn = 0;
        }
        pthread_mutex_unlock(&conn->mu);
    }
    pthread_mutex_lock(&r->mu);
    r->finished = 1;
    r->in_cb = 1;
    r->cb_thread = pthread_self();
    pthread_mutex_unlock(&r->mu);
    if (r->cb)
        r->cb(r, r->arg);
    pthread_mutex_lock(&r->mu);
    r->in_cb = 0;
    int free_now = r->free_requested;
    if (!free_now) {
        __atomic_store_n(&r->done, 1, __ATOMIC_RELEASE); /* also read unlocked by a spinning wait */
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    /* Nothing may touch r after the unlock unless we own it: a waiter may
     * free it as soon as done is set. */
    if (free_now)
        req_destroy(r, 1);
    if (conn)
        conn_request_done(conn);
}

/* Aborts every nng request of c not completed yet with NNG_ECONNRESET: those
 * queued without a pipe (they would wait out their timeout, or go to a
 * daemon that came up since) and those waiting for a reply that will not
 * come. Their callbacks run on nng's threads (nng_aio_abort does not wait
 * for them). */
static void conn_abort_nng(projd_conn *c)
{
    pthread_mutex_lock(&c->mu);
    for (projd_request *r = c->nng_reqs; r; r = r->lnext)
        nng_aio_abort(r->aio, NNG_ECONNRESET);
    pthread_mutex_unlock(&c->mu);
}

/* The pipe of an established connection went away (its pipe-removed
 * notification, or an nng request that failed for that reason, whichever
 * comes first): later submissions fail at once, and what nng still holds
 * fails now. Not during projd_close, which cancels everything itself. */
/* ~11.6 days: nng doubles its back-off in an int32 of ms, so not more. */
#define REDIAL_NEVER_MS 1000000000
static void conn_mark_lost(projd_conn *c)
{
    if (!atomic_load(&c->established) || atomic_load(&c->closing))
        return;
    atomic_store(&c->lost, 1);
    /* Nothing will be sent on a redialed pipe, and one would hold a
     * connection slot in the next daemon, never saying HELLO, until the
     * application closes this connection (peer_check refuses any that
     * comes; refused ones were redialed every 20 ms). The redial is put off
     * for days rather than the dialer closed: closing it here had nng
     * 1.5.2's reaper stop its connect aio mid-start, which never finishes
     * (nanomsg/nng#1813), and every later pipe removal and close in the
     * process waited on that reaper. A redial already timed may come once. */
    if (!atomic_exchange(&c->redial_stopped, 1)) {
        nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMAXT, REDIAL_NEVER_MS);
        nng_dialer_set_ms(c->dialer, NNG_OPT_RECONNMINT, REDIAL_NEVER_MS);
    }
    conn_abort_nng(c);
}

/* Why every request fails once the connection is lost (conn_lost). */
#define LOST_WHY                                                                                   \
    "the connection to projd was lost (projd exited or restarted, or dropped this client); its "   \
    "buffers and ring are gone: close this connection, connect again and register the buffers "    \
    "again"

/* nng's errors for a pipe that went away under a request. */
static int pipe_gone(int rv)
{
    return rv == NNG_ECONNRESET || rv == NNG_ECONNSHUT || rv == NNG_ECLOSED;
}

static void req_callback_run(projd_request *r)
{
    int rv = nng_aio_result(r->aio);
    /* Aborted by projd_close: cancelled, as on the ring, not the
     * -ECONNRESET of a daemon that went away. */
    if (rv != 0 && atomic_load(&r->conn->closing)) {
        if (!r->receiving) {
            nng_msg *m = nng_aio_get_msg(r->aio);
            if (m)
                nng_msg_free(m);
        }
        r->res.total_ns = now_ns() - r->t_submit;
        r->rc = fail(&r->err, -ECANCELED, "%s: the connection was closed", r->what);
        req_complete(r);
        return;
    }
    /* The pipe went away: mark the connection lost now rather than when
     * nng's pipe-removed notification comes, so that a request submitted
     * meanwhile fails at once instead of waiting without a pipe. */
    /* NNG_ECLOSED is also what a request stopped by projd_request_free
     * gets (its aio is stopped while its send completes): that one is
     * ours, not a lost pipe. */
    pthread_mutex_lock(&r->mu);
    int destroying = r->destroying;
    pthread_mutex_unlock(&r->mu);
    if (rv != 0 && pipe_gone(rv) && !destroying && atomic_load(&r->conn->established)) {
        conn_mark_lost(r->conn);
        if (!r->receiving) {
            nng_msg *m = nng_aio_get_msg(r->aio);
            if (m)
                nng_msg_free(m);
        }
        r->res.total_ns = now_ns() - r->t_submit;
        r->rc = fail(&r->err, -ECONNRESET, "%s: %s: %s; " LOST_WHY, r->what,
                     r->receiving ? "receive" : "send", nng_strerror(rv));
        req_complete(r);
        return;
    }
    if (!r->receiving) {
        if (rv != 0) {
            nng_msg *m = nng_aio_get_msg(r->aio);
            if (m)
                nng_msg_free(m);
            r->rc = fail(&r->err, rv == NNG_ETIMEDOUT ? -ETIMEDOUT : nng_errno(rv), "%s: send: %s",
                         r->what,
                         rv == NNG_ETIMEDOUT ? "no peer within the timeout" : nng_strerror(rv));
            req_complete(r);
            return;
        }
        uint64_t t = now_ns();
        if (t >= r->deadline) {
            r->rc = fail(&r->err, -ETIMEDOUT, "%s: no reply within %d ms", r->what, r->timeout_ms);
            req_complete(r);
            return;
        }
        if (atomic_load(&r->conn->lost)) {
            r->res.total_ns = t - r->t_submit;
            r->rc = fail(&r->err, -ECONNRESET, "%s: " LOST_WHY, r->what);
            req_complete(r);
            return;
        }
        r->receiving = 1;
        nng_aio_set_timeout(r->aio, (nng_duration)((r->deadline - t + 999999) / 1000000));
        projd_conn *c = r->conn;
        /* Held over the look below: the receive's completion may run on
         * another thread before this one goes on, and end r's count in
         * nng_live, which is all a projd_close waits for before freeing c. */
        pthread_mutex_lock(&c->mu);
        c->nng_live++;
        pthread_mutex_unlock(&c->mu);
        nng_ctx_recv(r->ctx, r->aio);
        /* r belongs to the receive now. Lost meanwhile: conn_mark_lost may
         * have looked before the receive began; abort it (r is still on
         * c->nng_reqs if it has not completed). */
        if (atomic_load(&c->lost))
            conn_abort_nng(c);
        conn_request_done(c);
        return;
    }
    r->res.total_ns = now_ns() - r->t_submit;
    if (rv != 0) {
        if (rv == NNG_ETIMEDOUT)
            r->rc = fail(&r->err, -ETIMEDOUT, "%s: no reply within %d ms", r->what, r->timeout_ms);
        else
            r->rc = fail(&r->err, nng_errno(rv), "%s: receive: %s", r->what, nng_strerror(rv));
    } else {
        r->reply = nng_aio_get_msg(r->aio);
        req_parse(r);
    }
    req_complete(r);
}

static void req_callback(void *arg)
{
    const int outer = tl_nng_callback;
    tl_nng_callback = 1;
    req_callback_run(arg);
    tl_nng_callback = outer;
}

/* fork(): nng 1.5 panics ("nng is not fork-reentrant safe") at any call in
 * a child of a process that had used it, and the child has none of the
 * parent's threads (the ring's reaper, nng's). Every fork after the first
 * connect bumps g_fork_gen in the child; a connection, its requests and
 * any new connect there then fail -ECHILD before nng is reached, and
 * projd_close and projd_request_free leave what they would free (its
 * locks may have been held by a thread that did not come along). */
static atomic_uint g_fork_gen;
static pthread_once_t g_fork_once = PTHREAD_ONCE_INIT;

static void fork_child(void)
{
    atomic_fetch_add(&g_fork_gen, 1);
}

static void fork_watch(void)
{
    pthread_atfork(NULL, NULL, fork_child);
}

static int conn_forked(const projd_conn *c)
{
    return c->fork_gen != atomic_load(&g_fork_gen);
}

#define FORKED_WHY                                                                                 \
    "this process is a fork() of the one that opened the connection, and nng cannot run after "    \
    "fork: open connections in processes started with exec (Python: multiprocessing's 'spawn' or " \
    "'forkserver')"

static int conn_forked_fail(const char *what, projd_error *e)
{
    return fail(e, -ECHILD, "%s: " FORKED_WHY, what);
}

static projd_request *req_new(projd_conn *c, const char *what, uint16_t expect, uint64_t req_id,
                              uint32_t n_ops, projd_callback cb, void *arg)
{
    projd_request *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->what = what;
    r->expect = expect;
    r->req_id = req_id;
    r->cb = cb;
    r->arg = arg;
    r->res.n_ops = n_ops;
    r->res.failed_op = UINT32_MAX;
    r->timeout_ms = atomic_load(&c->timeout_ms);
    r->fork_gen = c->fork_gen;
    if (n_ops && !(r->op_res = calloc(n_ops, sizeof *r->op_res))) {
        free(r);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    pthread_cond_init(&r->cv, NULL);
    return r;
}

static int ring_submit(ring_cli *rc, const pj_wbuf *w, projd_request *r, projd_error *e);

static int conn_lost(const char *what, projd_error *e)
{
    return fail(e, -ECONNRESET, "%s: " LOST_WHY, what);
}

/* Sends the message in w (whole, header included): PROJECT and PING through
 * the ring when there is one, anything else on a new nng context. On
 * success *out is a request that will complete; on failure nothing is left.
 * blocking: the caller waits for it at once (projd_project, call). */
static int req_submit(projd_conn *c, const pj_wbuf *w, const char *what, uint16_t expect,
                      uint64_t req_id, uint32_t n_ops, projd_callback cb, void *arg, int blocking,
                      projd_request **out, projd_error *e)
{
    *out = NULL;
    if (conn_forked(c))
        return conn_forked_fail(what, e);
    if (w->oom)
        return fail(e, -ENOMEM, "%s: out of memory encoding the request", what);
    /* The ring and the count of nng requests are taken under mu, against
     * a projd_close that runs meanwhile (a callback may submit). */
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closing)) {
        pthread_mutex_unlock(&c->mu);
        return fail(e, -EBADF, "%s: the connection is being closed", what);
    }
    ring_cli *ring = c->ring;
    if (ring)
        atomic_fetch_add(&ring->refs, 1);
    pthread_mutex_unlock(&c->mu);
    /* A daemon that restarted meanwhile has none of this connection's
     * state: nothing may be sent on the pipe nng redialed. */
    if (atomic_load(&c->lost)) {
        if (ring)
            ring_unref(ring);
        return conn_lost(what, e);
    }
    projd_request *r = req_new(c, what, expect, req_id, n_ops, cb, arg);
    if (!r) {
        if (ring)
            ring_unref(ring);
        return fail(e, -ENOMEM, "%s: out of memory", what);
    }
    /* A blocking call from a callback on the ring's reaper would wait for
     * a reply only that thread takes off the ring: it goes over nng, as
     * a callback's submission on a full ring does. */
    if (ring && (expect == PJ_MSG_DONE || expect == PJ_MSG_PONG) &&
        !(blocking && tl_completing == ring)) {
        int rc = ring_submit(ring, w, r, e);
        ring_unref(ring);
        if (rc == 0) {
            *out = r;
            return 0;
        }
        if (rc != -EPIPE) { /* -EPIPE: the ring is gone, use nng */
            req_free_mem(r);
            return rc;
        }
    } else if (ring) {
        ring_unref(ring);
    }
    pthread_mutex_lock(&c->mu);
    if (atomic_load(&c->closing)) {
        pthread_mutex_unlock(&c->mu);
        req_free_mem(r);
        return fail(e, -EBADF, "%s: the connection is being closed", what);
    }
    c->nng_live++;
    pthread_mutex_unlock(&c->mu);
    r->conn = c;
    int rv;
    nng_msg *m = NULL;
    if ((rv = nng_aio_alloc(&r->aio, req_callback, r)) != 0)
        goto fail_alloc;
    if ((rv = nng_ctx_open(&r->ctx, c->sock)) != 0) {
        nng_aio_free(r->aio);
        goto fail_alloc;
    }
    if ((rv = nng_msg_alloc(&m, w->len)) != 0) {
        nng_ctx_close(r->ctx);
        nng_aio_free(r->aio);
        goto fail_alloc;
    }
    memcpy(nng_msg_body(m), w->data, w->len);
    r->t_submit = now_ns();
    r->deadline = r->t_submit + (uint64_t)r->timeout_ms * 1000000ull;
    nng_aio_set_msg(r->aio, m);
    nng_aio_set_timeout(r->aio, r->timeout_ms);
    pthread_mutex_lock(&c->mu);
    r->on_conn = 1;
    req_list_push(&c->nng_reqs, r);
    pthread_mutex_unlock(&c->mu);
    nng_ctx_send(r->ctx, r->aio);
    /* Lost since the check above: the send may wait for a pipe that only a
     * daemon without this connection's state would give it. */
    if (atomic_load(&c->lost))
        conn_abort_nng(c);
    *out = r;
    return 0;
fail_alloc:
    req_free_mem(r);
    conn_request_done(c);
    return fail(e, nng_errno(rv), "%s: %s", what, nng_strerror(rv));
}

int projd_request_poll(projd_request *r)
{
    /* In a fork nothing completes it, and its lock may have been held by a
     * thread the fork left behind. */
    if (r->fork_gen != atomic_load(&g_fork_gen))
        return 0;
    pthread_mutex_lock(&r->mu);
    int d = r->done;
    pthread_mutex_unlock(&r->mu);
    return d;
}

/* A local failure (code < 0): no reply says what ran, so neither the
 * request nor any op may read as PJ_OK; each carries code. */
static void res_local_failure(projd_result *res, int code)
{
    uint32_t n = res->n_ops < PROJD_RESULT_MAX_OPS ? res->n_ops : PROJD_RESULT_MAX_OPS;
    res->status = code;
    /* A reply found malformed after its ops were read may have set it:
     * after a local failure nothing says what ran (projd.h). */
    res->failed_op = UINT32_MAX;
    for (uint32_t i = 0; i < n; i++)
        res->ops[i].status = code;
}

/* Copies the outcome out; r->finished must be set. */
static int req_outcome(projd_request *r, projd_result *res, projd_error *e)
{
    if (res) {
        *res = r->res;
        uint32_t n = r->res.n_ops < PROJD_RESULT_MAX_OPS ? r->res.n_ops : PROJD_RESULT_MAX_OPS;
        if (r->op_res)
            memcpy(res->ops, r->op_res, (size_t)n * sizeof *res->ops);
        if (r->rc < 0)
            res_local_failure(res, r->rc);
    }
    if (e) {
        if (r->rc == 0)
            ok(e);
        else
            *e = r->err;
    }
    return r->rc;
}

/* projd_request_wait failed before the request completed: res says so. */
static int wait_failed(const projd_request *r, projd_result *res, int code)
{
    if (res) {
        memset(res, 0, sizeof *res);
        res->n_ops = r->res.n_ops;
        res->failed_op = UINT32_MAX;
        res_local_failure(res, code);
    }
    return code;
}

int projd_request_result(projd_request *r, projd_result *res, projd_error *e)
{
    if (r->fork_gen != atomic_load(&g_fork_gen))
        return conn_forked_fail(r->what, e);
    pthread_mutex_lock(&r->mu);
    int f = r->finished;
    pthread_mutex_unlock(&r->mu);
    if (!f)
        return fail(e, -EBUSY, "%s: request still in flight", r->what);
    return req_outcome(r, res, e);
}

/* Waits for r's done (its callback returned) and gives its outcome. The
 * aio deadline guarantees completion; the grace only guards against a bug
 * turning into a hang. */
static int wait_done(projd_request *r, projd_result *res, projd_error *e)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += r->timeout_ms / 1000 + 10;
    pthread_mutex_lock(&r->mu);
    int rc = 0;
    while (!r->done && rc == 0)
        rc = pthread_cond_timedwait(&r->cv, &r->mu, &ts);
    int d = r->done;
    pthread_mutex_unlock(&r->mu);
    if (!d)
        return wait_failed(r, res, fail(e, -ETIMEDOUT, "%s: request did not complete", r->what));
    return req_outcome(r, res, e);
}

int projd_request_wait(projd_request *r, projd_result *res, projd_error *e)
{
    if (r->fork_gen != atomic_load(&g_fork_gen)) /* nothing would complete it here */
        return conn_forked_fail(r->what, e);
    /* From its own callback: done is set only once the callback returns,
     * so the wait could only run out its deadline (the outcome is already
     * there: projd_request_result). */
    pthread_mutex_lock(&r->mu);
    const int own_cb = r->in_cb && pthread_equal(r->cb_thread, pthread_self());
    pthread_mutex_unlock(&r->mu);
    if (own_cb)
        return wait_failed(r, res,
                           fail(e, -EDEADLK,
                                "%s: waited for from its own callback (projd_request_result "
                                "gives its outcome there)",
                                r->what));
    if (!r->ring && !__atomic_load_n(&r->done, __ATOMIC_ACQUIRE)) {
        /* Its completion needs one of nng's threads: from an nng callback
         * this wait holds one (cb_block_begin). */
        int claimed;
        int rc = cb_block_begin(r->what, &claimed, e);
        if (rc)
            return wait_failed(r, res, rc);
        rc = wait_done(r, res, e);
        cb_block_end(claimed);
        return rc;
    }
    if (r->ring) {
        /* The reaper completes ring requests: waiting on it from its own
         * thread (a callback) would wait forever. */
        if (tl_completing == r->ring)
            return wait_failed(r, res,
                               fail(e, -EDEADLK, "%s: waited for from a ring callback", r->what));
        /* A reply usually comes within microseconds: spin before sleeping
         * on the condition variable, whose wake-up costs more than that.
         * A request without a callback takes its own reply off the ring
         * meanwhile: a reply that comes after the reaper went to sleep
         * then costs no wake-up of the reaper and then of this thread
         * (each ~20 µs measured). */
        ring_cli *rc = r->ring;
        int reap = r->cb == NULL && rc->wait_ns > 0;
        uint64_t t0 = now_ns();
        uint64_t until = t0 + (reap ? rc->wait_ns : rc->spin_ns);
        while (!__atomic_load_n(&r->done, __ATOMIC_ACQUIRE) && now_ns() < until) {
            if (reap && !ring_reap_own(rc, r)) {
                /* The ring is dead: the reply comes by the reaper or not
                 * at all. Spin no longer than the reaper would. */
                reap = 0;
                if (t0 + rc->spin_ns < until)
                    until = t0 + rc->spin_ns;
            }
            pj_cpu_relax();
        }
        if (r->cb == NULL) {
            /* Past the spin, its own deadline, not the reaper's next look
             * at the pending list (up to 20 ms apart when none was near as
             * it went to sleep). */
            int done = __atomic_load_n(&r->done, __ATOMIC_ACQUIRE);
            while (!done && now_ns() < r->deadline) {
                uint64_t left = r->deadline - now_ns();
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                uint64_t ns = (uint64_t)ts.tv_nsec + left;
                ts.tv_sec += (time_t)(ns / 1000000000ull);
                ts.tv_nsec = (long)(ns % 1000000000ull);
                pthread_mutex_lock(&r->mu);
                if (!r->done)
                    pthread_cond_timedwait(&r->cv, &r->mu, &ts);
                done = r->done;
                pthread_mutex_unlock(&r->mu);
            }
            if (!done)
                ring_expire_own(rc, r);
        }
    }
    return wait_done(r, res, e);
}

void projd_request_free(projd_request *r)
{
    if (!r || r->fork_gen != atomic_load(&g_fork_gen))
        return;
    pthread_mutex_lock(&r->mu);
    if (r->in_cb && pthread_equal(r->cb_thread, pthread_self())) {
        if (!r->destroying) /* else the free that runs this callback frees it */
            r->free_requested = 1;
        pthread_mutex_unlock(&r->mu);
        return;
    }
    pthread_mutex_unlock(&r->mu);
    req_destroy(r, 0);
}

/* Submit, wait, and hand back the request (for its reply) or fail. */
static int call(projd_conn *c, const pj_wbuf *w, const char *what, uint16_t expect, uint64_t req_id,
                projd_request **out, projd_error *e)
{
    projd_request *r;
    int claimed;
    int rc = cb_block_begin(what, &claimed, e);
    if (rc)
        return rc;
    rc = req_submit(c, w, what, expect, req_id, 0, NULL, NULL, 1, &r, e);
    if (rc == 0) {
        rc = projd_request_wait(r, NULL, e);
        if (rc)
            projd_request_free(r);
        else
            *out = r;
    }
    cb_block_end(claimed);
    return rc;
}

static const uint8_t *reply_body(const projd_request *r, size_t *len)
{
    *len = nng_msg_len(r->reply) - PJ_WIRE_HDR_SIZE;
    return (const uint8_t *)nng_msg_body(r->reply) + PJ_WIRE_HDR_SIZE;
}

uint64_t projd_next_req_id(projd_conn *c)
{
    return atomic_fetch_add(&c->next_id, 1);
}

/* ---- the shared-memory ring ----------------------------------------------------- */

static void ring_unlink(ring_cli *rc, projd_request *r)
{
    req_list_unlink(&rc->pending, r);
    r->in_pending = 0;
}

/* r leaves `pending` before its reply came (under rc->mu): its reply is
 * still owed, and will be dropped. */
static void ring_abandon(ring_cli *rc, projd_request *r)
{
    ring_unlink(rc, r);
    if (rc->n_gone == rc->ring.slots) { /* not by the invariant; keep the newest */
        memmove(rc->gone, rc->gone + 1, (rc->n_gone - 1) * sizeof *rc->gone);
        rc->n_gone--;
    }
    rc->gone[rc->n_gone++] = r->req_id;
}

/* Is id the reply of an abandoned request (then forgotten)? Under rc->mu. */
static int ring_owed(ring_cli *rc, uint64_t id)
{
    for (uint32_t i = 0; i < rc->n_gone; i++)
        if (rc->gone[i] == id) {
            rc->gone[i] = rc->gone[--rc->n_gone];
            return 1;
        }
    return 0;
}

/* Frees a ring client whose shm object exists (its mutexes made). */
static void ring_cli_free(ring_cli *rc)
{
    pj_shmbuf_destroy(&rc->shm);
    if (rc->wake_fd >= 0)
        close(rc->wake_fd);
    pthread_mutex_destroy(&rc->mu);
    pthread_mutex_destroy(&rc->reap_mu);
    pthread_cond_destroy(&rc->room);
    pthread_cond_destroy(&rc->completed);
    free(rc->rbuf);
    free(rc->gone);
    free(rc);
}

static void ring_unref(ring_cli *rc)
{
    /* Unmapped only with the last reference: a thread waiting for a request
     * may still look at the queues (ring_reap_own), and every request holds
     * one. */
    if (atomic_fetch_sub(&rc->refs, 1) == 1)
        ring_cli_free(rc);
}

/* Push r's message; r joins the pending list. 0; -EPIPE when the ring is
 * dead, or full and this is the reaper, or the message does not fit a slot
 * (the caller uses nng); -ETIMEDOUT when no slot came free in time. */
static int ring_submit(ring_cli *rc, const pj_wbuf *w, projd_request *r, projd_error *e)
{
    /* Larger than the slots (sized from WELCOME's limits, which a reload
     * may have raised since): nng carries it, and the daemon answers it as
     * it would there. */
    if (w->len > pj_ring_msg_max(&rc->ring))
        return -EPIPE;
    r->t_submit = now_ns();
    r->deadline = r->t_submit + (uint64_t)r->timeout_ms * 1000000ull;
    pthread_mutex_lock(&rc->mu);
    /* A callback submitting on a full ring runs on the reaper, which frees
     * the slots of every reply but those waiting threads take themselves:
     * it cannot wait for one. That request goes over nng. */
    if (!rc->dead && rc->inflight >= rc->ring.slots && tl_completing == rc) {
        pthread_mutex_unlock(&rc->mu);
        return -EPIPE;
    }
    /* Waiting for a slot keeps a thread's requests in the order it submits
     * them; sending the overflow over nng would let it overtake. */
    while (!rc->dead && rc->inflight >= rc->ring.slots) {
        uint64_t t = now_ns();
        if (t >= r->deadline)
            break;
        uint64_t wake = r->deadline - t;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        uint64_t ns = (uint64_t)ts.tv_nsec + wake;
        ts.tv_sec += (time_t)(ns / 1000000000ull);
        ts.tv_nsec = (long)(ns % 1000000000ull);
        pthread_cond_timedwait(&rc->room, &rc->mu, &ts);
    }
    if (rc->dead) {
        pthread_mutex_unlock(&rc->mu);
        return -EPIPE;
    }
    if (rc->inflight >= rc->ring.slots) {
        uint32_t inflight = rc->inflight;
        pthread_mutex_unlock(&rc->mu);
        return fail(e, -ETIMEDOUT, "%s: no free ring slot within %d ms (%u requests in flight)",
                    r->what, r->timeout_ms, inflight);
    }
    int woke = 0;
    int prc = pj_ring_push_woke(&rc->ring, PJ_RING_SQ, w->data, w->len, &woke);
    if (prc != 0) {
        pthread_mutex_unlock(&rc->mu);
        return fail(e, -EIO, "%s: ring push: %s", r->what, strerror(-prc));
    }
    /* The poller was asleep: wake the daemon's loop too, so that both
     * wake at once (a full FIFO means a wake-up is pending anyway). */
    if (woke && rc->wake_fd >= 0) {
        ssize_t n = write(rc->wake_fd, "w", 1);
        (void)n;
    }
    rc->inflight++;
    r->ring = rc;
    atomic_fetch_add(&rc->refs, 1);
    r->in_pending = 1;
    req_list_push(&rc->pending, r);
    const int poke = r->cb && r->deadline < rc->reaper_wake;
    pthread_mutex_unlock(&rc->mu);
    if (poke) {
        __atomic_store_n(&rc->poke, 1, __ATOMIC_SEQ_CST);
        /* One kick can land between the reaper's last look at poke and its
         * futex wait, which then sleeps out its slice (up to 20 ms past
         * this request's deadline; ring.h, pj_ring_stop_thread). Kick
         * again while the queue's sleeper dozes with poke still set, for a
         * millisecond at most: past that the sleeper woke, or was awake. */
        for (int i = 0; i < 50; i++) {
            pj_ring_kick(&rc->ring, PJ_RING_CQ);
            if (!__atomic_load_n(&rc->poke, __ATOMIC_ACQUIRE) ||
                !pj_ring_dozing(&rc->ring, PJ_RING_CQ))
                break;
            usleep(20);
        }
    }
    return 0;
}

/* Takes the first pending request that `pick` selects off the list, or
 * NULL. One at a time: a callback that frees another pending request then
 * finds it still pending (and drops it) instead of waiting for a completion
 * that would come after its own. */
static projd_request *ring_take_one(ring_cli *rc, int (*pick)(const projd_request *, uint64_t),
                                    uint64_t arg)
{
    pthread_mutex_lock(&rc->mu);
    projd_request *r = rc->pending;
    while (r && !pick(r, arg))
        r = r->lnext;
    if (r)
        ring_abandon(rc, r);
    pthread_mutex_unlock(&rc->mu);
    return r;
}

static int pick_any(const projd_request *r, uint64_t arg)
{
    (void)r;
    (void)arg;
    return 1;
}

static int pick_expired(const projd_request *r, uint64_t now)
{
    return now >= r->deadline;
}

/* Completes every pending request with code and why, and sends later ones
 * over nng (dead). Called by the reaper or by close. */
static void ring_fail_all(ring_cli *rc, int code, const char *why)
{
    pthread_mutex_lock(&rc->mu);
    rc->dead = 1;
    pthread_cond_broadcast(&rc->room);
    pthread_mutex_unlock(&rc->mu);
    projd_request *r;
    while ((r = ring_take_one(rc, pick_any, 0)) != NULL) {
        r->rc = fail(&r->err, code, "%s: %s", r->what, why);
        r->res.total_ns = now_ns() - r->t_submit;
        req_complete(r);
    }
}

/* One reply off the completion queue: its request, if still wanted. */
static void ring_take_reply(ring_cli *rc, const uint8_t *msg, size_t len)
{
    uint64_t id = pj_peek_req_id(msg, len);
    pthread_mutex_lock(&rc->mu);
    /* More replies than requests, or one whose req_id no request sent over
     * the ring had: not the daemon's protocol. Counting it would wrap
     * inflight (every later request then waits out its timeout for a slot)
     * and drop it silently would leave its request to time out. */
    int stray = rc->inflight == 0;
    if (!stray)
        rc->inflight--;
    projd_request *r = rc->pending;
    while (r && r->req_id != id)
        r = r->lnext;
    if (r)
        ring_unlink(rc, r);
    else if (!stray)
        stray = !ring_owed(rc, id);
    const int dead = rc->dead;
    pthread_cond_signal(&rc->room);
    pthread_mutex_unlock(&rc->mu);
    if (stray && !dead) {
        char why[160];
        snprintf(why, sizeof why,
                 "the daemon's ring sent a reply (req_id %llu) that answers no request sent on it: "
                 "the ring is not used again (requests go over nng)",
                 (unsigned long long)id);
        if (r) {
            r->rc = fail(&r->err, -EPROTO, "%s: %s", r->what, why);
            r->res.total_ns = now_ns() - r->t_submit;
            req_complete(r);
        }
        ring_fail_all(rc, -EPROTO, why);
        return;
    }
    if (!r)
        return; /* timed out or freed meanwhile: its reply was owed */
    const uint64_t t = now_ns();
    r->res.total_ns = t - r->t_submit;
    if (t > r->deadline) {
        /* Late, as nng's aio would have timed it out: the same error on
         * either path, whenever the reaper got to the reply. */
        r->rc = fail(&r->err, -ETIMEDOUT, "%s: no reply within %d ms", r->what, r->timeout_ms);
        req_complete(r);
        return;
    }
    if (nng_msg_alloc(&r->reply, len) != 0) {
        r->reply = NULL;
        r->rc = fail(&r->err, -ENOMEM, "%s: out of memory for the reply", r->what);
    } else {
        memcpy(nng_msg_body(r->reply), msg, len);
        req_parse(r);
    }
    req_complete(r);
}

/* The earliest deadline of the pending requests, or UINT64_MAX. */
/* The reaper's next look: the earliest pending deadline (returned;
 * UINT64_MAX when none), rounded up to a millisecond from now, and at most
 * 20 ms away; *wait_ms is how long from now. Kept in reaper_wake under mu,
 * where a submit compares its deadline with it. */
static uint64_t ring_plan(ring_cli *rc, int *wait_ms)
{
    uint64_t first = UINT64_MAX;
    pthread_mutex_lock(&rc->mu);
    for (const projd_request *r = rc->pending; r; r = r->lnext)
        if (r->deadline < first)
            first = r->deadline;
    const uint64_t t0 = now_ns();
    int ms = 20;
    if (first != UINT64_MAX && (first <= t0 || first - t0 < 20000000ull))
        ms = first <= t0 ? 0 : (int)((first - t0 + 999999) / 1000000);
    /* Unrounded: a submit due after it is seen at this look (at most the
     * millisecond's rounding late) and needs no poke. */
    rc->reaper_wake = first < t0 + 20000000ull ? first : t0 + 20000000ull;
    pthread_mutex_unlock(&rc->mu);
    *wait_ms = ms;
    return first;
}

/* Requests past their deadline fail, as nng's aio timeout does. */
static void ring_expire(ring_cli *rc)
{
    uint64_t t = now_ns();
    projd_request *r;
    while ((r = ring_take_one(rc, pick_expired, t)) != NULL) {
        r->rc = fail(&r->err, -ETIMEDOUT, "%s: no reply within %d ms", r->what, r->timeout_ms);
        r->res.total_ns = t - r->t_submit;
        req_complete(r);
    }
}

static int pick_this(const projd_request *r, uint64_t mine)
{
    return (uintptr_t)r == (uintptr_t)mine;
}

/* r (no callback) is past its deadline and its waiter is here: it fails
 * now, unless a reply or the reaper has taken it off the list already. */
static void ring_expire_own(ring_cli *rc, projd_request *r)
{
    if (ring_take_one(rc, pick_this, (uint64_t)(uintptr_t)r) != r)
        return;
    r->rc = fail(&r->err, -ETIMEDOUT, "%s: no reply within %d ms", r->what, r->timeout_ms);
    r->res.total_ns = now_ns() - r->t_submit;
    req_complete(r);
}

/* The caller of projd_request_wait for `mine`, a request without a
 * callback: takes the replies at the head of the completion queue that
 * belong to requests without callbacks (its own among them) until its own
 * is in, so that a reaper asleep need not be woken. It leaves a reply
 * whose request has a callback (that runs on the reaper), and keeps off
 * the queue while the reaper wants it. Returns 0 when the ring is dead
 * (stop trying), else 1. */
static int ring_reap_own(ring_cli *rc, const projd_request *mine)
{
    /* Unlocked looks first, so that an empty queue costs no lock: the
     * mapping lives as long as any request (ring_unref unmaps it). */
    if (__atomic_load_n(&rc->reaper_wants, __ATOMIC_ACQUIRE) ||
        pj_ring_pending(&rc->ring, PJ_RING_CQ) == 0)
        return 1;
    if (pthread_mutex_trylock(&rc->reap_mu) != 0)
        return 1; /* the reaper is taking replies */
    int go_on = 1;
    size_t cap = pj_ring_msg_max(&rc->ring);
    while (!__atomic_load_n(&mine->done, __ATOMIC_ACQUIRE)) {
        uint8_t hdr[PJ_WIRE_HDR_SIZE];
        size_t len;
        int prc = pj_ring_peek(&rc->ring, PJ_RING_CQ, hdr, sizeof hdr, &len);
        if (prc == -EAGAIN)
            break;
        if (prc != 0) /* corrupt: the reaper says so and fails everything */
            break;
        uint64_t id = pj_peek_req_id(hdr, len < sizeof hdr ? len : sizeof hdr);
        pthread_mutex_lock(&rc->mu);
        projd_request *o = rc->pending;
        while (o && o->req_id != id)
            o = o->lnext;
        int theirs = o && o->cb != NULL;
        int dead = rc->dead;
        pthread_mutex_unlock(&rc->mu);
        if (dead)
            go_on = 0;
        if (theirs || dead)
            break;
        if (pj_ring_pop(&rc->ring, PJ_RING_CQ, rc->rbuf, cap, &len) != 0)
            break;
        ring_take_reply(rc, rc->rbuf, len);
    }
    pthread_mutex_unlock(&rc->reap_mu);
    return go_on;
}

static void *ring_reaper(void *arg)
{
    ring_cli *rc = arg;
    tl_completing = rc;
    size_t cap = pj_ring_msg_max(&rc->ring);
    for (;;) {
        /* Cleared before stop is read: a close sets stop, then poke. */
        __atomic_store_n(&rc->poke, 0, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&rc->stop, __ATOMIC_SEQ_CST))
            break;
        /* Asleep at most until the first deadline (1 ms steps), so that a
         * request times out when nng's would; 20 ms when none is near, or
         * until a submit with an earlier deadline pokes. */
        int wait_ms;
        const uint64_t first = ring_plan(rc, &wait_ms);
        int w = wait_ms ? pj_ring_wait(&rc->ring, PJ_RING_CQ, rc->spin_ns, wait_ms, &rc->poke) : 0;
        if (w == -EINTR && __atomic_load_n(&rc->stop, __ATOMIC_SEQ_CST))
            break;
        size_t len;
        int prc;
        __atomic_store_n(&rc->reaper_wants, 1, __ATOMIC_RELEASE);
        pthread_mutex_lock(&rc->reap_mu);
        __atomic_store_n(&rc->reaper_wants, 0, __ATOMIC_RELAXED);
        while ((prc = pj_ring_pop(&rc->ring, PJ_RING_CQ, rc->rbuf, cap, &len)) != -EAGAIN) {
            if (prc == -EPROTO)
                break;
            ring_take_reply(rc, rc->rbuf, len);
        }
        pthread_mutex_unlock(&rc->reap_mu);
        if (prc == -EPROTO) {
            ring_fail_all(rc, -EPROTO, "the ring's completion queue is corrupt");
            break;
        }
        if (atomic_load(&rc->c->pipes_removed) != rc->removed_at_attach ||
            atomic_load(&rc->c->lost)) {
            ring_fail_all(rc, -ECONNRESET, LOST_WHY);
            break;
        }
        if (pj_ring_state(&rc->ring) == PJ_RING_STATE_CLOSED) {
            /* A reply pushed between the pops above and the closing is
             * still taken: only what never came fails. */
            pthread_mutex_lock(&rc->reap_mu);
            while (pj_ring_pop(&rc->ring, PJ_RING_CQ, rc->rbuf, cap, &len) == 0)
                ring_take_reply(rc, rc->rbuf, len);
            pthread_mutex_unlock(&rc->reap_mu);
            ring_fail_all(rc, -ECONNRESET, "projd dropped the ring; later requests go over nng");
            break;
        }
        if (first != UINT64_MAX && now_ns() >= first)
            ring_expire(rc);
    }
    tl_completing = NULL;
    return NULL;
}

/* Slots big enough for any PROJECT the daemon takes (and its reply). */
static uint32_t ring_slot_bytes(const projd_info *info)
{
    uint64_t need = PJ_WIRE_HDR_SIZE + 8 + 2 * PJ_WIRE_IPC_HANDLE_SIZE +
                    (uint64_t)info->max_ops_per_request * PJ_WIRE_OP_SIZE + 64;
    if (info->max_message_bytes && need > info->max_message_bytes)
        need = info->max_message_bytes;
    need += PJ_RING_SLOT_HDR;
    need = (need + 63) / 64 * 64;
    if (need < PJ_RING_MIN_SLOT)
        need = PJ_RING_MIN_SLOT;
    if (need > PJ_RING_MAX_SLOT)
        need = PJ_RING_MAX_SLOT;
    return (uint32_t)need;
}

int projd_ring_attach(projd_conn *c, uint32_t slots, projd_error *e)
{
    if (conn_forked(c))
        return conn_forked_fail("ring", e);
    /* Lost first: every call on a lost connection says so (projd.h), and
     * the ring it had is gone with the daemon's side. */
    if (atomic_load(&c->lost))
        return conn_lost("ring", e);
    if (c->ring)
        return fail(e, -EALREADY, "ring: this connection has one already");
    if (atomic_load(&c->ring_unsure))
        return fail(e, -EALREADY,
                    "ring: an earlier RING_ATTACH on this connection failed after it was sent, "
                    "and the daemon may hold that ring until the connection closes: connect "
                    "again to attach one");
    if (slots == 0)
        slots = PJ_RING_DEFAULT_SLOTS;
    uint32_t slot_bytes = ring_slot_bytes(&c->info);
    char err[256];
    if (pj_ring_check_geometry(slots, slot_bytes, err, sizeof err) != 0)
        return fail(e, -EINVAL, "ring: %s", err);
    ring_cli *rc = calloc(1, sizeof *rc);
    uint8_t *rbuf = malloc(slot_bytes);
    uint64_t *gone = calloc(slots, sizeof *gone);
    if (!rc || !rbuf || !gone) {
        free(rc);
        free(rbuf);
        free(gone);
        return fail(e, -ENOMEM, "ring: out of memory");
    }
    size_t size = pj_ring_bytes(slots, slot_bytes);
    int rv = pj_shmbuf_create(&rc->shm, size, err, sizeof err);
    if (rv != 0) {
        free(rc);
        free(rbuf);
        free(gone);
        return fail(e, rv, "ring: %s", err);
    }
    rc->rbuf = rbuf;
    rc->gone = gone;
    pthread_mutex_init(&rc->mu, NULL);
    pthread_mutex_init(&rc->reap_mu, NULL);
    pthread_cond_init(&rc->room, NULL);
    pthread_cond_init(&rc->completed, NULL);
    /* The wake FIFO beside it, before the daemon looks for it at attach;
     * without one the ring works, only its wake-ups come one after the
     * other. */
    rc->wake_fd = -1;
    char wake_path[PJ_WIRE_SHM_NAME_MAX + 32];
    int have_wake = pj_ring_wake_path(rc->shm.name, wake_path, sizeof wake_path) == 0 &&
                    mkfifo(wake_path, 0600) == 0;
    if (have_wake) {
        rc->wake_fd = open(wake_path, O_RDWR | O_NONBLOCK | O_CLOEXEC);
        if (rc->wake_fd < 0) {
            unlink(wake_path);
            have_wake = 0;
        }
    }
    pj_ring_format(rc->shm.ptr, slots, slot_bytes);
    pj_ring_view(&rc->ring, rc->shm.ptr, size, slots, slot_bytes, err, sizeof err);
    pj_ring_attach a = {.slots = slots, .slot_bytes = slot_bytes};
    snprintf(a.shm_name, sizeof a.shm_name, "%s", rc->shm.name);
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    pj_enc_ring_attach(&w, rid, &a);
    projd_request *r;
    int rcode =
        req_submit(c, &w, "RING_ATTACH", PJ_MSG_RING_ATTACHED, rid, 0, NULL, NULL, 1, &r, e);
    pj_wbuf_free(&w);
    if (rcode == 0) {
        rcode = projd_request_wait(r, NULL, e);
        /* A refusal (a status) leaves no ring there; a local failure once
         * sent (a timeout) may have come after the daemon attached it. */
        if (rcode < 0)
            atomic_store(&c->ring_unsure, 1);
        if (rcode)
            projd_request_free(r);
    }
    /* The daemon has opened it by now, or never will. */
    if (have_wake)
        unlink(wake_path);
    if (rcode) {
        ring_cli_free(rc);
        return rcode;
    }
    size_t len;
    const uint8_t *b = reply_body(r, &len);
    pj_ring_attached rep;
    rcode = pj_dec_ring_attached(b, len, &rep, err, sizeof err);
    projd_request_free(r);
    if (rcode != PJ_OK) {
        atomic_store(&c->ring_unsure, 1);
        ring_cli_free(rc);
        return fail(e, -EPROTO, "reply to RING_ATTACH: %s", err);
    }
    /* A daemon that does not spin does not watch the FIFO either. */
    if (rep.spin_us == 0 && rc->wake_fd >= 0) {
        close(rc->wake_fd);
        rc->wake_fd = -1;
    }
    /* The daemon has it mapped: nothing needs the name any more. */
    pj_shmbuf_unlink(&rc->shm);
    atomic_init(&rc->refs, 1);
    rc->c = c;
    rc->removed_at_attach = atomic_load(&c->pipes_removed);
    /* Spin as long as the daemon's poller does: replies of a busy
     * connection then arrive without a wake-up on either side. */
    rc->spin_ns = (uint64_t)rep.spin_us * 1000u;
    const char *spin = getenv("PROJD_RING_SPIN_US");
    if (spin && *spin)
        rc->spin_ns = env_us_ns(spin);
    /* A thread waiting for its own reply spins longer than the reaper: it
     * is blocked anyway, and a reply taken while it spins costs no wake-up.
     * Where nothing spins (few cores, spin 0), it sleeps at once. */
    rc->wait_ns = rc->spin_ns ? (rc->spin_ns > RING_WAIT_NS ? rc->spin_ns : RING_WAIT_NS) : 0;
    const char *wait = getenv("PROJD_RING_WAIT_US");
    if (wait && *wait)
        rc->wait_ns = env_us_ns(wait);
    rv = pthread_create(&rc->reaper, NULL, ring_reaper, rc);
    if (rv != 0) {
        ring_cli_free(rc);
        /* The daemon keeps polling a ring nobody uses until we close, and
         * refuses another: a second attach is told why, here. */
        atomic_store(&c->ring_unsure, 1);
        return fail(e, -rv, "ring: cannot start the reaper thread: %s", strerror(rv));
    }
    pthread_mutex_lock(&c->mu);
    c->ring = rc;
    pthread_mutex_unlock(&c->mu);
    ok(e);
    return 0;
}

int projd_ring_active(const projd_conn *c)
{
    ring_cli *rc = c->ring;
    if (!rc || conn_forked(c))
        return 0;
    pthread_mutex_lock(&rc->mu);
    int dead = rc->dead;
    pthread_mutex_unlock(&rc->mu);
    return !dead;
}

/* Stops the reaper, fails what is pending, drops the connection's
 * reference. */
static void ring_close(projd_conn *c)
{
    pthread_mutex_lock(&c->mu);
    ring_cli *rc = c->ring;
    c->ring = NULL;
    pthread_mutex_unlock(&c->mu);
    if (!rc)
        return;
    __atomic_store_n(&rc->stop, 1, __ATOMIC_SEQ_CST);
    __atomic_store_n(&rc->poke, 1, __ATOMIC_SEQ_CST);
    pj_ring_stop_thread(&rc->ring, PJ_RING_CQ, rc->reaper);
    /* The callbacks run here now: a wait from one is refused as on the
     * reaper. */
    ring_cli *was = tl_completing;
    tl_completing = rc;
    ring_fail_all(rc, -ECANCELED, "the connection was closed");
    tl_completing = was;
    /* and those a concurrent projd_request_free is completing */
    pthread_mutex_lock(&rc->mu);
    while (rc->completing)
        pthread_cond_wait(&rc->completed, &rc->mu);
    pthread_mutex_unlock(&rc->mu);
    ring_unref(rc); /* the last reference unmaps */
}

/* ---- connection ------------------------------------------------------------------ */

#define GONE_PIPES (sizeof((projd_conn *)0)->gone_pipes / sizeof((projd_conn *)0)->gone_pipes[0])

/* Did WELCOME's pipe go before the connection was marked established? */
static int hello_pipe_gone(projd_conn *c)
{
    const unsigned id = atomic_load(&c->hello_pipe);
    for (size_t i = 0; i < GONE_PIPES; i++)
        if (atomic_load(&c->gone_pipes[i]) == id)
            return 1;
    return 0;
}

static void pipe_removed(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)ev;
    projd_conn *c = arg;
    const unsigned id = (unsigned)nng_pipe_id(p);
    atomic_store(&c->gone_pipes[atomic_fetch_add(&c->n_gone_pipes, 1) % GONE_PIPES], id);
    atomic_fetch_add(&c->pipes_removed, 1);
    /* The daemon's state of this connection (HELLO, buffers, ring) went
     * with WELCOME's pipe; the dialer would reconnect to whatever listens
     * next. (A pipe closed before WELCOME loses nothing.) */
    if (id == atomic_load(&c->hello_pipe))
        conn_mark_lost(c);
}

/* Whoever answers on the socket path gets our requests and the names of
 * our shared memory, so an ipc peer must be root or our own uid: a daemon
 * of another user (or someone who took over the socket's directory) is
 * refused before anything is sent. $PROJD_TRUST_UID (a uid or a user
 * name) adds the one service account a daemon is deliberately run under;
 * $PROJD_TRUST_ANY_UID=1 turns the check off (any uid, also one that took
 * over a socket's directory). */
static void peer_check(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)ev;
    projd_conn *c = arg;
    /* A pipe after HELLO is a redial: the daemon it reaches (another, or
     * the same one restarted) has none of this connection's state. */
    if (atomic_load(&c->established)) {
        nng_pipe_close(p);
        conn_mark_lost(c);
        return;
    }
    uint64_t uid = UINT64_MAX;
    const int have_uid = strncmp(c->url, "ipc://", 6) == 0 &&
                         nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid) == 0;
    if (have_uid)
        atomic_store(&c->peer_uid, (long long)uid);
    if (c->trust_any_uid || strncmp(c->url, "ipc://", 6) != 0)
        return;
    if (have_uid && (uid == 0 || uid == (uint64_t)geteuid() ||
                     (c->trust_uid >= 0 && uid == (uint64_t)c->trust_uid)))
        return;
    atomic_store(&c->bad_peer, uid == UINT64_MAX ? (long long)UINT32_MAX : (long long)uid);
    nng_pipe_close(p);
}

static int bad_peer_error(projd_conn *c, projd_error *e)
{
    long long uid = atomic_load(&c->bad_peer);
    if (uid == (long long)UINT32_MAX)
        return fail(e, -EPERM,
                    "connect %s: the peer's credentials could not be read (not a Unix socket "
                    "peer nng can ask); refusing it",
                    c->url);
    return fail(e, -EPERM,
                "connect %s: the process serving this socket runs as uid %lld, not root or our "
                "uid %u%s; refusing it (set PROJD_TRUST_UID=%lld if that daemon is meant to run "
                "under that account)",
                c->url, uid, (unsigned)geteuid(), c->trust_uid >= 0 ? " or $PROJD_TRUST_UID's" : "",
                uid);
}

/* How long HELLO waits through closes of its pipe before WELCOME (see
 * say_hello): a few times projd's ~300 ms to retire a stopped listener. */
#define RESET_RETRY_MS  1500
#define RESET_RETRY_MAX 4 /* closes: one is a stopped listener's, a few are to spare */

/* Milliseconds since t (CLOCK_MONOTONIC). */
static long ms_since(const struct timespec *t)
{
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - t->tv_sec) * 1000 + (now.tv_nsec - t->tv_nsec) / 1000000;
}

/* Why a daemon may have closed our connection before WELCOME without a
 * word. Its auth config refuses a uid silently, but never root's or its
 * own; for those the likely cause is a listener nng 1.5 stopped, which
 * projd replaces (daemon/DAEMON.md, "The listener and nng 1.5"). */
static const char *silent_close_why(projd_conn *c)
{
    const long long peer = atomic_load(&c->peer_uid);
    const uid_t me = geteuid();
    if (me == 0 || (peer >= 0 && peer == (long long)me))
        return "this uid is one projd always allows (root, or its own), so not its auth "
               "config: a listener being replaced, or many refusals waiting; projd's log says "
               "more";
    return "most likely this uid is not allowed by its auth config (a connection limit or a "
           "drain is said, unless many refusals were waiting); projd's log says which";
}

/* HELLO/WELCOME. A daemon that refuses the peer answers HELLO with an ERROR
 * saying why (E_LIMIT: its connection limits; E_SHUTDOWN: draining), but
 * closes the pipe without a word on a peer its auth does not allow (and on
 * any past 16 refusals waiting, or from before it said why): so the wait
 * also watches for the pipe's end and says so, instead of waiting out the
 * timeout. */
static int say_hello(projd_conn *c, const char *name, projd_error *e)
{
    pj_hello h;
    memset(&h, 0, sizeof h);
    h.ver_min = PJ_WIRE_VERSION;
    h.ver_max = PJ_WIRE_VERSION;
    h.pid = (uint32_t)getpid();
    snprintf(h.name, sizeof h.name, "%s", name ? name : "libprojd");
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t id = projd_next_req_id(c);
    pj_enc_hello(&w, id, &h);
    /* A pipe closed before WELCOME: the dialer dials again at once, and
     * HELLO is sent again on the same socket. A dial that landed on a
     * listener nng 1.5 stopped (one client hanging up mid-handshake is
     * enough) is closed when projd retires it, ~300 ms on, and the next
     * reaches its new one; so closes are waited through for RESET_RETRY_MS
     * (an auth refusal, which looks the same, is answered that much later),
     * within HELLO's own wait. A fresh socket would not do: closing one
     * mid-handshake stops the listener again. */
    const int hello_ms = atomic_load(&c->timeout_ms);
    struct timespec started, closed_at = {0, 0};
    clock_gettime(CLOCK_MONOTONIC, &started);
    int closes = 0, rc;
    projd_request *r;
    for (;;) {
        const int removed = atomic_load(&c->pipes_removed);
        rc = req_submit(c, &w, "HELLO", PJ_MSG_WELCOME, id, 0, NULL, NULL, 1, &r, e);
        if (rc) {
            pj_wbuf_free(&w);
            return rc;
        }
        int done = 0;
        for (;;) {
            struct timespec ts;
            clock_gettime(CLOCK_REALTIME, &ts);
            ts.tv_nsec += 20 * 1000000;
            if (ts.tv_nsec >= 1000000000) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000;
            }
            pthread_mutex_lock(&r->mu);
            if (!r->done)
                pthread_cond_timedwait(&r->cv, &r->mu, &ts);
            done = r->done;
            pthread_mutex_unlock(&r->mu);
            if (done || atomic_load(&c->bad_peer) >= 0 || atomic_load(&c->pipes_removed) > removed)
                break;
        }
        if (atomic_load(&c->bad_peer) >= 0) {
            projd_request_free(r);
            pj_wbuf_free(&w);
            return bad_peer_error(c, e);
        }
        /* A HELLO sent again that times out ran into the end of the wait
         * while the closes went on: said as the closes, not as a daemon
         * that took the connection and never answered. */
        const int closed = !done || r->rc == -ECONNRESET || r->rc == -ECONNABORTED ||
                           r->rc == -ESHUTDOWN || (closes && r->rc == -ETIMEDOUT);
        if (!closed)
            break;
        projd_request_free(r);
        /* Counted as the pipes that went: one HELLO's wait may see several. */
        if (!closes)
            clock_gettime(CLOCK_MONOTONIC, &closed_at);
        const int gone = atomic_load(&c->pipes_removed);
        closes = gone > closes ? gone : closes + 1;
        /* A few closes at most: the dialer redials at once after each (nng
         * resets its back-off on every connect), and a daemon that closes
         * every connection (an auth refusal) would otherwise meet dozens. */
        if (closes >= RESET_RETRY_MAX || ms_since(&closed_at) + 10 >= RESET_RETRY_MS ||
            ms_since(&started) + 150 >= hello_ms) {
            pj_wbuf_free(&w);
            return fail(e, -ECONNRESET,
                        "connect %s: projd closed the connection before WELCOME without saying "
                        "why (%d time%s in %.1f s): %s",
                        c->url, closes, closes == 1 ? "" : "s", (double)ms_since(&started) / 1000.0,
                        silent_close_why(c));
        }
        nng_msleep(10);
        const long hello_left = hello_ms - ms_since(&started);
        atomic_store(&c->timeout_ms, hello_left > 1 ? (int)hello_left : 1);
    }
    pj_wbuf_free(&w);
    rc = projd_request_wait(r, NULL, e);
    if (rc == 0) {
        atomic_store(&c->hello_pipe, (unsigned)nng_pipe_id(nng_msg_get_pipe(r->reply)));
        size_t len;
        const uint8_t *b = reply_body(r, &len);
        char err[512];
        int st = PJ_E_INTERNAL;
        free(c->layers);
        c->layers = malloc(PJ_WIRE_MAX_LAYERS_ALL * sizeof *c->layers);
        if (c->layers)
            st = pj_dec_welcome_all(b, len, &c->info, c->layers, PJ_WIRE_MAX_LAYERS_ALL, err,
                                    sizeof err);
        else
            snprintf(err, sizeof err, "WELCOME: out of memory for its layer list");
        if (st == PJ_OK && c->info.n_layers_all) { /* keep what it named, not 1024 */
            pj_wire_layer *fit = realloc(c->layers, c->info.n_layers_all * sizeof *fit);
            if (fit)
                c->layers = fit;
            c->info.layers_all = c->layers;
        }
        if (st != PJ_OK)
            rc = fail(e, -EPROTO, "connect %s: %s", c->url, err);
        else if (c->info.version != PJ_WIRE_VERSION)
            rc = fail(e, -EPROTO, "connect %s: daemon chose protocol version %u, we speak %d",
                      c->url, c->info.version, PJ_WIRE_VERSION);
    } else if (e && rc > 0) {
        /* E_AUTH, E_LIMIT, E_SHUTDOWN: the daemon refused the connection
         * and its message says so and why; anything else refused HELLO. */
        const int refused = rc == PJ_E_AUTH || rc == PJ_E_LIMIT || rc == PJ_E_SHUTDOWN;
        char tmp[sizeof e->msg];
        snprintf(tmp, sizeof tmp, "%s", e->msg);
        fail(e, rc, "connect %s: %s%s", c->url, refused ? "" : "HELLO refused: ", tmp);
    }
    projd_request_free(r);
    return rc;
}

/* Stops redialing before closing the socket: nng 1.5's nng_close can wait
 * forever on a dialer that keeps reconnecting to a peer that keeps hanging
 * up (what an auth refusal looks like). */
static void close_sock(projd_conn *c)
{
    if (nng_dialer_id(c->dialer) > 0)
        nng_dialer_close(c->dialer);
    nng_close(c->sock);
}

/* nng 1.5.2's nng_close can wait forever: an aio it stops that was
 * prepared but not started is never finished (nanomsg/nng#1813, fixed in
 * 1.8). It happens now and then when the daemon died under requests (1 in
 * ~40 runs of test_libprojd's daemon_killed_fails_fast_nng on a loaded
 * machine). So the close runs on a thread of its own, and a close that has
 * not returned after CLOSE_WAIT_MS is given up: the socket, its thread and
 * the connection are leaked (nng's stuck close still refers to them), which
 * is the only safe thing left. 0 when it returned, -ETIMEDOUT when not. */
#define CLOSE_WAIT_MS 5000
static void *close_sock_main(void *arg)
{
    projd_conn *c = arg;
    close_sock(c);
    pthread_mutex_lock(&c->mu);
    c->sock_closed = 1;
    pthread_cond_broadcast(&c->idle);
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

static int close_sock_bounded(projd_conn *c)
{
    pthread_t th;
    if (pthread_create(&th, NULL, close_sock_main, c) != 0) {
        close_sock(c); /* no thread to spare: close here, unbounded */
        return 0;
    }
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += CLOSE_WAIT_MS / 1000;
    pthread_mutex_lock(&c->mu);
    int rc = 0;
    while (!c->sock_closed && rc != ETIMEDOUT)
        rc = pthread_cond_timedwait(&c->idle, &c->mu, &until);
    int closed = c->sock_closed;
    pthread_mutex_unlock(&c->mu);
    if (!closed) {
        pthread_detach(th);
        return -ETIMEDOUT;
    }
    pthread_join(th, NULL);
    return 0;
}

/* Milliseconds until deadline (CLOCK_MONOTONIC); negative once past. */
static long ms_left(const struct timespec *deadline)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (deadline->tv_sec - t.tv_sec) * 1000 + (deadline->tv_nsec - t.tv_nsec) / 1000000;
}

/* Debian 12's nng 1.5.2 listener dies when a peer hangs up mid-handshake;
 * projd replaces it within ~100 ms (daemon/DAEMON.md), and a dial that lands
 * in that window is refused or reset. Such a refusal is retried for a short
 * while when the socket file exists; a missing file is answered at once. */
#define DIAL_RETRY_MS 1500
/* The dial itself is synchronous and not cut short: closing the socket
 * under a dial in progress can hang both calls in nng 1.5, and a dial
 * given up mid-handshake stops the daemon's listener for ~100 ms. So a
 * daemon that takes the connection but never does nng's handshake (a
 * stopped process) holds it for nng's own negotiation limit, 10 s; a
 * daemon whose event loop is stuck still does the handshake (nng's
 * threads) and is bounded by HELLO's wait. */
static int dial_with_retry(projd_conn *c, const struct timespec *deadline)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int delay_ms = 5;; delay_ms = delay_ms < 80 ? delay_ms * 2 : 80) {
        int rv = nng_dial(c->sock, c->url, &c->dialer, 0);
        if (rv != NNG_ECONNREFUSED && rv != NNG_ECONNRESET && rv != NNG_ECONNSHUT &&
            rv != NNG_ECLOSED)
            return rv;
        const char *path = strncmp(c->url, "ipc://", 6) == 0 ? c->url + 6 : c->url;
        if (access(path, F_OK) != 0)
            return rv;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms + delay_ms > DIAL_RETRY_MS || delay_ms > ms_left(deadline))
            return rv;
        nng_msleep((nng_duration)delay_ms);
    }
}

/* The dial's failure: a missing socket file said as such (nng reports it
 * as a refusal), with how the URL was chosen when projd_connect chose it. */
static int dial_error(projd_conn *c, int rv, projd_error *e)
{
    int rc = nng_errno(rv);
    const char *path = pj_sockpath_file(c->url);
    struct stat st;
    if ((rv == NNG_ECONNREFUSED || rv == NNG_ENOENT) && path && lstat(path, &st) != 0 &&
        errno == ENOENT)
        return fail(e, -ENOENT, "connect %s: no socket file at %s (is projd running there?)%s",
                    c->url, path, c->url_from);
    /* faccessat with the effective ids asks the kernel what the connect
     * met: the file's mode (owner, group or supplementary group, other). */
    if (rv == NNG_EPERM && path && stat(path, &st) == 0 &&
        faccessat(AT_FDCWD, path, W_OK, AT_EACCESS) != 0) {
        /* The kernel's check of the socket file's mode, before projd's
         * own (auth.*): say what the file allows and who is asking. */
        char grp[64] = "?", buf[1024];
        struct group gr, *g = NULL;
        if (getgrgid_r(st.st_gid, &gr, buf, sizeof buf, &g) == 0 && g)
            snprintf(grp, sizeof grp, "%s", g->gr_name);
        return fail(e, -EPERM,
                    "connect %s: permission denied by the socket file (mode %04o, owner uid %u, "
                    "group %s (%u)) to uid %u, gid %u, not in that group: projd's socket.mode and "
                    "socket.group decide who may reach it, before its auth lists (a user just "
                    "added to the group must log in again)%s",
                    c->url, (unsigned)(st.st_mode & 07777), (unsigned)st.st_uid, grp,
                    (unsigned)st.st_gid, (unsigned)geteuid(), (unsigned)getegid(), c->url_from);
    }
    if (rv == NNG_ETIMEDOUT)
        return fail(e, -ETIMEDOUT,
                    "connect %s: the socket took the connection but nng's handshake got no answer "
                    "in nng's 10 s (is projd stopped?)%s",
                    c->url, c->url_from);
    return fail(e, rc, "connect %s: %s%s%s", c->url, nng_strerror(rv),
                (rv == NNG_ECONNREFUSED || rv == NNG_ENOENT) ? " (is projd running there?)" : "",
                c->url_from);
}

/* One socket, one dial, one HELLO. On failure the socket is closed. HELLO
 * waits hello_ms, or what is left before deadline when that is less. */
#define HELLO_FIRST_TIMEOUT_MS 2000
static int connect_attempt(projd_conn *c, const char *name, int hello_ms,
                           const struct timespec *deadline, int *dial_timed_out, projd_error *e)
{
    int rc;
    *dial_timed_out = 0;
    int rv = nng_req0_open(&c->sock);
    if (rv)
        return fail(e, nng_errno(rv), "connect: nng_req0_open: %s", nng_strerror(rv));
    /* No resend timer: PROJECT is not idempotent with respect to timing,
     * and the deadline of each request already bounds it. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, REPLY_MAX_BYTES + PJ_WIRE_HDR_SIZE);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMINT, 20);
    nng_socket_set_ms(c->sock, NNG_OPT_RECONNMAXT, 1000);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_REM_POST, pipe_removed, c);
    nng_pipe_notify(c->sock, NNG_PIPE_EV_ADD_PRE, peer_check, c);
    rv = dial_with_retry(c, deadline);
    if (rv && atomic_load(&c->bad_peer) >= 0) {
        rc = bad_peer_error(c, e);
        goto fail_sock;
    }
    if (rv) {
        *dial_timed_out = rv == NNG_ETIMEDOUT;
        rc = dial_error(c, rv, e);
        goto fail_sock;
    }
    long left = ms_left(deadline);
    atomic_store(&c->timeout_ms, left < hello_ms ? (int)(left > 1 ? left : 1) : hello_ms);
    rc = say_hello(c, name, e);
    if (rc)
        goto fail_sock;
    return 0;
fail_sock:
    close_sock(c);
    return rc;
}

/* $PROJD_RING: "1" attaches a ring of the default size at connect, a
 * number >= 2 one of that many slots, "0" or unset none. A daemon that
 * refuses it (older, or ring.enabled = 0) leaves the connection on nng. */
static void ring_from_env(projd_conn *c)
{
    const char *v = getenv("PROJD_RING");
    if (!v || !*v || strcmp(v, "0") == 0)
        return;
    unsigned long slots = strtoul(v, NULL, 10);
    projd_error e;
    if (projd_ring_attach(c, slots == 1 ? 0 : (uint32_t)slots, &e) != 0 &&
        getenv("PROJD_RING_VERBOSE"))
        fprintf(stderr, "libprojd: PROJD_RING=%s: staying on nng: %s\n", v, e.msg);
}

int projd_connect_timeout(const char *url, const char *name, int timeout_ms, projd_conn **out,
                          projd_error *e)
{
    *out = NULL;
    if (timeout_ms <= 0)
        return fail(e, -EINVAL, "connect: timeout %d ms: must be > 0", timeout_ms);
    pthread_once(&g_fork_once, fork_watch);
    if (atomic_load(&g_fork_gen))
        return fail(e, -ECHILD,
                    "connect: this process is a fork() of one that had connected to projd, and "
                    "nng cannot run after fork: open connections in processes started with exec "
                    "(Python: multiprocessing's 'spawn' or 'forkserver')");
    projd_conn *c = calloc(1, sizeof *c);
    if (!c)
        return fail(e, -ENOMEM, "connect: out of memory");
    char err[600];
    pj_sockpath_source from;
    int rc = pj_sockpath_resolve_src(url, PJ_SOCKPATH_CLIENT, c->url, sizeof c->url, &from, err,
                                     sizeof err);
    if (rc) {
        free(c);
        return fail(e, rc, "connect: %s", err);
    }
    if (from != PJ_SOCKPATH_FROM_CONFIGURED)
        snprintf(c->url_from, sizeof c->url_from, "; the URL is %s",
                 pj_sockpath_source_text(PJ_SOCKPATH_CLIENT, from));
    atomic_init(&c->timeout_ms, timeout_ms);
    atomic_init(&c->next_id, ((uint64_t)getpid() << 32) | 1u);
    atomic_init(&c->pipes_removed, 0);
    atomic_init(&c->bad_peer, -1);
    atomic_init(&c->peer_uid, -1);
    atomic_init(&c->hello_pipe, 0);
    const char *trust = getenv("PROJD_TRUST_ANY_UID");
    c->trust_any_uid = trust && strcmp(trust, "1") == 0;
    c->trust_uid = -1;
    const char *tu = getenv("PROJD_TRUST_UID");
    if (tu && tu[0]) {
        char *end;
        errno = 0;
        unsigned long v = strtoul(tu, &end, 10);
        struct passwd pw, *pr = NULL;
        char pwbuf[16384]; /* a directory service's entry can pass 1 KiB (ERANGE) */
        if (!*end && !errno && tu[0] >= '0' && tu[0] <= '9' && v <= UINT32_MAX)
            c->trust_uid = (long long)v;
        else if (getpwnam_r(tu, &pw, pwbuf, sizeof pwbuf, &pr) == 0 && pr)
            c->trust_uid = (long long)pr->pw_uid;
        else {
            free(c);
            return fail(e, -EINVAL,
                        "connect: $PROJD_TRUST_UID \"%.64s\": not a uid or a user name of this "
                        "host",
                        tu);
        }
    }
    pthread_mutex_init(&c->mu, NULL);
    pthread_cond_init(&c->idle, NULL);
    /* A dial that lands on a listener nng 1.5 has just stopped (projd
     * replaces it within ~100 ms, daemon/DAEMON.md) is accepted by the
     * kernel but never answered: HELLO waits a short while per attempt and
     * the whole connect is retried on a fresh socket until timeout_ms is
     * spent (dial_with_retry says what a dial may take beyond it). */
    struct timespec t0, deadline;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    deadline = t0;
    deadline.tv_sec += timeout_ms / 1000;
    deadline.tv_nsec += (long)(timeout_ms % 1000) * 1000000;
    if (deadline.tv_nsec >= 1000000000) {
        deadline.tv_sec++;
        deadline.tv_nsec -= 1000000000;
    }
    int hello_ms = HELLO_FIRST_TIMEOUT_MS, dial_timed_out = 0;
    for (;;) {
        atomic_store(&c->pipes_removed, 0);
        atomic_store(&c->bad_peer, -1);
        atomic_store(&c->hello_pipe, 0);
        for (size_t i = 0; i < GONE_PIPES; i++)
            atomic_store(&c->gone_pipes[i], 0);
        rc = connect_attempt(c, name, hello_ms, &deadline, &dial_timed_out, e);
        atomic_store(&c->timeout_ms, timeout_ms);
        if (rc == 0) {
            atomic_store(&c->established, 1);
            /* WELCOME's pipe, gone between WELCOME and the line above, found
             * the connection not yet established (conn_mark_lost ignored
             * it): later calls would wait out their timeouts for a peer. */
            if (hello_pipe_gone(c))
                conn_mark_lost(c);
            ring_from_env(c);
            ok(e);
            *out = c;
            return 0;
        }
        long left = ms_left(&deadline);
        /* A dial that spent nng's 10 s is not tried again: the process
         * behind it is stopped, and each try leaves it one more connection
         * to choke on when it runs again. */
        if (rc != -ETIMEDOUT || left <= 0 || dial_timed_out)
            break;
        hello_ms = hello_ms < left / 2 ? hello_ms * 2 : (int)left;
    }
    /* HELLO went unanswered on every attempt (a dial that timed out in
     * nng's handshake has said so already). */
    if (rc == -ETIMEDOUT && !dial_timed_out) {
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        double took = (double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9;
        fail(e, rc,
             "connect %s: projd accepted the connection but sent no WELCOME within %d ms (gave "
             "up after %.1f s; is projd stopped or overloaded?)%s",
             c->url, timeout_ms, took, c->url_from);
    }
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle);
    free(c->layers);
    free(c);
    return rc;
}

int projd_connect(const char *url, const char *name, projd_conn **out, projd_error *e)
{
    return projd_connect_timeout(url, name, PROJD_DEFAULT_TIMEOUT_MS, out, e);
}

void projd_close(projd_conn *c)
{
    if (!c || conn_forked(c))
        return;
    /* From here submissions fail, also those of callbacks. */
    pthread_mutex_lock(&c->mu);
    atomic_store(&c->closing, 1);
    pthread_mutex_unlock(&c->mu);
    /* Completes every outstanding request with -ECANCELED first: those on
     * the ring here, those on nng on nng's threads once nng_close has
     * aborted them, after it returned; their callbacks may still use c. */
    ring_close(c);
    int stuck = close_sock_bounded(c) != 0;
    pthread_mutex_lock(&c->mu);
    while (!stuck && c->nng_live > 0)
        pthread_cond_wait(&c->idle, &c->mu);
    /* The buffers go either way (a name left behind stays in /dev/shm
     * until reboot); only c is left to a stuck close (close_sock_bounded). */
    projd_buffer *b = c->buffers;
    c->buffers = NULL;
    pthread_mutex_unlock(&c->mu);
    while (b) {
        projd_buffer *next = b->next;
        pj_shmbuf_destroy(&b->shm);
        free(b);
        b = next;
    }
    if (stuck)
        return;
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->idle);
    free(c->layers);
    free(c);
}

int projd_set_timeout_ms(projd_conn *c, int ms)
{
    if (ms <= 0)
        return -EINVAL;
    atomic_store(&c->timeout_ms, ms);
    return 0;
}

int projd_get_timeout_ms(const projd_conn *c)
{
    return atomic_load(&((projd_conn *)c)->timeout_ms);
}

const char *projd_url(const projd_conn *c)
{
    return c->url;
}

const projd_info *projd_info_get(const projd_conn *c)
{
    return &c->info;
}

static int layer_find_in(const projd_conn *c, const char *name, uint32_t n)
{
    const pj_wire_layer *ls = pj_welcome_layers(&c->info);
    for (uint32_t i = 0; name && i < n; i++)
        if (strcmp(ls[i].name, name) == 0)
            return (int)i;
    return -1;
}

/* projd_layer_find has two versions. PROJD_1's, which programs built
 * before 0.3 bind, searches info's inline 64 only: those programs index
 * info->layers with its answer, and an index past 64 would read past the
 * array. PROJD_1.2's (the default, what new programs bind) searches all. */
int pj_layer_find_v1(const projd_conn *c, const char *name);
int pj_layer_find_v1(const projd_conn *c, const char *name)
{
    return layer_find_in(c, name, c->info.n_layers);
}
__asm__(".symver pj_layer_find_v1, projd_layer_find@PROJD_1");

int pj_layer_find_v12(const projd_conn *c, const char *name);
int pj_layer_find_v12(const projd_conn *c, const char *name)
{
    return layer_find_in(c, name, pj_welcome_n_layers(&c->info));
}
__asm__(".symver pj_layer_find_v12, projd_layer_find@@PROJD_1.2");

uint32_t projd_layer_count(const projd_conn *c)
{
    return pj_welcome_n_layers(&c->info);
}

const projd_layer *projd_layer_get(const projd_conn *c, uint32_t index)
{
    return index < pj_welcome_n_layers(&c->info) ? &pj_welcome_layers(&c->info)[index] : NULL;
}

/* ---- buffers ---------------------------------------------------------------------- */

static int do_register(projd_conn *c, const pj_register *reg, uint32_t *id, projd_error *e)
{
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    pj_enc_register(&w, rid, reg);
    projd_request *r;
    int rc = call(c, &w, "REGISTER", PJ_MSG_REGISTERED, rid, &r, e);
    if (rc == -ETIMEDOUT) {
        /* No reply in time: the daemon may have registered it all the same,
         * a mapping nothing could name until the connection closes. Sent
         * once more with the same req_id and the RETRY flag, it is
         * answered with that registration if there was one (PROTOCOL.md,
         * REGISTER). A daemon before the flag refuses it (E_FLAGS): then
         * the timeout stands. */
        projd_error first = {0};
        if (e)
            first = *e;
        pj_wbuf_set_hdr_flags(&w, PJ_HF_RETRY);
        int again = call(c, &w, "REGISTER (sent again after a first timeout)", PJ_MSG_REGISTERED,
                         rid, &r, e);
        if (again == PJ_E_FLAGS) {
            if (e)
                *e = first;
        } else {
            rc = again;
        }
    }
    pj_wbuf_free(&w);
    if (rc)
        return rc;
    size_t len;
    const uint8_t *b = reply_body(r, &len);
    pj_registered m;
    char err[256];
    if (pj_dec_registered(b, len, &m, err, sizeof err) != PJ_OK)
        rc = fail(e, -EPROTO, "reply to REGISTER: %s", err);
    else if (m.size != reg->size)
        rc = fail(e, -EPROTO, "reply to REGISTER: size %llu, asked for %llu",
                  (unsigned long long)m.size, (unsigned long long)reg->size);
    else
        *id = m.buffer_id;
    projd_request_free(r);
    return rc;
}

int projd_shm_create(projd_conn *c, size_t size, projd_buffer **out, projd_error *e)
{
    *out = NULL;
    if (conn_forked(c))
        return conn_forked_fail("shm buffer", e);
    projd_buffer *b = calloc(1, sizeof *b);
    if (!b)
        return fail(e, -ENOMEM, "shm buffer: out of memory");
    char err[512];
    int rc = pj_shmbuf_create(&b->shm, size, err, sizeof err);
    if (rc) {
        free(b);
        return fail(e, rc, "%s", err);
    }
    pj_register reg;
    memset(&reg, 0, sizeof reg);
    reg.kind = PJ_BUF_SHM;
    reg.size = size;
    snprintf(reg.shm_name, sizeof reg.shm_name, "%s", b->shm.name);
    rc = do_register(c, &reg, &b->id, e);
    /* Registered or not, the name is no longer needed: the daemon mapped it
     * during REGISTER. Unlinking now leaves nothing behind if we die. */
    pj_shmbuf_unlink(&b->shm);
    if (rc) {
        pj_shmbuf_destroy(&b->shm);
        free(b);
        return rc;
    }
    b->c = c;
    pthread_mutex_lock(&c->mu);
    b->next = c->buffers;
    if (c->buffers)
        c->buffers->prev = b;
    c->buffers = b;
    pthread_mutex_unlock(&c->mu);
    ok(e);
    *out = b;
    return 0;
}

int projd_buffer_release(projd_buffer *b, projd_error *e)
{
    if (!b)
        return 0;
    projd_conn *c = b->c;
    if (conn_forked(c))
        return conn_forked_fail("buffer release", e);
    pthread_mutex_lock(&c->mu);
    if (b->prev)
        b->prev->next = b->next;
    else
        c->buffers = b->next;
    if (b->next)
        b->next->prev = b->prev;
    pthread_mutex_unlock(&c->mu);
    int rc = projd_unregister(c, b->id, e);
    pj_shmbuf_destroy(&b->shm);
    free(b);
    return rc;
}

void *projd_buffer_ptr(const projd_buffer *b)
{
    return b->shm.ptr;
}

uint32_t projd_buffer_id(const projd_buffer *b)
{
    return b->id;
}

size_t projd_buffer_size(const projd_buffer *b)
{
    return b->shm.size;
}

int projd_register_cuda_ipc(projd_conn *c, const uint8_t handle[PJ_WIRE_IPC_HANDLE_SIZE],
                            const uint8_t uuid[PJ_WIRE_UUID_SIZE], uint64_t size, uint32_t *id,
                            projd_error *e)
{
    if (!handle || !uuid || !id)
        return fail(e, -EINVAL, "register cuda ipc: handle, uuid and id are required");
    pj_register reg;
    memset(&reg, 0, sizeof reg);
    reg.kind = PJ_BUF_CUDA;
    reg.size = size;
    memcpy(reg.ipc_handle, handle, PJ_WIRE_IPC_HANDLE_SIZE);
    memcpy(reg.device_uuid, uuid, PJ_WIRE_UUID_SIZE);
    int rc = do_register(c, &reg, id, e);
    if (rc == 0)
        ok(e);
    return rc;
}

int projd_unregister(projd_conn *c, uint32_t id, projd_error *e)
{
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    pj_enc_unregister(&w, rid, id);
    projd_request *r;
    int rc = call(c, &w, "UNREGISTER", PJ_MSG_UNREGISTERED, rid, &r, e);
    pj_wbuf_free(&w);
    if (rc)
        return rc;
    size_t len;
    const uint8_t *b = reply_body(r, &len);
    uint32_t got;
    char err[256];
    if (pj_dec_buffer_id(b, len, &got, err, sizeof err) != PJ_OK)
        rc = fail(e, -EPROTO, "reply to UNREGISTER: %s", err);
    else if (got != id)
        rc = fail(e, -EPROTO, "reply to UNREGISTER: id %u, asked for %u", got, id);
    else
        ok(e);
    projd_request_free(r);
    return rc;
}

/* ---- projections ---------------------------------------------------------------------- */

/* Checks, encodes and submits a PROJECT; *out is the request. */
static int project_submit(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags,
                          const uint8_t *wait_event, const uint8_t *signal_event, projd_callback cb,
                          void *arg, int blocking, projd_request **out, projd_error *e)
{
    if ((n && !ops) || n > UINT32_MAX)
        return fail(e, -EINVAL, "PROJECT: %zu ops at %p", n, (const void *)ops);
    if (!(flags & PJ_PF_WAIT_EVENT) != !wait_event ||
        !(flags & PJ_PF_SIGNAL_EVENT) != !signal_event)
        return fail(e, -EINVAL, "PROJECT: an event handle is given exactly when its flag is set");
    pj_project p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    p.n_ops = (uint32_t)n;
    p.ops = (pj_op *)ops; /* the encoder only reads */
    if (wait_event)
        memcpy(p.wait_event, wait_event, PJ_WIRE_IPC_HANDLE_SIZE);
    if (signal_event)
        memcpy(p.signal_event, signal_event, PJ_WIRE_IPC_HANDLE_SIZE);
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    if (pj_enc_project(&w, rid, &p) != 0) {
        pj_wbuf_free(&w);
        return fail(e, -ENOMEM, "PROJECT: out of memory encoding %zu ops", n);
    }
    if (c->info.max_message_bytes && w.len > c->info.max_message_bytes) {
        size_t len = w.len;
        pj_wbuf_free(&w);
        return fail(e, -EMSGSIZE,
                    "PROJECT: %zu ops make a %zu-byte message, the daemon takes at most %u", n, len,
                    c->info.max_message_bytes);
    }
    int rc = req_submit(c, &w, "PROJECT", PJ_MSG_DONE, rid, (uint32_t)n, cb, arg, blocking, out, e);
    pj_wbuf_free(&w);
    return rc;
}

int projd_project_events(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags,
                         const uint8_t *wait_event, const uint8_t *signal_event, projd_callback cb,
                         void *arg, projd_request **req, projd_result *res, projd_error *e)
{
    if (req)
        *req = NULL;
    projd_request *r;
    int claimed = 0;
    int rc = req ? 0 : cb_block_begin("PROJECT", &claimed, e);
    if (rc == 0) {
        rc = project_submit(c, ops, n, flags, wait_event, signal_event, req ? cb : NULL, arg,
                            req == NULL, &r, e);
    }
    if (rc) {
        cb_block_end(claimed);
        /* Nothing was sent: res says so, as after any local failure. */
        if (!req && res) {
            memset(res, 0, sizeof *res);
            res->n_ops = n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
            res->failed_op = UINT32_MAX;
            res_local_failure(res, rc);
        }
        return rc;
    }
    if (req) {
        *req = r;
        ok(e);
        return 0;
    }
    rc = projd_request_wait(r, res, e);
    projd_request_free(r);
    cb_block_end(claimed);
    return rc;
}

int projd_project(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags, projd_result *res,
                  projd_error *e)
{
    return projd_project_events(c, ops, n, flags, NULL, NULL, NULL, NULL, NULL, res, e);
}

int projd_project_async(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags,
                        projd_callback cb, void *arg, projd_request **req, projd_error *e)
{
    if (!req)
        return fail(e, -EINVAL, "PROJECT: req is required for an asynchronous request");
    return projd_project_events(c, ops, n, flags, NULL, NULL, cb, arg, req, NULL, e);
}

/* ---- other requests --------------------------------------------------------------------- */

int projd_stats_json(projd_conn *c, char **json, projd_error *e)
{
    *json = NULL;
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    pj_enc_stats(&w, rid);
    projd_request *r;
    int rc = call(c, &w, "STATS", PJ_MSG_STATS_REPLY, rid, &r, e);
    pj_wbuf_free(&w);
    if (rc)
        return rc;
    size_t len;
    const uint8_t *b = reply_body(r, &len);
    char *s = malloc(len + 1);
    if (!s) {
        projd_request_free(r);
        return fail(e, -ENOMEM, "STATS: out of memory for %zu bytes", len);
    }
    memcpy(s, b, len);
    s[len] = '\0';
    projd_request_free(r);
    *json = s;
    ok(e);
    return 0;
}

int projd_ping(projd_conn *c, projd_error *e)
{
    pj_wbuf w;
    pj_wbuf_init(&w);
    uint64_t rid = projd_next_req_id(c);
    uint8_t payload[8];
    for (int i = 0; i < 8; i++)
        payload[i] = (uint8_t)(rid >> (8 * i));
    pj_enc_ping(&w, rid, payload, sizeof payload);
    projd_request *r;
    int rc = call(c, &w, "PING", PJ_MSG_PONG, rid, &r, e);
    pj_wbuf_free(&w);
    if (rc)
        return rc;
    size_t len;
    const uint8_t *b = reply_body(r, &len);
    if (len != sizeof payload || memcmp(b, payload, len) != 0)
        rc = fail(e, -EPROTO, "reply to PING: PONG payload differs (%zu bytes)", len);
    else
        ok(e);
    projd_request_free(r);
    return rc;
}

int projd_call_raw(projd_conn *c, const void *msg, size_t len, void **reply, size_t *reply_len,
                   projd_error *e)
{
    *reply = NULL;
    *reply_len = 0;
    if (!msg && len)
        return fail(e, -EINVAL, "raw call: NULL message");
    pj_wbuf w = {.data = (uint8_t *)msg, .len = len, .cap = len};
    projd_request *r;
    int rc = call(c, &w, "raw message", 0, 0, &r, e);
    if (rc)
        return rc;
    size_t n = nng_msg_len(r->reply);
    void *p = malloc(n ? n : 1);
    if (!p) {
        projd_request_free(r);
        return fail(e, -ENOMEM, "raw call: out of memory");
    }
    memcpy(p, nng_msg_body(r->reply), n);
    projd_request_free(r);
    *reply = p;
    *reply_len = n;
    ok(e);
    return 0;
}
