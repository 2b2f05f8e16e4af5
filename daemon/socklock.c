/* socklock.c — see socklock.h. */
#include "daemon/socklock.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/config.h"
#include "daemon/lockpid.h"

static int g_fd = -1;
static char g_path[PJ_CFG_PATH + 8];

int pj_socklock_path(const char *socket_path, char *out, size_t cap)
{
    int n = snprintf(out, cap, "%s.lock", socket_path);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int pj_socklock_take(const char *socket_path, char *err, size_t errlen)
{
    char path[sizeof g_path];
    if (pj_socklock_path(socket_path, path, sizeof path) != 0) {
        snprintf(err, errlen, "socket %s: path too long for its lock file", socket_path);
        return -ENAMETOOLONG;
    }
    if (g_fd >= 0 && strcmp(path, g_path) != 0) {
        snprintf(err, errlen, "socket %s: this process holds the lock of another socket (%s)",
                 socket_path, g_path);
        return -EALREADY;
    }
    if (g_fd >= 0)
        return 0;
    /* A holder that exits removes the file after others may have opened
     * it: a lock taken on a file no longer at the path is no lock, so
     * check the path still names the locked file, and try again if not. */
    for (int tries = 0; tries < 8; tries++) {
        int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
        if (fd < 0) {
            int e = errno;
            snprintf(err, errlen, "socket %s: cannot open its lock file %s: %s", socket_path, path,
                     strerror(e));
            return -e;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            if (e == EWOULDBLOCK) {
                char pid[24] = "?"; /* a holder between its flock and its write */
                long holder = pj_lockpid_read(fd);
                if (holder)
                    snprintf(pid, sizeof pid, "%ld", holder);
                snprintf(err, errlen,
                         "socket %s: another projd (pid %s) is starting or serving there (it "
                         "holds %s); stop it first, or choose another socket.url",
                         socket_path, pid, path);
                close(fd);
                return -EADDRINUSE;
            }
            close(fd);
            snprintf(err, errlen, "socket %s: cannot lock %s: %s", socket_path, path, strerror(e));
            return -e;
        }
        struct stat held, now;
        if (fstat(fd, &held) == 0 && stat(path, &now) == 0 && held.st_dev == now.st_dev &&
            held.st_ino == now.st_ino) {
            /* Unwritten, only a refused daemon's message loses the pid. */
            (void)pj_lockpid_write(fd);
            g_fd = fd;
            snprintf(g_path, sizeof g_path, "%s", path);
            return 0;
        }
        close(fd);
    }
    snprintf(err, errlen, "socket %s: its lock file %s keeps being replaced", socket_path, path);
    return -EAGAIN;
}

int pj_socklock_held(void)
{
    return g_fd >= 0;
}

void pj_socklock_release(void)
{
    if (g_fd < 0)
        return;
    /* Removed while still held, so no one takes a lock on it meanwhile
     * that the next one could not see (take's check). Only while the path
     * still names the file held: one removed by hand and made again by a
     * later daemon is that daemon's lock, and removing it would let a
     * third start beside it. */
    struct stat held, now;
    if (fstat(g_fd, &held) == 0 && stat(g_path, &now) == 0 && held.st_dev == now.st_dev &&
        held.st_ino == now.st_ino)
        unlink(g_path);
    close(g_fd);
    g_fd = -1;
    g_path[0] = 0;
}
