/* test_daemon_depth.c — several requests of one connection with the
 * backend at once, as the cuda backend takes them (8 per stream): the cpu
 * backend's daemons here run with PROJD_CPU_STREAM_DEPTH=4. A close, a
 * drain, a shrunk buffer, the shm ring, deferred submits and the systemd
 * watchdog, each meeting four running and more queued. (tests/e2e_depth.sh
 * runs the other daemon suites at that depth too; most of their cases have
 * one request in flight per connection.) */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <nng/nng.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "protocol/ring.h"
#include "tests/helpers/daemon_check.h"
#include "tests/helpers/daemon_proc.h"
#include "tests/helpers/daemon_test.h"
#include "tests/helpers/fixture.h"
#include "tests/helpers/wire_client.h"

#define REPLY_MS 60000
#define XBYTES   (160u * 1024u)
#define YBYTES   (320u * 1024u)
#define NREQ     6
#define NOPS     2

static char g_model_path[4200];

static void build_ops(pjc_conn *t, pjc_shape *sh, pj_op *ops, uint32_t n)
{
    const pj_model *model = pjc_model();
    uint32_t layer = 0;
    const pj_model_layer *L = &model->layers[layer];
    *sh = (pjc_shape){
        .layer = layer, .mi = 0, .variant = 0, .n = L->max_n, .x_ld = L->w.k, .y_ld = L->max_n};
    pjc_stage(t, sh);
    for (uint32_t i = 0; i < n; i++)
        ops[i] = pjc_op(t, sh);
}

static void send_n(pjc_conn *t, pjt_async *a, int n, pj_op *ops, uint64_t base)
{
    pj_project p = {.n_ops = NOPS, .ops = ops};
    for (int i = 0; i < n; i++)
        ck_assert_int_eq(pjt_project_send(&t->c, &a[i], base + i, &p), 0);
}

/* The replies of n requests sent by send_n from id base, each with status
 * want. */
static void recv_n(pjt_async *a, int n, uint64_t base, int want)
{
    for (int i = 0; i < n; i++) {
        pj_op_result rr[NOPS];
        pj_done done = {.ops = rr};
        uint64_t id = 0;
        ck_assert_int_eq(pjt_project_recv(&a[i], &id, &done, NOPS), PJ_OK);
        ck_assert_uint_eq(id, base + (uint64_t)i);
        ck_assert_int_eq(done.status, want);
    }
}

/* A daemon of configuration cfg, a connection with x and y registered,
 * and n ops of the first layer staged on it. */
static void start_staged(pj_dproc *d, const char *cfg, pjc_conn *t, pjc_shape *sh, pj_op *ops,
                         uint32_t n)
{
    char why[512];
    pjd_start(d, g_model_path, cfg);
    ck_assert_msg(pjc_open(t, d->url, XBYTES, YBYTES, REPLY_MS, why, sizeof why) == 0, "%s", why);
    build_ops(t, sh, ops, n);
}

/* Close with several running: dropped/running split, buffers, zombie. */
START_TEST(close_with_several_running)
{
    pj_dproc d;
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[NOPS];
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 500000}, \"limits\": {\"max_connections\": 2}}", &t,
                 &sh, ops, NOPS);
    pjt_client mon;
    ck_assert_int_eq(pjt_connect(&mon, d.url, 3000), 0);
    ck_assert_int_eq(pjt_hello(&mon, "mon"), PJ_OK);
    pjt_async a[NREQ];
    send_n(&t, a, NREQ, ops, 100);
    ck_assert_double_eq(pjd_wait_stat(&mon, "inflight", NREQ, 10000), NREQ);
    ck_assert_int_eq(pjt_unregister(&t.c, t.xid), PJ_OK);
    for (int i = 0; i < NREQ; i++)
        pjt_async_close(&a[i]);
    pjt_close(&t.c);
    ck_assert_double_eq(pjd_wait_stat(&mon, "connections.closing", 1, 10000), 1);
    /* Four were with the backend and run to their end; the rest (two,
     * unless one had finished by the close) were dropped. */
    ck_assert(pj_dproc_log_has(&d, " dropped unstarted, 4 running", 5000));
    /* The closed connection still counts against max_connections = 2
     * while its four run (2 ops x 0.5 s each, 4 s after the close). */
    pjt_client extra;
    ck_assert_int_eq(pjt_connect(&extra, d.url, 3000), 0);
    ck_assert_int_eq(pjt_hello(&extra, "extra"), PJ_E_LIMIT);
    pjt_close(&extra);
    ck_assert_double_eq(pjd_wait_stat(&mon, "connections.closing", 0, 30000), 0);
    ck_assert_double_eq(pjd_wait_stat(&mon, "inflight", 0, 10000), 0);
    ck_assert_double_eq(pjd_wait_stat(&mon, "buffers.current", 0, 10000), 0);
    ck_assert_int_eq(pjt_ping(&mon), PJ_OK);
    pjt_close(&mon);
    pjt_shm_destroy(&t.xs);
    pjt_shm_destroy(&t.ys);
    pjd_stop(&d);
}
END_TEST

/* SIGTERM with several of one connection's requests running and queued. */
START_TEST(drain_with_several_running)
{
    pj_dproc d;
    char why[512];
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[NOPS];
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 100000}}", &t, &sh, ops, NOPS);
    pjt_async a[NREQ];
    const long long t0 = pjd_now_ms();
    send_n(&t, a, NREQ, ops, 200);
    ck_assert_double_eq(pjd_wait_stat(&t.c, "inflight", NREQ, 10000), NREQ);
    ck_assert_int_eq(pj_dproc_signal(&d, SIGTERM), 0);
    recv_n(a, NREQ, 200, PJ_OK);
    /* One after another: 12 ops held 100 ms each take 1.2 s in a row; four
     * jobs side by side would have taken half that. (Their order is the
     * arrival order, which the client's asynchronous sends do not fix:
     * under ASan request 1 has come first.) */
    const long long took = pjd_now_ms() - t0;
    ck_assert_msg(took >= 1150, "6 requests of 2 ops held 100 ms each took %lld ms", took);
    ck_assert_msg(pjc_verify(&t, &sh, why, sizeof why) == 0, "%s", why);
    pjc_close(&t);
    ck_assert_int_eq(pj_dproc_wait_exit(&d, 30000), 0);
    if (pj_dproc_exit_code(&d) != 0)
        pj_dproc_dump_log(&d);
    ck_assert_int_eq(pj_dproc_exit_code(&d), 0);
    pj_dproc_cleanup(&d);
}
END_TEST

/* y truncated while several requests that write it are with the backend. */
START_TEST(shrink_with_several_running)
{
    pj_dproc d;
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[NOPS];
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 150000}}", &t, &sh, ops, NOPS);
    pjt_async a[NREQ];
    send_n(&t, a, NREQ, ops, 300);
    ck_assert_double_eq(pjd_wait_stat(&t.c, "inflight", NREQ, 10000), NREQ);
    pjd_sleep_ms(100);
    munmap(t.ys.p, t.ys.size);
    t.ys.p = NULL;
    ck_assert_int_eq(ftruncate(t.ys.fd, 0), 0);
    recv_n(a, NREQ, 300, PJ_E_BUFFER);
    ck_assert_int_eq(pjt_ping(&t.c), PJ_OK);
    pjc_close(&t);
    pjd_stop(&d);
}
END_TEST

/* Ring: several slots' requests running, then the connection closes. */
START_TEST(ring_several_running)
{
    pj_dproc d;
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[NOPS];
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 100000}}", &t, &sh, ops, NOPS);
    ck_assert_int_eq(pjt_ring_attach(&t.c, 8, 4096), PJ_OK);
    pjt_client mon;
    ck_assert_int_eq(pjt_connect(&mon, d.url, 3000), 0);
    ck_assert_int_eq(pjt_hello(&mon, "mon"), PJ_OK);
    pj_project p = {.n_ops = NOPS, .ops = ops};
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < NREQ; i++) {
            pj_wbuf_reset(&t.c.wb);
            pj_enc_project(&t.c.wb, 400 + i, &p);
            ck_assert_int_eq(pj_ring_push(&t.c.ring, PJ_RING_SQ, t.c.wb.data, t.c.wb.len), 0);
        }
        ck_assert_double_eq(pjd_wait_stat(&mon, "inflight", NREQ, 10000), NREQ);
        if (round == 1)
            break;
        int got = 0;
        uint8_t buf[4096];
        long long end = pjd_now_ms() + 20000;
        while (got < NREQ && pjd_now_ms() < end) {
            size_t len = 0;
            if (pj_ring_pop(&t.c.ring, PJ_RING_CQ, buf, sizeof buf, &len) == 0) {
                pj_hdr h;
                char err[128];
                ck_assert_int_eq(pj_dec_hdr(buf, len, 1u << 20, &h, err, sizeof err), PJ_OK);
                ck_assert_int_eq(h.type, PJ_MSG_DONE);
                got++;
            } else {
                pjd_sleep_ms(5);
            }
        }
        ck_assert_int_eq(got, NREQ);
    }
    pjc_close(&t);
    ck_assert_double_eq(pjd_wait_stat(&mon, "connections.closing", 1, 10000), 1);
    ck_assert_double_eq(pjd_wait_stat(&mon, "connections.closing", 0, 30000), 0);
    ck_assert_double_eq(pjd_wait_stat(&mon, "inflight", 0, 10000), 0);
    ck_assert_double_eq(pjd_stat(&mon, "ring.replies_lost"), 0);
    ck_assert_double_eq(pjd_stat(&mon, "connections.current"), 1);
    pjt_close(&mon);
    pjd_stop(&d);
}
END_TEST

/* Deferred submits (every third says "not now") with several running:
 * each of 16 requests answered OK, y right, and the retry path taken.
 * Their order is not checked here: sends over nng contexts arrive in no
 * fixed order (test_daemon_e2e deferred_submits covers the retry's
 * order). */
START_TEST(defer_with_several_running)
{
    pj_dproc d;
    char why[512];
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[NOPS];
    setenv("PROJD_CPU_DEFER_EVERY", "3", 1);
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 20000}}", &t, &sh, ops, NOPS);
    unsetenv("PROJD_CPU_DEFER_EVERY");
    enum { N = 16 };
    pjt_async a[N];
    send_n(&t, a, N, ops, 500);
    recv_n(a, N, 500, PJ_OK);
    ck_assert_msg(pjc_verify(&t, &sh, why, sizeof why) == 0, "%s", why);
    ck_assert_double_gt(pjd_stat(&t.c, "submits_deferred"), 0);
    ck_assert_double_eq(pjd_stat(&t.c, "inflight"), 0);
    pjc_close(&t);
    pjd_stop(&d);
}
END_TEST

/* The systemd watchdog with several requests of one connection on the
 * backend: no job runs longer than 400 ms, WatchdogSec = 2 s (limit 1 s). */
START_TEST(watchdog_with_several_running)
{
    pj_dproc d;
    pjc_conn t;
    pjc_shape sh;
    pj_op ops[1];
    setenv("WATCHDOG_USEC", "2000000", 1);
    unsetenv("WATCHDOG_PID");
    start_staged(&d, "{\"cpu\": {\"min_op_us\": 400000}}", &t, &sh, ops, 1);
    unsetenv("WATCHDOG_USEC");
    enum { N = 8 };
    pjt_async a[N];
    pj_project p = {.n_ops = 1, .ops = ops};
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(pjt_project_send(&t.c, &a[i], 600 + i, &p), 0);
    double maxexec = 0;
    for (int i = 0; i < N; i++) {
        pj_op_result rr[1];
        pj_done done = {.ops = rr};
        ck_assert_int_eq(pjt_project_recv(&a[i], NULL, &done, 1), PJ_OK);
        if (done.exec_ns / 1e6 > maxexec)
            maxexec = done.exec_ns / 1e6;
    }
    double stalls = pjd_stat(&t.c, "watchdog.stalls");
    pjc_close(&t);
    ck_assert_msg(stalls == 0, "watchdog withheld though no job ran past %.0f ms", maxexec);
    pjd_stop(&d);
}
END_TEST

int main(void)
{
    /* Every daemon of the suite inherits it. */
    setenv("PROJD_CPU_STREAM_DEPTH", "4", 1);
    if (pjc_init(g_model_path, sizeof g_model_path) != 0)
        return 1;
    const pjd_case cases[] = {
        {"close_with_several_running", close_with_several_running},
        {"drain_with_several_running", drain_with_several_running},
        {"shrink_with_several_running", shrink_with_several_running},
        {"ring_several_running", ring_several_running},
        {"defer_with_several_running", defer_with_several_running},
        {"watchdog_with_several_running", watchdog_with_several_running},
    };
    return pjd_run_suite("daemon_depth", cases, sizeof cases / sizeof cases[0], 120);
}
