/* sockpath.h — where projd's nng socket lives when nobody says.
 *
 * One resolution shared by the daemon and its clients, so both land on the
 * same file without configuration:
 *   1. $PROJD_SOCKET when set and non-empty (a URL, or a path that gets
 *      "ipc://" put in front);
 *   2. ipc:///run/projd/projd.sock, the system instance: a client takes it
 *      when the file exists and is listened on (or /proc/net/unix cannot
 *      tell), the daemon when it runs as root. A client that finds the
 *      file with nobody listening goes on to steps 3 and 4 (instances
 *      listened on only) and comes back to it when they find nothing;
 *   3. the user's own: ipc://$XDG_RUNTIME_DIR/projd/projd.sock when
 *      XDG_RUNTIME_DIR is set, else ipc:///tmp/projd-<uid>/projd.sock (the
 *      daemon creates the directory with mode 0700 and, like every socket
 *      directory, refuses one that another uid owns or can write:
 *      pj_sockpath_check_dir). The daemon always ends here; a client when
 *      the file exists;
 *   4. a client whose own socket is not there: the instances of
 *      deploy/projd@.service, /run/projd/projd-<N>.sock (N decimal, one per
 *      GPU). Those listened on count (/proc/net/unix, no connection made);
 *      when none is, every such socket file does. Exactly one: that one;
 *      several: -ENOTUNIQ, listing them, for the caller to pick one
 *      ($PROJD_SOCKET, projctl --socket or --instance N);
 *   5. else where this user's daemon would listen: step 3's URL, or for
 *      root step 2's (a root daemon's default); its file is missing or not
 *      listened on, and the connect says so and where else it looked.
 */
#ifndef PJ_SOCKPATH_H
#define PJ_SOCKPATH_H

#include <stddef.h>
#include <sys/types.h>

#define PJ_SOCKPATH_SYSTEM "/run/projd/projd.sock"
#define PJ_SOCKPATH_RUNDIR "/run/projd"
#define PJ_SOCKPATH_ENV    "PROJD_SOCKET"

typedef enum pj_sockpath_role {
    PJ_SOCKPATH_CLIENT = 0, /* steps 2 and 3 when their file exists, then 4 */
    PJ_SOCKPATH_SERVER = 1, /* step 2 when running as root */
} pj_sockpath_role;

/* Where a resolved URL came from (pj_sockpath_resolve_src). */
typedef enum pj_sockpath_source {
    PJ_SOCKPATH_FROM_CONFIGURED = 0, /* the caller's setting */
    PJ_SOCKPATH_FROM_ENV,            /* step 1 */
    PJ_SOCKPATH_FROM_SYSTEM,         /* step 2: /run/projd/projd.sock */
    PJ_SOCKPATH_FROM_INSTANCE,       /* step 4: the only /run/projd/projd-<N>.sock */
    PJ_SOCKPATH_FROM_XDG,            /* step 3, XDG_RUNTIME_DIR set */
    PJ_SOCKPATH_FROM_TMP,            /* step 3, /tmp/projd-<uid> */
    PJ_SOCKPATH_FROM_NONE_FOUND,     /* step 5 (client): nothing found; the user's own
                                      * URL (root's: step 2's) */
    PJ_SOCKPATH_FROM_SYSTEM_STALE,   /* step 2's file, nobody listening, nothing else
                                      * found (client) */
} pj_sockpath_source;

/* pj_sockpath_resolve_src's default with step 2's socket file and step
 * 4's directory given (tests; the others use PJ_SOCKPATH_SYSTEM and
 * PJ_SOCKPATH_RUNDIR). */
int pj_sockpath_default_at(pj_sockpath_role role, const char *system, const char *rundir, char *url,
                           size_t urllen, pj_sockpath_source *src, char *err, size_t errlen);

/* Writes the default URL for `role` into url (urllen bytes). Returns 0,
 * -ENAMETOOLONG (with a message in err) when it does not fit, or (client
 * role only) -ENOTUNIQ when several instances are in /run/projd (step 4;
 * err lists them). */
int pj_sockpath_default(pj_sockpath_role role, char *url, size_t urllen, char *err, size_t errlen);

/* The URL to use: `configured` when non-NULL and non-empty (a bare path
 * gets "ipc://" in front), else the default for `role`. Same returns. */
int pj_sockpath_resolve(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                        char *err, size_t errlen);

/* pj_sockpath_resolve, also saying where the URL came from in *src (when
 * src is not NULL; set on success only). */
int pj_sockpath_resolve_src(const char *configured, pj_sockpath_role role, char *url, size_t urllen,
                            pj_sockpath_source *src, char *err, size_t errlen);

/* How a URL was chosen for `role`, for messages: "from $PROJD_SOCKET",
 * "the default (step 2: /run/projd/projd.sock exists)", ... */
const char *pj_sockpath_source_text(pj_sockpath_role role, pj_sockpath_source src);

/* Step 4's instance search in dir (PJ_SOCKPATH_RUNDIR outside tests): the
 * entries named projd-<N>.sock (N decimal digits) that are sockets. 1 with
 * url set to ipc://DIR/projd-<N>.sock when there is exactly one, 0 when
 * there is none (or dir cannot be read), -ENOTUNIQ when there are several
 * (err lists them, lowest N first, and says how to pick one), or
 * -ENAMETOOLONG. */
int pj_sockpath_find_instance(const char *dir, char *url, size_t urllen, char *err, size_t errlen);

/* ipc:///run/projd/projd-<instance>.sock (deploy/projd@.service's socket for
 * GPU `instance`) into url. 0 or -ENAMETOOLONG. */
int pj_sockpath_instance(unsigned instance, char *url, size_t urllen, char *err, size_t errlen);

/* The longest path a Unix socket's address holds (sun_path less its NUL). */
#define PJ_SOCKPATH_MAX 107

/* Whether a daemon may listen on url: ipc:// and an absolute path of at
 * most 107 bytes (a Unix socket's limit); config's socket.url takes the
 * same rule. 0, or -EINVAL with a message saying which rule it breaks
 * (where = how the URL was chosen, for it; err may be NULL). */
int pj_sockpath_check_served(const char *url, const char *where, char *err, size_t errlen);

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

/* For a socket directory that does not exist yet (a start makes it and
 * what is missing above it, then checks it with pj_sockpath_check_dir):
 * whether this uid can, and whether the deepest directory that exists on
 * its way and every one above it pass pj_sockpath_check_dir's rule for
 * ancestors. Creates nothing (projd --check-config). 0, or a negative
 * errno with a one-line message. */
int pj_sockpath_check_creatable(const char *dir, char *err, size_t errlen);

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
