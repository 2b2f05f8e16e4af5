/* test_backend_cpu.c — the cpu backend as the configuration drives it. */
#include <check.h>
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config/config.h"
#include "daemon/backend.h"
#include "daemon/backend_cpu.h"
#include "daemon/model.h"
#include "tests/helpers/fixture.h"

static char small_path[1024];

/* cpu.threads takes 0..1024 (CONFIG.md); the backend started at most 256
 * and said so only in its device name ("cpu (256 worker threads)"). Every
 * accepted count now starts that many workers. */
START_TEST(threads_as_configured)
{
    pj_config *cfg = malloc(sizeof *cfg);
    ck_assert_ptr_nonnull(cfg);
    pj_fixture_small_config(cfg, small_path);
    char err[512];
    const char *doc = "{\"cpu\":{\"threads\":300}}";
    ck_assert_msg(pj_config_apply_json(cfg, doc, strlen(doc), err, sizeof err) == 0, "%s", err);
    pj_model *m;
    ck_assert_msg(pj_model_load(cfg, &m, NULL, NULL, err, sizeof err) == 0, "%s", err);
    pj_backend *be;
    ck_assert_msg(pj_backend_create(pj_backend_cpu_ops(), cfg, m, &be, err, sizeof err) == 0, "%s",
                  err);
    ck_assert_str_eq(be->device_name, "cpu (300 worker threads)");
    cJSON *o = cJSON_CreateObject();
    be->ops->stats_json(be, o);
    ck_assert_double_eq(cJSON_GetNumberValue(cJSON_GetObjectItem(o, "threads")), 300);
    cJSON_Delete(o);
    pj_backend_destroy(be);
    pj_model_free(m);
    free(cfg);
}
END_TEST

static Suite *cpu_suite(void)
{
    Suite *s = suite_create("backend_cpu");
    TCase *tc = tcase_create("config");
    tcase_add_test(tc, threads_as_configured);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (pj_fixture_small_model(small_path, sizeof small_path) != 0)
        return 1;
    SRunner *sr = srunner_create(cpu_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
