/* test_projd_start.c — projd's start-up as an operator drives it:
 * --check-config against what a start does. */
#include <check.h>
#include <stdio.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/fixture.h"

static char g_model_path[1024];

/* projd with cfg_json on top of the helper's config (the small model, cpu
 * backend) and args; returns its exit code, d keeps its log. */
static int run_projd(pj_dproc *d, const char *cfg_json, const char *const *args)
{
    char err[512];
    ck_assert_msg(pj_dproc_prepare(d, g_model_path, cfg_json, err, sizeof err) == 0, "%s", err);
    ck_assert_msg(pj_dproc_spawn(d, args, 0, 0, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(pj_dproc_wait_exit(d, 20000), 0);
    return pj_dproc_exit_code(d);
}

/* --check-config refuses (exit 1, the start's own message, no "OK") a
 * configuration whose start would fail at the model load; a plain start
 * agrees. */
static void expect_check_refuses(const char *cfg_json, const char *want)
{
    static const char *const check[] = {"--check-config", NULL};
    static const char *const start[] = {NULL};
    pj_dproc d;
    int rc = run_projd(&d, cfg_json, check);
    if (rc != 1 || !pj_dproc_log_has(&d, want, 0) || pj_dproc_log_has(&d, "configuration OK", 0))
        pj_dproc_dump_log(&d);
    ck_assert_msg(rc == 1, "--check-config exit %d for %s (wanted 1)", rc, cfg_json);
    ck_assert_msg(pj_dproc_log_has(&d, want, 0), "--check-config did not say '%s'", want);
    ck_assert(!pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);

    rc = run_projd(&d, cfg_json, start);
    if (rc != 1 || !pj_dproc_log_has(&d, want, 0))
        pj_dproc_dump_log(&d);
    ck_assert_msg(rc == 1, "a start exited %d for %s (wanted 1)", rc, cfg_json);
    ck_assert_msg(pj_dproc_log_has(&d, want, 0), "a start did not say '%s'", want);
    pj_dproc_cleanup(&d);
}

START_TEST(check_config_reads_the_model_header)
{
    /* A misspelt tensor, a row limit past N, a format the tensor cannot
     * take, a file that is not there: each passed --check-config before
     * (exit 0, "configuration OK") and then failed the start. */
    expect_check_refuses("{\"model\":{\"layers\":[{\"name\":\"o\",\"tensor\":\"o.weihgt\"}]}}",
                         "layer 'o' (tensor 'o.weihgt'): no such tensor in the file");
    expect_check_refuses(
        "{\"model\":{\"layers\":[{\"name\":\"r\",\"tensor\":\"router.weight\",\"max_n\":65}]}}",
        "layer 'r' (tensor 'router.weight'): max_n 65 exceeds N = 64");
    expect_check_refuses("{\"model\":{\"layers\":[{\"name\":\"r\",\"tensor\":\"router.weight\","
                         "\"format\":\"z12\"}]}}",
                         "format z12 needs a BF16 tensor, the file has F32");
    expect_check_refuses("{\"model\":{\"path\":\"/nonexistent/pj-model.safetensors\"}}",
                         "/nonexistent/pj-model.safetensors: cannot open");

    /* The small model as it is: OK, and the line says which backend. */
    static const char *const check[] = {"--check-config", NULL};
    pj_dproc d;
    ck_assert_int_eq(run_projd(&d, NULL, check), 0);
    ck_assert(pj_dproc_log_has(&d, "configuration OK", 0));
    ck_assert(pj_dproc_log_has(&d, "backend cpu: asked for", 0));
    pj_dproc_cleanup(&d);
}
END_TEST

START_TEST(check_config_knows_the_backend)
{
#ifdef PJ_HAVE_CUDA
    /* A CUDA build answers by the machine's GPUs; nothing to compare here. */
    return;
#else
    /* This build has no cuda backend: a start asking for it exits 1, and
     * so does --check-config now (it said OK). */
    static const char *const check[] = {"--check-config", "--backend", "cuda", NULL};
    pj_dproc d;
    int rc = run_projd(&d, NULL, check);
    if (rc != 1)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 1);
    ck_assert(
        pj_dproc_log_has(&d, "backend cuda: this projd was built without the cuda backend", 0));
    ck_assert(!pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);
#endif
}
END_TEST

/* --socket takes ipc://PATH or a PATH; a tcp:// URL was taken as a path
 * relative to the working directory (projd listened on ./tcp:/127.0.0.1:5555
 * and said ready). It is a command-line error now, before anything starts. */
START_TEST(socket_other_scheme_refused)
{
    static const char *const tcp[] = {"--socket", "tcp://127.0.0.1:5555", "--check-config", NULL};
    pj_dproc d;
    int rc = run_projd(&d, NULL, tcp);
    if (rc != 2)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 2);
    ck_assert(pj_dproc_log_has(&d, "--socket \"tcp://...\": only ipc:// URLs are served", 0));
    ck_assert(!pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);

    /* A plain path still gets ipc:// in front. */
    char sock[512];
    pj_fixture_path(sock, sizeof sock, "plain.sock");
    const char *const plain[] = {"--socket", sock, "--print-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, plain), 0);
    char want[600];
    snprintf(want, sizeof want, "\"ipc://%s\"", sock);
    ck_assert(pj_dproc_log_has(&d, want, 0));
    pj_dproc_cleanup(&d);
}
END_TEST

/* --print-config returned before --check-config was looked at: the pair
 * exited 0 on a model file that is not there, which a check in a script
 * took for "OK". The pair is a command-line error now. */
START_TEST(check_and_print_config_refused_together)
{
    static const char *const both[] = {"--print-config", "--check-config", NULL};
    pj_dproc d;
    int rc = run_projd(&d, "{\"model\":{\"path\":\"/nonexistent/pj-model.safetensors\"}}", both);
    if (rc != 2)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 2);
    ck_assert(pj_dproc_log_has(&d, "--check-config and --print-config cannot be combined", 0));
    ck_assert(!pj_dproc_log_has(&d, "\"socket\"", 0));
    pj_dproc_cleanup(&d);
}
END_TEST

/* A case that fails an assertion ends its Check child with _exit: its
 * pj_dproc_cleanup never runs. The daemon must not outlive the child
 * (PR_SET_PDEATHSIG), and its folder must lie in the fixture folder, which
 * this suite's main process removes when it exits (the folders were
 * /tmp/pjd-*, and each failed case left one behind for good). */
START_TEST(failed_case_leaves_nothing)
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(fds[0]);
        pj_dproc d;
        char err[512];
        if (pj_dproc_start(&d, g_model_path, NULL, NULL, 1, 30000, err, sizeof err) != 0)
            _exit(3);
        ssize_t n = write(fds[1], &d, sizeof d);
        _exit(n == (ssize_t)sizeof d ? 1 : 4); /* as a failed ck_assert does */
    }
    close(fds[1]);
    pj_dproc d;
    ssize_t n = read(fds[0], &d, sizeof d);
    close(fds[0]);
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 1, "the child could not start projd");
    ck_assert_int_eq(n, (ssize_t)sizeof d);
    /* Not our child: gone once kill() finds no such process (init reaps). */
    int alive = 1;
    for (int i = 0; i < 1000 && alive; i++) {
        alive = kill(d.pid, 0) == 0;
        if (alive)
            usleep(10000);
    }
    ck_assert_msg(!alive, "projd %d outlived the test that started it", (int)d.pid);
    char prefix[4200];
    snprintf(prefix, sizeof prefix, "%s/", pj_fixture_tmpdir());
    ck_assert_msg(strncmp(d.dir, prefix, strlen(prefix)) == 0,
                  "the daemon's folder %s is not in the fixture folder %s, which the suite removes",
                  d.dir, prefix);
}
END_TEST

static Suite *start_suite(void)
{
    Suite *s = suite_create("projd_start");
    TCase *tc = tcase_create("check_config");
    tcase_add_test(tc, check_config_reads_the_model_header);
    tcase_add_test(tc, check_config_knows_the_backend);
    tcase_add_test(tc, socket_other_scheme_refused);
    tcase_add_test(tc, check_and_print_config_refused_together);
    tcase_add_test(tc, failed_case_leaves_nothing);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    if (pj_fixture_small_model(g_model_path, sizeof g_model_path) != 0)
        return 1;
    SRunner *sr = srunner_create(start_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
