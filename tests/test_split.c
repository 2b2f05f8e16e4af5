/* test_split.c — pj_split_f32: the error bound of bf16.h over every exponent,
 * its tightness, and the special values. */
#include "tests/helpers/testrng.h"
#include <check.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"

/* ck_assert* records every passing check (a write to the parent process in
 * fork mode), which dominates loops over millions of elements; REQUIRE only
 * acts on failure. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

static float f32_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The documented bound: 2^-16 * 2^e(w), never below 2^-134. */
static double split_bound(float w)
{
    int e;
    double m = frexp(fabs((double)w), &e); /* |w| = m * 2^e, m in [0.5, 1) */
    (void)m;
    double b = ldexp(1.0, e - 1 - 16);
    double floor_b = ldexp(1.0, -134);
    return b > floor_b ? b : floor_b;
}

/* Checks one element and returns err / bound. */
static double check_one(float w, uint16_t hi, uint16_t lo)
{
    double h = pj_bf16_to_f32(hi), l = pj_bf16_to_f32(lo);
    REQUIRE(isfinite(h) && isfinite(l), "w=%a: hi=0x%04x lo=0x%04x not finite", (double)w, hi, lo);
    /* hi is bf16(w) rounded to nearest even unless that overflows. */
    uint16_t want = pj_f32_to_bf16(w);
    if ((want & 0x7fffu) == 0x7f80u)
        want = (uint16_t)((want & 0x8000u) | 0x7f7fu);
    REQUIRE(hi == want, "w=%a: hi=0x%04x, want 0x%04x", (double)w, hi, want);
    double err = fabs((double)w - (h + l));
    double bound = split_bound(w);
    REQUIRE(err <= bound, "w=%a (0x%08x): |w-(hi+lo)| = %a > bound %a", (double)w, bits_of(w), err,
            bound);
    return err / bound;
}

/* 2^22 random finite floats, uniform over bit patterns (so over exponents). */
START_TEST(test_random_all_exponents)
{
    enum { BATCH = 1 << 16, BATCHES = 64 };
    float *w = malloc(BATCH * sizeof *w);
    uint16_t *hi = malloc(BATCH * sizeof *hi), *lo = malloc(BATCH * sizeof *lo);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(hi);
    ck_assert_ptr_nonnull(lo);
    uint64_t s = 0x5eed0001;
    double worst = 0, worst_normal = 0, worst_sub = 0;
    int seen_exp[256] = {0};
    for (int b = 0; b < BATCHES; b++) {
        for (int i = 0; i < BATCH; i++) {
            uint32_t u;
            do {
                u = (uint32_t)sm_next(&s);
            } while ((u & 0x7f800000u) == 0x7f800000u);
            w[i] = f32_of(u);
            seen_exp[(u >> 23) & 0xff] = 1;
        }
        pj_split_f32(w, BATCH, hi, lo);
        for (int i = 0; i < BATCH; i++) {
            double r = check_one(w[i], hi[i], lo[i]);
            if (r > worst)
                worst = r;
            int e = (bits_of(w[i]) >> 23) & 0xff;
            if (e > 40 && e < 250 && r > worst_normal)
                worst_normal = r;
            if (e < 20 && r > worst_sub)
                worst_sub = r;
        }
    }
    for (int e = 0; e < 255; e++)
        REQUIRE(seen_exp[e], "exponent %d never drawn", e);
    /* The bound is not loose: random draws come within a factor 4 of it, both
     * where it is relative and where the 2^-134 floor applies. */
    REQUIRE(worst_normal > 0.25, "worst normal ratio %g", worst_normal);
    REQUIRE(worst_sub > 0.25, "worst subnormal-range ratio %g", worst_sub);
    printf("split: worst err/bound %.4f (normal range %.4f, subnormal range %.4f)\n", worst,
           worst_normal, worst_sub);
    free(w);
    free(hi);
    free(lo);
}
END_TEST

/* Values that sit near 1 with random low bits: the common case for weights. */
START_TEST(test_random_near_one)
{
    enum { N = 1 << 20 };
    float *w = malloc(N * sizeof *w);
    uint16_t *hi = malloc(N * sizeof *hi), *lo = malloc(N * sizeof *lo);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(hi);
    ck_assert_ptr_nonnull(lo);
    uint64_t s = 42;
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)sm_next(&s);
        uint32_t e = 127 - 20 + (u >> 27); /* exponents 107..138 */
        w[i] = f32_of((u & 0x80000000u) | e << 23 | (u & 0x7fffffu));
    }
    pj_split_f32(w, N, hi, lo);
    double worst = 0;
    for (int i = 0; i < N; i++) {
        double r = check_one(w[i], hi[i], lo[i]);
        if (r > worst)
            worst = r;
        /* Relative form of the bound. */
        double err = fabs((double)w[i] - ((double)pj_bf16_to_f32(hi[i]) + pj_bf16_to_f32(lo[i])));
        REQUIRE(err <= ldexp(fabs((double)w[i]), -16), "w=%a: relative bound", (double)w[i]);
    }
    REQUIRE(worst > 0.25, "worst ratio %g", worst);
    free(w);
    free(hi);
    free(lo);
}
END_TEST

START_TEST(test_exact_bf16_values)
{
    /* A float that already is a bf16 splits into itself and +0. */
    uint64_t s = 7;
    for (int i = 0; i < 100000; i++) {
        uint16_t b;
        do {
            b = (uint16_t)sm_next(&s);
        } while ((b & 0x7f80u) == 0x7f80u);
        float w = pj_bf16_to_f32(b);
        uint16_t hi, lo;
        pj_split_f32(&w, 1, &hi, &lo);
        REQUIRE(hi == b && lo == 0, "0x%04x split into 0x%04x + 0x%04x", b, hi, lo);
    }
}
END_TEST

START_TEST(test_special_values)
{
    float w[] = {0.0f,
                 -0.0f,
                 INFINITY,
                 -INFINITY,
                 NAN,
                 -NAN,
                 FLT_MAX,
                 -FLT_MAX,
                 FLT_MIN,
                 -FLT_MIN,
                 f32_of(1),          /* smallest subnormal */
                 f32_of(0x007fffff), /* largest subnormal */
                 f32_of(0x00008001), /* subnormal below bf16 resolution */
                 1.0f,
                 1.0f + 0x1p-8f,           /* tie: rounds to even (1.0) */
                 1.0f + 0x1p-8f + 0x1p-9f, /* just above the tie */
                 1.0f + 0x1p-7f + 0x1p-8f, /* tie: rounds up to even */
                 f32_of(0x7f7f7fff),       /* just below the bf16 overflow point */
                 f32_of(0x7f7f8000),       /* first value that rounds to bf16 inf */
                 3.14159265f,
                 -2.71828182f,
                 1e-30f,
                 1e30f};
    enum { N = sizeof w / sizeof w[0] };
    uint16_t hi[N], lo[N];
    pj_split_f32(w, N, hi, lo);
    /* Zeros keep their sign in hi; lo is +0. */
    ck_assert_uint_eq(hi[0], 0x0000);
    ck_assert_uint_eq(lo[0], 0x0000);
    ck_assert_uint_eq(hi[1], 0x8000);
    ck_assert_uint_eq(lo[1], 0x0000);
    /* Non-finite: hi carries it, lo = 0. */
    ck_assert_uint_eq(hi[2], 0x7f80);
    ck_assert_uint_eq(lo[2], 0);
    ck_assert_uint_eq(hi[3], 0xff80);
    ck_assert_uint_eq(lo[3], 0);
    for (int i = 4; i <= 5; i++) {
        REQUIRE((hi[i] & 0x7f80u) == 0x7f80u && (hi[i] & 0x7fu), "NaN hi=0x%04x", hi[i]);
        REQUIRE(hi[i] & 0x40u, "NaN hi=0x%04x is not quiet", hi[i]);
        ck_assert_uint_eq(lo[i], 0);
    }
    /* Finite values whose bf16 rounding overflows keep the largest bf16. */
    ck_assert_uint_eq(hi[6], 0x7f7f);
    ck_assert_uint_eq(hi[7], 0xff7f);
    ck_assert_uint_eq(hi[18], 0x7f7f);
    ck_assert_uint_eq(hi[17], 0x7f7f);
    ck_assert_uint_eq(hi[14], 0x3f80);
    ck_assert_uint_eq(lo[14], 0x3b80); /* 2^-8 */
    ck_assert_uint_eq(hi[16], 0x3f82);
    for (int i = 0; i < N; i++)
        if (i < 2 || i > 5)
            check_one(w[i], hi[i], lo[i]);
    /* count == 0 touches nothing. */
    uint16_t poison = 0xabcd;
    pj_split_f32(w, 0, &poison, &poison);
    ck_assert_uint_eq(poison, 0xabcd);
}
END_TEST

/* Every finite float whose top 16 bits are one chosen pattern per exponent
 * and whose low 16 bits run through all values: covers the rounding of hi and
 * lo exhaustively at 16 exponents. */
START_TEST(test_exhaustive_low_half)
{
    enum { N = 1 << 16 };
    float *w = malloc(N * sizeof *w);
    uint16_t *hi = malloc(N * sizeof *hi), *lo = malloc(N * sizeof *lo);
    ck_assert_ptr_nonnull(w);
    ck_assert_ptr_nonnull(hi);
    ck_assert_ptr_nonnull(lo);
    const uint16_t tops[] = {0x0000, 0x0001, 0x0040, 0x007f, 0x0080, 0x00ff, 0x0100, 0x3f80,
                             0x3fff, 0xbf80, 0x4000, 0x7f00, 0x7f7e, 0x7f7f, 0xff7f, 0x8001};
    for (size_t t = 0; t < sizeof tops / sizeof tops[0]; t++) {
        for (uint32_t i = 0; i < N; i++)
            w[i] = f32_of((uint32_t)tops[t] << 16 | i);
        pj_split_f32(w, N, hi, lo);
        for (uint32_t i = 0; i < N; i++)
            check_one(w[i], hi[i], lo[i]);
    }
    free(w);
    free(hi);
    free(lo);
}
END_TEST

static Suite *split_suite(void)
{
    Suite *s = suite_create("split");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_random_all_exponents);
    tcase_add_test(tc, test_random_near_one);
    tcase_add_test(tc, test_exact_bf16_values);
    tcase_add_test(tc, test_special_values);
    tcase_add_test(tc, test_exhaustive_low_half);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(split_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
