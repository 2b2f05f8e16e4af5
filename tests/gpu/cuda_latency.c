/* cuda_latency.c — the cost of the process boundary, measured in one run:
 * per (layer, m), the round trip of
 *   inproc   in-process cuBLAS graph replay (x @ W.T as SGLang runs it;
 *            the router as hi GEMM + lo GEMM + add): launch, then spin on
 *            an event, timed on the host;
 *   shm      a PROJECT through projd over nng with host shared-memory
 *            buffers, timed by the client (plus the daemon's exec time);
 *   ipc      the same with CUDA IPC buffers (cudaMalloc in this process);
 *   ring     the same IPC buffers, the PROJECT through a shared-memory
 *            ring attached to the connection instead of nng.
 * Each projd result is checked once against the CPU reference on sampled
 * rows. A second table measures ways to rebind a graph's x and y per
 * request (daemon/CUDA.md): plain replay, kernel-node parameter patching,
 * staging copies around a fixed graph, re-capture + cudaGraphExecUpdate,
 * direct launches, and a cuBLAS batched GEMM reading its pointers from a
 * device table filled by a captured 24-byte copy from pinned memory.
 *
 * Usage:
 *   cuda_latency                    quick run on the small test model (what
 *                                   make test-gpu runs; exit 0 when every
 *                                   check passed)
 *   cuda_latency [--mkmodel PATH | --model PATH] [--out DIR] [--reps N]
 *                                   the table for the reference model
 *                                   (--mkmodel writes it first, seed 1)
 * Exit: 0, 1 (a check failed), 77 (no GPU).
 */
#include <cjson/cJSON.h>
/* cuBLAS's headers test macros that C leaves undefined. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wundef"
#include <cublas_v2.h>
#pragma GCC diagnostic pop
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

#include "client/projd_cuda.h"
#include "daemon/backend_cuda.h"
#include "daemon/graphs_cuda.h"
#include "daemon/model.h"
#include "daemon/modelgen.h"
#include "kernels/dispatch.h"
#include "kernels/engine.h"
#include "tests/gpu/cuda_common.h"
#include "tests/helpers/fixture.h"

#define MAX_L 8
#define N_MS  6
static const uint32_t g_ms[N_MS] = {1, 8, 16, 32, 128, 256};

typedef struct lat {
    double p50, p99, mean;
} lat;

typedef struct shape_res {
    uint32_t layer, m, n, k;
    lat inproc, shm, ipc, shm_exec, ipc_exec, ring, ring_exec;
    uint16_t eng_shm, eng_ipc, eng_ring;
    double rel_shm, rel_ipc, rel_ring;
    int ok;
} shape_res;

typedef struct rebind_res {
    char layer[64];
    uint32_t m;
    char engine[16];
    char method[16];
    double enqueue_us, p50, p99;
    int ok;
} rebind_res;

static int g_reps = 500;
static pj_model *g_md;
static pj_config g_cfg;

static lat stats_of(double *v, size_t n)
{
    lat r = {0, 0, 0};
    if (!n)
        return r;
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i];
    qsort(v, n, sizeof *v, cc_cmp_d);
    r.p50 = cc_pct(v, n, 0.5);
    r.p99 = cc_pct(v, n, 0.99);
    r.mean = s / (double)n;
    return r;
}

static double now_usf(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e6 + (double)ts.tv_nsec / 1e3;
}

static void spin(cudaEvent_t ev)
{
    while (cudaEventQuery(ev) == cudaErrorNotReady)
        ;
}

static void fill_x(uint16_t *x, size_t count, uint64_t seed)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t r = cc_mix(&seed);
        x[i] = pj_f32_to_bf16((float)((double)(r >> 11) / 9007199254740992.0 * 2.0 - 1.0));
    }
}

/* ---- in-process: device copies of the layers (bf16 / split) -------------------- */

typedef struct dev_layer {
    pj_eng_layer L;
    void *w, *lo;
    pj_eng_ws ws;
    uint32_t n; /* rows a request uses */
} dev_layer;

static int upload_layer(const pj_model_layer *ml, dev_layer *dl, cudaStream_t s)
{
    memset(dl, 0, sizeof *dl);
    size_t bytes = (size_t)ml->w.n * ml->w.k * 2;
    snprintf(dl->L.name, sizeof dl->L.name, "%s", ml->name);
    dl->L.N = ml->w.n;
    dl->L.K = ml->w.k;
    dl->L.ldw = ml->w.k;
    dl->n = ml->max_n;
    if (cudaMalloc(&dl->w, bytes) != cudaSuccess)
        return -1;
    if (ml->w.fmt == PJ_FMT_SPLIT) {
        dl->L.fmt = PJ_FMT_SPLIT;
        if (cudaMalloc(&dl->lo, bytes) != cudaSuccess)
            return -1;
        cudaMemcpy(dl->w, ml->w.hi, bytes, cudaMemcpyHostToDevice);
        cudaMemcpy(dl->lo, ml->w.lo, bytes, cudaMemcpyHostToDevice);
    } else {
        dl->L.fmt = PJ_FMT_BF16;
        const uint16_t *src = ml->w.bf16;
        uint16_t *tmp = NULL;
        if (ml->w.fmt == PJ_FMT_Z12) {
            tmp = malloc(bytes);
            if (!tmp)
                return -1;
            pj_z12_unpack(ml->w.z, tmp, ml->w.k);
            src = tmp;
        }
        cudaMemcpy(dl->w, src, bytes, cudaMemcpyHostToDevice);
        free(tmp);
    }
    dl->L.w = dl->w;
    dl->L.lo = dl->lo;
    char err[256];
    if (pj_eng_ws_init(&dl->L, 256, s, &dl->ws, err, sizeof err) != 0) {
        printf("workspace: %s\n", err);
        return -1;
    }
    return cudaDeviceSynchronize() == cudaSuccess ? 0 : -1;
}

static void free_layer(dev_layer *dl)
{
    pj_eng_ws_free(&dl->ws);
    cudaFree(dl->w);
    cudaFree(dl->lo);
}

typedef struct inproc {
    cudaStream_t s;
    pj_eng_stream *es;
    cudaEvent_t ev;
    uint16_t *x[2], *y[2], *tmp;
    size_t xbytes, ybytes;
    dev_layer dl[MAX_L];
    cublasHandle_t h;
    void *cublas_ws;
    void **slot; /* pinned host: W, x, y pointers */
    void **darr; /* device copy */
} inproc;

static pj_eng_call mk_call(inproc *ip, uint32_t l, uint32_t m, int which)
{
    pj_eng_call c;
    memset(&c, 0, sizeof c);
    c.L = &ip->dl[l].L;
    c.ws = &ip->dl[l].ws;
    c.x = ip->x[which];
    c.ldx = ip->dl[l].L.K;
    c.y = ip->y[which];
    c.ldy = ip->dl[l].n;
    c.m = m;
    c.n = ip->dl[l].n;
    return c;
}

static lat time_graph(inproc *ip, cudaGraphExec_t ge)
{
    double *v = malloc(sizeof(double) * (size_t)g_reps);
    for (int i = 0; i < 20; i++) {
        cudaGraphLaunch(ge, ip->s);
        cudaEventRecord(ip->ev, ip->s);
        spin(ip->ev);
    }
    for (int i = 0; i < g_reps; i++) {
        double t0 = now_usf();
        cudaGraphLaunch(ge, ip->s);
        cudaEventRecord(ip->ev, ip->s);
        spin(ip->ev);
        v[i] = now_usf() - t0;
    }
    lat r = stats_of(v, (size_t)g_reps);
    free(v);
    return r;
}

static int baseline_enqueue(inproc *ip, uint32_t l, uint32_t m)
{
    pj_eng_call c = mk_call(ip, l, m, 0);
    return pj_eng_baseline(0, &c, ip->tmp, ip->es);
}

/* inproc column: cuBLAS baseline graph replay. */
static lat measure_inproc(inproc *ip, uint32_t l, uint32_t m)
{
    lat bad = {-1, -1, -1};
    cudaGraph_t g;
    cudaGraphExec_t ge;
    if (cudaStreamBeginCapture(ip->s, cudaStreamCaptureModeThreadLocal) != cudaSuccess)
        return bad;
    int rc = baseline_enqueue(ip, l, m);
    if (cudaStreamEndCapture(ip->s, &g) != cudaSuccess || rc) {
        cudaGetLastError();
        return bad;
    }
    if (cudaGraphInstantiate(&ge, g, 0) != cudaSuccess) {
        cudaGraphDestroy(g);
        cudaGetLastError();
        return bad;
    }
    lat r = time_graph(ip, ge);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return r;
}

/* ---- rebinding methods ------------------------------------------------------------ */

typedef struct rb_ctx {
    inproc *ip;
    pj_eng_kind k;
    pj_eng_knobs kn;
    pj_eng_call c;
} rb_ctx;

static int rb_enqueue(void *ctx, cudaStream_t s)
{
    rb_ctx *r = ctx;
    (void)s;
    return pj_eng_launch(r->k, &r->kn, &r->c, r->ip->es);
}

/* Ptr-table cuBLAS: y = x @ W^T with pointers read on the device. */
static int ptrtable_enqueue(inproc *ip, uint32_t l, uint32_t m)
{
    dev_layer *dl = &ip->dl[l];
    const float alpha = 1.f, beta = 0.f;
    if (cudaMemcpyAsync(ip->darr, ip->slot, 3 * sizeof(void *), cudaMemcpyHostToDevice, ip->s) !=
        cudaSuccess)
        return -1;
    cublasStatus_t st = cublasGemmBatchedEx(
        ip->h, CUBLAS_OP_T, CUBLAS_OP_N, (int)dl->n, (int)m, (int)dl->L.K, &alpha,
        (const void *const *)&ip->darr[0], CUDA_R_16BF, (int)dl->L.ldw,
        (const void *const *)&ip->darr[1], CUDA_R_16BF, (int)dl->L.K, &beta, &ip->darr[2],
        CUDA_R_16BF, (int)dl->n, 1, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return st == CUBLAS_STATUS_SUCCESS ? 0 : -1;
}

static int add_rb(rebind_res *out, int *n, const char *layer, uint32_t m, const char *eng,
                  const char *method, double enq, lat r, int ok)
{
    rebind_res *x = &out[(*n)++];
    snprintf(x->layer, sizeof x->layer, "%s", layer);
    x->m = m;
    snprintf(x->engine, sizeof x->engine, "%s", eng);
    snprintf(x->method, sizeof x->method, "%s", method);
    x->enqueue_us = enq;
    x->p50 = r.p50;
    x->p99 = r.p99;
    x->ok = ok;
    return 0;
}

static void measure_rebind(inproc *ip, uint32_t l, uint32_t m, pj_eng_kind k,
                           const pj_eng_knobs *kn, rebind_res *out, int *nout)
{
    const char *lname = ip->dl[l].L.name;
    const char *ename = pj_eng_name(k);
    rb_ctx rc0 = {.ip = ip, .k = k, .kn = *kn, .c = mk_call(ip, l, m, 0)};
    if (pj_eng_launch(k, kn, &rc0.c, ip->es) != 0 || cudaStreamSynchronize(ip->s) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    char err[256];
    pj_cgraph g;
    if (pj_cg_capture(&g, ip->s, rb_enqueue, &rc0, ip->x[0], ip->xbytes, ip->y[0], ip->ybytes, err,
                      sizeof err) != 0) {
        printf("rebind %s m=%u %s: capture: %s\n", lname, m, ename, err);
        return;
    }
    double *v = calloc((size_t)g_reps, sizeof(double)), *e = calloc((size_t)g_reps, sizeof(double));
    size_t xb = (size_t)m * ip->dl[l].L.K * 2, yb = (size_t)m * ip->dl[l].n * 2;
    for (int method = 0; method < 6; method++) {
        static const char *names[] = {"replay", "patch", "staged", "update", "direct", "ptrtable"};
        if (method == 1 && !g.rebindable) {
            printf("rebind %s m=%u %s: not rebindable: %s\n", lname, m, ename, g.why);
            continue;
        }
        if (method == 5 && (k != PJ_ENG_CUBLAS || ip->dl[l].L.fmt != PJ_FMT_BF16))
            continue;
        cudaGraph_t pg = NULL;
        cudaGraphExec_t pge = NULL;
        if (method == 5) {
            ip->slot[0] = ip->dl[l].w;
            ip->slot[1] = ip->x[0];
            ip->slot[2] = ip->y[0];
            cudaStreamBeginCapture(ip->s, cudaStreamCaptureModeThreadLocal);
            int rr = ptrtable_enqueue(ip, l, m);
            if (cudaStreamEndCapture(ip->s, &pg) != cudaSuccess || rr ||
                cudaGraphInstantiate(&pge, pg, 0) != cudaSuccess) {
                cudaGetLastError();
                printf("rebind %s m=%u: ptrtable capture failed\n", lname, m);
                if (pg)
                    cudaGraphDestroy(pg);
                continue;
            }
        }
        int ok = 1;
        for (int i = -20; i < g_reps && ok; i++) {
            int w = (i & 1);
            double t0 = now_usf();
            switch (method) {
            case 0:
                ok = pj_cg_launch(&g, ip->s) == cudaSuccess;
                break;
            case 1:
                ok = pj_cg_bind(&g, ip->x[w], ip->y[w], err, sizeof err) == 0 &&
                     pj_cg_launch(&g, ip->s) == cudaSuccess;
                break;
            case 2:
                ok = pj_cg_bind(&g, ip->x[0], ip->y[0], err, sizeof err) == 0 &&
                     cudaMemcpyAsync(ip->x[0], ip->x[1], xb, cudaMemcpyDeviceToDevice, ip->s) ==
                         cudaSuccess &&
                     pj_cg_launch(&g, ip->s) == cudaSuccess &&
                     cudaMemcpyAsync(ip->y[1], ip->y[0], yb, cudaMemcpyDeviceToDevice, ip->s) ==
                         cudaSuccess;
                break;
            case 3: {
                rb_ctx rcw = rc0;
                rcw.c = mk_call(ip, l, m, w);
                cudaGraph_t ng = NULL;
                cudaGraphExecUpdateResultInfo info;
                ok = cudaStreamBeginCapture(ip->s, cudaStreamCaptureModeThreadLocal) == cudaSuccess;
                int rr = ok ? rb_enqueue(&rcw, ip->s) : -1;
                ok = cudaStreamEndCapture(ip->s, &ng) == cudaSuccess && !rr && ok;
                ok = ok && cudaGraphExecUpdate(g.ge, ng, &info) == cudaSuccess;
                if (ng)
                    cudaGraphDestroy(ng);
                ok = ok && pj_cg_launch(&g, ip->s) == cudaSuccess;
                /* The exec now points wherever the last capture did. */
                g.x_cur = (uintptr_t)ip->x[w];
                g.y_cur = (uintptr_t)ip->y[w];
                break;
            }
            case 4: {
                pj_eng_call c = mk_call(ip, l, m, w);
                ok = pj_eng_launch(k, kn, &c, ip->es) == 0;
                break;
            }
            case 5:
                ip->slot[1] = ip->x[w];
                ip->slot[2] = ip->y[w];
                ok = cudaGraphLaunch(pge, ip->s) == cudaSuccess;
                break;
            }
            double t1 = now_usf();
            cudaEventRecord(ip->ev, ip->s);
            spin(ip->ev);
            double t2 = now_usf();
            if (i >= 0) {
                e[i] = t1 - t0;
                v[i] = t2 - t0;
            }
        }
        if (!ok)
            cudaGetLastError();
        lat le = stats_of(e, (size_t)g_reps), lv = stats_of(v, (size_t)g_reps);
        add_rb(out, nout, lname, m, ename, names[method], le.mean, lv, ok);
        if (pge)
            cudaGraphExecDestroy(pge);
        if (pg)
            cudaGraphDestroy(pg);
        if (method == 3) { /* the exec was updated behind pj_cgraph's back */
            pj_cg_free(&g);
            if (pj_cg_capture(&g, ip->s, rb_enqueue, &rc0, ip->x[0], ip->xbytes, ip->y[0],
                              ip->ybytes, err, sizeof err) != 0)
                break;
        }
    }
    free(v);
    free(e);
    pj_cg_free(&g);
}

/* ---- projd ------------------------------------------------------------------------------ */

/* got (count elements; the block m x n at 0, stride ldy) held to the GPU
 * suites' check (tests/helpers/ycheck.h): every element of the block
 * scanned for poison and NaN and the buffer after it for anything written,
 * and the elements of columns [0, 8) and [n - 8, n), the rows of W the CPU
 * reference can afford on the 8B-shaped layers, judged against it. 0, or
 * -1 with why. *rel: the relative L2 error over the judged elements, for
 * the table (1e9 when not computed). */
static int sample_check(const pj_model_layer *ml, uint32_t m, uint32_t n, const uint16_t *x,
                        const uint16_t *got, size_t ldy, size_t count, double *rel, char *why,
                        size_t whylen)
{
    const uint32_t K = ml->w.k;
    *rel = 1e9;
    pjy_tally t;
    pjy_tally_init(&t);
    for (size_t e = 0; e < count; e++) {
        if (e / ldy < m && e % ldy < n)
            pjy_tally_written(&t, e, got[e]);
        else
            pjy_tally_outside(&t, e, got[e]);
    }
    uint16_t *ref = malloc((size_t)m * n * 2);
    float *aw = malloc((size_t)K * sizeof *aw);
    if (!ref || !aw) {
        free(ref);
        free(aw);
        snprintf(why, whylen, "out of memory");
        return -1;
    }
    uint32_t rs[2][2] = {{0, n < 8 ? n : 8}, {n > 8 ? n - 8 : 0, n}};
    int rc = 0;
    for (int b = 0; b < 2 && rc == 0; b++) {
        if (pj_ref_project_rows(&ml->w, m, rs[b][0], rs[b][1], x, K, ref, n, NULL) != 0) {
            snprintf(why, whylen, "the CPU reference failed");
            rc = -1;
            break;
        }
        for (uint32_t c = rs[b][0]; c < rs[b][1] && rc == 0; c++) {
            if (b == 1 && c < rs[0][1])
                continue; /* n <= 16: the two ranges overlap */
            if (pjy_abs_w_row(&ml->w, c, aw) != 0) {
                snprintf(why, whylen, "|W| row %u: out of memory or unknown format", c);
                rc = -1;
                break;
            }
            for (uint32_t i = 0; i < m; i++) {
                const size_t e = (size_t)i * ldy + c;
                const uint16_t gv = got[e];
                if (gv == PJC_POISON || isnan(pj_bf16_to_f32(gv)))
                    continue; /* counted by the scan above */
                double sabs = 0;
                for (uint32_t k = 0; k < K; k++)
                    sabs += fabsf(pj_bf16_to_f32(x[(size_t)i * K + k])) * aw[k];
                pjy_tally_judge(&t, e, gv, ref[(size_t)i * n + c], sabs);
            }
        }
    }
    free(ref);
    free(aw);
    if (rc != 0)
        return rc;
    *rel = pjy_tally_rel(&t);
    return pjy_tally_verdict(&t, "sampled columns [0, 8) and [n - 8, n)", why, whylen);
}

typedef struct dconn {
    pjt_client c;
    pjt_shm xs, ys;
    uint32_t sx, sy; /* shm ids */
    void *dx, *dy;   /* IPC */
    uint32_t ix, iy; /* IPC ids */
    size_t xbytes, ybytes;
} dconn;

static int time_projd(dconn *dc, int ipc, uint32_t l, uint32_t m, uint32_t n, lat *total, lat *exec,
                      uint16_t *eng)
{
    const pj_model_layer *ml = &g_md->layers[l];
    pj_op op = {.layer = l,
                .m = m,
                .n = n,
                .x_buf = ipc ? dc->ix : dc->sx,
                .x_ld = ml->w.k,
                .y_buf = ipc ? dc->iy : dc->sy,
                .y_ld = n};
    double *v = calloc((size_t)g_reps, sizeof(double)), *e = calloc((size_t)g_reps, sizeof(double));
    int ok = 1;
    for (int i = -10; i < g_reps && ok; i++) {
        pj_done d;
        pj_op_result res[1];
        double t0 = now_usf();
        int rc = pjt_project(&dc->c, 0, &op, 1, &d, res);
        double t1 = now_usf();
        ok = rc == PJ_OK && d.status == PJ_OK;
        if (i >= 0 && ok) {
            v[i] = t1 - t0;
            e[i] = (double)d.exec_ns / 1e3;
            *eng = res[0].engine;
        }
    }
    if (ok) {
        *total = stats_of(v, (size_t)g_reps);
        *exec = stats_of(e, (size_t)g_reps);
    }
    free(v);
    free(e);
    return ok ? 0 : -1;
}

/* g_reps PING round trips (after 10 unrecorded). */
static lat time_ping(dconn *dc)
{
    double *pv = calloc((size_t)g_reps, sizeof(double));
    int ping_fail = 0;
    for (int i = -10; i < g_reps; i++) {
        double t0p = now_usf();
        ping_fail += pjt_ping(&dc->c) != PJ_OK;
        if (i >= 0)
            pv[i] = now_usf() - t0p;
    }
    CHECK(ping_fail == 0, "%d PINGs failed", ping_fail);
    lat l = stats_of(pv, (size_t)g_reps);
    free(pv);
    return l;
}

static const char *path_name(int p)
{
    switch (p) {
    case PJ_CUDA_PATH_GRAPH:
        return "graph";
    case PJ_CUDA_PATH_GRAPH_STAGED:
        return "graph-staged";
    case PJ_CUDA_PATH_DIRECT:
        return "direct";
    case PJ_CUDA_PATH_DIRECT_STAGED:
        return "direct-staged";
    default:
        return "?";
    }
}

static cJSON *lat_json(lat r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "p50_us", r.p50);
    cJSON_AddNumberToObject(o, "p99_us", r.p99);
    cJSON_AddNumberToObject(o, "mean_us", r.mean);
    return o;
}

static const char *fmt_name(pj_format_pref f)
{
    switch (f) {
    case PJ_FPREF_BF16:
        return "bf16";
    case PJ_FPREF_Z12:
        return "z12";
    case PJ_FPREF_SPLIT:
        return "split";
    default:
        return "auto";
    }
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    long long t_start = cc_now_us();
    const char *model = NULL, *mkmodel = NULL, *out = NULL;
    int quick = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--model") && i + 1 < argc) {
            model = argv[++i];
            quick = 0;
        } else if (!strcmp(argv[i], "--mkmodel") && i + 1 < argc) {
            mkmodel = argv[++i];
            quick = 0;
        } else if (!strcmp(argv[i], "--out") && i + 1 < argc) {
            out = argv[++i];
        } else if (!strcmp(argv[i], "--reps") && i + 1 < argc) {
            g_reps = atoi(argv[++i]);
        } else if (!strcmp(argv[i], "--quick")) {
            quick = 1;
        } else {
            fprintf(stderr, "usage: cuda_latency [--mkmodel PATH | --model PATH] [--out DIR] "
                            "[--reps N]\n");
            return 2;
        }
    }
    char why[600];
    if (cc_gpu_count(why, sizeof why) <= 0) {
        printf("cuda_latency: no GPU (%s): skipped\n", why);
        return 77;
    }
    if (g_reps < 10)
        g_reps = 10;
    static char path[4200];
    if (quick) {
        if (g_reps == 500)
            g_reps = 50;
        if (pj_fixture_small_model(path, sizeof path) != 0)
            return 1;
        model = path;
    } else if (mkmodel) {
        double t0 = now_usf();
        pj_modelgen_opts o = {.seed = 1, .preset = PJ_MODELGEN_REFERENCE};
        if (pj_modelgen_write(mkmodel, &o, why, sizeof why) != 0) {
            printf("FAIL: mkmodel: %s\n", why);
            return 1;
        }
        printf("reference model written to %s in %.1f s\n", mkmodel, (now_usf() - t0) / 1e6);
        model = mkmodel;
    }
    if (!model) {
        fprintf(stderr, "cuda_latency: --model or --mkmodel\n");
        return 2;
    }
    /* The reference workload reads a 1024-row prefix of unpooler. */
    pj_config_defaults(&g_cfg);
    snprintf(g_cfg.model.path, sizeof g_cfg.model.path, "%s", model);
    if (!quick)
        for (uint32_t i = 0; i < g_cfg.model.n_layers; i++)
            if (!strcmp(g_cfg.model.layers[i].name, "unpooler"))
                g_cfg.model.layers[i].max_n = 1024;
    double t0 = now_usf();
    if (pj_model_load(&g_cfg, &g_md, NULL, NULL, why, sizeof why) != 0) {
        printf("FAIL: model: %s\n", why);
        return 1;
    }
    printf("model %s loaded here in %.1f s\n", model, (now_usf() - t0) / 1e6);
    uint32_t nl = g_md->n_layers < MAX_L ? g_md->n_layers : MAX_L;

    /* projd first (its start-up takes a while), with the same layer list. */
    cJSON *cfgj = cJSON_CreateObject();
    cJSON *layers = cJSON_AddArrayToObject(cJSON_AddObjectToObject(cfgj, "model"), "layers");
    for (uint32_t i = 0; i < g_cfg.model.n_layers; i++) {
        const pj_layer_config *lc = &g_cfg.model.layers[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "name", lc->name);
        cJSON_AddStringToObject(o, "tensor", lc->tensor);
        cJSON_AddStringToObject(o, "format", fmt_name(lc->format));
        if (lc->max_n)
            cJSON_AddNumberToObject(o, "max_n", lc->max_n);
        cJSON_AddItemToArray(layers, o);
    }
    char *cfgtxt = cJSON_PrintUnformatted(cfgj);
    cJSON_Delete(cfgj);
    pj_dproc d;
    t0 = now_usf();
    int rc = cc_start(&d, model, cfgtxt, why, sizeof why);
    free(cfgtxt);
    if (rc != 0) {
        printf("FAIL: start projd: %s\n", why);
        return 1;
    }
    printf("projd ready after %.1f s; its start-up report:\n", (now_usf() - t0) / 1e6);
    cc_print_log_lines(&d, "cuda:");
    cc_print_log_lines(&d, "model loaded");

    /* In-process side. */
    cudaSetDevice(0);
    inproc ip;
    memset(&ip, 0, sizeof ip);
    uint32_t maxk = 0, maxn = 0;
    for (uint32_t l = 0; l < nl; l++) {
        if (g_md->layers[l].w.k > maxk)
            maxk = g_md->layers[l].w.k;
        if (g_md->layers[l].w.n > maxn)
            maxn = g_md->layers[l].w.n;
    }
    ip.xbytes = (size_t)256 * maxk * 2;
    ip.ybytes = (size_t)256 * maxn * 2;
    int setup = cudaStreamCreateWithFlags(&ip.s, cudaStreamNonBlocking) == cudaSuccess &&
                cudaEventCreateWithFlags(&ip.ev, cudaEventDisableTiming) == cudaSuccess &&
                pj_eng_stream_create(ip.s, &ip.es, why, sizeof why) == 0;
    for (int i = 0; i < 2 && setup; i++)
        setup = cudaMalloc((void **)&ip.x[i], ip.xbytes) == cudaSuccess &&
                cudaMalloc((void **)&ip.y[i], ip.ybytes) == cudaSuccess;
    setup = setup && cudaMalloc((void **)&ip.tmp, ip.ybytes) == cudaSuccess &&
            cudaMallocHost((void **)&ip.slot, 4 * sizeof(void *)) == cudaSuccess &&
            cudaMalloc((void **)&ip.darr, 4 * sizeof(void *)) == cudaSuccess &&
            cudaMalloc(&ip.cublas_ws, 32u << 20) == cudaSuccess &&
            cublasCreate(&ip.h) == CUBLAS_STATUS_SUCCESS &&
            cublasSetStream(ip.h, ip.s) == CUBLAS_STATUS_SUCCESS &&
            cublasSetWorkspace(ip.h, ip.cublas_ws, 32u << 20) == CUBLAS_STATUS_SUCCESS;
    for (uint32_t l = 0; l < nl && setup; l++)
        setup = upload_layer(&g_md->layers[l], &ip.dl[l], ip.s) == 0;
    if (!setup) {
        printf("FAIL: in-process setup: %s\n", why);
        pj_dproc_stop(&d, 30000);
        return 1;
    }
    uint16_t *hx = malloc(ip.xbytes);
    fill_x(hx, ip.xbytes / 2, 77);
    for (int i = 0; i < 2; i++)
        cudaMemcpy(ip.x[i], hx, ip.xbytes, cudaMemcpyHostToDevice);

    shape_res res[MAX_L * N_MS];
    memset(res, 0, sizeof res);
    int nres = 0;
    for (uint32_t l = 0; l < nl; l++)
        for (int mi = 0; mi < N_MS; mi++) {
            shape_res *r = &res[nres++];
            r->layer = l;
            r->m = g_ms[mi];
            r->n = g_md->layers[l].max_n;
            r->k = g_md->layers[l].w.k;
            r->inproc = measure_inproc(&ip, l, g_ms[mi]);
        }

    /* Rebinding methods on a few shapes. */
    rebind_res rb[256];
    int nrb = 0;
    pj_dev_limits lim;
    pj_eng_dev_limits(&lim, why, sizeof why);
    for (uint32_t l = 0; l < nl; l++) {
        if (strcmp(ip.dl[l].L.name, "qkv_gate") && strcmp(ip.dl[l].L.name, "router"))
            continue;
        for (int mi = 0; mi < N_MS; mi++) {
            uint32_t m = g_ms[mi];
            if (m != 1 && m != 128)
                continue;
            pj_eng_knobs kn = pj_eng_default_knobs(PJ_ENG_CUBLAS, &ip.dl[l].L, m);
            measure_rebind(&ip, l, m, PJ_ENG_CUBLAS, &kn, rb, &nrb);
            pj_eng_call c = mk_call(&ip, l, m, 0);
            pj_eng_kind k;
            if (pj_eng_choose(NULL, NULL, NULL, &c, &lim, &k, &kn) >= 0 && k != PJ_ENG_CUBLAS)
                measure_rebind(&ip, l, m, k, &kn, rb, &nrb);
        }
    }

    /* projd: shm, then IPC. */
    dconn dc;
    memset(&dc, 0, sizeof dc);
    dc.xbytes = ip.xbytes;
    dc.ybytes = ip.ybytes;
    int conn_ok =
        pjt_connect(&dc.c, d.url, CC_REPLY_MS) == 0 && pjt_hello(&dc.c, "cuda_latency") == PJ_OK &&
        pjt_shm_create(&dc.xs, dc.xbytes) == 0 && pjt_shm_create(&dc.ys, dc.ybytes) == 0 &&
        pjt_register_shm(&dc.c, dc.xs.name, dc.xbytes, &dc.sx) == PJ_OK &&
        pjt_register_shm(&dc.c, dc.ys.name, dc.ybytes, &dc.sy) == PJ_OK &&
        cudaMalloc(&dc.dx, dc.xbytes) == cudaSuccess &&
        cudaMalloc(&dc.dy, dc.ybytes) == cudaSuccess;
    if (conn_ok) {
        projd_cuda_region rx, ry;
        pj_register req;
        conn_ok = projd_cuda_describe(dc.dx, &rx, why, sizeof why) == 0 &&
                  projd_cuda_describe(dc.dy, &ry, why, sizeof why) == 0;
        if (conn_ok) {
            projd_cuda_register_req(&rx, &req);
            conn_ok = pjt_register_raw(&dc.c, &req, &dc.ix) == PJ_OK;
            projd_cuda_register_req(&ry, &req);
            conn_ok = conn_ok && pjt_register_raw(&dc.c, &req, &dc.iy) == PJ_OK;
        }
    }
    CHECK(conn_ok, "projd connection / buffers: %s %s", why, dc.c.err.msg);
    memcpy(dc.xs.p, hx, dc.xbytes);
    cudaMemcpy(dc.dx, hx, dc.xbytes, cudaMemcpyHostToDevice);
    cudaDeviceSynchronize();
    /* The boundary alone: PING round trips over nng (and later the ring). */
    lat ping = {0, 0, 0}, ring_ping = {0, 0, 0};
    if (conn_ok)
        ping = time_ping(&dc);
    uint16_t *hy = malloc(dc.ybytes);
    for (int i = 0; i < nres && conn_ok; i++) {
        shape_res *r = &res[i];
        const pj_model_layer *ml = &g_md->layers[r->layer];
        memset(dc.ys.p, 0xff, dc.ybytes);
        rc = time_projd(&dc, 0, r->layer, r->m, r->n, &r->shm, &r->shm_exec, &r->eng_shm);
        CHECK(rc == 0, "projd shm %s m=%u failed: %s", ml->name, r->m, dc.c.err.msg);
        char why_shm[512] = "not run", why_ipc[512] = "not run";
        r->rel_shm = r->rel_ipc = 1e9; /* what the table shows for a run that failed */
        int bad_shm = rc != 0 || sample_check(ml, r->m, r->n, hx, dc.ys.p, r->n, dc.ybytes / 2,
                                              &r->rel_shm, why_shm, sizeof why_shm) != 0;
        cudaMemset(dc.dy, 0xff, dc.ybytes);
        cudaDeviceSynchronize();
        rc = time_projd(&dc, 1, r->layer, r->m, r->n, &r->ipc, &r->ipc_exec, &r->eng_ipc);
        CHECK(rc == 0, "projd ipc %s m=%u failed: %s", ml->name, r->m, dc.c.err.msg);
        cudaMemcpy(hy, dc.dy, dc.ybytes, cudaMemcpyDeviceToHost);
        int bad_ipc = rc != 0 || sample_check(ml, r->m, r->n, hx, hy, r->n, dc.ybytes / 2,
                                              &r->rel_ipc, why_ipc, sizeof why_ipc) != 0;
        CHECK(!bad_shm && !bad_ipc,
              "%s m=%u: projd result differs from the CPU reference (shm: %s; ipc: %s)", ml->name,
              r->m, bad_shm ? why_shm : "ok", bad_ipc ? why_ipc : "ok");
        r->ok = !bad_shm && !bad_ipc;
    }
    /* The same connection with a ring attached: PROJECT and PING go
     * through shared memory from here on. */
    int ring_ok = conn_ok && pjt_ring_attach(&dc.c, 8, PJ_RING_DEFAULT_SLOT) == PJ_OK;
    CHECK(!conn_ok || ring_ok, "ring attach: %s", dc.c.err.msg);
    if (ring_ok)
        ring_ping = time_ping(&dc);
    for (int i = 0; i < nres && ring_ok; i++) {
        shape_res *r = &res[i];
        const pj_model_layer *ml = &g_md->layers[r->layer];
        cudaMemset(dc.dy, 0xff, dc.ybytes);
        cudaDeviceSynchronize();
        rc = time_projd(&dc, 1, r->layer, r->m, r->n, &r->ring, &r->ring_exec, &r->eng_ring);
        CHECK(rc == 0, "projd ring %s m=%u failed: %s", ml->name, r->m, dc.c.err.msg);
        cudaMemcpy(hy, dc.dy, dc.ybytes, cudaMemcpyDeviceToHost);
        char why_ring[512] = "not run";
        r->rel_ring = 1e9;
        int bad_ring = rc != 0 || sample_check(ml, r->m, r->n, hx, hy, r->n, dc.ybytes / 2,
                                               &r->rel_ring, why_ring, sizeof why_ring) != 0;
        CHECK(!bad_ring, "%s m=%u: ring result differs from the CPU reference: %s", ml->name, r->m,
              why_ring);
        r->ok = r->ok && !bad_ring;
    }
    cJSON *stats = NULL;
    pjt_stats(&dc.c, &stats);
    pjt_close(&dc.c);
    pjt_shm_destroy(&dc.xs);
    pjt_shm_destroy(&dc.ys);

    /* Tables. */
    printf("\nRound trip per projection, µs (p50 / p99); %d repetitions each; device %s\n", g_reps,
           lim.name);
    printf("PING round trip (no GPU work): nng %.1f / %.1f, ring %.1f / %.1f\n", ping.p50, ping.p99,
           ring_ping.p50, ring_ping.p99);
    printf("| layer (n x k) | m | in-process cuBLAS graph | projd shm | projd CUDA IPC | projd "
           "IPC via ring | projd exec (IPC) | projd engine, path | rel err |\n");
    printf("| --- | --- | --- | --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < nres; i++) {
        shape_res *r = &res[i];
        double rel = r->rel_ipc > r->rel_shm ? r->rel_ipc : r->rel_shm;
        printf("| %s (%u x %u) | %u | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | %.1f / %.1f | "
               "%.1f | %s, %s | %.1e |\n",
               g_md->layers[r->layer].name, r->n, r->k, r->m, r->inproc.p50, r->inproc.p99,
               r->shm.p50, r->shm.p99, r->ipc.p50, r->ipc.p99, r->ring.p50, r->ring.p99,
               r->ipc_exec.p50, pj_eng_name((pj_eng_kind)(r->eng_ipc & 0xff)),
               path_name(r->eng_ipc >> 8), r->rel_ring > rel ? r->rel_ring : rel);
    }
    printf("\nRebinding x / y per request (in-process, µs: host enqueue mean, round trip p50 / "
           "p99)\n");
    printf("| layer | m | engine | method | enqueue | round trip p50 / p99 |\n");
    printf("| --- | --- | --- | --- | --- | --- |\n");
    for (int i = 0; i < nrb; i++)
        printf("| %s | %u | %s | %s | %.2f | %.1f / %.1f |%s\n", rb[i].layer, rb[i].m, rb[i].engine,
               rb[i].method, rb[i].enqueue_us, rb[i].p50, rb[i].p99, rb[i].ok ? "" : " (failed)");

    if (out) {
        mkdir(out, 0755);
        cJSON *root = cJSON_CreateObject();
        cJSON_AddStringToObject(root, "device", lim.name);
        cJSON_AddStringToObject(root, "model", model);
        cJSON_AddNumberToObject(root, "reps", g_reps);
        cJSON_AddNumberToObject(root, "cublas_version", pj_eng_cublas_version());
        cJSON_AddItemToObject(root, "ping", lat_json(ping));
        cJSON_AddItemToObject(root, "ping_ring", lat_json(ring_ping));
        cJSON *arr = cJSON_AddArrayToObject(root, "shapes");
        for (int i = 0; i < nres; i++) {
            shape_res *r = &res[i];
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", g_md->layers[r->layer].name);
            cJSON_AddNumberToObject(o, "n", r->n);
            cJSON_AddNumberToObject(o, "k", r->k);
            cJSON_AddNumberToObject(o, "m", r->m);
            cJSON_AddItemToObject(o, "inproc_cublas_graph", lat_json(r->inproc));
            cJSON_AddItemToObject(o, "projd_shm", lat_json(r->shm));
            cJSON_AddItemToObject(o, "projd_shm_exec", lat_json(r->shm_exec));
            cJSON_AddItemToObject(o, "projd_ipc", lat_json(r->ipc));
            cJSON_AddItemToObject(o, "projd_ipc_exec", lat_json(r->ipc_exec));
            cJSON_AddItemToObject(o, "projd_ring", lat_json(r->ring));
            cJSON_AddItemToObject(o, "projd_ring_exec", lat_json(r->ring_exec));
            cJSON_AddNumberToObject(o, "rel_err_ring", r->rel_ring);
            cJSON_AddStringToObject(o, "engine", pj_eng_name((pj_eng_kind)(r->eng_ipc & 0xff)));
            cJSON_AddStringToObject(o, "path_ipc", path_name(r->eng_ipc >> 8));
            cJSON_AddStringToObject(o, "path_shm", path_name(r->eng_shm >> 8));
            cJSON_AddNumberToObject(o, "rel_err_shm", r->rel_shm);
            cJSON_AddNumberToObject(o, "rel_err_ipc", r->rel_ipc);
            cJSON_AddItemToArray(arr, o);
        }
        cJSON *rba = cJSON_AddArrayToObject(root, "rebind");
        for (int i = 0; i < nrb; i++) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddStringToObject(o, "layer", rb[i].layer);
            cJSON_AddNumberToObject(o, "m", rb[i].m);
            cJSON_AddStringToObject(o, "engine", rb[i].engine);
            cJSON_AddStringToObject(o, "method", rb[i].method);
            cJSON_AddNumberToObject(o, "enqueue_us", rb[i].enqueue_us);
            cJSON_AddNumberToObject(o, "p50_us", rb[i].p50);
            cJSON_AddNumberToObject(o, "p99_us", rb[i].p99);
            cJSON_AddBoolToObject(o, "ok", rb[i].ok);
            cJSON_AddItemToArray(rba, o);
        }
        if (stats)
            cJSON_AddItemToObject(root, "projd_stats", stats);
        stats = NULL;
        char *txt = cJSON_Print(root);
        char fn[4400];
        snprintf(fn, sizeof fn, "%s/latency.json", out);
        FILE *f = fopen(fn, "w");
        if (f && txt) {
            fputs(txt, f);
            fclose(f);
            printf("\nwrote %s\n", fn);
        }
        free(txt);
        cJSON_Delete(root);
    }
    cJSON_Delete(stats);
    cudaFree(dc.dx);
    cudaFree(dc.dy);
    free(hx);
    free(hy);
    for (uint32_t l = 0; l < nl; l++)
        free_layer(&ip.dl[l]);
    cc_stop(&d, "latency");
    return cc_summary("cuda_latency", t_start);
}
