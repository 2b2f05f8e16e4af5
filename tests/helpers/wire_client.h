/* wire_client.h — a bare protocol client for the daemon's tests: raw nng
 * REQ + the protocol/wire encoders, so tests can send exactly the bytes they
 * want (malformed ones included) without the client library in the way.
 *
 * Calls return a pj_status (>= 0: PJ_OK, or the code of the ERROR reply,
 * whose text is kept in c->err) or a negative errno for a transport failure
 * (-ETIMEDOUT when no reply came within the client's timeout). Not
 * thread-safe; one client per thread.
 */
#ifndef PJ_TEST_WIRE_CLIENT_H
#define PJ_TEST_WIRE_CLIENT_H

#include <nng/nng.h>
#include <stddef.h>
#include <stdint.h>

#include "protocol/ring.h"
#include "protocol/wire.h"

typedef struct cJSON cJSON;

/* A POSIX shm object of size bytes, created and mapped here. */
typedef struct pjt_shm {
    char name[64];
    void *p;
    size_t size;
    int fd;
} pjt_shm;

typedef struct pjt_client {
    nng_socket sock;
    nng_dialer dialer; /* closed before the socket (see pjt_close) */
    int open;
    int timeout_ms;
    uint64_t next_id;
    pj_wbuf wb;
    nng_msg *reply; /* the last reply (owned) */
    pj_hdr rh;      /* its header */
    const uint8_t *body;
    pj_error_msg err;   /* the last ERROR */
    pj_welcome welcome; /* from hello; welcome.layers_all: every layer */
    pj_wire_layer *layers_all;
    /* The shared-memory ring, once pjt_ring_attach succeeded: PROJECT and
     * PING go through it from then on. */
    int use_ring;
    pj_ring ring;
    pjt_shm ring_shm;
} pjt_client;

/* Dial url (retrying until timeout_ms) and set the receive timeout. */
int pjt_connect(pjt_client *c, const char *url, int timeout_ms);
void pjt_close(pjt_client *c);

/* Send bytes as they are and wait for the reply (c->rh, c->body). Returns
 * 0 or a negative errno; -EPROTO when the reply's header does not decode. */
int pjt_roundtrip(pjt_client *c, const void *msg, size_t len);

/* Send c->wb (built by the caller) and classify the reply: PJ_OK when its
 * type is want_type, the ERROR code, or -EPROTO for anything else. */
int pjt_call(pjt_client *c, int want_type);

int pjt_hello(pjt_client *c, const char *name);
int pjt_ping(pjt_client *c);
int pjt_register_shm(pjt_client *c, const char *shm_name, uint64_t size, uint32_t *id);
int pjt_register_raw(pjt_client *c, const pj_register *r, uint32_t *id);
int pjt_unregister(pjt_client *c, uint32_t id);
/* PROJECT; on PJ_OK, *done (and res, n_ops entries) hold the DONE reply. */
int pjt_project(pjt_client *c, uint32_t flags, const pj_op *ops, uint32_t n_ops, pj_done *done,
                pj_op_result *res);
/* A PROJECT in flight on an nng context of its own (the client's socket),
 * so that several can be outstanding on one connection. */
typedef struct pjt_async {
    nng_ctx ctx;
    nng_aio *aio;
    int open;
} pjt_async;
/* Send p as request req_id without waiting for the reply. 0 or a negative
 * errno (nng's error as -EIO, the cause on stderr). */
int pjt_project_send(pjt_client *c, pjt_async *a, uint64_t req_id, const pj_project *p);
/* Its reply, within the client's timeout: PJ_OK with *done (done->ops:
 * max_ops entries) for DONE, the code of an ERROR, or a negative errno.
 * *req_id (when not NULL): the reply's. Then the context is closed. */
int pjt_project_recv(pjt_async *a, uint64_t *req_id, pj_done *done, uint32_t max_ops);
/* Close a context whose reply was not taken (a test that failed first). */
void pjt_async_close(pjt_async *a);
/* STATS; *out is the parsed JSON (cJSON_Delete it). */
int pjt_stats(pjt_client *c, cJSON **out);
/* A number at a dotted path in a STATS object ("connections.current");
 * -1 when absent. */
double pjt_json_num(const cJSON *root, const char *path);

int pjt_shm_create(pjt_shm *s, size_t size);
void pjt_shm_destroy(pjt_shm *s);

/* Make this process the owner of the shm objects pjt_shm_create makes from
 * now on, here and in forked children (Check's cases): their names then
 * carry its pid, "/pjt-<owner>-<pid>-<n>", else they are "/pjt-<pid>-<n>". */
void pjt_shm_own(void);
/* Unlink every object of the owner's names still in /dev/shm (those of
 * cases that failed before their pjt_shm_destroy: Check ends a failed
 * case with _exit), naming each on stderr; returns how many. */
int pjt_shm_sweep(void);

/* Create a ring of this geometry in a new shm object (mode 0600), format
 * it and send RING_ATTACH over nng. PJ_OK: PROJECT and PING use the ring
 * from now on. */
int pjt_ring_attach(pjt_client *c, uint32_t slots, uint32_t slot_bytes);
/* Send this RING_ATTACH as it is (refusal tests); the reply is classified
 * as by pjt_call. */
int pjt_ring_attach_raw(pjt_client *c, const pj_ring_attach *a);
/* Send bytes through the ring and wait for the reply there (c->rh,
 * c->body), whatever their type. 0, -ETIMEDOUT, -EAGAIN (the submission
 * queue is full), -ECONNRESET (the daemon closed the ring), -EPROTO. */
int pjt_ring_roundtrip(pjt_client *c, const void *msg, size_t len);

#endif
