/* sockpath.c — default socket URL resolution shared by projd and clients. */
#include "protocol/sockpath.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static int put_url(char *url, size_t urllen, char *err, size_t errlen, const char *prefix,
                   const char *path, const char *suffix)
{
    int n = snprintf(url, urllen, "%s%s%s", prefix, path, suffix);
    if (n < 0 || (size_t)n >= urllen) {
        if (err && errlen)
            snprintf(err, errlen, "socket url: %s%s%s is longer than %zu bytes", prefix, path,
                     suffix, urllen ? urllen - 1 : 0);
        if (urllen)
            url[0] = '\0';
        return -ENAMETOOLONG;
    }
    return 0;
}

/* A URL as given, or a bare path made into an ipc:// URL. */
static int from_setting(const char *s, char *url, size_t urllen, char *err, size_t errlen)
{
    const char *prefix = strstr(s, "://") ? "" : "ipc://";
    return put_url(url, urllen, err, errlen, prefix, s, "");
}

int pj_sockpath_default(pj_sockpath_role role, char *url, size_t urllen, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    const char *env = getenv(PJ_SOCKPATH_ENV);
    if (env && env[0])
        return from_setting(env, url, urllen, err, errlen);
    int system =
        role == PJ_SOCKPATH_SERVER ? geteuid() == 0 : access(PJ_SOCKPATH_SYSTEM, F_OK) == 0;
    if (system)
        return put_url(url, urllen, err, errlen, "ipc://", PJ_SOCKPATH_SYSTEM, "");
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    if (xdg && xdg[0] == '/')
        return put_url(url, urllen, err, errlen, "ipc://", xdg, "/projd/projd.sock");
    char tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/projd-%u", (unsigned)getuid());
    return put_url(url, urllen, err, errlen, "ipc://", tmp, "/projd.sock");
}

int pj_sockpath_resolve(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                        char *err, size_t errlen)
{
    if (configured && configured[0]) {
        if (err && errlen)
            err[0] = '\0';
        return from_setting(configured, url, urllen, err, errlen);
    }
    return pj_sockpath_default(role, url, urllen, err, errlen);
}

const char *pj_sockpath_file(const char *url)
{
    if (!url || strncmp(url, "ipc://", 6) != 0)
        return NULL;
    return url + 6;
}

int pj_sockpath_mkdir(const char *url, mode_t mode, char *err, size_t errlen)
{
    const char *file = pj_sockpath_file(url);
    if (!file)
        return 0;
    char dir[4096];
    const char *slash = strrchr(file, '/');
    if (!slash || slash == file)
        return 0; /* relative file, or directly under / */
    size_t n = (size_t)(slash - file);
    if (n >= sizeof dir) {
        snprintf(err, errlen, "socket dir of %s: path too long", url);
        return -ENAMETOOLONG;
    }
    memcpy(dir, file, n);
    dir[n] = '\0';
    if (mkdir(dir, mode) == 0 || errno == EEXIST)
        return pj_sockpath_check_dir(dir, err, errlen);
    int e = errno;
    snprintf(err, errlen, "socket dir %s: mkdir: %s", dir, strerror(e));
    return -e;
}

mode_t pj_sockpath_dir_mode(const char *url)
{
    const char *file = pj_sockpath_file(url);
    char fallback[64];
    snprintf(fallback, sizeof fallback, "/tmp/projd-%u/", (unsigned)getuid());
    size_t n = strlen(fallback);
    if (file && strncmp(file, fallback, n) == 0 && !strchr(file + n, '/'))
        return 0700;
    return 0755;
}

/* Owned by us or root: nobody else can chmod/chown it. */
static int trusted_owner(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

static int check_ancestor(const char *dir, const char *p, char *err, size_t errlen)
{
    struct stat st;
    if (stat(p, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "socket dir %s: stat %s: %s", dir, p, strerror(e));
        return -e;
    }
    if (trusted_owner(st.st_uid) && (!(st.st_mode & (S_IWGRP | S_IWOTH)) || (st.st_mode & S_ISVTX)))
        return 0;
    snprintf(err, errlen,
             "socket dir %s: its ancestor %s is owned by uid %u with mode %04o, so another user "
             "could replace the socket's directory; put the socket under directories owned by "
             "uid %u or root that others cannot write (or that are sticky, like /tmp)",
             dir, p, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
    return -EPERM;
}

static int check_ancestors(const char *dir, char *err, size_t errlen)
{
    char parent[PATH_MAX], real[PATH_MAX], pre[PATH_MAX];
    snprintf(parent, sizeof parent, "%s", dir);
    char *slash = strrchr(parent, '/');
    if (!slash)
        snprintf(parent, sizeof parent, ".");
    else if (slash == parent)
        parent[1] = '\0';
    else
        *slash = '\0';
    if (!realpath(parent, real)) {
        int e = errno;
        snprintf(err, errlen, "socket dir %s: cannot resolve %s: %s", dir, parent, strerror(e));
        return -e;
    }
    int rc = check_ancestor(dir, "/", err, errlen);
    size_t len = strlen(real);
    for (size_t j = 1; rc == 0 && j <= len && len > 1; j++) {
        if (j < len && real[j] != '/')
            continue;
        memcpy(pre, real, j);
        pre[j] = '\0';
        rc = check_ancestor(dir, pre, err, errlen);
    }
    return rc;
}

int pj_sockpath_check_dir(const char *dir, char *err, size_t errlen)
{
    struct stat st;
    if (lstat(dir, &st) != 0) {
        int e = errno;
        snprintf(err, errlen, "socket dir %s: %s", dir, strerror(e));
        return -e;
    }
    if (S_ISLNK(st.st_mode)) {
        snprintf(err, errlen,
                 "socket dir %s: is a symbolic link (owner uid %u); refusing to put the socket "
                 "behind it. Remove it, or set socket.url to the real directory",
                 dir, (unsigned)st.st_uid);
        return -ELOOP;
    }
    if (!S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "socket dir %s: exists and is not a directory", dir);
        return -ENOTDIR;
    }
    if (!trusted_owner(st.st_uid) || (st.st_mode & (S_IWGRP | S_IWOTH))) {
        snprintf(err, errlen,
                 "socket dir %s: owned by uid %u with mode %04o; the socket's directory must be "
                 "owned by uid %u or root and writable by nobody else (another user could swap "
                 "the socket). Remove it or fix its owner and mode, or choose another socket.url",
                 dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), (unsigned)geteuid());
        return -EPERM;
    }
    return check_ancestors(dir, err, errlen);
}
