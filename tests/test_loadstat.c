/* test_loadstat.c — projload's statistics: bucket geometry, percentiles
 * against a sorted-array reference, m-sets, grouping and throughput, the
 * printed table and the JSON report holding the same figures. */
#include "tests/helpers/testrng.h"
#include <check.h>
#include <cjson/cJSON.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/loadstat.h"

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

/* ---- buckets -------------------------------------------------------------------- */

START_TEST(bucket_geometry)
{
    /* The ranges tile [0, 2^41) with no gap and no overlap. */
    uint64_t prev_hi = 0;
    for (size_t i = 0; i < PJ_LS_BUCKETS; i++) {
        uint64_t lo, hi;
        pj_ls_bucket_range(i, &lo, &hi);
        REQUIRE(lo <= hi, "bucket %zu: %llu > %llu", i, (unsigned long long)lo,
                (unsigned long long)hi);
        REQUIRE(i == 0 ? lo == 0 : lo == prev_hi + 1, "bucket %zu starts at %llu after %llu", i,
                (unsigned long long)lo, (unsigned long long)prev_hi);
        REQUIRE(pj_ls_bucket_of(lo) == i && pj_ls_bucket_of(hi) == i, "bucket %zu round trip", i);
        /* Width at most 1/128 of the bucket's start. */
        REQUIRE(hi - lo <= lo / 128, "bucket %zu too wide: %llu..%llu", i, (unsigned long long)lo,
                (unsigned long long)hi);
        prev_hi = hi;
    }
    ck_assert_uint_eq(prev_hi, (2ull << PJ_LS_MAX_LOG2) - 1);
    /* Beyond the top: clamped into the last bucket. */
    ck_assert_uint_eq(pj_ls_bucket_of(UINT64_MAX), PJ_LS_BUCKETS - 1);
    ck_assert_uint_eq(pj_ls_bucket_of(1ull << 50), PJ_LS_BUCKETS - 1);
    /* Exact region. */
    for (uint64_t v = 0; v < 256; v++)
        ck_assert_uint_eq(pj_ls_bucket_of(v), v);
}
END_TEST

START_TEST(sorted_reference)
{
    uint64_t v[100];
    for (int i = 0; i < 100; i++)
        v[i] = (uint64_t)i + 1;
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.0), 1);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.01), 1);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.5), 50);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.9), 90);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.99), 99);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 0.999), 100);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 100, 1.0), 100);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 3, 0.5), 2);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 1, 0.99), 1);
    ck_assert_uint_eq(pj_ls_quantile_sorted(v, 0, 0.5), 0);
}
END_TEST

/* Samples of several shapes; the histogram's quantile must lie within
 * 1/256 of the exact nearest-rank value, exactly at the ends. */
START_TEST(percentiles_vs_sorted)
{
    static const size_t sizes[] = {1, 2, 3, 10, 99, 1000, 12345, 200000};
    static const double qs[] = {0.0, 0.001, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0};
    uint64_t seed = 1234 + (uint64_t)_i;
    for (size_t si = 0; si < sizeof sizes / sizeof sizes[0]; si++) {
        size_t n = sizes[si];
        uint64_t *v = malloc(n * sizeof *v);
        ck_assert_ptr_nonnull(v);
        pj_ls_hist *h = malloc(sizeof *h);
        ck_assert_ptr_nonnull(h);
        pj_ls_hist_init(h);
        for (size_t i = 0; i < n; i++) {
            uint64_t r = sm_next(&seed);
            switch (_i) {
            case 0: /* small exact values */
                v[i] = r % 300;
                break;
            case 1: /* log-uniform over 1 ns .. 1 s */
                v[i] = (uint64_t)exp((double)(r >> 11) * 0x1p-53 * log(1e9));
                break;
            case 2: /* a tight mode plus a long tail, like real latencies */
                v[i] = 50000 + r % 2000 + ((r >> 40) % 100 == 0 ? (r >> 20) % 5000000 : 0);
                break;
            default: /* duplicates */
                v[i] = 1000 * (1 + r % 4);
                break;
            }
            pj_ls_hist_add(h, v[i]);
        }
        qsort(v, n, sizeof *v, cmp_u64);
        ck_assert_uint_eq(h->count, n);
        ck_assert_uint_eq(h->min, v[0]);
        ck_assert_uint_eq(h->max, v[n - 1]);
        for (size_t qi = 0; qi < sizeof qs / sizeof qs[0]; qi++) {
            uint64_t exact = pj_ls_quantile_sorted(v, n, qs[qi]);
            uint64_t got = pj_ls_hist_quantile(h, qs[qi]);
            uint64_t diff = got > exact ? got - exact : exact - got;
            REQUIRE(diff <= exact / 256, "dist %d n %zu q %g: hist %llu exact %llu", _i, n, qs[qi],
                    (unsigned long long)got, (unsigned long long)exact);
            if (exact < 256 || qs[qi] == 1.0 || qs[qi] == 0.0)
                REQUIRE(got == exact, "dist %d n %zu q %g: hist %llu exact %llu (must be exact)",
                        _i, n, qs[qi], (unsigned long long)got, (unsigned long long)exact);
        }
        double mean = 0;
        for (size_t i = 0; i < n; i++)
            mean += (double)v[i];
        mean /= (double)n;
        ck_assert_double_eq_tol(pj_ls_hist_mean(h), mean, mean * 1e-12 + 1e-9);
        free(v);
        free(h);
    }
}
END_TEST

START_TEST(hist_merge_and_empty)
{
    pj_ls_hist *a = malloc(sizeof *a), *b = malloc(sizeof *b), *c = malloc(sizeof *c);
    ck_assert_ptr_nonnull(a);
    ck_assert_ptr_nonnull(b);
    ck_assert_ptr_nonnull(c);
    pj_ls_hist_init(a);
    pj_ls_hist_init(b);
    pj_ls_hist_init(c);
    ck_assert_uint_eq(pj_ls_hist_quantile(a, 0.5), 0);
    ck_assert_double_eq(pj_ls_hist_mean(a), 0);
    uint64_t seed = 5;
    for (int i = 0; i < 5000; i++) {
        uint64_t x = sm_next(&seed) % 1000000;
        pj_ls_hist_add(i % 2 ? a : b, x);
        pj_ls_hist_add(c, x);
    }
    pj_ls_hist_merge(a, b);
    ck_assert_int_eq(memcmp(a, c, sizeof *a), 0);
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(cdf_output)
{
    pj_ls_hist *h = malloc(sizeof *h);
    ck_assert_ptr_nonnull(h);
    pj_ls_hist_init(h);
    for (uint64_t v = 1000; v < 200000; v += 37)
        pj_ls_hist_add(h, v);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    ck_assert_int_eq(pj_ls_hist_write_cdf(h, f, 1e3), 0);
    fclose(f);
    double px = -1, pf = 0, x = 0, fr = 0;
    int lines = 0;
    for (char *p = buf; p && *p;) {
        ck_assert_int_eq(sscanf(p, "%lf %lf", &x, &fr), 2);
        REQUIRE(x > px && fr > pf, "CDF not increasing at line %d", lines);
        px = x;
        pf = fr;
        lines++;
        p = strchr(p, '\n');
        p = p ? p + 1 : NULL;
    }
    ck_assert_int_gt(lines, 100);
    ck_assert_double_eq_tol(fr, 1.0, 1e-9);
    ck_assert_double_eq_tol(x, (double)h->max / 1e3, 1e-3);
    free(buf);
    free(h);
}
END_TEST

/* ---- m-sets --------------------------------------------------------------------------------- */

START_TEST(msets)
{
    pj_ls_msets s;
    static const uint32_t shapes[] = {256, 8, 1, 32, 16, 128, 8};
    pj_ls_msets_init(&s, shapes, 7, 256);
    ck_assert_uint_eq(s.n, 6);
    uint32_t lo, hi;
    char lab[32];
    static const struct {
        uint32_t m, lo, hi;
        const char *label;
    } want[] = {{1, 1, 1, "1"},
                {2, 2, 8, "2-8"},
                {8, 2, 8, "2-8"},
                {9, 9, 16, "9-16"},
                {17, 17, 32, "17-32"},
                {100, 33, 128, "33-128"},
                {256, 129, 256, "129-256"},
                {300, 257, 300, "257-300"}};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        pj_ls_mset_of(&s, want[i].m, &lo, &hi);
        ck_assert_uint_eq(lo, want[i].lo);
        ck_assert_uint_eq(hi, want[i].hi);
        pj_ls_mset_label(lo, hi, lab, sizeof lab);
        ck_assert_str_eq(lab, want[i].label);
    }
    /* max_m above the largest shape adds a set. */
    pj_ls_msets_init(&s, shapes, 7, 512);
    ck_assert_uint_eq(s.n, 7);
    pj_ls_mset_of(&s, 400, &lo, &hi);
    ck_assert_uint_eq(lo, 257);
    ck_assert_uint_eq(hi, 512);
    /* No shapes: powers of two up to max_m. */
    pj_ls_msets_init(&s, NULL, 0, 100);
    ck_assert_uint_eq(s.n, 8); /* 1 2 4 ... 64 128 */
    pj_ls_mset_of(&s, 100, &lo, &hi);
    ck_assert_uint_eq(lo, 65);
    ck_assert_uint_eq(hi, 128);
    pj_ls_mset_of(&s, 3, &lo, &hi);
    ck_assert_uint_eq(lo, 3);
    ck_assert_uint_eq(hi, 4);
}
END_TEST

/* ---- groups, table, JSON -----------------------------------------------------------------------
 */

/* Two shapes and three (layer, m-set) groups over one second, with two
 * errors and one mismatch; returns the group ids. */
static void fill(pj_loadstat *ls, int ids[5])
{
    ck_assert_int_eq(pj_loadstat_init(ls), 0);
    ids[0] = pj_loadstat_group(ls, PJ_LS_SHAPE, "o,router m=2-8", NULL, 0, 0);
    ids[1] = pj_loadstat_group(ls, PJ_LS_SHAPE, "o m=9-16", NULL, 0, 0);
    ids[2] = pj_loadstat_group(ls, PJ_LS_LAYER_M, "o m=2-8", "o", 2, 8);
    ids[3] = pj_loadstat_group(ls, PJ_LS_LAYER_M, "router m=2-8", "router", 2, 8);
    ids[4] = pj_loadstat_group(ls, PJ_LS_LAYER_M, "o m=9-16", "o", 9, 16);
    for (int i = 0; i < 5; i++)
        ck_assert_int_ge(ids[i], 1);
    /* Asking again returns the same id. */
    ck_assert_int_eq(pj_loadstat_group(ls, PJ_LS_SHAPE, "o m=9-16", NULL, 0, 0), ids[1]);
    ck_assert_int_ne(pj_loadstat_group(ls, PJ_LS_LAYER_M, "o m=9-16x", "o", 9, 16), ids[4]);

    const uint64_t t0 = 5000000000ull;
    for (int i = 0; i < 1000; i++) {
        pj_ls_sample s = {0};
        s.t_start_ns = t0 + (uint64_t)i * 999000;
        s.t_end_ns = s.t_start_ns + 10000 + (uint64_t)i * 10; /* 10.00 .. 19.99 µs */
        s.queue_ns = 1000;
        s.exec_ns = 5000 + (uint64_t)i;
        s.ok = !(i == 10 || i == 20);
        s.checked = i % 10 == 0;
        s.mismatch = i == 30;
        if (i % 2 == 0) {
            s.n_ops = 3; /* o, o, router */
            pj_ls_ref r[3] = {{(uint32_t)ids[0], 3}, {(uint32_t)ids[2], 2}, {(uint32_t)ids[3], 1}};
            pj_loadstat_record(ls, r, 3, &s);
        } else {
            s.n_ops = 1;
            pj_ls_ref r[2] = {{(uint32_t)ids[1], 1}, {(uint32_t)ids[4], 1}};
            pj_loadstat_record(ls, r, 2, &s);
        }
    }
}

START_TEST(groups_and_summary)
{
    pj_loadstat ls;
    int ids[5];
    fill(&ls, ids);
    /* Window: first start to last end = 999 * 0.999 ms + 19.99 µs. */
    double w = (999.0 * 999000 + 10000 + 9990) / 1e9;
    ck_assert_double_eq_tol(pj_loadstat_window_s(&ls), w, 1e-12);

    pj_ls_summary s;
    pj_loadstat_summary(&ls, 0, &s);
    ck_assert_uint_eq(s.count, 1000);
    ck_assert_uint_eq(s.errors, 2);
    ck_assert_uint_eq(s.ops, 500 * 3 + 500);
    ck_assert_uint_eq(s.checked, 100);
    ck_assert_uint_eq(s.mismatches, 1);
    /* Throughput counts only what succeeded: 998 requests (i = 10 and 20
     * failed, 3 ops each), 1994 ops. */
    ck_assert_double_eq_tol(s.req_per_s, 998 / w, 1e-6);
    ck_assert_double_eq_tol(s.ops_per_s, 1994 / w, 1e-6);
    /* Latencies 10.00..19.99 µs without the two errors (i = 10, 20). */
    ck_assert_double_eq_tol(s.min_us, 10.0, 1e-9);
    ck_assert_double_eq_tol(s.max_us, 19.99, 1e-9);
    ck_assert_double_eq_tol(s.p50_us, 15.01, 0.06);
    ck_assert_double_eq_tol(s.p99_us, 19.89, 0.08);
    ck_assert_double_eq_tol(s.queue_p50_us, 1.0, 1e-9);
    ck_assert_double_eq_tol(s.exec_p99_us, 5.99, 0.03);

    pj_loadstat_summary(&ls, (size_t)ids[0], &s);
    ck_assert_uint_eq(s.count, 500);
    ck_assert_uint_eq(s.ops, 1500);
    ck_assert_uint_eq(s.errors, 2); /* i = 10 and 20 are even */
    ck_assert_uint_eq(s.mismatches, 1);
    pj_loadstat_summary(&ls, (size_t)ids[2], &s);
    ck_assert_uint_eq(s.count, 500);
    ck_assert_uint_eq(s.ops, 1000);
    pj_loadstat_summary(&ls, (size_t)ids[3], &s);
    ck_assert_uint_eq(s.ops, 500);
    pj_loadstat_summary(&ls, (size_t)ids[4], &s);
    ck_assert_uint_eq(s.count, 500);
    ck_assert_uint_eq(s.errors, 0);
    ck_assert_double_eq_tol(s.min_us, 10.01, 1e-9);

    /* Checks finishing later land in the overall group and the refs. */
    pj_ls_ref r[2] = {{(uint32_t)ids[1], 1}, {(uint32_t)ids[4], 1}};
    pj_loadstat_record_check(&ls, r, 2, 1);
    pj_loadstat_record_check(&ls, r, 1, 0);
    pj_loadstat_summary(&ls, 0, &s);
    ck_assert_uint_eq(s.checked, 102);
    ck_assert_uint_eq(s.mismatches, 2);
    pj_loadstat_summary(&ls, (size_t)ids[1], &s);
    ck_assert_uint_eq(s.checked, 2); /* odd requests: none checked before */
    ck_assert_uint_eq(s.mismatches, 1);
    pj_loadstat_summary(&ls, (size_t)ids[4], &s);
    ck_assert_uint_eq(s.checked, 1);
    ck_assert_uint_eq(s.mismatches, 1);
    ck_assert_uint_eq(s.count, 500); /* a check is not a request */
    pj_loadstat_free(&ls);
}
END_TEST

static const cJSON *get(const cJSON *o, const char *k)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, k);
    ck_assert_msg(v != NULL, "JSON lacks \"%s\"", k);
    return v;
}

static double num(const cJSON *o, const char *k)
{
    const cJSON *v = get(o, k);
    ck_assert_msg(cJSON_IsNumber(v), "\"%s\" is not a number", k);
    return v->valuedouble;
}

/* The JSON of group id matches its summary. */
static void check_group_json(const pj_loadstat *ls, size_t id, const cJSON *g)
{
    pj_ls_summary s;
    pj_loadstat_summary(ls, id, &s);
    ck_assert_str_eq(get(g, "key")->valuestring, ls->g[id].key);
    ck_assert_double_eq(num(g, "count"), (double)s.count);
    ck_assert_double_eq(num(g, "errors"), (double)s.errors);
    ck_assert_double_eq(num(g, "ops"), (double)s.ops);
    ck_assert_double_eq(num(g, "checked"), (double)s.checked);
    ck_assert_double_eq(num(g, "mismatches"), (double)s.mismatches);
    ck_assert_double_eq_tol(num(g, "req_per_s"), s.req_per_s, 1e-9 * s.req_per_s);
    ck_assert_double_eq_tol(num(g, "ops_per_s"), s.ops_per_s, 1e-9 * s.ops_per_s);
    const cJSON *l = get(g, "latency_us");
    ck_assert_double_eq(num(l, "p50"), s.p50_us);
    ck_assert_double_eq(num(l, "p90"), s.p90_us);
    ck_assert_double_eq(num(l, "p99"), s.p99_us);
    ck_assert_double_eq(num(l, "p99_9"), s.p999_us);
    ck_assert_double_eq(num(l, "max"), s.max_us);
    ck_assert_double_eq(num(l, "min"), s.min_us);
    ck_assert_double_eq_tol(num(l, "mean"), s.mean_us, 1e-9);
    const cJSON *d = get(g, "daemon_us");
    ck_assert_double_eq(num(d, "queue_p50"), s.queue_p50_us);
    ck_assert_double_eq(num(d, "queue_p99"), s.queue_p99_us);
    ck_assert_double_eq(num(d, "exec_p50"), s.exec_p50_us);
    ck_assert_double_eq(num(d, "exec_p99"), s.exec_p99_us);
    if (ls->g[id].kind == PJ_LS_LAYER_M) {
        ck_assert_str_eq(get(g, "layer")->valuestring, ls->g[id].layer);
        ck_assert_double_eq(num(g, "m_lo"), ls->g[id].m_lo);
        ck_assert_double_eq(num(g, "m_hi"), ls->g[id].m_hi);
    }
}

START_TEST(json_report)
{
    pj_loadstat ls;
    int ids[5];
    fill(&ls, ids);
    cJSON *j = pj_loadstat_json(&ls);
    ck_assert_ptr_nonnull(j);
    /* Through text and back, as a reader of the file sees it. */
    char *text = cJSON_Print(j);
    ck_assert_ptr_nonnull(text);
    cJSON *r = cJSON_Parse(text);
    ck_assert_ptr_nonnull(r);
    ck_assert_double_eq_tol(num(r, "window_s"), pj_loadstat_window_s(&ls), 1e-12);
    check_group_json(&ls, 0, get(r, "overall"));
    const cJSON *shapes = get(r, "by_shape"), *lm = get(r, "by_layer_m");
    ck_assert(cJSON_IsArray(shapes) && cJSON_IsArray(lm));
    ck_assert_int_eq(cJSON_GetArraySize(shapes), 2);
    ck_assert_int_eq(cJSON_GetArraySize(lm), 3); /* the unused "o m=9-16x" is left out */
    check_group_json(&ls, (size_t)ids[0], cJSON_GetArrayItem(shapes, 0));
    check_group_json(&ls, (size_t)ids[1], cJSON_GetArrayItem(shapes, 1));
    check_group_json(&ls, (size_t)ids[2], cJSON_GetArrayItem(lm, 0));
    check_group_json(&ls, (size_t)ids[3], cJSON_GetArrayItem(lm, 1));
    check_group_json(&ls, (size_t)ids[4], cJSON_GetArrayItem(lm, 2));
    cJSON_Delete(r);
    cJSON_free(text);
    cJSON_Delete(j);
    pj_loadstat_free(&ls);
}
END_TEST

/* A run that measured nothing, and a group whose requests all failed:
 * their latencies are null in the JSON ("-" in the table), not 0, and no
 * throughput is claimed for failures. Histograms exist only for groups a
 * request reached. */
START_TEST(empty_groups_null)
{
    pj_loadstat ls;
    ck_assert_int_eq(pj_loadstat_init(&ls), 0);
    int a = pj_loadstat_group_add(&ls, PJ_LS_SHAPE, "o m=1", NULL, 0, 0);
    int b = pj_loadstat_group_add(&ls, PJ_LS_SHAPE, "o m=2-8", NULL, 0, 0);
    ck_assert_int_eq(a, 1);
    ck_assert_int_eq(b, 2);
    ck_assert_ptr_null(ls.g[a].lat);
    cJSON *j = pj_loadstat_json(&ls);
    ck_assert_ptr_nonnull(j);
    const cJSON *l = get(get(j, "overall"), "latency_us");
    ck_assert(cJSON_IsNull(get(l, "p50")));
    ck_assert(cJSON_IsNull(get(l, "p99")));
    ck_assert(cJSON_IsNull(get(l, "max")));
    ck_assert(cJSON_IsNull(get(get(get(j, "overall"), "daemon_us"), "exec_p50")));
    cJSON_Delete(j);

    /* Two failed requests in group a: counted, errors, no throughput, no
     * latency. */
    for (int i = 0; i < 2; i++) {
        pj_ls_sample s = {.t_start_ns = 1000 + (uint64_t)i * 1000000,
                          .t_end_ns = 2000 + (uint64_t)i * 1000000,
                          .n_ops = 1,
                          .ok = 0};
        pj_ls_ref r = {(uint32_t)a, 1};
        pj_loadstat_record(&ls, &r, 1, &s);
    }
    pj_ls_summary sm;
    pj_loadstat_summary(&ls, (size_t)a, &sm);
    ck_assert_uint_eq(sm.count, 2);
    ck_assert_uint_eq(sm.errors, 2);
    ck_assert_double_eq(sm.req_per_s, 0);
    ck_assert_double_eq(sm.ops_per_s, 0);
    ck_assert_ptr_null(ls.g[b].lat);
    j = pj_loadstat_json(&ls);
    ck_assert_ptr_nonnull(j);
    const cJSON *g = cJSON_GetArrayItem(get(j, "by_shape"), 0);
    ck_assert_ptr_nonnull(g);
    ck_assert_double_eq(num(g, "ok"), 0);
    ck_assert(cJSON_IsNull(get(get(g, "latency_us"), "p50")));
    cJSON_Delete(j);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pj_loadstat_print(&ls, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "0.0          -"));
    free(buf);
    pj_loadstat_free(&ls);
    pj_loadstat_free(&ls); /* a second free is harmless */
}
END_TEST

/* The table shows what the summary holds, with one decimal. */
START_TEST(table_output)
{
    pj_loadstat ls;
    int ids[5];
    fill(&ls, ids);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    pj_loadstat_print(&ls, f);
    fclose(f);
    ck_assert_ptr_nonnull(strstr(buf, "by (layer, m-set)"));
    ck_assert_ptr_nonnull(strstr(buf, "by request shape:"));
    ck_assert_ptr_nonnull(strstr(buf, "daemon side"));
    /* Find the overall row (the line after the "overall" heading + header). */
    char *p = strstr(buf, "\noverall:\n");
    ck_assert_ptr_nonnull(p);
    p = strchr(p + 10, '\n') + 1; /* skip the column header */
    char key[32];
    unsigned long long count, ops, errors;
    double rps, opss, mean, p50, p90, p99, p999, mx;
    ck_assert_int_eq(sscanf(p, "%31s %llu %llu %llu %lf %lf %lf %lf %lf %lf %lf %lf", key, &count,
                            &ops, &errors, &rps, &opss, &mean, &p50, &p90, &p99, &p999, &mx),
                     12);
    pj_ls_summary s;
    pj_loadstat_summary(&ls, 0, &s);
    ck_assert_str_eq(key, "all");
    ck_assert_uint_eq(count, s.count);
    ck_assert_uint_eq(ops, s.ops);
    ck_assert_uint_eq(errors, s.errors);
    ck_assert_double_eq_tol(rps, s.req_per_s, 0.051);
    ck_assert_double_eq_tol(p50, s.p50_us, 0.051);
    ck_assert_double_eq_tol(p999, s.p999_us, 0.051);
    ck_assert_double_eq_tol(mx, s.max_us, 0.051);
    /* A shape row is there under its full key. */
    ck_assert_ptr_nonnull(strstr(buf, "o,router m=2-8 "));
    free(buf);
    pj_loadstat_free(&ls);
}
END_TEST

typedef struct rec_arg {
    pj_loadstat *ls;
    int group;
} rec_arg;

static void *recorder(void *p)
{
    rec_arg *a = p;
    for (int i = 0; i < 20000; i++) {
        pj_ls_sample s = {
            .t_start_ns = 1000 + (uint64_t)i, .t_end_ns = 2000 + (uint64_t)i, .n_ops = 2, .ok = 1};
        pj_ls_ref r = {(uint32_t)a->group, 2};
        pj_loadstat_record(a->ls, &r, 1, &s);
    }
    return NULL;
}

START_TEST(threads_record)
{
    pj_loadstat ls;
    ck_assert_int_eq(pj_loadstat_init(&ls), 0);
    int g = pj_loadstat_group(&ls, PJ_LS_SHAPE, "x m=1", NULL, 0, 0);
    pthread_t th[4];
    rec_arg a = {&ls, g};
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(pthread_create(&th[i], NULL, recorder, &a), 0);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    ck_assert_uint_eq(ls.g[0].count, 80000);
    ck_assert_uint_eq(ls.g[0].ops, 160000);
    ck_assert_uint_eq(ls.g[g].count, 80000);
    ck_assert_uint_eq(ls.g[g].lat->count, 80000);
    uint64_t done, errs;
    double p50;
    pj_loadstat_progress(&ls, &done, &errs, &p50);
    ck_assert_uint_eq(done, 80000);
    ck_assert_uint_eq(errs, 0);
    ck_assert_double_eq_tol(p50, 1.0, 1e-9);
    pj_loadstat_free(&ls);
}
END_TEST

static Suite *loadstat_suite(void)
{
    Suite *s = suite_create("loadstat");
    TCase *tc = tcase_create("hist");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bucket_geometry);
    tcase_add_test(tc, sorted_reference);
    tcase_add_loop_test(tc, percentiles_vs_sorted, 0, 4);
    tcase_add_test(tc, hist_merge_and_empty);
    tcase_add_test(tc, cdf_output);
    tcase_add_test(tc, msets);
    suite_add_tcase(s, tc);
    tc = tcase_create("report");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, groups_and_summary);
    tcase_add_test(tc, json_report);
    tcase_add_test(tc, table_output);
    tcase_add_test(tc, threads_record);
    tcase_add_test(tc, empty_groups_null);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(loadstat_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
