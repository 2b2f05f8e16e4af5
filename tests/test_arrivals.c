/* test_arrivals.c — client/arrivals.c: projload's open-loop due times. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "client/arrivals.h"

/* --rate R: request i is due at i / R exactly, whatever the seed. */
START_TEST(even_rate_is_exact)
{
    pj_arrivals a;
    pj_arrivals_init(&a, 7, 250.0, 0);
    for (int i = 0; i < 1000; i++)
        ck_assert_double_eq(pj_arrivals_next(&a), (double)i / 250.0);
}
END_TEST

/* --poisson R: the first is due at 0, times never go back, the mean gap
 * is 1/R and the gaps' spread is an exponential's (sd = mean), over
 * 200000 gaps; the same seed gives the same times. */
START_TEST(poisson_gaps_have_the_asked_mean)
{
    enum { N = 200000 };
    pj_arrivals a, b;
    pj_arrivals_init(&a, 1, 100.0, 1);
    pj_arrivals_init(&b, 1, 100.0, 1);
    double prev = pj_arrivals_next(&a), sum = 0, sum2 = 0;
    ck_assert_double_eq(prev, 0.0);
    ck_assert_double_eq(pj_arrivals_next(&b), 0.0);
    for (int i = 1; i < N; i++) {
        double t = pj_arrivals_next(&a);
        ck_assert_double_eq(t, pj_arrivals_next(&b));
        ck_assert(t >= prev);
        sum += t - prev;
        sum2 += (t - prev) * (t - prev);
        prev = t;
    }
    const double mean = sum / (N - 1), sd = sqrt(sum2 / (N - 1) - mean * mean);
    ck_assert_msg(fabs(mean - 0.01) < 0.0001, "mean gap %.6f s, 0.01 asked", mean);
    ck_assert_msg(fabs(sd - 0.01) < 0.0002, "gaps' sd %.6f s, an exponential's 0.01", sd);
}
END_TEST

/* Nearby seeds give unrelated gaps: no gap among seed j's first 64 is
 * any of seed k's first 4096 (bit for bit). Seeded at seed ^ constant and
 * counting up, seeds 1..8 had started a few steps apart on one counter,
 * and their gaps were one sequence shifted. */
START_TEST(nearby_seeds_are_unrelated)
{
    enum { SEEDS = 8, LONG = 4096, SHORT = 64 };
    static double gaps[SEEDS][LONG];
    for (int s = 0; s < SEEDS; s++) {
        pj_arrivals a;
        pj_arrivals_init(&a, (uint64_t)s + 1, 1000.0, 1);
        double prev = pj_arrivals_next(&a);
        for (int i = 0; i < LONG; i++) {
            double t = pj_arrivals_next(&a);
            gaps[s][i] = t - prev;
            prev = t;
        }
    }
    int same = 0, sj = 0, si = 0, sk = 0, sn = 0;
    for (int j = 0; j < SEEDS; j++)
        for (int k = 0; k < SEEDS; k++)
            for (int i = 0; j != k && i < SHORT; i++)
                for (int n = 0; n < LONG; n++)
                    if (gaps[j][i] == gaps[k][n] && !same++) {
                        sj = j, si = i, sk = k, sn = n;
                    }
    ck_assert_msg(!same, "%d gaps shared, the first: seed %d's gap %d is seed %d's gap %d", same,
                  sj + 1, si, sk + 1, sn);
}
END_TEST

/* The mixer: nearby inputs, far outputs (about half of the 64 bits
 * differ between x and x + 1). */
START_TEST(splitmix_spreads_neighbours)
{
    for (uint64_t x = 0; x < 1000; x++) {
        int bits = __builtin_popcountll(pj_splitmix64(x) ^ pj_splitmix64(x + 1));
        ck_assert_msg(bits >= 12 && bits <= 52, "x = %llu: %d bits differ", (unsigned long long)x,
                      bits);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("arrivals");
    TCase *tc = tcase_create("arrivals");
    tcase_add_test(tc, even_rate_is_exact);
    tcase_add_test(tc, poisson_gaps_have_the_asked_mean);
    tcase_add_test(tc, nearby_seeds_are_unrelated);
    tcase_add_test(tc, splitmix_spreads_neighbours);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
