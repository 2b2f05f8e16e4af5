/* engcheck_cuda.c — generated test layers and the engine checks (see
 * engcheck.h). */
#include "kernels/engcheck.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/engupload.h"
#include "kernels/refgemm.h"

/* ---- generators ---------------------------------------------------------- */

typedef struct rng {
    uint64_t s;
} rng;

static uint64_t rng_next(rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double rng_unit(rng *r) /* (0, 1) */
{
    return ((double)(rng_next(r) >> 11) + 0.5) * (1.0 / 9007199254740992.0);
}

static double rng_normal(rng *r)
{
    return sqrt(-2.0 * log(rng_unit(r))) * cos(6.283185307179586 * rng_unit(r));
}

/* One weight of row scale sc: mostly normal, rarely an outlier (x 40), an
 * exact zero or a tiny value (both far below any useful exponent window). */
static float gen_weight(rng *r, double sc)
{
    double u = rng_unit(r);
    if (u < 5e-5)
        return 0.0f;
    if (u < 8e-5)
        return (float)(rng_normal(r) * 1e-9);
    double v = rng_normal(r) * sc;
    if (u > 1.0 - 1e-4)
        v *= 40.0;
    return (float)v;
}

void pj_chk_gen_f32(uint64_t seed, uint32_t n, uint32_t k, float *w)
{
    rng r = {seed * 0x2545f4914f6cdd1dull + 1};
    for (uint32_t i = 0; i < n; i++) {
        double sc = 0.02 * exp(0.5 * rng_normal(&r));
        for (uint32_t c = 0; c < k; c++)
            w[(size_t)i * k + c] = gen_weight(&r, sc);
    }
}

void pj_chk_gen_bf16(uint64_t seed, uint32_t n, uint32_t k, uint16_t *w)
{
    rng r = {seed * 0x2545f4914f6cdd1dull + 1};
    for (uint32_t i = 0; i < n; i++) {
        double sc = 0.02 * exp(0.5 * rng_normal(&r));
        for (uint32_t c = 0; c < k; c++) {
            w[(size_t)i * k + c] = pj_f32_to_bf16(gen_weight(&r, sc));
            if ((seed & PJ_CHK_SEED_ZEROS) && rng_unit(&r) < 0.05)
                w[(size_t)i * k + c] = 0;
        }
    }
}

void pj_chk_gen_x(uint64_t seed, int kind, uint32_t m, uint32_t k, size_t ldx, uint16_t *x)
{
    rng r = {seed * 0x9e3779b97f4a7c15ull + 7};
    uint32_t hot[4];
    for (int j = 0; j < 4; j++)
        hot[j] = (uint32_t)(rng_next(&r) % k);
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t c = 0; c < k; c++) {
            double v = rng_normal(&r);
            if (kind == 1) {
                if (rng_unit(&r) < 0.01)
                    v *= 64.0;
                for (int j = 0; j < 4; j++)
                    if (c == hot[j])
                        v *= 512.0;
            }
            x[(size_t)i * ldx + c] = pj_f32_to_bf16((float)v);
        }
}

/* ---- layers ---------------------------------------------------------------- */

static int up(void **d, const void *h, size_t bytes, char *err, size_t errlen, const char *what)
{
    cudaError_t ce = cudaMalloc(d, bytes ? bytes : 16);
    if (ce == cudaSuccess && bytes)
        ce = cudaMemcpy(*d, h, bytes, cudaMemcpyHostToDevice);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "upload %s (%zu bytes): %s", what, bytes, cudaGetErrorString(ce));
        return -EIO;
    }
    return 0;
}

void pj_chk_layer_free(pj_chk_layer *cl)
{
    if (!cl)
        return;
    free(cl->h_w);
    free(cl->h_lo);
    pj_z12_free(&cl->z);
    pj_eng_layer_fini(&cl->L);
    cudaFree(cl->d_w);
    cudaFree(cl->d_lo);
    cudaFree(cl->d_tiles);
    cudaFree(cl->d_zto);
    cudaFree(cl->d_zte);
    cudaFree(cl->d_blk);
    cudaFree(cl->d_exc);
    memset(cl, 0, sizeof *cl);
}

/* The device side of a layer whose host arrays (h_w, h_lo) are filled. */
static int layer_upload(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                        char *err, size_t errlen);

int pj_chk_layer_make(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                      uint64_t seed, char *err, size_t errlen)
{
    memset(cl, 0, sizeof *cl);
    size_t count = (size_t)n * k;
    cl->h_w = malloc(count * 2);
    if (!cl->h_w)
        goto oom;
    if (fmt == PJ_FMT_SPLIT) {
        float *f = malloc(count * 4);
        cl->h_lo = malloc(count * 2);
        if (!f || !cl->h_lo) {
            free(f);
            goto oom;
        }
        pj_chk_gen_f32(seed, n, k, f);
        pj_split_f32(f, count, cl->h_w, cl->h_lo);
        free(f);
    } else {
        pj_chk_gen_bf16(seed, n, k, cl->h_w);
    }
    return layer_upload(cl, name, n, k, fmt, err, errlen);
oom:
    snprintf(err, errlen, "layer %s: out of host memory", name);
    pj_chk_layer_free(cl);
    return -ENOMEM;
}

int pj_chk_layer_from(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                      const uint16_t *w, const uint16_t *lo, char *err, size_t errlen)
{
    memset(cl, 0, sizeof *cl);
    size_t count = (size_t)n * k;
    cl->h_w = malloc(count * 2);
    if (cl->h_w && fmt == PJ_FMT_SPLIT)
        cl->h_lo = malloc(count * 2);
    if (!cl->h_w || (fmt == PJ_FMT_SPLIT && !cl->h_lo)) {
        snprintf(err, errlen, "layer %s: out of host memory", name);
        pj_chk_layer_free(cl);
        return -ENOMEM;
    }
    memcpy(cl->h_w, w, count * 2);
    if (cl->h_lo)
        memcpy(cl->h_lo, lo, count * 2);
    return layer_upload(cl, name, n, k, fmt, err, errlen);
}

static int layer_upload(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                        char *err, size_t errlen)
{
    pj_eng_layer *L = &cl->L;
    snprintf(L->name, sizeof L->name, "%s", name);
    L->table_name[0] = 0;
    L->fmt = fmt;
    L->N = n;
    L->K = k;
    L->ldw = k;
    size_t count = (size_t)n * k;
    int rc = 0;
    rc = up(&cl->d_w, cl->h_w, count * 2, err, errlen, "weights");
    if (!rc && cl->h_lo)
        rc = up(&cl->d_lo, cl->h_lo, count * 2, err, errlen, "lo weights");
    if (rc)
        goto fail;
    L->w = cl->d_w;
    L->lo = cl->d_lo;
    if (fmt == PJ_FMT_Z12) {
        rc = pj_z12_pack(cl->h_w, n, k, k, &cl->z, err, errlen);
        if (!rc)
            rc = up(&cl->d_tiles, cl->z.tiles, cl->z.tiles_bytes, err, errlen, "z12 tiles");
        if (!rc)
            rc = up(&cl->d_blk, cl->z.blk_exc, ((size_t)cl->z.n_pad / 16 + 1) * 4, err, errlen,
                    "z12 block offsets");
        if (!rc)
            rc = up(&cl->d_exc, cl->z.exc, (size_t)cl->z.n_exc * sizeof(pj_z12_exc), err, errlen,
                    "z12 exceptions");
        if (rc)
            goto fail;
        L->z_tiles = cl->d_tiles;
        L->z_blk_exc = cl->d_blk;
        L->z_exc = cl->d_exc;
        L->z_base = cl->z.base;
        L->z_n_pad = cl->z.n_pad;
        L->z_n_exc = cl->z.n_exc;
        rc = pj_engup_tile_exc(name, &cl->z, &cl->d_zto, &cl->d_zte, err, errlen);
        if (rc)
            goto fail;
        L->zt_off = cl->d_zto;
        L->zt_ent = cl->d_zte;
        rc = pj_eng_layer_init(L, 0, err, errlen);
        if (rc)
            goto fail;
    }
    /* The streamed GEMV's pipe = 3 reads a fragment-major copy (a no-op for
     * split layers). */
    rc = pj_eng_layer_init_tiles(L, 0, err, errlen);
    if (rc)
        goto fail;
    return 0;
fail:
    pj_chk_layer_free(cl);
    return rc;
}

/* ---- context --------------------------------------------------------------- */

void pj_chk_ctx_free(pj_chk_ctx *c)
{
    if (!c)
        return;
    if (c->es)
        pj_eng_stream_destroy(c->es);
    cudaFree(c->dx);
    cudaFree(c->dy);
    cudaFree(c->dy2);
    cudaFree(c->dref);
    cudaFree(c->dsabs);
    cudaFree(c->dx1);
    cudaFree(c->dref1);
    cudaFree(c->dsabs1);
    cudaFree(c->dcmp);
    free(c->hx);
    free(c->hy);
    free(c->hy2);
    if (c->s)
        cudaStreamDestroy(c->s);
    memset(c, 0, sizeof *c);
}

int pj_chk_ctx_init(pj_chk_ctx *c, uint32_t max_m, uint32_t max_n, uint32_t max_k, char *err,
                    size_t errlen)
{
    memset(c, 0, sizeof *c);
    c->max_m = max_m;
    c->max_n = max_n;
    c->max_k = max_k;
    int rc = pj_eng_dev_limits(&c->lim, err, errlen);
    if (rc)
        return rc;
    cudaError_t ce = cudaStreamCreateWithFlags(&c->s, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "stream: %s", cudaGetErrorString(ce));
        return -EIO;
    }
    rc = pj_eng_stream_create(c->s, &c->es, err, errlen);
    if (rc) {
        pj_chk_ctx_free(c);
        return rc;
    }
    size_t xb = (size_t)max_m * max_k * 2, yb = (size_t)max_m * max_n * 2;
    size_t fb = (size_t)max_m * max_n * 4;
    void **bufs[] = {(void **)&c->dx,    (void **)&c->dy,     (void **)&c->dy2,
                     (void **)&c->dref,  (void **)&c->dsabs,  (void **)&c->dx1,
                     (void **)&c->dref1, (void **)&c->dsabs1, &c->dcmp};
    size_t sizes[] = {xb, yb, yb, fb, fb, xb, fb, fb, sizeof(pj_bk_cmp)};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        ce = cudaMalloc(bufs[i], sizes[i]);
        if (ce != cudaSuccess) {
            snprintf(err, errlen, "check buffers (%zu bytes): %s", sizes[i],
                     cudaGetErrorString(ce));
            pj_chk_ctx_free(c);
            return -ENOMEM;
        }
    }
    c->hx = malloc(xb);
    c->hy = malloc(yb);
    c->hy2 = malloc(yb);
    if (!c->hx || !c->hy || !c->hy2) {
        snprintf(err, errlen, "check buffers: out of host memory");
        pj_chk_ctx_free(c);
        return -ENOMEM;
    }
    return 0;
}

/* ---- prepare: x, reference, CPU cross-check ----------------------------------- */

static int cuda_fail(char *err, size_t errlen, const char *what)
{
    cudaError_t ce = cudaGetLastError();
    snprintf(err, errlen, "%s: %s", what, cudaGetErrorString(ce));
    return -EIO;
}

/* Sampled rows for the CPU cross-check: first, last, rows holding z12
 * exceptions, then evenly spread ones. */
static uint32_t sample_rows(const pj_chk_layer *cl, uint32_t n, uint32_t want, uint32_t *rows)
{
    uint32_t cnt = 0;
    rows[cnt++] = 0;
    if (n > 1 && cnt < want)
        rows[cnt++] = n - 1;
    if (cl->L.fmt == PJ_FMT_Z12)
        for (uint32_t rb = 0; cnt < want / 2 && rb < cl->z.n_pad / 16 && rb * 16 < n; rb += 7) {
            uint32_t e0 = cl->z.blk_exc[rb], e1 = cl->z.blk_exc[rb + 1];
            if (e0 < e1) {
                uint32_t r = rb * 16 + (cl->z.exc[e0].rk >> 28);
                if (r < n)
                    rows[cnt++] = r;
            }
        }
    for (uint32_t i = 0; cnt < want && i < want; i++)
        rows[cnt++] = (uint32_t)(((uint64_t)(2 * i + 1) * n) / (2 * want));
    return cnt;
}

int pj_chk_prepare(pj_chk_ctx *c, const pj_chk_layer *cl, uint32_t m, uint32_t n, int kind,
                   uint64_t seed, uint32_t cpu_rows, unsigned long long *cpu_mismatch, char *err,
                   size_t errlen)
{
    const pj_eng_layer *L = &cl->L;
    if (m > c->max_m || n > c->max_n || L->K > c->max_k || n > L->N) {
        snprintf(err, errlen, "prepare %s m=%u n=%u: beyond the context's buffers", L->name, m, n);
        return -EINVAL;
    }
    if (cpu_mismatch)
        *cpu_mismatch = 0;
    const size_t ldx = L->K;
    pj_chk_gen_x(seed, kind, m, L->K, ldx, c->hx);
    if (cudaMemcpyAsync(c->dx, c->hx, (size_t)m * ldx * 2, cudaMemcpyHostToDevice, c->s) !=
        cudaSuccess)
        return cuda_fail(err, errlen, "upload x");
    if (pj_bk_ref(c->s, L->w, L->fmt == PJ_FMT_SPLIT ? L->lo : NULL, L->ldw, L->K, c->dx, ldx, m, n,
                  c->dref, c->dsabs))
        return cuda_fail(err, errlen, "reference kernel");
    if (cudaStreamSynchronize(c->s) != cudaSuccess)
        return cuda_fail(err, errlen, "reference kernel");
    c->cur = cl;
    c->cur_m = m;
    c->cur_n = n;
    c->cur_kind = kind;
    c->cur_seed = seed;
    c->have_onehot = 0;
    if (!cpu_rows)
        return 0;

    /* CPU reference on sampled rows, compared bit for bit with bf16(ref). */
    uint32_t *rows = malloc(cpu_rows * sizeof *rows);
    float *ref = malloc((size_t)m * n * 4);
    uint16_t *yc = malloc((size_t)m * n * 2);
    float *scratch = malloc(pj_ref_scratch_floats(m, L->K) * sizeof(float));
    int rc = 0;
    if (!rows || !ref || !yc || !scratch) {
        snprintf(err, errlen, "prepare: out of host memory");
        rc = -ENOMEM;
        goto out;
    }
    if (cudaMemcpy(ref, c->dref, (size_t)m * n * 4, cudaMemcpyDeviceToHost) != cudaSuccess) {
        rc = cuda_fail(err, errlen, "download reference");
        goto out;
    }
    pj_weights w;
    memset(&w, 0, sizeof w);
    w.fmt = L->fmt;
    w.n = L->N;
    w.k = L->K;
    w.bf16 = cl->h_w;
    w.z = &cl->z;
    w.hi = cl->h_w;
    w.lo = cl->h_lo;
    uint32_t nr = sample_rows(cl, n, cpu_rows, rows);
    unsigned long long mism = 0;
    for (uint32_t i = 0; i < nr; i++) {
        rc = pj_ref_project_rows(&w, m, rows[i], rows[i] + 1, c->hx, ldx, yc, n, scratch);
        if (rc) {
            snprintf(err, errlen, "CPU reference row %u: error %d", rows[i], rc);
            goto out;
        }
        for (uint32_t t = 0; t < m; t++)
            mism += yc[(size_t)t * n + rows[i]] != pj_f32_to_bf16(ref[(size_t)t * n + rows[i]]);
    }
    if (cpu_mismatch)
        *cpu_mismatch = mism;
out:
    free(rows);
    free(ref);
    free(yc);
    free(scratch);
    return rc;
}

/* One-hot inputs for the z12 bit-exactness check: token i is 1.0 at the
 * column of the (i * 7)-th exception among rows < n (or column i when the
 * layer has none), 0 elsewhere. */
static int prepare_onehot(pj_chk_ctx *c)
{
    const pj_chk_layer *cl = c->cur;
    const pj_eng_layer *L = &cl->L;
    const uint32_t m = c->cur_m, n = c->cur_n;
    uint32_t nexc =
        cl->z.blk_exc[(n + 15) / 16 < cl->z.n_pad / 16 ? (n + 15) / 16 : cl->z.n_pad / 16];
    memset(c->hx, 0, (size_t)m * L->K * 2);
    for (uint32_t i = 0; i < m; i++) {
        uint32_t col = i % L->K;
        if (nexc)
            col = cl->z.exc[(i * 7u) % nexc].rk & 0x0fffffffu;
        c->hx[(size_t)i * L->K + col] = 0x3f80; /* 1.0 */
    }
    if (cudaMemcpyAsync(c->dx1, c->hx, (size_t)m * L->K * 2, cudaMemcpyHostToDevice, c->s) !=
        cudaSuccess)
        return -EIO;
    if (pj_bk_ref(c->s, L->w, NULL, L->ldw, L->K, c->dx1, L->K, m, n, c->dref1, c->dsabs1))
        return -EIO;
    if (cudaStreamSynchronize(c->s) != cudaSuccess)
        return -EIO;
    c->have_onehot = 1;
    return 0;
}

pj_eng_call pj_chk_call(const pj_eng_layer *L, pj_eng_ws *ws, const uint16_t *x, uint16_t *y,
                        uint32_t m, uint32_t n)
{
    pj_eng_call call;
    memset(&call, 0, sizeof call);
    call.L = L;
    call.ws = ws;
    call.x = x;
    call.ldx = L->K;
    call.y = y;
    call.ldy = n;
    call.m = m;
    call.n = n;
    return call;
}

static int run_once(pj_chk_ctx *c, pj_eng_ws *ws, pj_eng_kind k, const pj_eng_knobs *kn,
                    const uint16_t *x, uint16_t *y)
{
    const pj_eng_call call = pj_chk_call(&c->cur->L, ws, x, y, c->cur_m, c->cur_n);
    if (pj_bk_poison(c->s, y, call.ldy, call.m, call.n))
        return -EIO;
    int rc = pj_eng_launch(k, kn, &call, c->es);
    if (rc)
        return rc;
    return cudaStreamSynchronize(c->s) == cudaSuccess ? 0 : -EIO;
}

int pj_chk_run(pj_chk_ctx *c, pj_eng_ws *ws, pj_eng_kind k, const pj_eng_knobs *kn,
               pj_chk_result *res)
{
    memset(res, 0, sizeof *res);
    res->deterministic_ok = -1;
    res->onehot_ok = -1;
    if (!c->cur) {
        snprintf(res->why, sizeof res->why, "nothing prepared");
        return -EINVAL;
    }
    const uint32_t m = c->cur_m, n = c->cur_n;
    int rc = run_once(c, ws, k, kn, c->dx, c->dy);
    if (rc) {
        snprintf(res->why, sizeof res->why, "launch failed (%d): %s", rc,
                 cudaGetErrorString(cudaGetLastError()));
        return rc;
    }
    rc = pj_bk_compare(c->s, c->dy, n, m, n, c->dref, c->dsabs, c->dcmp, &res->cmp);
    if (rc) {
        snprintf(res->why, sizeof res->why, "compare failed");
        return rc;
    }
    res->ok = res->cmp.bad == 0 && res->cmp.unwritten == 0;
    if (!res->ok) {
        unsigned long long fb = res->cmp.first_bad;
        snprintf(res->why, sizeof res->why,
                 "%llu outputs outside the bound, %llu unwritten (first: token %llu row %llu), "
                 "worst %.3g x bound",
                 res->cmp.bad, res->cmp.unwritten, fb == ~0ull ? 0 : fb / n,
                 fb == ~0ull ? 0 : fb % n, (double)res->cmp.worst);
        return 0;
    }
    if (pj_eng_deterministic(k, kn, m)) {
        rc = run_once(c, ws, k, kn, c->dx, c->dy2);
        if (rc)
            return rc;
        size_t bytes = (size_t)m * n * 2;
        if (cudaMemcpy(c->hy, c->dy, bytes, cudaMemcpyDeviceToHost) != cudaSuccess ||
            cudaMemcpy(c->hy2, c->dy2, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)
            return -EIO;
        res->deterministic_ok = memcmp(c->hy, c->hy2, bytes) == 0;
        if (!res->deterministic_ok) {
            res->ok = 0;
            snprintf(res->why, sizeof res->why, "two runs on the same input differ");
            return 0;
        }
    }
    if (pj_eng_reads_z12(k, kn)) {
        if (!c->have_onehot && prepare_onehot(c))
            return -EIO;
        rc = run_once(c, ws, k, kn, c->dx1, c->dy2);
        if (rc)
            return rc;
        pj_bk_cmp oc;
        rc = pj_bk_compare(c->s, c->dy2, n, m, n, c->dref1, c->dsabs1, c->dcmp, &oc);
        if (rc)
            return rc;
        res->onehot_mismatch = oc.mismatch + oc.unwritten;
        res->onehot_ok = res->onehot_mismatch == 0;
        if (!res->onehot_ok) {
            res->ok = 0;
            snprintf(res->why, sizeof res->why,
                     "one-hot on exception columns: %llu outputs differ from the weights' bits",
                     res->onehot_mismatch);
        }
    }
    return 0;
}
