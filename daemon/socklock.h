/* socklock.h — one daemon per socket path: an exclusive flock on
 * "<socket>.lock", taken before the model load and held for the life of
 * the process.
 *
 * The live probe of the socket (pj_server_check_socket) cannot tell two
 * daemons started at the same moment from one: both find the path free,
 * load their models, and rename their listeners onto it in turn; the
 * second one's listener takes the path and the first serves nothing while
 * it reports ready (and pings the watchdog). The lock closes that window.
 * The file holds the holder's pid (for the message of the one refused) and
 * is removed at a clean exit; one left by a killed daemon is taken over,
 * since the kernel drops a dead process's flock. */
#ifndef PJ_DAEMON_SOCKLOCK_H
#define PJ_DAEMON_SOCKLOCK_H

#include <stddef.h>

/* The lock file's path for socket_path ("<socket_path>.lock") into out.
 * 0, or -ENAMETOOLONG when it does not fit in cap. */
int pj_socklock_path(const char *socket_path, char *out, size_t cap);

/* Take the lock of socket_path (its directory must exist). 0 when taken
 * (or already held by this process for that path); -EADDRINUSE with err
 * naming the holder's pid when another process holds it; another
 * negative errno (err said) when the lock file cannot be made. */
int pj_socklock_take(const char *socket_path, char *err, size_t errlen);

/* Is the lock held by this process? */
int pj_socklock_held(void);

/* Remove the lock file and drop the lock (at a clean exit, also of a
 * start that failed or was stopped). A no-op when not held. */
void pj_socklock_release(void);

#endif
