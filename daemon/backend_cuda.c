/* backend_cuda.c — the cuda backend: one device, weights uploaded once in
 * their stored format, CUDA graphs per (layer, m), CUDA IPC and pinned host
 * buffers, completion without blocking the loop. daemon/CUDA.md is the
 * design note (lanes, graph rebinding, IPC rules, errors, start-up report).
 *
 * Lanes. open() builds a fixed pool of lanes (PROJD_CUDA_LANES, default 4):
 * a non-blocking stream, the engines' per-stream context (cuBLAS handles and
 * workspace), one split-K workspace for all layers (sized for the widest),
 * staging buffers for x and y, and one graph per (layer, m in shapes.m).
 * Each connection is given the lane with the fewest connections, so up to
 * that many connections each have a stream of their own; beyond it
 * connections share (each keeps its own order). Capturing at open rather
 * than per connection keeps HELLO cheap.
 *
 * Completion. Each lane has a thread that waits, in submission order, on an
 * event recorded after each job (spinning briefly, then blocking) and calls
 * job->done from there; the server hands that to its loop. A CUDA error seen
 * there fails the job; a sticky one also sets job->fatal.
 *
 * Threads: requests are submitted on the loop thread; the completion
 * threads finish them; buffer releases (buffer_close, the IPC mappings'
 * closes) run on the server's closer thread, and the start-up's capture
 * and warm-up on a thread per lane.
 */
#include "daemon/backend_cuda.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include <cuda_runtime_api.h>

#include "daemon/closer.h"
#include "daemon/envknob.h"
#include "daemon/graphs_cuda.h"
#include "daemon/loadturn.h"
#include "daemon/tablepick.h"
#include "daemon/log.h"
#include "daemon/memplan.h"
#include "daemon/notify.h"
#include "daemon/rowclass.h"
#include "daemon/startsig.h"
#include "kernels/bf16.h"
#include "kernels/dispatch.h"
#include "kernels/engine.h"
#include "protocol/ring.h" /* pj_cpu_relax */
#include "kernels/engupload.h"

/* Error lines are cut to their buffers (the job's err is 160 bytes) on
 * purpose: one line, the CUDA error's name first. */
#pragma GCC diagnostic ignored "-Wformat-truncation"

#define CU_MAX_LANES     64
#define CU_DEFAULT_LANES 4
#define CU_RING          4096 /* jobs in flight per lane */
#define CU_EVCACHE       16   /* IPC events kept open per connection */
#define CU_SPIN_US       100  /* completion: poll this long before blocking */
#define CU_CLOSE_WAIT_MS 30000
#define CU_VALIDATE_TOL  1e-3 /* rebound graph vs direct launch, relative L2 */
#define CU_MAX_S         PJ_CFG_MAX_SHAPES
/* How long a REGISTER waits for the same allocation's previous mapping to
 * be closed before it is refused. */
#define CU_IPC_REOPEN_WAIT_MS 2000
/* While a release waits for the lanes' client waits to pass, new ones are
 * taken on the host (release_begin), unless a lane with a wait pending has
 * finished no job for this long: a client that died, or holds its event
 * for long, keeps the release out however long, and putting the others off
 * would only slow them. */
#define CU_RELEASE_HOPELESS_MS 1000
/* Launch budget. Behind a wait that has not passed, a stream queues 1021
 * launches (kernels, copies, graph replays, waits, records of an
 * interprocess event, records of a cudaEventBlockingSync event; records
 * of a plain event are free) and, apart from those, 56 records of a
 * BlockingSync event; the call past either limit blocks its caller until
 * the wait passes (measured on the H200: bench/results/2026-12-04-s37/
 * visit2, 2026-12-04-s38/visit2 and visit5; per stream). The caller is
 * the event loop, so a client holding its event while it sends requests
 * answered at launch would stop the daemon for every client. Each job
 * records one BlockingSync event (its slot's, which the completion thread
 * sleeps on), so where a client wait is ahead on a lane the lane takes a
 * job only while it stays within CU_LANE_JOBS jobs and CU_LANE_LAUNCHES
 * launches, a job charged CU_JOB_LAUNCHES (its wait, its slot's record,
 * the client's record) and CU_OP_LAUNCHES an op (two staging copies and
 * up to eight engine launches; test_cuda_backend --q measures the forms,
 * bench/results/2026-12-04-s38/visit10). Past
 * that a job is put off while the lane moves, and refused with E_LIMIT
 * once it has finished nothing for CU_RELEASE_HOPELESS_MS. */
#define CU_LANE_JOBS     PJ_CUDA_LANE_JOBS
#define CU_LANE_LAUNCHES PJ_CUDA_LANE_LAUNCHES
#define CU_JOB_LAUNCHES  PJ_CUDA_JOB_LAUNCHES
#define CU_OP_LAUNCHES   PJ_CUDA_OP_LAUNCHES

/* daemon/fault.cu: a kernel that faults (test only, PROJD_CUDA_FAULT_AFTER
 * or, in the start-up warm-up, PROJD_CUDA_FAULT_WARM),
 * one that holds the stream for ns (test only, PROJD_CUDA_STALL_AFTER). */
int pj_cuda_fault_launch(cudaStream_t s);
int pj_cuda_stall_launch(cudaStream_t s, unsigned long long ns);

/* ---- state ------------------------------------------------------------------ */

typedef struct cu_ipc {
    struct cu_ipc *next;
    uint8_t handle[PJ_WIRE_IPC_HANDLE_SIZE];
    void *dev;
    size_t alloc_size; /* bytes from dev to the allocation's end */
    uint32_t refs;
    /* refs reached 0: 1 while the closer waits to close it (a REGISTER of
     * the same handle then takes it back), 2 once cudaIpcCloseMemHandle runs */
    int closing;
    uint32_t close_gen; /* which ipc_put's wait may close it */
    struct cu_state *st;
} cu_ipc;

/* What buffer_open returns as the handle. */
typedef struct cu_buf {
    uint8_t kind; /* PJ_BUF_SHM / PJ_BUF_CUDA */
    void *host;   /* SHM: the daemon's mapping */
    void *dev;    /* address kernels and copies use */
    uint64_t size;
    cu_ipc *ipc;
    atomic_uint gpu_refs; /* queued GPU work that uses it */
} cu_buf;

typedef struct cu_pend {
    pj_job *job; /* NULL once answered (accepted at launch) */
    cudaEvent_t ev;
    cu_buf **bufs;
    uint32_t n_bufs;
    int32_t status; /* failure found at submit, else PJ_OK */
    int fatal;
    uint32_t failed_op;
    char err[160];
    uint64_t t_submit;
    /* WAIT_EVENT: wev is recorded right after the wait on the client's
     * event, so that the watchdog can tell time spent waiting for the
     * client (wev not done) from the daemon's own work, which it counts
     * from t_own (when it first saw wev done; t_submit without a wait). */
    cudaEvent_t wev;
    int client_wait;
    uint64_t t_own;
    /* WAIT_EVENT: the connection whose event the lane waits on (only
     * compared, never followed; stream_destroy clears the ones that name
     * it) and that event, as the connection's cache holds it. Written on
     * the loop thread only. */
    pj_backend_stream *wbs;
    cudaEvent_t wait_ev;
    uint64_t wait_serial; /* which opening of it (conn_event's serial) */
    uint32_t launches;    /* charged to its lane's budget (CU_LANE_LAUNCHES) */
    /* ev could not be recorded: the completion thread waits for the whole
     * stream instead (ev holds an earlier, finished record) */
    int sync_stream;
} cu_pend;

typedef struct cu_state cu_state;

typedef struct cu_lane {
    cu_state *st;
    uint32_t idx;
    cudaStream_t s;
    pj_eng_stream *es;
    /* One workspace for every layer: the lane's launches are ordered on
     * its stream, which is all that sharing one needs (engine.h), and it
     * is sized for the widest layer (pj_eng_ws_init: the need grows with
     * N). One per layer was ~16 MB a layer a lane at N = 8192. */
    pj_eng_ws ws;
    uint16_t *sx, *sy; /* staging: max_m x max K, max_m x max N */
    size_t sx_bytes, sy_bytes;
    pj_cgraph (*graphs)[CU_MAX_S]; /* [layer][shape], st->n_layers rows */
    uint32_t n_conns;
    uint32_t n_lost; /* streams of it lost (stream_lost): held for good. Loop thread. */
    /* completion */
    pthread_t th;
    int th_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;
    uint32_t head, count;
    uint32_t launches; /* its jobs' charges (under mu) */
    uint64_t t_moved;  /* now_ns() when a job last left the ring (under mu) */
    cu_pend ring[CU_RING];
    atomic_ullong jobs, busy_ns;
} cu_lane;

/* st->layers holds the model's layers at their own index, then their row
 * classes: a class is a copy of its layer (the same device arrays, owned
 * by the layer) whose graphs are captured at fewer rows, so that a request
 * of n rows computes the smallest class's rows >= n, not all max_n. */
typedef struct cu_layer {
    pj_eng_layer L;
    pj_engup_mem mem;        /* the device arrays behind L */
    uint32_t graph_n;        /* n the graphs serve: max_n, or the class's rows */
    char force[PJ_CFG_NAME]; /* forced engine name ("" none) */
    char force_knobs[96];
    int is_class;                  /* a row class: L and mem are its layer's */
    pj_rowclass_set rc;            /* a model layer's classes (rc.n of them), */
    uint32_t cls[PJ_ROWCLASS_MAX]; /* at these indices of st->layers */
} cu_layer;

/* The engine of one (layer, m), the same on every lane. */
typedef struct cu_shape {
    int step; /* pj_eng_choose: 0 forced, 1 table, 2 default, 3 cublas; -1 none */
    pj_eng_kind k;
    pj_eng_knobs kn;
    int have_graph;      /* captured on every lane */
    int patch_ok;        /* rebinding validated on every lane */
    uint32_t bind_fails; /* rebinds to clients' buffers refused in a row (run_op) */
    char note[200];      /* why not, or what was refused */
    double check_rel;    /* worst relative error, rebound graph vs direct */
} cu_shape;

typedef struct cu_report {
    double t_device, t_upload, t_lanes, t_capture, t_validate, t_warm, t_total;
    double t_lanes_wall; /* capture + validate + warm-up, lanes side by side */
    uint32_t warmed;     /* direct launches made at start (warm_lane) */
    size_t mem_total, mem_free0;
    size_t weights_stored, weights_bf16_copies;
    size_t used_weights, used_lanes, used_graphs, used_total;
    uint32_t graphs, graphs_patch;
    char table[PJ_TABLEPICK_PATH + 384]; /* a path and what it holds */
    int table_entries;
} cu_report;

struct pj_backend_stream {
    cu_lane *ln;
    struct {
        uint8_t h[PJ_WIRE_IPC_HANDLE_SIZE];
        cudaEvent_t ev;
        uint64_t used;
        /* this opening's number: a handle value the driver gives again
         * after an eviction's destroy names another event */
        uint64_t serial;
    } ev[CU_EVCACHE];
    uint32_t n_ev;
    uint64_t tick;
    uint64_t opened; /* events opened so far (the serials) */
    int lost;        /* stream_lost was called */
};

struct cu_state {
    pj_backend *b;
    int dev;
    /* dev's context made (select_device): before it, a start that fails
     * calls nothing that would make one on device 0, another instance's */
    int ctx_ready;
    struct cudaDeviceProp prop;
    pj_dev_limits lim;
    char uuid_str[48];
    uint32_t n_layers;   /* uploaded so far, row classes after the model's */
    uint32_t cap_layers; /* the model's and their classes: what layers and shapes hold */
    cu_layer *layers;
    uint32_t n_shapes;
    uint32_t shape_m[CU_MAX_S];
    cu_shape (*shapes)[CU_MAX_S]; /* [layer][shape] */
    pj_tune_table *table;
    char env_force[PJ_CFG_NAME], env_knobs[96];
    int no_patch;
    /* $PROJD_CUDA_ROW_CLASSES=0 (measurements only): no graphs below max_n,
     * every request computes its layer's max_n rows (before session 61). */
    int no_row_classes;
    long fault_after, fault_count; /* test only: fault after that many jobs */
    int fault_warm;                /* test only: fault in lane 0's warm-up */
    long stall_after, stall_count; /* test only: hold the stream after that many jobs */
    long binds_to_refuse;          /* test only: rebinds to clients' buffers to refuse */
    uint64_t stall_ns;
    /* A release waits to start or runs (release_begin): WAIT_EVENT jobs
     * wait for their client's event on the host, not on a lane. Tests may
     * set $PROJD_CUDA_RELEASE_DEFER=0 to compare without. */
    atomic_int release_want;
    int release_defer;
    atomic_ullong waits_put_off, waits_on_host;
    atomic_ullong queue_put_off, queue_refused; /* the launch budget */
    /* CU_LANE_JOBS and CU_LANE_LAUNCHES, or $PROJD_CUDA_LANE_JOBS and
     * $PROJD_CUDA_LANE_LAUNCHES (tests only: values past 56 and 1021 turn
     * the budget off, to measure what a job queues). */
    uint32_t lane_jobs, lane_launches;
    uint32_t max_m, max_k, max_n;
    cu_lane *lanes[CU_MAX_LANES];
    uint32_t n_lanes;
    uint64_t spin_ns;
    uint64_t
        idle_spin_ns; /* a completion thread's poll for its next job ($PROJD_CUDA_IDLE_SPIN_US) */
    /* The loop opens IPC allocations; the closer thread (daemon/closer.h)
     * closes them, so the list is shared under ipc_mu. */
    pthread_mutex_t ipc_mu;
    pthread_cond_t ipc_cv;   /* an entry left the list */
    pthread_mutex_t wait_mu; /* a release vs a WAIT_EVENT submit (release_begin) */
    cu_ipc *ipcs;
    uint32_t n_ipc_open;
    pthread_mutex_t ref_mu;
    pthread_cond_t ref_cv;
    atomic_int dead, dead_claimed;
    char dead_msg[160];
    atomic_ullong jobs, ops, accepted, failed, fatal_errors;
    atomic_ullong path_ops[5];
    cu_report rep;
};

/* ---- small helpers ------------------------------------------------------------------ */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static double ms_since(uint64_t t0)
{
    return (double)(now_ns() - t0) / 1e6;
}

static double mib(size_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

/* An integer from the environment in lo..hi (lo >= 0), else def; a value
 * that is set but not such an integer is named in a warning (these are
 * debugging and tuning switches: a typo should not pass unnoticed, nor stop
 * the daemon). The rule is every knob's (daemon/envknob.h). */
static long env_long(const char *name, long def, long lo, long hi)
{
    uint64_t v = (uint64_t)def;
    pj_envknob_u64(name, (uint64_t)lo, (uint64_t)hi, &v);
    return (long)v;
}

static void uuid_format(const uint8_t u[16], char *out, size_t cap)
{
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

/* "cudaErrorX: text" */
static void ce_text(cudaError_t ce, char *out, size_t cap)
{
    snprintf(out, cap, "%s: %s", cudaGetErrorName(ce), cudaGetErrorString(ce));
}

/* Errors after which the context is unusable. */
static int ce_sticky(cudaError_t ce)
{
    switch (ce) {
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorECCUncorrectable:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorNvlinkUncorrectable:
    case cudaErrorContextIsDestroyed:
    /* driver_types.h: the process must terminate and relaunch after
     * these too (MPS's client termination among them: projd runs under
     * MPS). */
    case cudaErrorContained:
    case cudaErrorTensorMemoryLeak:
    case cudaErrorMpsClientTerminated:
    case cudaErrorExternalDevice:
        return 1;
    default:
        return 0;
    }
}

/* The thread's last error cleared, then read again: cudaSuccess unless it
 * persists, as an error that lost the context does (every later call
 * returns it). */
static cudaError_t persisting_error(void)
{
    cudaGetLastError();
    return cudaGetLastError();
}

/* After a failed call: is the context gone? Clears a non-sticky error
 * (a sticky one is returned by every later call, including these). */
static cudaError_t sticky_check(cudaStream_t s)
{
    cudaError_t e = persisting_error();
    if (e != cudaSuccess)
        return e;
    e = cudaStreamQuery(s);
    if (e != cudaSuccess && e != cudaErrorNotReady && ce_sticky(e))
        return e;
    if (e != cudaSuccess && e != cudaErrorNotReady)
        cudaGetLastError();
    return cudaSuccess;
}

/* The first caller writes the message, then publishes dead: a thread that
 * sees dead set (cu_submit on the loop) reads a whole message. The server
 * is told through the backend's fatal hook, since the jobs that met the
 * error may have been answered already (ACCEPT_REPLY). */
static void mark_dead(cu_state *st, const char *msg)
{
    if (atomic_exchange(&st->dead_claimed, 1))
        return;
    snprintf(st->dead_msg, sizeof st->dead_msg, "%s", msg);
    atomic_store(&st->dead, 1);
    pj_log_err("cuda: sticky device error, the context is lost: %s", msg);
    if (st->b)
        pj_backend_fatal(st->b, st->dead_msg);
}

/* After a call that failed with ce (its text t): 1, and the daemon ended
 * as for a job's fault (mark_dead), when the context is gone: ce is one of
 * the listed errors, or a second read of the thread's last error still
 * returns one (a context lost another way, cudaErrorUnknown after a GPU
 * Xid, reads the same on every later call). A plain failure is cleared and
 * left to the caller. Used where no job's submit would check (a
 * completion, a REGISTER): without it the daemon reported itself healthy
 * until some request met the lost context. */
static int dead_after(cu_state *st, cudaError_t ce, const char *t)
{
    if (!ce_sticky(ce) && persisting_error() == cudaSuccess)
        return 0;
    mark_dead(st, t);
    return 1;
}

/* ---- probe ------------------------------------------------------------------------ */

int pj_backend_cuda_probe(char *why, size_t whylen)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        const char *hint = ce == cudaErrorInsufficientDriver
                               ? " (no NVIDIA driver is loaded, or it is older than this build's "
                                 "CUDA runtime)"
                           : ce == cudaErrorNoDevice ? " (CUDA_VISIBLE_DEVICES may hide them)"
                                                     : "";
        snprintf(why, whylen, "cudaGetDeviceCount: %s%s", t, hint);
        cudaGetLastError();
        return 0;
    }
    if (n <= 0)
        snprintf(why, whylen, "the CUDA driver reports no device");
    return n > 0 ? n : 0;
}

/* ---- device ------------------------------------------------------------------------ */

/* The device cfg names (device.uuid, else device.index) among the visible
 * ones: *dev, or -ENODEV with err saying why. Makes no context. */
static int find_device(const pj_config *cfg, int *out, char *err, size_t errlen)
{
    int n = 0;
    cudaError_t ce = cudaGetDeviceCount(&n);
    if (ce != cudaSuccess || n <= 0) {
        char t[200];
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "no CUDA device: %s", ce != cudaSuccess ? t : "count is 0");
        return -ENODEV;
    }
    int dev = -1;
    if (cfg->device.uuid[0]) {
        char list[512] = "";
        size_t used = 0;
        for (int i = 0; i < n; i++) {
            struct cudaDeviceProp p;
            if (cudaGetDeviceProperties(&p, i) != cudaSuccess)
                continue;
            char u[48];
            uuid_format((const uint8_t *)p.uuid.bytes, u, sizeof u);
            if (strcasecmp(u, cfg->device.uuid) == 0)
                dev = i;
            if (used < sizeof list)
                used += (size_t)snprintf(list + used, sizeof list - used, "%s%d=%s", i ? ", " : "",
                                         i, u);
        }
        if (dev < 0) {
            snprintf(err, errlen, "device.uuid %s is not among the visible devices (%s)",
                     cfg->device.uuid, list);
            return -ENODEV;
        }
    } else {
        if (cfg->device.index < 0 || cfg->device.index >= n) {
            snprintf(err, errlen, "device.index %d: %d device%s visible", (int)cfg->device.index, n,
                     n == 1 ? "" : "s");
            return -ENODEV;
        }
        dev = cfg->device.index;
    }
    *out = dev;
    return 0;
}

int pj_backend_cuda_check_device(const pj_config *cfg, char *err, size_t errlen)
{
    int dev = -1;
    int rc = find_device(cfg, &dev, err, errlen);
    cudaGetLastError();
    return rc;
}

static int select_device(cu_state *st, char *err, size_t errlen)
{
    const pj_config *cfg = st->b->cfg;
    int dev = -1;
    int rc = find_device(cfg, &dev, err, errlen);
    if (rc)
        return rc;
    cudaError_t ce = cudaSetDevice(dev);
    if (ce == cudaSuccess)
        ce = cudaFree(NULL); /* create the primary context now */
    if (ce == cudaSuccess)
        ce = cudaGetDeviceProperties(&st->prop, dev);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "device %d: %s", dev, t);
        return -ENODEV;
    }
    st->ctx_ready = 1;
    st->dev = dev;
    memcpy(st->b->device_uuid, st->prop.uuid.bytes, PJ_WIRE_UUID_SIZE);
    uuid_format(st->b->device_uuid, st->uuid_str, sizeof st->uuid_str);
    snprintf(st->b->device_name, sizeof st->b->device_name, "%.60s (%s, device %d)", st->prop.name,
             st->uuid_str, dev);
    st->b->max_row_pitch = st->prop.memPitch; /* staged_pitch_check's limit, for the server */
    if (st->prop.major < 9)
        pj_log_warn("cuda: device %d is sm_%d%d; the kernels are built for sm_90a and only "
                    "cuBLAS may run",
                    dev, st->prop.major, st->prop.minor);
    return pj_eng_dev_limits(&st->lim, err, errlen);
}

/* ---- tuning table ---------------------------------------------------------------------- */

/* ctx: the table's path. The loader's messages begin "tuning table: ";
 * said once, with the file, since a start may look at several. */
static void table_msg(void *ctx, const char *msg)
{
    pj_log_warn("cuda: tuning table %s: %s", (const char *)ctx, pj_tune_msg_text(msg));
}

static void table_skipped(void *ctx, const char *path, const char *why)
{
    (void)ctx;
    pj_log_info("cuda: tuning table %s passed over: %s", path, why);
}

/* No table of this GPU's name: the installed table nearest to it by device
 * name (daemon/tablepick.h) among dirs, its entries checked against this
 * device's limits. Only where the kernels run (sm_90): elsewhere the
 * entries name kernels that cannot. 1 when one is in use. */
static int nearest_table(cu_state *st, const char (*dirs)[PJ_TABLEPICK_PATH], int ndirs,
                         const char *slug)
{
    char path[PJ_TABLEPICK_PATH + 256], tdev[64], err[256];
    if (!pj_tablepick_nearest(dirs, ndirs, st->prop.name, st->prop.multiProcessorCount,
                              st->prop.major, st->prop.minor, path, sizeof path, tdev, sizeof tdev,
                              table_skipped, NULL))
        return 0;
    memset(st->table, 0, sizeof *st->table);
    int n = pj_tune_load(path, st->table, pj_eng_check_entry, &st->lim, table_msg, path, err,
                         sizeof err);
    if (n < 0) {
        pj_log_warn("cuda: tuning table %s not used: %s", path, err);
        memset(st->table, 0, sizeof *st->table);
        return 0;
    }
    if (strcasecmp(tdev, st->prop.name) == 0)
        pj_log_info("cuda: tuning table %s, made on this GPU model under another name than "
                    "%s.json",
                    path, slug);
    else
        pj_log_warn("cuda: no tuning table for \"%s\" (%s.json); using %s, made on \"%s\", the "
                    "nearest installed, its entries checked against this device. A table tuned "
                    "on this GPU does better (deploy/README.md, \"The shipped tables\")",
                    st->prop.name, slug, path, tdev);
    snprintf(st->rep.table, sizeof st->rep.table, "%s (%d entries; made on %s)", path, n, tdev);
    st->rep.table_entries = n;
    return 1;
}

/* The tuned table: tuning.table when set, else <gpu>.json in the folders
 * of pj_tablepick_dirs, else (a Hopper) the nearest table there. 0, or
 * -EINVAL (err said) when tuning.table names a file that cannot be read
 * or parsed: an operator who named one expects it used, not a start with
 * a warning and the untuned ladder. (A named table for another GPU is
 * said and not used; one found by name that was made on another GPU is
 * weighed with the others as the nearest.) */
static int load_table(cu_state *st, char *ferr, size_t ferrlen)
{
    const pj_config *cfg = st->b->cfg;
    char slug[80];
    size_t j = 0;
    for (const char *p = st->prop.name; *p && j + 1 < sizeof slug; p++)
        slug[j++] = isalnum((unsigned char)*p) ? (char)tolower((unsigned char)*p) : '-';
    slug[j] = 0;
    char exe[PJ_CFG_PATH] = "";
    ssize_t el = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (el > 0 && (size_t)el < sizeof exe - 1) {
        exe[el] = 0;
        char *sl = strrchr(exe, '/');
        if (sl)
            *sl = 0;
    } else {
        exe[0] = 0; /* unknown, or a full buffer: perhaps a cut path, another folder */
    }
    /* "nvidia-h200" and "h200": tables are named either way. */
    const char *names[2] = {slug, strncmp(slug, "nvidia-", 7) == 0 ? slug + 7 : NULL};
    char dirs[PJ_TABLEPICK_DIRS][PJ_TABLEPICK_PATH];
    const char *env_dir = getenv("PROJD_TUNING_DIR");
    const int ndirs = pj_tablepick_dirs(env_dir, exe, dirs);
    if (env_dir && *env_dir && ndirs == 0)
        pj_log_warn("cuda: PROJD_TUNING_DIR is %zu bytes, past the %d a tables' folder may have: "
                    "no folder is searched",
                    strlen(env_dir), PJ_TABLEPICK_PATH - 1);
    const int hopper = st->prop.major == 9;
    char cand[2 * PJ_TABLEPICK_DIRS][PJ_TABLEPICK_PATH + 128];
    int nc = 0;
    if (cfg->tuning.table[0]) {
        snprintf(cand[nc++], sizeof cand[0], "%s", cfg->tuning.table);
    } else {
        for (int f = 0; f < ndirs; f++)
            for (int n = 0; n < 2; n++)
                if (names[n])
                    snprintf(cand[nc++], sizeof cand[0], "%s/%s.json", dirs[f], names[n]);
    }
    st->table = calloc(1, sizeof *st->table);
    if (!st->table)
        return 0; /* no table: the ladder */
    for (int i = 0; i < nc; i++) {
        if (!cfg->tuning.table[0] && access(cand[i], R_OK) != 0)
            continue;
        char err[256];
        /* The device first, without vetting entries: a table for another
         * GPU would otherwise warn about each entry this one cannot run
         * before saying it is not used at all. */
        int n = pj_tune_load(cand[i], st->table, NULL, NULL, NULL, NULL, err, sizeof err);
        if (n < 0 && cfg->tuning.table[0]) {
            snprintf(ferr, ferrlen,
                     "%s (named by tuning.table; \"\" looks for %s.json where the install keeps "
                     "tables)",
                     err, slug);
            return -EINVAL;
        }
        if (n >= 0 && st->table->device[0] && strcasecmp(st->table->device, st->prop.name) != 0) {
            if (cfg->tuning.table[0])
                pj_log_warn("cuda: tuning table %s is for \"%s\", this device is \"%s\"; not "
                            "used (named by tuning.table: without that key projd takes this "
                            "GPU's installed table, or the nearest one)",
                            cand[i], st->table->device, st->prop.name);
            else if (!hopper)
                pj_log_warn("cuda: tuning table %s is for \"%s\", this device is \"%s\"; not "
                            "used",
                            cand[i], st->table->device, st->prop.name);
            /* a Hopper weighs it with the other tables (nearest_table) */
            memset(st->table, 0, sizeof *st->table);
            continue;
        }
        if (n >= 0 && !st->table->device[0])
            pj_log_warn("cuda: tuning table %s names no device (projd-bench writes one); used on "
                        "\"%s\" with each entry checked against its limits",
                        cand[i], st->prop.name);
        memset(st->table, 0, sizeof *st->table);
        if (n >= 0)
            n = pj_tune_load(cand[i], st->table, pj_eng_check_entry, &st->lim, table_msg,
                             (void *)cand[i], err, sizeof err);
        if (n < 0) {
            pj_log_warn("cuda: tuning table %s not used: %s", cand[i], err);
            memset(st->table, 0, sizeof *st->table);
            continue;
        }
        snprintf(st->rep.table, sizeof st->rep.table, "%s (%d entries)", cand[i], n);
        st->rep.table_entries = n;
        return 0;
    }
    if (!cfg->tuning.table[0] && hopper && nearest_table(st, dirs, ndirs, slug))
        return 0;
    snprintf(st->rep.table, sizeof st->rep.table, "none (untuned ladder; looked for %s.json%s%s)",
             slug, names[1] ? " and " : "", names[1] ? names[1] : "");
    return 0;
}

/* ---- weights -------------------------------------------------------------------------- */

/* Does an engine that reads bf16 ever run on this z12 layer? The gemvz
 * engine serves m <= 32; larger m (and cuBLAS, gemv, splitk when forced)
 * read the bf16 copy. The rule is memplan's, which plans the start's memory
 * with it. */
static int needs_bf16_copy(const cu_state *st, const cu_layer *cl)
{
    return pj_memplan_copies_bf16(st->max_m, st->env_force[0] ? st->env_force : cl->force);
}

/* "name[:knobs]" into its parts. -1 when a part does not fit (nothing is
 * cut: a cut knob string could name other knobs, "lsk=16" as "lsk=1"). */
static int split_force(const char *spec, char *name, size_t nlen, char *knobs, size_t klen)
{
    const char *colon = strchr(spec, ':');
    size_t l = colon ? (size_t)(colon - spec) : strlen(spec);
    const char *kn = colon ? colon + 1 : "";
    name[0] = knobs[0] = 0;
    if (l >= nlen || strlen(kn) >= klen)
        return -1;
    memcpy(name, spec, l);
    name[l] = 0;
    snprintf(knobs, klen, "%s", kn);
    return 0;
}

/* Does the table run the streamed GEMV (gemv pipe = 3, which reads the
 * fragment-major copy of the weights) on this layer, at its shape, at some
 * m? */
static int table_wants_tiles(const cu_state *st, const pj_eng_layer *L)
{
    if (!st->table)
        return 0;
    for (uint32_t i = 0; i < st->table->n; i++) {
        const pj_tune_entry *e = &st->table->e[i];
        if (e->eng == PJ_ENG_GEMV && e->knobs.pipe == 3 &&
            strcmp(e->layer, pj_eng_table_name(L)) == 0 && pj_tune_entry_fits(e, L->N, L->K))
            return 1;
    }
    return 0;
}

/* Say at the start when the tuned table has nothing for a layer that a
 * line of configuration would give it: tuned_as naming a layer without
 * entries of this shape, or a layer named otherwise (as a serving
 * framework names it) whose shape a table layer was tuned at. */
static void note_table_match(const cu_state *st, const pj_model_layer *ml, const pj_eng_layer *L)
{
    const pj_tune_table *t = st->table;
    if (!t || !t->n) {
        if (ml->tuned_as[0])
            pj_log_warn("cuda: layer %s: tuned_as \"%s\", but no tuning table is in use (%s); the "
                        "untuned defaults serve it",
                        ml->name, ml->tuned_as, st->rep.table);
        return;
    }
    const char *tn = pj_eng_table_name(L);
    const char *other = NULL;
    for (uint32_t i = 0; i < t->n; i++) {
        const pj_tune_entry *e = &t->e[i];
        const int fits = pj_tune_entry_fits(e, L->N, L->K);
        if (fits && strcmp(e->layer, tn) == 0)
            return; /* it has entries */
        if (fits && !other)
            other = e->layer;
    }
    if (ml->tuned_as[0])
        pj_log_warn("cuda: layer %s: tuned_as \"%s\", but the table (%s) has no entries of %s for "
                    "%u x %u; the untuned defaults serve it",
                    ml->name, ml->tuned_as, st->rep.table, ml->tuned_as, L->N, L->K);
    else if (other)
        pj_log_info(
            "cuda: layer %s: no table entries of its name for its shape (%u x %u); layer %s of "
            "the table has them: \"tuned_as\": \"%s\" in its config would use them",
            ml->name, L->N, L->K, other, other);
}

/* A model layer's row classes (rowclass.h): none when
 * PROJD_CUDA_ROW_CLASSES=0. */
static void row_classes(const cu_state *st, const pj_model_layer *ml, pj_rowclass_set *rc)
{
    pj_rowclass_make(st->no_row_classes ? NULL : st->table,
                     ml->tuned_as[0] ? ml->tuned_as : ml->name, ml->w.n, ml->w.k, ml->max_n,
                     ml->graph_rows, st->no_row_classes ? 0 : ml->n_graph_rows, rc);
}

static void note_row_classes(const cu_layer *cl)
{
    const pj_rowclass_set *rc = &cl->rc;
    if (!rc->n)
        return;
    char ns[160];
    size_t len = 0;
    for (uint32_t c = 0; c < rc->n && len + 12 < sizeof ns; c++)
        len += (size_t)snprintf(ns + len, sizeof ns - len, "%s%u", c ? ", " : "", rc->rows[c]);
    pj_log_info("cuda: layer %s: graphs at n = %s and %u (max_n); a request of n rows computes "
                "the first of these >= n (%u from its table entries' rows, %u from graph_rows)",
                cl->L.name, ns, cl->graph_n, rc->from_table, rc->n - rc->from_table);
    if (rc->total > rc->n)
        pj_log_warn("cuda: layer %s: %u row counts to capture graphs at below max_n, the "
                    "smallest %u kept",
                    cl->L.name, rc->total, rc->n);
}

/* A heavy exception block (pj_model_layer_heavy_block) under table entries
 * that run the z12 GEMV for the layer at some m it serves: said once at
 * start (info: a table tuned on this very model is fine, and the table
 * does not say which weights it was timed on), with the m of those
 * entries, since a table timed on other weights may lose to cuBLAS here
 * (deploy/README.md says how to tune on the served model). */
static void note_heavy_block(const cu_state *st, const pj_model_layer *ml, const pj_eng_layer *L)
{
    const pj_tune_table *t = st->table;
    if (!t || !pj_model_layer_heavy_block(ml))
        return;
    /* The entries the dispatcher would run (pj_dispatch_choose), each once. */
    const pj_tune_entry *seen[16];
    uint32_t n_seen = 0;
    char ms[160] = "";
    size_t len = 0;
    for (uint32_t m = 1; m <= st->max_m && n_seen < 16 && len + 12 < sizeof ms; m++) {
        const pj_tune_entry *e = pj_dispatch_choose(t, pj_eng_table_name(L), L->N, L->K, m);
        if (!e || e->eng != PJ_ENG_GEMVZ)
            continue;
        uint32_t j = 0;
        while (j < n_seen && seen[j] != e)
            j++;
        if (j < n_seen)
            continue;
        seen[n_seen++] = e;
        len += (size_t)snprintf(ms + len, sizeof ms - len, "%s%u", len ? ", " : "", e->m);
    }
    if (!len)
        return;
    pj_log_info("cuda: layer %s: one 16-row block (rows %u-%u) holds %u exceptions, %.1f on "
                "average; its CTA of the z12 GEMV finishes last, so unless the table was tuned "
                "on this model its z12 GEMV entries (m = %s) may run slower than cuBLAS here "
                "(deploy/README.md)",
                ml->name, ml->blk_exc_max_row, pj_model_layer_busiest_block_end(ml),
                ml->blk_exc_max, pj_model_layer_block_exc_mean(ml), ms);
}

/* Can the engines serve every m of the layer from its z12 weights alone
 * (the ladder without a table; the table's entries fall back to it)? 0,
 * or the first m that nothing can run, with why. */
static uint32_t z12_alone_misses(const cu_state *st, const pj_eng_layer *L, char *why,
                                 size_t whylen)
{
    static const uint16_t dummy[8] __attribute__((aligned(16)));
    for (uint32_t m = 1; m <= st->max_m; m++) {
        pj_eng_call c = {.L = L,
                         .x = dummy,
                         .ldx = L->K,
                         .y = (uint16_t *)dummy,
                         .ldy = L->N,
                         .m = m,
                         .n = L->N};
        pj_eng_kind k;
        pj_eng_knobs kn;
        if (pj_eng_choose(NULL, NULL, NULL, &c, &st->lim, &k, &kn) < 0) {
            snprintf(why, whylen, "no form of the z12 GEMV takes m = %u of %u x %u", m, L->N, L->K);
            return m;
        }
    }
    return 0;
}

/* Between the start's steps (a phase, a layer of one): a stop signal that
 * came meanwhile ends the start (-ECANCELED, startsig.h); else systemd
 * hears of the next step (its start timeout extended, notify.h). tell = 0:
 * the check alone (the lanes but one, whose steps would repeat lane 0's). */
__attribute__((format(printf, 5, 6))) static int start_step(int tell, char *err, size_t errlen,
                                                            const char *where, const char *fmt, ...)
{
    char step[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(step, sizeof step, fmt, ap);
    va_end(ap);
    if (pj_startsig_stop()) {
        snprintf(err, errlen, "start stopped%s before %s", where, step);
        return -ECANCELED;
    }
    if (tell)
        pj_notify_progress("starting backend cuda: %s", step);
    return 0;
}

static int upload_layers(cu_state *st, char *err, size_t errlen)
{
    const pj_model *model = st->b->model;
    for (uint32_t i = 0; i < model->n_layers && i < st->cap_layers; i++) {
        const pj_model_layer *ml = &model->layers[i];
        int step = start_step(1, err, errlen, "", "the upload of layer %u of %u (%s)", i + 1,
                              model->n_layers, ml->name);
        if (step)
            return step;
        cu_layer *cl = &st->layers[i];
        pj_eng_layer *L = &cl->L;
        cl->graph_n = ml->max_n ? ml->max_n : ml->w.n;
        /* The config takes an engine's name alone (S_ENGINE): it fits. */
        (void)split_force(ml->engine, cl->force, sizeof cl->force, cl->force_knobs,
                          sizeof cl->force_knobs);
        const int copy = needs_bf16_copy(st, cl);
        int rc = pj_engup_layer(ml->name, &ml->w, copy, st->b->model->load_threads, L, &cl->mem,
                                err, errlen);
        char why[160];
        if (!rc && !copy && L->fmt == PJ_FMT_Z12 && z12_alone_misses(st, L, why, sizeof why)) {
            pj_log_info("cuda: layer %s keeps a bf16 copy: %s", ml->name, why);
            rc = pj_engup_add_bf16_copy(ml->name, &ml->w, st->b->model->load_threads, L, &cl->mem,
                                        err, errlen);
        }
        if (rc)
            return rc;
        snprintf(L->table_name, sizeof L->table_name, "%s", ml->tuned_as);
        /* What the table's use for the layer is worth saying at start:
         * nothing when an engine is forced on it (config or env). */
        if (!ml->engine[0] && !st->env_force[0]) {
            note_table_match(st, ml, L);
            note_heavy_block(st, ml, L);
        }
        /* What the tuner and the benchmark time the engines with
         * (kernels/engcheck_cuda.c): the z12 GEMV's exception slot tables
         * (without them it gathers each block's exceptions the slow way),
         * and the streamed GEMV's fragment-major copy where the table runs
         * it (without it those entries fall down the ladder). */
        rc = pj_eng_layer_init(L, 0, err, errlen);
        if (!rc && L->w && table_wants_tiles(st, L)) {
            rc = pj_eng_layer_init_tiles(L, 0, err, errlen);
            if (!rc && L->wt)
                st->rep.weights_bf16_copies += (size_t)(L->N + 15) / 16 * 32 * L->K;
        }
        if (rc)
            return rc;
        st->rep.weights_stored += cl->mem.stored_bytes;
        st->rep.weights_bf16_copies += cl->mem.bf16_copy_bytes;
        if (ml->w.k > st->max_k)
            st->max_k = ml->w.k;
        if (ml->w.n > st->max_n)
            st->max_n = ml->w.n;
        st->n_layers = i + 1;
    }
    /* The row classes (alloc_layers worked them out), after all the
     * model's layers. */
    for (uint32_t i = 0; i < model->n_layers && i < st->cap_layers; i++) {
        cu_layer *cl = &st->layers[i];
        for (uint32_t c = 0; c < cl->rc.n; c++) {
            cu_layer *cc = &st->layers[st->n_layers];
            *cc = *cl;
            cc->is_class = 1;
            memset(&cc->rc, 0, sizeof cc->rc);
            cc->graph_n = cl->rc.rows[c];
            cl->cls[c] = st->n_layers++;
        }
        note_row_classes(cl);
    }
    return 0;
}

/* st->layers and st->shapes for the model's layers and their row classes
 * (cap_layers), each model layer's classes (rowclass.h) worked out once,
 * into its rc: upload_layers makes them. 0, or -ENOMEM with err. */
static int alloc_layers(cu_state *st, char *err, size_t errlen)
{
    const pj_model *model = st->b->model;
    pj_rowclass_set *rcs = calloc(model->n_layers ? model->n_layers : 1, sizeof *rcs);
    uint32_t cap = model->n_layers;
    for (uint32_t i = 0; rcs && i < model->n_layers; i++) {
        row_classes(st, &model->layers[i], &rcs[i]);
        cap += rcs[i].n;
    }
    st->cap_layers = cap;
    st->layers = calloc(cap ? cap : 1, sizeof *st->layers);
    st->shapes = calloc(cap ? cap : 1, sizeof *st->shapes);
    if (!rcs || !st->layers || !st->shapes) {
        free(rcs);
        snprintf(err, errlen, "backend cuda: out of memory for %u layers", cap);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < model->n_layers; i++)
        st->layers[i].rc = rcs[i];
    free(rcs);
    return 0;
}

static void free_layers(cu_state *st)
{
    for (uint32_t i = 0; st->layers && i < st->cap_layers; i++) {
        cu_layer *cl = &st->layers[i];
        if (cl->is_class)
            continue; /* its layer's arrays */
        pj_eng_layer_fini(&cl->L);
        pj_engup_free(&cl->mem);
    }
    free(st->layers);
    free(st->shapes);
    st->layers = NULL;
    st->shapes = NULL;
    st->cap_layers = st->n_layers = 0;
}

/* ---- engine choice ------------------------------------------------------------------- */

static const char *step_name(int step)
{
    switch (step) {
    case 0:
        return "forced";
    case 1:
        return "table";
    case 2:
        return "default";
    case 3:
        return "cublas fallback";
    default:
        return "none";
    }
}

/* pj_eng_choose with this layer's forced engine (env wins over config). */
static int choose(cu_state *st, const cu_layer *cl, const pj_eng_call *c, pj_eng_kind *k,
                  pj_eng_knobs *kn, char *note, size_t notelen)
{
    const char *f = st->env_force[0] ? st->env_force : cl->force;
    const char *fk = st->env_force[0] ? st->env_knobs : cl->force_knobs;
    return pj_eng_choose_note(st->table, f, fk, c, &st->lim, k, kn, note, notelen);
}

/* ---- lanes -------------------------------------------------------------------------------- */

static void *completion_main(void *arg);

static void lane_free(cu_lane *ln)
{
    if (!ln)
        return;
    for (uint32_t l = 0; ln->graphs && l < ln->st->cap_layers; l++)
        for (uint32_t s = 0; s < CU_MAX_S; s++)
            pj_cg_free(&ln->graphs[l][s]);
    free(ln->graphs);
    if (ln->ws.f)
        pj_eng_ws_free(&ln->ws);
    for (uint32_t i = 0; i < CU_RING; i++) {
        if (ln->ring[i].ev)
            cudaEventDestroy(ln->ring[i].ev);
        if (ln->ring[i].wev)
            cudaEventDestroy(ln->ring[i].wev);
    }
    pj_eng_stream_destroy(ln->es);
    cudaFree(ln->sx);
    cudaFree(ln->sy);
    if (ln->s)
        cudaStreamDestroy(ln->s);
    pthread_cond_destroy(&ln->cv);
    pthread_mutex_destroy(&ln->mu);
    free(ln);
}

static int lane_create(cu_state *st, uint32_t idx, cu_lane **out, char *err, size_t errlen)
{
    *out = NULL;
    cu_lane *ln = calloc(1, sizeof *ln);
    if (!ln) {
        snprintf(err, errlen, "lane %u: out of memory", idx);
        return -ENOMEM;
    }
    ln->st = st;
    ln->idx = idx;
    pthread_mutex_init(&ln->mu, NULL);
    pthread_cond_init(&ln->cv, NULL);
    char t[200];
    cudaError_t ce = cudaStreamCreateWithFlags(&ln->s, cudaStreamNonBlocking);
    if (ce != cudaSuccess) {
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "lane %u: cudaStreamCreateWithFlags: %s", idx, t);
        lane_free(ln);
        return -EIO;
    }
    int rc = pj_eng_stream_create(ln->s, &ln->es, err, errlen);
    if (rc) {
        lane_free(ln);
        return rc;
    }
    ln->graphs = calloc(st->cap_layers ? st->cap_layers : 1, sizeof *ln->graphs);
    if (!ln->graphs) {
        snprintf(err, errlen, "lane %u: out of memory for %u layers' graphs", idx, st->cap_layers);
        lane_free(ln);
        return -ENOMEM;
    }
    const pj_eng_layer *widest = NULL;
    for (uint32_t l = 0; l < st->n_layers; l++)
        if (!widest || st->layers[l].L.N > widest->N)
            widest = &st->layers[l].L;
    rc = widest ? pj_eng_ws_init(widest, st->max_m, ln->s, &ln->ws, err, errlen) : 0;
    if (rc) {
        lane_free(ln);
        return rc;
    }
    ln->sx_bytes = (size_t)st->max_m * st->max_k * 2;
    ln->sy_bytes = (size_t)st->max_m * st->max_n * 2;
    ce = cudaMalloc((void **)&ln->sx, ln->sx_bytes);
    if (ce == cudaSuccess)
        ce = cudaMalloc((void **)&ln->sy, ln->sy_bytes);
    if (ce != cudaSuccess) {
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "lane %u: staging buffers (%zu + %zu bytes): %s", idx, ln->sx_bytes,
                 ln->sy_bytes, t);
        lane_free(ln);
        return -ENOMEM;
    }
    *out = ln;
    return 0;
}

/* ---- graphs ------------------------------------------------------------------------------ */

typedef struct cap_ctx {
    cu_lane *ln;
    const cu_shape *sh;
    pj_eng_call call;
} cap_ctx;

static int cap_enqueue(void *ctx, cudaStream_t s)
{
    cap_ctx *c = ctx;
    (void)s;
    return pj_eng_launch(c->sh->k, &c->sh->kn, &c->call, c->ln->es);
}

static pj_eng_call shape_call(cu_state *st, cu_lane *ln, uint32_t l, uint32_t m, const void *x,
                              void *y)
{
    pj_eng_call c;
    memset(&c, 0, sizeof c);
    c.L = &st->layers[l].L;
    c.ws = &ln->ws;
    c.x = x;
    c.ldx = st->layers[l].L.K;
    c.y = y;
    c.ldy = st->layers[l].graph_n;
    c.m = m;
    c.n = st->layers[l].graph_n;
    return c;
}

/* The layer's name in messages, with its rows when it is a row class
 * ("unpooler n=1024"), since a class's lines would read as its layer's. */
typedef struct cu_label {
    char s[PJ_TUNE_NAME + 24];
} cu_label;

static cu_label layer_label(const cu_state *st, uint32_t l)
{
    cu_label b;
    const cu_layer *cl = &st->layers[l];
    if (cl->is_class)
        snprintf(b.s, sizeof b.s, "%s n=%u", cl->L.name, cl->graph_n);
    else
        snprintf(b.s, sizeof b.s, "%s", cl->L.name);
    return b;
}

/* Relative L2 distance of a from b (m x n bf16, contiguous); *unwritten
 * counts elements of a still holding the 0xffff poison; *nan NaNs in a. */
static double rel_err(const uint16_t *a, const uint16_t *b, size_t count, size_t *unwritten,
                      size_t *nan)
{
    double num = 0, den = 0;
    *unwritten = *nan = 0;
    for (size_t i = 0; i < count; i++) {
        if (a[i] == 0xffffu)
            (*unwritten)++;
        float fa = pj_bf16_to_f32(a[i]), fb = pj_bf16_to_f32(b[i]);
        if (isnan(fa)) {
            (*nan)++;
            continue;
        }
        double d = (double)fa - (double)fb;
        num += d * d;
        den += (double)fb * fb;
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

typedef struct val_bufs {
    uint16_t *xv, *yv, *yd; /* device, 16 bytes past an allocation's start */
    void *xv_a, *yv_a, *yd_a;
    uint16_t *hA, *hB; /* host inputs */
    uint16_t *h1, *h2, *h3;
} val_bufs;

static void val_free(val_bufs *v)
{
    cudaFree(v->xv_a);
    cudaFree(v->yv_a);
    cudaFree(v->yd_a);
    free(v->hA);
    free(v->hB);
    free(v->h1);
    free(v->h2);
    free(v->h3);
    memset(v, 0, sizeof *v);
}

static int val_alloc(cu_state *st, val_bufs *v, char *err, size_t errlen)
{
    memset(v, 0, sizeof *v);
    size_t xe = (size_t)st->max_m * st->max_k, ye = (size_t)st->max_m * st->max_n;
    cudaError_t ce = cudaMalloc(&v->xv_a, xe * 2 + 256);
    if (ce == cudaSuccess)
        ce = cudaMalloc(&v->yv_a, ye * 2 + 256);
    if (ce == cudaSuccess)
        ce = cudaMalloc(&v->yd_a, ye * 2 + 256);
    v->hA = malloc(xe * 2);
    v->hB = malloc(xe * 2);
    v->h1 = malloc(ye * 2);
    v->h2 = malloc(ye * 2);
    v->h3 = malloc(ye * 2);
    if (ce != cudaSuccess || !v->hA || !v->hB || !v->h1 || !v->h2 || !v->h3) {
        snprintf(err, errlen, "graph validation buffers: out of memory");
        cudaGetLastError();
        val_free(v);
        return -ENOMEM;
    }
    v->xv = (uint16_t *)((char *)v->xv_a + 16);
    v->yv = (uint16_t *)((char *)v->yv_a + 16);
    v->yd = (uint16_t *)((char *)v->yd_a + 16);
    uint64_t s = 0x243f6a8885a308d3ull;
    for (size_t i = 0; i < xe; i++) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        float a = (float)((s >> 40) & 0xffff) / 32768.0f - 1.0f;
        float b2 = (float)((s >> 16) & 0xffff) / 32768.0f - 1.0f;
        v->hA[i] = pj_f32_to_bf16(a);
        v->hB[i] = pj_f32_to_bf16(b2);
    }
    return 0;
}

/* Check one lane's graph of (l, si): rebound to (xv, yv) it must match a
 * direct launch of the same engine and leave the capture y untouched; bound
 * to the staging buffers it must match too. Sets *patch_ok. 0, or -EIO
 * with err when CUDA itself failed. */
static int validate_graph(cu_state *st, cu_lane *ln, uint32_t l, uint32_t si, val_bufs *v,
                          int *patch_ok, double *worst, char *note, size_t notelen, char *err,
                          size_t errlen)
{
    cu_shape *sh = &st->shapes[l][si];
    pj_cgraph *g = &ln->graphs[l][si];
    const cu_layer *cl = &st->layers[l];
    uint32_t m = st->shape_m[si], n = cl->graph_n, K = cl->L.K;
    size_t xb = (size_t)m * K * 2, yb = (size_t)m * n * 2;
    char t[200];
    cudaStream_t s = ln->s;
    cudaError_t ce = cudaSuccess;
    *patch_ok = 0;
#define VCK(call)                                                                                  \
    do {                                                                                           \
        if (ce == cudaSuccess)                                                                     \
            ce = (call);                                                                           \
    } while (0)
    /* Staged binding (the capture's): graph on sx/sy vs direct into yd. */
    VCK(cudaMemcpyAsync(ln->sx, v->hA, xb, cudaMemcpyHostToDevice, s));
    VCK(cudaMemsetAsync(ln->sy, 0xff, yb, s));
    VCK(cudaMemsetAsync(v->yd, 0xff, yb, s));
    if (ce == cudaSuccess && pj_cg_bind(g, ln->sx, ln->sy, t, sizeof t) != 0) {
        snprintf(err, errlen, "%s", t);
        return -EIO;
    }
    VCK(pj_cg_launch(g, s));
    pj_eng_call dc = shape_call(st, ln, l, m, ln->sx, v->yd);
    if (ce == cudaSuccess && pj_eng_launch(sh->k, &sh->kn, &dc, ln->es) != 0)
        ce = cudaErrorLaunchFailure;
    VCK(cudaMemcpyAsync(v->h1, ln->sy, yb, cudaMemcpyDeviceToHost, s));
    VCK(cudaMemcpyAsync(v->h2, v->yd, yb, cudaMemcpyDeviceToHost, s));
    VCK(cudaStreamSynchronize(s));
    if (ce != cudaSuccess) {
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "validating graph %s m=%u: %s", layer_label(st, l).s, m, t);
        return -EIO;
    }
    size_t unw, nan;
    double e = rel_err(v->h1, v->h2, yb / 2, &unw, &nan);
    if (e > *worst)
        *worst = e;
    if (unw || nan || e > CU_VALIDATE_TOL) {
        snprintf(err, errlen,
                 "graph %s m=%u at its capture binding differs from a direct launch of %s "
                 "(rel %.3g, %zu unwritten, %zu NaN)",
                 layer_label(st, l).s, m, pj_eng_name(sh->k), e, unw, nan);
        return -EIO;
    }
    if (!g->rebindable || st->no_patch) {
        snprintf(note, notelen, "%s",
                 st->no_patch ? "rebinding off (PROJD_CUDA_NO_PATCH)" : g->why);
        return 0;
    }
    /* Rebound: different inputs, 16-byte (not 256-byte) aligned buffers. */
    VCK(cudaMemcpyAsync(v->xv, v->hB, xb, cudaMemcpyHostToDevice, s));
    VCK(cudaMemsetAsync(ln->sy, 0xff, yb, s));
    VCK(cudaMemsetAsync(v->yv, 0xff, yb, s));
    VCK(cudaMemsetAsync(v->yd, 0xff, yb, s));
    if (ce == cudaSuccess && pj_cg_bind(g, v->xv, v->yv, t, sizeof t) != 0) {
        snprintf(note, notelen, "rebinding failed: %s", t);
        cudaGetLastError();
        return pj_cg_bind(g, ln->sx, ln->sy, err, errlen) ? -EIO : 0;
    }
    VCK(pj_cg_launch(g, s));
    dc = shape_call(st, ln, l, m, v->xv, v->yd);
    if (ce == cudaSuccess && pj_eng_launch(sh->k, &sh->kn, &dc, ln->es) != 0)
        ce = cudaErrorLaunchFailure;
    VCK(cudaMemcpyAsync(v->h1, v->yv, yb, cudaMemcpyDeviceToHost, s));
    VCK(cudaMemcpyAsync(v->h2, v->yd, yb, cudaMemcpyDeviceToHost, s));
    VCK(cudaMemcpyAsync(v->h3, ln->sy, yb, cudaMemcpyDeviceToHost, s));
    VCK(cudaStreamSynchronize(s));
    if (ce != cudaSuccess) {
        ce_text(ce, t, sizeof t);
        snprintf(err, errlen, "validating rebound graph %s m=%u: %s", layer_label(st, l).s, m, t);
        return -EIO;
    }
#undef VCK
    e = rel_err(v->h1, v->h2, yb / 2, &unw, &nan);
    size_t touched = 0;
    for (size_t i = 0; i < yb / 2; i++)
        touched += v->h3[i] != 0xffffu;
    if (e > *worst)
        *worst = e;
    if (unw || nan || e > CU_VALIDATE_TOL || touched) {
        snprintf(note, notelen,
                 "rebound graph failed its check (rel %.3g, %zu unwritten, %zu NaN, %zu capture "
                 "outputs written): staged",
                 e, unw, nan, touched);
    } else {
        *patch_ok = 1;
    }
    return pj_cg_bind(g, ln->sx, ln->sy, err, errlen) ? -EIO : 0;
}

/* Choose the engine of every (layer, m); start_lanes captures them. */
static int choose_engines(cu_state *st, char *err, size_t errlen)
{
    cu_lane *l0 = st->lanes[0];
    for (uint32_t l = 0; l < st->n_layers; l++) {
        for (uint32_t si = 0; si < st->n_shapes; si++) {
            cu_shape *sh = &st->shapes[l][si];
            const cu_layer *cl = &st->layers[l];
            pj_eng_call c = shape_call(st, l0, l, st->shape_m[si], l0->sx, l0->sy);
            sh->step = choose(st, cl, &c, &sh->k, &sh->kn, sh->note, sizeof sh->note);
            if (sh->note[0])
                pj_log_warn("cuda: layer %s m=%u: %s", layer_label(st, l).s, st->shape_m[si],
                            sh->note);
            if (sh->step < 0) {
                snprintf(err, errlen, "layer %s m=%u: no engine can run it", layer_label(st, l).s,
                         st->shape_m[si]);
                return -ENOTSUP;
            }
        }
    }
    return 0;
}

/* One lane's share of start-up, run on a thread of its own: its graphs
 * captured and validated, then its direct shapes warmed. Lanes are
 * independent (own stream, cuBLAS handles, plan cache, staging; graphs are
 * captured in thread-local mode), and most of this is host work (cuBLASLt
 * heuristic queries, output checks), so four lanes take about as long as
 * one. */
typedef struct lane_start {
    cu_state *st;
    cu_lane *ln;
    val_bufs v;
    pthread_t th;
    int started;
    int rc;
    char err[512];
    uint64_t t_cap, t_val, t_warm;
    uint32_t warmed;
    struct lane_res {
        int ok;
        double worst;
        char note[200];
    } (*res)[CU_MAX_S]; /* [layer][shape] */
} lane_start;

static int capture_lane(lane_start *ls)
{
    cu_state *st = ls->st;
    cu_lane *ln = ls->ln;
    for (uint32_t l = 0; l < st->n_layers; l++) {
        int step =
            start_step(ln->idx == 0, ls->err, sizeof ls->err, " on a lane",
                       "the graphs of layer %u of %u (%s, n = %u), %u lanes side by side", l + 1,
                       st->n_layers, st->layers[l].L.name, st->layers[l].graph_n, st->n_lanes);
        if (step)
            return step;
        for (uint32_t si = 0; si < st->n_shapes; si++) {
            const cu_shape *sh = &st->shapes[l][si];
            cap_ctx cc = {.ln = ln, .sh = sh};
            cc.call = shape_call(st, ln, l, st->shape_m[si], ln->sx, ln->sy);
            /* Warm up outside the capture: lazy module loads, Lt plans. */
            uint64_t t0 = now_ns();
            if (pj_eng_launch(sh->k, &sh->kn, &cc.call, ln->es) != 0 ||
                cudaStreamSynchronize(ln->s) != cudaSuccess) {
                char t[200];
                cudaError_t ce = cudaGetLastError();
                ce_text(ce, t, sizeof t);
                snprintf(ls->err, sizeof ls->err, "layer %s m=%u: %s launch failed: %s",
                         layer_label(st, l).s, st->shape_m[si], pj_eng_name(sh->k), t);
                return -EIO;
            }
            int rc = pj_cg_capture(&ln->graphs[l][si], ln->s, cap_enqueue, &cc, ln->sx,
                                   ln->sx_bytes, ln->sy, ln->sy_bytes, ls->err, sizeof ls->err);
            ls->t_cap += now_ns() - t0;
            if (rc)
                return rc;
            t0 = now_ns();
            ls->res[l][si].worst = 0;
            rc = validate_graph(st, ln, l, si, &ls->v, &ls->res[l][si].ok, &ls->res[l][si].worst,
                                ls->res[l][si].note, sizeof ls->res[l][si].note, ls->err,
                                sizeof ls->err);
            ls->t_val += now_ns() - t0;
            if (rc)
                return rc;
        }
    }
    return 0;
}

/* Every m the captured graphs do not cover is a direct launch of the
 * nearest table entry's engine, and its first launch would do on the
 * loop what start-up should:
 * - a cuBLAS engine builds its plan (a heuristic query; for a candidate
 *   algo, the candidate list too): milliseconds, each time a decode load
 *   meets a new m (a p99 of 8-9 ms in kernels/NOTES.md round 35);
 * - any engine's kernel, and cuBLAS's, is loaded on its first launch
 *   (lazy module loading; cuBLAS loads its own kernels that way even
 *   with CUDA_MODULE_LOADING=EAGER), and that load waits until all the
 *   work queued on the device has run, a client's wait on any lane
 *   included: the loop stops for as long as that client holds its event
 *   (measured, bench/results/2026-12-04-s38/visit4).
 * So each such shape runs once per lane here, before READY, on the lane's
 * staging buffers (contents do not matter); run_op sends every other
 * shape through these (daemon/CUDA.md, "Lanes"). PROJD_CUDA_NO_WARM=1
 * skips it. */
static int shape_index(const cu_state *st, uint32_t m);

static int warm_lane(lane_start *ls)
{
    cu_state *st = ls->st;
    cu_lane *ln = ls->ln;
    uint64_t t0 = now_ns();
    for (uint32_t l = 0; l < st->n_layers; l++) {
        int step =
            start_step(ln->idx == 0, ls->err, sizeof ls->err, " on a lane",
                       "the warm-up of layer %u of %u (%s, n = %u), %u lanes side by side", l + 1,
                       st->n_layers, st->layers[l].L.name, st->layers[l].graph_n, st->n_lanes);
        if (step) {
            cudaStreamSynchronize(ln->s); /* what it launched, done before the lane goes */
            return step;
        }
        /* A forced engine or a table entry passed over at an m between the
         * graphs' shapes: said once per layer (by lane 0), as
         * choose_engines says it at the shapes; the first such m and a
         * count, since one refusal usually holds for a range of m. */
        char note[256], first[256] = "";
        uint32_t first_m = 0, noted = 0;
        for (uint32_t m = 1; m <= st->max_m; m++) {
            if (shape_index(st, m) >= 0)
                continue; /* its graph: a failed capture stops the start */
            pj_eng_call c = shape_call(st, ln, l, m, ln->sx, ln->sy);
            pj_eng_kind k;
            pj_eng_knobs kn;
            note[0] = 0;
            int chose = choose(st, &st->layers[l], &c, &k, &kn, ln->idx == 0 ? note : NULL,
                               ln->idx == 0 ? sizeof note : 0);
            if (note[0] && noted++ == 0) {
                memcpy(first, note, sizeof first);
                first_m = m;
            }
            if (chose < 0)
                continue;
            if (pj_eng_launch(k, &kn, &c, ln->es) != 0) {
                /* pj_eng_launch clears the launch's error, a sticky one
                 * (an earlier kernel's fault) included (measured:
                 * bench/results/2026-12-04-s39/visit2); the stream still
                 * reports it, and start-up may wait for it. */
                cudaError_t last = cudaStreamSynchronize(ln->s);
                char t[200] = "the launch failed";
                if (last != cudaSuccess)
                    ce_text(last, t, sizeof t);
                snprintf(ls->err, sizeof ls->err, "warm-up on lane %u, layer %s m=%u (%s): %s",
                         ln->idx, layer_label(st, l).s, m, pj_eng_name(k), t);
                return -EIO;
            }
            if (++ls->warmed == 1 && st->fault_warm && ln->idx == 0) {
                pj_log_warn("cuda: PROJD_CUDA_FAULT_WARM=1: a faulting kernel in lane 0's warm-up");
                pj_cuda_fault_launch(ln->s);
            }
        }
        if (noted > 1)
            pj_log_info("cuda: layer %s m=%u: %s (and at %u more m between the graphs' shapes)",
                        layer_label(st, l).s, first_m, first, noted - 1);
        else if (noted)
            pj_log_info("cuda: layer %s m=%u: %s", layer_label(st, l).s, first_m, first);
    }
    cudaError_t ce = cudaStreamSynchronize(ln->s);
    ls->t_warm = now_ns() - t0;
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        snprintf(ls->err, sizeof ls->err, "warm-up on lane %u: %s", ln->idx, t);
        return -EIO;
    }
    return 0;
}

static void *lane_start_main(void *arg)
{
    lane_start *ls = arg;
    cudaError_t ce = cudaSetDevice(ls->st->dev);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        snprintf(ls->err, sizeof ls->err, "lane %u: cudaSetDevice: %s", ls->ln->idx, t);
        ls->rc = -EIO;
        return NULL;
    }
    ls->rc = capture_lane(ls);
    if (!ls->rc && !env_long("PROJD_CUDA_NO_WARM", 0, 0, 1))
        ls->rc = warm_lane(ls);
    return NULL;
}

/* Capture, validate and warm every lane, the lanes side by side. The
 * outcome does not depend on the threads: a shape's note is the lowest
 * lane's, an error the lowest failing lane's. */
static int start_lanes(cu_state *st, char *err, size_t errlen)
{
    uint32_t n = st->n_lanes;
    lane_start *ls = calloc(n, sizeof *ls);
    if (!ls) {
        snprintf(err, errlen, "lane start-up: out of memory");
        return -ENOMEM;
    }
    int rc = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        ls[i].st = st;
        ls[i].ln = st->lanes[i];
        ls[i].res = calloc(st->n_layers ? st->n_layers : 1, sizeof *ls[i].res);
        if (!ls[i].res) {
            snprintf(err, errlen, "lane start-up: out of memory for %u layers' results",
                     st->n_layers);
            rc = -ENOMEM;
            break;
        }
        rc = val_alloc(st, &ls[i].v, err, errlen);
    }
    uint64_t t0 = now_ns();
    for (uint32_t i = 0; i < n && !rc; i++)
        ls[i].started = pthread_create(&ls[i].th, NULL, lane_start_main, &ls[i]) == 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (ls[i].started)
            pthread_join(ls[i].th, NULL);
        else
            lane_start_main(&ls[i]); /* no thread to be had: here, in turn */
    }
    double wall = ms_since(t0);
    for (uint32_t i = 0; i < n && !rc; i++) {
        if (ls[i].rc) {
            snprintf(err, errlen, "%s", ls[i].err);
            rc = ls[i].rc;
        }
    }
    uint64_t cap = 0, val = 0, warm = 0;
    for (uint32_t i = 0; i < n && !rc; i++) {
        cap = ls[i].t_cap > cap ? ls[i].t_cap : cap;
        val = ls[i].t_val > val ? ls[i].t_val : val;
        warm = ls[i].t_warm > warm ? ls[i].t_warm : warm;
        st->rep.warmed += ls[i].warmed;
    }
    for (uint32_t l = 0; l < st->n_layers && !rc; l++) {
        for (uint32_t si = 0; si < st->n_shapes; si++) {
            cu_shape *sh = &st->shapes[l][si];
            int all_patch = !st->no_patch;
            double worst = 0;
            char note[200] = "";
            for (uint32_t i = 0; i < n; i++) {
                if (ls[i].res[l][si].worst > worst)
                    worst = ls[i].res[l][si].worst;
                if (!ls[i].res[l][si].ok) {
                    all_patch = 0;
                    if (!note[0])
                        snprintf(note, sizeof note, "lane %u: %s", i, ls[i].res[l][si].note);
                }
            }
            sh->have_graph = 1;
            sh->patch_ok = all_patch;
            sh->check_rel = worst;
            if (!all_patch && !sh->note[0])
                snprintf(sh->note, sizeof sh->note, "%s", note);
            st->rep.graphs += n;
            if (all_patch)
                st->rep.graphs_patch += n;
        }
    }
    for (uint32_t i = 0; i < n; i++) {
        val_free(&ls[i].v);
        free(ls[i].res);
    }
    free(ls);
    /* Per phase, the slowest lane's time; the phases overlap across lanes,
     * so the wall time of all three is reported too. */
    st->rep.t_capture = (double)cap / 1e6;
    st->rep.t_validate = (double)val / 1e6;
    st->rep.t_warm = (double)warm / 1e6;
    st->rep.t_lanes_wall = wall;
    return rc;
}

/* ---- completion -------------------------------------------------------------------------- */

static void buf_unref(cu_state *st, cu_buf *h)
{
    if (atomic_fetch_sub(&h->gpu_refs, 1) == 1) {
        pthread_mutex_lock(&st->ref_mu);
        pthread_cond_broadcast(&st->ref_cv);
        pthread_mutex_unlock(&st->ref_mu);
    }
}

static cudaError_t wait_event(cudaEvent_t ev, uint64_t spin_ns)
{
    uint64_t t0 = now_ns();
    for (;;) {
        cudaError_t ce = cudaEventQuery(ev);
        if (ce != cudaErrorNotReady)
            return ce;
        if (now_ns() - t0 > spin_ns)
            break;
        pj_cpu_relax();
    }
    return cudaEventSynchronize(ev);
}

static void complete(cu_lane *ln, cu_pend *p, cudaError_t ce)
{
    cu_state *st = ln->st;
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        if (p->status == PJ_OK) {
            p->status = PJ_E_BACKEND;
            p->failed_op = UINT32_MAX;
            snprintf(p->err, sizeof p->err, "CUDA error while the request ran: %s", t);
        }
        if (dead_after(st, ce, t))
            p->fatal = 1;
    }
    for (uint32_t i = 0; i < p->n_bufs; i++)
        buf_unref(st, p->bufs[i]);
    free(p->bufs);
    p->bufs = NULL;
    p->n_bufs = 0;
    atomic_fetch_add(&ln->jobs, 1);
    atomic_fetch_add(&ln->busy_ns, now_ns() - p->t_submit);
    if (p->status != PJ_OK)
        atomic_fetch_add(&st->failed, 1);
    if (p->fatal)
        atomic_fetch_add(&st->fatal_errors, 1);
    pj_job *job = p->job;
    p->job = NULL;
    if (!job) {
        if (p->status != PJ_OK)
            pj_log_err("cuda: a request answered at launch (ACCEPT_REPLY) failed afterwards: %s",
                       p->err);
        return;
    }
    job->status = p->status;
    job->fatal = p->fatal;
    for (uint32_t i = 0; i < job->n_ops; i++) {
        if (p->status == PJ_OK)
            job->ops[i].status = PJ_OK;
        else if (p->failed_op == UINT32_MAX || i > p->failed_op)
            job->ops[i].status = PJ_E_BACKEND;
        else if (i == p->failed_op)
            job->ops[i].status = p->status;
        else
            job->ops[i].status = PJ_OK;
    }
    if (p->status != PJ_OK)
        snprintf(job->err, sizeof job->err, "%s", p->err);
    job->end_ns = now_ns();
    job->done(job);
}

/* Poll for the lane's next job for up to idle_spin_ns before sleeping on
 * the condition variable: a client that computes between projections and
 * waits for completion (no ACCEPT_REPLY) otherwise pays this thread's
 * wake-up on top of its own, tens of µs after a quiet spell. count is
 * written under mu, and read here atomically as a hint only. */
static void idle_spin(cu_lane *ln, uint64_t idle_spin_ns)
{
    if (!idle_spin_ns)
        return;
    uint64_t t0 = now_ns();
    while (__atomic_load_n(&ln->count, __ATOMIC_ACQUIRE) == 0 &&
           !__atomic_load_n(&ln->stop, __ATOMIC_ACQUIRE) && now_ns() - t0 < idle_spin_ns) {
        pj_cpu_relax();
    }
}

static void *completion_main(void *arg)
{
    cu_lane *ln = arg;
    cudaSetDevice(ln->st->dev);
    for (;;) {
        idle_spin(ln, ln->st->idle_spin_ns);
        pthread_mutex_lock(&ln->mu);
        while (ln->count == 0 && !ln->stop)
            pthread_cond_wait(&ln->cv, &ln->mu);
        if (ln->count == 0) {
            pthread_mutex_unlock(&ln->mu);
            return NULL;
        }
        cu_pend *p = &ln->ring[ln->head];
        pthread_mutex_unlock(&ln->mu);
        cudaError_t ce =
            p->sync_stream ? cudaStreamSynchronize(ln->s) : wait_event(p->ev, ln->st->spin_ns);
        complete(ln, p, ce);
        pthread_mutex_lock(&ln->mu);
        ln->head = (ln->head + 1) % CU_RING;
        ln->launches -= p->launches;
        ln->t_moved = now_ns();
        __atomic_sub_fetch(&ln->count, 1, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&ln->mu);
    }
}

/* ---- buffers -------------------------------------------------------------------------------- */

/* Lanes whose newest WAIT_EVENT job has not passed its client's wait:
 * its wait marker not done, or, where it has none, the job itself not
 * done. A lane runs in order, so when its newest wait has passed, all
 * earlier ones have. *stuck_ns (when not NULL): the longest any of those
 * lanes has gone without finishing a job (since its last one finished, or
 * since its oldest job came, whichever is later), 0 when none: a client
 * that passes its waits slowly moves its lane now and then, one that died
 * or holds its event does not.
 * Any thread: the markers and completion events are the lane's own, never
 * destroyed while it runs; a slot reused meanwhile answers for its new
 * job, which errs on the side of waiting. */
/* The event that tells whether a lane's newest WAIT_EVENT job has passed
 * its client's wait: the job's wait marker, or where it has none the job
 * itself; NULL when no job on the lane waits. *since: when the lane last
 * moved (its last finished job, or its oldest job's submit, whichever is
 * later). */
static cudaEvent_t lane_newest_wait(cu_lane *ln, uint64_t *since)
{
    cudaEvent_t ev = NULL;
    *since = 0;
    pthread_mutex_lock(&ln->mu);
    for (uint32_t i = ln->count; i-- > 0;) {
        const cu_pend *p = &ln->ring[(ln->head + i) % CU_RING];
        if (p->wait_ev) {
            ev = p->client_wait ? p->wev : p->ev;
            *since = ln->ring[ln->head].t_submit;
            if (ln->t_moved > *since)
                *since = ln->t_moved;
            break;
        }
    }
    pthread_mutex_unlock(&ln->mu);
    return ev;
}

static uint32_t lanes_client_waits(cu_state *st, uint64_t *stuck_ns)
{
    uint32_t waiting = 0;
    const uint64_t now = now_ns();
    uint64_t stuck = 0;
    for (uint32_t l = 0; l < st->n_lanes; l++) {
        uint64_t since;
        cudaEvent_t ev = lane_newest_wait(st->lanes[l], &since);
        if (ev && cudaEventQuery(ev) == cudaErrorNotReady) {
            waiting++;
            if (now > since && now - since > stuck)
                stuck = now - since;
        }
    }
    cudaGetLastError(); /* an event's error belongs to its job's completion */
    if (stuck_ns)
        *stuck_ns = stuck;
    return waiting;
}

/* cudaHostUnregister and cudaIpcCloseMemHandle return only once the
 * device's queued work has run, and meanwhile hold a lock of the driver's
 * that every other CUDA call of the process waits for. Behind a client
 * wait that never passes (a client that died before recording its event,
 * or one that stops passing its waits on purpose) that stops the event
 * loop's next launch for good (session 32, visit 1), although the release
 * runs on the closer thread. So a release starts only when no client wait
 * is pending on any lane, and holds wait_mu from that check until it
 * returns: a WAIT_EVENT submit takes it too, from its cudaStreamWaitEvent
 * until the job is on the lane's ring, so no wait can slip in between.
 *
 * A client whose CPU runs ahead of its GPU (a model's forward pass) keeps
 * a wait pending on its lane nearly all the time (test_cuda_backend S), so
 * waiting for a moment without one could last as long as its traffic.
 * Instead, from the moment a release wants to start (release_want), a
 * WAIT_EVENT job's wait is taken on the host (cu_submit): launched at once
 * if the client's event is already done, else put off (-EAGAIN, the server
 * tries again a millisecond later) until it is. No new wait reaches a lane,
 * the ones queued pass in their clients' time, and the release starts
 * with none left, so whatever a client does afterwards it waits only for
 * the daemon's own work. Where a lane with a wait pending has finished no
 * job for CU_RELEASE_HOPELESS_MS (a client that died, or holds its event
 * for long) the release cannot start before it moves, so the others' waits
 * go on their lanes again meanwhile; behind a dead client releases wait
 * for the restart. A client that passes its waits slowly (300 ms apart,
 * say) keeps its lane moving, so deferral stays on and the release starts
 * once its queued waits have passed. This thread polls 1 to 16 ms apart,
 * holding nothing. wanted (NULL: always) is asked before each poll: a
 * release no longer wanted (a REGISTER took its mapping back) stops the
 * deferral at once rather than holding WAIT_EVENT jobs back until the
 * lanes' waits have passed. 1: begun (wait_mu held, release_end ends it);
 * 0: given up, nothing held. Closer thread. */
static int release_begin(cu_state *st, int (*wanted)(void *), void *arg)
{
    cudaSetDevice(st->dev); /* the closer's thread is not the loop's */
    for (unsigned ms = 1;; ms = ms < 16 ? ms * 2 : 16) {
        if (wanted && !wanted(arg)) {
            atomic_store(&st->release_want, 0);
            return 0;
        }
        uint64_t stuck = 0;
        uint32_t waiting = lanes_client_waits(st, &stuck);
        atomic_store(&st->release_want,
                     st->release_defer && stuck < CU_RELEASE_HOPELESS_MS * 1000000ull);
        if (waiting == 0) {
            pthread_mutex_lock(&st->wait_mu);
            if (lanes_client_waits(st, NULL) == 0) {
                /* Until release_end: a WAIT_EVENT submit meanwhile finds
                 * wait_mu taken and waits on the host. */
                atomic_store(&st->release_want, st->release_defer);
                return 1;
            }
            pthread_mutex_unlock(&st->wait_mu);
        }
        usleep(ms * 1000u);
    }
}

static void release_end(cu_state *st)
{
    atomic_store(&st->release_want, 0);
    pthread_mutex_unlock(&st->wait_mu);
}

/* Wait on cv (mu held) for up to 10 ms. */
static void cond_wait_10ms(pthread_cond_t *cv, pthread_mutex_t *mu)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 10 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

/* Wait on ipc_cv (ipc_mu held) for up to 10 ms; 0 once deadline_ns has passed. */
static int ipc_wait_until(cu_state *st, uint64_t deadline_ns)
{
    if (now_ns() >= deadline_ns)
        return 0;
    cond_wait_10ms(&st->ipc_cv, &st->ipc_mu);
    return 1;
}

/* A release call's failure: logged; the memory is let go all the same. */
static void release_failed(const char *call, cudaError_t ce)
{
    if (ce == cudaSuccess)
        return;
    char t[200];
    ce_text(ce, t, sizeof t);
    pj_log_warn("cuda: %s: %s", call, t);
    cudaGetLastError();
}

/* An opened mapping that was never listed (ipc_get's failure after the
 * open). The closer thread, or the loop when none runs. */
static void ipc_close_unlisted_job(void *arg)
{
    cu_ipc *c = arg;
    release_begin(c->st, NULL, NULL);
    cudaError_t ce = cudaIpcCloseMemHandle(c->dev);
    release_end(c->st);
    release_failed("cudaIpcCloseMemHandle", ce);
    free(c);
}

/* An allocation is mapped once per process: a second cudaIpcOpenMemHandle
 * of the same handle fails, so registrations of it share one mapping. Loop
 * thread. */
static cu_ipc *ipc_get(cu_state *st, const uint8_t *handle, char *err, size_t errlen)
{
    uint64_t deadline = now_ns() + (uint64_t)CU_IPC_REOPEN_WAIT_MS * 1000000u;
    pthread_mutex_lock(&st->ipc_mu);
    for (cu_ipc *c = st->ipcs; c;) {
        if (memcmp(c->handle, handle, PJ_WIRE_IPC_HANDLE_SIZE) != 0) {
            c = c->next;
            continue;
        }
        if (c->closing < 2) {
            c->closing = 0;
            c->refs++;
            pthread_mutex_unlock(&st->ipc_mu);
            return c;
        }
        /* Its last mapping is being closed: it cannot be opened again until
         * that is done, which takes as long as the device's queued work. */
        if (!ipc_wait_until(st, deadline)) {
            pthread_mutex_unlock(&st->ipc_mu);
            snprintf(err, errlen,
                     "REGISTER: this CUDA allocation's previous mapping is still being closed "
                     "after %d ms (cudaIpcCloseMemHandle waits for the device's queued work); "
                     "register it again later",
                     CU_IPC_REOPEN_WAIT_MS);
            return NULL;
        }
        c = st->ipcs; /* the list may have changed */
    }
    pthread_mutex_unlock(&st->ipc_mu);
    cu_ipc *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(err, errlen, "REGISTER: out of memory");
        return NULL;
    }
    cudaIpcMemHandle_t h;
    memcpy(&h, handle, sizeof h);
    cudaError_t ce = cudaIpcOpenMemHandle(&c->dev, h, cudaIpcMemLazyEnablePeerAccess);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        (void)dead_after(st, ce, t);
        snprintf(err, errlen,
                 "REGISTER: cudaIpcOpenMemHandle: %s (the handle must come from "
                 "cudaIpcGetMemHandle on the base of a live cudaMalloc allocation)",
                 t);
        free(c);
        return NULL;
    }
    c->st = st;
    uintptr_t base = 0;
    size_t size = 0;
    if (pj_cg_address_range(c->dev, &base, &size) != 0 || base > (uintptr_t)c->dev) {
        snprintf(err, errlen, "REGISTER: cuMemGetAddressRange failed on the opened allocation");
        /* Never listed (no REGISTER may share it); closed on the closer,
         * as every release is (cudaIpcCloseMemHandle waits for the
         * device's queued work). */
        pj_closer_run(ipc_close_unlisted_job, c);
        return NULL;
    }
    /* The request's device_uuid is the client's word for where the buffer
     * lives. Opened with lazy peer access (the only flag the call takes),
     * an allocation on another GPU of the host maps as well, and every op
     * would then read and write it across the link, many times slower and
     * on a device this daemon does not own: refused. */
    struct cudaPointerAttributes pa;
    ce = cudaPointerGetAttributes(&pa, c->dev);
    if (ce != cudaSuccess || pa.device != st->dev) {
        if (ce != cudaSuccess) {
            char t[200];
            ce_text(ce, t, sizeof t);
            (void)dead_after(st, ce, t);
            snprintf(err, errlen, "REGISTER: cudaPointerGetAttributes on the opened allocation: %s",
                     t);
        } else {
            snprintf(err, errlen,
                     "REGISTER: the CUDA allocation is on device %d, not on device %d (%s) that "
                     "projd serves, although the request's device_uuid named it; register "
                     "buffers with the projd of their own GPU",
                     pa.device, st->dev, st->uuid_str);
        }
        pj_closer_run(ipc_close_unlisted_job, c);
        return NULL;
    }
    c->alloc_size = size - ((uintptr_t)c->dev - base);
    memcpy(c->handle, handle, PJ_WIRE_IPC_HANDLE_SIZE);
    c->refs = 1;
    pthread_mutex_lock(&st->ipc_mu);
    c->next = st->ipcs;
    st->ipcs = c;
    st->n_ipc_open++;
    pthread_mutex_unlock(&st->ipc_mu);
    return c;
}

/* A close of c's mapping begun by ipc_put: still wanted while no REGISTER
 * has taken c back since (closing reset) nor a later put begun its own
 * (close_gen moved on). */
typedef struct ipc_closing_ask {
    cu_ipc *c;
    uint32_t gen;
} ipc_closing_ask;

static int ipc_closing_locked(const ipc_closing_ask *a) /* ipc_mu held */
{
    return a->c->closing == 1 && a->c->close_gen == a->gen;
}

static int ipc_still_closing(void *arg)
{
    ipc_closing_ask *a = arg;
    pthread_mutex_lock(&a->c->st->ipc_mu);
    int r = ipc_closing_locked(a);
    pthread_mutex_unlock(&a->c->st->ipc_mu);
    return r;
}

/* The closer thread, or the loop when none runs. The entry stays listed,
 * marked closing, until the close has returned (see ipc_get); a REGISTER
 * of it before the close has started takes it back. */
static void ipc_put(cu_state *st, cu_ipc *c)
{
    pthread_mutex_lock(&st->ipc_mu);
    if (--c->refs > 0) {
        pthread_mutex_unlock(&st->ipc_mu);
        return;
    }
    c->closing = 1;
    ipc_closing_ask ask = {c, ++c->close_gen};
    pthread_mutex_unlock(&st->ipc_mu);
    if (!release_begin(st, ipc_still_closing, &ask))
        return; /* registered again meanwhile: it stays */
    pthread_mutex_lock(&st->ipc_mu);
    if (!ipc_closing_locked(&ask)) {
        /* registered again meanwhile (it stays), or released again after
         * that (the later put closes it) */
        pthread_mutex_unlock(&st->ipc_mu);
        release_end(st);
        return;
    }
    c->closing = 2;
    pthread_mutex_unlock(&st->ipc_mu);
    cudaError_t ce = cudaIpcCloseMemHandle(c->dev);
    release_end(st);
    release_failed("cudaIpcCloseMemHandle", ce);
    pthread_mutex_lock(&st->ipc_mu);
    for (cu_ipc **pp = &st->ipcs; *pp; pp = &(*pp)->next) {
        if (*pp == c) {
            *pp = c->next;
            break;
        }
    }
    st->n_ipc_open--;
    pthread_cond_broadcast(&st->ipc_cv);
    pthread_mutex_unlock(&st->ipc_mu);
    free(c);
}

static void ipc_put_job(void *arg)
{
    cu_ipc *c = arg;
    ipc_put(c->st, c);
}

static int cu_buffer_open(pj_backend *b, const pj_buf_desc *d, void **addr, void **handle,
                          char *err, size_t errlen)
{
    cu_state *st = b->priv;
    *handle = NULL;
    char t[200];
    cu_buf *h = calloc(1, sizeof *h);
    if (!h) {
        snprintf(err, errlen, "REGISTER: out of memory");
        return PJ_E_INTERNAL;
    }
    h->kind = d->kind;
    h->size = d->size;
    atomic_init(&h->gpu_refs, 0);
    if (d->kind == PJ_BUF_SHM) {
        /* The mapping covers whole pages; pin all of them. */
        long pg = sysconf(_SC_PAGESIZE);
        size_t psz = pg > 0 ? (size_t)pg : 4096;
        size_t len = ((size_t)d->size + psz - 1) / psz * psz;
        cudaError_t ce = cudaHostRegister(d->host, len, cudaHostRegisterDefault);
        if (ce == cudaSuccess && st->prop.canUseHostPointerForRegisteredMem) {
            h->dev = d->host; /* the device sees it at the host's address */
        } else if (ce == cudaSuccess) {
            ce = cudaHostGetDevicePointer(&h->dev, d->host, 0);
            /* On the loop: rare (devices that map registered memory
             * elsewhere, and a failure there), and the mapping is the
             * registry's, unmapped as soon as this returns. */
            if (ce != cudaSuccess)
                cudaHostUnregister(d->host);
        }
        if (ce != cudaSuccess) {
            ce_text(ce, t, sizeof t);
            (void)dead_after(st, ce, t);
            snprintf(err, errlen, "REGISTER: pinning %llu bytes of shared memory: %s",
                     (unsigned long long)d->size, t);
            free(h);
            return PJ_E_REGISTER;
        }
        h->host = d->host;
    } else {
        if (memcmp(d->device_uuid, b->device_uuid, PJ_WIRE_UUID_SIZE) != 0) {
            char u[48];
            uuid_format(d->device_uuid, u, sizeof u);
            snprintf(err, errlen, "REGISTER: buffer is on device %s but projd serves %s", u,
                     st->uuid_str);
            free(h);
            return PJ_E_REGISTER;
        }
        if (d->size == 0) {
            snprintf(err, errlen, "REGISTER: CUDA buffer of 0 bytes");
            free(h);
            return PJ_E_REGISTER;
        }
        cu_ipc *c = ipc_get(st, d->ipc_handle, err, errlen);
        if (!c) {
            free(h);
            return PJ_E_REGISTER;
        }
        if (d->size > c->alloc_size) {
            snprintf(err, errlen,
                     "REGISTER: CUDA buffer claims %llu bytes but its allocation has %zu (the "
                     "handle must name the allocation's base; sizes count from there)",
                     (unsigned long long)d->size, c->alloc_size);
            pj_closer_run(ipc_put_job, c); /* the close may wait for the device */
            free(h);
            return PJ_E_REGISTER;
        }
        h->ipc = c;
        h->dev = c->dev;
    }
    *addr = h->dev;
    *handle = h;
    return PJ_OK;
}

static int cu_buffer_busy(pj_backend *b, void *handle)
{
    (void)b;
    const cu_buf *h = handle;
    return h && atomic_load(&h->gpu_refs) > 0;
}

static void cu_buffer_close(pj_backend *b, void *handle)
{
    cu_state *st = b->priv;
    cu_buf *h = handle;
    if (!h)
        return;
    /* Work answered at launch may still use it: wait for the GPU. */
    if (atomic_load(&h->gpu_refs) > 0) {
        uint64_t t0 = now_ns();
        pthread_mutex_lock(&st->ref_mu);
        while (atomic_load(&h->gpu_refs) > 0 && ms_since(t0) < CU_CLOSE_WAIT_MS)
            cond_wait_10ms(&st->ref_cv, &st->ref_mu);
        pthread_mutex_unlock(&st->ref_mu);
        if (atomic_load(&h->gpu_refs) > 0) {
            pj_log_err("cuda: a buffer is still in use by the GPU after %d ms; leaking it",
                       CU_CLOSE_WAIT_MS);
            return;
        }
    }
    if (h->kind == PJ_BUF_SHM) {
        release_begin(st, NULL, NULL);
        cudaError_t ce = cudaHostUnregister(h->host);
        release_end(st);
        release_failed("cudaHostUnregister", ce);
    } else if (h->ipc) {
        ipc_put(st, h->ipc);
    }
    free(h);
}

/* ---- connections ------------------------------------------------------------------------- */

static int cu_stream_create(pj_backend *b, pj_backend_stream **out, char *err, size_t errlen)
{
    cu_state *st = b->priv;
    pj_backend_stream *bs = calloc(1, sizeof *bs);
    if (!bs) {
        snprintf(err, errlen, "backend cuda: out of memory");
        return -ENOMEM;
    }
    /* The least used lane that no dead client holds; any lane when all are
     * held (they all hang then, as they would have). */
    cu_lane *best = NULL;
    for (int pass = 0; pass < 2 && !best; pass++)
        for (uint32_t i = 0; i < st->n_lanes; i++) {
            cu_lane *ln = st->lanes[i];
            if ((pass == 0 && ln->n_lost) || (best && ln->n_conns >= best->n_conns))
                continue;
            best = ln;
        }
    best->n_conns++;
    bs->ln = best;
    *out = bs;
    return 0;
}

static void cu_stream_destroy(pj_backend *b, pj_backend_stream *bs)
{
    (void)b;
    if (!bs)
        return;
    cu_lane *ln = bs->ln;
    pthread_mutex_lock(&ln->mu);
    for (uint32_t i = 0; i < ln->count; i++) {
        cu_pend *p = &ln->ring[(ln->head + i) % CU_RING];
        if (p->wbs == bs)
            p->wbs = NULL;
    }
    pthread_mutex_unlock(&ln->mu);
    for (uint32_t i = 0; i < bs->n_ev; i++)
        cudaEventDestroy(bs->ev[i].ev);
    ln->n_conns--;
    if (bs->lost && --ln->n_lost == 0)
        pj_log_info("cuda: lane %u takes new connections again", ln->idx);
    free(bs);
}

static void cu_stream_lost(pj_backend *b, pj_backend_stream *bs)
{
    cu_state *st = b->priv;
    if (!bs || bs->lost)
        return;
    bs->lost = 1;
    cu_lane *ln = bs->ln;
    if (ln->n_lost++)
        return;
    uint32_t free_lanes = 0;
    for (uint32_t i = 0; i < st->n_lanes; i++)
        free_lanes += st->lanes[i]->n_lost == 0;
    pj_log_warn("cuda: lane %u is held by a dead client's wait: its %u other connections hang "
                "until projd restarts; new ones go to the other %u lanes",
                ln->idx, ln->n_conns - 1, free_lanes);
}

static int conn_has_event(const pj_backend_stream *bs, cudaEvent_t ev, uint64_t serial)
{
    for (uint32_t i = 0; i < bs->n_ev; i++)
        if (bs->ev[i].ev == ev && bs->ev[i].serial == serial)
            return 1;
    return 0;
}

/* bs's jobs still on the lane whose wait for the client's event has not
 * passed: the wait marker (wev, where it could be recorded) not done, and the
 * client's event not done either. cudaEventQuery sees an IPC event's
 * newest record, so for a client that has exited that is its last one;
 * a job whose event left the cache is not counted (nothing to ask; its
 * handle may name a later opening by now, hence the serial).
 * The oldest CU_WAITS_ASKED of them are asked: the lane runs in order, so
 * the first that has not passed is among the first. Loop thread. */
#define CU_WAITS_ASKED 64
static uint32_t cu_stream_client_waits(pj_backend *b, pj_backend_stream *bs)
{
    (void)b;
    if (!bs)
        return 0;
    cu_lane *ln = bs->ln;
    cudaEvent_t ev[CU_WAITS_ASKED], marker[CU_WAITS_ASKED];
    uint64_t serial[CU_WAITS_ASKED];
    uint32_t n = 0;
    pthread_mutex_lock(&ln->mu);
    for (uint32_t i = 0; i < ln->count && n < CU_WAITS_ASKED; i++) {
        const cu_pend *p = &ln->ring[(ln->head + i) % CU_RING];
        if (p->wbs != bs)
            continue;
        ev[n] = p->wait_ev;
        serial[n] = p->wait_serial;
        marker[n] = p->client_wait ? p->wev : NULL;
        n++;
    }
    pthread_mutex_unlock(&ln->mu);
    /* The handles stay valid: the slots' events are the lane's, and the
     * client's are destroyed only by this thread (eviction, stream_destroy). */
    uint32_t waiting = 0;
    for (uint32_t i = 0; i < n; i++) {
        if (marker[i] && cudaEventQuery(marker[i]) != cudaErrorNotReady)
            continue;
        if (!ev[i] || !conn_has_event(bs, ev[i], serial[i]))
            continue;
        if (cudaEventQuery(ev[i]) == cudaErrorNotReady)
            waiting++;
    }
    cudaGetLastError(); /* an event's error belongs to its job's completion */
    return waiting;
}

/* The connection's opened IPC event for this handle (opened on first use),
 * and which opening it is (*serial). */
static cudaEvent_t conn_event(pj_backend_stream *bs, const uint8_t *handle, uint64_t *serial,
                              char *err, size_t errlen)
{
    bs->tick++;
    for (uint32_t i = 0; i < bs->n_ev; i++) {
        if (memcmp(bs->ev[i].h, handle, PJ_WIRE_IPC_HANDLE_SIZE) == 0) {
            bs->ev[i].used = bs->tick;
            *serial = bs->ev[i].serial;
            return bs->ev[i].ev;
        }
    }
    cudaIpcEventHandle_t h;
    memcpy(&h, handle, sizeof h);
    cudaEvent_t ev = NULL;
    cudaError_t ce = cudaIpcOpenEventHandle(&ev, h);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        cudaGetLastError();
        snprintf(err, errlen,
                 "cudaIpcOpenEventHandle: %s (the event must be created with "
                 "cudaEventInterprocess | cudaEventDisableTiming)",
                 t);
        return NULL;
    }
    uint32_t slot = bs->n_ev;
    if (slot == CU_EVCACHE) { /* evict the least recently used; pending waits keep it alive */
        slot = 0;
        for (uint32_t i = 1; i < CU_EVCACHE; i++)
            if (bs->ev[i].used < bs->ev[slot].used)
                slot = i;
        cudaEventDestroy(bs->ev[slot].ev);
    } else {
        bs->n_ev++;
    }
    memcpy(bs->ev[slot].h, handle, PJ_WIRE_IPC_HANDLE_SIZE);
    bs->ev[slot].ev = ev;
    bs->ev[slot].used = bs->tick;
    bs->ev[slot].serial = *serial = ++bs->opened;
    return ev;
}

/* ---- execution ------------------------------------------------------------------------- */

static int shape_index(const cu_state *st, uint32_t m)
{
    for (uint32_t i = 0; i < st->n_shapes; i++)
        if (st->shape_m[i] == m)
            return (int)i;
    return -1;
}

static int al16(const void *p)
{
    return ((uintptr_t)p & 15u) == 0;
}

/* As aligned as the staging buffers the warm-up launched on (cudaMalloc
 * gives 256 bytes at least): cuBLAS picks its kernel by the operands'
 * alignment too, and cuBLASLt's default plans assume 256. */
static int al256(const void *p)
{
    return ((uintptr_t)p & 255u) == 0;
}

static cudaError_t copy_rows(void *dst, size_t dld, const void *src, size_t sld, size_t width,
                             uint32_t rows, cudaStream_t s)
{
    if (rows == 1 || (dld == width && sld == width))
        return cudaMemcpyAsync(dst, src, width * rows, cudaMemcpyDefault, s);
    return cudaMemcpy2DAsync(dst, dld, src, sld, width, rows, cudaMemcpyDefault, s);
}

/* The staged forms copy x in and y out row by row (cudaMemcpy2DAsync),
 * which refuses a row pitch over the device's memPitch (2^31 - 1 bytes on
 * Hopper) with an error that would read as the daemon's fault. A stride
 * that long is the request's shape: say so, as E_SHAPE, before staging. */
static int staged_pitch_check(const cu_state *st, const cu_layer *cl, const pj_exec_op *op,
                              char *err, size_t errlen)
{
    const uint64_t max_pitch = st->prop.memPitch;
    if (op->m == 1)
        return PJ_OK; /* one row: a plain copy, no pitch */
    const char *which = NULL;
    uint64_t ld = 0;
    if (op->x_ld * 2 > max_pitch) {
        which = "x";
        ld = op->x_ld;
    } else if (op->y_ld * 2 > max_pitch) {
        which = "y";
        ld = op->y_ld;
    }
    if (!which)
        return PJ_OK;
    snprintf(err, errlen,
             "op (%s m=%u n=%u): %s stride %" PRIu64 " elements (%" PRIu64
             " bytes) is over the device's largest copy pitch (%" PRIu64
             " bytes), and this request is staged (host memory, or a shape other than the one "
             "start-up launched: fewer rows, strides, alignment)",
             cl->L.name, op->m, op->n, which, ld, ld * 2, max_pitch);
    return PJ_E_SHAPE;
}

/* Refused rebinds of a shape's graph in a row before its requests are all
 * staged (run_op). */
#define BIND_FAILS_MAX 3

/* Point g at a client's buffers. PROJD_CUDA_REFUSE_BINDS (test only) makes
 * the first that many report a refusal after the rebinding was done: the
 * worst a driver's refusal part way through leaves behind, nodes aimed at
 * the client's buffers, which the staged run must aim back. */
static int bind_to_client(cu_state *st, pj_cgraph *g, const void *x, void *y, char *err,
                          size_t errlen)
{
    int rc = pj_cg_bind(g, x, y, err, errlen);
    if (rc == 0 && st->binds_to_refuse > 0) {
        st->binds_to_refuse--;
        snprintf(err, errlen, "refused for a test (PROJD_CUDA_REFUSE_BINDS)");
        return -EIO;
    }
    return rc;
}

/* Enqueue one op. Returns PJ_OK or a pj_status with err set. */
static int run_op(cu_state *st, cu_lane *ln, pj_exec_op *op, char *err, size_t errlen)
{
    /* The layer's smallest row class that holds the request's rows. */
    const int rcls = pj_rowclass_pick(&st->layers[op->layer].rc, op->n);
    const uint32_t li = rcls < 0 ? op->layer : st->layers[op->layer].cls[rcls];
    const cu_layer *cl = &st->layers[li];
    const cu_buf *hx = op->x_handle, *hy = op->y_handle;
    int host = (hx && hx->kind == PJ_BUF_SHM) || (hy && hy->kind == PJ_BUF_SHM);
    int si = shape_index(st, op->m);
    cu_shape *sh = si >= 0 ? &st->shapes[li][si] : NULL;
    const uint32_t K = cl->L.K, gn = cl->graph_n;
    /* Only shapes start-up has launched run on the device: every (layer,
     * m) at n = graph_n on contiguous rows, by its graph or by the warm-up
     * (warm_lane). Anything else would load a kernel cuBLAS has not loaded
     * yet, which waits for all the device's queued work, client waits
     * included (bench/results/2026-12-04-s38/visit4). So fewer rows,
     * strides, or pointers aligned below the staging buffers' 256 bytes go
     * through the lane's staging buffers: x copied in, all graph_n rows
     * computed, the first n copied out. */
    const int graph = sh && sh->have_graph;
    const int plain = !host && op->n == gn && op->x_ld == K && op->y_ld == gn;
    cudaError_t ce = cudaSuccess;
    char t[200];
    int path, staged;
    pj_eng_kind k;
    pj_eng_knobs kn;
    pj_eng_call c;
    if (graph) {
        /* A graph rebinds to 16-byte-aligned pointers when its check at
         * start-up said so (patch_ok). */
        staged = !(plain && sh->patch_ok && al16(op->x) && al16(op->y));
        path = staged ? PJ_CUDA_PATH_GRAPH_STAGED : PJ_CUDA_PATH_GRAPH;
        k = sh->k;
    } else {
        staged = !(plain && al256(op->x) && al256(op->y));
        path = staged ? PJ_CUDA_PATH_DIRECT_STAGED : PJ_CUDA_PATH_DIRECT;
        c = shape_call(st, ln, li, op->m, staged ? ln->sx : op->x, staged ? ln->sy : op->y);
        if (choose(st, cl, &c, &k, &kn, NULL, 0) < 0) {
            snprintf(err, errlen, "op (%s m=%u n=%u): no engine can run this shape", cl->L.name,
                     op->m, op->n);
            return PJ_E_BACKEND;
        }
    }
    if (graph && !staged) {
        if (bind_to_client(st, &ln->graphs[li][si], op->x, op->y, t, sizeof t) == 0) {
            sh->bind_fails = 0;
        } else {
            /* Start-up checked the rebinding against cudaMalloc memory; the
             * driver may still refuse a node pointed at a client's CUDA IPC
             * mapping (a memset node's new destination must be the same
             * kind of allocation as its first). The staging buffers are
             * what the graph was captured on, so the request runs staged
             * (the graph is bound back below); after BIND_FAILS_MAX
             * refusals in a row the shape's later requests go staged at
             * once, rather than meet a refused driver call each. */
            if (++sh->bind_fails == BIND_FAILS_MAX) {
                sh->patch_ok = 0;
                pj_log_warn("cuda: layer %s m=%u: rebinding its graph to clients' buffers failed "
                            "%d times in a row (%s); its requests are staged from now on",
                            cl->L.name, op->m, BIND_FAILS_MAX, t);
            } else {
                pj_log_info("cuda: layer %s m=%u: rebinding its graph to a client's buffers "
                            "failed (%s); this request runs staged",
                            cl->L.name, op->m, t);
            }
            staged = 1;
            path = PJ_CUDA_PATH_GRAPH_STAGED;
        }
    }
    if (staged) {
        int rc = staged_pitch_check(st, cl, op, err, errlen);
        if (rc != PJ_OK)
            return rc;
        ce = copy_rows(ln->sx, (size_t)K * 2, op->x, op->x_ld * 2, (size_t)K * 2, op->m, ln->s);
    }
    if (ce == cudaSuccess && graph) {
        pj_cgraph *g = &ln->graphs[li][si];
        if (staged && pj_cg_bind(g, ln->sx, ln->sy, t, sizeof t) != 0) {
            snprintf(err, errlen, "op (%s m=%u): %s", cl->L.name, op->m, t);
            return PJ_E_BACKEND;
        }
        ce = pj_cg_launch(g, ln->s);
    } else if (ce == cudaSuccess && pj_eng_launch(k, &kn, &c, ln->es) != 0) {
        ce = cudaErrorLaunchFailure;
    }
    if (ce == cudaSuccess && staged)
        ce =
            copy_rows(op->y, op->y_ld * 2, ln->sy, (size_t)gn * 2, (size_t)op->n * 2, op->m, ln->s);
    op->engine = PJ_CUDA_ENGINE_ID(k, path);
    if (ce != cudaSuccess) {
        /* pj_eng_launch clears the launch's error, a sticky one (an
         * earlier kernel's fault) included; the stream still reports that
         * one, without waiting (cu_submit's sticky_check then ends the
         * daemon). */
        cudaError_t last = cudaPeekAtLastError();
        if (last == cudaSuccess && (last = cudaStreamQuery(ln->s)) == cudaErrorNotReady)
            last = cudaSuccess;
        if (ce == cudaErrorLaunchFailure && last == cudaSuccess)
            snprintf(err, errlen, "op (%s m=%u n=%u): %s launch failed", cl->L.name, op->m, op->n,
                     pj_eng_name(k));
        else {
            ce_text(last != cudaSuccess ? last : ce, t, sizeof t);
            snprintf(err, errlen, "op (%s m=%u n=%u, %s): %s", cl->L.name, op->m, op->n,
                     pj_eng_name(k), t);
        }
        return PJ_E_BACKEND;
    }
    atomic_fetch_add(&st->path_ops[path], 1);
    return PJ_OK;
}

/* Does the lane hold a client wait that has not passed (lane_newest_wait,
 * which sets *since)? */
static int lane_wait_pending(cu_lane *ln, uint64_t *since)
{
    cudaEvent_t ev = lane_newest_wait(ln, since);
    const int pending = ev && cudaEventQuery(ev) == cudaErrorNotReady;
    cudaGetLastError(); /* an event's error belongs to its job's completion */
    return pending;
}

/* Answer a job at once (nothing was enqueued for it). */
static void fail_now(pj_job *job, int status, int fatal, const char *msg)
{
    job->status = status;
    job->fatal = fatal;
    for (uint32_t i = 0; i < job->n_ops; i++)
        job->ops[i].status = status;
    snprintf(job->err, sizeof job->err, "%s", msg);
    job->end_ns = now_ns();
    job->done(job);
}

static int cu_submit(pj_backend *b, pj_backend_stream *bs, pj_job *job)
{
    cu_state *st = b->priv;
    cu_lane *ln = bs->ln;
    if (job->n_ops == 0)
        return -EINVAL;
    job->start_ns = now_ns();
    job->err[0] = 0;
    job->fatal = 0;
    char msg[200];
    if (atomic_load(&st->dead)) {
        snprintf(msg, sizeof msg, "the device is in a failed state: %s", st->dead_msg);
        fail_now(job, PJ_E_BACKEND, 1, msg);
        return 0;
    }
    int accept = (job->flags & PJ_PF_ACCEPT_REPLY) != 0;
    if (accept && !(job->flags & PJ_PF_SIGNAL_EVENT)) {
        fail_now(job, PJ_E_FLAGS, 0, "PROJECT: ACCEPT_REPLY needs SIGNAL_EVENT");
        return 0;
    }
    const uint32_t charge = CU_JOB_LAUNCHES + CU_OP_LAUNCHES * job->n_ops;
    pthread_mutex_lock(&ln->mu);
    int full = ln->count >= CU_RING;
    /* A job alone on its lane always goes (one too big to go behind its
     * own wait takes that wait on the host, below). */
    const int over = ln->count > 0 &&
                     (ln->count + 1 > st->lane_jobs || ln->launches + charge > st->lane_launches);
    const uint32_t queued = ln->count;
    uint32_t slot = (ln->head + ln->count) % CU_RING;
    pthread_mutex_unlock(&ln->mu);
    /* Only a client wait ahead can hold the queue: without one the device
     * drains it, and a full queue costs the loop only the moment that
     * takes. (A job's own wait holds only its own launches, at most
     * CU_LANE_LAUNCHES: a larger one takes its wait on the host.) */
    uint64_t since = 0;
    const int deep = over && lane_wait_pending(ln, &since);
    if (deep && !full) {
        const uint64_t still = now_ns() - since;
        if (still < CU_RELEASE_HOPELESS_MS * 1000000ull) {
            atomic_fetch_add(&st->queue_put_off, 1);
            return -EAGAIN; /* the server submits it again */
        }
        atomic_fetch_add(&st->queue_refused, 1);
        snprintf(msg, sizeof msg,
                 "lane %u has %u jobs queued that have not moved for %.1f s (behind a wait that "
                 "has not passed?): refused, as queueing more would block the daemon",
                 ln->idx, queued, (double)still / 1e9);
        fail_now(job, PJ_E_LIMIT, 0, msg);
        return 0;
    }
    if (full) {
        /* Not put off (-EAGAIN): behind a dead client's wait the lane
         * never drains, and the server would try it for good. */
        snprintf(msg, sizeof msg,
                 "lane %u already has %d jobs in flight (answered at launch, behind a wait "
                 "that has not passed?)",
                 ln->idx, CU_RING);
        fail_now(job, PJ_E_LIMIT, 0, msg);
        return 0;
    }
    cu_pend *p = &ln->ring[slot];
    cu_buf **bufs = calloc(2 * (size_t)job->n_ops, sizeof *bufs);
    if (!bufs)
        return -ENOMEM;
    if (!p->ev) {
        cudaError_t ce =
            cudaEventCreateWithFlags(&p->ev, cudaEventDisableTiming | cudaEventBlockingSync);
        if (ce != cudaSuccess) {
            p->ev = NULL;
            free(bufs);
            char t[200];
            ce_text(ce, t, sizeof t);
            snprintf(msg, sizeof msg, "cudaEventCreate: %s", t);
            cudaError_t sk = sticky_check(ln->s);
            if (sk != cudaSuccess) {
                ce_text(sk, t, sizeof t);
                mark_dead(st, t);
            }
            fail_now(job, PJ_E_BACKEND, sk != cudaSuccess, msg);
            return 0;
        }
    }
    p->job = job;
    p->status = PJ_OK;
    p->fatal = 0;
    p->failed_op = UINT32_MAX;
    p->err[0] = 0;
    p->t_submit = job->start_ns;
    p->client_wait = 0;
    p->t_own = p->t_submit;
    p->wbs = NULL;
    p->wait_ev = NULL;
    p->wait_serial = 0;
    p->bufs = bufs;
    p->n_bufs = 0;
    p->launches = charge;
    p->sync_stream = 0;
    int wait_locked = 0;
    if (job->flags & PJ_PF_WAIT_EVENT) {
        uint64_t serial = 0;
        cudaEvent_t ev = conn_event(bs, job->wait_event, &serial, msg, sizeof msg);
        cudaError_t ce = cudaSuccess;
        /* wait_mu until the job is on the ring, where a release sees its
         * wait (release_begin); taken by a running release, or wanted by
         * one about to start: the wait is taken here, on the host. */
        if (ev)
            wait_locked = pthread_mutex_trylock(&st->wait_mu) == 0;
        /* A job whose own launches could fill the queue behind its wait
         * takes the wait on the host too. */
        const int big = charge > st->lane_launches;
        if (ev && (!wait_locked || atomic_load(&st->release_want) || big)) {
            ce = cudaEventQuery(ev);
            if (ce == cudaErrorNotReady) {
                if (wait_locked)
                    pthread_mutex_unlock(&st->wait_mu);
                p->job = NULL;
                p->bufs = NULL;
                free(bufs);
                atomic_fetch_add(&st->waits_put_off, 1);
                return -EAGAIN; /* the server submits it again */
            }
            if (ce == cudaSuccess)
                atomic_fetch_add(&st->waits_on_host, 1);
        } else if (ev) {
            ce = cudaStreamWaitEvent(ln->s, ev, 0);
            if (ce == cudaSuccess) {
                p->wbs = bs;
                p->wait_ev = ev;
                p->wait_serial = serial;
                /* Best effort: without the marker the wait counts as the
                 * daemon's own time, and a release waits for the whole job
                 * (release_begin). One more record per request: less than
                 * apply()'s run-to-run spread (session 31, visit 1). */
                if (!p->wev &&
                    cudaEventCreateWithFlags(&p->wev, cudaEventDisableTiming) != cudaSuccess) {
                    p->wev = NULL;
                    cudaGetLastError();
                }
                if (p->wev && cudaEventRecord(p->wev, ln->s) == cudaSuccess) {
                    p->client_wait = 1;
                    p->t_own = 0;
                } else {
                    cudaGetLastError();
                }
            }
        }
        if (!ev || ce != cudaSuccess) {
            p->status = PJ_E_BACKEND;
            p->failed_op = UINT32_MAX;
            if (ev) {
                char t[200];
                ce_text(ce, t, sizeof t);
                snprintf(p->err, sizeof p->err, "waiting on the client's event: %s", t);
            } else {
                snprintf(p->err, sizeof p->err, "WAIT_EVENT: %s", msg);
            }
        }
    }
    for (uint32_t i = 0; i < job->n_ops && p->status == PJ_OK; i++) {
        pj_exec_op *op = &job->ops[i];
        int rc = run_op(st, ln, op, p->err, sizeof p->err);
        if (rc != PJ_OK) {
            p->status = rc;
            p->failed_op = i;
            break;
        }
        cu_buf *hx = op->x_handle, *hy = op->y_handle;
        if (hx) {
            atomic_fetch_add(&hx->gpu_refs, 1);
            p->bufs[p->n_bufs++] = hx;
        }
        if (hy) {
            atomic_fetch_add(&hy->gpu_refs, 1);
            p->bufs[p->n_bufs++] = hy;
        }
        atomic_fetch_add(&st->ops, 1);
    }
    if (st->stall_after > 0 && ++st->stall_count == st->stall_after) {
        pj_log_warn("cuda: PROJD_CUDA_STALL_AFTER=%ld: holding lane %u's stream for %.1f s after "
                    "job %ld",
                    st->stall_after, ln->idx, (double)st->stall_ns / 1e9, st->stall_count);
        pj_cuda_stall_launch(ln->s, st->stall_ns);
    }
    if (st->fault_after > 0 && ++st->fault_count == st->fault_after) {
        pj_log_warn("cuda: PROJD_CUDA_FAULT_AFTER=%ld: launching a faulting kernel after job %ld",
                    st->fault_after, st->fault_count);
        pj_cuda_fault_launch(ln->s);
    }
    if (p->status == PJ_OK && (job->flags & PJ_PF_SIGNAL_EVENT)) {
        uint64_t serial;
        cudaEvent_t ev = conn_event(bs, job->signal_event, &serial, msg, sizeof msg);
        cudaError_t ce = ev ? cudaEventRecord(ev, ln->s) : cudaSuccess;
        if (!ev || ce != cudaSuccess) {
            p->status = PJ_E_BACKEND;
            p->failed_op = UINT32_MAX;
            if (ev) {
                char t[200];
                ce_text(ce, t, sizeof t);
                snprintf(p->err, sizeof p->err, "recording the client's event: %s", t);
            } else {
                snprintf(p->err, sizeof p->err, "SIGNAL_EVENT: %s", msg);
            }
        }
    }
    if (p->status != PJ_OK) {
        cudaError_t sk = sticky_check(ln->s);
        if (sk != cudaSuccess) {
            char t[200];
            ce_text(sk, t, sizeof t);
            p->fatal = 1;
            mark_dead(st, t);
        }
    }
    cudaError_t ce = cudaEventRecord(p->ev, ln->s);
    if (ce != cudaSuccess) {
        char t[200];
        ce_text(ce, t, sizeof t);
        if (p->status == PJ_OK) {
            p->status = PJ_E_BACKEND;
            p->failed_op = UINT32_MAX;
            snprintf(p->err, sizeof p->err, "cudaEventRecord: %s", t);
        }
        cudaError_t sk = sticky_check(ln->s);
        if (sk != cudaSuccess) {
            ce_text(sk, t, sizeof t);
            p->fatal = 1;
            mark_dead(st, t);
        } else {
            /* Unrecorded, p->ev still holds an earlier (finished) record:
             * waiting on it would finish this job at once and the server
             * would release buffers its work still uses. The completion
             * thread waits for the whole stream instead: not the loop,
             * which would wait, holding wait_mu, for whatever client
             * event the stream waits on (a dead client's: for good). */
            p->sync_stream = 1;
            cudaGetLastError();
        }
    }
    atomic_fetch_add(&st->jobs, 1);
    int answer_now = accept && p->status == PJ_OK;
    if (answer_now) {
        p->job = NULL;
        atomic_fetch_add(&st->accepted, 1);
    }
    pthread_mutex_lock(&ln->mu);
    ln->launches += p->launches;
    __atomic_add_fetch(&ln->count, 1, __ATOMIC_RELEASE);
    pthread_cond_signal(&ln->cv);
    pthread_mutex_unlock(&ln->mu);
    if (wait_locked)
        pthread_mutex_unlock(&st->wait_mu);
    if (answer_now) {
        /* The completion thread no longer touches the job. */
        job->status = PJ_OK;
        for (uint32_t i = 0; i < job->n_ops; i++)
            job->ops[i].status = PJ_OK;
        job->end_ns = now_ns();
        job->done(job);
    }
    return 0;
}

/* ---- stats and report -------------------------------------------------------------------- */

static void add_engines_json(cu_state *st, cJSON *arr)
{
    for (uint32_t l = 0; l < st->n_layers; l++) {
        for (uint32_t si = 0; si < st->n_shapes; si++) {
            const cu_shape *sh = &st->shapes[l][si];
            cJSON *o = cJSON_CreateObject();
            if (!o)
                return;
            char kn[96];
            pj_eng_knobs_str(sh->k, &sh->kn, kn, sizeof kn);
            cJSON_AddStringToObject(o, "layer", st->layers[l].L.name);
            if (st->layers[l].L.table_name[0])
                cJSON_AddStringToObject(o, "tuned_as", st->layers[l].L.table_name);
            cJSON_AddNumberToObject(o, "m", st->shape_m[si]);
            cJSON_AddNumberToObject(o, "n", st->layers[l].graph_n);
            cJSON_AddStringToObject(o, "engine", pj_eng_name(sh->k));
            cJSON_AddStringToObject(o, "knobs", kn);
            cJSON_AddStringToObject(o, "why", step_name(sh->step));
            cJSON_AddStringToObject(o, "graph",
                                    !sh->have_graph ? "none"
                                    : sh->patch_ok  ? "rebound"
                                                    : "staged");
            cJSON_AddNumberToObject(o, "check_rel", sh->check_rel);
            if (sh->note[0])
                cJSON_AddStringToObject(o, "note", sh->note);
            cJSON_AddItemToArray(arr, o);
        }
    }
}

static void cu_stats_json(pj_backend *b, cJSON *obj)
{
    cu_state *st = b->priv;
    cJSON_AddStringToObject(obj, "device", st->prop.name);
    cJSON_AddStringToObject(obj, "uuid", st->uuid_str);
    cJSON_AddNumberToObject(obj, "lanes", st->n_lanes);
    cJSON_AddNumberToObject(obj, "jobs", (double)atomic_load(&st->jobs));
    cJSON_AddNumberToObject(obj, "ops", (double)atomic_load(&st->ops));
    cJSON_AddNumberToObject(obj, "accepted", (double)atomic_load(&st->accepted));
    /* WAIT_EVENT jobs whose wait was taken on the host while a release
     * wanted to start: put off until the client's event was done, and
     * launched without a wait on their lane. */
    cJSON_AddNumberToObject(obj, "waits_put_off", (double)atomic_load(&st->waits_put_off));
    cJSON_AddNumberToObject(obj, "waits_on_host", (double)atomic_load(&st->waits_on_host));
    /* Jobs put off, or refused, because their lane's queue was at its
     * launch budget (CU_LANE_JOBS, CU_LANE_LAUNCHES). */
    cJSON_AddNumberToObject(obj, "queue_put_off", (double)atomic_load(&st->queue_put_off));
    cJSON_AddNumberToObject(obj, "queue_refused", (double)atomic_load(&st->queue_refused));
    cJSON_AddNumberToObject(obj, "failed", (double)atomic_load(&st->failed));
    cJSON_AddNumberToObject(obj, "fatal", (double)atomic_load(&st->fatal_errors));
    cJSON_AddBoolToObject(obj, "dead", atomic_load(&st->dead));
    pthread_mutex_lock(&st->ipc_mu);
    uint32_t n_ipc_open = st->n_ipc_open;
    pthread_mutex_unlock(&st->ipc_mu);
    cJSON_AddNumberToObject(obj, "ipc_open", n_ipc_open);
    cJSON *paths = cJSON_AddObjectToObject(obj, "paths");
    if (paths) {
        cJSON_AddNumberToObject(paths, "graph", (double)atomic_load(&st->path_ops[1]));
        cJSON_AddNumberToObject(paths, "graph_staged", (double)atomic_load(&st->path_ops[2]));
        cJSON_AddNumberToObject(paths, "direct", (double)atomic_load(&st->path_ops[3]));
        cJSON_AddNumberToObject(paths, "direct_staged", (double)atomic_load(&st->path_ops[4]));
    }
    cJSON *lanes = cJSON_AddArrayToObject(obj, "lane");
    for (uint32_t i = 0; lanes && i < st->n_lanes; i++) {
        cJSON *o = cJSON_CreateObject();
        if (!o)
            break;
        cJSON_AddNumberToObject(o, "connections", st->lanes[i]->n_conns);
        cJSON_AddBoolToObject(o, "held", st->lanes[i]->n_lost > 0);
        cJSON_AddNumberToObject(o, "jobs", (double)atomic_load(&st->lanes[i]->jobs));
        pthread_mutex_lock(&st->lanes[i]->mu);
        cJSON_AddNumberToObject(o, "pending", st->lanes[i]->count);
        pthread_mutex_unlock(&st->lanes[i]->mu);
        cJSON_AddItemToArray(lanes, o);
    }
    size_t fr = 0, tot = 0;
    if (!atomic_load(&st->dead) && cudaMemGetInfo(&fr, &tot) != cudaSuccess)
        cudaGetLastError();
    cJSON *mem = cJSON_AddObjectToObject(obj, "memory");
    if (mem) {
        cJSON_AddNumberToObject(mem, "weights_stored_bytes", (double)st->rep.weights_stored);
        cJSON_AddNumberToObject(mem, "weights_bf16_copy_bytes",
                                (double)st->rep.weights_bf16_copies);
        cJSON_AddNumberToObject(mem, "used_weights_bytes", (double)st->rep.used_weights);
        cJSON_AddNumberToObject(mem, "used_lanes_bytes", (double)st->rep.used_lanes);
        cJSON_AddNumberToObject(mem, "used_graphs_bytes", (double)st->rep.used_graphs);
        cJSON_AddNumberToObject(mem, "used_total_bytes", (double)st->rep.used_total);
        cJSON_AddNumberToObject(mem, "device_free_bytes", (double)fr);
        cJSON_AddNumberToObject(mem, "device_total_bytes", (double)tot);
    }
    cJSON *su = cJSON_AddObjectToObject(obj, "startup_ms");
    if (su) {
        cJSON_AddNumberToObject(su, "load", st->b->model->load_ms);
        cJSON_AddNumberToObject(su, "convert", st->b->model->convert_ms);
        cJSON_AddNumberToObject(su, "device", st->rep.t_device);
        cJSON_AddNumberToObject(su, "upload", st->rep.t_upload);
        cJSON_AddNumberToObject(su, "lanes", st->rep.t_lanes);
        cJSON_AddNumberToObject(su, "capture", st->rep.t_capture);
        cJSON_AddNumberToObject(su, "validate", st->rep.t_validate);
        cJSON_AddNumberToObject(su, "warm", st->rep.t_warm);
        cJSON_AddNumberToObject(su, "lanes_side_by_side", st->rep.t_lanes_wall);
        cJSON_AddNumberToObject(su, "warmed_shapes", st->rep.warmed);
        cJSON_AddNumberToObject(su, "backend_total", st->rep.t_total);
    }
    cJSON_AddStringToObject(obj, "table", st->rep.table);
    cJSON *eng = cJSON_AddArrayToObject(obj, "engines");
    if (eng)
        add_engines_json(st, eng);
}

/* Without MPS a client's kernels and projd's time-slice the GPU (293 us
 * against 23 us a round trip, deploy/README.md "Why MPS"), and nothing else
 * says so: the driver finds the control daemon through the pipe directory
 * quietly, or runs without it. */
static void warn_without_mps(void)
{
    const char *dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
    if (!dir || !dir[0])
        dir = "/tmp/nvidia-mps";
    char path[4200];
    snprintf(path, sizeof path, "%s/control", dir);
    if (access(path, F_OK) != 0)
        pj_log_warn("cuda: no MPS control daemon (%s: %s): clients that launch kernels on this GPU "
                    "time-slice with projd (deploy/README.md, \"Why MPS\")",
                    path, strerror(errno));
}

/* Do layers a and b have the same shape and the same engine, knobs, step,
 * graph form and note at every m? */
static int same_engines(const cu_state *st, uint32_t a, uint32_t b)
{
    const pj_eng_layer *A = &st->layers[a].L, *B = &st->layers[b].L;
    /* A row class is said on its own: "serves more layers" would count it. */
    if (st->layers[a].is_class || st->layers[b].is_class)
        return 0;
    if (A->N != B->N || A->K != B->K || A->fmt != B->fmt ||
        st->layers[a].graph_n != st->layers[b].graph_n)
        return 0;
    for (uint32_t si = 0; si < st->n_shapes; si++) {
        const cu_shape *x = &st->shapes[a][si], *y = &st->shapes[b][si];
        if (x->k != y->k || x->step != y->step || x->patch_ok != y->patch_ok ||
            strcmp(x->note, y->note) != 0)
            return 0;
        char kx[96], ky[96]; /* as logged: no padding bytes compared */
        pj_eng_knobs_str(x->k, &x->kn, kx, sizeof kx);
        pj_eng_knobs_str(y->k, &y->kn, ky, sizeof ky);
        if (strcmp(kx, ky) != 0)
            return 0;
    }
    return 1;
}

static void log_report(cu_state *st)
{
    const cu_report *r = &st->rep;
    const pj_model *md = st->b->model;
    int drv = 0, rt = 0;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rt);
    pj_log_info("cuda: device %d %s (%s), sm_%d%d, %d SMs, %.1f GiB; driver %d.%d, runtime %d.%d, "
                "cuBLAS %d",
                st->dev, st->prop.name, st->uuid_str, st->prop.major, st->prop.minor,
                st->prop.multiProcessorCount, (double)r->mem_total / (1u << 30), drv / 1000,
                drv % 1000 / 10, rt / 1000, rt % 1000 / 10, pj_eng_cublas_version());
    pj_log_info(
        "cuda: startup: load %.1f ms, convert %.1f ms, device init %.1f ms, upload %.1f ms, "
        "lanes %.1f ms, then per lane (%u side by side) capture %.1f ms (%u graphs in all), "
        "validate %.1f ms, warm-up %.1f ms (%u direct shapes in all): %.1f ms; "
        "backend total %.1f ms",
        md->load_ms, md->convert_ms, r->t_device, r->t_upload, r->t_lanes, st->n_lanes,
        r->t_capture, r->graphs, r->t_validate, r->t_warm, r->warmed, r->t_lanes_wall, r->t_total);
    pj_log_info("cuda: device memory: weights %.1f MiB (stored formats %.1f MiB + bf16 copies "
                "%.1f MiB), lanes %.1f MiB (workspaces, cuBLAS, staging), graphs %.1f MiB; "
                "total %.1f MiB used of %.1f MiB free at start (cudaMemGetInfo)",
                mib(r->used_weights), mib(r->weights_stored), mib(r->weights_bf16_copies),
                mib(r->used_lanes), mib(r->used_graphs), mib(r->used_total), mib(r->mem_free0));
    pj_log_info("cuda: tuning table: %s%s", r->table,
                r->table_entries > 0 ? "" : (st->env_force[0] ? "; engine forced by env" : ""));
    /* A model's decoder layers repeat a few shapes, and layers of one
     * shape mostly get the same engines: their rows are said once, with
     * how many layers they serve (STATS backend_stats.engines has every
     * one), so that 1024 layers do not log 6000 lines. */
    uint32_t *same_as = calloc(st->n_layers ? st->n_layers : 1, sizeof *same_as);
    for (uint32_t l = 0; l < st->n_layers; l++) {
        const cu_layer *cl = &st->layers[l];
        uint32_t first = l;
        for (uint32_t p = 0; same_as && p < l && first == l; p++)
            if (same_as[p] == p && same_engines(st, p, l))
                first = p;
        if (same_as)
            same_as[l] = first;
        if (first != l)
            continue;
        for (uint32_t si = 0; si < st->n_shapes; si++) {
            const cu_shape *sh = &st->shapes[l][si];
            char kn[96];
            pj_eng_knobs_str(sh->k, &sh->kn, kn, sizeof kn);
            pj_log_info("cuda: engine %s m=%u n=%u: %s(%s) [%s], graph %s%s%s", cl->L.name,
                        st->shape_m[si], cl->graph_n, pj_eng_name(sh->k), kn, step_name(sh->step),
                        sh->patch_ok ? "rebound per request" : "staged", sh->note[0] ? ": " : "",
                        sh->note);
        }
    }
    for (uint32_t l = 0; same_as && l < st->n_layers; l++) {
        if (same_as[l] != l)
            continue;
        uint32_t more = 0, last = l;
        for (uint32_t o = l + 1; o < st->n_layers; o++)
            if (same_as[o] == l) {
                more++;
                last = o;
            }
        if (more)
            pj_log_info("cuda: engines of %s also serve %u more layer%s of its shape (through %s)",
                        st->layers[l].L.name, more, more == 1 ? "" : "s", st->layers[last].L.name);
    }
    free(same_as);
    pj_log_info("cuda: %u lanes (streams), %u graphs of %u rebindable", st->n_lanes, r->graphs,
                r->graphs_patch);
    warn_without_mps();
}

/* ---- open / close -------------------------------------------------------------------------- */

static void cu_close(pj_backend *b)
{
    cu_state *st = b->priv;
    if (!st)
        return;
    for (uint32_t i = 0; i < st->n_lanes; i++) {
        cu_lane *ln = st->lanes[i];
        if (!ln->th_started)
            continue;
        pthread_mutex_lock(&ln->mu);
        __atomic_store_n(&ln->stop, 1, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&ln->cv);
        pthread_mutex_unlock(&ln->mu);
        pthread_join(ln->th, NULL);
    }
    if (st->ctx_ready && !atomic_load(&st->dead))
        cudaDeviceSynchronize();
    for (uint32_t i = 0; i < st->n_lanes; i++)
        lane_free(st->lanes[i]);
    while (st->ipcs) {
        cu_ipc *c = st->ipcs;
        st->ipcs = c->next;
        cudaIpcCloseMemHandle(c->dev);
        free(c);
    }
    free_layers(st);
    free(st->table);
    pthread_cond_destroy(&st->ref_cv);
    pthread_mutex_destroy(&st->ref_mu);
    pthread_cond_destroy(&st->ipc_cv);
    pthread_mutex_destroy(&st->ipc_mu);
    pthread_mutex_destroy(&st->wait_mu);
    free(st);
    b->priv = NULL;
}

/* Before any upload: the weights' device bytes (daemon/memplan.h, a lower
 * bound) against what is free. A model that cannot fit is refused now,
 * saying what would make it fit, rather than at some layer's cudaMalloc
 * after the layers before it were converted and uploaded. */
static int check_weights_fit(const cu_state *st, size_t free_bytes, char *err, size_t errlen)
{
    pj_memplan plan;
    pj_memplan_weights(st->b->model, st->max_m, st->env_force, &plan);
    pj_log_info("cuda: the weights will take at least %.1f MiB of the %.1f MiB free (stored "
                "formats %.1f MiB, bf16 copies of %u of %u z12 layers %.1f MiB)",
                mib(plan.stored + plan.bf16_copies), mib(free_bytes), mib(plan.stored), plan.copied,
                plan.z12_layers, mib(plan.bf16_copies));
    char why[512];
    if (pj_memplan_check(&plan, free_bytes, why, sizeof why) == 0)
        return 0;
    snprintf(err, errlen, "backend cuda: %s", why);
    return -ENOMEM;
}

static int cu_open(pj_backend *b, char *err, size_t errlen)
{
    uint64_t t_start = now_ns();
    cu_state *st = calloc(1, sizeof *st);
    if (!st) {
        snprintf(err, errlen, "backend cuda: out of memory");
        return -ENOMEM;
    }
    st->b = b;
    b->priv = st;
    pthread_mutex_init(&st->ref_mu, NULL);
    pthread_cond_init(&st->ref_cv, NULL);
    pthread_mutex_init(&st->ipc_mu, NULL);
    pthread_cond_init(&st->ipc_cv, NULL);
    pthread_mutex_init(&st->wait_mu, NULL);
    const pj_config *cfg = b->cfg;
    st->max_m = cfg->shapes.max_m ? cfg->shapes.max_m : 1;
    for (uint32_t i = 0; i < cfg->shapes.n_m && st->n_shapes < CU_MAX_S; i++)
        if (cfg->shapes.m[i] >= 1 && cfg->shapes.m[i] <= st->max_m &&
            shape_index(st, cfg->shapes.m[i]) < 0)
            st->shape_m[st->n_shapes++] = cfg->shapes.m[i];
    const char *fe = getenv("PROJD_FORCE_ENGINE");
    if (fe && *fe) {
        if (split_force(fe, st->env_force, sizeof st->env_force, st->env_knobs,
                        sizeof st->env_knobs) != 0) {
            snprintf(err, errlen,
                     "PROJD_FORCE_ENGINE=%.80s...: longer than an engine name (%zu bytes) and "
                     "its knobs (%zu bytes) can be",
                     fe, sizeof st->env_force - 1, sizeof st->env_knobs - 1);
            cu_close(b);
            return -EINVAL;
        }
        pj_eng_knobs probe;
        memset(&probe, 0, sizeof probe);
        char why[160];
        if (pj_eng_from_name(st->env_force) < 0) {
            snprintf(err, errlen, "PROJD_FORCE_ENGINE=%s: unknown engine", fe);
            cu_close(b);
            return -EINVAL;
        }
        if (st->env_knobs[0] && pj_eng_knobs_parse(st->env_knobs, pj_eng_from_name(st->env_force),
                                                   &probe, why, sizeof why) != 0) {
            snprintf(err, errlen, "PROJD_FORCE_ENGINE=%s: %s", fe, why);
            cu_close(b);
            return -EINVAL;
        }
    }
    st->no_patch = env_long("PROJD_CUDA_NO_PATCH", 0, 0, 1) != 0;
    st->fault_after = env_long("PROJD_CUDA_FAULT_AFTER", 0, 0, 1000000000L);
    st->fault_warm = env_long("PROJD_CUDA_FAULT_WARM", 0, 0, 1) != 0;
    st->stall_after = env_long("PROJD_CUDA_STALL_AFTER", 0, 0, 1000000000L);
    st->binds_to_refuse = env_long("PROJD_CUDA_REFUSE_BINDS", 0, 0, 1000000000L);
    st->stall_ns = (uint64_t)env_long("PROJD_CUDA_STALL_MS", 3000, 1, 600000) * 1000000u;
    st->lane_jobs = (uint32_t)env_long("PROJD_CUDA_LANE_JOBS", CU_LANE_JOBS, 1, CU_RING);
    st->lane_launches =
        (uint32_t)env_long("PROJD_CUDA_LANE_LAUNCHES", CU_LANE_LAUNCHES, 1, 1000000000L);
    if (st->lane_jobs != CU_LANE_JOBS || st->lane_launches != CU_LANE_LAUNCHES)
        pj_log_warn("cuda: PROJD_CUDA_LANE_JOBS=%u, PROJD_CUDA_LANE_LAUNCHES=%u (tests only; "
                    "defaults %d, %d): a held client wait can block the daemon",
                    st->lane_jobs, st->lane_launches, CU_LANE_JOBS, CU_LANE_LAUNCHES);
    st->release_defer = env_long("PROJD_CUDA_RELEASE_DEFER", 1, 0, 1) != 0;
    st->no_row_classes = env_long("PROJD_CUDA_ROW_CLASSES", 1, 0, 1) == 0;
    if (st->no_row_classes)
        pj_log_warn("cuda: PROJD_CUDA_ROW_CLASSES=0 (measurements only): no graphs below a "
                    "layer's max_n; every request computes its layer's max_n rows");
    st->spin_ns = (uint64_t)env_long("PROJD_CUDA_SPIN_US", CU_SPIN_US, 0, 1000000) * 1000u;
    st->idle_spin_ns = (uint64_t)env_long("PROJD_CUDA_IDLE_SPIN_US", 0, 0, 1000000) * 1000u;
    uint32_t n_lanes = (uint32_t)env_long("PROJD_CUDA_LANES", CU_DEFAULT_LANES, 1, CU_MAX_LANES);
    int rc = 0;
    uint64_t t0 = now_ns();
    rc = select_device(st, err, errlen);
    if (!rc)
        rc = pj_cg_init(err, errlen);
    if (rc) {
        cu_close(b);
        return rc;
    }
    size_t fr0 = 0, fr1 = 0, fr2 = 0, fr3 = 0, tot = 0;
    const int have_free = cudaMemGetInfo(&fr0, &tot) == cudaSuccess;
    st->rep.mem_total = tot;
    st->rep.mem_free0 = fr0;
    st->rep.t_device = ms_since(t0);
    rc = load_table(st, err, errlen);
    if (!rc && have_free)
        rc = check_weights_fit(st, fr0, err, errlen);
    else if (!rc)
        pj_log_warn("cuda: cudaMemGetInfo failed: the weights' memory is not checked before "
                    "the upload");
    if (!rc)
        rc = start_step(1, err, errlen, "", "the weights' upload (%u layers, %u graph shapes)",
                        st->b->model->n_layers, st->n_shapes);
    if (rc) {
        cu_close(b);
        return rc;
    }

    t0 = now_ns();
    rc = alloc_layers(st, err, errlen);
    if (rc) {
        cu_close(b);
        return rc;
    }
    rc = upload_layers(st, err, errlen);
    if (rc) {
        cu_close(b);
        return rc;
    }
    cudaMemGetInfo(&fr1, &tot);
    st->rep.t_upload = ms_since(t0);

    t0 = now_ns();
    rc = start_step(1, err, errlen, "", "the lanes (%u)", n_lanes);
    for (uint32_t i = 0; i < n_lanes && !rc; i++) {
        rc = lane_create(st, i, &st->lanes[i], err, errlen);
        if (!rc)
            st->n_lanes = i + 1;
    }
    cudaMemGetInfo(&fr2, &tot);
    st->rep.t_lanes = ms_since(t0);
    /* This start's host memory is taken (the context, the upload's
     * unpacked copies come and gone, the lanes' cuBLAS handles): the next
     * instance's load may start, and its checks see all of it; the
     * capture, validation and warm-up that follow run beside that load
     * (daemon/DAEMON.md, "Loads take turns"; a no-op with no turn held). */
    pj_loadturn_release();
    if (!rc)
        rc = choose_engines(st, err, errlen);
    if (!rc)
        rc = start_step(1, err, errlen, "", "the graphs' capture, validation and warm-up");
    if (!rc)
        rc = start_lanes(st, err, errlen);
    if (rc) {
        cu_close(b);
        return rc;
    }
    cudaMemGetInfo(&fr3, &tot);
    st->rep.used_weights = fr0 > fr1 ? fr0 - fr1 : 0;
    st->rep.used_lanes = fr1 > fr2 ? fr1 - fr2 : 0;
    st->rep.used_graphs = fr2 > fr3 ? fr2 - fr3 : 0;
    st->rep.used_total = fr0 > fr3 ? fr0 - fr3 : 0;
    for (uint32_t i = 0; i < st->n_lanes; i++) {
        cu_lane *ln = st->lanes[i];
        int e = pthread_create(&ln->th, NULL, completion_main, ln);
        if (e) {
            snprintf(err, errlen, "lane %u: cannot start its completion thread: %s", i,
                     strerror(e));
            cu_close(b);
            return -e;
        }
        ln->th_started = 1;
    }
    st->rep.t_total = ms_since(t_start);
    log_report(st);
    return 0;
}

/* Per lane, the head of the completion ring is its oldest job (the stream
 * runs them in order). A head whose wait marker is not done is still
 * waiting for its client's event: the lane's time goes to *client_wait,
 * not to the daemon's own work. The first call that finds the marker done
 * starts the head's own time (so it counts late by at most one watchdog
 * tick). Loop thread (as submit, the only writer of a slot). */
static uint64_t cu_oldest_job_ns(pj_backend *b, uint64_t *client_wait)
{
    cu_state *st = b->priv;
    uint64_t own = 0, waiting = 0;
    const uint64_t now = now_ns();
    for (uint32_t i = 0; st && i < st->n_lanes; i++) {
        cu_lane *ln = st->lanes[i];
        if (!ln)
            continue;
        pthread_mutex_lock(&ln->mu);
        if (ln->count) {
            cu_pend *p = &ln->ring[ln->head];
            if (p->client_wait && !p->t_own) {
                cudaError_t q = cudaEventQuery(p->wev);
                if (q == cudaErrorNotReady) {
                    if (!waiting || p->t_submit < waiting)
                        waiting = p->t_submit;
                } else {
                    if (q != cudaSuccess)
                        cudaGetLastError(); /* the completion thread reports it */
                    p->t_own = now;
                }
            }
            /* A lane runs in order: its head has been the device's to run
             * only since the job before it finished (t_moved), however
             * long ago it came; counted from its submission, a connection
             * keeping several requests in flight would read as a stall. */
            uint64_t t = p->t_own && ln->t_moved > p->t_own ? ln->t_moved : p->t_own;
            if (t && (!own || t < own))
                own = t;
        }
        pthread_mutex_unlock(&ln->mu);
    }
    if (client_wait)
        *client_wait = waiting;
    return own;
}

static const pj_backend_ops cuda_ops = {
    .name = "cuda",
    .kind = PJ_BACKEND_CUDA,
    .project_flags = PJ_PF_WAIT_EVENT | PJ_PF_SIGNAL_EVENT | PJ_PF_ACCEPT_REPLY,
    .stream_depth = 8,
    .open = cu_open,
    .close = cu_close,
    .buffer_open = cu_buffer_open,
    .buffer_close = cu_buffer_close,
    .stream_create = cu_stream_create,
    .stream_destroy = cu_stream_destroy,
    .stream_client_waits = cu_stream_client_waits,
    .stream_lost = cu_stream_lost,
    .submit = cu_submit,
    .buffer_busy = cu_buffer_busy,
    .stats_json = cu_stats_json,
    .oldest_job_ns = cu_oldest_job_ns,
};

const pj_backend_ops *pj_backend_cuda_ops(void)
{
    return &cuda_ops;
}
