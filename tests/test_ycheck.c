/* test_ycheck.c — the GPU suites' check of a y block (tests/helpers/
 * ycheck.h) shown, without a GPU, to pass what an engine summing in
 * another order writes and to fail each fault a kernel can make: an element
 * far off, one left unwritten, one NaN, one written outside its block, and
 * the faults that move every element by one rounding step only (a
 * truncating conversion, a one-ulp offset, a small scale), which the
 * per-element bound alone lets through. */
#include "tests/helpers/testrng.h"
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "kernels/zfmt.h"
#include "tests/helpers/ycheck.h"

#define N   48
#define K   256
#define M   4
#define OFF 5
#define LD  (N + 3)
#define CNT (OFF + M * LD + 7)

static uint16_t g_w[N * K], g_lo[N * K], g_x[M * K], g_ref[M * N];
static float g_sum[M * N]; /* the reference's fp32 sums, before rounding */
static pj_weights g_wt = {.fmt = PJ_FMT_BF16, .n = N, .k = K, .bf16 = g_w};
static const pjc_shape g_s = {.layer = 0, .n = N, .x_ld = K, .y_off = OFF, .y_ld = LD};

static void setup(void)
{
    uint64_t seed = 0x9c4ecc;
    for (size_t i = 0; i < N * K; i++) {
        g_w[i] = pj_f32_to_bf16((float)(0.05 * sm_normal(&seed)));
        g_lo[i] = 0;
    }
    for (size_t i = 0; i < M * K; i++)
        g_x[i] = pj_f32_to_bf16((float)sm_normal(&seed));
    ck_assert_int_eq(pj_ref_project(&g_wt, M, N, g_x, K, g_ref, N), 0);
    for (uint32_t i = 0; i < M; i++)
        for (uint32_t r = 0; r < N; r++) {
            float acc = 0;
            for (uint32_t k = 0; k < K; k++)
                acc += pj_bf16_to_f32(g_x[i * K + k]) * pj_bf16_to_f32(g_w[r * K + k]);
            g_sum[i * N + r] = acc;
        }
}

/* y's buffer: poison everywhere, the block from vals (M x N, stride N). */
static void place(uint16_t *Y, const uint16_t *vals)
{
    for (size_t e = 0; e < CNT; e++)
        Y[e] = PJC_POISON;
    for (uint32_t i = 0; i < M; i++)
        memcpy(Y + OFF + (size_t)i * LD, vals + (size_t)i * N, N * 2);
}

static int verify(const uint16_t *Y, const pj_weights *w, char *why)
{
    return pjy_verify(Y, CNT, &g_s, M, w, g_x, g_ref, NULL, why, 1024);
}

static uint16_t *block_element(uint16_t *Y, uint32_t i, uint32_t r)
{
    return Y + OFF + (size_t)i * LD + r;
}

START_TEST(passes_the_reference_and_other_orders)
{
    uint16_t Y[CNT], vals[M * N];
    char why[1024];
    double rel = -1;
    /* The reference's own fp32 sums round to the reference. */
    for (size_t e = 0; e < M * N; e++)
        ck_assert_uint_eq(pj_f32_to_bf16(g_sum[e]), g_ref[e]);
    place(Y, g_ref);
    ck_assert_msg(pjy_verify(Y, CNT, &g_s, M, &g_wt, g_x, g_ref, &rel, why, sizeof why) == 0, "%s",
                  why);
    ck_assert(rel == 0);
    /* Sums in decreasing k, and in 8 interleaved partial sums added last
     * (split K): what an engine may write. */
    for (int form = 0; form < 2; form++) {
        for (uint32_t i = 0; i < M; i++)
            for (uint32_t r = 0; r < N; r++) {
                float part[8] = {0}, acc = 0;
                for (uint32_t j = 0; j < K; j++) {
                    const uint32_t k = form ? j : K - 1 - j;
                    part[form ? k % 8 : 0] +=
                        pj_bf16_to_f32(g_x[i * K + k]) * pj_bf16_to_f32(g_w[r * K + k]);
                }
                for (int p = 0; p < 8; p++)
                    acc += part[p];
                vals[i * N + r] = pj_f32_to_bf16(acc);
            }
        place(Y, vals);
        ck_assert_msg(verify(Y, &g_wt, why) == 0, "order %d: %s", form, why);
    }
    /* Two elements a rounding step off: within both limits. */
    memcpy(vals, g_ref, sizeof vals);
    vals[3] ^= 1;
    vals[100] ^= 1;
    place(Y, vals);
    ck_assert_msg(verify(Y, &g_wt, why) == 0, "two ulps: %s", why);
}
END_TEST

/* The same weights as z12 and as split (lo 0): |W| decoded from each. */
START_TEST(passes_for_every_format)
{
    uint16_t Y[CNT];
    char why[1024];
    pj_z12 z;
    memset(&z, 0, sizeof z);
    ck_assert_int_eq(pj_z12_pack(g_w, N, K, K, &z, NULL, 0), 0);
    pj_weights wz = {.fmt = PJ_FMT_Z12, .n = N, .k = K, .z = &z};
    pj_weights ws = {.fmt = PJ_FMT_SPLIT, .n = N, .k = K, .hi = g_w, .lo = g_lo};
    place(Y, g_ref);
    ck_assert_msg(verify(Y, &wz, why) == 0, "z12: %s", why);
    ck_assert_msg(verify(Y, &ws, why) == 0, "split: %s", why);
    float a[K], b[K];
    for (uint32_t r = 0; r < N; r += 7) {
        ck_assert_int_eq(pjy_abs_w_row(&wz, r, a), 0);
        ck_assert_int_eq(pjy_abs_w_row(&g_wt, r, b), 0);
        ck_assert(memcmp(a, b, sizeof a) == 0);
    }
    pj_z12_free(&z);
    pj_weights bad = {.fmt = (pj_format)7, .n = N, .k = K};
    ck_assert_int_eq(verify(Y, &bad, why), -1);
    ck_assert_msg(strstr(why, "unknown weight format"), "%s", why);
}
END_TEST

/* One fault at a time, each with what the message must say. */
START_TEST(fails_each_fault)
{
    uint16_t Y[CNT];
    char why[1024];

    place(Y, g_ref);
    *block_element(Y, 2, 17) ^= 0x40; /* the high mantissa bit */
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, " 1 beyond the bound"), "%s", why);

    place(Y, g_ref);
    *block_element(Y, 3, N - 1) = PJC_POISON;
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, "1 unwritten"), "%s", why);
    char first[64];
    snprintf(first, sizeof first, "first bad element %d)", OFF + 3 * LD + N - 1);
    ck_assert_msg(strstr(why, first), "%s", why);

    place(Y, g_ref);
    *block_element(Y, 0, 0) = 0x7fc0;
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, "1 NaN"), "%s", why);

    place(Y, g_ref);
    *block_element(Y, 1, N) = g_ref[N]; /* in the stride's gap */
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, "1 written outside the block"), "%s", why);
    place(Y, g_ref);
    Y[CNT - 1] = 0; /* after the block */
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, "1 written outside the block"), "%s", why);

    /* A reference that is not finite passes nothing. */
    uint16_t saved = g_ref[5];
    g_ref[5] = 0x7f80; /* +inf */
    place(Y, g_ref);
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    ck_assert_msg(strstr(why, "1 with a reference not finite"), "%s", why);
    g_ref[5] = saved;

    /* A block wider than the layer. */
    pjc_shape wide = g_s;
    wide.n = N + 1;
    place(Y, g_ref);
    ck_assert_int_eq(pjy_verify(Y, CNT, &wide, M, &g_wt, g_x, g_ref, NULL, why, sizeof why), -1);
    ck_assert_msg(strstr(why, "past the layer's"), "%s", why);
}
END_TEST

/* Faults of one rounding step in many elements: each element within the
 * bound, the block not. */
START_TEST(fails_systematic_faults)
{
    uint16_t Y[CNT], vals[M * N];
    char why[1024];
    size_t moved;
    const char *names[3] = {"a truncating conversion", "one ulp up", "a scale of 1.003"};
    for (int f = 0; f < 3; f++) {
        moved = 0;
        for (size_t e = 0; e < M * N; e++) {
            float v = g_sum[e];
            uint32_t u;
            memcpy(&u, &v, sizeof u);
            vals[e] = f == 0   ? (uint16_t)(u >> 16)
                      : f == 1 ? (uint16_t)(g_ref[e] + 1)
                               : pj_f32_to_bf16(v * 1.003f);
            moved += vals[e] != g_ref[e];
        }
        place(Y, vals);
        ck_assert_msg(verify(Y, &g_wt, why) == -1, "%s (%zu of %d moved) passed", names[f], moved,
                      M * N);
        ck_assert_msg(strstr(why, " 0 beyond the bound") &&
                          strstr(why, "differ from the reference"),
                      "%s: %s", names[f], why);
    }
}
END_TEST

/* The passing verdicts are counted, for the suites' line on how near the
 * differ limit correct output comes; failing ones are not. */
START_TEST(counts_what_passing_blocks_differ_in)
{
    uint16_t Y[CNT], vals[M * N];
    char why[1024];
    pjy_seen s0, s;
    pjy_seen_get(&s0); /* CK_FORK=no runs the earlier tests in this process */
    place(Y, g_ref);
    ck_assert_int_eq(verify(Y, &g_wt, why), 0);
    memcpy(vals, g_ref, sizeof vals);
    vals[3] ^= 1;
    vals[100] ^= 1;
    vals[150] ^= 1;
    place(Y, vals);
    ck_assert_msg(verify(Y, &g_wt, why) == 0, "%s", why);
    vals[7] ^= 0x4000; /* far off: fails, not counted */
    place(Y, vals);
    ck_assert_int_eq(verify(Y, &g_wt, why), -1);
    pjy_seen_get(&s);
    ck_assert_uint_eq(s.blocks - s0.blocks, 2);
    ck_assert_uint_eq(s.judged - s0.judged, 2 * M * N);
    ck_assert_uint_eq(s.differ - s0.differ, 3);
    /* The worst share is at least this block's 3 of M x N. */
    ck_assert_uint_ge(s.worst_differ * (M * N), 3 * s.worst_judged);
    if (s0.blocks == 0)
        ck_assert(s.worst_differ == 3 && s.worst_judged == M * N);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ycheck");
    TCase *tc = tcase_create("ycheck");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, passes_the_reference_and_other_orders);
    tcase_add_test(tc, passes_for_every_format);
    tcase_add_test(tc, fails_each_fault);
    tcase_add_test(tc, fails_systematic_faults);
    tcase_add_test(tc, counts_what_passing_blocks_differ_in);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
