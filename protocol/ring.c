/* ring.c — see ring.h. */
#include "protocol/ring.h"

#include <errno.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

/* Header offsets. Each word a side writes has its own cache line, so the
 * producer's stores do not bounce the line the consumer spins on. */
#define OFF_MAGIC   0u
#define OFF_VERSION 4u
#define OFF_SLOTS   8u
#define OFF_SLOTB   12u
#define OFF_STATE   64u
#define OFF_QUEUE0  128u /* SQ: tail 128, head 192, doze 256; CQ: 320, 384, 448 */
#define QUEUE_WORDS 192u

static uint32_t *word(const pj_ring *r, uint32_t off)
{
    return (uint32_t *)(void *)(r->base + off);
}

static uint32_t *tail_w(const pj_ring *r, int q)
{
    return word(r, OFF_QUEUE0 + (uint32_t)q * QUEUE_WORDS);
}

static uint32_t *head_w(const pj_ring *r, int q)
{
    return word(r, OFF_QUEUE0 + (uint32_t)q * QUEUE_WORDS + 64u);
}

static uint32_t *doze_w(const pj_ring *r, int q)
{
    return word(r, OFF_QUEUE0 + (uint32_t)q * QUEUE_WORDS + 128u);
}

static uint8_t *slot(const pj_ring *r, int q, uint32_t idx)
{
    size_t qoff = (size_t)q * r->slots * r->slot_bytes;
    return r->base + PJ_RING_HDR_BYTES + qoff + (size_t)(idx & (r->slots - 1)) * r->slot_bytes;
}

static uint32_t load_acq(const uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_ACQUIRE);
}

static void store_rel(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELEASE);
}

static long futex(uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    /* Not FUTEX_PRIVATE_FLAG: the two sides are different processes. */
    return syscall(SYS_futex, addr, op, val, ts, NULL, 0);
}

size_t pj_ring_bytes(uint32_t slots, uint32_t slot_bytes)
{
    if (pj_ring_check_geometry(slots, slot_bytes, NULL, 0) != 0)
        return 0;
    return PJ_RING_HDR_BYTES + 2 * (size_t)slots * slot_bytes;
}

int pj_ring_check_geometry(uint32_t slots, uint32_t slot_bytes, char *err, size_t errlen)
{
    const char *why = NULL;
    if (slots < PJ_RING_MIN_SLOTS || slots > PJ_RING_MAX_SLOTS || (slots & (slots - 1)) != 0)
        why = "slots must be a power of two from 2 to 4096";
    else if (slot_bytes < PJ_RING_MIN_SLOT || slot_bytes > PJ_RING_MAX_SLOT || slot_bytes % 64)
        why = "slot_bytes must be a multiple of 64 from 2048 to 1048576";
    if (!why)
        return 0;
    if (err)
        snprintf(err, errlen, "ring of %u slots of %u bytes: %s", slots, slot_bytes, why);
    return -EINVAL;
}

void pj_ring_format(void *base, uint32_t slots, uint32_t slot_bytes)
{
    memset(base, 0, PJ_RING_HDR_BYTES);
    pj_ring r = {.base = base};
    *word(&r, OFF_MAGIC) = PJ_RING_MAGIC;
    *word(&r, OFF_VERSION) = PJ_RING_VERSION;
    *word(&r, OFF_SLOTS) = slots;
    *word(&r, OFF_SLOTB) = slot_bytes;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

int pj_ring_view(pj_ring *r, void *base, size_t size, uint32_t slots, uint32_t slot_bytes,
                 char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    int rc = pj_ring_check_geometry(slots, slot_bytes, err, errlen);
    if (rc)
        return rc;
    size_t want = pj_ring_bytes(slots, slot_bytes);
    if (size < want) {
        snprintf(err, errlen, "ring of %u slots of %u bytes needs %zu bytes, the object has %zu",
                 slots, slot_bytes, want, size);
        return -EINVAL;
    }
    pj_ring v = {.base = base, .size = size, .slots = slots, .slot_bytes = slot_bytes};
    uint32_t magic = load_acq(word(&v, OFF_MAGIC));
    uint32_t version = load_acq(word(&v, OFF_VERSION));
    uint32_t hs = load_acq(word(&v, OFF_SLOTS)), hb = load_acq(word(&v, OFF_SLOTB));
    if (magic != PJ_RING_MAGIC) {
        snprintf(err, errlen, "ring header: magic 0x%08x, expected 0x%08x", magic, PJ_RING_MAGIC);
        return -EPROTO;
    }
    if (version != PJ_RING_VERSION) {
        snprintf(err, errlen, "ring header: version %u, expected %d", version, PJ_RING_VERSION);
        return -EPROTO;
    }
    if (hs != slots || hb != slot_bytes) {
        snprintf(err, errlen, "ring header says %u slots of %u bytes, the request %u of %u", hs, hb,
                 slots, slot_bytes);
        return -EPROTO;
    }
    for (int q = 0; q < 2; q++) {
        v.tail[q] = load_acq(tail_w(&v, q));
        v.head[q] = load_acq(head_w(&v, q));
    }
    *r = v;
    return 0;
}

uint32_t pj_ring_pending(const pj_ring *r, int q)
{
    /* head is read unlocked by a client's reaper while a waiting thread
     * pops under the client's lock: an atomic load, never a torn one. */
    return load_acq(tail_w(r, q)) - __atomic_load_n(&r->head[q], __ATOMIC_RELAXED);
}

uint32_t pj_ring_consumed(const pj_ring *r, int q)
{
    return load_acq(head_w(r, q));
}

uint32_t pj_ring_room(const pj_ring *r, int q)
{
    uint32_t used = r->tail[q] - load_acq(head_w(r, q));
    return used >= r->slots ? 0 : r->slots - used;
}

int pj_ring_push(pj_ring *r, int q, const void *msg, size_t len)
{
    return pj_ring_push_woke(r, q, msg, len, NULL);
}

int pj_ring_push_woke(pj_ring *r, int q, const void *msg, size_t len, int *woke)
{
    if (woke)
        *woke = 0;
    if (len > pj_ring_msg_max(r))
        return -EMSGSIZE;
    if (pj_ring_room(r, q) == 0)
        return -EAGAIN;
    uint8_t *s = slot(r, q, r->tail[q]);
    uint32_t l32 = (uint32_t)len;
    memcpy(s, &l32, 4);
    memset(s + 4, 0, 4);
    memcpy(s + PJ_RING_SLOT_HDR, msg, len);
    r->tail[q]++;
    store_rel(tail_w(r, q), r->tail[q]);
    /* Pairs with the consumer's fence between setting doze and re-reading
     * the tail: one of the two sees the other's store. */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(doze_w(r, q), __ATOMIC_RELAXED)) {
        futex(tail_w(r, q), FUTEX_WAKE, 1, NULL);
        if (woke)
            *woke = 1;
    }
    return 0;
}

int pj_ring_wake_path(const char *shm_name, char *out, size_t cap)
{
    if (shm_name[0] != '/' || !shm_name[1] || strchr(shm_name + 1, '/'))
        return -EINVAL;
    int n = snprintf(out, cap, "/dev/shm%s.wake", shm_name);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* The next message's slot and length, or -EAGAIN / -EPROTO. */
static int next_msg(const pj_ring *r, int q, const uint8_t **msg, uint32_t *len)
{
    uint32_t avail = pj_ring_pending(r, q);
    if (avail == 0)
        return -EAGAIN;
    if (avail > r->slots)
        return -EPROTO;
    const uint8_t *s = slot(r, q, r->head[q]);
    /* Read the length once: the peer can rewrite the slot while we copy,
     * which garbles the message (the decoder refuses it) but never the
     * bounds. */
    uint32_t l32 = __atomic_load_n((const uint32_t *)(const void *)s, __ATOMIC_RELAXED);
    if (l32 > pj_ring_msg_max(r))
        return -EPROTO;
    *msg = s + PJ_RING_SLOT_HDR;
    *len = l32;
    return 0;
}

int pj_ring_pop(pj_ring *r, int q, void *out, size_t cap, size_t *len)
{
    const uint8_t *msg;
    uint32_t l32;
    int rc = next_msg(r, q, &msg, &l32);
    if (rc != 0)
        return rc;
    if (l32 > cap)
        rc = -EMSGSIZE;
    else
        memcpy(out, msg, l32);
    *len = l32;
    uint32_t h = r->head[q] + 1;
    __atomic_store_n(&r->head[q], h, __ATOMIC_RELAXED);
    store_rel(head_w(r, q), h);
    return rc;
}

int pj_ring_peek(const pj_ring *r, int q, void *out, size_t cap, size_t *len)
{
    const uint8_t *msg;
    uint32_t l32;
    int rc = next_msg(r, q, &msg, &l32);
    if (rc != 0)
        return rc;
    memcpy(out, msg, l32 < cap ? l32 : cap);
    *len = l32;
    return 0;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int stopped(const int *stop)
{
    return stop && __atomic_load_n(stop, __ATOMIC_ACQUIRE);
}

int pj_ring_wait(pj_ring *r, int q, uint64_t spin_ns, int timeout_ms, const int *stop)
{
    uint64_t t0 = mono_ns();
    uint64_t deadline = timeout_ms < 0 ? UINT64_MAX : t0 + (uint64_t)timeout_ms * 1000000ull;
    for (unsigned i = 0;; i++) {
        if (pj_ring_pending(r, q))
            return 0;
        if (stopped(stop))
            return -EINTR;
        /* the spin ends at the wait's deadline too: a spin longer than
         * the timeout (ring.spin_us is up to 1 s) must not overrun it */
        if ((i & 63) == 63) {
            const uint64_t now = mono_ns();
            if (now - t0 >= spin_ns || now >= deadline)
                break;
        }
        pj_cpu_relax();
    }
    uint32_t *doze = doze_w(r, q);
    for (;;) {
        uint32_t seen = load_acq(tail_w(r, q));
        __atomic_store_n(doze, 1, __ATOMIC_RELAXED);
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        if (load_acq(tail_w(r, q)) != seen ||
            seen != __atomic_load_n(&r->head[q], __ATOMIC_RELAXED) || stopped(stop)) {
            __atomic_store_n(doze, 0, __ATOMIC_RELAXED);
            if (pj_ring_pending(r, q))
                return 0;
            if (stopped(stop))
                return -EINTR;
            continue;
        }
        uint64_t now = mono_ns();
        if (now >= deadline) {
            __atomic_store_n(doze, 0, __ATOMIC_RELAXED);
            return -ETIMEDOUT;
        }
        /* Sleep at most 100 ms at a time: a producer that died between its
         * store and its wake must not leave us asleep until the deadline. */
        uint64_t left = deadline - now;
        if (left > 100000000ull)
            left = 100000000ull;
        struct timespec ts = {.tv_sec = (time_t)(left / 1000000000ull),
                              .tv_nsec = (long)(left % 1000000000ull)};
        long woke = futex(tail_w(r, q), FUTEX_WAIT, seen, &ts);
        __atomic_store_n(doze, 0, __ATOMIC_RELAXED);
        if (pj_ring_pending(r, q))
            return 0;
        if (stopped(stop))
            return -EINTR;
        /* Woken with nothing to take: a kick that means the ring's state
         * changed (the daemon closed it), which the caller must look at
         * now, not after the rest of its wait. */
        if (woke == 0)
            return -EAGAIN;
    }
}

int pj_ring_dozing(const pj_ring *r, int q)
{
    return __atomic_load_n(doze_w(r, q), __ATOMIC_ACQUIRE) != 0;
}

void pj_ring_kick(pj_ring *r, int q)
{
    futex(tail_w(r, q), FUTEX_WAKE, 1 << 30, NULL);
}

void pj_ring_stop_thread(pj_ring *r, int q, pthread_t th)
{
    pj_ring_stop_thread_sig(r, q, th, 0);
}

void pj_ring_stop_thread_sig(pj_ring *r, int q, pthread_t th, int sig)
{
    for (;;) {
        pj_ring_kick(r, q);
        if (sig)
            pthread_kill(th, sig);
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 1000000;
        if (ts.tv_nsec >= 1000000000) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000;
        }
        int rc = pthread_timedjoin_np(th, NULL, &ts);
        if (rc != ETIMEDOUT)
            return;
    }
}

uint32_t pj_ring_state(const pj_ring *r)
{
    return load_acq(word(r, OFF_STATE));
}

void pj_ring_set_state(pj_ring *r, uint32_t state)
{
    store_rel(word(r, OFF_STATE), state);
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}
