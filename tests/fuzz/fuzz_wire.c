/* fuzz_wire.c — libFuzzer harness for the protocol v1 decoders.
 *
 * The input is taken as a whole message: the header is decoded, and when it
 * passes, the body is decoded as the header's type; whatever decodes must
 * re-encode to the same bytes. Independently the bytes after the header are
 * decoded as every body type, so each decoder sees every input. Bodies are
 * copied to exact-size heap blocks so ASan flags any read past the end.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/wire.h"

#define MAX_OPS 64

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static pj_op ops[MAX_OPS];
static pj_op_result res[MAX_OPS];
static pj_welcome welcome;

/* Decodes body as type; on success re-encodes into out when out != NULL. */
static int decode_as(int type, const uint8_t *body, size_t len, uint64_t req_id, pj_wbuf *out)
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
        pj_project m = {.ops = ops};
        rc = pj_dec_project(body, len, MAX_OPS, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_project(out, req_id, &m);
        break;
    }
    case PJ_MSG_DONE: {
        pj_done m = {.ops = res};
        rc = pj_dec_done(body, len, MAX_OPS, &m, err, sizeof err);
        if (rc == PJ_OK && out)
            pj_enc_done(out, req_id, &m);
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
    if (pj_dec_hdr(data, size, 1u << 20, &h, err, sizeof err) == PJ_OK &&
        pj_msg_type_valid(h.type)) {
        uint8_t *body = malloc(h.body_len ? h.body_len : 1);
        memcpy(body, data + PJ_WIRE_HDR_SIZE, h.body_len);
        pj_wbuf out;
        pj_wbuf_init(&out);
        if (decode_as(h.type, body, h.body_len, h.req_id, &out) == PJ_OK) {
            /* Canonical: a decoded message re-encodes to the input. */
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
            decode_as(t, body, blen, 0, NULL);
        free(body);
    }
    return 0;
}
