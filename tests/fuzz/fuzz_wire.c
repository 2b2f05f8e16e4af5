/* fuzz_wire.c — libFuzzer harness for the protocol v1 decoders.
 *
 * The input is taken as a whole message: the header is decoded, and when it
 * passes, the body is decoded as the header's type; whatever decodes must
 * re-encode to the same bytes. Independently the bytes after the header are
 * decoded as every body type, so each decoder sees every input. Bodies are
 * copied to exact-size heap blocks so ASan flags any read past the end.
 *
 * The limits the daemon passes come from its config (limits.max_ops_per_
 * request 1..1024, limits.max_message_bytes), so they vary here too: the
 * header's req_id picks the op limit (1..64) and whether the body limit is
 * small, and the op and result arrays are heap blocks of exactly that many
 * entries, so a decoder that writes one past its limit is caught. A refusal
 * for the size limit must be PJ_E_TOO_BIG and for the op limit PJ_E_LIMIT.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/wire.h"

#define MAX_OPS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pj_welcome welcome;

/* Decodes body as type with at most max_ops ops; on success re-encodes into
 * out when out != NULL. */
static int decode_as(int type, const uint8_t *body, size_t len, uint64_t req_id, uint32_t max_ops,
                     pj_wbuf *out)
{
    char err[128];
    int rc = PJ_E_TYPE;
    switch (type) {
    case PJ_MSG_HELLO: {
        pj_hello m;
        rc = pj_dec_hello(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_hello(out, req_id, &m);
        break;
    }
    case PJ_MSG_WELCOME:
        rc = pj_dec_welcome(body, len, &welcome, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_welcome(out, req_id, &welcome);
        break;
    case PJ_MSG_REGISTER: {
        pj_register m;
        rc = pj_dec_register(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_register(out, req_id, &m);
        break;
    }
    case PJ_MSG_REGISTERED: {
        pj_registered m;
        rc = pj_dec_registered(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_registered(out, req_id, &m);
        break;
    }
    case PJ_MSG_UNREGISTER:
    case PJ_MSG_UNREGISTERED: {
        uint32_t id;
        rc = pj_dec_buffer_id(body, len, &id, err, sizeof err);
        if (rc == PJ_OK && out)
            (type == PJ_MSG_UNREGISTER ? pj_enc_unregister : pj_enc_unregistered)(out, req_id, id);
        break;
    }
    case PJ_MSG_PROJECT: {
        pj_op *ops = malloc(max_ops * sizeof *ops);
        pj_project m = {.ops = ops};
        rc = pj_dec_project(body, len, max_ops, &m, err, sizeof err);
        if (rc == PJ_OK && (m.n_ops == 0 || m.n_ops > max_ops))
            abort();
        /* The op count is in the body at 4 (after flags). */
        if (len >= 8 &&
            ((uint32_t)body[4] | (uint32_t)body[5] << 8 | (uint32_t)body[6] << 16 |
             (uint32_t)body[7] << 24) > max_ops &&
            rc != PJ_E_LIMIT && rc != PJ_E_FLAGS)
            abort();
        if (rc == PJ_OK && out)
            pj_enc_project(out, req_id, &m);
        free(ops);
        break;
    }
    case PJ_MSG_DONE: {
        pj_op_result *res = malloc(max_ops * sizeof *res);
        pj_done m = {.ops = res};
        rc = pj_dec_done(body, len, max_ops, &m, err, sizeof err);
        if (rc == PJ_OK && m.n_ops > max_ops)
            abort();
        if (rc == PJ_OK && out)
            pj_enc_done(out, req_id, &m);
        free(res);
        break;
    }
    case PJ_MSG_STATS:
        rc = pj_dec_stats(body, len, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_stats(out, req_id);
        break;
    case PJ_MSG_STATS_REPLY:
        rc = PJ_OK;
        if (out)
            pj_enc_stats_reply(out, req_id, (const char *)body, len);
        break;
    case PJ_MSG_PING:
    case PJ_MSG_PONG:
        rc = pj_dec_ping(body, len, err, sizeof err);
        if (rc == PJ_OK && out)
            (type == PJ_MSG_PING ? pj_enc_ping : pj_enc_pong)(out, req_id, body, len);
        break;
    case PJ_MSG_ERROR: {
        pj_error_msg m;
        rc = pj_dec_error(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_error(out, req_id, m.code, m.op_index, m.msg);
        break;
    }
    case PJ_MSG_RING_ATTACH: {
        pj_ring_attach m;
        rc = pj_dec_ring_attach(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_ring_attach(out, req_id, &m);
        break;
    }
    case PJ_MSG_RING_ATTACHED: {
        pj_ring_attached m;
        rc = pj_dec_ring_attached(body, len, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_ring_attached(out, req_id, &m);
        break;
    }
    }
    /* Every failure explains itself. */
    if (rc != PJ_OK && rc != PJ_E_TYPE && err[0] == '\0')
        abort();
    return rc;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[128];
    pj_hdr h;
    uint64_t req_id = pj_peek_req_id(data, size);
    uint32_t max_ops = 1 + (uint32_t)(req_id % MAX_OPS);
    /* The daemon's smallest limit (max_message_bytes 1024, less the
     * header), or one no input here reaches. */
    size_t max_body = (req_id >> 6) & 1 ? 1024 - PJ_WIRE_HDR_SIZE : 1u << 20;
    int hst = pj_dec_hdr(data, size, max_body, &h, err, sizeof err);
    if (size >= PJ_WIRE_HDR_SIZE && hst != PJ_E_PROTO && hst != PJ_E_VERSION && hst != PJ_E_FLAGS &&
        (hst == PJ_E_TOO_BIG) != (size - PJ_WIRE_HDR_SIZE > max_body))
        abort(); /* a well-formed header is refused for its size exactly when too big */
    if (hst == PJ_OK && pj_msg_type_valid(h.type)) {
        uint8_t *body = malloc(h.body_len ? h.body_len : 1);
        memcpy(body, data + PJ_WIRE_HDR_SIZE, h.body_len);
        pj_wbuf out;
        pj_wbuf_init(&out);
        if (decode_as(h.type, body, h.body_len, h.req_id, max_ops, &out) == PJ_OK) {
            /* Canonical: a decoded message re-encodes to the input, with
             * the header's flags (a REGISTER's RETRY) set as a sender sets
             * them (the encoders write 0). */
            pj_wbuf_set_hdr_flags(&out, h.flags);
            if (out.len != size || memcmp(out.data, data, size) != 0)
                abort();
        }
        pj_wbuf_free(&out);
        free(body);
    }
    if (size > PJ_WIRE_HDR_SIZE) {
        size_t blen = size - PJ_WIRE_HDR_SIZE;
        uint8_t *body = malloc(blen);
        memcpy(body, data + PJ_WIRE_HDR_SIZE, blen);
        for (int t = PJ_MSG_HELLO; t <= PJ_MSG_LAST; t++)
            decode_as(t, body, blen, 0, max_ops, NULL);
        free(body);
    }
    return 0;
}
