/* backend.h — what executes projections: the interface every backend fills.
 *
 * A backend is a table of functions (pj_backend_ops) plus an instance
 * (pj_backend) that open() creates. The server (daemon/server.c) owns the
 * event loop and all connection state; it calls into the backend only from
 * the loop thread, except for the completion callback, which the backend may
 * invoke from any thread.
 *
 * Lifecycle, all calls from the loop thread:
 *   open(cfg, model)            load weights into the backend (upload, warm up)
 *   buffer_open / buffer_close  a client buffer registered / released
 *                               (buffer_close: on the closer's thread)
 *   stream_create / _destroy    one per connection, created at HELLO
 *   stream_client_waits         a closed connection's jobs behind client waits
 *   stream_lost                 ... and their client has exited
 *   submit(stream, job)         execute a validated job; done() later
 *   stats_json(obj)             add backend figures to the STATS reply
 *   close()                     after every job has completed
 *
 * Ordering: jobs submitted to one stream complete in submission order,
 * except a job the backend fails inside submit (done called before submit
 * returns: a dead device, a full or stalled lane), which may complete before
 * earlier ones still running; the server keeps no order of running jobs, and
 * replies may come in another order than requests (PROTOCOL.md). The
 * server submits at most b->stream_depth jobs to one stream before the
 * first of them completes (cpu: 1; a GPU stream may take many).
 *
 * Validation is the server's: every op handed to submit() has a known layer,
 * 1 <= m <= shapes.max_m, 1 <= n <= the layer's max_n, strides >= widths
 * (and, for m > 1, at most max_row_pitch bytes), and
 * x/y spans that lie inside their buffers (daemon/validate.h). A backend never
 * sees a request it must bound-check again.
 */
#ifndef PJ_BACKEND_H
#define PJ_BACKEND_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "daemon/model.h"
#include "protocol/wire.h"

typedef struct cJSON cJSON;
typedef struct pj_backend pj_backend;
typedef struct pj_backend_stream pj_backend_stream; /* defined by each backend */

/* A client buffer as the registry knows it, handed to buffer_open. */
typedef struct pj_buf_desc {
    uint8_t kind;               /* PJ_BUF_SHM or PJ_BUF_CUDA */
    uint64_t size;              /* bytes the client registered */
    void *host;                 /* PJ_BUF_SHM: the daemon's mapping of size bytes */
    const uint8_t *ipc_handle;  /* PJ_BUF_CUDA: PJ_WIRE_IPC_HANDLE_SIZE bytes */
    const uint8_t *device_uuid; /* PJ_BUF_CUDA: PJ_WIRE_UUID_SIZE bytes */
    uint32_t peer_uid;
    int32_t peer_pid;
} pj_buf_desc;

/* One op of a job, validated and resolved by the server. */
typedef struct pj_exec_op {
    uint32_t layer; /* index into model->layers */
    const pj_model_layer *L;
    uint32_t m, n, k;
    const void *x;             /* buffer address + x_off (host or device) */
    void *y;                   /* buffer address + y_off */
    uint64_t x_ld, y_ld;       /* row strides, elements */
    void *x_handle, *y_handle; /* what buffer_open returned (may be NULL) */
    uint64_t x_off, y_off;     /* bytes from the buffers' starts */
    uint64_t x_bytes, y_bytes; /* bytes the spans cover from x, y (pj_span_bytes) */
    int32_t status;            /* out: PJ_OK or a pj_status */
    uint16_t engine;           /* out: engine id (backend-defined) */
} pj_exec_op;

typedef struct pj_job pj_job;
/* Called once per job when it has finished (or failed), from any thread.
 * After it returns the backend must not touch the job. */
typedef void (*pj_job_done_fn)(pj_job *job);

typedef struct pj_job {
    uint32_t n_ops;
    pj_exec_op *ops;             /* executed in order; later ops may read
                                    what earlier ones wrote */
    uint32_t flags;              /* PROJECT flags, a subset of ops->project_flags */
    const uint8_t *wait_event;   /* PJ_PF_WAIT_EVENT: IPC event handle */
    const uint8_t *signal_event; /* PJ_PF_SIGNAL_EVENT */
    uint64_t start_ns, end_ns;   /* out: CLOCK_MONOTONIC, execution start/end */
    int32_t status;              /* out: PJ_OK or the first failing op's status */
    char err[160];               /* out: one line when status != PJ_OK */
    int fatal;                   /* out: the backend cannot go on (sticky device
                                    error): the daemon replies, then exits non-zero */
    pj_job_done_fn done;
    void *ctx; /* the server's */
} pj_job;

typedef struct pj_backend_ops {
    const char *name; /* "cpu", "cuda" */
    pj_backend_kind kind;
    uint32_t project_flags; /* PROJECT flags it implements (PJ_PF_*); others get PJ_E_FLAGS */
    uint32_t stream_depth;  /* jobs in flight per stream, >= 1 */

    /* Build the instance: b->ops/cfg/model are set by the caller, open fills
     * b->priv, b->device_uuid, b->device_name. The model outlives the
     * backend. Returns 0 or a negative errno with err set. */
    int (*open)(pj_backend *b, char *err, size_t errlen);
    /* Release everything; every job has completed and every stream and
     * buffer has been closed. */
    void (*close)(pj_backend *b);

    /* Make a registered buffer usable: *addr = the address ops use for byte
     * 0 (for PJ_BUF_SHM on the cpu backend: d->host), *handle = anything the
     * backend wants back (NULL is fine). Returns a pj_status (PJ_E_REGISTER
     * with err set when the buffer cannot be used). */
    int (*buffer_open)(pj_backend *b, const pj_buf_desc *d, void **addr, void **handle, char *err,
                       size_t errlen);
    /* The buffer is gone: no job in flight uses it any more. Called on the
     * closer's thread (daemon/closer.h), not the loop's, since it may wait
     * for the device; it may run while the loop calls any other op. */
    void (*buffer_close)(pj_backend *b, void *handle);
    /* 1 while work already answered (ACCEPT_REPLY) may still use the
     * buffer, so that buffer_close would have to wait for the device; the
     * registry then keeps it and closes it once this says 0. NULL: never. */
    int (*buffer_busy)(pj_backend *b, void *handle);

    /* Per-connection execution queue. 0 or a negative errno. */
    int (*stream_create)(pj_backend *b, pj_backend_stream **out, char *err, size_t errlen);
    /* The connection is gone. Jobs of it may still be on the device (work
     * answered at launch, or a closed connection's jobs whose replies go
     * nowhere): the backend must finish them without the stream. */
    void (*stream_destroy)(pj_backend *b, pj_backend_stream *s);
    /* How many of the stream's jobs are still on the device with their
     * wait for the client's event (WAIT_EVENT) not passed; a client that
     * exits before recording it leaves them there for good
     * (daemon/orphans.h). Loop thread; may ask the device. NULL: none
     * ever. */
    uint32_t (*stream_client_waits)(pj_backend *b, pj_backend_stream *s);
    /* A stream that stream_client_waits counted was found lost: its client
     * exited with those waits unpassed, so its jobs, and whatever is queued
     * behind them, never run (daemon/orphans.h). The backend should give
     * new streams other queues while it has any. Loop thread, once per
     * stream, before its stream_destroy. NULL: nothing to do. */
    void (*stream_lost)(pj_backend *b, pj_backend_stream *s);

    /* Start the job. Returns 0 and later calls job->done exactly once, or
     * returns a negative errno (nothing started, done never called).
     * -EAGAIN means "not now": the server keeps the job at the head of its
     * connection's queue and submits it again about a millisecond later
     * (the cuda backend puts off client waits while a buffer release waits
     * to start, CUDA.md); any other errno fails the job. */
    int (*submit)(pj_backend *b, pj_backend_stream *s, pj_job *job);

    /* Add the backend's figures (engines used, memory, workers) to obj. */
    void (*stats_json)(pj_backend *b, cJSON *obj);

    /* CLOCK_MONOTONIC ns since which the oldest job still on the backend
     * has been doing the backend's own work (not finished, even where the
     * reply went at launch), or 0 when none: how the systemd watchdog
     * tells a stuck device or worker from a quiet one. *client_wait (may
     * be NULL): since when the oldest job has been waiting for its
     * client's event (WAIT_EVENT), 0 when none; that time is not the
     * backend's own. Called on the loop; short locks only. NULL: never
     * stuck. */
    uint64_t (*oldest_job_ns)(pj_backend *b, uint64_t *client_wait);
} pj_backend_ops;

struct pj_backend {
    const pj_backend_ops *ops;
    const pj_config *cfg; /* the daemon's config (outlives the backend) */
    const pj_model *model;
    void *priv;                             /* the backend's own state */
    uint8_t device_uuid[PJ_WIRE_UUID_SIZE]; /* zeros on cpu */
    char device_name[128];
    /* The longest row stride, in bytes, of an op of m > 1 rows that the
     * backend can run, set by open (0: no limit): the cuda backend copies
     * strided rows with cudaMemcpy2DAsync, which refuses a pitch past the
     * device's memPitch. The server refuses such an op before any op of
     * its request runs (validate.h). */
    uint64_t max_row_pitch;
    /* Jobs of one stream the server hands over before the first of them
     * completes: ops->stream_depth (set before open), unless open sets
     * another (the cpu backend's test knob PROJD_CPU_STREAM_DEPTH). */
    uint32_t stream_depth;
    /* pj_backend_set_fatal's; read only through pj_backend_fatal. */
    void (*fatal)(void *arg, const char *msg);
    void *fatal_arg;
};

/* The server's hook for a backend that can run nothing more (a sticky
 * device error): the daemon must stop even when every job that met the
 * error was answered already (ACCEPT_REPLY answers at launch). fn (NULL:
 * none) runs on the backend's thread and must only hand the news to the
 * loop. Once pj_backend_set_fatal(b, NULL, NULL) returns, fn is not
 * running and will not run. */
void pj_backend_set_fatal(pj_backend *b, void (*fn)(void *arg, const char *msg), void *arg);

/* Backends: report that b can run nothing more (msg: one line). */
void pj_backend_fatal(pj_backend *b, const char *msg);

/* The built-in backends. pj_backend_cuda_ops and pj_backend_cuda_probe come
 * from daemon/backend_cuda*.c in CUDA builds. probe returns the number of
 * visible devices (0 with why set when none or the driver is missing). */
const pj_backend_ops *pj_backend_cpu_ops(void);
#ifdef PJ_HAVE_CUDA
const pj_backend_ops *pj_backend_cuda_ops(void);
int pj_backend_cuda_probe(char *why, size_t whylen);
/* Is the device cfg names (device.uuid, else device.index) visible? 0, or
 * -ENODEV with err as a start would say it. Makes no CUDA context. */
int pj_backend_cuda_check_device(const pj_config *cfg, char *err, size_t errlen);
#endif

/* Choose the backend for want (auto/cpu/cuda). On success *out is set and
 * why says why this one ("auto: no GPU visible (...)"). Returns 0, or
 * -ENODEV / -ENOTSUP with err set (cuda asked for but not built or no GPU). */
int pj_backend_select(pj_backend_kind want, const pj_backend_ops **out, char *why, size_t whylen,
                      char *err, size_t errlen);

/* For --check-config: what the chosen backend (ops, from
 * pj_backend_select) would refuse about cfg's device before loading
 * anything: the cuda backend's device.uuid / device.index among the
 * visible devices; nothing for the cpu backend. 0, or -ENODEV with err. */
int pj_backend_check_device(const pj_backend_ops *ops, const pj_config *cfg, char *err,
                            size_t errlen);

/* When auto chose the cpu backend (ops, with pj_backend_select's why) for
 * a configuration that sets keys only the cuda backend reads (device.uuid,
 * device.index, the layers' engine and graph_rows): 1, with the sentence
 * saying so in out ("backend <why>; the configuration's device.uuid
 * GPU-..., 2 layers' engines are for the cuda backend and ignored");
 * else 0. The start warns with it and --check-config notes it: a GPU the
 * configuration names that is not usable must not pass for a host
 * without one. */
int pj_backend_cpu_ignores(const pj_config *cfg, const pj_backend_ops *ops, const char *why,
                           char *out, size_t len);

/* Allocate and open an instance. Returns 0 or a negative errno (err set). */
int pj_backend_create(const pj_backend_ops *ops, const pj_config *cfg, const pj_model *model,
                      pj_backend **out, char *err, size_t errlen);
/* Close and free (NULL is fine). */
void pj_backend_destroy(pj_backend *b);

#endif
