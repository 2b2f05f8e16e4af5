/* sockpath.h — where projd's nng socket lives when nobody says.
 *
 * One resolution shared by the daemon and its clients, so both land on the
 * same file without configuration:
 *   1. $PROJD_SOCKET when set and non-empty (a URL, or a path that gets
 *      "ipc://" put in front);
 *   2. ipc:///run/projd/projd.sock — the system instance. A client takes it
 *      when the file exists; the daemon takes it when it runs as root;
 *   3. ipc://$XDG_RUNTIME_DIR/projd/projd.sock when XDG_RUNTIME_DIR is set;
 *   4. ipc:///tmp/projd-<uid>/projd.sock (the daemon creates the directory
 *      with mode 0700 and, like every socket directory, refuses one that
 *      another uid owns or can write: pj_sockpath_check_dir).
 */
#ifndef PJ_SOCKPATH_H
#define PJ_SOCKPATH_H

#include <stddef.h>
#include <sys/types.h>

#define PJ_SOCKPATH_SYSTEM "/run/projd/projd.sock"
#define PJ_SOCKPATH_ENV    "PROJD_SOCKET"

typedef enum pj_sockpath_role {
    PJ_SOCKPATH_CLIENT = 0, /* step 2 when the file exists */
    PJ_SOCKPATH_SERVER = 1, /* step 2 when running as root */
} pj_sockpath_role;

/* Writes the default URL for `role` into url (urllen bytes). Returns 0, or
 * -ENAMETOOLONG (with a message in err) when it does not fit. */
int pj_sockpath_default(pj_sockpath_role role, char *url, size_t urllen, char *err, size_t errlen);

/* The URL to use: `configured` when non-NULL and non-empty (a bare path
 * gets "ipc://" in front), else the default for `role`. Same returns. */
int pj_sockpath_resolve(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                        char *err, size_t errlen);

/* The filesystem path inside an ipc:// URL (a pointer into url), or NULL
 * when url is not ipc://. */
const char *pj_sockpath_file(const char *url);

/* Creates the directory that holds an ipc:// URL's socket file (one level,
 * with `mode`) when it is missing, then checks it with
 * pj_sockpath_check_dir. 0 when it exists (and is safe) or was made, 0 for
 * a non-ipc URL, a negative errno with a message otherwise. */
int pj_sockpath_mkdir(const char *url, mode_t mode, char *err, size_t errlen);

/* The mode a daemon gives the directory of its socket when it creates it:
 * 0700 for the per-user fallback /tmp/projd-<uid> (step 4: nobody else
 * needs to reach it), 0755 otherwise. */
mode_t pj_sockpath_dir_mode(const char *url);

/* Whether dir may hold a daemon's socket. Someone who can write to the
 * socket's directory (or replace it) can swap the socket file and serve
 * the daemon's clients, so: dir itself must be a real directory (lstat: a
 * symlink is refused) owned by the effective uid or root and not writable
 * by group or others; every ancestor (symlinks resolved) must be owned by
 * the effective uid or root and, when group/other-writable, sticky (like
 * /tmp: fine as an ancestor, never as the socket's own directory).
 * 0, or -EPERM / -ENOTDIR / -errno with a one-line message naming the
 * path, its owner and mode, and what to do. */
int pj_sockpath_check_dir(const char *dir, char *err, size_t errlen);

#endif
