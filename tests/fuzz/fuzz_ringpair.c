/* fuzz_ringpair.c — libFuzzer harness for the shared-memory ring with two
 * honest ends (protocol/ring.h): a client view and a daemon view of one
 * formatted segment, driven by the input as a script of pushes, pops and
 * peeks on both queues, against a model FIFO of what each queue must hold.
 *
 * fuzz_ring feeds the consumer a hostile peer and asks only that nothing is
 * touched outside the mapping; this one asks that the queues are right:
 * every message comes out once, in order, byte for byte; a push is refused
 * (-EAGAIN) exactly when the queue holds `slots` messages and (-EMSGSIZE)
 * exactly when the message is longer than a slot's payload; a pop says empty
 * exactly when nothing was pushed, reports -EMSGSIZE (and consumes) exactly
 * when the caller's buffer is too short; pending, room and consumed agree
 * with the model; a peek takes nothing. The indices may start just short of
 * 2^32, as on a long-lived connection, so the wrap is exercised.
 *
 * Script: byte 0 picks the geometry, bytes 1..4 the start index; then each
 * command is one byte (low 3 bits: what; the rest: a cap seed); a push
 * takes one more byte for the length, then up to 16 message bytes.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ring.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define MAX_SLOTS 8u

/* The model: what each queue must hold, oldest first. */
typedef struct model_q {
    size_t len[MAX_SLOTS];
    uint8_t *msg[MAX_SLOTS];
    uint32_t first, count;
    uint32_t consumed; /* messages taken since the start index */
} model_q;

static void check(int ok)
{
    if (!ok)
        abort();
}

/* A length from a seed: often small, sometimes at or around the largest a
 * slot carries (the edge of -EMSGSIZE). */
static size_t pick_len(uint8_t seed, size_t msg_max)
{
    switch (seed & 3) {
    case 0:
        return seed >> 2;
    case 1:
        return msg_max - (seed >> 2) % 4;
    case 2:
        return msg_max + 1 + (seed >> 2) % 4;
    default:
        return (size_t)(seed >> 2) * 37 % (msg_max + 1);
    }
}

/* Pushes onto queue q from `prod` and checks the result against the model. */
static void push(pj_ring *prod, model_q *m, int q, const uint8_t *bytes, size_t len)
{
    size_t msg_max = pj_ring_msg_max(prod);
    uint32_t room = pj_ring_room(prod, q);
    check(room == prod->slots - m->count);
    int rc = pj_ring_push(prod, q, bytes, len);
    if (len > msg_max) {
        check(rc == -EMSGSIZE);
        return;
    }
    if (m->count == prod->slots) {
        check(rc == -EAGAIN);
        return;
    }
    check(rc == 0);
    uint32_t at = (m->first + m->count) % prod->slots;
    free(m->msg[at]);
    m->msg[at] = malloc(len ? len : 1);
    if (m->msg[at] == NULL)
        abort();
    memcpy(m->msg[at], bytes, len);
    m->len[at] = len;
    m->count++;
}

/* Pops (or peeks) queue q at `cons` into an exact-size heap buffer of cap
 * bytes, so ASan sees a write past cap. */
static void pop(pj_ring *cons, model_q *m, int q, size_t cap, int peek_only)
{
    check(pj_ring_pending(cons, q) == m->count);
    uint8_t *out = malloc(cap ? cap : 1);
    if (out == NULL)
        abort();
    size_t len = (size_t)-1;
    int rc =
        peek_only ? pj_ring_peek(cons, q, out, cap, &len) : pj_ring_pop(cons, q, out, cap, &len);
    if (m->count == 0) {
        check(rc == -EAGAIN);
        free(out);
        return;
    }
    uint32_t at = m->first;
    size_t want = m->len[at];
    check(len == want);
    if (peek_only) {
        check(rc == 0);
        size_t n = want < cap ? want : cap;
        check(n == 0 || memcmp(out, m->msg[at], n) == 0);
        check(pj_ring_pending(cons, q) == m->count);
        free(out);
        return;
    }
    if (want > cap) {
        check(rc == -EMSGSIZE);
    } else {
        check(rc == 0);
        check(want == 0 || memcmp(out, m->msg[at], want) == 0);
    }
    /* Taken either way. */
    m->first = (m->first + 1) % cons->slots;
    m->count--;
    m->consumed++;
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 5)
        return 0;
    static const uint32_t slot_choices[] = {2, 4, 8};
    static const uint32_t bytes_choices[] = {PJ_RING_MIN_SLOT, PJ_RING_MIN_SLOT + 64};
    uint32_t slots = slot_choices[data[0] % 3];
    uint32_t slot_bytes = bytes_choices[(data[0] / 3) & 1];
    /* Start index: 0, or near the 2^32 wrap, or anything. */
    uint32_t start;
    memcpy(&start, data + 1, 4);
    if ((data[0] / 6) % 3 == 0)
        start = 0;
    else if ((data[0] / 6) % 3 == 1)
        start = UINT32_MAX - (start & 15);

    size_t bytes = pj_ring_bytes(slots, slot_bytes);
    uint8_t *seg = calloc(1, bytes);
    if (seg == NULL)
        return 0;
    pj_ring_format(seg, slots, slot_bytes);
    /* Both queues' indices at `start`, as if that many messages had gone
     * through each: tail and head words of SQ (128, 192) and CQ (320, 384). */
    static const size_t idx_off[] = {128, 192, 320, 384};
    for (size_t i = 0; i < 4; i++)
        memcpy(seg + idx_off[i], &start, 4);

    pj_ring client, daemon;
    char err[256];
    check(pj_ring_view(&client, seg, bytes, slots, slot_bytes, err, sizeof err) == 0);
    check(pj_ring_view(&daemon, seg, bytes, slots, slot_bytes, err, sizeof err) == 0);
    check(pj_ring_state(&daemon) == PJ_RING_STATE_NEW);

    model_q mq[2];
    memset(mq, 0, sizeof mq);
    size_t msg_max = pj_ring_msg_max(&client);
    size_t pos = 5;
    while (pos < size) {
        uint8_t cmd = data[pos++];
        uint8_t seed = cmd >> 3;
        switch (cmd & 7) {
        case 0: /* the client submits */
        case 1: /* the daemon replies */ {
            int q = (cmd & 7) == 0 ? PJ_RING_SQ : PJ_RING_CQ;
            size_t len = pick_len(pos < size ? data[pos++] : seed, msg_max);
            /* The message: the input's next bytes, then a pattern. */
            uint8_t *msg = malloc(len ? len : 1);
            if (msg == NULL)
                abort();
            for (size_t i = 0; i < len; i++)
                msg[i] = pos + i < size ? data[pos + i] : (uint8_t)(i * 131 + seed);
            pos += len < 16 ? len : 16;
            push(q == PJ_RING_SQ ? &client : &daemon, &mq[q], q, msg, len);
            free(msg);
            break;
        }
        case 2: /* the daemon takes a request, its buffer as large as a slot */
            pop(&daemon, &mq[PJ_RING_SQ], PJ_RING_SQ, msg_max, 0);
            break;
        case 3: /* the client takes a reply, into a buffer of some size */
            pop(&client, &mq[PJ_RING_CQ], PJ_RING_CQ, pick_len((uint8_t)(seed * 9), msg_max), 0);
            break;
        case 4: /* the client peeks at a reply's header */
            pop(&client, &mq[PJ_RING_CQ], PJ_RING_CQ, 24, 1);
            break;
        case 5: /* a pop with a small buffer on either queue */
            if (seed & 1)
                pop(&daemon, &mq[PJ_RING_SQ], PJ_RING_SQ, seed >> 1, 0);
            else
                pop(&client, &mq[PJ_RING_CQ], PJ_RING_CQ, seed >> 1, 0);
            break;
        case 6: /* the producers' view of what was consumed */
            check(pj_ring_consumed(&client, PJ_RING_SQ) == start + mq[PJ_RING_SQ].consumed);
            check(pj_ring_consumed(&daemon, PJ_RING_CQ) == start + mq[PJ_RING_CQ].consumed);
            check(pj_ring_room(&daemon, PJ_RING_CQ) == slots - mq[PJ_RING_CQ].count);
            break;
        default: /* a wait on a queue with something in it returns at once */
            if (mq[PJ_RING_SQ].count)
                check(pj_ring_wait(&daemon, PJ_RING_SQ, 0, 0, NULL) == 0);
            else
                check(pj_ring_wait(&daemon, PJ_RING_SQ, 0, 0, NULL) == -ETIMEDOUT);
            break;
        }
    }
    /* Everything left comes out, in order. */
    while (mq[PJ_RING_SQ].count)
        pop(&daemon, &mq[PJ_RING_SQ], PJ_RING_SQ, msg_max, 0);
    while (mq[PJ_RING_CQ].count)
        pop(&client, &mq[PJ_RING_CQ], PJ_RING_CQ, msg_max, 0);
    pop(&daemon, &mq[PJ_RING_SQ], PJ_RING_SQ, msg_max, 0);
    pop(&client, &mq[PJ_RING_CQ], PJ_RING_CQ, msg_max, 0);
    for (int q = 0; q < 2; q++)
        for (uint32_t i = 0; i < MAX_SLOTS; i++)
            free(mq[q].msg[i]);
    free(seg);
    return 0;
}
