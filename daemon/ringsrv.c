/* ringsrv.c — see ringsrv.h. */
#include "daemon/ringsrv.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "daemon/bufreg.h"
#include "daemon/log.h"
#include "daemon/shmguard.h"
#include "protocol/ring.h"

/* The poller's sleep between looks while the completion queue has no room
 * (the client is not reading its replies): rare, so cheap beats prompt. */
#define NO_ROOM_SLEEP_NS 20000
/* Longest futex sleep: the poller also notices a truncated object. */
#define SLEEP_SLICE_MS 100

struct pj_ringsrv {
    pj_ring ring;
    pj_ringsrv_opts o;
    char name[PJ_WIRE_SHM_NAME_MAX + 1];
    int guard;
    pthread_t thread;
    int thread_started;
    int stop;    /* set by pj_ringsrv_stop, read by the poller */
    int stopped; /* loop: stop has run */
    uint8_t *buf;
    /* The completion queue's tail as it will be once every request taken
     * is answered: the poller adds one per request, the loop takes one
     * back for a request that gets no reply. */
    uint32_t promised;
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
        r->broken = 1;
        snprintf(r->why, sizeof r->why, "%s", why);
    }
    pthread_mutex_unlock(&r->mu);
    if (!first)
        return;
    pj_log_warn("connection #%" PRIu64 ": ring %s: %s; the daemon stops reading it (the "
                "connection goes on over nng)",
                r->o.serial, r->name, why);
    if (!pj_shmguard_faulted(r->guard)) {
        pj_ring_set_state(&r->ring, PJ_RING_STATE_CLOSED);
        pj_ring_kick(&r->ring, PJ_RING_CQ);
    }
}

static int faulted(pj_ringsrv *r)
{
    if (!pj_shmguard_faulted(r->guard))
        return 0;
    mark_broken(r, "the shared memory object shrank under the daemon");
    return 1;
}

/* Completion slots taken or promised: every reply pushed and every reply
 * still owed, less what the client consumed (32-bit index arithmetic, like
 * the ring's own). A client whose head runs away reads as a full queue. */
static uint32_t cq_in_use(const pj_ringsrv *r)
{
    return __atomic_load_n(&r->promised, __ATOMIC_ACQUIRE) - pj_ring_consumed(&r->ring, PJ_RING_CQ);
}

static void *poller_main(void *arg)
{
    pj_ringsrv *r = arg;
    size_t cap = pj_ring_msg_max(&r->ring);
    while (!__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
        int rc = pj_ring_wait(&r->ring, PJ_RING_SQ, r->o.spin_ns, SLEEP_SLICE_MS, &r->stop);
        if (rc == -EINTR)
            break;
        if (faulted(r))
            break;
        if (rc == -ETIMEDOUT) {
            __atomic_fetch_add(&r->sleeps, 1, __ATOMIC_RELAXED);
            continue;
        }
        while (pj_ring_pending(&r->ring, PJ_RING_SQ) != 0 &&
               !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE)) {
            if (cq_in_use(r) >= r->ring.slots) { /* also a head that ran away */
                struct timespec ts = {0, NO_ROOM_SLEEP_NS};
                nanosleep(&ts, NULL);
                break;
            }
            size_t len = 0;
            rc = pj_ring_pop(&r->ring, PJ_RING_SQ, r->buf, cap, &len);
            if (rc == -EPROTO) {
                mark_broken(r, "its submission queue is corrupt (an index or a length is "
                               "impossible)");
                goto out;
            }
            if (faulted(r))
                goto out;
            __atomic_fetch_add(&r->promised, 1, __ATOMIC_ACQ_REL);
            __atomic_fetch_add(&r->taken, 1, __ATOMIC_RELAXED);
            r->o.deliver(r->o.arg, r, r->buf, len);
        }
    }
out:
    return NULL;
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
    pj_ringsrv *r = calloc(1, sizeof *r);
    if (!r || !(r->buf = malloc(req->slot_bytes))) {
        free(r);
        snprintf(err, errlen, "RING_ATTACH: out of memory");
        return PJ_E_INTERNAL;
    }
    r->o = *o;
    r->guard = -1;
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
    r->promised = r->ring.tail[PJ_RING_CQ];
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
        rc = pj_ring_push(&r->ring, PJ_RING_CQ, msg, len);
    }
    if (rc != 0 && rc != -EMSGSIZE) {
        __atomic_fetch_sub(&r->promised, 1, __ATOMIC_ACQ_REL);
        __atomic_fetch_add(&r->lost, 1, __ATOMIC_RELAXED);
    }
    return rc;
}

void pj_ringsrv_dropped(pj_ringsrv *r)
{
    __atomic_fetch_sub(&r->promised, 1, __ATOMIC_ACQ_REL);
}

void pj_ringsrv_stop(pj_ringsrv *r)
{
    if (r->stopped)
        return;
    r->stopped = 1;
    __atomic_store_n(&r->stop, 1, __ATOMIC_RELEASE);
    pj_ring_kick(&r->ring, PJ_RING_SQ);
    if (r->thread_started)
        pthread_join(r->thread, NULL);
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

uint32_t pj_ringsrv_slots(const pj_ringsrv *r)
{
    return r->ring.slots;
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
