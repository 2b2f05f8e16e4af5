/* ringsrv.h — the daemon's end of one connection's shared-memory ring.
 *
 * The client creates the ring (protocol/ring.h) and names it in RING_ATTACH;
 * pj_ringsrv_open maps it after the same owner checks as a REGISTER (plus:
 * mode 0600, since whoever can write the ring can send requests as this
 * client) and starts a poller thread. The poller copies each request out of
 * the submission queue and hands it to `deliver`, which queues it for the
 * loop; the loop answers with pj_ringsrv_reply into the completion queue.
 *
 * Flow control: the poller takes a request only while the completion queue
 * has room for every reply still owed, so an honest client's replies always
 * fit, and while fewer than `slots` requests it took are unanswered (a
 * daemon-private count), so the loop never holds more than that of one
 * ring. A client that stops reading its replies stops its own requests; a
 * client that lies about its indices loses replies, nobody else's, and one
 * whose completion head runs past the replies written gets its ring
 * dropped.
 *
 * Threads: open, reply, dropped, stop and free are called from the loop
 * thread; deliver is called on the poller thread.
 */
#ifndef PJ_RINGSRV_H
#define PJ_RINGSRV_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/wire.h"

typedef struct pj_ringsrv pj_ringsrv;

/* One request taken from the ring (msg is the poller's buffer, valid during
 * the call). 0 when it was queued; non-zero (out of memory) makes the
 * poller keep it and call again a little later. */
typedef int (*pj_ringsrv_deliver_fn)(void *arg, pj_ringsrv *r, const uint8_t *msg, size_t len);

typedef struct pj_ringsrv_opts {
    uint32_t peer_uid;
    uint32_t max_slots;
    /* Largest slot_bytes taken: a message the daemon accepts and the slot's
     * header, rounded to 64 (pj_ringsrv_max_slot_bytes). Larger slots would
     * only carry messages it refuses, after copying each twice. */
    uint32_t max_slot_bytes;
    uint64_t spin_ns;
    uint64_t serial;  /* the connection's, for logs and for matching deliveries */
    uint32_t pipe_id; /* the connection's nng pipe */
    pj_ringsrv_deliver_fn deliver;
    void *arg;
    int watch_wake; /* open the ring's wake FIFO, if the client made one */
    /* The most requests the poller has taken and not seen answered: the
     * connection's limits.max_inflight_per_conn, read at every take (a
     * reload moves it; the loop stores it atomically). Past it the
     * requests wait in the ring, as a ring's client is promised, rather
     * than be taken only to be refused E_LIMIT. NULL: the ring's slots. */
    const uint32_t *owed_cap;
} pj_ringsrv_opts;

/* The slot size that holds a message of max_message_bytes, as libprojd
 * sizes its rings (at least PJ_RING_MIN_SLOT, at most PJ_RING_MAX_SLOT). */
uint32_t pj_ringsrv_max_slot_bytes(uint32_t max_message_bytes);

/* Map and check the ring, start its poller. PJ_OK, or PJ_E_REGISTER (the
 * object: missing, not the peer's, not private, too small, bad header),
 * PJ_E_LIMIT (more slots than max_slots, larger slots than max_slot_bytes,
 * or no guard slot left),
 * PJ_E_PROTO (bad geometry), PJ_E_INTERNAL; err says which and why. */
int pj_ringsrv_open(const pj_ring_attach *req, const pj_ringsrv_opts *o, pj_ringsrv **out,
                    char *err, size_t errlen);

/* Put a reply on the completion queue. 0, or -EAGAIN (the client did not
 * leave room: its indices lie), -EPIPE (the ring is closed or its memory
 * was truncated under us): that reply is lost. -EMSGSIZE: larger than a
 * slot, nothing happened; send a shorter reply (an ERROR always fits).
 * Every request that was delivered gets exactly one successful or lost
 * pj_ringsrv_reply, or one pj_ringsrv_dropped. */
int pj_ringsrv_reply(pj_ringsrv *r, const void *msg, size_t len);

/* Answer a delivered request with an ERROR E_INTERNAL "out of memory"
 * built at open (for when the real reply cannot be built). As
 * pj_ringsrv_reply. */
int pj_ringsrv_reply_oom(pj_ringsrv *r, uint64_t req_id);

/* A delivered request that will get no reply (its connection is gone). */
void pj_ringsrv_dropped(pj_ringsrv *r);

/* Stop the poller (joins it), mark the ring closed and wake a client that
 * sleeps on it. Idempotent. */
void pj_ringsrv_stop(pj_ringsrv *r);

/* Stop, then unmap. r may be NULL. */
void pj_ringsrv_free(pj_ringsrv *r);

/* The ring's wake FIFO (protocol/ring.h, pj_ring_wake_path), opened for
 * the loop to watch, or -1: not asked for, none made, or not acceptable
 * (not a FIFO, not the peer's, not mode 0600; logged). Owned by r. */
int pj_ringsrv_wake_fd(const pj_ringsrv *r);

/* Reads what the wake FIFO holds, up to 64 KiB a call (the loop, when it
 * is readable; the FIFO is watched level-triggered). */
void pj_ringsrv_wake_drain(pj_ringsrv *r);

uint64_t pj_ringsrv_serial(const pj_ringsrv *r);
uint32_t pj_ringsrv_pipe(const pj_ringsrv *r);
uint32_t pj_ringsrv_slot_bytes(const pj_ringsrv *r);

/* Counters since open: requests taken, replies lost to a lying client,
 * times the poller went to sleep. `broken` is set when the poller gave up
 * on the ring (corrupt indices, truncated object) and says why. */
typedef struct pj_ringsrv_stats {
    uint64_t taken, lost, sleeps;
    int broken;
    char why[160];
} pj_ringsrv_stats;
void pj_ringsrv_get_stats(pj_ringsrv *r, pj_ringsrv_stats *st);

#endif
