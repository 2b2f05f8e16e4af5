/* server.c — see server.h. */
#include "daemon/server.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <nng/transport/ipc/ipc.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "daemon/bufreg.h"
#include "daemon/conn.h"
#include "daemon/envknob.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/closer.h"
#include "daemon/orphans.h"
#include "daemon/peercred.h"
#include "daemon/reapwatch.h"
#include "daemon/ringsrv.h"
#include "daemon/shmguard.h"
#include "daemon/socklock.h"
#include "daemon/stats.h"
#include "daemon/validate.h"
#include "protocol/sockpath.h"
#include "protocol/version.h"
#include "protocol/wire.h"

#define CTX_GROW         16 /* contexts opened at a time */
#define CTX_LOW_WATER    4  /* grow when fewer than this are receiving */
#define CTX_MAX          65536
#define SEND_TIMEOUT_MS  10000 /* a client that stops reading loses its reply */
#define LINGER_MS        500   /* after the last reply of a drain */
#define DRAIN_TIMEOUT_MS 60000 /* in-flight work that never ends: exit 1 */
#define HARD_CAP_SLACK   (64u * 1024u)
#define STATUS_EVERY_MS  250
#define WATCH_EVERY_MS   100
#define DEFER_RETRY_MS   1 /* a job the backend put off (submit -EAGAIN) is tried again */
/* Contexts one connection may hold besides max_inflight_per_conn: room for
 * HELLO/REGISTER/STATS/PING next to a full pipeline of PROJECTs. A
 * connection past twice its share whose replies have not moved for
 * REPLY_STALL_MS (a client that does not read them: each holds a context
 * for up to SEND_TIMEOUT_MS) is closed. Replies that move are a client
 * that reads: one that pipelines a burst, whose E_LIMIT answers the loop
 * has sent but not yet seen go out, or one whose work was accepted under
 * a larger limit before a reload. */
#define CONN_CTX_SLACK 8
#define REPLY_STALL_MS 1000
/* A refused connection of an allowed peer is kept open until its first
 * request is answered with an ERROR saying why (E_LIMIT, E_SHUTDOWN): a
 * client told only by a hang-up could not say which cause it met. A peer
 * auth does not allow is closed at once, as it always was: kept open, it
 * could make the daemon take in messages of up to 4 x max_message_bytes
 * on each of the slots, and it is told nothing it needs (its own uid is
 * not allowed; the daemon's log says so). One that sends
 * nothing is closed after limits.hello_timeout_ms (TELL_WAIT_MS when that
 * is 0, TELL_WAIT_MAX_MS at most), and at most TELL_MAX wait at a time:
 * past that a refusal closes the pipe at once, as it always did, so
 * refused peers cannot hold the daemon's contexts or descriptors for long.
 * Once told, the pipe is left to the client to close for TELL_LINGER_MS:
 * closed by the daemon right after the reply, nng 1.5's REQ at times
 * failed the request with ECONNRESET before it handed over the reply that
 * had come. */
#define TELL_MAX         16
#define TELL_WAIT_MS     1000
#define TELL_WAIT_MAX_MS 10000
#define TELL_LINGER_MS   1000
#define REFUSAL_WHY_MAX  200
/* A refusal of the same reason as the last line said within this long is
 * counted, not said: clients retrying at a limit (the SGLang adapter's
 * reconnect tries every 0.2 s) would fill the journal with one line each.
 * The count is said on the next line, or by the watch a second on. */
#define REFUSE_QUIET_NS 1000000000ull

/* ---- events handed from nng/backend threads to the loop --------------------- */

enum { EV_MSG = 1, EV_SENT, EV_RECV_ERR, EV_PIPE_ADD, EV_PIPE_REM, EV_DONE, EV_RING, EV_FATAL };

typedef struct pj_ev {
    struct pj_ev *next;
    int kind;
} pj_ev;

/* One REP context: receives a request, holds it until the reply is sent. */
typedef struct nctx {
    pj_ev ev; /* EV_MSG / EV_SENT / EV_RECV_ERR; at most one queued at a time */
    pj_server *s;
    nng_ctx ctx;
    nng_aio *aio;
    int sending;
    int send_rv; /* result of the last send, read by the loop */
    nng_msg *msg;
    uint32_t pipe;      /* loop: the connection whose request it holds, 0 = none */
    uint32_t told_pipe; /* loop: the refused pipe this reply tells why */
} nctx;

/* A request copied out of a connection's ring by its poller. The loop
 * finds the connection by pipe id and checks the ring is still the one
 * that sent it (serial) before touching either. */
typedef struct ring_ev {
    pj_ev ev;
    uint32_t pipe;
    uint64_t serial;
    uint64_t recv_ns;
    size_t len;
    uint8_t data[];
} ring_ev;

/* Where a request came from, and so where its reply goes: an nng context,
 * or a connection's ring. */
typedef struct origin {
    nctx *nc;
    pj_ringsrv *ring;
    uint64_t req_id; /* ring: for the ERROR sent when no reply can be built */
} origin;

typedef struct pipe_ev {
    pj_ev ev;
    uint32_t pipe;
    uint32_t uid, gid;
    int32_t pid;
} pipe_ev;

struct pj_req {
    pj_ev ev;     /* EV_DONE */
    pj_req *next; /* connection FIFO */
    pj_server *s;
    pj_conn *c;
    origin o;
    uint64_t req_id;
    uint64_t recv_ns;
    pj_job job;
    pj_buf **bufs; /* 2 per op: x, y (references held) */
    pj_exec_op ops[];
};

struct pj_server {
    uv_loop_t *loop;
    uv_async_t async;
    uv_timer_t timer;
    uv_timer_t status_timer; /* coalesces STATUS= updates */
    uv_timer_t watch_timer;  /* listener watchdog */
    uv_timer_t wd_timer;     /* systemd watchdog pings */
    uv_timer_t defer_timer;  /* submits the backend put off, tried again */
    uv_idle_t ring_spin;     /* keeps the loop polling while ring work is near */
    int handles_open;
    pj_server_stopped_fn stopped;
    void *stopped_arg;

    pj_config cfg;
    const pj_model *model;
    pj_backend *be;
    char url[PJ_CFG_PATH + 8];
    char path[PJ_CFG_PATH];

    nng_socket sock;
    int sock_open;
    int listening;    /* the socket file is ours: remove it at the end */
    nng_listener lst; /* accepting now */
    int lst_open, lst_replaceable;
    uint32_t lst_seq;
    uint64_t lst_errors; /* its error counters at the last watch */
    uint64_t lst_restarts;
    /* The listener's failed replacements: said at most every 10 s (the
     * watch runs every 100 ms, and out of descriptors it fails each time). */
    uint64_t lst_fail_said_ns;
    unsigned lst_fail_quiet;
    struct retired_lst {
        nng_listener l;
        uint64_t since_ns;
    } * retired; /* replaced, closed when they have no pipes */
    uint32_t n_retired;
    /* nng's reaper, watched (daemon/reapwatch.h); NULL if it could not be
     * set up. */
    pj_reapwatch *reapwatch;

    /* Shared with nng threads, under mu. */
    pthread_mutex_t mu;
    pj_ev *ev_head, *ev_tail;
    int closing;         /* socket closing: callbacks push nothing */
    int cb_draining;     /* refuse new pipes */
    uint32_t *pipes;     /* accepted pipe ids */
    uint32_t *pipe_uids; /* ... and their peers' uids, for max_connections_per_uid */
    uint32_t n_pipes, cap_pipes;
    uint32_t cb_max_conns, cb_max_per_uid;
    /* Closed connections whose running jobs have not finished (n_zombies,
     * copied here): they hold their jobs' buffers and their work, so they
     * count against max_connections until they are freed. */
    uint32_t cb_zombies;
    uint32_t *cb_zombie_uids; /* their uids, for max_connections_per_uid (cb_zombies of them) */
    uint32_t cb_zombie_cap;
    uint32_t cb_n_uids, cb_n_gids;
    uint32_t cb_uids[PJ_CFG_MAX_IDS], cb_gids[PJ_CFG_MAX_IDS];
    int64_t cb_sock_gid; /* socket.group's gid, or -1: its members may connect */
    atomic_ullong refused;
    /* Refused pipes kept open to be told why (pipe 0: a free slot). */
    struct telling {
        uint32_t pipe;
        int code;      /* PJ_E_LIMIT or PJ_E_SHUTDOWN */
        int answered;  /* its reply is being sent */
        int sent;      /* ... and went: the pipe lingers for the client to close */
        uint64_t t_ns; /* refused, or (sent) told */
        char why[REFUSAL_WHY_MAX];
    } telling[TELL_MAX];
    /* The last refusal said (its reason and when) and the same ones since. */
    char refuse_why[REFUSAL_WHY_MAX];
    uint64_t refuse_said_ns, refuse_quiet;

    /* Loop thread only. */
    nctx **ctxs;
    uint32_t n_ctx, n_busy, n_sending;
    pj_conn_table conns;
    pj_conn *zombies;
    uint32_t n_zombies;
    pj_orphans orphans; /* closed connections' streams with jobs behind client waits */
    uint64_t conn_serial;
    uint64_t inflight;         /* PROJECT requests accepted, not yet answered */
    uint32_t drain_timeout_ms; /* DRAIN_TIMEOUT_MS, or PROJD_DRAIN_TIMEOUT_MS (tests) */
    /* limits.max_inflight_per_conn for the ring pollers' threads (stored
     * atomically at the start and at each reload; pj_ringsrv_opts). */
    uint32_t ring_owed_cap;
    uint32_t n_deferred; /* connections whose queue's head the backend put off */
    uint64_t deferrals;  /* submits put off (STATS submits_deferred) */
    uint64_t ring_attaches, ring_requests;
    uint64_t ring_wakes; /* times a ring's wake FIFO woke the loop */
    /* Counts of rings freed with their connections: STATS' ring totals
     * are these plus the rings still there, so that they never go down
     * (Prometheus reads a drop as a counter reset). */
    uint64_t ring_lost_gone, ring_sleeps_gone;
    uint64_t ring_inflight;   /* PROJECTs from rings accepted, not yet answered */
    uint64_t ring_spin_until; /* pj_now_ns() deadline of the loop's spinning */
    long cores;               /* online at start (sysconf reads a file: not per request) */
    pj_stats stats;
    pj_op *ops_scratch;
    uint32_t ops_cap;
    /* The WELCOME's layer list: the model's, fixed for the daemon's life,
     * so built once (up to 1024 entries) rather than at every HELLO. */
    pj_wire_layer *wire_layers;
    pj_wbuf wb;
    int draining, stopping, stopped_called, exit_code;
    int fatal; /* a fatal backend error was said (once) */
    uint64_t drain_start_ns;
    /* systemd's watchdog (WatchdogSec=): its timeout, 0 when off; whether
     * pings are withheld for a stuck job, since when, and how often. */
    uint64_t wd_usec;
    int wd_withheld, wd_client_wait, wd_lost;
    int release_warned; /* warn_slow_release said the running one */
    uint64_t wd_withheld_since, wd_oldest_ns, wd_stalls, wd_client_waits;
    /* SIGHUP reloads (pj_server_note_reload): counts per pj_reload_result,
     * and the last one's result, message and times. */
    uint64_t reload_n[3];
    pj_reload_result reload_last;
    double reload_unix;      /* CLOCK_REALTIME, seconds */
    uint64_t reload_mono_ns; /* pj_now_ns() */
    char reload_msg[512];
    char stop_reason[400]; /* why a failure's drain stops projd ("" for a stop signal's) */
};

#define EXIT_GUARD_S 5

static uint32_t hard_cap(const pj_config *cfg)
{
    uint64_t cap = 4ull * cfg->limits.max_message_bytes + HARD_CAP_SLACK;
    return cap > UINT32_MAX ? UINT32_MAX : (uint32_t)cap;
}

/* Events that are plain malloc'd memory (the others live inside a context
 * or a request): what a dropped event needs freed. */
static int ev_is_plain(const pj_ev *ev)
{
    return ev->kind == EV_PIPE_ADD || ev->kind == EV_PIPE_REM || ev->kind == EV_RING ||
           ev->kind == EV_FATAL;
}

/* Push from any thread; dropped (and its message freed) when closing.
 * The wake-up is sent while holding mu: close_socket sets `closing` under
 * mu before stop_now closes the async handle and the server can be freed,
 * so a pusher that saw closing == 0 has finished with s->async before the
 * loop can get past that point. (Sent after unlocking, a backend thread
 * whose EV_DONE was the last event could still be about to touch the
 * async handle after the loop drained, stopped and freed the server.) */
static void push_ev(pj_server *s, pj_ev *ev)
{
    ev->next = NULL;
    pthread_mutex_lock(&s->mu);
    if (s->closing) {
        pthread_mutex_unlock(&s->mu);
        if (ev_is_plain(ev))
            free(ev);
        else if (ev->kind == EV_MSG) {
            nctx *nc = (nctx *)ev;
            nng_msg_free(nc->msg);
            nc->msg = NULL;
        }
        return;
    }
    if (s->ev_tail)
        s->ev_tail->next = ev;
    else
        s->ev_head = ev;
    s->ev_tail = ev;
    uv_async_send(&s->async); /* non-blocking, takes no lock */
    pthread_mutex_unlock(&s->mu);
}

/* ---- nng callbacks (nng threads) --------------------------------------------- */

static void aio_cb(void *arg)
{
    nctx *nc = arg;
    int rv = nng_aio_result(nc->aio);
    if (nc->sending) {
        if (rv != 0) {
            nng_msg *m = nng_aio_get_msg(nc->aio);
            if (m)
                nng_msg_free(m);
        }
        nc->send_rv = rv;
        nc->ev.kind = EV_SENT;
        push_ev(nc->s, &nc->ev);
        return;
    }
    if (rv == NNG_ECLOSED || rv == NNG_ECANCELED)
        return;
    if (rv != 0) {
        nc->ev.kind = EV_RECV_ERR;
        push_ev(nc->s, &nc->ev);
        return;
    }
    nc->msg = nng_aio_get_msg(nc->aio);
    nc->ev.kind = EV_MSG;
    push_ev(nc->s, &nc->ev);
}

static int id_in(uint32_t v, const uint32_t *ids, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] == v)
            return 1;
    return 0;
}

/* A group that may connect: one of auth.allow_gids, or the socket's
 * group (its mode already lets the members in). Under mu. */
static int gid_allowed_locked(const pj_server *s, uint32_t gid)
{
    return id_in(gid, s->cb_gids, s->cb_n_gids) || (int64_t)gid == s->cb_sock_gid;
}

/* Root, the daemon's own uid, a listed uid, or a member (primary or
 * supplementary, groups[0..n_groups)) of an allowed group. Under mu. */
static int peer_allowed_locked(const pj_server *s, uint64_t uid, uint64_t gid,
                               const uint32_t *groups, int n_groups)
{
    if (uid == 0 || uid == (uint64_t)geteuid() || id_in((uint32_t)uid, s->cb_uids, s->cb_n_uids) ||
        gid_allowed_locked(s, (uint32_t)gid))
        return 1;
    for (int i = 0; i < n_groups; i++)
        if (gid_allowed_locked(s, groups[i]))
            return 1;
    return 0;
}

#define PEER_GROUPS_MAX 256

/* Connections of uid: accepted pipes, and closed ones whose requests still
 * run (they count against max_connections too). Under mu. */
static uint32_t uid_pipes_locked(const pj_server *s, uint32_t uid)
{
    uint32_t n = 0;
    for (uint32_t i = 0; i < s->n_pipes; i++)
        n += s->pipe_uids[i] == uid;
    uint32_t z = s->cb_zombies < s->cb_zombie_cap ? s->cb_zombies : s->cb_zombie_cap;
    for (uint32_t i = 0; i < z; i++)
        n += s->cb_zombie_uids[i] == uid;
    return n;
}

/* The refused pipe's slot (pipe 0: a free one), or NULL. */
static struct telling *tell_find_locked(pj_server *s, uint32_t pipe)
{
    for (int i = 0; i < TELL_MAX; i++)
        if (s->telling[i].pipe == pipe)
            return &s->telling[i];
    return NULL;
}

static void pipe_cb(nng_pipe p, nng_pipe_ev what, void *arg)
{
    pj_server *s = arg;
    uint32_t id = (uint32_t)nng_pipe_id(p);
    if (what == NNG_PIPE_EV_ADD_PRE) {
        uint64_t uid = UINT64_MAX, gid = UINT64_MAX, pid = 0;
        int rv = nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_UID, &uid);
        if (rv == 0)
            rv = nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_GID, &gid);
        if (nng_pipe_get_uint64(p, NNG_OPT_IPC_PEER_PID, &pid) != 0)
            pid = 0;
        /* Read before taking mu: a file read, once per connection. */
        uint32_t groups[PEER_GROUPS_MAX];
        int n_groups = 0;
        if (rv == 0 && uid != 0 && uid != (uint64_t)geteuid())
            n_groups = pj_peer_groups(pid, (uint32_t)uid, groups, PEER_GROUPS_MAX);
        char why[REFUSAL_WHY_MAX] = "";
        int code = 0; /* what the refusal is told as (an allowed peer's); 0: not told */
        uint32_t held = 0;
        pipe_ev *ev = NULL;
        pthread_mutex_lock(&s->mu);
        if (rv != 0) {
            snprintf(why, sizeof why, "peer credentials unavailable: %s", nng_strerror(rv));
        } else if (!peer_allowed_locked(s, uid, gid, groups, n_groups)) {
            snprintf(why, sizeof why, "uid %" PRIu64 " gid %" PRIu64 "%s is not allowed (auth)",
                     uid, gid,
                     n_groups > 0   ? " (nor its supplementary groups)"
                     : n_groups < 0 ? " (its supplementary groups unreadable)"
                                    : "");
        } else if (s->cb_draining || s->closing) {
            code = PJ_E_SHUTDOWN;
            snprintf(why, sizeof why, "the daemon is shutting down");
        } else if (s->n_pipes + s->cb_zombies >= s->cb_max_conns) {
            code = PJ_E_LIMIT;
            if (s->cb_zombies)
                snprintf(why, sizeof why,
                         "connection limit %u reached (%u of them closed, their requests still "
                         "running)",
                         s->cb_max_conns, s->cb_zombies);
            else
                snprintf(why, sizeof why, "connection limit %u reached", s->cb_max_conns);
        } else if (s->cb_max_per_uid &&
                   (held = uid_pipes_locked(s, (uint32_t)uid)) >= s->cb_max_per_uid) {
            code = PJ_E_LIMIT;
            snprintf(why, sizeof why,
                     "uid %" PRIu64 " holds %u connections (closed ones still running "
                     "included), its limit is %u (limits.max_connections_per_uid)",
                     uid, held, s->cb_max_per_uid);
        } else if (s->n_pipes == s->cap_pipes) {
            uint32_t cap = s->cap_pipes ? s->cap_pipes * 2 : 64;
            uint32_t *np = realloc(s->pipes, cap * sizeof *np);
            if (np)
                s->pipes = np;
            uint32_t *nu = np ? realloc(s->pipe_uids, cap * sizeof *nu) : NULL;
            if (nu) {
                s->pipe_uids = nu;
                s->cap_pipes = cap;
            } else {
                code = 0;
                snprintf(why, sizeof why, "out of memory");
            }
        }
        if (!why[0]) {
            ev = calloc(1, sizeof *ev);
            if (!ev) {
                code = 0;
                snprintf(why, sizeof why, "out of memory");
            }
        }
        if (!why[0]) {
            s->pipe_uids[s->n_pipes] = (uint32_t)uid;
            s->pipes[s->n_pipes++] = id;
            ev->ev.kind = EV_PIPE_ADD;
            ev->pipe = id;
            ev->uid = (uint32_t)uid;
            ev->gid = (uint32_t)gid;
            ev->pid = (int32_t)pid;
        }
        /* Said, or counted as one more of the last line's reason. */
        int say = 0;
        uint64_t quiet = 0;
        char quiet_why[REFUSAL_WHY_MAX] = "";
        if (why[0]) {
            const uint64_t now = pj_now_ns();
            if (!strcmp(why, s->refuse_why) && now - s->refuse_said_ns < REFUSE_QUIET_NS) {
                s->refuse_quiet++;
            } else {
                say = 1;
                quiet = s->refuse_quiet;
                memcpy(quiet_why, s->refuse_why, sizeof quiet_why);
                memcpy(s->refuse_why, why, sizeof s->refuse_why);
                s->refuse_said_ns = now;
                s->refuse_quiet = 0;
            }
        }
        struct telling *t = why[0] && code && !s->closing ? tell_find_locked(s, 0) : NULL;
        if (t) { /* told why at its first request, closed then */
            t->pipe = id;
            t->code = code;
            t->answered = 0;
            t->sent = 0;
            t->t_ns = pj_now_ns();
            snprintf(t->why, sizeof t->why, "%s", why);
        }
        pthread_mutex_unlock(&s->mu);
        if (why[0]) {
            atomic_fetch_add(&s->refused, 1);
            if (quiet)
                pj_log_warn("refused %" PRIu64 " more connection%s the same way before: %s", quiet,
                            quiet == 1 ? "" : "s", quiet_why);
            if (say)
                pj_log_warn("refused connection from pid %" PRIu64 ": %s", pid, why);
            if (!t)
                nng_pipe_close(p);
            return;
        }
        push_ev(s, &ev->ev);
        return;
    }
    if (what != NNG_PIPE_EV_REM_POST)
        return;
    /* The pipe stays counted (max_connections, per uid) until the loop has
     * retired its connection (forget_pipe_locked): dropped here, a closed
     * connection whose requests still run would count for nothing until
     * the loop made it a zombie, and its uid could connect once more. */
    int found = 0;
    pthread_mutex_lock(&s->mu);
    for (uint32_t i = 0; i < s->n_pipes && !found; i++)
        found = s->pipes[i] == id;
    struct telling *t = found ? NULL : tell_find_locked(s, id);
    if (t) /* a refused one, gone before it was told (or after) */
        t->pipe = 0;
    pthread_mutex_unlock(&s->mu);
    if (!found)
        return;
    pipe_ev *ev = calloc(1, sizeof *ev);
    if (!ev) {
        /* The connection would never be cleaned up; nothing sane is left. */
        pj_log_err("out of memory recording a closed connection");
        abort();
    }
    ev->ev.kind = EV_PIPE_REM;
    ev->pipe = id;
    push_ev(s, &ev->ev);
}

/* Backend threads. */
static void job_done(pj_job *job)
{
    pj_req *r = job->ctx;
    r->ev.kind = EV_DONE;
    push_ev(r->s, &r->ev);
}

/* The backend can run nothing more (backend.h, fatal). */
typedef struct fatal_ev {
    pj_ev ev;
    char msg[200];
} fatal_ev;

static void backend_fatal(void *arg, const char *msg)
{
    pj_server *s = arg;
    fatal_ev *ev = calloc(1, sizeof *ev);
    if (!ev) /* the next job that meets the dead context says it too */
        return;
    ev->ev.kind = EV_FATAL;
    snprintf(ev->msg, sizeof ev->msg, "%s", msg);
    push_ev(s, &ev->ev);
}

/* ---- replies (loop) ------------------------------------------------------------ */

static void arm_recv(pj_server *s, nctx *nc)
{
    nc->sending = 0;
    if (s->stopping && s->closing)
        return;
    nng_aio_set_timeout(nc->aio, NNG_DURATION_INFINITE);
    nng_ctx_recv(nc->ctx, nc->aio);
}

/* The context no longer holds a request of its connection; sent: its
 * reply went out (or failed to) after send_wb handed it to nng. */
static void ctx_release(pj_server *s, nctx *nc, int sent)
{
    if (!nc->pipe)
        return;
    pj_conn *c = pj_conn_table_find(&s->conns, nc->pipe);
    if (c && c->n_ctx)
        c->n_ctx--;
    if (c && sent && c->n_sending) {
        c->n_sending--;
        c->send_moved_ns = pj_now_ns();
    }
    nc->pipe = 0;
}

static void tell_sent(pj_server *s, nctx *nc);

/* The context's request will get no reply (its pipe is gone, or the reply
 * could not be built). */
static void abandon(pj_server *s, nctx *nc)
{
    s->n_busy--;
    ctx_release(s, nc, 0);
    tell_sent(s, nc); /* a refused pipe's: it lingers and closes, as if told */
    arm_recv(s, nc);
}

/* The request will get no reply (its connection is gone). */
static void abandon_req(pj_server *s, origin o)
{
    if (o.ring)
        pj_ringsrv_dropped(o.ring);
    else
        abandon(s, o.nc);
}

/* Put s->wb on the ring it answers. A reply larger than a slot becomes an
 * ERROR saying so (it always fits: PJ_RING_MIN_SLOT), one that could not be
 * built a ready-made E_INTERNAL: a ring request always gets its reply, or
 * its client's slot would stay taken. */
static void ring_reply(pj_server *s, origin o)
{
    pj_ringsrv *ring = o.ring;
    s->stats.requests++;
    if (s->wb.oom) {
        pj_log_err("out of memory building a reply; answering E_INTERNAL");
        pj_ringsrv_reply_oom(ring, o.req_id);
        return;
    }
    int rc = pj_ringsrv_reply(ring, s->wb.data, s->wb.len);
    if (rc == -EMSGSIZE) {
        char err[160];
        snprintf(err, sizeof err, "the reply (%zu bytes) does not fit a ring slot of %u bytes",
                 s->wb.len, pj_ringsrv_slot_bytes(ring));
        pj_stats_error(&s->stats, PJ_E_TOO_BIG);
        pj_wbuf_reset(&s->wb);
        pj_enc_error(&s->wb, o.req_id, PJ_E_TOO_BIG, UINT32_MAX, err);
        rc = s->wb.oom ? pj_ringsrv_reply_oom(ring, o.req_id)
                       : pj_ringsrv_reply(ring, s->wb.data, s->wb.len);
    }
    if (rc != 0)
        pj_log_debug("a ring reply was lost: %s", strerror(-rc));
}

/* Send s->wb as the reply to the request from o. */
static void send_wb(pj_server *s, origin o)
{
    if (o.ring) {
        ring_reply(s, o);
        return;
    }
    nctx *nc = o.nc;
    nng_msg *m = NULL;
    if (s->wb.oom || nng_msg_alloc(&m, 0) != 0 || nng_msg_append(m, s->wb.data, s->wb.len) != 0) {
        if (m)
            nng_msg_free(m);
        pj_log_err("out of memory building a reply; dropping it");
        abandon(s, nc);
        return;
    }
    if (!nc->told_pipe) /* a refused connection's reply: counted in connections.refused */
        s->stats.requests++;
    s->n_sending++;
    pj_log_debug("reply %s %" PRIu64 " (%zu bytes, %u contexts busy of %u)",
                 pj_msg_type_name(s->wb.len >= 8 ? s->wb.data[6] : 0),
                 s->wb.len >= 24 ? pj_peek_req_id(s->wb.data, s->wb.len) : 0, s->wb.len, s->n_busy,
                 s->n_ctx);
    nc->sending = 1;
    pj_conn *c = nc->pipe ? pj_conn_table_find(&s->conns, nc->pipe) : NULL;
    if (c && c->n_sending++ == 0)
        c->send_moved_ns = pj_now_ns();
    nng_aio_set_msg(nc->aio, m);
    nng_aio_set_timeout(nc->aio, SEND_TIMEOUT_MS);
    nng_ctx_send(nc->ctx, nc->aio);
}

static void send_error(pj_server *s, origin o, uint64_t req_id, int code, uint32_t op_index,
                       const char *msg)
{
    pj_stats_error(&s->stats, code);
    pj_wbuf_reset(&s->wb);
    pj_enc_error(&s->wb, req_id, code, op_index, msg);
    send_wb(s, o);
}

/* ---- connections ------------------------------------------------------------------ */

int pj_server_stall_status(const pj_server *s, char *buf, size_t len)
{
    if (len)
        buf[0] = 0;
    if (!s->wd_withheld)
        return 0;
    if (s->wd_lost) /* what systemctl status shows until the restart */
        snprintf(buf, len,
                 "stalled: pid %d exited while %u jobs of it waited for its events; "
                 "its lane is held for good, %u connections",
                 (int)s->orphans.lost_pid, s->orphans.lost_jobs, s->conns.count);
    else
        snprintf(buf, len, "stalled: a job on the %s backend for %.1f s, %u connections",
                 s->be->ops->name, (double)(pj_now_ns() - s->wd_oldest_ns) / 1e9, s->conns.count);
    return 1;
}

static void send_status(pj_server *s)
{
    char stall[256];
    if (s->draining && s->stop_reason[0])
        pj_notify_status("%s; draining: %" PRIu64 " requests in flight, %u connections",
                         s->stop_reason, s->inflight, s->conns.count);
    else if (s->draining)
        pj_notify_status("draining: %" PRIu64 " requests in flight, %u connections", s->inflight,
                         s->conns.count);
    else if (pj_server_stall_status(s, stall, sizeof stall))
        pj_notify_status("%s", stall);
    else
        pj_notify_status("serving %u connection%s (backend %s)", s->conns.count,
                         s->conns.count == 1 ? "" : "s", s->be->ops->name);
}

static void on_status_timer(uv_timer_t *t)
{
    send_status(t->data);
}

/* At most one STATUS= line per STATUS_EVERY_MS however fast clients come
 * and go. */
static void update_status(pj_server *s)
{
    if (!s->stopping && !uv_is_active((uv_handle_t *)&s->status_timer))
        uv_timer_start(&s->status_timer, on_status_timer, STATUS_EVERY_MS, 0);
}

/* ---- refused pipes, told why (TELL_MAX) -------------------------------------------- */

static void close_pipe_id(uint32_t id)
{
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = id;
    nng_pipe_close(p); /* one the peer closed already is no error here */
}

/* A request on a pipe that is no connection: a refused pipe's first is
 * answered with why. 0 when the pipe is not one of them (or was answered
 * already). */
static int tell_refused(pj_server *s, nctx *nc, nng_msg *msg)
{
    char err[REFUSAL_WHY_MAX + 40];
    int code = 0;
    const uint32_t id = (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg));
    pthread_mutex_lock(&s->mu);
    struct telling *t = tell_find_locked(s, id);
    if (t && !t->answered) {
        t->answered = 1;
        code = t->code;
        snprintf(err, sizeof err, "projd refused this connection: %s", t->why);
    }
    pthread_mutex_unlock(&s->mu);
    if (!code)
        return 0;
    nc->told_pipe = id;
    origin o = {.nc = nc};
    /* Not send_error: a refusal is counted in connections.refused only, not
     * in errors.* (whose alert would fire for clients retrying at a limit). */
    pj_wbuf_reset(&s->wb);
    pj_enc_error(&s->wb, pj_peek_req_id(nng_msg_body(msg), nng_msg_len(msg)), code, UINT32_MAX,
                 err);
    send_wb(s, o);
    return 1;
}

/* nc's reply went out (or failed to): a refused pipe it told lingers. */
static void tell_sent(pj_server *s, nctx *nc)
{
    const uint32_t id = nc->told_pipe;
    if (!id)
        return;
    nc->told_pipe = 0;
    pthread_mutex_lock(&s->mu);
    struct telling *t = tell_find_locked(s, id);
    if (t) {
        t->sent = 1;
        t->t_ns = pj_now_ns();
    }
    pthread_mutex_unlock(&s->mu);
}

/* Refusals counted and not said (REFUSE_QUIET_NS) are said a second after
 * the last line, when no other refusal said them. */
static void refusals_said(pj_server *s)
{
    const uint64_t now = pj_now_ns();
    char why[REFUSAL_WHY_MAX];
    uint64_t quiet = 0, since = 0;
    pthread_mutex_lock(&s->mu);
    if (s->refuse_quiet && now - s->refuse_said_ns >= REFUSE_QUIET_NS) {
        quiet = s->refuse_quiet;
        since = now - s->refuse_said_ns;
        memcpy(why, s->refuse_why, sizeof why);
        s->refuse_quiet = 0;
        s->refuse_said_ns = now;
    }
    pthread_mutex_unlock(&s->mu);
    if (quiet)
        pj_log_warn("refused %" PRIu64 " more connection%s the same way in the last %.1f s: %s",
                    quiet, quiet == 1 ? "" : "s", (double)since / 1e9, why);
}

/* Refused pipes that sent nothing in time, or were told and lingered, are
 * closed. */
static void tell_expire(pj_server *s)
{
    const uint32_t hello_ms = s->cfg.limits.hello_timeout_ms;
    const uint32_t wait_ms = !hello_ms                     ? TELL_WAIT_MS
                             : hello_ms > TELL_WAIT_MAX_MS ? TELL_WAIT_MAX_MS
                                                           : hello_ms;
    const uint64_t now = pj_now_ns();
    uint32_t expired[TELL_MAX];
    int n = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < TELL_MAX; i++) {
        struct telling *t = &s->telling[i];
        if (!t->pipe || (t->answered && !t->sent)) /* a reply on its way */
            continue;
        const uint64_t ms = t->sent ? TELL_LINGER_MS : wait_ms;
        if (now - t->t_ns >= ms * 1000000ull) {
            expired[n++] = t->pipe;
            t->pipe = 0;
        }
    }
    pthread_mutex_unlock(&s->mu);
    for (int i = 0; i < n; i++)
        close_pipe_id(expired[i]); /* outside mu: the close calls pipe_cb */
}

static void on_pipe_add(pj_server *s, pipe_ev *ev)
{
    pj_conn *c = pj_conn_new(ev->pipe, ++s->conn_serial, ev->uid, ev->gid, ev->pid, s->be);
    if (!c) {
        pj_log_err("out of memory accepting a connection (pid %d)", (int)ev->pid);
        nng_pipe p = NNG_PIPE_INITIALIZER;
        p.id = ev->pipe;
        nng_pipe_close(p);
        return;
    }
    c->t_accept_ns = pj_now_ns();
    pj_conn_table_add(&s->conns, c);
    s->stats.conns_total++;
    pj_log_debug("connection #%" PRIu64 ": pid %d uid %u gid %u connected (%u open)", c->serial,
                 (int)c->peer.pid, c->uid, c->gid, s->conns.count);
    update_status(s);
}

/* A connection is logged at info once it is a client's: at its first
 * request past HELLO, STATS and PING, or ANNOUNCE_MS after its HELLO. One
 * that ends before either (projctl status, the metrics timer every 15 s,
 * a health check) is a probe, logged at debug, so that monitoring does
 * not fill the journal with three lines a scrape. */
#define ANNOUNCE_MS 1000

/* open: the connections open, c among them (at its close c has left the
 * table already). */
static void announce_conn_open(pj_conn *c, uint32_t open)
{
    if (c->announced || !c->hello)
        return;
    c->announced = 1;
    pj_log_info("connection #%" PRIu64 ": \"%s\" pid %d uid %u gid %u connected (%u open)",
                c->serial, c->client, (int)c->peer.pid, c->uid, c->gid, open);
}

static void announce_conn(const pj_server *s, pj_conn *c)
{
    announce_conn_open(c, s->conns.count);
}

static void announce_late_conns(pj_server *s, uint64_t now)
{
    for (int i = 0; i < PJ_CONN_BUCKETS; i++)
        for (pj_conn *c = s->conns.b[i]; c; c = c->next)
            if (c->hello && !c->announced &&
                now - c->t_hello_ns >= (uint64_t)ANNOUNCE_MS * 1000000ull)
                announce_conn(s, c);
}

static void release_req(pj_server *s, pj_req *r)
{
    for (uint32_t i = 0; i < 2 * r->job.n_ops; i++)
        pj_bufreg_unref(&r->c->reg, r->bufs[i]);
    (void)s;
    free(r);
}

/* Pipe id no longer counted among the accepted ones. Under mu. */
static void forget_pipe_locked(pj_server *s, uint32_t id)
{
    for (uint32_t i = 0; i < s->n_pipes; i++) {
        if (s->pipes[i] == id) {
            s->pipes[i] = s->pipes[--s->n_pipes];
            s->pipe_uids[i] = s->pipe_uids[s->n_pipes];
            return;
        }
    }
}

/* n_zombies from the list, and a copy (count and uids) for the pipe
 * callback, which refuses connections past max_connections and
 * max_connections_per_uid counting them too; and (gone_pipe, 0 for none)
 * a closed pipe forgotten in the same step, so that a closed connection
 * still running is counted once, never zero times or twice. */
static void sync_zombies_forget(pj_server *s, uint32_t gone_pipe)
{
    uint32_t n = 0;
    for (const pj_conn *c = s->zombies; c; c = c->next)
        n++;
    s->n_zombies = n;
    pthread_mutex_lock(&s->mu);
    if (gone_pipe)
        forget_pipe_locked(s, gone_pipe);
    if (n > s->cb_zombie_cap) {
        uint32_t cap = n < 16 ? 16 : 2 * n;
        uint32_t *nu = realloc(s->cb_zombie_uids, cap * sizeof *nu);
        if (nu) {
            s->cb_zombie_uids = nu;
            s->cb_zombie_cap = cap;
        }
    }
    uint32_t k = 0;
    for (const pj_conn *c = s->zombies; c && k < s->cb_zombie_cap; c = c->next)
        s->cb_zombie_uids[k++] = c->uid;
    s->cb_zombies = n;
    pthread_mutex_unlock(&s->mu);
}

static void sync_zombies(pj_server *s)
{
    sync_zombies_forget(s, 0);
}

/* c's ring's replies lost and poller sleeps added to *lost and *sleeps
 * (nothing without a ring); 1 when the ring is broken. */
static int ring_counts(const pj_conn *c, uint64_t *lost, uint64_t *sleeps)
{
    if (!c->ring)
        return 0;
    pj_ringsrv_stats rs;
    pj_ringsrv_get_stats(c->ring, &rs);
    *lost += rs.lost;
    *sleeps += rs.sleeps;
    return rs.broken != 0;
}

/* A connection's failed requests are logged, FAIL_BURST a second at most
 * at each level: one client looping on a bad REGISTER wrote a line per
 * request (10 000 in 2 s in a review), and the journal's rate limit would
 * then drop the daemon's other lines with them. Refusals (info) and jobs
 * that failed (warn: a device error among them) have budgets of their
 * own, so a flood of the first cannot hide the second. The lines held back
 * are counted and said, at their level, before the next one said, or when
 * the connection is freed; STATS' errors count every one. */
#define FAIL_BURST     5
#define FAIL_WINDOW_NS 1000000000ull

static void say_failures_held(const pj_conn *c, int warn, uint64_t n)
{
    pj_log_msg(warn ? PJ_LOG_WARN : PJ_LOG_INFO,
               "connection #%" PRIu64 ": %" PRIu64 " more %s request%s not logged (at most %d a "
               "second a connection; STATS errors count them)",
               c->serial, n, warn ? "failed" : "refused", n == 1 ? "" : "s", FAIL_BURST);
}

static void conn_say_failure(pj_conn *c, pj_log_level level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void conn_say_failure(pj_conn *c, pj_log_level level, const char *fmt, ...)
{
    if (!pj_log_enabled(level))
        return;
    const int w = level <= PJ_LOG_WARN;
    const uint64_t now = pj_now_ns();
    if (now - c->fail_window_ns[w] >= FAIL_WINDOW_NS) {
        c->fail_window_ns[w] = now;
        c->fail_said[w] = 0;
    }
    if (c->fail_said[w] >= FAIL_BURST) {
        c->fail_quiet[w]++;
        return;
    }
    c->fail_said[w]++;
    if (c->fail_quiet[w]) {
        say_failures_held(c, w, c->fail_quiet[w]);
        c->fail_quiet[w] = 0;
    }
    char line[1400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    pj_log_msg(level, "connection #%" PRIu64 ": %s", c->serial, line);
}

/* pj_conn_free, its ring's counts kept in the server's totals first, and
 * its failures held back said. */
static void conn_free(pj_server *s, pj_conn *c)
{
    if (c) {
        ring_counts(c, &s->ring_lost_gone, &s->ring_sleeps_gone);
        for (int w = 0; w < 2; w++)
            if (c->fail_quiet[w])
                say_failures_held(c, w, c->fail_quiet[w]);
    }
    pj_conn_free(c, s->be);
}

/* c's pipe is gone: freed now, or a zombie until its running requests
 * finish; either way its pipe stops counting as accepted here. */
static void conn_retire(pj_server *s, pj_conn *c)
{
    if (c->n_running == 0) {
        pthread_mutex_lock(&s->mu);
        forget_pipe_locked(s, c->pipe_id);
        pthread_mutex_unlock(&s->mu);
        conn_free(s, c);
        return;
    }
    /* Its buffers go now, but for those its running requests use (released
     * at their last unref): a closed connection kept every buffer it had
     * registered until its last request finished. */
    pj_bufreg_clear(&c->reg);
    c->next = s->zombies;
    s->zombies = c;
    sync_zombies_forget(s, c->pipe_id);
}

static void check_drain(pj_server *s);
static void ring_wake_stop(pj_conn *c);

/* c's queue head was put off by the backend (on = 1), or is tried again. */
static void set_deferred(pj_server *s, pj_conn *c, int on)
{
    if (c->deferred == on)
        return;
    c->deferred = on;
    if (on)
        s->n_deferred++;
    else
        s->n_deferred--;
}

static void on_pipe_rem(pj_server *s, pipe_ev *ev)
{
    pj_conn *c = pj_conn_table_remove(&s->conns, ev->pipe);
    if (!c) { /* refused by the loop (on_pipe_add): counted until now */
        pthread_mutex_lock(&s->mu);
        forget_pipe_locked(s, ev->pipe);
        pthread_mutex_unlock(&s->mu);
        return;
    }
    c->gone = 1;
    /* No more requests from its ring; ones already queued for the loop are
     * dropped there (the connection is no longer in the table). */
    ring_wake_stop(c);
    if (c->ring)
        pj_ringsrv_stop(c->ring);
    /* Requests that have not started will never be answered: drop them.
     * Those with the backend (up to its stream depth) finish first; their
     * buffers stay mapped until then. */
    uint32_t dropped = 0;
    while (c->q_head) {
        pj_req *r = c->q_head;
        c->q_head = r->next;
        c->n_queued--;
        s->inflight--;
        if (r->o.ring)
            s->ring_inflight--;
        abandon_req(s, r->o);
        release_req(s, r);
        dropped++;
    }
    c->q_tail = NULL;
    set_deferred(s, c, 0);
    /* One that stayed past ANNOUNCE_MS and closed before the next watch
     * tick is a client's, not a probe's. */
    if (c->hello && !c->announced &&
        pj_now_ns() - c->t_hello_ns >= (uint64_t)ANNOUNCE_MS * 1000000ull)
        announce_conn_open(c, s->conns.count + 1);
    /* A probe's close at debug; one that never said HELLO (a version
     * refused, a stray peer) at info, its uid with it: nothing else said
     * it at info. */
    pj_log_msg(c->announced || !c->hello ? PJ_LOG_INFO : PJ_LOG_DEBUG,
               "connection #%" PRIu64 ": pid %d uid %u closed after %" PRIu64
               " requests (%u dropped unstarted, %u running; %u open)%s",
               c->serial, (int)c->peer.pid, c->uid, c->requests, dropped, c->n_running,
               s->conns.count,
               c->announced ? ""
               : c->hello   ? " (a probe: HELLO, STATS, PING only)"
                            : " (no HELLO)");
    /* Jobs answered at launch may still wait for this client's events:
     * if the client has died, nothing else will record them. */
    if (c->stream && pj_orphans_adopt(&s->orphans, s->be, c->stream, &c->peer, c->serial))
        c->stream = NULL;
    conn_retire(s, c);
    update_status(s);
    check_drain(s);
}

/* ---- PROJECT ------------------------------------------------------------------------- */

/* A job failed fatally, or the backend said so (backend_fatal): reply to
 * what is in flight, then exit non-zero (systemd restarts the unit). */
static void fatal_stop(pj_server *s, const char *msg)
{
    /* Said and counted in the exit code also during a drain (a SIGTERM's):
     * a device that died while projd stopped must not read as a clean
     * stop. Once: every job after it fails the same way. */
    if (s->fatal)
        return;
    s->fatal = 1;
    pj_log_err("backend %s: fatal error, exiting: %s", s->be->ops->name, msg);
    s->exit_code = 1;
    pj_server_set_exit_code(1);
    char why[sizeof s->stop_reason];
    snprintf(why, sizeof why, "fatal backend error: %s", msg);
    pj_server_drain_failed(s, why);
}

static void finish_req(pj_server *s, pj_req *r);
static void ring_spin_extend(pj_server *s);

static void on_defer_timer(uv_timer_t *t);

static void pump(pj_server *s, pj_conn *c)
{
    /* A job the backend refuses at once is finished here, and finish_req
     * pumps: from inside this loop that would recurse once per queued
     * request (up to max_inflight_per_conn frames, each with its results
     * on the stack). The loop below goes on with the queue instead. */
    if (c->pumping)
        return;
    c->pumping = 1;
    set_deferred(s, c, 0);
    while (c->q_head && c->n_running < s->be->stream_depth) {
        pj_req *r = c->q_head;
        c->q_head = r->next;
        if (!c->q_head)
            c->q_tail = NULL;
        c->n_queued--;
        c->n_running++;
        r->next = NULL;
        pj_log_debug("connection #%" PRIu64 ": submit %" PRIu64 " (%u ops)", c->serial, r->req_id,
                     r->job.n_ops);
        int rc = s->be->ops->submit(s->be, c->stream, &r->job);
        if (rc == -EAGAIN) {
            /* Not now: first in the queue again, so that the connection's
             * requests still start in order. */
            r->next = c->q_head;
            c->q_head = r;
            if (!c->q_tail)
                c->q_tail = r;
            c->n_queued++;
            c->n_running--;
            s->deferrals++;
            set_deferred(s, c, 1);
            if (!uv_is_active((uv_handle_t *)&s->defer_timer))
                uv_timer_start(&s->defer_timer, on_defer_timer, DEFER_RETRY_MS, 0);
            break;
        }
        if (rc != 0) {
            r->job.status = PJ_E_BACKEND;
            r->job.start_ns = r->job.end_ns = pj_now_ns();
            snprintf(r->job.err, sizeof r->job.err, "backend %s refused the job: %s",
                     s->be->ops->name, strerror(-rc));
            for (uint32_t i = 0; i < r->job.n_ops; i++)
                r->ops[i].status = PJ_E_BACKEND;
            finish_req(s, r);
        }
    }
    c->pumping = 0;
}

/* Connections the backend put off are few and brief (a release waiting to
 * start), so the whole table is walked; pump re-arms the timer for any the
 * backend puts off again. */
static void on_defer_timer(uv_timer_t *t)
{
    pj_server *s = t->data;
    for (uint32_t i = 0; i < PJ_CONN_BUCKETS && s->n_deferred; i++) {
        pj_conn *next;
        for (pj_conn *c = s->conns.b[i]; c && s->n_deferred; c = next) {
            next = c->next;
            if (c->deferred)
                pump(s, c);
        }
    }
}

/* 1 when op i's x or y span is in a shared-memory object that has
 * shrunk below it (pj_buf_probe; marks the buffer broken). */
static int probe_op(pj_req *r, uint32_t i)
{
    const pj_exec_op *op = &r->ops[i];
    int fx = pj_buf_probe(r->bufs[2 * i], op->x_off, op->x_bytes);
    int fy = pj_buf_probe(r->bufs[2 * i + 1], op->y_off, op->y_bytes);
    return fx || fy;
}

static void handle_project(pj_server *s, pj_conn *c, origin o, const pj_hdr *h, const void *body,
                           uint64_t recv_ns)
{
    char err[PJ_WIRE_MSG_MAX];
    pj_project p;
    memset(&p, 0, sizeof p);
    p.ops = s->ops_scratch;
    int st =
        pj_dec_project(body, h->body_len, s->cfg.limits.max_ops_per_request, &p, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    if (p.n_ops == 0) {
        send_error(s, o, h->req_id, PJ_E_PROTO, UINT32_MAX, "PROJECT: no ops");
        return;
    }
    if (p.flags & ~s->be->ops->project_flags) {
        snprintf(err, sizeof err, "PROJECT: flags 0x%x are not supported by the %s backend",
                 p.flags & ~s->be->ops->project_flags, s->be->ops->name);
        send_error(s, o, h->req_id, PJ_E_FLAGS, UINT32_MAX, err);
        return;
    }
    if (c->n_queued + c->n_running >= s->cfg.limits.max_inflight_per_conn) {
        snprintf(err, sizeof err, "PROJECT: %u requests already in flight on this connection",
                 c->n_queued + c->n_running);
        send_error(s, o, h->req_id, PJ_E_LIMIT, UINT32_MAX, err);
        return;
    }
    pj_req *r = calloc(1, sizeof *r + p.n_ops * sizeof(pj_exec_op) +
                              2 * (size_t)p.n_ops * sizeof(pj_buf *) + 2 * PJ_WIRE_IPC_HANDLE_SIZE);
    if (!r) {
        send_error(s, o, h->req_id, PJ_E_INTERNAL, UINT32_MAX, "PROJECT: out of memory");
        return;
    }
    r->bufs = (pj_buf **)(void *)&r->ops[p.n_ops];
    uint8_t *events = (uint8_t *)&r->bufs[2 * p.n_ops];
    for (uint32_t i = 0; i < p.n_ops; i++) {
        st = pj_validate_op(&p.ops[i], i, s->model, s->cfg.shapes.max_m, s->be->max_row_pitch,
                            &c->reg, &r->ops[i], &r->bufs[2 * i], &r->bufs[2 * i + 1], err,
                            sizeof err);
        if (st != PJ_OK) {
            free(r);
            send_error(s, o, h->req_id, st, i, err);
            return;
        }
    }
    /* Shared memory shrunk before the request: refused before anything
     * runs, as the cpu backend's own fault would only say after. */
    for (uint32_t i = 0; i < p.n_ops; i++) {
        if (probe_op(r, i)) {
            free(r);
            snprintf(err, sizeof err,
                     "op %u: a buffer's shared memory object shrank after it was "
                     "registered" PJ_SHMGUARD_OR_NO_PAGE "; register it again",
                     i);
            send_error(s, o, h->req_id, PJ_E_BUFFER, i, err);
            return;
        }
    }
    for (uint32_t i = 0; i < 2 * p.n_ops; i++)
        pj_bufreg_ref(r->bufs[i]);
    memcpy(events, p.wait_event, PJ_WIRE_IPC_HANDLE_SIZE);
    memcpy(events + PJ_WIRE_IPC_HANDLE_SIZE, p.signal_event, PJ_WIRE_IPC_HANDLE_SIZE);
    r->s = s;
    r->c = c;
    r->o = o;
    r->req_id = h->req_id;
    r->recv_ns = recv_ns;
    r->job.n_ops = p.n_ops;
    r->job.ops = r->ops;
    r->job.flags = p.flags;
    r->job.wait_event = events;
    r->job.signal_event = events + PJ_WIRE_IPC_HANDLE_SIZE;
    r->job.done = job_done;
    r->job.ctx = r;
    if (c->q_tail)
        c->q_tail->next = r;
    else
        c->q_head = r;
    c->q_tail = r;
    c->n_queued++;
    s->inflight++;
    if (o.ring)
        s->ring_inflight++;
    pump(s, c);
}

static void finish_req(pj_server *s, pj_req *r)
{
    pj_conn *c = r->c;
    pj_job *job = &r->job;
    pj_log_debug("connection #%" PRIu64 ": done %" PRIu64 " (status %d)", c->serial, r->req_id,
                 job->status);
    c->n_running--;
    s->inflight--;
    if (r->o.ring) {
        s->ring_inflight--;
        ring_spin_extend(s);
    }
    /* A buffer whose shared memory shrank under the job: the op read or
     * wrote zero pages, or (its last access done before the shrink, or
     * through the cuda backend's pinned pages) its y is no longer the
     * client's: its result means nothing. */
    uint32_t first_shrunk = UINT32_MAX;
    for (uint32_t i = 0; i < job->n_ops; i++) {
        if (r->ops[i].status == PJ_OK && probe_op(r, i)) {
            r->ops[i].status = PJ_E_BUFFER;
            if (first_shrunk == UINT32_MAX)
                first_shrunk = i;
        }
    }
    if (first_shrunk != UINT32_MAX) {
        /* DONE's status is the first failing op's (PROTOCOL.md): this one,
         * unless the backend failed an op before it. */
        uint32_t first_bad = 0;
        while (r->ops[first_bad].status == PJ_OK)
            first_bad++;
        if (first_bad == first_shrunk) {
            job->status = PJ_E_BUFFER;
            snprintf(job->err, sizeof job->err,
                     "op %u: a buffer's shared memory object shrank during the "
                     "request" PJ_SHMGUARD_OR_NO_PAGE "; register it again",
                     first_shrunk);
        }
    }
    uint64_t queue_ns = job->start_ns > r->recv_ns ? job->start_ns - r->recv_ns : 0;
    uint64_t exec_ns = job->end_ns > job->start_ns ? job->end_ns - job->start_ns : 0;
    s->stats.ops += job->n_ops;
    for (uint32_t i = 0; i < job->n_ops; i++) {
        if (r->ops[i].layer < s->stats.n_layers) {
            s->stats.layer[r->ops[i].layer].ops++;
            s->stats.layer[r->ops[i].layer].rows += r->ops[i].m;
        }
    }
    if (job->n_ops == 1 && r->ops[0].layer < s->stats.n_layers)
        pj_hist_add(&s->stats.layer[r->ops[0].layer].exec_ns, exec_ns);
    pj_hist_add(&s->stats.queue_ns, queue_ns);
    pj_hist_add(&s->stats.exec_ns, exec_ns);
    pj_hist_add(&s->stats.total_ns, pj_now_ns() - r->recv_ns);
    if (job->status != PJ_OK) {
        pj_stats_error(&s->stats, job->status);
        conn_say_failure(c, PJ_LOG_WARN, "request %" PRIu64 " failed: %s: %s", r->req_id,
                         pj_status_name(job->status), job->err);
    }
    if (c->gone) {
        abandon_req(s, r->o);
    } else {
        pj_op_result res[job->n_ops];
        for (uint32_t i = 0; i < job->n_ops; i++) {
            res[i].status = r->ops[i].status;
            res[i].engine = r->ops[i].engine;
        }
        pj_done d = {.status = job->status,
                     .n_ops = job->n_ops,
                     .queue_ns = queue_ns,
                     .exec_ns = exec_ns,
                     .ops = res};
        pj_wbuf_reset(&s->wb);
        pj_enc_done(&s->wb, r->req_id, &d);
        send_wb(s, r->o);
    }
    int fatal = job->fatal;
    char fatal_msg[sizeof job->err];
    snprintf(fatal_msg, sizeof fatal_msg, "%s", job->err);
    release_req(s, r);
    if (c->gone) {
        if (c->n_running == 0) {
            for (pj_conn **pp = &s->zombies; *pp; pp = &(*pp)->next) {
                if (*pp == c) {
                    *pp = c->next;
                    sync_zombies(s);
                    break;
                }
            }
            conn_free(s, c);
        }
    } else {
        pump(s, c);
    }
    if (fatal)
        fatal_stop(s, fatal_msg);
    pj_bufreg_reap(0);
    check_drain(s);
}

static void on_done(pj_server *s, pj_req *r)
{
    finish_req(s, r);
}

/* ---- the other requests ------------------------------------------------------------- */

/* The model's layers as a WELCOME lists them. */
static pj_wire_layer *wire_layers_new(const pj_model *m)
{
    pj_wire_layer *all = calloc(m->n_layers ? m->n_layers : 1, sizeof *all);
    for (uint32_t i = 0; all && i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        snprintf(all[i].name, sizeof all[i].name, "%s", L->name);
        all[i].n = L->max_n;
        all[i].k = L->w.k;
        all[i].format = (uint8_t)L->w.fmt;
    }
    return all;
}

static void handle_hello(pj_server *s, pj_conn *c, origin o, const pj_hdr *h, const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    pj_hello hello;
    int st = pj_dec_hello(body, h->body_len, &hello, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    if (hello.ver_min > PJ_WIRE_VERSION || hello.ver_max < PJ_WIRE_VERSION) {
        snprintf(err, sizeof err, "HELLO: client speaks versions %u..%u, the daemon speaks %d",
                 hello.ver_min, hello.ver_max, PJ_WIRE_VERSION);
        send_error(s, o, h->req_id, PJ_E_VERSION, UINT32_MAX, err);
        return;
    }
    if (!c->stream) {
        int rc = s->be->ops->stream_create(s->be, &c->stream, err, sizeof err);
        if (rc != 0) {
            c->stream = NULL;
            send_error(s, o, h->req_id, PJ_E_BACKEND, UINT32_MAX, err);
            return;
        }
    }
    if (!c->hello) {
        pj_log_debug("connection #%" PRIu64 ": hello from \"%s\" (pid %u)", c->serial, hello.name,
                     hello.pid);
        c->t_hello_ns = pj_now_ns();
    }
    c->hello = 1;
    snprintf(c->client, sizeof c->client, "%s", hello.name);
    pj_welcome *w = calloc(1, sizeof *w);
    if (!w) {
        send_error(s, o, h->req_id, PJ_E_INTERNAL, UINT32_MAX, "HELLO: out of memory");
        return;
    }
    w->version = PJ_WIRE_VERSION;
    w->backend = (uint16_t)s->be->ops->kind;
    memcpy(w->device_uuid, s->be->device_uuid, PJ_WIRE_UUID_SIZE);
    w->max_m = s->cfg.shapes.max_m;
    w->max_ops_per_request = s->cfg.limits.max_ops_per_request;
    w->max_buffers = s->cfg.limits.max_buffers_per_conn;
    w->max_message_bytes = s->cfg.limits.max_message_bytes;
    /* The model's load checked n_layers <= PJ_CFG_MAX_LAYERS, which is
     * PJ_WIRE_MAX_LAYERS_ALL (model.c), so every layer is sent. */
    w->n_layers_all = s->model->n_layers;
    w->layers_all = s->wire_layers;
    w->n_shapes = s->cfg.shapes.n_m < PJ_WIRE_MAX_SHAPES ? s->cfg.shapes.n_m : PJ_WIRE_MAX_SHAPES;
    for (uint32_t i = 0; i < w->n_shapes; i++)
        w->shapes[i] = s->cfg.shapes.m[i];
    pj_wbuf_reset(&s->wb);
    pj_enc_welcome(&s->wb, h->req_id, w);
    free(w);
    send_wb(s, o);
}

static void handle_register(pj_server *s, pj_conn *c, origin o, const pj_hdr *h, const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    pj_register *rq = calloc(1, sizeof *rq);
    if (!rq) {
        send_error(s, o, h->req_id, PJ_E_INTERNAL, UINT32_MAX, "REGISTER: out of memory");
        return;
    }
    int st = pj_dec_register(body, h->body_len, rq, err, sizeof err);
    pj_buf *b = NULL;
    pj_bufreg_limits lim = {.max_buffers = s->cfg.limits.max_buffers_per_conn,
                            .max_buffer_bytes = s->cfg.limits.max_buffer_bytes,
                            .max_conn_bytes = s->cfg.limits.max_conn_buffer_bytes,
                            .max_total_bytes = s->cfg.limits.max_total_buffer_bytes};
    if (st == PJ_OK)
        st = pj_bufreg_register_req(&c->reg, rq, &lim, h->req_id, (h->flags & PJ_HF_RETRY) != 0, &b,
                                    err, sizeof err);
    free(rq);
    if (st != PJ_OK) {
        conn_say_failure(c, PJ_LOG_INFO, "%s", err);
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    pj_log_debug("connection #%" PRIu64 ": buffer %u = %s, %" PRIu64 " bytes", c->serial, b->id,
                 b->name, b->size);
    pj_registered rep = {.buffer_id = b->id, .size = b->size};
    pj_wbuf_reset(&s->wb);
    pj_enc_registered(&s->wb, h->req_id, &rep);
    send_wb(s, o);
}

static void handle_unregister(pj_server *s, pj_conn *c, origin o, const pj_hdr *h, const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    uint32_t id = 0;
    int st = pj_dec_buffer_id(body, h->body_len, &id, err, sizeof err);
    if (st == PJ_OK)
        st = pj_bufreg_unregister(&c->reg, id, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    pj_wbuf_reset(&s->wb);
    pj_enc_unregistered(&s->wb, h->req_id, id);
    send_wb(s, o);
}

static char *stats_text(pj_server *s)
{
    cJSON *o = cJSON_CreateObject();
    if (!o)
        return NULL;
    cJSON_AddStringToObject(o, "version", PJ_VERSION_STRING);
    cJSON_AddStringToObject(o, "backend", s->be->ops->name);
    cJSON_AddStringToObject(o, "device", s->be->device_name);
    cJSON_AddBoolToObject(o, "draining", s->draining);
    cJSON *cn = cJSON_AddObjectToObject(o, "connections");
    if (cn) {
        cJSON_AddNumberToObject(cn, "current", s->conns.count);
        cJSON_AddNumberToObject(cn, "closing", s->n_zombies);
        cJSON_AddNumberToObject(cn, "closed_waiting", s->orphans.count);
        cJSON_AddNumberToObject(cn, "lost_now", s->orphans.lost);
        cJSON_AddNumberToObject(cn, "lost_clients", (double)s->orphans.lost_total);
        cJSON_AddNumberToObject(cn, "total", (double)s->stats.conns_total);
        cJSON_AddNumberToObject(cn, "hello_timeouts", (double)s->stats.hello_timeouts);
        cJSON_AddNumberToObject(cn, "refused", (double)atomic_load(&s->refused));
        /* What refusals are counted against (limits.*, as reloaded): a
         * status or a dashboard shows how near the limit the count is. */
        cJSON_AddNumberToObject(cn, "limit", s->cfg.limits.max_connections);
        cJSON_AddNumberToObject(cn, "limit_per_uid", s->cfg.limits.max_connections_per_uid);
        cJSON_AddNumberToObject(cn, "listener_restarts", (double)s->lst_restarts);
        /* nng's reaper seen retiring the watch's probe pipes (a count that
         * stops growing, with the daemon up, is the watch itself stuck). */
        cJSON_AddNumberToObject(cn, "reaper_probes", (double)pj_reapwatch_probes(s->reapwatch));
    }
    uint64_t nbuf, nbytes;
    pj_bufreg_totals(&nbuf, &nbytes);
    cJSON *bf = cJSON_AddObjectToObject(o, "buffers");
    if (bf) {
        cJSON_AddNumberToObject(bf, "current", (double)nbuf);
        cJSON_AddNumberToObject(bf, "mapped_bytes", (double)nbytes);
        cJSON_AddNumberToObject(bf, "releasing", pj_closer_pending());
        cJSON_AddNumberToObject(bf, "release_wait_ms", (double)pj_closer_running_ms());
    }
    cJSON_AddNumberToObject(o, "inflight", (double)s->inflight);
    cJSON_AddNumberToObject(o, "submits_deferred", (double)s->deferrals);
    cJSON *wd = cJSON_AddObjectToObject(o, "watchdog");
    if (wd) {
        cJSON_AddNumberToObject(wd, "usec", (double)s->wd_usec);
        cJSON_AddBoolToObject(wd, "withheld", s->wd_withheld != 0);
        cJSON_AddNumberToObject(wd, "stalls", (double)s->wd_stalls);
        cJSON_AddNumberToObject(wd, "client_waits", (double)s->wd_client_waits);
    }
    cJSON *rl = cJSON_AddObjectToObject(o, "reload");
    if (rl) {
        static const char *const result[] = {"applied", "refused", "failed"};
        uint64_t n = s->reload_n[0] + s->reload_n[1] + s->reload_n[2];
        cJSON_AddNumberToObject(rl, "attempts", (double)n);
        for (int i = 0; i < 3; i++)
            cJSON_AddNumberToObject(rl, result[i], (double)s->reload_n[i]);
        cJSON *last = n ? cJSON_AddObjectToObject(rl, "last") : cJSON_AddNullToObject(rl, "last");
        if (n && last) {
            cJSON_AddStringToObject(last, "result", result[s->reload_last]);
            cJSON_AddStringToObject(last, "message", s->reload_msg);
            cJSON_AddNumberToObject(last, "unix_time", s->reload_unix);
            cJSON_AddNumberToObject(last, "ago_s", (double)(pj_now_ns() - s->reload_mono_ns) / 1e9);
        }
    }
    const char *names[PJ_CFG_MAX_LAYERS];
    uint32_t nl = s->model->n_layers < PJ_CFG_MAX_LAYERS ? s->model->n_layers : PJ_CFG_MAX_LAYERS;
    /* What is served, so that a client can tell it from another checkpoint
     * of the same shapes (client/python/projd.py check_weight). */
    cJSON *md = cJSON_AddObjectToObject(o, "model");
    if (md) {
        cJSON_AddStringToObject(md, "path", s->model->abs_path);
        cJSON_AddNumberToObject(md, "file_bytes", (double)s->model->file_bytes);
        cJSON *ml = cJSON_AddArrayToObject(md, "layers");
        for (uint32_t i = 0; ml && i < nl; i++) {
            const pj_model_layer *L = &s->model->layers[i];
            cJSON *l = cJSON_CreateObject();
            if (!l || !cJSON_AddItemToArray(ml, l)) {
                cJSON_Delete(l);
                break;
            }
            char dg[12];
            snprintf(dg, sizeof dg, "%08x", L->digest);
            cJSON_AddStringToObject(l, "name", L->name);
            cJSON_AddStringToObject(l, "tensor", L->tensor);
            cJSON_AddStringToObject(l, "dtype", pj_st_dtype_name((pj_st_dtype)L->src_dtype));
            cJSON_AddStringToObject(l, "format", pj_format_name(L->w.fmt));
            cJSON_AddStringToObject(l, "digest", dg);
        }
    }
    for (uint32_t i = 0; i < nl; i++)
        names[i] = s->model->layers[i].name;
    pj_stats_json(&s->stats, names, nl, o);
    cJSON *mem = cJSON_AddObjectToObject(o, "memory");
    if (mem) {
        double weights = 0;
        for (uint32_t i = 0; i < nl; i++)
            weights += (double)s->model->layers[i].stored_bytes;
        cJSON_AddNumberToObject(mem, "rss_bytes", (double)pj_stats_rss_bytes());
        cJSON_AddNumberToObject(mem, "weights_bytes", weights);
        cJSON_AddNumberToObject(mem, "shm_mapped_bytes", (double)nbytes);
    }
    cJSON *rg = cJSON_AddObjectToObject(o, "ring");
    if (rg) {
        uint32_t attached = 0, broken = 0;
        uint64_t lost = s->ring_lost_gone, sleeps = s->ring_sleeps_gone;
        for (unsigned i = 0; i < PJ_CONN_BUCKETS; i++) {
            for (pj_conn *c = s->conns.b[i]; c; c = c->next) {
                if (c->ring) {
                    attached++;
                    broken += ring_counts(c, &lost, &sleeps);
                }
            }
        }
        /* closed connections whose last request still runs: their rings
         * are stopped, not yet freed (conn_free then keeps their counts) */
        for (pj_conn *c = s->zombies; c; c = c->next)
            ring_counts(c, &lost, &sleeps);
        cJSON_AddBoolToObject(rg, "enabled", s->cfg.ring.enabled != 0);
        cJSON_AddNumberToObject(rg, "attached", attached);
        cJSON_AddNumberToObject(rg, "attaches_total", (double)s->ring_attaches);
        cJSON_AddNumberToObject(rg, "requests", (double)s->ring_requests);
        cJSON_AddNumberToObject(rg, "broken", broken);
        cJSON_AddNumberToObject(rg, "replies_lost", (double)lost);
        cJSON_AddNumberToObject(rg, "poller_sleeps", (double)sleeps);
        cJSON_AddNumberToObject(rg, "wakes", (double)s->ring_wakes);
    }
    cJSON *bs = cJSON_AddObjectToObject(o, "backend_stats");
    if (bs && s->be->ops->stats_json)
        s->be->ops->stats_json(s->be, bs);
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static void handle_stats(pj_server *s, origin o, const pj_hdr *h, const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    int st = pj_dec_stats(body, h->body_len, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    char *text = stats_text(s);
    if (!text) {
        send_error(s, o, h->req_id, PJ_E_INTERNAL, UINT32_MAX, "STATS: out of memory");
        return;
    }
    pj_wbuf_reset(&s->wb);
    pj_enc_stats_reply(&s->wb, h->req_id, text, strlen(text));
    free(text);
    send_wb(s, o);
}

static void handle_ping(pj_server *s, origin o, const pj_hdr *h, const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    int st = pj_dec_ping(body, h->body_len, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    pj_wbuf_reset(&s->wb);
    pj_enc_pong(&s->wb, h->req_id, body, h->body_len);
    send_wb(s, o);
}

/* Poller thread: hand one ring request to the loop. Non-zero when out of
 * memory: the poller keeps the request and tries again. */
static int ring_deliver(void *arg, pj_ringsrv *ring, const uint8_t *msg, size_t len)
{
    pj_server *s = arg;
    ring_ev *ev = malloc(sizeof *ev + len);
    if (!ev)
        return -ENOMEM;
    ev->ev.kind = EV_RING;
    ev->pipe = pj_ringsrv_pipe(ring);
    ev->serial = pj_ringsrv_serial(ring);
    ev->recv_ns = pj_now_ns();
    ev->len = len;
    memcpy(ev->data, msg, len);
    push_ev(s, &ev->ev);
    return 0;
}

/* ring.spin_us, except on a machine of fewer than ring.spin_min_cores
 * cores (4): there the spinners (poller, loop, the client's reaper) take
 * the cores the loop and the backend's workers need, and cost more latency
 * than the wake-ups they save. */
static uint32_t ring_spin_us(const pj_server *s)
{
    return s->cores >= (long)s->cfg.ring.spin_min_cores ? s->cfg.ring.spin_us : 0;
}

/* The loop's own spinning: for ring_spin_us after ring traffic, and while
 * a ring's request is in flight up to RING_INFLIGHT_SPIN_NS past that, an
 * idle handle keeps uv_run polling (epoll with no timeout) instead of
 * sleeping, so that the poller's hand-off and the completion's reach the
 * loop without a wake-up. Ring clients have a spinning poller and reaper
 * already; this is the third spinner. The bound: a request that waits
 * long (a client's event not yet recorded, or never: a client that died;
 * a slow op) took a whole core for as long before, where the wake-up it
 * saves is ~20 us. */
#define RING_INFLIGHT_SPIN_NS 2000000ull

static void ring_wakes_watch(pj_server *s, int on);

static void on_ring_spin(uv_idle_t *h)
{
    pj_server *s = h->data;
    const uint64_t now = pj_now_ns();
    if (now >= s->ring_spin_until &&
        (s->ring_inflight == 0 || now >= s->ring_spin_until + RING_INFLIGHT_SPIN_NS)) {
        uv_idle_stop(h);
        ring_wakes_watch(s, 1);
    }
}

/* $PROJD_RING_LOOP_SPIN=0 keeps the loop asleep between events whatever
 * ring.spin_us says (the poller and the clients still spin): for measuring
 * what the loop's spinning buys, and for hosts that cannot spare it. */
static int loop_spin_allowed(void)
{
    static int allowed = -1;
    if (allowed < 0) {
        const char *v = getenv("PROJD_RING_LOOP_SPIN");
        allowed = !(v && strcmp(v, "0") == 0);
    }
    return allowed;
}

static void ring_spin_extend(pj_server *s)
{
    uint32_t us = ring_spin_us(s);
    if (us == 0 || s->stopping || !loop_spin_allowed())
        return;
    s->ring_spin_until = pj_now_ns() + (uint64_t)us * 1000u;
    if (!uv_is_active((uv_handle_t *)&s->ring_spin)) {
        uv_idle_start(&s->ring_spin, on_ring_spin);
        ring_wakes_watch(s, 0);
    }
}

/* The loop's watch on a ring's wake FIFO (ringsrv.h): a client whose push
 * found the poller asleep writes a byte, so the loop wakes and starts
 * spinning while the poller wakes, instead of being woken by the poller
 * after it (two ~20 µs wake-ups in a row on the H200 host, now side by
 * side). */
typedef struct ring_wake {
    uv_poll_t h;
    pj_server *s;
    pj_ringsrv *ring;
} ring_wake;

static void on_ring_wake(uv_poll_t *h, int status, int events)
{
    (void)status;
    (void)events;
    ring_wake *w = h->data;
    pj_ringsrv_wake_drain(w->ring);
    w->s->ring_wakes++;
    ring_spin_extend(w->s);
}

static void ring_wake_freed(uv_handle_t *h)
{
    free(h->data);
}

/* The FIFOs are watched only while the loop sleeps: a spinning loop needs
 * no wake-up, and under load (the loop spinning, each client's poller
 * asleep between its requests) every request would otherwise cost the
 * loop an epoll event and a read. The bytes written meanwhile are dropped
 * when the watch resumes. */
static void ring_wake_watch(ring_wake *w, int on)
{
    if (on) {
        pj_ringsrv_wake_drain(w->ring);
        uv_poll_start(&w->h, UV_READABLE, on_ring_wake);
    } else {
        uv_poll_stop(&w->h);
    }
}

static void ring_wakes_watch(pj_server *s, int on)
{
    for (unsigned i = 0; i < PJ_CONN_BUCKETS; i++)
        for (pj_conn *c = s->conns.b[i]; c; c = c->next)
            if (c->ring_wake)
                ring_wake_watch(c->ring_wake, on);
}

/* Stop watching before the ring (and its FIFO) goes. */
static void ring_wake_stop(pj_conn *c)
{
    ring_wake *w = c->ring_wake;
    if (!w)
        return;
    uv_poll_stop(&w->h);
    uv_close((uv_handle_t *)&w->h, ring_wake_freed);
    c->ring_wake = NULL;
}

static void ring_wake_start(pj_server *s, pj_conn *c)
{
    int fd = pj_ringsrv_wake_fd(c->ring); /* opened only where the loop spins */
    if (fd < 0)
        return;
    ring_wake *w = calloc(1, sizeof *w);
    if (!w)
        return;
    w->s = s;
    w->ring = c->ring;
    w->h.data = w;
    if (uv_poll_init(s->loop, &w->h, fd) != 0) {
        free(w);
        return;
    }
    ring_wake_watch(w, !uv_is_active((uv_handle_t *)&s->ring_spin));
    c->ring_wake = w;
}

static void handle_ring_attach(pj_server *s, pj_conn *c, origin o, const pj_hdr *h,
                               const void *body)
{
    char err[PJ_WIRE_MSG_MAX];
    pj_ring_attach rq;
    int st = pj_dec_ring_attach(body, h->body_len, &rq, err, sizeof err);
    if (st != PJ_OK) {
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    if (!s->cfg.ring.enabled) {
        send_error(s, o, h->req_id, PJ_E_TYPE, UINT32_MAX,
                   "RING_ATTACH: the ring is turned off on this daemon (ring.enabled = 0); "
                   "use nng");
        return;
    }
    if (c->ring) {
        /* A broken ring stays the connection's (its replies' slots may
         * still be read); only a new connection gets another. */
        uint64_t lost = 0, sleeps = 0;
        send_error(s, o, h->req_id, PJ_E_LIMIT, UINT32_MAX,
                   ring_counts(c, &lost, &sleeps)
                       ? "RING_ATTACH: this connection's ring broke (the daemon's log says why) "
                         "and stays its ring; nng still serves it: connect again to attach "
                         "another"
                       : "RING_ATTACH: this connection has a ring already (one per connection)");
        return;
    }
    pj_ringsrv_opts opts = {.peer_uid = c->uid,
                            .max_slots = s->cfg.ring.max_slots,
                            .max_slot_bytes =
                                pj_ringsrv_max_slot_bytes(s->cfg.limits.max_message_bytes),
                            .spin_ns = (uint64_t)ring_spin_us(s) * 1000u,
                            .serial = c->serial,
                            .pipe_id = c->pipe_id,
                            .deliver = ring_deliver,
                            .arg = s,
                            .watch_wake = ring_spin_us(s) > 0 && loop_spin_allowed(),
                            .owed_cap = &s->ring_owed_cap};
    st = pj_ringsrv_open(&rq, &opts, &c->ring, err, sizeof err);
    if (st != PJ_OK) {
        conn_say_failure(c, PJ_LOG_INFO, "%s", err);
        send_error(s, o, h->req_id, st, UINT32_MAX, err);
        return;
    }
    s->ring_attaches++;
    ring_wake_start(s, c);
    pj_log_info("connection #%" PRIu64
                ": ring %s attached (%u slots of %u bytes, spin %u us, wake FIFO %s)",
                c->serial, rq.shm_name, rq.slots, rq.slot_bytes, ring_spin_us(s),
                c->ring_wake ? "watched" : "none");
    pj_ring_attached rep = {
        .slots = rq.slots, .slot_bytes = rq.slot_bytes, .spin_us = ring_spin_us(s)};
    pj_wbuf_reset(&s->wb);
    pj_enc_ring_attached(&s->wb, h->req_id, &rep);
    send_wb(s, o);
}

/* One request of connection c, from an nng context or from its ring: the
 * checks every request gets, then its handler. */
static void dispatch(pj_server *s, pj_conn *c, origin o, const uint8_t *data, size_t len,
                     uint64_t now)
{
    char err[PJ_WIRE_MSG_MAX];
    pj_hdr h;
    memset(&h, 0, sizeof h);
    /* The header's checks in PROTOCOL.md's order (magic, version, flags,
     * length, then the size limit: max_message_bytes less the header). */
    int st = pj_dec_hdr(data, len, s->cfg.limits.max_message_bytes - PJ_WIRE_HDR_SIZE, &h, err,
                        sizeof err);
    /* Anything but a probe's three requests, refused ones and broken
     * messages included, makes the connection a client's (announce_conn). */
    if (st != PJ_OK || (h.type != PJ_MSG_HELLO && h.type != PJ_MSG_STATS && h.type != PJ_MSG_PING))
        announce_conn(s, c);
    if (st != PJ_OK) {
        pj_log_debug("connection #%" PRIu64 ": %s: %s", c->serial, pj_status_name(st), err);
        send_error(s, o, h.req_id, st, UINT32_MAX, err);
        return;
    }
    pj_log_debug("connection #%" PRIu64 ": %s %" PRIu64 " (%zu bytes%s)", c->serial,
                 pj_msg_type_name(h.type), h.req_id, len, o.ring ? ", ring" : "");
    const void *body = data + PJ_WIRE_HDR_SIZE;
    /* PROTOCOL.md's order: type, then shutdown, then HELLO. */
    int known = h.type == PJ_MSG_HELLO || h.type == PJ_MSG_REGISTER ||
                h.type == PJ_MSG_UNREGISTER || h.type == PJ_MSG_PROJECT || h.type == PJ_MSG_STATS ||
                h.type == PJ_MSG_PING || h.type == PJ_MSG_RING_ATTACH;
    if (!known) {
        snprintf(err, sizeof err, "message type %u (%s) is not a request", h.type,
                 pj_msg_type_name(h.type));
        send_error(s, o, h.req_id, PJ_E_TYPE, UINT32_MAX, err);
        return;
    }
    /* Counted as requests once known to be one: a reply's type sent by a
     * broken client is an E_TYPE error (STATS errors), not a request. */
    if (h.type < PJ_STATS_TYPES)
        s->stats.by_type[h.type]++;
    /* The ring carries the requests that are on the data path; the rest
     * (set-up, statistics) stay on nng, where replies of any size fit. */
    if (o.ring && h.type != PJ_MSG_PROJECT && h.type != PJ_MSG_PING) {
        snprintf(err, sizeof err, "%s is not carried by the ring; send it over nng",
                 pj_msg_type_name(h.type));
        send_error(s, o, h.req_id, PJ_E_TYPE, UINT32_MAX, err);
        return;
    }
    if (s->draining) {
        send_error(s, o, h.req_id, PJ_E_SHUTDOWN, UINT32_MAX,
                   "the daemon is shutting down; no new requests");
        return;
    }
    if (!c->hello && h.type != PJ_MSG_HELLO) {
        snprintf(err, sizeof err, "%s before HELLO", pj_msg_type_name(h.type));
        send_error(s, o, h.req_id, PJ_E_NOHELLO, UINT32_MAX, err);
        return;
    }
    switch (h.type) {
    case PJ_MSG_HELLO:
        handle_hello(s, c, o, &h, body);
        break;
    case PJ_MSG_REGISTER:
        handle_register(s, c, o, &h, body);
        break;
    case PJ_MSG_UNREGISTER:
        handle_unregister(s, c, o, &h, body);
        break;
    case PJ_MSG_PROJECT:
        handle_project(s, c, o, &h, body, now);
        break;
    case PJ_MSG_STATS:
        handle_stats(s, o, &h, body);
        break;
    case PJ_MSG_RING_ATTACH:
        handle_ring_attach(s, c, o, &h, body);
        break;
    default:
        handle_ping(s, o, &h, body);
        break;
    }
}

/* The contexts a connection may hold before its requests are answered
 * E_LIMIT (DAEMON.md, "Contexts"). */
static uint32_t conn_share(const pj_server *s)
{
    return s->cfg.limits.max_inflight_per_conn + CONN_CTX_SLACK;
}

/* Past twice its share, with replies that have stood REPLY_STALL_MS; or,
 * while draining, any connection whose replies stand that long: the stop
 * waits for every reply to be sent, and a client that reads none while it
 * sends a request now and then (each answered E_SHUTDOWN, each reply
 * queued for SEND_TIMEOUT_MS) held it to DRAIN_TIMEOUT_MS and exit 1. */
static int conn_not_reading(const pj_server *s, const pj_conn *c, uint64_t now)
{
    return (s->draining || c->n_ctx > 2 * conn_share(s)) && c->n_sending > 0 &&
           now - c->send_moved_ns >= (uint64_t)REPLY_STALL_MS * 1000000ull;
}

static void close_not_reading(pj_server *s, pj_conn *c, uint64_t now)
{
    if (!c->ctx_closed)
        pj_log_warn("connection #%" PRIu64 ": pid %d holds %u requests whose replies it does "
                    "not read (%u replies unsent for %" PRIu64 " ms; limit %u); closing it",
                    c->serial, (int)c->peer.pid, c->n_ctx, c->n_sending,
                    (uint64_t)((now - c->send_moved_ns) / 1000000u), conn_share(s));
    c->ctx_closed = 1;
    nng_pipe p = NNG_PIPE_INITIALIZER;
    p.id = c->pipe_id;
    nng_pipe_close(p);
}

static void on_msg(pj_server *s, nctx *nc)
{
    uint64_t now = pj_now_ns();
    nng_msg *msg = nc->msg;
    nc->msg = NULL;
    s->n_busy++;
    pj_conn *c = pj_conn_table_find(&s->conns, (uint32_t)nng_pipe_id(nng_msg_get_pipe(msg)));
    if (!c) { /* its pipe is already gone, or it was refused */
        if (!tell_refused(s, nc, msg))
            abandon(s, nc);
        nng_msg_free(msg);
        return;
    }
    c->requests++;
    const uint8_t *data = nng_msg_body(msg);
    size_t len = nng_msg_len(msg);
    origin o = {.nc = nc};
    /* Every request holds a context until its reply is sent, and a client
     * that does not read its replies keeps them for SEND_TIMEOUT_MS: so
     * the contexts of each connection are counted, whatever the request,
     * and one connection cannot take the ones other clients need. */
    nc->pipe = c->pipe_id;
    c->n_ctx++;
    const uint32_t share = conn_share(s);
    if (conn_not_reading(s, c, now)) {
        close_not_reading(s, c, now);
        nng_msg_free(msg);
        abandon(s, nc);
        return;
    }
    if (c->n_ctx > share) {
        char err[PJ_WIRE_MSG_MAX];
        snprintf(err, sizeof err,
                 "%u requests of this connection are waiting for their replies to be sent or "
                 "read (limit %u = limits.max_inflight_per_conn + %d)",
                 c->n_ctx - 1, share, CONN_CTX_SLACK);
        send_error(s, o, pj_peek_req_id(data, len), PJ_E_LIMIT, UINT32_MAX, err);
    } else {
        dispatch(s, c, o, data, len, now);
    }
    nng_msg_free(msg);
}

/* A request from a ring. Its connection may have gone since the poller
 * took it (the poller is stopped before the connection leaves the table,
 * so a ring still attached under this pipe id and serial is the sender). */
static void on_ring_msg(pj_server *s, ring_ev *ev)
{
    pj_conn *c = pj_conn_table_find(&s->conns, ev->pipe);
    if (c && c->ring && pj_ringsrv_serial(c->ring) == ev->serial) {
        c->requests++;
        s->ring_requests++;
        origin o = {.ring = c->ring, .req_id = pj_peek_req_id(ev->data, ev->len)};
        ring_spin_extend(s);
        dispatch(s, c, o, ev->data, ev->len, ev->recv_ns);
    }
    free(ev);
}

/* ---- contexts ---------------------------------------------------------------------- */

static uint32_t ctx_cap(const pj_server *s)
{
    /* 2 x its share per connection: past that, one whose replies stand is
     * closed (one that reads them may hold more for a moment, within this
     * cap of all of them). */
    uint64_t cap = (uint64_t)s->cfg.limits.max_connections * 2 * conn_share(s) + CTX_GROW;
    return cap > CTX_MAX ? CTX_MAX : (uint32_t)cap;
}

/* Open up to n more contexts and start them receiving. */
static int add_contexts(pj_server *s, uint32_t n, char *err, size_t errlen)
{
    uint32_t cap = ctx_cap(s);
    if (s->n_ctx + n > cap)
        n = cap > s->n_ctx ? cap - s->n_ctx : 0;
    if (n == 0)
        return 0;
    nctx **arr = realloc(s->ctxs, (s->n_ctx + n) * sizeof *arr);
    if (!arr) {
        snprintf(err, errlen, "out of memory for nng contexts");
        return -ENOMEM;
    }
    s->ctxs = arr;
    for (uint32_t i = 0; i < n; i++) {
        nctx *nc = calloc(1, sizeof *nc);
        if (!nc) {
            snprintf(err, errlen, "out of memory for nng contexts");
            return -ENOMEM;
        }
        nc->s = s;
        int rv = nng_ctx_open(&nc->ctx, s->sock);
        if (rv == 0)
            rv = nng_aio_alloc(&nc->aio, aio_cb, nc);
        if (rv != 0) {
            if (nc->aio)
                nng_aio_free(nc->aio);
            free(nc);
            snprintf(err, errlen, "nng context: %s", nng_strerror(rv));
            return -ENOMEM;
        }
        s->ctxs[s->n_ctx++] = nc;
        arm_recv(s, nc);
    }
    return 0;
}

/* ---- shutdown ------------------------------------------------------------------------- */

static void on_handle_closed(uv_handle_t *h)
{
    pj_server *s = h->data;
    if (--s->handles_open == 0 && !s->stopped_called) {
        s->stopped_called = 1;
        if (s->stopped)
            s->stopped(s->stopped_arg, s->exit_code);
    }
}

static void close_socket(pj_server *s)
{
    pthread_mutex_lock(&s->mu);
    s->closing = 1;
    pthread_mutex_unlock(&s->mu);
    if (s->sock_open) {
        nng_close(s->sock); /* closes the listeners (and their private names) */
        s->sock_open = 0;
    }
    pj_reapwatch_close(s->reapwatch);
    s->reapwatch = NULL;
    for (uint32_t i = 0; i < s->n_ctx; i++)
        nng_aio_stop(s->ctxs[i]->aio); /* no callback runs after this */
    /* Events still queued: pipe events are plain memory; context events
     * point into the contexts freed below (a received message goes with
     * its context). */
    pthread_mutex_lock(&s->mu);
    pj_ev *ev = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (ev) {
        pj_ev *next = ev->next;
        if (ev_is_plain(ev))
            free(ev);
        ev = next;
    }
    for (uint32_t i = 0; i < s->n_ctx; i++) {
        nctx *nc = s->ctxs[i];
        nng_aio_free(nc->aio);
        if (nc->msg)
            nng_msg_free(nc->msg);
        free(nc);
    }
    free(s->ctxs);
    s->ctxs = NULL;
    s->n_ctx = 0;
    if (s->listening)
        unlink(s->path);
    s->listening = 0;
    pj_socklock_release();
}

static void free_conns(pj_server *s)
{
    for (unsigned i = 0; i < PJ_CONN_BUCKETS; i++) {
        while (s->conns.b[i]) {
            pj_conn *c = s->conns.b[i];
            s->conns.b[i] = c->next;
            ring_wake_stop(c);
            conn_free(s, c);
        }
    }
    s->conns.count = 0;
    while (s->zombies) {
        pj_conn *c = s->zombies;
        s->zombies = c->next;
        conn_free(s, c);
    }
    sync_zombies(s);
    pj_orphans_sweep(&s->orphans, s->be, 1);
}

static void stop_now(pj_server *s)
{
    if (s->handles_open == 0 || s->stopping > 1)
        return;
    s->stopping = 2;
    close_socket(s);
    free_conns(s);
    pj_log_info("stopped (exit code %d)", s->exit_code);
    uv_timer_stop(&s->timer);
    uv_timer_stop(&s->status_timer);
    uv_timer_stop(&s->watch_timer);
    uv_timer_stop(&s->wd_timer);
    uv_timer_stop(&s->defer_timer);
    uv_close((uv_handle_t *)&s->defer_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->watch_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->wd_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->status_timer, on_handle_closed);
    uv_close((uv_handle_t *)&s->async, on_handle_closed);
    uv_idle_stop(&s->ring_spin);
    uv_close((uv_handle_t *)&s->ring_spin, on_handle_closed);
}

static void on_linger(uv_timer_t *t)
{
    stop_now(t->data);
}

static void on_drain_timeout(uv_timer_t *t)
{
    pj_server *s = t->data;
    pj_log_err("drain: %" PRIu64 " requests still in flight and %u replies unsent after %u ms; "
               "exiting",
               s->inflight, s->n_sending, s->drain_timeout_ms);
    pj_notify_status("drain timed out");
    /* Backend threads still own those requests: no orderly teardown. */
    _exit(1);
}

/* The stop guard: SIGALRM after the drain ends exits with the code the
 * daemon would have returned (write(2) and _exit are async-signal-safe). */
static volatile sig_atomic_t g_exit_guard_code;

static void on_exit_guard(int sig)
{
    (void)sig;
    static const char msg[] = "projd: shutdown: teardown (nng, or a buffer the device still "
                              "used) did not finish within 5 s after the drain; exiting\n";
    ssize_t w = write(STDERR_FILENO, msg, sizeof msg - 1);
    (void)w;
    _exit(g_exit_guard_code);
}

void pj_server_set_exit_code(int code)
{
    g_exit_guard_code = code;
}

void pj_server_arm_exit_guard(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_exit_guard;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, NULL);
    alarm(EXIT_GUARD_S);
}

static void check_drain(pj_server *s)
{
    if (!s->draining || s->stopping)
        return;
    if (s->inflight > 0 || s->n_sending > 0)
        return;
    pj_log_info("drain: all requests answered (those of closed connections not yet started "
                "were dropped with them) after %.1f ms",
                (double)(pj_now_ns() - s->drain_start_ns) / 1e6);
    s->stopping = 1;
    /* Every reply is out. Tearing nng down can still hang (nng 1.5.2, after
     * projd closed a peer with unsent replies): bound it, so a stop never
     * outlives systemd's timeout and exits as if it had finished. */
    pj_server_arm_exit_guard();
    /* nng hands a reply to the transport before it is written; give the
     * writes (and clients reading them) a moment before closing pipes. */
    uv_timer_stop(&s->timer);
    /* Refused pipes just told why count as clients reading a reply. */
    int telling = 0;
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < TELL_MAX; i++)
        telling |= s->telling[i].pipe != 0;
    pthread_mutex_unlock(&s->mu);
    uv_timer_start(&s->timer, on_linger, s->conns.count || telling ? LINGER_MS : 0, 0);
}

void pj_server_drain(pj_server *s)
{
    if (s->draining) {
        pj_log_info("drain already in progress (%" PRIu64 " requests in flight)", s->inflight);
        return;
    }
    s->draining = 1;
    s->drain_start_ns = pj_now_ns();
    pthread_mutex_lock(&s->mu);
    s->cb_draining = 1;
    pthread_mutex_unlock(&s->mu);
    pj_log_info("draining: %" PRIu64 " requests in flight, %u connections", s->inflight,
                s->conns.count);
    if (s->stop_reason[0]) {
        char status[sizeof s->stop_reason + 16];
        snprintf(status, sizeof status, "%s; draining", s->stop_reason);
        pj_notify_stopping(status);
    } else {
        pj_notify_stopping("draining");
    }
    if (!s->sock_open) { /* never listened */
        s->stopping = 1;
        stop_now(s);
        return;
    }
    uv_timer_start(&s->timer, on_drain_timeout, s->drain_timeout_ms, 0);
    check_drain(s);
}

void pj_server_drain_failed(pj_server *s, const char *why)
{
    if (!s->stop_reason[0]) /* the first failure is the one to tell */
        snprintf(s->stop_reason, sizeof s->stop_reason, "%s", why);
    if (s->draining)
        pj_notify_status("%s; draining", s->stop_reason);
    else
        pj_server_drain(s);
}

/* ---- the loop side of the queue ----------------------------------------------------- */

static void on_async(uv_async_t *a)
{
    pj_server *s = a->data;
    pthread_mutex_lock(&s->mu);
    pj_ev *ev = s->ev_head;
    s->ev_head = s->ev_tail = NULL;
    pthread_mutex_unlock(&s->mu);
    while (ev) {
        pj_ev *next = ev->next;
        switch (ev->kind) {
        case EV_MSG:
            on_msg(s, (nctx *)ev);
            break;
        case EV_SENT:
            if (((nctx *)ev)->send_rv != 0)
                pj_log_debug("a reply was not sent: %s", nng_strerror(((nctx *)ev)->send_rv));
            s->n_sending--;
            s->n_busy--;
            ctx_release(s, (nctx *)ev, 1);
            tell_sent(s, (nctx *)ev);
            arm_recv(s, (nctx *)ev);
            break;
        case EV_RECV_ERR:
            arm_recv(s, (nctx *)ev);
            break;
        case EV_PIPE_ADD:
            on_pipe_add(s, (pipe_ev *)ev);
            free(ev);
            break;
        case EV_PIPE_REM:
            on_pipe_rem(s, (pipe_ev *)ev);
            free(ev);
            break;
        case EV_DONE:
            on_done(s, (pj_req *)ev);
            break;
        case EV_RING:
            on_ring_msg(s, (ring_ev *)ev);
            break;
        case EV_FATAL:
            fatal_stop(s, ((fatal_ev *)ev)->msg);
            free(ev);
            break;
        }
        ev = next;
    }
    if (!s->stopping && s->n_ctx - s->n_busy < CTX_LOW_WATER && s->n_ctx < ctx_cap(s)) {
        char err[160];
        if (add_contexts(s, CTX_GROW, err, sizeof err) != 0)
            pj_log_warn("cannot open more nng contexts: %s", err);
    }
    check_drain(s);
}

/* ---- setup ------------------------------------------------------------------------------ */

static int url_path(const char *url, char *path, size_t cap, char *err, size_t errlen)
{
    if (strncmp(url, "ipc://", 6) != 0 || !url[6]) {
        snprintf(err, errlen, "socket url \"%s\": expected ipc://PATH", url);
        return -EINVAL;
    }
    struct sockaddr_un sun;
    if (strlen(url + 6) >= sizeof sun.sun_path || strlen(url + 6) >= cap) {
        snprintf(err, errlen, "socket path \"%s\" is longer than %zu bytes", url + 6,
                 sizeof sun.sun_path - 1);
        return -ENAMETOOLONG;
    }
    snprintf(path, cap, "%s", url + 6);
    return 0;
}

int pj_server_look_socket(const char *url, pj_socket_look *lk, char *err, size_t errlen)
{
    memset(lk, 0, sizeof *lk);
    int rc = url_path(url, lk->path, sizeof lk->path, err, errlen);
    if (rc != 0)
        return rc;
    /* Nothing is probed or removed inside a directory someone else
     * controls (a missing one is created and checked by listen). */
    snprintf(lk->dir, sizeof lk->dir, "%s", lk->path);
    char *slash = strrchr(lk->dir, '/');
    struct stat st;
    if (slash && slash != lk->dir) {
        *slash = '\0';
        if (lstat(lk->dir, &st) != 0)
            lk->dir_errno = errno;
        else if ((rc = pj_sockpath_check_dir(lk->dir, err, errlen)) != 0)
            return rc;
    } else {
        lk->dir[0] = '\0';
    }
    if (lstat(lk->path, &st) != 0) {
        if (errno == ENOENT)
            return 0;
        snprintf(err, errlen, "socket %s: %s", lk->path, strerror(errno));
        return -errno;
    }
    if (!S_ISSOCK(st.st_mode)) {
        snprintf(err, errlen, "socket %s: exists and is not a socket; not touching it", lk->path);
        return -EEXIST;
    }
    lk->exists = 1;
    return 0;
}

int pj_server_check_socket(const char *url, char *err, size_t errlen)
{
    pj_socket_look lk;
    int rc = pj_server_look_socket(url, &lk, err, errlen);
    if (rc != 0)
        return rc;
    /* A missing directory is made by listen, after the model's load: one
     * that could not be made fails now, not after it (a restart by
     * systemd would load again, five times a minute, to fail there). */
    if (lk.dir_errno == ENOENT && (rc = pj_sockpath_check_creatable(lk.dir, err, errlen)) != 0)
        return rc;
    /* One daemon per path from here on, the model load included (a
     * missing directory is made by listen, which takes the lock then). */
    if (!lk.dir_errno && (rc = pj_socklock_take(lk.path, err, errlen)) != 0)
        return rc;
    if (!lk.exists)
        return 0;
    const char *path = lk.path;
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        snprintf(err, errlen, "socket(): %s", strerror(errno));
        return -errno;
    }
    struct sockaddr_un sun;
    memset(&sun, 0, sizeof sun);
    sun.sun_family = AF_UNIX;
    memcpy(sun.sun_path, path, strlen(path));
    int c = connect(fd, (struct sockaddr *)&sun, sizeof sun);
    int e = errno;
    if (c == 0) {
        /* Take the live daemon's handshake before hanging up: a peer that
         * closes while nng 1.5 sends it stops that listener (see below). */
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        char hdr[8];
        if (poll(&pfd, 1, 1000) == 1) {
            ssize_t n = read(fd, hdr, sizeof hdr);
            (void)n;
        }
    }
    close(fd);
    if (c == 0) {
        snprintf(err, errlen,
                 "socket %s: another daemon is serving there (stop it first, or choose "
                 "another socket.url)",
                 path);
        return -EADDRINUSE;
    }
    if (e != ECONNREFUSED) {
        snprintf(err, errlen, "socket %s: cannot tell whether it is live: %s", path, strerror(e));
        return -e;
    }
    if (unlink(path) != 0 && errno != ENOENT) {
        snprintf(err, errlen, "socket %s: stale, but cannot remove it: %s", path, strerror(errno));
        return -errno;
    }
    pj_log_info("removed stale socket %s (nobody answered on it)", path);
    return 0;
}

/* Creates the socket's missing ancestors (0755) and its own directory
 * (pj_sockpath_dir_mode), then checks that directory is safe to use. */
static int mkdir_parents(const char *path, mode_t mode, char *err, size_t errlen)
{
    char dir[PJ_CFG_PATH];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir)
        return 0;
    *slash = 0;
    for (char *p = dir + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
            const int e = errno;
            snprintf(err, errlen, "socket %s: cannot create its directory's parent %s: %s", path,
                     dir, strerror(e));
            return -e;
        }
        *p = '/';
    }
    if (mkdir(dir, mode) != 0 && errno != EEXIST) {
        const int e = errno;
        snprintf(err, errlen, "socket %s: cannot create its directory %s: %s", path, dir,
                 strerror(e));
        return -e;
    }
    /* chmod/chown/rename below work by path inside it: someone else who
     * can write there could swap the socket for their own. */
    return pj_sockpath_check_dir(dir, err, errlen);
}

static void copy_auth_locked(pj_server *s)
{
    s->cb_max_conns = s->cfg.limits.max_connections;
    s->cb_max_per_uid = s->cfg.limits.max_connections_per_uid;
    s->cb_n_uids = s->cfg.auth.n_uids;
    s->cb_n_gids = s->cfg.auth.n_gids;
    memcpy(s->cb_uids, s->cfg.auth.uids, sizeof s->cb_uids);
    memcpy(s->cb_gids, s->cfg.auth.gids, sizeof s->cb_gids);
}

int pj_server_create(uv_loop_t *loop, const pj_config *cfg, const pj_model *model, pj_backend *be,
                     const char *url, pj_server_stopped_fn stopped, void *arg, pj_server **out,
                     char *err, size_t errlen)
{
    *out = NULL;
    pj_server *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    s->loop = loop;
    s->cfg = *cfg;
    __atomic_store_n(&s->ring_owed_cap, cfg->limits.max_inflight_per_conn, __ATOMIC_RELEASE);
    /* Tests only: a drain bound short enough for a suite to see what
     * happens at it (test_daemon_ops drain_timeout_exits_1). */
    s->drain_timeout_ms = DRAIN_TIMEOUT_MS;
    pj_envknob_u32("PROJD_DRAIN_TIMEOUT_MS", 100, DRAIN_TIMEOUT_MS, &s->drain_timeout_ms);
    s->model = model;
    s->be = be;
    s->stopped = stopped;
    s->stopped_arg = arg;
    snprintf(s->url, sizeof s->url, "%s", url);
    int rc = url_path(url, s->path, sizeof s->path, err, errlen);
    if (rc != 0) {
        s->path[0] = 0;
        free(s);
        return rc;
    }
    s->ops_cap = cfg->limits.max_ops_per_request ? cfg->limits.max_ops_per_request : 1;
    s->ops_scratch = calloc(s->ops_cap, sizeof *s->ops_scratch);
    s->wire_layers = wire_layers_new(model);
    if (!s->ops_scratch || !s->wire_layers || pj_stats_init(&s->stats, model->n_layers) != 0) {
        free(s->ops_scratch);
        free(s->wire_layers);
        free(s);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    pthread_mutex_init(&s->mu, NULL);
    s->cb_sock_gid = -1;
    copy_auth_locked(s);
    pj_wbuf_init(&s->wb);
    uv_async_init(loop, &s->async, on_async);
    uv_timer_init(loop, &s->timer);
    uv_timer_init(loop, &s->status_timer);
    uv_timer_init(loop, &s->watch_timer);
    uv_timer_init(loop, &s->wd_timer);
    uv_timer_init(loop, &s->defer_timer);
    s->cores = sysconf(_SC_NPROCESSORS_ONLN);
    uv_idle_init(loop, &s->ring_spin);
    s->ring_spin.data = s;
    s->async.data = s;
    s->timer.data = s;
    s->status_timer.data = s;
    s->watch_timer.data = s;
    s->wd_timer.data = s;
    s->defer_timer.data = s;
    s->handles_open = 7;
    pj_backend_set_fatal(be, backend_fatal, s);
    char cerr[160];
    if (pj_closer_start(cerr, sizeof cerr) != 0)
        pj_log_warn("%s: buffers are released on the event loop, which then waits for the "
                    "device whenever a client's buffer is closed",
                    cerr);
    *out = s;
    return 0;
}

/* ---- the listener and its watchdog ------------------------------------------------
 *
 * nng 1.5 (Debian 12's) stops a listener for good when a peer hangs up while
 * the daemon is sending its half of the SP handshake (EPIPE becomes
 * NNG_ECLOSED, which its accept loop treats as "listener closed"); one
 * connect() + close() by any local user would leave the daemon deaf.
 * Closing that listener would close every connection it accepted and unlink
 * its path, so instead each listener is bound on a private name and renamed
 * onto the public path, and a watchdog that sees the listener's error
 * counters move binds a fresh one and renames it over the public path. The
 * old one keeps its connections and is closed once it has none (closing it
 * unlinks only its private name, long gone). The counters also move when a
 * connection ends normally (its pending receive fails), so the listener is
 * replaced then too: needless but harmless, and nothing else tells a dead
 * accept loop from a live one. */

static int set_mode_group(pj_server *s, const char *path, char *err, size_t errlen)
{
    if (chmod(path, (mode_t)s->cfg.socket.mode) != 0) {
        snprintf(err, errlen, "chmod %o %s: %s", s->cfg.socket.mode, path, strerror(errno));
        return -errno;
    }
    if (s->cfg.socket.group[0]) {
        /* Looked up for the first listener only: each replacement (after
         * clients' hang-ups, on the loop) would otherwise wait on the name
         * service, a remote directory maybe; socket.group changes only
         * with a restart. */
        pthread_mutex_lock(&s->mu);
        const int64_t known = s->cb_sock_gid;
        pthread_mutex_unlock(&s->mu);
        uint32_t gid = (uint32_t)known;
        int rc = known >= 0 ? 0 : pj_server_socket_group(s->cfg.socket.group, &gid, err, errlen);
        if (rc != 0)
            return rc;
        if (chown(path, (uid_t)-1, (gid_t)gid) != 0) {
            snprintf(err, errlen, "chgrp %s %s: %s", s->cfg.socket.group, path, strerror(errno));
            return -errno;
        }
        pthread_mutex_lock(&s->mu);
        s->cb_sock_gid = gid;
        pthread_mutex_unlock(&s->mu);
    }
    return 0;
}

/* Whether this process may give a file the group gid: root, a member, or
 * CAP_CHOWN (a unit's AmbientCapabilities=). */
static int may_chgrp(gid_t gid)
{
    if (geteuid() == 0 || getegid() == gid)
        return 1;
    int ng = getgroups(0, NULL);
    gid_t *groups = ng > 0 ? malloc((size_t)ng * sizeof *groups) : NULL;
    int member = 0;
    if (groups)
        ng = getgroups(ng, groups);
    for (int i = 0; groups && i < ng && !member; i++)
        member = groups[i] == gid;
    free(groups);
    if (member)
        return 1;
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    unsigned long long eff = 0;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "CapEff: %llx", &eff) == 1)
            break;
    if (f)
        fclose(f);
    return (eff & 1ull) != 0; /* CAP_CHOWN is capability 0 */
}

int pj_server_socket_group(const char *group, uint32_t *gid, char *err, size_t errlen)
{
    if (!group[0])
        return 0;
    struct group gr, *res = NULL;
    char buf[16384];
    int e = getgrnam_r(group, &gr, buf, sizeof buf, &res);
    if (e != 0 || !res) {
        snprintf(err, errlen,
                 "socket.group \"%s\": no such group%s (create it, e.g. with systemd-sysusers "
                 "after make install, or choose another)",
                 group, e ? " or the group database is unreadable" : "");
        return -ENOENT;
    }
    *gid = (uint32_t)gr.gr_gid;
    if (!may_chgrp((gid_t)*gid)) {
        snprintf(err, errlen,
                 "socket.group \"%s\": uid %u is not root, not a member of it and lacks "
                 "CAP_CHOWN, so a start cannot give the socket that group",
                 group, (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

/* Bind a new listener on a private name, give it the configured mode and
 * group, rename it onto the public path, and make it the current one. */
static int open_listener(pj_server *s, char *err, size_t errlen)
{
    char tmp[PJ_CFG_PATH + 32], url[PJ_CFG_PATH + 40];
    struct sockaddr_un sun;
    const unsigned seq = s->lst_seq++;
    snprintf(tmp, sizeof tmp, "%s.%ld.%u", s->path, (long)getpid(), seq);
    if (strlen(tmp) >= sizeof sun.sun_path) {
        /* A long path: a short private name in the same directory (the
         * rename must not cross filesystems). Bound to the public path
         * itself, the listener could not be replaced when nng 1.5 stops
         * it (on_watch), and one client hanging up mid-handshake would
         * leave the daemon deaf while it reports ready. */
        const char *slash = strrchr(s->path, '/');
        const int dirlen = slash ? (int)(slash - s->path) + 1 : 0;
        snprintf(tmp, sizeof tmp, "%.*s.pj%ld.%u", dirlen, s->path, (long)getpid(), seq);
    }
    int direct = strlen(tmp) >= sizeof sun.sun_path;
    if (direct && !s->lst_open)
        pj_log_warn("socket %s: no room beside it for a private listener name (%zu bytes at "
                    "most): bound directly, so a listener nng stops cannot be replaced; a "
                    "shorter socket path avoids that",
                    s->path, sizeof sun.sun_path - 1);
    if (direct) {
        if (s->lst_open) {
            snprintf(err, errlen, "socket path too long for a private name next to it");
            return -ENAMETOOLONG;
        }
        /* No room for a private name: bind the public path itself (the
         * listener can then not be replaced). */
        snprintf(tmp, sizeof tmp, "%s", s->path);
    }
    if (!direct)
        unlink(tmp);
    snprintf(url, sizeof url, "ipc://%s", tmp);
    nng_listener l;
    /* Created owner-only, so it is never open to more users than the
     * configured mode allows, not even for a moment. */
    mode_t old = umask(0177);
    int rv = nng_listener_create(&l, s->sock, url);
    if (rv == 0) {
        rv = nng_listener_start(l, 0);
        if (rv != 0)
            nng_listener_close(l);
    }
    umask(old);
    if (rv != 0) {
        snprintf(err, errlen, "listen on %s: %s", url, nng_strerror(rv));
        return rv == NNG_EADDRINUSE ? -EADDRINUSE : -EIO;
    }
    int rc = set_mode_group(s, tmp, err, errlen);
    if (rc == 0 && !direct && rename(tmp, s->path) != 0) {
        snprintf(err, errlen, "rename %s -> %s: %s", tmp, s->path, strerror(errno));
        rc = -errno;
    }
    if (rc != 0) {
        nng_listener_close(l);
        return rc;
    }
    if (s->lst_open) {
        struct retired_lst *r = realloc(s->retired, (s->n_retired + 1) * sizeof *r);
        if (r) {
            s->retired = r;
            s->retired[s->n_retired].l = s->lst;
            s->retired[s->n_retired].since_ns = pj_now_ns();
            s->n_retired++;
        } else {
            nng_listener_close(s->lst); /* closes its connections, but frees it */
        }
    }
    s->lst = l;
    s->lst_open = 1;
    s->lst_replaceable = !direct;
    s->lst_errors = 0; /* a new listener counts from zero */
    return 0;
}

/* The "listener" scope of listener id. (nng 1.5's nng_stat_find_listener
 * returns the first listener's scope whatever the id.) */
static nng_stat *find_listener_scope(nng_stat *st, int id)
{
    for (; st; st = nng_stat_next(st)) {
        if (nng_stat_type(st) == NNG_STAT_SCOPE && strcmp(nng_stat_name(st), "listener") == 0) {
            for (nng_stat *c = nng_stat_child(st); c; c = nng_stat_next(c))
                if (strcmp(nng_stat_name(c), "id") == 0 && nng_stat_value(c) == (uint64_t)id)
                    return st;
        }
        nng_stat *in = find_listener_scope(nng_stat_child(st), id);
        if (in)
            return in;
    }
    return NULL;
}

/* A listener's statistic by name; UINT64_MAX when unavailable. */
static uint64_t listener_stat(nng_stat *all, nng_listener l, const char *name)
{
    nng_stat *ls = find_listener_scope(all, nng_listener_id(l));
    for (nng_stat *c = ls ? nng_stat_child(ls) : NULL; c; c = nng_stat_next(c))
        if (strcmp(nng_stat_name(c), name) == 0)
            return nng_stat_value(c);
    return UINT64_MAX;
}

/* Retired listeners go once their last connection has. Not at once: a
 * client that connected just before the rename may still be joining the
 * old listener, and closing it would reset that client. */
static void sweep_retired(pj_server *s, nng_stat *all)
{
    uint64_t now = pj_now_ns();
    for (uint32_t i = 0; i < s->n_retired;) {
        struct retired_lst *r = &s->retired[i];
        if (now - r->since_ns >= 2ull * WATCH_EVERY_MS * 1000000ull &&
            listener_stat(all, r->l, "pipes") == 0) {
            nng_listener_close(r->l);
            s->retired[i] = s->retired[--s->n_retired];
        } else {
            i++;
        }
    }
}

/* A connection that says nothing holds one of max_connections for as long
 * as its client keeps it open (an old libprojd redialing a restarted
 * daemon did, or any peer that connects and waits): those past
 * limits.hello_timeout_ms are closed. */
static void close_silent_conns(pj_server *s)
{
    uint64_t limit = (uint64_t)s->cfg.limits.hello_timeout_ms * 1000000ull;
    if (limit == 0 || s->conns.count == 0)
        return;
    uint64_t now = pj_now_ns();
    for (int i = 0; i < PJ_CONN_BUCKETS; i++) {
        for (pj_conn *c = s->conns.b[i]; c; c = c->next) {
            if (c->hello || c->hello_closed || now - c->t_accept_ns < limit)
                continue;
            c->hello_closed = 1;
            s->stats.hello_timeouts++;
            pj_log_warn("connection #%" PRIu64 ": pid %d uid %u said no HELLO within %u ms "
                        "(limits.hello_timeout_ms); closing it",
                        c->serial, (int)c->peer.pid, c->uid, s->cfg.limits.hello_timeout_ms);
            nng_pipe p = NNG_PIPE_INITIALIZER;
            p.id = c->pipe_id;
            nng_pipe_close(p);
        }
    }
}

/* A connection that stops reading its replies may also stop sending: the
 * check in on_msg would never run again, and its contexts (up to the cap
 * of all of them) would wait out SEND_TIMEOUT_MS. */
static void close_unread_conns(pj_server *s)
{
    if (s->conns.count == 0)
        return;
    uint64_t now = pj_now_ns();
    for (int i = 0; i < PJ_CONN_BUCKETS; i++)
        for (pj_conn *c = s->conns.b[i]; c; c = c->next)
            if (!c->ctx_closed && conn_not_reading(s, c, now))
                close_not_reading(s, c, now);
}

/* A release that waits this long for the device is said once: the device
 * is held (a lane behind a dead client's wait, daemon/orphans.h) or hung. */
#define SLOW_RELEASE_MS 5000

static void warn_slow_release(pj_server *s)
{
    uint64_t ms = pj_closer_running_ms();
    if (ms < SLOW_RELEASE_MS) {
        s->release_warned = 0;
        return;
    }
    if (s->release_warned)
        return;
    s->release_warned = 1;
    pj_log_warn("a buffer release has waited %.1f s for the device (%u releases queued, %u "
                "clients lost with jobs waiting now): a client wait that never passes (a dead "
                "client), client waits that never all clear at once, or a hung device; the loop "
                "keeps serving, the buffers' memory stays held",
                (double)ms / 1e3, pj_closer_pending(), s->orphans.lost);
}

/* The reaper watch's verdicts: how often its probe pipe is closed, and
 * how long that pipe's retirement may take before nng's reaper counts as
 * blocked (it takes microseconds; 30 s leaves room for a starved machine). */
#define REAPER_PROBE_MS 5000
#define REAPER_STUCK_MS 30000

/* nng will retire no closed connection again (daemon/reapwatch.h): each
 * would hold its place until every client is refused, and the clients
 * still connected gain nothing by waiting for that. A restart (the unit's
 * Restart=on-failure) is the only way back: drain, and exit 1. */
static void check_reaper(pj_server *s, uint64_t now)
{
    if (s->draining) /* said once: the verdict begins the drain */
        return;
    const uint64_t waited = pj_reapwatch_check(s->reapwatch, now);
    if (!waited)
        return;
    pj_log_err("nng has not retired a closed pipe for %.0f s: its reaper thread is blocked (an nng "
               "1.5 defect: a pipe whose transfer was resubmitted after its close waits forever to "
               "stop), so no closed connection would leave the count again and "
               "limits.max_connections (%u) would soon refuse every client; draining and exiting "
               "1 for the service manager to start projd again (%u connections open)",
               (double)waited / 1e9, s->cfg.limits.max_connections, s->conns.count);
    s->exit_code = 1;
    pj_server_set_exit_code(1);
    pj_server_drain_failed(s, "nng's reaper blocked");
}

static void on_watch(uv_timer_t *t)
{
    pj_server *s = t->data;
    const uint64_t now = pj_now_ns();
    check_reaper(s, now);
    pj_orphans_sweep(&s->orphans, s->be, 0);
    pj_bufreg_reap(0); /* buffers released while the device still used them */
    warn_slow_release(s);
    announce_late_conns(s, now);
    close_silent_conns(s);
    close_unread_conns(s);
    tell_expire(s);
    refusals_said(s);
    if (s->stopping || !s->lst_open || !s->lst_replaceable)
        return;
    nng_stat *all;
    if (nng_stats_get(&all) != 0)
        return;
    uint64_t other = listener_stat(all, s->lst, "other");
    uint64_t canceled = listener_stat(all, s->lst, "canceled");
    uint64_t errors = other == UINT64_MAX || canceled == UINT64_MAX ? UINT64_MAX : other + canceled;
    sweep_retired(s, all);
    nng_stats_free(all);
    if (errors == UINT64_MAX)
        return;
    if (errors <= s->lst_errors)
        return;
    char err[256];
    if (open_listener(s, err, sizeof err) != 0) {
        if (s->lst_fail_said_ns && now - s->lst_fail_said_ns < 10000000000ull) {
            s->lst_fail_quiet++;
            return;
        }
        if (s->lst_fail_quiet)
            pj_log_err("listener: cannot replace a listener that may have stopped accepting: %s "
                       "(and %u more times in the last %.0f s)",
                       err, s->lst_fail_quiet, (double)(now - s->lst_fail_said_ns) / 1e9);
        else
            pj_log_err("listener: cannot replace a listener that may have stopped accepting: %s",
                       err);
        s->lst_fail_said_ns = now;
        s->lst_fail_quiet = 0;
        return;
    }
    s->lst_restarts++;
    if (s->lst_fail_said_ns) {
        /* The end of an episode that was said (a warning: it is no error,
         * and shows at the default level as the failures do): its count is
         * said now, not carried into the next episode's first line, hours
         * later. */
        pj_log_warn("listener: replaced after failing (%u more times since the last line)",
                    s->lst_fail_quiet);
        s->lst_fail_said_ns = 0;
        s->lst_fail_quiet = 0;
    }
    pj_log_debug("listener: error counters moved (other %" PRIu64 ", canceled %" PRIu64
                 "); opened a fresh listener in case nng stopped accepting (%u kept for their "
                 "connections)",
                 other, canceled, s->n_retired);
}

static int listen_on(pj_server *s, char *err, size_t errlen)
{
    int rc = mkdir_parents(s->path, pj_sockpath_dir_mode(s->url), err, errlen);
    if (rc == 0 && !pj_socklock_held())
        rc = pj_socklock_take(s->path, err, errlen); /* the directory was missing */
    if (rc != 0)
        return rc;
    int rv = nng_rep0_open(&s->sock);
    if (rv != 0) {
        snprintf(err, errlen, "nng rep socket: %s", nng_strerror(rv));
        return -EIO;
    }
    s->sock_open = 1;
    /* Without the watch projd serves as before, blind to that one defect. */
    char werr[160];
    s->reapwatch = pj_reapwatch_open(REAPER_PROBE_MS, REAPER_STUCK_MS, werr, sizeof werr);
    if (!s->reapwatch)
        pj_log_warn("%s: a blocked nng reaper will not be noticed", werr);
    rv = nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, hard_cap(&s->cfg));
    if (rv == 0)
        rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_ADD_PRE, pipe_cb, s);
    if (rv == 0)
        rv = nng_pipe_notify(s->sock, NNG_PIPE_EV_REM_POST, pipe_cb, s);
    if (rv != 0) {
        snprintf(err, errlen, "nng socket options: %s", nng_strerror(rv));
        return -EIO;
    }
    rc = open_listener(s, err, errlen);
    if (rc != 0)
        return rc;
    s->listening = 1;
    uv_timer_start(&s->watch_timer, on_watch, WATCH_EVERY_MS, WATCH_EVERY_MS);
    rc = add_contexts(s, CTX_GROW, err, errlen);
    if (rc != 0)
        return rc;
    pj_log_info("listening on %s (mode %04o%s%s, backend %s)", s->url, s->cfg.socket.mode,
                s->cfg.socket.group[0] ? ", group " : "", s->cfg.socket.group, s->be->ops->name);
    return 0;
}

/* ---- the systemd watchdog ----------------------------------------------------------
 *
 * With WatchdogSec= in the unit, systemd kills and (Restart=) restarts a
 * daemon that stops sending WATCHDOG=1. The pings come from the loop's
 * timer, so a loop that blocks stops them; and they are withheld while a
 * job has been doing the backend's own work for half the timeout or more,
 * so that a device (or worker) that never finishes one is restarted too,
 * instead of answering every later request with a timeout. A projection
 * takes microseconds to milliseconds: half of any sane WatchdogSec is a
 * stall. Time a job spends waiting for its client's event (WAIT_EVENT) is
 * the client's: it holds that job's lane (the connections on it wait
 * behind it) but restarting projd would drop every client over one slow
 * one, so it is said (a warning, STATS watchdog.client_waits) and counted
 * as a stall only past four times as long, 2 x WatchdogSec: by then the
 * client has most likely died with its event never recorded, and the lane
 * will not come back without a restart. */

static void on_wd(uv_timer_t *t)
{
    pj_server *s = t->data;
    const uint64_t now = pj_now_ns();
    uint64_t waiting = 0;
    const uint64_t own = s->be->ops->oldest_job_ns ? s->be->ops->oldest_job_ns(s->be, &waiting) : 0;
    const uint64_t limit = s->wd_usec * 1000u / 2;
    const uint64_t own_age = own && now > own ? now - own : 0;
    const uint64_t wait_age = waiting && now > waiting ? now - waiting : 0;
    if (wait_age >= limit && !s->wd_client_wait) {
        s->wd_client_wait = 1;
        s->wd_client_waits++;
        pj_log_warn("watchdog: a request has waited %.1f s for its client's event (WAIT_EVENT); "
                    "the connections on its lane wait behind it. Not a stall of projd: the pings "
                    "go on unless the wait passes %.1f s (2 x WatchdogSec)",
                    (double)wait_age / 1e9, 2.0 * (double)s->wd_usec / 1e6);
    } else if (wait_age < limit) {
        s->wd_client_wait = 0;
    }
    /* A client that exited with jobs behind its waits (daemon/orphans.h):
     * no need to wait out 2 x WatchdogSec for what is known now. */
    const int lost = s->orphans.lost > 0;
    const int stalled = own_age >= limit || wait_age >= 4 * limit || lost;
    if (stalled) {
        s->wd_oldest_ns = own_age >= limit ? own : waiting;
        const int was_lost = s->wd_lost;
        s->wd_lost = lost && own_age < limit;
        if (s->wd_withheld && s->wd_lost != was_lost)
            send_status(s); /* the stall's cause changed: say the current one */
        if (!s->wd_withheld) {
            s->wd_withheld = 1;
            s->wd_withheld_since = now;
            s->wd_stalls++;
            if (s->wd_lost)
                pj_log_err("watchdog: pid %d exited while %u jobs of it (connection #%" PRIu64
                           ") waited for its events: its lane is held for good; no longer "
                           "telling systemd that projd is alive, so that it restarts projd",
                           (int)s->orphans.lost_pid, s->orphans.lost_jobs, s->orphans.lost_serial);
            else if (own_age >= limit)
                pj_log_err("watchdog: a job has been on the %s backend for %.1f s (half of "
                           "WatchdogSec=%.1f s): no longer telling systemd that projd is alive, "
                           "so that it restarts projd unless the job finishes first",
                           s->be->ops->name, (double)own_age / 1e9, (double)s->wd_usec / 1e6);
            else
                pj_log_err("watchdog: a request has waited %.1f s for its client's event (2 x "
                           "WatchdogSec=%.1f s): its lane is taken to be lost (a client that died "
                           "before recording it); no longer telling systemd that projd is alive, "
                           "so that it restarts projd unless the wait ends first",
                           (double)wait_age / 1e9, (double)s->wd_usec / 1e6);
            send_status(s);
        }
        return;
    }
    if (s->wd_withheld) {
        s->wd_withheld = 0;
        s->wd_lost = 0;
        pj_log_warn("watchdog: no job is stalled any more; pinging systemd again after %.1f s "
                    "without pings",
                    (double)(now - s->wd_withheld_since) / 1e9);
        update_status(s);
    }
    pj_notify_watchdog();
}

static void wd_start(pj_server *s)
{
    s->wd_usec = pj_notify_watchdog_usec();
    if (!s->wd_usec)
        return;
    /* Four pings per timeout: one lost or late still leaves three. */
    uint64_t every_ms = s->wd_usec / 4000u;
    if (every_ms < 1)
        every_ms = 1;
    pj_log_info("watchdog: WatchdogSec=%.3f s; pinging every %" PRIu64
                " ms while the loop runs and no job is older than %.3f s",
                (double)s->wd_usec / 1e6, every_ms, (double)s->wd_usec / 2e6);
    uv_timer_start(&s->wd_timer, on_wd, 0, every_ms);
}

int pj_server_listen(pj_server *s, char *err, size_t errlen)
{
    int rc = listen_on(s, err, errlen);
    if (rc != 0)
        s->exit_code = 1; /* the drain that follows reports it, and the process exits with it */
    else
        wd_start(s);
    return rc;
}

void pj_server_reload(pj_server *s, const pj_config *next)
{
    s->cfg.limits = next->limits;
    __atomic_store_n(&s->ring_owed_cap, s->cfg.limits.max_inflight_per_conn, __ATOMIC_RELEASE);
    s->cfg.auth = next->auth;
    s->cfg.log = next->log;
    pj_log_set_level(next->log.level);
    if (s->cfg.limits.max_ops_per_request > s->ops_cap) {
        pj_op *ops = realloc(s->ops_scratch, s->cfg.limits.max_ops_per_request * sizeof *ops);
        if (ops) {
            s->ops_scratch = ops;
            s->ops_cap = s->cfg.limits.max_ops_per_request;
        } else {
            s->cfg.limits.max_ops_per_request = s->ops_cap;
            pj_log_warn("reload: out of memory; max_ops_per_request stays %u", s->ops_cap);
        }
    }
    pthread_mutex_lock(&s->mu);
    copy_auth_locked(s);
    pthread_mutex_unlock(&s->mu);
    if (s->sock_open)
        nng_socket_set_size(s->sock, NNG_OPT_RECVMAXSZ, hard_cap(&s->cfg));
    pj_log_info("reloaded: log %s, max_message_bytes %u, max_buffers_per_conn %u, "
                "max_ops_per_request %u, max_connections %u (per uid %u), "
                "max_inflight_per_conn %u, "
                "max_buffer_bytes %" PRIu64 ", max_conn_buffer_bytes %" PRIu64
                ", max_total_buffer_bytes %" PRIu64 ", %u allowed uids, %u allowed gids",
                pj_log_level_name(s->cfg.log.level), s->cfg.limits.max_message_bytes,
                s->cfg.limits.max_buffers_per_conn, s->cfg.limits.max_ops_per_request,
                s->cfg.limits.max_connections, s->cfg.limits.max_connections_per_uid,
                s->cfg.limits.max_inflight_per_conn, s->cfg.limits.max_buffer_bytes,
                s->cfg.limits.max_conn_buffer_bytes, s->cfg.limits.max_total_buffer_bytes,
                s->cfg.auth.n_uids, s->cfg.auth.n_gids);
}

void pj_server_note_reload(pj_server *s, pj_reload_result r, const char *message)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    s->reload_n[r]++;
    s->reload_last = r;
    s->reload_unix = (double)ts.tv_sec + (double)(ts.tv_nsec / 1000000) / 1e3;
    s->reload_mono_ns = pj_now_ns();
    snprintf(s->reload_msg, sizeof s->reload_msg, "%s", message ? message : "");
    /* The reload's outcome goes to STATUS= next (projd_main): a status
     * update still pending from a connection before it would replace it
     * within 250 ms; the next connection to come or go says its own. */
    uv_timer_stop(&s->status_timer);
}

/* The shutdown's bound on releases still waiting for the device, inside
 * the exit guard's EXIT_GUARD_S. */
#define RELEASE_STOP_MS 3000

int pj_server_destroy(pj_server *s)
{
    if (!s)
        return 0;
    pj_backend_set_fatal(s->be, NULL, NULL); /* work answered at launch may still be running */
    if (s->sock_open || s->n_ctx)
        close_socket(s);
    free_conns(s);
    /* Before the backend closes: buffers still retiring are closed now
     * (each buffer_close waits for the device, bounded), and every release
     * must have returned. */
    pj_bufreg_reap(1);
    /* The closer's bound, and what follows, get the exit guard's time of
     * their own (the linger and nng's teardown have used some of it). */
    if (s->stopping)
        pj_server_arm_exit_guard();
    uint32_t left = pj_closer_stop(RELEASE_STOP_MS);
    if (left)
        pj_log_err("shutdown: %u buffer releases still wait for the device after %.1f s (%" PRIu64
                   " clients lost with jobs waiting since the start): the device is left as it is",
                   left, RELEASE_STOP_MS / 1e3, s->orphans.lost_total);
    pj_wbuf_free(&s->wb);
    free(s->ops_scratch);
    free(s->wire_layers);
    pj_stats_free(&s->stats);
    free(s->pipes);
    free(s->pipe_uids);
    free(s->cb_zombie_uids);
    free(s->retired);
    pthread_mutex_destroy(&s->mu);
    free(s);
    return left ? 1 : 0;
}
