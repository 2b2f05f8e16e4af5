/* sockpath.c — default socket URL resolution shared by projd and clients. */
#include "protocol/sockpath.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
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

/* N when name is "projd-<N>.sock" (N: 1..9 decimal digits), else -1. */
static long instance_number(const char *name)
{
    if (strncmp(name, "projd-", 6) != 0)
        return -1;
    const char *p = name + 6;
    size_t digits = strspn(p, "0123456789");
    if (digits == 0 || digits > 9 || strcmp(p + digits, ".sock") != 0)
        return -1;
    return strtol(p, NULL, 10);
}

typedef struct sock_instance {
    long num;
    char name[24]; /* as in the directory: "projd-07.sock" stays so */
    int live;      /* a listening socket of this path is in /proc/net/unix */
} sock_instance;

/* The path of a /proc/net/unix line ("Num RefCount Protocol Flags Type St
 * Inode Path") when its socket is listened on (flag __SO_ACCEPTCON,
 * 0x10000), else NULL. Read instead of connecting: a connection given up
 * before nng's handshake stops nng 1.5's listener. */
static const char *listening_path(char *line)
{
    unsigned long flags = 0;
    int path_at = 0;
    if (sscanf(line, "%*s %*s %*s %lx %*s %*s %*s %n", &flags, &path_at) != 1 || !path_at ||
        !(flags & 0x10000ul))
        return NULL;
    char *path = line + path_at;
    path[strcspn(path, "\n")] = '\0';
    return path;
}

/* "<digits>.<digits>" and nothing after. */
static int is_pid_seq(const char *s)
{
    size_t a = strspn(s, "0123456789");
    if (!a || s[a] != '.')
        return 0;
    size_t b = strspn(s + a + 1, "0123456789");
    return b && !s[a + 1 + b];
}

/* Whether the listening socket /proc/net/unix names `bound` is the one at
 * path. The table keeps the name a socket was bound to, and projd binds a
 * private name and renames it onto its path (server.c, open_listener):
 * "<path>.<pid>.<seq>", or for a long path "<dir>/.pj<pid>.<seq>". 1: the
 * path's (either name); -1: perhaps (a long path's private name in the
 * path's directory); 0: not. */
static int bound_as(const char *bound, const char *path)
{
    size_t n = strlen(path);
    if (!strncmp(bound, path, n) && (!bound[n] || (bound[n] == '.' && is_pid_seq(bound + n + 1))))
        return 1;
    const char *slash = strrchr(path, '/');
    size_t d = slash ? (size_t)(slash - path) + 1 : 0;
    if (d && !strncmp(bound, path, d) && !strncmp(bound + d, ".pj", 3) && is_pid_seq(bound + d + 3))
        return -1;
    return 0;
}

/* 1 when some process listens on the socket at path, 0 when none does, -1
 * when that cannot be told (/proc/net/unix unreadable, or only a long
 * path's private name in its directory). */
static int path_listened(const char *path)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f)
        return -1;
    char line[PATH_MAX + 128];
    int found = 0;
    while (found != 1 && fgets(line, sizeof line, f)) {
        const char *p = listening_path(line);
        int b = p ? bound_as(p, path) : 0;
        if (b == 1 || (b == -1 && !found))
            found = b;
    }
    fclose(f);
    return found;
}

/* Marks the instances of dir that some process listens on. Returns how
 * many are live, or -1 when /proc/net/unix cannot be read. */
static int mark_listening(const char *dir, sock_instance *found, size_t n)
{
    FILE *f = fopen("/proc/net/unix", "r");
    if (!f)
        return -1;
    char line[PATH_MAX + 128];
    size_t dlen = strlen(dir);
    int live = 0;
    while (fgets(line, sizeof line, f)) {
        const char *path = listening_path(line);
        if (!path || strncmp(path, dir, dlen) != 0 || path[dlen] != '/')
            continue;
        for (size_t i = 0; i < n; i++) {
            char full[PATH_MAX];
            snprintf(full, sizeof full, "%s/%s", dir, found[i].name);
            /* a long path's private name may be any of them: each counts */
            if (!found[i].live && bound_as(path, full) != 0) {
                found[i].live = 1;
                live++;
            }
        }
    }
    fclose(f);
    return live;
}

static int cmp_instance(const void *a, const void *b)
{
    const sock_instance *x = a, *y = b;
    if (x->num != y->num)
        return (x->num > y->num) - (x->num < y->num);
    return strcmp(x->name, y->name);
}

#define MAX_INSTANCES 64

/* snprintf at buf + at; the new end (at most len). */
__attribute__((format(printf, 4, 5))) static size_t appendf(char *buf, size_t len, size_t at,
                                                            const char *fmt, ...)
{
    if (at >= len)
        return len;
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(buf + at, len - at, fmt, ap);
    va_end(ap);
    return k < 0 ? at : (at + (size_t)k < len ? at + (size_t)k : len);
}

/* pj_sockpath_find_instance; live_only: only instances listened on count
 * (none listened on, or the table unreadable: 0). */
static int find_instance(const char *dir, int live_only, char *url, size_t urllen, char *err,
                         size_t errlen)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    sock_instance found[MAX_INSTANCES];
    size_t n = 0, more = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        long num = instance_number(de->d_name);
        struct stat st;
        if (num < 0 || fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
            !S_ISSOCK(st.st_mode))
            continue;
        if (n == MAX_INSTANCES) {
            more++;
            continue;
        }
        found[n].num = num;
        found[n].live = 0;
        snprintf(found[n].name, sizeof found[n].name, "%.20s", de->d_name); /* at most 20 */
        n++;
    }
    closedir(d);
    if (n == 0)
        return 0;
    /* A socket file outlives its daemon (a crash, RuntimeDirectoryPreserve=):
     * when some of them are listened on, only those count. When none is (or
     * the table is unreadable, or the daemons are in another network
     * namespace), all do, and the dial says what it finds. */
    int live = more == 0 ? mark_listening(dir, found, n) : -1;
    if (live <= 0 && live_only)
        return 0;
    if (live > 0) {
        size_t k = 0;
        for (size_t i = 0; i < n; i++)
            if (found[i].live)
                found[k++] = found[i];
        n = k;
    }
    if (n == 1) {
        char file[sizeof found[0].name + 1];
        snprintf(file, sizeof file, "/%s", found[0].name);
        int rc = put_url(url, urllen, err, errlen, "ipc://", dir, file);
        return rc ? rc : 1;
    }
    qsort(found, n, sizeof found[0], cmp_instance);
    if (err && errlen) {
        size_t at = appendf(err, errlen, 0, "%zu projd instances in %s:", n + more, dir);
        /* the lowest few: the message stays one readable line */
        size_t shown = n < 8 ? n : 8;
        for (size_t i = 0; i < shown; i++)
            at = appendf(err, errlen, at, "%s %s", i ? "," : "", found[i].name);
        if (n - shown + more)
            at = appendf(err, errlen, at, " and %zu more", n - shown + more);
        appendf(err, errlen, at,
                "; pick one: $%s=ipc://%s/projd-N.sock, or that URL given to the client "
                "(projctl or projload --socket, projctl --instance N, Python Client(url))",
                PJ_SOCKPATH_ENV, dir);
    }
    if (urllen)
        url[0] = '\0';
    return -ENOTUNIQ;
}

int pj_sockpath_find_instance(const char *dir, char *url, size_t urllen, char *err, size_t errlen)
{
    return find_instance(dir, 0, url, urllen, err, errlen);
}

int pj_sockpath_instance(unsigned instance, char *url, size_t urllen, char *err, size_t errlen)
{
    char file[32];
    snprintf(file, sizeof file, "/projd-%u.sock", instance);
    return put_url(url, urllen, err, errlen, "ipc://", PJ_SOCKPATH_RUNDIR, file);
}

static int default_src(pj_sockpath_role role, const char *system, const char *rundir, char *url,
                       size_t urllen, pj_sockpath_source *src, char *err, size_t errlen)
{
    if (err && errlen)
        err[0] = '\0';
    pj_sockpath_source from;
    int rc;
    const char *env = getenv(PJ_SOCKPATH_ENV);
    const char *xdg = getenv("XDG_RUNTIME_DIR");
    /* A client passes over a system socket nobody listens on (a daemon that
     * died, a projd.service stopped for the projd@N instances) to find a
     * live one, and comes back to it when it finds none. Only "nobody"
     * counts: when /proc/net/unix cannot be read the file is taken. */
    int system_stale = 0;
    if (role == PJ_SOCKPATH_CLIENT && !(env && env[0]) && access(system, F_OK) == 0)
        system_stale = path_listened(system) == 0;
    if (env && env[0]) {
        from = PJ_SOCKPATH_FROM_ENV;
        rc = from_setting(env, url, urllen, err, errlen);
    } else if (role == PJ_SOCKPATH_SERVER ? geteuid() == 0
                                          : access(system, F_OK) == 0 && !system_stale) {
        from = PJ_SOCKPATH_FROM_SYSTEM;
        rc = put_url(url, urllen, err, errlen, "ipc://", system, "");
    } else {
        /* steps 3 and 4: the user's own daemon */
        char own[PATH_MAX];
        if (xdg && xdg[0] == '/') {
            from = PJ_SOCKPATH_FROM_XDG;
            rc = put_url(url, urllen, err, errlen, "ipc://", xdg, "/projd/projd.sock");
        } else {
            char tmp[64];
            snprintf(tmp, sizeof tmp, "/tmp/projd-%u", (unsigned)getuid());
            from = PJ_SOCKPATH_FROM_TMP;
            rc = put_url(url, urllen, err, errlen, "ipc://", tmp, "/projd.sock");
        }
        /* A client whose own daemon's socket is not there, or is a file its
         * daemon left when it died (nobody listens on it), looks for the
         * instances of deploy/projd@.service: the only one, or an error
         * that lists them. Beside a stale system socket, only instances
         * listened on count: stale files all round leave the system's. */
        snprintf(own, sizeof own, "%s", rc == 0 ? url + 6 : "");
        if (rc == 0 && role == PJ_SOCKPATH_CLIENT &&
            (access(own, F_OK) != 0 || path_listened(own) == 0)) {
            int ri = find_instance(rundir, system_stale, url, urllen, err, errlen);
            if (ri != 0) {
                from = PJ_SOCKPATH_FROM_INSTANCE;
                rc = ri == 1 ? 0 : ri;
            } else if (system_stale) {
                from = PJ_SOCKPATH_FROM_SYSTEM_STALE;
                rc = put_url(url, urllen, err, errlen, "ipc://", system, "");
            } else {
                /* Nothing anywhere: where this user's daemon would listen
                 * by default, which for root is the system instance's. */
                from = PJ_SOCKPATH_FROM_NONE_FOUND;
                rc = put_url(url, urllen, err, errlen, "ipc://", geteuid() == 0 ? system : own, "");
            }
        }
    }
    if (rc == 0 && src)
        *src = from;
    return rc;
}

int pj_sockpath_default(pj_sockpath_role role, char *url, size_t urllen, char *err, size_t errlen)
{
    return default_src(role, PJ_SOCKPATH_SYSTEM, PJ_SOCKPATH_RUNDIR, url, urllen, NULL, err,
                       errlen);
}

int pj_sockpath_resolve_src(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                            pj_sockpath_source *src, char *err, size_t errlen)
{
    if (configured && configured[0]) {
        if (err && errlen)
            err[0] = '\0';
        int rc = from_setting(configured, url, urllen, err, errlen);
        if (rc == 0 && src)
            *src = PJ_SOCKPATH_FROM_CONFIGURED;
        return rc;
    }
    return default_src(role, PJ_SOCKPATH_SYSTEM, PJ_SOCKPATH_RUNDIR, url, urllen, src, err, errlen);
}

int pj_sockpath_resolve(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                        char *err, size_t errlen)
{
    return pj_sockpath_resolve_src(configured, role, url, urllen, NULL, err, errlen);
}

const char *pj_sockpath_source_text(pj_sockpath_role role, pj_sockpath_source src)
{
    const int server = role == PJ_SOCKPATH_SERVER;
    switch (src) {
    case PJ_SOCKPATH_FROM_CONFIGURED:
        return "given by the caller";
    case PJ_SOCKPATH_FROM_ENV:
        return "from $" PJ_SOCKPATH_ENV;
    case PJ_SOCKPATH_FROM_SYSTEM:
        return server ? "the default for root (the system instance's)"
                      : "the default (the system instance's: " PJ_SOCKPATH_SYSTEM " exists)";
    case PJ_SOCKPATH_FROM_XDG:
        return server ? "the default when not root ($XDG_RUNTIME_DIR is set)"
                      : "the default (your own, under $XDG_RUNTIME_DIR)";
    case PJ_SOCKPATH_FROM_TMP:
        return server ? "the default when not root ($XDG_RUNTIME_DIR is unset)"
                      : "the default (your own, $XDG_RUNTIME_DIR is unset)";
    case PJ_SOCKPATH_FROM_SYSTEM_STALE:
        return "the default (the system instance's: " PJ_SOCKPATH_SYSTEM
               " exists but nothing listens on it, and no other projd was found: none of your "
               "own, no projd-<N>.sock listened on in " PJ_SOCKPATH_RUNDIR ")";
    case PJ_SOCKPATH_FROM_NONE_FOUND:
        /* Said to a client that found no daemon: where else it looked. */
        return "the default; no projd found: none at " PJ_SOCKPATH_SYSTEM
               ", no projd-<N>.sock in " PJ_SOCKPATH_RUNDIR
               ", none of your own (root's own is the system instance's, "
               "others' under $XDG_RUNTIME_DIR/projd or /tmp/projd-<uid>)";
    case PJ_SOCKPATH_FROM_INSTANCE:
        return "the default (no socket of your own, and the only projd-<N>.sock listened on "
               "in " PJ_SOCKPATH_RUNDIR ")";
    }
    return "unknown";
}

int pj_sockpath_check_served(const char *url, const char *where, char *err, size_t errlen)
{
    const char *path = pj_sockpath_file(url);
    const char *why = !path            ? "only ipc:// URLs are served (access control relies "
                                         "on a Unix socket's peer credentials)"
                      : path[0] != '/' ? "the path is relative (it would be the working "
                                         "directory's, which the daemon does not check for "
                                         "who may write to it); give an absolute path"
                      : strlen(path) > PJ_SOCKPATH_MAX
                          ? "the path is longer than a Unix socket's 107 bytes"
                          : NULL;
    if (!why)
        return 0;
    if (err && errlen)
        snprintf(err, errlen, "socket URL \"%.200s\" (%s): %s", url, where, why);
    return -EINVAL;
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

/* check_links' refusal of a path past PATH_MAX on the way. */
static int too_long(const char *dir, char *err, size_t errlen)
{
    snprintf(err, errlen, "socket dir %s: a path on the way is longer than %d bytes", dir,
             PATH_MAX - 1);
    return -ENAMETOOLONG;
}

/* Every symbolic link met on the way to `path` (absolute), followed as
 * the kernel follows them: the link must be owned by us or root, and
 * every directory walked through (the link's own and those above it) must
 * pass check_ancestor. The resolved chain alone
 * (check_chain) said nothing of a link another user owns (in /tmp, say),
 * which that user can point elsewhere at any time: the listener is bound,
 * chmodded and renamed by path again at every replacement, and a link
 * flipped between the check and those calls turned them on files of the
 * user's choosing (a review made a root-owned file 0666). */
static int check_links(const char *dir, const char *path, int depth, char *err, size_t errlen)
{
    char cur[PATH_MAX] = ""; /* resolved so far, without links: "" is "/" */
    char rest[PATH_MAX];
    if (depth > 40) {
        snprintf(err, errlen, "socket dir %s: too many levels of symbolic links", dir);
        return -ELOOP;
    }
    snprintf(rest, sizeof rest, "%s", path);
    char *save = NULL;
    for (char *c = strtok_r(rest, "/", &save); c; c = strtok_r(NULL, "/", &save)) {
        if (!strcmp(c, "."))
            continue;
        if (!strcmp(c, "..")) {
            char *sl = strrchr(cur, '/');
            if (sl)
                *sl = '\0';
            continue;
        }
        char next[PATH_MAX];
        if ((size_t)snprintf(next, sizeof next, "%s/%s", cur, c) >= sizeof next)
            return too_long(dir, err, errlen);
        struct stat st;
        if (lstat(next, &st) != 0)
            return 0; /* missing: made by the start (check_creatable) or said by realpath */
        if (!S_ISLNK(st.st_mode)) {
            /* Every directory walked through, not only where a link sits:
             * one another user owns above a link could have the link's
             * directory replaced, link and all. */
            int rc = check_ancestor(dir, next, err, errlen);
            if (rc != 0)
                return rc;
            memcpy(cur, next, sizeof cur);
            continue;
        }
        if (!trusted_owner(st.st_uid)) {
            snprintf(err, errlen,
                     "socket dir %s: the path goes through the symbolic link %s, owned by uid %u, "
                     "who could point it elsewhere; use a path without it, or links owned by "
                     "%s",
                     dir, next, (unsigned)st.st_uid, geteuid() == 0 ? "root" : "this uid or root");
            return -EPERM;
        }
        char target[PATH_MAX], joined[PATH_MAX];
        ssize_t n = readlink(next, target, sizeof target - 1);
        if (n < 0) {
            int e = errno;
            snprintf(err, errlen, "socket dir %s: readlink %s: %s", dir, next, strerror(e));
            return -e;
        }
        target[n] = '\0';
        const char *tail = save && *save ? save : "";
        /* an absolute target starts again from "/"; a relative one from
         * the directory holding the link */
        int jn = target[0] == '/' ? snprintf(joined, sizeof joined, "%s/%s", target, tail)
                                  : snprintf(joined, sizeof joined, "%s/%s/%s", cur, target, tail);
        if (jn < 0 || (size_t)jn >= sizeof joined)
            return too_long(dir, err, errlen);
        return check_links(dir, joined, depth + 1, err, errlen);
    }
    return 0;
}

/* "/" and every directory on the way to `existing` (symlinks resolved)
 * against check_ancestor, and every link on the way (check_links); dir
 * names the socket directory in messages. */
static int check_chain(const char *dir, const char *existing, char *err, size_t errlen)
{
    char real[PATH_MAX], pre[PATH_MAX];
    if (existing[0] == '/') {
        int lrc = check_links(dir, existing, 0, err, errlen);
        if (lrc != 0)
            return lrc;
    }
    if (!realpath(existing, real)) {
        int e = errno;
        snprintf(err, errlen, "socket dir %s: cannot resolve %s: %s", dir, existing, strerror(e));
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

/* dir's parent, or "." / "/" (cap bytes at out). */
static void parent_of(const char *dir, char *out, size_t cap)
{
    snprintf(out, cap, "%s", dir);
    char *slash = strrchr(out, '/');
    if (!slash)
        snprintf(out, cap, ".");
    else if (slash == out)
        out[1] = '\0';
    else
        *slash = '\0';
}

static int check_ancestors(const char *dir, char *err, size_t errlen)
{
    char parent[PATH_MAX];
    parent_of(dir, parent, sizeof parent);
    return check_chain(dir, parent, err, errlen);
}

int pj_sockpath_check_creatable(const char *dir, char *err, size_t errlen)
{
    char base[PATH_MAX], below[PATH_MAX];
    struct stat st;
    snprintf(base, sizeof base, "%s", dir);
    /* the deepest ancestor there is: a start makes everything below it */
    do {
        memcpy(below, base, sizeof below);
        parent_of(below, base, sizeof base);
    } while (strcmp(base, "/") != 0 && strcmp(base, ".") != 0 && lstat(base, &st) != 0);
    if (stat(base, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, errlen, "socket dir %s: cannot be created: %s is not a directory", dir, base);
        return -ENOTDIR;
    }
    if (eaccess(base, W_OK | X_OK) != 0) {
        int e = errno;
        snprintf(err, errlen,
                 "socket dir %s: does not exist, and uid %u cannot create it in %s: %s", dir,
                 (unsigned)geteuid(), base, strerror(e));
        return -e;
    }
    return check_chain(dir, base, err, errlen);
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
        /* A shared directory (/tmp, sticky and open to all) is no place to
         * fix: point at a directory of the socket's own instead. */
        const int shared = (st.st_mode & S_ISVTX) && (st.st_mode & S_IWOTH);
        char owner[32] = "root";
        if (geteuid() != 0)
            snprintf(owner, sizeof owner, "uid %u or root", (unsigned)geteuid());
        snprintf(err, errlen,
                 "socket dir %s: owned by uid %u with mode %04o; the socket's directory must be "
                 "owned by %s and writable by nobody else (another user could swap the socket). "
                 "%s",
                 dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777), owner,
                 shared ? "It is a shared directory: put the socket in a directory of its own "
                          "(e.g. socket.url ipc:///tmp/projd-NAME/projd.sock; a missing one is "
                          "created with a safe mode)"
                        : "Remove it or fix its owner and mode, or choose another socket.url");
        return -EPERM;
    }
    return check_ancestors(dir, err, errlen);
}

int pj_sockpath_default_at(pj_sockpath_role role, const char *system, const char *rundir, char *url,
                           size_t urllen, pj_sockpath_source *src, char *err, size_t errlen)
{
    return default_src(role, system, rundir, url, urllen, src, err, errlen);
}
