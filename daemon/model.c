/* model.c — load a safetensors model into per-layer stored formats. */
#include "daemon/model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kernels/bf16.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int
layer_fail(char *err, size_t errlen, const char *path, const pj_layer_config *lc, const char *fmt,
           ...)
{
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: layer '%s' (tensor '%s'): ", path, lc->name, lc->tensor);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

static int bf16_finite(uint16_t h)
{
    return (h & 0x7f80u) != 0x7f80u;
}

/* First non-finite element of an n x k bf16 matrix, as a flat index; count
 * when there is none. */
static size_t first_nonfinite_bf16(const uint16_t *w, size_t count)
{
    for (size_t i = 0; i < count; i++)
        if (!bf16_finite(w[i]))
            return i;
    return count;
}

static void warn_nonfinite(pj_model_warn_fn warn, void *ctx, const char *path,
                           const pj_layer_config *lc, size_t at, uint32_t k, uint32_t bits,
                           const char *what)
{
    if (!warn)
        return;
    char msg[1024];
    snprintf(msg, sizeof msg,
             "%s: layer '%s': tensor '%s' has a non-finite weight at (%zu, %zu) (bits %#x)%s%s",
             path, lc->name, lc->tensor, at / k, at % k, bits, what[0] ? "; " : "", what);
    warn(ctx, msg);
}

/* Choose the stored format, or fail naming why the preference is
 * impossible for this tensor. */
static int choose_format(const pj_layer_config *lc, const pj_st_tensor *t, uint32_t k,
                         const char *path, pj_format *fmt, char *err, size_t errlen)
{
    int bf = t->dtype == PJ_ST_BF16;
    switch (lc->format) {
    case PJ_FPREF_AUTO:
        *fmt = bf ? (k % PJ_Z12_TILE_K == 0 ? PJ_FMT_Z12 : PJ_FMT_BF16) : PJ_FMT_SPLIT;
        return 0;
    case PJ_FPREF_BF16:
        if (!bf)
            return layer_fail(err, errlen, path, lc,
                              "format bf16 would round the %s weights; use split (or auto)",
                              pj_st_dtype_name(t->dtype));
        *fmt = PJ_FMT_BF16;
        return 0;
    case PJ_FPREF_Z12:
        if (!bf)
            return layer_fail(err, errlen, path, lc,
                              "format z12 needs a BF16 tensor, the file has %s; use split "
                              "(or auto)",
                              pj_st_dtype_name(t->dtype));
        if (k % PJ_Z12_TILE_K != 0)
            return layer_fail(err, errlen, path, lc,
                              "format z12 needs K %% %d == 0, K is %u; use bf16 (or auto)",
                              PJ_Z12_TILE_K, k);
        *fmt = PJ_FMT_Z12;
        return 0;
    case PJ_FPREF_SPLIT:
        *fmt = PJ_FMT_SPLIT;
        return 0;
    }
    return layer_fail(err, errlen, path, lc, "unknown format preference %d", (int)lc->format);
}

/* BF16 tensor bytes -> private, aligned copy. */
static uint16_t *copy_bf16(const pj_st_tensor *t)
{
    uint16_t *w = malloc(t->nbytes ? t->nbytes : 1);
    if (w)
        memcpy(w, t->data, t->nbytes);
    return w;
}

/* F32 or F16 tensor -> float array (the mapping promises no alignment). */
static float *copy_f32(const pj_st_tensor *t, size_t count)
{
    float *f = malloc(count * sizeof *f);
    if (!f)
        return NULL;
    if (t->dtype == PJ_ST_F32) {
        memcpy(f, t->data, count * sizeof *f);
    } else {
        const uint8_t *p = t->data;
        for (size_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, p + 2 * i, sizeof h);
            f[i] = pj_f16_to_f32(h);
        }
    }
    return f;
}

/* What the header alone decides about a layer: the tensor exists and is a
 * float matrix projd can serve, max_n fits N, and the preferred format is
 * possible. Shared by the load and pj_model_check, so --check-config and a
 * start refuse the same layers. */
static int check_layer(const pj_st_file *st, const pj_layer_config *lc, const char *path,
                       const pj_st_tensor **out, pj_format *fmt, char *err, size_t errlen)
{
    char ss[PJ_ST_MAX_DIMS * 24 + 4];
    const pj_st_tensor *t = pj_st_find(st, lc->tensor);
    if (!t)
        return layer_fail(err, errlen, path, lc, "no such tensor in the file (%zu tensors)",
                          pj_st_count(st));
    if (!pj_st_dtype_is_float(t->dtype))
        return layer_fail(err, errlen, path, lc, "dtype %s; projd serves BF16, F16 or F32",
                          pj_st_dtype_name(t->dtype));
    if (t->ndim != 2)
        return layer_fail(err, errlen, path, lc, "shape %s has rank %u; a layer is a 2-D [N, K]",
                          pj_st_shape_str(t->shape, t->ndim, ss, sizeof ss), t->ndim);
    if (t->shape[0] == 0 || t->shape[1] == 0 || t->shape[0] > PJ_MODEL_MAX_DIM ||
        t->shape[1] > PJ_MODEL_MAX_DIM)
        return layer_fail(err, errlen, path, lc, "shape %s: N and K must be in 1..%u",
                          pj_st_shape_str(t->shape, t->ndim, ss, sizeof ss), PJ_MODEL_MAX_DIM);
    uint32_t n = (uint32_t)t->shape[0], k = (uint32_t)t->shape[1];
    if (lc->max_n > n)
        return layer_fail(err, errlen, path, lc, "max_n %u exceeds N = %u", lc->max_n, n);
    *out = t;
    return choose_format(lc, t, k, path, fmt, err, errlen);
}

static int load_layer(const pj_st_file *st, const pj_layer_config *lc, pj_model_layer *L,
                      pj_model_store *S, const char *path, pj_model_warn_fn warn, void *ctx,
                      double *convert_ms, char *err, size_t errlen)
{
    const pj_st_tensor *t = NULL;
    pj_format fmt = PJ_FMT_BF16;
    int rc = check_layer(st, lc, path, &t, &fmt, err, errlen);
    if (rc)
        return rc;
    uint32_t n = (uint32_t)t->shape[0], k = (uint32_t)t->shape[1];

    snprintf(L->name, sizeof L->name, "%s", lc->name);
    snprintf(L->tensor, sizeof L->tensor, "%s", lc->tensor);
    snprintf(L->engine, sizeof L->engine, "%s", lc->engine);
    L->max_n = lc->max_n ? lc->max_n : n;
    L->src_dtype = (int)t->dtype;
    size_t count = (size_t)n * k;
    L->bf16_bytes = count * 2;
    L->w.n = n;
    L->w.k = k;

    if (t->dtype == PJ_ST_BF16) {
        uint16_t *w = copy_bf16(t);
        if (!w)
            goto nomem;
        double c0 = now_ms();
        size_t bad = first_nonfinite_bf16(w, count);
        if (bad < count) {
            if (fmt == PJ_FMT_Z12 && lc->format == PJ_FPREF_Z12) {
                free(w);
                return layer_fail(err, errlen, path, lc,
                                  "format z12 cannot hold the non-finite weight at (%zu, %zu)",
                                  bad / k, bad % k);
            }
            warn_nonfinite(warn, ctx, path, lc, bad, k, w[bad],
                           fmt == PJ_FMT_Z12 ? "layer stored as bf16, not z12" : "");
            if (fmt == PJ_FMT_Z12)
                fmt = PJ_FMT_BF16;
        }
        if (fmt == PJ_FMT_BF16) {
            S->a = w;
            L->w.bf16 = w;
            L->stored_bytes = count * 2;
        } else if (fmt == PJ_FMT_SPLIT) {
            S->a = w;
            S->b = calloc(count, sizeof *S->b); /* lo = +0: hi + lo == w exactly */
            if (!S->b)
                goto nomem;
            L->w.hi = S->a;
            L->w.lo = S->b;
            L->stored_bytes = 2 * count * 2;
        } else {
            char zerr[256];
            rc = pj_z12_pack(w, n, k, k, &S->z, zerr, sizeof zerr);
            if (rc != 0) {
                free(w);
                if (rc == -ENOMEM)
                    goto nomem;
                return layer_fail(err, errlen, path, lc, "z12 pack failed: %s", zerr);
            }
            /* The format is lossless by construction; prove it for these bits
             * before anything serves from them. */
            uint16_t *back = malloc(count * sizeof *back);
            if (!back) {
                free(w);
                goto nomem;
            }
            memset(back, 0xff, count * sizeof *back);
            pj_z12_unpack(&S->z, back, k);
            size_t diff = count;
            if (memcmp(back, w, count * sizeof *back) != 0)
                for (diff = 0; diff < count && back[diff] == w[diff]; diff++)
                    ;
            free(back);
            if (diff < count) {
                uint16_t want = w[diff];
                pj_z12_unpack_row(&S->z, (uint32_t)(diff / k), w); /* w is scratch now */
                uint16_t got = w[diff % k];
                free(w);
                return layer_fail(err, errlen, path, lc,
                                  "z12 round trip differs at (%zu, %zu): %#06x became %#06x",
                                  diff / k, diff % k, want, got);
            }
            size_t zbytes = pj_z12_bytes(&S->z);
            if (lc->format == PJ_FPREF_AUTO && zbytes > count * 2) {
                /* auto takes z12 to store less than bf16. Weights outside
                 * its exponent window cost an exception entry each; with
                 * this many it would store more (and be slower to read), so
                 * the layer stays bf16. That many is unusual for trained
                 * weights, hence the warning; a matrix too small to fill its
                 * 16-row tiles is only a format choice. */
                if (warn && S->z.n_exc > 0) {
                    char msg[1024];
                    snprintf(msg, sizeof msg,
                             "%s: layer '%s': stored as bf16, not z12: z12 would take %zu bytes "
                             "for bf16's %zu (%u exceptions, %.2f%% of the weights outside its "
                             "window)",
                             path, lc->name, zbytes, count * 2, S->z.n_exc,
                             100.0 * (double)S->z.n_exc / (double)count);
                    warn(ctx, msg);
                }
                pj_z12_free(&S->z);
                fmt = PJ_FMT_BF16;
                S->a = w;
                L->w.bf16 = w;
                L->stored_bytes = count * 2;
            } else {
                free(w);
                L->w.z = &S->z;
                L->stored_bytes = zbytes;
                L->z_base = S->z.base;
                L->n_exc = S->z.n_exc;
                L->exc_rate = (double)S->z.n_exc / (double)count;
            }
        }
        *convert_ms += now_ms() - c0;
    } else {
        /* F32 or F16: fmt is split (choose_format refused the rest) */
        float *f = copy_f32(t, count);
        if (!f)
            goto nomem;
        double c0 = now_ms();
        S->a = malloc(count * sizeof *S->a);
        S->b = malloc(count * sizeof *S->b);
        if (!S->a || !S->b) {
            free(f);
            goto nomem;
        }
        for (size_t i = 0; i < count; i++) {
            uint32_t u;
            memcpy(&u, &f[i], sizeof u);
            if ((u & 0x7f800000u) == 0x7f800000u) {
                /* The file's own bits, as an operator would look them up. */
                uint32_t bits = u;
                if (t->dtype == PJ_ST_F16) {
                    uint16_t h;
                    memcpy(&h, (const uint8_t *)t->data + 2 * i, sizeof h);
                    bits = h;
                }
                warn_nonfinite(warn, ctx, path, lc, i, k, bits, "");
                break;
            }
        }
        pj_split_f32(f, count, S->a, S->b);
        if (t->dtype == PJ_ST_F16) {
            /* 11 significant bits fit in hi's 8 plus lo's 8: exact */
            for (size_t i = 0; i < count; i++) {
                /* compared as values: -0 splits into -0 + +0 == +0, equal */
                float r = pj_bf16_to_f32(S->a[i]) + pj_bf16_to_f32(S->b[i]);
                if (r != f[i] && f[i] == f[i]) {
                    double want = f[i];
                    free(f);
                    return layer_fail(err, errlen, path, lc,
                                      "F16 split not exact at (%zu, %zu): %g became %g", i / k,
                                      i % k, want, (double)r);
                }
            }
        }
        free(f);
        L->w.hi = S->a;
        L->w.lo = S->b;
        L->stored_bytes = 2 * count * 2;
        *convert_ms += now_ms() - c0;
    }
    L->w.fmt = fmt;
    return 0;
nomem:
    return layer_fail(err, errlen, path, lc, "out of memory for %u x %u weights", n, k);
}

static void store_free(pj_model_store *S)
{
    free(S->a);
    free(S->b);
    pj_z12_free(&S->z);
    memset(S, 0, sizeof *S);
}

void pj_model_free(pj_model *m)
{
    if (!m)
        return;
    for (uint32_t i = 0; i < PJ_CFG_MAX_LAYERS; i++)
        store_free(&m->store[i]);
    free(m);
}

int pj_model_find(const pj_model *m, const char *name)
{
    for (uint32_t i = 0; i < m->n_layers; i++)
        if (strcmp(m->layers[i].name, name) == 0)
            return (int)i;
    return -1;
}

static int check_layer_count(const pj_config *cfg, char *err, size_t errlen)
{
    if (cfg->model.n_layers == 0 || cfg->model.n_layers > PJ_CFG_MAX_LAYERS) {
        snprintf(err, errlen, "%s: the config lists %u layers (1..%d)", cfg->model.path,
                 cfg->model.n_layers, PJ_CFG_MAX_LAYERS);
        return -EINVAL;
    }
    return 0;
}

/* Layer i's name appeared in an earlier layer. */
static int name_used_before(const pj_config *cfg, uint32_t i)
{
    for (uint32_t j = 0; j < i; j++)
        if (strcmp(cfg->model.layers[j].name, cfg->model.layers[i].name) == 0)
            return 1;
    return 0;
}

int pj_model_check(const pj_config *cfg, char *err, size_t errlen)
{
    const char *path = cfg->model.path;
    int rc = check_layer_count(cfg, err, errlen);
    if (rc)
        return rc;
    pj_st_file *st;
    if ((rc = pj_st_open(path, &st, err, errlen)) != 0)
        return rc;
    for (uint32_t i = 0; i < cfg->model.n_layers && rc == 0; i++) {
        const pj_layer_config *lc = &cfg->model.layers[i];
        const pj_st_tensor *t;
        pj_format fmt;
        if (name_used_before(cfg, i))
            rc = layer_fail(err, errlen, path, lc, "layer name used twice in the config");
        else
            rc = check_layer(st, lc, path, &t, &fmt, err, errlen);
    }
    pj_st_close(st);
    return rc;
}

int pj_model_load(const pj_config *cfg, pj_model **out, pj_model_warn_fn warn, void *ctx, char *err,
                  size_t errlen)
{
    *out = NULL;
    const char *path = cfg->model.path;
    int rc = check_layer_count(cfg, err, errlen);
    if (rc)
        return rc;
    pj_model *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    snprintf(m->path, sizeof m->path, "%s", path);
    double t0 = now_ms(), convert = 0;
    pj_st_file *st;
    rc = pj_st_open(path, &st, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    m->file_bytes = pj_st_file_size(st);
    for (uint32_t i = 0; i < cfg->model.n_layers; i++) {
        const pj_layer_config *lc = &cfg->model.layers[i];
        if (name_used_before(cfg, i)) {
            rc = layer_fail(err, errlen, path, lc, "layer name used twice in the config");
            goto fail;
        }
        rc =
            load_layer(st, lc, &m->layers[i], &m->store[i], path, warn, ctx, &convert, err, errlen);
        if (rc)
            goto fail;
        m->n_layers = i + 1;
    }
    pj_st_close(st);
    m->convert_ms = convert;
    m->load_ms = now_ms() - t0 - convert;
    *out = m;
    return 0;
fail:
    pj_st_close(st);
    pj_model_free(m);
    return rc;
}
