/* fuzz_ring.c — libFuzzer harness for the consumer side of the shared-memory
 * ring (protocol/ring.h), the part that reads memory another process writes.
 * The input is the peer's side of a ring: a geometry choice, the header
 * words, the queue indices it would write, and the slot bytes. The daemon's
 * checks must hold for any of it: a view refuses a bad header, and pops
 * either return a message no longer than a slot or report the ring corrupt;
 * nothing is read or written outside the mapping (ASan watches). Between
 * pops the peer's tail moves as the input says, as a racing client's would.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/ring.h"
#include "protocol/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    static const uint32_t slot_choices[] = {2, 4, 8};
    uint32_t slots = slot_choices[data[0] % 3];
    uint32_t slot_bytes = PJ_RING_MIN_SLOT;
    int keep_header = data[1] & 1; /* else the input's header words stand */
    size_t bytes = pj_ring_bytes(slots, slot_bytes);
    /* Exactly the ring's size on the heap, so ASan sees any overrun. */
    uint8_t *seg = calloc(1, bytes);
    if (!seg)
        return 0;
    size_t n = size - 2 < bytes ? size - 2 : bytes;
    memcpy(seg, data + 2, n);
    if (keep_header) {
        uint32_t words[4] = {PJ_RING_MAGIC, PJ_RING_VERSION, slots, slot_bytes};
        memcpy(seg, words, sizeof words);
    }
    pj_ring r;
    char err[256];
    if (pj_ring_view(&r, seg, bytes, slots, slot_bytes, err, sizeof err) != 0) {
        /* A refusal always says why. */
        if (!err[0])
            abort();
        free(seg);
        return 0;
    }
    uint8_t out[PJ_RING_MIN_SLOT];
    size_t pos = 2 + n;
    for (uint32_t i = 0; i < 3 * slots; i++) {
        size_t cap = (i & 1) ? sizeof out : 64; /* a full buffer, and a short one */
        size_t len = 0;
        /* A peek (how a client's waiting thread looks at a reply's header)
         * copies at most its cap, never a byte past the slot, and takes
         * nothing: the pop after it sees the same head. */
        uint8_t hdr[PJ_WIRE_HDR_SIZE];
        uint32_t before = pj_ring_pending(&r, PJ_RING_SQ);
        int prc = pj_ring_peek(&r, PJ_RING_SQ, hdr, sizeof hdr, &len);
        if ((prc == 0 && len > pj_ring_msg_max(&r)) ||
            (prc != 0 && prc != -EAGAIN && prc != -EPROTO) ||
            pj_ring_pending(&r, PJ_RING_SQ) != before)
            abort();
        (void)pj_peek_req_id(hdr, len < sizeof hdr ? len : sizeof hdr);
        len = 0;
        int rc = pj_ring_pop(&r, PJ_RING_SQ, out, cap, &len);
        if (rc == 0) {
            if (len > cap || len > pj_ring_msg_max(&r))
                abort();
            pj_hdr h;
            pj_dec_hdr(out, len, 1u << 20, &h, err, sizeof err);
        } else if (rc == -EMSGSIZE) {
            if (len <= cap || len > pj_ring_msg_max(&r))
                abort();
        } else if (rc != -EAGAIN && rc != -EPROTO) {
            abort();
        }
        (void)pj_ring_pending(&r, PJ_RING_SQ);
        (void)pj_ring_room(&r, PJ_RING_CQ);
        /* The peer moves its tail (whatever it likes). */
        if (pos + 4 <= size) {
            memcpy(seg + 128, data + pos, 4);
            pos += 4;
        }
    }
    /* And the producer side towards the peer stays inside its slots. */
    static const uint8_t msg[32] = {1};
    for (uint32_t i = 0; i < 2 * slots; i++)
        if (pj_ring_push(&r, PJ_RING_CQ, msg, sizeof msg) == -EAGAIN)
            break;
    free(seg);
    return 0;
}
