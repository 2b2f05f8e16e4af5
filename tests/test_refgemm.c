/* test_refgemm.c — the CPU reference projection: bit-exact against a naive
 * fp32 loop that is the numerical definition, close to a double-precision
 * sum, Z12 == BF16, SPLIT, row ranges, strides and argument errors. */
#include "tests/helpers/testrng.h"
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "kernels/zfmt.h"

/* ck_assert* records every passing check (a write to the parent process in
 * fork mode), which dominates loops over millions of elements; REQUIRE only
 * acts on failure. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

#define POISON 0x7fa5 /* a NaN: no finite computation writes it */

static void *xalloc(size_t bytes)
{
    void *p = malloc(bytes ? bytes : 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* fp32 weights like a trained layer (log-normal row scales, outliers, zeros). */
static float *make_weights_f32(uint32_t n, uint32_t k, uint64_t seed)
{
    float *w = xalloc((size_t)n * k * sizeof *w);
    uint64_t s = seed;
    for (uint32_t r = 0; r < n; r++) {
        double scale = 0.02 * exp(0.5 * sm_normal(&s));
        for (uint32_t c = 0; c < k; c++) {
            double u = sm_unit(&s), v = scale * sm_normal(&s);
            w[(size_t)r * k + c] = u < 1e-3 ? 0.0f : (float)(u < 2e-3 ? v * 100 : v);
        }
    }
    return w;
}

static uint16_t *to_bf16(const float *f, size_t count)
{
    uint16_t *b = xalloc(count * sizeof *b);
    for (size_t i = 0; i < count; i++)
        b[i] = pj_f32_to_bf16(f[i]);
    return b;
}

/* Tokens, m x ldx, with NaN in the stride gap (it must never be read). */
static uint16_t *make_x(uint32_t m, uint32_t k, size_t ldx, uint64_t seed)
{
    uint16_t *x = xalloc((size_t)m * ldx * sizeof *x + 2);
    uint64_t s = seed;
    for (uint32_t i = 0; i < m; i++)
        for (size_t c = 0; c < ldx; c++)
            x[(size_t)i * ldx + c] = c < k ? pj_f32_to_bf16((float)sm_normal(&s)) : 0x7fc0;
    return x;
}

static uint16_t *make_y(uint32_t m, size_t ldy)
{
    uint16_t *y = xalloc((size_t)m * ldy * sizeof *y + 2);
    for (size_t i = 0; i < (size_t)m * ldy; i++)
        y[i] = POISON;
    return y;
}

/* The definition, written as plainly as possible: one fp32 sum per output,
 * increasing k, split adds hi then lo. */
static void naive_f32(const uint16_t *wb, const uint16_t *lo, uint32_t m, uint32_t n, uint32_t k,
                      const uint16_t *x, size_t ldx, uint16_t *y, size_t ldy)
{
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t r = 0; r < n; r++) {
            float acc = 0.0f;
            for (uint32_t c = 0; c < k; c++) {
                float xv = pj_bf16_to_f32(x[(size_t)i * ldx + c]);
                acc += xv * pj_bf16_to_f32(wb[(size_t)r * k + c]);
                if (lo)
                    acc += xv * pj_bf16_to_f32(lo[(size_t)r * k + c]);
            }
            y[(size_t)i * ldy + r] = pj_f32_to_bf16(acc);
        }
}

/* |y - sum in double| against the classic bound for a recursive fp32 sum of
 * `terms` products plus the bf16 rounding of the result; plus the split
 * error (2^-16 relative) when wf are the fp32 originals of a split. */
static void check_vs_double(const float *wf, uint32_t m, uint32_t n, uint32_t k, const uint16_t *x,
                            size_t ldx, const uint16_t *y, size_t ldy, int terms_per_k,
                            double split_rel)
{
    double num = 0, den = 0;
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t r = 0; r < n; r++) {
            double sum = 0, abs_sum = 0;
            for (uint32_t c = 0; c < k; c++) {
                double p = (double)pj_bf16_to_f32(x[(size_t)i * ldx + c]) * wf[(size_t)r * k + c];
                sum += p;
                abs_sum += fabs(p);
            }
            double e_acc = 1.01 * terms_per_k * k * 0x1p-24 * abs_sum + split_rel * abs_sum;
            double tol = e_acc + 0x1p-8 * (fabs(sum) + e_acc) + 0x1p-133;
            double got = pj_bf16_to_f32(y[(size_t)i * ldy + r]);
            REQUIRE(fabs(got - sum) <= tol, "y[%u, %u] = %a, double sum %a, tol %a", i, r, got, sum,
                    tol);
            num += (got - sum) * (got - sum);
            den += sum * sum;
        }
    if (den > 0)
        REQUIRE(sqrt(num / den) < 0x1p-7, "relative error %g", sqrt(num / den));
}

static void assert_same(const uint16_t *a, const uint16_t *b, uint32_t m, uint32_t n, size_t ldy,
                        const char *what)
{
    for (uint32_t i = 0; i < m; i++)
        for (size_t r = 0; r < ldy; r++)
            REQUIRE(a[(size_t)i * ldy + r] == b[(size_t)i * ldy + r],
                    "%s: y[%u, %zu] 0x%04x != 0x%04x (n=%u)", what, i, r, a[(size_t)i * ldy + r],
                    b[(size_t)i * ldy + r], n);
}

static const uint32_t ms[] = {1, 2, 3, 5, 17};
static const uint32_t ns[] = {1, 7, 16, 33, 100};

/* BF16 (any k) and Z12 (k % 64 == 0): bit-exact against the naive loop,
 * Z12 identical to BF16, within bounds of the double sum, and nothing
 * written beyond column n. */
START_TEST(test_bf16_and_z12)
{
    const uint32_t ks[] = {1, 37, 64, 128, 320};
    uint64_t seed = 1;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
                uint32_t m = ms[a], n = ns[b], k = ks[c];
                size_t ldx = k + (seed % 3), ldy = n + 3;
                float *wf = make_weights_f32(n, k, ++seed);
                uint16_t *wb = to_bf16(wf, (size_t)n * k);
                for (size_t i = 0; i < (size_t)n * k; i++)
                    wf[i] = pj_bf16_to_f32(wb[i]);
                uint16_t *x = make_x(m, k, ldx, ++seed);
                uint16_t *y = make_y(m, ldy), *yn = make_y(m, ldy);
                pj_weights w = {.fmt = PJ_FMT_BF16, .n = n, .k = k, .bf16 = wb};
                ck_assert_int_eq(pj_ref_project(&w, m, n, x, ldx, y, ldy), 0);
                naive_f32(wb, NULL, m, n, k, x, ldx, yn, ldy);
                assert_same(y, yn, m, n, ldy, "bf16 vs naive");
                check_vs_double(wf, m, n, k, x, ldx, y, ldy, 1, 0);
                if (k % 64 == 0) {
                    pj_z12 z;
                    char err[200];
                    ck_assert_int_eq(pj_z12_pack(wb, n, k, k, &z, err, sizeof err), 0);
                    pj_weights wz = {.fmt = PJ_FMT_Z12, .n = n, .k = k, .z = &z};
                    uint16_t *yz = make_y(m, ldy);
                    ck_assert_int_eq(pj_ref_project(&wz, m, n, x, ldx, yz, ldy), 0);
                    assert_same(yz, y, m, n, ldy, "z12 vs bf16");
                    free(yz);
                    pj_z12_free(&z);
                }
                free(wf);
                free(wb);
                free(x);
                free(y);
                free(yn);
            }
}
END_TEST

/* Weights from every exponent (zeros, subnormals, huge values): Z12 still
 * equals BF16 bit for bit, whatever the sums do (including inf and NaN). */
START_TEST(test_z12_adversarial)
{
    uint32_t m = 3, n = 40, k = 256;
    uint64_t s = 9;
    uint16_t *wb = xalloc((size_t)n * k * 2);
    for (size_t i = 0; i < (size_t)n * k; i++) {
        uint16_t v;
        do {
            v = (uint16_t)sm_next(&s);
        } while ((v & 0x7f80u) == 0x7f80u);
        /* Half the rows ordinary, half anything. */
        wb[i] = (i / k) % 2 ? v : (uint16_t)((v & 0x80ffu) | 0x3c00u);
    }
    uint16_t *x = make_x(m, k, k, 10);
    uint16_t *y = make_y(m, n), *yz = make_y(m, n), *yn = make_y(m, n);
    pj_z12 z;
    char err[200];
    ck_assert_int_eq(pj_z12_pack(wb, n, k, k, &z, err, sizeof err), 0);
    pj_weights w = {.fmt = PJ_FMT_BF16, .n = n, .k = k, .bf16 = wb};
    pj_weights wz = {.fmt = PJ_FMT_Z12, .n = n, .k = k, .z = &z};
    ck_assert_int_eq(pj_ref_project(&w, m, n, x, k, y, n), 0);
    ck_assert_int_eq(pj_ref_project(&wz, m, n, x, k, yz, n), 0);
    naive_f32(wb, NULL, m, n, k, x, k, yn, n);
    assert_same(yz, y, m, n, n, "z12 vs bf16");
    /* Rows of finite sums agree with the naive loop bit for bit. */
    for (uint32_t i = 0; i < m; i++)
        for (uint32_t r = 0; r < n; r++) {
            uint16_t v = y[i * n + r];
            if ((v & 0x7f80u) != 0x7f80u)
                ck_assert_uint_eq(v, yn[i * n + r]);
        }
    pj_z12_free(&z);
    free(wb);
    free(x);
    free(y);
    free(yz);
    free(yn);
}
END_TEST

START_TEST(test_split)
{
    const uint32_t ks[] = {1, 64, 100, 320};
    uint64_t seed = 100;
    for (size_t a = 0; a < 5; a++)
        for (size_t b = 0; b < 5; b++)
            for (size_t c = 0; c < sizeof ks / sizeof ks[0]; c++) {
                uint32_t m = ms[a], n = ns[b], k = ks[c];
                float *wf = make_weights_f32(n, k, ++seed);
                uint16_t *hi = xalloc((size_t)n * k * 2), *lo = xalloc((size_t)n * k * 2);
                pj_split_f32(wf, (size_t)n * k, hi, lo);
                uint16_t *x = make_x(m, k, k, ++seed);
                uint16_t *y = make_y(m, n + 1), *yn = make_y(m, n + 1);
                pj_weights w = {.fmt = PJ_FMT_SPLIT, .n = n, .k = k, .hi = hi, .lo = lo};
                ck_assert_int_eq(pj_ref_project(&w, m, n, x, k, y, n + 1), 0);
                naive_f32(hi, lo, m, n, k, x, k, yn, n + 1);
                assert_same(y, yn, m, n, n + 1, "split vs naive");
                check_vs_double(wf, m, n, k, x, k, y, n + 1, 2, 0x1p-16);
                free(wf);
                free(hi);
                free(lo);
                free(x);
                free(y);
                free(yn);
            }
}
END_TEST

/* Any partition of [0, n) into row ranges gives the whole result, and a
 * call writes only its own columns. */
START_TEST(test_row_ranges)
{
    uint32_t m = 4, n = 70, k = 192;
    float *wf = make_weights_f32(n, k, 77);
    uint16_t *wb = to_bf16(wf, (size_t)n * k);
    uint16_t *hi = xalloc((size_t)n * k * 2), *lo = xalloc((size_t)n * k * 2);
    pj_split_f32(wf, (size_t)n * k, hi, lo);
    pj_z12 z;
    char err[200];
    ck_assert_int_eq(pj_z12_pack(wb, n, k, k, &z, err, sizeof err), 0);
    pj_weights ws[3] = {
        {.fmt = PJ_FMT_BF16, .n = n, .k = k, .bf16 = wb},
        {.fmt = PJ_FMT_Z12, .n = n, .k = k, .z = &z},
        {.fmt = PJ_FMT_SPLIT, .n = n, .k = k, .hi = hi, .lo = lo},
    };
    uint16_t *x = make_x(m, k, k, 78);
    float *scratch = xalloc(pj_ref_scratch_floats(m, k) * sizeof(float));
    uint64_t s = 79;
    for (int f = 0; f < 3; f++) {
        uint16_t *whole = make_y(m, n);
        ck_assert_int_eq(pj_ref_project(&ws[f], m, n, x, k, whole, n), 0);
        for (int trial = 0; trial < 20; trial++) {
            uint16_t *parts = make_y(m, n);
            for (uint32_t r0 = 0; r0 < n;) {
                uint32_t len = 1 + (uint32_t)(sm_next(&s) % 40);
                uint32_t r1 = r0 + len > n ? n : r0 + len;
                uint16_t *one = make_y(m, n);
                float *sc = trial % 2 ? scratch : NULL;
                ck_assert_int_eq(pj_ref_project_rows(&ws[f], m, r0, r1, x, k, one, n, sc), 0);
                for (uint32_t i = 0; i < m; i++)
                    for (uint32_t r = 0; r < n; r++) {
                        uint16_t v = one[i * n + r];
                        if (r < r0 || r >= r1)
                            REQUIRE(v == POISON, "%s [%u, %u): column %u written",
                                    pj_format_name(ws[f].fmt), r0, r1, r);
                        else
                            parts[i * n + r] = v;
                    }
                /* The same range again, into the shared buffer. */
                ck_assert_int_eq(pj_ref_project_rows(&ws[f], m, r0, r1, x, k, parts, n, sc), 0);
                free(one);
                r0 = r1;
            }
            assert_same(parts, whole, m, n, n, pj_format_name(ws[f].fmt));
            free(parts);
        }
        /* An empty range and m = 0 write nothing. */
        uint16_t *none = make_y(m, n);
        ck_assert_int_eq(pj_ref_project_rows(&ws[f], m, 5, 5, x, k, none, n, NULL), 0);
        ck_assert_int_eq(pj_ref_project_rows(&ws[f], 0, 0, n, x, k, none, n, NULL), 0);
        for (uint32_t i = 0; i < m * n; i++)
            ck_assert_uint_eq(none[i], POISON);
        free(none);
        free(whole);
    }
    pj_z12_free(&z);
    free(scratch);
    free(x);
    free(wf);
    free(wb);
    free(hi);
    free(lo);
}
END_TEST

START_TEST(test_errors)
{
    uint32_t n = 20, k = 64;
    uint16_t *wb = xalloc((size_t)n * k * 2);
    for (uint32_t i = 0; i < n * k; i++)
        wb[i] = 0x3f80;
    uint16_t *x = make_x(2, k, k, 1), *y = make_y(2, n);
    pj_weights w = {.fmt = PJ_FMT_BF16, .n = n, .k = k, .bf16 = wb};
    ck_assert_int_eq(pj_ref_project_rows(&w, 2, 0, n + 1, x, k, y, n + 1, NULL), -EINVAL);
    ck_assert_int_eq(pj_ref_project_rows(&w, 2, 5, 4, x, k, y, n, NULL), -EINVAL);
    ck_assert_int_eq(pj_ref_project_rows(&w, 2, 0, n, x, k - 1, y, n, NULL), -EINVAL);
    ck_assert_int_eq(pj_ref_project_rows(&w, 2, 0, n, x, k, y, n - 1, NULL), -EINVAL);
    ck_assert_int_eq(pj_ref_project_rows(NULL, 2, 0, n, x, k, y, n, NULL), -EINVAL);
    ck_assert_int_eq(pj_ref_project(&w, 2, n + 1, x, k, y, n + 1), -EINVAL);
    pj_weights bad = w;
    bad.fmt = (pj_format)7;
    ck_assert_int_eq(pj_ref_project(&bad, 2, n, x, k, y, n), -EINVAL);
    bad = w;
    bad.bf16 = NULL;
    ck_assert_int_eq(pj_ref_project(&bad, 2, n, x, k, y, n), -EINVAL);
    pj_weights sp = {.fmt = PJ_FMT_SPLIT, .n = n, .k = k, .hi = wb};
    ck_assert_int_eq(pj_ref_project(&sp, 2, n, x, k, y, n), -EINVAL);
    pj_z12 z;
    char err[200];
    ck_assert_int_eq(pj_z12_pack(wb, n - 1, k, k, &z, err, sizeof err), 0);
    pj_weights wz = {.fmt = PJ_FMT_Z12, .n = n, .k = k, .z = &z}; /* z holds n - 1 rows */
    ck_assert_int_eq(pj_ref_project(&wz, 2, n, x, k, y, n), -EINVAL);
    wz.z = NULL;
    ck_assert_int_eq(pj_ref_project(&wz, 2, n, x, k, y, n), -EINVAL);
    for (uint32_t i = 0; i < 2 * n; i++)
        ck_assert_uint_eq(y[i], POISON);
    /* The same calls with good arguments succeed. */
    uint16_t *yn = make_y(2, n);
    ck_assert_int_eq(pj_ref_project(&w, 2, n, x, k, y, n), 0);
    naive_f32(wb, NULL, 2, n, k, x, k, yn, n);
    assert_same(y, yn, 2, n, n, "all-ones weights");
    free(yn);
    ck_assert_str_eq(pj_format_name(PJ_FMT_BF16), "bf16");
    ck_assert_str_eq(pj_format_name(PJ_FMT_Z12), "z12");
    ck_assert_str_eq(pj_format_name(PJ_FMT_SPLIT), "split");
    ck_assert_str_eq(pj_format_name((pj_format)9), "unknown");
    pj_z12_free(&z);
    free(wb);
    free(x);
    free(y);
}
END_TEST

/* Exact small cases worked by hand. */
START_TEST(test_known_values)
{
    enum { K = 64 };
    uint16_t wb[2 * K], x[K], y[2];
    for (int c = 0; c < K; c++) {
        wb[c] = 0x3f80;                        /* 1 */
        wb[K + c] = c % 2 ? 0xbf80 : 0x4000;   /* -1, 2 alternating */
        x[c] = pj_f32_to_bf16((float)(c + 1)); /* 1..64 */
    }
    pj_weights w = {.fmt = PJ_FMT_BF16, .n = 2, .k = K, .bf16 = wb};
    ck_assert_int_eq(pj_ref_project(&w, 1, 2, x, K, y, 2), 0);
    ck_assert_uint_eq(y[0], pj_f32_to_bf16(2080.0f)); /* 64 * 65 / 2 */
    /* sum 2 * (odd c+1: 1, 3, ..., 63) - (even: 2, ..., 64) = 2048 - 1056 */
    ck_assert_uint_eq(y[1], pj_f32_to_bf16(992.0f));
    /* Order matters and is increasing k: 2^24, then 62 ones (each absorbed:
     * 2^24 + 1 ties to 2^24), then -2^24 gives exactly 0; any other order
     * (reversed, pairwise, blocked) keeps some of the ones. */
    uint16_t wk[K], xk[K], yk;
    for (int c = 0; c < K; c++) {
        wk[c] = 0x3f80;
        xk[c] = c == 0 ? 0x4b80 : c == K - 1 ? 0xcb80 : 0x3f80;
    }
    pj_weights w1 = {.fmt = PJ_FMT_BF16, .n = 1, .k = K, .bf16 = wk};
    ck_assert_int_eq(pj_ref_project(&w1, 1, 1, xk, K, &yk, 1), 0);
    ck_assert_uint_eq(yk, 0x0000);
}
END_TEST

static Suite *refgemm_suite(void)
{
    Suite *s = suite_create("refgemm");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_bf16_and_z12);
    tcase_add_test(tc, test_z12_adversarial);
    tcase_add_test(tc, test_split);
    tcase_add_test(tc, test_row_ranges);
    tcase_add_test(tc, test_errors);
    tcase_add_test(tc, test_known_values);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(refgemm_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
