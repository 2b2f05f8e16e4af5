/* test_model.c — the loader (formats, verification, errors) and inspect. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "daemon/digest.h"
#include "daemon/inspect.h"
#include "daemon/memplan.h"
#include "daemon/model.h"
#include "daemon/modelgen.h"
#include "daemon/safetensors.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "kernels/zfmt.h"
#include "tests/helpers/fixture.h"

static char small_path[1024];

/* ---- helpers ----------------------------------------------------------------- */

typedef struct warns {
    char msg[8][1024];
    int n;
} warns;

static void on_warn(void *ctx, const char *msg)
{
    warns *w = ctx;
    if (w->n < 8)
        snprintf(w->msg[w->n], sizeof w->msg[0], "%s", msg);
    w->n++;
}

/* model.load_threads for the configs below (tests loop over it). */
static uint32_t g_load_threads;

/* A config with one layer over tensor "w" of path. */
static void one_layer_config(pj_config *cfg, const char *path, pj_format_pref fmt)
{
    pj_fixture_small_config(cfg, path);
    cfg->model.load_threads = g_load_threads;
    cfg->model.n_layers = 1;
    memset(&cfg->model.layers[0], 0, sizeof cfg->model.layers[0]);
    snprintf(cfg->model.layers[0].name, PJ_CFG_NAME, "lay");
    snprintf(cfg->model.layers[0].tensor, PJ_CFG_PATH, "w");
    cfg->model.layers[0].format = fmt;
}

/* Write a file with tensor "w" (and a 1-byte tensor before it, so its data
 * is deliberately misaligned) and load it with one layer. */
static int load_one(const char *file, pj_st_dtype dt, uint32_t ndim, const uint64_t *shape,
                    const void *data, pj_format_pref fmt, pj_model **m, warns *wr, char *err,
                    size_t errlen)
{
    char path[1024], werr[512];
    pj_fixture_path(path, sizeof path, file);
    static const uint8_t pad = 7;
    pj_st_wtensor t[2] = {{.name = "pad", .dtype = PJ_ST_U8, .ndim = 1, .shape = {1}, .data = &pad},
                          {.name = "w", .dtype = dt, .ndim = ndim, .data = data}};
    memcpy(t[1].shape, shape, ndim * sizeof *shape);
    ck_assert_msg(pj_st_write(path, t, 2, NULL, 0, werr, sizeof werr) == 0, "%s", werr);
    pj_config *cfg = malloc(sizeof *cfg);
    one_layer_config(cfg, path, fmt);
    int rc = pj_model_load(cfg, m, on_warn, wr, err, errlen);
    free(cfg);
    return rc;
}

static void expect_load_error(const char *file, pj_st_dtype dt, uint32_t ndim,
                              const uint64_t *shape, const void *data, pj_format_pref fmt,
                              const char *want)
{
    pj_model *m = (pj_model *)0x1;
    warns wr = {0};
    char err[1024] = "";
    int rc = load_one(file, dt, ndim, shape, data, fmt, &m, &wr, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "rc %d, err '%s' (wanted '%s')", rc, err, want);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
    ck_assert_msg(strstr(err, "layer 'lay'") != NULL, "error '%s' names no layer", err);
    ck_assert_msg(strchr(err, '\n') == NULL, "error not one line: '%s'", err);
}

static uint16_t *rand_bf16(size_t count, uint32_t seed, float scale)
{
    uint16_t *w = malloc(count * 2);
    for (size_t i = 0; i < count; i++) {
        seed = seed * 1664525u + 1013904223u;
        float v = ((float)(seed >> 8) / 16777216.0f - 0.5f) * scale;
        w[i] = pj_f32_to_bf16(v);
    }
    return w;
}

/* ---- the small model --------------------------------------------------------- */

START_TEST(small_model_layers)
{
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_msg(pj_model_load(&cfg, &m, on_warn, &wr, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(wr.n, 0);
    ck_assert_uint_eq(m->n_layers, 5);
    ck_assert_str_eq(m->path, small_path);
    ck_assert_double_ge(m->load_ms, 0);
    ck_assert_double_ge(m->convert_ms, 0);

    pj_st_file *st;
    ck_assert_int_eq(pj_st_open(small_path, &st, err, sizeof err), 0);
    ck_assert_uint_eq(m->file_bytes, pj_st_file_size(st));
    static const pj_format want[5] = {PJ_FMT_Z12, PJ_FMT_Z12, PJ_FMT_Z12, PJ_FMT_Z12, PJ_FMT_SPLIT};
    for (uint32_t i = 0; i < 5; i++) {
        const pj_model_layer *L = &m->layers[i];
        ck_assert_int_eq(pj_model_find(m, L->name), (int)i);
        const pj_st_tensor *t = pj_st_find(st, L->tensor);
        ck_assert_ptr_nonnull(t);
        uint32_t n = (uint32_t)t->shape[0], k = (uint32_t)t->shape[1];
        size_t count = (size_t)n * k;
        ck_assert_uint_eq(L->w.n, n);
        ck_assert_uint_eq(L->w.k, k);
        ck_assert_uint_eq(L->max_n, n);
        ck_assert_int_eq(L->src_dtype, t->dtype);
        ck_assert_int_eq(L->w.fmt, want[i]);
        ck_assert_uint_eq(L->bf16_bytes, count * 2);
        if (L->w.fmt == PJ_FMT_Z12) {
            uint16_t *back = malloc(count * 2);
            memset(back, 0xee, count * 2);
            pj_z12_unpack(L->w.z, back, k);
            ck_assert_int_eq(memcmp(back, t->data, count * 2), 0);
            free(back);
            ck_assert_uint_eq(L->stored_bytes, pj_z12_bytes(L->w.z));
            ck_assert_uint_gt(L->n_exc, 0); /* the small preset forces some */
            ck_assert_uint_eq(L->n_exc, L->w.z->n_exc);
            ck_assert_uint_eq(L->z_base, L->w.z->base);
            ck_assert_double_eq_tol(L->exc_rate, (double)L->n_exc / (double)count, 1e-12);
            ck_assert_uint_lt(L->stored_bytes, L->bf16_bytes * 0.76);
        } else {
            /* the router: hi and lo are exactly pj_split_f32 of the file */
            float *f = malloc(count * 4);
            memcpy(f, t->data, count * 4);
            uint16_t *hi = malloc(count * 2), *lo = malloc(count * 2);
            pj_split_f32(f, count, hi, lo);
            ck_assert_int_eq(memcmp(hi, L->w.hi, count * 2), 0);
            ck_assert_int_eq(memcmp(lo, L->w.lo, count * 2), 0);
            size_t nonzero_lo = 0;
            for (size_t j = 0; j < count; j++) {
                float r = pj_bf16_to_f32(L->w.hi[j]) + pj_bf16_to_f32(L->w.lo[j]);
                ck_assert(fabsf(f[j] - r) <= ldexpf(fabsf(f[j]), -16) + 0x1p-134f);
                nonzero_lo += L->w.lo[j] != 0;
            }
            ck_assert_uint_gt(nonzero_lo, count / 2);
            ck_assert_uint_eq(L->stored_bytes, count * 4);
            free(f);
            free(hi);
            free(lo);
        }
    }
    ck_assert_int_eq(pj_model_find(m, "nope"), -1);
    pj_st_close(st);
    pj_model_free(m);
}
END_TEST

/* z12 and bf16 storage of the same matrix project to the same bits. */
START_TEST(z12_projects_like_bf16)
{
    pj_config *cfg = malloc(sizeof *cfg);
    pj_fixture_small_config(cfg, small_path);
    pj_model *mz, *mb;
    char err[1024];
    ck_assert_int_eq(pj_model_load(cfg, &mz, NULL, NULL, err, sizeof err), 0);
    for (uint32_t i = 0; i < 4; i++)
        cfg->model.layers[i].format = PJ_FPREF_BF16;
    ck_assert_int_eq(pj_model_load(cfg, &mb, NULL, NULL, err, sizeof err), 0);
    for (uint32_t i = 0; i < 4; i++) {
        const pj_model_layer *Z = &mz->layers[i], *B = &mb->layers[i];
        ck_assert_int_eq(Z->w.fmt, PJ_FMT_Z12);
        ck_assert_int_eq(B->w.fmt, PJ_FMT_BF16);
        ck_assert_uint_eq(B->stored_bytes, B->bf16_bytes);
        uint32_t m = 3, n = Z->w.n, k = Z->w.k;
        uint16_t *x = rand_bf16((size_t)m * k, 11 + i, 2.0f);
        uint16_t *yz = malloc((size_t)m * n * 2), *yb = malloc((size_t)m * n * 2);
        memset(yz, 0x11, (size_t)m * n * 2);
        memset(yb, 0x22, (size_t)m * n * 2);
        ck_assert_int_eq(pj_ref_project(&Z->w, m, n, x, k, yz, n), 0);
        ck_assert_int_eq(pj_ref_project(&B->w, m, n, x, k, yb, n), 0);
        ck_assert_int_eq(memcmp(yz, yb, (size_t)m * n * 2), 0);
        free(x);
        free(yz);
        free(yb);
    }
    pj_model_free(mz);
    pj_model_free(mb);
    free(cfg);
}
END_TEST

START_TEST(format_preferences)
{
    pj_config *cfg = malloc(sizeof *cfg);
    pj_fixture_small_config(cfg, small_path);
    cfg->model.layers[0].format = PJ_FPREF_SPLIT; /* BF16 tensor as hi = w, lo = 0 */
    cfg->model.layers[1].format = PJ_FPREF_Z12;
    cfg->model.layers[3].max_n = 100;
    snprintf(cfg->model.layers[2].engine, PJ_CFG_NAME, "gemv");
    pj_model *m;
    char err[1024];
    ck_assert_msg(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    const pj_model_layer *L = &m->layers[0];
    ck_assert_int_eq(L->w.fmt, PJ_FMT_SPLIT);
    pj_st_file *st;
    ck_assert_int_eq(pj_st_open(small_path, &st, err, sizeof err), 0);
    size_t count = (size_t)L->w.n * L->w.k;
    ck_assert_int_eq(memcmp(L->w.hi, pj_st_find(st, L->tensor)->data, count * 2), 0);
    for (size_t j = 0; j < count; j++)
        ck_assert_uint_eq(L->w.lo[j], 0);
    ck_assert_uint_eq(L->stored_bytes, count * 4);
    ck_assert_int_eq(m->layers[1].w.fmt, PJ_FMT_Z12);
    ck_assert_str_eq(m->layers[2].engine, "gemv");
    ck_assert_str_eq(m->layers[1].engine, "");
    ck_assert_uint_eq(m->layers[3].max_n, 100);
    pj_st_close(st);
    pj_model_free(m);

    /* z12 or bf16 forced on the fp32 router */
    pj_fixture_small_config(cfg, small_path);
    cfg->model.layers[4].format = PJ_FPREF_Z12;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "layer 'router' (tensor 'router.weight'): format z12 needs a BF16 "
                              "tensor, the file has F32") != NULL,
                  "%s", err);
    ck_assert_msg(strncmp(err, small_path, strlen(small_path)) == 0, "%s", err);
    cfg->model.layers[4].format = PJ_FPREF_BF16;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "format bf16 would round the F32 weights") != NULL, "%s", err);

    /* max_n past N */
    pj_fixture_small_config(cfg, small_path);
    cfg->model.layers[3].max_n = 513;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "layer 'unpooler' (tensor 'unpooler.weight'): max_n 513 exceeds "
                              "N = 512") != NULL,
                  "%s", err);

    /* graph_rows past max_n (or past N when max_n is not given); one equal
     * to max_n is max_n's own graphs, dropped from the model's list */
    pj_fixture_small_config(cfg, small_path);
    cfg->model.layers[3].max_n = 256;
    cfg->model.layers[3].n_graph_rows = 2;
    cfg->model.layers[3].graph_rows[0] = 64;
    cfg->model.layers[3].graph_rows[1] = 257;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "layer 'unpooler' (tensor 'unpooler.weight'): graph_rows value 257 "
                              "exceeds the rows a request may use (max_n 256)") != NULL,
                  "%s", err);
    ck_assert_int_eq(pj_model_check(cfg, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "graph_rows value 257 exceeds") != NULL, "%s", err);
    cfg->model.layers[3].max_n = 0;
    cfg->model.layers[3].graph_rows[1] = 513;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "graph_rows value 513 exceeds the rows a request may use (max_n "
                              "512, all N)") != NULL,
                  "%s", err);
    cfg->model.layers[3].graph_rows[1] = 512;
    ck_assert_msg(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(m->layers[3].max_n, 512);
    ck_assert_uint_eq(m->layers[3].n_graph_rows, 1);
    ck_assert_uint_eq(m->layers[3].graph_rows[0], 64);
    ck_assert_uint_eq(m->layers[2].n_graph_rows, 0);
    pj_model_free(m);

    /* a tensor the file lacks */
    pj_fixture_small_config(cfg, small_path);
    snprintf(cfg->model.layers[2].tensor, PJ_CFG_PATH, "pooler.bias");
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "layer 'pooler' (tensor 'pooler.bias'): no such tensor in the file "
                              "(5 tensors)") != NULL,
                  "%s", err);

    /* the same layer name twice */
    pj_fixture_small_config(cfg, small_path);
    snprintf(cfg->model.layers[1].name, PJ_CFG_NAME, "qkv_gate");
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "layer name used twice") != NULL, "%s", err);
    free(cfg);
}
END_TEST

/* pj_model_check (--check-config) refuses what the load refuses from the
 * header, with the same message, and passes what it loads. */
/* A progress callback that counts the layers whose load began. */
static int count_progress(void *ctx, uint32_t index, uint32_t count, const char *layer)
{
    (void)index;
    (void)count;
    (void)layer;
    ++*(int *)ctx;
    return 0;
}

START_TEST(check_agrees_with_load)
{
    pj_config *cfg = malloc(sizeof *cfg);
    pj_model *m;
    char err[1024], cerr[1024];
    pj_fixture_small_config(cfg, small_path);
    cfg->model.layers[1].format = PJ_FPREF_Z12;
    cfg->model.layers[3].max_n = 512;
    ck_assert_msg(pj_model_check(cfg, cerr, sizeof cerr) == 0, "%s", cerr);
    ck_assert_msg(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    pj_model_free(m);

    for (int c = 0; c < 6; c++) {
        pj_fixture_small_config(cfg, small_path);
        switch (c) {
        case 0:
            cfg->model.layers[4].format = PJ_FPREF_Z12;
            break;
        case 1:
            cfg->model.layers[4].format = PJ_FPREF_BF16;
            break;
        case 2:
            cfg->model.layers[3].max_n = 513;
            break;
        case 3:
            snprintf(cfg->model.layers[2].tensor, PJ_CFG_PATH, "pooler.bias");
            break;
        case 4:
            snprintf(cfg->model.layers[1].name, PJ_CFG_NAME, "qkv_gate");
            break;
        case 5:
            snprintf(cfg->model.path, PJ_CFG_PATH, "/nonexistent/pj-model.safetensors");
            break;
        }
        /* and before any layer's load began: a mismatch in the last layer
         * used to cost the load of all the layers before it */
        int layers_begun = 0;
        int lrc = pj_model_load_progress(cfg, &m, NULL, NULL, count_progress, &layers_begun, err,
                                         sizeof err);
        int crc = pj_model_check(cfg, cerr, sizeof cerr);
        ck_assert_msg(lrc != 0 && crc == lrc, "case %d: load %d, check %d (%s)", c, lrc, crc, cerr);
        ck_assert_str_eq(cerr, err);
        ck_assert_msg(layers_begun == 0, "case %d: %d layers begun", c, layers_begun);
    }
    free(cfg);
}
END_TEST

/* A tensor name that differs from the file's by an invisible byte (a
 * template's trailing newline) was printed raw: the message broke in two
 * (--check-config prints it as it is) and did not show the byte. */
START_TEST(tensor_name_shown_escaped)
{
    pj_config *cfg = malloc(sizeof *cfg);
    pj_model *m;
    char err[1024], cerr[1024];
    pj_fixture_small_config(cfg, small_path);
    snprintf(cfg->model.layers[1].tensor, PJ_CFG_PATH, "o.weight\n");
    ck_assert_int_eq(pj_model_check(cfg, cerr, sizeof cerr), -EINVAL);
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_str_eq(cerr, err);
    ck_assert_msg(strstr(err, "layer 'o' (tensor 'o.weight\\x0a'): no such tensor") != NULL, "%s",
                  err);
    ck_assert_msg(strchr(err, '\n') == NULL, "error not one line: '%s'", err);
    free(cfg);
}
END_TEST

/* ---- synthetic files ---------------------------------------------------------- */

START_TEST(bad_tensors)
{
    static uint8_t zeros[3 * 65600 * 2];
    uint64_t s3[3] = {2, 2, 64}, s1[1] = {64}, big_k[2] = {1, 65600}, big_n[2] = {65537, 1};
    uint64_t s2[2] = {2, 64}, odd[2] = {4, 96}, empty[2] = {0, 64};
    expect_load_error("i64.safetensors", PJ_ST_I64, 2, s2, zeros, PJ_FPREF_AUTO,
                      "dtype I64; projd serves BF16, F16 or F32");
    expect_load_error("u8.safetensors", PJ_ST_U8, 2, s2, zeros, PJ_FPREF_SPLIT, "dtype U8");
    expect_load_error("rank3.safetensors", PJ_ST_BF16, 3, s3, zeros, PJ_FPREF_AUTO,
                      "shape [2, 2, 64] has rank 3; a layer is a 2-D [N, K]");
    expect_load_error("rank1.safetensors", PJ_ST_F32, 1, s1, zeros, PJ_FPREF_AUTO, "has rank 1");
    expect_load_error("bigk.safetensors", PJ_ST_BF16, 2, big_k, zeros, PJ_FPREF_AUTO,
                      "shape [1, 65600]: N and K must be in 1..65536");
    expect_load_error("bign.safetensors", PJ_ST_BF16, 2, big_n, zeros, PJ_FPREF_AUTO,
                      "shape [65537, 1]: N and K must be in 1..65536");
    expect_load_error("empty.safetensors", PJ_ST_BF16, 2, empty, zeros, PJ_FPREF_AUTO,
                      "N and K must be in 1..65536");
    expect_load_error("oddk.safetensors", PJ_ST_BF16, 2, odd, zeros, PJ_FPREF_Z12,
                      "format z12 needs K % 64 == 0, K is 96");
}
END_TEST

START_TEST(odd_k_stays_bf16)
{
    uint64_t shape[2] = {5, 96};
    uint16_t *w = rand_bf16(5 * 96, 3, 0.1f);
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_int_eq(load_one("odd.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m, &wr,
                              err, sizeof err),
                     0);
    ck_assert_int_eq(wr.n, 0); /* a format choice, not a problem */
    ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_BF16);
    ck_assert_int_eq(memcmp(m->layers[0].w.bf16, w, 5 * 96 * 2), 0);
    ck_assert_uint_eq(m->layers[0].stored_bytes, 5 * 96 * 2);
    pj_model_free(m);
    free(w);
}
END_TEST

/* auto stores a BF16 tensor as z12 to save memory; weights spread over
 * more exponents than its window hold cost an exception entry each (12
 * bytes), and past about 4 % of them z12 is larger than bf16. auto chose
 * z12 anyway (over six times bf16's bytes here); now the layer stays bf16 with a
 * warning, and z12 asked for by name is still z12. */
START_TEST(auto_keeps_bf16_when_z12_is_larger)
{
    g_load_threads = (uint32_t)_i; /* any thread count: the same decision and warning */
    enum { N = 32, K = 128 };
    uint16_t *w = malloc(N * K * 2);
    uint32_t seed = 11;
    for (size_t i = 0; i < N * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        /* any finite bf16: exponents all over the range */
        uint16_t b = (uint16_t)(seed >> 16);
        w[i] = (b & 0x7f80u) == 0x7f80u ? (uint16_t)(b ^ 0x4000u) : b;
    }
    uint64_t shape[2] = {N, K};
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_msg(load_one("spread.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m, &wr,
                           err, sizeof err) == 0,
                  "%s", err);
    const pj_model_layer *L = &m->layers[0];
    ck_assert_int_eq(L->w.fmt, PJ_FMT_BF16);
    ck_assert_uint_eq(L->stored_bytes, N * K * 2);
    ck_assert_uint_eq(L->n_exc, 0);
    /* The exception count showed z12 would be larger: it was never packed. */
    ck_assert_uint_eq(m->z12_packs, 0);
    ck_assert_int_eq(memcmp(L->w.bf16, w, N * K * 2), 0);
    ck_assert_int_eq(wr.n, 1);
    ck_assert_msg(strstr(wr.msg[0], "layer 'lay': stored as bf16, not z12: z12 would take ") &&
                      strstr(wr.msg[0], "for bf16's 8192 ("),
                  "%s", wr.msg[0]);
    pj_model_free(m);

    memset(&wr, 0, sizeof wr);
    ck_assert_msg(load_one("spread.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_Z12, &m, &wr,
                           err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_Z12);
    ck_assert_uint_gt(m->layers[0].stored_bytes, N * K * 2);
    ck_assert_uint_eq(m->z12_packs, 1);
    ck_assert_int_eq(wr.n, 0);
    pj_model_free(m);
    free(w);
}
END_TEST

START_TEST(nonfinite_bf16)
{
    g_load_threads = (uint32_t)_i; /* any thread count: the same first weight named */
    uint64_t shape[2] = {20, 128};
    uint16_t *w = rand_bf16(20 * 128, 5, 0.1f);
    w[7 * 128 + 33] = 0x7fc0;   /* NaN at (7, 33) */
    w[9 * 128 + 1] = 0xff80;    /* -inf later on */
    w[19 * 128 + 100] = 0x7f81; /* and in the last thread's part */
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_int_eq(load_one("nan.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m, &wr,
                              err, sizeof err),
                     0);
    ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_BF16);
    ck_assert_int_eq(memcmp(m->layers[0].w.bf16, w, 20 * 128 * 2), 0);
    ck_assert_int_eq(wr.n, 1);
    ck_assert_msg(strstr(wr.msg[0], "layer 'lay': tensor 'w' has a non-finite weight at (7, 33)") !=
                      NULL,
                  "%s", wr.msg[0]);
    ck_assert_msg(strstr(wr.msg[0], "stored as bf16, not z12") != NULL, "%s", wr.msg[0]);
    pj_model_free(m);

    expect_load_error("nanz.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_Z12,
                      "format z12 cannot hold the non-finite weight at (7, 33)");
    free(w);
}
END_TEST

/* The scan runs in chunks of 64 and walks the tail one by one: a single
 * non-finite weight is named wherever it sits, chunk edges and the tail
 * (185 elements: two whole chunks and 57 more) included. */
START_TEST(nonfinite_bf16_anywhere)
{
    g_load_threads = (uint32_t)_i;
    const uint64_t shape[2] = {5, 37};
    const size_t places[] = {0, 1, 63, 64, 127, 128, 150, 184};
    for (size_t p = 0; p < sizeof places / sizeof places[0]; p++) {
        uint16_t *w = rand_bf16(5 * 37, 11, 0.1f);
        w[places[p]] = 0xff80; /* -inf */
        pj_model *m;
        warns wr = {0};
        char err[1024], want[64];
        ck_assert_int_eq(load_one("nan1.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m,
                                  &wr, err, sizeof err),
                         0);
        snprintf(want, sizeof want, "non-finite weight at (%zu, %zu)", places[p] / 37,
                 places[p] % 37);
        ck_assert_int_eq(wr.n, 1);
        ck_assert_msg(strstr(wr.msg[0], want) != NULL, "want '%s': %s", want, wr.msg[0]);
        pj_model_free(m);
        free(w);
    }
}
END_TEST

/* A non-finite weight in a layer z12 would take, at tile and block edges
 * (64 columns, 16 rows): named under auto (stored bf16, warned) and under
 * format z12 (refused), on any number of threads. */
START_TEST(nonfinite_z12_anywhere)
{
    g_load_threads = (uint32_t)_i;
    const uint64_t shape[2] = {20, 128};
    const size_t places[] = {0, 63, 64, 127, 15 * 128 + 127, 16 * 128, 19 * 128 + 127};
    for (size_t p = 0; p < sizeof places / sizeof places[0]; p++) {
        uint16_t *w = rand_bf16(20 * 128, 13, 0.1f);
        w[places[p]] = p % 2 ? 0x7fc1 : 0xff80; /* a NaN, -inf */
        pj_model *m;
        warns wr = {0};
        char err[1024], want[64];
        ck_assert_int_eq(load_one("nanz1.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m,
                                  &wr, err, sizeof err),
                         0);
        snprintf(want, sizeof want, "non-finite weight at (%zu, %zu)", places[p] / 128,
                 places[p] % 128);
        ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_BF16);
        ck_assert_int_eq(memcmp(m->layers[0].w.bf16, w, 20 * 128 * 2), 0);
        ck_assert_int_eq(wr.n, 1);
        ck_assert_msg(strstr(wr.msg[0], want) && strstr(wr.msg[0], "stored as bf16, not z12"),
                      "want '%s': %s", want, wr.msg[0]);
        pj_model_free(m);
        char zwant[96];
        snprintf(zwant, sizeof zwant, "format z12 cannot hold the %s", want);
        expect_load_error("nanz2.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_Z12, zwant);
        free(w);
    }
}
END_TEST

START_TEST(f16_split_exact)
{
    /* every f16 bit pattern that is finite: normals, subnormals, +-0, max */
    enum { N = 512, K = 128 };
    uint16_t *h = malloc(N * K * 2);
    size_t c = 0;
    for (uint32_t b = 0; b < 65536 && c < (size_t)N * K; b++)
        if (((b >> 10) & 0x1f) != 0x1f)
            h[c++] = (uint16_t)b;
    ck_assert_uint_eq(c, 63488 < N * K ? 63488 : N * K);
    for (; c < (size_t)N * K; c++)
        h[c] = (uint16_t)c;
    uint64_t shape[2] = {N, K};
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_msg(load_one("f16.safetensors", PJ_ST_F16, 2, shape, h, PJ_FPREF_AUTO, &m, &wr, err,
                           sizeof err) == 0,
                  "%s", err);
    const pj_model_layer *L = &m->layers[0];
    ck_assert_int_eq(L->w.fmt, PJ_FMT_SPLIT);
    ck_assert_int_eq(L->src_dtype, PJ_ST_F16);
    size_t nonzero_lo = 0;
    for (size_t i = 0; i < (size_t)N * K; i++) {
        float want = pj_f16_to_f32(h[i]);
        if (!isfinite(want))
            continue;
        float got = pj_bf16_to_f32(L->w.hi[i]) + pj_bf16_to_f32(L->w.lo[i]);
        ck_assert_msg(got == want, "f16 %#06x: %g != %g", h[i], (double)got, (double)want);
        nonzero_lo += L->w.lo[i] != 0;
    }
    ck_assert_uint_gt(nonzero_lo, 1000);
    pj_model_free(m);
    free(h);
}
END_TEST

START_TEST(f32_nonfinite_warns)
{
    enum { N = 3, K = 64 };
    float f[N * K];
    for (int i = 0; i < N * K; i++)
        f[i] = 0.01f * (float)(i - 90);
    f[2 * K + 5] = INFINITY;
    uint64_t shape[2] = {N, K};
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_int_eq(load_one("f32inf.safetensors", PJ_ST_F32, 2, shape, f, PJ_FPREF_AUTO, &m, &wr,
                              err, sizeof err),
                     0);
    ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_SPLIT);
    ck_assert_int_eq(wr.n, 1);
    ck_assert_msg(strstr(wr.msg[0], "tensor 'w' has a non-finite weight at (2, 5)") != NULL, "%s",
                  wr.msg[0]);
    ck_assert_uint_eq(m->layers[0].w.hi[2 * K + 5], 0x7f80);
    ck_assert_uint_eq(m->layers[0].w.lo[2 * K + 5], 0);
    pj_model_free(m);

    /* An F16 file: the warning gives the file's 16 bits, not the f32 ones
     * they became. */
    uint16_t h[N * K];
    for (int i = 0; i < N * K; i++)
        h[i] = 0x3c00;     /* 1.0 */
    h[1 * K + 3] = 0xfc00; /* -inf */
    warns wr16 = {0};
    ck_assert_int_eq(load_one("f16inf.safetensors", PJ_ST_F16, 2, shape, h, PJ_FPREF_AUTO, &m,
                              &wr16, err, sizeof err),
                     0);
    ck_assert_int_eq(wr16.n, 1);
    ck_assert_msg(strstr(wr16.msg[0], "non-finite weight at (1, 3) (bits 0xfc00)") != NULL, "%s",
                  wr16.msg[0]);
    pj_model_free(m);
}
END_TEST

/* Nothing a loaded model points at lives in the file's mapping: after the
 * file is cut to nothing, every weight is still readable (a kept mapping
 * would fault here). */
START_TEST(file_not_kept)
{
    char path[1024], err[1024];
    pj_fixture_path(path, sizeof path, "copy.safetensors");
    pj_modelgen_opts o = {.seed = 5, .preset = PJ_MODELGEN_SMALL};
    ck_assert_int_eq(pj_modelgen_write(path, &o, err, sizeof err), 0);
    pj_config *cfg = malloc(sizeof *cfg);
    pj_fixture_small_config(cfg, path);
    cfg->model.layers[1].format = PJ_FPREF_BF16;
    pj_model *m;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(truncate(path, 0), 0);
    uint64_t sum = 0;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_weights *w = &m->layers[i].w;
        size_t count = (size_t)w->n * w->k;
        if (w->fmt == PJ_FMT_BF16)
            for (size_t j = 0; j < count; j++)
                sum += w->bf16[j];
        else if (w->fmt == PJ_FMT_SPLIT)
            for (size_t j = 0; j < count; j++)
                sum += w->hi[j] + w->lo[j];
        else
            for (size_t j = 0; j < w->z->tiles_bytes; j++)
                sum += w->z->tiles[j];
    }
    ck_assert_uint_gt(sum, 0);
    pj_model_free(m);
    free(cfg);
}
END_TEST

START_TEST(bad_files)
{
    pj_config *cfg = malloc(sizeof *cfg);
    char path[1024], err[1024];
    pj_model *m = (pj_model *)0x1;
    pj_fixture_path(path, sizeof path, "absent.safetensors");
    pj_fixture_small_config(cfg, path);
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -ENOENT);
    ck_assert_ptr_null(m);
    ck_assert_msg(strstr(err, "absent.safetensors: cannot open") != NULL, "%s", err);

    pj_fixture_path(path, sizeof path, "junk.safetensors");
    FILE *f = fopen(path, "wb");
    static const char junk[] = "\x10\0\0\0\0\0\0\0{\"a\":[1,2,3]}   ";
    ck_assert_uint_eq(sizeof junk - 1, 24);
    fwrite(junk, 1, sizeof junk - 1, f);
    fclose(f);
    pj_fixture_small_config(cfg, path);
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "junk.safetensors: tensor 'a': entry is an array") != NULL, "%s",
                  err);

    cfg->model.n_layers = 0;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "lists 0 layers") != NULL, "%s", err);
    pj_model_free(NULL);
    free(cfg);
}
END_TEST

/* ---- inspect ------------------------------------------------------------------ */

static char *inspect_to_string(const pj_config *cfg, const char *path, int json, int *rc, char *err,
                               size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_ptr_nonnull(f);
    *rc = pj_inspect_print(f, cfg, path, json, err, errlen);
    fclose(f);
    return buf;
}

START_TEST(inspect_small_text)
{
    char err[1024];
    int rc;
    char *s = inspect_to_string(NULL, small_path, 0, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    const char *want[] = {"qkv_gate.weight",
                          "320 x 256",
                          "o.weight",
                          "256 x 192",
                          "pooler.weight",
                          "unpooler.weight",
                          "router.weight",
                          "split",
                          "z12",
                          "F32",
                          "BF16",
                          "total",
                          "e7 [",
                          "seed = 1",
                          "preset = small",
                          "on the cuda backend (shapes.max_m 256): weights take at least",
                          "with shapes.max_m <= 32 at least"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(strstr(s, want[i]) != NULL, "no '%s' in:\n%s", want[i], s);
    ck_assert_ptr_null(strstr(s, "warning"));
    free(s);

    /* errors come back, nothing printed */
    s = inspect_to_string(NULL, "/nonexistent/m.safetensors", 0, &rc, err, sizeof err);
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

/* Parse inspect's JSON and check it against a direct load. */
static void check_inspect_json(const char *json, const pj_model *m, double max_z12_ratio)
{
    cJSON *root = cJSON_Parse(json);
    ck_assert_msg(root != NULL, "inspect JSON does not parse:\n%s", json);
    const cJSON *layers = cJSON_GetObjectItem(root, "layers");
    ck_assert_int_eq(cJSON_GetArraySize(layers), (int)m->n_layers);
    double sum_s = 0, sum_b = 0;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        const cJSON *l = cJSON_GetArrayItem(layers, (int)i);
        ck_assert_str_eq(cJSON_GetObjectItem(l, "name")->valuestring, L->name);
        ck_assert_str_eq(cJSON_GetObjectItem(l, "tensor")->valuestring, L->tensor);
        ck_assert_int_eq(cJSON_GetObjectItem(l, "n")->valueint, (int)L->w.n);
        ck_assert_int_eq(cJSON_GetObjectItem(l, "k")->valueint, (int)L->w.k);
        const char *fmt = cJSON_GetObjectItem(l, "format")->valuestring;
        double stored = cJSON_GetObjectItem(l, "stored_bytes")->valuedouble;
        double bf16 = cJSON_GetObjectItem(l, "bf16_bytes")->valuedouble;
        double ratio = cJSON_GetObjectItem(l, "ratio")->valuedouble;
        ck_assert_double_eq(stored, (double)L->stored_bytes);
        ck_assert_double_eq(bf16, (double)L->bf16_bytes);
        ck_assert_double_eq_tol(ratio, stored / bf16, 1e-12);
        sum_s += stored;
        sum_b += bf16;
        if (strcmp(fmt, "z12") == 0) {
            ck_assert_msg(ratio <= max_z12_ratio, "%s: z12 ratio %.5f > %.4f", L->name, ratio,
                          max_z12_ratio);
            ck_assert_double_ge(ratio, 0.75);
            ck_assert_int_eq(cJSON_GetObjectItem(l, "exceptions")->valueint, (int)L->n_exc);
            const cJSON *w = cJSON_GetObjectItem(l, "window");
            ck_assert_int_eq(cJSON_GetObjectItem(w, "base")->valueint, (int)L->z_base);
            ck_assert_int_eq(cJSON_GetObjectItem(w, "exp2_max")->valueint -
                                 cJSON_GetObjectItem(w, "exp2_min")->valueint,
                             16);
            ck_assert(cJSON_IsTrue(cJSON_GetObjectItem(w, "covers_zero")) == (L->z_base == 0));
        } else {
            ck_assert(cJSON_IsNull(cJSON_GetObjectItem(l, "window")));
        }
    }
    const cJSON *total = cJSON_GetObjectItem(root, "total");
    ck_assert_double_eq(cJSON_GetObjectItem(total, "stored_bytes")->valuedouble, sum_s);
    ck_assert_double_eq(cJSON_GetObjectItem(total, "bf16_bytes")->valuedouble, sum_b);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "warnings")), 0);
    /* The cuda backend's plan under the defaults (shapes.max_m 256): what
     * daemon/memplan.c computes, and every z12 layer keeps a bf16 copy. */
    pj_memplan plan;
    pj_memplan_weights(m, 256, NULL, &plan);
    const cJSON *cw = cJSON_GetObjectItem(root, "cuda_weights");
    ck_assert_ptr_nonnull(cw);
    ck_assert_double_eq(cJSON_GetObjectItem(cw, "max_m")->valuedouble, 256);
    ck_assert_double_eq(cJSON_GetObjectItem(cw, "stored_bytes")->valuedouble, (double)plan.stored);
    ck_assert_double_eq(cJSON_GetObjectItem(cw, "bf16_copy_bytes")->valuedouble,
                        (double)plan.bf16_copies);
    ck_assert_double_eq(cJSON_GetObjectItem(cw, "bytes")->valuedouble,
                        (double)(plan.stored + plan.bf16_copies));
    double z12_bf16 = 0;
    int z12_n = 0;
    for (uint32_t i = 0; i < m->n_layers; i++)
        if (m->layers[i].w.fmt == PJ_FMT_Z12) {
            z12_bf16 += (double)m->layers[i].bf16_bytes;
            z12_n++;
        }
    ck_assert_double_eq((double)plan.bf16_copies, z12_bf16);
    ck_assert_int_eq(cJSON_GetObjectItem(cw, "z12_layers_copied")->valueint, z12_n);
    cJSON_Delete(root);
}

/* The small layers carry fixed costs the reference ones amortise (block
 * offsets: 4 bytes per 16 rows, about 1/(8K) of bf16; the forced
 * exceptions), so their bound is looser than 0.752; the
 * reference bound is checked on a reference-sized layer below. */
START_TEST(inspect_small_json)
{
    char err[1024];
    int rc;
    char *s = inspect_to_string(NULL, small_path, 1, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    pj_model *m;
    ck_assert_int_eq(pj_model_load(&cfg, &m, NULL, NULL, err, sizeof err), 0);
    check_inspect_json(s, m, 0.7545);
    pj_model_free(m);
    free(s);
}
END_TEST

/* The busiest 16-row block of a z12 layer, as the loader reports it and
 * inspect prints it: weights all of one exponent (inside any window) but
 * for planted exact zeros (each an exception): 3 in block 0, 30 in block 1
 * (row 20), 5 in block 2, whose last row is 40 of 41. */
START_TEST(busiest_exception_block)
{
    enum { N = 41, K = 128 };
    uint16_t *w = malloc(N * K * 2);
    uint32_t seed = 5;
    for (size_t i = 0; i < N * K; i++) {
        seed = seed * 1664525u + 1013904223u;
        w[i] = (uint16_t)(0x3e80u | ((seed >> 16) & 0x7fu)); /* 0.25 .. 0.5, either sign below */
        if (seed & 0x80000000u)
            w[i] |= 0x8000u;
    }
    for (int j = 0; j < 3; j++)
        w[(size_t)(2 + j) * K + 7] = 0;
    for (int j = 0; j < 30; j++)
        w[(size_t)20 * K + 4 * j] = 0;
    for (int j = 0; j < 5; j++)
        w[(size_t)40 * K + 9 + j] = 0;
    uint64_t shape[2] = {N, K};
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_msg(load_one("busy.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_Z12, &m, &wr, err,
                           sizeof err) == 0,
                  "%s", err);
    const pj_model_layer *L = &m->layers[0];
    ck_assert_int_eq(L->w.fmt, PJ_FMT_Z12);
    ck_assert_uint_eq(L->n_exc, 38);
    ck_assert_uint_eq(L->blk_exc_max, 30);
    ck_assert_uint_eq(L->blk_exc_max_row, 16);
    pj_model_free(m);

    char path[1024];
    pj_fixture_path(path, sizeof path, "busy.safetensors");
    pj_config *cfg = malloc(sizeof *cfg);
    one_layer_config(cfg, path, PJ_FPREF_Z12);
    int rc;
    char *t = inspect_to_string(cfg, path, 0, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(t, "lay: at most 30 exceptions in one 16-row block (rows 16-31), 12.7 on "
                            "average\n"),
                  "%s", t);
    free(t);
    char *j = inspect_to_string(cfg, path, 1, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    cJSON *root = cJSON_Parse(j);
    cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"), 0);
    ck_assert_int_eq(cJSON_GetObjectItem(l0, "block_exceptions_max")->valueint, 30);
    ck_assert_int_eq(cJSON_GetObjectItem(l0, "block_exceptions_max_row")->valueint, 16);
    ck_assert(cJSON_IsFalse(cJSON_GetObjectItem(l0, "block_exceptions_heavy"))); /* 30 <= 64 */
    cJSON_Delete(root);
    free(j);
    free(cfg);
    free(w);
}
END_TEST

/* A heavy block (more than the z12 GEMV's 64 slots and three times the
 * others' mean): 100 zeros planted in row 20 of six blocks that hold 3
 * each otherwise (103 against 3). Inspect says what it costs and where to look;
 * 61 in that row (64 in its block) is not heavy, nor is 103 when every
 * other block holds 40 (103 < 120). */
START_TEST(heavy_exception_block)
{
    enum { N = 96, K = 128 };
    uint16_t *w = malloc(N * K * 2);
    char err[1024], path[1024];
    pj_config *cfg = malloc(sizeof *cfg);
    static const struct {
        uint32_t row20, others;
        int heavy;
    } v[] = {{100, 3, 1}, {61, 3, 0}, {100, 40, 0}};
    for (size_t vi = 0; vi < sizeof v / sizeof v[0]; vi++) {
        uint32_t seed = 9;
        for (size_t i = 0; i < N * K; i++) {
            seed = seed * 1664525u + 1013904223u;
            w[i] = (uint16_t)(0x3e80u | ((seed >> 16) & 0x7fu));
        }
        for (uint32_t j = 0; j < v[vi].row20; j++)
            w[(size_t)20 * K + j] = 0;
        for (uint32_t b = 0; b < N / 16; b++)
            for (uint32_t j = 0; j < (b == 1 ? 3 : v[vi].others); j++)
                w[(size_t)(16 * b + 1 + j % 15) * K + 100 + j / 15] = 0;
        uint64_t shape[2] = {N, K};
        pj_model *m;
        warns wr = {0};
        ck_assert_msg(load_one("heavy.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_Z12, &m, &wr,
                               err, sizeof err) == 0,
                      "%s", err);
        const pj_model_layer *L = &m->layers[0];
        ck_assert_uint_eq(L->blk_exc_max, v[vi].row20 + 3);
        ck_assert_int_eq(pj_model_layer_heavy_block(L), v[vi].heavy);
        pj_model_free(m);
        pj_fixture_path(path, sizeof path, "heavy.safetensors");
        one_layer_config(cfg, path, PJ_FPREF_Z12);
        int rc;
        char *t = inspect_to_string(cfg, path, 0, &rc, err, sizeof err);
        ck_assert_msg(rc == 0, "%s", err);
        const char *far = strstr(t, "average: far above the rest, that block's CTA of the z12 GEMV "
                                    "finishes last; ");
        ck_assert_msg(v[vi].heavy ? far != NULL : far == NULL, "case %zu: %s", vi, t);
        char line[160]; /* block 1 is rows 16-31; six blocks, five of them `others` */
        snprintf(line, sizeof line,
                 "at most %u exceptions in one 16-row block (rows 16-31), %.1f on average",
                 v[vi].row20 + 3, (double)(v[vi].row20 + 3 + 5 * v[vi].others) / 6.0);
        ck_assert_msg(strstr(t, line), "case %zu: no '%s' in %s", vi, line, t);
        if (v[vi].heavy)
            ck_assert_msg(strstr(t, "(tune on this model: deploy/README.md)\n"), "%s", t);
        free(t);
        char *j = inspect_to_string(cfg, path, 1, &rc, err, sizeof err);
        ck_assert_msg(rc == 0, "%s", err);
        cJSON *root = cJSON_Parse(j);
        cJSON *l0 = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"), 0);
        ck_assert_int_eq(cJSON_IsTrue(cJSON_GetObjectItem(l0, "block_exceptions_heavy")),
                         v[vi].heavy);
        cJSON_Delete(root);
        free(j);
    }
    free(cfg);
    free(w);
}
END_TEST

/* The reference o layer (4096 x 2048, seed 1) alone in a file, through
 * inspect's JSON: the bound, <= 0.752 of bf16. */
START_TEST(inspect_reference_o)
{
    size_t nl;
    const pj_modelgen_layer *L = pj_modelgen_layers(PJ_MODELGEN_REFERENCE, &nl);
    ck_assert_str_eq(L[1].name, "o");
    pj_modelgen_opts o = {.seed = 1, .preset = PJ_MODELGEN_REFERENCE};
    size_t count = (size_t)L[1].n * L[1].k;
    uint16_t *w = malloc(count * 2);
    ck_assert_int_eq(pj_modelgen_rows(&o, 1, 0, L[1].n, w), 0);
    char path[1024], err[1024];
    pj_fixture_path(path, sizeof path, "ref_o.safetensors");
    pj_st_wtensor t = {
        .name = L[1].tensor, .dtype = PJ_ST_BF16, .ndim = 2, .shape = {L[1].n, L[1].k}, .data = w};
    ck_assert_int_eq(pj_st_write(path, &t, 1, NULL, 0, err, sizeof err), 0);
    free(w);

    pj_config *cfg = malloc(sizeof *cfg);
    pj_fixture_small_config(cfg, path);
    cfg->model.n_layers = 1;
    cfg->model.layers[0] = cfg->model.layers[1]; /* o */
    int rc;
    char *s = inspect_to_string(cfg, NULL, 1, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    pj_model *m;
    ck_assert_int_eq(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err), 0);
    ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_Z12);
    check_inspect_json(s, m, 0.752);
    pj_model_free(m);
    free(s);
    free(cfg);
}
END_TEST

START_TEST(inspect_warnings_in_report)
{
    uint64_t shape[2] = {16, 64};
    uint16_t *w = rand_bf16(16 * 64, 9, 0.1f);
    w[3 * 64 + 2] = 0x7f80;
    pj_model *m;
    warns wr = {0};
    char err[1024];
    ck_assert_int_eq(load_one("warn.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m, &wr,
                              err, sizeof err),
                     0);
    pj_model_free(m);
    free(w);
    char path[1024];
    pj_fixture_path(path, sizeof path, "warn.safetensors");
    pj_config *cfg = malloc(sizeof *cfg);
    one_layer_config(cfg, path, PJ_FPREF_AUTO);
    int rc;
    char *s = inspect_to_string(cfg, NULL, 0, &rc, err, sizeof err);
    ck_assert_int_eq(rc, 0);
    ck_assert_msg(strstr(s, "warning: ") && strstr(s, "non-finite weight at (3, 2)"), "%s", s);
    free(s);
    s = inspect_to_string(cfg, NULL, 1, &rc, err, sizeof err);
    ck_assert_int_eq(rc, 0);
    cJSON *root = cJSON_Parse(s);
    ck_assert_ptr_nonnull(root);
    ck_assert_int_eq(cJSON_GetArraySize(cJSON_GetObjectItem(root, "warnings")), 1);
    ck_assert_str_eq(
        cJSON_GetObjectItem(cJSON_GetArrayItem(cJSON_GetObjectItem(root, "layers"), 0), "format")
            ->valuestring,
        "bf16");
    cJSON_Delete(root);
    free(s);
    free(cfg);
}
END_TEST

/* model.load_threads changes the time, nothing else: with 1 and 4 threads
 * every layer stores the same bytes and inspect reports the same (but for
 * the times, the thread count, and the host's free memory, read anew by
 * each report). */
static void strip_times(cJSON *root)
{
    cJSON_DeleteItemFromObject(root, "load_ms");
    cJSON_DeleteItemFromObject(root, "convert_ms");
    cJSON_DeleteItemFromObject(root, "load_threads");
    cJSON *hm = cJSON_GetObjectItem(root, "host_memory");
    ck_assert_ptr_nonnull(hm);
    cJSON_DeleteItemFromObject(hm, "available_bytes");
    cJSON_DeleteItemFromObject(hm, "swap_bytes");
    cJSON_DeleteItemFromObject(hm, "instances");
    cJSON_DeleteItemFromObject(hm, "cgroup");
    cJSON_DeleteItemFromObject(hm, "cgroup_limit_bytes");
    cJSON_DeleteItemFromObject(hm, "memory_high_cgroup");
    cJSON_DeleteItemFromObject(hm, "memory_high_room_bytes");
}

START_TEST(load_threads_same_result)
{
    pj_config *cfg = malloc(sizeof *cfg);
    pj_fixture_small_config(cfg, small_path);
    pj_model *m[2];
    char *rep[2];
    char err[1024];
    static const uint32_t th[2] = {1, 4};
    for (int i = 0; i < 2; i++) {
        cfg->model.load_threads = th[i];
        ck_assert_msg(pj_model_load(cfg, &m[i], NULL, NULL, err, sizeof err) == 0, "%s", err);
        ck_assert_uint_eq(m[i]->load_threads, th[i]);
        ck_assert_uint_eq(m[i]->z12_packs, 4);
        int rc;
        char *s = inspect_to_string(cfg, NULL, 1, &rc, err, sizeof err);
        ck_assert_msg(rc == 0, "%s", err);
        cJSON *root = cJSON_Parse(s);
        ck_assert_ptr_nonnull(root);
        ck_assert_double_eq(cJSON_GetObjectItem(root, "load_threads")->valuedouble, th[i]);
        strip_times(root);
        rep[i] = cJSON_PrintUnformatted(root);
        cJSON_Delete(root);
        free(s);
    }
    ck_assert_str_eq(rep[0], rep[1]);
    ck_assert_uint_eq(m[0]->n_layers, m[1]->n_layers);
    for (uint32_t l = 0; l < m[0]->n_layers; l++) {
        const pj_model_layer *a = &m[0]->layers[l], *b = &m[1]->layers[l];
        size_t count = (size_t)a->w.n * a->w.k;
        ck_assert_int_eq(a->w.fmt, b->w.fmt);
        ck_assert_uint_eq(a->stored_bytes, b->stored_bytes);
        ck_assert_uint_eq(a->z_base, b->z_base);
        ck_assert_uint_eq(a->n_exc, b->n_exc);
        ck_assert_uint_eq(a->digest, b->digest);
        if (a->w.fmt == PJ_FMT_Z12) {
            const pj_z12 *x = a->w.z, *y = b->w.z;
            ck_assert_uint_eq(x->tiles_bytes, y->tiles_bytes);
            ck_assert_int_eq(memcmp(x->tiles, y->tiles, x->tiles_bytes), 0);
            ck_assert_int_eq(memcmp(x->blk_exc, y->blk_exc, (x->n_pad / 16 + 1) * 4), 0);
            ck_assert_int_eq(memcmp(x->exc, y->exc, x->n_exc * sizeof *x->exc), 0);
            ck_assert_int_eq(memcmp(x->exc_orig, y->exc_orig, x->n_exc * 2), 0);
        } else if (a->w.fmt == PJ_FMT_SPLIT) {
            ck_assert_int_eq(memcmp(a->w.hi, b->w.hi, count * 2), 0);
            ck_assert_int_eq(memcmp(a->w.lo, b->w.lo, count * 2), 0);
        } else {
            ck_assert_int_eq(memcmp(a->w.bf16, b->w.bf16, count * 2), 0);
        }
    }
    for (int i = 0; i < 2; i++) {
        pj_model_free(m[i]);
        cJSON_free(rep[i]);
    }
    free(cfg);
}
END_TEST

/* CRC-32 one bit at a time: the definition, independent of digest.c's tables. */
static uint32_t crc32_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    for (size_t i = 0; i < n; i++) {
        crc ^= p[i];
        for (int b = 0; b < 8; b++)
            crc = (crc & 1u) ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return ~crc;
}

/* digest.h's definition, spelled out: the CRC of the pieces' CRCs. */
static uint32_t digest_by_definition(const uint8_t *p, size_t n)
{
    uint32_t acc = 0;
    for (size_t off = 0; off < n; off += PJ_DIGEST_PIECE) {
        size_t len = n - off < PJ_DIGEST_PIECE ? n - off : PJ_DIGEST_PIECE;
        uint32_t c = crc32_bitwise(0, p + off, len);
        uint8_t le[4] = {(uint8_t)c, (uint8_t)(c >> 8), (uint8_t)(c >> 16), (uint8_t)(c >> 24)};
        acc = crc32_bitwise(acc, le, 4);
    }
    return acc;
}

START_TEST(layer_digests)
{
    /* the check value of CRC-32/ISO-HDLC (zlib's crc32) */
    ck_assert_uint_eq(pj_crc32(0, "123456789", 9), 0xcbf43926u);
    ck_assert_uint_eq(pj_crc32(pj_crc32(0, "1234", 4), "56789", 5), 0xcbf43926u);
    uint32_t d = 1;
    ck_assert_int_eq(pj_digest("", 0, 4, &d), 0);
    ck_assert_uint_eq(d, 0);

    /* 2.5 MiB of bf16: two whole pieces and a short one; F32 split too */
    const uint64_t shape[2] = {1280, 1024};
    size_t count = 1280 * 1024;
    uint16_t *w = rand_bf16(count, 99, 2.0f);
    float *f = malloc(count * sizeof *f);
    for (size_t i = 0; i < count; i++)
        f[i] = pj_bf16_to_f32(w[i]) * 1.001f;
    static const uint32_t th[2] = {1, 3};
    for (int i = 0; i < 2; i++) {
        g_load_threads = th[i];
        pj_model *m = NULL;
        warns wr = {0};
        char err[1024] = "";
        ck_assert_msg(load_one("dg.safetensors", PJ_ST_BF16, 2, shape, w, PJ_FPREF_AUTO, &m, &wr,
                               err, sizeof err) == 0,
                      "%s", err);
        ck_assert_uint_eq(m->layers[0].digest, digest_by_definition((const uint8_t *)w, count * 2));
        pj_model_free(m);
        ck_assert_msg(load_one("dg32.safetensors", PJ_ST_F32, 2, shape, f, PJ_FPREF_AUTO, &m, &wr,
                               err, sizeof err) == 0,
                      "%s", err);
        ck_assert_int_eq(m->layers[0].w.fmt, PJ_FMT_SPLIT);
        ck_assert_uint_eq(m->layers[0].digest,
                          digest_by_definition((const uint8_t *)f, count * sizeof *f));
        pj_model_free(m);
    }
    g_load_threads = 0;
    /* one weight changed: another digest */
    uint32_t before = digest_by_definition((const uint8_t *)w, count * 2);
    w[count / 2] ^= 1;
    ck_assert_int_eq(pj_digest(w, count * 2, 2, &d), 0);
    ck_assert_uint_ne(d, before);
    ck_assert_uint_eq(d, digest_by_definition((const uint8_t *)w, count * 2));
    free(w);
    free(f);
}
END_TEST

/* ---- host memory ------------------------------------------------------------ */

/* The progress callback of a load that counts the layers it begins (ctx:
 * an int; the load's warn callback gets the same ctx, so pass none). */
/* Every test of the suite reads the system's own figures again, whatever
 * the one before set (with CK_FORK=no a failed test would leave its
 * host). */
static void reset_host(void)
{
    pj_model_set_host_root(NULL);
    unsetenv("PROJD_HOST_MEM_CHECK");
}

/* A host of the test's own under the fixture's folder: /proc/meminfo with
 * avail_kb and swap_kb, nothing else (no cgroup), as root/proc/meminfo. */
static void host_meminfo(char *root, size_t cap, unsigned long long avail_kb,
                         unsigned long long swap_kb)
{
    pj_fixture_path(root, cap, "host");
    ck_assert(mkdir(root, 0755) == 0 || errno == EEXIST);
    char text[160];
    snprintf(text, sizeof text, "MemAvailable: %llu kB\nSwapFree: %llu kB\n", avail_kb, swap_kb);
    ck_assert_int_eq(pj_fixture_write_under(root, "proc/meminfo", text), 0);
}

START_TEST(host_check_decides)
{
    char err[1024];
    const uint64_t G = 1ull << 30;
    pj_model_host_need need = {.held = 100 * G, .transient = G / 2};
    pj_hostmem h = {.avail = 101 * G, .mem_avail = 101 * G};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 0);
    h = (pj_hostmem){.avail = 100 * G, .swap = 4 * G, .mem_avail = 100 * G, .swap_free = 4 * G};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 1);
    ck_assert_msg(strstr(err, "m.st: the 700 layers") && strstr(err, "will swap"), "%s", err);
    h = (pj_hostmem){.avail = 90 * G, .swap = 4 * G, .mem_avail = 90 * G, .swap_free = 4 * G};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "at least 100.5 GiB") && strstr(err, "only 94.0 GiB") &&
                      strstr(err, "MemAvailable 90.0 GiB + SwapFree 4.0 GiB") &&
                      strstr(err, "serve fewer layers or free memory"),
                  "%s", err);
    /* A cgroup's limit binds: the message names it and what to raise. */
    h = (pj_hostmem){.avail = 15 * G,
                     .mem_avail = 500 * G,
                     .cg_binds = 1,
                     .cg_limit = 16 * G,
                     .cg_used = G,
                     .cg_version = 2,
                     .cgroup = "/system.slice/projd@0.service",
                     .cg_file = "memory.max"};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "only 15.0 GiB") &&
                      strstr(err, "the cgroup /system.slice/projd@0.service allows 16.0 GiB "
                                  "(memory.max)") &&
                      strstr(err, "MemoryMax="),
                  "%s", err);
    /* It fits below memory.max but not below memory.high: a warning that
     * names the cgroup, the limit and what to raise; the load goes on. */
    h = (pj_hostmem){.avail = 200 * G,
                     .mem_avail = 500 * G,
                     .high_set = 1,
                     .high_limit = 64 * G,
                     .high_used = 4 * G,
                     .high_room = 60 * G,
                     .high_cgroup = "/system.slice/projd@0.service"};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 1);
    ck_assert_msg(strstr(err, "m.st: the 700 layers take at least 100.5 GiB") &&
                      strstr(err, "the cgroup /system.slice/projd@0.service's memory.high "
                                  "(64.0 GiB, 4.0 GiB of it in use) leaves 60.0 GiB") &&
                      strstr(err, "throttles") && strstr(err, "MemoryHigh="),
                  "%s", err);
    h.high_room = 101 * G; /* room enough below it: no word */
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 0);
    /* Short of avail too: the swap warning, the worse news, is the one. */
    h.avail = 100 * G;
    h.swap = 4 * G;
    h.high_room = 10 * G;
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 1);
    ck_assert_msg(strstr(err, "will swap"), "%s", err);
    /* A memory.high of 0 is a limit, not none: the warning. */
    h = (pj_hostmem){.avail = 200 * G,
                     .mem_avail = 500 * G,
                     .high_set = 1,
                     .high_cgroup = "/system.slice/projd@0.service"};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), 1);
    ck_assert_msg(strstr(err, "memory.high (0 MiB, 0 MiB of it in use) leaves 0 MiB"), "%s", err);
    /* A swap cap of the cgroup (MemorySwapMax=0) binds, not memory: the
     * refusal names the cap, not SwapFree as if it were free to take. */
    h = (pj_hostmem){.avail = 90 * G,
                     .mem_avail = 90 * G,
                     .swap_free = 8 * G,
                     .cg_version = 2,
                     .swap_binds = 1,
                     .swap_cgroup = "/system.slice/projd@0.service",
                     .swap_file = "memory.swap.max"};
    ck_assert_int_eq(pj_model_host_check(&need, 700, &h, "m.st", err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "only 90.0 GiB") &&
                      strstr(err, "MemAvailable 90.0 GiB + 0 MiB of swap (the cgroup "
                                  "/system.slice/projd@0.service's memory.swap.max; SwapFree "
                                  "8.0 GiB)"),
                  "%s", err);
}
END_TEST

/* The loader's figure is a lower bound of what it holds: every layer's
 * stored bytes at least, never more than they are. */
START_TEST(host_need_bounds_the_load)
{
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    pj_model *m;
    char err[1024];
    ck_assert_msg(pj_model_load(&cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    pj_st_file *st;
    ck_assert_int_eq(pj_st_open(small_path, &st, err, sizeof err), 0);
    pj_model_host_need need;
    pj_model_host_need_of(&cfg, st, &need);
    uint64_t stored = 0, floor = 0, during = 0;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        stored += L->stored_bytes;
        /* the conversion's copy: bf16 for a z12 layer, floats for the
         * router (F32 in the file, stored split) */
        uint64_t conv = L->w.fmt == PJ_FMT_Z12       ? L->bf16_bytes
                        : L->src_dtype != PJ_ST_BF16 ? L->bf16_bytes * 2
                                                     : 0;
        if (conv > during)
            during = conv;
        floor += L->w.fmt == PJ_FMT_Z12 ? L->bf16_bytes * 3 / 4 : L->stored_bytes;
    }
    ck_assert_int_eq(m->layers[4].w.fmt, PJ_FMT_SPLIT); /* the router's copy counts */
    ck_assert_uint_eq(need.held, floor);
    ck_assert_uint_le(need.held, stored);
    ck_assert_uint_eq(need.transient, during);
    /* The router alone: its float copy is what the load adds. */
    cfg.model.layers[0] = cfg.model.layers[4];
    cfg.model.n_layers = 1;
    pj_model_host_need_of(&cfg, st, &need);
    ck_assert_uint_eq(need.held, m->layers[4].stored_bytes);
    ck_assert_uint_eq(need.transient, m->layers[4].bf16_bytes * 2);
    pj_st_close(st);
    pj_model_free(m);
}
END_TEST

/* With less memory than the layers need (a meminfo of the test's own), the
 * load refuses before reading a weight, saying what the layers need and
 * what is free (--check-config does not take the check); with swap enough,
 * the load warns and goes on. */
START_TEST(load_refuses_what_the_host_cannot_hold)
{
    char mi[4200], err[1024];
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    pj_model *m = (pj_model *)0x1;
    host_meminfo(mi, sizeof mi, 1, 0);
    pj_model_set_host_root(mi);
    warns wr = {0};
    int layers_begun = 0;
    ck_assert_int_eq(pj_model_load_progress(&cfg, &m, NULL, NULL, count_progress, &layers_begun,
                                            err, sizeof err),
                     -ENOMEM);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(layers_begun, 0); /* refused before any layer was read */
    ck_assert_msg(strstr(err, small_path) && strstr(err, "the 5 layers take at least") &&
                      strstr(err, "host memory") && strstr(err, "only 0 MiB are available") &&
                      strstr(err, "PROJD_HOST_MEM_CHECK=0"),
                  "%s", err);
    /* --check-config does not take it (beside a serving daemon it would
     * count that daemon's copies). */
    ck_assert_msg(pj_model_check(&cfg, err, sizeof err) == 0, "%s", err);
    /* Skipped when asked. */
    setenv("PROJD_HOST_MEM_CHECK", "0", 1);
    ck_assert_msg(pj_model_load(&cfg, &m, on_warn, &wr, err, sizeof err) == 0, "%s", err);
    unsetenv("PROJD_HOST_MEM_CHECK");
    ck_assert_int_eq(wr.n, 0);
    pj_model_free(m);
    /* Swap enough: a warning, and the model loads. */
    host_meminfo(mi, sizeof mi, 1, 100000000);
    ck_assert_msg(pj_model_load(&cfg, &m, on_warn, &wr, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(wr.n, 1);
    ck_assert_msg(strstr(wr.msg[0], "will swap"), "%s", wr.msg[0]);
    pj_model_free(m);
    /* Memory enough: no word. */
    host_meminfo(mi, sizeof mi, 100000000, 0);
    wr.n = 0;
    ck_assert_msg(pj_model_load(&cfg, &m, on_warn, &wr, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(wr.n, 0);
    pj_model_free(m);
    pj_model_set_host_root(NULL);
}
END_TEST

/* The memory taken by another process during the load (another instance
 * starting at the same moment): the check before the load passed, and the
 * check before the third layer refuses, naming the layer, instead of the
 * kernel killing the load later. */
typedef struct shrink_host {
    char root[4200];
    uint32_t at; /* the layer before which the memory is gone */
    int begun;
} shrink_host;

static int shrink_on_progress(void *ctx, uint32_t index, uint32_t count, const char *layer)
{
    shrink_host *sh = ctx;
    (void)count;
    (void)layer;
    sh->begun++;
    if (index == sh->at)
        ck_assert_int_eq(pj_fixture_write_under(sh->root, "proc/meminfo",
                                                "MemAvailable: 1 kB\nSwapFree: 0 kB\n"),
                         0);
    return 0;
}

START_TEST(load_refuses_when_memory_goes_during_it)
{
    char err[1024];
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    shrink_host sh = {.at = 2};
    host_meminfo(sh.root, sizeof sh.root, 100000000, 0);
    pj_model_set_host_root(sh.root);
    pj_model *m = (pj_model *)0x1;
    ck_assert_int_eq(
        pj_model_load_progress(&cfg, &m, NULL, NULL, shrink_on_progress, &sh, err, sizeof err),
        -ENOMEM);
    ck_assert_ptr_null(m);
    ck_assert_int_eq(sh.begun, 3);
    char want[128];
    snprintf(want, sizeof want, "before layer '%s' (3 of 5)", cfg.model.layers[2].name);
    ck_assert_msg(strstr(err, small_path) && strstr(err, want) &&
                      strstr(err, "taken by another process during the load") &&
                      strstr(err, "MemAvailable 0 MiB"),
                  "%s", err);
    /* Memory that stays: the same load completes. */
    sh.at = 99;
    sh.begun = 0;
    host_meminfo(sh.root, sizeof sh.root, 100000000, 0);
    ck_assert_msg(
        pj_model_load_progress(&cfg, &m, NULL, NULL, shrink_on_progress, &sh, err, sizeof err) == 0,
        "%s", err);
    ck_assert_int_eq(sh.begun, 5);
    pj_model_free(m);
    pj_model_set_host_root(NULL);
}
END_TEST

/* projctl inspect's host memory: what the layers hold, what a start needs
 * (the loader's bound), what was free before the report's own load, and
 * how many instances that makes room for, here against a host of the
 * test's own with 1 GiB available. */
START_TEST(inspect_host_memory)
{
    char root[4200], err[1024];
    int rc;
    host_meminfo(root, sizeof root, 1024 * 1024, 0);
    pj_model_set_host_root(root);
    pj_config cfg;
    pj_fixture_small_config(&cfg, small_path);
    pj_st_file *st;
    ck_assert_int_eq(pj_st_open(small_path, &st, err, sizeof err), 0);
    pj_model_host_need need;
    pj_model_host_need_of(&cfg, st, &need);
    pj_st_close(st);
    pj_model *m;
    ck_assert_msg(pj_model_load(&cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    uint64_t held = 0;
    for (uint32_t i = 0; i < m->n_layers; i++)
        held += m->layers[i].stored_bytes;
    pj_model_free(m);
    const uint64_t fit = ((1ull << 30) - need.transient) / need.held;
    ck_assert_uint_gt(fit, 1);

    char *t = inspect_to_string(NULL, small_path, 0, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    char want[256];
    snprintf(want, sizeof want,
             "in host memory: the layers hold %s; a start needs at least %s free",
             pj_hostmem_size(held).s, pj_hostmem_size(need.held + need.transient).s);
    ck_assert_msg(strstr(t, want), "no '%s' in:\n%s", want, t);
    snprintf(want, sizeof want,
             "free to this process before this report loaded the model: 1.0 GiB (MemAvailable "
             "1.0 GiB + SwapFree 0 MiB): room for %llu instances loading in turn",
             (unsigned long long)fit);
    ck_assert_msg(strstr(t, want), "no '%s' in:\n%s", want, t);
    free(t);

    char *j = inspect_to_string(NULL, small_path, 1, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    cJSON *root_json = cJSON_Parse(j);
    ck_assert_ptr_nonnull(root_json);
    const cJSON *hm = cJSON_GetObjectItem(root_json, "host_memory");
    ck_assert_ptr_nonnull(hm);
    ck_assert_double_eq(cJSON_GetObjectItem(hm, "held_bytes")->valuedouble, (double)held);
    ck_assert_double_eq(cJSON_GetObjectItem(hm, "start_bytes")->valuedouble,
                        (double)(need.held + need.transient));
    ck_assert_double_eq(cJSON_GetObjectItem(hm, "available_bytes")->valuedouble,
                        (double)(1ull << 30));
    ck_assert_double_eq(cJSON_GetObjectItem(hm, "instances")->valuedouble, (double)fit);
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(hm, "cgroup")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(hm, "memory_high_room_bytes")));
    ck_assert(cJSON_IsNull(cJSON_GetObjectItem(hm, "cgroup_read")));
    cJSON_Delete(root_json);
    free(j);

    /* A unit with MemoryHigh=100M (v2), 36 MiB of it in use: said beside
     * the room, which memory.high does not shrink. */
    ck_assert_int_eq(pj_fixture_write_under(root, "proc/self/cgroup", "0::/p.service\n"), 0);
    ck_assert_int_eq(pj_fixture_write_under(root, "proc/self/mountinfo",
                                            "27 22 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 "
                                            "rw\n"),
                     0);
    ck_assert_int_eq(pj_fixture_write_under(root, "sys/fs/cgroup/p.service/memory.max", "max\n"),
                     0);
    ck_assert_int_eq(
        pj_fixture_write_under(root, "sys/fs/cgroup/p.service/memory.high", "104857600\n"), 0);
    ck_assert_int_eq(
        pj_fixture_write_under(root, "sys/fs/cgroup/p.service/memory.current", "37748736\n"), 0);
    t = inspect_to_string(NULL, small_path, 0, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(t, "free to this process before this report loaded the model: 1.0 GiB") &&
                      strstr(t, "of it below the memory.high of the cgroup /p.service (100 MiB, "
                                "36 MiB in use): 64 MiB; past that the kernel throttles") &&
                      strstr(t, "(read in the cgroup /p.service, this command's own"),
                  "%s", t);
    free(t);
    j = inspect_to_string(NULL, small_path, 1, &rc, err, sizeof err);
    root_json = cJSON_Parse(j);
    hm = cJSON_GetObjectItem(root_json, "host_memory");
    ck_assert_str_eq(cJSON_GetObjectItem(hm, "memory_high_cgroup")->valuestring, "/p.service");
    ck_assert_str_eq(cJSON_GetObjectItem(hm, "cgroup_read")->valuestring, "/p.service");
    ck_assert_double_eq(cJSON_GetObjectItem(hm, "memory_high_room_bytes")->valuedouble,
                        (double)(64ull << 20));
    cJSON_Delete(root_json);
    free(j);

    /* No MemAvailable: the figure is said to be unknown, null in JSON. */
    ck_assert_int_eq(pj_fixture_write_under(root, "proc/meminfo", "MemTotal: 5 kB\n"), 0);
    t = inspect_to_string(NULL, small_path, 0, &rc, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_msg(strstr(t, "the memory free to this process is not known"), "%s", t);
    free(t);
    j = inspect_to_string(NULL, small_path, 1, &rc, err, sizeof err);
    root_json = cJSON_Parse(j);
    ck_assert(cJSON_IsNull(
        cJSON_GetObjectItem(cJSON_GetObjectItem(root_json, "host_memory"), "instances")));
    cJSON_Delete(root_json);
    free(j);
    pj_model_set_host_root(NULL);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("load");
    tcase_add_checked_fixture(tc, NULL, reset_host);
    tcase_add_test(tc, small_model_layers);
    tcase_add_test(tc, host_check_decides);
    tcase_add_test(tc, host_need_bounds_the_load);
    tcase_add_test(tc, load_refuses_what_the_host_cannot_hold);
    tcase_add_test(tc, load_refuses_when_memory_goes_during_it);
    tcase_add_test(tc, inspect_host_memory);
    tcase_add_test(tc, z12_projects_like_bf16);
    tcase_add_test(tc, format_preferences);
    tcase_add_test(tc, check_agrees_with_load);
    tcase_add_test(tc, tensor_name_shown_escaped);
    tcase_add_test(tc, bad_tensors);
    tcase_add_test(tc, odd_k_stays_bf16);
    /* model.load_threads auto (0), 1 and 4 */
    tcase_add_loop_test(tc, auto_keeps_bf16_when_z12_is_larger, 0, 2);
    tcase_add_loop_test(tc, auto_keeps_bf16_when_z12_is_larger, 4, 5);
    tcase_add_loop_test(tc, nonfinite_bf16, 0, 2);
    tcase_add_loop_test(tc, nonfinite_bf16, 4, 5);
    tcase_add_loop_test(tc, nonfinite_bf16_anywhere, 0, 3);
    tcase_add_loop_test(tc, nonfinite_z12_anywhere, 0, 3);
    tcase_add_test(tc, load_threads_same_result);
    tcase_add_test(tc, layer_digests);
    tcase_add_test(tc, f16_split_exact);
    tcase_add_test(tc, f32_nonfinite_warns);
    tcase_add_test(tc, file_not_kept);
    tcase_add_test(tc, bad_files);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    TCase *ti = tcase_create("inspect");
    tcase_add_test(ti, inspect_small_text);
    tcase_add_test(ti, inspect_small_json);
    tcase_add_test(ti, inspect_reference_o);
    tcase_add_test(ti, busiest_exception_block);
    tcase_add_test(ti, heavy_exception_block);
    tcase_add_test(ti, inspect_warnings_in_report);
    tcase_set_timeout(ti, 120);
    suite_add_tcase(s, ti);
    return s;
}

int main(void)
{
    /* one small model for every test (forked children inherit the path) */
    if (pj_fixture_small_model(small_path, sizeof small_path) != 0)
        return 1;
    SRunner *sr = srunner_create(model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
