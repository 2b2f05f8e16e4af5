/* test_ring.c — the shared-memory ring of protocol/ring.h on its own: the
 * geometry rules, full and empty queues, wrap-around, a corrupt peer, and
 * two processes passing messages through both queues with and without the
 * futex sleep. */
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "protocol/ring.h"
#include "tests/helpers/daemon_test.h"

static void *map_anon_shared(size_t size)
{
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

/* Both ends of one mapping, as the client and the daemon see it. */
static void *two_views(pj_ring *client, pj_ring *daemon, uint32_t slots, uint32_t slot_bytes)
{
    size_t size = pj_ring_bytes(slots, slot_bytes);
    ck_assert_uint_gt(size, 0);
    void *base = map_anon_shared(size);
    pj_ring_format(base, slots, slot_bytes);
    char err[256];
    ck_assert_int_eq(pj_ring_view(client, base, size, slots, slot_bytes, err, sizeof err), 0);
    ck_assert_int_eq(pj_ring_view(daemon, base, size, slots, slot_bytes, err, sizeof err), 0);
    return base;
}

START_TEST(geometry_rules)
{
    char err[256];
    ck_assert_int_eq(pj_ring_check_geometry(64, 4096, err, sizeof err), 0);
    ck_assert_int_eq(pj_ring_check_geometry(2, PJ_RING_MIN_SLOT, err, sizeof err), 0);
    ck_assert_int_eq(pj_ring_check_geometry(1, 4096, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "power of two"));
    ck_assert_int_eq(pj_ring_check_geometry(48, 4096, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_ring_check_geometry(8192, 4096, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_ring_check_geometry(64, 1024, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "slot_bytes"));
    ck_assert_int_eq(pj_ring_check_geometry(64, 4100, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_ring_check_geometry(64, (1u << 20) + 64, err, sizeof err), -EINVAL);
    ck_assert_uint_eq(pj_ring_bytes(64, 4096), 4096u + 2u * 64u * 4096u);
    ck_assert_uint_eq(pj_ring_bytes(3, 4096), 0);
}
END_TEST

START_TEST(view_checks_header)
{
    size_t size = pj_ring_bytes(8, 2048);
    uint8_t *base = map_anon_shared(size);
    pj_ring r;
    char err[256];
    /* Never formatted: no magic. */
    ck_assert_int_eq(pj_ring_view(&r, base, size, 8, 2048, err, sizeof err), -EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "magic"));
    pj_ring_format(base, 8, 2048);
    ck_assert_int_eq(pj_ring_view(&r, base, size, 8, 2048, err, sizeof err), 0);
    /* The creator claimed another geometry than the header holds. */
    ck_assert_int_eq(pj_ring_view(&r, base, size, 4, 2048, err, sizeof err), -EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "header says"));
    /* The object is smaller than the geometry needs. */
    ck_assert_int_eq(pj_ring_view(&r, base, size - 1, 8, 2048, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "needs"));
    /* A bad version. */
    base[4] = 9;
    ck_assert_int_eq(pj_ring_view(&r, base, size, 8, 2048, err, sizeof err), -EPROTO);
    ck_assert_ptr_nonnull(strstr(err, "version"));
    munmap(base, size);
}
END_TEST

START_TEST(full_empty_wrap)
{
    pj_ring cl, dm;
    void *base = two_views(&cl, &dm, 4, 2048);
    uint8_t msg[2040], out[2040];
    size_t len = 0;
    ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, sizeof out, &len), -EAGAIN);
    ck_assert_uint_eq(pj_ring_room(&cl, PJ_RING_SQ), 4);
    /* Fill, find it full, drain in order; many times round the ring. */
    uint32_t next_in = 0, next_out = 0;
    for (int round = 0; round < 50; round++) {
        for (int i = 0; i < 4; i++) {
            size_t l = 1 + (next_in * 37u) % sizeof msg;
            memset(msg, (int)(next_in & 0xff), l);
            ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, msg, l), 0);
            next_in++;
        }
        ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, msg, 1), -EAGAIN);
        ck_assert_uint_eq(pj_ring_room(&cl, PJ_RING_SQ), 0);
        ck_assert_uint_eq(pj_ring_pending(&dm, PJ_RING_SQ), 4);
        for (int i = 0; i < 4; i++) {
            /* A peek shows the head's first bytes and whole length and
             * takes nothing. */
            uint8_t head[8] = {0};
            size_t plen = 0;
            ck_assert_int_eq(pj_ring_peek(&dm, PJ_RING_SQ, head, sizeof head, &plen), 0);
            ck_assert_uint_eq(plen, 1 + (next_out * 37u) % sizeof msg);
            ck_assert_uint_eq(head[0], next_out & 0xff);
            ck_assert_uint_eq(head[plen < 8 ? plen - 1 : 7], next_out & 0xff);
            ck_assert_uint_eq(pj_ring_pending(&dm, PJ_RING_SQ), (uint32_t)(4 - i));
            ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, sizeof out, &len), 0);
            ck_assert_uint_eq(len, 1 + (next_out * 37u) % sizeof msg);
            for (size_t j = 0; j < len; j++)
                ck_assert_uint_eq(out[j], next_out & 0xff);
            next_out++;
        }
        ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, sizeof out, &len), -EAGAIN);
        ck_assert_int_eq(pj_ring_peek(&dm, PJ_RING_SQ, out, sizeof out, &len), -EAGAIN);
    }
    /* The other queue is independent and empty. */
    ck_assert_uint_eq(pj_ring_pending(&cl, PJ_RING_CQ), 0);
    ck_assert_uint_eq(pj_ring_room(&dm, PJ_RING_CQ), 4);
    /* Too long for a slot; too long for the reader's buffer (consumed). */
    ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, msg, pj_ring_msg_max(&cl) + 1), -EMSGSIZE);
    ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, msg, 100), 0);
    ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, 99, &len), -EMSGSIZE);
    ck_assert_uint_eq(len, 100);
    ck_assert_uint_eq(pj_ring_pending(&dm, PJ_RING_SQ), 0);
    munmap(base, pj_ring_bytes(4, 2048));
}
END_TEST

START_TEST(corrupt_peer)
{
    pj_ring cl, dm;
    uint8_t *base = two_views(&cl, &dm, 4, 2048);
    uint8_t out[2048];
    size_t len;
    /* A tail more than `slots` ahead of what we consumed. */
    uint32_t *sq_tail = (uint32_t *)(void *)(base + 128);
    *sq_tail = 1000;
    ck_assert_int_eq(pj_ring_peek(&dm, PJ_RING_SQ, out, sizeof out, &len), -EPROTO);
    ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, sizeof out, &len), -EPROTO);
    *sq_tail = 0;
    /* A slot length past the slot. */
    ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, "abc", 3), 0);
    uint32_t big = 5000;
    memcpy(base + PJ_RING_HDR_BYTES, &big, 4);
    ck_assert_int_eq(pj_ring_peek(&dm, PJ_RING_SQ, out, 4, &len), -EPROTO);
    ck_assert_int_eq(pj_ring_pop(&dm, PJ_RING_SQ, out, sizeof out, &len), -EPROTO);
    /* A consumer index that runs away reads as a full queue, not as room. */
    uint32_t *cq_head = (uint32_t *)(void *)(base + 384);
    *cq_head = 77;
    ck_assert_uint_eq(pj_ring_room(&dm, PJ_RING_CQ), 0);
    ck_assert_int_eq(pj_ring_push(&dm, PJ_RING_CQ, "x", 1), -EAGAIN);
    munmap(base, pj_ring_bytes(4, 2048));
}
END_TEST

START_TEST(wait_timeout_and_stop)
{
    pj_ring cl, dm;
    void *base = two_views(&cl, &dm, 2, 2048);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(pj_ring_wait(&dm, PJ_RING_SQ, 1000, 50, NULL), -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_double_ge(ms, 45);
    /* A spin longer than the timeout ends at the timeout (it ran its 5 s). */
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ck_assert_int_eq(pj_ring_wait(&dm, PJ_RING_SQ, 5000000000ull, 50, NULL), -ETIMEDOUT);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
    ck_assert_msg(ms >= 45 && ms < 2500, "a 50 ms wait spinning 5 s took %.0f ms", ms);
    int stop = 1;
    ck_assert_int_eq(pj_ring_wait(&dm, PJ_RING_SQ, 0, 1000, &stop), -EINTR);
    ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, "m", 1), 0);
    ck_assert_int_eq(pj_ring_wait(&dm, PJ_RING_SQ, 0, 0, NULL), 0);
    ck_assert_uint_eq(pj_ring_state(&cl), PJ_RING_STATE_NEW);
    pj_ring_set_state(&dm, PJ_RING_STATE_CLOSED);
    ck_assert_uint_eq(pj_ring_state(&cl), PJ_RING_STATE_CLOSED);
    munmap(base, pj_ring_bytes(2, 2048));
}
END_TEST

/* A sleeper woken by the stop flag and a kick from another thread. */
typedef struct sleeper {
    pj_ring *r;
    int stop;
    int rc;
} sleeper;

static void *sleeper_main(void *arg)
{
    sleeper *s = arg;
    s->rc = pj_ring_wait(s->r, PJ_RING_CQ, 0, 10000, &s->stop);
    return NULL;
}

START_TEST(kick_wakes_sleeper)
{
    pj_ring cl, dm;
    void *base = two_views(&cl, &dm, 2, 2048);
    sleeper s = {.r = &cl, .rc = 1};
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    usleep(50000);
    __atomic_store_n(&s.stop, 1, __ATOMIC_RELEASE);
    pj_ring_kick(&cl, PJ_RING_CQ);
    pthread_join(th, NULL);
    ck_assert_int_eq(s.rc, -EINTR);
    /* A kick with no stop and nothing to take (the daemon closing the
     * ring): the sleeper returns at once to look, not after its 10 s. */
    s = (sleeper){.r = &cl, .rc = 1};
    ck_assert_int_eq(pthread_create(&th, NULL, sleeper_main, &s), 0);
    usleep(50000);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    pj_ring_set_state(&dm, PJ_RING_STATE_CLOSED);
    pj_ring_kick(&dm, PJ_RING_CQ);
    pthread_join(th, NULL);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    ck_assert_int_eq(s.rc, -EAGAIN);
    ck_assert_int_eq(pj_ring_state(&cl), PJ_RING_STATE_CLOSED);
    ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 5);
    munmap(base, pj_ring_bytes(2, 2048));
}
END_TEST

/* pj_ring_wait until a message is there, waiting again after -EAGAIN, as
 * ring.h asks: a push's wake can land after its message was taken and the
 * consumer had gone back to sleep for the next one (a fresh-clone CI run
 * saw the echo child take such a wake as a failure and exit). */
static int wait_msg(pj_ring *r, int q, uint64_t spin_ns)
{
    int rc;
    while ((rc = pj_ring_wait(r, q, spin_ns, 10000, NULL)) == -EAGAIN)
        ;
    return rc;
}

/* Echo server in a child process: every SQ message comes back on the CQ
 * with its first byte incremented. */
static void echo_child(pj_ring *dm, uint64_t spin_ns, int n)
{
    uint8_t buf[4096];
    for (int i = 0; i < n; i++) {
        if (wait_msg(dm, PJ_RING_SQ, spin_ns) != 0)
            _exit(2);
        size_t len;
        if (pj_ring_pop(dm, PJ_RING_SQ, buf, sizeof buf, &len) != 0)
            _exit(3);
        buf[0]++;
        while (pj_ring_push(dm, PJ_RING_CQ, buf, len) == -EAGAIN)
            ;
    }
    _exit(0);
}

static void ping_pong(uint64_t spin_ns, int n, int window)
{
    pj_ring cl, dm;
    void *base = two_views(&cl, &dm, 8, 4096);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        echo_child(&dm, spin_ns, n);
    uint8_t msg[64], out[4096];
    int sent = 0, got = 0;
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    while (got < n) {
        while (sent < n && sent - got < window) {
            memset(msg, 0, sizeof msg);
            memcpy(msg + 1, &sent, sizeof sent);
            msg[0] = (uint8_t)sent;
            ck_assert_int_eq(pj_ring_push(&cl, PJ_RING_SQ, msg, 8 + (size_t)(sent % 50)), 0);
            sent++;
        }
        ck_assert_int_eq(wait_msg(&cl, PJ_RING_CQ, spin_ns), 0);
        size_t len;
        ck_assert_int_eq(pj_ring_pop(&cl, PJ_RING_CQ, out, sizeof out, &len), 0);
        int seq;
        memcpy(&seq, out + 1, sizeof seq);
        ck_assert_int_eq(seq, got);
        ck_assert_uint_eq(len, 8 + (size_t)(got % 50));
        ck_assert_uint_eq(out[0], (uint8_t)(got + 1));
        got++;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    double us = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1e3;
    printf("ring ping-pong, spin %llu ns, window %d: %d messages, %.2f us each\n",
           (unsigned long long)spin_ns, window, n, us / n);
    munmap(base, pj_ring_bytes(8, 4096));
}

START_TEST(two_processes_spinning)
{
    ping_pong(200000, 20000, 1);
    ping_pong(200000, 20000, 8);
}
END_TEST

START_TEST(two_processes_sleeping)
{
    /* No spin: every wait goes through the futex, so a lost wake-up would
     * hang here (and time out) instead of passing. */
    ping_pong(0, 5000, 1);
    ping_pong(0, 5000, 5);
}
END_TEST

int main(void)
{
    const pjd_case cases[] = {
        {"geometry_rules", geometry_rules},
        {"view_checks_header", view_checks_header},
        {"full_empty_wrap", full_empty_wrap},
        {"corrupt_peer", corrupt_peer},
        {"wait_timeout_and_stop", wait_timeout_and_stop},
        {"kick_wakes_sleeper", kick_wakes_sleeper},
        {"two_processes_spinning", two_processes_spinning},
        {"two_processes_sleeping", two_processes_sleeping},
    };
    return pjd_run_suite("ring", cases, sizeof cases / sizeof cases[0], 120);
}
