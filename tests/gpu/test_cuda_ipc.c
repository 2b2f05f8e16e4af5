/* test_cuda_ipc.c — projd's cuda backend with CUDA IPC buffers from a
 * client process (this one: cudaMalloc here, the daemon is a separate
 * process started with fork + exec; run it under the MPS control daemon as
 * bench/run-backend-device.sh does, or the two processes time-slice).
 *
 * Checks:
 *   - client side: projd_cuda_describe finds the allocation base, size,
 *     offset and device UUID; cudaMallocAsync memory gets the clear error.
 *   - every layer x m in the captured form (graph rebound to the client's
 *     pointers), random n / offsets / strides, a pointer inside the
 *     allocation addressed by its offset, a two-op chain on device buffers;
 *     all against the CPU reference (poisoned outputs).
 *   - WAIT_EVENT (x arrives late on the client's stream), SIGNAL_EVENT +
 *     ACCEPT_REPLY (the client orders its read after the daemon's event).
 *   - failures that only exist on the GPU: wrong device UUID, size larger
 *     than the allocation, junk handle, offset past the allocation; the
 *     same allocation registered twice (one opened mapping, refcounted);
 *     with two GPUs, a buffer on the other one whose request names
 *     projd's device (refused by the allocation's own device).
 *   - a client process that exits with IPC buffers registered: the daemon
 *     keeps serving and its buffer / IPC counts return.
 *   - 4 connections with their own device buffers at once.
 *   - graph rebinds to the client's buffers refused (PROJD_CUDA_REFUSE_BINDS):
 *     those requests run staged, a shape refused three times in a row is
 *     staged for good, one refused less rebinds again.
 * Exit: 0 all passed, 1 a failure, 77 no GPU.
 */
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <stdint.h>
#include <sys/wait.h>
#include <unistd.h>

#include "client/projd_cuda.h"
#include "daemon/backend_cuda.h"
#include "tests/gpu/cuda_common.h"

#define XBYTES (160u * 1024u)
#define YBYTES (320u * 1024u)

extern char **environ;
static char g_model[4200];

/* A connection with an x and a y cudaMalloc buffer registered. */
typedef struct ipc_conn {
    pjt_client c;
    void *dx, *dy;
    uint32_t xid, yid;
    uint16_t *hx, *hy; /* host images */
} ipc_conn;

static int ipc_open(ipc_conn *t, const char *url, char *why, size_t whylen)
{
    memset(t, 0, sizeof *t);
    int rc = pjt_connect(&t->c, url, CC_REPLY_MS);
    if (rc == 0)
        rc = pjt_hello(&t->c, "ipc-test");
    if (rc != 0) {
        snprintf(why, whylen, "connect/hello: %d", rc);
        return -1;
    }
    if (cudaMalloc(&t->dx, XBYTES) != cudaSuccess || cudaMalloc(&t->dy, YBYTES) != cudaSuccess) {
        snprintf(why, whylen, "cudaMalloc failed");
        return -1;
    }
    t->hx = calloc(1, XBYTES);
    t->hy = calloc(1, YBYTES);
    if (!t->hx || !t->hy)
        return -1;
    if (cc_register_dev(&t->c, t->dx, &t->xid, why, whylen) != 0 ||
        cc_register_dev(&t->c, t->dy, &t->yid, why, whylen) != 0)
        return -1;
    return 0;
}

static void ipc_close(ipc_conn *t)
{
    pjt_close(&t->c);
    cudaFree(t->dx);
    cudaFree(t->dy);
    free(t->hx);
    free(t->hy);
}

static pj_op ipc_op(const ipc_conn *t, const pjc_shape *s)
{
    pj_op op = {.layer = s->layer,
                .m = PJC_MS[s->mi],
                .n = s->n,
                .x_buf = t->xid,
                .x_off = s->x_off * 2,
                .x_ld = s->x_ld,
                .y_buf = t->yid,
                .y_off = s->y_off * 2,
                .y_ld = s->y_ld};
    return op;
}

/* Stage x (host -> device), poison y, PROJECT, read y back, check. */
static int run_ipc(ipc_conn *t, const pjc_shape *s, uint16_t *engine, char *why, size_t whylen)
{
    uint32_t m = PJC_MS[s->mi];
    cc_fill_x(t->hx, XBYTES / 2, s);
    /* cudaMemcpy from pageable memory and cudaMemset may still be running
     * when they return: the daemon's stream is not ordered after them. */
    if (cudaMemcpy(t->dx, t->hx, XBYTES, cudaMemcpyHostToDevice) != cudaSuccess ||
        cudaMemset(t->dy, 0xff, YBYTES) != cudaSuccess || cudaDeviceSynchronize() != cudaSuccess) {
        snprintf(why, whylen, "client copies failed");
        return -1;
    }
    pj_op op = ipc_op(t, s);
    pj_done d;
    pj_op_result res[1];
    int rc = pjt_project(&t->c, 0, &op, 1, &d, res);
    if (rc != PJ_OK || d.status != PJ_OK || res[0].status != PJ_OK) {
        snprintf(why, whylen, "layer %u m %u n %u: rc %d status %d: %s", s->layer, m, s->n, rc,
                 rc == PJ_OK ? d.status : -1, rc > 0 ? t->c.err.msg : "");
        return -1;
    }
    if (engine)
        *engine = res[0].engine;
    if (cudaMemcpy(t->hy, t->dy, YBYTES, cudaMemcpyDeviceToHost) != cudaSuccess) {
        snprintf(why, whylen, "client read-back failed");
        return -1;
    }
    return pjy_verify(t->hy, YBYTES / 2, s, m, &pjc_model()->layers[s->layer].w,
                      pjc_ref_x(s->layer, s->mi, s->variant),
                      pjc_ref_y(s->layer, s->mi, s->variant), NULL, why, whylen);
}

static void sweep(ipc_conn *t)
{
    const pj_model *model = pjc_model();
    uint64_t seed = 99;
    char why[600];
    long graph = 0, staged = 0;
    for (uint32_t l = 0; l < model->n_layers; l++)
        for (uint32_t mi = 0; mi < PJC_N_MS; mi++)
            for (uint32_t v = 0; v < PJC_VARIANTS; v++) {
                pjc_shape s = cc_shape(&seed, l, mi, 1);
                s.variant = v;
                uint16_t eng = 0;
                int rc = run_ipc(t, &s, &eng, why, sizeof why);
                CHECK(rc == 0, "graph shape: %s", why);
                graph += (eng >> 8) == PJ_CUDA_PATH_GRAPH;
                staged += (eng >> 8) == PJ_CUDA_PATH_GRAPH_STAGED;
            }
    printf("captured shapes: %ld replays rebound to the client's buffers, %ld staged\n", graph,
           staged);
    CHECK(graph + staged == (long)model->n_layers * PJC_N_MS * PJC_VARIANTS,
          "captured shapes did not all replay a graph (%ld + %ld)", graph, staged);
    for (int i = 0; i < 200; i++) {
        uint32_t l = (uint32_t)i % model->n_layers;
        uint32_t mi = (uint32_t)(i / (int)model->n_layers) % PJC_N_MS;
        pjc_shape s = cc_shape(&seed, l, mi, 0);
        CHECK(run_ipc(t, &s, NULL, why, sizeof why) == 0, "random shape %d: %s", i, why);
    }
}

/* A pointer inside an allocation: describe gives its offset from the base. */
static void inner_pointer(ipc_conn *t)
{
    projd_cuda_region r;
    char why[600];
    int rc = projd_cuda_describe((char *)t->dx + 4096, &r, why, sizeof why);
    CHECK(rc == 0 && r.offset == 4096 && r.base == t->dx && r.alloc_size >= XBYTES,
          "describe(inner pointer): rc %d offset %llu base ok %d size %llu: %s", rc,
          (unsigned long long)r.offset, r.base == t->dx, (unsigned long long)r.alloc_size,
          rc ? why : "");
    const pj_model *model = pjc_model();
    pjc_shape s = cc_shape(&(uint64_t){5}, 1, 2, 1);
    s.x_off = 4096 / 2;
    (void)model;
    CHECK(run_ipc(t, &s, NULL, why, sizeof why) == 0, "inner pointer: %s", why);
}

/* Fills x on the device behind a host function that sleeps gate_us on cs,
 * then records ev_in: a request that waits on ev_in and reads x before the
 * gate opens reads the zeros put there first (y wrong, not merely late). */
static int gated_x(ipc_conn *t, const uint16_t *pin, cudaStream_t cs, cudaEvent_t ev_in,
                   unsigned gate_us)
{
    return cudaMemset(t->dx, 0, XBYTES) == cudaSuccess &&
                   cudaMemset(t->dy, 0xff, YBYTES) == cudaSuccess &&
                   cudaDeviceSynchronize() == cudaSuccess &&
                   cudaLaunchHostFunc(cs, cc_sleep_host, (void *)(uintptr_t)gate_us) ==
                       cudaSuccess &&
                   cudaMemcpyAsync(t->dx, pin, XBYTES, cudaMemcpyHostToDevice, cs) == cudaSuccess &&
                   cudaEventRecord(ev_in, cs) == cudaSuccess
               ? 0
               : -1;
}

/* The client's events, three ways for each m:
 *   WAIT_EVENT: x arrives on the client's stream 0.3 s after the request;
 *     the reply (at completion) must carry y of the real x;
 *   SIGNAL_EVENT + ACCEPT_REPLY: the client's stream waits on the daemon's
 *     event before it reads y;
 *   all three: x arrives 1 s after the request; the reply must come while
 *     the client's event is still pending (answered at launch, not at
 *     completion), and y read behind the daemon's event must be right
 *     (recorded after the work, and the work after the client's event). */
static void events(ipc_conn *t)
{
    char why[600];
    cudaStream_t cs;
    cudaEvent_t ev_in, ev_out;
    if (cudaStreamCreateWithFlags(&cs, cudaStreamNonBlocking) != cudaSuccess ||
        cudaEventCreateWithFlags(&ev_in, cudaEventInterprocess | cudaEventDisableTiming) !=
            cudaSuccess ||
        cudaEventCreateWithFlags(&ev_out, cudaEventInterprocess | cudaEventDisableTiming) !=
            cudaSuccess) {
        CHECK(0, "events: setup failed");
        return;
    }
    cudaIpcEventHandle_t hin, hout;
    CHECK(cudaIpcGetEventHandle(&hin, ev_in) == cudaSuccess, "cudaIpcGetEventHandle");
    CHECK(cudaIpcGetEventHandle(&hout, ev_out) == cudaSuccess, "cudaIpcGetEventHandle");
    uint16_t *pin = NULL;
    cudaError_t pe = cudaMallocHost((void **)&pin, XBYTES);
    CHECK(pe == cudaSuccess && pin, "events: cudaMallocHost of %zu bytes: %s", (size_t)XBYTES,
          cudaGetErrorString(pe));
    int pending_at_reply = 0;
    for (uint32_t mi = 0; mi < PJC_N_MS && pin; mi++) {
        const uint32_t m = PJC_MS[mi];
        pjc_shape s = cc_shape(&(uint64_t){11}, 0, mi, 1);
        const pj_weights *w = &pjc_model()->layers[0].w;
        const uint16_t *rx = pjc_ref_x(0, mi, s.variant), *ry = pjc_ref_y(0, mi, s.variant);
        cc_fill_x(pin, XBYTES / 2, &s);
        pj_op op = ipc_op(t, &s);
        pj_done d;
        pj_op_result res[1];

        CHECK(gated_x(t, pin, cs, ev_in, 300000) == 0, "WAIT_EVENT m %u: the gate", m);
        int rc =
            cc_project_ev(&t->c, PJ_PF_WAIT_EVENT, &op, 1, (const uint8_t *)&hin, NULL, &d, res);
        CHECK(rc == PJ_OK && d.status == PJ_OK, "WAIT_EVENT m %u: rc %d status %d", m, rc,
              rc == PJ_OK ? d.status : -1);
        cudaStreamSynchronize(cs);
        cudaMemcpy(t->hy, t->dy, YBYTES, cudaMemcpyDeviceToHost);
        rc = pjy_verify(t->hy, YBYTES / 2, &s, m, w, rx, ry, NULL, why, sizeof why);
        CHECK(rc == 0, "WAIT_EVENT m %u (x behind a 0.3 s gate): %s", m, why);

        cudaMemset(t->dy, 0xff, YBYTES);
        cudaMemcpy(t->dx, pin, XBYTES, cudaMemcpyHostToDevice);
        cudaDeviceSynchronize();
        rc = cc_project_ev(&t->c, PJ_PF_SIGNAL_EVENT | PJ_PF_ACCEPT_REPLY, &op, 1, NULL,
                           (const uint8_t *)&hout, &d, res);
        CHECK(rc == PJ_OK && d.status == PJ_OK, "SIGNAL+ACCEPT m %u: rc %d status %d", m, rc,
              rc == PJ_OK ? d.status : -1);
        cudaStreamWaitEvent(cs, ev_out, 0);
        cudaMemcpyAsync(t->hy, t->dy, YBYTES, cudaMemcpyDeviceToHost, cs);
        cudaStreamSynchronize(cs);
        rc = pjy_verify(t->hy, YBYTES / 2, &s, m, w, rx, ry, NULL, why, sizeof why);
        CHECK(rc == 0, "SIGNAL+ACCEPT m %u: %s", m, why);

        CHECK(gated_x(t, pin, cs, ev_in, 1000000) == 0, "WAIT+SIGNAL+ACCEPT m %u: the gate", m);
        rc = cc_project_ev(&t->c, PJ_PF_WAIT_EVENT | PJ_PF_SIGNAL_EVENT | PJ_PF_ACCEPT_REPLY, &op,
                           1, (const uint8_t *)&hin, (const uint8_t *)&hout, &d, res);
        const cudaError_t q = cudaEventQuery(ev_in);
        CHECK(rc == PJ_OK && d.status == PJ_OK, "WAIT+SIGNAL+ACCEPT m %u: rc %d status %d", m, rc,
              rc == PJ_OK ? d.status : -1);
        CHECK(q == cudaErrorNotReady,
              "WAIT+SIGNAL+ACCEPT m %u: the reply came after the client's event (%s), 1 s "
              "after the request: not at launch",
              m, cudaGetErrorName(q));
        pending_at_reply += q == cudaErrorNotReady;
        cudaStreamWaitEvent(cs, ev_out, 0);
        cudaMemcpyAsync(t->hy, t->dy, YBYTES, cudaMemcpyDeviceToHost, cs);
        cudaStreamSynchronize(cs);
        rc = pjy_verify(t->hy, YBYTES / 2, &s, m, w, rx, ry, NULL, why, sizeof why);
        CHECK(rc == 0, "WAIT+SIGNAL+ACCEPT m %u (x behind a 1 s gate): %s", m, why);
    }
    printf("events: %d of %d replies answered at launch came while x was still behind its gate\n",
           pending_at_reply, PJC_N_MS);
    cudaFreeHost(pin);
    cudaEventDestroy(ev_in);
    cudaEventDestroy(ev_out);
    cudaStreamDestroy(cs);
}

/* A buffer on another GPU of the host whose request names projd's device:
 * the daemon opens handles with lazy peer access, which would map it, so
 * the opened allocation's own device refuses it. Needs two GPUs and says
 * so where there is one. The connection serves on after both refusals. */
static void other_device(ipc_conn *t, const uint8_t *welcome_uuid)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 2) {
        printf("other device: %d GPU here; this check needs 2 (not run)\n", n);
        return;
    }
    char why[600];
    void *p = NULL;
    cudaSetDevice(1);
    cudaError_t ce = cudaMalloc(&p, 1u << 20);
    cudaSetDevice(0);
    CHECK(ce == cudaSuccess, "cudaMalloc on device 1: %s", cudaGetErrorString(ce));
    if (ce != cudaSuccess)
        return;
    projd_cuda_region r;
    int rc = projd_cuda_describe(p, &r, why, sizeof why);
    CHECK(rc == 0, "describe on device 1: %s", why);
    CHECK(memcmp(r.uuid, welcome_uuid, PJ_WIRE_UUID_SIZE) != 0, "device 1's UUID is projd's");
    pj_register req;
    uint32_t id = 0;
    projd_cuda_register_req(&r, &req);
    memcpy(req.device_uuid, welcome_uuid, PJ_WIRE_UUID_SIZE);
    rc = pjt_register_raw(&t->c, &req, &id);
    /* Without peer access between the two the open itself fails; with it,
     * the allocation's device refuses. */
    int peer = 0;
    cudaDeviceCanAccessPeer(&peer, 0, 1);
    CHECK(rc == PJ_E_REGISTER && strstr(t->c.err.msg, peer ? "is on device 1, not on device 0"
                                                           : "cudaIpcOpenMemHandle"),
          "device 1's buffer named as device 0's (peer access %d): rc %d: %s", peer, rc,
          t->c.err.msg);
    printf("other device, named as projd's -> %s\n", t->c.err.msg);
    projd_cuda_register_req(&r, &req);
    rc = pjt_register_raw(&t->c, &req, &id);
    CHECK(rc == PJ_E_REGISTER && strstr(t->c.err.msg, "but projd serves"),
          "device 1's buffer as it is: rc %d: %s", rc, t->c.err.msg);
    printf("other device, as it is -> %s\n", t->c.err.msg);
    cudaFree(p);
    pjc_shape s = cc_shape(&(uint64_t){5}, 1, 2, 1);
    CHECK(run_ipc(t, &s, NULL, why, sizeof why) == 0, "a request after the refusals: %s", why);
}

static void failures(ipc_conn *t, const uint8_t *welcome_uuid)
{
    char why[600];
    projd_cuda_region r;
    int rc = projd_cuda_describe(t->dx, &r, why, sizeof why);
    CHECK(rc == 0, "describe: %s", why);
    CHECK(memcmp(r.uuid, welcome_uuid, PJ_WIRE_UUID_SIZE) == 0,
          "the allocation's device UUID differs from the daemon's");
    pj_register req;
    uint32_t id = 0;

    projd_cuda_register_req(&r, &req);
    req.device_uuid[3] ^= 0xff;
    rc = pjt_register_raw(&t->c, &req, &id);
    CHECK(rc == PJ_E_REGISTER && strstr(t->c.err.msg, "but projd serves"), "wrong UUID: rc %d: %s",
          rc, t->c.err.msg);
    printf("wrong UUID -> %s\n", t->c.err.msg);

    projd_cuda_register_req(&r, &req);
    req.size = r.alloc_size + (8u << 20);
    rc = pjt_register_raw(&t->c, &req, &id);
    CHECK(rc == PJ_E_REGISTER && strstr(t->c.err.msg, "claims"), "size too large: rc %d: %s", rc,
          t->c.err.msg);
    printf("size too large -> %s\n", t->c.err.msg);

    projd_cuda_register_req(&r, &req);
    for (int i = 0; i < PJ_WIRE_IPC_HANDLE_SIZE; i++)
        req.ipc_handle[i] = (uint8_t)(i * 37 + 11);
    rc = pjt_register_raw(&t->c, &req, &id);
    CHECK(rc == PJ_E_REGISTER, "junk handle: rc %d: %s", rc, t->c.err.msg);
    printf("junk handle -> %s\n", t->c.err.msg);

    /* Offset past the allocation (x span ends beyond the registered size). */
    pjc_shape s = cc_shape(&(uint64_t){3}, 0, 0, 1);
    pj_op op = ipc_op(t, &s);
    op.x_off = r.alloc_size - 2;
    pj_done d;
    pj_op_result res[1];
    rc = pjt_project(&t->c, 0, &op, 1, &d, res);
    CHECK(rc == PJ_E_BOUNDS, "offset past the allocation: rc %d: %s", rc, t->c.err.msg);
    printf("offset past the allocation -> %s\n", t->c.err.msg);
    CHECK(run_ipc(t, &s, NULL, why, sizeof why) == 0, "valid request after the failures: %s", why);

    /* Same allocation twice: one mapping, refcounted. */
    double ipc0 = pjd_stat(&t->c, "backend_stats.ipc_open");
    uint32_t id1 = 0, id2 = 0;
    projd_cuda_register_req(&r, &req);
    CHECK(pjt_register_raw(&t->c, &req, &id1) == PJ_OK, "register again: %s", t->c.err.msg);
    CHECK(pjt_register_raw(&t->c, &req, &id2) == PJ_OK, "register a third time: %s", t->c.err.msg);
    CHECK(pjd_stat(&t->c, "backend_stats.ipc_open") == ipc0,
          "registering an open allocation again opened it again");
    /* Two registrations of one allocation share the daemon's mapping, so
     * a y that shares bytes with x across them is seen and refused. */
    pj_op ov = op;
    ov.x_off = 0;
    ov.x_buf = id1;
    ov.y_off = 0;
    ov.y_buf = id2;
    rc = pjt_project(&t->c, 0, &ov, 1, &d, res);
    CHECK(rc == PJ_E_BOUNDS && strstr(t->c.err.msg, "shares bytes with x"),
          "y over x through a second registration: rc %d: %s", rc, t->c.err.msg);
    printf("y over x through a second registration -> %s\n", t->c.err.msg);
    CHECK(pjt_unregister(&t->c, id1) == PJ_OK, "unregister");
    pj_op op2 = op;
    op2.x_off = 0;
    op2.x_buf = id2;
    rc = pjt_project(&t->c, 0, &op2, 1, &d, res);
    CHECK(rc == PJ_OK && d.status == PJ_OK, "request on the second registration: %d", rc);
    CHECK(pjt_unregister(&t->c, id2) == PJ_OK, "unregister");
    CHECK(pjd_stat(&t->c, "backend_stats.ipc_open") == ipc0, "ipc_open did not return");

    /* cudaMallocAsync memory: refused on the client side, clearly. */
    void *pa = NULL;
    if (cudaMallocAsync(&pa, 1u << 20, 0) == cudaSuccess && cudaStreamSynchronize(0) == 0) {
        rc = projd_cuda_describe(pa, &r, why, sizeof why);
        CHECK(rc == -ENOTSUP && strstr(why, "cudaMallocAsync"), "cudaMallocAsync: rc %d: %s", rc,
              why);
        printf("cudaMallocAsync -> %s\n", why);
        cudaFreeAsync(pa, 0);
        cudaStreamSynchronize(0);
    } else {
        cudaGetLastError();
        printf("cudaMallocAsync unavailable here; not tested\n");
    }
    int *host = malloc(64);
    rc = projd_cuda_describe(host, &r, why, sizeof why);
    CHECK(rc == -EINVAL, "host pointer: rc %d: %s", rc, why);
    free(host);
}

/* Child: connect, register two IPC buffers, run one request, exit
 * without unregistering. */
static int child_main(const char *url)
{
    char why[600];
    if (cc_gpu_count(why, sizeof why) <= 0)
        return 3;
    pjc_init(g_model, sizeof g_model);
    ipc_conn t;
    if (ipc_open(&t, url, why, sizeof why) != 0) {
        fprintf(stderr, "child: %s\n", why);
        return 4;
    }
    pjc_shape s = cc_shape(&(uint64_t){1}, 0, 1, 1);
    if (run_ipc(&t, &s, NULL, why, sizeof why) != 0) {
        fprintf(stderr, "child: %s\n", why);
        return 5;
    }
    printf("child: registered 2 CUDA IPC buffers, one request checked; exiting without "
           "unregistering\n");
    fflush(stdout);
    exit(0);
}

static void exiting_client(const char *url, pjt_client *c)
{
    double b0 = pjd_stat(c, "buffers.current");
    double i0 = pjd_stat(c, "backend_stats.ipc_open");
    char *argv[] = {"/proc/self/exe", "--child-ipc", (char *)url, NULL};
    pid_t pid;
    int rc = posix_spawn(&pid, "/proc/self/exe", NULL, NULL, argv, environ);
    CHECK(rc == 0, "posix_spawn: %s", strerror(rc));
    if (rc != 0)
        return;
    int status = 0;
    pid_t w = cc_reap(pid, 120000, &status);
    CHECK(w == pid && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child client: status 0x%x",
          status);
    CHECK(pjd_wait_stat(c, "buffers.current", b0, 20000) == b0, "buffers did not return to %.0f",
          b0);
    CHECK(pjd_wait_stat(c, "backend_stats.ipc_open", i0, 20000) == i0,
          "IPC mappings did not return to %.0f", i0);
}

typedef struct worker {
    pthread_t th;
    const char *url;
    int index;
    long requests, done;
    char fail[700];
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    ipc_conn t;
    char why[600];
    if (ipc_open(&t, w->url, why, sizeof why) != 0) {
        snprintf(w->fail, sizeof w->fail, "client %d: %s", w->index, why);
        ipc_close(&t);
        return NULL;
    }
    uint64_t seed = 0x777u + (uint64_t)w->index;
    const pj_model *model = pjc_model();
    for (long i = 0; i < w->requests; i++) {
        uint32_t l = (uint32_t)(i % model->n_layers);
        uint32_t mi = (uint32_t)((i / model->n_layers + (uint64_t)w->index) % PJC_N_MS);
        pjc_shape s = cc_shape(&seed, l, mi, (cc_mix(&seed) & 1) != 0);
        if (run_ipc(&t, &s, NULL, why, sizeof why) != 0) {
            snprintf(w->fail, sizeof w->fail, "client %d request %ld: %s", w->index, i, why);
            break;
        }
        w->done++;
    }
    ipc_close(&t);
    return NULL;
}

static void concurrent(const char *url)
{
    enum { N = 4 };
    worker w[N];
    long per = pjc_env_long("PJ_GPU_E2E_REQUESTS", 100) / 2;
    if (per < 1) /* PJ_GPU_E2E_REQUESTS=1 must not make "concurrent" pass doing nothing */
        per = 1;
    for (int i = 0; i < N; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].url = url;
        w[i].index = i;
        w[i].requests = per;
        pthread_create(&w[i].th, NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < N; i++) {
        pthread_join(w[i].th, NULL);
        CHECK(!w[i].fail[0], "%s", w[i].fail);
        CHECK(w[i].done == per, "client %d finished %ld of %ld", i, w[i].done, per);
    }
    printf("concurrent: %d IPC clients x %ld requests checked\n", N, per);
}

/* projd started with one environment variable set, and an IPC client on
 * it (the tag names both in messages). 0, or -1 after a failed CHECK with
 * nothing left running. */
static int start_with_env(const char *name, const char *value, const char *tag, pj_dproc *d,
                          ipc_conn *t)
{
    char why[600];
    setenv(name, value, 1);
    int rc = cc_start(d, g_model, NULL, why, sizeof why);
    unsetenv(name);
    CHECK(rc == 0, "start projd (%s): %s", tag, why);
    if (rc != 0)
        return -1;
    if (ipc_open(t, d->url, why, sizeof why) != 0) {
        CHECK(0, "%s: IPC client: %s", tag, why);
        cc_stop(d, tag);
        return -1;
    }
    return 0;
}

/* Requests of layer l at m index mi in the captured form; each is checked
 * and its path must be want. The variants alternate, so that a y copied out
 * of the staging buffer instead of computed (a graph still aimed at the
 * client's buffers) would differ from the reference. */
static void refused_run(ipc_conn *t, uint32_t l, uint32_t mi, int count, uint32_t want,
                        const char *what)
{
    uint64_t seed = 21;
    char why[600];
    for (int i = 0; i < count; i++) {
        pjc_shape s = cc_shape(&seed, l, mi, 1);
        s.variant = (uint32_t)i % PJC_VARIANTS;
        uint16_t eng = 0;
        CHECK(run_ipc(t, &s, &eng, why, sizeof why) == 0, "refused rebinds, %s, request %d: %s",
              what, i, why);
        CHECK((uint32_t)(eng >> 8) == want, "refused rebinds, %s, request %d: path %u (want %u)",
              what, i, (unsigned)(eng >> 8), want);
    }
}

/* PROJD_CUDA_REFUSE_BINDS=5: layer 0's graph is refused three times in a
 * row (its requests staged, then staged for good, with a warning); layer
 * 1's twice, and its third rebinds. */
static void refused_binds(void)
{
    printf("== refused rebinds\n");
    pj_dproc d;
    ipc_conn t;
    if (start_with_env("PROJD_CUDA_REFUSE_BINDS", "5", "refused rebinds", &d, &t) != 0)
        return;
    refused_run(&t, 0, 1, 2, PJ_CUDA_PATH_GRAPH_STAGED, "layer 0, refused 1-2");
    CHECK(pj_dproc_log_has(&d, "failed (refused for a test", 1000),
          "refused rebinds: no line about a request run staged");
    CHECK(!pj_dproc_log_has(&d, "times in a row", 0),
          "refused rebinds: staged for good after two refusals");
    refused_run(&t, 0, 1, 1, PJ_CUDA_PATH_GRAPH_STAGED, "layer 0, refused 3");
    CHECK(pj_dproc_log_has(&d, "failed 3 times in a row", 1000),
          "refused rebinds: no warning after three refusals in a row");
    refused_run(&t, 1, 1, 2, PJ_CUDA_PATH_GRAPH_STAGED, "layer 1, refused 4-5");
    refused_run(&t, 1, 1, 2, PJ_CUDA_PATH_GRAPH, "layer 1, after the refusals");
    refused_run(&t, 0, 1, 2, PJ_CUDA_PATH_GRAPH_STAGED, "layer 0, staged for good");
    cJSON *st = NULL;
    if (CC_STATS(&t.c, &st) == PJ_OK) {
        CHECK(pjt_json_num(st, "backend_stats.paths.graph_staged") == 7 &&
                  pjt_json_num(st, "backend_stats.paths.graph") == 2,
              "refused rebinds: STATS paths graph_staged %.0f graph %.0f (want 7, 2)",
              pjt_json_num(st, "backend_stats.paths.graph_staged"),
              pjt_json_num(st, "backend_stats.paths.graph"));
        CHECK(pjt_json_num(st, "backend_stats.fatal") == 0, "refused rebinds: fatal errors");
        cJSON_Delete(st);
    }
    ipc_close(&t);
    cc_stop(&d, "refused rebinds");
}

/* cuBLAS algo 1 (cuBLASLt's first heuristic choice, as the tuned table
 * has it for several layers at m >= 32) on a client's pointers that are
 * only 2-byte aligned: the plan was chosen for aligned operands, and Lt
 * refused the launch, failing a valid request with E_BACKEND. It now falls
 * back to cublasGemmEx. Random shapes (offsets and strides of any even
 * byte count) with the engine forced. */
static void lt_unaligned(void)
{
    printf("== cuBLAS algo 1 on unaligned client pointers\n");
    pj_dproc d;
    ipc_conn t;
    char why[600];
    if (start_with_env("PROJD_FORCE_ENGINE", "cublas:algo=1", "cublas algo=1 forced", &d, &t) != 0)
        return;
    const pj_model *model = pjc_model();
    uint64_t seed = 7;
    int odd = 0;
    for (int i = 0; i < 120; i++) {
        uint32_t l = (uint32_t)i % model->n_layers;
        uint32_t mi = (uint32_t)(i / (int)model->n_layers) % PJC_N_MS;
        pjc_shape s = cc_shape(&seed, l, mi, 0);
        if (i % 2) { /* make sure: 2 bytes past a 16-byte boundary */
            s.x_off |= 1;
            s.y_off |= 1;
        }
        odd += (s.x_off % 8) != 0 || (s.y_off % 8) != 0;
        CHECK(run_ipc(&t, &s, NULL, why, sizeof why) == 0, "algo 1, random shape %d: %s", i, why);
    }
    CHECK(odd >= 60, "only %d of 120 shapes had pointers off 16-byte alignment", odd);
    ipc_close(&t);
    cc_stop(&d, "lt");
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc == 3 && strcmp(argv[1], "--child-ipc") == 0)
        return child_main(argv[2]);
    long long t0 = cc_now_us();
    char why[600];
    if (cc_gpu_count(why, sizeof why) <= 0) {
        printf("test_cuda_ipc: no GPU (%s): skipped\n", why);
        return 77;
    }
    if (pjc_init(g_model, sizeof g_model) != 0) {
        printf("FAIL: cannot build the small model\n");
        return 1;
    }
    const char *mps = getenv("CUDA_MPS_PIPE_DIRECTORY");
    printf("MPS pipe directory: %s\n", mps ? mps : "(unset: MPS probably not running)");
    pj_dproc d;
    int rc = cc_start(&d, g_model, NULL, why, sizeof why);
    CHECK(rc == 0, "start projd (cuda): %s", why);
    if (rc != 0)
        return cc_summary("test_cuda_ipc", t0);
    cc_print_log_lines(&d, "cuda: engine");
    /* This process's CUDA context (after the daemon is started). */
    cudaSetDevice(0);
    cudaFree(NULL);
    ipc_conn t;
    if (ipc_open(&t, d.url, why, sizeof why) != 0) {
        CHECK(0, "IPC client: %s", why);
        pj_dproc_dump_log(&d);
        cc_stop(&d, "ipc");
        return cc_summary("test_cuda_ipc", t0);
    }
    printf("== sweep\n");
    sweep(&t);
    printf("== inner pointer\n");
    inner_pointer(&t);
    printf("== events\n");
    events(&t);
    printf("== failures\n");
    failures(&t, t.c.welcome.device_uuid);
    printf("== other device\n");
    other_device(&t, t.c.welcome.device_uuid);
    printf("== exiting client\n");
    exiting_client(d.url, &t.c);
    char w2[600];
    pjc_shape s = cc_shape(&(uint64_t){9}, 2, 3, 1);
    CHECK(run_ipc(&t, &s, NULL, w2, sizeof w2) == 0, "request after the child exited: %s", w2);
    printf("== concurrent\n");
    concurrent(d.url);
    cJSON *st = NULL;
    if (CC_STATS(&t.c, &st) == PJ_OK) {
        cJSON *bs = cJSON_GetObjectItem(st, "backend_stats");
        cJSON *paths = bs ? cJSON_GetObjectItem(bs, "paths") : NULL;
        char *txt = paths ? cJSON_PrintUnformatted(paths) : NULL;
        printf("paths: %s\n", txt ? txt : "?");
        free(txt);
        CHECK(pjt_json_num(st, "backend_stats.fatal") == 0, "fatal errors reported");
        cJSON_Delete(st);
    }
    ipc_close(&t);
    cc_stop(&d, "ipc");
    lt_unaligned();
    refused_binds();
    return cc_summary("test_cuda_ipc", t0);
}
