/* wire.c — projd protocol v1: little-endian encode and bounds-checked decode.
 *
 * Decoding goes through a cursor (pj_rd) that knows how many bytes remain;
 * every read asks it first, and every count is compared with the bytes left
 * and with the limits before it is used. Lengths are size_t and products are
 * checked for overflow, so no input can make a decoder read past len.
 */
#include "protocol/wire.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ----------------------------------------------------------------- */

const char *pj_status_name(int status)
{
    switch (status) {
    case PJ_OK:
        return "OK";
    case PJ_E_PROTO:
        return "E_PROTO";
    case PJ_E_VERSION:
        return "E_VERSION";
    case PJ_E_TYPE:
        return "E_TYPE";
    case PJ_E_FLAGS:
        return "E_FLAGS";
    case PJ_E_TOO_BIG:
        return "E_TOO_BIG";
    case PJ_E_LAYER:
        return "E_LAYER";
    case PJ_E_SHAPE:
        return "E_SHAPE";
    case PJ_E_BOUNDS:
        return "E_BOUNDS";
    case PJ_E_BUFFER:
        return "E_BUFFER";
    case PJ_E_LIMIT:
        return "E_LIMIT";
    case PJ_E_AUTH:
        return "E_AUTH";
    case PJ_E_REGISTER:
        return "E_REGISTER";
    case PJ_E_BACKEND:
        return "E_BACKEND";
    case PJ_E_SHUTDOWN:
        return "E_SHUTDOWN";
    case PJ_E_INTERNAL:
        return "E_INTERNAL";
    case PJ_E_NOHELLO:
        return "E_NOHELLO";
    default:
        return "E_UNKNOWN";
    }
}

static const char *const type_names[] = {
    [PJ_MSG_HELLO] = "HELLO",
    [PJ_MSG_WELCOME] = "WELCOME",
    [PJ_MSG_REGISTER] = "REGISTER",
    [PJ_MSG_REGISTERED] = "REGISTERED",
    [PJ_MSG_UNREGISTER] = "UNREGISTER",
    [PJ_MSG_UNREGISTERED] = "UNREGISTERED",
    [PJ_MSG_PROJECT] = "PROJECT",
    [PJ_MSG_DONE] = "DONE",
    [PJ_MSG_STATS] = "STATS",
    [PJ_MSG_STATS_REPLY] = "STATS_REPLY",
    [PJ_MSG_PING] = "PING",
    [PJ_MSG_PONG] = "PONG",
    [PJ_MSG_ERROR] = "ERROR",
    [PJ_MSG_RING_ATTACH] = "RING_ATTACH",
    [PJ_MSG_RING_ATTACHED] = "RING_ATTACHED",
};

int pj_msg_type_valid(int type)
{
    return type >= PJ_MSG_HELLO && type <= PJ_MSG_LAST;
}

const char *pj_msg_type_name(int type)
{
    return pj_msg_type_valid(type) ? type_names[type] : "UNKNOWN";
}

/* ---- encoding -------------------------------------------------------------- */

void pj_wbuf_init(pj_wbuf *b)
{
    memset(b, 0, sizeof *b);
}

void pj_wbuf_free(pj_wbuf *b)
{
    free(b->data);
    memset(b, 0, sizeof *b);
}

void pj_wbuf_reset(pj_wbuf *b)
{
    b->len = 0;
    b->oom = 0;
}

/* Room for n more bytes; sets the sticky oom flag on failure. */
static int wb_reserve(pj_wbuf *b, size_t n)
{
    if (b->oom)
        return -ENOMEM;
    if (n <= b->cap - b->len)
        return 0;
    if (n > SIZE_MAX / 2 - b->len) {
        b->oom = 1;
        return -ENOMEM;
    }
    size_t want = b->len + n;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < want)
        cap *= 2;
    uint8_t *p = realloc(b->data, cap);
    if (!p) {
        b->oom = 1;
        return -ENOMEM;
    }
    b->data = p;
    b->cap = cap;
    return 0;
}

static void wb_put(pj_wbuf *b, const void *p, size_t n)
{
    if (n == 0 || wb_reserve(b, n) != 0)
        return;
    memcpy(b->data + b->len, p, n);
    b->len += n;
}

static void wb_u8(pj_wbuf *b, uint8_t v)
{
    wb_put(b, &v, 1);
}

static void wb_u16(pj_wbuf *b, uint16_t v)
{
    uint8_t t[2] = {(uint8_t)v, (uint8_t)(v >> 8)};
    wb_put(b, t, 2);
}

static void wb_u32(pj_wbuf *b, uint32_t v)
{
    uint8_t t[4];
    for (int i = 0; i < 4; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    wb_put(b, t, 4);
}

static void wb_u64(pj_wbuf *b, uint64_t v)
{
    uint8_t t[8];
    for (int i = 0; i < 8; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    wb_put(b, t, 8);
}

static void put_u32_at(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* Starts a message: writes the header with body_len 0 and returns the
 * offset of the header, for wb_end. */
static size_t wb_begin(pj_wbuf *b, uint16_t type, uint64_t req_id)
{
    size_t at = b->len;
    wb_u32(b, PJ_WIRE_MAGIC);
    wb_u16(b, PJ_WIRE_VERSION);
    wb_u16(b, type);
    wb_u32(b, 0);
    wb_u32(b, 0);
    wb_u64(b, req_id);
    return at;
}

/* Finishes the message started at `at`: patches body_len, or rolls the
 * buffer back to `at` on failure. */
static int wb_end(pj_wbuf *b, size_t at)
{
    if (b->oom || b->len - at < PJ_WIRE_HDR_SIZE) {
        b->len = at;
        return -ENOMEM;
    }
    size_t body = b->len - at - PJ_WIRE_HDR_SIZE;
    if (body > UINT32_MAX) {
        b->len = at;
        return -EINVAL;
    }
    put_u32_at(b->data + at + 12, (uint32_t)body);
    return 0;
}

void pj_wbuf_set_hdr_flags(pj_wbuf *b, uint32_t flags)
{
    if (b->len >= PJ_WIRE_HDR_SIZE)
        put_u32_at(b->data + 8, flags);
}

int pj_enc_hello(pj_wbuf *b, uint64_t req_id, const pj_hello *m)
{
    size_t at = wb_begin(b, PJ_MSG_HELLO, req_id);
    size_t nl = strnlen(m->name, sizeof m->name);
    wb_u16(b, m->ver_min);
    wb_u16(b, m->ver_max);
    wb_u32(b, m->pid);
    wb_u8(b, (uint8_t)nl);
    wb_put(b, m->name, nl);
    return wb_end(b, at);
}

int pj_enc_welcome(pj_wbuf *b, uint64_t req_id, const pj_welcome *m)
{
    const pj_wire_layer *ls = m->layers_all ? m->layers_all : m->layers;
    const uint32_t nls = m->layers_all ? m->n_layers_all : m->n_layers;
    if (nls > (m->layers_all ? PJ_WIRE_MAX_LAYERS_ALL : PJ_WIRE_MAX_LAYERS) ||
        m->n_shapes > PJ_WIRE_MAX_SHAPES)
        return -EINVAL;
    size_t at = wb_begin(b, PJ_MSG_WELCOME, req_id);
    wb_u16(b, m->version);
    wb_u16(b, m->backend);
    wb_put(b, m->device_uuid, PJ_WIRE_UUID_SIZE);
    wb_u32(b, m->max_m);
    wb_u32(b, m->max_ops_per_request);
    wb_u32(b, m->max_buffers);
    wb_u32(b, m->max_message_bytes);
    wb_u32(b, nls);
    for (uint32_t i = 0; i < nls; i++) {
        const pj_wire_layer *l = &ls[i];
        size_t nl = strnlen(l->name, sizeof l->name);
        wb_u8(b, (uint8_t)nl);
        wb_put(b, l->name, nl);
        wb_u32(b, l->n);
        wb_u32(b, l->k);
        wb_u8(b, l->format);
    }
    wb_u32(b, m->n_shapes);
    for (uint32_t i = 0; i < m->n_shapes; i++)
        wb_u32(b, m->shapes[i]);
    return wb_end(b, at);
}

/* A shm name: u16 length, then the bytes. */
static void wb_shm_name(pj_wbuf *b, const char *name, size_t cap)
{
    size_t nl = strnlen(name, cap);
    wb_u16(b, (uint16_t)nl);
    wb_put(b, name, nl);
}

int pj_enc_register(pj_wbuf *b, uint64_t req_id, const pj_register *m)
{
    size_t at = wb_begin(b, PJ_MSG_REGISTER, req_id);
    wb_u8(b, m->kind);
    wb_u64(b, m->size);
    if (m->kind == PJ_BUF_SHM) {
        wb_shm_name(b, m->shm_name, sizeof m->shm_name);
    } else if (m->kind == PJ_BUF_CUDA) {
        wb_put(b, m->ipc_handle, PJ_WIRE_IPC_HANDLE_SIZE);
        wb_put(b, m->device_uuid, PJ_WIRE_UUID_SIZE);
    }
    /* Other kinds: no kind-specific part; the decoder answers PJ_E_PROTO. */
    return wb_end(b, at);
}

int pj_enc_registered(pj_wbuf *b, uint64_t req_id, const pj_registered *m)
{
    size_t at = wb_begin(b, PJ_MSG_REGISTERED, req_id);
    wb_u32(b, m->buffer_id);
    wb_u64(b, m->size);
    return wb_end(b, at);
}

int pj_enc_ring_attach(pj_wbuf *b, uint64_t req_id, const pj_ring_attach *m)
{
    size_t at = wb_begin(b, PJ_MSG_RING_ATTACH, req_id);
    wb_u32(b, m->slots);
    wb_u32(b, m->slot_bytes);
    wb_shm_name(b, m->shm_name, sizeof m->shm_name);
    return wb_end(b, at);
}

int pj_enc_ring_attached(pj_wbuf *b, uint64_t req_id, const pj_ring_attached *m)
{
    size_t at = wb_begin(b, PJ_MSG_RING_ATTACHED, req_id);
    wb_u32(b, m->slots);
    wb_u32(b, m->slot_bytes);
    wb_u32(b, m->spin_us);
    return wb_end(b, at);
}

int pj_enc_unregister(pj_wbuf *b, uint64_t req_id, uint32_t buffer_id)
{
    size_t at = wb_begin(b, PJ_MSG_UNREGISTER, req_id);
    wb_u32(b, buffer_id);
    return wb_end(b, at);
}

int pj_enc_unregistered(pj_wbuf *b, uint64_t req_id, uint32_t buffer_id)
{
    size_t at = wb_begin(b, PJ_MSG_UNREGISTERED, req_id);
    wb_u32(b, buffer_id);
    return wb_end(b, at);
}

int pj_enc_project(pj_wbuf *b, uint64_t req_id, const pj_project *m)
{
    if (m->n_ops && !m->ops)
        return -EINVAL;
    size_t at = wb_begin(b, PJ_MSG_PROJECT, req_id);
    wb_u32(b, m->flags);
    wb_u32(b, m->n_ops);
    if (m->flags & PJ_PF_WAIT_EVENT)
        wb_put(b, m->wait_event, PJ_WIRE_IPC_HANDLE_SIZE);
    if (m->flags & PJ_PF_SIGNAL_EVENT)
        wb_put(b, m->signal_event, PJ_WIRE_IPC_HANDLE_SIZE);
    for (uint32_t i = 0; i < m->n_ops; i++) {
        const pj_op *o = &m->ops[i];
        wb_u32(b, o->layer);
        wb_u32(b, o->m);
        wb_u32(b, o->n);
        wb_u32(b, o->x_buf);
        wb_u64(b, o->x_off);
        wb_u64(b, o->x_ld);
        wb_u32(b, o->y_buf);
        wb_u32(b, o->op_flags);
        wb_u64(b, o->y_off);
        wb_u64(b, o->y_ld);
        if (b->oom)
            break;
    }
    return wb_end(b, at);
}

int pj_enc_done(pj_wbuf *b, uint64_t req_id, const pj_done *m)
{
    if (m->n_ops && !m->ops)
        return -EINVAL;
    size_t at = wb_begin(b, PJ_MSG_DONE, req_id);
    wb_u32(b, (uint32_t)m->status);
    wb_u32(b, m->n_ops);
    wb_u64(b, m->queue_ns);
    wb_u64(b, m->exec_ns);
    for (uint32_t i = 0; i < m->n_ops; i++) {
        wb_u32(b, (uint32_t)m->ops[i].status);
        wb_u16(b, m->ops[i].engine);
        wb_u16(b, 0);
        if (b->oom)
            break;
    }
    return wb_end(b, at);
}

int pj_enc_raw(pj_wbuf *b, uint64_t req_id, uint16_t type, const void *body, size_t len)
{
    if (len > UINT32_MAX || (len && !body))
        return -EINVAL;
    size_t at = wb_begin(b, type, req_id);
    wb_put(b, body, len);
    return wb_end(b, at);
}

int pj_enc_stats(pj_wbuf *b, uint64_t req_id)
{
    return pj_enc_raw(b, req_id, PJ_MSG_STATS, NULL, 0);
}

int pj_enc_stats_reply(pj_wbuf *b, uint64_t req_id, const char *json, size_t len)
{
    return pj_enc_raw(b, req_id, PJ_MSG_STATS_REPLY, json, len);
}

int pj_enc_ping(pj_wbuf *b, uint64_t req_id, const void *payload, size_t len)
{
    return pj_enc_raw(b, req_id, PJ_MSG_PING, payload, len);
}

int pj_enc_pong(pj_wbuf *b, uint64_t req_id, const void *payload, size_t len)
{
    return pj_enc_raw(b, req_id, PJ_MSG_PONG, payload, len);
}

int pj_enc_error(pj_wbuf *b, uint64_t req_id, int32_t code, uint32_t op_index, const char *msg)
{
    size_t ml = msg ? strnlen(msg, PJ_WIRE_MSG_MAX) : 0;
    size_t at = wb_begin(b, PJ_MSG_ERROR, req_id);
    wb_u32(b, (uint32_t)code);
    wb_u32(b, op_index);
    wb_u16(b, (uint16_t)ml);
    wb_put(b, msg, ml);
    return wb_end(b, at);
}

/* ---- decoding -------------------------------------------------------------- */

/* A read cursor over one body. `what` names the message in errors. The
 * first failure writes err; callers return as soon as a read fails. */
typedef struct pj_rd {
    const uint8_t *p;
    size_t len, pos;
    const char *what;
    char *err;
    size_t errlen;
} pj_rd;

static void rd_init(pj_rd *r, const void *body, size_t len, const char *what, char *err,
                    size_t errlen)
{
    r->p = body;
    r->len = body ? len : 0;
    r->pos = 0;
    r->what = what;
    r->err = err;
    r->errlen = errlen;
    if (err && errlen)
        err[0] = '\0';
}

#if defined(__GNUC__)
__attribute__((format(printf, 3, 4)))
#endif
static int
rd_fail(pj_rd *r, int code, const char *fmt, ...)
{
    if (r->err && r->errlen) {
        int n = snprintf(r->err, r->errlen, "%s: ", r->what);
        if (n >= 0 && (size_t)n < r->errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(r->err + n, r->errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return code;
}

/* Takes n bytes for field `field`; NULL (and err written) when the body
 * ends first. The comparison is against the bytes left, so it cannot
 * overflow whatever n is. */
static const uint8_t *rd_take(pj_rd *r, size_t n, const char *field)
{
    if (n > r->len - r->pos) {
        rd_fail(r, PJ_E_PROTO, "truncated: body ends at byte %zu, %s needs %zu bytes at %zu",
                r->len, field, n, r->pos);
        return NULL;
    }
    const uint8_t *q = r->p + r->pos;
    r->pos += n;
    return q;
}

static uint16_t ld16(const uint8_t *q)
{
    return (uint16_t)(q[0] | (q[1] << 8));
}

static uint32_t ld32(const uint8_t *q)
{
    return (uint32_t)q[0] | ((uint32_t)q[1] << 8) | ((uint32_t)q[2] << 16) | ((uint32_t)q[3] << 24);
}

static uint64_t ld64(const uint8_t *q)
{
    return (uint64_t)ld32(q) | ((uint64_t)ld32(q + 4) << 32);
}

static int rd_u8(pj_rd *r, const char *field, uint8_t *v)
{
    const uint8_t *q = rd_take(r, 1, field);
    if (!q)
        return -1;
    *v = q[0];
    return 0;
}

static int rd_u16(pj_rd *r, const char *field, uint16_t *v)
{
    const uint8_t *q = rd_take(r, 2, field);
    if (!q)
        return -1;
    *v = ld16(q);
    return 0;
}

static int rd_u32(pj_rd *r, const char *field, uint32_t *v)
{
    const uint8_t *q = rd_take(r, 4, field);
    if (!q)
        return -1;
    *v = ld32(q);
    return 0;
}

static int rd_u64(pj_rd *r, const char *field, uint64_t *v)
{
    const uint8_t *q = rd_take(r, 8, field);
    if (!q)
        return -1;
    *v = ld64(q);
    return 0;
}

static int rd_bytes(pj_rd *r, const char *field, void *dst, size_t n)
{
    const uint8_t *q = rd_take(r, n, field);
    if (!q)
        return -1;
    memcpy(dst, q, n);
    return 0;
}

/* A length-prefixed string already bounded by max (checked by the caller)
 * into dst (max + 1 bytes), NUL-terminated; embedded NULs are refused. */
static int rd_str(pj_rd *r, const char *field, size_t n, char *dst)
{
    const uint8_t *q = rd_take(r, n, field);
    if (!q)
        return PJ_E_PROTO;
    if (memchr(q, '\0', n))
        return rd_fail(r, PJ_E_PROTO, "%s contains a NUL byte", field);
    memcpy(dst, q, n);
    dst[n] = '\0';
    return PJ_OK;
}

static int rd_end(pj_rd *r)
{
    if (r->pos != r->len)
        return rd_fail(r, PJ_E_PROTO, "trailing bytes: %zu bytes after the end at %zu",
                       r->len - r->pos, r->pos);
    return PJ_OK;
}

uint64_t pj_peek_req_id(const void *msg, size_t len)
{
    const uint8_t *p = msg;
    if (len < PJ_WIRE_HDR_SIZE || ld32(p) != PJ_WIRE_MAGIC)
        return 0;
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[16 + i];
    return v;
}

int pj_dec_hdr(const void *msg, size_t len, size_t max_body, pj_hdr *h, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, msg, len, "header", err, errlen);
    memset(h, 0, sizeof *h);
    if (!msg || len < PJ_WIRE_HDR_SIZE)
        return rd_fail(&r, PJ_E_PROTO, "truncated: message is %zu bytes, header needs %d",
                       msg ? len : 0, PJ_WIRE_HDR_SIZE);
    const uint8_t *q = msg;
    /* Nothing of a header without the magic is believed, its req_id
     * included: the reply to it carries req_id 0 (PROTOCOL.md). */
    uint32_t magic = ld32(q);
    if (magic != PJ_WIRE_MAGIC)
        return rd_fail(&r, PJ_E_PROTO, "bad magic 0x%08x (want 0x%08x)", magic, PJ_WIRE_MAGIC);
    h->magic = magic;
    h->version = ld16(q + 4);
    h->type = ld16(q + 6);
    h->flags = ld32(q + 8);
    h->body_len = ld32(q + 12);
    h->req_id = ld64(q + 16);
    if (h->version != PJ_WIRE_VERSION)
        return rd_fail(&r, PJ_E_VERSION, "version %u not supported (this side speaks %d)",
                       h->version, PJ_WIRE_VERSION);
    if (h->flags != 0 && (h->flags != PJ_HF_RETRY || h->type != PJ_MSG_REGISTER))
        return rd_fail(&r, PJ_E_FLAGS,
                       "flags 0x%x set; v1 defines one header flag, RETRY (0x1), on REGISTER only",
                       h->flags);
    size_t have = len - PJ_WIRE_HDR_SIZE;
    if (h->body_len > have)
        return rd_fail(&r, PJ_E_PROTO, "truncated: body_len %u but %zu body bytes follow",
                       h->body_len, have);
    if (h->body_len < have)
        return rd_fail(&r, PJ_E_PROTO, "trailing bytes: body_len %u but %zu body bytes follow",
                       h->body_len, have);
    if (h->body_len > max_body)
        return rd_fail(&r, PJ_E_TOO_BIG, "body of %u bytes exceeds the limit of %zu", h->body_len,
                       max_body);
    return PJ_OK;
}

int pj_dec_hello(const void *body, size_t len, pj_hello *m, char *err, size_t errlen)
{
    pj_rd r;
    uint8_t nl;
    rd_init(&r, body, len, "HELLO", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u16(&r, "ver_min", &m->ver_min) || rd_u16(&r, "ver_max", &m->ver_max) ||
        rd_u32(&r, "pid", &m->pid) || rd_u8(&r, "name_len", &nl))
        return PJ_E_PROTO;
    if (m->ver_min > m->ver_max)
        return rd_fail(&r, PJ_E_PROTO, "ver_min %u > ver_max %u", m->ver_min, m->ver_max);
    if (nl > PJ_WIRE_NAME_MAX)
        return rd_fail(&r, PJ_E_PROTO, "name_len %u exceeds %d", nl, PJ_WIRE_NAME_MAX);
    int rc = rd_str(&r, "name", nl, m->name);
    if (rc)
        return rc;
    return rd_end(&r);
}

int pj_dec_welcome(const void *body, size_t len, pj_welcome *m, char *err, size_t errlen)
{
    return pj_dec_welcome_all(body, len, m, NULL, 0, err, errlen);
}

int pj_dec_welcome_all(const void *body, size_t len, pj_welcome *m, pj_wire_layer *all,
                       uint32_t cap, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "WELCOME", err, errlen);
    memset(m, 0, sizeof *m);
    const int legacy = all == NULL;
    if (legacy) {
        all = m->layers;
        cap = PJ_WIRE_MAX_LAYERS;
    } else if (cap > PJ_WIRE_MAX_LAYERS_ALL) {
        cap = PJ_WIRE_MAX_LAYERS_ALL;
    }
    uint32_t n_all;
    if (rd_u16(&r, "version", &m->version) || rd_u16(&r, "backend", &m->backend) ||
        rd_bytes(&r, "device_uuid", m->device_uuid, PJ_WIRE_UUID_SIZE) ||
        rd_u32(&r, "max_m", &m->max_m) ||
        rd_u32(&r, "max_ops_per_request", &m->max_ops_per_request) ||
        rd_u32(&r, "max_buffers", &m->max_buffers) ||
        rd_u32(&r, "max_message_bytes", &m->max_message_bytes) || rd_u32(&r, "n_layers", &n_all))
        return PJ_E_PROTO;
    if (n_all > cap)
        return rd_fail(&r, PJ_E_PROTO, "n_layers %u exceeds %u%s", n_all, cap,
                       legacy ? " (this client predates WELCOMEs of more layers: update libprojd)"
                              : "");
    for (uint32_t i = 0; i < n_all; i++) {
        pj_wire_layer *l = &all[i];
        uint8_t nl;
        if (rd_u8(&r, "layer name_len", &nl))
            return PJ_E_PROTO;
        if (nl == 0 || nl > PJ_WIRE_NAME_MAX)
            return rd_fail(&r, PJ_E_PROTO, "layer %u: name_len %u not in 1..%d", i, nl,
                           PJ_WIRE_NAME_MAX);
        int rc = rd_str(&r, "layer name", nl, l->name);
        if (rc)
            return rc;
        if (rd_u32(&r, "layer n", &l->n) || rd_u32(&r, "layer k", &l->k) ||
            rd_u8(&r, "layer format", &l->format))
            return PJ_E_PROTO;
    }
    if (!legacy)
        memcpy(m->layers, all,
               (n_all < PJ_WIRE_MAX_LAYERS ? n_all : PJ_WIRE_MAX_LAYERS) * sizeof *all);
    if (rd_u32(&r, "n_shapes", &m->n_shapes))
        return PJ_E_PROTO;
    if (m->n_shapes > PJ_WIRE_MAX_SHAPES) {
        uint32_t n = m->n_shapes;
        m->n_shapes = 0;
        return rd_fail(&r, PJ_E_PROTO, "n_shapes %u exceeds %d", n, PJ_WIRE_MAX_SHAPES);
    }
    /* n_shapes <= 64, so the product cannot overflow. */
    if ((size_t)m->n_shapes * 4 > r.len - r.pos)
        return rd_fail(&r, PJ_E_PROTO,
                       "truncated: body ends at byte %zu, %u shapes need %zu bytes at %zu", r.len,
                       m->n_shapes, (size_t)m->n_shapes * 4, r.pos);
    for (uint32_t i = 0; i < m->n_shapes; i++)
        rd_u32(&r, "shape", &m->shapes[i]);
    /* The layer counts and the list last: a failed decode leaves none. */
    int rc = rd_end(&r);
    if (rc == PJ_OK) {
        m->n_layers = n_all < PJ_WIRE_MAX_LAYERS ? n_all : PJ_WIRE_MAX_LAYERS;
        m->n_layers_all = n_all;
        m->layers_all = legacy ? NULL : all;
    }
    return rc;
}

/* A POSIX shm name as shm_open wants it: "/" then at least one character,
 * no other '/', no NUL (checked by rd_str). */
static int check_shm_name(pj_rd *r, const char *name, size_t nl)
{
    if (nl < 2 || name[0] != '/')
        return rd_fail(r, PJ_E_PROTO, "shm name must be '/' followed by at least one character");
    if (memchr(name + 1, '/', nl - 1))
        return rd_fail(r, PJ_E_PROTO, "shm name has a '/' after the first character");
    /* shm_open refuses them (they name directories), with a bare EINVAL. */
    if ((nl == 2 && name[1] == '.') || (nl == 3 && name[1] == '.' && name[2] == '.'))
        return rd_fail(r, PJ_E_PROTO, "shm name may not be \"/.\" or \"/..\"");
    /* Names go into ERROR messages and logs, which are one line each. */
    for (size_t i = 1; i < nl; i++)
        if ((unsigned char)name[i] < 0x20 || (unsigned char)name[i] == 0x7f)
            return rd_fail(r, PJ_E_PROTO, "shm name has a control byte 0x%02x at %zu",
                           (unsigned char)name[i], i);
    return PJ_OK;
}

/* A shm name as wb_shm_name writes it, into name (PJ_WIRE_SHM_NAME_MAX + 1
 * bytes). */
static int rd_shm_name(pj_rd *r, char *name)
{
    uint16_t nl;
    if (rd_u16(r, "name_len", &nl))
        return PJ_E_PROTO;
    if (nl > PJ_WIRE_SHM_NAME_MAX)
        return rd_fail(r, PJ_E_PROTO, "name_len %u exceeds %d", nl, PJ_WIRE_SHM_NAME_MAX);
    int rc = rd_str(r, "shm name", nl, name);
    if (rc)
        return rc;
    return check_shm_name(r, name, nl);
}

int pj_dec_register(const void *body, size_t len, pj_register *m, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "REGISTER", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u8(&r, "kind", &m->kind) || rd_u64(&r, "size", &m->size))
        return PJ_E_PROTO;
    if (m->kind == PJ_BUF_SHM) {
        int rc = rd_shm_name(&r, m->shm_name);
        if (rc)
            return rc;
    } else if (m->kind == PJ_BUF_CUDA) {
        if (rd_bytes(&r, "ipc_handle", m->ipc_handle, PJ_WIRE_IPC_HANDLE_SIZE) ||
            rd_bytes(&r, "device_uuid", m->device_uuid, PJ_WIRE_UUID_SIZE))
            return PJ_E_PROTO;
    } else {
        return rd_fail(&r, PJ_E_PROTO, "unknown buffer kind %u", m->kind);
    }
    return rd_end(&r);
}

int pj_dec_ring_attach(const void *body, size_t len, pj_ring_attach *m, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "RING_ATTACH", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u32(&r, "slots", &m->slots) || rd_u32(&r, "slot_bytes", &m->slot_bytes))
        return PJ_E_PROTO;
    int rc = rd_shm_name(&r, m->shm_name);
    if (rc)
        return rc;
    return rd_end(&r);
}

int pj_dec_ring_attached(const void *body, size_t len, pj_ring_attached *m, char *err,
                         size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "RING_ATTACHED", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u32(&r, "slots", &m->slots) || rd_u32(&r, "slot_bytes", &m->slot_bytes) ||
        rd_u32(&r, "spin_us", &m->spin_us))
        return PJ_E_PROTO;
    return rd_end(&r);
}

int pj_dec_registered(const void *body, size_t len, pj_registered *m, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "REGISTERED", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u32(&r, "buffer_id", &m->buffer_id) || rd_u64(&r, "size", &m->size))
        return PJ_E_PROTO;
    return rd_end(&r);
}

int pj_dec_buffer_id(const void *body, size_t len, uint32_t *id, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "buffer id", err, errlen);
    *id = 0;
    if (rd_u32(&r, "buffer_id", id))
        return PJ_E_PROTO;
    return rd_end(&r);
}

int pj_dec_project(const void *body, size_t len, uint32_t max_ops, pj_project *m, char *err,
                   size_t errlen)
{
    pj_rd r;
    pj_op *ops = m->ops;
    rd_init(&r, body, len, "PROJECT", err, errlen);
    memset(m, 0, sizeof *m);
    m->ops = ops;
    if (rd_u32(&r, "flags", &m->flags) || rd_u32(&r, "n_ops", &m->n_ops))
        return PJ_E_PROTO;
    if (m->flags & ~PJ_PF_KNOWN)
        return rd_fail(&r, PJ_E_FLAGS, "unknown flags 0x%x", m->flags & ~PJ_PF_KNOWN);
    if ((m->flags & PJ_PF_ACCEPT_REPLY) && !(m->flags & PJ_PF_SIGNAL_EVENT))
        return rd_fail(&r, PJ_E_FLAGS, "ACCEPT_REPLY needs SIGNAL_EVENT");
    uint32_t n_ops = m->n_ops;
    if (n_ops == 0)
        return rd_fail(&r, PJ_E_PROTO, "n_ops is 0");
    if (n_ops > max_ops) {
        m->n_ops = 0;
        return rd_fail(&r, PJ_E_LIMIT, "n_ops %u exceeds the limit of %u", n_ops, max_ops);
    }
    if (!ops) {
        m->n_ops = 0;
        return rd_fail(&r, PJ_E_INTERNAL, "no op array given");
    }
    if ((m->flags & PJ_PF_WAIT_EVENT) &&
        rd_bytes(&r, "wait_event", m->wait_event, PJ_WIRE_IPC_HANDLE_SIZE))
        return PJ_E_PROTO;
    if ((m->flags & PJ_PF_SIGNAL_EVENT) &&
        rd_bytes(&r, "signal_event", m->signal_event, PJ_WIRE_IPC_HANDLE_SIZE))
        return PJ_E_PROTO;
    /* The ops must fill the rest exactly. Dividing instead of multiplying
     * keeps the comparison free of overflow on any size_t. */
    size_t left = r.len - r.pos;
    if (left / PJ_WIRE_OP_SIZE < n_ops) {
        size_t whole = left / PJ_WIRE_OP_SIZE;
        return rd_fail(&r, PJ_E_PROTO,
                       "truncated: op %zu: body ends at byte %zu, op needs %d bytes at %zu", whole,
                       r.len, PJ_WIRE_OP_SIZE, r.pos + whole * PJ_WIRE_OP_SIZE);
    }
    if ((size_t)n_ops * PJ_WIRE_OP_SIZE < left)
        return rd_fail(&r, PJ_E_PROTO, "trailing bytes: %zu bytes after %u ops",
                       left - (size_t)n_ops * PJ_WIRE_OP_SIZE, n_ops);
    for (uint32_t i = 0; i < n_ops; i++) {
        const uint8_t *q = rd_take(&r, PJ_WIRE_OP_SIZE, "op");
        pj_op *o = &ops[i];
        o->layer = ld32(q);
        o->m = ld32(q + 4);
        o->n = ld32(q + 8);
        o->x_buf = ld32(q + 12);
        o->x_off = ld64(q + 16);
        o->x_ld = ld64(q + 24);
        o->y_buf = ld32(q + 32);
        o->op_flags = ld32(q + 36);
        o->y_off = ld64(q + 40);
        o->y_ld = ld64(q + 48);
        /* op_flags are judged with the op's other fields (the daemon's
         * pj_validate_op), so that the ERROR names the op. */
    }
    return rd_end(&r);
}

int pj_dec_done(const void *body, size_t len, uint32_t max_ops, pj_done *m, char *err,
                size_t errlen)
{
    pj_rd r;
    pj_op_result *ops = m->ops;
    uint32_t st;
    rd_init(&r, body, len, "DONE", err, errlen);
    memset(m, 0, sizeof *m);
    m->ops = ops;
    if (rd_u32(&r, "status", &st) || rd_u32(&r, "n_ops", &m->n_ops) ||
        rd_u64(&r, "queue_ns", &m->queue_ns) || rd_u64(&r, "exec_ns", &m->exec_ns))
        return PJ_E_PROTO;
    m->status = (int32_t)st;
    uint32_t n_ops = m->n_ops;
    if (n_ops > max_ops) {
        m->n_ops = 0;
        return rd_fail(&r, PJ_E_LIMIT, "n_ops %u exceeds the limit of %u", n_ops, max_ops);
    }
    if (n_ops && !ops) {
        m->n_ops = 0;
        return rd_fail(&r, PJ_E_INTERNAL, "no result array given");
    }
    size_t left = r.len - r.pos;
    if (left / 8 < n_ops)
        return rd_fail(&r, PJ_E_PROTO, "truncated: %u results need %zu bytes at %zu, %zu remain",
                       n_ops, (size_t)n_ops * 8, r.pos, left);
    if (left != (size_t)n_ops * 8)
        return rd_fail(&r, PJ_E_PROTO, "trailing bytes: %zu bytes after %u results",
                       left - (size_t)n_ops * 8, n_ops);
    for (uint32_t i = 0; i < n_ops; i++) {
        const uint8_t *q = rd_take(&r, 8, "result");
        ops[i].status = (int32_t)ld32(q);
        ops[i].engine = ld16(q + 4);
        if (ld16(q + 6) != 0)
            return rd_fail(&r, PJ_E_PROTO, "result %u: pad is not 0", i);
    }
    return rd_end(&r);
}

int pj_dec_error(const void *body, size_t len, pj_error_msg *m, char *err, size_t errlen)
{
    pj_rd r;
    uint32_t code;
    uint16_t ml;
    rd_init(&r, body, len, "ERROR", err, errlen);
    memset(m, 0, sizeof *m);
    if (rd_u32(&r, "code", &code) || rd_u32(&r, "op_index", &m->op_index) ||
        rd_u16(&r, "msg_len", &ml))
        return PJ_E_PROTO;
    m->code = (int32_t)code;
    if (ml > PJ_WIRE_MSG_MAX)
        return rd_fail(&r, PJ_E_PROTO, "msg_len %u exceeds %d", ml, PJ_WIRE_MSG_MAX);
    int rc = rd_str(&r, "msg", ml, m->msg);
    if (rc)
        return rc;
    return rd_end(&r);
}

int pj_dec_stats(const void *body, size_t len, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "STATS", err, errlen);
    return rd_end(&r);
}

int pj_dec_ping(const void *body, size_t len, char *err, size_t errlen)
{
    pj_rd r;
    rd_init(&r, body, len, "PING", err, errlen);
    if (len > PJ_WIRE_PING_MAX)
        return rd_fail(&r, PJ_E_PROTO, "payload of %zu bytes exceeds %d", len, PJ_WIRE_PING_MAX);
    return PJ_OK;
}
