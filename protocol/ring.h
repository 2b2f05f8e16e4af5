/* ring.h — the shared-memory ring of the fast path.
 *
 * One POSIX shared-memory object per connection, created by the client and
 * attached by the daemon (RING_ATTACH over nng). It holds two single-producer
 * single-consumer queues of whole protocol messages: the submission queue
 * (SQ, client -> daemon requests) and the completion queue (CQ, daemon ->
 * client replies). A message on the ring is byte for byte the message nng
 * would carry, so both ends reuse protocol/wire's codec and every check.
 *
 * Layout (protocol/PROTOCOL.md, "The ring", is the normative text):
 *
 *   0      header page (PJ_RING_HDR_BYTES): geometry, then each index and
 *          doze word on its own 64-byte line
 *   4096   SQ: slots x slot_bytes
 *   ...    CQ: slots x slot_bytes
 *
 * A slot is a u32 message length, 4 reserved bytes, then the message.
 *
 * Trust: each side keeps its own copy of the geometry and of the indices it
 * writes, and reads only the peer's index from shared memory. A peer that
 * scribbles over the segment can make the queues report garbage (pop returns
 * -EPROTO) but can never make this side read or write outside the mapping.
 *
 * Waiting: a consumer spins for a while, then sets its doze word and sleeps
 * on the producer's index with a (shared, not private) futex; a producer
 * that sees the doze word set after publishing wakes it. Both sides put a
 * full fence between their store and their load, so a wake-up is never lost.
 */
#ifndef PJ_RING_H
#define PJ_RING_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#define PJ_RING_MAGIC         0x474e5250u /* "PRNG" as a little-endian u32 */
#define PJ_RING_VERSION       1
#define PJ_RING_HDR_BYTES     4096u
#define PJ_RING_SLOT_HDR      8u
#define PJ_RING_MIN_SLOTS     2u
#define PJ_RING_MAX_SLOTS     4096u
#define PJ_RING_MIN_SLOT      2048u /* an ERROR reply (24 + 10 + 1024 bytes) always fits */
#define PJ_RING_MAX_SLOT      (1u << 20)
#define PJ_RING_DEFAULT_SLOTS 64u
#define PJ_RING_DEFAULT_SLOT  4096u

enum { PJ_RING_SQ = 0, PJ_RING_CQ = 1 };

/* Values of the header's `state` word (written by the daemon). */
enum { PJ_RING_STATE_NEW = 0, PJ_RING_STATE_ATTACHED = 1, PJ_RING_STATE_CLOSED = 2 };

typedef struct pj_ring {
    uint8_t *base;
    size_t size;
    uint32_t slots, slot_bytes; /* this side's copy, checked at view time */
    uint32_t tail[2];           /* our next index, for the queue we produce */
    uint32_t head[2];           /* our next index, for the queue we consume */
} pj_ring;

/* Bytes of a ring of this geometry (0 when it is out of range). */
size_t pj_ring_bytes(uint32_t slots, uint32_t slot_bytes);

/* PJ_RING_MIN_SLOTS <= slots <= PJ_RING_MAX_SLOTS, a power of two;
 * PJ_RING_MIN_SLOT <= slot_bytes <= PJ_RING_MAX_SLOT, a multiple of 64.
 * 0, or -EINVAL with err saying which rule failed. */
int pj_ring_check_geometry(uint32_t slots, uint32_t slot_bytes, char *err, size_t errlen);

/* Write a fresh header (the creator, before handing the name out). */
void pj_ring_format(void *base, uint32_t slots, uint32_t slot_bytes);

/* A view of a mapped ring of `size` bytes whose creator claimed this
 * geometry: checks the geometry, the size and the header's magic, version
 * and geometry. Indices start where the header says (both 0 on a fresh
 * ring). 0 or -EINVAL / -EPROTO with err. */
int pj_ring_view(pj_ring *r, void *base, size_t size, uint32_t slots, uint32_t slot_bytes,
                 char *err, size_t errlen);

/* One pause of a spin-wait loop (the CPU's spin hint). */
static inline void pj_cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* Largest message a slot carries. */
static inline size_t pj_ring_msg_max(const pj_ring *r)
{
    return r->slot_bytes - PJ_RING_SLOT_HDR;
}

/* Producer side of queue q. 0, -EAGAIN (full), -EMSGSIZE (len too large).
 * Wakes a dozing consumer. */
int pj_ring_push(pj_ring *r, int q, const void *msg, size_t len);
/* The optional wake FIFO of a ring (PROTOCOL.md, "The ring"): a FIFO the
 * client makes beside the ring's shm object, "/dev/shm<shm_name>.wake",
 * mode 0600, that it writes a byte to whenever a push found the daemon's
 * poller asleep; the daemon's loop watches it and so wakes at the same time
 * as the poller instead of after it. 0, -EINVAL (a name that is not
 * "/" and one path component), -ENAMETOOLONG. */
int pj_ring_wake_path(const char *shm_name, char *out, size_t cap);

/* pj_ring_push, and *woke = 1 when the consumer was asleep (dozing) and
 * this push woke it, else 0. */
int pj_ring_push_woke(pj_ring *r, int q, const void *msg, size_t len, int *woke);

/* Consumer side of queue q: copies the next message into out (cap bytes),
 * *len its length. 0, -EAGAIN (empty), -EPROTO (the peer's index or the
 * slot's length is impossible: the ring is corrupt and should be dropped),
 * -EMSGSIZE (longer than cap; the message is consumed). */
int pj_ring_pop(pj_ring *r, int q, void *out, size_t cap, size_t *len);

/* Consumer side of queue q, without taking the message: copies its first
 * min(length, cap) bytes into out, *len its whole length. 0, -EAGAIN
 * (empty) or -EPROTO, as pj_ring_pop. Lets a consumer look at a reply's
 * header before deciding whether it is the one to take it. */
int pj_ring_peek(const pj_ring *r, int q, void *out, size_t cap, size_t *len);
/* Messages queue q holds as the consumer sees them (0 when none; values
 * above slots mean a corrupt peer index). */
uint32_t pj_ring_pending(const pj_ring *r, int q);

/* The consumer's index of queue q as its producer reads it (messages the
 * consumer has taken since the ring was formatted, mod 2^32). */
uint32_t pj_ring_consumed(const pj_ring *r, int q);

/* Free slots of queue q as its producer sees them. */
uint32_t pj_ring_room(const pj_ring *r, int q);

/* Wait until queue q has a message: spin for spin_ns, then sleep on the
 * futex for at most timeout_ms (< 0: no limit). Returns 0 when a message is
 * there, -ETIMEDOUT, -EINTR when `stop` (may be NULL) became non-zero
 * (the stopper calls pj_ring_kick after setting it), or -EAGAIN when woken
 * with no message there (a pj_ring_kick: the other side closed the ring;
 * another consumer took the message; or a push's wake that arrived after
 * this consumer had taken that message and gone back to sleep): look at
 * the ring, wait again. */
int pj_ring_wait(pj_ring *r, int q, uint64_t spin_ns, int timeout_ms, const int *stop);

/* Wake whoever sleeps in pj_ring_wait on queue q (for shutdown). */
void pj_ring_kick(pj_ring *r, int q);

/* Is a waiter of queue q (pj_ring_wait) about to sleep or asleep? */
int pj_ring_dozing(const pj_ring *r, int q);

/* Join thread th, which waits on queue q and whose stop flag is already
 * set: kicks the queue every millisecond until th has exited. (One kick is
 * not enough: it can land after the thread's last look at the flag and
 * before its futex wait, and the wait would then sleep out its slice.) */
void pj_ring_stop_thread(pj_ring *r, int q, pthread_t th);

/* The same, and each millisecond also signal sig to th (0: none). A kick
 * cannot reach a thread asleep on a queue whose memory the other side
 * truncated (FUTEX_WAKE then fails with EFAULT); a signal whose handler is
 * installed without SA_RESTART ends its wait with EINTR instead of at the
 * end of its sleep slice. */
void pj_ring_stop_thread_sig(pj_ring *r, int q, pthread_t th, int sig);

/* The header's state word (PJ_RING_STATE_*), read or set. */
uint32_t pj_ring_state(const pj_ring *r);
void pj_ring_set_state(pj_ring *r, uint32_t state);

#endif
