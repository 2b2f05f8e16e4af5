/* wire.h — projd protocol v1: message layout, encode and decode.
 *
 * Pure bytes: no nng, no allocation on decode. Every message is a 24-byte
 * header followed by body_len bytes; all integers little-endian. Decoders
 * check the header type, the length and every count against the bytes that
 * are there (and against caller limits) before reading anything, so any byte
 * string is safe to hand them. protocol/PROTOCOL.md is the normative text.
 */
#ifndef PJ_WIRE_H
#define PJ_WIRE_H

#include <stddef.h>
#include <stdint.h>

#define PJ_WIRE_MAGIC    0x31444a50u /* "PJD1" as a little-endian u32 */
#define PJ_WIRE_VERSION  1
#define PJ_WIRE_HDR_SIZE 24

typedef enum pj_msg_type {
    PJ_MSG_HELLO = 1,
    PJ_MSG_WELCOME = 2,
    PJ_MSG_REGISTER = 3,
    PJ_MSG_REGISTERED = 4,
    PJ_MSG_UNREGISTER = 5,
    PJ_MSG_UNREGISTERED = 6,
    PJ_MSG_PROJECT = 7,
    PJ_MSG_DONE = 8,
    PJ_MSG_STATS = 9,
    PJ_MSG_STATS_REPLY = 10,
    PJ_MSG_PING = 11,
    PJ_MSG_PONG = 12,
    PJ_MSG_ERROR = 13,
    PJ_MSG_RING_ATTACH = 14,
    PJ_MSG_RING_ATTACHED = 15,
} pj_msg_type;

#define PJ_MSG_LAST PJ_MSG_RING_ATTACHED

/* Status / error codes carried by ERROR and DONE. Stable numbers. */
typedef enum pj_status {
    PJ_OK = 0,
    PJ_E_PROTO = 1,     /* malformed message: truncated, bad magic, bad counts */
    PJ_E_VERSION = 2,   /* unsupported protocol version */
    PJ_E_TYPE = 3,      /* unknown message type */
    PJ_E_FLAGS = 4,     /* unknown flag bits */
    PJ_E_TOO_BIG = 5,   /* message larger than the daemon's limit */
    PJ_E_LAYER = 6,     /* unknown layer */
    PJ_E_SHAPE = 7,     /* m or n out of range, stride too small */
    PJ_E_BOUNDS = 8,    /* offset/length past a buffer, overflow, misalignment */
    PJ_E_BUFFER = 9,    /* unknown or stale buffer id */
    PJ_E_LIMIT = 10,    /* too many buffers, ops, connections, requests in flight */
    PJ_E_AUTH = 11,     /* peer not allowed */
    PJ_E_REGISTER = 12, /* buffer could not be mapped/opened, wrong device, size */
    PJ_E_BACKEND = 13,  /* execution failed (CUDA error, ...) */
    PJ_E_SHUTDOWN = 14, /* daemon is draining */
    PJ_E_INTERNAL = 15, /* out of memory or a bug */
    PJ_E_NOHELLO = 16,  /* request before HELLO on this connection */
} pj_status;

const char *pj_status_name(int status); /* "E_BOUNDS", ...; "E_UNKNOWN" otherwise */

/* "HELLO", "PROJECT", ...; "UNKNOWN" for a type v1 does not define. */
const char *pj_msg_type_name(int type);
/* 1 when v1 defines the type, else 0 (the caller answers PJ_E_TYPE). */
int pj_msg_type_valid(int type);

/* Header flags. RETRY (REGISTER only): this REGISTER repeats the one the
 * client sent with the same req_id and got no reply to; the daemon answers
 * with the buffer that one registered, if it did (PROTOCOL.md). */
#define PJ_HF_RETRY 0x1u

typedef struct pj_hdr {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint32_t flags; /* PJ_HF_RETRY on REGISTER; else 0 */
    uint32_t body_len;
    uint64_t req_id; /* echoed in the reply */
} pj_hdr;

/* ---- message bodies ------------------------------------------------------ */

#define PJ_WIRE_NAME_MAX        63
#define PJ_WIRE_SHM_NAME_MAX    255
#define PJ_WIRE_MSG_MAX         1024
#define PJ_WIRE_UUID_SIZE       16
#define PJ_WIRE_IPC_HANDLE_SIZE 64
/* A WELCOME carries up to PJ_WIRE_MAX_LAYERS_ALL layers; pj_welcome holds
 * the first PJ_WIRE_MAX_LAYERS inline (the size libprojd.so.1's projd_info
 * was released with) and points at the whole list (layers_all). */
#define PJ_WIRE_MAX_LAYERS     64
#define PJ_WIRE_MAX_LAYERS_ALL 1024
#define PJ_WIRE_MAX_SHAPES     64
#define PJ_WIRE_PING_MAX       256 /* PING/PONG payload bytes */

typedef struct pj_hello {
    uint16_t ver_min, ver_max;
    uint32_t pid;
    char name[PJ_WIRE_NAME_MAX + 1]; /* client's name, for logs */
} pj_hello;

typedef struct pj_wire_layer {
    char name[PJ_WIRE_NAME_MAX + 1];
    uint32_t n; /* rows a request may use (max n) */
    uint32_t k;
    uint8_t format; /* pj_format of refgemm.h */
} pj_wire_layer;

typedef struct pj_welcome {
    uint16_t version;
    uint16_t backend;                       /* 1 cpu, 2 cuda (pj_backend_kind) */
    uint8_t device_uuid[PJ_WIRE_UUID_SIZE]; /* zeros on cpu */
    uint32_t max_m;
    uint32_t max_ops_per_request;
    uint32_t max_buffers;
    uint32_t max_message_bytes;
    uint32_t n_layers; /* in layers[]: the first min(n_layers_all, PJ_WIRE_MAX_LAYERS) */
    pj_wire_layer layers[PJ_WIRE_MAX_LAYERS];
    uint32_t n_shapes;
    uint32_t shapes[PJ_WIRE_MAX_SHAPES];
    /* Every layer, layers[] first: n_layers_all of them at layers_all, or
     * at layers when layers_all is NULL. Appended after the first release,
     * so that a program built against the shorter struct reads the same
     * offsets. The encoder sends layers_all when it is set, else layers[];
     * pj_dec_welcome_all points it at the caller's array, pj_dec_welcome
     * leaves it NULL (no pointer into the struct itself, which a copy of
     * the struct would keep following). */
    uint32_t n_layers_all;
    const pj_wire_layer *layers_all;
} pj_welcome;

/* The whole layer list of a WELCOME, pj_welcome_n_layers entries (a
 * struct filled by hand, with layers[] only, counts n_layers). */
static inline const pj_wire_layer *pj_welcome_layers(const pj_welcome *w)
{
    return w->layers_all ? w->layers_all : w->layers;
}

static inline uint32_t pj_welcome_n_layers(const pj_welcome *w)
{
    return w->layers_all ? w->n_layers_all : w->n_layers;
}

typedef enum pj_buf_kind {
    PJ_BUF_SHM = 1,  /* POSIX shared memory object, by name */
    PJ_BUF_CUDA = 2, /* CUDA IPC handle of an allocation's base */
} pj_buf_kind;

typedef struct pj_register {
    uint8_t kind;
    uint64_t size;
    char shm_name[PJ_WIRE_SHM_NAME_MAX + 1];     /* PJ_BUF_SHM */
    uint8_t ipc_handle[PJ_WIRE_IPC_HANDLE_SIZE]; /* PJ_BUF_CUDA */
    uint8_t device_uuid[PJ_WIRE_UUID_SIZE];      /* PJ_BUF_CUDA */
} pj_register;

typedef struct pj_registered {
    uint32_t buffer_id;
    uint64_t size;
} pj_registered;

/* One projection. Offsets in bytes from the buffer's start, strides in
 * elements (bf16). x is m rows of k, y is m rows of n. */
typedef struct pj_op {
    uint32_t layer, m, n;
    uint32_t x_buf;
    uint64_t x_off, x_ld;
    uint32_t y_buf;
    uint32_t op_flags; /* none defined in v1: must be 0 */
    uint64_t y_off, y_ld;
} pj_op;
#define PJ_WIRE_OP_SIZE 56

/* PROJECT flags. */
#define PJ_PF_WAIT_EVENT   0x1u /* wait on a client IPC event before reading x */
#define PJ_PF_SIGNAL_EVENT 0x2u /* record a client IPC event after writing y */
#define PJ_PF_ACCEPT_REPLY 0x4u /* reply at launch (needs SIGNAL_EVENT) */
#define PJ_PF_KNOWN        (PJ_PF_WAIT_EVENT | PJ_PF_SIGNAL_EVENT | PJ_PF_ACCEPT_REPLY)

typedef struct pj_project {
    uint32_t flags;
    uint32_t n_ops;
    uint8_t wait_event[PJ_WIRE_IPC_HANDLE_SIZE];   /* if PJ_PF_WAIT_EVENT */
    uint8_t signal_event[PJ_WIRE_IPC_HANDLE_SIZE]; /* if PJ_PF_SIGNAL_EVENT */
    pj_op *ops; /* decode: caller's array of at least max_ops entries */
} pj_project;

typedef struct pj_op_result {
    int32_t status;
    uint16_t engine; /* engine id that ran it (backend-defined, for stats) */
} pj_op_result;

typedef struct pj_done {
    int32_t status; /* PJ_OK, or the first failing op's status */
    uint32_t n_ops;
    uint64_t queue_ns; /* daemon: received -> started */
    uint64_t exec_ns;  /* daemon: started -> finished */
    pj_op_result *ops; /* decode: caller's array of at least max_ops entries */
} pj_done;

typedef struct pj_error_msg {
    int32_t code;
    uint32_t op_index; /* 0xffffffff when not about one op */
    char msg[PJ_WIRE_MSG_MAX + 1];
} pj_error_msg;

/* RING_ATTACH: the client's shared-memory ring (protocol/ring.h). */
typedef struct pj_ring_attach {
    uint32_t slots, slot_bytes;
    char shm_name[PJ_WIRE_SHM_NAME_MAX + 1];
} pj_ring_attach;

/* RING_ATTACHED: what the daemon will do with it. */
typedef struct pj_ring_attached {
    uint32_t slots, slot_bytes;
    uint32_t spin_us; /* how long the daemon's poller spins before it sleeps */
} pj_ring_attached;

/* ---- encoding -------------------------------------------------------------
 * A growable byte buffer. Encoders append a whole message (header included)
 * and return 0 or -ENOMEM; the header's body_len is filled in. They write
 * what they are given without judging it (so tests can build messages the
 * decoders reject); only what the wire cannot represent is refused with
 * -EINVAL (more than 64 layers or shapes, a body over 4 GiB). Strings are
 * read up to their array's size (strnlen); ERROR text is cut at 1024 bytes.
 * On failure b->len is back where it was. */
typedef struct pj_wbuf {
    uint8_t *data;
    size_t len, cap;
    int oom; /* sticky: an append failed */
} pj_wbuf;

void pj_wbuf_init(pj_wbuf *b);
void pj_wbuf_free(pj_wbuf *b);
void pj_wbuf_reset(pj_wbuf *b);
/* Sets the header flags of the message b starts with (the encoders write
 * 0; a REGISTER sent again carries PJ_HF_RETRY). A no-op on a buffer
 * shorter than a header. */
void pj_wbuf_set_hdr_flags(pj_wbuf *b, uint32_t flags);

int pj_enc_hello(pj_wbuf *b, uint64_t req_id, const pj_hello *m);
int pj_enc_welcome(pj_wbuf *b, uint64_t req_id, const pj_welcome *m);
int pj_enc_register(pj_wbuf *b, uint64_t req_id, const pj_register *m);
int pj_enc_registered(pj_wbuf *b, uint64_t req_id, const pj_registered *m);
int pj_enc_unregister(pj_wbuf *b, uint64_t req_id, uint32_t buffer_id);
int pj_enc_unregistered(pj_wbuf *b, uint64_t req_id, uint32_t buffer_id);
int pj_enc_project(pj_wbuf *b, uint64_t req_id, const pj_project *m);
int pj_enc_done(pj_wbuf *b, uint64_t req_id, const pj_done *m);
int pj_enc_stats(pj_wbuf *b, uint64_t req_id);
int pj_enc_stats_reply(pj_wbuf *b, uint64_t req_id, const char *json, size_t len);
int pj_enc_ping(pj_wbuf *b, uint64_t req_id, const void *payload, size_t len);
int pj_enc_pong(pj_wbuf *b, uint64_t req_id, const void *payload, size_t len);
int pj_enc_error(pj_wbuf *b, uint64_t req_id, int32_t code, uint32_t op_index, const char *msg);
int pj_enc_ring_attach(pj_wbuf *b, uint64_t req_id, const pj_ring_attach *m);
int pj_enc_ring_attached(pj_wbuf *b, uint64_t req_id, const pj_ring_attached *m);
/* Any type with an arbitrary body (tests build unknown types and bad bodies
 * with it). -EINVAL when len does not fit the u32 body_len. */
int pj_enc_raw(pj_wbuf *b, uint64_t req_id, uint16_t type, const void *body, size_t len);

/* ---- decoding -------------------------------------------------------------
 * All decoders return a pj_status: PJ_OK, or the code to send back, with a
 * one-line reason in err ("PROJECT: op 3: body ends at byte 180, op needs 56
 * bytes at 168"). None allocates; none reads past len. */

/* Header only: checks magic, version (PJ_E_VERSION), header flags
 * (PJ_E_FLAGS), body_len == len - 24 (PJ_E_PROTO) and body_len <= max_body
 * (PJ_E_TOO_BIG). On PJ_E_VERSION and later errors *h is filled so the
 * reply can echo req_id. */
int pj_dec_hdr(const void *msg, size_t len, size_t max_body, pj_hdr *h, char *err, size_t errlen);

/* The header's req_id without the other checks (0 when len is shorter than a
 * header or the magic is wrong: a header without the magic is not believed,
 * PROTOCOL.md): for answering, or matching, a message that may not decode. */
uint64_t pj_peek_req_id(const void *msg, size_t len);

int pj_dec_hello(const void *body, size_t len, pj_hello *m, char *err, size_t errlen);
/* Up to PJ_WIRE_MAX_LAYERS layers; a WELCOME with more is PJ_E_PROTO
 * (what a client built before the longer list says, by name). */
int pj_dec_welcome(const void *body, size_t len, pj_welcome *m, char *err, size_t errlen);
/* Up to cap layers (at most PJ_WIRE_MAX_LAYERS_ALL) into all[], the first
 * PJ_WIRE_MAX_LAYERS of them also into m->layers; m->layers_all = all. */
int pj_dec_welcome_all(const void *body, size_t len, pj_welcome *m, pj_wire_layer *all,
                       uint32_t cap, char *err, size_t errlen);
int pj_dec_register(const void *body, size_t len, pj_register *m, char *err, size_t errlen);
int pj_dec_registered(const void *body, size_t len, pj_registered *m, char *err, size_t errlen);
int pj_dec_buffer_id(const void *body, size_t len, uint32_t *id, char *err, size_t errlen);
/* n_ops > max_ops -> PJ_E_LIMIT. m->ops must hold max_ops entries. */
int pj_dec_project(const void *body, size_t len, uint32_t max_ops, pj_project *m, char *err,
                   size_t errlen);
int pj_dec_done(const void *body, size_t len, uint32_t max_ops, pj_done *m, char *err,
                size_t errlen);
int pj_dec_error(const void *body, size_t len, pj_error_msg *m, char *err, size_t errlen);
/* STATS: the body must be empty. */
int pj_dec_stats(const void *body, size_t len, char *err, size_t errlen);
/* PING and PONG: payload of at most PJ_WIRE_PING_MAX bytes (it is the body). */
int pj_dec_ping(const void *body, size_t len, char *err, size_t errlen);
/* RING_ATTACH: the name follows REGISTER's rules; the geometry is only
 * decoded here (protocol/ring.h checks it). */
int pj_dec_ring_attach(const void *body, size_t len, pj_ring_attach *m, char *err, size_t errlen);
int pj_dec_ring_attached(const void *body, size_t len, pj_ring_attached *m, char *err,
                         size_t errlen);

#endif
