/* ringsrv.c — see ringsrv.h. */
#include "daemon/ringsrv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/bufreg.h"
#include "daemon/log.h"
#include "daemon/shmguard.h"
#include "protocol/ring.h"

/* The poller's sleep between looks while it may take nothing (the client is
 * not reading its replies, or the loop has not answered what was taken):
 * from 20 µs, doubling to 5 ms while nothing moves. Rare, so cheap beats
 * prompt. */
#define BACKOFF_MIN_NS 20000
#define BACKOFF_MAX_NS 5000000
/* Longest futex sleep: the poller also notices a truncated object. */
#define SLEEP_SLICE_MS 100

struct pj_ringsrv {
    pj_ring ring;
    pj_ringsrv_opts o;
    char name[PJ_WIRE_SHM_NAME_MAX + 1];
    int guard;
    int wake_fd;
    pthread_t thread;
    int thread_started;
    int stop;    /* set by pj_ringsrv_stop, read by the poller */
    int stopped; /* loop: stop has run */
    uint8_t *buf;
    /* The completion queue's tail as the loop last published it (the
     * poller cannot read the loop's private copy). */
    uint32_t written;
    /* Requests taken and not yet answered or dropped. Both counts are the
     * daemon's own: whatever the client writes, the poller never has more
     * than `slots` requests ahead of the loop. */
    uint32_t owed;
    uint8_t oom_error[PJ_WIRE_HDR_SIZE + 64]; /* a ready ERROR, see reply_oom */
    size_t oom_error_len;
    uint64_t taken, lost, sleeps;
    int broken;
    char why[160];
    pthread_mutex_t mu; /* guards broken and why */
};

/* The poller gives up on the ring. The client is told through the state
 * word (when the memory is still there), so that its pending requests fail
 * at once and later ones go over nng. */
static void mark_broken(pj_ringsrv *r, const char *why)
{
    pthread_mutex_lock(&r->mu);
    int first = !r->broken;
    if (first) {
        /* The client is told before `broken` shows in STATS, so whoever
         * sees the ring broken sees it closed too. */
        if (!pj_shmguard_faulted(r->guard)) {
            pj_ring_set_state(&r->ring, PJ_RING_STATE_CLOSED);
            pj_ring_kick(&r->ring, PJ_RING_CQ);
        }
        r->broken = 1;
        snprintf(r->why, sizeof r->why, "%s", why);
    }
    pthread_mutex_unlock(&r->mu);
    if (first)
        pj_log_warn("connection #%" PRIu64 ": ring %s: %s; the daemon stops reading it (the "
                    "connection goes on over nng)",
                    r->o.serial, r->name, why);
}

static int faulted(pj_ringsrv *r)
{
    if (!pj_shmguard_faulted(r->guard))
        return 0;
    mark_broken(r, "the shared memory object shrank under the daemon" PJ_SHMGUARD_OR_NO_PAGE);
    return 1;
}

/* Whether the poller may take the next request: 1 yes, 0 not now, -1 the
 * ring is corrupt (*head and *written then say how). Completion slots in
 * use = replies written and not yet consumed + replies still owed; the next
 * request needs one more. A client's head past the replies written (or more
 * than the ring behind them) is impossible for an honest client. 32-bit
 * index arithmetic, like the ring's own. */
static int may_take(pj_ringsrv *r, uint32_t *head, uint32_t *written)
{
    /* The head first: the client cannot consume a reply before `written`
     * counts it (pj_ringsrv_reply raises it before the push publishes),
     * so a head read before `written` is never past it. */
    *head = pj_ring_consumed(&r->ring, PJ_RING_CQ);
    /* `owed` before `written`: a reply raises `written` before its push
     * and lowers `owed` after it, so one landing between the two loads is
     * then counted twice (the request waits a moment), never not at all;
     * the other order undercounted it, took a request the completion
     * queue had no slot for, and an honest client lost that reply
     * (reproduced with a delay between the loads). */
    uint32_t owed = __atomic_load_n(&r->owed, __ATOMIC_ACQUIRE);
    *written = __atomic_load_n(&r->written, __ATOMIC_ACQUIRE);
    uint32_t unread = *written - *head;
    if (unread > r->ring.slots)
        return -1;
    if (r->o.owed_cap && owed >= __atomic_load_n(r->o.owed_cap, __ATOMIC_ACQUIRE))
        return 0; /* the connection's in-flight limit: the request waits */
    return unread + owed < r->ring.slots;
}

/* Indices are counts mod 2^32: a difference of more than half the range
 * is one that went backwards. */
static int moved_back(uint32_t diff)
{
    return diff > UINT32_MAX / 2;
}

/* The client's submission tail is `pending` ahead of the daemon's head,
 * more than the ring holds: say which way it went wrong. */
static void sq_corrupt_why(const pj_ringsrv *r, uint32_t pending, char *why, size_t len)
{
    uint32_t head = r->ring.head[PJ_RING_SQ], tail = head + pending;
    if (moved_back(pending))
        snprintf(why, len,
                 "its submission queue is corrupt (the client's tail, %u, is behind the %u "
                 "requests the daemon has taken: it moved back)",
                 tail, head);
    else
        snprintf(why, len,
                 "its submission queue is corrupt (the client's tail, %u, is %u ahead of the "
                 "daemon's head, %u: more than the ring's %u slots)",
                 tail, pending, head, r->ring.slots);
}

static void cq_corrupt_why(const pj_ringsrv *r, uint32_t head, uint32_t written, char *why,
                           size_t len)
{
    if (moved_back(written - head))
        snprintf(why, len,
                 "its completion queue is corrupt (the client's head, %u, is past the %u "
                 "replies written)",
                 head, written);
    else
        snprintf(
            why, len,
            "its completion queue is corrupt (the client's head, %u, moved back: %u behind the "
            "%u replies written, the ring has %u slots)",
            head, written - head, written, r->ring.slots);
}

/* A client index or slot length the poller cannot believe. An object cut
 * to less than its header page keeps that page mapped with its words
 * zeroed, which reads as indices gone wrong: touching the mapping's last
 * byte faults on any object cut short (the guard absorbs it), and the ring
 * is dropped for what really happened. */
static void corrupt(pj_ringsrv *r, const char *why)
{
    (void)*(volatile const uint8_t *)(r->ring.base + r->ring.size - 1);
    if (!faulted(r))
        mark_broken(r, why);
}

/* The client's wake FIFO for the ring named `name`, when it made one the
 * daemon can trust: a FIFO (not a link: O_NOFOLLOW), the peer's, mode
 * 0600 (whoever can write it can only wake the loop, but no one else
 * should). -1 when there is none or it is not acceptable. */
static int open_wake(const char *name, uint32_t peer_uid, uint64_t serial)
{
    char path[PJ_WIRE_SHM_NAME_MAX + 32];
    if (pj_ring_wake_path(name, path, sizeof path) != 0)
        return -1;
    int fd = open(path, O_RDWR | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            pj_log_debug("connection #%" PRIu64 ": wake FIFO %s: %s; the ring works without it",
                         serial, path, strerror(errno));
        return -1;
    }
    struct stat st;
    const char *why = NULL;
    if (fstat(fd, &st) != 0)
        why = "cannot stat it";
    else if (!S_ISFIFO(st.st_mode))
        why = "not a FIFO";
    else if (st.st_uid != peer_uid)
        why = "not owned by the client's uid";
    else if (st.st_mode & 077)
        why = "open to others (mode must be 0600)";
    if (why) {
        pj_log_warn("connection #%" PRIu64 ": wake FIFO %s refused: %s; the ring works without it",
                    serial, path, why);
        close(fd);
        return -1;
    }
    return fd;
}

int pj_ringsrv_wake_fd(const pj_ringsrv *r)
{
    return r->wake_fd;
}

/* At most a pipe's default capacity per call: a client writing its FIFO
 * as fast as the loop reads it would otherwise keep the loop here. The
 * FIFO is watched level-triggered, so what is left wakes the loop again
 * after the other connections had their turn. */
void pj_ringsrv_wake_drain(pj_ringsrv *r)
{
    char buf[4096];
    for (int i = 0; i < 16 && r->wake_fd >= 0; i++)
        if (read(r->wake_fd, buf, sizeof buf) < (ssize_t)sizeof buf)
            break;
}

static void backoff(uint64_t *ns)
{
    struct timespec ts = {0, (long)*ns};
    nanosleep(&ts, NULL);
    *ns = *ns * 2 > BACKOFF_MAX_NS ? BACKOFF_MAX_NS : *ns * 2;
}

static void *poller_main(void *arg)
{
    pj_ringsrv *r = arg;
    size_t cap = pj_ring_msg_max(&r->ring);
    uint64_t wait_ns = BACKOFF_MIN_NS;
    char why[sizeof r->why];
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        int rc = pj_ring_wait(&r->ring, PJ_RING_SQ, r->o.spin_ns, SLEEP_SLICE_MS, &r->stop);
        if (rc == -EINTR)
            break;
        if (faulted(r))
            break;
        if (rc == -ETIMEDOUT) {
            __atomic_fetch_add(&r->sleeps, 1, __ATOMIC_RELAXED);
            /* The slots' end too, not only the header the wait reads: an
             * object cut to its first page read as attached in STATS until
             * the client's next push. Under the guard, as in corrupt(). */
            (void)*(volatile const uint8_t *)(r->ring.base + r->ring.size - 1);
            if (faulted(r))
                break;
            continue;
        }
        uint32_t pending = pj_ring_pending(&r->ring, PJ_RING_SQ);
        if (pending > r->ring.slots) {
            sq_corrupt_why(r, pending, why, sizeof why);
            corrupt(r, why);
            break;
        }
        uint32_t head, written;
        int ok = may_take(r, &head, &written);
        if (ok < 0) {
            cq_corrupt_why(r, head, written, why, sizeof why);
            corrupt(r, why);
            break;
        }
        if (ok == 0) { /* requests waiting, no room for their replies yet */
            backoff(&wait_ns);
            continue;
        }
        wait_ns = BACKOFF_MIN_NS;
        size_t len = 0;
        rc = pj_ring_pop(&r->ring, PJ_RING_SQ, r->buf, cap, &len);
        /* The pop reads the client's tail again: one taken back since the
         * wait saw it leaves nothing to take, not an empty request. */
        if (rc == -EAGAIN)
            continue;
        if (rc != 0) { /* -EPROTO; -EMSGSIZE cannot be: cap is the slot's */
            corrupt(r, "its submission queue is corrupt (an index or a length is impossible)");
            break;
        }
        if (faulted(r))
            break;
        __atomic_fetch_add(&r->owed, 1, __ATOMIC_ACQ_REL);
        __atomic_fetch_add(&r->taken, 1, __ATOMIC_RELAXED);
        /* Out of memory: keep the request and try again, rather than lose
         * it (its client would wait out its timeout for the reply). */
        uint64_t oom_ns = BACKOFF_MIN_NS;
        while (r->o.deliver(r->o.arg, r, r->buf, len) != 0 &&
               !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE))
            backoff(&oom_ns);
    }
    return NULL;
}

uint32_t pj_ringsrv_max_slot_bytes(uint32_t max_message_bytes)
{
    uint64_t b = ((uint64_t)max_message_bytes + PJ_RING_SLOT_HDR + 63) / 64 * 64;
    if (b < PJ_RING_MIN_SLOT)
        b = PJ_RING_MIN_SLOT;
    if (b > PJ_RING_MAX_SLOT)
        b = PJ_RING_MAX_SLOT;
    return (uint32_t)b;
}

int pj_ringsrv_open(const pj_ring_attach *req, const pj_ringsrv_opts *o, pj_ringsrv **out,
                    char *err, size_t errlen)
{
    *out = NULL;
    char why[256];
    if (pj_ring_check_geometry(req->slots, req->slot_bytes, why, sizeof why) != 0) {
        snprintf(err, errlen, "RING_ATTACH %s: %s", req->shm_name, why);
        return PJ_E_PROTO;
    }
    if (req->slots > o->max_slots) {
        snprintf(err, errlen, "RING_ATTACH %s: %u slots, the daemon allows %u (ring.max_slots)",
                 req->shm_name, req->slots, o->max_slots);
        return PJ_E_LIMIT;
    }
    if (o->max_slot_bytes && req->slot_bytes > o->max_slot_bytes) {
        snprintf(err, errlen,
                 "RING_ATTACH %s: slots of %u bytes, the daemon allows %u (a message of "
                 "limits.max_message_bytes and the slot's %u-byte header, rounded up to 64)",
                 req->shm_name, req->slot_bytes, o->max_slot_bytes, PJ_RING_SLOT_HDR);
        return PJ_E_LIMIT;
    }
    pj_ringsrv *r = calloc(1, sizeof *r);
    if (!r || !(r->buf = malloc(req->slot_bytes))) {
        free(r);
        snprintf(err, errlen, "RING_ATTACH: out of memory");
        return PJ_E_INTERNAL;
    }
    r->o = *o;
    r->guard = -1;
    r->wake_fd = -1;
    pthread_mutex_init(&r->mu, NULL);
    snprintf(r->name, sizeof r->name, "%s", req->shm_name);
    size_t size = pj_ring_bytes(req->slots, req->slot_bytes);
    void *map = NULL;
    int st =
        pj_shm_map_checked("RING_ATTACH", req->shm_name, size, o->peer_uid, 1, &map, err, errlen);
    if (st != PJ_OK)
        goto fail;
    r->ring.base = map;
    r->ring.size = size;
    r->guard = pj_shmguard_add(map, size);
    if (r->guard < 0) {
        snprintf(err, errlen, "RING_ATTACH %s: too many shared memory objects in the daemon (%d)",
                 req->shm_name, PJ_SHMGUARD_SLOTS);
        st = PJ_E_LIMIT;
        goto fail;
    }
    if (pj_ring_view(&r->ring, map, size, req->slots, req->slot_bytes, why, sizeof why) != 0 ||
        pj_shmguard_faulted(r->guard)) {
        snprintf(err, errlen, "RING_ATTACH %s: %s", req->shm_name,
                 pj_shmguard_faulted(r->guard) ? "the object shrank while it was checked" : why);
        st = PJ_E_REGISTER;
        goto fail;
    }
    r->written = r->ring.tail[PJ_RING_CQ];
    pj_wbuf w;
    pj_wbuf_init(&w);
    pj_enc_error(&w, 0, PJ_E_INTERNAL, UINT32_MAX, "the daemon is out of memory");
    if (w.oom || w.len > sizeof r->oom_error) {
        pj_wbuf_free(&w);
        snprintf(err, errlen, "RING_ATTACH: out of memory");
        st = PJ_E_INTERNAL;
        goto fail;
    }
    memcpy(r->oom_error, w.data, w.len);
    r->oom_error_len = w.len;
    pj_wbuf_free(&w);
    if (o->watch_wake)
        r->wake_fd = open_wake(req->shm_name, o->peer_uid, o->serial);
    pj_ring_set_state(&r->ring, PJ_RING_STATE_ATTACHED);
    int rc = pthread_create(&r->thread, NULL, poller_main, r);
    if (rc != 0) {
        snprintf(err, errlen, "RING_ATTACH: cannot start a poller thread: %s", strerror(rc));
        st = PJ_E_INTERNAL;
        goto fail;
    }
    r->thread_started = 1;
    *out = r;
    return PJ_OK;
fail:
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    if (r->guard >= 0)
        pj_shmguard_remove(r->guard);
    if (map)
        munmap(map, size);
    pthread_mutex_destroy(&r->mu);
    free(r->buf);
    free(r);
    return st;
}

int pj_ringsrv_reply(pj_ringsrv *r, const void *msg, size_t len)
{
    int rc;
    if (r->stopped || pj_shmguard_faulted(r->guard)) {
        rc = -EPIPE;
    } else {
        /* Counted before the push makes it visible (see may_take), taken
         * back if it is not pushed. */
        uint32_t tail = r->ring.tail[PJ_RING_CQ];
        __atomic_store_n(&r->written, tail + 1, __ATOMIC_SEQ_CST);
        rc = pj_ring_push(&r->ring, PJ_RING_CQ, msg, len);
        if (rc != 0)
            __atomic_store_n(&r->written, tail, __ATOMIC_RELEASE);
        else if (pj_shmguard_faulted(r->guard))
            rc = -EPIPE; /* written into the guard's private page: the client never sees it */
    }
    if (rc == -EMSGSIZE)
        return rc; /* not answered yet: the caller sends something shorter */
    if (rc != 0)
        __atomic_fetch_add(&r->lost, 1, __ATOMIC_RELAXED);
    __atomic_fetch_sub(&r->owed, 1, __ATOMIC_ACQ_REL);
    return rc;
}

int pj_ringsrv_reply_oom(pj_ringsrv *r, uint64_t req_id)
{
    for (int i = 0; i < 8; i++)
        r->oom_error[16 + i] = (uint8_t)(req_id >> (8 * i));
    return pj_ringsrv_reply(r, r->oom_error, r->oom_error_len);
}

void pj_ringsrv_dropped(pj_ringsrv *r)
{
    __atomic_fetch_sub(&r->owed, 1, __ATOMIC_ACQ_REL);
}

/* The poller's wake-up when its futex cannot be woken: a client that
 * truncates its ring takes the futex word's page away, FUTEX_WAKE fails,
 * and the stop (on the loop, at the connection's close) would wait out the
 * poller's 100 ms sleep slice; a client cycling such connections would
 * hold the loop most of the time. A real-time signal, its handler doing
 * nothing and installed without SA_RESTART, ends the wait with EINTR.
 * Nothing else in projd uses it (glibc keeps the two below SIGRTMIN). */
static void on_poke(int sig)
{
    (void)sig;
}

static int g_poke_sig;

static void install_poke(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_poke;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = 0; /* no SA_RESTART: the futex wait must end */
    if (sigaction(SIGRTMIN + 3, &sa, NULL) == 0)
        g_poke_sig = SIGRTMIN + 3;
}

static int poke_signal(void)
{
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, install_poke);
    return g_poke_sig;
}

void pj_ringsrv_stop(pj_ringsrv *r)
{
    if (r->stopped)
        return;
    r->stopped = 1;
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    if (r->thread_started)
        pj_ring_stop_thread_sig(&r->ring, PJ_RING_SQ, r->thread, poke_signal());
    r->thread_started = 0;
    if (!pj_shmguard_faulted(r->guard)) {
        pj_ring_set_state(&r->ring, PJ_RING_STATE_CLOSED);
        pj_ring_kick(&r->ring, PJ_RING_CQ);
    }
}

void pj_ringsrv_free(pj_ringsrv *r)
{
    if (!r)
        return;
    pj_ringsrv_stop(r);
    if (r->wake_fd >= 0)
        close(r->wake_fd);
    pj_shmguard_remove(r->guard);
    munmap(r->ring.base, r->ring.size);
    pthread_mutex_destroy(&r->mu);
    free(r->buf);
    free(r);
}

uint64_t pj_ringsrv_serial(const pj_ringsrv *r)
{
    return r->o.serial;
}

uint32_t pj_ringsrv_pipe(const pj_ringsrv *r)
{
    return r->o.pipe_id;
}

uint32_t pj_ringsrv_slot_bytes(const pj_ringsrv *r)
{
    return r->ring.slot_bytes;
}

void pj_ringsrv_get_stats(pj_ringsrv *r, pj_ringsrv_stats *st)
{
    st->taken = __atomic_load_n(&r->taken, __ATOMIC_RELAXED);
    st->lost = __atomic_load_n(&r->lost, __ATOMIC_RELAXED);
    st->sleeps = __atomic_load_n(&r->sleeps, __ATOMIC_RELAXED);
    pthread_mutex_lock(&r->mu);
    st->broken = r->broken;
    snprintf(st->why, sizeof st->why, "%s", r->why);
    pthread_mutex_unlock(&r->mu);
}
