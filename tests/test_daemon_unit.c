/* test_daemon_unit.c — the daemon's parts in process: span and op
 * validation, the buffer registry, the SIGBUS guard, histograms, the cpu
 * backend's worker pool against the reference, the log format, a peer's
 * supplementary groups and whether it has exited, and the watch on closed
 * connections whose jobs wait for their client's events.
 */
#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "daemon/backend.h"
#include "daemon/bufreg.h"
#include "daemon/closer.h"
#include "daemon/envknob.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/orphans.h"
#include "daemon/peercred.h"
#include "daemon/shmguard.h"
#include "daemon/stats.h"
#include "daemon/validate.h"
#include "kernels/refgemm.h"
#include "tests/helpers/daemon_check.h"
#include "tests/helpers/daemon_test.h"
#include "tests/helpers/fixture.h"
#include "tests/helpers/wire_client.h"

static char g_model_path[4200];

/* ---- peer groups (daemon/peercred) -------------------------------------------- */

START_TEST(peer_groups)
{
    uint32_t g[4];
    const char *st = "Name:\tpython3\nUid:\t1000\t1001\t1001\t1001\nGid:\t5\t5\t5\t5\n"
                     "FDSize:\t64\nGroups:\t4 24 27 998 \nNStgid:\t77\n";
    ck_assert_int_eq(pj_peer_groups_parse(st, 1001, g, 4), 4);
    ck_assert_uint_eq(g[0], 4);
    ck_assert_uint_eq(g[3], 998);
    ck_assert_int_eq(pj_peer_groups_parse(st, 1001, g, 2), 2); /* the first max */
    ck_assert_uint_eq(g[1], 24);
    /* The effective uid (the second) must be the peer's: a reused pid is
     * another process. */
    ck_assert_int_eq(pj_peer_groups_parse(st, 1000, g, 4), -1);
    ck_assert_int_eq(pj_peer_groups_parse("Uid:\t7\t7\t7\t7\nGroups:\t\nNStgid:\t9\n", 7, g, 4), 0);
    ck_assert_int_eq(pj_peer_groups_parse("Uid:\t7\t7\t7\t7\n", 7, g, 4), -1);
    ck_assert_int_eq(pj_peer_groups(0, 0, g, 4), -1);
    /* This process, read through /proc, against getgroups(). */
    gid_t mine[64];
    int nm = getgroups(64, mine);
    uint32_t got[64];
    ck_assert_int_eq(pj_peer_groups((uint64_t)getpid(), (uint32_t)geteuid(), got, 64), nm);
    for (int i = 0; i < nm; i++)
        ck_assert_uint_eq(got[i], mine[i]);
    ck_assert_int_eq(pj_peer_groups((uint64_t)getpid(), (uint32_t)geteuid() + 1, got, 64), -1);
}
END_TEST

/* ---- spans ------------------------------------------------------------------ */

/* ---- closed connections' client waits (daemon/orphans) -------------------------- */

/* A backend whose streams are counters: g_waits[i] jobs of stream i still
 * wait for their client's events. */
struct pj_backend_stream {
    int idx;
};
static uint32_t g_waits[3];
static int g_destroyed[3];
static int g_lost_calls[3];    /* stream_lost per stream */
static int g_lost_expected[3]; /* whether stream_destroy should find it called */

static uint32_t fake_client_waits(pj_backend *b, pj_backend_stream *bs)
{
    (void)b;
    return g_waits[bs->idx];
}

static void fake_stream_destroy(pj_backend *b, pj_backend_stream *bs)
{
    (void)b;
    ck_assert_int_eq(g_lost_calls[bs->idx] > 0, g_lost_expected[bs->idx]);
    g_destroyed[bs->idx]++;
}

static void fake_stream_lost(pj_backend *b, pj_backend_stream *bs)
{
    (void)b;
    g_lost_calls[bs->idx]++;
}

/* A watch as the server opens one at accept. */
static pj_peer_watch *watch_of(pid_t pid)
{
    static pj_peer_watch w[8];
    static int next;
    pj_peer_watch *p = &w[next++ % 8];
    pj_peer_watch_open(p, (int32_t)pid);
    return p;
}

static pid_t sleeper(void)
{
    pid_t pid = fork();
    if (pid == 0) {
        pause();
        _exit(0);
    }
    ck_assert_int_gt(pid, 0);
    return pid;
}

/* A killed process becomes a zombie soon, not at once: polls up to 1 s. */
static int seen_exited(const pj_peer_watch *w)
{
    for (int i = 0; i < 200; i++) {
        if (pj_peer_exited(w) == 1)
            return 1;
        usleep(5000);
    }
    return 0;
}

START_TEST(peer_exit_and_stat_state)
{
    ck_assert_int_eq(pj_peer_stat_state("123 (projd) S 1 2 3", NULL), 'S');
    ck_assert_int_eq(pj_peer_stat_state("9 (a) b) (c) Z 1", NULL), 'Z'); /* the last ')' */
    ck_assert_int_eq(pj_peer_stat_state("9 (a", NULL), 0);
    ck_assert_int_eq(pj_peer_stat_state(NULL, NULL), 0);
    unsigned long long start = 1;
    ck_assert_int_eq(pj_peer_stat_state("7 (a b) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 "
                                        "424242 19 20",
                                        &start),
                     'R');
    ck_assert_uint_eq(start, 424242); /* field 22 */
    ck_assert_int_eq(pj_peer_stat_state("7 (a) R 1 2", &start), 'R');
    ck_assert_uint_eq(start, 0); /* too short: unknown */
    pj_peer_watch w;
    pj_peer_watch_open(&w, 0);
    ck_assert_int_eq(pj_peer_exited(&w), -1);
    pj_peer_watch_open(&w, (int32_t)getpid());
    ck_assert_int_eq(pj_peer_exited(&w), 0);
    pj_peer_watch_close(&w);
    /* A child: running, then a zombie (killed, not reaped), then reaped
     * after the watch was opened. */
    pid_t pid = sleeper();
    pj_peer_watch_open(&w, (int32_t)pid);
    ck_assert_int_eq(pj_peer_exited(&w), 0);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_msg(seen_exited(&w), "a killed child (a zombie) was not seen as exited in 1 s");
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    ck_assert_int_eq(pj_peer_exited(&w), 1);
    pj_peer_watch_close(&w);
    /* Opened after it was reaped: no such process. */
    pj_peer_watch_open(&w, (int32_t)pid);
    ck_assert_int_eq(pj_peer_exited(&w), 1);
    pj_peer_watch_close(&w);
    /* Without a pidfd (kernels before 5.3): /proc/<pid>/stat's state and
     * start time, as pj_peer_watch_open reads them then. */
    pid = sleeper();
    pj_peer_watch_open(&w, (int32_t)pid);
    pj_peer_watch_close(&w); /* drops the pidfd: the /proc path from here */
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    ck_assert_int_ge(pj_fixture_read_text(path, buf, sizeof buf), 0);
    char st = pj_peer_stat_state(buf, &w.starttime);
    ck_assert_msg(st == 'S' || st == 'R', "the sleeping child's state '%c'", st);
    ck_assert_uint_gt(w.starttime, 0);
    ck_assert_int_eq(pj_peer_exited(&w), 0);
    /* The same pid with another start time: another process, so the
     * client has exited. */
    w.starttime++;
    ck_assert_int_eq(pj_peer_exited(&w), 1);
    w.starttime--;
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    ck_assert_msg(seen_exited(&w), "a zombie was not seen as exited through /proc in 1 s");
    ck_assert_int_eq(waitpid(pid, NULL, 0), pid);
    ck_assert_int_eq(pj_peer_exited(&w), 1); /* no /proc entry at all */
}
END_TEST

START_TEST(orphans_lost_only_when_the_client_exited)
{
    pj_backend_ops ops = {.name = "fake",
                          .stream_destroy = fake_stream_destroy,
                          .stream_client_waits = fake_client_waits,
                          .stream_lost = fake_stream_lost};
    pj_backend be = {.ops = &ops};
    pj_backend_stream bs[3] = {{0}, {1}, {2}};
    memset(g_waits, 0, sizeof g_waits);
    memset(g_destroyed, 0, sizeof g_destroyed);
    memset(g_lost_calls, 0, sizeof g_lost_calls);
    memset(g_lost_expected, 0, sizeof g_lost_expected);
    g_lost_expected[2] = 1;
    pj_orphans o = {0};
    /* No job waits: not taken (the caller destroys the stream as before). */
    ck_assert_int_eq(pj_orphans_adopt(&o, &be, &bs[0], watch_of(getpid()), 1), 0);
    ck_assert_uint_eq(o.count, 0);
    /* A backend that cannot tell: not taken either. */
    pj_backend_ops bare = {.name = "bare", .stream_destroy = fake_stream_destroy};
    pj_backend be_bare = {.ops = &bare};
    g_waits[0] = 2;
    ck_assert_int_eq(pj_orphans_adopt(&o, &be_bare, &bs[0], watch_of(getpid()), 1), 0);
    /* Stream 0: a client that still runs; stream 1: one that will be
     * killed; stream 2: one already gone (reaped) when its connection
     * closes, lost within adopt's own sweep. */
    pid_t alive = sleeper(), dying = sleeper(), gone = sleeper();
    ck_assert_int_eq(kill(gone, SIGKILL), 0);
    ck_assert_int_eq(waitpid(gone, NULL, 0), gone);
    ck_assert_int_eq(pj_orphans_adopt(&o, &be, &bs[0], watch_of(alive), 1), 1);
    g_waits[1] = 3;
    ck_assert_int_eq(pj_orphans_adopt(&o, &be, &bs[1], watch_of(dying), 2), 1);
    ck_assert_uint_eq(o.lost, 0);
    g_waits[2] = 1;
    ck_assert_int_eq(pj_orphans_adopt(&o, &be, &bs[2], watch_of(gone), 3), 1);
    ck_assert_uint_eq(o.lost, 1);
    ck_assert_int_eq(g_lost_calls[2], 1); /* the backend told, once */
    ck_assert_int_eq(g_lost_calls[0] + g_lost_calls[1], 0);
    ck_assert_int_eq(o.lost_pid, (int32_t)gone);
    ck_assert_uint_eq(o.lost_serial, 3);
    ck_assert_uint_eq(o.lost_jobs, 1);
    ck_assert_uint_eq(o.count, 3);
    /* Its waits pass after all (cannot happen on the cuda backend, but a
     * backend may): the stream goes, the count of lost ones drops. */
    g_waits[2] = 0;
    pj_orphans_sweep(&o, &be, 0);
    ck_assert_int_eq(g_destroyed[2], 1);
    ck_assert_uint_eq(o.lost, 0);
    ck_assert_int_eq(o.lost_pid, 0); /* no lost one left to name */
    ck_assert_uint_eq(o.lost_jobs, 0);
    ck_assert_uint_eq(o.lost_total, 1);
    /* Both other clients run: nothing lost, nothing destroyed. */
    pj_orphans_sweep(&o, &be, 0);
    ck_assert_uint_eq(o.lost, 0);
    ck_assert_int_eq(g_destroyed[0] + g_destroyed[1], 0);
    ck_assert_int_eq(kill(dying, SIGKILL), 0);
    for (int i = 0; i < 200 && !o.lost; i++) {
        pj_orphans_sweep(&o, &be, 0);
        if (!o.lost)
            usleep(5000);
    }
    ck_assert_uint_eq(o.lost, 1);
    ck_assert_int_eq(o.lost_pid, (int32_t)dying);
    ck_assert_uint_eq(o.lost_jobs, 3);
    ck_assert_uint_eq(o.lost_total, 2);
    g_lost_expected[1] = 1;
    /* A lost stream is kept (its jobs still hold it), and counted and told
     * once. */
    pj_orphans_sweep(&o, &be, 0);
    ck_assert_int_eq(g_destroyed[1], 0);
    ck_assert_uint_eq(o.lost_total, 2);
    ck_assert_int_eq(g_lost_calls[1], 1);
    ck_assert_int_eq(g_lost_calls[0], 0);
    /* The live client's waits pass: its stream goes, not lost. */
    g_waits[0] = 0;
    pj_orphans_sweep(&o, &be, 0);
    ck_assert_int_eq(g_destroyed[0], 1);
    ck_assert_uint_eq(o.count, 1);
    ck_assert_uint_eq(o.lost, 1);
    /* At stop every watched stream goes. */
    g_waits[0] = 5;
    ck_assert_int_eq(pj_orphans_adopt(&o, &be, &bs[0], watch_of(alive), 4), 1);
    pj_orphans_sweep(&o, &be, 1);
    ck_assert_int_eq(g_destroyed[0], 2);
    ck_assert_int_eq(g_destroyed[1], 1);
    ck_assert_uint_eq(o.count, 0);
    ck_assert_uint_eq(o.lost, 0);
    ck_assert_uint_eq(o.adopted, 4);
    kill(alive, SIGKILL);
    waitpid(alive, NULL, 0);
    waitpid(dying, NULL, 0);
}
END_TEST

START_TEST(span_checks)
{
    char err[256];
    /* rows 4, ld 10, width 8: (3 * 10 + 8) * 2 = 76 bytes. */
    uint64_t bytes = 0;
    ck_assert_int_eq(pj_span_bytes(4, 10, 8, &bytes), 0);
    ck_assert_uint_eq(bytes, 76);
    ck_assert_int_eq(pj_span_bytes(1, UINT64_MAX, 3, &bytes), 0);
    ck_assert_uint_eq(bytes, 6);
    ck_assert_int_eq(pj_span_bytes(2, UINT64_MAX / 2, 2, &bytes), -1);
    ck_assert_int_eq(pj_validate_span("x", 0, 4, 10, 8, 76, NULL, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_validate_span("x", 0, 4, 10, 8, 75, NULL, err, sizeof err), PJ_E_BOUNDS);
    uint64_t span = 0;
    ck_assert_int_eq(pj_validate_span("x", 24, 4, 10, 8, 100, &span, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(span, 76);
    ck_assert_int_eq(pj_validate_span("x", 26, 4, 10, 8, 100, NULL, err, sizeof err), PJ_E_BOUNDS);
    ck_assert_int_eq(pj_validate_span("x", 1, 1, 1, 1, 100, NULL, err, sizeof err), PJ_E_BOUNDS);
    ck_assert_ptr_nonnull(strstr(err, "aligned"));
    /* One row: the stride does not matter. */
    ck_assert_int_eq(pj_validate_span("y", 0, 1, UINT64_MAX, 3, 6, NULL, err, sizeof err), PJ_OK);
    /* Every step of the arithmetic overflowing. */
    ck_assert_int_eq(
        pj_validate_span("y", 0, 3, UINT64_MAX / 2 + 1, 1, UINT64_MAX, NULL, err, sizeof err),
        PJ_E_BOUNDS); /* (rows-1)*ld */
    ck_assert_int_eq(
        pj_validate_span("y", 0, 2, UINT64_MAX - 1, 4, UINT64_MAX, NULL, err, sizeof err),
        PJ_E_BOUNDS); /* + width */
    ck_assert_int_eq(
        pj_validate_span("y", 0, 2, UINT64_MAX / 2, 2, UINT64_MAX, NULL, err, sizeof err),
        PJ_E_BOUNDS); /* * 2 */
    ck_assert_int_eq(
        pj_validate_span("y", UINT64_MAX - 1, 1, 1, 1, UINT64_MAX, NULL, err, sizeof err),
        PJ_E_BOUNDS); /* + offset */
    ck_assert_ptr_nonnull(strstr(err, "overflows"));
    /* Largest span that fits exactly. */
    ck_assert_int_eq(pj_validate_span("y", 2, 1, 1, 1, 4, NULL, err, sizeof err), PJ_OK);
}
END_TEST

/* Rows of x and y that share a byte, against every pair compared: random
 * offsets, strides and widths (small, so that many meet and many only
 * touch), strides from one row's width to a few more. */
START_TEST(rows_overlap_against_all_pairs)
{
    uint64_t seed = 0x9e3779b97f4a7c15ull;
    unsigned met = 0, apart = 0;
    for (int t = 0; t < 20000; t++) {
        seed = seed * 6364136223846793005ull + 1442695040888963407ull;
        uint64_t r = seed >> 11;
        uint32_t m = 1 + (uint32_t)(r % 9);
        uint64_t xw = 1 + (r >> 4) % 6, yw = 1 + (r >> 8) % 6;
        uint64_t xs = xw + (r >> 12) % 7, ys = yw + (r >> 16) % 7;
        uint64_t xa = 1000 + (r >> 20) % 40, ya = 1000 + (r >> 26) % 40;
        int want = 0;
        uint64_t lo = 0;
        for (uint32_t i = 0; i < m; i++)
            for (uint32_t j = 0; j < m; j++) {
                uint64_t x0 = xa + i * xs, y0 = ya + j * ys;
                if (x0 < y0 + yw && y0 < x0 + xw) {
                    uint64_t b = x0 > y0 ? x0 : y0;
                    if (!want || b < lo)
                        lo = b;
                    want = 1;
                }
            }
        uint64_t at = 0;
        int got = pj_rows_overlap(xa, xs, xw, ya, ys, yw, m, &at);
        ck_assert_msg(
            got == want, "m %u x %llu+%llu*i (%llu) y %llu+%llu*j (%llu): got %d, want %d", m,
            (unsigned long long)xa, (unsigned long long)xs, (unsigned long long)xw,
            (unsigned long long)ya, (unsigned long long)ys, (unsigned long long)yw, got, want);
        if (got) {
            /* A shared byte, in a row of each. */
            ck_assert_uint_ge(at, lo);
            int in_x = 0, in_y = 0;
            for (uint32_t i = 0; i < m; i++) {
                in_x |= at >= xa + i * xs && at < xa + i * xs + xw;
                in_y |= at >= ya + i * ys && at < ya + i * ys + yw;
            }
            ck_assert(in_x && in_y);
            met++;
        } else {
            apart++;
        }
    }
    ck_assert_uint_gt(met, 1000); /* both outcomes well covered */
    ck_assert_uint_gt(apart, 1000);
    /* Rows that only touch share nothing. */
    uint64_t at;
    ck_assert_int_eq(pj_rows_overlap(0, 8, 4, 4, 8, 4, 1000, &at), 0);
    ck_assert_int_eq(pj_rows_overlap(0, 8, 4, 3, 8, 4, 1000, &at), 1);
    ck_assert_uint_eq(at, 3);
}
END_TEST

/* ---- registry + validation ---------------------------------------------------- */

/* A backend whose buffers the device may still use (buffer_busy): the
 * registry retires them instead of closing them (buffer_close would wait
 * for the device on the loop), and closes them once idle. */
static int g_fake_busy, g_fake_closed;

static int fake_open_buf(pj_backend *b, const pj_buf_desc *d, void **addr, void **handle, char *err,
                         size_t errlen)
{
    (void)b;
    (void)err;
    (void)errlen;
    *addr = d->host;
    *handle = (void *)0x1;
    return PJ_OK;
}

static void fake_close_buf(pj_backend *b, void *handle)
{
    (void)b;
    ck_assert_ptr_eq(handle, (void *)0x1);
    g_fake_closed++;
}

static int fake_busy(pj_backend *b, void *handle)
{
    (void)b;
    (void)handle;
    return g_fake_busy;
}

/* A registry of this process on be, an 8192-byte shm object and the
 * REGISTER request that names it. */
static void fake_registry(pj_bufreg *reg, pj_backend *be, pjt_shm *a, pj_register *rq)
{
    pj_bufreg_init(reg, be, (uint32_t)getuid(), (int32_t)getpid());
    ck_assert_int_eq(pjt_shm_create(a, 8192), 0);
    *rq = (pj_register){.kind = PJ_BUF_SHM, .size = 8192};
    snprintf(rq->shm_name, sizeof rq->shm_name, "%s", a->name);
}

START_TEST(registry_retires_busy_buffers)
{
    pj_backend_ops ops = {.name = "fake",
                          .buffer_open = fake_open_buf,
                          .buffer_close = fake_close_buf,
                          .buffer_busy = fake_busy};
    pj_backend be = {.ops = &ops};
    pj_bufreg reg;
    pjt_shm a;
    pj_register rq;
    fake_registry(&reg, &be, &a, &rq);
    char err[512];
    uint64_t n0, bytes0;
    pj_bufreg_totals(&n0, &bytes0);
    pj_buf *x, *y;
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &x, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &y, err, sizeof err), PJ_OK);
    /* Busy: UNREGISTER answers at once, nothing is closed, the memory stays
     * counted (it is still mapped), the connection holds nothing. */
    g_fake_busy = 1;
    g_fake_closed = 0;
    ck_assert_int_eq(pj_bufreg_unregister(&reg, x->id, err, sizeof err), PJ_OK);
    ck_assert_int_eq(g_fake_closed, 0);
    ck_assert_uint_eq(reg.n_held, 1);
    ck_assert_uint_eq(pj_bufreg_reap(0), 1);
    uint64_t n1, bytes1;
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0 + 2);
    /* The connection goes (y retires too), and the device is done with x
     * and y only later. */
    pj_bufreg_clear(&reg);
    ck_assert_uint_eq(reg.n_held, 0);
    ck_assert_uint_eq(pj_bufreg_reap(0), 2);
    ck_assert_int_eq(g_fake_closed, 0);
    g_fake_busy = 0;
    ck_assert_uint_eq(pj_bufreg_reap(0), 0);
    ck_assert_int_eq(g_fake_closed, 2);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0);
    ck_assert_uint_eq(bytes1, bytes0);
    /* At shutdown a busy one is closed anyway (buffer_close waits). */
    pj_bufreg_init(&reg, &be, (uint32_t)getuid(), (int32_t)getpid());
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &x, err, sizeof err), PJ_OK);
    g_fake_busy = 1;
    pj_bufreg_clear(&reg);
    ck_assert_uint_eq(pj_bufreg_reap(0), 1);
    ck_assert_uint_eq(pj_bufreg_reap(1), 0);
    ck_assert_int_eq(g_fake_closed, 3);
    g_fake_busy = 0;
    pjt_shm_destroy(&a);
}
END_TEST

/* A backend whose buffer_close waits at a gate, as cudaHostUnregister waits
 * for the device (for good when a lane is held by a dead client). */
static pthread_mutex_t g_gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t g_gate_cv = PTHREAD_COND_INITIALIZER;
static int g_gate_open, g_gate_closed, g_gate_off_thread;
static pthread_t g_gate_caller;

static void gated_close_buf(pj_backend *b, void *handle)
{
    (void)b;
    (void)handle;
    pthread_mutex_lock(&g_gate_mu);
    while (!g_gate_open)
        pthread_cond_wait(&g_gate_cv, &g_gate_mu);
    g_gate_closed++;
    if (!pthread_equal(pthread_self(), g_gate_caller))
        g_gate_off_thread++;
    pthread_mutex_unlock(&g_gate_mu);
}

static void gate_set(int open)
{
    pthread_mutex_lock(&g_gate_mu);
    g_gate_open = open;
    pthread_cond_broadcast(&g_gate_cv);
    pthread_mutex_unlock(&g_gate_mu);
}

static int gate_closed(void)
{
    pthread_mutex_lock(&g_gate_mu);
    int n = g_gate_closed;
    pthread_mutex_unlock(&g_gate_mu);
    return n;
}

/* Releases (buffer_close, unmap, the totals) run on the closer's thread: a
 * close that waits for the device holds neither UNREGISTER nor the
 * connection's end; the buffers stay counted until their release returns;
 * the shutdown's bounded stop reports a release that does not return. */
START_TEST(registry_releases_on_the_closer)
{
    pj_backend_ops ops = {
        .name = "gated", .buffer_open = fake_open_buf, .buffer_close = gated_close_buf};
    pj_backend be = {.ops = &ops};
    char err[512];
    ck_assert_int_eq(pj_closer_start(err, sizeof err), 0);
    g_gate_caller = pthread_self();
    gate_set(0);
    pj_bufreg reg;
    pjt_shm a;
    pj_register rq;
    fake_registry(&reg, &be, &a, &rq);
    uint64_t n0, bytes0, n1, bytes1;
    pj_bufreg_totals(&n0, &bytes0);
    pj_buf *x, *y;
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &x, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &y, err, sizeof err), PJ_OK);
    /* Both calls return while the first close waits at the gate; the
     * buffers no longer count, their mapped bytes do. */
    ck_assert_int_eq(pj_bufreg_unregister(&reg, x->id, err, sizeof err), PJ_OK);
    pj_bufreg_clear(&reg);
    ck_assert_uint_eq(reg.n_held, 0);
    ck_assert_uint_eq(pj_closer_pending(), 2);
    usleep(50 * 1000);
    ck_assert_int_eq(gate_closed(), 0);
    ck_assert_uint_ge(pj_closer_running_ms(), 20);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0);
    ck_assert_uint_eq(bytes1, bytes0 + 2 * 8192);
    ck_assert_uint_eq(pj_bufreg_total_held_bytes(), bytes1);
    /* The device is done: both release, in order, off this thread. */
    gate_set(1);
    for (int i = 0; i < 500 && pj_closer_pending() > 0; i++)
        usleep(10 * 1000);
    ck_assert_uint_eq(pj_closer_pending(), 0);
    ck_assert_int_eq(gate_closed(), 2);
    ck_assert_int_eq(g_gate_off_thread, 2);
    ck_assert_uint_eq(pj_closer_running_ms(), 0);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0);
    ck_assert_uint_eq(bytes1, bytes0);
    /* A release that never returns: the stop gives up after its bound and
     * says how many are left. */
    gate_set(0);
    pj_bufreg_init(&reg, &be, (uint32_t)getuid(), (int32_t)getpid());
    ck_assert_int_eq(pj_bufreg_register(&reg, &rq, 8, &x, err, sizeof err), PJ_OK);
    pj_bufreg_clear(&reg);
    ck_assert_uint_eq(pj_closer_stop(100), 1);
    gate_set(1);
    for (int i = 0; i < 500 && pj_closer_pending() > 0; i++)
        usleep(10 * 1000);
    ck_assert_int_eq(gate_closed(), 3);
    pjt_shm_destroy(&a);
}
END_TEST

/* A RETRY of a REGISTER (its header flag, the same req_id) whose reply the
 * client did not get is answered with the buffer that REGISTER made, when
 * it names that very buffer (same object by identity, or same CUDA IPC
 * handle and device; same size) and it is live: nothing is opened, even at
 * the connection's limit, and in either order. Anything else registers
 * anew, and a REGISTER without the flag does unless its own RETRY came
 * first (one buffer may hold several ids). */
START_TEST(registry_retried_register)
{
    pj_backend_ops ops = {
        .name = "fake", .buffer_open = fake_open_buf, .buffer_close = fake_close_buf};
    pj_backend be = {.ops = &ops};
    pj_bufreg reg;
    pjt_shm a;
    pj_register rq;
    fake_registry(&reg, &be, &a, &rq);
    const pj_bufreg_limits lim = {.max_buffers = 16,
                                  .max_buffer_bytes = UINT64_MAX,
                                  .max_conn_bytes = UINT64_MAX,
                                  .max_total_bytes = UINT64_MAX};
    pj_bufreg_limits one = lim;
    one.max_buffers = 1;
    char err[512];
    uint64_t n0, bytes0, n1, bytes1;
    pj_bufreg_totals(&n0, &bytes0);
    pj_buf *x, *y;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 7, 0, &x, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &one, 7, 1, &y, err, sizeof err), PJ_OK);
    ck_assert_ptr_eq(x, y);
    ck_assert_uint_eq(reg.n_held, 1);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0 + 1);
    ck_assert_uint_eq(bytes1, bytes0 + 8192);
    /* Without the flag, the same buffer again is a second registration. */
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 8, 0, &y, err, sizeof err), PJ_OK);
    ck_assert_ptr_ne(x, y);
    ck_assert_uint_eq(y->id, x->id + 1);
    uint32_t last = y->id;
    /* A retry of a REGISTER that made nothing, or of another size. */
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 9, 1, &y, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(y->id, ++last);
    rq.size = 4096;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 7, 1, &y, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(y->id, ++last);
    rq.size = 8192;
    /* Another object made under the same name is not the one mapped. */
    ck_assert_int_eq(shm_unlink(a.name), 0);
    int fd = shm_open(a.name, O_RDWR | O_CREAT | O_EXCL, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(ftruncate(fd, 8192), 0);
    close(fd);
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 7, 1, &y, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(y->id, ++last);
    /* The RETRY handled first (contexts hand requests over in any order):
     * the late REGISTER of its req_id is answered with what the RETRY made. */
    pj_buf *r1, *r2;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 11, 1, &r1, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(r1->id, ++last);
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &one, 11, 0, &r2, err, sizeof err), PJ_OK);
    ck_assert_ptr_eq(r1, r2);
    /* After UNREGISTER the registration is gone: a late retry registers. */
    pj_buf *z;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 10, 0, &z, err, sizeof err), PJ_OK);
    const uint32_t zid = z->id;
    ck_assert_int_eq(pj_bufreg_unregister(&reg, zid, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &rq, &lim, 10, 1, &y, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(y->id, zid + 1);

    /* CUDA IPC: the handle, the device and the size. */
    pj_register cq = {.kind = PJ_BUF_CUDA, .size = 1 << 20};
    memset(cq.ipc_handle, 0x5a, sizeof cq.ipc_handle);
    memset(cq.device_uuid, 0x11, sizeof cq.device_uuid);
    pj_buf *c1, *c2;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &cq, &lim, 20, 0, &c1, err, sizeof err), PJ_OK);
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &cq, &lim, 20, 1, &c2, err, sizeof err), PJ_OK);
    ck_assert_ptr_eq(c1, c2);
    cq.ipc_handle[63] ^= 1;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &cq, &lim, 20, 1, &c2, err, sizeof err), PJ_OK);
    ck_assert_ptr_ne(c1, c2);
    cq.ipc_handle[63] ^= 1;
    cq.device_uuid[0] ^= 1;
    ck_assert_int_eq(pj_bufreg_register_req(&reg, &cq, &lim, 20, 1, &c2, err, sizeof err), PJ_OK);
    ck_assert_ptr_ne(c1, c2);
    pj_bufreg_clear(&reg);
    ck_assert_uint_eq(pj_bufreg_reap(0), 0);
    pjt_shm_destroy(&a);
}
END_TEST

START_TEST(registry_and_ops)
{
    const pj_model *model = pjc_model();
    pj_bufreg reg;
    pj_bufreg_init(&reg, NULL, 0, (int32_t)getpid());
    char err[512];
    pjt_shm a, b;
    ck_assert_int_eq(pjt_shm_create(&a, 65536), 0);
    ck_assert_int_eq(pjt_shm_create(&b, 8192), 0);
    pj_register *rq = calloc(1, sizeof *rq);
    rq->kind = PJ_BUF_SHM;
    rq->size = 65536;
    snprintf(rq->shm_name, sizeof rq->shm_name, "%s", a.name);
    uint64_t n0, bytes0;
    pj_bufreg_totals(&n0, &bytes0);
    pj_buf *xa, *yb, *tmp;
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &xa, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(xa->id, 1);
    rq->size = 8192;
    snprintf(rq->shm_name, sizeof rq->shm_name, "%s", b.name);
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &yb, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(yb->id, 2);
    /* Bigger than the object; not there; a limit of 2. */
    rq->size = 8193;
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &tmp, err, sizeof err), PJ_E_REGISTER);
    ck_assert_ptr_nonnull(strstr(err, "8192 bytes"));
    rq->size = 4096;
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 2, &tmp, err, sizeof err), PJ_E_LIMIT);
    snprintf(rq->shm_name, sizeof rq->shm_name, "/pjt-nonexistent-%d", (int)getpid());
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &tmp, err, sizeof err), PJ_E_REGISTER);
    /* Someone else's object (the "peer" here claims uid 4242). */
    pj_bufreg other;
    pj_bufreg_init(&other, NULL, 4242, 1);
    snprintf(rq->shm_name, sizeof rq->shm_name, "%s", b.name);
    ck_assert_int_eq(pj_bufreg_register(&other, rq, 3, &tmp, err, sizeof err), PJ_E_REGISTER);
    ck_assert_ptr_nonnull(strstr(err, "not by the client"));
    pj_bufreg_clear(&other);
    rq->kind = PJ_BUF_CUDA;
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &tmp, err, sizeof err), PJ_E_REGISTER);
    free(rq);

    uint64_t n1, bytes1;
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0 + 2);
    ck_assert_uint_eq(bytes1, bytes0 + 65536 + 8192);

    /* Ops: each check in its order. */
    const pj_model_layer *L = &model->layers[0];
    pj_op good = {.layer = 0,
                  .m = 2,
                  .n = 16,
                  .x_buf = 1,
                  .x_off = 64,
                  .x_ld = L->w.k,
                  .y_buf = 2,
                  .y_off = 128,
                  .y_ld = 32};
    pj_exec_op ex;
    pj_buf *xb, *ybuf;
    ck_assert_int_eq(
        pj_validate_op(&good, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err), PJ_OK);
    ck_assert_ptr_eq(ex.x, (char *)xa->addr + 64);
    ck_assert_ptr_eq(ex.y, (char *)yb->addr + 128);
    ck_assert_ptr_eq(xb, xa);
    ck_assert_ptr_eq(ybuf, yb);
    ck_assert_uint_eq(ex.k, L->w.k);
    struct {
        const char *what;
        pj_op op;
        int code;
    } bad[] = {
        {"layer", good, PJ_E_LAYER},   {"m 0", good, PJ_E_SHAPE},
        {"m big", good, PJ_E_SHAPE},   {"n 0", good, PJ_E_SHAPE},
        {"n big", good, PJ_E_SHAPE},   {"x_ld", good, PJ_E_SHAPE},
        {"y_ld", good, PJ_E_SHAPE},    {"flags", good, PJ_E_FLAGS},
        {"x buf", good, PJ_E_BUFFER},  {"y bounds", good, PJ_E_BOUNDS},
        {"x pitch", good, PJ_E_SHAPE}, {"y pitch", good, PJ_E_SHAPE},
    };
    bad[0].op.layer = model->n_layers;
    bad[0].op.m = 0; /* the layer is checked first */
    bad[1].op.m = 0;
    bad[2].op.m = 257;
    bad[3].op.n = 0;
    bad[4].op.n = L->max_n + 1;
    bad[4].op.y_ld = L->max_n + 1;
    bad[5].op.x_ld = L->w.k - 1;
    bad[6].op.y_ld = 15;
    bad[7].op.op_flags = 1;
    bad[8].op.x_buf = 3;
    bad[8].op.y_off = 1 << 30; /* the buffer is checked before the bounds */
    bad[9].op.y_off = 8192 - 2 * 32;
    bad[10].op.x_ld = 2049;  /* 4098 bytes, past the 4096 given */
    bad[10].op.op_flags = 1; /* the pitch is checked before the flags */
    bad[11].op.y_ld = 2049;
    bad[11].op.y_off = 1 << 30; /* ... and before the bounds */
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int st =
            pj_validate_op(&bad[i].op, 5, model, 256, 4096, &reg, &ex, &xb, &ybuf, err, sizeof err);
        ck_assert_msg(st == bad[i].code, "%s: got %s (%s)", bad[i].what, pj_status_name(st), err);
        ck_assert_msg(strncmp(err, "op 5", 4) == 0, "%s: message does not name the op: %s",
                      bad[i].what, err);
    }

    /* One row has no pitch: any stride the buffer holds. */
    pj_op one = good;
    one.m = 1;
    one.x_ld = 2049;
    ck_assert_int_eq(
        pj_validate_op(&one, 0, model, 256, 4096, &reg, &ex, &xb, &ybuf, err, sizeof err), PJ_OK);

    /* y sharing bytes with x in one buffer: refused, naming the first
     * shared byte; rows that interleave without sharing one, or that only
     * touch, run. */
    const uint64_t kb = (uint64_t)L->w.k * 2;
    ck_assert_uint_le(6 * kb + 64, 65536); /* the layouts below fit buffer 1 */
    pj_op same = good;
    same.y_buf = 1;
    same.x_off = 0;
    same.y_off = 0;
    ck_assert_int_eq(
        pj_validate_op(&same, 4, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err),
        PJ_E_BOUNDS);
    ck_assert_msg(strncmp(err, "op 4", 4) == 0 && strstr(err, "shares bytes with x") &&
                      strstr(err, "byte 0)"),
                  "%s", err);
    same.y_off = (uint64_t)L->w.k * 2 * 2 - 2; /* y's row 0 on x's row 1's last element */
    same.y_ld = 16;
    ck_assert_int_eq(
        pj_validate_op(&same, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err),
        PJ_E_BOUNDS);
    ck_assert_msg(strstr(err, "byte ") != NULL, "%s", err);
    same.y_off = (uint64_t)L->w.k * 2 * 2; /* just past x's span: touching only */
    ck_assert_int_eq(
        pj_validate_op(&same, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err), PJ_OK);
    pj_op inter = same; /* x rows 0 and 2 (stride 2k), y rows in between */
    inter.x_ld = 2 * (uint64_t)L->w.k;
    inter.y_ld = 2 * (uint64_t)L->w.k;
    inter.y_off = kb;
    ck_assert_int_eq(
        pj_validate_op(&inter, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err), PJ_OK);
    inter.y_off = kb - 2; /* one element into x's row 0, and row 1 likewise */
    ck_assert_int_eq(
        pj_validate_op(&inter, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err),
        PJ_E_BOUNDS);
    ck_assert_msg(strstr(err, "byte ") != NULL, "%s", err);

    /* Unregister while referenced: the id goes now, the mapping later. */
    pj_bufreg_ref(yb);
    ck_assert_int_eq(pj_bufreg_unregister(&reg, 2, err, sizeof err), PJ_OK);
    ck_assert_ptr_null(pj_bufreg_get(&reg, 2));
    ck_assert_int_eq(pj_bufreg_unregister(&reg, 2, err, sizeof err), PJ_E_BUFFER);
    ck_assert_int_eq(
        pj_validate_op(&good, 0, model, 256, 0, &reg, &ex, &xb, &ybuf, err, sizeof err),
        PJ_E_BUFFER);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0 + 2); /* still mapped */
    pj_bufreg_unref(&reg, yb);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0 + 1);
    /* A new registration never reuses an id. */
    rq = calloc(1, sizeof *rq);
    rq->kind = PJ_BUF_SHM;
    rq->size = 4096;
    snprintf(rq->shm_name, sizeof rq->shm_name, "%s", b.name);
    ck_assert_int_eq(pj_bufreg_register(&reg, rq, 3, &tmp, err, sizeof err), PJ_OK);
    ck_assert_uint_eq(tmp->id, 3);
    free(rq);
    pj_bufreg_clear(&reg);
    pj_bufreg_totals(&n1, &bytes1);
    ck_assert_uint_eq(n1, n0);
    ck_assert_uint_eq(bytes1, bytes0);
    pjt_shm_destroy(&a);
    pjt_shm_destroy(&b);
}
END_TEST

/* An object that must be private (a ring) is refused for any group or
 * other bit, and the reason says what the mode allows: 0644 and 0640 were
 * refused as "lets other users write it", which neither does. */
START_TEST(private_shm_refusal_says_open)
{
    pjt_shm a;
    ck_assert_int_eq(pjt_shm_create(&a, 4096), 0);
    const unsigned modes[] = {0644, 0640, 0604, 0660};
    for (int i = 0; i < 4; i++) {
        ck_assert_int_eq(fchmod(a.fd, modes[i]), 0);
        void *map = NULL;
        char err[512];
        ck_assert_int_eq(
            pj_shm_map_checked("RING_ATTACH", a.name, 4096, getuid(), 1, &map, err, sizeof err),
            PJ_E_REGISTER);
        char want[64];
        snprintf(want, sizeof want, "mode %03o lets other users open it; it must be 0600",
                 modes[i]);
        ck_assert_msg(strstr(err, want), "%s", err);
        ck_assert_ptr_null(map);
    }
    ck_assert_int_eq(fchmod(a.fd, 0600), 0);
    void *map = NULL;
    char err[512];
    ck_assert_int_eq(
        pj_shm_map_checked("RING_ATTACH", a.name, 4096, getuid(), 1, &map, err, sizeof err), PJ_OK);
    munmap(map, 4096);
    pjt_shm_destroy(&a);
}
END_TEST

/* ---- the SIGBUS guard ---------------------------------------------------------- */

START_TEST(sigbus_guard)
{
    ck_assert_int_eq(pj_shmguard_install(), 0);
    pjt_shm a;
    size_t size = 4 * (size_t)sysconf(_SC_PAGESIZE);
    ck_assert_int_eq(pjt_shm_create(&a, size), 0);
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    ck_assert(map != MAP_FAILED);
    int slot = pj_shmguard_add(map, size);
    ck_assert_int_ge(slot, 0);
    volatile unsigned char *p = map;
    p[0] = 1;
    ck_assert_int_eq(pj_shmguard_faulted(slot), 0);
    unsigned long before = pj_shmguard_total_faults();
    ck_assert_int_eq(ftruncate(a.fd, 0), 0);
    p[size - 1] = 7;        /* would be SIGBUS: absorbed */
    unsigned char v = p[0]; /* the first fault replaced the whole range: zeros */
    ck_assert_uint_eq(v, 0);
    ck_assert_uint_eq(p[size - 1], 7); /* the write landed in the private page */
    ck_assert_int_eq(pj_shmguard_faulted(slot), 1);
    ck_assert_uint_ge(pj_shmguard_total_faults(), before + 1);
    pj_shmguard_remove(slot);
    munmap(map, size);
    pjt_shm_destroy(&a);
}
END_TEST

/* Every other page of a truncated range touched: the process's memory map
 * must not grow by a mapping per fault. It did (a private page per fault
 * split the shared mapping), so one PROJECT of rows on scattered pages of a
 * truncated buffer took the daemon to vm.max_map_count, where the guard's
 * mmap failed and the SIGBUS killed it. */
START_TEST(sigbus_guard_scattered_faults)
{
    ck_assert_int_eq(pj_shmguard_install(), 0);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE), pages = 512, size = pages * pg;
    pjt_shm a;
    ck_assert_int_eq(pjt_shm_create(&a, size), 0);
    void *map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, a.fd, 0);
    ck_assert(map != MAP_FAILED);
    int slot = pj_shmguard_add(map, size);
    ck_assert_int_ge(slot, 0);
    ck_assert_int_eq(ftruncate(a.fd, 0), 0);
    int maps_before = pj_fixture_count_maps(0);
    ck_assert_int_gt(maps_before, 0);
    volatile unsigned char *p = map;
    unsigned sum = 0;
    /* Reads and writes on every other page, so that no two private pages
     * would be neighbours (the kernel merges those into one mapping). */
    for (size_t i = 0; i < pages; i += 4)
        sum += p[i * pg + 1];
    for (size_t i = 2; i < pages; i += 4)
        p[i * pg] = 1;
    ck_assert_uint_eq(sum, 0);
    ck_assert_int_eq(pj_shmguard_faulted(slot), 1);
    int maps_after = pj_fixture_count_maps(0);
    /* One page per fault made ~512 more; the slack is a sanitizer
     * runtime's own mappings. */
    ck_assert_msg(maps_after <= maps_before + 64,
                  "%d mappings before the faults, %d after %zu scattered pages", maps_before,
                  maps_after, pages);
    pj_shmguard_remove(slot);
    munmap(map, size);
    pjt_shm_destroy(&a);
}
END_TEST

/* A SIGBUS sent by kill is no fault in a guarded range: the process dies
 * of it as it would without the guard. The handler used to restore the
 * default action and return, so the first 'kill -BUS' was swallowed and
 * the daemon ran on (the child exited 0). */
START_TEST(sigbus_sent_still_kills)
{
    ck_assert_int_eq(pj_shmguard_install(), 0);
    pjt_shm a;
    size_t size = (size_t)sysconf(_SC_PAGESIZE);
    ck_assert_int_eq(pjt_shm_create(&a, size), 0);
    int slot = pj_shmguard_add(a.p, size);
    ck_assert_int_ge(slot, 0);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        /* A sanitizer's report of this SIGBUS is expected: keep it out of
         * the suite's output, where it reads as a failure. */
        int devnull = open("/dev/null", O_WRONLY);
        if (devnull >= 0)
            dup2(devnull, STDERR_FILENO);
        kill(getpid(), SIGBUS);
        usleep(200000);
        _exit(0);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    /* Killed by SIGBUS; in a sanitizer build the handler before ours is
     * the sanitizer's, which reports the signal and exits 1. */
    ck_assert_msg((WIFSIGNALED(st) && WTERMSIG(st) == SIGBUS) ||
                      (WIFEXITED(st) && WEXITSTATUS(st) != 0),
                  "child: status 0x%x (it ran on after the SIGBUS)", st);
    ck_assert_int_eq(pj_shmguard_faulted(slot), 0);
    pj_shmguard_remove(slot);
    pjt_shm_destroy(&a);
}
END_TEST

/* ---- histograms ------------------------------------------------------------------ */

START_TEST(histogram_quantiles)
{
    pj_hist *h = calloc(1, sizeof *h);
    ck_assert_uint_eq(pj_hist_quantile(h, 0.5), 0);
    for (uint64_t v = 1; v <= 100000; v++)
        pj_hist_add(h, v);
    ck_assert_uint_eq(h->count, 100000);
    ck_assert_uint_eq(h->max, 100000);
    uint64_t p50 = pj_hist_quantile(h, 0.5), p99 = pj_hist_quantile(h, 0.99);
    ck_assert_msg(p50 > 50000 * 15 / 16 && p50 < 50000 * 17 / 16, "p50 %llu",
                  (unsigned long long)p50);
    ck_assert_msg(p99 > 99000 * 15 / 16 && p99 <= 100000, "p99 %llu", (unsigned long long)p99);
    ck_assert_uint_eq(pj_hist_quantile(h, 1.0), 100000);
    memset(h, 0, sizeof *h);
    for (int i = 0; i < 10; i++)
        pj_hist_add(h, 7);
    ck_assert_uint_eq(pj_hist_quantile(h, 0.5), 7); /* small values are exact */
    pj_hist_add(h, UINT64_MAX);
    ck_assert_uint_eq(pj_hist_quantile(h, 1.0), UINT64_MAX);
    free(h);
}
END_TEST

/* ---- the cpu backend ---------------------------------------------------------------- */

typedef struct waiter {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
} waiter;

static void on_job_done(pj_job *job)
{
    waiter *w = job->ctx;
    pthread_mutex_lock(&w->mu);
    w->done++;
    pthread_cond_broadcast(&w->cv);
    pthread_mutex_unlock(&w->mu);
}

static int wait_done(waiter *w, int want, int timeout_s)
{
    struct timespec dl;
    clock_gettime(CLOCK_REALTIME, &dl);
    dl.tv_sec += timeout_s;
    pthread_mutex_lock(&w->mu);
    while (w->done < want)
        if (pthread_cond_timedwait(&w->cv, &w->mu, &dl) != 0)
            break;
    int got = w->done;
    pthread_mutex_unlock(&w->mu);
    return got;
}

START_TEST(cpu_backend_matches_reference)
{
    const pj_model *model = pjc_model();
    pj_config cfg;
    pj_config_defaults(&cfg);
    cfg.cpu.threads = 4;
    pj_backend *be;
    char err[256];
    ck_assert_int_eq(pj_backend_create(pj_backend_cpu_ops(), &cfg, model, &be, err, sizeof err), 0);
    ck_assert_uint_eq(be->ops->stream_depth, 1);
    pj_buf_desc cuda = {.kind = PJ_BUF_CUDA, .size = 1024};
    void *addr, *handle;
    ck_assert_int_eq(be->ops->buffer_open(be, &cuda, &addr, &handle, err, sizeof err),
                     PJ_E_REGISTER);

    /* One job per layer, each two ops: every layer at m = 256 (split over
     * the workers), then the same layer at m = 1 into another place. Jobs of
     * four streams run at once. */
    enum { MAXJ = 8 };
    uint32_t nj = model->n_layers < MAXJ ? model->n_layers : MAXJ;
    pj_backend_stream *st[4];
    for (int i = 0; i < 4; i++)
        ck_assert_int_eq(be->ops->stream_create(be, &st[i], err, sizeof err), 0);
    pj_job jobs[MAXJ];
    pj_exec_op ops[MAXJ][2];
    uint16_t *ys[MAXJ], *y1s[MAXJ];
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    for (uint32_t j = 0; j < nj; j++) {
        const pj_model_layer *L = &model->layers[j];
        ck_assert_uint_eq(L->max_n, L->w.n); /* the reference rows are N wide */
        ys[j] = malloc((size_t)256 * L->max_n * 2);
        y1s[j] = malloc((size_t)L->max_n * 2);
        memset(ys[j], 0xff, (size_t)256 * L->max_n * 2);
        memset(y1s[j], 0xff, (size_t)L->max_n * 2);
        ops[j][0] = (pj_exec_op){.layer = j,
                                 .L = L,
                                 .m = 256,
                                 .n = L->max_n,
                                 .k = L->w.k,
                                 .x = pjc_ref_x(j, 5, 0),
                                 .y = ys[j],
                                 .x_ld = L->w.k,
                                 .y_ld = L->max_n};
        ops[j][1] = ops[j][0];
        ops[j][1].m = 1;
        ops[j][1].y = y1s[j];
        memset(&jobs[j], 0, sizeof jobs[j]);
        jobs[j].n_ops = 2;
        jobs[j].ops = ops[j];
        jobs[j].done = on_job_done;
        jobs[j].ctx = &w;
        ck_assert_int_eq(be->ops->submit(be, st[j % 4], &jobs[j]), 0);
    }
    ck_assert_int_eq(wait_done(&w, (int)nj, 120), (int)nj);
    for (uint32_t j = 0; j < nj; j++) {
        const pj_model_layer *L = &model->layers[j];
        ck_assert_int_eq(jobs[j].status, PJ_OK);
        ck_assert_int_eq(ops[j][0].status, PJ_OK);
        ck_assert_int_eq(ops[j][1].status, PJ_OK);
        ck_assert_uint_ge(jobs[j].end_ns, jobs[j].start_ns);
        ck_assert_msg(memcmp(ys[j], pjc_ref_y(j, 5, 0), (size_t)256 * L->max_n * 2) == 0,
                      "layer %u m 256 differs from the reference", j);
        ck_assert_msg(memcmp(y1s[j], pjc_ref_y(j, 5, 0), (size_t)L->max_n * 2) == 0,
                      "layer %u m 1 differs from the reference", j);
        free(ys[j]);
        free(y1s[j]);
    }
    cJSON *o = cJSON_CreateObject();
    be->ops->stats_json(be, o);
    ck_assert_double_eq(pjt_json_num(o, "jobs"), nj);
    ck_assert_double_eq(pjt_json_num(o, "ops"), 2.0 * nj);
    ck_assert_double_gt(pjt_json_num(o, "chunks"), 2.0 * nj); /* m = 256 was split */
    cJSON_Delete(o);
    for (int i = 0; i < 4; i++)
        be->ops->stream_destroy(be, st[i]);
    pj_backend_destroy(be);
}
END_TEST

/* PROJD_CPU_STREAM_DEPTH (tests only): the server may hand a stream
 * several jobs at once, as it does the cuda backend's, and they must run
 * one after another and complete in submission order, as on a CUDA stream;
 * other streams' jobs run beside them. Each op is held 50 ms
 * (cpu.min_op_us), so jobs of one stream run side by side would overlap in
 * time and those finishing out of order would show. */
typedef struct order_waiter {
    waiter w;
    pj_job *order[8];
} order_waiter;

static void on_job_done_ordered(pj_job *job)
{
    order_waiter *ow = job->ctx;
    pthread_mutex_lock(&ow->w.mu);
    if (ow->w.done < 8)
        ow->order[ow->w.done] = job;
    ow->w.done++;
    pthread_cond_broadcast(&ow->w.cv);
    pthread_mutex_unlock(&ow->w.mu);
}

/* *job: one op of layer L, m rows of x (contiguous, k wide) into y (n
 * wide), done(job) with ctx when finished. */
static void one_op_job(pj_job *job, pj_exec_op *op, const pj_model_layer *L, uint32_t layer,
                       uint32_t m, const void *x, void *y, pj_job_done_fn done, void *ctx)
{
    *op = (pj_exec_op){.layer = layer,
                       .L = L,
                       .m = m,
                       .n = L->max_n,
                       .k = L->w.k,
                       .x = x,
                       .y = y,
                       .x_ld = L->w.k,
                       .y_ld = L->max_n};
    memset(job, 0, sizeof *job);
    job->n_ops = 1;
    job->ops = op;
    job->done = done;
    job->ctx = ctx;
}

/* A cpu backend of cfg taking depth jobs per stream (PROJD_CPU_STREAM_DEPTH,
 * set only while it opens). */
static pj_backend *cpu_backend_at_depth(const pj_config *cfg, const pj_model *model,
                                        const char *depth)
{
    pj_backend *be;
    char err[256];
    setenv("PROJD_CPU_STREAM_DEPTH", depth, 1);
    int rc = pj_backend_create(pj_backend_cpu_ops(), cfg, model, &be, err, sizeof err);
    unsetenv("PROJD_CPU_STREAM_DEPTH");
    ck_assert_msg(rc == 0, "%s", err);
    return be;
}

START_TEST(cpu_backend_stream_depth)
{
    const pj_model *model = pjc_model();
    pj_config cfg;
    pj_config_defaults(&cfg);
    cfg.cpu.threads = 4;
    cfg.cpu.min_op_us = 50000;
    pj_backend *be;
    char err[256];
    ck_assert_int_eq(pj_backend_create(pj_backend_cpu_ops(), &cfg, model, &be, err, sizeof err), 0);
    ck_assert_uint_eq(be->stream_depth, 1); /* the default: ops->stream_depth */
    pj_backend_destroy(be);
    be = cpu_backend_at_depth(&cfg, model, "4");
    ck_assert_uint_eq(be->stream_depth, 4);
    pj_backend_stream *st[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(be->ops->stream_create(be, &st[i], err, sizeof err), 0);
    /* Jobs 0-3 on stream 0, 4-5 on stream 1; each its own y. */
    enum { NJ = 6 };
    const pj_model_layer *L = &model->layers[0];
    uint16_t *y = malloc((size_t)NJ * 4 * L->max_n * 2);
    memset(y, 0xff, (size_t)NJ * 4 * L->max_n * 2);
    pj_exec_op ops[NJ];
    pj_job jobs[NJ];
    order_waiter ow = {.w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}};
    for (int j = 0; j < NJ; j++) {
        /* the first 4 rows of the m = 32 input: rows are independent */
        one_op_job(&jobs[j], &ops[j], L, 0, 4, pjc_ref_x(0, 3, 0), y + (size_t)j * 4 * L->max_n,
                   on_job_done_ordered, &ow);
        ck_assert_int_eq(be->ops->submit(be, st[j < 4 ? 0 : 1], &jobs[j]), 0);
    }
    /* A stream destroyed with jobs still running (the contract allows it):
     * they finish, and the last frees it (ASan and LSan would see either
     * mistake). */
    be->ops->stream_destroy(be, st[1]);
    ck_assert_int_eq(wait_done(&ow.w, NJ, 60), NJ);
    int pos[NJ];
    for (int i = 0; i < NJ; i++)
        for (int j = 0; j < NJ; j++)
            if (ow.order[i] == &jobs[j])
                pos[j] = i;
    for (int j = 0; j < NJ; j++) {
        ck_assert_int_eq(jobs[j].status, PJ_OK);
        ck_assert_msg(
            memcmp(y + (size_t)j * 4 * L->max_n, pjc_ref_y(0, 3, 0), (size_t)4 * L->max_n * 2) == 0,
            "job %d: y differs from the reference", j);
        if (j == 0 || j == 4)
            continue;
        ck_assert_msg(pos[j] > pos[j - 1], "job %d of its stream completed before job %d", j,
                      j - 1);
        ck_assert_msg(jobs[j].start_ns >= jobs[j - 1].end_ns,
                      "job %d started %lld ns before job %d of its stream ended", j,
                      (long long)(jobs[j - 1].end_ns - jobs[j].start_ns), j - 1);
    }
    /* The streams ran beside each other: stream 1's first job started
     * before stream 0's last began (four 50 ms jobs in a row). */
    ck_assert_uint_lt(jobs[4].start_ns, jobs[3].start_ns);
    be->ops->stream_destroy(be, st[0]);
    pj_backend_destroy(be);
    free(y);
}
END_TEST

/* oldest_job_ns at depth 2 with two streams: stream A's second job,
 * started when the first ended, comes before stream B's job in submission
 * order but is younger as the backend's; the oldest is B's. Each op is held
 * 600 ms, B's submitted 200 ms after A's, so from A's first job's end until
 * 600 ms after B's submission both are live and which is oldest is known
 * from the clock. */
START_TEST(cpu_backend_oldest_two_streams)
{
    const pj_model *model = pjc_model();
    pj_config cfg;
    pj_config_defaults(&cfg);
    cfg.cpu.threads = 2;
    cfg.cpu.min_op_us = 600000;
    const uint64_t hold = 600000000ull;
    pj_backend *be = cpu_backend_at_depth(&cfg, model, "2");
    char err[256];
    pj_backend_stream *st[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(be->ops->stream_create(be, &st[i], err, sizeof err), 0);
    const pj_model_layer *L = &model->layers[0];
    uint16_t *y = malloc((size_t)3 * L->max_n * 2);
    pj_exec_op ops[3];
    pj_job jobs[3];
    order_waiter ow = {.w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0}};
    uint64_t t_b0 = 0, t_b1 = 0;
    for (int j = 0; j < 3; j++) {
        one_op_job(&jobs[j], &ops[j], L, 0, 1, pjc_ref_x(0, 0, 0), y + (size_t)j * L->max_n,
                   on_job_done_ordered, &ow);
        if (j == 2) { /* B's job */
            pjd_sleep_ms(200);
            t_b0 = pj_now_ns();
        }
        ck_assert_int_eq(be->ops->submit(be, st[j < 2 ? 0 : 1], &jobs[j]), 0);
        if (j == 2)
            t_b1 = pj_now_ns();
    }
    ck_assert_int_ge(wait_done(&ow.w, 1, 60), 1);
    ck_assert_ptr_eq(ow.order[0], &jobs[0]);
    const uint64_t oldest = be->ops->oldest_job_ns(be, NULL);
    if (pj_now_ns() < t_b0 + hold) /* B's job cannot be done yet */
        ck_assert_msg(oldest >= t_b0 && oldest <= t_b1,
                      "oldest %llu is not stream B's job's submission (%llu..%llu): A's second "
                      "job, %lld ns later, was taken",
                      (unsigned long long)oldest, (unsigned long long)t_b0,
                      (unsigned long long)t_b1, (long long)(oldest - t_b1));
    ck_assert_int_eq(wait_done(&ow.w, 3, 60), 3);
    for (int j = 0; j < 3; j++)
        ck_assert_int_eq(jobs[j].status, PJ_OK);
    for (int i = 0; i < 2; i++)
        be->ops->stream_destroy(be, st[i]);
    pj_backend_destroy(be);
    free(y);
}
END_TEST

/* oldest_job_ns, what the systemd watchdog asks: 0 while idle, the submit
 * time of the oldest unfinished job while any is held, the next one's once
 * the first is done; never a client wait on this backend. cpu.min_op_us
 * holds each job at least 1 s from its submission, so what must still be
 * running is known from the clock alone, however late this thread runs. */
START_TEST(cpu_backend_oldest_job)
{
    const pj_model *model = pjc_model();
    pj_config cfg;
    pj_config_defaults(&cfg);
    cfg.cpu.threads = 2;
    cfg.cpu.min_op_us = 1000000;
    const uint64_t hold = 1000000000ull;
    pj_backend *be;
    char err[256];
    ck_assert_int_eq(pj_backend_create(pj_backend_cpu_ops(), &cfg, model, &be, err, sizeof err), 0);
    ck_assert_ptr_nonnull(be->ops->oldest_job_ns);
    uint64_t cw = 1;
    ck_assert_uint_eq(be->ops->oldest_job_ns(be, &cw), 0);
    ck_assert_uint_eq(cw, 0);
    pj_backend_stream *st[2];
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(be->ops->stream_create(be, &st[i], err, sizeof err), 0);
    const pj_model_layer *L = &model->layers[0];
    uint16_t *y = malloc((size_t)2 * L->max_n * 2);
    pj_exec_op ops[2];
    pj_job jobs[2];
    waiter w = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};
    uint64_t t_sub[2];
    for (int j = 0; j < 2; j++) {
        one_op_job(&jobs[j], &ops[j], L, 0, 1, pjc_ref_x(0, 0, 0), y + (size_t)j * L->max_n,
                   on_job_done, &w);
        t_sub[j] = pj_now_ns();
        ck_assert_int_eq(be->ops->submit(be, st[j], &jobs[j]), 0);
        uint64_t oldest = be->ops->oldest_job_ns(be, &cw);
        uint64_t now = pj_now_ns();
        ck_assert_uint_eq(cw, 0);
        if (now < t_sub[0] + hold) /* the first job cannot be done yet: its time */
            ck_assert_msg(oldest >= t_sub[0] && oldest < (j ? t_sub[1] : now),
                          "job %d submitted: oldest %llu, not the first job's (%llu..)", j,
                          (unsigned long long)oldest, (unsigned long long)t_sub[0]);
        if (j == 0)
            pjd_sleep_ms(100);
    }
    ck_assert_int_ge(wait_done(&w, 1, 60), 1);
    uint64_t oldest = be->ops->oldest_job_ns(be, NULL);
    if (pj_now_ns() < t_sub[1] + hold) /* the second is still held: its time now */
        ck_assert_msg(oldest >= t_sub[1],
                      "after the first job: oldest %llu before the second's "
                      "submission %llu",
                      (unsigned long long)oldest, (unsigned long long)t_sub[1]);
    ck_assert_int_eq(wait_done(&w, 2, 60), 2);
    ck_assert_uint_eq(be->ops->oldest_job_ns(be, NULL), 0);
    ck_assert_int_eq(jobs[0].status, PJ_OK);
    ck_assert_int_eq(jobs[1].status, PJ_OK);
    for (int i = 0; i < 2; i++)
        be->ops->stream_destroy(be, st[i]);
    pj_backend_destroy(be);
    free(y);
}
END_TEST

/* ---- log lines ------------------------------------------------------------------------- */

/* stderr while fn runs. */
static char *capture_stderr(void (*fn)(void))
{
    int fds[2];
    ck_assert_int_eq(pipe(fds), 0);
    int saved = dup(STDERR_FILENO);
    dup2(fds[1], STDERR_FILENO);
    fn();
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(fds[1]);
    char *buf = calloc(1, 8192);
    ssize_t n = read(fds[0], buf, 8191);
    ck_assert_int_ge(n, 0);
    close(fds[0]);
    return buf;
}

/* What capture_log's writer writes (capture_stderr takes no arguments). */
static struct {
    int journal;
    pj_log_level level;
    const char *msg;
} g_log_case;

static void log_one_line(void)
{
    /* The journal is recognised by stderr's device and inode: the pipe's. */
    if (g_log_case.journal) {
        struct stat st;
        fstat(STDERR_FILENO, &st);
        char js[64];
        snprintf(js, sizeof js, "%llu:%llu", (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
        setenv("JOURNAL_STREAM", js, 1);
    } else {
        unsetenv("JOURNAL_STREAM");
    }
    pj_log_init();
    pj_log_set_level(PJ_LOG_INFO);
    pj_log_msg(g_log_case.level, "%s", g_log_case.msg);
    pj_log_debug("not shown at level info");
}

static char *capture_log(int journal, pj_log_level level, const char *msg)
{
    g_log_case.journal = journal;
    g_log_case.level = level;
    g_log_case.msg = msg;
    char *buf = capture_stderr(log_one_line);
    ck_assert_msg(buf[0], "nothing logged");
    unsetenv("JOURNAL_STREAM");
    pj_log_init();
    return buf;
}

/* knob's call, for capture_stderr. */
static struct {
    uint64_t lo, hi, *v;
    int rc;
} g_knob;

static void knob_read(void)
{
    g_knob.rc = pj_envknob_u64("PJ_TEST_KNOB", g_knob.lo, g_knob.hi, g_knob.v);
}

/* pj_envknob_u64 on value (NULL: unset) for [lo, hi]: its return, *v,
 * and what it wrote to the log (into logbuf, "" for nothing). */
static int knob(const char *value, uint64_t lo, uint64_t hi, uint64_t *v, char *logbuf,
                size_t loglen)
{
    if (value)
        setenv("PJ_TEST_KNOB", value, 1);
    else
        unsetenv("PJ_TEST_KNOB");
    g_knob.lo = lo;
    g_knob.hi = hi;
    g_knob.v = v;
    char *out = capture_stderr(knob_read);
    snprintf(logbuf, loglen, "%s", out);
    free(out);
    unsetenv("PJ_TEST_KNOB");
    return g_knob.rc;
}

/* Every numeric knob of the daemon's environment parses one way: whole
 * decimal numbers inside the range are taken silently; anything else is
 * refused with one warning naming the variable, the value and the range,
 * and the default stays. */
START_TEST(env_knobs_parsed_one_way)
{
    char log[1024];
    uint64_t v = 7;
    ck_assert_int_eq(knob(NULL, 0, 10, &v, log, sizeof log), 0);
    ck_assert_int_eq(knob("", 0, 10, &v, log, sizeof log), 0);
    ck_assert_uint_eq(v, 7);
    ck_assert_str_eq(log, "");
    ck_assert_int_eq(knob("10", 0, 10, &v, log, sizeof log), 1);
    ck_assert_uint_eq(v, 10);
    ck_assert_int_eq(knob("3", 3, 10, &v, log, sizeof log), 1);
    ck_assert_uint_eq(v, 3);
    ck_assert_str_eq(log, "");
    ck_assert_int_eq(knob("18446744073709551615", 1, UINT64_MAX, &v, log, sizeof log), 1);
    ck_assert_uint_eq(v, UINT64_MAX);
    const char *refused[] = {"11",
                             "2",
                             "12abc",
                             "-1",
                             " 5",
                             "+5",
                             "0x5",
                             "5 ",
                             "18446744073709551616",
                             "99999999999999999999999"};
    for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
        v = 7;
        ck_assert_msg(knob(refused[i], 3, 10, &v, log, sizeof log) == 0, "\"%s\" taken",
                      refused[i]);
        ck_assert_msg(v == 7, "\"%s\" changed the value to %llu", refused[i],
                      (unsigned long long)v);
        char want[128];
        snprintf(want, sizeof want, "PJ_TEST_KNOB=%s is not a whole number from 3 to 10",
                 refused[i]);
        ck_assert_msg(strstr(log, want) && strstr(log, "the default kept"),
                      "\"%s\": the log says \"%s\"", refused[i], log);
        ck_assert_msg(!strchr(strchr(log, '\n') + 1, '\n'), "more than one line: %s", log);
    }
    /* The 32-bit form takes the same rule. */
    uint32_t w = 5;
    setenv("PJ_TEST_KNOB", "4294967296", 1);
    ck_assert_int_eq(pj_envknob_u32("PJ_TEST_KNOB", 0, UINT32_MAX, &w), 0);
    setenv("PJ_TEST_KNOB", "4294967295", 1);
    ck_assert_int_eq(pj_envknob_u32("PJ_TEST_KNOB", 0, UINT32_MAX, &w), 1);
    ck_assert_uint_eq(w, UINT32_MAX);
    unsetenv("PJ_TEST_KNOB");
}
END_TEST

START_TEST(log_lines)
{
    char *j = capture_log(1, PJ_LOG_WARN, "two\nlines");
    ck_assert_str_eq(j, "<4>two lines\n");
    free(j);
    /* A client's text with terminal escapes and a bell: no control byte
     * reaches the log; UTF-8 stays. */
    j = capture_log(1, PJ_LOG_WARN, "hello from \"evil\x1b[2J\x1b[31mFAKE\x07\x7f\tcaf\xc3\xa9\"");
    ck_assert_str_eq(j, "<4>hello from \"evil?[2J?[31mFAKE?? caf\xc3\xa9\"\n");
    free(j);
    /* Bytes that are not well-formed UTF-8 become '?': journalctl shows a
     * line holding one as "[N blob data]" (a HELLO name "caf\xe9" hid its
     * "hello from" line). Stray and cut-off bytes, an overlong '/', a
     * surrogate, past U+10FFFF, C1 controls (CSI as 0x9b and as U+009B);
     * two- to four-byte characters stay. */
    j = capture_log(1, PJ_LOG_INFO,
                    "caf\xe9|\x80|\xc3|\xc0\xaf|\xed\xa0\x80|\xf4\x90\x80\x80|\x9b|\xc2\x9b|"
                    "\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80|\xe2\x82");
    ck_assert_str_eq(j, "<6>caf?|?|?|??|???|????|?|??|\xc2\xa0\xe2\x82\xac\xf0\x9f\x98\x80|??\n");
    free(j);
    /* A message cut at 2 KiB does not end in half a character: after
     * "<6>xy", the cut falls after the first byte of an e-acute. */
    char *longmsg = malloc(3001);
    ck_assert_ptr_nonnull(longmsg);
    memcpy(longmsg, "xy", 2);
    for (int i = 2; i < 3000; i += 2)
        memcpy(longmsg + i, "\xc3\xa9", 2);
    longmsg[3000] = 0;
    j = capture_log(1, PJ_LOG_INFO, longmsg);
    size_t jl = strlen(j);
    ck_assert_uint_eq(jl, 2047);
    ck_assert_int_eq(j[jl - 1], '\n');
    ck_assert_int_eq(j[jl - 2], '?');
    for (size_t i = 5; i < jl - 2; i += 2)
        ck_assert_msg(j[i] == '\xc3' && j[i + 1] == '\xa9', "byte %zu: 0x%02x", i,
                      (unsigned)(unsigned char)j[i]);
    free(j);
    free(longmsg);
    char *p = capture_log(0, PJ_LOG_ERROR, "plain");
    ck_assert_msg(strstr(p, "Z projd[") && strstr(p, "] error: plain\n") && !strchr(p + 1, '<'),
                  "%s", p);
    ck_assert_ptr_null(strstr(p, "not shown"));
    ck_assert_ptr_eq(strchr(p, '\n'), p + strlen(p) - 1); /* one line */
    free(p);
}
END_TEST

/* ---- systemd notifications ------------------------------------------------------------- */

static void notify_start_and_stop(void)
{
    pj_log_set_level(PJ_LOG_INFO);
    pj_notify_status("loading");
    pj_notify_ready("serving");
    pj_notify_status("serving 1 connection");
    pj_notify_stopping("draining");
}

/* A NOTIFY_SOCKET that is set but leads nowhere (a container given the
 * variable and not the socket) made every notification vanish without a
 * word: under Type=notify systemd kills the daemon at its start timeout
 * and the log says nothing. Now one warning names the socket and why. The
 * case runs in its own process (Check forks), so notify starts unset up. */
START_TEST(notify_socket_unusable_said_once)
{
    char path[128];
    snprintf(path, sizeof path, "/tmp/pj-notify-none-%ld/notify", (long)getpid());
    setenv("NOTIFY_SOCKET", path, 1);
    char *out = capture_stderr(notify_start_and_stop);
    const char *w = strstr(out, "warn: cannot notify systemd through NOTIFY_SOCKET=");
    ck_assert_msg(w && strstr(w, path) && strstr(w, "No such file or directory"), "[%s]", out);
    ck_assert_msg(!strstr(strchr(w, '\n'), "cannot notify"), "said more than once: [%s]", out);
    free(out);
}
END_TEST

/* A relative NOTIFY_SOCKET is refused at once, with a reason. */
START_TEST(notify_socket_relative_said)
{
    setenv("NOTIFY_SOCKET", "run/notify", 1);
    char *out = capture_stderr(notify_start_and_stop);
    ck_assert_msg(strstr(out, "NOTIFY_SOCKET=run/notify: not an absolute path"), "[%s]", out);
    free(out);
}
END_TEST

/* A working socket gets every message and the log no warning. */
START_TEST(notify_socket_works_quietly)
{
    char dir[] = "/tmp/pj-notify-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[64];
    snprintf(path, sizeof path, "%s/notify", dir);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sun = {.sun_family = AF_UNIX};
    snprintf(sun.sun_path, sizeof sun.sun_path, "%s", path);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sun, sizeof sun), 0);
    setenv("NOTIFY_SOCKET", path, 1);
    char *out = capture_stderr(notify_start_and_stop);
    ck_assert_msg(!strstr(out, "cannot notify"), "[%s]", out);
    free(out);
    const char *want[] = {"STATUS=loading", "READY=1\nSTATUS=serving",
                          "STATUS=serving 1 connection", "STOPPING=1\nSTATUS=draining"};
    for (int i = 0; i < 4; i++) {
        char buf[700];
        ssize_t n = recv(fd, buf, sizeof buf - 1, MSG_DONTWAIT);
        ck_assert_int_gt(n, 0);
        buf[n] = 0;
        ck_assert_str_eq(buf, want[i]);
    }
    close(fd);
    unlink(path);
    rmdir(dir);
}
END_TEST

int main(void)
{
    if (pjc_init(g_model_path, sizeof g_model_path) != 0) {
        fprintf(stderr, "cannot prepare the small model\n");
        return 1;
    }
    const pjd_case cases[] = {
        {"span_checks", span_checks},
        {"rows_overlap_against_all_pairs", rows_overlap_against_all_pairs},
        {"registry_and_ops", registry_and_ops},
        {"registry_retires_busy_buffers", registry_retires_busy_buffers},
        {"registry_releases_on_the_closer", registry_releases_on_the_closer},
        {"registry_retried_register", registry_retried_register},
        {"private_shm_refusal_says_open", private_shm_refusal_says_open},
        {"sigbus_guard", sigbus_guard},
        {"sigbus_guard_scattered_faults", sigbus_guard_scattered_faults},
        {"sigbus_sent_still_kills", sigbus_sent_still_kills},
        {"histogram_quantiles", histogram_quantiles},
        {"cpu_backend_matches_reference", cpu_backend_matches_reference},
        {"cpu_backend_oldest_job", cpu_backend_oldest_job},
        {"cpu_backend_stream_depth", cpu_backend_stream_depth},
        {"cpu_backend_oldest_two_streams", cpu_backend_oldest_two_streams},
        {"log_lines", log_lines},
        {"env_knobs_parsed_one_way", env_knobs_parsed_one_way},
        {"peer_groups", peer_groups},
        {"peer_exit_and_stat_state", peer_exit_and_stat_state},
        {"orphans_lost_only_when_the_client_exited", orphans_lost_only_when_the_client_exited},
        {"notify_socket_unusable_said_once", notify_socket_unusable_said_once},
        {"notify_socket_relative_said", notify_socket_relative_said},
        {"notify_socket_works_quietly", notify_socket_works_quietly},
    };
    return pjd_run_suite("daemon_unit", cases, sizeof cases / sizeof cases[0], 120);
}
