/* model.c — load a safetensors model into per-layer stored formats. */
#include "daemon/model.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "daemon/digest.h"
#include "kernels/bf16.h"
#include "kernels/parfor.h"
#include "protocol/wire.h"

static double now_ms(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e3 + (double)t.tv_nsec * 1e-6;
}

/* A config's tensor name as a message shows it: control bytes, quotes and
 * backslashes as \xNN (as the config's own errors show them), so a name
 * that differs from the file's only by an invisible byte shows how, and the
 * message stays one line. */
static const char *show_tensor(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (; *s && o + 5 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int
layer_fail(char *err, size_t errlen, const char *path, const pj_layer_config *lc, const char *fmt,
           ...)
{
    if (err && errlen) {
        char tn[4 * PJ_CFG_PATH + 8];
        int n = snprintf(err, errlen, "%s: layer '%s' (tensor '%s'): ", path, lc->name,
                         show_tensor(lc->tensor, tn, sizeof tn));
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

/* The scan, the copy and the z12 verify split a matrix between the load
 * threads (kernels/parfor.h); each worker notes the first index it finds,
 * and the smallest over the workers is what one thread would have found. */
typedef struct scan_job {
    const uint16_t *w;
    uint16_t *dst;
    const void *src;
    size_t count;
    uint32_t k;
    const pj_z12 *z;
    size_t *first; /* per worker */
} scan_job;

static size_t first_of(const size_t *first, unsigned workers, size_t none)
{
    size_t m = none;
    for (unsigned i = 0; i < workers; i++)
        m = first[i] < m ? first[i] : m;
    return m;
}

/* Chunks of 64 with no early exit inside, which the compiler vectorizes;
 * the chunk that holds one is walked again for its index. */
static void scan_nonfinite(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const scan_job *j = ctx;
    size_t i = begin;
    for (; i + 64 <= end; i += 64) {
        uint16_t bad = 0;
        for (size_t c = 0; c < 64; c++)
            bad |= (uint16_t)!bf16_finite(j->w[i + c]);
        if (bad)
            break;
    }
    for (; i < end; i++)
        if (!bf16_finite(j->w[i])) {
            j->first[worker] = i;
            return;
        }
}

/* First non-finite element of a bf16 array, as a flat index; count when
 * there is none. */
static size_t first_nonfinite_bf16(const uint16_t *w, size_t count, unsigned threads)
{
    size_t first[PJ_CFG_MAX_LOAD_THREADS];
    unsigned nw = pj_parfor_workers(count, threads);
    for (unsigned i = 0; i < nw; i++)
        first[i] = count;
    scan_job j = {.w = w, .count = count, .first = first};
    pj_parfor(count, threads, scan_nonfinite, &j);
    return first_of(first, nw, count);
}

static void warn_nonfinite(pj_model_warn_fn warn, void *ctx, const char *path,
                           const pj_layer_config *lc, size_t at, uint32_t k, uint32_t bits,
                           const char *what)
{
    if (!warn)
        return;
    char msg[1024], tn[4 * PJ_CFG_PATH + 8];
    snprintf(msg, sizeof msg,
             "%s: layer '%s': tensor '%s' has a non-finite weight at (%zu, %zu) (bits %#x)%s%s",
             path, lc->name, show_tensor(lc->tensor, tn, sizeof tn), at / k, at % k, bits,
             what[0] ? "; " : "", what);
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

#define COPY_CHUNK (1u << 20) /* bytes per parfor index of a copy */

static void copy_chunks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const scan_job *j = ctx;
    (void)worker;
    size_t from = begin * COPY_CHUNK,
           to = end * COPY_CHUNK < j->count ? end * COPY_CHUNK : j->count;
    memcpy((uint8_t *)j->dst + from, (const uint8_t *)j->src + from, to - from);
}

/* BF16 tensor bytes -> private, aligned copy. Split between the threads:
 * the time is mostly page faults, on the file's pages and the copy's own,
 * and those proceed in parallel. */
static uint16_t *copy_bf16(const pj_st_tensor *t, unsigned threads)
{
    uint16_t *w = malloc(t->nbytes ? t->nbytes : 1);
    if (w) {
        scan_job j = {.dst = w, .src = t->data, .count = t->nbytes};
        pj_parfor((t->nbytes + COPY_CHUNK - 1) / COPY_CHUNK, threads, copy_chunks, &j);
    }
    return w;
}

/* Row blocks [begin, end) of a z12 layer unpacked again and compared with
 * the source, a block (16 rows) at a time (a whole second matrix would cost
 * its size in memory and page faults). */
static void verify_blocks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const scan_job *j = ctx;
    const size_t k = j->k;
    uint16_t *blk = malloc(PJ_Z12_TILE_ROWS * k * sizeof *blk);
    if (!blk) {
        j->first[worker] = SIZE_MAX - 1; /* reported as out of memory */
        return;
    }
    for (size_t rb = begin; rb < end; rb++) {
        const size_t r0 = rb * PJ_Z12_TILE_ROWS;
        const size_t rows = j->z->n - r0 < PJ_Z12_TILE_ROWS ? j->z->n - r0 : PJ_Z12_TILE_ROWS;
        const uint16_t *want = j->w + r0 * k;
        pj_z12_unpack_block(j->z, (uint32_t)rb, blk, k);
        if (memcmp(blk, want, rows * k * sizeof *blk) != 0) {
            size_t i = 0;
            while (blk[i] == want[i])
                i++;
            j->first[worker] = r0 * k + i;
            break;
        }
    }
    free(blk);
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
    const uint32_t max_n = lc->max_n ? lc->max_n : n;
    for (uint32_t i = 0; i < lc->n_graph_rows; i++)
        if (lc->graph_rows[i] > max_n)
            return layer_fail(err, errlen, path, lc,
                              "graph_rows value %u exceeds the rows a request may use (max_n "
                              "%u%s)",
                              lc->graph_rows[i], max_n, lc->max_n ? "" : ", all N");
    *out = t;
    return choose_format(lc, t, k, path, fmt, err, errlen);
}

static int load_layer(const pj_st_file *st, const pj_layer_config *lc, pj_model_layer *L,
                      pj_model_store *S, const char *path, pj_model_warn_fn warn, void *ctx,
                      unsigned threads, pj_model *m, char *err, size_t errlen)
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
    snprintf(L->tuned_as, sizeof L->tuned_as, "%s", lc->tuned_as);
    L->max_n = lc->max_n ? lc->max_n : n;
    L->n_graph_rows = 0;
    for (uint32_t i = 0; i < lc->n_graph_rows; i++)
        if (lc->graph_rows[i] < L->max_n)
            L->graph_rows[L->n_graph_rows++] = lc->graph_rows[i];
    L->src_dtype = (int)t->dtype;
    if (pj_digest(t->data, t->nbytes, threads, &L->digest) != 0)
        goto nomem;
    size_t count = (size_t)n * k;
    L->bf16_bytes = count * 2;
    L->w.n = n;
    L->w.k = k;

    if (t->dtype == PJ_ST_BF16) {
        uint16_t *w = copy_bf16(t, threads);
        if (!w)
            goto nomem;
        double c0 = now_ms();
        size_t bad = first_nonfinite_bf16(w, count, threads);
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
            /* auto takes z12 to store less than bf16. Weights outside its
             * exponent window cost an exception entry each; with too many
             * it would store more (and be slower to read). The pack's
             * counting pass knows the size before any tile is written, so
             * such a layer is not packed at all and stays bf16. */
            size_t limit = lc->format == PJ_FPREF_AUTO ? count * 2 : 0;
            rc = pj_z12_pack_mt(w, n, k, k, threads, limit, &S->z, zerr, sizeof zerr);
            if (rc == -EFBIG) {
                /* That many is unusual for trained weights, hence the
                 * warning; a matrix too small to fill its 16-row tiles is
                 * only a format choice. */
                size_t zbytes = pj_z12_bytes(&S->z);
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
            } else if (rc != 0) {
                free(w);
                if (rc == -ENOMEM)
                    goto nomem;
                return layer_fail(err, errlen, path, lc, "z12 pack failed: %s", zerr);
            } else {
                m->z12_packs++;
                /* The format is lossless by construction; prove it for these
                 * bits before anything serves from them. */
                size_t first[PJ_CFG_MAX_LOAD_THREADS];
                size_t blocks = S->z.n_pad / PJ_Z12_TILE_ROWS;
                unsigned nw = pj_parfor_workers(blocks, threads);
                for (unsigned i = 0; i < nw; i++)
                    first[i] = SIZE_MAX;
                scan_job vj = {.w = w, .k = k, .z = &S->z, .first = first};
                pj_parfor(blocks, threads, verify_blocks, &vj);
                size_t diff = first_of(first, nw, SIZE_MAX);
                if (diff == SIZE_MAX - 1) {
                    free(w);
                    goto nomem;
                }
                if (diff != SIZE_MAX) {
                    uint16_t want = w[diff];
                    /* What the verify read: its block unpacked again, into w
                     * (scratch now; the block's rows fit in n x k). */
                    size_t row = diff / k;
                    pj_z12_unpack_block(&S->z, (uint32_t)(row / PJ_Z12_TILE_ROWS), w, k);
                    uint16_t got = w[(row % PJ_Z12_TILE_ROWS) * k + diff % k];
                    free(w);
                    return layer_fail(err, errlen, path, lc,
                                      "z12 round trip differs at (%zu, %zu): %#06x became %#06x",
                                      diff / k, diff % k, want, got);
                }
                free(w);
                L->w.z = &S->z;
                L->stored_bytes = pj_z12_bytes(&S->z);
                L->z_base = S->z.base;
                L->n_exc = S->z.n_exc;
                L->exc_rate = (double)S->z.n_exc / (double)count;
                for (uint32_t b = 0; b < S->z.n_pad / 16; b++) {
                    uint32_t c = S->z.blk_exc[b + 1] - S->z.blk_exc[b];
                    if (c > L->blk_exc_max) {
                        L->blk_exc_max = c;
                        L->blk_exc_max_row = 16 * b;
                    }
                }
            }
        }
        m->convert_ms += now_ms() - c0;
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
        m->convert_ms += now_ms() - c0;
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

int pj_model_layer_heavy_block(const pj_model_layer *L)
{
    if (L->w.fmt != PJ_FMT_Z12 || !L->n_exc || !L->w.n)
        return 0;
    const uint32_t nblk = (L->w.n + 15) / 16;
    if (nblk < 2)
        return 0; /* no other block to be heavier than */
    /* The others' mean, without the block itself (with it, no layer of
     * three blocks or fewer could ever pass three times the mean). */
    const double others = (double)(L->n_exc - L->blk_exc_max) / (double)(nblk - 1);
    return L->blk_exc_max > 64 && (double)L->blk_exc_max > 3.0 * others;
}

uint32_t pj_model_layer_busiest_block_end(const pj_model_layer *L)
{
    return L->blk_exc_max_row + 15 < L->w.n ? L->blk_exc_max_row + 15 : L->w.n - 1;
}

double pj_model_layer_block_exc_mean(const pj_model_layer *L)
{
    return L->w.n ? (double)L->n_exc / (double)((L->w.n + 15) / 16) : 0.0;
}

/* Every layer a model holds goes into the WELCOME (daemon/server.c). */
_Static_assert(PJ_CFG_MAX_LAYERS <= PJ_WIRE_MAX_LAYERS_ALL,
               "a model may hold more layers than a WELCOME carries");

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

/* ---- host memory ---------------------------------------------------------- */

static const char *g_host_root; /* tests (pj_model_set_host_root); NULL: the system's */

void pj_model_set_host_root(const char *root)
{
    g_host_root = root;
}

const char *pj_model_host_root(void)
{
    return g_host_root;
}

/* What layer lc needs of host memory (model.h): held once loaded, and the
 * conversion's copy while it loads. A layer the load would refuse needs
 * nothing: the load says why. */
static void layer_host_need(const pj_st_file *st, const pj_layer_config *lc, const char *path,
                            uint64_t *held, uint64_t *during)
{
    const pj_st_tensor *t;
    pj_format fmt;
    char err[8];
    *held = *during = 0;
    if (check_layer(st, lc, path, &t, &fmt, err, sizeof err))
        return;
    const uint64_t count = t->shape[0] * t->shape[1];
    if (fmt == PJ_FMT_Z12) {
        *held = count * 3 / 2; /* 12 bits a weight, exceptions on top */
        *during = count * 2;   /* its bf16 copy while it is packed */
    } else {
        *held = count * (fmt == PJ_FMT_SPLIT ? 4 : 2);
        if (t->dtype != PJ_ST_BF16)
            *during = count * 4; /* an F32 / F16 layer's floats while it is split */
    }
}

void pj_model_host_need_of(const pj_config *cfg, const pj_st_file *st, pj_model_host_need *out)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < cfg->model.n_layers; i++) {
        uint64_t held, during;
        layer_host_need(st, &cfg->model.layers[i], cfg->model.path, &held, &during);
        out->held += held;
        if (during > out->transient)
            out->transient = during;
    }
}

/* What to do when the memory is short, by what binds it. */
static const char *host_advice(const pj_hostmem *h)
{
    return h->cg_binds ? "serve fewer layers or raise the cgroup's limit (a unit's MemoryMax=, a "
                         "container's memory limit)"
                       : "serve fewer layers or free memory";
}

int pj_model_host_check(const pj_model_host_need *need, uint32_t n_layers, const pj_hostmem *h,
                        const char *path, char *err, size_t errlen)
{
    const uint64_t total = need->held + need->transient;
    if (total <= h->avail && (!h->high_set || total <= h->high_room))
        return 0;
    if (total <= h->avail) {
        /* memory.high does not kill; past it every allocation of the load
         * waits on reclaim, and without swap the weights cannot go out. */
        snprintf(err, errlen,
                 "%s: the %u layers take at least %s of host memory once loaded and the cgroup "
                 "%s's memory.high (%s, %s of it in use) leaves %s below it: past it the kernel "
                 "reclaims and throttles the process, so the load will be slow (raise the unit's "
                 "MemoryHigh=, or serve fewer layers)",
                 path, n_layers, pj_hostmem_size(total).s, h->high_cgroup,
                 pj_hostmem_size(h->high_limit).s, pj_hostmem_size(h->high_used).s,
                 pj_hostmem_size(h->high_room).s);
        return 1;
    }
    char where[384];
    pj_hostmem_describe(h, where, sizeof where);
    if (total <= h->avail + h->swap) {
        snprintf(err, errlen,
                 "%s: the %u layers take at least %s of host memory once loaded and %s are "
                 "available without swap (%s of swap free; %s): the load will swap",
                 path, n_layers, pj_hostmem_size(total).s, pj_hostmem_size(h->avail).s,
                 pj_hostmem_size(h->swap).s, where);
        return 1;
    }
    char packing[64] = "";
    if (need->transient)
        snprintf(packing, sizeof packing, ", and %s while one is converted",
                 pj_hostmem_size(need->transient).s);
    snprintf(err, errlen,
             "%s: the %u layers take at least %s of host memory once loaded (each layer its own "
             "copy of its weights%s) and only %s are available (%s); %s (PROJD_HOST_MEM_CHECK=0 "
             "skips this check where the kernel's figures miss memory it would give back)",
             path, n_layers, pj_hostmem_size(total).s, packing,
             pj_hostmem_size(h->avail + h->swap).s, where, host_advice(h));
    return -ENOMEM;
}

/* The host memory check (model.h), taken before the load and again before
 * each layer. rest_held[i] / rest_during[i] are what layers i.. need (held,
 * and the largest conversion copy), filled by host_watch_begin. */
typedef struct host_watch {
    int on;
    uint64_t *rest_held, *rest_during;
    pj_hostmem_at at; /* found once, read before each layer */
} host_watch;

static void host_watch_end(host_watch *w)
{
    free(w->rest_held);
    free(w->rest_during);
    memset(w, 0, sizeof *w);
}

/* The check before the load: 0, or -ENOMEM with err; the warning goes to
 * warn (NULL: dropped). When the figures are read, w is armed for the
 * checks before each layer. */
static int host_watch_begin(host_watch *w, const pj_config *cfg, const pj_st_file *st,
                            pj_model_warn_fn warn, void *ctx, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    const char *off = getenv("PROJD_HOST_MEM_CHECK");
    pj_hostmem h;
    if (off && !strcmp(off, "0"))
        return 0;
    pj_hostmem_locate(g_host_root, &w->at);
    if (pj_hostmem_read_at(&w->at, &h) != 0)
        return 0;
    const uint32_t n = cfg->model.n_layers;
    w->rest_held = calloc(n + 1, sizeof *w->rest_held);
    w->rest_during = calloc(n + 1, sizeof *w->rest_during);
    if (!w->rest_held || !w->rest_during) {
        host_watch_end(w);
        snprintf(err, errlen, "%s: out of memory", cfg->model.path);
        return -ENOMEM;
    }
    for (uint32_t i = n; i-- > 0;) {
        uint64_t held, during;
        layer_host_need(st, &cfg->model.layers[i], cfg->model.path, &held, &during);
        w->rest_held[i] = w->rest_held[i + 1] + held;
        w->rest_during[i] = during > w->rest_during[i + 1] ? during : w->rest_during[i + 1];
    }
    pj_model_host_need need = {.held = w->rest_held[0], .transient = w->rest_during[0]};
    char why[1024];
    int rc = pj_model_host_check(&need, n, &h, cfg->model.path, why, sizeof why);
    if (rc < 0) {
        host_watch_end(w);
        snprintf(err, errlen, "%s", why);
        return rc;
    }
    if (rc > 0 && warn)
        warn(ctx, why);
    w->on = 1;
    return 0;
}

/* Before layer i (of the n): the layers left against the memory left. What
 * the check before the load saw can be taken meanwhile by another process,
 * as projd instances starting at one moment take it from each other; a
 * load refused here says so instead of being killed at some later layer. */
static int host_watch_layer(const host_watch *w, const pj_config *cfg, uint32_t i, char *err,
                            size_t errlen)
{
    pj_hostmem h;
    if (!w->on || i == 0 || pj_hostmem_read_at(&w->at, &h) != 0)
        return 0;
    const uint64_t need = w->rest_held[i] + w->rest_during[i];
    if (need <= h.avail + h.swap)
        return 0;
    char where[384];
    pj_hostmem_describe(&h, where, sizeof where);
    snprintf(err, errlen,
             "%s: before layer '%s' (%u of %u) the layers left take at least %s of host memory "
             "and only %s are available now (%s), though the check before the load "
             "found enough: memory was likely taken by another process during the load (the "
             "figures are lower bounds, so the load's own use beyond them counts too); %s",
             cfg->model.path, cfg->model.layers[i].name, i + 1, cfg->model.n_layers,
             pj_hostmem_size(need).s, pj_hostmem_size(h.avail + h.swap).s, where, host_advice(&h));
    return -ENOMEM;
}

/* check_layer over every layer, and no name twice: the first failure. */
static int check_layers(const pj_config *cfg, const pj_st_file *st, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < cfg->model.n_layers; i++) {
        const pj_layer_config *lc = &cfg->model.layers[i];
        const pj_st_tensor *t;
        pj_format fmt;
        int rc = name_used_before(cfg, i)
                     ? layer_fail(err, errlen, cfg->model.path, lc,
                                  "layer name used twice in the config")
                     : check_layer(st, lc, cfg->model.path, &t, &fmt, err, errlen);
        if (rc)
            return rc;
    }
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
    rc = check_layers(cfg, st, err, errlen);
    if (rc == 0)
        rc = pj_st_verify(st, err, errlen);
    pj_st_close(st);
    return rc;
}

int pj_model_load(const pj_config *cfg, pj_model **out, pj_model_warn_fn warn, void *ctx, char *err,
                  size_t errlen)
{
    return pj_model_load_file(cfg, out, NULL, warn, ctx, err, errlen);
}

int pj_model_load_file(const pj_config *cfg, pj_model **out, pj_st_file **file,
                       pj_model_warn_fn warn, void *ctx, char *err, size_t errlen)
{
    return pj_model_load_progress(cfg, out, file, warn, NULL, ctx, err, errlen);
}

int pj_model_load_progress(const pj_config *cfg, pj_model **out, pj_st_file **file,
                           pj_model_warn_fn warn, pj_model_progress_fn progress, void *ctx,
                           char *err, size_t errlen)
{
    *out = NULL;
    if (file)
        *file = NULL;
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
    char *abs = realpath(path, NULL);
    snprintf(m->abs_path, sizeof m->abs_path, "%s",
             abs && strlen(abs) < sizeof m->abs_path ? abs : path);
    free(abs);
    double t0 = now_ms();
    /* Past 64 threads a load is bound by memory bandwidth, not cores. */
    unsigned threads = cfg->model.load_threads ? cfg->model.load_threads : pj_cpu_count();
    if (threads > PJ_CFG_MAX_LOAD_THREADS) /* also bounds the per-worker arrays */
        threads = PJ_CFG_MAX_LOAD_THREADS;
    m->load_threads = threads;
    pj_st_file *st;
    host_watch hw = {0};
    rc = pj_st_open(path, &st, err, errlen);
    if (rc) {
        free(m);
        return rc;
    }
    m->file_bytes = pj_st_file_size(st);
    /* Every layer's header first: a config that names a tensor the file
     * lacks, or more rows than it has, in its last layer failed only after
     * the layers before it were read and converted (minutes for a whole
     * model, each time a service manager tried again). */
    if ((rc = check_layers(cfg, st, err, errlen)) != 0)
        goto fail;
    /* Before any weight is read: a model larger than the host's memory
     * would be killed by the kernel part way through its load (700 bf16
     * layers of 224 MiB on a 125 GiB host were, at 27 s, with no word). */
    if ((rc = host_watch_begin(&hw, cfg, st, warn, ctx, err, errlen)) != 0)
        goto fail;
    for (uint32_t i = 0; i < cfg->model.n_layers; i++) {
        const pj_layer_config *lc = &cfg->model.layers[i];
        if (progress && progress(ctx, i, cfg->model.n_layers, lc->name) != 0) {
            snprintf(err, errlen, "%s: load stopped before layer '%s' (%u of %u)", path, lc->name,
                     i + 1, cfg->model.n_layers);
            rc = -ECANCELED;
            goto fail;
        }
        if ((rc = host_watch_layer(&hw, cfg, i, err, errlen)) != 0)
            goto fail;
        rc = load_layer(st, lc, &m->layers[i], &m->store[i], path, warn, ctx, threads, m, err,
                        errlen);
        if (rc)
            goto fail;
        m->n_layers = i + 1;
    }
    /* Read through a mapping: what was copied is only the file's if the
     * file stayed as it was until now. */
    if ((rc = pj_st_verify(st, err, errlen)) != 0)
        goto fail;
    host_watch_end(&hw);
    if (file)
        *file = st;
    else
        pj_st_close(st);
    m->load_ms = now_ms() - t0 - m->convert_ms;
    *out = m;
    return 0;
fail:
    host_watch_end(&hw);
    pj_st_close(st);
    pj_model_free(m);
    return rc;
}
