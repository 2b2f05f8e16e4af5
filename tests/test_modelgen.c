/* test_modelgen.c — generator: determinism, file = rows, realism statistics. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/modelgen.h"
#include "daemon/safetensors.h"
#include "kernels/bf16.h"
#include "tests/helpers/fixture.h"

/* FNV-1a 64 of the small preset, seed 1, as first generated. A change here
 * means every generated model changed: intended generator changes update it
 * (and say so); anything else is a portability bug. */
#define SMALL_SEED1_FNV 0xbb23aec274232874ull

static uint64_t fnv1a(const void *p, size_t n)
{
    const uint8_t *b = p;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

static uint8_t *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    ck_assert_ptr_nonnull(b);
    ck_assert_uint_eq(fread(b, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return b;
}

static void gen(const char *name, uint64_t seed, char *path, size_t cap)
{
    char err[512];
    pj_fixture_path(path, cap, name);
    pj_modelgen_opts o = {.seed = seed, .preset = PJ_MODELGEN_SMALL};
    ck_assert_msg(pj_modelgen_write(path, &o, err, sizeof err) == 0, "%s", err);
}

START_TEST(deterministic)
{
    char a[1024], b[1024], c[1024];
    gen("a.safetensors", 1, a, sizeof a);
    gen("b.safetensors", 1, b, sizeof b);
    gen("c.safetensors", 2, c, sizeof c);
    size_t la, lb, lc;
    uint8_t *da = slurp(a, &la), *db = slurp(b, &lb), *dc = slurp(c, &lc);
    ck_assert_uint_eq(la, lb);
    ck_assert_int_eq(memcmp(da, db, la), 0);
    ck_assert_uint_eq(la, lc); /* same shapes, same header length */

    char err[512];
    pj_st_file *fa, *fc;
    ck_assert_int_eq(pj_st_open(a, &fa, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_open(c, &fc, err, sizeof err), 0);
    ck_assert_str_eq(pj_st_meta(fa, "seed"), "1");
    ck_assert_str_eq(pj_st_meta(fc, "seed"), "2");
    ck_assert_str_eq(pj_st_meta(fa, "preset"), "small");
    ck_assert_str_eq(pj_st_meta(fa, "generator"), "projd modelgen 1");
    /* every tensor differs between seeds, nearly everywhere */
    for (size_t i = 0; i < pj_st_count(fa); i++) {
        const pj_st_tensor *ta = pj_st_get(fa, i), *tc = pj_st_find(fc, ta->name);
        ck_assert_ptr_nonnull(tc);
        ck_assert_uint_eq(ta->nbytes, tc->nbytes);
        size_t same = 0;
        for (size_t j = 0; j < ta->nbytes; j += 2)
            same += memcmp((const uint8_t *)ta->data + j, (const uint8_t *)tc->data + j, 2) == 0;
        ck_assert_msg(same < ta->nbytes / 2 / 20, "%s: %zu of %zu equal", ta->name, same,
                      ta->nbytes / 2);
    }
    pj_st_close(fa);
    pj_st_close(fc);
    uint64_t h = fnv1a(da, la);
    if (SMALL_SEED1_FNV != 0)
        ck_assert_msg(h == SMALL_SEED1_FNV, "small model hash %#llx", (unsigned long long)h);
    else
        fprintf(stderr, "small model seed 1 fnv1a: %#llx\n", (unsigned long long)h);
    free(da);
    free(db);
    free(dc);
}
END_TEST

/* The file holds exactly what pj_modelgen_rows gives, for any row range. */
START_TEST(file_matches_rows)
{
    char p[1024], err[512];
    gen("rows.safetensors", 77, p, sizeof p);
    pj_st_file *f;
    ck_assert_int_eq(pj_st_open(p, &f, err, sizeof err), 0);
    size_t nl;
    const pj_modelgen_layer *L = pj_modelgen_layers(PJ_MODELGEN_SMALL, &nl);
    ck_assert_uint_eq(nl, 5);
    ck_assert_uint_eq(pj_st_count(f), nl);
    pj_modelgen_opts o = {.seed = 77, .preset = PJ_MODELGEN_SMALL};
    for (size_t i = 0; i < nl; i++) {
        const pj_st_tensor *t = pj_st_find(f, L[i].tensor);
        ck_assert_ptr_nonnull(t);
        ck_assert_int_eq(t->dtype, L[i].dtype);
        ck_assert_uint_eq(t->ndim, 2);
        ck_assert_uint_eq(t->shape[0], L[i].n);
        ck_assert_uint_eq(t->shape[1], L[i].k);
        size_t row = L[i].k * pj_st_dtype_size(L[i].dtype);
        uint8_t *buf = malloc(L[i].n * row);
        ck_assert_int_eq(pj_modelgen_rows(&o, i, 0, L[i].n, buf), 0);
        ck_assert_int_eq(memcmp(buf, t->data, t->nbytes), 0);
        /* an odd sub-range in the middle */
        uint32_t r0 = 5, r1 = L[i].n - 3;
        memset(buf, 0xff, L[i].n * row);
        ck_assert_int_eq(pj_modelgen_rows(&o, i, r0, r1, buf), 0);
        ck_assert_int_eq(memcmp(buf, (const uint8_t *)t->data + r0 * row, (r1 - r0) * row), 0);
        free(buf);
    }
    pj_st_close(f);
    ck_assert_int_eq(pj_modelgen_rows(&o, nl, 0, 1, NULL), -EINVAL);
    ck_assert_int_eq(pj_modelgen_rows(&o, 0, 2, 1, NULL), -EINVAL);
    ck_assert_int_eq(pj_modelgen_rows(&o, 0, 0, L[0].n + 1, NULL), -EINVAL);
}
END_TEST

static int cmp_float(const void *a, const void *b)
{
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

/* Weights outside the best 8-value window of the 7 high exponent bits: what
 * z12 must list as exceptions (computed here independently of kernels/). */
static size_t window_misses(const uint16_t *w, size_t count)
{
    size_t h[128] = {0}, best = 0;
    for (size_t i = 0; i < count; i++)
        h[(w[i] >> 8) & 0x7f]++;
    for (int b = 0; b <= 120; b++) {
        size_t s = 0;
        for (int c = 0; c < 8; c++)
            s += h[b + c];
        if (s > best)
            best = s;
    }
    return count - best;
}

struct stats {
    size_t outliers, zeros, tiny, nonfinite, misses;
    double scale_p10, scale_p90;
};

static struct stats layer_stats(const pj_modelgen_opts *o, size_t li)
{
    size_t nl;
    const pj_modelgen_layer *L = &pj_modelgen_layers(o->preset, &nl)[li];
    size_t count = (size_t)L->n * L->k;
    uint16_t *w = malloc(count * 2);
    float *absrow = malloc(L->k * sizeof(float)), *scales = malloc(L->n * sizeof(float));
    ck_assert(w && absrow && scales);
    ck_assert_int_eq(pj_modelgen_rows(o, li, 0, L->n, w), 0);
    struct stats s = {0};
    for (uint32_t r = 0; r < L->n; r++) {
        const uint16_t *row = w + (size_t)r * L->k;
        for (uint32_t c = 0; c < L->k; c++)
            absrow[c] = fabsf(pj_bf16_to_f32(row[c]));
        qsort(absrow, L->k, sizeof *absrow, cmp_float);
        /* median |x| of a gaussian is 0.6745 sigma; outliers cannot move it */
        float scale = absrow[L->k / 2] / 0.6745f;
        scales[r] = scale;
        for (uint32_t c = 0; c < L->k; c++) {
            float v = pj_bf16_to_f32(row[c]);
            if (!isfinite(v))
                s.nonfinite++;
            else if (v == 0.0f)
                s.zeros++;
            else if (fabsf(v) < 1e-20f)
                s.tiny++;
            else if (fabsf(v) > 12.0f * scale) /* 12 sigma: never gaussian */
                s.outliers++;
        }
    }
    qsort(scales, L->n, sizeof *scales, cmp_float);
    s.scale_p10 = scales[L->n / 10];
    s.scale_p90 = scales[L->n * 9 / 10];
    s.misses = window_misses(w, count);
    free(w);
    free(absrow);
    free(scales);
    return s;
}

/* The reference o layer (4096 x 2048), made in memory: the statistics the
 * generator promises, and the z12 size they imply. */
START_TEST(realism_reference_o)
{
    pj_modelgen_opts o = {.seed = 1, .preset = PJ_MODELGEN_REFERENCE};
    size_t nl;
    const pj_modelgen_layer *L = pj_modelgen_layers(PJ_MODELGEN_REFERENCE, &nl);
    ck_assert_str_eq(L[1].name, "o");
    double count = (double)L[1].n * L[1].k;
    struct stats s = layer_stats(&o, 1);
    ck_assert_uint_eq(s.nonfinite, 0);
    double of = s.outliers / count, zf = s.zeros / count;
    ck_assert_msg(of > 0.7e-4 && of < 1.3e-4, "outlier fraction %g", of);
    ck_assert_msg(zf > 3.5e-5 && zf < 6.5e-5, "zero fraction %g", zf);
    ck_assert_msg(s.tiny >= 24 && s.tiny <= L[1].n_tiny, "tiny values %zu", s.tiny);
    ck_assert_msg(s.scale_p90 / s.scale_p10 > 1.5 && s.scale_p90 / s.scale_p10 < 3.0,
                  "row scales p10 %g p90 %g", s.scale_p10, s.scale_p90);
    /* z12 bytes: 12 bits a weight, 4-byte block offsets, 12-byte exceptions
     * (pj_z12_bytes); the reference layers must stay under 0.752 of bf16 */
    double z = count * 1.5 + ((L[1].n + 15) / 16 + 1) * 4.0 + s.misses * 12.0;
    ck_assert_msg(z / (count * 2) <= 0.752, "z12 ratio %.5f (%zu misses)", z / (count * 2),
                  s.misses);
    ck_assert_uint_gt(s.misses, s.zeros); /* zeros, tiny values and outliers all miss */
}
END_TEST

/* Every bf16 layer of the small preset has weights no window covers. */
START_TEST(small_has_exceptions)
{
    pj_modelgen_opts o = {.seed = 1, .preset = PJ_MODELGEN_SMALL};
    size_t nl;
    const pj_modelgen_layer *L = pj_modelgen_layers(PJ_MODELGEN_SMALL, &nl);
    for (size_t i = 0; i < nl; i++) {
        if (L[i].dtype != PJ_ST_BF16) {
            /* the router: finite fp32 values that bf16 cannot hold exactly */
            float *w = malloc((size_t)L[i].n * L[i].k * sizeof(float));
            ck_assert_int_eq(pj_modelgen_rows(&o, i, 0, L[i].n, w), 0);
            size_t inexact = 0;
            for (size_t j = 0; j < (size_t)L[i].n * L[i].k; j++) {
                ck_assert(isfinite(w[j]));
                inexact += pj_bf16_to_f32(pj_f32_to_bf16(w[j])) != w[j];
            }
            ck_assert_uint_gt(inexact, (size_t)L[i].n * L[i].k / 2);
            free(w);
            continue;
        }
        struct stats s = layer_stats(&o, i);
        ck_assert_uint_eq(s.nonfinite, 0);
        ck_assert_msg(s.misses >= 8, "%s: %zu misses", L[i].name, s.misses);
        ck_assert_msg(s.tiny >= 6, "%s: %zu tiny", L[i].name, s.tiny);
        ck_assert_msg(s.zeros >= 2, "%s: %zu zeros", L[i].name, s.zeros);
    }
}
END_TEST

struct progress {
    uint64_t last, total;
    int calls, backwards;
};

static void on_progress(void *ctx, const char *tensor, uint64_t done, uint64_t total)
{
    struct progress *p = ctx;
    (void)tensor;
    if (done < p->last)
        p->backwards++;
    p->last = done;
    p->total = total;
    p->calls++;
}

START_TEST(progress_and_errors)
{
    char p[1024], err[512];
    pj_fixture_path(p, sizeof p, "prog.safetensors");
    struct progress pr = {0};
    pj_modelgen_opts o = {
        .seed = 3, .preset = PJ_MODELGEN_SMALL, .progress = on_progress, .progress_ctx = &pr};
    ck_assert_int_eq(pj_modelgen_write(p, &o, err, sizeof err), 0);
    ck_assert_int_ge(pr.calls, 5);
    ck_assert_int_eq(pr.backwards, 0);
    ck_assert_uint_eq(pr.last, pr.total);
    pj_st_file *f;
    ck_assert_int_eq(pj_st_open(p, &f, err, sizeof err), 0);
    ck_assert_uint_eq(pj_st_file_size(f) - 8 - pj_st_header_len(f), pr.total);
    pj_st_close(f);

    o.preset = 9;
    ck_assert_int_eq(pj_modelgen_write(p, &o, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "unknown model preset 9") != NULL, "%s", err);
    o.preset = PJ_MODELGEN_SMALL;
    char bad[1100];
    snprintf(bad, sizeof bad, "%s/missing/dir/m.safetensors", pj_fixture_tmpdir());
    ck_assert_int_eq(pj_modelgen_write(bad, &o, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, bad) != NULL, "%s", err);

    ck_assert_int_eq(pj_modelgen_preset_from_name("small"), PJ_MODELGEN_SMALL);
    ck_assert_int_eq(pj_modelgen_preset_from_name("reference"), PJ_MODELGEN_REFERENCE);
    ck_assert_int_eq(pj_modelgen_preset_from_name("huge"), -1);
    size_t n;
    ck_assert_ptr_null(pj_modelgen_layers(5, &n));
    ck_assert_uint_eq(n, 0);
}
END_TEST

/* The reference preset's shapes are the ones ARCHITECTURE.md names. */
START_TEST(reference_shapes)
{
    size_t n;
    const pj_modelgen_layer *L = pj_modelgen_layers(PJ_MODELGEN_REFERENCE, &n);
    static const struct {
        const char *tensor;
        uint32_t n, k;
        pj_st_dtype dt;
    } want[] = {{"qkv_gate.weight", 4608, 4096, PJ_ST_BF16},
                {"o.weight", 4096, 2048, PJ_ST_BF16},
                {"pooler.weight", 8192, 4096, PJ_ST_BF16},
                {"unpooler.weight", 8192, 4096, PJ_ST_BF16},
                {"router.weight", 256, 4096, PJ_ST_F32}};
    ck_assert_uint_eq(n, 5);
    for (size_t i = 0; i < n; i++) {
        ck_assert_str_eq(L[i].tensor, want[i].tensor);
        ck_assert_uint_eq(L[i].n, want[i].n);
        ck_assert_uint_eq(L[i].k, want[i].k);
        ck_assert_int_eq(L[i].dtype, want[i].dt);
        ck_assert_uint_ge(L[i].n_tiny, 8);
    }
}
END_TEST

static Suite *mg_suite(void)
{
    Suite *s = suite_create("modelgen");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, deterministic);
    tcase_add_test(tc, file_matches_rows);
    tcase_add_test(tc, small_has_exceptions);
    tcase_add_test(tc, progress_and_errors);
    tcase_add_test(tc, reference_shapes);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    TCase *big = tcase_create("reference_layer");
    tcase_add_test(big, realism_reference_o);
    tcase_set_timeout(big, 120); /* a few seconds normally; sanitizer builds are slower */
    suite_add_tcase(s, big);
    return s;
}

int main(void)
{
    if (!pj_fixture_tmpdir())
        return 1;
    SRunner *sr = srunner_create(mg_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
