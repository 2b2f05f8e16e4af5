/* server.h — the nng listener, the libuv loop glue and request dispatch.
 *
 * Threads: the libuv loop thread owns every connection, buffer and counter.
 * nng calls back on its own threads (one nng_aio per REP context, pipe
 * events); those callbacks only append an event to a mutex-protected queue
 * and wake the loop with uv_async_send. The loop decodes, validates and
 * dispatches; backends compute on their own threads and complete through
 * the same queue. Nothing on the loop blocks on a client or computes.
 *
 * Requests: HELLO, REGISTER, UNREGISTER, STATS and PING are answered at
 * once; PROJECT is validated completely on arrival (taking references on
 * the buffers it names), then waits in its connection's FIFO for the
 * backend stream, so one connection's requests run in arrival order while
 * different connections run side by side.
 */
#ifndef PJ_SERVER_H
#define PJ_SERVER_H

#include <stddef.h>
#include <uv.h>

#include "config/config.h"
#include "daemon/backend.h"
#include "daemon/model.h"

typedef struct pj_server pj_server;

/* Called once from the loop when the server has stopped (after a drain)
 * and closed all of its handles; exit_code is what the process should
 * return (0 after a clean drain). */
typedef void (*pj_server_stopped_fn)(void *arg, int exit_code);

/* What pj_server_check_socket looks at before it probes, touching nothing
 * (projd --check-config stops there). */
typedef struct pj_socket_look {
    char path[PJ_CFG_PATH]; /* the socket file */
    char dir[PJ_CFG_PATH];  /* its directory; "" when the path names none */
    int dir_errno;          /* 0: there and safe (pj_sockpath_check_dir); else lstat's errno */
    int exists;             /* a socket file is at path */
} pj_socket_look;

/* The URL (ipc://PATH, short enough for a unix socket), the directory when
 * it is there, and what is at the path: 0 with *lk filled, or a negative
 * errno with err said (bad URL, an unsafe directory, something at the path
 * that is not a socket). */
int pj_server_look_socket(const char *url, pj_socket_look *lk, char *err, size_t errlen);

/* Is anyone serving at url (ipc://PATH)? 0: the path is free (a stale
 * socket file nobody answers on was removed); -EADDRINUSE: a live daemon
 * answers there; other negative errno: not usable (not a socket, no
 * permission, bad URL). err says which. */
int pj_server_check_socket(const char *url, char *err, size_t errlen);

/* socket.group's gid in *gid: 0; -ENOENT with err saying the group does
 * not exist; -EPERM (*gid set) when this process may not give a file that
 * group (not root, not a member, no CAP_CHOWN). Checked before the model
 * load and by --check-config, since the socket is made only after it. ""
 * is no group: 0, *gid untouched. */
int pj_server_socket_group(const char *group, uint32_t *gid, char *err, size_t errlen);

/* Build the server (nothing listens yet). cfg is copied; model and be must
 * outlive the server. Returns 0 or a negative errno. */
int pj_server_create(uv_loop_t *loop, const pj_config *cfg, const pj_model *model, pj_backend *be,
                     const char *url, pj_server_stopped_fn stopped, void *arg, pj_server **out,
                     char *err, size_t errlen);

/* Create the socket's directory, listen, set the file's mode and group and
 * start receiving. 0 or a negative errno with err set. */
int pj_server_listen(pj_server *s, char *err, size_t errlen);

/* SIGHUP: take log level, limits and auth from next (other keys are
 * ignored; the caller checked that nothing else changed). */
void pj_server_reload(pj_server *s, const pj_config *next);

/* What became of a SIGHUP reload (projd_main.c decides; STATS "reload"). */
typedef enum pj_reload_result {
    PJ_RELOAD_APPLIED = 0,
    PJ_RELOAD_REFUSED = 1, /* valid, but a key that needs a restart changed */
    PJ_RELOAD_FAILED = 2,  /* the file (or the command line) is not a valid configuration */
} pj_reload_result;

/* Count one reload and keep its result, message (cut to 511 bytes) and
 * time for STATS: "reload": {attempts, applied, refused, failed, last:
 * {result, message, unix_time, ago_s} or null before the first}. */
void pj_server_note_reload(pj_server *s, pj_reload_result r, const char *message);

/* While the watchdog holds its pings back for a stalled job, the stall as
 * systemd's STATUS= says it ("stalled: ...") in buf, and 1; else 0 and
 * buf "". A reload's READY=1 leads its STATUS= with it, so that the
 * reload's outcome does not hide the stall from systemctl status. */
int pj_server_stall_status(const pj_server *s, char *buf, size_t len);

/* SIGTERM/SIGINT: refuse new requests (PJ_E_SHUTDOWN) and new
 * connections, finish what is in flight, send every reply, close, then
 * call the stopped callback. Idempotent. */
void pj_server_drain(pj_server *s);

/* A drain for a failure (why: "fatal backend error: ...", "cannot listen:
 * ..."): as pj_server_drain, and systemd's STATUS= keeps saying why
 * while it drains, and after ("draining" alone would replace it). */
void pj_server_drain_failed(pj_server *s, const char *why);

/* Free (after the stopped callback, or when listen failed). Returns 1
 * when buffer releases still wait for the device (daemon/closer.h): the
 * backend must then not be closed (a release still uses it); the caller
 * exits the process instead. 0 otherwise. */
int pj_server_destroy(pj_server *s);

/* Once a drain has answered everything, the rest of the shutdown is given
 * a few seconds; past them the process exits with the code last set here
 * (0 by default). Async-signal-safe exit, no leak check. */
void pj_server_set_exit_code(int code);
void pj_server_arm_exit_guard(void);

#endif
