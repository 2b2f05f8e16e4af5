/* sockpath.c — default socket URL resolution shared by projd and clients. */
#include "protocol/sockpath.h"

#include <errno.h>
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
    if (mkdir(dir, mode) == 0 || errno == EEXIST) {
        struct stat st;
        if (stat(dir, &st) == 0 && S_ISDIR(st.st_mode))
            return 0;
        snprintf(err, errlen, "socket dir %s: exists and is not a directory", dir);
        return -ENOTDIR;
    }
    int e = errno;
    snprintf(err, errlen, "socket dir %s: mkdir: %s", dir, strerror(e));
    return -e;
}
