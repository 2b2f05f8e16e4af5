/* replacefile.c — files replaced whole by a rename (replacefile.h). */
#include "config/replacefile.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The temporaries open now, for the signal handler: a slot's name is
 * complete before its flag is set, and the flag is cleared before the name
 * goes (renamed or unlinked), so the handler never reads half a name. */
static char g_live_name[PJ_REPLACING_LIVE][PATH_MAX];
static volatile sig_atomic_t g_live_used[PJ_REPLACING_LIVE];

static void live_add(const char *tmp)
{
    if (strlen(tmp) >= PATH_MAX)
        return;
    for (int i = 0; i < PJ_REPLACING_LIVE; i++)
        if (!g_live_used[i]) {
            memcpy(g_live_name[i], tmp, strlen(tmp) + 1);
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            g_live_used[i] = 1;
            return;
        }
}

static void live_drop(const char *tmp)
{
    for (int i = 0; tmp && i < PJ_REPLACING_LIVE; i++)
        if (g_live_used[i] && strcmp(g_live_name[i], tmp) == 0) {
            g_live_used[i] = 0;
            __atomic_signal_fence(__ATOMIC_SEQ_CST);
            return;
        }
}

void pj_replacing_remove_on_signal(const char *path)
{
    live_add(path);
}

void pj_replacing_forget(const char *path)
{
    live_drop(path);
}

static void on_fatal_signal(int sig)
{
    for (int i = 0; i < PJ_REPLACING_LIVE; i++)
        if (g_live_used[i])
            unlink(g_live_name[i]); /* async-signal-safe */
    signal(sig, SIG_DFL);
    raise(sig);
}

void pj_replacing_clean_on_signals(void)
{
    static const int sigs[] = {SIGINT, SIGTERM, SIGHUP};
    for (size_t i = 0; i < sizeof sigs / sizeof sigs[0]; i++) {
        struct sigaction old;
        if (sigaction(sigs[i], NULL, &old) != 0 || old.sa_handler != SIG_DFL)
            continue; /* ignored, or the program's own handler: left as it is */
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_handler = on_fatal_signal;
        sigemptyset(&sa.sa_mask);
        sigaction(sigs[i], &sa, NULL);
    }
}

static void release(pj_replacing *r)
{
    free(r->path);
    free(r->tmp);
    memset(r, 0, sizeof *r);
}

/* The process's umask, read without setting it (umask(2) can only be read
 * by changing it, which races with files other threads create). */
static mode_t current_umask(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[128];
    unsigned v;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "Umask: %o", &v) == 1) {
            fclose(f);
            return (mode_t)v;
        }
    if (f)
        fclose(f);
    mode_t m = umask(022); /* a kernel before 4.7: no Umask line */
    umask(m);
    return m;
}

/* Where a write to path goes: the path itself, or a symbolic link's target
 * (malloc'd into *out). A dangling link's target is its text, read against
 * the link's directory when relative (one level: a chain of links that
 * ends nowhere is refused by the create). */
static int resolve_target(const char *path, char **out)
{
    struct stat st;
    *out = NULL;
    if (lstat(path, &st) != 0 || !S_ISLNK(st.st_mode)) {
        *out = strdup(path);
        return *out ? 0 : -ENOMEM;
    }
    char *real = realpath(path, NULL);
    if (real) {
        *out = real;
        return 0;
    }
    char link[PATH_MAX];
    ssize_t ln = readlink(path, link, sizeof link - 1);
    if (ln < 0)
        return -errno;
    link[ln] = 0;
    const char *slash = strrchr(path, '/');
    size_t dl = link[0] == '/' || !slash ? 0 : (size_t)(slash - path) + 1;
    *out = malloc(dl + (size_t)ln + 1);
    if (!*out)
        return -ENOMEM;
    memcpy(*out, path, dl);
    memcpy(*out + dl, link, (size_t)ln + 1);
    return 0;
}

/* A path there that is not a regular file, opened for writing as it is. */
static int open_in_place(pj_replacing *r, const char *path, const struct stat *st, char *err,
                         size_t errlen)
{
    if (S_ISDIR(st->st_mode)) {
        snprintf(err, errlen, "%s: is a directory", path);
        release(r);
        return -EISDIR;
    }
    int fd = open(path, O_WRONLY | O_CLOEXEC | O_NOCTTY);
    if (fd < 0 || !(r->f = fdopen(fd, "w"))) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        snprintf(err, errlen, "%s: cannot open it for writing: %s", path, strerror(e));
        release(r);
        return -e;
    }
    free(r->tmp);
    r->tmp = NULL;
    return 0;
}

int pj_replacing_open(pj_replacing *r, const char *path_given, mode_t mode, pj_replace_mode how,
                      char *err, size_t errlen)
{
    memset(r, 0, sizeof *r);
    /* What the path reaches, links followed: a pipe behind /proc/self/fd/1
     * has no name a link could be resolved to. */
    struct stat st;
    if (stat(path_given, &st) == 0 && !S_ISREG(st.st_mode)) {
        r->path = strdup(path_given);
        if (!r->path) {
            snprintf(err, errlen, "%s: out of memory", path_given);
            return -ENOMEM;
        }
        return open_in_place(r, path_given, &st, err, errlen);
    }
    char *target = NULL;
    int trc = resolve_target(path_given, &target);
    if (trc) {
        snprintf(err, errlen, "%s: cannot read the link: %s", path_given, strerror(-trc));
        return trc;
    }
    const char *path = target;
    const size_t n = strlen(path);
    r->path = target;
    r->tmp = malloc(n + sizeof ".tmp.XXXXXX");
    if (!r->path || !r->tmp) {
        snprintf(err, errlen, "%s: out of memory", path_given);
        release(r);
        return -ENOMEM;
    }
    memcpy(r->tmp, path, n);
    memcpy(r->tmp + n, ".tmp.XXXXXX", sizeof ".tmp.XXXXXX");
    /* A unique name, so that two writers of one target (two tuners, two
     * timers) cannot write into each other's temporary. */
    int fd = mkostemp(r->tmp, O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot create a file beside it: %s", path, strerror(e));
        release(r);
        return -e;
    }
    /* mkstemp makes it 0600 whatever the umask; fchmod is not masked. */
    if (how == PJ_MODE_UMASKED)
        mode &= ~current_umask();
    live_add(r->tmp);
    if (fchmod(fd, mode) != 0 || !(r->f = fdopen(fd, "w"))) {
        int e = errno;
        close(fd);
        live_drop(r->tmp);
        unlink(r->tmp);
        snprintf(err, errlen, "%s: cannot prepare %s: %s", path, r->tmp, strerror(e));
        release(r);
        return -e;
    }
    return 0;
}

/* The rename itself reaches the disk with the directory's entry: synced
 * too, so that a crash after a synced commit finds the new file under the
 * name. Best effort: the file is in place whatever this says, and some
 * file systems refuse fsync of a directory. */
static void sync_dir(const char *path)
{
    const char *slash = strrchr(path, '/');
    char dir[4096];
    if (!slash)
        snprintf(dir, sizeof dir, ".");
    else if ((size_t)(slash - path) >= sizeof dir)
        return;
    else
        snprintf(dir, sizeof dir, "%.*s", slash == path ? 1 : (int)(slash - path), path);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        (void)fsync(fd);
        close(fd);
    }
}

int pj_replacing_commit(pj_replacing *r, int sync, char *err, size_t errlen)
{
    if (!r->f) {
        snprintf(err, errlen, "%s: nothing open to commit", r->path ? r->path : "(none)");
        release(r);
        return -EINVAL;
    }
    int renaming = 0;
    errno = 0; /* stdio need not set it on every failure */
    int rc = 0;
    /* In place (a pipe, a device) there is nothing to sync: fsync fails. */
    if (fflush(r->f) != 0 || ferror(r->f) || (sync && r->tmp && fsync(fileno(r->f)) != 0))
        rc = errno ? -errno : -EIO;
    errno = 0;
    if (fclose(r->f) != 0 && !rc)
        rc = errno ? -errno : -EIO;
    r->f = NULL;
    if (!r->tmp) { /* in place: nothing to rename, nothing kept to undo */
        if (rc)
            snprintf(err, errlen, "%s: writing failed: %s", r->path, strerror(-rc));
        release(r);
        return rc;
    }
    live_drop(r->tmp);
    if (!rc && rename(r->tmp, r->path) != 0) {
        rc = -errno;
        renaming = 1;
    }
    if (rc) {
        unlink(r->tmp);
        snprintf(err, errlen, "%s: %s %s%s failed: %s (the file there is unchanged)", r->path,
                 renaming ? "renaming" : "writing", r->tmp, renaming ? " over it" : "",
                 strerror(-rc));
    } else if (sync) {
        sync_dir(r->path);
    }
    release(r);
    return rc;
}

void pj_replacing_abort(pj_replacing *r)
{
    if (r->f) {
        fclose(r->f);
        if (r->tmp) {
            live_drop(r->tmp);
            unlink(r->tmp);
        }
    }
    release(r);
}

int pj_replace_file(const char *path, const void *buf, size_t len, mode_t mode, pj_replace_mode how,
                    char *err, size_t errlen)
{
    pj_replacing r;
    int rc = pj_replacing_open(&r, path, mode, how, err, errlen);
    if (rc)
        return rc;
    errno = 0;
    if (len && fwrite(buf, 1, len, r.f) != len) {
        rc = errno ? -errno : -EIO;
        if (r.tmp)
            snprintf(err, errlen, "%s: writing %s failed: %s (the file there is unchanged)", path,
                     r.tmp, strerror(-rc));
        else
            snprintf(err, errlen, "%s: writing failed: %s", path, strerror(-rc));
        pj_replacing_abort(&r);
        return rc;
    }
    return pj_replacing_commit(&r, 0, err, errlen);
}

int pj_open_regular(const char *path, struct stat *st, const char **failed)
{
    *failed = "cannot open";
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0)
        return -errno;
    if (fstat(fd, st) != 0) {
        const int e = errno;
        *failed = "fstat";
        close(fd);
        return -e;
    }
    if (!S_ISREG(st->st_mode)) {
        *failed = NULL;
        close(fd);
        return S_ISDIR(st->st_mode) ? -EISDIR : -EINVAL;
    }
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0)
        (void)fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
    return fd;
}

const char *pj_file_kind(mode_t mode)
{
    if (S_ISREG(mode))
        return "a regular file";
    if (S_ISDIR(mode))
        return "a directory";
    if (S_ISFIFO(mode))
        return "a FIFO";
    if (S_ISSOCK(mode))
        return "a socket";
    if (S_ISCHR(mode))
        return "a character device";
    if (S_ISBLK(mode))
        return "a block device";
    return "not a file";
}
