/* test_cuda_nogpu.c — projd without a usable GPU (CI): backend auto falls
 * back to cpu and says why, backend cuda fails at start with a clear
 * message and a non-zero exit, nothing crashes. CUDA_VISIBLE_DEVICES is
 * emptied for the daemon so this holds on a GPU host too.
 *
 * In a build without the cuda backend (CUDA=0) the messages are the
 * "built without the cuda backend" ones; both are accepted.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/helpers/daemon_check.h"
#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/daemon_test.h"
#include "tests/helpers/wire_client.h"

#define READY_MS 30000
#define REPLY_MS 30000

static char g_model[4200];

START_TEST(auto_falls_back_to_cpu)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    pj_dproc d;
    char err[512];
    int rc = pj_dproc_start(&d, g_model, "{\"device\":{\"backend\":\"auto\"}}", NULL, 1, READY_MS,
                            err, sizeof err);
    ck_assert_msg(rc == 0, "start projd (auto): %s", err);
    /* Each build has its one reason: a CUDA build that said "no cuda
     * backend" would be one built without it (the Makefile's flags stamp
     * exists because that happened once). */
#ifdef PJ_HAVE_CUDA
    int says_why = pj_dproc_log_has(&d, "backend cpu: auto, no GPU: ", 2000);
#else
    int says_why = pj_dproc_log_has(&d, "backend cpu: auto, this build has no cuda backend", 2000);
#endif
    if (!says_why)
        pj_dproc_dump_log(&d);
    ck_assert_msg(says_why, "the log does not say why the cpu backend was chosen");
    pjc_conn t;
    char why[512];
    ck_assert_msg(pjc_open(&t, d.url, 160 * 1024, 320 * 1024, REPLY_MS, why, sizeof why) == 0, "%s",
                  why);
    ck_assert_uint_eq(t.c.welcome.backend, PJ_BACKEND_CPU);
    ck_assert_msg(pjc_sanity(&t, why, sizeof why) == 0, "%s", why);
    /* CUDA IPC buffers are refused by the cpu backend, and the connection
     * goes on. */
    pj_register req;
    memset(&req, 0, sizeof req);
    req.kind = PJ_BUF_CUDA;
    req.size = 4096;
    uint32_t id = 0;
    ck_assert_int_eq(pjt_register_raw(&t.c, &req, &id), PJ_E_REGISTER);
    ck_assert_msg(pjc_sanity(&t, why, sizeof why) == 0, "%s", why);
    pjc_close(&t);
    int code = pj_dproc_stop(&d, 30000);
    ck_assert_int_eq(code, 0);
    pj_dproc_cleanup(&d);
}
END_TEST

START_TEST(cuda_without_gpu_fails_clearly)
{
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    pj_dproc d;
    char err[512];
    int rc = pj_dproc_start(&d, g_model, "{\"device\":{\"backend\":\"cuda\"}}", NULL, 0, READY_MS,
                            err, sizeof err);
    ck_assert_msg(rc == 0, "spawn projd: %s", err);
    ck_assert_int_eq(pj_dproc_wait_exit(&d, 30000), 0);
    int code = pj_dproc_exit_code(&d);
#ifdef PJ_HAVE_CUDA
    int clear = pj_dproc_log_has(&d, "backend cuda: no usable GPU: ", 10);
#else
    int clear = pj_dproc_log_has(&d, "built without the cuda backend", 10);
#endif
    if (code != 1 || !clear)
        pj_dproc_dump_log(&d);
    /* 1: could not start; not a signal (a crash would be 128 + signal). */
    ck_assert_int_eq(code, 1);
    ck_assert_msg(clear, "no clear reason in the log");
    ck_assert_msg(!pj_dproc_log_has(&d, "ready", 10), "projd said ready without a GPU");
    pj_dproc_cleanup(&d);
}
END_TEST

START_TEST(cuda_device_uuid_without_gpu)
{
    /* A device chosen by UUID changes nothing when there is no GPU. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    pj_dproc d;
    char err[512];
    int rc = pj_dproc_start(&d, g_model,
                            "{\"device\":{\"backend\":\"cuda\",\"uuid\":"
                            "\"GPU-00000000-0000-0000-0000-000000000000\"}}",
                            NULL, 0, READY_MS, err, sizeof err);
    ck_assert_msg(rc == 0, "spawn projd: %s", err);
    ck_assert_int_eq(pj_dproc_wait_exit(&d, 30000), 0);
    ck_assert_int_eq(pj_dproc_exit_code(&d), 1);
    pj_dproc_cleanup(&d);
}
END_TEST

int main(void)
{
    if (pjc_init(g_model, sizeof g_model) != 0)
        return 1;
    const pjd_case cases[] = {
        {"auto_falls_back_to_cpu", auto_falls_back_to_cpu},
        {"cuda_without_gpu_fails_clearly", cuda_without_gpu_fails_clearly},
        {"cuda_device_uuid_without_gpu", cuda_device_uuid_without_gpu},
    };
    return pjd_run_suite("cuda_nogpu", cases, sizeof cases / sizeof cases[0], 120);
}
