/* loadturn.c — see loadturn.h. */
#include "daemon/loadturn.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "daemon/lockpid.h"

#define POLL_MS 100u

static int g_fd = -1;
static int g_writable; /* g_fd may write the pid (and clear it at the release) */

int pj_loadturn_path(const char *dir, char *out, size_t cap)
{
    /* not "<name>.lock", which a socket called <name> would lock for itself
     * (daemon/socklock.h) */
    int n = snprintf(out, cap, "%s/.projd-load-turn", dir);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static unsigned elapsed_ms(const struct timespec *t0)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    double ms = (double)(t.tv_sec - t0->tv_sec) * 1e3 + (double)(t.tv_nsec - t0->tv_nsec) / 1e6;
    return ms < 0 ? 0 : (unsigned)ms;
}

int pj_loadturn_take(const char *dir, unsigned limit_ms, pj_loadturn_wait_fn wait, void *ctx,
                     char *err, size_t errlen)
{
    if (g_fd >= 0)
        return 0;
    char path[4096];
    if (pj_loadturn_path(dir, path, sizeof path) != 0) {
        snprintf(err, errlen,
                 "path too long for the load turn's lock file (the directory's is %zu bytes): "
                 "loading without waiting for a turn",
                 strlen(dir));
        return 1;
    }
    /* 0600, and taken only by those who may write it: flock needs no more
     * than a read-only descriptor, so a file others could read let any
     * local user hold the turn and put every start off by the whole
     * bound (a review held a 0644 one as nobody). A file from before,
     * made 0644, is made 0600 by the first daemon that owns it. */
    int writable = 1;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        snprintf(err, errlen, "cannot open %s (%s): loading without waiting for a turn", path,
                 strerror(errno));
        return 1;
    }
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_uid == geteuid() && (st.st_mode & 077))
        (void)fchmod(fd, 0600);
    /* The bound is on one holder's load: each new holder starts it again,
     * so the last of eight instances waits out seven loads, not 600 s. */
    struct timespec t0, held_since;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    held_since = t0;
    long last_holder = 0;
    for (;;) {
        if (flock(fd, LOCK_EX | LOCK_NB) == 0)
            break;
        if (errno != EWOULDBLOCK && errno != EINTR) {
            snprintf(err, errlen, "cannot lock %s (%s): loading without waiting for a turn", path,
                     strerror(errno));
            close(fd);
            return 1;
        }
        /* A change to "no pid" is a new holder too: one that cannot
         * write its pid (a read-only file) after one that could. */
        long holder = pj_lockpid_read(fd);
        if (holder != last_holder) {
            clock_gettime(CLOCK_MONOTONIC, &held_since);
            last_holder = holder;
        }
        if (wait && wait(ctx, holder, elapsed_ms(&t0)) != 0) {
            close(fd);
            return -ECANCELED;
        }
        unsigned held = elapsed_ms(&held_since);
        if (held >= limit_ms) {
            char who[48] = "another projd";
            if (last_holder)
                snprintf(who, sizeof who, "projd pid %ld", last_holder);
            snprintf(err, errlen, "waited %.0f s for the load of %s (%s) to end: loading beside it",
                     held / 1e3, who, path);
            close(fd);
            return 1;
        }
        usleep(POLL_MS * 1000u);
    }
    if (writable && pj_lockpid_write(fd) != 0)
        writable = 0; /* those waiting then name no pid; the turn itself holds */
    g_writable = writable;
    g_fd = fd;
    return 0;
}

void pj_loadturn_release(void)
{
    if (g_fd < 0)
        return;
    /* the pid goes first, so that no waiter names a daemon whose load
     * has ended; closing drops the flock */
    if (g_writable && ftruncate(g_fd, 0) != 0)
        g_writable = 0;
    close(g_fd);
    g_fd = -1;
}
