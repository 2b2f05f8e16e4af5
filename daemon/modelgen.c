/* modelgen.c — deterministic, realistic-looking weights as safetensors. */
#include "daemon/modelgen.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

/* Same bits on every machine: no fused multiply-add contraction (GCC in
 * ISO C mode does not contract; clang would, on targets with FMA). */
#ifdef __clang__
#pragma STDC FP_CONTRACT OFF
#endif

/* Spread of the per-row scales: ln(scale) ~ N(ln(layer scale), ROW_SIGMA^2).
 * Trained projections vary by a factor of about two between rows; a much
 * wider spread would stop any single 16-exponent window from covering a
 * matrix, which real models do not show either. */
#define ROW_SIGMA 0.25
/* Per-weight event rate; 2/3 of events are outliers, 1/3 exact zeros:
 * 1e-4 outliers and 5e-5 zeros. */
#define EVENT_P       1.5e-4
#define OUTLIER_SHARE (2.0 / 3.0)
#define OUTLIER_MIN   20.0
#define OUTLIER_MAX   50.0
/* Tiny values: TINY_BASE * (1 .. 10), 2^-100 or so, far below any window
 * that covers the gaussian bulk. */
#define TINY_BASE 1e-30
/* Rows per chunk handed to the writer. */
#define CHUNK_BYTES (1u << 20)

static const pj_modelgen_layer ref_layers[] = {
    {"qkv_gate", "qkv_gate.weight", 4608, 4096, PJ_ST_BF16, 0.020, 8 + 4608 * 4096 / 500000, 0},
    {"o", "o.weight", 4096, 2048, PJ_ST_BF16, 0.020, 8 + 4096 * 2048 / 500000, 0},
    {"pooler", "pooler.weight", 8192, 4096, PJ_ST_BF16, 0.015, 8 + 8192 * 4096 / 500000, 0},
    {"unpooler", "unpooler.weight", 8192, 4096, PJ_ST_BF16, 0.015, 8 + 8192 * 4096 / 500000, 0},
    {"router", "router.weight", 256, 4096, PJ_ST_F32, 0.050, 8, 0},
};

/* Small shapes keep every kind (k % 64 == 0 for the bf16 ones, a row count
 * that is not a multiple of 16 for one of them, fp32 router). Random events
 * are too rare at this size to count on, so each layer also gets forced
 * tiny values and zeros: every bf16 layer has z12 exceptions. */
static const pj_modelgen_layer small_layers[] = {
    {"qkv_gate", "qkv_gate.weight", 320, 256, PJ_ST_BF16, 0.020, 8, 3},
    {"o", "o.weight", 256, 192, PJ_ST_BF16, 0.020, 8, 3},
    {"pooler", "pooler.weight", 384, 256, PJ_ST_BF16, 0.015, 8, 3},
    {"unpooler", "unpooler.weight", 512, 256, PJ_ST_BF16, 0.015, 8, 3},
    {"router", "router.weight", 64, 256, PJ_ST_F32, 0.050, 8, 3},
};

const pj_modelgen_layer *pj_modelgen_layers(int preset, size_t *count)
{
    switch (preset) {
    case PJ_MODELGEN_REFERENCE:
        *count = sizeof ref_layers / sizeof ref_layers[0];
        return ref_layers;
    case PJ_MODELGEN_SMALL:
        *count = sizeof small_layers / sizeof small_layers[0];
        return small_layers;
    default:
        *count = 0;
        return NULL;
    }
}

const char *pj_modelgen_preset_name(int preset)
{
    return preset == PJ_MODELGEN_REFERENCE ? "reference"
           : preset == PJ_MODELGEN_SMALL   ? "small"
                                           : NULL;
}

int pj_modelgen_preset_from_name(const char *name)
{
    if (strcmp(name, "reference") == 0)
        return PJ_MODELGEN_REFERENCE;
    if (strcmp(name, "small") == 0)
        return PJ_MODELGEN_SMALL;
    return -1;
}

/* ---- deterministic numerics ------------------------------------------------ */

static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static uint64_t hash3(uint64_t a, uint64_t b, uint64_t c)
{
    return mix64(mix64(mix64(a) ^ b) ^ c);
}

typedef struct rng {
    uint64_t s;
    double spare;
    int has_spare;
} rng;

static uint64_t rng_next(rng *r)
{
    r->s += 0x9e3779b97f4a7c15ull;
    uint64_t x = r->s;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* Uniform in [0, 1). */
static double rng_unit(rng *r)
{
    return (double)(rng_next(r) >> 11) * 0x1p-53;
}

/* Natural log for x > 0 from +, *, / only, so every IEEE machine agrees:
 * x = m * 2^e with m in [sqrt(1/2), sqrt(2)], ln m by the atanh series
 * (|s| <= 0.172; the dropped s^13/13 term is below 1e-11). */
static double det_log(double x)
{
    uint64_t b;
    memcpy(&b, &x, sizeof b);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    b = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &b, sizeof m);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e++;
    }
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double p = 1.0 / 11;
    p = p * s2 + 1.0 / 9;
    p = p * s2 + 1.0 / 7;
    p = p * s2 + 1.0 / 5;
    p = p * s2 + 1.0 / 3;
    p = p * s2 + 1.0;
    return 2.0 * s * p + (double)e * 0.6931471805599453;
}

/* exp for |x| < 700: 2^k * e^r with |r| <= ln2/2, Taylor to r^12. */
static double det_exp(double x)
{
    double kd = x * 1.4426950408889634;
    int k = (int)(kd < 0 ? kd - 0.5 : kd + 0.5);
    double r = x - (double)k * 0.6931471805599453;
    double t = 1.0;
    for (int i = 12; i >= 1; i--)
        t = 1.0 + t * r / (double)i;
    uint64_t b = (uint64_t)(k + 1023) << 52;
    double p2;
    memcpy(&p2, &b, sizeof p2);
    return t * p2;
}

/* Standard normal (Marsaglia's polar method; sqrt is correctly rounded). */
static double rng_gauss(rng *r)
{
    if (r->has_spare) {
        r->has_spare = 0;
        return r->spare;
    }
    double u, v, s;
    do {
        u = 2.0 * rng_unit(r) - 1.0;
        v = 2.0 * rng_unit(r) - 1.0;
        s = u * u + v * v;
    } while (s >= 1.0 || s == 0.0);
    double f = __builtin_sqrt(-2.0 * det_log(s) / s);
    r->spare = v * f;
    r->has_spare = 1;
    return u * f;
}

/* Elements until the next event: geometric with success probability p. */
static uint64_t rng_skip(rng *r, double log1mp)
{
    double u = 1.0 - rng_unit(r); /* (0, 1] */
    double g = det_log(u) / log1mp;
    return g >= 1e18 ? (uint64_t)1e18 : (uint64_t)g;
}

/* ---- rows ------------------------------------------------------------------ */

typedef struct forced {
    uint32_t row, col, j;
    double value;
} forced;

static int cmp_forced(const void *a, const void *b)
{
    const forced *x = a, *y = b;
    if (x->row != y->row)
        return x->row < y->row ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* The layer's forced tiny values and zeros, sorted by (row, col, index):
 * where two land on one cell the later index is stored last and wins. */
static size_t forced_list(const pj_modelgen_layer *L, uint64_t seed, size_t li, forced *out)
{
    size_t n = 0;
    for (uint32_t j = 0; j < L->n_tiny + L->n_zero; j++) {
        uint64_t h = hash3(seed, 0x7469ull << 32 | li, j);
        uint64_t h2 = mix64(h);
        forced *f = &out[n++];
        f->j = j;
        f->row = (uint32_t)(h % L->n);
        f->col = (uint32_t)((h >> 32) % L->k);
        if (j < L->n_tiny) {
            double mag = TINY_BASE * (1.0 + 9.0 * (double)(h2 >> 11) * 0x1p-53);
            f->value = (h2 & 1) ? -mag : mag;
        } else {
            f->value = 0.0;
        }
    }
    qsort(out, n, sizeof *out, cmp_forced);
    return n;
}

static void store(const pj_modelgen_layer *L, void *out, size_t i, double v)
{
    if (L->dtype == PJ_ST_F32)
        ((float *)out)[i] = (float)v;
    else
        ((uint16_t *)out)[i] = pj_f32_to_bf16((float)v);
}

int pj_modelgen_rows(const pj_modelgen_opts *o, size_t layer, uint32_t r0, uint32_t r1, void *out)
{
    size_t nl;
    const pj_modelgen_layer *layers = pj_modelgen_layers(o->preset, &nl);
    if (!layers || layer >= nl)
        return -EINVAL;
    const pj_modelgen_layer *L = &layers[layer];
    if (r0 > r1 || r1 > L->n)
        return -EINVAL;
    forced fl[256];
    if (L->n_tiny + L->n_zero > sizeof fl / sizeof fl[0])
        return -EINVAL;
    size_t nf = forced_list(L, o->seed, layer, fl), fi = 0;
    while (fi < nf && fl[fi].row < r0)
        fi++;

    const double log1mp = det_log(1.0 - EVENT_P);
    for (uint32_t r = r0; r < r1; r++) {
        size_t at = (size_t)(r - r0) * L->k;
        rng g = {.s = hash3(o->seed, layer, r)};
        double scale = L->scale * det_exp(ROW_SIGMA * rng_gauss(&g));
        for (uint32_t c = 0; c < L->k; c++)
            store(L, out, at + c, scale * rng_gauss(&g));
        for (uint64_t c = rng_skip(&g, log1mp); c < L->k; c += 1 + rng_skip(&g, log1mp)) {
            double u = rng_unit(&g);
            double v = 0.0;
            if (u < OUTLIER_SHARE) {
                double f = OUTLIER_MIN + (OUTLIER_MAX - OUTLIER_MIN) * (u / OUTLIER_SHARE);
                v = (rng_next(&g) & 1) ? -f * scale : f * scale;
            }
            store(L, out, at + c, v);
        }
        for (; fi < nf && fl[fi].row == r; fi++)
            store(L, out, at + fl[fi].col, fl[fi].value);
    }
    return 0;
}

/* ---- file ------------------------------------------------------------------ */

typedef struct gen_job {
    const pj_modelgen_opts *o;
    size_t layer;
    uint32_t r0, r1;
    void *out;
} gen_job;

static void *gen_worker(void *arg)
{
    gen_job *j = arg;
    pj_modelgen_rows(j->o, j->layer, j->r0, j->r1, j->out);
    return NULL;
}

/* Rows [r0, r1) into out, the second half on a helper thread: rows are
 * independent, so the bytes do not depend on the split (or on whether the
 * thread could be started at all). */
static void gen_rows_2(const pj_modelgen_opts *o, size_t layer, uint32_t r0, uint32_t r1,
                       size_t row_bytes, uint8_t *out)
{
    uint32_t mid = r0 + (r1 - r0) / 2;
    gen_job j = {o, layer, mid, r1, out + (size_t)(mid - r0) * row_bytes};
    pthread_t t;
    int threaded = mid > r0 && pthread_create(&t, NULL, gen_worker, &j) == 0;
    pj_modelgen_rows(o, layer, r0, threaded ? mid : r1, out);
    if (threaded)
        pthread_join(t, NULL);
}

int pj_modelgen_write(const char *path, const pj_modelgen_opts *o, char *err, size_t errlen)
{
    size_t nl;
    const pj_modelgen_layer *layers = pj_modelgen_layers(o->preset, &nl);
    if (!layers) {
        snprintf(err, errlen, "%s: unknown model preset %d", path, o->preset);
        return -EINVAL;
    }
    pj_st_writer *w;
    int rc = pj_st_writer_open(path, &w, err, errlen);
    if (rc)
        return rc;
    char seed[32];
    snprintf(seed, sizeof seed, "%llu", (unsigned long long)o->seed);
    uint64_t total = 0;
    size_t max_row = 0;
    if ((rc = pj_st_writer_meta(w, "generator", "projd modelgen 1", err, errlen)) ||
        (rc = pj_st_writer_meta(w, "seed", seed, err, errlen)) ||
        (rc = pj_st_writer_meta(w, "preset", pj_modelgen_preset_name(o->preset), err, errlen)) ||
        (rc = pj_st_writer_meta(w, "format", "pt", err, errlen)))
        goto fail;
    for (size_t i = 0; i < nl; i++) {
        const pj_modelgen_layer *L = &layers[i];
        uint64_t shape[2] = {L->n, L->k};
        size_t row = (size_t)L->k * pj_st_dtype_size(L->dtype);
        if (row > max_row)
            max_row = row;
        total += (uint64_t)L->n * row;
        if ((rc = pj_st_writer_add(w, L->tensor, L->dtype, 2, shape, NULL, err, errlen)))
            goto fail;
    }
    if ((rc = pj_st_writer_begin_data(w, err, errlen)))
        goto fail;

    size_t cap = CHUNK_BYTES > max_row ? CHUNK_BYTES : max_row;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory for a %zu-byte chunk", path, cap);
        rc = -ENOMEM;
        goto fail;
    }
    uint64_t done = 0;
    for (size_t i = 0; i < nl; i++) {
        const pj_modelgen_layer *L = &layers[i];
        size_t row = (size_t)L->k * pj_st_dtype_size(L->dtype);
        uint32_t step = (uint32_t)(cap / row);
        for (uint32_t r = 0; r < L->n; r += step) {
            uint32_t r1 = r + step < L->n ? r + step : L->n;
            gen_rows_2(o, i, r, r1, row, buf);
            size_t bytes = (size_t)(r1 - r) * row;
            if ((rc = pj_st_writer_append(w, buf, bytes, err, errlen))) {
                free(buf);
                goto fail;
            }
            done += bytes;
            if (o->progress)
                o->progress(o->progress_ctx, L->tensor, done, total);
        }
    }
    free(buf);
    return pj_st_writer_finish(w, err, errlen);
fail:
    pj_st_writer_abort(w);
    return rc;
}
