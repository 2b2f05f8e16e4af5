/* wire_client.c — see wire_client.h. */
#include "tests/helpers/wire_client.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <nng/protocol/reqrep0/req.h>
#include <nng/supplemental/util/platform.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static int nng_to_errno(int rv)
{
    if (rv != 0)
        fprintf(stderr, "wire_client: nng: %s\n", nng_strerror(rv));
    switch (rv) {
    case 0:
        return 0;
    case NNG_ETIMEDOUT:
        return -ETIMEDOUT;
    case NNG_ECLOSED:
        return -EPIPE;
    case NNG_ECONNREFUSED:
        return -ECONNREFUSED;
    case NNG_ENOENT:
        return -ENOENT;
    case NNG_ENOMEM:
        return -ENOMEM;
    default:
        return -EIO;
    }
}

int pjt_connect(pjt_client *c, const char *url, int timeout_ms)
{
    /* nng frees closed sockets' pipes and dialers on its reaper thread; a
     * test process that exits before the reaper ran shows them to LSan as
     * leaks. nng_fini at exit waits for the reaper. */
    static atomic_flag fini_registered = ATOMIC_FLAG_INIT;
    if (!atomic_flag_test_and_set(&fini_registered))
        atexit(nng_fini);
    memset(c, 0, sizeof *c);
    pj_wbuf_init(&c->wb);
    c->timeout_ms = timeout_ms;
    c->next_id = 1;
    int rv = nng_req0_open(&c->sock);
    if (rv != 0)
        return nng_to_errno(rv);
    c->open = 1;
    nng_socket_set_ms(c->sock, NNG_OPT_RECVTIMEO, timeout_ms);
    nng_socket_set_ms(c->sock, NNG_OPT_SENDTIMEO, timeout_ms);
    /* A request is never sent twice: a slow reply is a test failure, not a
     * reason to run the projection again. */
    nng_socket_set_ms(c->sock, NNG_OPT_REQ_RESENDTIME, NNG_DURATION_INFINITE);
    nng_socket_set_size(c->sock, NNG_OPT_RECVMAXSZ, 0);
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        rv = nng_dial(c->sock, url, &c->dialer, 0);
        if (rv == 0)
            return 0;
        clock_gettime(CLOCK_MONOTONIC, &t);
        long ms = (t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000;
        if (ms >= timeout_ms)
            return nng_to_errno(rv);
        nng_msleep(20);
    }
}

void pjt_close(pjt_client *c)
{
    if (c->reply)
        nng_msg_free(c->reply);
    c->reply = NULL;
    /* The dialer first, as client/libprojd.c does: nng 1.5.2's nng_close
     * can wait forever while its dialer is redialling a peer that dropped
     * it (nanomsg/nng#1543, #1813). */
    if (c->open && nng_dialer_id(c->dialer) > 0)
        nng_dialer_close(c->dialer);
    if (c->open)
        nng_close(c->sock);
    c->open = 0;
    free(c->layers_all);
    c->layers_all = NULL;
    c->welcome.layers_all = NULL;
    pj_wbuf_free(&c->wb);
    if (c->ring_shm.p || c->ring_shm.name[0])
        pjt_shm_destroy(&c->ring_shm);
    c->use_ring = 0;
}

/* The header of a reply just received into c->reply. */
static int take_reply(pjt_client *c)
{
    char err[256];
    memset(&c->rh, 0, sizeof c->rh);
    if (pj_dec_hdr(nng_msg_body(c->reply), nng_msg_len(c->reply), 1u << 30, &c->rh, err,
                   sizeof err) != PJ_OK) {
        fprintf(stderr, "wire_client: bad reply header: %s\n", err);
        return -EPROTO;
    }
    c->body = (const uint8_t *)nng_msg_body(c->reply) + PJ_WIRE_HDR_SIZE;
    return 0;
}

int pjt_ring_roundtrip(pjt_client *c, const void *msg, size_t len)
{
    if (c->reply)
        nng_msg_free(c->reply);
    c->reply = NULL;
    c->body = NULL;
    int rc = pj_ring_push(&c->ring, PJ_RING_SQ, msg, len);
    if (rc != 0)
        return rc;
    /* woken with nothing there: the daemon closed the ring, or nothing */
    while ((rc = pj_ring_wait(&c->ring, PJ_RING_CQ, 20000, c->timeout_ms, NULL)) == -EAGAIN)
        if (pj_ring_state(&c->ring) == PJ_RING_STATE_CLOSED)
            return -ECONNRESET;
    if (rc != 0)
        return rc;
    size_t cap = pj_ring_msg_max(&c->ring), got = 0;
    if (nng_msg_alloc(&c->reply, cap) != 0)
        return -ENOMEM;
    rc = pj_ring_pop(&c->ring, PJ_RING_CQ, nng_msg_body(c->reply), cap, &got);
    if (rc != 0)
        return rc;
    nng_msg_chop(c->reply, cap - got);
    return take_reply(c);
}

int pjt_roundtrip(pjt_client *c, const void *msg, size_t len)
{
    if (c->use_ring && len >= 8) {
        uint16_t type = (uint16_t)(((const uint8_t *)msg)[6] | ((const uint8_t *)msg)[7] << 8);
        if (type == PJ_MSG_PROJECT || type == PJ_MSG_PING)
            return pjt_ring_roundtrip(c, msg, len);
    }
    if (c->reply)
        nng_msg_free(c->reply);
    c->reply = NULL;
    c->body = NULL;
    nng_msg *m;
    int rv = nng_msg_alloc(&m, 0);
    if (rv == 0)
        rv = nng_msg_append(m, msg, len);
    if (rv == 0) {
        rv = nng_sendmsg(c->sock, m, 0);
        if (rv != 0)
            nng_msg_free(m);
    }
    if (rv != 0)
        return nng_to_errno(rv);
    rv = nng_recvmsg(c->sock, &c->reply, 0);
    if (rv != 0)
        return nng_to_errno(rv);
    return take_reply(c);
}

int pjt_call(pjt_client *c, int want_type)
{
    int rc = pjt_roundtrip(c, c->wb.data, c->wb.len);
    if (rc != 0)
        return rc;
    /* nng's REQ socket drops a stale reply, the ring does not: a late
     * answer to an earlier request must not pass for this one's. */
    const uint64_t sent = pj_peek_req_id(c->wb.data, c->wb.len);
    if (c->rh.req_id != sent) {
        fprintf(stderr, "wire_client: reply (type %u) to request %" PRIu64 ", sent %" PRIu64 "\n",
                c->rh.type, c->rh.req_id, sent);
        return -EPROTO;
    }
    if (c->rh.type == want_type)
        return PJ_OK;
    if (c->rh.type == PJ_MSG_ERROR) {
        char err[256];
        memset(&c->err, 0, sizeof c->err);
        if (pj_dec_error(c->body, c->rh.body_len, &c->err, err, sizeof err) != PJ_OK) {
            fprintf(stderr, "wire_client: bad ERROR body: %s\n", err);
            return -EPROTO;
        }
        return c->err.code > 0 ? c->err.code : -EPROTO;
    }
    fprintf(stderr, "wire_client: reply type %u, wanted %d\n", c->rh.type, want_type);
    return -EPROTO;
}

int pjt_hello(pjt_client *c, const char *name)
{
    pj_hello h = {.ver_min = 1, .ver_max = 1, .pid = (uint32_t)getpid()};
    snprintf(h.name, sizeof h.name, "%s", name);
    pj_wbuf_reset(&c->wb);
    pj_enc_hello(&c->wb, c->next_id++, &h);
    int rc = pjt_call(c, PJ_MSG_WELCOME);
    if (rc != PJ_OK)
        return rc;
    char err[256];
    if (!c->layers_all)
        c->layers_all = malloc(PJ_WIRE_MAX_LAYERS_ALL * sizeof *c->layers_all);
    if (!c->layers_all)
        return -ENOMEM;
    if (pj_dec_welcome_all(c->body, c->rh.body_len, &c->welcome, c->layers_all,
                           PJ_WIRE_MAX_LAYERS_ALL, err, sizeof err) != PJ_OK) {
        fprintf(stderr, "wire_client: bad WELCOME: %s\n", err);
        return -EPROTO;
    }
    return PJ_OK;
}

int pjt_ping(pjt_client *c)
{
    pj_wbuf_reset(&c->wb);
    pj_enc_ping(&c->wb, c->next_id++, "ping", 4);
    return pjt_call(c, PJ_MSG_PONG);
}

int pjt_register_raw(pjt_client *c, const pj_register *r, uint32_t *id)
{
    pj_wbuf_reset(&c->wb);
    pj_enc_register(&c->wb, c->next_id++, r);
    int rc = pjt_call(c, PJ_MSG_REGISTERED);
    if (rc != PJ_OK)
        return rc;
    pj_registered reg;
    char err[256];
    if (pj_dec_registered(c->body, c->rh.body_len, &reg, err, sizeof err) != PJ_OK)
        return -EPROTO;
    if (id)
        *id = reg.buffer_id;
    return PJ_OK;
}

int pjt_register_shm(pjt_client *c, const char *shm_name, uint64_t size, uint32_t *id)
{
    pj_register *r = calloc(1, sizeof *r);
    if (!r)
        return -ENOMEM;
    r->kind = PJ_BUF_SHM;
    r->size = size;
    snprintf(r->shm_name, sizeof r->shm_name, "%s", shm_name);
    int rc = pjt_register_raw(c, r, id);
    free(r);
    return rc;
}

int pjt_unregister(pjt_client *c, uint32_t id)
{
    pj_wbuf_reset(&c->wb);
    pj_enc_unregister(&c->wb, c->next_id++, id);
    return pjt_call(c, PJ_MSG_UNREGISTERED);
}

int pjt_project(pjt_client *c, uint32_t flags, const pj_op *ops, uint32_t n_ops, pj_done *done,
                pj_op_result *res)
{
    pj_project p;
    memset(&p, 0, sizeof p);
    p.flags = flags;
    p.n_ops = n_ops;
    p.ops = (pj_op *)ops;
    pj_wbuf_reset(&c->wb);
    pj_enc_project(&c->wb, c->next_id++, &p);
    int rc = pjt_call(c, PJ_MSG_DONE);
    if (rc != PJ_OK)
        return rc;
    char err[256];
    done->ops = res;
    if (pj_dec_done(c->body, c->rh.body_len, n_ops, done, err, sizeof err) != PJ_OK) {
        fprintf(stderr, "wire_client: bad DONE: %s\n", err);
        return -EPROTO;
    }
    /* A DONE answers every op: callers read res[0..n_ops). */
    if (done->n_ops != n_ops) {
        fprintf(stderr, "wire_client: DONE with %u op results for %u ops\n", done->n_ops, n_ops);
        return -EPROTO;
    }
    return PJ_OK;
}

int pjt_project_send(pjt_client *c, pjt_async *a, uint64_t req_id, const pj_project *p)
{
    memset(a, 0, sizeof *a);
    int rv = nng_ctx_open(&a->ctx, c->sock);
    if (rv != 0) {
        fprintf(stderr, "wire_client: nng_ctx_open: %s\n", nng_strerror(rv));
        return -EIO;
    }
    a->open = 1;
    nng_msg *m = NULL;
    if ((rv = nng_aio_alloc(&a->aio, NULL, NULL)) != 0 || (rv = nng_msg_alloc(&m, 0)) != 0) {
        fprintf(stderr, "wire_client: allocating a request: %s\n", nng_strerror(rv));
        pjt_async_close(a);
        return -EIO;
    }
    nng_aio_set_timeout(a->aio, c->timeout_ms);
    pj_wbuf_reset(&c->wb);
    pj_enc_project(&c->wb, req_id, p);
    nng_msg_append(m, c->wb.data, c->wb.len);
    nng_aio_set_msg(a->aio, m);
    nng_ctx_send(a->ctx, a->aio);
    nng_aio_wait(a->aio);
    if ((rv = nng_aio_result(a->aio)) != 0) {
        fprintf(stderr, "wire_client: sending PROJECT %" PRIu64 ": %s\n", req_id, nng_strerror(rv));
        nng_msg_free(m);
        pjt_async_close(a);
        return -EIO;
    }
    return 0;
}

int pjt_project_recv(pjt_async *a, uint64_t *req_id, pj_done *done, uint32_t max_ops)
{
    if (!a->open)
        return -EINVAL;
    nng_ctx_recv(a->ctx, a->aio);
    nng_aio_wait(a->aio);
    int rv = nng_aio_result(a->aio);
    if (rv != 0) {
        pjt_async_close(a);
        return rv == NNG_ETIMEDOUT ? -ETIMEDOUT : -EIO;
    }
    nng_msg *m = nng_aio_get_msg(a->aio);
    const uint8_t *body = nng_msg_body(m);
    char err[256];
    pj_hdr h;
    int rc;
    if (pj_dec_hdr(body, nng_msg_len(m), 1u << 24, &h, err, sizeof err) != PJ_OK) {
        fprintf(stderr, "wire_client: bad reply header: %s\n", err);
        rc = -EPROTO;
    } else if (h.type == PJ_MSG_ERROR) {
        pj_error_msg em;
        rc = pj_dec_error(body + PJ_WIRE_HDR_SIZE, h.body_len, &em, err, sizeof err) == PJ_OK
                 ? (int)em.code
                 : -EPROTO;
    } else if (h.type != PJ_MSG_DONE) {
        rc = -EPROTO;
    } else if (pj_dec_done(body + PJ_WIRE_HDR_SIZE, h.body_len, max_ops, done, err, sizeof err) !=
               PJ_OK) {
        fprintf(stderr, "wire_client: bad DONE: %s\n", err);
        rc = -EPROTO;
    } else {
        rc = PJ_OK;
    }
    if (req_id)
        *req_id = h.req_id;
    nng_msg_free(m);
    pjt_async_close(a);
    return rc;
}

void pjt_async_close(pjt_async *a)
{
    if (a->aio)
        nng_aio_free(a->aio);
    if (a->open)
        nng_ctx_close(a->ctx);
    a->aio = NULL;
    a->open = 0;
}

int pjt_stats(pjt_client *c, cJSON **out)
{
    *out = NULL;
    pj_wbuf_reset(&c->wb);
    pj_enc_stats(&c->wb, c->next_id++);
    int rc = pjt_call(c, PJ_MSG_STATS_REPLY);
    if (rc != PJ_OK)
        return rc;
    *out = cJSON_ParseWithLength((const char *)c->body, c->rh.body_len);
    return *out ? PJ_OK : -EPROTO;
}

double pjt_json_num(const cJSON *root, const char *path)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    const cJSON *o = root;
    for (char *save = NULL, *tok = strtok_r(buf, ".", &save); tok && o;
         tok = strtok_r(NULL, ".", &save))
        o = cJSON_GetObjectItemCaseSensitive(o, tok);
    return o && cJSON_IsNumber(o) ? o->valuedouble : -1;
}

static pid_t g_shm_owner;

void pjt_shm_own(void)
{
    g_shm_owner = getpid();
}

int pjt_shm_sweep(void)
{
    if (!g_shm_owner)
        return 0;
    char prefix[32];
    snprintf(prefix, sizeof prefix, "pjt-%d-", (int)g_shm_owner);
    DIR *dir = opendir("/dev/shm");
    if (!dir)
        return 0;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));) {
        if (strncmp(e->d_name, prefix, strlen(prefix)) != 0)
            continue;
        char name[300];
        snprintf(name, sizeof name, "/%s", e->d_name);
        if (shm_unlink(name) == 0) {
            fprintf(stderr, "wire_client: removed %s, left by a case\n", name);
            n++;
        }
    }
    closedir(dir);
    return n;
}

int pjt_shm_create(pjt_shm *s, size_t size)
{
    static atomic_uint counter;
    memset(s, 0, sizeof *s);
    s->fd = -1;
    /* A name left by an earlier process with the same pid (killed tests
     * leave theirs) is skipped, not reused. */
    for (int tries = 0; s->fd < 0 && tries < 64; tries++) {
        unsigned n = atomic_fetch_add(&counter, 1);
        if (g_shm_owner)
            snprintf(s->name, sizeof s->name, "/pjt-%d-%d-%u", (int)g_shm_owner, (int)getpid(), n);
        else
            snprintf(s->name, sizeof s->name, "/pjt-%d-%u", (int)getpid(), n);
        s->fd = shm_open(s->name, O_RDWR | O_CREAT | O_EXCL, 0600);
        if (s->fd < 0 && errno != EEXIST)
            return -errno;
    }
    if (s->fd < 0) {
        s->name[0] = 0;
        return -EEXIST;
    }
    if (ftruncate(s->fd, (off_t)size) != 0) {
        int e = errno;
        pjt_shm_destroy(s);
        return -e;
    }
    s->p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->fd, 0);
    if (s->p == MAP_FAILED) {
        int e = errno;
        s->p = NULL;
        pjt_shm_destroy(s);
        return -e;
    }
    s->size = size;
    return 0;
}

void pjt_shm_destroy(pjt_shm *s)
{
    if (s->p)
        munmap(s->p, s->size);
    s->p = NULL;
    if (s->fd >= 0)
        close(s->fd);
    s->fd = -1;
    if (s->name[0])
        shm_unlink(s->name);
    s->name[0] = 0;
}

int pjt_ring_attach_raw(pjt_client *c, const pj_ring_attach *a)
{
    pj_wbuf_reset(&c->wb);
    pj_enc_ring_attach(&c->wb, c->next_id++, a);
    return pjt_call(c, PJ_MSG_RING_ATTACHED);
}

int pjt_ring_attach(pjt_client *c, uint32_t slots, uint32_t slot_bytes)
{
    size_t size = pj_ring_bytes(slots, slot_bytes);
    if (size == 0)
        return -EINVAL;
    int rc = pjt_shm_create(&c->ring_shm, size);
    if (rc != 0)
        return rc;
    pj_ring_format(c->ring_shm.p, slots, slot_bytes);
    char err[256];
    if (pj_ring_view(&c->ring, c->ring_shm.p, size, slots, slot_bytes, err, sizeof err) != 0) {
        fprintf(stderr, "wire_client: %s\n", err);
        pjt_shm_destroy(&c->ring_shm);
        return -EPROTO;
    }
    pj_ring_attach a = {.slots = slots, .slot_bytes = slot_bytes};
    snprintf(a.shm_name, sizeof a.shm_name, "%s", c->ring_shm.name);
    rc = pjt_ring_attach_raw(c, &a);
    if (rc != PJ_OK) {
        pjt_shm_destroy(&c->ring_shm);
        return rc;
    }
    c->use_ring = 1;
    return PJ_OK;
}
