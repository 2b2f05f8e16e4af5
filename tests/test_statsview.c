/* test_statsview.c — `projctl stats`'s shortening of a STATS document:
 * each long list summarized, short ones and everything else left as they
 * were, and the account of what was left out. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "client/statsview.h"

/* A STATS-shaped document of n layers; layers with i % 7 == 3 have served
 * ops; engines rows for m in {1, 16} alternate gemvz and cublas, and every
 * 5th layer's m = 16 row is splitk. */
static cJSON *doc_of(int n)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "version", "0.3.0");
    cJSON *model = cJSON_AddObjectToObject(d, "model");
    cJSON_AddStringToObject(model, "path", "/m.safetensors");
    cJSON *ml = cJSON_AddArrayToObject(model, "layers");
    cJSON *ls = cJSON_AddObjectToObject(d, "layers");
    cJSON *bs = cJSON_AddObjectToObject(d, "backend_stats");
    cJSON_AddNumberToObject(bs, "lanes", 4);
    cJSON *eng = cJSON_AddArrayToObject(bs, "engines");
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "l%d", i);
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", name);
        cJSON_AddItemToArray(ml, e);
        cJSON *c = cJSON_AddObjectToObject(ls, name);
        cJSON_AddNumberToObject(c, "ops", i % 7 == 3 ? i : 0);
        cJSON_AddNumberToObject(c, "rows", i % 7 == 3 ? 2 * i : 0);
        for (int m = 0; m < 2; m++) {
            cJSON *r = cJSON_CreateObject();
            cJSON_AddStringToObject(r, "layer", name);
            cJSON_AddNumberToObject(r, "m", m ? 16 : 1);
            cJSON_AddStringToObject(r, "engine", m == 0 ? "gemvz" : i % 5 ? "cublas" : "splitk");
            cJSON_AddItemToArray(eng, r);
        }
    }
    cJSON_AddNumberToObject(d, "ops", 12);
    return d;
}

static int num(const cJSON *o, const char *key)
{
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    ck_assert_msg(cJSON_IsNumber(v), "%s is not a number", key);
    return (int)v->valuedouble;
}

START_TEST(long_lists_summarized)
{
    const int n = 100;
    cJSON *d = doc_of(n);
    char left[512] = "";
    pj_statsview_summarize(d, left, sizeof left);

    cJSON *model = cJSON_GetObjectItemCaseSensitive(d, "model");
    ck_assert_int_eq(num(model, "layers"), n);
    ck_assert_str_eq(cJSON_GetObjectItemCaseSensitive(model, "path")->valuestring,
                     "/m.safetensors");

    /* Exactly the layers that served ops, with their counters intact. */
    cJSON *ls = cJSON_GetObjectItemCaseSensitive(d, "layers");
    int kept = 0;
    for (int i = 0; i < n; i++) {
        char name[32];
        snprintf(name, sizeof name, "l%d", i);
        cJSON *c = cJSON_GetObjectItemCaseSensitive(ls, name);
        if (i % 7 == 3) {
            ck_assert_msg(c != NULL, "%s was left out", name);
            ck_assert_int_eq(num(c, "ops"), i);
            ck_assert_int_eq(num(c, "rows"), 2 * i);
            kept++;
        } else {
            ck_assert_msg(c == NULL, "%s (no ops) was kept", name);
        }
    }
    ck_assert_int_eq(cJSON_GetArraySize(ls), kept);

    /* Engines counted by name, in the order they first appear. */
    cJSON *eng = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(d, "backend_stats"), "engines");
    ck_assert(cJSON_IsObject(eng));
    ck_assert_int_eq(num(eng, "gemvz"), n);
    ck_assert_int_eq(num(eng, "splitk"), n / 5);
    ck_assert_int_eq(num(eng, "cublas"), n - n / 5);
    ck_assert_str_eq(eng->child->string, "gemvz");
    ck_assert_str_eq(eng->child->next->string, "splitk");
    ck_assert_int_eq(num(cJSON_GetObjectItemCaseSensitive(d, "backend_stats"), "lanes"), 4);
    ck_assert_int_eq(num(d, "ops"), 12);

    ck_assert_msg(strstr(left, "100 layers' entries in model.layers") != NULL, "%s", left);
    char want[128];
    snprintf(want, sizeof want, "%d of the 100 layers' counters in layers.*", n - kept);
    ck_assert_msg(strstr(left, want) != NULL, "%s", left);
    ck_assert_msg(strstr(left, "the 200 (layer, m) rows of backend_stats.engines") != NULL, "%s",
                  left);
    cJSON_Delete(d);
}
END_TEST

/* A reference-sized model (5 layers) is shown whole; so is a document
 * without the lists (a STATS of another version). */
START_TEST(short_lists_kept)
{
    cJSON *d = doc_of(PJ_STATSVIEW_LIST_MAX);
    char *before = cJSON_PrintUnformatted(d);
    char left[64] = "";
    pj_statsview_summarize(d, left, sizeof left);
    char *after = cJSON_PrintUnformatted(d);
    ck_assert_msg(strcmp(after, before) == 0, "a short document was changed");
    ck_assert_str_eq(left, "");
    free(before);
    free(after);
    cJSON_Delete(d);

    cJSON *bare = cJSON_Parse("{\"version\": \"0.1.0\", \"model\": 3, \"layers\": [1, 2]}");
    pj_statsview_summarize(bare, left, sizeof left);
    ck_assert_str_eq(left, "");
    cJSON_Delete(bare);
}
END_TEST

/* What was left out fits the caller's buffer, cut short, never past it. */
START_TEST(left_truncated)
{
    cJSON *d = doc_of(64);
    char left[24];
    memset(left, 'x', sizeof left);
    left[0] = 0;
    pj_statsview_summarize(d, left, 20);
    ck_assert_uint_eq(strlen(left), 19);
    ck_assert_int_eq(left[20], 'x');
    cJSON_Delete(d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("statsview");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, long_lists_summarized);
    tcase_add_test(tc, short_lists_kept);
    tcase_add_test(tc, left_truncated);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
