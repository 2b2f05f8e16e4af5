/* test_projd_start.c — projd's start-up as an operator drives it:
 * --check-config against what a start does, --print-config's socket,
 * --help, the start's log. */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/config.h"
#include "protocol/sockpath.h"
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
    /* No GPU is visible to the daemons here (main), so each build has one
     * answer: a CUDA build finds no usable GPU, a build without the cuda
     * backend says so; either way a start asking for cuda exits 1, and so
     * does --check-config (it once said OK). */
    static const char *const check[] = {"--check-config", "--backend", "cuda", NULL};
    pj_dproc d;
    int rc = run_projd(&d, NULL, check);
    if (rc != 1)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 1);
#ifdef PJ_HAVE_CUDA
    ck_assert(pj_dproc_log_has(&d, "backend cuda: no usable GPU: ", 0));
#else
    ck_assert(
        pj_dproc_log_has(&d, "backend cuda: this projd was built without the cuda backend", 0));
#endif
    ck_assert(pj_dproc_log_has(&d, "projd: 1 problem", 0));
    ck_assert(!pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);
}
END_TEST

/* device.backend auto where it picks the cpu backend (here: no GPU visible,
 * or a build without the cuda backend), with keys written for a GPU: a
 * start warns that they are ignored and --check-config notes it, so a GPU
 * that has become unusable does not pass for a host without one. */
START_TEST(auto_on_the_cpu_says_what_it_ignores)
{
    const char *cfg = "{\"device\":{\"backend\":\"auto\",\"uuid\":"
                      "\"GPU-5fd1a2b3-8c1e-4d39-9a1e-0123456789ab\"},\"model\":{\"layers\":["
                      "{\"name\":\"o\",\"tensor\":\"o.weight\",\"engine\":\"gemvz\"}]}}";
    static const char *const check[] = {"--check-config", NULL};
    pj_dproc d;
    int rc = run_projd(&d, cfg, check);
    if (rc != 0 || !pj_dproc_log_has(&d, "backend cpu: auto", 0))
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(&d, "backend cpu: auto", 0));
    ck_assert(pj_dproc_log_has(&d,
                               "the configuration's device.uuid "
                               "GPU-5fd1a2b3-8c1e-4d39-9a1e-0123456789ab, 1 layer's engine are "
                               "for the cuda backend and ignored",
                               0));
    pj_dproc_cleanup(&d);
    char err[512];
    ck_assert_msg(pj_dproc_start(&d, g_model_path, cfg, NULL, 1, 30000, err, sizeof err) == 0, "%s",
                  err);
    ck_assert(pj_dproc_log_has(&d, "are for the cuda backend and ignored: set device.backend", 0));
    pj_dproc_stop(&d, 10000);
    pj_dproc_cleanup(&d);
}
END_TEST

/* projd --check-config with tuning.table a temporary file holding table
 * (removed after); its exit status, the log dumped when not 0. */
static int check_config_with_table(pj_dproc *d, const char *table)
{
    static const char *const check[] = {"--check-config", NULL};
    char tpath[] = "/tmp/pj-table-XXXXXX";
    int fd = mkstemp(tpath);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, table, strlen(table)), (ssize_t)strlen(table));
    close(fd);
    char tcfg[256];
    snprintf(tcfg, sizeof tcfg, "{\"tuning\":{\"table\":\"%s\"}}", tpath);
    int rc = run_projd(d, tcfg, check);
    unlink(tpath);
    if (rc != 0)
        pj_dproc_dump_log(d);
    return rc;
}

/* tuning.table naming a file that is not there: the cuda backend refuses
 * to start on it (it started untuned, with a warning), so --check-config
 * counts it as a problem there; the cpu backend never reads the table, so
 * there it is a note and the configuration is OK. */
START_TEST(check_config_reads_the_tuning_table)
{
    const char *cfg = "{\"tuning\":{\"table\":\"/nonexistent/pj-table.json\"}}";
    static const char *const check[] = {"--check-config", NULL};
    pj_dproc d;
    int rc = run_projd(&d, cfg, check);
    if (rc != 0)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(&d, "note: tuning table /nonexistent/pj-table.json: ", 0));
    ck_assert(pj_dproc_log_has(&d, "the cpu backend does not read it", 0));
    ck_assert(pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);
    /* A table that parses, whose only entry names no engine: said, as
     * the daemon would at its start, with what that leaves. */
    rc = check_config_with_table(&d,
                                 "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"gemvZ\"}]}");
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(&d, "note: tuning table: entries[0] rejected: ", 0));
    ck_assert(pj_dproc_log_has(&d, "gemvZ", 0));
    ck_assert(pj_dproc_log_has(&d, "no entry usable: the cuda backend would run the untuned", 0));
    pj_dproc_cleanup(&d);
    /* An entry without its layer's shape (n, k) matches no layer: the
     * device's check drops it at a start, and this check says so too. */
    rc = check_config_with_table(
        &d, "{\"entries\":[{\"layer\":\"o\",\"m\":1,\"engine\":\"cublas\"},"
            "{\"layer\":\"o\",\"n\":256,\"k\":192,\"m\":8,\"engine\":\"cublas\"}]}");
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(
        &d, "note: tuning table: entries[0] rejected: o m=1: entry has no layer shape (n, k)", 0));
    ck_assert(!pj_dproc_log_has(&d, "entries[1]", 0));
    ck_assert(!pj_dproc_log_has(&d, "no entry usable", 0));
    pj_dproc_cleanup(&d);
    /* A table of no entries serves nothing either (said even though no
     * entry was dropped). */
    rc = check_config_with_table(&d, "{\"entries\":[]}");
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(&d, "no entry usable: the cuda backend would run the untuned", 0));
    pj_dproc_cleanup(&d);
    /* Asked for cuda (no GPU visible here; or a build without it): both
     * problems, counted. */
    static const char *const cuda[] = {"--check-config", "--backend", "cuda", NULL};
    rc = run_projd(&d, cfg, cuda);
    if (rc != 1)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 1);
    ck_assert(pj_dproc_log_has(&d, "backend cuda: ", 0));
    ck_assert(pj_dproc_log_has(&d, "tuning table /nonexistent/pj-table.json: ", 0));
    ck_assert(pj_dproc_log_has(&d, "(tuning.table)", 0));
    ck_assert(pj_dproc_log_has(&d, "projd: 2 problems", 0));
    pj_dproc_cleanup(&d);
}
END_TEST

/* auth lists with a socket mode that keeps "other" out: listed users
 * outside the socket's group cannot reach it; --check-config says so (a
 * note: the configuration can still be what was meant). Not with 0666. */
START_TEST(check_config_auth_and_socket_mode)
{
    static const char *const check[] = {"--check-config", NULL};
    pj_dproc d;
    int rc = run_projd(&d, "{\"auth\":{\"allow_uids\":[4242]}}", check);
    ck_assert_int_eq(rc, 0);
    ck_assert(pj_dproc_log_has(&d,
                               "note: auth lists 1 uid and 0 gids outside the socket's owner and "
                               "group, but socket.mode 0660",
                               0));
    ck_assert(pj_dproc_log_has(&d, "refused by the file's mode", 0));
    pj_dproc_cleanup(&d);
    /* A connect needs write permission alone: o+w is enough. Root and the
     * daemon's own uid reach it anyway. */
    rc = run_projd(&d, "{\"auth\":{\"allow_uids\":[4242]},\"socket\":{\"mode\":\"0662\"}}", check);
    ck_assert_int_eq(rc, 0);
    ck_assert(!pj_dproc_log_has(&d, "auth lists", 0));
    pj_dproc_cleanup(&d);
    char own[96];
    if (geteuid() == 0)
        snprintf(own, sizeof own, "{\"auth\":{\"allow_uids\":[0]}}");
    else
        snprintf(own, sizeof own, "{\"auth\":{\"allow_uids\":[0,%u]}}", (unsigned)geteuid());
    ck_assert_int_eq(run_projd(&d, own, check), 0);
    ck_assert(!pj_dproc_log_has(&d, "auth lists", 0));
    pj_dproc_cleanup(&d);
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

    /* An empty one is said as such (it was reported as "ipc://"). */
    static const char *const empty[] = {"--socket", "", "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, empty), 2);
    ck_assert(pj_dproc_log_has(&d, "--socket \"\": empty; give ipc://PATH or a PATH", 0));
    ck_assert(!pj_dproc_log_has(&d, "got \"ipc://\"", 0));
    pj_dproc_cleanup(&d);

    /* A relative path, by --socket or $PROJD_SOCKET, is refused: nng took
     * it from the working directory, whose safety no check looked at (a
     * group-writable one was served). Exit 2, a configuration mistake. */
    static const char *const rel[] = {"--socket", "rel.sock", "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, rel), 2);
    ck_assert(pj_dproc_log_has(&d, "--socket \"rel.sock\": a relative path", 0));
    pj_dproc_cleanup(&d);
    static const char *const rel_ipc[] = {"--socket", "ipc://rel.sock", "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, rel_ipc), 2);
    ck_assert(pj_dproc_log_has(&d, "a relative path", 0));
    pj_dproc_cleanup(&d);
    static const char *const check[] = {"--check-config", NULL};
    setenv("PROJD_SOCKET", "rel.sock", 1);
    rc = run_projd(&d, "{\"socket\":{\"url\":\"\"}}", check);
    unsetenv("PROJD_SOCKET");
    ck_assert_int_eq(rc, 2);
    ck_assert(pj_dproc_log_has(&d,
                               "socket URL \"ipc://rel.sock\" (socket.url \"\": from "
                               "$PROJD_SOCKET): the path is relative",
                               0));
    pj_dproc_cleanup(&d);
    setenv("PROJD_SOCKET", "tcp://127.0.0.1:5555", 1);
    rc = run_projd(&d, "{\"socket\":{\"url\":\"\"}}", check);
    unsetenv("PROJD_SOCKET");
    ck_assert_int_eq(rc, 2);
    ck_assert(pj_dproc_log_has(&d, "only ipc:// URLs are served", 0));
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

/* --check-config stopped at its first problem and never looked at the
 * socket's directory: a group- and world-writable one (which a start
 * refuses) passed as "configuration OK". Now every problem is a line of
 * its own, and the start agrees about the directory. */
START_TEST(check_config_reports_every_problem)
{
    char wide[512], sock[600];
    pj_fixture_path(wide, sizeof wide, "wide");
    ck_assert_int_eq(mkdir(wide, 0777), 0);
    ck_assert_int_eq(chmod(wide, 0777), 0);
    snprintf(sock, sizeof sock, "%s/p.sock", wide);
    const char *const check[] = {"--socket", sock, "--check-config", NULL};
    const char *cfg = "{\"socket\":{\"group\":\"pj-no-such-group\"},\"model\":{\"layers\":["
                      "{\"name\":\"o\",\"tensor\":\"o.weihgt\"},"
                      "{\"name\":\"r\",\"tensor\":\"router.weight\",\"max_n\":65},"
                      "{\"name\":\"q\",\"tensor\":\"qkv_gate.weight\"}]}}";
    const char *want[] = {
        "with mode 0777; the socket's directory must be owned by",
        "socket.group \"pj-no-such-group\": no such group",
        "layer 'o' (tensor 'o.weihgt'): no such tensor in the file",
        "layer 'r' (tensor 'router.weight'): max_n 65 exceeds N = 64",
        "projd: 4 problems: a start would fail",
    };
    pj_dproc d;
    int rc = run_projd(&d, cfg, check);
    int all = rc == 1 && !pj_dproc_log_has(&d, "configuration OK", 0);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        all &= pj_dproc_log_has(&d, want[i], 0);
    if (!all)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 1);
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++)
        ck_assert_msg(pj_dproc_log_has(&d, want[i], 0), "--check-config did not say '%s'", want[i]);
    ck_assert(!pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);
    struct stat st;
    ck_assert_int_eq(stat(sock, &st), -1); /* nothing made */

    /* The directory alone: --check-config and a start both refuse it. */
    const char *const start[] = {"--socket", sock, NULL};
    rc = run_projd(&d, NULL, check);
    ck_assert_int_eq(rc, 1);
    ck_assert(pj_dproc_log_has(&d, "projd: 1 problem: a start would fail", 0));
    pj_dproc_cleanup(&d);
    rc = run_projd(&d, NULL, start);
    if (rc != 1 || !pj_dproc_log_has(&d, want[0], 0))
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(rc, 1);
    ck_assert(pj_dproc_log_has(&d, want[0], 0));
    pj_dproc_cleanup(&d);

    /* A directory that is not there yet: a note, OK, and still not made. */
    char fresh[600];
    snprintf(fresh, sizeof fresh, "%s/fresh/sub/p.sock", pj_fixture_tmpdir());
    const char *const check_fresh[] = {"--socket", fresh, "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, check_fresh), 0);
    ck_assert(pj_dproc_log_has(&d, "/fresh/sub does not exist; a start creates it (mode 0755)", 0));
    ck_assert(pj_dproc_log_has(&d, "configuration OK", 0));
    pj_dproc_cleanup(&d);
    char fresh_dir[600];
    snprintf(fresh_dir, sizeof fresh_dir, "%s/fresh", pj_fixture_tmpdir());
    ck_assert_int_eq(stat(fresh_dir, &st), -1);

    /* Not there, and to be made in a directory anyone may write to: refused
     * as a start's check of the made directory would refuse it. */
    char under_wide[700];
    snprintf(under_wide, sizeof under_wide, "%s/newdir/p.sock", wide);
    const char *const check_under[] = {"--socket", under_wide, "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, check_under), 1);
    char why[700];
    snprintf(why, sizeof why, "its ancestor %s is owned by uid", wide);
    ck_assert(pj_dproc_log_has(&d, why, 0));
    ck_assert(pj_dproc_log_has(&d, "with mode 0777", 0));
    pj_dproc_cleanup(&d);

    /* A file where the socket goes: a start would not touch it. */
    char plain[600];
    snprintf(plain, sizeof plain, "%s/not-a-socket", pj_fixture_tmpdir());
    FILE *f = fopen(plain, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    const char *const check_plain[] = {"--socket", plain, "--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, check_plain), 1);
    ck_assert(pj_dproc_log_has(&d, "exists and is not a socket", 0));
    pj_dproc_cleanup(&d);
}
END_TEST

/* With socket.url "" the socket came from $PROJD_SOCKET (or the defaults)
 * and --print-config showed "": now it shows the URL a start would use,
 * says where it came from on stderr, and stays a loadable configuration. */
START_TEST(print_config_resolves_the_socket)
{
    char sock[600];
    snprintf(sock, sizeof sock, "%s/from-env/p.sock", pj_fixture_tmpdir());
    setenv("PROJD_SOCKET", sock, 1);
    const char *const print[] = {"--print-config", NULL};
    pj_dproc d;
    ck_assert_int_eq(run_projd(&d, "{\"socket\":{\"url\":\"\"}}", print), 0);
    char want[700];
    snprintf(want, sizeof want, "socket.url \"\": from $PROJD_SOCKET resolves to ipc://%s", sock);
    ck_assert(pj_dproc_log_has(&d, want, 0));
    static char text[65536];
    ck_assert_int_ge(pj_fixture_read_text(d.log, text, sizeof text), 0);
    const char *json = strstr(text, "\n{"); /* stdout's JSON after stderr's note */
    ck_assert_ptr_nonnull(json);
    cJSON *j = cJSON_Parse(json + 1);
    ck_assert_msg(j != NULL, "--print-config printed: %s", text);
    cJSON *url = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "socket"), "url");
    ck_assert(cJSON_IsString(url));
    snprintf(want, sizeof want, "ipc://%s", sock);
    ck_assert_str_eq(url->valuestring, want);
    cJSON_Delete(j);
    pj_config cfg;
    char err[512];
    pj_config_defaults(&cfg);
    ck_assert_msg(pj_config_apply_json(&cfg, json + 1, strlen(json + 1), err, sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(cfg.socket.url, want);
    pj_dproc_cleanup(&d);

    /* --check-config names the source too. */
    const char *const check[] = {"--check-config", NULL};
    ck_assert_int_eq(run_projd(&d, "{\"socket\":{\"url\":\"\"}}", check), 0);
    ck_assert(pj_dproc_log_has(&d, "(socket.url \"\": from $PROJD_SOCKET)", 0));
    pj_dproc_cleanup(&d);
    unsetenv("PROJD_SOCKET");
}
END_TEST

/* -h was refused (exit 2); --help now names $PROJD_SOCKET, the exit codes
 * and where the documents are. */
START_TEST(help_and_version)
{
    const char *const h[] = {"-h", NULL};
    pj_dproc d;
    ck_assert_int_eq(run_projd(&d, NULL, h), 0);
    ck_assert(pj_dproc_log_has(&d, "usage: projd", 0));
    ck_assert(pj_dproc_log_has(&d, "$PROJD_SOCKET", 0));
    ck_assert(pj_dproc_log_has(&d, "Exit codes:", 0));
    ck_assert(pj_dproc_log_has(&d, "  2  bad command line or configuration", 0));
    ck_assert(pj_dproc_log_has(&d, "config/CONFIG.md", 0));
    pj_dproc_cleanup(&d);
    const char *const v[] = {"-V", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, v), 0);
    ck_assert(pj_dproc_log_has(&d, "projd ", 0));
    pj_dproc_cleanup(&d);
    const char *const bad[] = {"-x", NULL};
    ck_assert_int_eq(run_projd(&d, NULL, bad), 2);
    pj_dproc_cleanup(&d);
}
END_TEST

/* "model loaded in 70.7 ms (conversion 422.2 ms)" read as a 70 ms load:
 * the line gives the total and its parts. */
START_TEST(load_line_gives_the_total)
{
    pj_dproc d;
    char err[512];
    int rc = pj_dproc_start(&d, g_model_path, NULL, NULL, 1, 30000, err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert(pj_dproc_log_has(&d, "model loaded in ", 0));
    ck_assert(pj_dproc_log_has(&d, " ms (read ", 0));
    ck_assert(pj_dproc_log_has(&d, " ms, conversion ", 0));
    ck_assert_int_eq(pj_dproc_stop(&d, 30000), 0);
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

/* A client's lookup against a real projd (not a socket made to look like
 * one): a live daemon at the system path is taken whatever else is there;
 * killed, its file left behind, it is passed over as stale. The lookup read
 * /proc/net/unix by the socket's path, which projd never binds (it binds a
 * private name and renames it), so a live daemon looked stale (review). */
START_TEST(client_lookup_sees_a_real_daemon)
{
    char err[512];
    pj_dproc d;
    ck_assert_msg(pj_dproc_start(&d, g_model_path, NULL, NULL, 1, 30000, err, sizeof err) == 0,
                  "%s", err);
    char run[4200], stale[4300], url[4400];
    pj_fixture_path(run, sizeof run, "lookup-run");
    ck_assert(mkdir(run, 0755) == 0 || errno == EEXIST);
    /* an instance's socket file, nobody behind it */
    snprintf(stale, sizeof stale, "%s/projd-1.sock", run);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    ck_assert_uint_lt(strlen(stale), sizeof sa.sun_path);
    memcpy(sa.sun_path, stale, strlen(stale) + 1);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
    pj_sockpath_source src;
    unsetenv("PROJD_SOCKET");
    ck_assert_int_eq(pj_sockpath_default_at(PJ_SOCKPATH_CLIENT, d.sock, run, url, sizeof url, &src,
                                            err, sizeof err),
                     0);
    ck_assert_int_eq(src, PJ_SOCKPATH_FROM_SYSTEM);
    /* Killed: its socket file stays, nobody listens. */
    ck_assert_int_eq(pj_dproc_signal(&d, SIGKILL), 0);
    ck_assert_int_eq(pj_dproc_wait_exit(&d, 10000), 0);
    ck_assert_int_eq(access(d.sock, F_OK), 0);
    ck_assert_int_eq(pj_sockpath_default_at(PJ_SOCKPATH_CLIENT, d.sock, run, url, sizeof url, &src,
                                            err, sizeof err),
                     0);
    ck_assert_int_eq(src, PJ_SOCKPATH_FROM_SYSTEM_STALE);
    pj_dproc_cleanup(&d);
}
END_TEST

static Suite *start_suite(void)
{
    Suite *s = suite_create("projd_start");
    TCase *tc = tcase_create("check_config");
    tcase_add_test(tc, check_config_reads_the_model_header);
    tcase_add_test(tc, check_config_knows_the_backend);
    tcase_add_test(tc, auto_on_the_cpu_says_what_it_ignores);
    tcase_add_test(tc, check_config_reads_the_tuning_table);
    tcase_add_test(tc, check_config_auth_and_socket_mode);
    tcase_add_test(tc, socket_other_scheme_refused);
    tcase_add_test(tc, check_and_print_config_refused_together);
    tcase_add_test(tc, failed_case_leaves_nothing);
    tcase_add_test(tc, check_config_reports_every_problem);
    tcase_add_test(tc, print_config_resolves_the_socket);
    tcase_add_test(tc, help_and_version);
    tcase_add_test(tc, load_line_gives_the_total);
    tcase_add_test(tc, client_lookup_sees_a_real_daemon);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    /* The daemons started here see no GPU, whatever the host has: what
     * each case expects then depends only on the build. */
    setenv("CUDA_VISIBLE_DEVICES", "", 1);
    if (pj_fixture_small_model(g_model_path, sizeof g_model_path) != 0)
        return 1;
    SRunner *sr = srunner_create(start_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
