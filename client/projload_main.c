/* projload_main.c — projload: replay request traces against projd, check
 * results against the CPU reference, report latency and throughput.
 *
 *   projload gen  --kind decode|verify|reference --seed S --count N --out FILE ...
 *   projload info [--socket URL]
 *   projload [run] --trace FILE [mode] [bounds] [checks] [report]
 *   projload --version
 *
 * Every client is a thread with its own connection and its own registered
 * buffers (one x and one y shared-memory segment, split into slots, one per
 * request it may have in flight). Requests that are checked get random x
 * and a poisoned y; their inputs and outputs are copied to checker threads
 * that recompute every op with pj_ref_project and compare bit for bit.
 *
 * Exit status: 0 when every request succeeded and every check matched; 1
 * when a request failed, a check mismatched, the daemon connection was
 * lost, nothing was measured (or checked, when asked), the run was cut
 * short or its report (standard output, --json, --plot) could not be
 * written; 2 when the run could not start (command line, an output that
 * cannot be written, trace, daemon, model). The outputs (--json, --plot;
 * gen's --out) are checked before any work is done. A second SIGINT or
 * SIGTERM ends projload at once.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "client/arrivals.h"
#include "client/loadgpu.h"
#include "client/loadstat.h"
#include "client/plot.h"
#include "client/projd.h"
#include "client/servedmodel.h"
#include "client/trace.h"
#include "config/config.h"
#include "config/replacefile.h"
#include "daemon/model.h"
#include "kernels/bf16.h"
#include "kernels/refgemm.h"
#include "protocol/ring.h"
#include "protocol/version.h"

#define LT_MAX_CLIENTS   256
#define LT_MAX_SWEEP     32
#define LT_MAX_MSGS      5       /* first errors / mismatches kept for the report */
#define LT_ALIGN         256     /* op regions inside a slot start on this boundary */
#define LT_POISON        0x7fa5u /* a NaN no finite computation writes */
#define LT_MAX_PLAN      20000000ull
#define LT_MAX_SHAPES    256  /* shape groups; the rest of a trace's shapes share one */
#define LT_REL_TOL       1e-2 /* cuda backend: ||y - ref|| / ||ref|| below this */
#define EXIT_RUN_FAILED  1
#define EXIT_SETUP_ERROR 2

static volatile sig_atomic_t g_interrupted;

/* The first interrupt stops the run and waits for the requests in flight,
 * which a daemon that stopped answering holds for up to --timeout-ms each
 * (and the buffers' release after them as long again); the second, of
 * either signal, ends projload at once, as the signal does by default (it
 * is delivered when the handler returns). */
static void on_signal(int sig)
{
    if (g_interrupted) {
        signal(sig, SIG_DFL);
        raise(sig);
        return;
    }
    g_interrupted = 1;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleeps until now_ns() reads t (at once when it has). */
static void sleep_until_ns(uint64_t t)
{
    const struct timespec ts = {.tv_sec = (time_t)(t / 1000000000ull),
                                .tv_nsec = (long)(t % 1000000000ull)};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

/* splitmix64 over a counter. */
static uint64_t rng_next(uint64_t *s)
{
    return pj_splitmix64((*s)++);
}

static size_t align_up(size_t v)
{
    return (v + LT_ALIGN - 1) / LT_ALIGN * LT_ALIGN;
}

/* ---- options --------------------------------------------------------------- */

typedef enum lt_mode {
    MODE_CLOSED = 0,
    MODE_RATE = 1,    /* open loop, fixed intervals */
    MODE_POISSON = 2, /* open loop, exponential gaps */
    MODE_REPLAY = 3,  /* t_us of each request */
} lt_mode;

static const char *mode_name(lt_mode m)
{
    static const char *const names[] = {"closed", "open-fixed", "open-poisson", "replay"};
    return names[m];
}

typedef struct lt_opts {
    const char *trace, *socket, *model, *config, *json, *plot, *transport;
    const char *buffers; /* host | cuda | auto */
    const char *table;   /* compare mode: tuning table of the in-process engines */
    lt_mode mode;
    int mode_set;
    double rate, speed, duration_s, check_fraction;
    uint32_t concurrency, slots, check_threads;
    uint32_t spin_us; /* open loop and replay: the last part of a wait spent polling */
    int concurrency_set, slots_set, count_set, speed_set, spin_set;
    int check_set; /* --check-fraction given (else 0.01 with --model, 0 without) */
    uint64_t warmup, count, seed;
    uint32_t sweep[LT_MAX_SWEEP];
    size_t n_sweep;
    int timeout_ms;
    int progress; /* -1: when stderr is a tty */
    int compare;
    char command[2048]; /* the command line, for the JSON report */
} lt_opts;

__attribute__((format(printf, 1, 2))) static int usage_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fputs("projload: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputs(" (projload --help)\n", stderr);
    va_end(ap);
    return EXIT_SETUP_ERROR;
}

/* Each option takes one value: given again differently, the last would
 * win without a word (a second --config replaced the first, a wrapper's
 * default the caller's own), as projd's and projctl's would not. The same
 * value again is taken. li: getopt_long's index into lo (-1: none);
 * given: a slot per entry of lo. 0, or the usage error's exit code. */
static int given_once(const struct option *lo, int li, const char **given)
{
    if (li < 0 || !optarg)
        return 0;
    if (given[li] && strcmp(given[li], optarg))
        return usage_error("--%s given twice (\"%s\", then \"%s\"): it takes one value",
                           lo[li].name, given[li], optarg);
    given[li] = optarg;
    return 0;
}

/* getopt_long's '?' (an option it does not know) or ':' (one without its
 * value; the option strings start with ':', so getopt itself says
 * nothing): one line naming the argument. */
static int bad_option(const char *cmd, int ch, char **argv)
{
    const char *arg = optind > 0 ? argv[optind - 1] : "?";
    if (ch == ':')
        return usage_error("%s%s needs a value", cmd, arg);
    return usage_error("%sunknown option \"%s\"", cmd, arg);
}

/* 1 (said on stderr) when what was printed on stdout did not all get
 * there: a redirect to a full disk shows only at the flush. */
static int stdout_failed(void)
{
    int failed = ferror(stdout);
    errno = 0;
    if (fflush(stdout) != 0)
        failed = 1;
    if (failed)
        fprintf(stderr, "projload: writing standard output: %s\n", strerror(errno ? errno : EIO));
    return failed;
}

static int parse_u64(const char *opt, const char *s, uint64_t lo, uint64_t hi, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (!s[0] || *end || errno || s[0] == '-' || v < lo || v > hi)
        return usage_error("%s: expected an integer in %llu..%llu, got \"%s\"", opt,
                           (unsigned long long)lo, (unsigned long long)hi, s);
    *out = v;
    return 0;
}

static int parse_u32(const char *opt, const char *s, uint32_t lo, uint32_t hi, uint32_t *out)
{
    uint64_t v;
    int rc = parse_u64(opt, s, lo, hi, &v);
    if (!rc)
        *out = (uint32_t)v;
    return rc;
}

static int parse_double(const char *opt, const char *s, double lo, double hi, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (!s[0] || *end || errno || !isfinite(v) || v < lo || v > hi)
        return usage_error("%s: expected a number in %g..%g, got \"%s\"", opt, lo, hi, s);
    *out = v;
    return 0;
}

/* ---- transports ---------------------------------------------------------------
 * How a client's requests reach the daemon: nng (libprojd's REQ/REP), or
 * the shared-memory ring fast path, which libprojd uses for PROJECT once a
 * ring is attached to the connection (the same calls then go through it). */

struct lt_client;
struct lt_slot;

typedef struct lt_transport {
    const char *name;
    int ring; /* each client attaches a ring at setup */
    /* 1 when the daemon at url takes it; else 0 and why says so. */
    int (*available)(const char *url, char *why, size_t len);
    /* Submits ops for slot s; completion calls lt_slot_done. 0 or an error. */
    int (*submit)(struct lt_client *c, struct lt_slot *s, const projd_op *ops, size_t n,
                  projd_error *e);
    /* Outcome of a completed request (frees its resources): 0, a pj_status
     * or a negative errno, as projd_project returns. */
    int (*finish)(struct lt_slot *s, projd_result *res, projd_error *e);
} lt_transport;

/* ---- shared setup ---------------------------------------------------------------- */

typedef struct lt_setup {
    pj_trace tr;
    pj_welcome w;
    char url[600];
    pj_ls_msets msets;
    pj_model *model;
    const pj_weights *wt[PJ_WIRE_MAX_LAYERS_ALL]; /* reference weights per daemon layer */
    size_t slot_x, slot_y;                        /* bytes one request needs at most */
    uint32_t max_ops;                             /* most ops in one request */
    /* Groups each trace request counts in (shape + each (layer, m-set)),
     * ids valid in a loadstat prepared by groups_create in the same order. */
    uint32_t *ref_off; /* n_reqs + 1 offsets into refs */
    pj_ls_ref *refs;
    char **group_keys; /* key of group id i (1-based; [0] unused) */
    pj_ls_kind *group_kind;
    char (*group_layer)[64];
    uint32_t *group_lo, *group_hi;
    size_t n_groups;
    const lt_transport *transport;
    int cuda_bufs; /* clients register cudaMalloc memory (CUDA IPC) */
    int tolerant;  /* cuda backend: checks by relative error, not bit for bit */
} lt_setup;

/* ---- one run ---------------------------------------------------------------------- */

typedef struct lt_plan {
    uint64_t due_ns; /* from the run's start */
    uint64_t seq;
    uint32_t tr;
} lt_plan;

typedef struct lt_job lt_job;

typedef struct lt_checker {
    pthread_mutex_t mu;
    pthread_cond_t cv_job, cv_space;
    lt_job *head, *tail;
    size_t bytes, limit;
    uint64_t full_waits; /* a client waited for space */
    int closing;
    pthread_t th[64];
    uint32_t n;
} lt_checker;

typedef struct lt_run {
    const lt_opts *o;
    lt_setup *su;
    lt_mode mode;
    uint32_t nclients, slots;
    uint64_t total; /* requests to send, warm-up included (closed loop) */
    uint64_t t0, t_stop;
    atomic_uint_fast64_t next_seq;
    atomic_int stop;
    pthread_barrier_t ready, go;
    int abort;
    pj_loadstat ls;
    lt_checker chk;
    /* Everything, warm-up included. sent: requests that reached the
     * transport; not_sent: those it refused (counted in errors too). */
    atomic_uint_fast64_t sent, completed, errors, checked, mismatches, warm_sent, not_sent;
    /* Open loop and replay: requests due before --duration's end that were
     * not sent by then (the daemon did not keep up with the offered load;
     * their latencies are in no table). */
    atomic_uint_fast64_t behind_at_stop;
    /* Open loop and replay: how late projload itself sent the requests it
     * had slept for (its thread's wake-up past the due time, which the
     * latencies include as the daemon's): count, sum and max in ns. */
    atomic_uint_fast64_t own_late_n, own_late_sum_ns, own_late_max_ns;
    /* Open loop and replay: the schedule's mean gap between requests
     * (1/rate; a replay's over the requests played), and the latest due
     * time of a completed request; the rate is counted over the schedule
     * they were due in (see schedule_window). */
    uint64_t interval_ns;
    atomic_uint_fast64_t last_due;
    atomic_int lost;       /* a client lost its connection to the daemon */
    atomic_int unanswered; /* a request waited past --timeout-ms: the daemon stopped answering */
    uint64_t measured;     /* measured requests that succeeded (set after the run) */
    pthread_mutex_t mmu;
    char errs[LT_MAX_MSGS][600];
    size_t n_errs;
    char mism[LT_MAX_MSGS][600];
    size_t n_mism;
    double max_rel; /* worst relative error of a checked op (tolerant checks) */
    cJSON *stats_before, *stats_after;
    double wall_s;
} lt_run;

typedef struct lt_slot {
    struct lt_client *cl;
    int busy, done;
    projd_request *req;
    uint64_t seq;
    uint32_t tr;
    int check;
    uint64_t prepared; /* seq + 1 of the checked request prepare() readied here, 0 for none */
    uint64_t t_start, t_end;
    size_t x_off, y_off;
} lt_slot;

typedef struct lt_client {
    lt_run *run;
    uint32_t id;
    pthread_t th;
    projd_conn *conn;
    projd_buffer *xb, *yb;   /* host shared memory, or */
    struct pj_lgpu_bufs *gb; /* device memory (CUDA IPC) with host mirrors */
    uint32_t xid, yid;       /* the registered buffers */
    uint64_t xbase, ybase;   /* where x / y start in them */
    uint8_t *x, *y;          /* host side: the shm mapping or the mirrors */
    lt_slot *slots;
    projd_op *ops;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    lt_plan *plan;
    size_t n_plan, next;
    uint64_t rng;
    int failed;
    int lost;            /* the connection to the daemon is gone: stop */
    uint64_t t_finished; /* when its thread was done (now_ns) */
    char err[1200];
} lt_client;

__attribute__((format(printf, 3, 4))) static void note(lt_run *r, int mismatch, const char *fmt,
                                                       ...)
{
    pthread_mutex_lock(&r->mmu);
    size_t *n = mismatch ? &r->n_mism : &r->n_errs;
    if (*n < LT_MAX_MSGS) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(mismatch ? r->mism[*n] : r->errs[*n], sizeof r->errs[0], fmt, ap);
        va_end(ap);
        (*n)++;
    }
    pthread_mutex_unlock(&r->mmu);
}

/* ---- nng transport ------------------------------------------------------------------ */

static void lt_slot_done(projd_request *req, void *arg)
{
    (void)req;
    lt_slot *s = arg;
    uint64_t t = now_ns();
    pthread_mutex_lock(&s->cl->mu);
    s->t_end = t;
    s->done = 1;
    pthread_cond_signal(&s->cl->cv);
    pthread_mutex_unlock(&s->cl->mu);
}

static int nng_available(const char *url, char *why, size_t len)
{
    (void)url;
    (void)why;
    (void)len;
    return 1;
}

static int nng_submit(lt_client *c, lt_slot *s, const projd_op *ops, size_t n, projd_error *e)
{
    return projd_project_async(c->conn, ops, n, 0, lt_slot_done, s, &s->req, e);
}

static int nng_finish(lt_slot *s, projd_result *res, projd_error *e)
{
    int rc = projd_request_result(s->req, res, e);
    projd_request_free(s->req);
    s->req = NULL;
    return rc;
}

/* Whether the daemon takes a ring: attach one on a probe connection. */
static int ring_available(const char *url, char *why, size_t len)
{
    projd_conn *c;
    projd_error e;
    int ok = projd_connect(url, "projload-probe", &c, &e) == 0;
    if (ok) {
        ok = projd_ring_attach(c, 2, &e) == 0;
        projd_close(c);
    }
    if (!ok)
        snprintf(why, len, "%s", e.msg);
    return ok;
}

static const lt_transport transports[] = {
    {"ring", 1, ring_available, nng_submit, nng_finish},
    {"nng", 0, nng_available, nng_submit, nng_finish},
};

/* Slots of a client's ring: its concurrency, as a power of two. */
static uint32_t ring_slots(uint32_t slots)
{
    uint32_t n = PJ_RING_MIN_SLOTS;
    while (n < slots && n < PJ_RING_MAX_SLOTS)
        n *= 2;
    return n;
}

/* The transport called name ("auto": the fastest the daemon at url takes).
 * why_not receives why the ring is not used, when it is not. */
static const lt_transport *pick_transport(const char *name, const char *url, char *why, size_t len,
                                          char *why_not, size_t why_not_len)
{
    size_t n = sizeof transports / sizeof transports[0];
    why_not[0] = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(name, "auto") != 0 && strcmp(name, transports[i].name) != 0)
            continue;
        if (transports[i].available(url, why, len))
            return &transports[i];
        snprintf(why_not, why_not_len, "%s", why);
        if (strcmp(name, "auto") != 0)
            return NULL;
    }
    if (strcmp(name, "auto") != 0 && strcmp(name, "nng") != 0 && strcmp(name, "ring") != 0)
        snprintf(why, len, "unknown transport \"%s\" (auto, nng, ring)", name);
    return NULL;
}

/* ---- checking -------------------------------------------------------------------- */

struct lt_job {
    lt_job *next;
    uint64_t seq;
    uint32_t tr;
    int measured;
    size_t bytes;
    uint8_t *x, *y; /* copies of the slot's regions */
};

/* Tolerant comparison (cuda backend: the engines sum in another order than
 * the CPU reference): every element written (no poison left), no NaN, and
 * ||y - ref|| / ||ref|| < LT_REL_TOL. Returns 1 on a mismatch (noted). */
static int check_rel(lt_run *r, const lt_job *j, uint32_t i, const char *lname, uint32_t m,
                     uint32_t n, const uint16_t *y, const uint16_t *ref)
{
    const lt_setup *su = r->su;
    const pj_trace_req *q = &su->tr.reqs[j->tr];
    size_t count = (size_t)m * n, unwritten = 0, nans = 0, first = SIZE_MAX;
    double num = 0, den = 0;
    for (size_t t = 0; t < count; t++) {
        if (y[t] == LT_POISON) {
            unwritten++;
        } else {
            float v = pj_bf16_to_f32(y[t]), w = pj_bf16_to_f32(ref[t]);
            if (isnan(v)) {
                nans++;
            } else {
                num += ((double)v - w) * ((double)v - w);
                den += (double)w * w;
                continue;
            }
        }
        if (first == SIZE_MAX)
            first = t;
    }
    double rel = den > 0 ? sqrt(num / den) : (num > 0 ? INFINITY : 0);
    pthread_mutex_lock(&r->mmu);
    if (rel > r->max_rel || isnan(rel))
        r->max_rel = rel;
    pthread_mutex_unlock(&r->mmu);
    if (unwritten || nans) {
        note(r, 1,
             "request %llu (%s:%u) op %u (%s m=%u n=%u): %zu values never written, %zu NaN "
             "(first y[%zu][%zu] = 0x%04x, reference 0x%04x)",
             (unsigned long long)j->seq, su->tr.file, q->line, i, lname, m, n, unwritten, nans,
             first / n, first % n, y[first], ref[first]);
        return 1;
    }
    if (!(rel < LT_REL_TOL)) {
        note(r, 1,
             "request %llu (%s:%u) op %u (%s m=%u n=%u): ||y - ref|| / ||ref|| = %.3g (limit %g)",
             (unsigned long long)j->seq, su->tr.file, q->line, i, lname, m, n, rel, LT_REL_TOL);
        return 1;
    }
    return 0;
}

/* 1 (noted) when bytes [from, to) of the job's y slot, poisoned before the
 * request, were written: the daemon wrote outside an op's m x n region. */
static int check_untouched(lt_run *r, const lt_job *j, size_t from, size_t to, const char *where,
                           uint32_t op)
{
    const lt_setup *su = r->su;
    const uint16_t *y = (const uint16_t *)j->y;
    for (size_t b = from / 2; b < to / 2; b++) {
        if (y[b] != LT_POISON) {
            note(r, 1,
                 "request %llu (%s:%u): y written outside the ops' regions: %s %u, byte %zu of "
                 "the slot holds 0x%04x",
                 (unsigned long long)j->seq, su->tr.file, su->tr.reqs[j->tr].line, where, op, b * 2,
                 y[b]);
            return 1;
        }
    }
    return 0;
}

/* Recomputes every op of the job's request and compares: bit for bit on
 * the cpu backend, by relative error on the cuda backend (check_rel).
 * The alignment padding after each op and the rest of the slot (at least
 * LT_ALIGN bytes of guard after the last op) must still hold the poison.
 * Returns 1 on a mismatch (noted), 0 when all match. */
static int check_job(lt_run *r, const lt_job *j)
{
    const lt_setup *su = r->su;
    const pj_trace_req *q = &su->tr.reqs[j->tr];
    size_t xo = 0, yo = 0;
    int bad = 0;
    for (uint32_t i = 0; i < q->n_ops && !bad; i++) {
        const pj_trace_op *op = &su->tr.ops[q->op0 + i];
        uint32_t k = pj_welcome_layers(&su->w)[op->layer].k, m = op->m, n = op->n;
        uint16_t *ref = malloc((size_t)m * n * sizeof *ref);
        const uint16_t *x = (const uint16_t *)(j->x + xo), *y = (const uint16_t *)(j->y + yo);
        int rc = ref ? pj_ref_project(su->wt[op->layer], m, n, x, k, ref, n) : -ENOMEM;
        if (rc != 0) {
            note(r, 1, "request %llu (%s:%u) op %u (%s m=%u n=%u): reference failed: %s",
                 (unsigned long long)j->seq, su->tr.file, q->line, i,
                 pj_welcome_layers(&su->w)[op->layer].name, m, n, strerror(-rc));
            bad = 1;
        } else if (su->tolerant) {
            bad = check_rel(r, j, i, pj_welcome_layers(&su->w)[op->layer].name, m, n, y, ref);
        } else if (memcmp(ref, y, (size_t)m * n * sizeof *ref) != 0) {
            size_t e = 0;
            while (ref[e] == y[e])
                e++;
            size_t diff = 0;
            for (size_t t = 0; t < (size_t)m * n; t++)
                diff += ref[t] != y[t];
            note(r, 1,
                 "request %llu (%s:%u) op %u (%s m=%u n=%u): y[%zu][%zu] = 0x%04x, reference "
                 "0x%04x (%zu of %zu values differ)",
                 (unsigned long long)j->seq, su->tr.file, q->line, i,
                 pj_welcome_layers(&su->w)[op->layer].name, m, n, e / n, e % n, y[e], ref[e], diff,
                 (size_t)m * n);
            bad = 1;
        }
        free(ref);
        if (!bad)
            bad = check_untouched(r, j, yo + (size_t)m * n * 2, yo + align_up((size_t)m * n * 2),
                                  "in the padding after op", i);
        xo += align_up((size_t)m * k * 2);
        yo += align_up((size_t)m * n * 2);
    }
    if (!bad)
        bad = check_untouched(r, j, yo, su->slot_y, "after the last op, op", q->n_ops - 1);
    return bad;
}

static void *checker_main(void *arg)
{
    lt_run *r = arg;
    lt_checker *c = &r->chk;
    for (;;) {
        pthread_mutex_lock(&c->mu);
        while (!c->head && !c->closing)
            pthread_cond_wait(&c->cv_job, &c->mu);
        lt_job *j = c->head;
        if (!j) {
            pthread_mutex_unlock(&c->mu);
            return NULL;
        }
        c->head = j->next;
        if (!c->head)
            c->tail = NULL;
        pthread_mutex_unlock(&c->mu);

        int bad = check_job(r, j);
        atomic_fetch_add(&r->checked, 1);
        if (bad)
            atomic_fetch_add(&r->mismatches, 1);
        if (j->measured) {
            const lt_setup *su = r->su;
            pj_loadstat_record_check(&r->ls, su->refs + su->ref_off[j->tr],
                                     su->ref_off[j->tr + 1] - su->ref_off[j->tr], bad);
        }
        pthread_mutex_lock(&c->mu);
        c->bytes -= j->bytes;
        pthread_cond_broadcast(&c->cv_space);
        pthread_mutex_unlock(&c->mu);
        free(j->x);
        free(j);
    }
}

/* Copies the slot's x and y for the checkers; waits while the queue holds
 * more than its limit (checks are never dropped). */
static void enqueue_check(lt_client *cl, const lt_slot *s)
{
    lt_run *r = cl->run;
    const lt_setup *su = r->su;
    const pj_trace_req *q = &su->tr.reqs[s->tr];
    size_t xb = 0, yb = su->slot_y; /* all of y: the padding and guard are checked */
    for (uint32_t i = 0; i < q->n_ops; i++) {
        const pj_trace_op *op = &su->tr.ops[q->op0 + i];
        xb += align_up((size_t)op->m * pj_welcome_layers(&su->w)[op->layer].k * 2);
    }
    lt_job *j = calloc(1, sizeof *j);
    uint8_t *mem = malloc(xb + yb);
    if (!j || !mem) {
        free(j);
        free(mem);
        atomic_fetch_add(&r->checked, 1);
        atomic_fetch_add(&r->mismatches, 1);
        note(r, 1, "request %llu: out of memory copying it for the check",
             (unsigned long long)s->seq);
        return;
    }
    memcpy(mem, cl->x + s->x_off, xb);
    memcpy(mem + xb, cl->y + s->y_off, yb);
    j->x = mem;
    j->y = mem + xb;
    j->bytes = xb + yb;
    j->seq = s->seq;
    j->tr = s->tr;
    j->measured = s->seq >= r->o->warmup;
    lt_checker *c = &r->chk;
    pthread_mutex_lock(&c->mu);
    if (c->bytes > c->limit)
        c->full_waits++;
    while (c->bytes > c->limit)
        pthread_cond_wait(&c->cv_space, &c->mu);
    c->bytes += j->bytes;
    if (c->tail)
        c->tail->next = j;
    else
        c->head = j;
    c->tail = j;
    pthread_cond_signal(&c->cv_job);
    pthread_mutex_unlock(&c->mu);
}

/* Deterministic choice: the same seed checks the same request numbers.
 * The first measured request is always checked, so a run asked to check
 * checks something however few requests it sends. */
static int want_check(const lt_run *r, uint64_t seq)
{
    double f = r->o->check_fraction;
    if (f <= 0 || !r->su->model)
        return 0;
    if (f >= 1 || seq == r->o->warmup)
        return 1;
    return (double)(pj_splitmix64(r->o->seed * 0x2545f4914f6cdd1dull ^ seq) >> 11) * 0x1p-53 < f;
}

/* ---- client thread -------------------------------------------------------------------- */

static void fill_random_bf16(uint64_t *rng, uint16_t *x, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        /* Uniform in [-1, 1): finite, with varied exponents near 1. */
        float f = (float)((int32_t)(rng_next(rng) >> 40) - (1 << 23)) * 0x1p-23f;
        x[i] = pj_f32_to_bf16(f);
    }
}

/* Whether a libprojd error means c's connection is gone (every later
 * request on it would fail at once). -ECONNRESET also ends the requests
 * pending on a ring the daemon dropped while the connection goes on over
 * nng (projd.h): a PING tells the two apart. */
static int conn_gone(lt_client *c, int rc)
{
    if (rc == -ECONNRESET)
        return projd_ping(c->conn, NULL) != 0;
    return rc == -ECANCELED || rc == -EBADF || rc == -ESHUTDOWN || rc == -ECONNABORTED;
}

/* c stops sending (and so, since the daemon most likely fails them all,
 * does the run), with one line saying what happened (what) and why. */
static void client_stops(lt_client *c, const char *what, const char *why)
{
    if (c->lost)
        return;
    c->lost = 1;
    c->failed = 1;
    snprintf(c->err, sizeof c->err, "client %u: %s (%.900s); it stopped sending", c->id, what, why);
    atomic_store(&c->run->stop, 1);
}

/* The client's connection is gone. */
static void client_lost(lt_client *c, const char *why)
{
    if (!c->lost)
        atomic_store(&c->run->lost, 1);
    client_stops(c, "lost the connection to the daemon", why);
}

/* A request of c's waited past --timeout-ms (no reply, or no free ring
 * slot): the daemon has stopped answering (hung, SIGSTOPped, its GPU
 * stuck), and each request after would wait as long: a run of thousands
 * went on for hours, where a lost connection stops at once. */
static void client_unanswered(lt_client *c, const char *why)
{
    if (!c->lost)
        atomic_store(&c->run->unanswered, 1);
    client_stops(c, "the daemon stopped answering", why);
}

/* A checked request's host side, readied in slot s before it is sent: the
 * whole y slot poisoned (the ops' regions, their padding and the guard
 * after the last: check_job looks at all of it) and its x drawn. The open
 * loop and replay do this while they wait for the request's due time
 * (their latency counts from it); issue() does it for a request not
 * readied so. */
static void prepare(lt_client *c, lt_slot *s, uint64_t seq, uint32_t tr)
{
    const lt_setup *su = c->run->su;
    const pj_trace_req *q = &su->tr.reqs[tr];
    s->prepared = 0;
    if (!want_check(c->run, seq))
        return;
    uint16_t *y = (uint16_t *)(c->y + s->y_off);
    for (size_t t = 0; t < su->slot_y / 2; t++)
        y[t] = LT_POISON;
    size_t xo = s->x_off;
    for (uint32_t i = 0; i < q->n_ops; i++) {
        const pj_trace_op *op = &su->tr.ops[q->op0 + i];
        uint32_t k = pj_welcome_layers(&su->w)[op->layer].k;
        fill_random_bf16(&c->rng, (uint16_t *)(c->x + xo), (size_t)op->m * k);
        xo += align_up((size_t)op->m * k * 2);
    }
    s->prepared = seq + 1;
}

/* Send request seq (trace request tr) from slot s; 1 when it was sent, 0
 * when it failed before reaching the daemon (counted as not sent). */
static int issue(lt_client *c, lt_slot *s, uint64_t seq, uint32_t tr, uint64_t t_due)
{
    lt_run *r = c->run;
    const lt_setup *su = r->su;
    const pj_trace_req *q = &su->tr.reqs[tr];
    s->seq = seq;
    s->tr = tr;
    s->check = want_check(r, seq);
    if (s->check && s->prepared != seq + 1)
        prepare(c, s, seq, tr);
    s->prepared = 0;
    size_t xo = s->x_off, yo = s->y_off;
    for (uint32_t i = 0; i < q->n_ops; i++) {
        const pj_trace_op *op = &su->tr.ops[q->op0 + i];
        uint32_t k = pj_welcome_layers(&su->w)[op->layer].k;
        c->ops[i] = (projd_op){.layer = (uint32_t)op->layer,
                               .m = op->m,
                               .n = op->n,
                               .x_buf = c->xid,
                               .x_off = c->xbase + xo,
                               .x_ld = k,
                               .y_buf = c->yid,
                               .y_off = c->ybase + yo,
                               .y_ld = op->n};
        xo += align_up((size_t)op->m * k * 2);
        yo += align_up((size_t)op->m * op->n * 2);
    }
    projd_error e;
    int rc = 0;
#ifdef PJ_HAVE_CUDA
    /* Checked x and the poisoned y land on the device before PROJECT: the
     * daemon does not wait on this client's stream. */
    if (s->check && c->gb) {
        rc = pj_lgpu_to_device(c->gb, s->x_off, xo - s->x_off, s->y_off, su->slot_y, e.msg,
                               sizeof e.msg);
        e.code = rc;
    }
#endif
    s->done = 0;
    s->t_start = r->mode == MODE_CLOSED ? now_ns() : t_due;
    if (rc == 0)
        rc = su->transport->submit(c, s, c->ops, q->n_ops, &e);
    if (rc != 0) {
        /* Not sent: an error, neither sent nor in the tables (it has no
         * latency, and no daemon saw it). */
        atomic_fetch_add(&r->not_sent, 1);
        atomic_fetch_add(&r->errors, 1);
        note(r, 0, "request %llu (%s:%u): not sent: %s", (unsigned long long)seq, su->tr.file,
             q->line, e.msg);
        if (rc == -ETIMEDOUT)
            client_unanswered(c, e.msg);
        else if (conn_gone(c, rc))
            client_lost(c, e.msg);
        return 0;
    }
    if (seq < r->o->warmup)
        atomic_fetch_add(&r->warm_sent, 1);
    atomic_fetch_add(&r->sent, 1);
    s->busy = 1;
    return 1;
}

/* *a = max(*a, v), atomically. */
static void store_max(atomic_uint_fast64_t *a, uint64_t v)
{
    uint64_t cur = atomic_load(a);
    while (v > cur && !atomic_compare_exchange_weak(a, &cur, v))
        ;
}

static void harvest(lt_client *c, lt_slot *s)
{
    lt_run *r = c->run;
    const lt_setup *su = r->su;
    const pj_trace_req *q = &su->tr.reqs[s->tr];
    projd_result res;
    projd_error e;
    int rc = su->transport->finish(s, &res, &e);
    int ok = rc == 0 && res.status == PJ_OK;
    atomic_fetch_add(&r->completed, 1);
    if (!ok) {
        atomic_fetch_add(&r->errors, 1);
        note(r, 0, "request %llu (%s:%u): %s", (unsigned long long)s->seq, su->tr.file, q->line,
             rc ? e.msg : pj_status_name(res.status));
        if (rc == -ETIMEDOUT)
            client_unanswered(c, e.msg);
        else if (rc < 0 && conn_gone(c, rc))
            client_lost(c, e.msg);
        /* A daemon that is stopping answers every request at once: sending
         * on would be a storm of thousands of errors a second. */
        else if (rc == PJ_E_SHUTDOWN || (rc == 0 && res.status == PJ_E_SHUTDOWN))
            client_lost(c, "the daemon is shutting down");
    }
    if (r->mode != MODE_CLOSED) {
        store_max(&r->last_due, s->t_start);
    }
    if (s->seq >= r->o->warmup) {
        pj_ls_sample smp = {.t_start_ns = s->t_start,
                            .t_end_ns = s->t_end,
                            .queue_ns = ok ? res.queue_ns : 0,
                            .exec_ns = ok ? res.exec_ns : 0,
                            .n_ops = q->n_ops,
                            .ok = ok};
        pj_loadstat_record(&r->ls, su->refs + su->ref_off[s->tr],
                           su->ref_off[s->tr + 1] - su->ref_off[s->tr], &smp);
    }
#ifdef PJ_HAVE_CUDA
    if (ok && s->check && c->gb) {
        char why[300];
        if (pj_lgpu_y_to_host(c->gb, s->y_off, su->slot_y, why, sizeof why) != 0) {
            atomic_fetch_add(&r->checked, 1);
            atomic_fetch_add(&r->mismatches, 1);
            note(r, 1, "request %llu (%s:%u): y not checked: %s", (unsigned long long)s->seq,
                 su->tr.file, q->line, why);
            s->check = 0;
        }
    }
#endif
    if (ok && s->check)
        enqueue_check(c, s);
    s->busy = 0;
}

static int client_setup(lt_client *c)
{
    lt_run *r = c->run;
    const lt_setup *su = r->su;
    projd_error e;
    char name[64];
    snprintf(name, sizeof name, "projload-%u", c->id);
    if (projd_connect(su->url, name, &c->conn, &e) != 0) {
        snprintf(c->err, sizeof c->err, "client %u: connect: %s", c->id, e.msg);
        return -1;
    }
    projd_set_timeout_ms(c->conn, r->o->timeout_ms);
    if (su->transport->ring && projd_ring_attach(c->conn, ring_slots(r->slots), &e) != 0) {
        snprintf(c->err, sizeof c->err, "client %u: ring: %s", c->id, e.msg);
        return -1;
    }
    size_t xs = su->slot_x * r->slots, ys = su->slot_y * r->slots;
    if (su->cuda_bufs) {
#ifdef PJ_HAVE_CUDA
        char why[600];
        if (pj_lgpu_create(c->conn, xs, ys, &c->gb, why, sizeof why) != 0) {
            snprintf(c->err, sizeof c->err, "client %u: CUDA buffers (%zu + %zu bytes): %s", c->id,
                     xs, ys, why);
            return -1;
        }
        c->x = pj_lgpu_host_x(c->gb);
        c->y = pj_lgpu_host_y(c->gb);
        c->xid = pj_lgpu_x_id(c->gb);
        c->yid = pj_lgpu_y_id(c->gb);
        c->xbase = pj_lgpu_x_off(c->gb);
        c->ybase = pj_lgpu_y_off(c->gb);
#endif
    } else {
        if (projd_shm_create(c->conn, xs, &c->xb, &e) != 0 ||
            projd_shm_create(c->conn, ys, &c->yb, &e) != 0) {
            snprintf(c->err, sizeof c->err, "client %u: registering %zu + %zu bytes: %s", c->id, xs,
                     ys, e.msg);
            return -1;
        }
        c->x = projd_buffer_ptr(c->xb);
        c->y = projd_buffer_ptr(c->yb);
        c->xid = projd_buffer_id(c->xb);
        c->yid = projd_buffer_id(c->yb);
    }
    /* Unchecked requests compute on these values: random, not zeros, so
     * the daemon does representative work. */
    fill_random_bf16(&c->rng, (uint16_t *)c->x, xs / 2);
#ifdef PJ_HAVE_CUDA
    if (c->gb) {
        char why[300];
        if (pj_lgpu_to_device(c->gb, 0, xs, 0, 0, why, sizeof why) != 0) {
            snprintf(c->err, sizeof c->err, "client %u: %s", c->id, why);
            return -1;
        }
    }
#endif
    c->slots = calloc(r->slots, sizeof *c->slots);
    c->ops = calloc(su->max_ops, sizeof *c->ops);
    if (!c->slots || !c->ops) {
        snprintf(c->err, sizeof c->err, "client %u: out of memory", c->id);
        return -1;
    }
    for (uint32_t i = 0; i < r->slots; i++) {
        c->slots[i].cl = c;
        c->slots[i].x_off = su->slot_x * i;
        c->slots[i].y_off = su->slot_y * i;
    }
    return 0;
}

static void *client_main(void *arg)
{
    lt_client *c = arg;
    lt_run *r = c->run;
    c->failed = client_setup(c) != 0;
    pthread_barrier_wait(&r->ready);
    pthread_barrier_wait(&r->go);
    int stopping = r->abort;
    /* The run starts at t0, just after the barrier: the open loop and
     * replay wait for due times counted from it, and a closed loop waits
     * for it too. Sent before t0, its first requests fell before the wall
     * time's start (t0 to the last client's end), which read up to 1 ms
     * short, and a run done before t0 read as the main thread's 50 ms look. */
    if (!stopping && r->mode == MODE_CLOSED)
        sleep_until_ns(r->t0);
    uint32_t *ready = calloc(r->slots, sizeof *ready);
    if (!ready) {
        snprintf(c->err, sizeof c->err, "client %u: out of memory", c->id);
        c->failed = 1;
        stopping = 1;
    }
    /* The due time this thread last waited for with a slot free: a
     * request sent late after such a wait is late by projload's doing. */
    uint64_t waited_for_due = 0;
    const uint64_t spin_ns = (uint64_t)r->o->spin_us * 1000;
    /* A timed sleep on Linux may end up to the thread's timer slack (50 us
     * by default) after it was asked to, on top of the wake-up itself:
     * that lateness lands in every open-loop latency, which counts from the
     * due time. 1 ns asks the kernel for no slack; the spin below covers
     * the wake-up. */
    if (r->mode != MODE_CLOSED)
        (void)prctl(PR_SET_TIMERSLACK, 1UL, 0UL, 0UL, 0UL);
    for (;;) {
        /* Completions first: they free slots and feed the checkers. */
        size_t n_ready = 0, busy = 0;
        pthread_mutex_lock(&c->mu);
        for (uint32_t i = 0; c->slots && i < r->slots; i++) {
            if (c->slots[i].busy && c->slots[i].done) {
                c->slots[i].done = 0;
                ready[n_ready++] = i;
            }
        }
        pthread_mutex_unlock(&c->mu);
        for (size_t i = 0; i < n_ready; i++)
            harvest(c, &c->slots[ready[i]]);
        for (uint32_t i = 0; c->slots && i < r->slots; i++)
            busy += c->slots[i].busy;

        if (atomic_load(&r->stop))
            stopping = 1;
        uint64_t wait_until = 0;
        if (!stopping && busy < r->slots) {
            /* s: the free slot free the longest (its last reply the
             * oldest; 0 if never used) */
            lt_slot *s = NULL;
            for (uint32_t i = 0; i < r->slots; i++)
                if (!c->slots[i].busy && (!s || c->slots[i].t_end < s->t_end))
                    s = &c->slots[i];
            uint64_t t = now_ns();
            if (r->mode == MODE_CLOSED) {
                if (r->t_stop && t >= r->t_stop) {
                    stopping = 1;
                } else {
                    uint64_t seq = atomic_fetch_add(&r->next_seq, 1);
                    if (seq >= r->total) {
                        stopping = 1;
                    } else {
                        issue(c, s, seq, (uint32_t)(seq % r->su->tr.n_reqs), 0);
                        continue;
                    }
                }
            } else if (c->next >= c->n_plan) {
                stopping = 1;
            } else {
                const lt_plan *p = &c->plan[c->next];
                uint64_t due = r->t0 + p->due_ns;
                if (r->t_stop && due >= r->t_stop) {
                    stopping = 1; /* the plan is in due order: the rest is later */
                } else if (r->t_stop && t >= r->t_stop && s->t_end >= r->t_stop) {
                    /* --duration is wall time: what fell behind is counted,
                     * not sent after the end. Behind means the daemon held
                     * every slot of this client from the request's due
                     * time to the end. A slot freed before the end (s, the
                     * one free longest) would have taken it, in due order,
                     * had this thread been there (a wake-up, the harvest of
                     * other replies): it goes out now, however late, and
                     * the next request is judged by the slots left. */
                    atomic_fetch_add(&r->behind_at_stop, 1);
                    c->next++;
                    continue;
                } else if (due <= t) {
                    const int waited = due == waited_for_due;
                    waited_for_due = 0;
                    c->next++;
                    /* Counted for a request that went out: one refused
                     * before the daemon has no latency either. */
                    if (issue(c, s, p->seq, p->tr, due) && waited) {
                        atomic_fetch_add(&r->own_late_n, 1);
                        atomic_fetch_add(&r->own_late_sum_ns, t - due);
                        store_max(&r->own_late_max_ns, t - due);
                    }
                    continue;
                } else {
                    /* Not due yet and a slot is free: ready a checked
                     * request's buffers in it now (once), sleep until
                     * --spin-us before it, then poll (completions
                     * included) until it is due. */
                    if (waited_for_due != due)
                        prepare(c, s, p->seq, p->tr);
                    waited_for_due = due;
                    if (due - t <= spin_ns) {
                        pj_cpu_relax();
                        continue;
                    }
                    wait_until = due - spin_ns;
                }
            }
        }
        if (stopping && busy == 0)
            break;
        /* Sleep until a completion, the next due time, or a short tick (to
         * notice a stop). */
        uint64_t t = now_ns(), tick = t + 200000000ull;
        if (!wait_until || wait_until > tick)
            wait_until = tick;
        struct timespec ts = {.tv_sec = (time_t)(wait_until / 1000000000ull),
                              .tv_nsec = (long)(wait_until % 1000000000ull)};
        pthread_mutex_lock(&c->mu);
        for (;;) {
            int any = 0;
            for (uint32_t i = 0; i < r->slots && !any; i++)
                any = c->slots[i].busy && c->slots[i].done;
            if (any || pthread_cond_timedwait(&c->cv, &c->mu, &ts) != 0)
                break;
        }
        pthread_mutex_unlock(&c->mu);
    }
    free(ready);
    c->t_finished = now_ns(); /* read after the join */
    return NULL;
}

static void client_cleanup(lt_client *c)
{
    projd_buffer_release(c->xb, NULL);
    projd_buffer_release(c->yb, NULL);
#ifdef PJ_HAVE_CUDA
    pj_lgpu_destroy(c->gb, c->conn);
#endif
    projd_close(c->conn);
    free(c->slots);
    free(c->ops);
    free(c->plan);
    pthread_mutex_destroy(&c->mu);
    pthread_cond_destroy(&c->cv);
}

/* ---- daemon STATS ---------------------------------------------------------------------- */

static cJSON *fetch_stats(projd_conn *conn)
{
    char *text = NULL;
    projd_error e;
    if (projd_stats_json(conn, &text, &e) != 0) {
        fprintf(stderr, "projload: %s\n", e.msg); /* libprojd's text names STATS */
        return NULL;
    }
    cJSON *j = cJSON_Parse(text);
    if (!j)
        fprintf(stderr, "projload: STATS reply is not JSON\n");
    free(text);
    return j;
}

/* after - before for the counters; the window's mean for {count, mean}
 * objects; quantiles and maxima (not subtractable) left out. */
static cJSON *stats_delta(const cJSON *before, const cJSON *after)
{
    cJSON *d = cJSON_CreateObject();
    if (!d)
        return NULL;
    const cJSON *ca = cJSON_GetObjectItemCaseSensitive(after, "count");
    const cJSON *cb = cJSON_GetObjectItemCaseSensitive(before, "count");
    const cJSON *ma = cJSON_GetObjectItemCaseSensitive(after, "mean");
    const cJSON *mb = cJSON_GetObjectItemCaseSensitive(before, "mean");
    int meanable =
        cJSON_IsNumber(ca) && cJSON_IsNumber(cb) && cJSON_IsNumber(ma) && cJSON_IsNumber(mb);
    for (const cJSON *a = after ? after->child : NULL; a; a = a->next) {
        if (!a->string)
            continue;
        /* A counter the daemon had not reported yet (it lists only the
         * message types it has seen) counts from zero. */
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(before, a->string);
        static const cJSON zero = {.type = cJSON_Number};
        if (cJSON_IsObject(a)) {
            cJSON *sub = stats_delta(cJSON_IsObject(b) ? b : NULL, a);
            if (sub)
                cJSON_AddItemToObject(d, a->string, sub);
        } else if (cJSON_IsNumber(a) && (!b || cJSON_IsNumber(b))) {
            if (!b)
                b = &zero;
            if (strcmp(a->string, "mean") == 0) {
                if (meanable) {
                    double n = ca->valuedouble - cb->valuedouble;
                    double v = n > 0 ? (ma->valuedouble * ca->valuedouble -
                                        mb->valuedouble * cb->valuedouble) /
                                           n
                                     : 0;
                    cJSON_AddNumberToObject(d, "mean", v);
                }
            } else if (!(a->string[0] == 'p' && a->string[1] >= '0' && a->string[1] <= '9') &&
                       strcmp(a->string, "max") != 0 && strcmp(a->string, "min") != 0) {
                cJSON_AddNumberToObject(d, a->string, a->valuedouble - b->valuedouble);
            }
        }
    }
    return d;
}

static double jnum(const cJSON *o, const char *a, const char *b, const char *c)
{
    const cJSON *v = o;
    const char *path[3] = {a, b, c};
    for (int i = 0; i < 3 && path[i] && v; i++)
        v = cJSON_GetObjectItemCaseSensitive(v, path[i]);
    return cJSON_IsNumber(v) ? v->valuedouble : NAN;
}

static void print_stats(FILE *f, const cJSON *before, const cJSON *after)
{
    if (!before || !after) {
        fprintf(f, "\ndaemon STATS: not available\n");
        return;
    }
    cJSON *d = stats_delta(before, after);
    fprintf(f, "\ndaemon STATS over the run (after - before):");
    double v;
    if (!isnan(v = jnum(d, "requests", "PROJECT", NULL)))
        fprintf(f, " PROJECT %.0f,", v);
    if (!isnan(v = jnum(d, "ops", NULL, NULL)))
        fprintf(f, " ops %.0f,", v);
    if (!isnan(v = jnum(d, "errors", "total", NULL)))
        fprintf(f, " errors %.0f", v);
    fprintf(f, "\n  mean µs in the daemon:");
    static const char *const parts[] = {"queue", "exec", "total"};
    for (int i = 0; i < 3; i++)
        if (!isnan(v = jnum(d, "latency_us", parts[i], "mean")))
            fprintf(f, " %s %.1f", parts[i], v);
    fprintf(f, "\n  since the daemon started, µs:");
    for (int i = 0; i < 3; i++) {
        double p50 = jnum(after, "latency_us", parts[i], "p50");
        double p99 = jnum(after, "latency_us", parts[i], "p99");
        if (!isnan(p50))
            fprintf(f, " %s p50 %.1f p99 %.1f;", parts[i], p50, p99);
    }
    fputc('\n', f);
    cJSON_Delete(d);
}

/* ---- setup --------------------------------------------------------------------------- */

static void mset_label_cb(void *ctx, uint32_t m, char *out, size_t cap)
{
    const pj_ls_msets *s = ctx;
    uint32_t lo, hi;
    pj_ls_mset_of(s, m, &lo, &hi);
    pj_ls_mset_label(lo, hi, out, cap);
}

/* Appends group (kind, key) to the setup's list (keys are distinct: the
 * caller sees to it). */
static int add_group(lt_setup *su, pj_ls_kind kind, const char *key, const char *layer, uint32_t lo,
                     uint32_t hi, uint32_t *id)
{
    size_t n = su->n_groups ? su->n_groups : 1;
    char **k = realloc(su->group_keys, (n + 1) * sizeof *k);
    if (k)
        su->group_keys = k;
    pj_ls_kind *gk = realloc(su->group_kind, (n + 1) * sizeof *gk);
    if (gk)
        su->group_kind = gk;
    char(*gl)[64] = realloc(su->group_layer, (n + 1) * sizeof *gl);
    if (gl)
        su->group_layer = gl;
    uint32_t *a = realloc(su->group_lo, (n + 1) * sizeof *a);
    if (a)
        su->group_lo = a;
    uint32_t *b = realloc(su->group_hi, (n + 1) * sizeof *b);
    if (b)
        su->group_hi = b;
    if (!k || !gk || !gl || !a || !b || !(su->group_keys[n] = strdup(key)))
        return -ENOMEM;
    su->group_kind[n] = kind;
    snprintf(su->group_layer[n], 64, "%s", layer ? layer : "");
    su->group_lo[n] = lo;
    su->group_hi[n] = hi;
    su->n_groups = n + 1;
    *id = (uint32_t)n;
    return 0;
}

/* FNV-1a, 64 bits. */
static uint64_t hash_str(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return h;
}

/* Request r's shape key: its signature, or, when that does not fit in a
 * group key, its head and a hash of the whole signature, so that long
 * shapes stay apart. scratch grows as needed (the caller frees it). */
static int shape_key_of(const lt_setup *su, size_t r, char key[PJ_LS_KEY_MAX], char **scratch,
                        size_t *scratch_cap)
{
    void *ctx = (void *)&su->msets;
    size_t need = pj_trace_signature(&su->tr, r, mset_label_cb, ctx, key, PJ_LS_KEY_MAX);
    if (need < PJ_LS_KEY_MAX)
        return 0;
    if (need + 1 > *scratch_cap) {
        char *p = realloc(*scratch, need + 1);
        if (!p)
            return -ENOMEM;
        *scratch = p;
        *scratch_cap = need + 1;
    }
    pj_trace_signature(&su->tr, r, mset_label_cb, ctx, *scratch, *scratch_cap);
    const size_t tail = 21; /* "...#" and 16 hex digits + NUL */
    snprintf(key + PJ_LS_KEY_MAX - tail, tail, "...#%016llx",
             (unsigned long long)hash_str(*scratch));
    return 0;
}

typedef struct shape_ent {
    char *key;
    uint64_t hash;
    uint64_t count; /* requests of the trace with this shape */
    uint32_t m;     /* the m-set start of its smallest op */
    uint32_t first; /* its first request */
    uint32_t group;
} shape_ent;

static int cmp_shape_count(const void *a, const void *b)
{
    const shape_ent *x = *(const shape_ent *const *)a, *y = *(const shape_ent *const *)b;
    if (x->count != y->count)
        return x->count > y->count ? -1 : 1;
    return x->first < y->first ? -1 : x->first > y->first;
}

static int cmp_shape_order(const void *a, const void *b)
{
    const shape_ent *x = *(const shape_ent *const *)a, *y = *(const shape_ent *const *)b;
    if (x->m != y->m)
        return x->m < y->m ? -1 : 1;
    return strcmp(x->key, y->key);
}

/* Groups of every trace request: (layer, m-set) groups first, ordered by
 * the daemon's layer order then m, then shapes by m. At most LT_MAX_SHAPES
 * shapes get a group of their own (the trace's most frequent ones); the
 * others share the group LT_OTHER_SHAPES. Linear in the trace's size:
 * shapes are found through a hash table. */
static int build_groups(lt_setup *su)
{
    const pj_trace *t = &su->tr;
    int rc = -ENOMEM;
    su->ref_off = calloc(t->n_reqs + 1, sizeof *su->ref_off);
    su->refs = calloc(t->n_ops + t->n_reqs, sizeof *su->refs);
    size_t n_sets = (size_t)su->msets.n + 1, n_lm = (size_t)pj_welcome_n_layers(&su->w) * n_sets;
    uint32_t *lm_id = calloc(n_lm ? n_lm : 1, sizeof *lm_id);     /* 0: not in the trace */
    uint64_t *lm_seen = calloc(n_lm ? n_lm : 1, sizeof *lm_seen); /* request + 1 */
    uint32_t *lm_pos = calloc(n_lm ? n_lm : 1, sizeof *lm_pos);
    uint32_t *shape_of = calloc(t->n_reqs ? t->n_reqs : 1, sizeof *shape_of);
    shape_ent *sh = NULL, **order = NULL;
    uint32_t *table = NULL; /* shape index + 1; 0: empty */
    size_t n_sh = 0, cap_sh = 0, tsize = 1024, scratch_cap = 0;
    char *scratch = NULL;
    char key[PJ_LS_KEY_MAX], lab[32];
    uint32_t id, other = 0;
    table = calloc(tsize, sizeof *table);
    if (!su->ref_off || !su->refs || !lm_id || !lm_seen || !lm_pos || !shape_of || !table)
        goto out;

    /* (layer, m-set) groups: which the trace uses, in order. */
    for (size_t i = 0; i < t->n_ops; i++) {
        uint32_t lo, hi, set = pj_ls_mset_of(&su->msets, t->ops[i].m, &lo, &hi);
        lm_id[(size_t)t->ops[i].layer * n_sets + set] = 1;
    }
    for (uint32_t l = 0; l < pj_welcome_n_layers(&su->w); l++) {
        for (uint32_t set = 0; set < n_sets; set++) {
            if (!lm_id[(size_t)l * n_sets + set])
                continue;
            uint32_t lo = set ? su->msets.hi[set - 1] + 1 : 1, hi;
            if (set < su->msets.n) {
                hi = su->msets.hi[set];
            } else { /* the overflow set, which the resolver makes impossible */
                hi = su->w.max_m;
            }
            pj_ls_mset_label(lo, hi, lab, sizeof lab);
            snprintf(key, sizeof key, "%s m=%s", pj_welcome_layers(&su->w)[l].name, lab);
            if (add_group(su, PJ_LS_LAYER_M, key, pj_welcome_layers(&su->w)[l].name, lo, hi, &id))
                goto out;
            lm_id[(size_t)l * n_sets + set] = id;
        }
    }

    /* Distinct shapes. */
    for (size_t r = 0; r < t->n_reqs; r++) {
        if (shape_key_of(su, r, key, &scratch, &scratch_cap))
            goto out;
        uint64_t h = hash_str(key);
        size_t slot = (size_t)h & (tsize - 1);
        while (table[slot] &&
               (sh[table[slot] - 1].hash != h || strcmp(sh[table[slot] - 1].key, key)))
            slot = (slot + 1) & (tsize - 1);
        if (table[slot]) {
            shape_of[r] = table[slot] - 1;
            sh[shape_of[r]].count++;
            continue;
        }
        if (n_sh == cap_sh) {
            size_t nc = cap_sh ? 2 * cap_sh : 256;
            shape_ent *p = realloc(sh, nc * sizeof *p);
            if (!p)
                goto out;
            sh = p;
            cap_sh = nc;
        }
        uint32_t m_min = UINT32_MAX;
        for (uint32_t i = 0; i < t->reqs[r].n_ops; i++)
            if (t->ops[t->reqs[r].op0 + i].m < m_min)
                m_min = t->ops[t->reqs[r].op0 + i].m;
        uint32_t lo, hi;
        pj_ls_mset_of(&su->msets, m_min, &lo, &hi);
        sh[n_sh] =
            (shape_ent){.key = strdup(key), .hash = h, .count = 1, .m = lo, .first = (uint32_t)r};
        if (!sh[n_sh].key)
            goto out;
        shape_of[r] = (uint32_t)n_sh;
        table[slot] = (uint32_t)++n_sh;
        if (2 * n_sh > tsize) { /* rehash into a table twice the size */
            uint32_t *nt = calloc(2 * tsize, sizeof *nt);
            if (!nt)
                goto out;
            tsize *= 2;
            for (size_t j = 0; j < n_sh; j++) {
                size_t q = (size_t)sh[j].hash & (tsize - 1);
                while (nt[q])
                    q = (q + 1) & (tsize - 1);
                nt[q] = (uint32_t)j + 1;
            }
            free(table);
            table = nt;
        }
    }
    /* The most frequent shapes get groups, in ascending m then by name, so
     * the table reads from small to large. */
    order = malloc((n_sh ? n_sh : 1) * sizeof *order);
    if (!order)
        goto out;
    for (size_t j = 0; j < n_sh; j++)
        order[j] = &sh[j];
    size_t kept = n_sh;
    if (n_sh > LT_MAX_SHAPES) {
        qsort(order, n_sh, sizeof *order, cmp_shape_count);
        kept = LT_MAX_SHAPES - 1;
    }
    qsort(order, kept, sizeof *order, cmp_shape_order);
    for (size_t j = 0; j < kept; j++)
        if (add_group(su, PJ_LS_SHAPE, order[j]->key, NULL, 0, 0, &order[j]->group))
            goto out;
    if (kept < n_sh) {
        snprintf(key, sizeof key, "(%zu other shapes)", n_sh - kept);
        if (add_group(su, PJ_LS_SHAPE, key, NULL, 0, 0, &other))
            goto out;
        for (size_t j = kept; j < n_sh; j++)
            order[j]->group = other;
    }

    size_t nr = 0;
    for (size_t r = 0; r < t->n_reqs; r++) {
        su->ref_off[r] = (uint32_t)nr;
        su->refs[nr++] = (pj_ls_ref){sh[shape_of[r]].group, t->reqs[r].n_ops};
        const pj_trace_req *q = &t->reqs[r];
        for (uint32_t i = 0; i < q->n_ops; i++) {
            const pj_trace_op *op = &t->ops[q->op0 + i];
            uint32_t lo, hi;
            size_t li = (size_t)op->layer * n_sets + pj_ls_mset_of(&su->msets, op->m, &lo, &hi);
            if (lm_seen[li] == r + 1) {
                su->refs[lm_pos[li]].ops++;
            } else {
                lm_seen[li] = r + 1;
                lm_pos[li] = (uint32_t)nr;
                su->refs[nr++] = (pj_ls_ref){lm_id[li], 1};
            }
        }
    }
    su->ref_off[t->n_reqs] = (uint32_t)nr;
    rc = 0;
out:
    for (size_t j = 0; j < n_sh; j++)
        free(sh[j].key);
    free(sh);
    free(order);
    free(table);
    free(scratch);
    free(lm_id);
    free(lm_seen);
    free(lm_pos);
    free(shape_of);
    return rc;
}

/* A loadstat whose group ids are the setup's. */
static int loadstat_for(const lt_setup *su, pj_loadstat *ls)
{
    if (pj_loadstat_init(ls))
        return -ENOMEM;
    for (size_t i = 1; i < su->n_groups; i++) {
        int id = pj_loadstat_group_add(ls, su->group_kind[i], su->group_keys[i], su->group_layer[i],
                                       su->group_lo[i], su->group_hi[i]);
        if (id != (int)i)
            return -ENOMEM;
    }
    return 0;
}

static void model_warn(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "projload: model: %s\n", msg);
}

/* Loads the model and maps each daemon layer the trace uses onto it; a
 * layer whose bytes are not the daemon's (STATS digests, ctl's daemon) is
 * said as such before the run, not only as mismatches during it. */
static int load_model(const lt_opts *o, lt_setup *su, projd_conn *ctl)
{
    pj_config cfg;
    char err[1024];
    pj_config_defaults(&cfg);
    if (o->config && pj_config_apply_file(&cfg, o->config, err, sizeof err) != 0) {
        fprintf(stderr, "projload: --config: %s\n", err);
        return -1;
    }
    snprintf(cfg.model.path, sizeof cfg.model.path, "%s", o->model);
    static pj_served_model served; /* large; one setup a run */
    const int have_served = pj_served_model_get(ctl, &served, err, sizeof err) == 0;
    /* Without --config the file is read with the daemon's layer list
     * (STATS), so a daemon serving layers of its own naming needs none. */
    const int layers_served = have_served && !o->config && pj_served_model_config(&served, &cfg);
    if (pj_model_load(&cfg, &su->model, model_warn, NULL, err, sizeof err) != 0) {
        fprintf(stderr, "projload: --model (read with %s): %s\n",
                pj_served_model_layers_said(layers_served, o->config != NULL), err);
        return -1;
    }
    int used[PJ_WIRE_MAX_LAYERS_ALL] = {0};
    for (size_t i = 0; i < su->tr.n_ops; i++)
        used[su->tr.ops[i].layer] = 1;
    for (uint32_t l = 0; l < pj_welcome_n_layers(&su->w); l++) {
        if (!used[l])
            continue;
        const pj_wire_layer *wl = &pj_welcome_layers(&su->w)[l];
        int mi = pj_model_find(su->model, wl->name);
        if (mi < 0) {
            fprintf(stderr, "projload: --model %s: no layer \"%s\", which the trace uses\n",
                    o->model, wl->name);
            return -1;
        }
        const pj_weights *w = &su->model->layers[mi].w;
        /* bf16 and z12 compute the same numbers; split (hi + lo) does not. */
        int d_split = wl->format == PJ_FMT_SPLIT, m_split = w->fmt == PJ_FMT_SPLIT;
        if (w->k != wl->k || w->n < wl->n || d_split != m_split) {
            fprintf(stderr,
                    "projload: --model %s: layer \"%s\" is %u x %u (%s), the daemon serves %u "
                    "x %u (%s): not the daemon's model or config (see --config)\n",
                    o->model, wl->name, w->n, w->k, pj_format_name(w->fmt), wl->n, wl->k,
                    projd_format_name(wl->format));
            return -1;
        }
        /* Said first, and the run goes on: its checks then show what the
         * difference does (they are the run's own evidence). */
        if (have_served &&
            pj_served_model_same(&served, su->model, wl->name, o->model, err, sizeof err) != 0)
            fprintf(stderr, "projload: warning: --model: %s%s\n", err,
                    o->check_fraction > 0 ? "; its checks will fail" : "");
        su->wt[l] = w;
    }
    return 0;
}

static void setup_free(lt_setup *su)
{
    pj_trace_free(&su->tr);
    pj_model_free(su->model);
    free(su->ref_off);
    free(su->refs);
    for (size_t i = 1; i < su->n_groups; i++)
        free(su->group_keys[i]);
    free(su->group_keys);
    free(su->group_kind);
    free(su->group_layer);
    free(su->group_lo);
    free(su->group_hi);
}

/* ---- planning (open loop, replay) ------------------------------------------------------ */

typedef struct replay_item {
    int64_t t_us;
    uint32_t tr;
} replay_item;

static int cmp_replay(const void *a, const void *b)
{
    const replay_item *x = a, *y = b;
    if (x->t_us != y->t_us)
        return x->t_us < y->t_us ? -1 : 1;
    return x->tr < y->tr ? -1 : x->tr > y->tr;
}

/* Appends p to client c's plan. */
static int plan_push(lt_client *c, const lt_plan *p, size_t *cap)
{
    if (c->n_plan == *cap) {
        size_t nc = *cap ? *cap * 2 : 256;
        lt_plan *np = realloc(c->plan, nc * sizeof *np);
        if (!np)
            return -ENOMEM;
        c->plan = np;
        *cap = nc;
    }
    c->plan[c->n_plan++] = *p;
    return 0;
}

/* Fills every client's plan. Open loop: seq-th arrival at a fixed or
 * exponential gap, client seq % nclients, trace request seq % n_reqs.
 * Replay: trace requests in t_us order, client by the trace's client id. */
static int make_plans(lt_run *r, lt_client *cl, uint64_t n_total)
{
    const lt_opts *o = r->o;
    const pj_trace *t = &r->su->tr;
    size_t caps[LT_MAX_CLIENTS] = {0};
    if (r->mode == MODE_REPLAY) {
        replay_item *it = malloc(t->n_reqs * sizeof *it);
        if (!it)
            return -ENOMEM;
        for (size_t i = 0; i < t->n_reqs; i++)
            it[i] = (replay_item){t->reqs[i].t_us, (uint32_t)i};
        qsort(it, t->n_reqs, sizeof *it, cmp_replay);
        int map[PJ_TRACE_MAX_CLIENT + 1];
        memset(map, -1, sizeof map);
        uint32_t next = 0;
        for (size_t i = 0; i < t->n_reqs; i++) {
            uint32_t tc = t->reqs[it[i].tr].client;
            if (map[tc] < 0)
                map[tc] = (int)next++;
        }
        for (uint64_t i = 0; i < n_total && i < t->n_reqs; i++) {
            /* 2^62 ns is 146 years: a trace time past it at this speed
             * would not convert (a due time that wraps is sent at once) */
            const double due = (double)it[i].t_us * 1e3 / o->speed;
            if (due >= 4611686018427387904.0) {
                free(it);
                fprintf(stderr,
                        "projload: --replay: request %" PRIu64 " is due %.3g s after the start "
                        "at --speed %g: past what a run can wait for\n",
                        i, due / 1e9, o->speed);
                return -ERANGE;
            }
            lt_plan p = {.due_ns = (uint64_t)due, .seq = i, .tr = it[i].tr};
            int ci = map[t->reqs[it[i].tr].client];
            if (plan_push(&cl[ci], &p, &caps[ci])) {
                free(it);
                return -ENOMEM;
            }
        }
        /* The trace's times are played as they are, not moved to start at
         * 0: a trace cut from a longer one waits for its first request. */
        const uint64_t played = n_total < t->n_reqs ? n_total : t->n_reqs;
        if (played) {
            const double first = (double)it[0].t_us / 1e6 / o->speed;
            const double last = (double)it[played - 1].t_us / 1e6 / o->speed;
            if (first >= 1.0)
                fprintf(stderr,
                        "projload: --replay: the first request is due %.3f s after the start "
                        "(the trace's t_us as it is; the last at %.3f s)\n",
                        first, last);
            if (o->duration_s > 0 && first >= o->duration_s)
                fprintf(stderr,
                        "projload: --replay: nothing is due before --duration's end (%.3f s): "
                        "the trace's first request is due at %.3f s\n",
                        o->duration_s, first);
        }
        free(it);
        return 0;
    }
    pj_arrivals arr;
    pj_arrivals_init(&arr, o->seed, o->rate, r->mode == MODE_POISSON);
    for (uint64_t i = 0; i < n_total; i++) {
        const double t_s = pj_arrivals_next(&arr);
        lt_plan p = {.due_ns = (uint64_t)(t_s * 1e9), .seq = i, .tr = (uint32_t)(i % t->n_reqs)};
        uint32_t ci = (uint32_t)(i % r->nclients);
        if (plan_push(&cl[ci], &p, &caps[ci]))
            return -ENOMEM;
    }
    return 0;
}

/* The schedule's mean gap between requests: 1/rate in the open loop (the
 * mean of Poisson's gaps too); in a replay, the span of the requests
 * played (those due before --duration's end, when it has one) over their
 * number of gaps (0 for one request). */
static uint64_t schedule_interval_ns(const lt_run *r, const lt_client *cl)
{
    if (r->mode != MODE_REPLAY)
        return (uint64_t)(1e9 / r->o->rate);
    const uint64_t end = r->o->duration_s > 0 ? (uint64_t)(r->o->duration_s * 1e9) : UINT64_MAX;
    uint64_t first = UINT64_MAX, last = 0;
    size_t n = 0;
    for (uint32_t i = 0; i < r->nclients; i++) {
        /* each client's plan is in due order */
        for (size_t j = 0; j < cl[i].n_plan && cl[i].plan[j].due_ns < end; j++) {
            if (cl[i].plan[j].due_ns < first)
                first = cl[i].plan[j].due_ns;
            if (cl[i].plan[j].due_ns > last)
                last = cl[i].plan[j].due_ns;
            n++;
        }
    }
    return n > 1 ? (last - first) / (n - 1) : 0;
}

/* The end of the schedule the completed requests were due in: one
 * interval after the latest due time, never past --duration's end (what
 * was due after it was not played); 0 in the closed loop, or before any
 * request completed. */
static uint64_t schedule_end_ns(lt_run *r)
{
    uint64_t last = atomic_load(&r->last_due);
    if (r->mode == MODE_CLOSED || !last)
        return 0;
    uint64_t end = last + r->interval_ns;
    return r->t_stop && end > r->t_stop ? r->t_stop : end;
}

/* Open loop and replay: loadstat's window runs from the first measured
 * request's due time to the last reply, one interval short of the
 * schedule the requests were due in (N requests at rate R are due over
 * N/R s, the last at (N-1)/R), and a rate over it comes out about
 * N/(N-1) times the offered one. The window ends no earlier than the
 * schedule does: req/s is the offered rate when the daemon keeps up, and
 * what it served when it falls behind. Call once the clients are done. */
static void schedule_window(lt_run *r)
{
    uint64_t end = schedule_end_ns(r);
    if (r->ls.have_window && end > r->ls.t1_ns)
        r->ls.t1_ns = end;
}

/* ---- running ------------------------------------------------------------------------ */

/* req/s here is what the report's is: requests completed (warm-up
 * included) over the time since the start, and no less than the schedule
 * they were due in. */
static void progress_line(lt_run *r, int tty, double el)
{
    uint64_t done, errs;
    double p50;
    pj_loadstat_progress(&r->ls, &done, &errs, &p50);
    uint64_t all = atomic_load(&r->completed);
    uint64_t end = schedule_end_ns(r);
    double sched = end ? (double)(end - r->t0) / 1e9 : 0, span = sched > el ? sched : el;
    fprintf(stderr,
            "%s[%6.1f s] %llu done (%llu measured), %.1f req/s, %llu errors, %llu/%llu "
            "checked/mismatched, p50 %.1f µs%s",
            tty ? "\r" : "", el, (unsigned long long)all, (unsigned long long)done,
            span > 0 ? (double)all / span : 0.0, (unsigned long long)atomic_load(&r->errors),
            (unsigned long long)atomic_load(&r->checked),
            (unsigned long long)atomic_load(&r->mismatches), p50, tty ? "   " : "\n");
    fflush(stderr);
}

/* c's error past its "client N: " prefix. */
static const char *err_body(const lt_client *c)
{
    const char *p = strstr(c->err, ": ");
    return p ? p + 2 : c->err;
}

/* The failed clients' errors, each text once: a daemon that goes away (or
 * refuses connections) fails every client the same way, and a line per
 * client buries whatever else went wrong. */
static void print_client_errors(const lt_client *cl, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++) {
        if (!cl[i].failed)
            continue;
        const char *body = err_body(&cl[i]);
        int seen = 0;
        for (uint32_t j = 0; j < i && !seen; j++)
            seen = cl[j].failed && strcmp(err_body(&cl[j]), body) == 0;
        if (seen)
            continue;
        uint32_t same = 0;
        for (uint32_t j = i + 1; j < n; j++)
            same += cl[j].failed && strcmp(err_body(&cl[j]), body) == 0;
        if (same)
            fprintf(stderr, "projload: %s (and %u more client%s the same way)\n", cl[i].err, same,
                    same == 1 ? "" : "s");
        else
            fprintf(stderr, "projload: %s\n", cl[i].err);
    }
}

/* One run of the chosen mode with nclients clients. 0 when it ran to the
 * end (its requests may still have failed: see r's counters), -1 when it
 * could not run (message printed). */
static int run_once(lt_run *r, projd_conn *ctl)
{
    const lt_opts *o = r->o;
    lt_setup *su = r->su;
    int rc = -1;
    pthread_mutex_init(&r->mmu, NULL);
    pthread_mutex_init(&r->chk.mu, NULL);
    pthread_cond_init(&r->chk.cv_job, NULL);
    pthread_cond_init(&r->chk.cv_space, NULL);
    r->chk.limit = (size_t)1 << 30;
    lt_client *cl = calloc(r->nclients, sizeof *cl);
    if (!cl || loadstat_for(su, &r->ls) != 0) {
        fprintf(stderr, "projload: out of memory\n");
        free(cl);
        return -1;
    }

    uint64_t n_total;
    if (r->mode == MODE_REPLAY)
        n_total = o->warmup + o->count;
    else if (r->mode == MODE_CLOSED)
        n_total = (!o->count_set && o->duration_s > 0) ? UINT64_MAX : o->warmup + o->count;
    else if (!o->count_set && o->duration_s > 0)
        n_total = o->warmup + (uint64_t)ceil(o->rate * o->duration_s) + 1;
    else
        n_total = o->warmup + o->count;
    if (r->mode != MODE_CLOSED && n_total > LT_MAX_PLAN) {
        fprintf(stderr, "projload: %llu planned requests is more than the %llu this run plans\n",
                (unsigned long long)n_total, (unsigned long long)LT_MAX_PLAN);
        goto out_free;
    }
    r->total = n_total;
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    for (uint32_t i = 0; i < r->nclients; i++) {
        cl[i].run = r;
        cl[i].id = i;
        cl[i].rng = pj_splitmix64(o->seed + 0x1000 * (i + 1));
        pthread_mutex_init(&cl[i].mu, NULL);
        pthread_cond_init(&cl[i].cv, &ca);
    }
    pthread_condattr_destroy(&ca);
    int prc_plan = r->mode != MODE_CLOSED ? make_plans(r, cl, n_total) : 0;
    if (prc_plan != 0) {
        if (prc_plan == -ENOMEM) /* -ERANGE was said where it was found */
            fprintf(stderr, "projload: out of memory planning %llu requests\n",
                    (unsigned long long)n_total);
        goto out_clients;
    }
    r->interval_ns = r->mode == MODE_CLOSED ? 0 : schedule_interval_ns(r, cl);

    if (su->model && o->check_fraction > 0) {
        /* Only the threads that started are joined; with none, the checks
         * queued would never be taken and the run would stall on them. */
        int prc = 0;
        r->chk.n = 0;
        while (r->chk.n < o->check_threads &&
               (prc = pthread_create(&r->chk.th[r->chk.n], NULL, checker_main, r)) == 0)
            r->chk.n++;
        if (r->chk.n == 0) {
            fprintf(stderr, "projload: cannot start the checker threads: %s\n", strerror(prc));
            exit(EXIT_SETUP_ERROR);
        }
        if (r->chk.n < o->check_threads)
            fprintf(stderr, "projload: warning: %u of %u checker threads started\n", r->chk.n,
                    o->check_threads);
    }
    pthread_barrier_init(&r->ready, NULL, r->nclients + 1);
    pthread_barrier_init(&r->go, NULL, r->nclients + 1);
    uint32_t started = 0;
    for (; started < r->nclients; started++)
        if (pthread_create(&cl[started].th, NULL, client_main, &cl[started]) != 0)
            break;
    if (started < r->nclients) {
        /* Cannot happen on a sane system; the barriers would hang. */
        fprintf(stderr, "projload: cannot start client threads\n");
        exit(EXIT_SETUP_ERROR);
    }
    pthread_barrier_wait(&r->ready);
    for (uint32_t i = 0; i < r->nclients; i++)
        r->abort |= cl[i].failed;
    if (r->abort)
        print_client_errors(cl, r->nclients);
    r->stats_before = r->abort ? NULL : fetch_stats(ctl);
    r->t0 = now_ns() + 1000000; /* every client is past the barrier by then */
    r->t_stop = o->duration_s > 0 ? r->t0 + (uint64_t)(o->duration_s * 1e9) : 0;
    pthread_barrier_wait(&r->go);

    int tty = isatty(2);
    int show = o->progress == 1 || (o->progress == -1 && tty);
    uint64_t last = now_ns();
    uint8_t *joined = calloc(r->nclients, 1);
    for (;;) {
        int alive = 0;
        for (uint32_t i = 0; i < r->nclients; i++) {
            if (joined && joined[i])
                continue;
            if (!joined) {
                pthread_join(cl[i].th, NULL); /* no memory: no progress line either */
                continue;
            }
            if (pthread_tryjoin_np(cl[i].th, NULL) == 0)
                joined[i] = 1;
            else
                alive++;
        }
        if (!alive)
            break;
        if (g_interrupted && !atomic_exchange(&r->stop, 1))
            fprintf(stderr,
                    "projload: interrupted: waiting for the requests in flight (at most "
                    "--timeout-ms %d); interrupt again to quit at once\n",
                    o->timeout_ms);
        struct timespec ts = {0, 50000000};
        nanosleep(&ts, NULL);
        uint64_t t = now_ns();
        if (show && t - last >= 1000000000ull) {
            last = t;
            progress_line(r, tty, (double)(t - r->t0) / 1e9);
        }
    }
    free(joined);
    /* From the last client's own end, not from this thread's next 50 ms
     * look: a short run read as 0.049 s, a 0.161 s one as 0.200 s. */
    uint64_t t_end = 0;
    for (uint32_t i = 0; i < r->nclients; i++)
        if (cl[i].t_finished > t_end)
            t_end = cl[i].t_finished;
    r->wall_s = (double)((t_end > r->t0 ? t_end : now_ns()) - r->t0) / 1e9;
    /* Checks finish before the report. */
    pthread_mutex_lock(&r->chk.mu);
    r->chk.closing = 1;
    pthread_cond_broadcast(&r->chk.cv_job);
    pthread_mutex_unlock(&r->chk.mu);
    for (uint32_t i = 0; i < r->chk.n; i++)
        pthread_join(r->chk.th[i], NULL);
    schedule_window(r);
    if (show) {
        progress_line(r, tty, r->wall_s);
        if (tty)
            fputc('\n', stderr);
    }
    r->stats_after = r->abort ? NULL : fetch_stats(ctl);
    if (!r->abort)
        print_client_errors(cl, r->nclients);
    pthread_barrier_destroy(&r->ready);
    pthread_barrier_destroy(&r->go);
    rc = r->abort ? -1 : 0;
out_clients:
    for (uint32_t i = 0; i < r->nclients; i++)
        client_cleanup(&cl[i]);
out_free:
    free(cl);
    return rc;
}

static void run_free(lt_run *r)
{
    pj_loadstat_free(&r->ls);
    cJSON_Delete(r->stats_before);
    cJSON_Delete(r->stats_after);
    pthread_mutex_destroy(&r->mmu);
    pthread_mutex_destroy(&r->chk.mu);
    pthread_cond_destroy(&r->chk.cv_job);
    pthread_cond_destroy(&r->chk.cv_space);
}

/* Checking was asked for and could run. */
static int checks_wanted(const lt_run *r)
{
    return r->su->model && r->o->check_fraction > 0;
}

/* A run fails on an error, a mismatch, a lost connection, when requests
 * due before --duration's end were not sent (it did not offer the load
 * asked for, so it did not measure it), or when it proved nothing: no
 * measured request succeeded, or none was checked although checks were
 * asked for. */
static int run_failed(lt_run *r)
{
    return atomic_load(&r->errors) || atomic_load(&r->mismatches) || r->abort ||
           atomic_load(&r->lost) || atomic_load(&r->unanswered) ||
           atomic_load(&r->behind_at_stop) || r->measured == 0 ||
           (checks_wanted(r) && atomic_load(&r->checked) == 0);
}

/* projload's own lateness in sending the requests it slept for (the
 * text report and the JSON's own_send_late_us). 0 when there was none. */
typedef struct own_late {
    uint64_t n;
    double mean_us, max_us;
} own_late;

static int own_late_get(lt_run *r, own_late *ol)
{
    ol->n = atomic_load(&r->own_late_n);
    ol->mean_us = ol->n ? (double)atomic_load(&r->own_late_sum_ns) / 1e3 / (double)ol->n : 0;
    ol->max_us = (double)atomic_load(&r->own_late_max_ns) / 1e3;
    return ol->n != 0;
}

static void print_totals(FILE *f, lt_run *r)
{
    const lt_opts *o = r->o;
    fprintf(f,
            "\nrequests: %llu sent (%llu warm-up, not in the tables), %llu completed, %llu "
            "errors, in %.3f s\n",
            (unsigned long long)atomic_load(&r->sent),
            (unsigned long long)atomic_load(&r->warm_sent),
            (unsigned long long)atomic_load(&r->completed),
            (unsigned long long)atomic_load(&r->errors), r->wall_s);
    if (atomic_load(&r->not_sent))
        fprintf(f, "  %llu requests not sent (refused before reaching the daemon; in errors)\n",
                (unsigned long long)atomic_load(&r->not_sent));
    own_late ol;
    if (own_late_get(r, &ol))
        fprintf(f,
                "  projload's own lateness, sending a request it slept for: mean %.1f us, max "
                "%.1f us over %llu requests (in the latencies above, from the due time)\n",
                ol.mean_us, ol.max_us, (unsigned long long)ol.n);
    if (atomic_load(&r->behind_at_stop))
        fprintf(f,
                "  FAILED: %llu requests were due before --duration's end and not sent by "
                "then: the daemon did not keep up, and the load asked for was not offered "
                "(their latencies are in no table)\n",
                (unsigned long long)atomic_load(&r->behind_at_stop));
    if (atomic_load(&r->lost))
        fprintf(f, "  the connection to the daemon was lost: the run stopped early\n");
    if (atomic_load(&r->unanswered))
        fprintf(f,
                "  the daemon stopped answering (a request waited past --timeout-ms %d): the "
                "run stopped early\n",
                o->timeout_ms);
    if (r->measured == 0)
        fprintf(f, "  FAILED: no measured request succeeded (%s): nothing was measured\n",
                o->warmup ? "all were warm-up or failed" : "all failed or none was sent");
    if (r->su->model && o->check_fraction > 0 && r->su->tolerant)
        fprintf(f,
                "checked: %llu requests (fraction %g, warm-up included) against the CPU "
                "reference, every value written, no NaN, ||y - ref|| / ||ref|| < %g (the GPU "
                "engines sum in another order): %llu mismatches, max relative error %.3g%s\n",
                (unsigned long long)atomic_load(&r->checked), o->check_fraction, LT_REL_TOL,
                (unsigned long long)atomic_load(&r->mismatches), r->max_rel,
                r->chk.full_waits ? " (clients waited for the check queue)" : "");
    else if (r->su->model && o->check_fraction > 0)
        fprintf(f,
                "checked: %llu requests (fraction %g, warm-up included) against the CPU "
                "reference, bit for bit: %llu mismatches%s\n",
                (unsigned long long)atomic_load(&r->checked), o->check_fraction,
                (unsigned long long)atomic_load(&r->mismatches),
                r->chk.full_waits ? " (clients waited for the check queue)" : "");
    else
        fprintf(f, "checked: none (%s)\n", o->model ? "--check-fraction 0" : "no --model");
    if (checks_wanted(r) && atomic_load(&r->checked) == 0)
        fprintf(f,
                "  FAILED: checks were asked for (--check-fraction %g) but no request was "
                "checked\n",
                o->check_fraction);
    for (size_t i = 0; i < r->n_errs; i++)
        fprintf(f, "  error: %s\n", r->errs[i]);
    if (atomic_load(&r->errors) > r->n_errs)
        fprintf(f, "  ... %llu more errors\n",
                (unsigned long long)(atomic_load(&r->errors) - r->n_errs));
    for (size_t i = 0; i < r->n_mism; i++)
        fprintf(f, "  MISMATCH: %s\n", r->mism[i]);
    if (atomic_load(&r->mismatches) > r->n_mism)
        fprintf(f, "  ... %llu more mismatches\n",
                (unsigned long long)(atomic_load(&r->mismatches) - r->n_mism));
}

static cJSON *totals_json(lt_run *r)
{
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "sent", (double)atomic_load(&r->sent));
    cJSON_AddNumberToObject(t, "warmup", (double)atomic_load(&r->warm_sent));
    cJSON_AddNumberToObject(t, "measured_sent",
                            (double)(atomic_load(&r->sent) - atomic_load(&r->warm_sent)));
    cJSON_AddNumberToObject(t, "measured_ok", (double)r->measured);
    cJSON_AddNumberToObject(t, "not_sent", (double)atomic_load(&r->not_sent));
    cJSON_AddNumberToObject(t, "behind_at_stop", (double)atomic_load(&r->behind_at_stop));
    cJSON_AddBoolToObject(t, "connection_lost", atomic_load(&r->lost) != 0);
    cJSON_AddBoolToObject(t, "daemon_unanswered", atomic_load(&r->unanswered) != 0);
    /* Stopped by a signal: the counts are of a run cut short. */
    cJSON_AddBoolToObject(t, "interrupted", g_interrupted != 0);
    own_late late;
    if (own_late_get(r, &late)) {
        cJSON *ol = cJSON_AddObjectToObject(t, "own_send_late_us");
        cJSON_AddNumberToObject(ol, "requests", (double)late.n);
        cJSON_AddNumberToObject(ol, "mean", late.mean_us);
        cJSON_AddNumberToObject(ol, "max", late.max_us);
    }
    cJSON_AddNumberToObject(t, "completed", (double)atomic_load(&r->completed));
    cJSON_AddNumberToObject(t, "errors", (double)atomic_load(&r->errors));
    cJSON_AddNumberToObject(t, "checked", (double)atomic_load(&r->checked));
    cJSON_AddNumberToObject(t, "mismatches", (double)atomic_load(&r->mismatches));
    cJSON_AddStringToObject(t, "check_mode", r->su->tolerant ? "relative" : "bit-exact");
    if (r->su->tolerant) {
        cJSON_AddNumberToObject(t, "rel_tolerance", LT_REL_TOL);
        cJSON_AddNumberToObject(t, "max_rel_err", isfinite(r->max_rel) ? r->max_rel : -1);
    }
    cJSON_AddNumberToObject(t, "wall_s", r->wall_s);
    cJSON *e = cJSON_AddArrayToObject(t, "first_errors");
    for (size_t i = 0; i < r->n_errs; i++)
        cJSON_AddItemToArray(e, cJSON_CreateString(r->errs[i]));
    cJSON *m = cJSON_AddArrayToObject(t, "first_mismatches");
    for (size_t i = 0; i < r->n_mism; i++)
        cJSON_AddItemToArray(m, cJSON_CreateString(r->mism[i]));
    return t;
}

static cJSON *run_json(lt_run *r)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "concurrency", r->nclients);
    cJSON_AddStringToObject(o, "buffers", r->su->cuda_bufs ? "cuda" : "host");
    cJSON_AddItemToObject(o, "totals", totals_json(r));
    cJSON *res = pj_loadstat_json(&r->ls);
    if (res)
        cJSON_AddItemToObject(o, "results", res);
    cJSON *ds = cJSON_AddObjectToObject(o, "daemon_stats");
    if (r->stats_before && r->stats_after) {
        cJSON_AddItemToObject(ds, "before", cJSON_Duplicate(r->stats_before, 1));
        cJSON_AddItemToObject(ds, "after", cJSON_Duplicate(r->stats_after, 1));
        cJSON *d = stats_delta(r->stats_before, r->stats_after);
        if (d)
            cJSON_AddItemToObject(ds, "delta", d);
    }
    return o;
}

static cJSON *daemon_json(const lt_setup *su)
{
    cJSON *d = cJSON_CreateObject();
    cJSON_AddStringToObject(d, "url", su->url);
    cJSON_AddStringToObject(d, "backend", projd_backend_name(su->w.backend));
    cJSON_AddNumberToObject(d, "max_m", su->w.max_m);
    cJSON_AddNumberToObject(d, "max_ops_per_request", su->w.max_ops_per_request);
    cJSON *ls = cJSON_AddArrayToObject(d, "layers");
    for (uint32_t i = 0; i < pj_welcome_n_layers(&su->w); i++) {
        cJSON *l = cJSON_CreateObject();
        cJSON_AddStringToObject(l, "name", pj_welcome_layers(&su->w)[i].name);
        cJSON_AddNumberToObject(l, "n", pj_welcome_layers(&su->w)[i].n);
        cJSON_AddNumberToObject(l, "k", pj_welcome_layers(&su->w)[i].k);
        cJSON_AddStringToObject(l, "format",
                                projd_format_name(pj_welcome_layers(&su->w)[i].format));
        cJSON_AddItemToArray(ls, l);
    }
    cJSON *sh = cJSON_AddArrayToObject(d, "shapes");
    for (uint32_t i = 0; i < su->w.n_shapes && i < PJ_WIRE_MAX_SHAPES; i++)
        cJSON_AddItemToArray(sh, cJSON_CreateNumber(su->w.shapes[i]));
    return d;
}

static int write_json(const char *path, cJSON *root)
{
    char *text = cJSON_Print(root);
    if (!text) {
        fprintf(stderr, "projload: --json: out of memory\n");
        return -1;
    }
    if (strcmp(path, "-") == 0) {
        fputs(text, stdout);
        fputc('\n', stdout);
        cJSON_free(text);
        /* stdout is not closed: only the flush shows a full disk. */
        if (ferror(stdout) | (fflush(stdout) != 0)) {
            fprintf(stderr, "projload: --json -: write error\n");
            return -1;
        }
        return 0;
    }
    /* Replaced whole: a write that fails part way (a full disk, a size
     * limit) leaves the last report as it was, not a cut one. */
    pj_replacing r;
    char err[600];
    int rc = pj_replacing_open(&r, path, 0644, PJ_MODE_UMASKED, err, sizeof err);
    if (rc == 0) {
        fputs(text, r.f);
        fputc('\n', r.f);
        rc = pj_replacing_commit(&r, 0, err, sizeof err);
    }
    cJSON_free(text);
    if (rc) {
        fprintf(stderr, "projload: --json: %s\n", err);
        return -1;
    }
    return 0;
}

/* Whether the output opt names can be written, checked before any work so
 * that a mistyped path does not cost the run: a file (is_dir 0) must be
 * writable, or creatable, and not a folder; a folder (--plot) must be a
 * writable one, or creatable. What is created to find out is removed at
 * once: nothing is left behind when a later step fails; the output itself
 * is written at the end. "-" (standard output) passes. 0, or
 * EXIT_SETUP_ERROR with the option, the path and the reason printed. */
static int check_output(const char *opt, const char *path, int is_dir)
{
    struct stat st;
    int e = 0;
    if (!is_dir && strcmp(path, "-") == 0)
        return 0;
    /* The plot's folder is named inside gnuplot's quoted strings, which a
     * quote or a line break would end (and the rest run as commands). */
    if (is_dir && strpbrk(path, "'\"\n\r")) {
        fprintf(stderr,
                "projload: %s %s: a folder name with a quote or a line break cannot be "
                "given to gnuplot; choose another\n",
                opt, path);
        return EXIT_SETUP_ERROR;
    }
    if (!path[0]) {
        e = ENOENT;
    } else if (stat(path, &st) == 0) {
        if (is_dir && !S_ISDIR(st.st_mode))
            e = ENOTDIR;
        else if (!is_dir && S_ISDIR(st.st_mode))
            e = EISDIR;
        else if (access(path, is_dir ? W_OK | X_OK : W_OK) != 0)
            e = errno;
    } else if (errno != ENOENT) {
        e = errno;
    } else if (is_dir) {
        if (mkdir(path, 0755) == 0)
            rmdir(path);
        else if (errno != EEXIST)
            e = errno;
    } else {
        /* EEXIST: something appeared (or a dangling link): the write at
         * the end says. */
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOCTTY, 0644);
        if (fd >= 0) {
            close(fd);
            unlink(path);
        } else if (errno != EEXIST) {
            e = errno;
        }
    }
    if (e) {
        fprintf(stderr, "projload: %s %s: %s\n", opt, path, strerror(e));
        return EXIT_SETUP_ERROR;
    }
    return 0;
}

/* ---- commands ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(
        f,
        "usage: projload [run] --trace FILE [options]   replay a trace against projd\n"
        "       projload gen --kind K --out FILE [options]  write a trace (client/TRACE.md)\n"
        "       projload info [--socket URL]            what the daemon serves\n"
        "       projload --help | -h                    this text\n"
        "       projload --version                      the version\n"
        "\n"
        "run: where and what\n"
        "  --trace FILE          JSON-lines trace (client/TRACE.md)\n"
        "  --socket URL          daemon (default: $PROJD_SOCKET, /run/projd/projd.sock, ...)\n"
        "  --transport T         auto | nng | ring (default auto: a shared-memory ring per\n"
        "                        client when the daemon takes one, else nng)\n"
        "run: mode (default closed loop with 1 client)\n"
        "  --concurrency N       clients (threads, each its own connection and buffers);\n"
        "                        closed loop: each sends its next request when the last is done\n"
        "  --rate R              open loop: R requests/s at fixed intervals\n"
        "  --poisson R           open loop: Poisson arrivals, R requests/s on average\n"
        "  --replay              send each request at its t_us, on its client's thread\n"
        "  --speed X             replay X times faster (default 1; --replay only)\n"
        "  --slots S             requests in flight per client in open loop and replay\n"
        "                        (default 4; a request due while all are busy waits, and\n"
        "                        its latency, counted from when it was due, shows it)\n"
        "  --spin-us U           open loop and replay: a client sleeps until U us before a\n"
        "                        request is due and polls from there (default 100; 0: sleep\n"
        "                        to the due time, and wake some tens of us after it)\n"
        "  --sweep LIST          closed loop at each concurrency, e.g. 1,2,4,8,16 (instead\n"
        "                        of --concurrency)\n"
        "run: length\n"
        "  --warmup N            first N requests not counted in the tables (default 0)\n"
        "  --count N             requests counted (default: the trace's length, or with\n"
        "                        --duration and no --count, no count bound: the closed\n"
        "                        loop sends until the time is up, the open loop plans\n"
        "                        rate x duration requests; --replay plays the trace once)\n"
        "  --duration S          stop sending after S seconds, warm-up included (with\n"
        "                        --count too, the first bound reached wins)\n"
        "run: correctness\n"
        "  --check-fraction F    fraction of requests checked against the CPU reference:\n"
        "                        bit for bit on the cpu backend, ||y-ref||/||ref|| < 1e-2,\n"
        "                        no NaN, every value written on the cuda backend\n"
        "                        (default 0.01 with --model; without --model the run is\n"
        "                        not checked, and says so on stderr; a fraction above 0\n"
        "                        given without --model is an error; the first measured\n"
        "                        request is always checked)\n"
        "  --model PATH          the safetensors file the daemon serves (enables checks)\n"
        "  --config FILE         the daemon's config (layer list and formats), read with\n"
        "                        --model; default: the daemon's layers, from its STATS\n"
        "  --check-threads N     threads computing the reference (default: half the cores,\n"
        "                        1..8); clients wait when 1 GiB of checks is queued\n"
        "  --seed S              which requests are checked, their x, Poisson gaps (default 1)\n"
        "  --timeout-ms T        per-request timeout (default 30000); the daemon STATS\n"
        "                        read before and after the run wait no longer; a request\n"
        "                        left unanswered that long stops the run (exit 1)\n"
        "run: report\n"
        "  --json FILE           everything the tables show, as JSON ('-' = stdout)\n"
        "  --plot DIR            latency CDF (and sweep) PNGs via gnuplot (DIR is created;\n"
        "                        its parent must exist)\n"
        "                        (--json and --plot are checked before the run: a path that\n"
        "                        cannot be written is refused at once, exit 2)\n"
        "  --progress            a progress line each second even when stderr is not a tty\n"
        "  --no-progress         never a progress line\n"
        "  --buffers B           host | cuda | auto: where each client's x and y live\n"
        "                        (default auto: cudaMalloc memory registered as CUDA IPC\n"
        "                        buffers when the daemon's backend is cuda and this build\n"
        "                        has CUDA, else host shared memory)\n"
        "  --compare             also run the same requests in-process on the same GPU, with\n"
        "                        cuBLAS (SGLang's x @ W.T) and with the tuned engines, and\n"
        "                        print them side by side with projd (cuda build and backend;\n"
        "                        closed loop, --concurrency 1, needs --model)\n"
        "  --table FILE          --compare: tuning table of the in-process engines\n"
        "                        (config/tuning/h200.json; default: the untuned ladder)\n"
        "\n"
        "gen (see client/TRACE.md):\n"
        "  --kind decode|verify|reference  --seed S  --count N  --out FILE ('-' = stdout)\n"
        "  --clients C  --draft D  --max-m M  --max-batch B  --unpooler-n N  --interval-us U\n"
        "  --layers A,B,...|@FILE  the served model's own layer names (a file: one a line)\n"
        "                        instead of the reference five; --ops-per-request K of\n"
        "                        them a request (1..64), a client's requests walking the\n"
        "                        list in turn (projctl layers prints the names)\n"
        "\n"
        "req/s and ops/s count the requests that succeeded (failed ones are in errors)\n"
        "over the measured window, from the first measured request's start (its due\n"
        "time in open loop and replay) to the last reply; in open loop and replay the\n"
        "window lasts at least until one interval (1/R, or a replay's mean gap) after\n"
        "the last due time, so N requests at --rate R read R when the daemon keeps up.\n"
        "The progress line counts all requests from the start the same way. A client\n"
        "that loses its daemon connection stops, and so does the run.\n"
        "\n"
        "exit status: 0 all requests succeeded and all checks matched; 1 a request\n"
        "failed, a check mismatched, the daemon connection was lost, requests due\n"
        "before --duration's end were not sent by then (open loop and replay: the\n"
        "load asked for was not offered), no measured request succeeded, checks were\n"
        "asked for but none ran, a --compare launch failed, the run was interrupted,\n"
        "or the report (standard output, --json, --plot) could not be\n"
        "written at the end; 2 the run could not start (command line, an output path\n"
        "that cannot be written, trace, daemon, model, client buffers). gen: 0, or 2\n"
        "(command line, --out cannot be written). info: 0; 1 standard output could not\n"
        "be written; 2 command line or daemon. --help, --version: 0. An interrupt\n"
        "(SIGINT, SIGTERM) stops sending and waits for the requests in flight; a second\n"
        "one ends projload at once, killed by that signal (a shell shows 130 or 143).\n");
}

/* --layers: "A,B,C" or "@FILE" (one name a line; blank lines and lines
 * starting with '#' skipped). Fills *names (pointers into *text, both
 * malloc'd) and *n. 0, or EXIT_USAGE with the reason said. */
static int parse_layer_list(const char *arg, char **text, const char ***names, uint32_t *n)
{
    *text = NULL;
    *names = NULL;
    *n = 0;
    int from_file = arg[0] == '@';
    if (from_file) {
        FILE *f = fopen(arg + 1, "r");
        if (!f)
            return usage_error("--layers %s: %s", arg, strerror(errno));
        size_t cap = 0, len = 0;
        char buf[4096];
        size_t got;
        while ((got = fread(buf, 1, sizeof buf, f)) > 0) {
            if (len + got + 1 > cap) {
                size_t nc = (len + got + 1) * 2;
                char *p = realloc(*text, nc);
                if (!p) {
                    fclose(f);
                    free(*text);
                    *text = NULL;
                    return usage_error("--layers %s: out of memory", arg);
                }
                *text = p;
                cap = nc;
            }
            memcpy(*text + len, buf, got);
            len += got;
        }
        int bad = ferror(f);
        fclose(f);
        if (bad || !*text) {
            free(*text);
            *text = NULL;
            return usage_error("--layers %s: %s", arg, bad ? "read error" : "empty file");
        }
        (*text)[len] = '\0';
    } else {
        *text = strdup(arg);
        if (!*text)
            return usage_error("--layers: out of memory");
    }
    const char sep = from_file ? '\n' : ',';
    size_t cap = 16;
    *names = malloc(cap * sizeof **names);
    for (char *p = *text; *names && p && *p;) {
        char *end = strchr(p, sep);
        if (end)
            *end = '\0';
        char *name = p;
        p = end ? end + 1 : NULL;
        if (from_file) {
            size_t l = strlen(name);
            while (l && (name[l - 1] == '\r' || name[l - 1] == ' ' || name[l - 1] == '\t'))
                name[--l] = '\0';
            while (*name == ' ' || *name == '\t')
                name++;
            if (!*name || *name == '#')
                continue;
        }
        if (!*name) {
            free(*names);
            free(*text);
            *names = NULL;
            *text = NULL;
            return usage_error("--layers: an empty name in \"%s\"", arg);
        }
        if (*n == cap) {
            const char **more = realloc(*names, 2 * cap * sizeof **names);
            if (!more)
                break;
            *names = more;
            cap *= 2;
        }
        (*names)[(*n)++] = name;
    }
    if (!*names || *n == 0) {
        free(*names);
        free(*text);
        *names = NULL;
        *text = NULL;
        return usage_error("--layers %s: no names%s", arg, *names ? "" : " (out of memory)");
    }
    return 0;
}

static int cmd_gen(int argc, char **argv)
{
    pj_trace_gen g;
    pj_trace_gen_defaults(&g);
    const char *out = NULL, *layers_arg = NULL;
    char *layers_text = NULL;
    const char **layer_names = NULL;
    int kind_set = 0;
    static const struct option lo[] = {{"kind", required_argument, NULL, 'k'},
                                       {"seed", required_argument, NULL, 's'},
                                       {"count", required_argument, NULL, 'n'},
                                       {"out", required_argument, NULL, 'o'},
                                       {"clients", required_argument, NULL, 'c'},
                                       {"draft", required_argument, NULL, 'd'},
                                       {"max-m", required_argument, NULL, 'm'},
                                       {"max-batch", required_argument, NULL, 'b'},
                                       {"unpooler-n", required_argument, NULL, 'u'},
                                       {"interval-us", required_argument, NULL, 'i'},
                                       {"layers", required_argument, NULL, 'L'},
                                       {"ops-per-request", required_argument, NULL, 'K'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch, rc = 0, li = -1;
    const char *given[sizeof lo / sizeof lo[0]] = {NULL};
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", lo, &li)) != -1) {
        if ((rc = given_once(lo, li, given)) != 0)
            return rc;
        li = -1;
        switch (ch) {
        case 'k': {
            int k = pj_trace_kind_from_name(optarg);
            if (k < 0)
                return usage_error("--kind: expected decode, verify or reference, got \"%s\"",
                                   optarg);
            g.kind = (pj_trace_kind)k;
            kind_set = 1;
            break;
        }
        case 's':
            rc = parse_u64("--seed", optarg, 0, UINT64_MAX, &g.seed);
            break;
        case 'n':
            rc = parse_u32("--count", optarg, 1, 100000000, &g.count);
            break;
        case 'o':
            out = optarg;
            break;
        case 'c':
            rc = parse_u32("--clients", optarg, 1, PJ_TRACE_MAX_CLIENT + 1, &g.clients);
            break;
        case 'd':
            rc = parse_u32("--draft", optarg, 1, 64, &g.draft);
            break;
        case 'm':
            rc = parse_u32("--max-m", optarg, 1, PJ_TRACE_MAX_M, &g.max_m);
            break;
        case 'b':
            rc = parse_u32("--max-batch", optarg, 1, PJ_TRACE_MAX_M, &g.max_batch);
            break;
        case 'u':
            rc = parse_u32("--unpooler-n", optarg, 0, PJ_TRACE_MAX_N, &g.unpooler_n);
            break;
        case 'i':
            rc = parse_u32("--interval-us", optarg, 0, 60000000, &g.interval_us);
            break;
        case 'L':
            layers_arg = optarg;
            break;
        case 'K':
            rc =
                parse_u32("--ops-per-request", optarg, 1, PJ_TRACE_GEN_MAX_OPS, &g.ops_per_request);
            break;
        case 'h':
            usage(stdout);
            return 0;
        default:
            return bad_option("gen: ", ch, argv);
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return usage_error("gen: unexpected argument \"%s\"", argv[optind]);
    if (!kind_set)
        return usage_error("gen: --kind is required (decode, verify or reference)");
    if (!out)
        return usage_error("gen: --out FILE is required ('-' for stdout)");
    if ((rc = check_output("--out", out, 0)) != 0)
        return rc;
    if (layers_arg) {
        if ((rc = parse_layer_list(layers_arg, &layers_text, &layer_names, &g.n_layers)) != 0)
            return rc;
        g.layers = layer_names;
    }
    pj_trace t;
    char err[512];
    if (pj_trace_generate(&t, &g, err, sizeof err) != 0) {
        fprintf(stderr, "projload: %s\n", err);
        free(layer_names);
        free(layers_text);
        return EXIT_SETUP_ERROR;
    }
    free(layer_names);
    free(layers_text);
    /* The header is a command that writes the same file again: max_batch
     * 0 (its default, from --max-m and --draft) is no value --max-batch
     * takes, so it is left out then. */
    char header[1024], batch[32] = "", layers[600] = "";
    if (g.max_batch)
        snprintf(batch, sizeof batch, " --max-batch %u", g.max_batch);
    /* A list too long for the header is named by its count: the trace's
     * requests name every layer anyway. */
    int plain = 1; /* a control byte (a line break) would end the header's comment line */
    for (const char *q = layers_arg; q && *q; q++)
        plain &= (unsigned char)*q >= 0x20 && *q != 0x7f;
    if (layers_arg && plain && strlen(layers_arg) < 400)
        snprintf(layers, sizeof layers, " --layers %s --ops-per-request %u", layers_arg,
                 g.ops_per_request ? g.ops_per_request : g.n_layers);
    else if (layers_arg)
        snprintf(layers, sizeof layers, " --layers (%u name%s) --ops-per-request %u", g.n_layers,
                 g.n_layers == 1 ? "" : "s", g.ops_per_request ? g.ops_per_request : g.n_layers);
    snprintf(header, sizeof header,
             "projload gen --kind %s --seed %llu --count %u --clients %u --draft %u --max-m %u%s "
             "--unpooler-n %u --interval-us %u%s",
             pj_trace_kind_name(g.kind), (unsigned long long)g.seed, g.count, g.clients, g.draft,
             g.max_m, batch, g.unpooler_n, g.interval_us, layers);
    /* A file replaced whole: a write that fails part way, or a trace too
     * large for run, leaves what was at out as it was. */
    const int to_stdout = strcmp(out, "-") == 0;
    pj_replacing r = {0};
    if (!to_stdout && pj_replacing_open(&r, out, 0644, PJ_MODE_UMASKED, err, sizeof err) != 0) {
        fprintf(stderr, "projload: --out: %s\n", err);
        pj_trace_free(&t);
        return EXIT_SETUP_ERROR;
    }
    FILE *f = to_stdout ? stdout : r.f;
    rc = pj_trace_write(&t, f, header);
    /* A file run could not read is refused here, not there. */
    long written = to_stdout || rc ? -1 : ftell(f);
    pj_trace_free(&t);
    if (!rc && written > 0 && (size_t)written > PJ_TRACE_MAX_BYTES) {
        pj_replacing_abort(&r);
        fprintf(stderr,
                "projload: gen: the trace would be %.0f MiB, more than run reads (%zu MiB): "
                "not written; fewer --count, or several traces\n",
                (double)written / (1 << 20), PJ_TRACE_MAX_BYTES >> 20);
        return EXIT_SETUP_ERROR;
    }
    if (rc) {
        pj_replacing_abort(&r);
        fprintf(stderr, "projload: --out %s: write error\n", out);
        return EXIT_SETUP_ERROR;
    }
    /* stdout is not closed: only the flush shows a full disk. */
    if (to_stdout ? fflush(f) != 0 : pj_replacing_commit(&r, 0, err, sizeof err) != 0) {
        if (to_stdout)
            fprintf(stderr, "projload: --out -: write error\n");
        else
            fprintf(stderr, "projload: --out: %s\n", err);
        return EXIT_SETUP_ERROR;
    }
    return 0;
}

static int connect_ctl(const char *socket, projd_conn **c)
{
    projd_error e;
    if (projd_connect(socket, "projload", c, &e) != 0) {
        fprintf(stderr, "projload: cannot reach the daemon: %s\n", e.msg);
        return EXIT_SETUP_ERROR;
    }
    return 0;
}

static int cmd_info(int argc, char **argv)
{
    const char *socket = NULL;
    static const struct option lo[] = {{"socket", required_argument, NULL, 'S'},
                                       {"help", no_argument, NULL, 'h'},
                                       {NULL, 0, NULL, 0}};
    int ch, li = -1;
    const char *given[sizeof lo / sizeof lo[0]] = {NULL};
    optind = 1;
    while ((ch = getopt_long(argc, argv, ":h", lo, &li)) != -1) {
        int rc = given_once(lo, li, given);
        if (rc != 0)
            return rc;
        li = -1;
        if (ch == 'h') {
            usage(stdout);
            return 0;
        }
        if (ch != 'S')
            return bad_option("info: ", ch, argv);
        if (!*optarg)
            return usage_error("info: --socket \"\": empty; give ipc://PATH or a PATH, or leave "
                               "--socket out for the default");
        socket = optarg;
    }
    if (optind < argc)
        return usage_error("info: unexpected argument \"%s\"", argv[optind]);
    projd_conn *c;
    int rc = connect_ctl(socket, &c);
    if (rc)
        return rc;
    const projd_info *w = projd_info_get(c);
    printf("daemon %s: protocol %u, backend %s, max_m %u, max %u ops per request\n", projd_url(c),
           w->version, projd_backend_name(w->backend), w->max_m, w->max_ops_per_request);
    const pj_wire_layer *wl = pj_welcome_layers(w);
    for (uint32_t i = 0; i < pj_welcome_n_layers(w); i++)
        printf("  layer %u %-16s n %6u  k %6u  %s\n", i, wl[i].name, wl[i].n, wl[i].k,
               projd_format_name(wl[i].format));
    if (w->backend == PJ_BACKEND_CUDA) {
        printf("  graph shapes m:");
        for (uint32_t i = 0; i < w->n_shapes; i++)
            printf(" %u", w->shapes[i]);
        printf("\n");
    } else {
        /* the daemon's shapes.m, which only the cuda backend captures */
        printf("  %s backend: no CUDA graphs\n", projd_backend_name(w->backend));
    }
    projd_close(c);
    return stdout_failed() ? EXIT_RUN_FAILED : 0;
}

enum {
    OPT_TRACE = 1000,
    OPT_SOCKET,
    OPT_TRANSPORT,
    OPT_CONC,
    OPT_RATE,
    OPT_POISSON,
    OPT_REPLAY,
    OPT_SPEED,
    OPT_SLOTS,
    OPT_SPIN,
    OPT_SWEEP,
    OPT_WARMUP,
    OPT_COUNT,
    OPT_DURATION,
    OPT_CHECK,
    OPT_MODEL,
    OPT_CONFIG,
    OPT_CHECK_THREADS,
    OPT_SEED,
    OPT_TIMEOUT,
    OPT_JSON,
    OPT_PLOT,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
    OPT_COMPARE,
    OPT_BUFFERS,
    OPT_TABLE,
    OPT_HELP = 'h',
    OPT_VERSION = 'V',
};

static int set_mode(lt_opts *o, lt_mode m, const char *opt)
{
    if (o->mode_set && o->mode != m)
        return usage_error("%s: only one of --rate, --poisson and --replay", opt);
    o->mode = m;
    o->mode_set = 1;
    return 0;
}

static int parse_run(int argc, char **argv, lt_opts *o)
{
    memset(o, 0, sizeof *o);
    o->transport = "auto";
    o->buffers = "auto";
    o->speed = 1;
    o->check_fraction = 0.01;
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    o->check_threads = cpus >= 4 ? (uint32_t)(cpus / 2 < 8 ? cpus / 2 : 8) : 1;
    o->seed = 1;
    o->timeout_ms = PROJD_DEFAULT_TIMEOUT_MS;
    o->progress = -1;
    o->concurrency = 1;
    o->slots = 4;
    o->spin_us = 100;
    size_t len = 0;
    for (int i = 0; i < argc && len < sizeof o->command - 1; i++)
        len += (size_t)snprintf(o->command + len, sizeof o->command - len, "%s%s", i ? " " : "",
                                argv[i]);
    static const struct option lo[] = {
        {"trace", required_argument, NULL, OPT_TRACE},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"transport", required_argument, NULL, OPT_TRANSPORT},
        {"concurrency", required_argument, NULL, OPT_CONC},
        {"rate", required_argument, NULL, OPT_RATE},
        {"poisson", required_argument, NULL, OPT_POISSON},
        {"replay", no_argument, NULL, OPT_REPLAY},
        {"speed", required_argument, NULL, OPT_SPEED},
        {"slots", required_argument, NULL, OPT_SLOTS},
        {"spin-us", required_argument, NULL, OPT_SPIN},
        {"sweep", required_argument, NULL, OPT_SWEEP},
        {"warmup", required_argument, NULL, OPT_WARMUP},
        {"count", required_argument, NULL, OPT_COUNT},
        {"duration", required_argument, NULL, OPT_DURATION},
        {"check-fraction", required_argument, NULL, OPT_CHECK},
        {"model", required_argument, NULL, OPT_MODEL},
        {"config", required_argument, NULL, OPT_CONFIG},
        {"check-threads", required_argument, NULL, OPT_CHECK_THREADS},
        {"seed", required_argument, NULL, OPT_SEED},
        {"timeout-ms", required_argument, NULL, OPT_TIMEOUT},
        {"json", required_argument, NULL, OPT_JSON},
        {"plot", required_argument, NULL, OPT_PLOT},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"compare", no_argument, NULL, OPT_COMPARE},
        {"buffers", required_argument, NULL, OPT_BUFFERS},
        {"table", required_argument, NULL, OPT_TABLE},
        {"help", no_argument, NULL, OPT_HELP},
        {"version", no_argument, NULL, OPT_VERSION},
        {NULL, 0, NULL, 0}};
    int ch, rc = 0, li = -1;
    uint64_t v;
    optind = 1;
    const char *given[sizeof lo / sizeof lo[0]] = {NULL};
    int progress_said = -1; /* --progress 1, --no-progress 0 */
    while ((ch = getopt_long(argc, argv, ":h", lo, &li)) != -1) {
        if ((rc = given_once(lo, li, given)) != 0)
            return rc;
        if (ch == OPT_PROGRESS || ch == OPT_NO_PROGRESS) {
            if (progress_said >= 0 && progress_said != (ch == OPT_PROGRESS))
                return usage_error("--progress and --no-progress given together: give one");
            progress_said = ch == OPT_PROGRESS;
        }
        li = -1;
        switch (ch) {
        case OPT_TRACE:
            o->trace = optarg;
            break;
        case OPT_SOCKET:
            if (!*optarg)
                return usage_error("--socket \"\": empty; give ipc://PATH or a PATH, or leave "
                                   "--socket out for the default");
            o->socket = optarg;
            break;
        case OPT_TRANSPORT:
            o->transport = optarg;
            break;
        case OPT_CONC:
            rc = parse_u32("--concurrency", optarg, 1, LT_MAX_CLIENTS, &o->concurrency);
            o->concurrency_set = 1;
            break;
        case OPT_RATE:
            rc = set_mode(o, MODE_RATE, "--rate");
            if (!rc)
                rc = parse_double("--rate", optarg, 1e-3, 1e7, &o->rate);
            break;
        case OPT_POISSON:
            rc = set_mode(o, MODE_POISSON, "--poisson");
            if (!rc)
                rc = parse_double("--poisson", optarg, 1e-3, 1e7, &o->rate);
            break;
        case OPT_REPLAY:
            rc = set_mode(o, MODE_REPLAY, "--replay");
            break;
        case OPT_SPEED:
            rc = parse_double("--speed", optarg, 1e-3, 1e6, &o->speed);
            o->speed_set = 1;
            break;
        case OPT_SLOTS:
            rc = parse_u32("--slots", optarg, 1, 1024, &o->slots);
            o->slots_set = 1;
            break;
        case OPT_SPIN:
            rc = parse_u32("--spin-us", optarg, 0, 1000000, &o->spin_us);
            o->spin_set = 1;
            break;
        case OPT_SWEEP: {
            char *s = optarg;
            o->n_sweep = 0;
            while (*s) {
                char item[32];
                size_t n = strcspn(s, ",");
                if (n == 0 || n >= sizeof item || o->n_sweep == LT_MAX_SWEEP)
                    return usage_error("--sweep: expected a list like 1,2,4,8,16, got \"%s\"",
                                       optarg);
                memcpy(item, s, n);
                item[n] = '\0';
                if ((rc = parse_u32("--sweep", item, 1, LT_MAX_CLIENTS, &o->sweep[o->n_sweep])))
                    return rc;
                o->n_sweep++;
                s += n;
                if (*s == ',')
                    s++;
            }
            if (!o->n_sweep)
                return usage_error("--sweep: empty list");
            break;
        }
        case OPT_WARMUP:
            rc = parse_u64("--warmup", optarg, 0, 1000000000, &o->warmup);
            break;
        case OPT_COUNT:
            rc = parse_u64("--count", optarg, 1, 1000000000000ull, &o->count);
            o->count_set = 1;
            break;
        case OPT_DURATION:
            rc = parse_double("--duration", optarg, 1e-3, 1e7, &o->duration_s);
            break;
        case OPT_CHECK:
            rc = parse_double("--check-fraction", optarg, 0, 1, &o->check_fraction);
            o->check_set = 1;
            break;
        case OPT_MODEL:
            o->model = optarg;
            break;
        case OPT_CONFIG:
            o->config = optarg;
            break;
        case OPT_CHECK_THREADS:
            rc = parse_u32("--check-threads", optarg, 1, 64, &o->check_threads);
            break;
        case OPT_SEED:
            rc = parse_u64("--seed", optarg, 0, UINT64_MAX, &o->seed);
            break;
        case OPT_TIMEOUT:
            rc = parse_u64("--timeout-ms", optarg, 1, 3600000, &v);
            o->timeout_ms = (int)v;
            break;
        case OPT_JSON:
            o->json = optarg;
            break;
        case OPT_PLOT:
            o->plot = optarg;
            break;
        case OPT_PROGRESS:
            o->progress = 1;
            break;
        case OPT_NO_PROGRESS:
            o->progress = 0;
            break;
        case OPT_COMPARE:
            o->compare = 1;
            break;
        case OPT_BUFFERS:
            if (strcmp(optarg, "host") && strcmp(optarg, "cuda") && strcmp(optarg, "auto"))
                return usage_error("--buffers: expected host, cuda or auto, got \"%s\"", optarg);
            o->buffers = optarg;
            break;
        case OPT_TABLE:
            o->table = optarg;
            break;
        case OPT_HELP:
            usage(stdout);
            exit(0);
        case OPT_VERSION:
            printf("projload %s\n", PJ_VERSION_STRING);
            exit(stdout_failed() ? EXIT_RUN_FAILED : 0);
        default:
            return bad_option("", ch, argv);
        }
        if (rc)
            return rc;
    }
    if (optind < argc)
        return usage_error("unexpected argument \"%s\"", argv[optind]);
    if (!o->trace)
        return usage_error("--trace FILE is required (projload gen writes one)");
    if (o->n_sweep && o->mode_set)
        return usage_error("--sweep runs the closed loop; it does not combine with --%s",
                           o->mode == MODE_REPLAY ? "replay" : "rate/--poisson");
    if (o->compare && !o->model)
        return usage_error("--compare needs --model PATH (the weights it runs in-process)");
    if (o->check_fraction > 0 && !o->model && o->check_set)
        return usage_error("--check-fraction %g needs --model PATH (the model file the daemon "
                           "serves) to compute the reference; --check-fraction 0 runs unchecked",
                           o->check_fraction);
    if (o->config && !o->model)
        return usage_error("--config FILE is the daemon's config for the model --model loads "
                           "(its layer list and formats); give --model too, or leave --config "
                           "out");
    if (o->config) { /* read now: a bad file is a usage error even where no check runs */
        static pj_config cfg;
        char err[1024];
        pj_config_defaults(&cfg);
        if (pj_config_apply_file(&cfg, o->config, err, sizeof err) != 0)
            return usage_error("--config: %s", err);
    }
    if (!o->model)
        o->check_fraction = 0; /* the default without --model: unchecked (cmd_run says so) */
    if (o->n_sweep && o->concurrency_set)
        return usage_error("--concurrency: --sweep sets each step's concurrency; give one or "
                           "the other");
    if (o->speed_set && o->mode != MODE_REPLAY)
        return usage_error("--speed scales the trace's t_us in --replay; without --replay it "
                           "has no effect");
    if (o->mode == MODE_CLOSED && o->slots_set && o->slots != 1)
        return usage_error("--slots: the closed loop has one request in flight per client");
    if (o->mode == MODE_CLOSED && o->spin_set)
        return usage_error("--spin-us: the closed loop sends each request when the last is "
                           "done, with no due time to wait for");
    if (o->mode == MODE_REPLAY && o->concurrency_set)
        return usage_error("--concurrency: --replay uses one client per trace client id");
    if (o->compare && (o->n_sweep || o->mode != MODE_CLOSED || o->concurrency != 1))
        return usage_error("--compare times one request at a time in-process; run the daemon "
                           "side the same way (closed loop, --concurrency 1, no --sweep)");
    if (o->table && !o->compare)
        return usage_error("--table is the compare mode's tuning table (with --compare)");
    return 0;
}

/* ---- compare mode ------------------------------------------------------------------------ */

#ifdef PJ_HAVE_CUDA
static void cmp_lat_json(cJSON *o, const char *name, const pj_ls_summary *sm, int gpu)
{
    cJSON *j = cJSON_AddObjectToObject(o, name);
    cJSON_AddNumberToObject(j, "p50_us", sm->p50_us);
    cJSON_AddNumberToObject(j, "p99_us", sm->p99_us);
    cJSON_AddNumberToObject(j, "mean_us", sm->mean_us);
    /* in-process: GPU time (CUDA events); projd: the daemon's exec time */
    cJSON_AddNumberToObject(j, gpu ? "gpu_p50_us" : "exec_p50_us", sm->exec_p50_us);
    cJSON_AddNumberToObject(j, gpu ? "gpu_p99_us" : "exec_p99_us", sm->exec_p99_us);
}

static double ratio(double a, double b)
{
    return b > 0 ? a / b : NAN;
}

/* Runs the requests the daemon run sent (same order: seq % n_reqs) in this
 * process, once with cuBLAS and once with the tuned engines, each after a
 * warm-up pass over the same sequence, and prints and records the table.
 * 0, or EXIT_RUN_FAILED when a launch failed. */
static int run_compare(const lt_opts *o, lt_setup *su, lt_run *dr, FILE *rep, cJSON *root)
{
    int map[PJ_WIRE_MAX_LAYERS_ALL];
    for (uint32_t l = 0; l < pj_welcome_n_layers(&su->w); l++) {
        map[l] = -1;
        if (su->wt[l])
            for (uint32_t i = 0; i < su->model->n_layers; i++)
                if (&su->model->layers[i].w == su->wt[l])
                    map[l] = (int)i;
    }
    char err[1024];
    pj_lcmp *c;
    if (pj_lcmp_open(su->model, map, pj_welcome_n_layers(&su->w), su->w.max_m, su->slot_x,
                     su->slot_y, o->table, &c, err, sizeof err) != 0) {
        fprintf(stderr, "projload: --compare: %s\n", err);
        return EXIT_RUN_FAILED;
    }
    uint64_t total = atomic_load(&dr->sent);
    pj_lcmp_op *ops = calloc(su->max_ops ? su->max_ops : 1, sizeof *ops);
    pj_loadstat ls[2];
    memset(ls, 0, sizeof ls);
    int bad = !ops || loadstat_for(su, &ls[0]) || loadstat_for(su, &ls[1]);
    static const char *const path_names[2] = {"cuBLAS", "tuned"};
    for (int path = 0; path < 2 && !bad; path++) {
        for (int pass = 0; pass < 2 && !bad && !g_interrupted; pass++) {
            for (uint64_t seq = 0; seq < total && !bad; seq++) {
                uint32_t tr = (uint32_t)(seq % su->tr.n_reqs);
                const pj_trace_req *q = &su->tr.reqs[tr];
                for (uint32_t i = 0; i < q->n_ops; i++) {
                    const pj_trace_op *op = &su->tr.ops[q->op0 + i];
                    ops[i] = (pj_lcmp_op){(uint32_t)op->layer, op->m, op->n};
                }
                uint64_t host_ns, gpu_ns, t0 = now_ns();
                if (pj_lcmp_run(c, path, ops, q->n_ops, &host_ns, &gpu_ns, err, sizeof err) != 0) {
                    fprintf(stderr, "projload: --compare (%s, %s:%u): %s\n", path_names[path],
                            su->tr.file, q->line, err);
                    bad = 1;
                    break;
                }
                /* Pass 0 warms up (cuBLAS heuristics, first launches); the
                 * daemon's warm-up requests are left out of both, as there. */
                if (pass == 0 || seq < o->warmup)
                    continue;
                pj_ls_sample smp = {.t_start_ns = t0,
                                    .t_end_ns = t0 + host_ns,
                                    .exec_ns = gpu_ns,
                                    .n_ops = q->n_ops,
                                    .ok = 1};
                pj_loadstat_record(&ls[path], su->refs + su->ref_off[tr],
                                   su->ref_off[tr + 1] - su->ref_off[tr], &smp);
            }
        }
    }
    cJSON *jc = cJSON_AddObjectToObject(root, "compare");
    cJSON_AddStringToObject(jc, "inprocess", pj_lcmp_describe(c));
    cJSON_AddStringToObject(jc, "timing",
                            "in-process: host clock from before the first launch of a request "
                            "until an event after its last launch completed (spin-wait), after "
                            "a warm-up pass over the same requests; gpu_*: CUDA events around "
                            "the launches. projd: the client's round trip, exec_*: the daemon's "
                            "exec time from DONE");
    fprintf(rep,
            "\ncompare (in-process on this GPU vs through projd, same %llu requests, µs):\n"
            "  in-process: %s\n"
            "  timing: host clock around each request's launches + spin on an event after them,\n"
            "  after a warm-up pass; projd: the client's round trip at concurrency 1\n",
            (unsigned long long)(total > o->warmup ? total - o->warmup : 0), pj_lcmp_describe(c));
    fprintf(rep, "%-40s %7s  %8s %8s  %8s %8s  %8s %8s  %7s %7s %7s\n", "request shape", "count",
            "cuBLAS", "p99", "tuned", "p99", "projd", "p99", "pj/cuB", "tun/cuB", "pj/tun");
    cJSON *js = cJSON_AddArrayToObject(jc, "shapes");
    for (size_t g = 0; g < dr->ls.n && !bad; g++) {
        if (g != 0 && dr->ls.g[g].kind != PJ_LS_SHAPE)
            continue;
        pj_ls_summary a, b, d;
        pj_loadstat_summary(&ls[0], g, &a);
        pj_loadstat_summary(&ls[1], g, &b);
        pj_loadstat_summary(&dr->ls, g, &d);
        if (!d.count && !a.count)
            continue;
        const char *key = g == 0 ? "overall" : dr->ls.g[g].key;
        fprintf(rep, "%-40.40s %7llu  %8.1f %8.1f  %8.1f %8.1f  %8.1f %8.1f  %7.2f %7.2f %7.2f\n",
                key, (unsigned long long)a.count, a.p50_us, a.p99_us, b.p50_us, b.p99_us, d.p50_us,
                d.p99_us, ratio(d.p50_us, a.p50_us), ratio(b.p50_us, a.p50_us),
                ratio(d.p50_us, b.p50_us));
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "key", key);
        cJSON_AddNumberToObject(e, "count", (double)a.count);
        cmp_lat_json(e, "cublas", &a, 1);
        cmp_lat_json(e, "tuned", &b, 1);
        cmp_lat_json(e, "projd", &d, 0);
        cJSON *rt = cJSON_AddObjectToObject(e, "p50_ratios");
        cJSON_AddNumberToObject(rt, "projd_over_cublas", ratio(d.p50_us, a.p50_us));
        cJSON_AddNumberToObject(rt, "tuned_over_cublas", ratio(b.p50_us, a.p50_us));
        cJSON_AddNumberToObject(rt, "projd_over_tuned", ratio(d.p50_us, b.p50_us));
        cJSON_AddItemToArray(js, e);
    }
    fprintf(rep, "  pj/cuB > 1: offloading costs that much against SGLang's in-process cuBLAS;\n"
                 "  tun/cuB < 1: what the tuned engines gain in-process; pj/tun: the boundary "
                 "alone\n");
    /* The engines the tuned path picks, and how far they are from cuBLAS. */
    cJSON *je = cJSON_AddArrayToObject(jc, "engines");
    static const uint32_t probe_m[] = {1, 8, 16, 32, 64, 128, 256};
    unsigned dev_errors = 0;
    fprintf(rep, "  tuned engines (relative L2 difference from cuBLAS on the same x):\n");
    for (uint32_t l = 0; l < pj_welcome_n_layers(&su->w) && !bad; l++) {
        if (map[l] < 0)
            continue;
        uint32_t n = pj_welcome_layers(&su->w)[l].n;
        for (size_t i = 0; i < su->tr.n_ops; i++)
            if ((uint32_t)su->tr.ops[i].layer == l) {
                n = su->tr.ops[i].n;
                break;
            }
        fprintf(rep, "    %-10s n=%-5u", pj_welcome_layers(&su->w)[l].name, n);
        for (size_t i = 0; i < sizeof probe_m / sizeof probe_m[0]; i++) {
            uint32_t m = probe_m[i];
            if (m > su->w.max_m)
                break;
            char eng[64];
            pj_lcmp_engine(c, l, m, n, eng, sizeof eng);
            /* pj_lcmp_diff answers -1 both for "not probed" (larger than
             * the trace's requests: the same test as its own) and for a
             * device error: only the second is reported. */
            int probed = (size_t)m * n * 2 <= su->slot_y &&
                         (size_t)m * pj_welcome_layers(&su->w)[l].k * 2 <= su->slot_x;
            double d = pj_lcmp_diff(c, l, m, n);
            if (d < 0 && !probed)
                continue;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "layer", pj_welcome_layers(&su->w)[l].name);
            cJSON_AddNumberToObject(e, "m", m);
            cJSON_AddNumberToObject(e, "n", n);
            cJSON_AddStringToObject(e, "engine", eng);
            if (d < 0) {
                fprintf(rep, " m=%u %s DEVICE ERROR;", m, eng);
                cJSON_AddNullToObject(e, "rel_diff_vs_cublas");
                cJSON_AddStringToObject(e, "error", "device error running the engines");
                dev_errors++;
            } else {
                fprintf(rep, " m=%u %s %.1e;", m, eng, d);
                cJSON_AddNumberToObject(e, "rel_diff_vs_cublas", d);
            }
            cJSON_AddItemToArray(je, e);
        }
        fputc('\n', rep);
    }
    if (dev_errors)
        fprintf(rep, "  %u engine probes failed with a device error\n", dev_errors);
    cJSON_AddNumberToObject(jc, "device_errors", dev_errors);
    pj_loadstat_free(&ls[0]);
    pj_loadstat_free(&ls[1]);
    free(ops);
    pj_lcmp_close(c);
    return bad || dev_errors ? EXIT_RUN_FAILED : 0;
}
#endif

/* Which buffers the clients use (--buffers), decided once WELCOME is in.
 * 0, or EXIT_SETUP_ERROR with the message printed. */
static int pick_buffers(const lt_opts *o, lt_setup *su)
{
    int cuda_daemon = su->w.backend == PJ_BACKEND_CUDA;
    su->tolerant = cuda_daemon;
    if (strcmp(o->buffers, "host") == 0)
        return 0;
#ifdef PJ_HAVE_CUDA
    if (!cuda_daemon) {
        if (strcmp(o->buffers, "cuda") == 0) {
            fprintf(stderr,
                    "projload: --buffers cuda: the daemon's backend is %s; CUDA IPC buffers need "
                    "the cuda backend (use --buffers host or auto)\n",
                    projd_backend_name(su->w.backend));
            return EXIT_SETUP_ERROR;
        }
        return 0;
    }
    char why[300];
    if (!pj_lgpu_available(why, sizeof why)) {
        if (strcmp(o->buffers, "cuda") == 0) {
            fprintf(stderr, "projload: --buffers cuda: %s\n", why);
            return EXIT_SETUP_ERROR;
        }
        fprintf(stderr, "projload: host buffers: %s\n", why);
        return 0;
    }
    su->cuda_bufs = 1;
    return 0;
#else
    if (strcmp(o->buffers, "cuda") == 0) {
        fprintf(stderr, "projload: --buffers cuda: this projload was built without CUDA "
                        "(PJ_HAVE_CUDA); use --buffers host\n");
        return EXIT_SETUP_ERROR;
    }
    return 0;
#endif
}

static int cmd_run(int argc, char **argv)
{
    lt_opts o;
    int rc = parse_run(argc, argv, &o);
    if (rc)
        return rc;
    /* --transport decides each client's transport: $PROJD_RING would put
     * "nng" clients on rings and make the ring clients' own attach fail. */
    unsetenv("PROJD_RING");
    /* With the JSON on stdout, the tables go to stderr. */
    FILE *rep = o.json && strcmp(o.json, "-") == 0 ? stderr : stdout;
    lt_setup su;
    memset(&su, 0, sizeof su);
    char err[1024];
    int exit_code = EXIT_SETUP_ERROR;
    projd_conn *ctl = NULL;
    cJSON *root = NULL;

    if (strcmp(o.transport, "auto") && strcmp(o.transport, "nng") && strcmp(o.transport, "ring")) {
        fprintf(stderr, "projload: --transport %s: unknown (auto, nng, ring)\n", o.transport);
        return EXIT_SETUP_ERROR;
    }
    /* The outputs before anything else: a path that cannot be written
     * would otherwise show only after the whole run. */
    if ((o.json && (rc = check_output("--json", o.json, 0)) != 0) ||
        (o.plot && (rc = check_output("--plot", o.plot, 1)) != 0))
        return rc;
    if (pj_trace_load(&su.tr, o.trace, err, sizeof err) != 0) {
        fprintf(stderr, "projload: %s\n", err);
        goto out;
    }
    if (o.mode == MODE_REPLAY && su.tr.n_timed < su.tr.n_reqs) {
        for (size_t i = 0; i < su.tr.n_reqs; i++) {
            if (su.tr.reqs[i].t_us < 0) {
                fprintf(stderr,
                        "projload: %s:%u: t_us: missing (--replay needs every request's "
                        "time)\n",
                        su.tr.file, su.tr.reqs[i].line);
                goto out;
            }
        }
    }
    if (connect_ctl(o.socket, &ctl))
        goto out;
    /* The STATS around each run wait no longer than a request: a daemon
     * that stopped answering must not hold the report for libprojd's
     * default. */
    projd_set_timeout_ms(ctl, o.timeout_ms);
    snprintf(su.url, sizeof su.url, "%s", projd_url(ctl));
    su.w = *projd_info_get(ctl);
    char ring_why_not[1100];
    su.transport =
        pick_transport(o.transport, su.url, err, sizeof err, ring_why_not, sizeof ring_why_not);
    if (!su.transport) {
        fprintf(stderr, "projload: --transport %s: %s\n", o.transport, err);
        goto out;
    }
    if (pj_trace_resolve(&su.tr, &su.w, err, sizeof err) != 0) {
        fprintf(stderr, "projload: %s\n", err);
        goto out;
    }
    if (pick_buffers(&o, &su) != 0)
        goto out;
    if (o.compare) {
#ifdef PJ_HAVE_CUDA
        if (su.w.backend != PJ_BACKEND_CUDA) {
            fprintf(stderr,
                    "projload: --compare: the daemon's backend is %s; compare mode measures the "
                    "cuda backend against in-process cuBLAS on the same GPU\n",
                    projd_backend_name(su.w.backend));
            goto out;
        }
#else
        fprintf(stderr, "projload: --compare: this projload was built without CUDA "
                        "(PJ_HAVE_CUDA); compare mode runs cuBLAS in-process on the GPU\n");
        goto out;
#endif
    }
    pj_ls_msets_init(&su.msets, su.w.shapes,
                     su.w.n_shapes < PJ_WIRE_MAX_SHAPES ? su.w.n_shapes : PJ_WIRE_MAX_SHAPES,
                     su.w.max_m);
    for (size_t r = 0; r < su.tr.n_reqs; r++) {
        const pj_trace_req *q = &su.tr.reqs[r];
        size_t xb = 0, yb = 0;
        for (uint32_t i = 0; i < q->n_ops; i++) {
            const pj_trace_op *op = &su.tr.ops[q->op0 + i];
            xb += align_up((size_t)op->m * pj_welcome_layers(&su.w)[op->layer].k * 2);
            yb += align_up((size_t)op->m * op->n * 2);
        }
        su.slot_x = xb > su.slot_x ? xb : su.slot_x;
        su.slot_y = yb > su.slot_y ? yb : su.slot_y;
        su.max_ops = q->n_ops > su.max_ops ? q->n_ops : su.max_ops;
    }
    su.slot_y += LT_ALIGN; /* a guard after the largest request's last op (checks) */
    if (build_groups(&su) != 0) {
        fprintf(stderr, "projload: out of memory\n");
        goto out;
    }
    if ((o.check_fraction > 0 || o.compare) && load_model(&o, &su, ctl) != 0)
        goto out;

    uint32_t n_replay_clients = 0;
    if (o.mode == MODE_REPLAY) {
        static uint8_t seen[PJ_TRACE_MAX_CLIENT + 1];
        memset(seen, 0, sizeof seen);
        for (size_t i = 0; i < su.tr.n_reqs; i++)
            n_replay_clients += seen[su.tr.reqs[i].client]++ == 0;
        if (n_replay_clients > LT_MAX_CLIENTS) {
            fprintf(stderr, "projload: --replay: the trace has %u client ids, at most %d\n",
                    n_replay_clients, LT_MAX_CLIENTS);
            goto out;
        }
    }
    if (o.mode == MODE_REPLAY) {
        /* A replay plays the trace once: what is left after the warm-up. */
        uint64_t left = su.tr.n_reqs > o.warmup ? su.tr.n_reqs - o.warmup : 0;
        if (!left) {
            fprintf(stderr,
                    "projload: --warmup %llu leaves none of the trace's %zu requests to "
                    "count\n",
                    (unsigned long long)o.warmup, su.tr.n_reqs);
            goto out;
        }
        if (o.count_set && o.count > left)
            fprintf(rep, "note: --count %llu: the trace has %llu requests after the warm-up\n",
                    (unsigned long long)o.count, (unsigned long long)left);
        if (!o.count_set || o.count > left)
            o.count = left;
    } else if (!o.count_set) {
        o.count = su.tr.n_reqs;
    }

    if (!o.model)
        fprintf(stderr, "projload: results are not checked against the CPU reference; give "
                        "--model PATH (the model the daemon serves) to check them\n");
    const char *mode_text = o.n_sweep ? "closed-loop sweep" : mode_name(o.mode);
    fprintf(rep,
            "projload: %s, transport %s, %s buffers, daemon %s (%s backend, %u layers, max_m "
            "%u)\n",
            mode_text, su.transport->name, su.cuda_bufs ? "CUDA IPC" : "host shared-memory", su.url,
            projd_backend_name(su.w.backend), pj_welcome_n_layers(&su.w), su.w.max_m);
    if (ring_why_not[0])
        fprintf(rep, "  (transport ring not used: %s)\n", ring_why_not);
    fprintf(rep, "trace %s: %zu requests, %zu ops; %llu warm-up requests, then ", su.tr.file,
            su.tr.n_reqs, su.tr.n_ops, (unsigned long long)o.warmup);
    /* With --duration and no --count only the time bounds the run (in
     * open loop: rate x duration requests are planned); a replay plays
     * the trace once. */
    int count_bound = o.count_set || o.duration_s <= 0 || o.mode == MODE_REPLAY;
    if (count_bound)
        fprintf(rep, "%llu counted", (unsigned long long)o.count);
    if (count_bound && o.duration_s > 0)
        fprintf(rep, " or %.1f s, whichever ends first\n", o.duration_s);
    else if (o.duration_s > 0)
        fprintf(rep, "as many as %.1f s allows (no --count)\n", o.duration_s);
    else
        fputc('\n', rep);
    fflush(rep);

    root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tool", "projload");
    cJSON_AddStringToObject(root, "command", o.command);
    cJSON_AddItemToObject(root, "daemon", daemon_json(&su));
    cJSON_AddStringToObject(root, "transport", su.transport->name);
    cJSON_AddStringToObject(root, "buffers", su.cuda_bufs ? "cuda" : "host");
    cJSON *jt = cJSON_AddObjectToObject(root, "trace");
    cJSON_AddStringToObject(jt, "file", su.tr.file);
    cJSON_AddNumberToObject(jt, "requests", (double)su.tr.n_reqs);
    cJSON_AddNumberToObject(jt, "ops", (double)su.tr.n_ops);
    cJSON_AddStringToObject(root, "mode", o.n_sweep ? "sweep" : mode_name(o.mode));
    if (o.mode == MODE_RATE || o.mode == MODE_POISSON)
        cJSON_AddNumberToObject(root, "rate", o.rate);
    if (o.mode == MODE_REPLAY)
        cJSON_AddNumberToObject(root, "speed", o.speed);
    cJSON_AddNumberToObject(root, "slots", o.mode == MODE_CLOSED ? 1 : o.slots);
    if (o.mode != MODE_CLOSED)
        cJSON_AddNumberToObject(root, "spin_us", o.spin_us);
    cJSON_AddNumberToObject(root, "warmup", (double)o.warmup);
    /* count: the measured requests actually sent (set after the run;
     * null for a sweep, whose steps each have totals.measured_sent);
     * count_limit: the --count bound, null when only --duration bounds. */
    if (count_bound)
        cJSON_AddNumberToObject(root, "count_limit", (double)o.count);
    else
        cJSON_AddNullToObject(root, "count_limit");
    cJSON_AddNumberToObject(root, "duration_s", o.duration_s);
    cJSON *jc = cJSON_AddObjectToObject(root, "check");
    cJSON_AddNumberToObject(jc, "fraction", o.check_fraction);
    /* Written as its digits: a double (cJSON's number) rounds seeds above
     * 2^53, and the report could not repeat the run's checks. */
    char seed_digits[24];
    snprintf(seed_digits, sizeof seed_digits, "%" PRIu64, o.seed);
    cJSON_AddRawToObject(jc, "seed", seed_digits);
    if (o.model)
        cJSON_AddStringToObject(jc, "model", o.model);

    exit_code = 0;
    uint32_t n_steps = o.n_sweep ? (uint32_t)o.n_sweep : 1;
    pj_plot_sweep_point pts[LT_MAX_SWEEP];
    pj_plot_series series[LT_MAX_SWEEP];
    char labels[LT_MAX_SWEEP][48];
    lt_run *runs = calloc(n_steps, sizeof *runs);
    /* Each step's statistics are freed once reported; the plots keep a
     * copy of the overall latency histogram. */
    pj_ls_hist *lats = calloc(n_steps, sizeof *lats);
    cJSON *jsweep = o.n_sweep ? cJSON_AddArrayToObject(root, "sweep") : NULL;
    if (!runs || !lats) {
        free(runs);
        free(lats);
        fprintf(stderr, "projload: out of memory\n");
        exit_code = EXIT_SETUP_ERROR;
        goto out;
    }
    uint32_t done_steps = 0;
    for (uint32_t s = 0; s < n_steps && !g_interrupted; s++) {
        lt_run *r = &runs[s];
        r->o = &o;
        r->su = &su;
        r->mode = o.n_sweep ? MODE_CLOSED : o.mode;
        r->nclients = o.n_sweep                ? o.sweep[s]
                      : r->mode == MODE_REPLAY ? n_replay_clients
                                               : o.concurrency;
        r->slots = r->mode == MODE_CLOSED ? 1 : o.slots;
        if (o.n_sweep)
            fprintf(rep, "\n=== sweep: concurrency %u\n", r->nclients);
        else
            fprintf(rep, "clients: %u, %u request%s in flight each at most\n", r->nclients,
                    r->slots, r->slots == 1 ? "" : "s");
        fflush(rep);
        int rr = run_once(r, ctl);
        if (rr != 0) {
            /* not a step done: the report, the plot and a comparison read
             * only steps that ran (an aborted one's series is empty) */
            exit_code = EXIT_SETUP_ERROR;
            break;
        }
        done_steps = s + 1;
        pj_ls_summary sm;
        pj_loadstat_summary(&r->ls, 0, &sm);
        r->measured = sm.count - sm.errors;
        pj_loadstat_print(&r->ls, rep);
        print_totals(rep, r);
        print_stats(rep, r->stats_before, r->stats_after);
        if (run_failed(r))
            exit_code = EXIT_RUN_FAILED;
        pts[s] =
            (pj_plot_sweep_point){r->nclients, sm.req_per_s, sm.ops_per_s, sm.p50_us, sm.p99_us};
        snprintf(labels[s], sizeof labels[s], o.n_sweep ? "%s c=%u" : "%s", su.transport->name,
                 r->nclients);
        lats[s] = *r->ls.g[0].lat;
        series[s] = (pj_plot_series){labels[s], &lats[s]};
        cJSON *rj = run_json(r);
        if (jsweep) {
            cJSON_AddItemToArray(jsweep, rj);
        } else {
            /* a key the report has already ("buffers") stays once */
            for (cJSON *c = rj->child; c; c = c->next)
                if (!cJSON_HasObjectItem(root, c->string))
                    cJSON_AddItemToObject(root, c->string, cJSON_Duplicate(c, 1));
            cJSON_Delete(rj);
            cJSON_AddNumberToObject(root, "count",
                                    (double)(atomic_load(&r->sent) - atomic_load(&r->warm_sent)));
        }
        /* Compare mode reads the (single) run's groups later. */
        if (!o.compare)
            pj_loadstat_free(&r->ls);
        fflush(rep);
        if (atomic_load(&r->lost) || atomic_load(&r->unanswered)) {
            if (s + 1 < n_steps)
                fprintf(rep, "\nthe daemon %s: the sweep stops here\n",
                        atomic_load(&r->lost) ? "connection was lost" : "stopped answering");
            break;
        }
    }
    if (jsweep || !done_steps || runs[0].abort)
        cJSON_AddNullToObject(root, "count");
    if (g_interrupted) {
        fprintf(rep, "\ninterrupted: the report covers what ran\n");
        exit_code = exit_code ? exit_code : EXIT_RUN_FAILED;
    }
    if (o.n_sweep && done_steps) {
        fprintf(rep, "\nthroughput vs concurrency (closed loop, %s):\n", su.transport->name);
        fprintf(rep, "%11s  %10s  %11s  %9s  %9s  %6s  %9s\n", "concurrency", "req/s", "ops/s",
                "p50 µs", "p99 µs", "errors", "mismatch");
        for (uint32_t s = 0; s < done_steps; s++)
            fprintf(rep, "%11u  %10.1f  %11.1f  %9.1f  %9.1f  %6llu  %9llu\n", pts[s].concurrency,
                    pts[s].req_per_s, pts[s].ops_per_s, pts[s].p50_us, pts[s].p99_us,
                    (unsigned long long)atomic_load(&runs[s].errors),
                    (unsigned long long)atomic_load(&runs[s].mismatches));
    }
    if (o.plot && done_steps) {
        char msg[1024];
        int pr = pj_plot_latency_cdf(o.plot, series, done_steps, msg, sizeof msg);
        if (pr >= 0 && o.n_sweep) {
            fprintf(rep, "%s\n", msg);
            pr = pj_plot_sweep(o.plot, pts, done_steps, msg, sizeof msg);
        }
        /* Plots asked for and not written fail the run, as --json does;
         * gnuplot missing (the data and scripts written) does not. */
        if (pr < 0) {
            fprintf(stderr, "projload: %s\n", msg);
            exit_code = exit_code ? exit_code : EXIT_RUN_FAILED;
        } else {
            fprintf(rep, "%s\n", msg);
        }
    }
#ifdef PJ_HAVE_CUDA
    if (o.compare && done_steps && !g_interrupted) {
        fflush(rep);
        int cr = run_compare(&o, &su, &runs[0], rep, root);
        if (cr && !exit_code)
            exit_code = cr;
    }
#endif
    if (rep == stdout && stdout_failed())
        exit_code = exit_code ? exit_code : EXIT_RUN_FAILED;
    cJSON_AddNumberToObject(root, "exit_code", exit_code);
    if (o.json && write_json(o.json, root) != 0 && !exit_code)
        exit_code = EXIT_RUN_FAILED;
    for (uint32_t s = 0; s < done_steps; s++)
        run_free(&runs[s]);
    free(runs);
    free(lats);
out:
    cJSON_Delete(root);
    projd_close(ctl);
    setup_free(&su);
    return exit_code;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_IGN);
    if (argc >= 2 && strcmp(argv[1], "gen") == 0)
        return cmd_gen(argc - 1, argv + 1);
    if (argc >= 2 && strcmp(argv[1], "info") == 0)
        return cmd_info(argc - 1, argv + 1);
    /* Only a run looks at the flag (it stops, reports what it has and
     * exits 1); gen and info keep the default action, so that Ctrl-C,
     * timeout(1) and systemd stop them. */
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    if (argc >= 2 && strcmp(argv[1], "run") == 0)
        return cmd_run(argc - 1, argv + 1);
    if (argc >= 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        usage(stdout);
        return 0;
    }
    return cmd_run(argc, argv);
}
