/* loadgpu_cuda.c — see loadgpu.h. */
#include "client/loadgpu.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "client/projd_cuda.h"
#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/engine.h"
#include "kernels/engupload.h"

#define LG_ALIGN 256 /* the slot layout of projload_main.c */

static size_t lg_align(size_t v)
{
    return (v + LG_ALIGN - 1) / LG_ALIGN * LG_ALIGN;
}

static int ce_fail(cudaError_t ce, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s (%s)", what, cudaGetErrorString(ce), cudaGetErrorName(ce));
    cudaGetLastError();
    return -EIO;
}

static uint64_t mono_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- client buffers ------------------------------------------------------------------- */

struct pj_lgpu_bufs {
    void *dx, *dy;
    uint8_t *hx, *hy;
    cudaStream_t s;
    uint32_t xid, yid;
    uint64_t xoff, yoff;
    int x_reg, y_reg;
};

int pj_lgpu_available(char *why, size_t len)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n < 1) {
        snprintf(why, len, "no CUDA device in this process (%s)",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "device count 0");
        cudaGetLastError();
        return 0;
    }
    return 1;
}

int pj_lgpu_create(projd_conn *c, size_t xbytes, size_t ybytes, pj_lgpu_bufs **out, char *err,
                   size_t errlen)
{
    *out = NULL;
    pj_lgpu_bufs *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    cudaError_t ce = cudaStreamCreateWithFlags(&b->s, cudaStreamNonBlocking);
    int rc = 0;
    if (ce != cudaSuccess) {
        rc = ce_fail(ce, "cudaStreamCreateWithFlags", err, errlen);
        goto fail;
    }
    /* cudaMalloc (not the async allocator): only it has legacy IPC handles. */
    if ((ce = cudaMalloc(&b->dx, xbytes)) != cudaSuccess ||
        (ce = cudaMalloc(&b->dy, ybytes)) != cudaSuccess) {
        rc = ce_fail(ce, "cudaMalloc of x / y", err, errlen);
        goto fail;
    }
    if ((ce = cudaMallocHost((void **)&b->hx, xbytes)) != cudaSuccess ||
        (ce = cudaMallocHost((void **)&b->hy, ybytes)) != cudaSuccess) {
        rc = ce_fail(ce, "cudaMallocHost of the host mirrors", err, errlen);
        goto fail;
    }
    projd_error e;
    if ((rc = projd_cuda_register(c, b->dx, &b->xid, &b->xoff, &e)) != 0) {
        snprintf(err, errlen, "registering x (%zu bytes of device memory): %s", xbytes, e.msg);
        goto fail;
    }
    b->x_reg = 1;
    if ((rc = projd_cuda_register(c, b->dy, &b->yid, &b->yoff, &e)) != 0) {
        snprintf(err, errlen, "registering y (%zu bytes of device memory): %s", ybytes, e.msg);
        goto fail;
    }
    b->y_reg = 1;
    *out = b;
    return 0;
fail:
    pj_lgpu_destroy(b, c);
    return rc;
}

uint8_t *pj_lgpu_host_x(const pj_lgpu_bufs *b)
{
    return b->hx;
}
uint8_t *pj_lgpu_host_y(const pj_lgpu_bufs *b)
{
    return b->hy;
}
uint32_t pj_lgpu_x_id(const pj_lgpu_bufs *b)
{
    return b->xid;
}
uint32_t pj_lgpu_y_id(const pj_lgpu_bufs *b)
{
    return b->yid;
}
uint64_t pj_lgpu_x_off(const pj_lgpu_bufs *b)
{
    return b->xoff;
}
uint64_t pj_lgpu_y_off(const pj_lgpu_bufs *b)
{
    return b->yoff;
}

int pj_lgpu_to_device(pj_lgpu_bufs *b, size_t xo, size_t xlen, size_t yo, size_t ylen, char *err,
                      size_t errlen)
{
    cudaError_t ce = cudaSuccess;
    if (xlen)
        ce = cudaMemcpyAsync((uint8_t *)b->dx + xo, b->hx + xo, xlen, cudaMemcpyHostToDevice, b->s);
    if (ce == cudaSuccess && ylen)
        ce = cudaMemcpyAsync((uint8_t *)b->dy + yo, b->hy + yo, ylen, cudaMemcpyHostToDevice, b->s);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(b->s);
    return ce == cudaSuccess ? 0 : ce_fail(ce, "copying x / poisoned y to the device", err, errlen);
}

int pj_lgpu_y_to_host(pj_lgpu_bufs *b, size_t yo, size_t ylen, char *err, size_t errlen)
{
    cudaError_t ce =
        cudaMemcpyAsync(b->hy + yo, (uint8_t *)b->dy + yo, ylen, cudaMemcpyDeviceToHost, b->s);
    if (ce == cudaSuccess)
        ce = cudaStreamSynchronize(b->s);
    return ce == cudaSuccess ? 0 : ce_fail(ce, "copying y back from the device", err, errlen);
}

void pj_lgpu_destroy(pj_lgpu_bufs *b, projd_conn *c)
{
    if (!b)
        return;
    /* The daemon unmaps before the memory goes away. */
    if (c && b->x_reg)
        projd_unregister(c, b->xid, NULL);
    if (c && b->y_reg)
        projd_unregister(c, b->yid, NULL);
    if (b->s)
        cudaStreamSynchronize(b->s);
    cudaFree(b->dx);
    cudaFree(b->dy);
    cudaFreeHost(b->hx);
    cudaFreeHost(b->hy);
    if (b->s)
        cudaStreamDestroy(b->s);
    cudaGetLastError();
    free(b);
}

/* ---- compare mode --------------------------------------------------------------------- */

#define LC_MAX_L 64

typedef struct lc_layer {
    int used;
    pj_eng_layer L;
    pj_engup_mem mem; /* the device arrays behind L */
    pj_eng_ws ws;
} lc_layer;

struct pj_lcmp {
    cudaStream_t s;
    pj_eng_stream *es;
    cudaEvent_t e0, e1, done;
    pj_dev_limits lim;
    pj_tune_table *table;
    lc_layer l[LC_MAX_L];
    uint32_t n_l;
    uint16_t *x, *y, *y2, *tmp;
    size_t slot_x, slot_y;
    char desc[512];
};

/* ctx: the table's path; the loader's messages begin "tuning table: ". */
static void table_msg(void *ctx, const char *msg)
{
    fprintf(stderr, "projload: --compare: tuning table %s: %s\n", (const char *)ctx,
            pj_tune_msg_text(msg));
}

static void fill_x(uint16_t *x, size_t count)
{
    uint64_t s = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < count; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float f = (float)((int32_t)(s >> 40) - (1 << 23)) * 0x1p-23f;
        x[i] = pj_f32_to_bf16(f);
    }
}

int pj_lcmp_open(const pj_model *model, const int *layer_map, uint32_t n_map, uint32_t max_m,
                 size_t slot_x, size_t slot_y, const char *table, pj_lcmp **out, char *err,
                 size_t errlen)
{
    *out = NULL;
    if (n_map > LC_MAX_L) {
        snprintf(err, errlen, "--compare: %u layers, at most %d", n_map, LC_MAX_L);
        return -EINVAL;
    }
    pj_lcmp *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "--compare: out of memory");
        return -ENOMEM;
    }
    int rc;
    cudaError_t ce = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
    if (ce == cudaSuccess)
        ce = cudaEventCreate(&c->e0);
    if (ce == cudaSuccess)
        ce = cudaEventCreate(&c->e1);
    if (ce == cudaSuccess)
        ce = cudaEventCreateWithFlags(&c->done, cudaEventDisableTiming);
    if (ce != cudaSuccess) {
        rc = ce_fail(ce, "--compare: stream / events", err, errlen);
        goto fail;
    }
    if ((rc = pj_eng_dev_limits(&c->lim, err, errlen)) != 0 ||
        (rc = pj_eng_stream_create(c->s, &c->es, err, errlen)) != 0)
        goto fail;
    c->table = calloc(1, sizeof *c->table);
    if (!c->table) {
        rc = -ENOMEM;
        snprintf(err, errlen, "--compare: out of memory");
        goto fail;
    }
    char tdesc[300] = "none (untuned ladder)";
    if (table && *table) {
        char terr[256];
        int n = pj_tune_load(table, c->table, pj_eng_check_entry, &c->lim, table_msg, (void *)table,
                             terr, sizeof terr);
        if (n < 0) {
            snprintf(err, errlen, "--compare: --table: %s", terr);
            rc = n;
            goto fail;
        }
        if (c->table->device[0] && strcasecmp(c->table->device, c->lim.name) != 0) {
            snprintf(err, errlen, "--compare: --table %s is for \"%s\", this device is \"%s\"",
                     table, c->table->device, c->lim.name);
            rc = -EINVAL;
            goto fail;
        }
        snprintf(tdesc, sizeof tdesc, "%s (%d entries)", table, n);
    }
    for (uint32_t i = 0; i < n_map; i++) {
        if (layer_map[i] < 0)
            continue;
        lc_layer *cl = &c->l[i];
        const pj_model_layer *ml = &model->layers[layer_map[i]];
        /* The daemon's upload; cuBLAS here always needs a z12 layer's bf16
         * copy. */
        if ((rc = pj_engup_layer(ml->name, &ml->w, 1, 0, &cl->L, &cl->mem, err, errlen)) != 0)
            goto fail;
        /* the table's entries the daemon runs it with */
        snprintf(cl->L.table_name, sizeof cl->L.table_name, "%s", ml->tuned_as);
        if ((rc = pj_eng_ws_init(&cl->L, max_m, c->s, &cl->ws, err, errlen)) != 0)
            goto fail;
        cl->used = 1;
    }
    c->n_l = n_map;
    c->slot_x = slot_x;
    c->slot_y = slot_y;
    if ((ce = cudaMalloc((void **)&c->x, slot_x)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&c->y, slot_y)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&c->y2, slot_y)) != cudaSuccess ||
        (ce = cudaMalloc((void **)&c->tmp, slot_y)) != cudaSuccess) {
        rc = ce_fail(ce, "--compare: x / y buffers", err, errlen);
        goto fail;
    }
    uint16_t *hx = malloc(slot_x);
    if (!hx) {
        rc = -ENOMEM;
        snprintf(err, errlen, "--compare: out of memory");
        goto fail;
    }
    fill_x(hx, slot_x / 2);
    ce = cudaMemcpy(c->x, hx, slot_x, cudaMemcpyHostToDevice);
    free(hx);
    if (ce == cudaSuccess)
        ce = cudaDeviceSynchronize();
    if (ce != cudaSuccess) {
        rc = ce_fail(ce, "--compare: uploading x", err, errlen);
        goto fail;
    }
    snprintf(c->desc, sizeof c->desc, "device %s (%d SMs), cuBLAS %d, table %s", c->lim.name,
             c->lim.sm_count, pj_eng_cublas_version(), tdesc);
    *out = c;
    return 0;
fail:
    pj_lcmp_close(c);
    return rc;
}

const char *pj_lcmp_describe(const pj_lcmp *c)
{
    return c->desc;
}

static pj_eng_call mk_call(pj_lcmp *c, uint32_t layer, uint32_t m, uint32_t n, size_t xo, size_t yo,
                           uint16_t *y)
{
    pj_eng_call k;
    memset(&k, 0, sizeof k);
    k.L = &c->l[layer].L;
    k.ws = &c->l[layer].ws;
    k.x = (const uint16_t *)((const uint8_t *)c->x + xo);
    k.ldx = c->l[layer].L.K;
    k.y = (uint16_t *)((uint8_t *)y + yo);
    k.ldy = n;
    k.m = m;
    k.n = n;
    return k;
}

/* Enqueues one op on the path; 0 or -errno with err. */
static int enqueue(pj_lcmp *c, int path, const pj_eng_call *k, const char *lname, char *err,
                   size_t errlen)
{
    int rc;
    if (path == PJ_LCMP_CUBLAS) {
        rc = pj_eng_baseline(0, k, c->tmp, c->es);
        if (rc)
            snprintf(err, errlen, "%s m=%u n=%u: cuBLAS baseline failed (%d)", lname, k->m, k->n,
                     rc);
        return rc;
    }
    pj_eng_kind kind;
    pj_eng_knobs kn;
    if (pj_eng_choose(c->table, NULL, NULL, k, &c->lim, &kind, &kn) < 0) {
        snprintf(err, errlen, "%s m=%u n=%u: no engine can run this shape", lname, k->m, k->n);
        return -ENOTSUP;
    }
    rc = pj_eng_launch(kind, &kn, k, c->es);
    if (rc)
        snprintf(err, errlen, "%s m=%u n=%u: %s launch failed (%d)", lname, k->m, k->n,
                 pj_eng_name(kind), rc);
    return rc;
}

int pj_lcmp_run(pj_lcmp *c, int path, const pj_lcmp_op *ops, size_t n, uint64_t *host_ns,
                uint64_t *gpu_ns, char *err, size_t errlen)
{
    size_t xo = 0, yo = 0;
    for (size_t i = 0; i < n; i++) {
        if (ops[i].layer >= c->n_l || !c->l[ops[i].layer].used) {
            snprintf(err, errlen, "op %zu: layer %u not uploaded", i, ops[i].layer);
            return -EINVAL;
        }
    }
    uint64_t t0 = mono_ns();
    cudaEventRecord(c->e0, c->s);
    for (size_t i = 0; i < n; i++) {
        const pj_lcmp_op *op = &ops[i];
        const pj_eng_layer *L = &c->l[op->layer].L;
        pj_eng_call k = mk_call(c, op->layer, op->m, op->n, xo, yo, c->y);
        int rc = enqueue(c, path, &k, L->name, err, errlen);
        if (rc) {
            cudaStreamSynchronize(c->s);
            cudaGetLastError();
            return rc;
        }
        xo += lg_align((size_t)op->m * L->K * 2);
        yo += lg_align((size_t)op->m * op->n * 2);
    }
    cudaEventRecord(c->e1, c->s);
    cudaError_t ce = cudaEventRecord(c->done, c->s);
    /* Spin: a blocking wait would add the driver's wake-up to every sample
     * (the daemon's completion thread spins too). */
    if (ce == cudaSuccess)
        while ((ce = cudaEventQuery(c->done)) == cudaErrorNotReady)
            ;
    uint64_t t1 = mono_ns();
    if (ce != cudaSuccess)
        return ce_fail(ce, "--compare: request", err, errlen);
    float ms = 0;
    cudaEventElapsedTime(&ms, c->e0, c->e1);
    *host_ns = t1 - t0;
    *gpu_ns = (uint64_t)((double)ms * 1e6);
    return 0;
}

void pj_lcmp_engine(pj_lcmp *c, uint32_t layer, uint32_t m, uint32_t n, char *out, size_t cap)
{
    out[0] = 0;
    if (layer >= c->n_l || !c->l[layer].used)
        return;
    pj_eng_call k = mk_call(c, layer, m, n, 0, 0, c->y);
    pj_eng_kind kind;
    pj_eng_knobs kn;
    static const char *const steps[] = {"forced", "table", "default", "cublas fallback"};
    int step = pj_eng_choose(c->table, NULL, NULL, &k, &c->lim, &kind, &kn);
    if (step >= 0 && step <= 3)
        snprintf(out, cap, "%s (%s)", pj_eng_name(kind), steps[step]);
}

double pj_lcmp_diff(pj_lcmp *c, uint32_t layer, uint32_t m, uint32_t n)
{
    if (layer >= c->n_l || !c->l[layer].used)
        return -1;
    char err[256];
    size_t bytes = (size_t)m * n * 2;
    if (bytes > c->slot_y || (size_t)m * c->l[layer].L.K * 2 > c->slot_x)
        return -1; /* larger than any request of the trace: not probed */
    pj_eng_call a = mk_call(c, layer, m, n, 0, 0, c->y);
    pj_eng_call b = mk_call(c, layer, m, n, 0, 0, c->y2);
    uint16_t *ha = malloc(bytes), *hb = malloc(bytes);
    double r = -1;
    if (ha && hb && enqueue(c, PJ_LCMP_CUBLAS, &a, c->l[layer].L.name, err, sizeof err) == 0 &&
        enqueue(c, PJ_LCMP_TUNED, &b, c->l[layer].L.name, err, sizeof err) == 0 &&
        cudaMemcpyAsync(ha, c->y, bytes, cudaMemcpyDeviceToHost, c->s) == cudaSuccess &&
        cudaMemcpyAsync(hb, c->y2, bytes, cudaMemcpyDeviceToHost, c->s) == cudaSuccess &&
        cudaStreamSynchronize(c->s) == cudaSuccess) {
        double num = 0, den = 0;
        for (size_t i = 0; i < (size_t)m * n; i++) {
            double va = pj_bf16_to_f32(ha[i]), vb = pj_bf16_to_f32(hb[i]);
            num += (va - vb) * (va - vb);
            den += va * va;
        }
        r = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
        if (isnan(r))
            r = INFINITY;
    }
    cudaGetLastError();
    free(ha);
    free(hb);
    return r;
}

void pj_lcmp_close(pj_lcmp *c)
{
    if (!c)
        return;
    if (c->s)
        cudaStreamSynchronize(c->s);
    for (uint32_t i = 0; i < LC_MAX_L; i++) {
        lc_layer *cl = &c->l[i];
        if (cl->ws.f || cl->ws.cnt)
            pj_eng_ws_free(&cl->ws);
        pj_engup_free(&cl->mem);
    }
    cudaFree(c->x);
    cudaFree(c->y);
    cudaFree(c->y2);
    cudaFree(c->tmp);
    if (c->es)
        pj_eng_stream_destroy(c->es);
    if (c->e0)
        cudaEventDestroy(c->e0);
    if (c->e1)
        cudaEventDestroy(c->e1);
    if (c->done)
        cudaEventDestroy(c->done);
    if (c->s)
        cudaStreamDestroy(c->s);
    cudaGetLastError();
    free(c->table);
    free(c);
}
