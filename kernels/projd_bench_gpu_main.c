/* projd-bench — the scoring benchmark of the engines, and their tuner.
 *
 * Method (ARCHITECTURE.md "The benchmark that scores the kernels"): every
 * timed operation is a CUDA graph; before each replay a 256 MB read evicts
 * L2; ours and the baseline alternate in pairs (the order flips every
 * repetition); medians over the repetitions. Baseline = what SGLang runs:
 * cuBLAS x @ W.T (the faster of cublasGemmEx's default and cublasLt's
 * heuristic, measured per shape), the router as hi GEMM + lo GEMM + add.
 * 30 shapes: 5 layers x m in {1, 8, 16, 32, 128, 256} (--config: a
 * configured model's layers and shapes.m instead). Per load (one m,
 * the five layers summed) speedup = sum baseline / sum ours; score = the
 * geometric mean of the six, with a bootstrap 95 % interval (repetitions
 * resampled in pairs). Each shape's time is also set against its read
 * floor: a read kernel over exactly the bytes the chosen engine reads,
 * timed the same way in the same run.
 *
 * --tune FILE runs the tuner first: per shape every knob combination of
 * every engine that can take it is validated (engcheck.h), timed coarsely,
 * the best few re-timed against each other and cuBLAS, and the winner
 * written to the table when it beats the best alternative by the margin
 * (3 % plain engines vs cuBLAS; 2 % for z12 engines vs cuBLAS and vs the
 * plain engine when that one made its margin). Then every m from
 * 1 to 256 is run on the entry that would serve it in the daemon and
 * checked; an entry wrong at any of its m is dropped (vet_served_m). The
 * benchmark then runs with that table.
 */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <cjson/cJSON.h>
#include <cuda_runtime_api.h>

#include "config/config.h"
#include "daemon/backend.h"
#include "daemon/model.h"
#include "kernels/benchk.h"
#include "kernels/benchout.h"
#include "kernels/dispatch.h"
#include "kernels/engcheck.h"
#include "kernels/engine.h"

/* The benchmark times every (layer, m) of its model, a few seconds each:
 * its own bound, below the daemon's PJ_CFG_MAX_LAYERS. */
#define MAX_LAYERS    32
#define MAX_MS        PJ_CFG_MAX_SHAPES
#define MAX_SHAPES    (MAX_LAYERS * MAX_MS)
#define FLUSH_BYTES   (256u << 20)
#define READBUF_BYTES (160u << 20)
/* The bootstrap's xorshift64 state: fixed, so one run's samples always give
 * one interval. */
#define BOOT_SEED 0x12345678abcdefull
/* Exit status of a run that wrote its results but timed a shape that was
 * wrong after its replays (1 is a run that wrote nothing: an error). */
#define EXIT_WRONG 3
_Static_assert(PJ_BK_READ_VARIANTS == PJ_BO_FLOORS,
               "every read variant has its place in bench.json");

typedef struct layer_def {
    char name[PJ_CFG_NAME];
    uint32_t N, K, n; /* full shape, rows a request uses */
    pj_format fmt;
    char tuned_as[PJ_CFG_NAME]; /* --config's tuned_as, or "" */
} layer_def;

/* The name the tuning table knows d by, as the daemon looks it up: its
 * tuned_as where the config gives one. The tuner reads OLD's entries and
 * writes NEW's under it, so that what it tunes is what the daemon runs. */
static const char *table_name(const layer_def *d)
{
    return d->tuned_as[0] ? d->tuned_as : d->name;
}

/* The layers and the m of the run: the reference model's (ARCHITECTURE.md)
 * and its six loads, or those of a projd configuration (--config). */
static layer_def layer_defs[MAX_LAYERS] = {
    {"qkv_gate", 4608, 4096, 4608, PJ_FMT_Z12, ""}, {"o", 4096, 2048, 4096, PJ_FMT_Z12, ""},
    {"pooler", 8192, 4096, 8192, PJ_FMT_Z12, ""},   {"unpooler", 8192, 4096, 1024, PJ_FMT_Z12, ""},
    {"router", 256, 4096, 256, PJ_FMT_SPLIT, ""},
};
static int g_nl = 5;

/* The first layer of the run whose entries layer li's are: the same table
 * name and shape (through tuned_as). The tuner and the survey tune each
 * entry once, on that layer's weights; tuned again for a later layer, its
 * result would overwrite the first's (and a run out of budget would put
 * OLD's entry back over a new one). The vetting runs the entry on every
 * layer it serves. */
/* The rows a table entry of d records it was timed on: a row prefix's
 * (kernels/dispatch.h), else 0. */
static uint32_t timed_rows(const layer_def *d)
{
    return d->n < d->N ? d->n : 0;
}

static int entry_owner(int li)
{
    const layer_def *d = &layer_defs[li];
    for (int lj = 0; lj < li; lj++)
        if (layer_defs[lj].N == d->N && layer_defs[lj].K == d->K &&
            !strcmp(table_name(&layer_defs[lj]), table_name(d)))
            return lj;
    return li;
}

static uint32_t ms[MAX_MS] = {1, 8, 16, 32, 128, 256};
static int g_nm = 6;
static uint32_t g_max_m = 256; /* the largest m a request may use (shapes.max_m) */
/* --config: the model's own weights (NULL: generated ones). */
static pj_model *g_model;

typedef struct opts {
    const char *out, *table, *tune, *commit;
    int out_fd; /* --out, opened once checked: its files are made in it (out_file) */
    double tune_budget;
    unsigned tune_m_lo, tune_m_hi; /* --tune-new re-tunes only these m */
    int reps, survey;
    uint64_t seed;
} opts;

/* Everything the run holds. */
typedef struct bench {
    opts o;
    pj_chk_ctx c;
    pj_chk_layer layers[MAX_LAYERS];
    pj_eng_ws ws[MAX_LAYERS];
    void *flush, *readbuf;
    size_t readbuf_bytes;
    unsigned *sink;
    uint16_t *tmp; /* baseline router scratch */
    size_t tmp_bytes;
    cudaGraphExec_t g_flush;
    cudaEvent_t *ev;
    int nev;
    int ingraph;    /* timing events inside the graphs */
    int prime;      /* each timed op runs once untimed first (default; --no-prime) */
    int flush_kind; /* pj_bk_flush's kind (--flush-kind) */
    /* --touch: work captured just before the first event (outside the
     * timed interval), or NULL. */
    int (*pre)(struct bench *b, void *ctx);
    void *pre_ctx;
    FILE *log;
} bench;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void die(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void die(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "projd-bench: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    exit(1);
}

#define CK(call)                                                                                   \
    do {                                                                                           \
        cudaError_t ce_ = (call);                                                                  \
        if (ce_ != cudaSuccess)                                                                    \
            die("%s:%d %s: %s", __FILE__, __LINE__, #call, cudaGetErrorString(ce_));               \
    } while (0)

/* ---- graphs and timing ------------------------------------------------------- */

typedef int (*op_fn)(bench *b, void *ctx);
static int op_flush(bench *b, void *ctx);

/* A graph of one timed operation. With in-graph timing (the default when
 * the driver supports it) the graph is [256 MB read, event, op, event]:
 * the op starts right after the flush inside one graph, so no graph-launch
 * latency lands inside the measured interval. Otherwise the graph is the op
 * alone and the flush and events are separate stream work.
 *
 * Primed (the default): [256 MB read, op, 256 MB read, event, op, event].
 *
 * The 256 MB read must use plain loads (pj_bk_flush kind 1). The read-only
 * path with a 256-byte L2 prefetch, the flush until round 17 (kind 0),
 * left in L2 much of what the previous run had brought in by cp.async or
 * bulk copies (our ring GEMVs, the tiled GEMM, cuBLAS's TMA): a bulk read
 * of 37.7 MB took 8.1 µs after it and 12.6 after a plain one. So each op
 * was timed with part of its weights in L2, and beside the other side's
 * kernel it found fewer of them (round 16's neighbour effect: cuBLAS on
 * qkv_gate m = 8 11.8 µs after itself, 15.7 after our z12 GEMV, which
 * round 16 put down to some other state and cured by priming). With the
 * plain flush L2 is cold and primed and unprimed agree; priming stays so
 * that nothing the flush might miss can favour either side. */
static cudaGraphExec_t capture(bench *b, op_fn fn, void *ctx)
{
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(b->c.s, cudaStreamCaptureModeThreadLocal));
    int rc = 0;
    if (b->ingraph && fn != op_flush) {
        rc = op_flush(b, NULL);
        if (!rc && b->prime) {
            rc = fn(b, ctx);
            if (!rc)
                rc = op_flush(b, NULL);
        }
        if (!rc && b->pre)
            rc = b->pre(b, b->pre_ctx);
        if (!rc && cudaEventRecordWithFlags(b->ev[0], b->c.s, cudaEventRecordExternal))
            rc = -EIO;
    }
    if (!rc)
        rc = fn(b, ctx);
    if (!rc && b->ingraph && fn != op_flush &&
        cudaEventRecordWithFlags(b->ev[1], b->c.s, cudaEventRecordExternal))
        rc = -EIO;
    cudaGraph_t g = NULL;
    cudaError_t ce = cudaStreamEndCapture(b->c.s, &g);
    if (rc || ce != cudaSuccess) {
        /* The op refused (cuBLASLt turns down many of the survey's
         * configurations) but the capture ended: its graph is ours to free. */
        if (ce == cudaSuccess && g)
            cudaGraphDestroy(g);
        cudaGetLastError();
        return NULL;
    }
    ce = cudaGraphInstantiate(&ge, g, 0);
    cudaGraphDestroy(g);
    if (ce != cudaSuccess) {
        cudaGetLastError();
        return NULL;
    }
    return ge;
}

/* Time nops graphs alternating, reps rounds: t[j][r] in µs. Each replay is
 * preceded by the flush; the order of the graphs rotates every round. */
static void time_graphs(bench *b, cudaGraphExec_t *g, int nops, int reps, float **t)
{
    if (b->ingraph) {
        for (int r = 0; r < reps; r++)
            for (int j = 0; j < nops; j++) {
                int op = (j + r) % nops;
                float ms_ = 0;
                CK(cudaGraphLaunch(g[op], b->c.s));
                CK(cudaStreamSynchronize(b->c.s));
                CK(cudaEventElapsedTime(&ms_, b->ev[0], b->ev[1]));
                t[op][r] = ms_ * 1000.f;
            }
        return;
    }
    const int per = 2 * nops;
    int chunk = b->nev / per;
    if (chunk < 1)
        die("too few events");
    for (int r0 = 0; r0 < reps; r0 += chunk) {
        int rn = reps - r0 < chunk ? reps - r0 : chunk;
        for (int r = 0; r < rn; r++)
            for (int j = 0; j < nops; j++) {
                int op = (j + r0 + r) % nops;
                cudaEvent_t *e = &b->ev[(r * nops + op) * 2];
                if (b->prime)
                    CK(cudaGraphLaunch(g[op], b->c.s));
                CK(cudaGraphLaunch(b->g_flush, b->c.s));
                CK(cudaEventRecord(e[0], b->c.s));
                CK(cudaGraphLaunch(g[op], b->c.s));
                CK(cudaEventRecord(e[1], b->c.s));
            }
        CK(cudaStreamSynchronize(b->c.s));
        for (int r = 0; r < rn; r++)
            for (int op = 0; op < nops; op++) {
                float ms_ = 0;
                cudaEvent_t *e = &b->ev[(r * nops + op) * 2];
                CK(cudaEventElapsedTime(&ms_, e[0], e[1]));
                t[op][r0 + r] = ms_ * 1000.f;
            }
    }
}

/* ---- operations -------------------------------------------------------------- */

typedef struct op_ctx {
    pj_eng_call call;
    pj_eng_kind k;
    pj_eng_knobs kn;
    int base_algo; /* baseline: 0/1 */
    size_t read_bytes;
    int read_variant;
} op_ctx;

static int op_engine(bench *b, void *ctx)
{
    op_ctx *o = ctx;
    return pj_eng_launch(o->k, &o->kn, &o->call, b->c.es);
}

static int op_baseline(bench *b, void *ctx)
{
    op_ctx *o = ctx;
    return pj_eng_baseline(o->base_algo, &o->call, b->tmp, b->c.es);
}

static int op_read(bench *b, void *ctx)
{
    op_ctx *o = ctx;
    return pj_bk_read(b->c.s, b->readbuf, o->read_bytes, b->sink, o->read_variant,
                      b->c.lim.sm_count);
}

static int op_flush(bench *b, void *ctx)
{
    (void)ctx;
    return pj_bk_flush(b->c.s, b->flush, FLUSH_BYTES, b->sink, b->flush_kind, b->c.lim.sm_count);
}

static void make_call(bench *b, int li, uint32_t m, pj_eng_call *call)
{
    *call = pj_chk_call(&b->layers[li].L, &b->ws[li], b->c.dx, b->c.dy, m, layer_defs[li].n);
}

/* Prepare x and the reference for (layer, m) unless already there. */
static void prepare(bench *b, int li, uint32_t m)
{
    char err[256];
    if (b->c.cur == &b->layers[li] && b->c.cur_m == m && b->c.cur_n == layer_defs[li].n)
        return;
    if (pj_chk_prepare(&b->c, &b->layers[li], m, layer_defs[li].n, 0, b->o.seed * 1000 + m, 0, NULL,
                       err, sizeof err))
        die("%s", err);
}

/* Validate (engine, knobs) on (layer, m): 1 ok, 0 refused or wrong. */
static int validate(bench *b, int li, uint32_t m, pj_eng_kind k, const pj_eng_knobs *kn, char *why,
                    size_t whylen)
{
    pj_eng_call call;
    make_call(b, li, m, &call);
    if (pj_eng_can_run(k, kn, &call, &b->c.lim, why, whylen))
        return 0;
    prepare(b, li, m);
    pj_chk_result res;
    int rc = pj_chk_run(&b->c, &b->ws[li], k, kn, &res);
    if (rc) {
        /* A launch failure may leave a sticky error: check the context. */
        cudaError_t ce = cudaDeviceSynchronize();
        if (ce != cudaSuccess)
            die("CUDA context lost validating %s %s: %s", layer_defs[li].name, pj_eng_name(k),
                cudaGetErrorString(ce));
        snprintf(why, whylen, "run failed: %s", res.why);
        return 0;
    }
    if (!res.ok) {
        snprintf(why, whylen, "%s", res.why);
        return 0;
    }
    return 1;
}

/* ---- the tuner ------------------------------------------------------------------ */

typedef struct cand {
    pj_eng_kind k;
    pj_eng_knobs kn;
    float us;
    cudaGraphExec_t g;
} cand;

/* The full sweep at m = 16 / 32 generates more than 2048 candidates; the
 * list held 2048 until round 17 and cut the last-added forms (prefetch,
 * cluster, tiled cluster) off there without a word. */
#define MAX_CAND 4096

/* --tune-new: the table being improved; its entries compete with cuBLAS,
 * gemvz's shared-memory prefetch (pipe = 5) and the cluster split-K GEMVs
 * (cl = 1) at m <= 32, the cluster split-K GEMM above; the rest of the
 * sweep is skipped. */
static const pj_tune_table *g_old;
/* --tune-full: with --tune-new, the shapes of --tune-m get the full sweep
 * (every engine's candidates, the old entry among them) instead of the
 * short list. */
static int g_full_sweep;

/* OLD's entry for this layer's shape at m: a table may also hold entries of
 * the same layer name for other models' shapes, which must not compete here
 * or be carried over in place of this shape's. */
static const pj_tune_entry *old_entry(const layer_def *d, uint32_t m)
{
    if (!g_old)
        return NULL;
    for (uint32_t i = 0; i < g_old->n; i++) {
        const pj_tune_entry *e = &g_old->e[i];
        if (e->m == m && e->n == d->N && e->k == d->K && !strcmp(e->layer, table_name(d)))
            return e;
    }
    return NULL;
}

/* Append one candidate (engine, knobs) while the list has room; say so
 * once when it has not. */
static int add_cand(cand *cs, int n, pj_eng_kind k, const pj_eng_knobs *kn)
{
    static int warned;
    if (n >= MAX_CAND) {
        if (!warned++)
            fprintf(stderr, "projd-bench: more than %d tuning candidates, the rest are skipped\n",
                    MAX_CAND);
        return n;
    }
    memset(&cs[n], 0, sizeof cs[n]);
    cs[n].k = k;
    cs[n].kn = *kn;
    return n + 1;
}

/* The balanced GEMV (pipe = 4) of every engine the layer's format serves:
 * warps, units per batch, K panels, CTAs per SM. Variants the device cannot
 * hold (registers, shared memory, occupancy) are refused by validation. */
static int add_balanced(const layer_def *d, cand *cs, int n)
{
    static const uint8_t nws[] = {4, 8, 16}, us[] = {1, 2, 4, 8}, kss[] = {1, 2, 4}, rs[] = {1, 2};
    pj_eng_kind ek[2];
    int ne = 0;
    if (d->fmt == PJ_FMT_SPLIT) {
        ek[ne++] = PJ_ENG_ROUTER;
    } else {
        ek[ne++] = PJ_ENG_GEMV;
        if (d->fmt == PJ_FMT_Z12)
            ek[ne++] = PJ_ENG_GEMVZ;
    }
    for (int e = 0; e < ne; e++)
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                for (int q = 0; q < 3; q++)
                    for (int r = 0; r < 2; r++) {
                        if (us[j] == 8 && ek[e] != PJ_ENG_GEMVZ)
                            continue;
                        const pj_eng_knobs kn = {
                            .nw = nws[i], .ks = kss[q], .u = us[j], .pipe = 4, .r = rs[r]};
                        n = add_cand(cs, n, ek[e], &kn);
                    }
    return n;
}

/* The slab GEMV (gemvz pipe = 6, m <= 8; round 18): consumer warps, tiles
 * per warp and stage, ring stages, CTAs per SM, how x comes. */
static int add_slab(const layer_def *d, uint32_t m, cand *cs, int n)
{
    static const uint8_t nws[] = {8, 16}, us[] = {1, 2}, sts[] = {4, 6, 8};
    if (d->fmt != PJ_FMT_Z12 || m > 8)
        return n;
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int q = 0; q < 3; q++)
                for (int r = 1; r <= 2; r++)
                    for (int x = 0; x < 3; x++) {
                        const pj_eng_knobs kn = {.nw = nws[i],
                                                 .ks = 1,
                                                 .u = us[j],
                                                 .pipe = 6,
                                                 .xs = (uint8_t)x,
                                                 .r = (uint8_t)r,
                                                 .st = sts[q]};
                        n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                    }
    return n;
}

/* The z12 GEMV with x in registers (gemvz pipe = 7, m <= 32; round 40):
 * streaming warps (the whole K split among them), ring stages, CTAs per
 * SM. */
static int add_xreg(const layer_def *d, uint32_t m, cand *cs, int n)
{
    static const uint8_t nws[] = {8, 16}, sts[] = {4, 6};
    if (d->fmt != PJ_FMT_Z12 || m > 32)
        return n;
    for (int i = 0; i < 2; i++)
        for (int q = 0; q < 2; q++)
            for (int r = 0; r <= 2; r++) {
                const pj_eng_knobs kn = {
                    .nw = nws[i], .ks = 1, .u = 1, .pipe = 7, .r = (uint8_t)r, .st = sts[q]};
                n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
            }
    return n;
}

/* gemvz with the shared-memory prefetch (pipe = 5): warps, tiles per stage,
 * K split, row blocks per warp, x path (global (m <= 8), staged, through
 * the ring, or its m tokens staged (m <= 8)), warp groups; then the tail
 * split, x shared by the CTA (xs = 4) and the cluster reduction. (gemv and
 * the router with pipe = 5 lost to their register forms everywhere in
 * round 6 and are left to test_engines.) */
static int add_prefetch(const layer_def *d, uint32_t m, cand *cs, int n)
{
    static const uint8_t nws[] = {4, 8, 16}, us[] = {1, 2, 4}, kss[] = {1, 2, 4};
    if (d->fmt != PJ_FMT_Z12)
        return n;
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int q = 0; q < 3; q++)
                for (int rb = 1; rb <= (m > 1 ? 4 : 1); rb *= 2)
                    for (int x = 0; x < 4; x++)
                        for (int r = 1; r <= 2; r++) {
                            if (x == 0 && m > 8) /* x from global: one load per tile and token */
                                continue;
                            if (x == 3 && (m > 8 || rb > 1 || nws[i] > 8))
                                continue;
                            const pj_eng_knobs kn = {.nw = nws[i],
                                                     .ks = kss[q],
                                                     .u = us[j],
                                                     .pipe = 5,
                                                     .xs = (uint8_t)x,
                                                     .r = (uint8_t)r,
                                                     .rb = (uint8_t)rb};
                            n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                        }
    /* The tail split (round 10): only the row groups past the last whole
     * wave of SMs are split in K. */
    static const uint8_t tss[] = {2, 4, 8};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 2; j++)
            for (int q = 0; q < 3; q++)
                for (int x = 0; x < 2; x++) {
                    const pj_eng_knobs kn = {.nw = nws[i],
                                             .ks = 1,
                                             .u = us[j],
                                             .pipe = 5,
                                             .xs = (uint8_t)(x ? 2 : 0),
                                             .r = 1,
                                             .rb = 1,
                                             .ts = tss[q]};
                    n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                }
    /* x shared by the CTA (round 11): one copy of each batch's x serves
     * the r groups' row blocks; also with the cluster reduction. */
    static const uint8_t nwx[] = {1, 2, 4}, rrb[][2] = {{2, 1}, {4, 1}, {2, 2}};
    static const uint8_t ksx[] = {1, 2, 4, 8};
    for (int i = 0; i < 3 && m > 1; i++)
        for (int j = 0; j < 2; j++)
            for (int q = 0; q < 4; q++)
                for (int g = 0; g < 3; g++)
                    for (int cl = 0; cl < 2; cl++) {
                        if (cl ? ksx[q] < 2 || rrb[g][1] > 1 : ksx[q] > 4)
                            continue;
                        const pj_eng_knobs kn = {.nw = nwx[i],
                                                 .ks = ksx[q],
                                                 .u = us[j],
                                                 .pipe = 5,
                                                 .xs = 4,
                                                 .r = rrb[g][0],
                                                 .rb = rrb[g][1],
                                                 .cl = (uint8_t)cl};
                        n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                    }
    /* A 2-stage ring (round 12, m > 8): half the shared memory, so nw = 8
     * or more CTAs fit per SM; nw 4 or 8, (r, rb) 1/1, 2/1, 1/2. */
    static const uint8_t rr2[][2] = {{1, 1}, {2, 1}, {1, 2}};
    for (int i = 0; i < 2 && m > 8; i++)
        for (int j = 0; j < 2; j++)
            for (int q = 0; q < 3; q++)
                for (int g = 0; g < 3; g++) {
                    const pj_eng_knobs kn = {.nw = nws[i],
                                             .ks = kss[q],
                                             .u = us[j],
                                             .pipe = 5,
                                             .xs = 2,
                                             .r = rr2[g][0],
                                             .rb = rr2[g][1],
                                             .st = 2};
                    n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                }
    /* The same with the cluster split-K reduction: finer K splits without
     * the global epilogue. */
    static const uint8_t ksc[] = {2, 4, 8};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int q = 0; q < 3; q++)
                for (int x = 0; x < 2; x++) {
                    const pj_eng_knobs kn = {.nw = nws[i],
                                             .ks = ksc[q],
                                             .u = us[j],
                                             .pipe = 5,
                                             .xs = (uint8_t)(x ? 2 : 0),
                                             .r = 1,
                                             .rb = 1,
                                             .cl = 1};
                    n = add_cand(cs, n, PJ_ENG_GEMVZ, &kn);
                }
    return n;
}

/* gemv and the router with the cluster split-K reduction (cl = 1): warps,
 * chunks per batch, K split (the cluster size), pipelining, register cap. */
static int add_cluster(const layer_def *d, cand *cs, int n)
{
    static const uint8_t nws[] = {4, 8, 16}, us[] = {1, 2, 4}, kss[] = {2, 4, 8, 16};
    for (int i = 0; i < 3; i++)
        for (int j = 0; j < 3; j++)
            for (int q = 0; q < 4; q++)
                for (int p = 0; p < 2; p++)
                    for (int mb = 0; mb < 2; mb++) {
                        const pj_eng_knobs kn = {.nw = nws[i],
                                                 .ks = kss[q],
                                                 .u = us[j],
                                                 .pipe = (uint8_t)p,
                                                 .minb = (uint8_t)mb,
                                                 .rb = 1,
                                                 .cl = 1};
                        n = add_cand(cs, n, d->fmt == PJ_FMT_SPLIT ? PJ_ENG_ROUTER : PJ_ENG_GEMV,
                                     &kn);
                    }
    return n;
}

/* The tiled split-K GEMM (splitk, or the router's form above m = 32) with
 * the cluster reduction (cl = 1), the L2 256-byte prefetch (pipe = 1), the
 * wgmma main loop (pipe = 2, 3; 4 with TMA; 7 warp-specialised with TMA)
 * or, on z12 layers, wgmma over the z12 tiles (pipe = 5, 6): tile shape,
 * K split (the cluster size with cl = 1). The plain form (cl = 0, pipe =
 * 0) is the full sweep's. */
static int add_tiled_cluster(const layer_def *d, cand *cs, int n)
{
    static const uint8_t kss[] = {1, 2, 4, 8, 16};
    const int dual = d->fmt == PJ_FMT_SPLIT;
    for (int t = 0; t < PJ_ENG_TGEMM_TILES; t++) /* the check refuses tiles 4, 5 for two */
        for (int q = 0; q < 5; q++)
            for (int v = 1; v < 16; v++) {
                const int cl = v & 1, pipe = v >> 1;
                if ((cl && kss[q] < 2) || ((pipe == 5 || pipe == 6) && d->fmt != PJ_FMT_Z12))
                    continue;
                const pj_eng_knobs kn = {
                    .ks = kss[q], .pipe = (uint8_t)(v >> 1), .tile = (uint8_t)t, .cl = (uint8_t)cl};
                n = add_cand(cs, n, dual ? PJ_ENG_ROUTER : PJ_ENG_SPLITK, &kn);
            }
    return n;
}

static int gen_candidates(int li, uint32_t m, cand *cs)
{
    int n = 0;
    const layer_def *d = &layer_defs[li];
    static const uint8_t nws[] = {4, 8, 16};
    pj_eng_knobs kn;
#define ADD(K) (n = add_cand(cs, n, (K), &kn))
    /* cuBLAS: the two baseline algorithms, then the candidates of the
     * cuBLASLt heuristic's list and its split-K forms (algo 2..49; the
     * checker drops those past the list's end). */
    for (int a = 0; a <= PJ_ENG_CUBLAS_MAX_ALGO; a++) {
        memset(&kn, 0, sizeof kn);
        kn.algo = (uint8_t)a;
        ADD(PJ_ENG_CUBLAS);
    }
    if (g_old) {
        /* OLD's entry at this m, else the one that serves it now (the
         * daemon's smallest m' >= m): a new m's entry must beat what runs
         * there already, which the short list need not hold (session 53:
         * unpooler m = 12 got a gemv slower than the m = 16 splitk it
         * replaced). */
        const pj_tune_entry *oe = old_entry(d, m);
        if (!oe)
            oe = pj_dispatch_choose(g_old, table_name(d), d->N, d->K, m);
        if (oe && oe->eng != PJ_ENG_CUBLAS) {
            kn = oe->knobs;
            ADD(oe->eng);
        }
    }
    if (g_old && !g_full_sweep) { /* --tune-new's short list */
        if (m > 32)
            return add_tiled_cluster(d, cs, n);
        if (m >= 16 && d->fmt != PJ_FMT_SPLIT) /* the router's m <= 32 form is the GEMV */
            n = add_tiled_cluster(d, cs, n);
        n = add_prefetch(d, m, cs, n);
        n = add_slab(d, m, cs, n);
        n = add_xreg(d, m, cs, n);
        n = add_cluster(d, cs, n);
        return n;
    }
    if (d->fmt != PJ_FMT_SPLIT && m <= 32) {
        static const uint8_t us[] = {1, 2, 4, 8};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 4; j++)
                for (int p = 0; p < 2; p++)
                    for (int mb = 0; mb < 2; mb++)
                        for (int ks = 1; ks <= 16; ks *= 2)
                            for (int rb = 1; rb <= (m > 8 ? 4 : 1); rb *= 2) {
                                memset(&kn, 0, sizeof kn);
                                kn.nw = nws[i];
                                kn.u = us[j];
                                kn.pipe = (uint8_t)p;
                                kn.minb = (uint8_t)mb;
                                kn.ks = (uint8_t)ks;
                                kn.rb = (uint8_t)rb;
                                ADD(PJ_ENG_GEMV);
                            }
    }
    if (d->fmt == PJ_FMT_Z12 && m <= 32) {
        static const uint8_t us[] = {1, 2, 4};
        for (int i = 0; i < 3; i++)
            for (int j = 0; j < 3; j++)
                for (int p = 0; p < 2; p++)
                    for (int xs = 0; xs < 2; xs++)
                        for (int r = 1; r <= 2; r *= 2)
                            for (int ks = 1; ks <= 8; ks *= 2)
                                for (int rb = 1; rb <= 2; rb++) {
                                    memset(&kn, 0, sizeof kn);
                                    kn.nw = nws[i];
                                    kn.u = us[j];
                                    kn.pipe = (uint8_t)p;
                                    kn.xs = (uint8_t)xs;
                                    kn.r = (uint8_t)r;
                                    kn.ks = (uint8_t)ks;
                                    kn.rb = (uint8_t)rb;
                                    ADD(PJ_ENG_GEMVZ);
                                }
    }
    if (d->fmt == PJ_FMT_SPLIT) {
        if (m <= 32) {
            static const uint8_t us[] = {1, 2, 4};
            for (int i = 0; i < 3; i++)
                for (int j = 0; j < 3; j++)
                    for (int p = 0; p < 2; p++)
                        for (int mb = 0; mb < 2; mb++)
                            for (int ks = 1; ks <= 64; ks *= 2) {
                                memset(&kn, 0, sizeof kn);
                                kn.nw = nws[i];
                                kn.u = us[j];
                                kn.pipe = (uint8_t)p;
                                kn.minb = (uint8_t)mb;
                                kn.ks = (uint8_t)ks;
                                ADD(PJ_ENG_ROUTER);
                            }
        } else {
            for (int t = 0; t < 4; t++)
                for (int ks = 1; ks <= 64; ks *= 2) {
                    memset(&kn, 0, sizeof kn);
                    kn.tile = (uint8_t)t;
                    kn.ks = (uint8_t)ks;
                    ADD(PJ_ENG_ROUTER);
                }
        }
    } else if (m > 32) {
        for (int t = 0; t < 6; t++)
            for (int ks = 1; ks <= 16; ks *= 2) {
                memset(&kn, 0, sizeof kn);
                kn.tile = (uint8_t)t;
                kn.ks = (uint8_t)ks;
                ADD(PJ_ENG_SPLITK);
            }
    }
#undef ADD
    if (m <= 32) {
        n = add_balanced(d, cs, n);
        n = add_prefetch(d, m, cs, n);
        n = add_slab(d, m, cs, n);
        n = add_xreg(d, m, cs, n);
        n = add_cluster(d, cs, n);
        if (m >= 16 && d->fmt != PJ_FMT_SPLIT)
            n = add_tiled_cluster(d, cs, n);
    } else {
        n = add_tiled_cluster(d, cs, n);
    }
    return n;
}

static int cand_cmp(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    return (x->us > y->us) - (x->us < y->us);
}

static void knobs_str(pj_eng_kind k, const pj_eng_knobs *kn, char *buf, size_t len)
{
    pj_eng_knobs_str(k, kn, buf, len);
}

/* Tune one shape; returns the entry to write. */
static void tune_shape(bench *b, int li, uint32_t m, int full, FILE *csv, pj_tune_entry *out)
{
    static cand cs[MAX_CAND];
    const layer_def *d = &layer_defs[li];
    int nc = gen_candidates(li, m, cs);
    if (!full) { /* out of budget: cuBLAS and each engine's defaults only */
        int keep = 0;
        for (int i = 0; i < nc; i++)
            if (cs[i].k == PJ_ENG_CUBLAS)
                cs[keep++] = cs[i];
        pj_eng_kind ks[] = {PJ_ENG_GEMVZ, PJ_ENG_GEMV, PJ_ENG_ROUTER, PJ_ENG_SPLITK};
        for (int i = 0; i < 4; i++) {
            cs[keep].k = ks[i];
            cs[keep].kn = pj_eng_default_knobs(ks[i], &b->layers[li].L, m);
            cs[keep].g = NULL;
            keep++;
        }
        nc = keep;
    }
    const int coarse = 12;
    float *tv = malloc(sizeof(float) * 64), *scr = malloc(sizeof(float) * 64);
    int nvalid = 0;
    char why[256], ks[96];
    for (int i = 0; i < nc; i++) {
        cand *c = &cs[i];
        c->us = INFINITY;
        if (!validate(b, li, m, c->k, &c->kn, why, sizeof why)) {
            knobs_str(c->k, &c->kn, ks, sizeof ks);
            if (strncmp(why, "K=", 2) != 0 && strstr(why, "no kernel") == NULL &&
                strstr(why, "spills") == NULL && strstr(why, "exceed") == NULL)
                fprintf(csv, "%s,%u,%s,\"%s\",invalid,\"%s\"\n", d->name, m, pj_eng_name(c->k), ks,
                        why);
            continue;
        }
        op_ctx o;
        memset(&o, 0, sizeof o);
        make_call(b, li, m, &o.call);
        o.k = c->k;
        o.kn = c->kn;
        c->g = capture(b, op_engine, &o);
        if (!c->g)
            continue;
        float *t[1] = {tv};
        time_graphs(b, &c->g, 1, coarse, t);
        c->us = pj_bo_median(tv, coarse, scr);
        nvalid++;
    }
    qsort(cs, (size_t)nc, sizeof *cs, cand_cmp);
    /* Finalists: the 6 fastest plus the best of every engine (its bf16 and
     * its z12 form apart), both baseline cuBLAS algorithms and the best
     * cuBLASLt candidate (algo >= 2), re-timed together (each primed by its own replay, so the
     * rotation's order does not matter). */
    int fin[16], nf = 0, lt_in = 0;
    for (int i = 0; i < nc && nf < 6; i++)
        if (cs[i].g)
            fin[nf++] = i;
    for (int e = 0; e < 2 * PJ_ENG_COUNT; e++)
        for (int i = 0; i < nc; i++) {
            if (!cs[i].g || cs[i].k != (pj_eng_kind)(e / 2) ||
                pj_eng_reads_z12(cs[i].k, &cs[i].kn) != e % 2)
                continue;
            if (cs[i].k == PJ_ENG_CUBLAS && cs[i].kn.algo >= 2 && lt_in++)
                continue;
            int have = 0;
            for (int j = 0; j < nf; j++)
                have |= fin[j] == i;
            if (!have && nf < 16)
                fin[nf++] = i;
            if (e / 2 != PJ_ENG_CUBLAS)
                break;
        }
    const int fine = 60;
    cudaGraphExec_t gs[16];
    float *tt[16];
    for (int j = 0; j < nf; j++) {
        gs[j] = cs[fin[j]].g;
        tt[j] = malloc(sizeof(float) * fine);
    }
    float *scr2 = malloc(sizeof(float) * fine);
    time_graphs(b, gs, nf, fine, tt);
    float best_cublas = INFINITY, best_plain = INFINITY, best_z = INFINITY;
    int i_cublas = -1, i_plain = -1, i_z = -1;
    for (int j = 0; j < nf; j++) {
        cand *c = &cs[fin[j]];
        c->us = pj_bo_median(tt[j], fine, scr2);
        if (c->k == PJ_ENG_CUBLAS && c->us < best_cublas) {
            best_cublas = c->us;
            i_cublas = fin[j];
        } else if (pj_eng_reads_z12(c->k, &c->kn)) {
            if (c->us < best_z) {
                best_z = c->us;
                i_z = fin[j];
            }
        } else if (c->k != PJ_ENG_CUBLAS && c->us < best_plain) {
            best_plain = c->us;
            i_plain = fin[j];
        }
        knobs_str(c->k, &c->kn, ks, sizeof ks);
        fprintf(csv, "%s,%u,%s,\"%s\",final,%.3f\n", d->name, m, pj_eng_name(c->k), ks, c->us);
    }
    for (int i = 0; i < nc; i++)
        if (isfinite(cs[i].us)) {
            knobs_str(cs[i].k, &cs[i].kn, ks, sizeof ks);
            fprintf(csv, "%s,%u,%s,\"%s\",coarse,%.3f\n", d->name, m, pj_eng_name(cs[i].k), ks,
                    cs[i].us);
        }
    /* The margins: a plain engine must beat cuBLAS by 3 %; a z12 one (gemvz,
     * splitk pipe = 5) must beat cuBLAS by 2 %, and the plain engine by 2 %
     * when that one made its margin. A plain engine that did not is taken
     * for cuBLAS's equal, and the z12 one, reading 25 % fewer bytes, leaves
     * more of the memory to whatever runs beside it. */
    int pick = i_cublas;
    float pick_us = best_cublas;
    if (i_plain >= 0 && best_plain < 0.97f * best_cublas) {
        pick = i_plain;
        pick_us = best_plain;
    }
    if (i_z >= 0 && best_z < 0.98f * pick_us && best_z < 0.98f * best_cublas) {
        pick = i_z;
        pick_us = best_z;
    }
    memset(out, 0, sizeof *out);
    snprintf(out->layer, sizeof out->layer, "%.*s", (int)sizeof out->layer - 1, table_name(d));
    out->n = d->N;
    out->k = d->K;
    out->rows = timed_rows(d);
    out->m = m;
    if (pick >= 0) {
        out->eng = cs[pick].k;
        out->knobs = cs[pick].kn;
    } else {
        out->eng = PJ_ENG_CUBLAS;
    }
    out->us = pick_us;
    out->base_us = best_cublas;
    knobs_str(out->eng, &out->knobs, ks, sizeof ks);
    printf("tune %-9s m=%-3u %4d candidates (%3d valid): %-7s %-40s %7.2f us  (cublas %.2f, plain "
           "%.2f, z12 %.2f)\n",
           d->name, m, nc, nvalid, pj_eng_name(out->eng), ks, pick_us, best_cublas, best_plain,
           best_z);
    fflush(stdout);
    for (int i = 0; i < nc; i++)
        if (cs[i].g)
            cudaGraphExecDestroy(cs[i].g);
    for (int j = 0; j < nf; j++)
        free(tt[j]);
    free(scr2);
    free(tv);
    free(scr);
}

/* The header of the tuner's logs (tune_log.csv, lt_vet.csv): tune_shape
 * and vet_served_m write their rows. */
#define TUNE_CSV_HEADER "layer,m,engine,knobs,phase,us_or_reason\n"

static void drop_entry(pj_tune_table *t, const pj_tune_entry *e)
{
    size_t i = (size_t)(e - t->e);
    memmove(&t->e[i], &t->e[i + 1], (t->n - i - 1) * sizeof t->e[0]);
    t->n--;
}

/* A file of --out, made anew: never through a symbolic link (a link
 * another user left in the folder could name a file of root's). */
static FILE *out_file(const bench *b, const char *name)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", b->o.out, name);
    /* In the folder checked at the start, whatever its path names now. */
    int fd = openat(b->o.out_fd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f)
        die("%s: %s", path, strerror(errno));
    return f;
}

/* Closes a log out_file opened, saying when a write to it failed (a full
 * disk): the log is a record of the run, not its result, so the run goes
 * on, but a cut log must not pass for a whole one. */
static void out_close(const bench *b, FILE *f, const char *name)
{
    errno = 0;
    int bad = fflush(f) != 0 || ferror(f);
    int e = errno ? errno : EIO;
    if (fclose(f) != 0 && !bad) {
        bad = 1;
        e = errno;
    }
    if (bad)
        fprintf(stderr, "projd-bench: warning: %s/%s is incomplete: %s\n", b->o.out, name,
                strerror(e));
}

/* The daemon serves every m from 1 to max_m, each with the entry of the
 * smallest m' >= m (else the largest; pj_dispatch_choose): an entry tuned
 * and validated at m' = 32 also runs m = 17..31, which the sweep never
 * tried. Here every m is run on the engine and knobs that would serve it
 * and checked like a candidate (against the device reference, poisoned
 * output, deterministic, one-hot exact for gemvz); an m the entry's engine
 * refuses goes down the daemon's ladder, not to the entry, and is skipped.
 * An entry that is wrong at any m it would serve is dropped (its own m then
 * goes to a neighbour or down the ladder), and its layer is checked again,
 * as the dropped entry's m now have another entry. Returns the entries
 * dropped. */
/* Test hook: PJ_BENCH_VET_BREAK=LAYER:M makes the tuner's check of that
 * served m count as wrong, so the drop can be seen without a wrong engine.
 * Read (and a malformed value refused) before any GPU work, as the options
 * are; layer "" when unset. */
static void vet_break(char layer[PJ_TUNE_NAME], unsigned *m)
{
    layer[0] = 0;
    *m = 0;
    const char *brk = getenv("PJ_BENCH_VET_BREAK");
    char tail;
    if (brk && (sscanf(brk, "%63[^:]:%u%c", layer, m, &tail) != 2 || !*m))
        die("PJ_BENCH_VET_BREAK: want LAYER:M with M >= 1, got \"%s\"", brk);
}

static int vet_served_m(bench *b, pj_tune_table *t, FILE *csv)
{
    int dropped = 0;
    double t0 = now_s();
    char brk_layer[PJ_TUNE_NAME];
    unsigned brk_m;
    vet_break(brk_layer, &brk_m);
    unsigned ran = 0, refused = 0;
    for (int li = 0; li < g_nl; li++) {
        const pj_eng_layer *L = &b->layers[li].L;
        int again = 0;
        for (uint32_t m = 1; m <= g_max_m && !again; m++) {
            /* None for this m (a router layer's entries are all of the
             * other form): the ladder serves it, and a later m may still
             * have one. */
            const pj_tune_entry *e = pj_dispatch_choose(t, pj_eng_table_name(L), L->N, L->K, m);
            if (!e)
                continue;
            char why[200] = "";
            pj_eng_call call;
            make_call(b, li, m, &call);
            const pj_eng_knobs ek = pj_tune_entry_knobs(e, m); /* what serves m */
            if (pj_eng_can_run(e->eng, &ek, &call, &b->c.lim, why, sizeof why)) {
                refused++;
                continue;
            }
            ran++;
            int broken = brk_m == m && !strcmp(brk_layer, L->name);
            if (broken)
                snprintf(why, sizeof why, "PJ_BENCH_VET_BREAK");
            if (!broken && validate(b, li, m, e->eng, &ek, why, sizeof why))
                continue;
            char kn[128];
            pj_eng_knobs_str(e->eng, &ek, kn, sizeof kn);
            fprintf(csv, "%s,%u,%s,\"%s\",served-m-wrong,\"at m=%u: %s\"\n", e->layer, e->m,
                    pj_eng_name(e->eng), kn, m, why);
            fprintf(stderr,
                    "tuner: entry %s m=%u %s(%s) is wrong at m=%u, which it would serve: %s; "
                    "dropped\n",
                    e->layer, e->m, pj_eng_name(e->eng), kn, m, why);
            drop_entry(t, e);
            dropped++;
            again = 1;
        }
        /* A dropped entry hands its m to another entry (or to the ladder),
         * of every layer that shares it (tuned_as, the same table name and
         * shape), those checked before this one included: they are checked
         * again from the first of them (entry_owner). */
        if (again)
            li = entry_owner(li) - 1;
    }
    printf("tuner: every m in 1..%u run on the entry that serves it: %u checks, %u left to the "
           "ladder (the entry's engine refuses them)%s, %d entries dropped (%.1f s)\n",
           g_max_m, ran, refused, dropped ? ", the layers after a drop counted again" : "", dropped,
           now_s() - t0);
    return dropped;
}

/* A table holds PJ_TUNE_MAX entries: a run that would need more is refused
 * before it tunes anything, not at the entry past the last, hours in, with
 * nothing saved. carried: entries already in the table (--tune-new's old
 * ones); a tuned shape that replaces one of them takes no room, and
 * --tune-new tunes only the m in lo..hi. */
static void check_table_room(uint32_t carried, unsigned lo, unsigned hi)
{
    uint32_t need = carried;
    for (int mi = 0; mi < g_nm; mi++)
        for (int li = 0; li < g_nl; li++)
            need += entry_owner(li) == li && ms[mi] >= lo && ms[mi] <= hi &&
                    !old_entry(&layer_defs[li], ms[mi]);
    if (need > PJ_TUNE_MAX)
        die("--tune: the table would need %u entries (%d m for each layer with entries of its "
            "own%s), over the %d one holds; tune fewer shapes.m, or give layers of one shape "
            "tuned_as",
            need, g_nm, carried ? ", and the old table's" : "", PJ_TUNE_MAX);
}

static void tune_all(bench *b, pj_tune_table *t)
{
    memset(t, 0, sizeof *t);
    snprintf(t->device, sizeof t->device, "%s", b->c.lim.name);
    t->sm_count = b->c.lim.sm_count;
    t->cc_major = b->c.lim.cc_major;
    t->cc_minor = b->c.lim.cc_minor;
    /* --tune-new keeps what it does not re-tune: OLD's entries of other
     * layers, shapes or m are carried into NEW as they are (the loop below
     * replaces the entries of the shapes it tunes). */
    for (uint32_t i = 0; g_old && i < g_old->n; i++)
        if (pj_tune_put(t, &g_old->e[i]))
            die("tuning table full");
    check_table_room(t->n, g_old ? b->o.tune_m_lo : 1, g_old ? b->o.tune_m_hi : UINT32_MAX);
    FILE *csv = out_file(b, "tune_log.csv");
    fprintf(csv, TUNE_CSV_HEADER);
    double t0 = now_s();
    /* The decode shapes first (ms ascends): that is where the knobs
     * matter, and the budget runs out at the large m. */
    for (int mi = 0; mi < g_nm; mi++)
        for (int li = 0; li < g_nl; li++) {
            uint32_t m = ms[mi];
            if (entry_owner(li) != li)
                continue; /* its entry is tuned with the layer that owns it */
            int full = now_s() - t0 < b->o.tune_budget;
            pj_tune_entry e;
            const pj_tune_entry *oe = old_entry(&layer_defs[li], m);
            if (g_old && (m < b->o.tune_m_lo || m > b->o.tune_m_hi || !full)) {
                if (oe && pj_tune_put(t, oe))
                    die("tuning table full");
                continue;
            }
            tune_shape(b, li, m, full, csv, &e);
            if (pj_tune_put(t, &e))
                die("tuning table full");
        }
    vet_served_m(b, t, csv);
    out_close(b, csv, "tune_log.csv");
    printf("tuner: %.1f s\n", now_s() - t0);
}

/* ---- the benchmark --------------------------------------------------------------- */

/* Ours checked once more after its timed replays, on a poisoned y, by one
 * more replay of its graph: validation ran the engine outside a graph, and
 * an engine wrong only when replayed many times (state a replay leaves for
 * the next, a split-K counter not reset) would otherwise be timed and
 * scored. The baseline shares y, so the check runs ours on its own. */
static void check_after_replays(bench *b, cudaGraphExec_t g_ours, const op_ctx *o, pj_bo_shape *r)
{
    pj_bk_cmp cmp;
    const pj_eng_call *c = &o->call;
    r->after_ok = 0;
    if (pj_bk_poison(b->c.s, c->y, c->ldy, c->m, c->n) ||
        cudaGraphLaunch(g_ours, b->c.s) != cudaSuccess ||
        cudaStreamSynchronize(b->c.s) != cudaSuccess ||
        pj_bk_compare(b->c.s, c->y, c->ldy, c->m, c->n, b->c.dref, b->c.dsabs, b->c.dcmp, &cmp)) {
        const cudaError_t ce = cudaGetLastError();
        snprintf(r->after_why, sizeof r->after_why,
                 "the poison, the replay or the compare failed%s%s", ce != cudaSuccess ? ": " : "",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "");
    } else if (cmp.bad || cmp.unwritten) {
        snprintf(r->after_why, sizeof r->after_why,
                 "%llu outputs outside the bound, %llu unwritten after %d timed rounds", cmp.bad,
                 cmp.unwritten, b->o.reps);
    } else {
        r->after_ok = 1;
    }
    if (!r->after_ok)
        fprintf(stderr, "bench: %s m=%u %s: WRONG after its timed replays: %s\n", r->layer, r->m,
                r->engine, r->after_why);
}

/* Every shape timed against its baseline: res[mi * g_nl + li]; the samples
 * each holds (tb, to) are the caller's to free. */
static void bench_all(bench *b, const pj_tune_table *t, pj_bo_shape *res)
{
    const int reps = b->o.reps;
    float *scr = malloc(sizeof(float) * (size_t)(reps > 200 ? reps : 200));
    float *t100 = malloc(sizeof(float) * 3 * 100);
    if (!scr || !t100)
        die("out of host memory");
    for (int si = 0; si < g_nl * g_nm; si++) {
        pj_bo_shape *r = &res[si];
        const int li = si % g_nl;
        const uint32_t m = ms[si / g_nl];
        const layer_def *d = &layer_defs[li];
        memset(r, 0, sizeof *r);
        snprintf(r->layer, sizeof r->layer, "%s", d->name);
        r->m = m;
        r->n = d->n;
        r->k = d->K;
        op_ctx o, ob;
        memset(&o, 0, sizeof o);
        make_call(b, li, m, &o.call);
        int step = pj_eng_choose(t, NULL, NULL, &o.call, &b->c.lim, &o.k, &o.kn);
        if (step < 0)
            die("%s m=%u: no engine can run", d->name, m);
        r->step = step;
        snprintf(r->chosen, sizeof r->chosen, "%s", pj_eng_name(o.k));
        char why[200];
        r->valid = validate(b, li, m, o.k, &o.kn, why, sizeof why);
        if (!r->valid) {
            snprintf(r->why, sizeof r->why, "%s", why);
            fprintf(stderr, "bench: %s m=%u %s failed validation (%s): falling back to cuBLAS\n",
                    d->name, m, pj_eng_name(o.k), why);
            o.k = PJ_ENG_CUBLAS;
            o.kn = pj_eng_default_knobs(PJ_ENG_CUBLAS, &b->layers[li].L, m);
            r->step = 3; /* what ran is the ladder's last step, as in the daemon */
            if (!validate(b, li, m, o.k, &o.kn, why, sizeof why))
                die("%s m=%u: cuBLAS fails validation too: %s", d->name, m, why);
        }
        snprintf(r->engine, sizeof r->engine, "%s", pj_eng_name(o.k));
        pj_eng_knobs_str(o.k, &o.kn, r->knobs, sizeof r->knobs);
        {
            pj_chk_result cr;
            prepare(b, li, m);
            if (!pj_chk_run(&b->c, &b->ws[li], o.k, &o.kn, &cr) && cr.cmp.ref2 > 0)
                r->rel_err = sqrt(cr.cmp.err2 / cr.cmp.ref2);
        }
        cudaGraphExec_t g_ours = capture(b, op_engine, &o);
        if (!g_ours)
            die("%s m=%u: cannot capture %s", d->name, m, r->engine);
        /* Baseline: both cuBLAS paths, the faster one is SGLang's. */
        cudaGraphExec_t g_b[2];
        for (int a = 0; a < 2; a++) {
            ob = o;
            ob.base_algo = a;
            if (pj_eng_baseline(a, &ob.call, b->tmp, b->c.es)) /* warm: Lt plan, handles */
                die("%s m=%u: the baseline (%s) fails", d->name, m,
                    a ? "cublasLt" : "cublasGemmEx");
            CK(cudaStreamSynchronize(b->c.s));
            g_b[a] = capture(b, op_baseline, &ob);
            if (!g_b[a])
                die("%s m=%u: cannot capture the baseline", d->name, m);
        }
        {
            float *t2[2] = {t100, t100 + 100};
            time_graphs(b, g_b, 2, 100, t2);
            r->gemmex_us = pj_bo_median(t2[0], 100, scr);
            r->lt_us = pj_bo_median(t2[1], 100, scr);
        }
        r->lt_plan = pj_eng_baseline_has_lt(&o.call, b->c.es);
        /* Without a plan both columns timed cublasGemmEx: named so. */
        r->base_lt = r->lt_plan && r->lt_us < r->gemmex_us;
        cudaGraphExec_t pair[2] = {g_b[r->base_lt], g_ours};
        float *tb = malloc(sizeof(float) * (size_t)reps),
              *to = malloc(sizeof(float) * (size_t)reps);
        if (!tb || !to)
            die("out of host memory");
        float *tp[2] = {tb, to};
        time_graphs(b, pair, 2, reps, tp);
        r->tb = tb;
        r->to = to;
        r->base_us = pj_bo_median(tb, reps, scr);
        r->ours_us = pj_bo_median(to, reps, scr);
        check_after_replays(b, g_ours, &o, r);
        /* Read floor: the bytes this engine reads, read by the read kernel. */
        r->bytes = pj_eng_bytes_read(o.k, &o.kn, &o.call);
        float best = INFINITY;
        for (int v = 0; v < PJ_BK_READ_VARIANTS; v++) {
            op_ctx orr;
            memset(&orr, 0, sizeof orr);
            orr.read_bytes = r->bytes < b->readbuf_bytes ? r->bytes : b->readbuf_bytes;
            orr.read_variant = v;
            cudaGraphExec_t gr = capture(b, op_read, &orr);
            if (!gr)
                die("%s m=%u: cannot capture the read floor's variant %d (%zu bytes)", d->name, m,
                    v, orr.read_bytes);
            float *tr[1] = {t100 + 200};
            time_graphs(b, &gr, 1, 100, tr);
            float md = pj_bo_median(tr[0], 100, scr);
            r->floor_var[v] = md;
            if (md < best)
                best = md;
            cudaGraphExecDestroy(gr);
        }
        r->floor_us = best;
        printf("bench %-9s m=%-3u %-7s %-34s base %7.2f (%s)  ours %7.2f  x%.3f  floor %6.2f "
               "(%.2f)\n",
               d->name, m, r->engine, r->knobs, r->base_us, r->base_lt ? "lt" : "gemmex",
               r->ours_us, r->base_us / r->ours_us, r->floor_us, r->ours_us / r->floor_us);
        fflush(stdout);
        cudaGraphExecDestroy(g_ours);
        cudaGraphExecDestroy(g_b[0]);
        cudaGraphExecDestroy(g_b[1]);
    }
    free(scr);
    free(t100);
}

/* The run's description for its files: device, versions, options. */
static void describe_run(const bench *b, const char *config, int carveout, pj_bo_run *run)
{
    memset(run, 0, sizeof *run);
    snprintf(run->device, sizeof run->device, "%s", b->c.lim.name);
    run->sm_count = b->c.lim.sm_count;
    time_t now = time(NULL);
    strftime(run->date, sizeof run->date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
    run->commit = b->o.commit;
    run->table = b->o.table;
    run->config = config;
    cudaDriverGetVersion(&run->cuda_driver);
    cudaRuntimeGetVersion(&run->cuda_runtime);
    run->cublas_version = pj_eng_cublas_version();
    run->reps = b->o.reps;
    run->seed = b->o.seed;
    run->primed = b->prime;
    run->flush_kind = b->flush_kind;
    run->flush_carveout = carveout;
    run->ingraph = b->ingraph;
    run->nl = g_nl;
    run->nm = g_nm;
    for (int mi = 0; mi < g_nm; mi++)
        run->m[mi] = ms[mi];
    run->own_model = g_model != NULL;
}

/* ---- survey: every engine's defaults per shape (untuned) ------------------------------- */

static void survey(bench *b)
{
    printf("\nsurvey: each engine with default knobs (validated, median of 60 cold replays)\n");
    float *tv = malloc(sizeof(float) * 60), *scr = malloc(sizeof(float) * 60);
    for (int si = 0; si < g_nl * g_nm; si++) {
        const int li = si % g_nl;
        const uint32_t m = ms[si / g_nl];
        printf("  %-9s m=%-3u", layer_defs[li].name, m);
        for (int e = 0; e < PJ_ENG_COUNT; e++) {
            op_ctx o;
            memset(&o, 0, sizeof o);
            make_call(b, li, m, &o.call);
            o.k = (pj_eng_kind)e;
            o.kn = pj_eng_default_knobs(o.k, &b->layers[li].L, m);
            char why[256];
            if (!validate(b, li, m, o.k, &o.kn, why, sizeof why)) {
                if (!strstr(why, "m=") && !strstr(why, "no hi/lo") && !strstr(why, "no bf16") &&
                    !strstr(why, "has no"))
                    printf("  %s: INVALID(%s)", pj_eng_name(o.k), why);
                continue;
            }
            cudaGraphExec_t g = capture(b, op_engine, &o);
            if (!g)
                continue;
            float *t[1] = {tv};
            time_graphs(b, &g, 1, 60, t);
            printf("  %s %.2f", pj_eng_name(o.k), pj_bo_median(tv, 60, scr));
            cudaGraphExecDestroy(g);
        }
        printf("\n");
        fflush(stdout);
    }
    free(tv);
    free(scr);
}

/* ---- --lt-survey: cuBLASLt's configuration space (round 38) -------------------- */

typedef struct lt_op {
    pj_eng_call call;
    pj_lt_cfg cfg;
} lt_op;

static int op_lt(bench *b, void *ctx)
{
    lt_op *o = ctx;
    return pj_eng_lt_run(b->c.es, &o->call, &o->cfg);
}

static void lt_cfg_str(const pj_lt_cfg *c, char *buf, size_t len)
{
    /* As cublas knobs (dispatch.h): a line of --probe or a table entry. */
    snprintf(buf, len, "lt=1,lid=%d,ltile=%u,lst=%u,lsk=%u,lcu=%u,lcl=%u,lsw=%u", c->id, c->tile,
             c->stages, c->sk, c->custom, c->cluster, c->swz);
}

#define LT_MAX_CFG  12000
#define LT_FINAL    6
#define LT_COARSE   8
#define LT_FINAL_RP 100

typedef struct lt_timed {
    int i;
    float us;
} lt_timed;

static int lt_timed_cmp(const void *a, const void *b)
{
    const lt_timed *x = a, *y = b;
    return (x->us > y->us) - (x->us < y->us);
}

/* Every configuration cuBLASLt accepts for each single-matrix layer at
 * each benchmark m in lo..hi: timed coarsely (LT_COARSE cold replays), the
 * best LT_FINAL validated against the reference and re-timed beside the
 * two baseline algorithms and t's entry for the shape, if t is given
 * (LT_FINAL_RP paired replays). Writes lt_survey.csv (every configuration)
 * into the results directory and prints a line per shape: whether
 * anything in the space beats what the baseline, the heuristic's list and
 * the table reach. With t, a configuration that beats the table's entry
 * (or the baseline, where t has none) by the tuner's 3 % margin for plain
 * engines replaces it in t. Returns how many entries it replaced. */
static int lt_survey(bench *b, unsigned lo, unsigned hi, double budget_s, pj_tune_table *t)
{
    int replaced = 0;
    char cs[160];
    FILE *csv = out_file(b, "lt_survey.csv");
    fprintf(csv, "layer,m,idx,heuristic,cfg,ws_bytes,coarse_us\n");
    pj_lt_cfg *cfg = malloc(sizeof *cfg * LT_MAX_CFG);
    lt_timed *tt = malloc(sizeof *tt * LT_MAX_CFG);
    float *tv[3 + LT_FINAL], *scr = malloc(sizeof(float) * LT_FINAL_RP);
    for (int j = 0; j < 3 + LT_FINAL; j++)
        tv[j] = malloc(sizeof(float) * LT_FINAL_RP);
    if (!cfg || !tt || !scr)
        die("out of memory");
    printf("\nlt-survey: cuBLASLt configurations per shape, m = %u..%u (%.0f s of checks each)\n",
           lo, hi, budget_s);
    printf("%-9s %4s %6s %6s %5s | %8s %8s %8s | %8s %8s %6s  %s\n", "layer", "m", "asked", "valid",
           "heur", "gemmex", "lt#1", "table", "heurbest", "best", "ratio", "best configuration");
    for (int mi = 0; mi < g_nm; mi++) {
        const uint32_t m = ms[mi];
        if (m < lo || m > hi)
            continue;
        for (int li = 0; li < g_nl; li++) {
            if (layer_defs[li].fmt == PJ_FMT_SPLIT || entry_owner(li) != li)
                continue;
            const double ts = now_s();
            lt_op o;
            memset(&o, 0, sizeof o);
            make_call(b, li, m, &o.call);
            int nheur = 0;
            long asked = 0;
            const int n =
                pj_eng_lt_space(b->c.es, &o.call, cfg, LT_MAX_CFG, &nheur, &asked, budget_s);
            if (n <= 0) {
                printf("%-9s %4u: no configurations (%d)\n", layer_defs[li].name, m, n);
                continue;
            }
            const double te = now_s();
            int nt = 0;
            float *t1[1] = {tv[0]};
            for (int i = 0; i < n; i++) {
                o.cfg = cfg[i];
                cudaGraphExec_t g = capture(b, op_lt, &o);
                float us = INFINITY;
                if (g) {
                    time_graphs(b, &g, 1, LT_COARSE, t1);
                    us = pj_bo_median(tv[0], LT_COARSE, scr);
                    cudaGraphExecDestroy(g);
                } else
                    cudaGetLastError();
                lt_cfg_str(&cfg[i], cs, sizeof cs);
                fprintf(csv, "%s,%u,%d,%d,\"%s\",%llu,%.3f\n", layer_defs[li].name, m, i, i < nheur,
                        cs, (unsigned long long)cfg[i].ws, (double)us);
                if (isfinite(us))
                    tt[nt++] = (lt_timed){i, us};
            }
            fflush(csv);
            qsort(tt, (size_t)nt, sizeof *tt, lt_timed_cmp);
            /* Finalists: the coarse best that match the reference, plus the
             * best of the heuristic's own list (if not among them). */
            int fin[LT_FINAL], nf = 0, heur_in = 0;
            prepare(b, li, m);
            for (int r = 0; r < nt && nf < LT_FINAL; r++) {
                const int i = tt[r].i;
                const int last_slot = nf == LT_FINAL - 1;
                if (last_slot && !heur_in && i >= nheur)
                    continue; /* keep the last slot for the heuristic's best */
                o.cfg = cfg[i];
                pj_bk_cmp cmp;
                if (pj_bk_poison(b->c.s, b->c.dy, layer_defs[li].n, m, layer_defs[li].n) ||
                    op_lt(b, &o) ||
                    pj_bk_compare(b->c.s, b->c.dy, layer_defs[li].n, m, layer_defs[li].n, b->c.dref,
                                  b->c.dsabs, b->c.dcmp, &cmp) ||
                    cmp.bad || cmp.unwritten) {
                    cudaGetLastError();
                    lt_cfg_str(&cfg[i], cs, sizeof cs);
                    printf("  %s m=%u: %s does not match the reference: skipped\n",
                           layer_defs[li].name, m, cs);
                    continue;
                }
                heur_in |= i < nheur;
                fin[nf++] = i;
            }
            cudaGraphExec_t g[3 + LT_FINAL];
            op_ctx ob[2];
            for (int a = 0; a < 2; a++) {
                memset(&ob[a], 0, sizeof ob[a]);
                ob[a].call = o.call;
                ob[a].base_algo = a;
                g[a] = capture(b, op_baseline, &ob[a]);
                if (!g[a])
                    die("lt-survey: baseline %d of %s m=%u did not capture", a, layer_defs[li].name,
                        m);
            }
            lt_op fo[LT_FINAL];
            for (int j = 0; j < nf; j++) {
                fo[j] = o;
                fo[j].cfg = cfg[fin[j]];
                g[2 + j] = capture(b, op_lt, &fo[j]);
                if (!g[2 + j])
                    die("lt-survey: a finalist of %s m=%u did not capture again",
                        layer_defs[li].name, m);
            }
            /* The table's own entry for this very m, last. */
            const pj_tune_entry *te_ = t ? pj_dispatch_choose(t, table_name(&layer_defs[li]),
                                                              layer_defs[li].N, layer_defs[li].K, m)
                                         : NULL;
            op_ctx oe;
            int ng = 2 + nf;
            char why[256];
            if (te_ && te_->m == m) {
                memset(&oe, 0, sizeof oe);
                oe.call = o.call;
                oe.k = te_->eng;
                oe.kn = te_->knobs;
                if (!validate(b, li, m, oe.k, &oe.kn, why, sizeof why))
                    printf("  %s m=%u: the table's entry is refused (%s)\n", layer_defs[li].name, m,
                           why);
                else if ((g[ng] = capture(b, op_engine, &oe)) != NULL)
                    ng++;
            }
            time_graphs(b, g, ng, LT_FINAL_RP, tv);
            float med[3 + LT_FINAL];
            for (int j = 0; j < ng; j++) {
                med[j] = pj_bo_median(tv[j], LT_FINAL_RP, scr);
                cudaGraphExecDestroy(g[j]);
            }
            const float base = med[0] < med[1] ? med[0] : med[1];
            int best = -1, hbest = -1;
            for (int j = 0; j < nf; j++) {
                if (best < 0 || med[2 + j] < med[2 + best])
                    best = j;
                if (fin[j] < nheur && (hbest < 0 || med[2 + j] < med[2 + hbest]))
                    hbest = j;
            }
            cs[0] = 0;
            if (best >= 0)
                lt_cfg_str(&cfg[fin[best]], cs, sizeof cs);
            const float table_us = ng > 2 + nf ? med[2 + nf] : NAN;
            printf("%-9s %4u %6ld %6d %5d | %8.2f %8.2f %8.2f | %8.2f %8.2f %6.3f  %s%s  (%.0f s + "
                   "%.0f s)\n",
                   layer_defs[li].name, m, asked, n, nheur, (double)med[0], (double)med[1],
                   (double)table_us, hbest >= 0 ? (double)med[2 + hbest] : NAN,
                   best >= 0 ? (double)med[2 + best] : NAN,
                   best >= 0 ? (double)(base / med[2 + best]) : NAN, cs,
                   best >= 0 && fin[best] < nheur ? " (heuristic's)" : "", te - ts, now_s() - te);
            /* What the best configuration has to beat: the table's entry,
             * else the baseline, by the tuner's margin for plain engines. */
            const float rival = isfinite(table_us) ? table_us : base;
            if (t && best >= 0 && med[2 + best] < 0.97f * rival) {
                pj_tune_entry e;
                memset(&e, 0, sizeof e);
                snprintf(e.layer, sizeof e.layer, "%.*s", (int)sizeof e.layer - 1,
                         table_name(&layer_defs[li]));
                e.n = layer_defs[li].N;
                e.k = layer_defs[li].K;
                e.rows = timed_rows(&layer_defs[li]);
                e.m = m;
                e.eng = PJ_ENG_CUBLAS;
                e.knobs = pj_eng_lt_knobs(&cfg[fin[best]]);
                /* The other m the entry serves keep the algo they had. */
                if (te_ && te_->m == m && te_->eng == PJ_ENG_CUBLAS)
                    e.knobs.algo = te_->knobs.algo;
                e.us = med[2 + best];
                e.base_us = base;
                if (pj_tune_put(t, &e) == 0) {
                    replaced++;
                    printf("  -> the table's %s m=%u entry: cublas %s (%.2f against %.2f us)\n",
                           e.layer, m, cs, (double)e.us, (double)rival);
                }
            }
            fflush(stdout);
        }
    }
    out_close(b, csv, "lt_survey.csv");
    for (int j = 0; j < 3 + LT_FINAL; j++)
        free(tv[j]);
    free(scr);
    free(tt);
    free(cfg);
    return replaced;
}

/* ---- main -------------------------------------------------------------------------- */

/* The op of one "layer m engine [knobs]" request (--one, --probe, --touch): its
 * layer's index, or -1 with why in err (unknown layer or engine, m outside
 * 1..256, knobs that do not parse). Not validated. */
static int op_parse(bench *b, const char *layer, uint32_t m, const char *eng, const char *knobs,
                    op_ctx *o, char *err, size_t errlen)
{
    int li = -1;
    for (int i = 0; i < g_nl; i++)
        if (!strcmp(layer_defs[i].name, layer))
            li = i;
    const int e = pj_eng_from_name(eng);
    if (li < 0 || e < 0 || m < 1 || m > g_max_m) {
        if (li < 0)
            snprintf(err, errlen, "no layer \"%s\" in the model", layer);
        else if (e < 0)
            snprintf(err, errlen, "no engine \"%s\" (gemv, gemvz, splitk, router, cublas)", eng);
        else
            snprintf(err, errlen, "m = %u outside 1..%u (shapes.max_m)", m, g_max_m);
        return -1;
    }
    memset(o, 0, sizeof *o);
    make_call(b, li, m, &o->call);
    o->k = (pj_eng_kind)e;
    o->kn = pj_eng_default_knobs(o->k, &b->layers[li].L, m);
    if (knobs && knobs[0] && pj_eng_knobs_parse(knobs, e, &o->kn, err, errlen))
        return -1;
    return li;
}

/* --one: launch one engine on one shape, plainly (flush, launch, sync),
 * for a profiler to attach to (ncu -k regex:...). */
/* An op named by words (--one, or a line of --probe, --touch or --pair):
 * its layer, m, engine and knobs, checked before any device work (the
 * knobs against the engine's grammar; against the layer and the device
 * when it runs). where prefixes the message ("--one", "--probe FILE:LINE");
 * a wrong one ends the run. */
static void check_op_words(const char *where, const char *layer, uint32_t m, const char *eng,
                           const char *knobs)
{
    int li = -1;
    for (int i = 0; i < g_nl; i++)
        if (!strcmp(layer_defs[i].name, layer))
            li = i;
    if (li < 0) {
        fprintf(stderr, "projd-bench: %s: no layer \"%s\" in the model (its layers:", where, layer);
        for (int i = 0; i < g_nl; i++)
            fprintf(stderr, "%s %s", i ? "," : "", layer_defs[i].name);
        fprintf(stderr, ")\n");
        exit(1);
    }
    if (m < 1 || m > g_max_m)
        die("%s: m = %u is outside 1..%u (shapes.max_m)", where, m, g_max_m);
    const int e = pj_eng_from_name(eng);
    if (e < 0)
        die("%s: no engine \"%s\" (gemv, gemvz, splitk, router, cublas)", where, eng);
    pj_eng_knobs kn;
    memset(&kn, 0, sizeof kn);
    char err[512];
    if (knobs[0] && pj_eng_knobs_parse(knobs, e, &kn, err, sizeof err))
        die("%s: knobs \"%s\": %s", where, knobs, err);
}

/* The line buffer of the op files: the pre-check and the runs read them
 * alike, so a line is the same words to both. */
#define OP_LINE_MAX 1024

/* One "layer m engine [knobs]" line of a probe file (--probe, --touch). */
typedef struct probe_line {
    char layer[64], eng[32], knobs[256];
    unsigned m;
} probe_line;

/* One "layer m n1 engA knobsA engB knobsB" line of a --pair file. */
typedef struct pair_line {
    char layer[64], ea[32], ka[256], eb[32], kb[256];
    unsigned m, n1;
} pair_line;

/* 1 when line is one of the file's ops; 0 for one the runs skip (a
 * comment, too few words). */
static int probe_line_parse(const char *line, probe_line *pl)
{
    pl->knobs[0] = 0;
    return line[0] != '#' &&
           sscanf(line, "%63s %u %31s %255s", pl->layer, &pl->m, pl->eng, pl->knobs) >= 3;
}

static int pair_line_parse(const char *line, pair_line *pl)
{
    return line[0] != '#' && sscanf(line, "%63s %u %u %31s %255s %31s %255s", pl->layer, &pl->m,
                                    &pl->n1, pl->ea, pl->ka, pl->eb, pl->kb) == 7;
}

/* Every line of a --probe / --touch file or a --pair file, checked as
 * above before the device: a typo on line 40 used to end the run after the
 * set-up and 39 lines of timings. Lines the runs skip are skipped here too
 * (the same parsers). */
static void check_op_file(const char *opt, const char *path, int pair)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("%s %s: %s", opt, path, strerror(errno));
    char line[OP_LINE_MAX], where[4200];
    for (int ln = 1; fgets(line, sizeof line, f); ln++) {
        snprintf(where, sizeof where, "%s %s:%d", opt, path, ln);
        probe_line pl;
        pair_line pp;
        if (!pair && probe_line_parse(line, &pl)) {
            check_op_words(where, pl.layer, pl.m, pl.eng, pl.knobs);
        } else if (pair && pair_line_parse(line, &pp)) {
            check_op_words(where, pp.layer, pp.m, pp.ea, pp.ka);
            check_op_words(where, pp.layer, pp.m, pp.eb, pp.kb);
        }
    }
    fclose(f);
}

static void run_one(bench *b, const char *layer, uint32_t m, const char *eng, const char *knobs)
{
    op_ctx o;
    char err[256];
    const int li = op_parse(b, layer, m, eng, knobs, &o, err, sizeof err);
    if (li < 0)
        die("--one: %s", err);
    if (!validate(b, li, m, o.k, &o.kn, err, sizeof err))
        die("--one: %s m=%u %s(%s) refused: %s", layer, m, eng, knobs ? knobs : "", err);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float best = INFINITY;
    for (int r = 0; r < 12; r++) {
        op_flush(b, NULL);
        CK(cudaEventRecord(e0, b->c.s));
        if (pj_eng_launch(o.k, &o.kn, &o.call, b->c.es))
            die("--one: launch failed");
        CK(cudaEventRecord(e1, b->c.s));
        CK(cudaStreamSynchronize(b->c.s));
        float ms_ = 0;
        CK(cudaEventElapsedTime(&ms_, e0, e1));
        if (ms_ * 1000.f < best)
            best = ms_ * 1000.f;
    }
    printf("one %s m=%u %s: best of 12 plain launches %.2f us (event-timed, no graph)\n", layer, m,
           eng, best);
    if (getenv("PJ_GEMVS_TRACE"))
        (void)pj_gemvs_trace_dump(); /* prints only in a trace build */
}

/* --probe FILE: how much an op's time depends on what ran before it.
 * Each line of FILE is "layer m engine knobs"; the op (ours) and the
 * GemmEx baseline are timed, 100 replays each way, alone (after its own
 * previous replay), alternating with each other (the benchmark's pairs)
 * and alternating with three decoys: one more 256 MB read, the same read
 * by a kernel holding 200 KB of shared memory per CTA, and a kernel of
 * ~500 KB of code that evicts the SMs' instruction caches. With round 16's
 * flush (--flush-kind 0), unprimed, an op beside the other side's kernel
 * read up to 30 % slower or faster than alone and the decoys (the same
 * leaky read among them) explained little of it; round 17 found the
 * cause: that flush left cp.async and TMA data in L2. With the plain
 * flush the columns agree. */
static int op_decoy(bench *b, void *ctx)
{
    /* The flush under a name of its own: capture() takes op_flush for the
     * flush itself and would not time it as an op. */
    return op_flush(b, ctx);
}

/* The decoy's read by a kernel that holds 200 KB of shared memory per CTA,
 * leaving the SMs split mostly shared: no op read differently after it
 * (round 16, visit 6), so the split is not what carries over. */
static int op_decoy_smem(bench *b, void *ctx)
{
    (void)ctx;
    return pj_bk_read_smem(b->c.s, b->flush, FLUSH_BYTES, b->sink, b->c.lim.sm_count, 200u << 10);
}

/* A kernel of ~500 KB of straight-line code and no shared memory: a
 * neighbour that evicts the SMs' instruction caches and nothing else. */
static int op_decoy_code(bench *b, void *ctx)
{
    (void)ctx;
    return pj_bk_code(b->c.s, b->sink, b->c.lim.sm_count);
}

enum { PROBE_REPS = 100 };

/* Medians of PROBE_REPS replays of graphs g0 and g1 alternating (g1 NULL:
 * g0 alone, after its own previous replay) into *m0 and *m1. */
static void probe_pair(bench *b, cudaGraphExec_t g0, cudaGraphExec_t g1, float *m0, float *m1)
{
    static float t0[PROBE_REPS], t1[PROBE_REPS], scr[PROBE_REPS];
    cudaGraphExec_t g[2] = {g0, g1};
    float *t[2] = {t0, t1};
    time_graphs(b, g, g1 ? 2 : 1, PROBE_REPS, t);
    *m0 = pj_bo_median(t0, PROBE_REPS, scr);
    if (m1)
        *m1 = pj_bo_median(t1, PROBE_REPS, scr);
}

/* The next usable line of f: ours in *o and its GemmEx baseline in *ob,
 * ready to capture. Lines the engine refuses are printed and skipped; a
 * line that does not parse ends the run. 0 at the end of the file. */
static int probe_next(bench *b, FILE *f, const char *mode, const char *path, int *ln,
                      probe_line *pl, op_ctx *o, op_ctx *ob)
{
    char line[OP_LINE_MAX], err[256];
    while (fgets(line, sizeof line, f)) {
        (*ln)++;
        if (!probe_line_parse(line, pl))
            continue;
        const int li = op_parse(b, pl->layer, pl->m, pl->eng, pl->knobs, o, err, sizeof err);
        if (li < 0)
            die("%s %s:%d: %s", mode, path, *ln, err);
        if (!validate(b, li, pl->m, o->k, &o->kn, err, sizeof err)) {
            printf("%-9s %4u %-8s %-44s refused: %s\n", pl->layer, pl->m, pl->eng, pl->knobs, err);
            continue;
        }
        *ob = *o;
        ob->base_algo = 0;
        pj_eng_baseline(0, &ob->call, b->tmp, b->c.es);
        CK(cudaStreamSynchronize(b->c.s));
        return 1;
    }
    return 0;
}

static void run_probe(bench *b, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("--probe %s: %s", path, strerror(errno));
    /* The neighbours after cuBLAS / ours: one more flush, the read holding
     * 200 KB of shared memory, the code. */
    cudaGraphExec_t decoy[3] = {capture(b, op_decoy, NULL), capture(b, op_decoy_smem, NULL),
                                capture(b, op_decoy_code, NULL)};
    if (!decoy[0] || !decoy[1] || !decoy[2])
        die("--probe: cannot capture the decoys");
    int ln = 0;
    printf("\nprobe: medians of %d replays (µs); alone = after its own replay; +cublas / +ours = "
           "alternating with each other; +decoy / +smem / +code = alternating with one more "
           "flush / a read holding 200 KB of shared memory / ~500 KB of code\n",
           PROBE_REPS);
    printf("%-9s %4s %-8s %-44s %7s %7s %7s %7s %7s | %7s %7s %7s %7s %7s\n", "layer", "m",
           "engine", "knobs", "alone", "+cublas", "+decoy", "+smem", "+code", "cublas", "+ours",
           "+decoy", "+smem", "+code");
    probe_line pl;
    op_ctx o, ob;
    while (probe_next(b, f, "--probe", path, &ln, &pl, &o, &ob)) {
        cudaGraphExec_t g_o = capture(b, op_engine, &o), g_b = capture(b, op_baseline, &ob);
        if (!g_o || !g_b)
            die("--probe %s:%d: cannot capture", path, ln);
        /* ours[0] alone, [1] beside cuBLAS, [2..4] beside the decoys;
         * base[] the same for the baseline ([1] beside ours). */
        float ours[5], base[5], unused;
        probe_pair(b, g_o, NULL, &ours[0], NULL);
        probe_pair(b, g_b, NULL, &base[0], NULL);
        probe_pair(b, g_b, g_o, &base[1], &ours[1]);
        for (int d = 0; d < 3; d++) {
            probe_pair(b, decoy[d], g_o, &unused, &ours[2 + d]);
            probe_pair(b, decoy[d], g_b, &unused, &base[2 + d]);
        }
        printf(
            "%-9s %4u %-8s %-44s %7.2f %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f %7.2f %7.2f %7.2f\n",
            pl.layer, pl.m, pl.eng, pl.knobs, ours[0], ours[1], ours[2], ours[3], ours[4], base[0],
            base[1], base[2], base[3], base[4]);
        fflush(stdout);
        cudaGraphExecDestroy(g_o);
        cudaGraphExecDestroy(g_b);
    }
    fclose(f);
    for (int d = 0; d < 3; d++)
        cudaGraphExecDestroy(decoy[d]);
}

/* --pair FILE: one projection split by rows between two engines that run
 * side by side (round 39). Each line is "layer m n1 engA knobsA engB
 * knobsB": A computes rows [0, n1) as a row-prefix call (so A may be the
 * z12 GEMV), B rows [n1, n) on a bf16 view of the layer that starts at row
 * n1 (cuBLAS or the bf16 tiled GEMM). The question: an op bound by its
 * instructions (the z12 GEMV at m >= 16) beside one bound by DRAM (cuBLAS)
 * on the same SMs, each with part of the rows: fewer bytes than cuBLAS
 * alone, less decode than the GEMV alone. The split is checked against the
 * reference (poisoned y, every output) before it is timed; then A and B
 * alone on all n rows, the two baselines, the split forked (A launched
 * first, B first) and the split in one stream are timed alternating. */
typedef struct pair_ctx {
    pj_eng_kind ka, kb;
    pj_eng_knobs kna, knb;
    pj_eng_call ca, cb;
    pj_eng_stream *es2;
    cudaStream_t s2;
    cudaEvent_t fork, join;
    int mode; /* 0 forked, A first; 1 forked, B first; 2 one stream */
} pair_ctx;

static int op_pair(bench *b, void *ctx)
{
    pair_ctx *p = ctx;
    if (p->mode == 2) {
        int rc = pj_eng_launch(p->ka, &p->kna, &p->ca, b->c.es);
        return rc ? rc : pj_eng_launch(p->kb, &p->knb, &p->cb, b->c.es);
    }
    if (cudaEventRecord(p->fork, b->c.s) != cudaSuccess ||
        cudaStreamWaitEvent(p->s2, p->fork, 0) != cudaSuccess)
        return -EIO;
    int rc;
    if (p->mode == 0) {
        rc = pj_eng_launch(p->ka, &p->kna, &p->ca, b->c.es);
        if (!rc)
            rc = pj_eng_launch(p->kb, &p->knb, &p->cb, p->es2);
    } else {
        rc = pj_eng_launch(p->kb, &p->knb, &p->cb, p->es2);
        if (!rc)
            rc = pj_eng_launch(p->ka, &p->kna, &p->ca, b->c.es);
    }
    if (!rc && (cudaEventRecord(p->join, p->s2) != cudaSuccess ||
                cudaStreamWaitEvent(b->c.s, p->join, 0) != cudaSuccess))
        rc = -EIO;
    return rc;
}

/* The bf16 rows [r0, N) of L as a layer of their own. */
static pj_eng_layer bf16_rows_from(const pj_eng_layer *L, uint32_t r0)
{
    pj_eng_layer v;
    memset(&v, 0, sizeof v);
    snprintf(v.name, sizeof v.name, "%s", L->name);
    v.fmt = PJ_FMT_BF16;
    v.N = L->N - r0;
    v.K = L->K;
    v.ldw = L->ldw;
    v.w = L->w + (size_t)r0 * L->ldw;
    return v;
}

enum { PAIR_OPS = 7 };

static void run_pair(bench *b, const char *path)
{
    FILE *f = fopen(path, "r");
    if (!f)
        die("--pair %s: %s", path, strerror(errno));
    pair_ctx p;
    memset(&p, 0, sizeof p);
    char err[256];
    CK(cudaStreamCreateWithFlags(&p.s2, cudaStreamNonBlocking));
    if (pj_eng_stream_create(p.s2, &p.es2, err, sizeof err))
        die("--pair: %s", err);
    CK(cudaEventCreateWithFlags(&p.fork, cudaEventDisableTiming));
    CK(cudaEventCreateWithFlags(&p.join, cudaEventDisableTiming));
    static const char *col[PAIR_OPS] = {"A all",   "B all",   "gemmex", "lt",
                                        "fork AB", "fork BA", "serial"};
    printf("\npair: medians of %d replays (µs); A rows [0, n1), B rows [n1, n); \"A all\" / "
           "\"B all\": the engine on every row\n",
           PROBE_REPS);
    printf("%-9s %4s %5s %-6s %-6s", "layer", "m", "n1", "A", "B");
    for (int j = 0; j < PAIR_OPS; j++)
        printf(" %8s", col[j]);
    printf(" %8s %s\n", "best/base", "check");
    char line[OP_LINE_MAX];
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        pair_line pp;
        if (!pair_line_parse(line, &pp))
            continue;
        const char *layer = pp.layer, *ea = pp.ea, *ka = pp.ka, *eb = pp.eb, *kb = pp.kb;
        const unsigned m = pp.m, n1 = pp.n1;
        op_ctx oa, ob, base0, base1;
        const int li = op_parse(b, layer, m, ea, ka, &oa, err, sizeof err);
        if (li < 0 || op_parse(b, layer, m, eb, kb, &ob, err, sizeof err) < 0)
            die("--pair %s:%d: %s", path, ln, err);
        const uint32_t n = layer_defs[li].n;
        if (n1 == 0 || n1 >= n)
            die("--pair %s:%d: n1 = %u must lie in 1..%u", path, ln, n1, n - 1);
        const pj_eng_layer *L = &b->layers[li].L;
        pj_eng_layer full = bf16_rows_from(L, 0), rest = bf16_rows_from(L, n1);
        pj_eng_ws wsb;
        if (pj_eng_ws_init(&full, g_max_m, p.s2, &wsb, err, sizeof err))
            die("--pair: %s", err);
        p.ka = oa.k;
        p.kna = oa.kn;
        p.kb = ob.k;
        p.knb = ob.kn;
        p.ca = oa.call;
        p.ca.n = n1; /* y's stride stays n */
        p.cb = oa.call;
        p.cb.L = &rest;
        p.cb.ws = &wsb;
        p.cb.y = oa.call.y + n1;
        p.cb.n = n - n1;
        char why[256] = "";
        if (pj_eng_can_run(p.ka, &p.kna, &p.ca, &b->c.lim, why, sizeof why) ||
            pj_eng_can_run(p.kb, &p.knb, &p.cb, &b->c.lim, why, sizeof why)) {
            printf("%-9s %4u %5u %-6s %-6s refused: %s\n", layer, m, n1, ea, eb, why);
            pj_eng_ws_free(&wsb);
            continue;
        }
        /* The split's output, every element, against the reference. */
        prepare(b, li, m);
        pj_bk_cmp cmp;
        CK(cudaStreamSynchronize(b->c.s));
        if (pj_bk_poison(b->c.s, b->c.dy, n, m, n))
            die("--pair: poison failed");
        CK(cudaStreamSynchronize(b->c.s));
        p.mode = 0;
        if (op_pair(b, &p))
            die("--pair %s:%d: launch failed", path, ln);
        CK(cudaStreamSynchronize(b->c.s));
        if (pj_bk_compare(b->c.s, b->c.dy, n, m, n, b->c.dref, b->c.dsabs, b->c.dcmp, &cmp))
            die("--pair: compare failed");
        const int ok = cmp.bad == 0 && cmp.unwritten == 0;
        /* The alternatives on all n rows. */
        op_ctx fa = oa, fb = ob;
        fb.call.L = &full;
        fb.call.ws = &wsb;
        base0 = oa;
        base0.base_algo = 0;
        base1 = oa;
        base1.base_algo = 1;
        pair_ctx pf[3];
        cudaGraphExec_t g[PAIR_OPS];
        g[0] = capture(b, op_engine, &fa);
        g[1] = pj_eng_can_run(fb.k, &fb.kn, &fb.call, &b->c.lim, why, sizeof why) == 0
                   ? capture(b, op_engine, &fb)
                   : NULL;
        g[2] = capture(b, op_baseline, &base0);
        g[3] = capture(b, op_baseline, &base1);
        for (int j = 0; j < 3; j++) {
            pf[j] = p;
            pf[j].mode = j;
            g[4 + j] = capture(b, op_pair, &pf[j]);
        }
        cudaGraphExec_t run[PAIR_OPS];
        int idx[PAIR_OPS], nr = 0;
        for (int j = 0; j < PAIR_OPS; j++)
            if (g[j]) {
                idx[nr] = j;
                run[nr++] = g[j];
            }
        static float tbuf[PAIR_OPS][PROBE_REPS], scr[PROBE_REPS];
        float *t[PAIR_OPS];
        for (int j = 0; j < PAIR_OPS; j++)
            t[j] = tbuf[j];
        time_graphs(b, run, nr, PROBE_REPS, t);
        float med[PAIR_OPS];
        for (int j = 0; j < PAIR_OPS; j++)
            med[j] = NAN;
        for (int j = 0; j < nr; j++)
            med[idx[j]] = pj_bo_median(t[j], PROBE_REPS, scr);
        printf("%-9s %4u %5u %-6s %-6s", layer, m, n1, ea, eb);
        for (int j = 0; j < PAIR_OPS; j++)
            printf(" %8.2f", med[j]);
        float best = fminf(med[4], fminf(med[5], med[6]));
        float base = fminf(med[2], med[3]);
        printf(" %8.3f %s", base / best, ok ? "ok" : "WRONG");
        if (!ok)
            printf(" (%llu bad, %llu unwritten, first %llu)", cmp.bad, cmp.unwritten,
                   cmp.first_bad);
        printf("  [%s | %s]\n", ka, kb);
        fflush(stdout);
        for (int j = 0; j < PAIR_OPS; j++)
            if (g[j])
                cudaGraphExecDestroy(g[j]);
        CK(cudaDeviceSynchronize());
        pj_eng_ws_free(&wsb);
    }
    fclose(f);
    cudaEventDestroy(p.fork);
    cudaEventDestroy(p.join);
    pj_eng_stream_destroy(p.es2);
    cudaStreamDestroy(p.s2);
}

/* --touch FILE: is the constant every op pays (the harness's read floor
 * sits ~2 µs above MEASURED.md's) the first touch of its pages after the
 * flush? Each op is timed primed with one more node before the first
 * event: nothing, a read of one word per 64 KiB or per 2 MiB of every
 * buffer it uses (translations warm, a few KB in L2), or the same
 * launches over the flush buffer (warm already: the control). */
enum { TOUCH_MAX = 12 };
typedef struct touch_set {
    const void *p[TOUCH_MAX];
    size_t bytes[TOUCH_MAX];
    int n;
    size_t stride;
    int control;
} touch_set;

static void touch_add(touch_set *t, const void *p, size_t bytes)
{
    if (p && bytes && t->n < TOUCH_MAX) {
        t->p[t->n] = p;
        t->bytes[t->n] = bytes < FLUSH_BYTES ? bytes : FLUSH_BYTES;
        t->n++;
    }
}

/* Every buffer the op (ours or its baseline) may read or write, except
 * cuBLAS's own workspace, which the stream context hides. */
static void touch_of_call(bench *b, const pj_eng_call *c, touch_set *t)
{
    const pj_eng_layer *L = c->L;
    const size_t wb = (size_t)L->N * L->ldw * 2;
    const size_t nblk = L->z_n_pad / 16;
    touch_add(t, L->w, wb);
    touch_add(t, L->lo, wb);
    touch_add(t, L->z_tiles, nblk * (L->K / 64) * 1536);
    touch_add(t, L->z_exc, (size_t)L->z_n_exc * sizeof(pj_z12_exc));
    touch_add(t, L->zx_rk, nblk * 64 * 4); /* PJ_GEMVZ_XCAP slots per block */
    touch_add(t, c->x, (size_t)c->m * c->ldx * 2);
    touch_add(t, c->y, (size_t)c->m * c->ldy * 2);
    touch_add(t, c->ws->f, c->ws->acc_ld * c->ws->acc_rows * 4);
    touch_add(t, c->ws->part, c->ws->part_floats * 4);
    touch_add(t, c->ws->cnt, c->ws->n_cnt * 4);
    touch_add(t, b->tmp, b->tmp_bytes);
}

static int op_touch(bench *b, void *ctx)
{
    const touch_set *t = ctx;
    for (int i = 0; i < t->n; i++)
        if (pj_bk_touch(b->c.s, t->control ? b->flush : t->p[i], t->bytes[i], t->stride, b->sink))
            return -EIO;
    return 0;
}

static int op_nothing(bench *b, void *ctx)
{
    (void)b;
    (void)ctx;
    return 0;
}

static int op_tiny(bench *b, void *ctx)
{
    const int n = ctx ? *(const int *)ctx : 1;
    for (int i = 0; i < n; i++)
        if (pj_bk_touch(b->c.s, NULL, 0, 1, b->sink))
            return -EIO;
    return 0;
}

/* Median of PROBE_REPS replays of op(ctx) with pre-work t (NULL: none). */
static float touch_time(bench *b, op_fn fn, void *ctx, touch_set *t)
{
    b->pre = t ? op_touch : NULL;
    b->pre_ctx = t;
    cudaGraphExec_t g = capture(b, fn, ctx);
    b->pre = NULL;
    b->pre_ctx = NULL;
    if (!g)
        die("--touch: cannot capture");
    float md;
    probe_pair(b, g, NULL, &md, NULL);
    cudaGraphExecDestroy(g);
    return md;
}

/* plain, +touch 64 KiB, +touch 2 MiB, +control of one op into v[4]. */
static void touch_row(bench *b, op_fn fn, void *ctx, const touch_set *own, float v[4])
{
    touch_set t = *own;
    v[0] = touch_time(b, fn, ctx, NULL);
    t.stride = 64u << 10;
    v[1] = touch_time(b, fn, ctx, &t);
    t.stride = 2u << 20;
    v[2] = touch_time(b, fn, ctx, &t);
    t.stride = 64u << 10;
    t.control = 1;
    v[3] = touch_time(b, fn, ctx, &t);
}

static void run_touch(bench *b, const char *path)
{
    if (!b->ingraph)
        die("--touch needs events inside the graphs");
    FILE *f = fopen(path, "r");
    if (!f)
        die("--touch %s: %s", path, strerror(errno));
    int two = 2;
    printf("\ntouch: medians of %d replays (µs), primed; +t64k / +t2m = one word per 64 KiB / "
           "2 MiB of every buffer the op uses read just before the first event; +ctl = the same "
           "launches over the flush buffer (its translations warm)\n",
           PROBE_REPS);
    printf("event pair alone %.2f, one tiny kernel %.2f, two %.2f\n",
           touch_time(b, op_nothing, NULL, NULL), touch_time(b, op_tiny, NULL, NULL),
           touch_time(b, op_tiny, &two, NULL));
    printf("%-9s %4s %-8s %-44s %7s %7s %7s %7s | %7s %7s %7s %7s\n", "layer", "m", "engine",
           "knobs", "plain", "+t64k", "+t2m", "+ctl", "cublas", "+t64k", "+t2m", "+ctl");
    const size_t rsz[2] = {4u << 20, 37748736};
    for (int i = 0; i < 2; i++) {
        op_ctx orr;
        memset(&orr, 0, sizeof orr);
        orr.read_bytes = rsz[i];
        touch_set t;
        memset(&t, 0, sizeof t);
        touch_add(&t, b->readbuf, rsz[i]);
        float v[4];
        touch_row(b, op_read, &orr, &t, v);
        printf("%-9s %4s %-8s %-44zu %7.2f %7.2f %7.2f %7.2f |\n", "read", "-", "floor", rsz[i],
               v[0], v[1], v[2], v[3]);
    }
    fflush(stdout);
    int ln = 0;
    probe_line pl;
    op_ctx o, ob;
    while (probe_next(b, f, "--touch", path, &ln, &pl, &o, &ob)) {
        touch_set t;
        memset(&t, 0, sizeof t);
        touch_of_call(b, &o.call, &t);
        float vo[4], vb[4];
        touch_row(b, op_engine, &o, &t, vo);
        touch_row(b, op_baseline, &ob, &t, vb);
        printf("%-9s %4u %-8s %-44s %7.2f %7.2f %7.2f %7.2f | %7.2f %7.2f %7.2f %7.2f\n", pl.layer,
               pl.m, pl.eng, pl.knobs, vo[0], vo[1], vo[2], vo[3], vb[0], vb[1], vb[2], vb[3]);
        fflush(stdout);
    }
    fclose(f);
}

static void usage(FILE *f, int code)
{
    fprintf(f,
            "usage: projd-bench [--out DIR] [--config FILE] [--table FILE] [--tune FILE]\n"
            "                   [--tune-budget S]\n"
            "                   [--reps N] [--survey] [--commit SHA] [--seed S]\n"
            "                   [--tune-new [--tune-m LO-HI] [--tune-full]] [--one L M E K]\n"
            "                   [--probe FILE] [--touch FILE] [--pair FILE] [--lt-survey LO-HI]\n"
            "                   [--no-prime] [--flush-kind K]\n"
            "                   [--flush-carveout P]\n"
            "  --out DIR       results directory (bench.json, bench.md, speedups.dat,\n"
            "                  samples.csv, the tune log)\n"
            "  --config FILE   a projd configuration: its model's layers (own weights, loaded\n"
            "                  as projd loads them), rows (max_n), shapes.m as the loads and\n"
            "                  shapes.max_m; default: the reference model, generated\n"
            "  --table FILE    tuned table the dispatcher uses (default: none, untuned ladder)\n"
            "  --tune FILE     tune first, write the table to FILE, benchmark with it\n"
            "  --tune-budget S seconds of full sweeps before the tuner falls back to defaults\n"
            "  --reps N        paired repetitions per shape (default 300)\n"
            "  --survey        also time every engine's default knobs on every shape\n"
            "  --tune-new      with --table OLD --tune NEW: re-tune the shapes among OLD's\n"
            "                  entry (at the shape's m, else the one serving it), cuBLAS,\n"
            "                  the GEMV prefetch (pipe=5) and the cluster split-K forms\n"
            "                  (cl=1); keep the rest\n"
            "  --tune-m LO-HI  with --tune-new: re-tune only the shapes with m in LO..HI\n"
            "  --tune-full     with --tune-new: those shapes get the full sweep of every\n"
            "                  engine's candidates instead of the short list\n"
            "  --lt-survey LO-HI  time every cuBLASLt configuration of the single-matrix\n"
            "                  layers at the benchmark's m in LO..HI against the baseline\n"
            "                  and --table's entries (lt_survey.csv; PJ_LT_BUDGET: seconds\n"
            "                  of checks per shape), then exit; with --table OLD --tune NEW,\n"
            "                  NEW is OLD with each entry a configuration beats by 3 %%\n"
            "                  replaced by it\n"
            "  --one L M E K   only run engine E (knobs K) on layer L at m = M, plainly,\n"
            "                  for a profiler\n"
            "  --probe FILE    time each \"layer m engine knobs\" line of FILE and its cuBLAS\n"
            "                  baseline alone, beside each other and beside three decoys\n"
            "                  (a flush, a shared-memory hog, a code hog), then exit\n"
            "  --touch FILE    time each line's op and baseline plain and after a read of one\n"
            "                  word per 64 KiB / 2 MiB of their buffers (warm translations)\n"
            "                  or of the flush buffer (control), then exit\n"
            "  --pair FILE     each line \"layer m n1 engA knobsA engB knobsB\": rows [0, n1)\n"
            "                  by A, rows [n1, n) by B (bf16) side by side; checked, then\n"
            "                  timed against A and B alone and the baselines, then exit\n"
            "  --flush-kind K  the L2 flush: 1 a read with plain loads (default), 0 the\n"
            "                  read-only-path read before round 17 (it leaves earlier bulk and\n"
            "                  cp.async data in L2), 2 bulk copies, 3 both 0 and 2, 4 a memset\n"
            "  --no-prime      time each op right after the flush, without its untimed run\n"
            "                  first (the method before round 16; with the plain flush it\n"
            "                  reads as primed)\n"
            "  --flush-carveout P  with --flush-kind 0 or 3: their read kernel asks for P %%\n"
            "                  of the unified L1 as shared memory (an experiment; the read\n"
            "                  floor's variants 0 and 4 run that kernel too)\n"
            "  --help          this text\n"
            "One of --probe, --touch, --pair, --one and --lt-survey at a time; without them\n"
            "the run benchmarks (after tuning, with --tune).\n"
            "Every chosen engine is checked against the reference before it is timed and\n"
            "again after its timed replays. A benchmark removes an earlier run's results from\n"
            "DIR when it starts and writes each file whole at the end.\n"
            "Exit status: 0 done; 1 an error, said (a bad option value among them; no results\n"
            "written); 2 an unknown option or one without its value; 3 results written, but\n"
            "a shape was wrong after its timed replays\n"
            "(bench.json: correct_after_replays false; the score times it all the same).\n");
    exit(code);
}

/* An argument the loop above did not take: an option without its value, or
 * one it does not know. */
static void bad_option(const char *a, const char *v)
{
    static const char *const valued[] = {
        "--out",    "--config", "--table",  "--tune",      "--tune-budget",    "--reps",
        "--commit", "--seed",   "--tune-m", "--lt-survey", "--flush-carveout", "--flush-kind",
        "--probe",  "--touch",  "--pair",   "--one"};
    for (size_t i = 0; i < sizeof valued / sizeof valued[0]; i++)
        if (!strcmp(a, valued[i])) {
            if (!strcmp(a, "--one"))
                fprintf(stderr, "projd-bench: --one needs four values: LAYER M ENGINE KNOBS\n");
            else
                fprintf(stderr, "projd-bench: %s needs a value%s\n", a,
                        v ? "" : " (it is the last argument)");
            fprintf(stderr, "(projd-bench --help lists the options)\n");
            exit(2);
        }
    fprintf(stderr, "projd-bench: unknown option \"%s\" (projd-bench --help lists them)\n", a);
    exit(2);
}

/* The modes (--probe, --touch, --pair, --one, --lt-survey) each run alone
 * and exit; an option none of them reads is refused with them rather than
 * ignored (a --tune with --probe wrote no table and said nothing). */
static void check_mode(const opts *o, const char *probe, const char *touch, const char *pair,
                       const char *one, int lt, int reps_given, int budget_given, int survey)
{
    const char *mode = NULL;
    const char *const given[] = {probe ? "--probe" : NULL, touch ? "--touch" : NULL,
                                 pair ? "--pair" : NULL, one ? "--one" : NULL,
                                 lt ? "--lt-survey" : NULL};
    for (int i = 0; i < 5; i++) {
        if (!given[i])
            continue;
        if (mode)
            die("%s and %s: one mode at a time", mode, given[i]);
        mode = given[i];
    }
    if (budget_given && !o->tune)
        die("--tune-budget only works with --tune (it bounds the tuner's sweeps)");
    if (!mode)
        return;
    const char *unused = reps_given     ? "--reps"
                         : budget_given ? "--tune-budget"
                         : survey       ? "--survey or --tune-new"
                         : lt           ? NULL
                         : o->tune      ? "--tune"
                         : o->table     ? "--table"
                                        : NULL;
    if (unused)
        die("%s does nothing with %s (it times with its own repetitions%s); leave it out", unused,
            mode, lt ? "" : " and no table");
}

/* The number an option takes: the whole of v, within lo..hi, whole where
 * integer is set (atof and atoi took "abc" as 0 and "30x" as 30;
 * --tune-budget abc then tuned nothing). */
static double num_arg(const char *opt, const char *v, double lo, double hi, int integer)
{
    char *end;
    errno = 0;
    const double x = strtod(v, &end);
    if (end == v || *end || errno || !(x >= lo && x <= hi) || (integer && x != floor(x)))
        die("%s: want %s in %g..%g, got \"%s\"", opt, integer ? "an integer" : "a number", lo, hi,
            v);
    return x;
}

static void reject_msg(void *ctx, const char *msg)
{
    (void)ctx;
    fprintf(stderr, "%s\n", msg);
}

static void load_warning(void *ctx, const char *msg)
{
    (void)ctx;
    printf("model: %s\n", msg);
}

/* --config FILE: the layers, the rows requests use (max_n), shapes.m and
 * shapes.max_m of a projd configuration, with the model's own weights
 * loaded and converted as projd loads them (so a layer is z12 exactly
 * where the daemon would store it so). */
static void use_config(const char *path)
{
    static pj_config cfg;
    char err[1024];
    if (pj_config_defaults(&cfg) != 0)
        die("--config %s: the built-in defaults do not load", path);
    if (pj_config_apply_file(&cfg, path, err, sizeof err) != 0)
        die("--config %s", err);
    if (pj_model_load(&cfg, &g_model, load_warning, NULL, err, sizeof err) != 0)
        die("--config %s: %s", path, err);
    if (g_model->n_layers > MAX_LAYERS)
        die("--config %s: %u layers; the benchmark times at most %d (name the shapes to time in a "
            "config of their own, with tuned_as where their names differ)",
            path, g_model->n_layers, MAX_LAYERS);
    g_nl = (int)g_model->n_layers;
    for (int i = 0; i < g_nl; i++) {
        const pj_model_layer *ml = &g_model->layers[i];
        layer_def *d = &layer_defs[i];
        snprintf(d->name, sizeof d->name, "%s", ml->name);
        snprintf(d->tuned_as, sizeof d->tuned_as, "%s", ml->tuned_as);
        d->N = ml->w.n;
        d->K = ml->w.k;
        d->n = ml->max_n ? ml->max_n : ml->w.n;
        d->fmt = ml->w.fmt;
    }
    for (int i = 0; i < g_nl; i++)
        if (entry_owner(i) != i)
            printf("config %s: layer %s shares the tuned entries of %s (\"%s\", %u x %u): the "
                   "tuner tunes them once, on %s's weights\n",
                   path, layer_defs[i].name, layer_defs[entry_owner(i)].name,
                   table_name(&layer_defs[i]), layer_defs[i].N, layer_defs[i].K,
                   layer_defs[entry_owner(i)].name);
    g_nm = (int)cfg.shapes.n_m;
    for (int i = 0; i < g_nm; i++)
        ms[i] = cfg.shapes.m[i];
    g_max_m = cfg.shapes.max_m;
    printf("config %s: model %s, %d layers, m = %u..%u (%d loads), max_m %u\n", path, g_model->path,
           g_nl, ms[0], ms[g_nm - 1], g_nm, g_max_m);
}

/* Layer li of the run on the device: generated weights of the reference
 * shape, or the configured model's own. */
static void make_layer(bench *b, int li)
{
    const layer_def *d = &layer_defs[li];
    char err[256];
    int rc;
    if (!g_model) {
        rc = pj_chk_layer_make(&b->layers[li], d->name, d->N, d->K, d->fmt, b->o.seed * 10 + li,
                               err, sizeof err);
    } else {
        const pj_weights *w = &g_model->layers[li].w;
        if (w->fmt == PJ_FMT_Z12) {
            uint16_t *h = malloc((size_t)d->N * d->K * 2);
            if (!h)
                die("layer %s: out of host memory", d->name);
            pj_z12_unpack_mt(w->z, h, d->K, 0);
            rc = pj_chk_layer_from(&b->layers[li], d->name, d->N, d->K, d->fmt, h, NULL, err,
                                   sizeof err);
            free(h);
        } else {
            rc =
                pj_chk_layer_from(&b->layers[li], d->name, d->N, d->K, d->fmt,
                                  d->fmt == PJ_FMT_SPLIT ? w->hi : w->bf16, w->lo, err, sizeof err);
        }
        /* The table's entries the daemon runs this layer with (tuned_as):
         * the benchmark times what the daemon would run. */
        if (!rc)
            snprintf(b->layers[li].L.table_name, sizeof b->layers[li].L.table_name, "%s",
                     d->tuned_as);
    }
    if (rc)
        die("%s", err);
}

int main(int argc, char **argv)
{
    static bench B;
    bench *b = &B;
    b->o.reps = 300;
    b->o.tune_budget = 240;
    b->o.tune_m_lo = 1;
    b->o.tune_m_hi = 4096;
    b->o.seed = 1;
    b->prime = 1;
    b->flush_kind = 1;
    b->o.out = "bench-out";
    b->o.out_fd = -1;
    const char *one_layer = NULL, *one_eng = NULL, *one_knobs = NULL;
    uint32_t one_m = 0;
    int tune_new = 0, tune_m_given = 0;
    unsigned lt_lo = 0, lt_hi = 0; /* --lt-survey LO-HI */
    double lt_budget = 4;          /* seconds of configuration checks per shape */
    if (getenv("PJ_LT_BUDGET"))
        lt_budget = num_arg("PJ_LT_BUDGET", getenv("PJ_LT_BUDGET"), 0.1, 600, 0);
    const char *probe = NULL, *touch = NULL, *pair = NULL, *config = NULL;
    int flush_carveout = -1, reps_given = 0, budget_given = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--out") && v)
            b->o.out = argv[++i];
        else if (!strcmp(a, "--table") && v)
            b->o.table = argv[++i];
        else if (!strcmp(a, "--tune") && v)
            b->o.tune = argv[++i];
        else if (!strcmp(a, "--tune-budget") && v) {
            b->o.tune_budget = num_arg(a, argv[++i], 0, 1e9, 0);
            budget_given = 1;
        } else if (!strcmp(a, "--reps") && v) {
            b->o.reps = (int)num_arg(a, argv[++i], 20, 5000, 1);
            reps_given = 1;
        } else if (!strcmp(a, "--commit") && v)
            b->o.commit = argv[++i];
        else if (!strcmp(a, "--seed") && v)
            b->o.seed = (uint64_t)num_arg(a, argv[++i], 0, 1e15, 1);
        else if (!strcmp(a, "--survey"))
            b->o.survey = 1;
        else if (!strcmp(a, "--config") && v)
            config = argv[++i];
        else if (!strcmp(a, "--tune-m") && v) {
            char tail;
            if (sscanf(v, "%u-%u%c", &b->o.tune_m_lo, &b->o.tune_m_hi, &tail) != 2 ||
                !b->o.tune_m_lo || b->o.tune_m_lo > b->o.tune_m_hi)
                die("--tune-m: want LO-HI with 1 <= LO <= HI, got \"%s\"", v);
            tune_m_given = 1;
            i++;
        } else if (!strcmp(a, "--lt-survey") && v) {
            char tail;
            if (sscanf(v, "%u-%u%c", &lt_lo, &lt_hi, &tail) != 2 || !lt_lo || lt_lo > lt_hi)
                die("--lt-survey: want LO-HI with 1 <= LO <= HI, got \"%s\"", v);
            i++;
        } else if (!strcmp(a, "--tune-new"))
            tune_new = 1;
        else if (!strcmp(a, "--tune-full"))
            g_full_sweep = 1;
        else if (!strcmp(a, "--no-prime"))
            b->prime = 0;
        else if (!strcmp(a, "--flush-carveout") && v)
            flush_carveout = (int)num_arg(a, argv[++i], 0, 100, 1);
        else if (!strcmp(a, "--flush-kind") && v)
            b->flush_kind = (int)num_arg(a, argv[++i], 0, 4, 1);
        else if (!strcmp(a, "--probe") && v)
            probe = argv[++i];
        else if (!strcmp(a, "--touch") && v)
            touch = argv[++i];
        else if (!strcmp(a, "--pair") && v)
            pair = argv[++i];
        else if (!strcmp(a, "--one") && i + 4 < argc) {
            one_layer = argv[i + 1];
            one_m = (uint32_t)num_arg(a, argv[i + 2], 1, 4096, 1);
            one_eng = argv[i + 3];
            one_knobs = argv[i + 4];
            i += 4;
        } else if (!strcmp(a, "--help") || !strcmp(a, "-h"))
            usage(stdout, 0);
        else
            bad_option(a, v);
    }
    check_mode(&b->o, probe, touch, pair, one_layer, lt_lo != 0, reps_given, budget_given,
               b->o.survey || tune_new);
    if (flush_carveout >= 0 && b->flush_kind != 0 && b->flush_kind != 3)
        die("--flush-carveout sets the carveout of the read kernel of flush kinds 0 and 3 (and "
            "of the read floor's variants 0 and 4); with --flush-kind %d it would change only "
            "the floor",
            b->flush_kind);
    if (!tune_new && (tune_m_given || g_full_sweep))
        die("%s only works with --tune-new (it would tune every shape in full)",
            tune_m_given ? "--tune-m" : "--tune-full");
    if (tune_new && (!b->o.tune || !b->o.table))
        die("--tune-new needs --table OLD and --tune NEW");
    if (lt_lo && b->o.tune && !b->o.table)
        die("--lt-survey with --tune NEW needs --table OLD (the table it competes with)");
    if (!tune_new && !lt_lo && b->o.tune && b->o.table)
        die("--table %s with --tune %s: the benchmark runs with the table --tune writes; "
            "add --tune-new to start from %s",
            b->o.table, b->o.tune, b->o.table);
    /* Where the results and the table go is checked before any GPU work:
     * a tuning run or a benchmark is minutes of device time, lost when the
     * first file it writes cannot be created at the end. */
    if (mkdir(b->o.out, 0755) != 0 && errno != EEXIST)
        die("--out %s: %s", b->o.out, strerror(errno));
    if (access(b->o.out, W_OK | X_OK) != 0)
        die("--out %s: %s", b->o.out, strerror(errno));
    /* A folder that was there already must be this user's (or root's):
     * another user's could have it replaced, or hold links to files the run
     * would overwrite (out_file follows none). */
    struct stat ost;
    /* "dir/" would follow a link named dir: the slashes go first. */
    static char out_path[4096];
    snprintf(out_path, sizeof out_path, "%s", b->o.out);
    for (size_t l = strlen(out_path); l > 1 && out_path[l - 1] == '/'; l--)
        out_path[l - 1] = '\0';
    b->o.out = out_path;
    b->o.out_fd = open(b->o.out, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (b->o.out_fd < 0 || fstat(b->o.out_fd, &ost) != 0)
        die("--out %s: not a directory (a symbolic link is not followed)", b->o.out);
    if (ost.st_uid != 0 && ost.st_uid != geteuid())
        die("--out %s: owned by uid %u; give a folder of your own (a missing one is made)",
            b->o.out, (unsigned)ost.st_uid);
    /* A benchmark's files are made at its end: an earlier run's, left in
     * place, would read as this run's if it dies before then. */
    if (!probe && !touch && !pair && !one_layer && !lt_lo) {
        char cerr[4400];
        if (pj_bo_clear(b->o.out_fd, b->o.out, cerr, sizeof cerr))
            die("--out: %s", cerr);
    }
    if (b->o.tune) {
        struct stat tst;
        if (!b->o.tune[0])
            die("--tune \"\": give the path of the table to write");
        if (stat(b->o.tune, &tst) == 0 && !S_ISREG(tst.st_mode))
            die("--tune %s: not a regular file (a folder?); give the path of the table to write",
                b->o.tune);
        char dir[4096];
        snprintf(dir, sizeof dir, "%s", b->o.tune);
        char *slash = strrchr(dir, '/');
        if (slash)
            slash[slash == dir ? 1 : 0] = 0;
        if (access(slash ? dir : ".", W_OK | X_OK) != 0)
            die("--tune %s: cannot write in %s: %s", b->o.tune, slash ? dir : ".", strerror(errno));
    }
    /* The files it reads, likewise: a table that is missing or not a table
     * (its entries are vetted against the device later), a probe list. */
    if (b->o.table) {
        static pj_tune_table pre;
        char perr[512];
        if (pj_tune_load(b->o.table, &pre, NULL, NULL, NULL, NULL, perr, sizeof perr) < 0)
            die("%s", perr);
    }
    {
        char brk_layer[PJ_TUNE_NAME];
        unsigned brk_m;
        vet_break(brk_layer, &brk_m);
    }
    if (probe && access(probe, R_OK) != 0)
        die("--probe %s: %s", probe, strerror(errno));
    if (touch && access(touch, R_OK) != 0)
        die("--touch %s: %s", touch, strerror(errno));
    if (pair && access(pair, R_OK) != 0)
        die("--pair %s: %s", pair, strerror(errno));

    if (config)
        use_config(config);
    if (one_layer)
        check_op_words("--one", one_layer, one_m, one_eng, one_knobs);
    if (probe)
        check_op_file("--probe", probe, 0);
    if (touch)
        check_op_file("--touch", touch, 0);
    if (pair)
        check_op_file("--pair", pair, 1);
    /* (--tune-new's old table is read with the device's limits: its run
     * is counted at the start of the tuning; --lt-survey only replaces.) */
    if (b->o.tune && !tune_new && !lt_lo)
        check_table_room(0, 1, UINT32_MAX);
    uint32_t max_n = 0, max_k = 0;
    size_t max_bytes = 0;
    for (int li = 0; li < g_nl; li++) {
        const layer_def *d = &layer_defs[li];
        max_n = d->N > max_n ? d->N : max_n;
        max_k = d->K > max_k ? d->K : max_k;
        size_t w = (size_t)d->N * d->K * (d->fmt == PJ_FMT_SPLIT ? 4 : 2);
        max_bytes = w > max_bytes ? w : max_bytes;
    }
    /* The floor's read covers the bytes the largest op reads. */
    size_t readbuf_bytes = max_bytes + (size_t)g_max_m * (max_k + max_n) * 2;
    if (readbuf_bytes < READBUF_BYTES)
        readbuf_bytes = READBUF_BYTES;

    char err[4400];
    double t0 = now_s();
    /* Said as the daemon says it (no driver, none visible), not as the
     * runtime's "driver version is insufficient" of the first device call. */
    if (pj_backend_cuda_probe(err, sizeof err) <= 0)
        die("no usable GPU: %s", err);
    if (pj_chk_ctx_init(&b->c, g_max_m, max_n, max_k, err, sizeof err))
        die("%s", err);
    printf("device: %s, %d SMs, %zu MB L2, smem/block %zu\n", b->c.lim.name, b->c.lim.sm_count,
           b->c.lim.l2_bytes >> 20, b->c.lim.smem_per_block_optin);
    for (int li = 0; li < g_nl; li++) {
        const layer_def *d = &layer_defs[li];
        if (one_layer && strcmp(one_layer, d->name) != 0)
            continue; /* --one: only the layer it needs */
        make_layer(b, li);
        if (pj_eng_ws_init(&b->layers[li].L, g_max_m, b->c.s, &b->ws[li], err, sizeof err))
            die("%s", err);
        if (d->fmt == PJ_FMT_Z12)
            printf("layer %-9s %ux%u z12 base %u, %u exceptions (%.4f %%)\n", d->name, d->N, d->K,
                   b->layers[li].z.base, b->layers[li].z.n_exc,
                   100.0 * b->layers[li].z.n_exc / ((double)d->N * d->K));
    }
    if (flush_carveout >= 0 && pj_bk_read_carveout(flush_carveout))
        die("--flush-carveout %d: the driver refused it", flush_carveout);
    CK(cudaMalloc(&b->flush, FLUSH_BYTES));
    CK(cudaMalloc(&b->readbuf, readbuf_bytes));
    b->readbuf_bytes = readbuf_bytes;
    CK(cudaMalloc((void **)&b->sink, 64));
    b->tmp_bytes = (size_t)g_max_m * max_n * 2;
    CK(cudaMalloc((void **)&b->tmp, b->tmp_bytes));
    CK(cudaMemset(b->flush, 1, FLUSH_BYTES));
    CK(cudaMemset(b->readbuf, 3, readbuf_bytes));
    b->nev = 2048;
    b->ev = malloc(sizeof(cudaEvent_t) * (size_t)b->nev);
    for (int i = 0; i < b->nev; i++)
        CK(cudaEventCreate(&b->ev[i]));
    b->g_flush = capture(b, op_flush, NULL);
    if (!b->g_flush)
        die("cannot capture the flush");
    CK(cudaDeviceSynchronize());
    {
        /* In-graph timing works when a captured external event pair times. */
        op_ctx o;
        memset(&o, 0, sizeof o);
        o.read_bytes = 1 << 20;
        b->ingraph = 1;
        cudaGraphExec_t g = capture(b, op_read, &o);
        float ms_ = -1;
        b->ingraph = g && cudaGraphLaunch(g, b->c.s) == cudaSuccess &&
                     cudaStreamSynchronize(b->c.s) == cudaSuccess &&
                     cudaEventElapsedTime(&ms_, b->ev[0], b->ev[1]) == cudaSuccess && ms_ > 0;
        cudaGetLastError();
        if (g)
            cudaGraphExecDestroy(g);
        printf("timing: %s%s\n",
               b->ingraph ? "events inside the graph (flush, event, op, event)"
                          : "flush graph, event, op graph, event",
               b->prime ? ", primed (op, flush first)" : ", not primed");
        printf("flush: kind %d\n", b->flush_kind);
    }
    printf("setup: %.1f s\n", now_s() - t0);

    if (probe) {
        run_probe(b, probe);
        return 0;
    }
    if (touch) {
        run_touch(b, touch);
        return 0;
    }
    if (pair) {
        run_pair(b, pair);
        return 0;
    }
    if (one_layer) {
        run_one(b, one_layer, one_m, one_eng, one_knobs);
        return 0;
    }
    if (lt_lo) {
        static pj_tune_table lt_table;
        pj_tune_table *ltp = NULL;
        if (b->o.table) {
            if (pj_tune_load(b->o.table, &lt_table, pj_eng_check_entry, &b->c.lim, reject_msg, NULL,
                             err, sizeof err) < 0)
                die("%s", err);
            ltp = &lt_table;
        }
        const int nr = lt_survey(b, lt_lo, lt_hi, lt_budget, ltp);
        if (ltp && b->o.tune) {
            int nd = 0;
            if (nr > 0) {
                /* An entry put at an m the table had none at also serves
                 * the m between it and the entry below, which the survey
                 * never ran: every served m is checked, as after tuning. */
                FILE *vcsv = out_file(b, "lt_vet.csv");
                fprintf(vcsv, TUNE_CSV_HEADER);
                nd = vet_served_m(b, ltp, vcsv);
                out_close(b, vcsv, "lt_vet.csv");
            }
            char date[64];
            time_t now = time(NULL);
            strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
            /* An older table of this very GPU gets its compute capability
             * (the nearest-table fallback needs it); another GPU's keeps
             * what it says. */
            if (!ltp->cc_major && !strcmp(ltp->device, b->c.lim.name)) {
                ltp->cc_major = b->c.lim.cc_major;
                ltp->cc_minor = b->c.lim.cc_minor;
            }
            if (pj_tune_save(b->o.tune, ltp, b->o.commit, date, err, sizeof err))
                die("%s", err);
            printf("lt-survey: %d entries put, %d of the table's dropped by the check of every m; "
                   "table written to %s\n",
                   nr, nd, b->o.tune);
        }
        return 0;
    }
    if (b->o.survey)
        survey(b);

    static pj_tune_table table, old;
    pj_tune_table *tp = NULL;
    if (tune_new) {
        int n = pj_tune_load(b->o.table, &old, pj_eng_check_entry, &b->c.lim, reject_msg, NULL, err,
                             sizeof err);
        if (n < 0)
            die("%s", err);
        printf("tune-new: %d entries of %s compete with cuBLAS, the GEMV prefetch (pipe=5)\n"
               "          and the cluster split-K forms (cl=1) at m = %u..%u\n",
               n, b->o.table, b->o.tune_m_lo, b->o.tune_m_hi);
        g_old = &old;
    }
    if (b->o.tune) {
        tune_all(b, &table);
        char date[64];
        time_t now = time(NULL);
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
        if (pj_tune_save(b->o.tune, &table, b->o.commit, date, err, sizeof err))
            die("%s", err);
        b->o.table = b->o.tune;
    }
    if (b->o.table) {
        int n = pj_tune_load(b->o.table, &table, pj_eng_check_entry, &b->c.lim, reject_msg, NULL,
                             err, sizeof err);
        if (n < 0)
            die("%s", err);
        printf("table %s: %d entries accepted\n", b->o.table, n);
        tp = &table;
    }
    static pj_bo_shape res[MAX_SHAPES];
    bench_all(b, tp, res);
    pj_bo_run run;
    describe_run(b, config, flush_carveout, &run);
    pj_bo_score sc;
    if (pj_bo_score_run(&run, res, PJ_BO_BOOTS, BOOT_SEED, &sc))
        die("the score: out of host memory");
    if (pj_bo_write(b->o.out_fd, b->o.out, &run, res, &sc, err, sizeof err))
        die("%s (the results are lost; the tables below are all there is)", err);
    pj_bo_print(stdout, &run, res, &sc);
    printf("total: %.1f s\n", now_s() - t0);
    int wrong = 0;
    for (int si = 0; si < g_nl * g_nm; si++) {
        wrong += !res[si].after_ok;
        free((void *)res[si].tb);
        free((void *)res[si].to);
    }
    if (wrong) {
        fprintf(stderr,
                "projd-bench: FAILED: %d shape(s) gave a wrong result after their timed replays "
                "(bench.json: correct_after_replays); the score times them all the same\n",
                wrong);
        return EXIT_WRONG;
    }
    return 0;
}
