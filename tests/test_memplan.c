/* test_memplan.c — the cuda backend's device-memory plan for the weights:
 * the bytes of each stored format as the upload allocates them, which z12
 * layers keep a bf16 copy (shapes.max_m above the z12 GEMV's 32, a forced
 * engine that reads bf16), and the refusal with its advice. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/memplan.h"
#include "kernels/zfmt.h"

/* A model of five layers built in memory (no file):
 *   0 "dense"  bf16  64 x 128
 *   1 "za"     z12   40 x 128  (n_pad 48), some exceptions
 *   2 "router" split 16 x 64
 *   3 "zb"     z12   32 x 192, engine "gemv" (reads bf16)
 *   4 "zc"     z12   16 x 64,  engine "gemvz:nw=8" (its own GEMV) */
typedef struct fixture {
    pj_model *m;
    pj_z12 z[3];
    uint16_t *bufs[4];
} fixture;

static uint16_t *weights(uint32_t n, uint32_t k, uint32_t seed)
{
    uint16_t *w = malloc((size_t)n * k * 2);
    ck_assert_ptr_nonnull(w);
    uint32_t s = seed;
    for (size_t i = 0; i < (size_t)n * k; i++) {
        s = s * 1664525u + 1013904223u;
        /* exponents 118..125 mostly (one window), every 97th far outside */
        uint32_t e = i % 97 == 0 ? 100 : 118 + (s >> 29);
        w[i] = (uint16_t)((s >> 31) << 15 | e << 7 | ((s >> 8) & 0x7f));
    }
    return w;
}

static void fixture_make(fixture *f)
{
    memset(f, 0, sizeof *f);
    f->m = calloc(1, sizeof *f->m);
    ck_assert_ptr_nonnull(f->m);
    static const struct {
        const char *name, *engine;
        pj_format fmt;
        uint32_t n, k;
    } spec[5] = {{"dense", "", PJ_FMT_BF16, 64, 128},
                 {"za", "", PJ_FMT_Z12, 40, 128},
                 {"router", "", PJ_FMT_SPLIT, 16, 64},
                 {"zb", "gemv", PJ_FMT_Z12, 32, 192},
                 {"zc", "gemvz:nw=8", PJ_FMT_Z12, 16, 64}};
    int zi = 0, bi = 0;
    for (uint32_t i = 0; i < 5; i++) {
        pj_model_layer *L = &f->m->layers[i];
        snprintf(L->name, sizeof L->name, "%s", spec[i].name);
        snprintf(L->engine, sizeof L->engine, "%s", spec[i].engine);
        L->w.fmt = spec[i].fmt;
        L->w.n = spec[i].n;
        L->w.k = spec[i].k;
        uint16_t *w = weights(spec[i].n, spec[i].k, 7 + i);
        if (spec[i].fmt == PJ_FMT_Z12) {
            char err[256];
            ck_assert_msg(
                pj_z12_pack(w, spec[i].n, spec[i].k, spec[i].k, &f->z[zi], err, sizeof err) == 0,
                "%s", err);
            L->w.z = &f->z[zi++];
            free(w);
        } else if (spec[i].fmt == PJ_FMT_BF16) {
            L->w.bf16 = w;
            f->bufs[bi++] = w;
        } else {
            L->w.hi = L->w.lo = w;
            f->bufs[bi++] = w;
        }
    }
    f->m->n_layers = 5;
    ck_assert_uint_gt(f->z[0].n_exc, 0);
}

static void fixture_free(fixture *f)
{
    for (int i = 0; i < 3; i++)
        pj_z12_free(&f->z[i]);
    for (int i = 0; i < 4; i++)
        free(f->bufs[i]);
    free(f->m);
}

/* What the upload always allocates for a z12 layer, from the format's
 * definition (ZFORMAT.md): 1536-byte tiles of 16 x 64, a uint32 offset per
 * row block plus one, a 12-byte entry per exception. (The per-tile tables
 * it may add are left out of the bound.) */
static uint64_t z12_device_bytes(const pj_z12 *z)
{
    uint64_t blocks = (z->n + 15) / 16, tiles = blocks * (z->k / 64);
    return tiles * 1536 + (blocks + 1) * 4 + (uint64_t)z->n_exc * 12;
}

START_TEST(bytes_and_copies)
{
    fixture f;
    fixture_make(&f);
    const uint64_t stored = 64 * 128 * 2 + z12_device_bytes(&f.z[0]) + 2 * (16 * 64 * 2) +
                            z12_device_bytes(&f.z[1]) + z12_device_bytes(&f.z[2]);
    const uint64_t za = 40 * 128 * 2, zb = 32 * 192 * 2, zc = 16 * 64 * 2;
    pj_memplan p;

    /* m up to 256: every z12 layer keeps a copy (cuBLAS and splitk above 32). */
    pj_memplan_weights(f.m, 256, NULL, &p);
    ck_assert_uint_eq(p.stored, stored);
    ck_assert_uint_eq(p.bf16_copies, za + zb + zc);
    ck_assert_uint_eq(p.copies_decode, zb); /* the forced gemv's stays at m <= 32 */
    ck_assert_uint_eq(p.z12_layers, 3);
    ck_assert_uint_eq(p.copied, 3);
    ck_assert_uint_eq(p.max_m, 256);

    /* m up to 32: only the layer forced onto a bf16 engine. */
    pj_memplan_weights(f.m, 32, "", &p);
    ck_assert_uint_eq(p.stored, stored);
    ck_assert_uint_eq(p.bf16_copies, zb);
    ck_assert_uint_eq(p.copied, 1);
    ck_assert_uint_eq(p.copies_decode, zb);

    /* The rule the backend's upload calls. */
    ck_assert_int_eq(pj_memplan_copies_bf16(33, NULL), 1);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, NULL), 0);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, ""), 0);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, "gemvz"), 0);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, "gemvz:nw=8"), 0);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, "gemv"), 1);
    ck_assert_int_eq(pj_memplan_copies_bf16(32, "gemvzz"), 1);
    ck_assert_int_eq(pj_memplan_copies_bf16(1, "cublas:algo=3"), 1);

    /* PROJD_FORCE_ENGINE wins over the layers' own: gemvz everywhere keeps
     * none, another engine keeps them all. */
    pj_memplan_weights(f.m, 32, "gemvz", &p);
    ck_assert_uint_eq(p.bf16_copies, 0);
    pj_memplan_weights(f.m, 8, "cublas", &p);
    ck_assert_uint_eq(p.bf16_copies, za + zb + zc);
    ck_assert_uint_eq(p.copied, 3);
    fixture_free(&f);
}
END_TEST

START_TEST(check_says_what_fits)
{
    fixture f;
    fixture_make(&f);
    pj_memplan p;
    char err[512];
    pj_memplan_weights(f.m, 256, NULL, &p);
    const uint64_t need = p.stored + p.bf16_copies, decode = p.stored + p.copies_decode;
    ck_assert_int_eq(pj_memplan_check(&p, need, err, sizeof err), 0);
    ck_assert_int_eq(pj_memplan_check(&p, need - 1, err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "the weights need at least") && strstr(err, "are free") &&
                      strstr(err, "bf16 copies of 3 z12 layers"),
                  "%s", err);
    /* m <= 32 would fit: said, with what it still needs (the forced
     * layer's copy included). */
    char want[64];
    snprintf(want, sizeof want, "at least %.1f MiB", (double)decode / (1024.0 * 1024.0));
    ck_assert_msg(strstr(err, "shapes.max_m <= 32 keeps only the copies forced engines read") &&
                      strstr(err, want),
                  "%s (want '%s')", err, want);
    ck_assert_int_eq(pj_memplan_check(&p, decode, err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "shapes.max_m <= 32"), "%s", err);

    /* Not even that: no false hope. Between the stored formats and that,
     * the forced copy is named; below the stored formats, fewer layers. */
    ck_assert_int_eq(pj_memplan_check(&p, decode - 1, err, sizeof err), -ENOMEM);
    ck_assert_msg(!strstr(err, "shapes.max_m") && strstr(err, "copies for forced engines"), "%s",
                  err);
    ck_assert_int_eq(pj_memplan_check(&p, p.stored - 1, err, sizeof err), -ENOMEM);
    ck_assert_msg(!strstr(err, "shapes.max_m") && !strstr(err, "forced") &&
                      strstr(err, "serve fewer layers"),
                  "%s", err);

    /* m <= 32 and the forced copy does not fit: the force is named. */
    pj_memplan_weights(f.m, 32, NULL, &p);
    ck_assert_int_eq(pj_memplan_check(&p, p.stored, err, sizeof err), -ENOMEM);
    ck_assert_msg(strstr(err, "copies for forced engines"), "%s", err);

    /* A short buffer is cut, never overrun. */
    char small[40];
    memset(small, 'x', sizeof small);
    ck_assert_int_eq(pj_memplan_check(&p, 0, small, 24), -ENOMEM);
    ck_assert_uint_eq(strlen(small), 23);
    ck_assert_int_eq(small[24], 'x');
    fixture_free(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memplan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, bytes_and_copies);
    tcase_add_test(tc, check_says_what_fits);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
