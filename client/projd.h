/* projd.h — libprojd, the C client library of projd.
 *
 * A connection (projd_conn) is one nng REQ socket dialed to the daemon, with
 * HELLO/WELCOME done inside projd_connect. Everything on it is thread-safe:
 * many threads may call projd_project (or any other call) on one connection
 * at once; each call uses its own nng context, so requests from different
 * threads are in flight together and replies pair with their requests.
 * The exception is projd_close, which frees the connection: every other
 * thread's call on it must have returned first (requests still outstanding
 * are its to finish, below). A call that returns after it would use freed
 * memory (the Python binding serializes close against its calls).
 *
 * Errors. Every call that can fail returns 0 or an error code and, when `e`
 * is not NULL, fills *e with the same code and a one-line message:
 *   code > 0   a pj_status (protocol/wire.h) the daemon sent in an ERROR
 *              reply (msg is the daemon's text, verbatim), or the status of
 *              the first failing op of a DONE;
 *   code < 0   a local failure as a negative errno: -ETIMEDOUT (no reply
 *              within the timeout), -ECONNREFUSED / -ENOENT (nobody listens
 *              at the URL), -EPROTO (a malformed reply), -EMSGSIZE (request
 *              larger than the daemon's max_message_bytes), -EINVAL (bad
 *              argument), -ENOMEM, -ECANCELED (the request was freed or
 *              its connection closed before it completed), -EBADF (the
 *              connection is being closed), -ECONNRESET (the connection
 *              to projd was lost, see below); nng errors keep
 *              nng_strerror's text.
 * projd_strerror(code) names either kind. After a local failure (code < 0)
 * a projd_result says so too: its status and every op's status are that
 * code, failed_op is UINT32_MAX (nothing says what ran).
 *
 * A lost connection. The daemon keeps a connection's state (HELLO, buffers,
 * ring) for as long as its pipe lasts. Once the pipe is gone (projd exited
 * or restarted, or dropped this client), requests in flight fail with
 * -ECONNRESET, and every later call on the connection fails at once with
 * -ECONNRESET, "the connection to projd was lost": nothing is sent to a
 * daemon that came up since. The connection counts as lost from the first
 * of nng's notice that the pipe was removed and an nng request failing
 * because it went (connection reset or shut); requests waiting in nng for
 * a pipe then fail too, rather than at their timeout. Close it
 * (projd_close), open a new connection (projd_connect) and register the
 * buffers again: the new daemon knows none of the old ids.
 *
 * Timeouts. Every blocking call and every asynchronous request ends within
 * the connection's timeout (default 30 000 ms, projd_set_timeout_ms), but a
 * registration (projd_shm_create, projd_register_cuda_ipc), whose REGISTER
 * is sent once more after a timeout: within twice that.
 *
 * Typical use (a test against a daemon on a temporary socket):
 *
 *     projd_error e;
 *     projd_conn *c;
 *     if (projd_connect("ipc:///tmp/t/projd.sock", "test", &c, &e))
 *         fail("%s", e.msg);
 *     int layer = projd_layer_find(c, "o");
 *     const projd_layer *L = projd_layer_get(c, (uint32_t)layer);
 *     uint32_t k = L->k, n = L->n, m = 8;
 *     projd_buffer *x, *y;
 *     projd_shm_create(c, (size_t)m * k * 2, &x, &e);
 *     projd_shm_create(c, (size_t)m * n * 2, &y, &e);
 *     ... fill projd_buffer_ptr(x) with m rows of k bf16 ...
 *     projd_op op = {.layer = layer, .m = m, .n = n,
 *                    .x_buf = projd_buffer_id(x), .x_ld = k,
 *                    .y_buf = projd_buffer_id(y), .y_ld = n};
 *     projd_result r;
 *     int rc = projd_project(c, &op, 1, 0, &r, &e);   // rc == PJ_OK
 *     ... read projd_buffer_ptr(y) ...
 *     projd_buffer_release(x, NULL);
 *     projd_buffer_release(y, NULL);
 *     projd_close(c);
 */
#ifndef PROJD_H
#define PROJD_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PROJD_DEFAULT_TIMEOUT_MS 30000
#define PROJD_RESULT_MAX_OPS     64

typedef struct projd_error {
    int code;       /* 0, a pj_status (> 0) or a negative errno */
    char msg[1024]; /* one line, "" when code is 0 */
} projd_error;

typedef struct projd_conn projd_conn;
typedef struct projd_buffer projd_buffer;
typedef struct projd_request projd_request;

/* One projection: y[m x n] = x[m x k] @ W[:n]^T (PROTOCOL.md, PROJECT).
 * Offsets in bytes, strides (x_ld, y_ld) in bf16 elements; op_flags 0. */
typedef pj_op projd_op;

/* What the daemon said in WELCOME: version, backend (1 cpu, 2 cuda), device
 * uuid, limits (max_m, max_ops_per_request, max_buffers, max_message_bytes),
 * layers (name, n, k, format — index = the layer number requests use) and
 * the m values with captured graphs. Its layers[] holds the first 64
 * layers only (n_layers); projd_layer_count / projd_layer_get give every
 * one of them (a daemon serves up to 1024). Use those, not the struct's
 * n_layers_all / layers_all or wire.h's pj_welcome_layers: a libprojd.so.1
 * older than 0.3 has no such fields, and the functions fail to bind there
 * (PROJD_1.2) where the fields would read other memory. */
typedef pj_welcome projd_info;

/* One served layer: name, n (rows a request may use), k, format. */
typedef pj_wire_layer projd_layer;

/* Outcome of one PROJECT. */
typedef struct projd_result {
    int32_t status;     /* PJ_OK, or the first failing status */
    uint32_t n_ops;     /* ops in the request */
    uint32_t failed_op; /* first failing op, UINT32_MAX when none or not about one op */
    uint64_t queue_ns;  /* daemon: received -> started (0 when it answered ERROR) */
    uint64_t exec_ns;   /* daemon: started -> finished */
    uint64_t total_ns;  /* client: submitted -> reply received */
    /* Status and engine of each op, for the first PROJD_RESULT_MAX_OPS ops
     * (failed_op covers all of them). After an ERROR reply (the request
     * refused whole, nothing ran) every op carries the request's status. */
    pj_op_result ops[PROJD_RESULT_MAX_OPS];
} projd_result;

/* ---- connection ---------------------------------------------------------- */

/* Dials url (NULL or "": the default of protocol/sockpath.h: $PROJD_SOCKET,
 * else ipc:///run/projd/projd.sock when it exists, else the caller's own
 * ipc://$XDG_RUNTIME_DIR/projd/projd.sock (or ipc:///tmp/projd-<uid>/
 * projd.sock) when it exists, else the only /run/projd/projd-<N>.sock
 * listened on (several: -ENOTUNIQ, naming them), else the caller's own
 * again), says HELLO as `name` (NULL:
 * "libprojd"; cut to 63 bytes) and reads WELCOME. On success *out is a
 * connection the caller closes with projd_close. Nobody listening is
 * reported with -ENOENT ("no socket file at PATH") at once, or with
 * -ECONNREFUSED after 1.5 s of retries when the socket file is there (a
 * crashed daemon's stale file; the retries ride out the ~100 ms in which a
 * live projd replaces its listener, daemon/DAEMON.md); when the URL was
 * chosen by default, the message says which step chose it.
 * A daemon that refuses the connection fails it at once with its reason,
 * "projd refused this connection: ..." in the message: PJ_E_LIMIT (at its
 * connection limit, or the caller's uid at its share) or PJ_E_SHUTDOWN
 * (draining); one that closes it before WELCOME without saying why (the
 * caller's uid not allowed by its auth config; also a daemon with 16
 * refusals waiting, or from before it said why) with -ECONNRESET; one
 * that accepts the connection but does not answer
 * (stopped, overloaded) fails with -ETIMEDOUT after the default timeout
 * (projd_set_timeout_ms does not apply to the connect; projd_connect_timeout
 * bounds it). */
int projd_connect(const char *url, const char *name, projd_conn **out, projd_error *e);

/* projd_connect with the connect (HELLO, WELCOME and the retries)
 * bounded by timeout_ms (> 0, else -EINVAL) instead of the default
 * 30 000 ms; the connection's timeout (projd_set_timeout_ms) starts at
 * timeout_ms too. One dial is never cut short (closing a socket under a
 * dial can hang nng 1.5): a process that takes the connection and never
 * does nng's handshake (stopped by SIGSTOP) holds it for nng's 10 s, then
 * -ETIMEDOUT says so. Since libprojd.so.1 of PROJD_1.1. */
int projd_connect_timeout(const char *url, const char *name, int timeout_ms, projd_conn **out,
                          projd_error *e);

/* fork(): a connection belongs to the process that opened it. nng cannot
 * run in a child of a process that used it (it aborts the child), so in a
 * fork every call on an inherited connection or request, and any new
 * projd_connect, fails -ECHILD saying why; projd_close and
 * projd_request_free there return without freeing anything. Start worker
 * processes with exec (Python: multiprocessing's 'spawn' or 'forkserver'). */

/* Closes the connection. Buffers not yet released are released (their
 * pointers become invalid). Requests still outstanding complete with
 * -ECANCELED, and projd_close returns only once every one of their
 * callbacks has returned (those of ring requests run on the calling
 * thread, those of nng requests on nng's threads): after it returns
 * nothing touches c. Submissions made meanwhile (from a callback) fail with
 * -EBADF. The caller still frees the requests with projd_request_free,
 * which stays valid after close. Not from a callback of one of c's
 * requests (it would wait for itself), and not while another thread is
 * inside a call on c (a projd_shm_create or projd_ring_attach finishing
 * after close began would touch the freed connection). NULL is a no-op. */
void projd_close(projd_conn *c);

/* Timeout of every later call and request on c, in ms (> 0; a registration
 * may take twice it, above). Returns 0 or -EINVAL. */
int projd_set_timeout_ms(projd_conn *c, int ms);
int projd_get_timeout_ms(const projd_conn *c);

/* The URL this connection dialed (owned by c). */
const char *projd_url(const projd_conn *c);

/* WELCOME as received (owned by c, valid until projd_close). */
const projd_info *projd_info_get(const projd_conn *c);

/* Index of the layer called name among all of them, or -1. (A program
 * built against libprojd before 0.3 binds the PROJD_1 version, which
 * searches info's first 64 only, as it indexes info->layers with it.) */
int projd_layer_find(const projd_conn *c, const char *name);

/* How many layers the daemon serves (every one, past info's 64). */
uint32_t projd_layer_count(const projd_conn *c);

/* Layer index (0 .. projd_layer_count - 1; owned by c, valid until
 * projd_close), or NULL past the last. */
const projd_layer *projd_layer_get(const projd_conn *c, uint32_t index);

/* "cpu", "cuda" or "unknown". */
const char *projd_backend_name(int backend);

/* "bf16", "z12", "split" or "unknown" (WELCOME's layer format). */
const char *projd_format_name(int format);

/* Name of a code from projd_error: "OK", "E_BOUNDS" (pj_status), or
 * strerror's text for a negative errno. */
const char *projd_strerror(int code);

/* ---- buffers --------------------------------------------------------------- */

/* Creates a host shared-memory buffer of size bytes (shm_open of a unique
 * "/projd-<pid>-<counter>-<random>", ftruncate, mmap read-write, zeroed) and
 * registers it. The shm name is unlinked as soon as the daemon has mapped it,
 * so nothing is left in /dev/shm if the client dies. A REGISTER that gets no
 * reply within the timeout is sent once more as a RETRY (the daemon answers
 * it with the registration the first made, if it made one: PROTOCOL.md), so
 * this call may take up to twice the timeout before -ETIMEDOUT. *out is
 * owned by the caller until projd_buffer_release (or projd_close). */
int projd_shm_create(projd_conn *c, size_t size, projd_buffer **out, projd_error *e);

/* Unregisters (when the connection is open), unmaps and frees the buffer.
 * Returns the unregister status (-ECONNRESET, with the buffer freed, when
 * the connection to the daemon was lost); the local resources are freed in
 * any case. NULL is a no-op. projd_close frees the connection's buffers
 * itself: after it, a buffer handle must not be passed to any function
 * (release them before closing, or not at all). */
int projd_buffer_release(projd_buffer *b, projd_error *e);

void *projd_buffer_ptr(const projd_buffer *b);
uint32_t projd_buffer_id(const projd_buffer *b);
size_t projd_buffer_size(const projd_buffer *b);

/* Registers a CUDA IPC memory handle (of the allocation's base) on the
 * device with the given 16-byte UUID; *id receives the buffer id. The caller
 * keeps the allocation alive until projd_unregister. A REGISTER that gets no
 * reply within the timeout is sent once more as a RETRY, as
 * projd_shm_create's is, which the daemon answers with what the first
 * registered; the call may take up to twice the timeout. When the RETRY
 * times out too (a daemon stalled that long), the daemon may still
 * register the allocation later, under an id the caller never learns,
 * until the connection closes: close it after such a -ETIMEDOUT to be
 * sure. (A shm buffer's name is gone by then, so it cannot be.) */
int projd_register_cuda_ipc(projd_conn *c, const uint8_t handle[PJ_WIRE_IPC_HANDLE_SIZE],
                            const uint8_t uuid[PJ_WIRE_UUID_SIZE], uint64_t size, uint32_t *id,
                            projd_error *e);

/* Releases a buffer id (from projd_register_cuda_ipc, or any raw id). */
int projd_unregister(projd_conn *c, uint32_t id, projd_error *e);

/* ---- projections ----------------------------------------------------------- */

/* Runs n ops in order and waits for DONE. flags are PJ_PF_* (protocol/wire.h);
 * WAIT_EVENT and SIGNAL_EVENT need projd_project_events. res may be NULL.
 * Returns 0, the daemon's status (ERROR code or first failing op), or a
 * negative errno. The request is checked locally only for what cannot be
 * sent (a message over max_message_bytes: -EMSGSIZE); everything else is
 * the daemon's to judge. */
int projd_project(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags, projd_result *res,
                  projd_error *e);

/* Completion callback of an asynchronous request. It runs once per request,
 * on one of nng's threads or the ring's reaper thread, never on the
 * submitting thread; except on the thread calling projd_request_free or
 * projd_close for a ring request it completes before its reply, and on the
 * thread calling projd_request_free for an nng request whose cancel landed
 * while its send completed. It runs after the result is
 * available to projd_request_result and before projd_request_wait returns.
 * It must not block for long (it holds up nng's thread); it may call
 * projd_request_result, projd_request_poll and projd_request_free on its own
 * request (a free there takes effect when the callback returns), and may
 * submit new requests. A blocking call (projd_project, projd_ping, ...)
 * from a ring request's callback goes over nng, as the reaper that would
 * take its reply off the ring is the thread waiting for it. On nng's
 * threads (a request without a ring) a blocking call, or a
 * projd_request_wait on an unfinished request, holds the thread until
 * the reply, which needs one of nng's threads (nng 1.5 has twice the
 * online CPUs, at most 16): at most half of them may be in such calls
 * at once, and one more fails -EDEADLK at once instead of risking that
 * no thread is left to complete anything. Submit from the callback with
 * projd_project_async instead. */
typedef void (*projd_callback)(projd_request *req, void *arg);

/* Submits n ops and returns with *req (caller frees with
 * projd_request_free). cb may be NULL (then use poll or wait). The ops are
 * copied; the buffers must stay registered until the request completes.
 * A submission error (bad argument, message too big, no memory) is returned
 * here and no request is made. Over nng the call does not wait for the
 * daemon. On a ring (projd_ring_attach, or $PROJD_RING set when the
 * connection was made) a submission while all of its slots are in flight
 * waits for one to come free, up to the connection's timeout, and fails
 * -ETIMEDOUT when none does (no request is made then). */
int projd_project_async(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags,
                        projd_callback cb, void *arg, projd_request **req, projd_error *e);

/* The general form: with IPC event handles for PJ_PF_WAIT_EVENT (wait_event)
 * and PJ_PF_SIGNAL_EVENT (signal_event); each must be non-NULL exactly when
 * its flag is set. req == NULL makes it blocking (then res and e receive the
 * outcome, as projd_project). */
int projd_project_events(projd_conn *c, const projd_op *ops, size_t n, uint32_t flags,
                         const uint8_t *wait_event, const uint8_t *signal_event, projd_callback cb,
                         void *arg, projd_request **req, projd_result *res, projd_error *e);

/* 1 when the request has completed (callback returned), else 0. */
int projd_request_poll(projd_request *req);

/* Waits until the request completed (bounded by the connection timeout at
 * submission) and returns its outcome as projd_project does; res and e may
 * be NULL. May be called more than once, from any thread but the callback
 * (from the request's own callback, or from any ring request's callback,
 * it returns -EDEADLK; from other callbacks, see projd_callback). */
int projd_request_wait(projd_request *req, projd_result *res, projd_error *e);

/* The outcome of a completed request (same return as projd_request_wait);
 * -EBUSY when it has not completed. Callable from the callback. */
int projd_request_result(projd_request *req, projd_result *res, projd_error *e);

/* Cancels the request if it is still running (its callback then runs with
 * -ECANCELED, on either transport), waits for its callback, and frees it.
 * A callback that frees its own request may do so in that run too: it is
 * the same free. NULL is a no-op. */
void projd_request_free(projd_request *req);

/* ---- the shared-memory ring (fast path) --------------------------------------- */

/* Attaches a shared-memory ring of `slots` slots (0: 64; a power of two from
 * 2 to 4096) to the connection (protocol/PROTOCOL.md, "The ring"). From then
 * on PROJECT and PING go through it, the rest stays on nng, and everything
 * else (results, errors, timeouts, callbacks) is as before. A reaper thread
 * completes the requests; it spins for as long as the daemon's poller does
 * (ring.spin_us, 50 µs by default; $PROJD_RING_SPIN_US overrides) before it
 * sleeps. A thread waiting for a request it made without a callback
 * (projd_project, projd_request_wait) takes its own reply off the ring
 * while it spins, for up to 1 ms ($PROJD_RING_WAIT_US; none where
 * nothing spins), then sleeps: a reply that comes after the reaper went to
 * sleep then costs no wake-up of the reaper and then of the caller. Callbacks
 * still run on the reaper only. At most `slots` requests are in flight on the ring; one more
 * waits for a slot (within its timeout); past the daemon's
 * limits.max_inflight_per_conn (32 by default) the daemon leaves requests in
 * the ring until earlier ones are answered, so they wait there (within their
 * timeouts) rather than fail E_LIMIT. So a thread's requests enter the
 * ring in the order it submits them; a callback that submits on a full
 * ring, or makes a blocking call, sends that request over nng instead (the
 * callback runs on the reaper, which would have to free the slot or take
 * the reply itself). A daemon that refuses
 * the ring answers E_TYPE (older daemons, ring.enabled = 0), E_LIMIT or
 * E_REGISTER, and the connection stays usable over nng (an attach that
 * fails here once sent, a timeout, may have left the ring attached there:
 * later attaches on the connection fail -EALREADY saying so; connect
 * again for a ring). If the daemon
 * drops the ring later, pending requests fail with -ECONNRESET and later
 * ones go over nng (unless the connection was lost: then they fail too).
 * $PROJD_RING=1 (or a slot count) makes projd_connect
 * attach one, staying on nng when refused. Beside the ring it makes the
 * ring's wake FIFO (protocol/ring.h, pj_ring_wake_path; unlinked once
 * attached), through which a request that finds the daemon's poller asleep
 * also wakes the daemon's loop. */
int projd_ring_attach(projd_conn *c, uint32_t slots, projd_error *e);

/* 1 while requests of c go through a ring, else 0. */
int projd_ring_active(const projd_conn *c);

/* ---- other requests ---------------------------------------------------------- */

/* STATS: *json receives the daemon's JSON text, NUL-terminated, malloc'd
 * (caller frees with free()). */
int projd_stats_json(projd_conn *c, char **json, projd_error *e);

/* PING with an 8-byte payload; checks the PONG echoes it. */
int projd_ping(projd_conn *c, projd_error *e);

/* Sends msg (len bytes, a whole protocol message, header included, sent as
 * is) and returns the raw reply: *reply malloc'd (caller frees), *reply_len
 * its length. For tests that send malformed messages on a live connection.
 * Local errors only: whatever the daemon replies is returned, not judged. */
int projd_call_raw(projd_conn *c, const void *msg, size_t len, void **reply, size_t *reply_len,
                   projd_error *e);

/* A fresh request id, as the library uses (unique per connection). */
uint64_t projd_next_req_id(projd_conn *c);

#ifdef __cplusplus
}
#endif

#endif
