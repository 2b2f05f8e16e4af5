/* test_loadturn.c — the load's turn (daemon/loadturn.h): one holder per
 * directory, the holder's pid for those waiting, a wait that a stop ends,
 * a wait bounded, and a lock file that cannot be made costing no start.
 * The other holder is a forked child: flock's locks belong to open files,
 * and this process holds one turn at most. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "daemon/loadturn.h"
#include "tests/helpers/fixture.h"

/* A child that takes dir's turn, says so on the pipe, and holds it until
 * the pipe's other end is closed. */
static pid_t holder_child(const char *dir, int *release_fd)
{
    int up[2], down[2];
    ck_assert_int_eq(pipe(up), 0);
    ck_assert_int_eq(pipe(down), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        char err[256];
        char ok = pj_loadturn_take(dir, 1000, NULL, NULL, err, sizeof err) == 0 ? 'y' : 'n';
        if (write(up[1], &ok, 1) != 1)
            _exit(3);
        char c;
        while (read(down[0], &c, 1) > 0) {
        }
        pj_loadturn_release();
        _exit(0);
    }
    close(up[1]);
    close(down[0]);
    char ok = 0;
    ck_assert_int_eq(read(up[0], &ok, 1), 1);
    close(up[0]);
    ck_assert_int_eq(ok, 'y');
    *release_fd = down[1];
    return pid;
}

static void end_holder(pid_t pid, int release_fd)
{
    close(release_fd);
    int st;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
}

typedef struct waits {
    int calls;
    long holder; /* the last non-zero pid a call named (the holder clears it as it ends) */
    unsigned last_ms;
    int stop_after; /* stop at this call (0: never) */
} waits;

static int on_wait(void *ctx, long holder, unsigned waited_ms)
{
    waits *w = ctx;
    w->calls++;
    if (holder)
        w->holder = holder;
    ck_assert_uint_ge(waited_ms, w->last_ms); /* the time waited only grows */
    w->last_ms = waited_ms;
    return w->stop_after && w->calls >= w->stop_after;
}

static void turn_dir(char *dir, size_t cap, const char *name)
{
    pj_fixture_path(dir, cap, name);
    ck_assert(mkdir(dir, 0755) == 0 || errno == EEXIST);
}

/* Free: taken at once, the pid written for those who will wait, and
 * cleared at the release (no waiter names a daemon whose load ended). */
START_TEST(free_turn_is_taken)
{
    char dir[4200], path[4300], text[64], err[512] = "";
    turn_dir(dir, sizeof dir, "free");
    waits w = {0};
    ck_assert_int_eq(pj_loadturn_take(dir, 1000, on_wait, &w, err, sizeof err), 0);
    ck_assert_int_eq(w.calls, 0);
    ck_assert_int_eq(pj_loadturn_path(dir, path, sizeof path), 0);
    char want[32];
    snprintf(want, sizeof want, "%ld\n", (long)getpid());
    ck_assert_int_gt(pj_fixture_read_text(path, text, sizeof text), 0);
    ck_assert_str_eq(text, want);
    /* held already: taken again at once */
    ck_assert_int_eq(pj_loadturn_take(dir, 1000, on_wait, &w, err, sizeof err), 0);
    pj_loadturn_release();
    ck_assert_int_eq(pj_fixture_read_text(path, text, sizeof text), 0);
    pj_loadturn_release(); /* a no-op */
}
END_TEST

/* The file is 0600, made so when an older start left it 0644: flock needs
 * only a read-only descriptor, so a file others could read let any local
 * user hold the turn and put every start off by the whole bound. Another
 * uid cannot open it (checked where the test runs as root). */
START_TEST(turn_file_private)
{
    char dir[4200], path[4300], err[512] = "";
    turn_dir(dir, sizeof dir, "private");
    ck_assert_int_eq(pj_loadturn_path(dir, path, sizeof path), 0);
    ck_assert_int_eq(pj_loadturn_take(dir, 1000, NULL, NULL, err, sizeof err), 0);
    pj_loadturn_release();
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(chmod(path, 0644), 0);
    ck_assert_int_eq(pj_loadturn_take(dir, 1000, NULL, NULL, err, sizeof err), 0);
    pj_loadturn_release();
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    if (geteuid() == 0) {
        ck_assert_int_eq(chmod(dir, 0755), 0);
        fflush(stdout);
        fflush(stderr);
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            if (setgid(65534) != 0 || setuid(65534) != 0)
                _exit(3);
            struct stat cst; /* the way there is open to it: only the mode refuses */
            if (stat(path, &cst) != 0)
                _exit(2);
            int fd = open(path, O_RDONLY | O_CLOEXEC);
            _exit(fd < 0 && errno == EACCES ? 0 : 1);
        }
        int ws;
        ck_assert_int_eq(waitpid(pid, &ws, 0), pid);
        ck_assert_msg(WIFEXITED(ws) && WEXITSTATUS(ws) == 0,
                      "uid 65534 could open the turn's file (exit %d)", WEXITSTATUS(ws));
    }
}
END_TEST

/* Held by another: the wait names it, and the turn is taken when it is
 * released. */
START_TEST(held_turn_is_waited_for)
{
    char dir[4200], err[512] = "";
    turn_dir(dir, sizeof dir, "held");
    int rel;
    pid_t h = holder_child(dir, &rel);
    waits w = {.stop_after = 0};
    /* released by a second child after ~300 ms */
    fflush(stdout);
    fflush(stderr);
    pid_t closer = fork();
    ck_assert_int_ge(closer, 0);
    if (closer == 0) {
        usleep(300 * 1000);
        close(rel);
        _exit(0);
    }
    close(rel);
    ck_assert_int_eq(pj_loadturn_take(dir, 20000, on_wait, &w, err, sizeof err), 0);
    ck_assert_int_ge(w.calls, 2);
    ck_assert_int_eq(w.holder, (long)h);
    ck_assert_uint_ge(w.last_ms, 150);
    int st;
    ck_assert_int_eq(waitpid(h, &st, 0), h);
    ck_assert_int_eq(waitpid(closer, &st, 0), closer);
    pj_loadturn_release();
}
END_TEST

/* A stop during the wait ends it (-ECANCELED), the turn not taken; a wait
 * past its limit goes on without the turn, saying whom it waited for. */
START_TEST(wait_stopped_or_bounded)
{
    char dir[4200], err[512] = "";
    turn_dir(dir, sizeof dir, "bounded");
    int rel;
    pid_t h = holder_child(dir, &rel);
    waits w = {.stop_after = 3};
    ck_assert_int_eq(pj_loadturn_take(dir, 20000, on_wait, &w, err, sizeof err), -ECANCELED);
    ck_assert_int_eq(w.calls, 3);
    w = (waits){0};
    ck_assert_int_eq(pj_loadturn_take(dir, 300, on_wait, &w, err, sizeof err), 1);
    char want[96];
    snprintf(want, sizeof want, "for the load of projd pid %ld", (long)h);
    ck_assert_msg(strstr(err, want) && strstr(err, "loading beside it"), "%s", err);
    ck_assert_uint_ge(w.last_ms, 300);
    /* not held by this process: the holder keeps it */
    end_holder(h, rel);
    ck_assert_int_eq(pj_loadturn_take(dir, 300, NULL, NULL, err, sizeof err), 0);
    pj_loadturn_release();
}
END_TEST

/* A child that holds dir's turn naming pid 111111 in the file for 700 ms,
 * then second (what the file shows when another instance takes the turn
 * at the first's end: its pid, or nothing from one that cannot write the
 * file) for 800 ms; returned once the turn is held. */
static pid_t chain_child(const char *path, const char *second)
{
    int up[2];
    ck_assert_int_eq(pipe(up), 0);
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        close(up[0]);
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || flock(fd, LOCK_EX) != 0 || pwrite(fd, "111111\n", 7, 0) != 7 ||
            write(up[1], "y", 1) != 1)
            _exit(3);
        usleep(700 * 1000);
        const ssize_t n = (ssize_t)strlen(second);
        if (ftruncate(fd, 0) != 0 || (n && pwrite(fd, second, (size_t)n, 0) != n))
            _exit(4);
        usleep(800 * 1000);
        _exit(0); /* the lock goes with the process */
    }
    close(up[1]);
    char c;
    ck_assert_int_eq(read(up[0], &c, 1), 1);
    close(up[0]);
    return child;
}

/* The bound is per holder: a wait behind two loads in a row, each shorter
 * than the bound but longer together, is not cut short, whether the second
 * holder names its pid or none. */
START_TEST(bound_restarts_with_each_holder)
{
    char dir[4200], path[4300], err[512] = "";
    turn_dir(dir, sizeof dir, "chain");
    ck_assert_int_eq(pj_loadturn_path(dir, path, sizeof path), 0);
    const char *second[] = {"222222\n", ""};
    for (int i = 0; i < 2; i++) {
        pid_t child = chain_child(path, second[i]);
        waits w = {0};
        ck_assert_msg(pj_loadturn_take(dir, 900, on_wait, &w, err, sizeof err) == 0,
                      "second holder '%s': %s", second[i], err);
        ck_assert_uint_ge(w.last_ms, 1200); /* past the bound in all */
        ck_assert_int_eq(w.holder, i == 0 ? 222222 : 111111);
        pj_loadturn_release();
        int st;
        ck_assert_int_eq(waitpid(child, &st, 0), child);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
}
END_TEST

/* A directory where no lock file can be made: no turn, said, and the
 * start goes on (1). */
START_TEST(unmakeable_lock_file)
{
    char dir[4200], err[512] = "";
    pj_fixture_path(dir, sizeof dir, "no-such-dir");
    ck_assert_int_eq(pj_loadturn_take(dir, 300, NULL, NULL, err, sizeof err), 1);
    ck_assert_msg(strstr(err, ".projd-load-turn") && strstr(err, "No such file") &&
                      strstr(err, "loading without waiting for a turn"),
                  "%s", err);
    char longdir[5000];
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = '\0';
    ck_assert_int_eq(pj_loadturn_take(longdir, 300, NULL, NULL, err, sizeof err), 1);
    ck_assert_msg(strstr(err, "path too long") && strstr(err, "4999 bytes"), "%s", err);
}
END_TEST

int main(void)
{
    /* made here, so that the suite's exit removes it even when a case's
     * child fails and skips its own exit handlers */
    if (!pj_fixture_tmpdir())
        return EXIT_FAILURE;
    Suite *s = suite_create("loadturn");
    TCase *tc = tcase_create("turn");
    tcase_add_test(tc, free_turn_is_taken);
    tcase_add_test(tc, turn_file_private);
    tcase_add_test(tc, held_turn_is_waited_for);
    tcase_add_test(tc, wait_stopped_or_bounded);
    tcase_add_test(tc, bound_restarts_with_each_holder);
    tcase_add_test(tc, unmakeable_lock_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
