/* test_replacefile.c — files replaced whole (config/replacefile.h): the
 * reader sees the old file or the new one, a failed or abandoned write
 * leaves the old one and no temporary, the mode is the one asked. */
#include <check.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config/replacefile.h"
#include "tests/helpers/fixture.h"

static void expect_text(const char *path, const char *want)
{
    static char buf[1 << 17];
    long n = pj_fixture_read_text(path, buf, sizeof buf);
    ck_assert_msg(n == (long)strlen(want) && !strcmp(buf, want), "%s holds %ld bytes: '%.40s'",
                  path, n, n >= 0 ? buf : "");
}

static mode_t mode_of(const char *path)
{
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    return st.st_mode & 07777;
}

START_TEST(new_file_has_the_mode_asked)
{
    char path[4200], err[4400] = "";
    pj_fixture_path(path, sizeof path, "new.txt");
    /* Under a umask that takes the others' read: exactly, as the metrics
     * file wants (node_exporter, another user, reads it), and as open(2)
     * would give it, as a tuning table or a model file wants. */
    mode_t old = umask(077);
    ck_assert_int_eq(pj_replace_file(path, "abc\n", 4, 0644, PJ_MODE_EXACT, err, sizeof err), 0);
    expect_text(path, "abc\n");
    ck_assert_uint_eq(mode_of(path), 0644);
    ck_assert_int_eq(pj_replace_file(path, "def\n", 4, 0644, PJ_MODE_UMASKED, err, sizeof err), 0);
    expect_text(path, "def\n");
    ck_assert_uint_eq(mode_of(path), 0600);
    umask(022);
    ck_assert_int_eq(pj_replace_file(path, "g\n", 2, 0666, PJ_MODE_UMASKED, err, sizeof err), 0);
    ck_assert_uint_eq(mode_of(path), 0644);
    umask(old);
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    /* Empty content is a file, not an error. */
    ck_assert_int_eq(pj_replace_file(path, "", 0, 0600, PJ_MODE_EXACT, err, sizeof err), 0);
    expect_text(path, "");
    ck_assert_uint_eq(mode_of(path), 0600);
}
END_TEST

START_TEST(readers_see_the_old_file_until_the_commit)
{
    char path[4200], err[4400] = "";
    pj_fixture_path(path, sizeof path, "replaced.txt");
    ck_assert_int_eq(pj_fixture_write_text(path, "old\n"), 0);
    /* Renamed over, not written into: a reader that has the old file open
     * reads it whole after the commit. */
    FILE *reader = fopen(path, "r");
    ck_assert_ptr_nonnull(reader);

    static const char *const text[] = {"old\n", "new, written\n", "newer, synced\n"};
    for (int sync = 0; sync <= 1; sync++) {
        pj_replacing r;
        ck_assert_msg(pj_replacing_open(&r, path, 0644, PJ_MODE_UMASKED, err, sizeof err) == 0,
                      "%s", err);
        ck_assert_ptr_nonnull(r.f);
        ck_assert_int_eq(pj_fixture_temporaries(path), 1);
        ck_assert_int_eq(fputs(text[sync + 1], r.f) >= 0, 1);
        ck_assert_int_eq(fflush(r.f), 0); /* in the temporary, not the target */
        expect_text(path, text[sync]);
        ck_assert_msg(pj_replacing_commit(&r, sync, err, sizeof err) == 0, "%s", err);
        ck_assert_ptr_null(r.f);
        ck_assert_ptr_null(r.tmp);
        expect_text(path, text[sync + 1]);
        ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    }
    char line[16] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof line, reader));
    ck_assert_str_eq(line, "old\n");
    fclose(reader);
}
END_TEST

START_TEST(abort_leaves_the_target)
{
    char path[4200], err[4400] = "";
    pj_fixture_path(path, sizeof path, "aborted.txt");
    ck_assert_int_eq(pj_fixture_write_text(path, "kept\n"), 0);
    pj_replacing r;
    ck_assert_int_eq(pj_replacing_open(&r, path, 0644, PJ_MODE_UMASKED, err, sizeof err), 0);
    fputs("never seen\n", r.f);
    pj_replacing_abort(&r);
    expect_text(path, "kept\n");
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    /* Twice, and on a zeroed one: harmless. */
    pj_replacing_abort(&r);
    pj_replacing z = {0};
    pj_replacing_abort(&z);
    /* A commit of nothing is refused, with a reason. */
    ck_assert_int_eq(pj_replacing_commit(&z, 0, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "nothing open"), "%s", err);
}
END_TEST

/* A write that fails part way (here a file size limit, as a full disk
 * would): the error names the file and says the target is unchanged, and
 * nothing is left beside it. In a child, whose limit dies with it. */
START_TEST(failed_write_keeps_the_old_file)
{
    char path[4200];
    pj_fixture_path(path, sizeof path, "limited.txt");
    ck_assert_int_eq(pj_fixture_write_text(path, "the old content\n"), 0);
    static char big[64 * 1024];
    memset(big, 'x', sizeof big);
    for (int streamed = 0; streamed <= 1; streamed++) {
        pid_t pid = fork();
        ck_assert_int_ge(pid, 0);
        if (pid == 0) {
            struct rlimit rl = {4096, 4096};
            signal(SIGXFSZ, SIG_IGN);
            if (setrlimit(RLIMIT_FSIZE, &rl))
                _exit(3);
            char err[4400] = "";
            int rc;
            if (streamed) {
                pj_replacing r;
                if (pj_replacing_open(&r, path, 0644, PJ_MODE_UMASKED, err, sizeof err))
                    _exit(4);
                fwrite(big, 1, sizeof big, r.f); /* its error shows at the commit */
                rc = pj_replacing_commit(&r, 1, err, sizeof err);
            } else {
                rc = pj_replace_file(path, big, sizeof big, 0644, PJ_MODE_UMASKED, err, sizeof err);
            }
            /* Streamed, the cause was fwrite's errno, gone by the commit:
             * the stream's error flag still fails it. */
            if (rc != -EFBIG && !(streamed && rc == -EIO))
                _exit(5);
            _exit(strstr(err, path) && strstr(err, "unchanged") && strstr(err, strerror(-rc)) ? 0
                                                                                              : 6);
        }
        int status = 0;
        ck_assert_int_eq(waitpid(pid, &status, 0), pid);
        ck_assert(WIFEXITED(status));
        ck_assert_msg(WEXITSTATUS(status) == 0, "streamed %d: child exit %d", streamed,
                      WEXITSTATUS(status));
        expect_text(path, "the old content\n");
        ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    }
}
END_TEST

START_TEST(errors_name_the_file_and_the_cause)
{
    char path[4200], err[4400] = "";
    /* No directory to write beside the target in. */
    pj_fixture_path(path, sizeof path, "nodir/x.txt");
    ck_assert_int_eq(pj_replace_file(path, "a", 1, 0644, PJ_MODE_UMASKED, err, sizeof err),
                     -ENOENT);
    ck_assert_msg(strstr(err, path) && strstr(err, "cannot create a file beside it") &&
                      strstr(err, strerror(ENOENT)),
                  "%s", err);
    /* The target is a directory that is not empty: refused before a
     * temporary is made (a rename would fail); the directory stays. */
    pj_fixture_path(path, sizeof path, "adir");
    ck_assert_int_eq(mkdir(path, 0755), 0);
    char inner[4300];
    snprintf(inner, sizeof inner, "%s/f", path);
    ck_assert_int_eq(pj_fixture_write_text(inner, "inside\n"), 0);
    int rc = pj_replace_file(path, "a", 1, 0644, PJ_MODE_UMASKED, err, sizeof err);
    ck_assert_msg(rc == -EISDIR, "rc %d: %s", rc, err);
    ck_assert_msg(strstr(err, path) && strstr(err, "is a directory"), "%s", err);
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    expect_text(inner, "inside\n");
    /* A path too long for the temporary's name. */
    static char longp[PATH_MAX + 64];
    memset(longp, 'a', sizeof longp - 1);
    longp[0] = '/';
    ck_assert_int_lt(pj_replace_file(longp, "a", 1, 0644, PJ_MODE_UMASKED, err, sizeof err), 0);
    ck_assert_msg(strstr(err, "cannot create a file beside it"), "%.80s", err);
}
END_TEST

/* Two writers of one target at once (two timers, two tuners): each has its
 * own temporary, and the target ends as one of them whole. */
START_TEST(two_writers_do_not_mix)
{
    char path[4200], err[4400] = "";
    pj_fixture_path(path, sizeof path, "two.txt");
    pj_replacing a, b;
    ck_assert_int_eq(pj_replacing_open(&a, path, 0644, PJ_MODE_UMASKED, err, sizeof err), 0);
    ck_assert_int_eq(pj_replacing_open(&b, path, 0644, PJ_MODE_UMASKED, err, sizeof err), 0);
    ck_assert_str_ne(a.tmp, b.tmp);
    ck_assert_int_eq(pj_fixture_temporaries(path), 2);
    fputs("from a: aaaaaaaaaaaaaaaa\n", a.f);
    fputs("from b\n", b.f);
    ck_assert_int_eq(pj_replacing_commit(&b, 0, err, sizeof err), 0);
    ck_assert_int_eq(pj_replacing_commit(&a, 0, err, sizeof err), 0);
    expect_text(path, "from a: aaaaaaaaaaaaaaaa\n");
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
}
END_TEST

/* An interrupt while the temporary is open (a Ctrl-C during projctl
 * mkmodel): the temporary goes, the target is as it was, and the process
 * ends by the signal as it would have. A signal the program handles or
 * ignores itself is left to it. */
START_TEST(interrupt_removes_the_temporary)
{
    char path[4200];
    pj_fixture_path(path, sizeof path, "interrupted.bin");
    unlink(path);
    fflush(stdout);
    fflush(stderr);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        /* as a program starts (Check's runner handles SIGTERM and SIGINT
         * for its own timeouts, by signalling the whole process group),
         * but for SIGHUP, ignored by the program itself */
        signal(SIGTERM, SIG_DFL);
        signal(SIGINT, SIG_DFL);
        signal(SIGHUP, SIG_IGN);
        pj_replacing_clean_on_signals();
        struct sigaction sa;
        if (sigaction(SIGHUP, NULL, &sa) != 0 || sa.sa_handler != SIG_IGN)
            _exit(3); /* the program's own disposition was replaced */
        pj_replacing r;
        char err[512];
        if (pj_replacing_open(&r, path, 0644, PJ_MODE_UMASKED, err, sizeof err) != 0)
            _exit(4);
        fputs("half a model\n", r.f);
        fflush(r.f);
        if (pj_fixture_temporaries(path) != 1)
            _exit(5);
        raise(SIGTERM);
        _exit(6); /* not reached: the signal ends the process */
    }
    int st;
    ck_assert_int_eq(waitpid(child, &st, 0), child);
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGTERM, "child status %#x", st);
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
    ck_assert_int_ne(access(path, F_OK), 0);
}
END_TEST

/* A symbolic link is followed: its target gets the new content and the
 * link stays a link (a rename over it put a plain file there and left the
 * target as it was); a dangling link's target is created. */
START_TEST(links_are_followed)
{
    char target[4300], link[4300], err[4400] = "";
    pj_fixture_path(target, sizeof target, "run.json");
    pj_fixture_path(link, sizeof link, "latest.json");
    ck_assert_int_eq(pj_replace_file(target, "old\n", 4, 0644, PJ_MODE_EXACT, err, sizeof err), 0);
    ck_assert_int_eq(symlink("run.json", link), 0);
    ck_assert_msg(pj_replace_file(link, "new\n", 4, 0644, PJ_MODE_EXACT, err, sizeof err) == 0,
                  "%s", err);
    struct stat st;
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    expect_text(target, "new\n");
    ck_assert_int_eq(pj_fixture_temporaries(target), 0);
    ck_assert_int_eq(unlink(target), 0);
    /* dangling: the link's relative target, beside the link */
    ck_assert_msg(pj_replace_file(link, "made\n", 5, 0644, PJ_MODE_EXACT, err, sizeof err) == 0,
                  "%s", err);
    ck_assert_int_eq(lstat(link, &st), 0);
    ck_assert(S_ISLNK(st.st_mode));
    expect_text(target, "made\n");
    unlink(link);
    unlink(target);
}
END_TEST

/* A path that is not a regular file is written in place: a FIFO stays a
 * FIFO and its reader gets the content (a rename put a plain file there,
 * and as root did the same to a device such as /dev/full); a directory is
 * refused. */
START_TEST(not_regular_files_are_written_in_place)
{
    char fifo[4200], got[4300], err[4400] = "";
    pj_fixture_path(fifo, sizeof fifo, "out.fifo");
    snprintf(got, sizeof got, "%s.got", fifo);
    ck_assert_int_eq(mkfifo(fifo, 0600), 0);
    pid_t child = fork();
    ck_assert_int_ge(child, 0);
    if (child == 0) {
        FILE *in = fopen(fifo, "r"), *out = fopen(got, "w");
        char buf[64];
        size_t n = in && out ? fread(buf, 1, sizeof buf, in) : 0;
        if (out)
            fwrite(buf, 1, n, out);
        _exit(in && out && fclose(out) == 0 ? 0 : 1);
    }
    ck_assert_msg(pj_replace_file(fifo, "piped\n", 6, 0644, PJ_MODE_EXACT, err, sizeof err) == 0,
                  "%s", err);
    int wst;
    ck_assert_int_eq(waitpid(child, &wst, 0), child);
    ck_assert(WIFEXITED(wst) && WEXITSTATUS(wst) == 0);
    struct stat st;
    ck_assert_int_eq(lstat(fifo, &st), 0);
    ck_assert(S_ISFIFO(st.st_mode));
    expect_text(got, "piped\n");
    ck_assert_int_eq(pj_fixture_temporaries(fifo), 0);
    unlink(fifo);
    unlink(got);
    const char *dir = pj_fixture_tmpdir();
    ck_assert_ptr_nonnull(dir);
    ck_assert_int_eq(pj_replace_file(dir, "x", 1, 0644, PJ_MODE_EXACT, err, sizeof err), -EISDIR);
    ck_assert_msg(strstr(err, "is a directory"), "%s", err);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("replacefile");
    TCase *tc = tcase_create("replace");
    tcase_add_test(tc, new_file_has_the_mode_asked);
    tcase_add_test(tc, readers_see_the_old_file_until_the_commit);
    tcase_add_test(tc, abort_leaves_the_target);
    tcase_add_test(tc, failed_write_keeps_the_old_file);
    tcase_add_test(tc, errors_name_the_file_and_the_cause);
    tcase_add_test(tc, two_writers_do_not_mix);
    tcase_add_test(tc, interrupt_removes_the_temporary);
    tcase_add_test(tc, links_are_followed);
    tcase_add_test(tc, not_regular_files_are_written_in_place);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
