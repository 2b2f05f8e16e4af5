/* test_rowclass.c — a layer's row classes (daemon/rowclass.h): the config's
 * graph_rows merged with the rows its table entries were timed on, each
 * value once, below max_n, the smallest kept; and the class that serves a
 * request of n rows. The cuda backend captures graphs at these (section G
 * of tests/gpu/test_cuda_backend.c runs them on a GPU). */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "daemon/rowclass.h"

/* The set as "n/total/from_table:a,b,c". */
static const char *show(const pj_rowclass_set *s)
{
    static char b[160];
    int at = snprintf(b, sizeof b, "%u/%u/%u:", s->n, s->total, s->from_table);
    for (uint32_t i = 0; i < s->n; i++)
        at += snprintf(b + at, sizeof b - (size_t)at, "%s%u", i ? "," : "", s->rows[i]);
    return b;
}

static void parse(const char *js, pj_tune_table *t)
{
    char err[256];
    int n = pj_tune_parse(js, strlen(js), t, NULL, NULL, NULL, NULL, err, sizeof err);
    ck_assert_msg(n >= 0, "%s", err);
}

/* An entry of layer "u" (8192 x 4096) at m timed on rows (0: not said). */
#define ENTRY(m, rows)                                                                             \
    "{\"layer\":\"u\",\"n\":8192,\"k\":4096,\"rows\":" #rows ",\"m\":" #m ",\"engine\":"           \
                                                                          "\"cublas\"}"

START_TEST(config_and_table_merged)
{
    static pj_tune_table t;
    parse("{\"entries\":[" ENTRY(1, 1024) "," ENTRY(8, 1024) "," ENTRY(16, 512) "," ENTRY(
              32, 0) "," ENTRY(64, 8192) "]}",
          &t);
    pj_rowclass_set s;
    /* the table alone: 512 and 1024 (8192 is max_n's own; 0 says nothing) */
    pj_rowclass_make(&t, "u", 8192, 4096, 8192, NULL, 0, &s);
    ck_assert_str_eq(show(&s), "2/2/2:512,1024");
    /* with the config's: 1024 from both counts once, as the config's */
    const uint32_t cfg[] = {100, 1024, 4096};
    pj_rowclass_make(&t, "u", 8192, 4096, 8192, cfg, 3, &s);
    ck_assert_str_eq(show(&s), "4/4/1:100,512,1024,4096");
    /* below a smaller max_n only: 1024 and 4096 are not below 1024 */
    pj_rowclass_make(&t, "u", 8192, 4096, 1024, cfg, 2, &s);
    ck_assert_str_eq(show(&s), "2/2/1:100,512");
    /* a config value equal to max_n is max_n's own graphs */
    const uint32_t at_max[] = {256, 2048};
    pj_rowclass_make(&t, "u", 8192, 4096, 2048, at_max, 2, &s);
    ck_assert_str_eq(show(&s), "3/3/2:256,512,1024");
    /* another layer's name, another shape, or no table: the config's only */
    pj_rowclass_make(&t, "v", 8192, 4096, 8192, cfg, 3, &s);
    ck_assert_str_eq(show(&s), "3/3/0:100,1024,4096");
    pj_rowclass_make(&t, "u", 4096, 4096, 4096, NULL, 0, &s);
    ck_assert_str_eq(show(&s), "0/0/0:");
    pj_rowclass_make(NULL, "u", 8192, 4096, 8192, cfg, 1, &s);
    ck_assert_str_eq(show(&s), "1/1/0:100");
}
END_TEST

START_TEST(the_smallest_kept)
{
    /* twelve values from the table and four from the config: 16 in all */
    char js[4096];
    int at = snprintf(js, sizeof js, "{\"entries\":[");
    for (int i = 12; i >= 1; i--)
        at += snprintf(js + at, sizeof js - (size_t)at,
                       "%s{\"layer\":\"u\",\"n\":8192,\"k\":4096,\"rows\":%d,\"m\":%d,"
                       "\"engine\":\"cublas\"}",
                       i == 12 ? "" : ",", i * 100, i);
    snprintf(js + at, sizeof js - (size_t)at, "]}");
    static pj_tune_table t;
    parse(js, &t);
    pj_rowclass_set s;
    const uint32_t cfg[] = {50, 150, 250, 5000};
    pj_rowclass_make(&t, "u", 8192, 4096, 8192, cfg, 4, &s);
    ck_assert_str_eq(show(&s), "8/16/5:50,100,150,200,250,300,400,500");
}
END_TEST

START_TEST(pick)
{
    pj_rowclass_set s = {.n = 3, .rows = {128, 300, 1024}};
    ck_assert_int_eq(pj_rowclass_pick(&s, 1), 0);
    ck_assert_int_eq(pj_rowclass_pick(&s, 128), 0);
    ck_assert_int_eq(pj_rowclass_pick(&s, 129), 1);
    ck_assert_int_eq(pj_rowclass_pick(&s, 300), 1);
    ck_assert_int_eq(pj_rowclass_pick(&s, 1000), 2);
    ck_assert_int_eq(pj_rowclass_pick(&s, 1024), 2);
    ck_assert_int_eq(pj_rowclass_pick(&s, 1025), -1); /* max_n's graphs */
    pj_rowclass_set none = {0};
    ck_assert_int_eq(pj_rowclass_pick(&none, 1), -1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("rowclass");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, config_and_table_merged);
    tcase_add_test(tc, the_smallest_kept);
    tcase_add_test(tc, pick);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
