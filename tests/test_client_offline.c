/* test_client_offline.c — libprojd without projd: socket path resolution,
 * host shm buffers, connection errors, and the library's request machinery
 * against a small fake daemon in this process (an nng REP socket that
 * speaks just enough of protocol v1). The real end-to-end suites against
 * projd live with the daemon. */
#include <check.h>
#include <errno.h>
#include <pwd.h>
#include <fcntl.h>
#include <grp.h>
#include <nng/nng.h>
#include <nng/protocol/reqrep0/rep.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
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

#include "client/projd.h"
#include "client/shmbuf.h"
#include "protocol/ring.h"
#include "protocol/sockpath.h"

static char tmpdir[64];

static void make_tmpdir(void)
{
    snprintf(tmpdir, sizeof tmpdir, "/tmp/pjtest-client-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(tmpdir));
}

static void remove_tmpdir(void)
{
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    ck_assert_int_eq(system(cmd), 0);
}

static double seconds_since(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (double)(t.tv_nsec - t0->tv_nsec) * 1e-9;
}

/* ---- socket path resolution ---------------------------------------------------- */

START_TEST(test_sockpath)
{
    char url[256], err[256];
    setenv("PROJD_SOCKET", "ipc:///x/y.sock", 1);
    ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "ipc:///x/y.sock");
    ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_SERVER, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "ipc:///x/y.sock");
    setenv("PROJD_SOCKET", "/bare/path.sock", 1);
    ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "ipc:///bare/path.sock");
    /* A configured value wins over the environment. */
    ck_assert_int_eq(
        pj_sockpath_resolve("/cfg.sock", PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "ipc:///cfg.sock");
    ck_assert_int_eq(pj_sockpath_resolve("tcp://127.0.0.1:5555", PJ_SOCKPATH_CLIENT, url,
                                         sizeof url, err, sizeof err),
                     0);
    ck_assert_str_eq(url, "tcp://127.0.0.1:5555");
    ck_assert_int_eq(pj_sockpath_resolve("", PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err),
                     0);
    ck_assert_str_eq(url, "ipc:///bare/path.sock");

    unsetenv("PROJD_SOCKET");
    /* Step 2 for a client: the system socket, or a deployed instance. */
    char inst[256];
    int system_exists =
        access(PJ_SOCKPATH_SYSTEM, F_OK) == 0 ||
        pj_sockpath_find_instance(PJ_SOCKPATH_RUNDIR, inst, sizeof inst, err, sizeof err) != 0;
    setenv("XDG_RUNTIME_DIR", "/run/user/4242", 1);
    ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err), 0);
    /* Nothing found: the user's own (root's is the system instance's). */
    if (!system_exists)
        ck_assert_str_eq(url, geteuid() == 0 ? "ipc:///run/projd/projd.sock"
                                             : "ipc:///run/user/4242/projd/projd.sock");
    ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_SERVER, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, geteuid() == 0 ? "ipc:///run/projd/projd.sock"
                                         : "ipc:///run/user/4242/projd/projd.sock");
    unsetenv("XDG_RUNTIME_DIR");
    if (!system_exists) {
        char want[64];
        if (geteuid() == 0)
            snprintf(want, sizeof want, "ipc:///run/projd/projd.sock");
        else
            snprintf(want, sizeof want, "ipc:///tmp/projd-%u/projd.sock", (unsigned)getuid());
        ck_assert_int_eq(pj_sockpath_default(PJ_SOCKPATH_CLIENT, url, sizeof url, err, sizeof err),
                         0);
        ck_assert_str_eq(url, want);
    }
    /* Too small a buffer is an error with a message, not a cut URL. */
    char small[10];
    ck_assert_int_eq(pj_sockpath_resolve("/a/long/path.sock", PJ_SOCKPATH_CLIENT, small,
                                         sizeof small, err, sizeof err),
                     -ENAMETOOLONG);
    ck_assert_str_eq(small, "");
    ck_assert_ptr_nonnull(strstr(err, "longer"));

    ck_assert_str_eq(pj_sockpath_file("ipc:///a/b.sock"), "/a/b.sock");
    ck_assert_ptr_null(pj_sockpath_file("tcp://1.2.3.4:5"));

    make_tmpdir();
    snprintf(url, sizeof url, "ipc://%s/sub/projd.sock", tmpdir);
    ck_assert_int_eq(pj_sockpath_mkdir(url, 0700, err, sizeof err), 0);
    ck_assert_int_eq(pj_sockpath_mkdir(url, 0700, err, sizeof err), 0); /* exists: fine */
    char dir[300];
    snprintf(dir, sizeof dir, "%s/sub", tmpdir);
    struct stat st;
    ck_assert_int_eq(stat(dir, &st), 0);
    ck_assert(S_ISDIR(st.st_mode));
    ck_assert_int_eq(st.st_mode & 0777, 0700);
    snprintf(url, sizeof url, "ipc://%s/missing/deeper/projd.sock", tmpdir);
    ck_assert_int_eq(pj_sockpath_mkdir(url, 0700, err, sizeof err), -ENOENT);
    ck_assert_ptr_nonnull(strstr(err, "mkdir"));

    /* A directory others can write, or a symlink, is refused. */
    ck_assert_int_eq(chmod(dir, 0777), 0);
    snprintf(url, sizeof url, "ipc://%s/sub/projd.sock", tmpdir);
    ck_assert_int_eq(pj_sockpath_mkdir(url, 0700, err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "mode 0777") && strstr(err, dir), "err: %s", err);
    ck_assert_int_eq(chmod(dir, 0700), 0);
    ck_assert_int_eq(pj_sockpath_check_dir(dir, err, sizeof err), 0);
    char link[320];
    snprintf(link, sizeof link, "%s/link", tmpdir);
    ck_assert_int_eq(symlink(dir, link), 0);
    ck_assert_int_eq(pj_sockpath_check_dir(link, err, sizeof err), -ELOOP);
    ck_assert_msg(strstr(err, "symbolic link"), "err: %s", err);
    unlink(link);
    /* A writable ancestor without the sticky bit is refused; /tmp's is fine. */
    ck_assert_int_eq(chmod(tmpdir, 0777), 0);
    ck_assert_int_eq(pj_sockpath_check_dir(dir, err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "ancestor"), "err: %s", err);
    ck_assert_int_eq(chmod(tmpdir, 01777), 0);
    ck_assert_int_eq(pj_sockpath_check_dir(dir, err, sizeof err), 0);
    ck_assert_int_eq(pj_sockpath_check_dir("/tmp", err, sizeof err), -EPERM); /* never as its own */
    ck_assert_int_eq(chmod(tmpdir, 0700), 0);
    rmdir(dir);

    /* Symbolic links on the way to the socket's directory: one of ours (or
     * root's) in a directory others cannot write is followed; one another
     * uid owns, or one in a directory anyone may write, could be pointed
     * elsewhere between the check and the listener's chmod and rename. */
    char real[320], sub[400], lnk[320], pub[320], plink[400], via[480];
    snprintf(real, sizeof real, "%s/real", tmpdir);
    ck_assert_int_eq(mkdir(real, 0755), 0);
    snprintf(sub, sizeof sub, "%s/sub", real);
    ck_assert_int_eq(mkdir(sub, 0755), 0);
    snprintf(lnk, sizeof lnk, "%s/l", tmpdir);
    ck_assert_int_eq(symlink("real", lnk), 0); /* relative target */
    snprintf(via, sizeof via, "%s/sub", lnk);
    ck_assert_msg(pj_sockpath_check_dir(via, err, sizeof err) == 0, "err: %s", err);
    /* a link to the link, absolute: both followed */
    snprintf(plink, sizeof plink, "%s/l2", tmpdir);
    ck_assert_int_eq(symlink(lnk, plink), 0);
    snprintf(via, sizeof via, "%s/sub", plink);
    ck_assert_msg(pj_sockpath_check_dir(via, err, sizeof err) == 0, "err: %s", err);
    if (geteuid() == 0) {
        ck_assert_int_eq(lchown(lnk, 65534, 65534), 0);
        ck_assert_int_eq(pj_sockpath_check_dir(via, err, sizeof err), -EPERM); /* through l2 */
        ck_assert_msg(strstr(err, "symbolic link") && strstr(err, "uid 65534"), "err: %s", err);
        ck_assert_int_eq(lchown(lnk, 0, 0), 0);
        /* A link of ours in a directory of ours, under a directory another
         * uid owns: that uid can move our directory away and put its own
         * (link and all) in its place. */
        char above[200], mine[240], l4[280];
        snprintf(above, sizeof above, "%s/above", tmpdir);
        ck_assert_int_eq(mkdir(above, 0755), 0);
        snprintf(mine, sizeof mine, "%s/mine", above);
        ck_assert_int_eq(mkdir(mine, 0755), 0);
        snprintf(l4, sizeof l4, "%s/l4", mine);
        ck_assert_int_eq(symlink(real, l4), 0);
        snprintf(via, sizeof via, "%s/sub", l4);
        ck_assert_msg(pj_sockpath_check_dir(via, err, sizeof err) == 0, "err: %s", err);
        ck_assert_int_eq(chown(above, 65534, 65534), 0);
        ck_assert_int_eq(pj_sockpath_check_dir(via, err, sizeof err), -EPERM);
        ck_assert_msg(strstr(err, "ancestor") && strstr(err, above), "err: %s", err);
    }
    /* ours, but in a directory anyone may write (not sticky): refused */
    snprintf(pub, sizeof pub, "%s/pub", tmpdir);
    ck_assert_int_eq(mkdir(pub, 0755), 0);
    ck_assert_int_eq(chmod(pub, 0777), 0);
    snprintf(plink, sizeof plink, "%s/l3", pub);
    ck_assert_int_eq(symlink(real, plink), 0);
    snprintf(via, sizeof via, "%s/sub", plink);
    ck_assert_int_eq(pj_sockpath_check_dir(via, err, sizeof err), -EPERM);
    ck_assert_msg(strstr(err, "ancestor") && strstr(err, pub), "err: %s", err);
    /* The /tmp fallback is made private; others keep 0755. */
    snprintf(url, sizeof url, "ipc:///tmp/projd-%u/projd.sock", (unsigned)getuid());
    ck_assert_int_eq(pj_sockpath_dir_mode(url), 0700);
    ck_assert_int_eq(pj_sockpath_dir_mode("ipc:///run/projd/projd.sock"), 0755);
    snprintf(url, sizeof url, "ipc:///tmp/projd-%u/x/projd.sock", (unsigned)getuid());
    ck_assert_int_eq(pj_sockpath_dir_mode(url), 0755);
    remove_tmpdir();
}
END_TEST

/* A socket file at dir/name, as a daemon leaves it (bound, not listening). */
static void make_sock_file(const char *dir, const char *name)
{
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/%s", dir, name);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    close(fd);
}

/* Step 4's search for the instances of deploy/projd@.service, in a
 * directory of the test's own (/run/projd outside tests). */
START_TEST(test_sockpath_instances)
{
    char url[256], err[512], want[400];
    make_tmpdir();
    /* None: an empty directory, one that does not exist, and names or file
     * types that are not an instance's socket. */
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err), 0);
    ck_assert_int_eq(
        pj_sockpath_find_instance("/nonexistent/projd", url, sizeof url, err, sizeof err), 0);
    char path[300];
    snprintf(path, sizeof path, "%s/projd-5.sock", tmpdir);
    FILE *f = fopen(path, "w"); /* a regular file, not a socket */
    ck_assert_ptr_nonnull(f);
    fclose(f);
    make_sock_file(tmpdir, "projd-x.sock");
    make_sock_file(tmpdir, "projd-.sock");
    make_sock_file(tmpdir, "projd-1.sock.old");
    make_sock_file(tmpdir, "projd.sock.1");
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err), 0);

    /* Exactly one: taken. */
    make_sock_file(tmpdir, "projd-3.sock");
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err), 1);
    snprintf(want, sizeof want, "ipc://%s/projd-3.sock", tmpdir);
    ck_assert_str_eq(url, want);
    char small[12];
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, small, sizeof small, err, sizeof err),
                     -ENAMETOOLONG);

    /* Several: refused, listing them in order and saying how to pick. */
    make_sock_file(tmpdir, "projd-10.sock");
    make_sock_file(tmpdir, "projd-0.sock");
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err),
                     -ENOTUNIQ);
    ck_assert_str_eq(url, "");
    snprintf(want, sizeof want,
             "3 projd instances in %s: projd-0.sock, projd-3.sock, projd-10.sock", tmpdir);
    ck_assert_msg(strstr(err, want) != NULL, "err: %s", err);
    ck_assert_msg(strstr(err, "--socket") && strstr(err, "PROJD_SOCKET") &&
                      strstr(err, "--instance N"),
                  "err: %s", err);

    /* Stale files beside a live instance (a daemon that crashed leaves its
     * socket file): only the one listened on counts. */
    int live = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/projd-12.sock", tmpdir);
    ck_assert_int_eq(bind(live, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(live, 4), 0);
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err), 1);
    snprintf(want, sizeof want, "ipc://%s/projd-12.sock", tmpdir);
    ck_assert_str_eq(url, want);
    close(live);

    /* More files than the lookup keeps: never narrowed to a live one it
     * may not have seen; the error counts them all. */
    for (int i = 100; i < 170; i++) {
        char name[32];
        snprintf(name, sizeof name, "projd-%d.sock", i);
        make_sock_file(tmpdir, name);
    }
    live = socket(AF_UNIX, SOCK_STREAM, 0);
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/projd-12.sock", tmpdir);
    unlink(sa.sun_path);
    ck_assert_int_eq(bind(live, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(live, 4), 0);
    ck_assert_int_eq(pj_sockpath_find_instance(tmpdir, url, sizeof url, err, sizeof err),
                     -ENOTUNIQ);
    ck_assert_msg(strstr(err, "74 projd instances") && strstr(err, "more"), "err: %s", err);
    close(live);

    /* projctl --instance N's URL. */
    ck_assert_int_eq(pj_sockpath_instance(7, url, sizeof url, err, sizeof err), 0);
    ck_assert_str_eq(url, "ipc:///run/projd/projd-7.sock");

    /* Where a URL came from, for messages. */
    pj_sockpath_source src = PJ_SOCKPATH_FROM_TMP;
    ck_assert_int_eq(pj_sockpath_resolve_src("/a.sock", PJ_SOCKPATH_CLIENT, url, sizeof url, &src,
                                             err, sizeof err),
                     0);
    ck_assert_int_eq(src, PJ_SOCKPATH_FROM_CONFIGURED);
    setenv("PROJD_SOCKET", "/env.sock", 1);
    ck_assert_int_eq(
        pj_sockpath_resolve_src(NULL, PJ_SOCKPATH_CLIENT, url, sizeof url, &src, err, sizeof err),
        0);
    ck_assert_int_eq(src, PJ_SOCKPATH_FROM_ENV);
    ck_assert_str_eq(pj_sockpath_source_text(PJ_SOCKPATH_CLIENT, src), "from $PROJD_SOCKET");
    unsetenv("PROJD_SOCKET");
    ck_assert_ptr_nonnull(
        strstr(pj_sockpath_source_text(PJ_SOCKPATH_CLIENT, PJ_SOCKPATH_FROM_TMP), "your own"));
    ck_assert_ptr_nonnull(
        strstr(pj_sockpath_source_text(PJ_SOCKPATH_CLIENT, PJ_SOCKPATH_FROM_INSTANCE),
               "the only projd-<N>.sock"));

    /* Nothing anywhere: the client's own URL, and the connect's error says
     * where else it looked (step 5). Which step applies depends on this
     * machine's /run/projd; each outcome is checked for what it must be. */
    const char *xdg_before = getenv("XDG_RUNTIME_DIR");
    char xdg_saved[512];
    snprintf(xdg_saved, sizeof xdg_saved, "%s", xdg_before ? xdg_before : "");
    setenv("XDG_RUNTIME_DIR", tmpdir, 1);
    char inst[400];
    /* Root's own is the system instance's (a root daemon listens there). */
    if (geteuid() == 0)
        snprintf(want, sizeof want, "ipc://%s", PJ_SOCKPATH_SYSTEM);
    else
        snprintf(want, sizeof want, "ipc://%s/projd/projd.sock", tmpdir);
    int system_there = access(PJ_SOCKPATH_SYSTEM, F_OK) == 0;
    int instances =
        pj_sockpath_find_instance(PJ_SOCKPATH_RUNDIR, inst, sizeof inst, err, sizeof err);
    int rc =
        pj_sockpath_resolve_src(NULL, PJ_SOCKPATH_CLIENT, url, sizeof url, &src, err, sizeof err);
    if (system_there) { /* live or stale: test_sockpath_stale_system tells them apart */
        ck_assert_int_eq(rc == -ENOTUNIQ ? 0 : rc, 0);
        ck_assert(rc != 0 || src == PJ_SOCKPATH_FROM_SYSTEM ||
                  src == PJ_SOCKPATH_FROM_SYSTEM_STALE || src == PJ_SOCKPATH_FROM_INSTANCE);
    } else if (instances < 0) { /* several instances: the caller must pick */
        ck_assert_int_eq(rc, instances);
    } else if (instances == 1) {
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(src, PJ_SOCKPATH_FROM_INSTANCE);
    } else {
        ck_assert_int_eq(rc, 0);
        ck_assert_int_eq(src, PJ_SOCKPATH_FROM_NONE_FOUND);
        ck_assert_str_eq(url, want);
        projd_conn *c = NULL;
        projd_error e;
        ck_assert_int_eq(projd_connect(NULL, "t", &c, &e), -ENOENT);
        ck_assert_msg(strstr(e.msg, want) && strstr(e.msg, "no projd found") &&
                          strstr(e.msg, PJ_SOCKPATH_SYSTEM) &&
                          strstr(e.msg, "under $XDG_RUNTIME_DIR/projd or /tmp/projd-<uid>)"),
                      "%s", e.msg); /* whole: the where-else text was cut at 160 bytes */
    }
    if (xdg_before)
        setenv("XDG_RUNTIME_DIR", xdg_saved, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    remove_tmpdir();
}
END_TEST

/* A socket listened on at dir/name as projd makes one (server.c,
 * open_listener): bound to a private name, "<path>.<pid>.<seq>", and
 * renamed onto the path, so /proc/net/unix shows the private name (the
 * lookup matched the path alone and never found a live daemon). Its fd. */
static int listen_sock(const char *dir, const char *name)
{
    static unsigned seq;
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    char path[sizeof sa.sun_path];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%.80s.%ld.%u", path, (long)getpid(), seq++);
    ck_assert(n > 0 && (size_t)n < sizeof sa.sun_path && strlen(path) <= 80);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    ck_assert_int_eq(listen(fd, 4), 0);
    ck_assert_int_eq(rename(sa.sun_path, path), 0);
    return fd;
}

/* A client's step 2 beside a system socket nobody listens on (projd.service
 * stopped for the projd@N instances, or crashed): it must not hide a live
 * instance or the user's own daemon, and is still taken when nothing else
 * is found. Steps 2 and 4 in directories of the test's own. */
START_TEST(test_sockpath_stale_system)
{
    char url[400], err[512], want[600], sys[300], run[300], xdg[300];
    make_tmpdir();
    snprintf(sys, sizeof sys, "%s/projd.sock", tmpdir);
    snprintf(run, sizeof run, "%s/run", tmpdir);
    snprintf(xdg, sizeof xdg, "%s/xdg", tmpdir);
    ck_assert_int_eq(mkdir(run, 0755), 0);
    ck_assert_int_eq(mkdir(xdg, 0700), 0);
    char xdg_saved[512];
    const char *xdg_before = getenv("XDG_RUNTIME_DIR");
    snprintf(xdg_saved, sizeof xdg_saved, "%s", xdg_before ? xdg_before : "");
    setenv("XDG_RUNTIME_DIR", xdg, 1);
    unsetenv("PROJD_SOCKET");
    pj_sockpath_source src;
    const pj_sockpath_role C = PJ_SOCKPATH_CLIENT;
#define RESOLVE() pj_sockpath_default_at(C, sys, run, url, sizeof url, &src, err, sizeof err)
    /* Resolved, from want_src, to the URL the rest formats. */
#define EXPECT_URL(want_src, ...)                                                                  \
    do {                                                                                           \
        ck_assert_int_eq(RESOLVE(), 0);                                                            \
        ck_assert_int_eq(src, want_src);                                                           \
        snprintf(want, sizeof want, __VA_ARGS__);                                                  \
        ck_assert_str_eq(url, want);                                                               \
    } while (0)

    /* Live system socket, a live instance beside it: the system's, as before. */
    int sys_fd = listen_sock(tmpdir, "projd.sock");
    int inst_fd = listen_sock(run, "projd-3.sock");
    EXPECT_URL(PJ_SOCKPATH_FROM_SYSTEM, "ipc://%s", sys);

    /* The system daemon gone, its file left: the live instance. */
    close(sys_fd);
    ck_assert_int_eq(access(sys, F_OK), 0);
    EXPECT_URL(PJ_SOCKPATH_FROM_INSTANCE, "ipc://%s/projd-3.sock", run);

    /* Two live instances: the caller must pick, as without the stale file. */
    int inst2_fd = listen_sock(run, "projd-4.sock");
    ck_assert_int_eq(RESOLVE(), -ENOTUNIQ);
    ck_assert_msg(strstr(err, "projd-3.sock, projd-4.sock"), "err: %s", err);
    close(inst2_fd);
    snprintf(want, sizeof want, "%s/projd-4.sock", run);
    ck_assert_int_eq(unlink(want), 0);

    /* The user's own daemon live: its socket, before the instances. */
    char own_dir[320];
    snprintf(own_dir, sizeof own_dir, "%s/projd", xdg);
    ck_assert_int_eq(mkdir(own_dir, 0700), 0);
    int own_fd = listen_sock(own_dir, "projd.sock");
    EXPECT_URL(PJ_SOCKPATH_FROM_XDG, "ipc://%s/projd.sock", own_dir);
    close(own_fd);

    /* Every file stale: the system's again (the connect says it is refused,
     * and where else the client looked). */
    close(inst_fd);
    EXPECT_URL(PJ_SOCKPATH_FROM_SYSTEM_STALE, "ipc://%s", sys);
    const char *text = pj_sockpath_source_text(C, src);
    ck_assert_msg(strstr(text, "nothing listens") && strstr(text, "no other projd"), "%s", text);

    /* No system file: stale instance files all count again (the daemons
     * may be in another network namespace), so the only one is taken. */
    ck_assert_int_eq(unlink(sys), 0);
    ck_assert_int_eq(RESOLVE(), 0);
    ck_assert_int_eq(src, PJ_SOCKPATH_FROM_INSTANCE);
#undef EXPECT_URL
#undef RESOLVE

    if (xdg_before)
        setenv("XDG_RUNTIME_DIR", xdg_saved, 1);
    else
        unsetenv("XDG_RUNTIME_DIR");
    remove_tmpdir();
}
END_TEST

/* ---- shm buffers --------------------------------------------------------------- */

START_TEST(test_shmbuf)
{
    char err[256];
    pj_shmbuf a, b;
    ck_assert_int_eq(pj_shmbuf_create(&a, 0, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_shmbuf_create(&a, 12345, err, sizeof err), 0);
    ck_assert_int_eq(pj_shmbuf_create(&b, 4096, err, sizeof err), 0);
    ck_assert_str_ne(a.name, b.name);
    char prefix[32];
    snprintf(prefix, sizeof prefix, "/projd-%ld-", (long)getpid());
    ck_assert_int_eq(strncmp(a.name, prefix, strlen(prefix)), 0);
    ck_assert_uint_eq(a.size, 12345);
    ck_assert_int_eq(a.linked, 1);
    /* zero-filled and writable */
    for (size_t i = 0; i < a.size; i++)
        ck_assert_int_eq(((uint8_t *)a.ptr)[i], 0);
    memset(a.ptr, 0x5a, a.size);

    /* Another mapping of the same name sees the bytes (what the daemon does). */
    int fd = shm_open(a.name, O_RDWR, 0);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    ck_assert_int_eq(st.st_size, 12345);
    ck_assert_int_eq(st.st_mode & 0777, 0600);
    ck_assert_int_eq(st.st_uid, geteuid());
    uint8_t *other = mmap(NULL, a.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ck_assert_ptr_ne(other, MAP_FAILED);
    close(fd);
    ck_assert_int_eq(other[12344], 0x5a);
    other[0] = 0x11;
    ck_assert_int_eq(((uint8_t *)a.ptr)[0], 0x11);

    /* Unlink removes the name; both mappings stay valid. */
    char path[128];
    snprintf(path, sizeof path, "/dev/shm%s", a.name);
    ck_assert_int_eq(access(path, F_OK), 0);
    ck_assert_int_eq(pj_shmbuf_unlink(&a), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
    ck_assert_int_eq(pj_shmbuf_unlink(&a), 0); /* twice is fine */
    other[1] = 0x22;
    ck_assert_int_eq(((uint8_t *)a.ptr)[1], 0x22);
    munmap(other, a.size);
    pj_shmbuf_destroy(&a);
    ck_assert_ptr_null(a.ptr);

    /* destroy also unlinks */
    snprintf(path, sizeof path, "/dev/shm%s", b.name);
    ck_assert_int_eq(access(path, F_OK), 0);
    pj_shmbuf_destroy(&b);
    ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

/* ---- nobody listening ------------------------------------------------------------ */

START_TEST(test_connect_nobody)
{
    make_tmpdir();
    char url[400];
    projd_error e;
    projd_conn *c = (projd_conn *)1;
    struct timespec t0;

    /* No socket file at all. */
    snprintf(url, sizeof url, "ipc://%s/none.sock", tmpdir);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_connect(url, "t", &c, &e);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_eq(rc, e.code);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(e.msg, url) != NULL, "message does not name the url: %s", e.msg);
    ck_assert_msg(strstr(e.msg, "projd running") != NULL, "no hint: %s", e.msg);
    /* A missing file is said as such, not as a refusal. */
    ck_assert_int_eq(rc, -ENOENT);
    char nofile[450];
    snprintf(nofile, sizeof nofile, "no socket file at %s/none.sock", tmpdir);
    ck_assert_msg(strstr(e.msg, nofile) != NULL && !strstr(e.msg, "refused"), "%s", e.msg);
    /* Given by the caller: no word on how it was chosen. */
    ck_assert_msg(strstr(e.msg, "the URL is") == NULL, "%s", e.msg);
    /* Far less than the 30 s request timeout: it is reported, not waited out. */
    ck_assert_double_lt(seconds_since(&t0), 20.0);

    /* A socket file whose owner does not listen (bound, never listened). */
    snprintf(url, sizeof url, "ipc://%s/dead.sock", tmpdir);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s/dead.sock", tmpdir);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof sa), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    rc = projd_connect(url, "t", &c, &e);
    ck_assert_int_eq(rc, -ECONNREFUSED);
    ck_assert_ptr_nonnull(strstr(e.msg, "refused"));
    ck_assert_double_lt(seconds_since(&t0), 20.0);
    close(fd);

    /* Default resolution goes through $PROJD_SOCKET. */
    snprintf(url, sizeof url, "%s/env.sock", tmpdir);
    setenv("PROJD_SOCKET", url, 1);
    rc = projd_connect(NULL, NULL, &c, &e);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_nonnull(strstr(e.msg, "env.sock"));
    /* ... and the message says that it did. */
    ck_assert_msg(strstr(e.msg, "the URL is from $PROJD_SOCKET") != NULL, "%s", e.msg);
    unsetenv("PROJD_SOCKET");
    /* A malformed URL */
    rc = projd_connect("bogus://x", "t", &c, &e);
    ck_assert_int_lt(rc, 0);
    ck_assert_str_ne(e.msg, "");
    remove_tmpdir();
}
END_TEST

START_TEST(test_strerror)
{
    ck_assert_str_eq(projd_strerror(0), "OK");
    ck_assert_str_eq(projd_strerror(PJ_E_BOUNDS), "E_BOUNDS");
    ck_assert_str_eq(projd_strerror(-ETIMEDOUT), strerror(ETIMEDOUT));
    ck_assert_str_eq(projd_backend_name(1), "cpu");
    ck_assert_str_eq(projd_backend_name(2), "cuda");
    ck_assert_str_eq(projd_format_name(1), "z12");
}
END_TEST

/* ---- a fake daemon ------------------------------------------------------------------ */

enum fake_mode {
    FAKE_NORMAL,
    FAKE_SILENT,  /* receives, never answers */
    FAKE_REFUSE,  /* closes every pipe as it arrives (auth refusal) */
    FAKE_GARBAGE, /* answers everything after WELCOME with junk */
    /* Drops each first REGISTER unanswered (a reply lost, or late past the
     * client's timeout); one sent again with PJ_HF_RETRY is refused with
     * E_FLAGS, as a daemon from before the flag does. */
    FAKE_REGISTER_OLD,
    /* The same drop; the one sent again is answered (a current daemon
     * that never saw the first). */
    FAKE_REGISTER_LOST,
};

#define FAKE_MAX_BUFS 16

/* How the fake answers PING on an attached ring. */
enum fake_ring_mode {
    FAKE_RING_PONG,  /* as the daemon does */
    FAKE_RING_TWICE, /* the same PONG twice: more replies than requests */
    FAKE_RING_OTHER, /* a PONG with a req_id the client never sent */
};

typedef struct fake {
    nng_socket sock;
    pthread_t thread;
    atomic_int stop;
    atomic_int mode; /* enum fake_mode */
    char url[400];
    uint32_t next_id;
    struct {
        uint32_t id;
        uint8_t *p;
        size_t size;
    } bufs[FAKE_MAX_BUFS];
    atomic_int n_project, n_unregister, n_register;
    atomic_int refuse_next; /* pipes still to close as they come (any mode) */
    atomic_int n_refused;   /* pipes closed as they came */
    /* The client's ring once RING_ATTACH came, answered by ring_thread. */
    pj_ring ring;
    void *ring_map;
    size_t ring_size;
    atomic_int ring_mode; /* enum fake_ring_mode */
    pthread_t ring_thread;
    int ring_started;
} fake;

static void *fake_ring_main(void *arg)
{
    fake *f = arg;
    static uint8_t buf[1 << 16];
    pj_wbuf w;
    pj_wbuf_init(&w);
    while (!atomic_load(&f->stop)) {
        size_t len;
        if (pj_ring_pop(&f->ring, PJ_RING_SQ, buf, sizeof buf, &len) != 0) {
            usleep(100);
            continue;
        }
        pj_hdr h;
        char err[256];
        if (pj_dec_hdr(buf, len, 1 << 20, &h, err, sizeof err) != PJ_OK || h.type != PJ_MSG_PING)
            continue; /* the ring tests send PING only */
        const int mode = atomic_load(&f->ring_mode);
        pj_wbuf_reset(&w);
        pj_enc_pong(&w, mode == FAKE_RING_OTHER ? h.req_id + 1000 : h.req_id,
                    buf + PJ_WIRE_HDR_SIZE, h.body_len);
        pj_ring_push(&f->ring, PJ_RING_CQ, w.data, w.len);
        if (mode == FAKE_RING_TWICE)
            pj_ring_push(&f->ring, PJ_RING_CQ, w.data, w.len);
        pj_ring_kick(&f->ring, PJ_RING_CQ);
    }
    pj_wbuf_free(&w);
    return NULL;
}

/* RING_ATTACH: the client's ring mapped and answered on (one per fake). */
static void fake_ring_attach(fake *f, const uint8_t *b, uint32_t len, uint64_t req_id, pj_wbuf *w)
{
    char err[256];
    pj_ring_attach a;
    int st = pj_dec_ring_attach(b, len, &a, err, sizeof err);
    if (st != PJ_OK || f->ring_started) {
        pj_enc_error(w, req_id, st != PJ_OK ? st : PJ_E_LIMIT, 0xffffffffu,
                     st != PJ_OK ? err : "one ring per fake");
        return;
    }
    int fd = shm_open(a.shm_name, O_RDWR, 0);
    f->ring_size = pj_ring_bytes(a.slots, a.slot_bytes);
    f->ring_map =
        fd < 0 ? MAP_FAILED : mmap(NULL, f->ring_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (fd >= 0)
        close(fd);
    if (f->ring_map == MAP_FAILED || pj_ring_view(&f->ring, f->ring_map, f->ring_size, a.slots,
                                                  a.slot_bytes, err, sizeof err) != 0) {
        if (f->ring_map != MAP_FAILED)
            munmap(f->ring_map, f->ring_size);
        f->ring_map = NULL;
        pj_enc_error(w, req_id, PJ_E_REGISTER, 0xffffffffu, "cannot map the ring (fake)");
        return;
    }
    pj_ring_set_state(&f->ring, PJ_RING_STATE_ATTACHED);
    f->ring_started = pthread_create(&f->ring_thread, NULL, fake_ring_main, f) == 0;
    pj_ring_attached r = {a.slots, a.slot_bytes, 0};
    pj_enc_ring_attached(w, req_id, &r);
}

static void fake_refuse_pipe(nng_pipe p, nng_pipe_ev ev, void *arg)
{
    (void)ev;
    fake *f = arg;
    if (atomic_load(&f->mode) == FAKE_REFUSE || atomic_fetch_sub(&f->refuse_next, 1) > 0) {
        atomic_fetch_add(&f->n_refused, 1);
        nng_pipe_close(p);
    }
}

static uint8_t *fake_buf(fake *f, uint32_t id, size_t *size)
{
    for (int i = 0; i < FAKE_MAX_BUFS; i++)
        if (f->bufs[i].p && f->bufs[i].id == id) {
            *size = f->bufs[i].size;
            return f->bufs[i].p;
        }
    return NULL;
}

/* One request in, one reply out (into w). */
static void fake_handle(fake *f, const uint8_t *m, size_t len, pj_wbuf *w)
{
    char err[256];
    pj_hdr h;
    int st = pj_dec_hdr(m, len, 1 << 20, &h, err, sizeof err);
    if (st != PJ_OK) {
        pj_enc_error(w, h.req_id, st, 0xffffffffu, err);
        return;
    }
    const uint8_t *b = m + PJ_WIRE_HDR_SIZE;
    if (atomic_load(&f->mode) == FAKE_GARBAGE && h.type != PJ_MSG_HELLO) {
        uint8_t junk[30];
        memset(junk, 0xab, sizeof junk);
        pj_wbuf_reset(w);
        pj_enc_raw(w, h.req_id, PJ_MSG_PONG, junk, sizeof junk);
        memset(w->data, 0xee, 4); /* bad magic */
        return;
    }
    switch (h.type) {
    case PJ_MSG_HELLO: {
        pj_hello hello;
        st = pj_dec_hello(b, h.body_len, &hello, err, sizeof err);
        if (st != PJ_OK) {
            pj_enc_error(w, h.req_id, st, 0xffffffffu, err);
            return;
        }
        static pj_welcome wl;
        memset(&wl, 0, sizeof wl);
        wl.version = 1;
        wl.backend = 1;
        wl.max_m = 256;
        wl.max_ops_per_request = 8;
        wl.max_buffers = FAKE_MAX_BUFS;
        wl.max_message_bytes = 4096;
        wl.n_layers = 2;
        strcpy(wl.layers[0].name, "alpha");
        wl.layers[0].n = 64;
        wl.layers[0].k = 32;
        strcpy(wl.layers[1].name, "beta");
        wl.layers[1].n = 16;
        wl.layers[1].k = 64;
        wl.layers[1].format = 1;
        wl.n_shapes = 2;
        wl.shapes[0] = 1;
        wl.shapes[1] = 8;
        pj_enc_welcome(w, h.req_id, &wl);
        return;
    }
    case PJ_MSG_PING:
    case PJ_MSG_PONG:
        pj_enc_pong(w, h.req_id, b, h.body_len);
        return;
    case PJ_MSG_RING_ATTACH:
        fake_ring_attach(f, b, h.body_len, h.req_id, w);
        return;
    case PJ_MSG_STATS:
        pj_enc_stats_reply(w, h.req_id, "{\"uptime_s\": 3}", 15);
        return;
    case PJ_MSG_REGISTER: {
        pj_register r;
        atomic_fetch_add(&f->n_register, 1);
        st = pj_dec_register(b, h.body_len, &r, err, sizeof err);
        if (st != PJ_OK) {
            pj_enc_error(w, h.req_id, st, 0xffffffffu, err);
            return;
        }
        int fd = shm_open(r.shm_name, O_RDWR, 0);
        if (fd < 0) {
            pj_enc_error(w, h.req_id, PJ_E_REGISTER, 0xffffffffu, "shm_open failed");
            return;
        }
        void *p = mmap(NULL, r.size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        close(fd);
        for (int i = 0; i < FAKE_MAX_BUFS; i++) {
            if (!f->bufs[i].p) {
                f->bufs[i].p = p;
                f->bufs[i].size = r.size;
                f->bufs[i].id = ++f->next_id;
                pj_registered rd = {f->bufs[i].id, r.size};
                pj_enc_registered(w, h.req_id, &rd);
                return;
            }
        }
        munmap(p, r.size);
        pj_enc_error(w, h.req_id, PJ_E_LIMIT, 0xffffffffu, "too many buffers");
        return;
    }
    case PJ_MSG_UNREGISTER: {
        uint32_t id;
        atomic_fetch_add(&f->n_unregister, 1);
        pj_dec_buffer_id(b, h.body_len, &id, err, sizeof err);
        for (int i = 0; i < FAKE_MAX_BUFS; i++) {
            if (f->bufs[i].p && f->bufs[i].id == id) {
                munmap(f->bufs[i].p, f->bufs[i].size);
                f->bufs[i].p = NULL;
                pj_enc_unregistered(w, h.req_id, id);
                return;
            }
        }
        pj_enc_error(w, h.req_id, PJ_E_BUFFER, 0xffffffffu, "no such buffer");
        return;
    }
    case PJ_MSG_PROJECT: {
        static pj_op ops[8];
        pj_project p = {.ops = ops};
        atomic_fetch_add(&f->n_project, 1);
        st = pj_dec_project(b, h.body_len, 8, &p, err, sizeof err);
        if (st != PJ_OK) {
            pj_enc_error(w, h.req_id, st, 0xffffffffu, err);
            return;
        }
        pj_op_result res[8];
        pj_done d = {.status = PJ_OK, .n_ops = p.n_ops, .queue_ns = 11, .exec_ns = 22, .ops = res};
        for (uint32_t i = 0; i < p.n_ops; i++) {
            const pj_op *o = &ops[i];
            res[i].status = PJ_OK;
            res[i].engine = 3;
            if (o->layer >= 2) {
                pj_enc_error(w, h.req_id, PJ_E_LAYER, i, "unknown layer (fake)");
                return;
            }
            if (o->m == 78) { /* an ERROR naming an op the request does not have */
                pj_enc_error(w, h.req_id, PJ_E_BUFFER, 1000, "op 1000 (fake)");
                return;
            }
            if (o->m == 77 || o->m == 76) { /* the fake's way to make one op fail at run time */
                res[i].status = PJ_E_BACKEND;
                if (d.status == PJ_OK)
                    d.status = o->m == 76 ? -5 : PJ_E_BACKEND; /* 76: a malformed DONE */
                continue;
            }
            /* The fake "projection": y[r][c] = x[r][0] + c, on the shared pages. */
            size_t xs, ys;
            uint16_t *x = (uint16_t *)fake_buf(f, o->x_buf, &xs);
            uint16_t *y = (uint16_t *)fake_buf(f, o->y_buf, &ys);
            if (!x || !y) {
                pj_enc_error(w, h.req_id, PJ_E_BUFFER, i, "unknown buffer (fake)");
                return;
            }
            for (uint32_t r = 0; r < o->m; r++)
                for (uint32_t c = 0; c < o->n; c++)
                    y[o->y_off / 2 + r * o->y_ld + c] =
                        (uint16_t)(x[o->x_off / 2 + r * o->x_ld] + c);
        }
        pj_enc_done(w, h.req_id, &d);
        return;
    }
    default:
        pj_enc_error(w, h.req_id, PJ_E_TYPE, 0xffffffffu, "unknown type");
    }
}

static void *fake_main(void *arg)
{
    fake *f = arg;
    pj_wbuf w;
    pj_wbuf_init(&w);
    while (!atomic_load(&f->stop)) {
        nng_msg *m;
        int rv = nng_recvmsg(f->sock, &m, 0);
        if (rv == NNG_ETIMEDOUT)
            continue;
        if (rv != 0)
            break;
        const int mode = atomic_load(&f->mode);
        if (mode == FAKE_SILENT) {
            nng_msg_free(m);
            continue;
        }
        pj_wbuf_reset(&w);
        pj_hdr h;
        char err[256];
        const int is_register =
            (mode == FAKE_REGISTER_OLD || mode == FAKE_REGISTER_LOST) &&
            pj_dec_hdr(nng_msg_body(m), nng_msg_len(m), 1 << 20, &h, err, sizeof err) == PJ_OK &&
            h.type == PJ_MSG_REGISTER;
        if (is_register && !(h.flags & PJ_HF_RETRY)) {
            atomic_fetch_add(&f->n_register, 1);
            nng_msg_free(m);
            continue;
        }
        if (is_register && mode == FAKE_REGISTER_OLD) {
            atomic_fetch_add(&f->n_register, 1);
            pj_enc_error(&w, h.req_id, PJ_E_FLAGS, 0xffffffffu, "unknown header flags 0x1");
        } else {
            fake_handle(f, nng_msg_body(m), nng_msg_len(m), &w);
        }
        nng_msg_clear(m);
        nng_msg_append(m, w.data, w.len);
        if (nng_sendmsg(f->sock, m, 0) != 0)
            nng_msg_free(m);
    }
    pj_wbuf_free(&w);
    return NULL;
}

static fake *fake_start(enum fake_mode mode)
{
    fake *f = calloc(1, sizeof *f);
    atomic_init(&f->mode, mode);
    snprintf(f->url, sizeof f->url, "ipc://%s/fake.sock", tmpdir);
    ck_assert_int_eq(nng_rep0_open(&f->sock), 0);
    nng_socket_set_ms(f->sock, NNG_OPT_RECVTIMEO, 50);
    /* ADD_PRE, as nng documents for refusing a peer. (Closing the pipe in
     * ADD_POST instead makes nng 1.5.2 hang in the client's nng_close when
     * both ends live in one process; across processes it does not.) */
    nng_pipe_notify(f->sock, NNG_PIPE_EV_ADD_PRE, fake_refuse_pipe, f);
    ck_assert_int_eq(nng_listen(f->sock, f->url, NULL, 0), 0);
    ck_assert_int_eq(pthread_create(&f->thread, NULL, fake_main, f), 0);
    return f;
}

static void fake_stop(fake *f)
{
    atomic_store(&f->stop, 1);
    pthread_join(f->thread, NULL);
    if (f->ring_started)
        pthread_join(f->ring_thread, NULL);
    if (f->ring_map)
        munmap(f->ring_map, f->ring_size);
    nng_close(f->sock);
    for (int i = 0; i < FAKE_MAX_BUFS; i++)
        if (f->bufs[i].p)
            munmap(f->bufs[i].p, f->bufs[i].size);
    free(f);
}

static void setup_fake_dir(void)
{
    make_tmpdir();
}

static void teardown_fake_dir(void)
{
    remove_tmpdir();
}

/* ---- the library against the fake ---------------------------------------------------- */

START_TEST(test_fake_basics)
{
    fake *f = fake_start(FAKE_NORMAL);
    projd_error e;
    projd_conn *c;
    ck_assert_msg(projd_connect(f->url, "offline-test", &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(e.code, 0);
    ck_assert_str_eq(projd_url(c), f->url);
    const projd_info *inf = projd_info_get(c);
    ck_assert_uint_eq(inf->n_layers, 2);
    ck_assert_str_eq(inf->layers[1].name, "beta");
    ck_assert_uint_eq(inf->layers[1].k, 64);
    ck_assert_uint_eq(inf->max_ops_per_request, 8);
    ck_assert_int_eq(projd_layer_find(c, "beta"), 1);
    ck_assert_int_eq(projd_layer_find(c, "gamma"), -1);
    ck_assert_int_eq(projd_get_timeout_ms(c), PROJD_DEFAULT_TIMEOUT_MS);
    ck_assert_int_eq(projd_set_timeout_ms(c, 0), -EINVAL);

    ck_assert_msg(projd_ping(c, &e) == 0, "%s", e.msg);
    char *json;
    ck_assert_msg(projd_stats_json(c, &json, &e) == 0, "%s", e.msg);
    ck_assert_str_eq(json, "{\"uptime_s\": 3}");
    free(json);

    /* shm buffers: registered, unlinked from /dev/shm, shared with the "daemon" */
    projd_buffer *x, *y;
    ck_assert_msg(projd_shm_create(c, 8 * 32 * 2, &x, &e) == 0, "%s", e.msg);
    ck_assert_msg(projd_shm_create(c, 8 * 64 * 2, &y, &e) == 0, "%s", e.msg);
    ck_assert_uint_ne(projd_buffer_id(x), projd_buffer_id(y));
    ck_assert_uint_eq(projd_buffer_size(y), 8 * 64 * 2);
    uint16_t *xp = projd_buffer_ptr(x), *yp = projd_buffer_ptr(y);
    for (int r = 0; r < 8; r++)
        xp[r * 32] = (uint16_t)(100 * r);
    memset(yp, 0xff, projd_buffer_size(y));
    projd_op op = {.layer = 0,
                   .m = 8,
                   .n = 64,
                   .x_buf = projd_buffer_id(x),
                   .x_ld = 32,
                   .y_buf = projd_buffer_id(y),
                   .y_ld = 64};
    projd_result res;
    ck_assert_msg(projd_project(c, &op, 1, 0, &res, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(res.status, PJ_OK);
    ck_assert_uint_eq(res.n_ops, 1);
    ck_assert_uint_eq(res.failed_op, UINT32_MAX);
    ck_assert(res.queue_ns == 11 && res.exec_ns == 22);
    ck_assert(res.total_ns > 0);
    ck_assert_int_eq(res.ops[0].status, PJ_OK);
    ck_assert_int_eq(res.ops[0].engine, 3);
    for (int r = 0; r < 8; r++)
        for (int col = 0; col < 64; col++)
            ck_assert_uint_eq(yp[r * 64 + col], (uint16_t)(100 * r + col));

    /* res == NULL is allowed */
    ck_assert_int_eq(projd_project(c, &op, 1, 0, NULL, NULL), 0);

    /* ERROR: the daemon's code and text, verbatim; failed_op from op_index */
    projd_op two[2] = {op, op};
    two[1].layer = 5;
    int rc = projd_project(c, two, 2, 0, &res, &e);
    ck_assert_int_eq(rc, PJ_E_LAYER);
    ck_assert_int_eq(e.code, PJ_E_LAYER);
    ck_assert_str_eq(e.msg, "unknown layer (fake)");
    ck_assert_int_eq(res.status, PJ_E_LAYER);
    ck_assert_uint_eq(res.failed_op, 1);
    /* nothing ran: no op reads as OK */
    ck_assert_int_eq(res.ops[0].status, PJ_E_LAYER);
    ck_assert_int_eq(res.ops[1].status, PJ_E_LAYER);

    /* DONE with a failing op */
    two[1].layer = 0;
    two[1].m = 77;
    rc = projd_project(c, two, 2, 0, &res, &e);
    ck_assert_int_eq(rc, PJ_E_BACKEND);
    ck_assert_uint_eq(res.failed_op, 1);
    ck_assert_int_eq(res.ops[0].status, PJ_OK);
    ck_assert_int_eq(res.ops[1].status, PJ_E_BACKEND);
    ck_assert_ptr_nonnull(strstr(e.msg, "op 1"));
    /* The same with a status no daemon sends (negative): a malformed reply,
     * a local failure, so nothing says what ran (projd.h), the failing op
     * read from it included. */
    two[1].m = 76;
    rc = projd_project(c, two, 2, 0, &res, &e);
    ck_assert_int_eq(rc, -EPROTO);
    ck_assert_ptr_nonnull(strstr(e.msg, "DONE status -5"));
    ck_assert_int_eq(res.status, -EPROTO);
    ck_assert_uint_eq(res.failed_op, UINT32_MAX);
    ck_assert_int_eq(res.ops[0].status, -EPROTO);
    ck_assert_int_eq(res.ops[1].status, -EPROTO);

    /* The daemon judges flags: E_FLAGS comes back, the connection stays usable. */
    uint8_t sig[64] = {0};
    rc =
        projd_project_events(c, &op, 1, PJ_PF_ACCEPT_REPLY, NULL, NULL, NULL, NULL, NULL, &res, &e);
    ck_assert_int_eq(rc, PJ_E_FLAGS);
    rc = projd_project_events(c, &op, 1, PJ_PF_SIGNAL_EVENT, NULL, sig, NULL, NULL, NULL, &res, &e);
    ck_assert_int_eq(rc, 0);
    /* Handles and flags must agree (local check). */
    ck_assert_int_eq(
        projd_project_events(c, &op, 1, PJ_PF_SIGNAL_EVENT, NULL, NULL, NULL, NULL, NULL, &res, &e),
        -EINVAL);
    ck_assert_int_eq(projd_project_events(c, &op, 1, 0, sig, NULL, NULL, NULL, NULL, &res, &e),
                     -EINVAL);
    /* 0 ops goes to the daemon, which says E_PROTO */
    ck_assert_int_eq(projd_project(c, &op, 0, 0, &res, &e), PJ_E_PROTO);
    /* Too many ops for the message limit (4096 bytes): refused locally. */
    projd_op many[80];
    for (int i = 0; i < 80; i++)
        many[i] = op;
    ck_assert_int_eq(projd_project(c, many, 80, 0, &res, &e), -EMSGSIZE);
    ck_assert_ptr_nonnull(strstr(e.msg, "4096"));
    /* Too many ops for max_ops, but fits: the daemon says E_LIMIT. */
    ck_assert_int_eq(projd_project(c, many, 9, 0, &res, &e), PJ_E_LIMIT);

    /* Raw messages: a truncated header, then a valid request on the same connection. */
    void *reply;
    size_t rlen;
    uint8_t junk[10] = {1, 2, 3};
    ck_assert_int_eq(projd_call_raw(c, junk, sizeof junk, &reply, &rlen, &e), 0);
    pj_hdr h;
    char err[256];
    ck_assert_int_eq(pj_dec_hdr(reply, rlen, 4096, &h, err, sizeof err), PJ_OK);
    ck_assert_int_eq(h.type, PJ_MSG_ERROR);
    pj_error_msg em;
    ck_assert_int_eq(pj_dec_error((uint8_t *)reply + 24, h.body_len, &em, err, sizeof err), PJ_OK);
    ck_assert_int_eq(em.code, PJ_E_PROTO);
    free(reply);
    ck_assert_int_eq(projd_ping(c, &e), 0);

    /* Unregister: release and raw id */
    ck_assert_int_eq(projd_unregister(c, 9999, &e), PJ_E_BUFFER);
    ck_assert_int_eq(projd_buffer_release(x, &e), 0);
    ck_assert_int_eq(atomic_load(&f->n_unregister), 2);
    /* y is released by close */
    projd_close(c);
    fake_stop(f);
}
END_TEST

/* ---- asynchronous requests ----------------------------------------------------------- */

typedef struct cb_count {
    atomic_int calls;
    atomic_int ok;
    atomic_int freed_in_cb;
} cb_count;

static void count_cb(projd_request *req, void *arg)
{
    cb_count *cc = arg;
    projd_result r;
    projd_error e;
    /* The outcome is there during the callback; the request is not "done" yet. */
    if (projd_request_result(req, &r, &e) == 0 && r.status == PJ_OK)
        atomic_fetch_add(&cc->ok, 1);
    ck_assert_int_eq(projd_request_poll(req), 0);
    atomic_fetch_add(&cc->calls, 1);
}

static void free_in_cb(projd_request *req, void *arg)
{
    cb_count *cc = arg;
    if (projd_request_result(req, NULL, NULL) == 0)
        atomic_fetch_add(&cc->ok, 1);
    projd_request_free(req); /* takes effect when this returns */
    atomic_fetch_add(&cc->freed_in_cb, 1);
    atomic_fetch_add(&cc->calls, 1);
}

typedef struct worker {
    projd_conn *c;
    projd_op op;
    int n;
    int failures;
} worker;

static void *worker_main(void *arg)
{
    worker *w = arg;
    for (int i = 0; i < w->n; i++) {
        projd_result r;
        projd_error e;
        if (projd_project(w->c, &w->op, 1, 0, &r, &e) != 0 || r.status != PJ_OK)
            w->failures++;
        if (i % 10 == 0 && projd_ping(w->c, &e) != 0)
            w->failures++;
    }
    return NULL;
}

START_TEST(test_fake_async_and_threads)
{
    fake *f = fake_start(FAKE_NORMAL);
    projd_error e;
    projd_conn *c;
    ck_assert_msg(projd_connect(f->url, "async", &c, &e) == 0, "%s", e.msg);
    projd_buffer *x, *y;
    ck_assert_int_eq(projd_shm_create(c, 4096, &x, &e), 0);
    ck_assert_int_eq(projd_shm_create(c, 4096, &y, &e), 0);
    projd_op op = {.layer = 1,
                   .m = 1,
                   .n = 16,
                   .x_buf = projd_buffer_id(x),
                   .x_ld = 64,
                   .y_buf = projd_buffer_id(y),
                   .y_ld = 16};

    /* Many requests in flight at once, with callbacks. */
    enum { N = 64 };
    projd_request *reqs[N];
    cb_count cc = {0};
    for (int i = 0; i < N; i++)
        ck_assert_msg(projd_project_async(c, &op, 1, 0, count_cb, &cc, &reqs[i], &e) == 0, "%s",
                      e.msg);
    for (int i = 0; i < N; i++) {
        projd_result r;
        ck_assert_msg(projd_request_wait(reqs[i], &r, &e) == 0, "%s", e.msg);
        ck_assert_int_eq(projd_request_poll(reqs[i]), 1);
        /* wait twice is fine */
        ck_assert_int_eq(projd_request_wait(reqs[i], NULL, NULL), 0);
        projd_request_free(reqs[i]);
    }
    ck_assert_int_eq(atomic_load(&cc.calls), N);
    ck_assert_int_eq(atomic_load(&cc.ok), N);

    /* No callback: poll until done (bounded by the timeout). */
    projd_request *r1;
    ck_assert_int_eq(projd_project_async(c, &op, 1, 0, NULL, NULL, &r1, &e), 0);
    while (!projd_request_poll(r1))
        usleep(1000);
    ck_assert_int_eq(projd_request_result(r1, NULL, &e), 0);
    projd_request_free(r1);

    /* Free from inside the callback: fire and forget. */
    cb_count ff = {0};
    for (int i = 0; i < 16; i++) {
        projd_request *r;
        ck_assert_int_eq(projd_project_async(c, &op, 1, 0, free_in_cb, &ff, &r, &e), 0);
    }
    for (int i = 0; i < 10000 && atomic_load(&ff.calls) < 16; i++)
        usleep(1000);
    ck_assert_int_eq(atomic_load(&ff.calls), 16);
    ck_assert_int_eq(atomic_load(&ff.ok), 16);

    /* Several threads on one connection. */
    enum { T = 6 };
    pthread_t th[T];
    worker w[T];
    for (int i = 0; i < T; i++) {
        w[i] = (worker){.c = c, .op = op, .n = 100};
        pthread_create(&th[i], NULL, worker_main, &w[i]);
    }
    for (int i = 0; i < T; i++) {
        pthread_join(th[i], NULL);
        ck_assert_int_eq(w[i].failures, 0);
    }
    ck_assert_int_ge(atomic_load(&f->n_project), N + 1 + 16 + T * 100);

    /* Free a request that may still be in flight: cancelled or done, no leak. */
    projd_request *r2;
    ck_assert_int_eq(projd_project_async(c, &op, 1, 0, NULL, NULL, &r2, &e), 0);
    projd_request_free(r2);

    ck_assert_int_eq(projd_buffer_release(x, &e), 0);
    ck_assert_int_eq(projd_buffer_release(y, &e), 0);
    projd_close(c);
    fake_stop(f);
}
END_TEST

/* ---- failure modes of the peer -------------------------------------------------------- */

START_TEST(test_fake_silent_timeout)
{
    fake *f = fake_start(FAKE_SILENT);
    projd_error e;
    projd_conn *c;
    struct timespec t0;
    /* Connect while the fake still answers, then let it go silent. */
    atomic_store(&f->mode, FAKE_NORMAL);
    ck_assert_msg(projd_connect(f->url, "silent", &c, &e) == 0, "%s", e.msg);
    atomic_store(&f->mode, FAKE_SILENT);
    ck_assert_int_eq(projd_set_timeout_ms(c, 300), 0);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_ping(c, &e);
    ck_assert_int_eq(rc, -ETIMEDOUT);
    ck_assert_ptr_nonnull(strstr(e.msg, "300 ms"));
    ck_assert_double_ge(seconds_since(&t0), 0.29);

    /* A RING_ATTACH that timed out may have been attached there: another
     * one is refused here, saying why, even once the daemon answers. */
    ck_assert_int_eq(projd_ring_attach(c, 2, &e), -ETIMEDOUT);
    atomic_store(&f->mode, FAKE_NORMAL);
    ck_assert_int_eq(projd_ring_attach(c, 2, &e), -EALREADY);
    ck_assert_msg(strstr(e.msg, "failed after it was sent") && strstr(e.msg, "connect again"), "%s",
                  e.msg);
    ck_assert_int_eq(projd_ring_active(c), 0);
    ck_assert_int_eq(projd_ping(c, &e), 0); /* nng goes on */
    atomic_store(&f->mode, FAKE_SILENT);

    /* Async: completes with the timeout, callback runs once. */
    cb_count cc = {0};
    projd_op op = {.layer = 0, .m = 1, .n = 1, .x_buf = 1, .x_ld = 32, .y_buf = 1, .y_ld = 1};
    projd_request *r;
    ck_assert_int_eq(projd_project_async(c, &op, 1, 0, count_cb, &cc, &r, &e), 0);
    projd_result res;
    ck_assert_int_eq(projd_request_wait(r, &res, &e), -ETIMEDOUT);
    ck_assert_int_eq(atomic_load(&cc.calls), 1);
    projd_request_free(r);

    /* Close with a request outstanding: it completes, and can be freed after. */
    projd_set_timeout_ms(c, 60000);
    ck_assert_int_eq(projd_project_async(c, &op, 1, 0, NULL, NULL, &r, &e), 0);
    projd_close(c);
    rc = projd_request_wait(r, NULL, &e);
    ck_assert_int_lt(rc, 0);
    ck_assert_int_ne(rc, -ETIMEDOUT);
    projd_request_free(r);
    fake_stop(f);
}
END_TEST

/* A daemon that accepts but does not answer HELLO at first (what a dial
 * that lands on a just-stopped nng 1.5 listener sees): connect retries on a
 * fresh socket and succeeds once answers come. */
static void *unsilence_later(void *arg)
{
    fake *f = arg;
    struct timespec ts = {2, 500 * 1000 * 1000};
    nanosleep(&ts, NULL);
    atomic_store(&f->mode, FAKE_NORMAL);
    return NULL;
}

START_TEST(test_fake_hello_retry)
{
    fake *f = fake_start(FAKE_SILENT);
    pthread_t th;
    ck_assert_int_eq(pthread_create(&th, NULL, unsilence_later, f), 0);
    projd_error e;
    projd_conn *c = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_connect(f->url, "patient", &c, &e);
    double took = seconds_since(&t0);
    pthread_join(th, NULL);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, e.msg);
    /* The first HELLO waited its 2 s before the retry. */
    ck_assert_double_ge(took, 2.0);
    ck_assert_int_eq(projd_ping(c, &e), 0);
    projd_close(c);
    fake_stop(f);
}
END_TEST

/* A connection closed before WELCOME is waited through (a listener nng
 * 1.5 stopped looks so): HELLO goes again on the dialer's next connection,
 * and the connection made then works: the closed pipe's end (which nng may
 * report late) does not mark it lost, as it did when that end came after
 * HELLO had been answered on the new pipe. Twenty rounds: a race. */
START_TEST(test_fake_closed_once)
{
    fake *f = fake_start(FAKE_NORMAL);
    for (int round = 0; round < 20; round++) {
        atomic_store(&f->refuse_next, 1);
        projd_error e;
        projd_conn *c = NULL;
        ck_assert_msg(projd_connect_timeout(f->url, "once", 5000, &c, &e) == 0, "round %d: %s",
                      round, e.msg);
        ck_assert_int_le(atomic_load(&f->refuse_next), 0);
        ck_assert_msg(projd_ping(c, &e) == 0, "round %d: %s", round, e.msg);
        projd_close(c);
    }
    fake_stop(f);
}
END_TEST

/* projd_connect_timeout bounds the connect. A socket that the kernel
 * accepts on but nobody answers (what a projd stopped with SIGSTOP looks
 * like: listening, never accepting) held projd_connect for 30 s, nng's
 * handshake 10 s of each attempt; and a peer past the handshake that does
 * not answer HELLO (the fake, silent) is bounded the same way. */
START_TEST(test_connect_timeout)
{
    projd_error e;
    projd_conn *c = (projd_conn *)1;
    struct timespec t0;
    ck_assert_int_eq(projd_connect_timeout("ipc:///x.sock", NULL, 0, &c, &e), -EINVAL);
    ck_assert_ptr_null(c);

    /* A stopped process (a listener that never accepts) holds the dial for
     * nng's 10 s: test_libprojd connect_to_stopped_daemon_is_bounded. */
    fake *f = fake_start(FAKE_SILENT);
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_connect_timeout(f->url, "t", 600, &c, &e);
    double took = seconds_since(&t0);
    ck_assert_msg(rc == -ETIMEDOUT, "rc %d: %s", rc, e.msg);
    ck_assert_msg(strstr(e.msg, "sent no WELCOME within 600 ms") &&
                      strstr(e.msg, "stopped or overloaded") && strstr(e.msg, f->url),
                  "%s", e.msg);
    ck_assert_double_ge(took, 0.55);
    ck_assert_double_lt(took, 1.5); /* HELLO gets what is left, not its own 2 s */
    /* Once it answers: connected, and the timeout carries over to calls. */
    atomic_store(&f->mode, FAKE_NORMAL);
    ck_assert_msg(projd_connect_timeout(f->url, "t", 1500, &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(projd_get_timeout_ms(c), 1500);
    ck_assert_int_eq(projd_ping(c, &e), 0);
    projd_close(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_fake_refused)
{
    fake *f = fake_start(FAKE_REFUSE);
    projd_error e;
    projd_conn *c;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_connect(f->url, "refused", &c, &e);
    ck_assert_msg(rc == -ECONNRESET, "rc %d: %s", rc, e.msg);
    /* Tried again (a listener nng stopped looks the same), then said; the
     * fake runs under our own uid, which projd's auth always
     * allows, so the message does not blame auth. */
    ck_assert_msg(strstr(e.msg, "closed the connection before WELCOME without saying why (") &&
                      strstr(e.msg, "one projd always allows (root, or its own), so not its auth"),
                  "%s", e.msg);
    /* Said after four closes or so, within the window, not after the 30 s
     * timeout; and a refused client makes those few connections, not the
     * dozens its dialer's redials would make in the window. */
    ck_assert_msg(strstr(e.msg, " times in "), "%s", e.msg);
    ck_assert_double_lt(seconds_since(&t0), 6.0);
    ck_assert_int_le(atomic_load(&f->n_refused), 12);
    fake_stop(f);
}
END_TEST

/* A REGISTER whose reply does not come in time is sent once more with
 * PJ_HF_RETRY (a daemon that did register it answers with that buffer). A
 * daemon from before the flag refuses it with E_FLAGS: then the first
 * timeout is what the caller sees, not E_FLAGS, and the connection goes on.
 * A daemon that answers the second gets a working buffer. */
START_TEST(test_fake_register_sent_again)
{
    fake *f = fake_start(FAKE_REGISTER_OLD);
    projd_error e;
    projd_conn *c;
    ck_assert_msg(projd_connect(f->url, "old-daemon", &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(projd_set_timeout_ms(c, 300), 0);
    projd_buffer *b = (projd_buffer *)1;
    int rc = projd_shm_create(c, 4096, &b, &e);
    ck_assert_msg(rc == -ETIMEDOUT, "rc %d: %s", rc, e.msg);
    ck_assert_ptr_null(b);
    ck_assert_msg(strstr(e.msg, "REGISTER: no reply within 300 ms") && !strstr(e.msg, "sent again"),
                  "%s", e.msg);
    ck_assert_int_eq(atomic_load(&f->n_register), 2); /* the first, and the one sent again */
    ck_assert_msg(projd_ping(c, &e) == 0, "%s", e.msg);

    atomic_store(&f->mode, FAKE_REGISTER_LOST);
    rc = projd_shm_create(c, 4096, &b, &e);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, e.msg);
    ck_assert_int_eq(atomic_load(&f->n_register), 4);
    /* The fake's mapping is the client's: what one writes the other reads. */
    size_t size;
    uint8_t *seen = fake_buf(f, projd_buffer_id(b), &size);
    ck_assert_ptr_nonnull(seen);
    ck_assert_uint_eq(size, 4096);
    ((uint8_t *)projd_buffer_ptr(b))[100] = 0x5a;
    ck_assert_uint_eq(seen[100], 0x5a);
    atomic_store(&f->mode, FAKE_NORMAL);
    ck_assert_msg(projd_buffer_release(b, &e) == 0, "%s", e.msg);
    projd_close(c);
    fake_stop(f);
}
END_TEST

START_TEST(test_fake_garbage)
{
    fake *f = fake_start(FAKE_GARBAGE);
    projd_error e;
    projd_conn *c;
    ck_assert_msg(projd_connect(f->url, "garbage", &c, &e) == 0, "%s", e.msg);
    ck_assert_int_eq(projd_ping(c, &e), -EPROTO);
    ck_assert_ptr_nonnull(strstr(e.msg, "magic"));
    char *json;
    ck_assert_int_eq(projd_stats_json(c, &json, &e), -EPROTO);
    ck_assert_ptr_null(json);
    projd_buffer *b;
    ck_assert_int_eq(projd_shm_create(c, 64, &b, &e), -EPROTO);
    ck_assert_ptr_null(b);
    projd_close(c);
    fake_stop(f);
}
END_TEST

/* A daemon answering as another uid (someone who took over the socket's
 * directory) is refused before HELLO, unless the caller opts in. */
/* The fake daemon of test_fake_foreign_uid, running as uid 65534. */
static pid_t start_foreign_fake(const char *url, const char *sock)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) != 0 || setgid(65534) != 0 || setuid(65534) != 0)
            _exit(90);
        alarm(60); /* never outlives the test */
        fake *f = calloc(1, sizeof *f);
        atomic_init(&f->mode, FAKE_NORMAL);
        snprintf(f->url, sizeof f->url, "%.390s", url);
        if (nng_rep0_open(&f->sock) != 0)
            _exit(91);
        nng_socket_set_ms(f->sock, NNG_OPT_RECVTIMEO, 50);
        if (nng_listen(f->sock, f->url, NULL, 0) != 0)
            _exit(92);
        fake_main(f);
        _exit(0);
    }
    struct timespec ts = {0, 10 * 1000 * 1000};
    for (int i = 0; i < 2000 && access(sock, F_OK) != 0; i++)
        nanosleep(&ts, NULL);
    ck_assert_int_eq(access(sock, F_OK), 0);
    return pid;
}

static void stop_foreign_fake(pid_t pid, const char *sock)
{
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    unlink(sock);
}

START_TEST(test_fake_foreign_uid)
{
    if (geteuid() != 0) {
        printf("test_fake_foreign_uid: SKIPPED (needs root to run the fake as another uid)\n");
        return;
    }
    char dir[300], url[4][380], sock[4][370];
    snprintf(dir, sizeof dir, "%s/foreign", tmpdir);
    ck_assert_int_eq(chmod(tmpdir, 0755), 0);
    ck_assert_int_eq(mkdir(dir, 0755), 0);
    ck_assert_int_eq(chown(dir, 65534, 65534), 0);
    /* A fake for each connection: the first one's refusal hangs up
     * mid-handshake, which stops an nng 1.5 listener for good (projd
     * replaces its listener; the fake does not). Both are forked before
     * this process uses nng (a child of an nng user cannot use it). */
    pid_t pid[4];
    for (int i = 0; i < 4; i++) {
        snprintf(sock[i], sizeof sock[i], "%s/fake%d.sock", dir, i);
        snprintf(url[i], sizeof url[i], "ipc://%.360s", sock[i]);
        pid[i] = start_foreign_fake(url[i], sock[i]);
    }
    projd_error e;
    projd_conn *c = NULL;
    struct timespec t0;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    int rc = projd_connect(url[0], "victim", &c, &e);
    ck_assert_msg(rc == -EPERM, "rc %d: %s", rc, e.msg);
    ck_assert_ptr_null(c);
    ck_assert_msg(strstr(e.msg, "uid 65534") && strstr(e.msg, "PROJD_TRUST_UID=65534"), "%s",
                  e.msg);
    ck_assert_double_lt(seconds_since(&t0), 20.0);
    /* Another account trusted: this one is still refused. */
    setenv("PROJD_TRUST_UID", "65533", 1);
    rc = projd_connect(url[1], "victim", &c, &e);
    ck_assert_msg(rc == -EPERM && strstr(e.msg, "$PROJD_TRUST_UID's"), "rc %d: %s", rc, e.msg);
    /* Its own account trusted, by number or by name. */
    setenv("PROJD_TRUST_UID", "65534", 1);
    rc = projd_connect(url[2], "trusting", &c, &e);
    ck_assert_msg(rc == 0, "rc %d: %s", rc, e.msg);
    ck_assert_int_eq(projd_ping(c, &e), 0);
    projd_close(c);
    struct passwd *pw = getpwuid(65534);
    if (pw) {
        setenv("PROJD_TRUST_UID", pw->pw_name, 1);
        rc = projd_connect(url[2], "trusting", &c, &e);
        ck_assert_msg(rc == 0, "rc %d: %s", rc, e.msg);
        projd_close(c);
    }
    setenv("PROJD_TRUST_UID", "no-such-user-here", 1);
    ck_assert_int_eq(projd_connect(url[2], "t", &c, &e), -EINVAL);
    ck_assert_msg(strstr(e.msg, "not a uid or a user name"), "%s", e.msg);
    unsetenv("PROJD_TRUST_UID");
    /* Any account. */
    setenv("PROJD_TRUST_ANY_UID", "1", 1);
    rc = projd_connect(url[3], "trusting", &c, &e);
    unsetenv("PROJD_TRUST_ANY_UID");
    ck_assert_msg(rc == 0, "rc %d: %s", rc, e.msg);
    ck_assert_int_eq(projd_ping(c, &e), 0);
    projd_close(c);
    for (int i = 0; i < 4; i++)
        stop_foreign_fake(pid[i], sock[i]);
}
END_TEST

/* A daemon whose ring sends a reply that answers no request (the same
 * reply twice; a req_id never sent): the library stops using the ring and
 * says why, instead of counting the stray reply (which wrapped its count
 * of requests in flight, so that every later request waited its whole
 * timeout for a slot) or dropping it (which left its request to time
 * out). Requests after it go over nng. */
START_TEST(test_fake_ring_stray_replies)
{
    for (int mode = FAKE_RING_TWICE; mode <= FAKE_RING_OTHER; mode++) {
        fake *f = fake_start(FAKE_NORMAL);
        atomic_store(&f->ring_mode, mode);
        projd_error e;
        projd_conn *c;
        ck_assert_msg(projd_connect(f->url, "offline-test", &c, &e) == 0, "%s", e.msg);
        projd_set_timeout_ms(c, 5000);
        ck_assert_msg(projd_ring_attach(c, 2, &e) == 0, "%s", e.msg);
        ck_assert_int_eq(projd_ring_active(c), 1);
        int rc = projd_ping(c, &e);
        if (mode == FAKE_RING_TWICE) {
            ck_assert_msg(rc == 0, "%s", e.msg); /* the first PONG answers it */
        } else {
            ck_assert_int_eq(rc, -EPROTO);
            ck_assert_msg(strstr(e.msg, "answers no request") && strstr(e.msg, "nng"), "%s", e.msg);
        }
        /* the stray reply seen (at once, or at the reaper's next look) */
        for (int i = 0; i < 200 && projd_ring_active(c); i++)
            usleep(10 * 1000);
        ck_assert_int_eq(projd_ring_active(c), 0);
        for (int i = 0; i < 3; i++) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            ck_assert_msg(projd_ping(c, &e) == 0, "ping %d after the stray reply: %s", i, e.msg);
            clock_gettime(CLOCK_MONOTONIC, &t1);
            /* over nng at once, not after the 5 s timeout */
            ck_assert_int_lt(t1.tv_sec - t0.tv_sec, 4);
        }
        projd_close(c);
        fake_stop(f);
    }
}
END_TEST

/* An ERROR whose op_index names no op of the request: failed_op says none
 * (UINT32_MAX), so that a caller indexing its ops with it stays in them. */
START_TEST(test_fake_error_op_index_checked)
{
    fake *f = fake_start(FAKE_NORMAL);
    projd_error e;
    projd_conn *c;
    ck_assert_msg(projd_connect(f->url, "offline-test", &c, &e) == 0, "%s", e.msg);
    projd_op op = {.layer = 0, .m = 78, .n = 1, .x_buf = 1, .x_ld = 32, .y_buf = 2, .y_ld = 64};
    projd_result r;
    ck_assert_int_eq(projd_project(c, &op, 1, 0, &r, &e), PJ_E_BUFFER);
    ck_assert_uint_eq(r.n_ops, 1);
    ck_assert_uint_eq(r.failed_op, UINT32_MAX);
    projd_close(c);
    fake_stop(f);
}
END_TEST

static Suite *client_suite(void)
{
    Suite *s = suite_create("client_offline");
    TCase *tc = tcase_create("offline");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_sockpath);
    tcase_add_test(tc, test_sockpath_instances);
    tcase_add_test(tc, test_sockpath_stale_system);
    tcase_add_test(tc, test_shmbuf);
    tcase_add_test(tc, test_connect_nobody);
    tcase_add_test(tc, test_strerror);
    suite_add_tcase(s, tc);
    TCase *tf = tcase_create("fake_daemon");
    tcase_set_timeout(tf, 120);
    tcase_add_checked_fixture(tf, setup_fake_dir, teardown_fake_dir);
    tcase_add_test(tf, test_fake_basics);
    tcase_add_test(tf, test_fake_async_and_threads);
    tcase_add_test(tf, test_fake_silent_timeout);
    tcase_add_test(tf, test_fake_hello_retry);
    tcase_add_test(tf, test_connect_timeout);
    tcase_add_test(tf, test_fake_refused);
    tcase_add_test(tf, test_fake_closed_once);
    tcase_add_test(tf, test_fake_register_sent_again);
    tcase_add_test(tf, test_fake_garbage);
    tcase_add_test(tf, test_fake_ring_stray_replies);
    tcase_add_test(tf, test_fake_error_op_index_checked);
    tcase_add_test(tf, test_fake_foreign_uid);
    suite_add_tcase(s, tf);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(client_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
