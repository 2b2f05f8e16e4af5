/* daemon_test.c — see daemon_test.h. */
#include "tests/helpers/daemon_test.h"

#include <check.h>
#include <cjson/cJSON.h>
#include <time.h>

/* ThreadSanitizer runs the daemon 5-20x slower (every memory access is
 * checked): a start that takes 0.3 s (1024 layers) takes tens of seconds. */
#if defined(__SANITIZE_THREAD__)
#define READY_MS 180000
#else
#define READY_MS 30000
#endif
#define STOP_MS 30000

void pjd_start(pj_dproc *d, const char *model_path, const char *cfg_json)
{
    char err[512];
    int rc = pj_dproc_start(d, model_path, cfg_json, NULL, 1, READY_MS, err, sizeof err);
    ck_assert_msg(rc == 0, "start projd: %s", err);
}

void pjd_stop(pj_dproc *d)
{
    int code = pj_dproc_stop(d, STOP_MS);
    if (code != 0)
        pj_dproc_dump_log(d);
    ck_assert_msg(code == 0, "projd exit code %d", code);
    pj_dproc_cleanup(d);
}

double pjd_stat(pjt_client *c, const char *path)
{
    cJSON *st = NULL;
    double v = -1;
    if (pjt_stats(c, &st) == PJ_OK) {
        v = pjt_json_num(st, path);
        cJSON_Delete(st);
    }
    return v;
}

double pjd_wait_stat(pjt_client *c, const char *path, double want, int timeout_ms)
{
    long long end = pjd_now_ms() + timeout_ms;
    for (;;) {
        double v = pjd_stat(c, path);
        if (v == want || pjd_now_ms() >= end)
            return v;
        pjd_sleep_ms(20);
    }
}

int pjd_run_suite(const char *suite, const pjd_case *cases, size_t n, int timeout_s)
{
    Suite *s = suite_create(suite);
    for (size_t i = 0; i < n; i++) {
        TCase *tc = tcase_create(cases[i].name);
        tcase_set_timeout(tc, timeout_s);
        tcase_add_test(tc, cases[i].test);
        suite_add_tcase(s, tc);
    }
    SRunner *sr = srunner_create(s);
    /* A case that fails ends with _exit, before its pjt_shm_destroy: the
     * shm objects its cases made carry this process's pid and are swept
     * when they are done. */
    pjt_shm_own();
    srunner_run_all(sr, CK_NORMAL);
    pjt_shm_sweep();
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}

void pjd_sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

long long pjd_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}
