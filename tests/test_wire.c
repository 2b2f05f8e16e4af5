/* test_wire.c — protocol v1 encode/decode: round trips, the exact byte
 * layout, every truncation, limits with their codes, random corruption. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "protocol/wire.h"

#define MAX_OPS 64

/* ---- sample messages ------------------------------------------------------ */

static pj_op sample_ops[3];
static pj_op_result sample_results[3];

static void fill_ops(void)
{
    for (uint32_t i = 0; i < 3; i++) {
        pj_op *o = &sample_ops[i];
        o->layer = i;
        o->m = 8u << i;
        o->n = 1024 + i;
        o->x_buf = 10 + i;
        o->x_off = 0x0102030405060708ull + i;
        o->x_ld = 4096;
        o->y_buf = 20 + i;
        o->op_flags = 0;
        o->y_off = 0xa0b0c0d0e0f00000ull + i;
        o->y_ld = 8192;
        sample_results[i].status = i == 2 ? PJ_E_BOUNDS : PJ_OK;
        sample_results[i].engine = (uint16_t)(7 + i);
    }
}

static pj_hello sample_hello(void)
{
    pj_hello h;
    memset(&h, 0, sizeof h);
    h.ver_min = 1;
    h.ver_max = 3;
    h.pid = 123456;
    strcpy(h.name, "sglang-worker-0");
    return h;
}

static pj_welcome *sample_welcome(void)
{
    pj_welcome *w = calloc(1, sizeof *w);
    w->version = 1;
    w->backend = 2;
    for (int i = 0; i < PJ_WIRE_UUID_SIZE; i++)
        w->device_uuid[i] = (uint8_t)(0xf0 + i);
    w->max_m = 256;
    w->max_ops_per_request = 64;
    w->max_buffers = 64;
    w->max_message_bytes = 65536;
    w->n_layers = 3;
    const char *names[] = {"qkv_gate", "o", "router"};
    for (uint32_t i = 0; i < 3; i++) {
        strcpy(w->layers[i].name, names[i]);
        w->layers[i].n = 4096 + i;
        w->layers[i].k = 2048 * (i + 1);
        w->layers[i].format = (uint8_t)i;
    }
    w->n_shapes = 6;
    uint32_t s[] = {1, 8, 16, 32, 128, 256};
    memcpy(w->shapes, s, sizeof s);
    return w;
}

static pj_register sample_register_shm(void)
{
    pj_register r;
    memset(&r, 0, sizeof r);
    r.kind = PJ_BUF_SHM;
    r.size = 1ull << 33;
    strcpy(r.shm_name, "/projd-42-1-abcdef");
    return r;
}

static pj_register sample_register_cuda(void)
{
    pj_register r;
    memset(&r, 0, sizeof r);
    r.kind = PJ_BUF_CUDA;
    r.size = 123456789;
    for (int i = 0; i < PJ_WIRE_IPC_HANDLE_SIZE; i++)
        r.ipc_handle[i] = (uint8_t)(i * 3 + 1);
    for (int i = 0; i < PJ_WIRE_UUID_SIZE; i++)
        r.device_uuid[i] = (uint8_t)(0x80 | i);
    return r;
}

static pj_project sample_project(uint32_t flags)
{
    pj_project p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    p.n_ops = 3;
    for (int i = 0; i < PJ_WIRE_IPC_HANDLE_SIZE; i++) {
        p.wait_event[i] = (uint8_t)(0x11 + i);
        p.signal_event[i] = (uint8_t)(0x55 ^ i);
    }
    p.ops = sample_ops;
    return p;
}

static pj_done sample_done(void)
{
    pj_done d;
    memset(&d, 0, sizeof d);
    d.status = PJ_E_BOUNDS;
    d.n_ops = 3;
    d.queue_ns = 1234;
    d.exec_ns = 98765432101ull;
    d.ops = sample_results;
    return d;
}

/* Message kinds the table-driven tests walk over. */
enum {
    K_HELLO,
    K_WELCOME,
    K_REG_SHM,
    K_REG_CUDA,
    K_REGISTERED,
    K_UNREGISTER,
    K_UNREGISTERED,
    K_PROJECT,
    K_PROJECT_EV,
    K_DONE,
    K_STATS,
    K_STATS_REPLY,
    K_PING,
    K_PONG,
    K_ERROR,
    K_RING_ATTACH,
    K_RING_ATTACHED,
    K_COUNT
};

static void encode_kind(int kind, pj_wbuf *b, uint64_t req_id)
{
    int rc = -1;
    fill_ops();
    switch (kind) {
    case K_HELLO: {
        pj_hello h = sample_hello();
        rc = pj_enc_hello(b, req_id, &h);
        break;
    }
    case K_WELCOME: {
        pj_welcome *w = sample_welcome();
        rc = pj_enc_welcome(b, req_id, w);
        free(w);
        break;
    }
    case K_REG_SHM: {
        pj_register r = sample_register_shm();
        rc = pj_enc_register(b, req_id, &r);
        break;
    }
    case K_REG_CUDA: {
        pj_register r = sample_register_cuda();
        rc = pj_enc_register(b, req_id, &r);
        break;
    }
    case K_REGISTERED: {
        pj_registered r = {.buffer_id = 77, .size = 1ull << 40};
        rc = pj_enc_registered(b, req_id, &r);
        break;
    }
    case K_UNREGISTER:
        rc = pj_enc_unregister(b, req_id, 0xdeadbeef);
        break;
    case K_UNREGISTERED:
        rc = pj_enc_unregistered(b, req_id, 5);
        break;
    case K_PROJECT: {
        pj_project p = sample_project(0);
        rc = pj_enc_project(b, req_id, &p);
        break;
    }
    case K_PROJECT_EV: {
        pj_project p = sample_project(PJ_PF_KNOWN);
        rc = pj_enc_project(b, req_id, &p);
        break;
    }
    case K_DONE: {
        pj_done d = sample_done();
        rc = pj_enc_done(b, req_id, &d);
        break;
    }
    case K_STATS:
        rc = pj_enc_stats(b, req_id);
        break;
    case K_STATS_REPLY:
        rc = pj_enc_stats_reply(b, req_id, "{\"a\":1}", 7);
        break;
    case K_PING:
        rc = pj_enc_ping(b, req_id, "12345678", 8);
        break;
    case K_PONG: {
        uint8_t pl[PJ_WIRE_PING_MAX];
        for (int i = 0; i < PJ_WIRE_PING_MAX; i++)
            pl[i] = (uint8_t)i;
        rc = pj_enc_pong(b, req_id, pl, sizeof pl);
        break;
    }
    case K_ERROR:
        rc = pj_enc_error(b, req_id, PJ_E_SHAPE, 2, "op 2: m 300 exceeds max_m 256");
        break;
    case K_RING_ATTACH: {
        pj_ring_attach a = {.slots = 64, .slot_bytes = 4096};
        snprintf(a.shm_name, sizeof a.shm_name, "/projd-ring-1234-abcd");
        rc = pj_enc_ring_attach(b, req_id, &a);
        break;
    }
    case K_RING_ATTACHED: {
        pj_ring_attached a = {.slots = 64, .slot_bytes = 4096, .spin_us = 50};
        rc = pj_enc_ring_attached(b, req_id, &a);
        break;
    }
    }
    ck_assert_int_eq(rc, 0);
}

static int kind_type(int kind)
{
    static const int t[K_COUNT] = {
        [K_HELLO] = PJ_MSG_HELLO,
        [K_WELCOME] = PJ_MSG_WELCOME,
        [K_REG_SHM] = PJ_MSG_REGISTER,
        [K_REG_CUDA] = PJ_MSG_REGISTER,
        [K_REGISTERED] = PJ_MSG_REGISTERED,
        [K_UNREGISTER] = PJ_MSG_UNREGISTER,
        [K_UNREGISTERED] = PJ_MSG_UNREGISTERED,
        [K_PROJECT] = PJ_MSG_PROJECT,
        [K_PROJECT_EV] = PJ_MSG_PROJECT,
        [K_DONE] = PJ_MSG_DONE,
        [K_STATS] = PJ_MSG_STATS,
        [K_STATS_REPLY] = PJ_MSG_STATS_REPLY,
        [K_PING] = PJ_MSG_PING,
        [K_PONG] = PJ_MSG_PONG,
        [K_ERROR] = PJ_MSG_ERROR,
        [K_RING_ATTACH] = PJ_MSG_RING_ATTACH,
        [K_RING_ATTACHED] = PJ_MSG_RING_ATTACHED,
    };
    return t[kind];
}

/* Decodes a body as `type` and, when it decodes, re-encodes it into out
 * (so callers can check the encoding is canonical). Returns the status. */
static int decode_as(int type, const uint8_t *body, size_t len, uint64_t req_id, pj_wbuf *out,
                     char *err, size_t errlen)
{
    static pj_op ops[MAX_OPS];
    static pj_op_result res[MAX_OPS];
    int rc;
    switch (type) {
    case PJ_MSG_HELLO: {
        pj_hello m;
        rc = pj_dec_hello(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_hello(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_WELCOME: {
        pj_welcome *m = malloc(sizeof *m);
        pj_wire_layer *all = malloc(PJ_WIRE_MAX_LAYERS_ALL * sizeof *all);
        rc = pj_dec_welcome_all(body, len, m, all, PJ_WIRE_MAX_LAYERS_ALL, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_welcome(out, req_id, m), 0);
        free(all);
        free(m);
        return rc;
    }
    case PJ_MSG_REGISTER: {
        pj_register m;
        rc = pj_dec_register(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_register(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_REGISTERED: {
        pj_registered m;
        rc = pj_dec_registered(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_registered(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_UNREGISTER:
    case PJ_MSG_UNREGISTERED: {
        uint32_t id;
        rc = pj_dec_buffer_id(body, len, &id, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(type == PJ_MSG_UNREGISTER ? pj_enc_unregister(out, req_id, id)
                                                       : pj_enc_unregistered(out, req_id, id),
                             0);
        return rc;
    }
    case PJ_MSG_PROJECT: {
        pj_project m = {.ops = ops};
        rc = pj_dec_project(body, len, MAX_OPS, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_project(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_DONE: {
        pj_done m = {.ops = res};
        rc = pj_dec_done(body, len, MAX_OPS, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_done(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_STATS:
        rc = pj_dec_stats(body, len, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_stats(out, req_id), 0);
        return rc;
    case PJ_MSG_STATS_REPLY:
        /* Any text is a valid STATS_REPLY body. */
        if (out)
            ck_assert_int_eq(pj_enc_stats_reply(out, req_id, (const char *)body, len), 0);
        return PJ_OK;
    case PJ_MSG_PING:
    case PJ_MSG_PONG:
        rc = pj_dec_ping(body, len, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(type == PJ_MSG_PING ? pj_enc_ping(out, req_id, body, len)
                                                 : pj_enc_pong(out, req_id, body, len),
                             0);
        return rc;
    case PJ_MSG_ERROR: {
        pj_error_msg m;
        rc = pj_dec_error(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_error(out, req_id, m.code, m.op_index, m.msg), 0);
        return rc;
    }
    case PJ_MSG_RING_ATTACH: {
        pj_ring_attach m;
        rc = pj_dec_ring_attach(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_ring_attach(out, req_id, &m), 0);
        return rc;
    }
    case PJ_MSG_RING_ATTACHED: {
        pj_ring_attached m;
        rc = pj_dec_ring_attached(body, len, &m, err, errlen);
        if (rc == PJ_OK && out)
            ck_assert_int_eq(pj_enc_ring_attached(out, req_id, &m), 0);
        return rc;
    }
    }
    ck_abort_msg("no decoder for type %d", type);
    return -1;
}

/* ---- round trips ------------------------------------------------------------ */

START_TEST(test_roundtrip_all)
{
    for (int k = 0; k < K_COUNT; k++) {
        pj_wbuf b, again;
        pj_wbuf_init(&b);
        pj_wbuf_init(&again);
        uint64_t req = 0x1122334455667788ull + (uint64_t)k;
        encode_kind(k, &b, req);
        pj_hdr h;
        char err[256];
        ck_assert_int_eq(pj_dec_hdr(b.data, b.len, 1 << 20, &h, err, sizeof err), PJ_OK);
        ck_assert_str_eq(err, "");
        ck_assert_uint_eq(h.magic, PJ_WIRE_MAGIC);
        ck_assert_uint_eq(h.version, PJ_WIRE_VERSION);
        ck_assert_int_eq(h.type, kind_type(k));
        ck_assert_uint_eq(h.flags, 0);
        ck_assert_uint_eq(h.body_len, b.len - PJ_WIRE_HDR_SIZE);
        ck_assert(h.req_id == req);
        int rc =
            decode_as(h.type, b.data + PJ_WIRE_HDR_SIZE, h.body_len, req, &again, err, sizeof err);
        ck_assert_msg(rc == PJ_OK, "kind %d: %s", k, err);
        ck_assert_uint_eq(again.len, b.len);
        ck_assert_msg(memcmp(again.data, b.data, b.len) == 0, "kind %d re-encodes differently", k);
        pj_wbuf_free(&b);
        pj_wbuf_free(&again);
    }
}
END_TEST

START_TEST(test_roundtrip_fields)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    char err[256];
    fill_ops();

    /* HELLO */
    pj_hello h = sample_hello(), h2;
    ck_assert_int_eq(pj_enc_hello(&b, 1, &h), 0);
    ck_assert_int_eq(pj_dec_hello(b.data + 24, b.len - 24, &h2, err, sizeof err), PJ_OK);
    ck_assert_int_eq(h2.ver_min, 1);
    ck_assert_int_eq(h2.ver_max, 3);
    ck_assert_uint_eq(h2.pid, 123456);
    ck_assert_str_eq(h2.name, "sglang-worker-0");

    /* WELCOME */
    pj_welcome *w = sample_welcome(), *w2 = malloc(sizeof *w2);
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_welcome(&b, 1, w), 0);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_OK);
    ck_assert_int_eq(w2->backend, 2);
    ck_assert_mem_eq(w2->device_uuid, w->device_uuid, 16);
    ck_assert_uint_eq(w2->max_m, 256);
    ck_assert_uint_eq(w2->max_ops_per_request, 64);
    ck_assert_uint_eq(w2->max_buffers, 64);
    ck_assert_uint_eq(w2->max_message_bytes, 65536);
    ck_assert_uint_eq(w2->n_layers, 3);
    ck_assert_str_eq(w2->layers[2].name, "router");
    ck_assert_uint_eq(w2->layers[2].n, 4098);
    ck_assert_uint_eq(w2->layers[2].k, 6144);
    ck_assert_uint_eq(w2->layers[2].format, 2);
    ck_assert_uint_eq(w2->n_shapes, 6);
    ck_assert_uint_eq(w2->shapes[5], 256);
    free(w);
    free(w2);

    /* REGISTER, both kinds */
    pj_register r = sample_register_shm(), r2;
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_register(&b, 1, &r), 0);
    ck_assert_int_eq(pj_dec_register(b.data + 24, b.len - 24, &r2, err, sizeof err), PJ_OK);
    ck_assert_int_eq(r2.kind, PJ_BUF_SHM);
    ck_assert(r2.size == 1ull << 33);
    ck_assert_str_eq(r2.shm_name, "/projd-42-1-abcdef");
    /* A name with a line break or an escape would split an ERROR's one
     * line (it is quoted in them): refused, saying where. */
    for (int bad = 0; bad < 2; bad++) {
        pj_register rb = sample_register_shm();
        snprintf(rb.shm_name, sizeof rb.shm_name, "/x%cE_OK: fake", bad ? 0x1b : '\n');
        pj_wbuf_reset(&b);
        ck_assert_int_eq(pj_enc_register(&b, 1, &rb), 0);
        ck_assert_int_eq(pj_dec_register(b.data + 24, b.len - 24, &r2, err, sizeof err),
                         PJ_E_PROTO);
        ck_assert_msg(strstr(err, bad ? "control byte 0x1b at 2" : "control byte 0x0a at 2"), "%s",
                      err);
    }
    r = sample_register_cuda();
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_register(&b, 1, &r), 0);
    ck_assert_int_eq(pj_dec_register(b.data + 24, b.len - 24, &r2, err, sizeof err), PJ_OK);
    ck_assert_int_eq(r2.kind, PJ_BUF_CUDA);
    ck_assert(r2.size == 123456789);
    ck_assert_mem_eq(r2.ipc_handle, r.ipc_handle, 64);
    ck_assert_mem_eq(r2.device_uuid, r.device_uuid, 16);

    /* PROJECT with both events */
    pj_project p = sample_project(PJ_PF_KNOWN);
    pj_op ops[MAX_OPS];
    pj_project p2 = {.ops = ops};
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_project(&b, 1, &p), 0);
    ck_assert_uint_eq(b.len, 24 + 8 + 128 + 3 * 56);
    ck_assert_int_eq(pj_dec_project(b.data + 24, b.len - 24, MAX_OPS, &p2, err, sizeof err), PJ_OK);
    ck_assert_ptr_eq(p2.ops, ops);
    ck_assert_uint_eq(p2.flags, PJ_PF_KNOWN);
    ck_assert_uint_eq(p2.n_ops, 3);
    ck_assert_mem_eq(p2.wait_event, p.wait_event, 64);
    ck_assert_mem_eq(p2.signal_event, p.signal_event, 64);
    ck_assert_mem_eq(ops, sample_ops, 3 * sizeof(pj_op));

    /* DONE */
    pj_done d = sample_done();
    pj_op_result res[MAX_OPS];
    pj_done d2 = {.ops = res};
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_done(&b, 1, &d), 0);
    ck_assert_int_eq(pj_dec_done(b.data + 24, b.len - 24, MAX_OPS, &d2, err, sizeof err), PJ_OK);
    ck_assert_int_eq(d2.status, PJ_E_BOUNDS);
    ck_assert_uint_eq(d2.n_ops, 3);
    ck_assert(d2.queue_ns == 1234 && d2.exec_ns == 98765432101ull);
    ck_assert_int_eq(res[2].status, PJ_E_BOUNDS);
    ck_assert_int_eq(res[1].engine, 8);

    /* ERROR, negative code survives */
    pj_error_msg e;
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_error(&b, 1, -5, 0xffffffffu, "bad thing"), 0);
    ck_assert_int_eq(pj_dec_error(b.data + 24, b.len - 24, &e, err, sizeof err), PJ_OK);
    ck_assert_int_eq(e.code, -5);
    ck_assert_uint_eq(e.op_index, 0xffffffffu);
    ck_assert_str_eq(e.msg, "bad thing");
    pj_wbuf_free(&b);
}
END_TEST

/* Encoders append: two messages in one buffer, the second intact. */
START_TEST(test_append)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    ck_assert_int_eq(pj_enc_ping(&b, 1, "ab", 2), 0);
    size_t first = b.len;
    ck_assert_int_eq(pj_enc_unregister(&b, 2, 9), 0);
    pj_hdr h;
    char err[128];
    ck_assert_int_eq(pj_dec_hdr(b.data + first, b.len - first, 64, &h, err, sizeof err), PJ_OK);
    ck_assert_int_eq(h.type, PJ_MSG_UNREGISTER);
    ck_assert(h.req_id == 2);
    pj_wbuf_free(&b);
}
END_TEST

/* ---- the exact layout --------------------------------------------------------- */

START_TEST(test_layout_header_and_op)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    pj_op op = {.layer = 0x01020304,
                .m = 0x05060708,
                .n = 0x090a0b0c,
                .x_buf = 0x0d0e0f10,
                .x_off = 0x1112131415161718ull,
                .x_ld = 0x191a1b1c1d1e1f20ull,
                .y_buf = 0x21222324,
                .op_flags = 0,
                .y_off = 0x2526272829303132ull,
                .y_ld = 0x3334353637383940ull};
    pj_project p = {.flags = 0, .n_ops = 1, .ops = &op};
    ck_assert_int_eq(pj_enc_project(&b, 0xa1a2a3a4a5a6a7a8ull, &p), 0);
    static const uint8_t want[24 + 8 + 56] = {
        /* header: magic "PJD1", version 1, type 7, flags 0, body_len 64, req_id */
        'P', 'J', 'D', '1', 1, 0, 7, 0, 0, 0, 0, 0, 64, 0, 0, 0, 0xa8, 0xa7, 0xa6, 0xa5, 0xa4, 0xa3,
        0xa2, 0xa1,
        /* flags 0, n_ops 1 */
        0, 0, 0, 0, 1, 0, 0, 0,
        /* op */
        4, 3, 2, 1, 8, 7, 6, 5, 0x0c, 0x0b, 0x0a, 9, 0x10, 0x0f, 0x0e, 0x0d, 0x18, 0x17, 0x16, 0x15,
        0x14, 0x13, 0x12, 0x11, 0x20, 0x1f, 0x1e, 0x1d, 0x1c, 0x1b, 0x1a, 0x19, 0x24, 0x23, 0x22,
        0x21, 0, 0, 0, 0, 0x32, 0x31, 0x30, 0x29, 0x28, 0x27, 0x26, 0x25, 0x40, 0x39, 0x38, 0x37,
        0x36, 0x35, 0x34, 0x33};
    ck_assert_uint_eq(b.len, sizeof want);
    ck_assert_mem_eq(b.data, want, sizeof want);
    pj_wbuf_free(&b);
}
END_TEST

START_TEST(test_layout_sizes)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    pj_hello h = sample_hello();
    ck_assert_int_eq(pj_enc_hello(&b, 0, &h), 0);
    ck_assert_uint_eq(b.len, 24 + 9 + strlen(h.name));
    pj_wbuf_reset(&b);
    pj_register r = sample_register_cuda();
    ck_assert_int_eq(pj_enc_register(&b, 0, &r), 0);
    ck_assert_uint_eq(b.len, 24 + 9 + 64 + 16);
    pj_wbuf_reset(&b);
    r = sample_register_shm();
    ck_assert_int_eq(pj_enc_register(&b, 0, &r), 0);
    ck_assert_uint_eq(b.len, 24 + 9 + 2 + strlen(r.shm_name));
    pj_wbuf_reset(&b);
    pj_registered rd = {1, 2};
    ck_assert_int_eq(pj_enc_registered(&b, 0, &rd), 0);
    ck_assert_uint_eq(b.len, 24 + 12);
    pj_wbuf_reset(&b);
    pj_done d = sample_done();
    ck_assert_int_eq(pj_enc_done(&b, 0, &d), 0);
    ck_assert_uint_eq(b.len, 24 + 24 + 3 * 8);
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_error(&b, 0, 1, 2, "xyz"), 0);
    ck_assert_uint_eq(b.len, 24 + 10 + 3);
    pj_wbuf_reset(&b);
    pj_welcome *w = sample_welcome();
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), 0);
    ck_assert_uint_eq(b.len, 24 + 40 + (1 + 8 + 9) + (1 + 1 + 9) + (1 + 6 + 9) + 4 + 6 * 4);
    free(w);
    pj_wbuf_free(&b);
}
END_TEST

/* ---- truncation and trailing bytes ---------------------------------------------- */

START_TEST(test_truncation_every_length)
{
    for (int k = 0; k < K_COUNT; k++) {
        pj_wbuf b;
        pj_wbuf_init(&b);
        encode_kind(k, &b, 99);
        int type = kind_type(k);
        char err[256];
        pj_hdr h;
        /* Every cut of the whole message fails the header check. */
        for (size_t cut = 0; cut < b.len; cut++) {
            uint8_t *copy = malloc(cut ? cut : 1);
            memcpy(copy, b.data, cut);
            err[0] = '\0';
            int rc = pj_dec_hdr(copy, cut, 1 << 20, &h, err, sizeof err);
            ck_assert_msg(rc == PJ_E_PROTO, "kind %d cut %zu: rc %d", k, cut, rc);
            ck_assert_msg(strstr(err, "truncated") != NULL, "kind %d cut %zu: '%s'", k, cut, err);
            free(copy);
        }
        /* Every cut of the body fails the body decoder, with a message. Bodies
         * go through an exact-size heap copy so ASan sees any overread. */
        size_t body_len = b.len - PJ_WIRE_HDR_SIZE;
        if (type != PJ_MSG_STATS_REPLY && type != PJ_MSG_PING && type != PJ_MSG_PONG &&
            type != PJ_MSG_STATS) {
            for (size_t cut = 0; cut < body_len; cut++) {
                uint8_t *copy = malloc(cut ? cut : 1);
                memcpy(copy, b.data + PJ_WIRE_HDR_SIZE, cut);
                err[0] = '\0';
                int rc = decode_as(type, copy, cut, 0, NULL, err, sizeof err);
                ck_assert_msg(rc != PJ_OK, "kind %d body cut %zu decoded", k, cut);
                ck_assert_msg(strlen(err) > 0, "kind %d body cut %zu: no message", k, cut);
                free(copy);
            }
        }
        /* One byte too many fails too (except bodies with no fixed end). */
        if (type != PJ_MSG_STATS_REPLY && type != PJ_MSG_PING) {
            uint8_t *longer = calloc(1, body_len + 1);
            memcpy(longer, b.data + PJ_WIRE_HDR_SIZE, body_len);
            err[0] = '\0';
            int rc = decode_as(type, longer, body_len + 1, 0, NULL, err, sizeof err);
            ck_assert_msg(rc == PJ_E_PROTO, "kind %d +1 byte: rc %d", k, rc);
            ck_assert_msg(strlen(err) > 0, "kind %d +1: no message", k);
            free(longer);
        }
        pj_wbuf_free(&b);
    }
}
END_TEST

START_TEST(test_truncation_message_text)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    fill_ops();
    pj_project p = sample_project(0);
    ck_assert_int_eq(pj_enc_project(&b, 1, &p), 0);
    char err[256];
    pj_op ops[MAX_OPS];
    pj_project d = {.ops = ops};
    /* Body is 8 + 3*56 = 176; cut at 150: op 2 starts at 120. */
    ck_assert_int_eq(pj_dec_project(b.data + 24, 150, MAX_OPS, &d, err, sizeof err), PJ_E_PROTO);
    ck_assert_str_eq(err, "PROJECT: truncated: op 2: body ends at byte 150, op needs 56 bytes at "
                          "120");
    ck_assert_int_eq(pj_dec_project(b.data + 24, 176, MAX_OPS, &d, err, sizeof err), PJ_OK);
    /* A tiny err buffer is still NUL-terminated and nothing overflows. */
    char tiny[5];
    ck_assert_int_eq(pj_dec_project(b.data + 24, 3, MAX_OPS, &d, tiny, sizeof tiny), PJ_E_PROTO);
    ck_assert_uint_eq(strlen(tiny), 4);
    /* NULL err is allowed. */
    ck_assert_int_eq(pj_dec_project(b.data + 24, 3, MAX_OPS, &d, NULL, 0), PJ_E_PROTO);
    pj_wbuf_free(&b);
}
END_TEST

/* ---- header checks ------------------------------------------------------------- */

static void patch32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

START_TEST(test_header_codes)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    ck_assert_int_eq(pj_enc_ping(&b, 0x42, "0123456789", 10), 0);
    char err[256];
    pj_hdr h;
    uint8_t m[64];
    size_t len = b.len;

    memcpy(m, b.data, len);
    m[0] ^= 1;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    ck_assert(h.req_id == 0); /* nothing of it is believed: the reply says 0 */
    /* Checked before the size limit: a bad magic is E_PROTO at any size. */
    ck_assert_int_eq(pj_dec_hdr(m, len, 1, &h, err, sizeof err), PJ_E_PROTO);

    memcpy(m, b.data, len);
    m[4] = 2;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_VERSION);
    ck_assert(h.req_id == 0x42); /* echoed in the ERROR reply */
    m[4] = 0;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_VERSION);

    memcpy(m, b.data, len);
    m[8] = 1;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_FLAGS);
    ck_assert(h.req_id == 0x42);
    memcpy(m, b.data, len);
    m[11] = 0x80;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_FLAGS);
    /* RETRY (0x1) is REGISTER's alone. */
    ck_assert_uint_ne(h.type, PJ_MSG_REGISTER);
    memcpy(m, b.data, len);
    m[8] = (uint8_t)PJ_HF_RETRY;
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_FLAGS);
    ck_assert_ptr_nonnull(strstr(err, "RETRY (0x1), on REGISTER only"));
    {
        pj_wbuf rb;
        pj_wbuf_init(&rb);
        pj_register rg = {.kind = PJ_BUF_SHM, .size = 4096};
        snprintf(rg.shm_name, sizeof rg.shm_name, "/x");
        ck_assert_int_eq(pj_enc_register(&rb, 0x43, &rg), 0);
        pj_wbuf_set_hdr_flags(&rb, PJ_HF_RETRY);
        ck_assert_int_eq(pj_dec_hdr(rb.data, rb.len, 100, &h, err, sizeof err), PJ_OK);
        ck_assert_uint_eq(h.flags, PJ_HF_RETRY);
        pj_wbuf_set_hdr_flags(&rb, 3);
        ck_assert_int_eq(pj_dec_hdr(rb.data, rb.len, 100, &h, err, sizeof err), PJ_E_FLAGS);
        pj_wbuf_free(&rb);
    }

    memcpy(m, b.data, len);
    patch32(m + 12, 11);
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    patch32(m + 12, 9);
    ck_assert_int_eq(pj_dec_hdr(m, len, 100, &h, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "trailing bytes"));
    patch32(m + 12, 0xffffffffu);
    ck_assert_int_eq(pj_dec_hdr(m, len, SIZE_MAX, &h, err, sizeof err), PJ_E_PROTO);

    /* body_len 10: allowed at 10, too big at 9 */
    ck_assert_int_eq(pj_dec_hdr(b.data, len, 10, &h, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_dec_hdr(b.data, len, 9, &h, err, sizeof err), PJ_E_TOO_BIG);
    ck_assert_ptr_nonnull(strstr(err, "limit"));

    /* Unknown type passes the header check; the caller answers E_TYPE. */
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_raw(&b, 7, 999, NULL, 0), 0);
    ck_assert_int_eq(pj_dec_hdr(b.data, b.len, 100, &h, err, sizeof err), PJ_OK);
    ck_assert_int_eq(h.type, 999);
    ck_assert_int_eq(pj_msg_type_valid(h.type), 0);
    ck_assert_int_eq(pj_dec_hdr(NULL, 0, 100, &h, err, sizeof err), PJ_E_PROTO);

    /* The req_id, read whatever the rest says; 0 without a whole header or
     * its magic (PROTOCOL.md: such a reply carries req_id 0). */
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_raw(&b, 0x8877665544332211ull, 999, "xy", 2), 0);
    b.data[8] = 1; /* flags: does not matter */
    ck_assert_uint_eq(pj_peek_req_id(b.data, b.len), 0x8877665544332211ull);
    ck_assert_uint_eq(pj_peek_req_id(b.data, PJ_WIRE_HDR_SIZE), 0x8877665544332211ull);
    ck_assert_uint_eq(pj_peek_req_id(b.data, PJ_WIRE_HDR_SIZE - 1), 0);
    b.data[0] ^= 0xff;
    ck_assert_uint_eq(pj_peek_req_id(b.data, b.len), 0);
    pj_wbuf_free(&b);
}
END_TEST

/* ---- body checks and limits ------------------------------------------------------ */

/* Encodes a HELLO by hand with a given name length and bytes. */
static size_t raw_hello(uint8_t *out, uint8_t nl, const char *name, size_t copy)
{
    uint8_t *p = out;
    *p++ = 1, *p++ = 0, *p++ = 1, *p++ = 0;
    *p++ = 1, *p++ = 2, *p++ = 3, *p++ = 4;
    *p++ = nl;
    memcpy(p, name, copy);
    return 9 + copy;
}

START_TEST(test_hello_checks)
{
    uint8_t buf[400];
    char err[256];
    pj_hello h;
    char name[70];
    memset(name, 'a', sizeof name);
    size_t n = raw_hello(buf, 63, name, 63);
    ck_assert_int_eq(pj_dec_hello(buf, n, &h, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(strlen(h.name), 63);
    n = raw_hello(buf, 64, name, 64);
    ck_assert_int_eq(pj_dec_hello(buf, n, &h, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "name_len"));
    n = raw_hello(buf, 5, "ab\0cd", 5);
    ck_assert_int_eq(pj_dec_hello(buf, n, &h, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "NUL"));
    n = raw_hello(buf, 0, "", 0);
    ck_assert_int_eq(pj_dec_hello(buf, n, &h, err, sizeof err), PJ_OK);
    ck_assert_str_eq(h.name, "");
    /* ver_min > ver_max */
    n = raw_hello(buf, 1, "x", 1);
    buf[0] = 5;
    ck_assert_int_eq(pj_dec_hello(buf, n, &h, err, sizeof err), PJ_E_PROTO);
    /* The encoder writes a 64-byte unterminated name as is; decoder refuses. */
    pj_hello big;
    memset(&big, 0, sizeof big);
    memset(big.name, 'b', sizeof big.name);
    pj_wbuf b;
    pj_wbuf_init(&b);
    ck_assert_int_eq(pj_enc_hello(&b, 0, &big), 0);
    ck_assert_int_eq(pj_dec_hello(b.data + 24, b.len - 24, &h, err, sizeof err), PJ_E_PROTO);
    pj_wbuf_free(&b);
}
END_TEST

START_TEST(test_welcome_checks)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    pj_welcome *w = sample_welcome(), *w2 = malloc(sizeof *w2);
    char err[256];
    /* 64 layers and 64 shapes are fine; the encoder refuses 65. */
    w->n_layers = 64;
    w->n_shapes = 64;
    for (int i = 0; i < 64; i++) {
        snprintf(w->layers[i].name, sizeof w->layers[i].name, "layer%d", i);
        w->shapes[i] = (uint32_t)i + 1;
    }
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), 0);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_OK);
    ck_assert_str_eq(w2->layers[63].name, "layer63");
    w->n_layers = 65;
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), -EINVAL);
    w->n_layers = 1;
    w->n_shapes = 65;
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), -EINVAL);

    /* n_layers = 65 patched into a valid body */
    w->n_layers = 0;
    w->n_shapes = 0;
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), 0);
    patch32(b.data + 24 + 36, 65);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "n_layers"));
    patch32(b.data + 24 + 36, 0);
    patch32(b.data + 24 + 40, 65);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "n_shapes"));
    /* n_shapes claims more than the body holds */
    patch32(b.data + 24 + 40, 3);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));

    /* An empty layer name is refused. */
    w->n_layers = 1;
    w->layers[0].name[0] = '\0';
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_welcome(&b, 0, w), 0);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_E_PROTO);
    free(w);
    free(w2);
    pj_wbuf_free(&b);
}
END_TEST

/* A WELCOME of more than PJ_WIRE_MAX_LAYERS layers: every one through
 * pj_dec_welcome_all, the first 64 inline as well; the pre-1.2 decoder
 * (pj_dec_welcome) refuses it saying what to do. */
START_TEST(test_welcome_all_layers)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    pj_welcome *w = sample_welcome(), *w2 = malloc(sizeof *w2);
    pj_wire_layer *all = calloc(PJ_WIRE_MAX_LAYERS_ALL + 1, sizeof *all);
    pj_wire_layer *got = calloc(PJ_WIRE_MAX_LAYERS_ALL, sizeof *got);
    ck_assert_ptr_nonnull(all);
    ck_assert_ptr_nonnull(got);
    for (uint32_t i = 0; i <= PJ_WIRE_MAX_LAYERS_ALL; i++) {
        snprintf(all[i].name, sizeof all[i].name, "model.layers.%u.mlp.down_proj", i);
        all[i].n = 1000 + i;
        all[i].k = 64 * (i % 7 + 1);
        all[i].format = (uint8_t)(i % 3 + 1);
    }
    char err[256];
    w->layers_all = all;
    w->n_layers_all = PJ_WIRE_MAX_LAYERS_ALL;
    ck_assert_int_eq(pj_enc_welcome(&b, 7, w), 0);
    memset(got, 0xAB, PJ_WIRE_MAX_LAYERS_ALL * sizeof *got);
    ck_assert_int_eq(pj_dec_welcome_all(b.data + 24, b.len - 24, w2, got, PJ_WIRE_MAX_LAYERS_ALL,
                                        err, sizeof err),
                     PJ_OK);
    ck_assert_uint_eq(w2->n_layers_all, PJ_WIRE_MAX_LAYERS_ALL);
    ck_assert_ptr_eq(w2->layers_all, got);
    ck_assert_ptr_eq(pj_welcome_layers(w2), got);
    ck_assert_uint_eq(pj_welcome_n_layers(w2), PJ_WIRE_MAX_LAYERS_ALL);
    ck_assert_uint_eq(w2->n_layers, PJ_WIRE_MAX_LAYERS);
    for (uint32_t i = 0; i < PJ_WIRE_MAX_LAYERS_ALL; i++) {
        ck_assert_str_eq(got[i].name, all[i].name);
        ck_assert_uint_eq(got[i].n, all[i].n);
        ck_assert_uint_eq(got[i].k, all[i].k);
        ck_assert_uint_eq(got[i].format, all[i].format);
    }
    for (uint32_t i = 0; i < PJ_WIRE_MAX_LAYERS; i++) {
        ck_assert_str_eq(w2->layers[i].name, all[i].name);
        ck_assert_uint_eq(w2->layers[i].n, all[i].n);
        ck_assert_uint_eq(w2->layers[i].k, all[i].k);
        ck_assert_uint_eq(w2->layers[i].format, all[i].format);
    }
    /* What follows the layers still decodes. */
    ck_assert_uint_eq(w2->n_shapes, 6);
    ck_assert_uint_eq(w2->shapes[5], 256);

    /* A client built before the longer list: refused, saying why. */
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_E_PROTO);
    ck_assert_msg(strstr(err, "n_layers 1024 exceeds 64") && strstr(err, "update libprojd"), "%s",
                  err);
    /* An array too short for the list: refused, nothing past it written. */
    memset(got, 0xAB, PJ_WIRE_MAX_LAYERS_ALL * sizeof *got);
    ck_assert_int_eq(pj_dec_welcome_all(b.data + 24, b.len - 24, w2, got, 100, err, sizeof err),
                     PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "n_layers 1024 exceeds 100"));
    ck_assert_uint_eq(((const uint8_t *)got)[0], 0xAB);

    /* 65 layers: the inline array holds 64, the list all 65. */
    w->n_layers_all = 65;
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_welcome(&b, 7, w), 0);
    ck_assert_int_eq(pj_dec_welcome_all(b.data + 24, b.len - 24, w2, got, PJ_WIRE_MAX_LAYERS_ALL,
                                        err, sizeof err),
                     PJ_OK);
    ck_assert_uint_eq(w2->n_layers, 64);
    ck_assert_uint_eq(w2->n_layers_all, 65);
    ck_assert_str_eq(got[64].name, "model.layers.64.mlp.down_proj");
    /* Up to 64, both decoders read the same; the old one points nowhere. */
    w->n_layers_all = 64;
    pj_wbuf_reset(&b);
    ck_assert_int_eq(pj_enc_welcome(&b, 7, w), 0);
    ck_assert_int_eq(pj_dec_welcome(b.data + 24, b.len - 24, w2, err, sizeof err), PJ_OK);
    ck_assert_ptr_null(w2->layers_all);
    ck_assert_uint_eq(pj_welcome_n_layers(w2), 64);
    ck_assert_str_eq(pj_welcome_layers(w2)[63].name, "model.layers.63.mlp.down_proj");

    /* The encoder refuses a list over PJ_WIRE_MAX_LAYERS_ALL. */
    w->n_layers_all = PJ_WIRE_MAX_LAYERS_ALL + 1;
    ck_assert_int_eq(pj_enc_welcome(&b, 7, w), -EINVAL);
    free(all);
    free(got);
    free(w);
    free(w2);
    pj_wbuf_free(&b);
}
END_TEST

static int reg_name(const char *name, size_t nl, char *err, size_t errlen)
{
    uint8_t buf[600];
    memset(buf, 0, sizeof buf);
    buf[0] = PJ_BUF_SHM;
    buf[1] = 64; /* size 64 */
    buf[9] = (uint8_t)nl;
    buf[10] = (uint8_t)(nl >> 8);
    memcpy(buf + 11, name, nl);
    pj_register r;
    int rc = pj_dec_register(buf, 11 + nl, &r, err, errlen);
    if (rc == PJ_OK)
        ck_assert_mem_eq(r.shm_name, name, nl);
    return rc;
}

START_TEST(test_register_checks)
{
    char err[256];
    char name[300];
    ck_assert_int_eq(reg_name("/ok", 3, err, sizeof err), PJ_OK);
    ck_assert_int_eq(reg_name("noslash", 7, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(reg_name("/a/b", 4, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(reg_name("/", 1, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(reg_name("", 0, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(reg_name("/a\0b", 4, err, sizeof err), PJ_E_PROTO);
    /* directory names, which shm_open refuses with a bare EINVAL */
    ck_assert_int_eq(reg_name("/.", 2, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "may not be \"/.\" or \"/..\""));
    ck_assert_int_eq(reg_name("/..", 3, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(reg_name("/...", 4, err, sizeof err), PJ_OK);
    ck_assert_int_eq(reg_name("/.x", 3, err, sizeof err), PJ_OK);
    name[0] = '/';
    memset(name + 1, 'x', sizeof name - 1);
    ck_assert_int_eq(reg_name(name, 255, err, sizeof err), PJ_OK);
    ck_assert_int_eq(reg_name(name, 256, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "name_len"));

    /* Unknown kind */
    uint8_t buf[100] = {3, 1, 0, 0, 0, 0, 0, 0, 0};
    pj_register r;
    ck_assert_int_eq(pj_dec_register(buf, 9, &r, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "kind"));
    buf[0] = 0;
    ck_assert_int_eq(pj_dec_register(buf, 9, &r, err, sizeof err), PJ_E_PROTO);
    /* The encoder writes an unknown kind with no kind part. */
    pj_wbuf b;
    pj_wbuf_init(&b);
    pj_register bad = {.kind = 9, .size = 1};
    ck_assert_int_eq(pj_enc_register(&b, 0, &bad), 0);
    ck_assert_uint_eq(b.len, 24 + 9);
    ck_assert_int_eq(pj_dec_register(b.data + 24, 9, &r, err, sizeof err), PJ_E_PROTO);
    pj_wbuf_free(&b);
}
END_TEST

static int dec_project_flags(uint32_t flags, uint32_t n_ops, uint32_t max_ops, char *err,
                             size_t errlen)
{
    pj_wbuf b;
    pj_wbuf_init(&b);
    fill_ops();
    pj_op *ops = calloc(n_ops ? n_ops : 1, sizeof *ops);
    for (uint32_t i = 0; i < n_ops; i++)
        ops[i] = sample_ops[i % 3];
    pj_project p = {.flags = flags, .n_ops = n_ops, .ops = ops};
    ck_assert_int_eq(pj_enc_project(&b, 0, &p), 0);
    pj_op *out = calloc(max_ops ? max_ops : 1, sizeof *out);
    pj_project d = {.ops = out};
    int rc = pj_dec_project(b.data + 24, b.len - 24, max_ops, &d, err, errlen);
    if (rc == PJ_OK) {
        ck_assert_uint_eq(d.n_ops, n_ops);
        ck_assert_mem_eq(out, ops, n_ops * sizeof *ops);
    }
    free(ops);
    free(out);
    pj_wbuf_free(&b);
    return rc;
}

START_TEST(test_project_checks)
{
    char err[256];
    ck_assert_int_eq(dec_project_flags(0, 1, 64, err, sizeof err), PJ_OK);
    ck_assert_int_eq(dec_project_flags(PJ_PF_WAIT_EVENT, 2, 64, err, sizeof err), PJ_OK);
    ck_assert_int_eq(dec_project_flags(PJ_PF_SIGNAL_EVENT, 2, 64, err, sizeof err), PJ_OK);
    ck_assert_int_eq(
        dec_project_flags(PJ_PF_SIGNAL_EVENT | PJ_PF_ACCEPT_REPLY, 2, 64, err, sizeof err), PJ_OK);
    ck_assert_int_eq(dec_project_flags(PJ_PF_ACCEPT_REPLY, 2, 64, err, sizeof err), PJ_E_FLAGS);
    ck_assert_ptr_nonnull(strstr(err, "ACCEPT_REPLY"));
    ck_assert_int_eq(dec_project_flags(0x8, 1, 64, err, sizeof err), PJ_E_FLAGS);
    ck_assert_int_eq(dec_project_flags(0x80000000u, 1, 64, err, sizeof err), PJ_E_FLAGS);
    ck_assert_int_eq(dec_project_flags(0, 0, 64, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "n_ops is 0"));
    ck_assert_int_eq(dec_project_flags(0, 64, 64, err, sizeof err), PJ_OK);
    ck_assert_int_eq(dec_project_flags(0, 65, 64, err, sizeof err), PJ_E_LIMIT);
    ck_assert_int_eq(dec_project_flags(0, 2, 1, err, sizeof err), PJ_E_LIMIT);

    /* op_flags travel as they are: the daemon judges them with the op's
     * other fields (pj_validate_op, test_daemon_unit), naming the op */
    pj_wbuf b;
    pj_wbuf_init(&b);
    fill_ops();
    sample_ops[1].op_flags = 4;
    pj_project p = sample_project(0);
    ck_assert_int_eq(pj_enc_project(&b, 0, &p), 0);
    pj_op out[MAX_OPS];
    pj_project d = {.ops = out};
    ck_assert_int_eq(pj_dec_project(b.data + 24, b.len - 24, MAX_OPS, &d, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(d.ops[1].op_flags, 4);

    /* A huge n_ops with a huge limit cannot make it read past the body. */
    uint8_t body[8 + 56] = {0};
    patch32(body + 4, 0xffffffffu);
    ck_assert_int_eq(pj_dec_project(body, sizeof body, 0xffffffffu, &d, err, sizeof err),
                     PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "truncated"));
    /* Events announced by flags but missing from the body. */
    uint8_t short_ev[8 + 32] = {0};
    patch32(short_ev, PJ_PF_WAIT_EVENT);
    patch32(short_ev + 4, 1);
    ck_assert_int_eq(pj_dec_project(short_ev, sizeof short_ev, 64, &d, err, sizeof err),
                     PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "wait_event"));
    /* NULL op array */
    pj_project nul = {.ops = NULL};
    fill_ops();
    pj_wbuf_reset(&b);
    p = sample_project(0);
    ck_assert_int_eq(pj_enc_project(&b, 0, &p), 0);
    ck_assert_int_eq(pj_dec_project(b.data + 24, b.len - 24, MAX_OPS, &nul, err, sizeof err),
                     PJ_E_INTERNAL);
    pj_wbuf_free(&b);
}
END_TEST

START_TEST(test_done_error_ping_stats_checks)
{
    char err[256];
    pj_op_result res[4];
    pj_done d = {.ops = res};
    uint8_t body[24 + 8 * 5] = {0};
    patch32(body + 4, 5);
    ck_assert_int_eq(pj_dec_done(body, sizeof body, 4, &d, err, sizeof err), PJ_E_LIMIT);
    pj_done nores = {.ops = NULL};
    ck_assert_int_eq(pj_dec_done(body, sizeof body, 5, &nores, err, sizeof err), PJ_E_INTERNAL);
    patch32(body + 4, 4);
    ck_assert_int_eq(pj_dec_done(body, 24 + 32, 4, &d, err, sizeof err), PJ_OK);
    body[24 + 8 + 6] = 1; /* pad of result 1 */
    ck_assert_int_eq(pj_dec_done(body, 24 + 32, 4, &d, err, sizeof err), PJ_E_PROTO);
    ck_assert_ptr_nonnull(strstr(err, "pad"));
    patch32(body + 4, 0);
    pj_done empty = {.ops = NULL};
    ck_assert_int_eq(pj_dec_done(body, 24, 0, &empty, err, sizeof err), PJ_OK);

    pj_error_msg e;
    uint8_t eb[10 + 1100] = {0};
    eb[8] = 0x01, eb[9] = 0x04; /* msg_len 1025 */
    memset(eb + 10, 'z', 1025);
    ck_assert_int_eq(pj_dec_error(eb, 10 + 1025, &e, err, sizeof err), PJ_E_PROTO);
    eb[8] = 0x00; /* 1024 */
    ck_assert_int_eq(pj_dec_error(eb, 10 + 1024, &e, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(strlen(e.msg), 1024);
    eb[20] = 0;
    ck_assert_int_eq(pj_dec_error(eb, 10 + 1024, &e, err, sizeof err), PJ_E_PROTO);
    /* The encoder cuts long text at 1024 bytes. */
    char longmsg[2000];
    memset(longmsg, 'q', sizeof longmsg - 1);
    longmsg[sizeof longmsg - 1] = '\0';
    pj_wbuf b;
    pj_wbuf_init(&b);
    ck_assert_int_eq(pj_enc_error(&b, 0, 1, 0, longmsg), 0);
    ck_assert_int_eq(pj_dec_error(b.data + 24, b.len - 24, &e, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(strlen(e.msg), 1024);

    uint8_t pl[PJ_WIRE_PING_MAX + 1] = {0};
    ck_assert_int_eq(pj_dec_ping(pl, PJ_WIRE_PING_MAX, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_dec_ping(pl, PJ_WIRE_PING_MAX + 1, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(pj_dec_ping(NULL, 0, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_dec_stats(NULL, 0, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_dec_stats(pl, 1, err, sizeof err), PJ_E_PROTO);

    uint32_t id;
    ck_assert_int_eq(pj_dec_buffer_id(pl, 3, &id, err, sizeof err), PJ_E_PROTO);
    ck_assert_int_eq(pj_dec_buffer_id(pl, 5, &id, err, sizeof err), PJ_E_PROTO);
    pj_wbuf_free(&b);
}
END_TEST

START_TEST(test_names)
{
    ck_assert_str_eq(pj_status_name(PJ_OK), "OK");
    ck_assert_str_eq(pj_status_name(PJ_E_BOUNDS), "E_BOUNDS");
    ck_assert_str_eq(pj_status_name(PJ_E_NOHELLO), "E_NOHELLO");
    ck_assert_str_eq(pj_status_name(999), "E_UNKNOWN");
    ck_assert_str_eq(pj_status_name(-1), "E_UNKNOWN");
    for (int s = PJ_OK; s <= PJ_E_NOHELLO; s++)
        ck_assert_str_ne(pj_status_name(s), "E_UNKNOWN");
    ck_assert_str_eq(pj_msg_type_name(PJ_MSG_HELLO), "HELLO");
    ck_assert_str_eq(pj_msg_type_name(PJ_MSG_STATS_REPLY), "STATS_REPLY");
    ck_assert_str_eq(pj_msg_type_name(PJ_MSG_ERROR), "ERROR");
    ck_assert_str_eq(pj_msg_type_name(0), "UNKNOWN");
    ck_assert_str_eq(pj_msg_type_name(PJ_MSG_RING_ATTACHED), "RING_ATTACHED");
    ck_assert_str_eq(pj_msg_type_name(16), "UNKNOWN");
    ck_assert_str_eq(pj_msg_type_name(-3), "UNKNOWN");
    ck_assert_int_eq(pj_msg_type_valid(0), 0);
    ck_assert_int_eq(pj_msg_type_valid(13), 1);
    ck_assert_int_eq(pj_msg_type_valid(15), 1);
    ck_assert_int_eq(pj_msg_type_valid(16), 0);
}
END_TEST

/* ---- random corruption ----------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}

/* Flipped bytes never crash a decoder; whatever still decodes re-encodes to
 * exactly the same bytes (the encoding is canonical). */
START_TEST(test_random_flips)
{
    long decoded = 0, rejected = 0;
    for (int k = 0; k < K_COUNT; k++) {
        pj_wbuf b;
        pj_wbuf_init(&b);
        encode_kind(k, &b, 5);
        for (int iter = 0; iter < 3000; iter++) {
            size_t len = b.len;
            if (rnd() % 8 == 0)
                len = rnd() % (b.len + 8);
            uint8_t *m = malloc(len ? len : 1);
            for (size_t i = 0; i < len; i++)
                m[i] = i < b.len ? b.data[i] : (uint8_t)rnd();
            int flips = 1 + (int)(rnd() % 4);
            for (int f = 0; f < flips && len; f++) {
                size_t at = rnd() % len;
                /* bias towards the header and the counts near the front */
                if (rnd() % 2)
                    at = rnd() % (len < 48 ? len : 48);
                m[at] ^= (uint8_t)(1u << (rnd() % 8));
                if (rnd() % 4 == 0)
                    m[at] = (uint8_t)rnd();
            }
            char err[256];
            pj_hdr h;
            int rc = pj_dec_hdr(m, len, 1 << 20, &h, err, sizeof err);
            if (rc == PJ_OK && pj_msg_type_valid(h.type)) {
                pj_wbuf again;
                pj_wbuf_init(&again);
                size_t blen = h.body_len;
                uint8_t *body = malloc(blen ? blen : 1);
                memcpy(body, m + PJ_WIRE_HDR_SIZE, blen);
                rc = decode_as(h.type, body, blen, h.req_id, &again, err, sizeof err);
                if (rc == PJ_OK) {
                    decoded++;
                    /* The encoders write no header flags; a REGISTER's RETRY
                     * is set by its sender on the encoded message. */
                    pj_wbuf_set_hdr_flags(&again, h.flags);
                    ck_assert_uint_eq(again.len, len);
                    ck_assert_msg(memcmp(again.data, m, len) == 0,
                                  "kind %d iter %d: decoded message re-encodes differently", k,
                                  iter);
                } else {
                    rejected++;
                    ck_assert_msg(strlen(err) > 0, "rejected without a message");
                }
                free(body);
                pj_wbuf_free(&again);
            } else {
                rejected++;
            }
            /* Also decode the raw tail as every type. */
            if (len > PJ_WIRE_HDR_SIZE) {
                size_t blen = len - PJ_WIRE_HDR_SIZE;
                uint8_t *body = malloc(blen);
                memcpy(body, m + PJ_WIRE_HDR_SIZE, blen);
                for (int t = PJ_MSG_HELLO; t <= PJ_MSG_ERROR; t++)
                    (void)decode_as(t, body, blen, 0, NULL, err, sizeof err);
                free(body);
            }
            free(m);
        }
        pj_wbuf_free(&b);
    }
    /* Both outcomes happened (the test exercised something). */
    ck_assert_int_gt(decoded, 100);
    ck_assert_int_gt(rejected, 100);
}
END_TEST

static Suite *wire_suite(void)
{
    Suite *s = suite_create("wire");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_roundtrip_all);
    tcase_add_test(tc, test_roundtrip_fields);
    tcase_add_test(tc, test_append);
    tcase_add_test(tc, test_layout_header_and_op);
    tcase_add_test(tc, test_layout_sizes);
    tcase_add_test(tc, test_truncation_every_length);
    tcase_add_test(tc, test_truncation_message_text);
    tcase_add_test(tc, test_header_codes);
    tcase_add_test(tc, test_hello_checks);
    tcase_add_test(tc, test_welcome_checks);
    tcase_add_test(tc, test_welcome_all_layers);
    tcase_add_test(tc, test_register_checks);
    tcase_add_test(tc, test_project_checks);
    tcase_add_test(tc, test_done_error_ping_stats_checks);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_random_flips);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(wire_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
