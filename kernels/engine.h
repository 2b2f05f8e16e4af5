/* engine.h — the projection engines behind one plain C interface.
 *
 * y[i, r] = bf16( sum_k x[i, k] * W[r, k] ) for i < m, r < n (n <= the
 * layer's N: a row-prefix request), fp32 accumulation, as kernels/refgemm.h
 * defines it. Engines:
 *   gemv    bf16 weights, m <= 32: mma.sync GEMV, warps split K in a CTA,
 *           optional split-K across CTAs (ordered, deterministic reduction)
 *   gemvz   the same over z12 weights (kernels/zfmt.h), decode in registers,
 *           exceptions applied by an extra warp in a fixed order
 *   splitk  tiled GEMM (mma.sync, or wgmma with pipe 2-4; pipe 5: wgmma
 *           over the z12 tiles, A fragments rebuilt in registers; pipe 7:
 *           warp-specialised, TMA producer and wgmma consumers) with split-K:
 *           an fp32 atomic epilogue (the last CTA of a tile writes y and
 *           re-zeroes the workspace; not bit-deterministic when ks > 1),
 *           or with cl = 1 a sum in rank order through distributed shared
 *           memory (deterministic)
 *   router  hi + lo of a split layer into one fp32 accumulator: GEMV form
 *           for m <= 32 (knobs as gemv), split-K tile form above
 *   cublas  cublasGemmEx / cublasLt, bf16 in/out, fp32 compute: the
 *           fallback, always correct, always last
 *
 * Every launch is asynchronous on the caller's stream, allocates nothing and
 * never synchronises, so it can be captured into a CUDA graph. Workspace
 * (split-K partials, counters) is allocated once per (layer, stream) by
 * pj_eng_ws_init; counters return to zero at the end of every launch.
 * Two launches that share a workspace must be ordered (same stream).
 */
#ifndef PJ_ENGINE_H
#define PJ_ENGINE_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#include "kernels/dispatch.h"
#include "kernels/refgemm.h"
#include "kernels/zfmt.h"

#ifdef __cplusplus
extern "C" {
#endif

#define PJ_ENG_MAX_KS 64
/* Tile geometries of the tiled GEMM (knob tile = 0 .. this - 1). */
#define PJ_ENG_TGEMM_TILES 10
/* Largest m for which the ladder's untuned step picks a GEMV (engine.cu). */
#define PJ_ENG_DEFAULT_GEMV_M 8

/* One layer's weights on the device. Borrowed pointers (whoever uploaded
 * them owns them). A z12 layer should also carry its bf16 copy: cuBLAS and
 * splitk need it for the m > 32 shapes. */
typedef struct pj_eng_layer {
    char name[PJ_TUNE_NAME];
    /* Whose entries of the tuned table serve this layer; "" = name's. */
    char table_name[PJ_TUNE_NAME];
    pj_format fmt;      /* the stored format the fast path reads */
    uint32_t N, K;      /* full shape */
    const uint16_t *w;  /* bf16 N x K, row stride ldw (PJ_FMT_SPLIT: hi) or NULL */
    const uint16_t *lo; /* PJ_FMT_SPLIT: lo, same stride */
    size_t ldw;
    /* z12 (PJ_FMT_Z12), device copies of pj_z12's arrays */
    const uint8_t *z_tiles;
    const uint32_t *z_blk_exc;
    const pj_z12_exc *z_exc;
    uint32_t z_base, z_n_pad, z_n_exc;
    /* The exceptions by tile (pj_z12_tile_exc: offsets per tile rb * K / 64
     * + kt, entries pos << 16 | bf16 bits), made where the layer is
     * uploaded; the tiled GEMM's z12 form (splitk pipe = 5) needs them.
     * NULL when not made. */
    const uint32_t *zt_off, *zt_ent;
    /* Derived by pj_eng_layer_init (optional, gemvz is faster with it): the
     * exceptions of row block b in fixed slots [b * 64, b * 64 + 64), empty
     * slots rk = 0xffffffff, and the block's count. */
    const uint32_t *zx_n, *zx_rk;
    const float *zx_c1, *zx_c2;
    /* The same for a block's entries 64 .. 127, at [b * 64, b * 64 + 64). */
    const uint32_t *zx2_rk;
    const float *zx2_c1, *zx2_c2;
    void *zx_mem; /* owned by the layer after pj_eng_layer_init */
    /* Derived by pj_eng_layer_init_tiles (optional; only the streamed GEMV
     * with pipe = 3 reads it): w re-laid fragment-major, so that 16 rows x
     * kc columns are one contiguous run of 32 kc bytes. Row block b, k step
     * c (32 columns) is 1 KB at ((b * K / 32) + c) * 1024 bytes: two halves
     * (rows g and g + 8) of 32 lanes x 16 bytes, lane = 4 g + t holding
     * columns 32 c + 8 t .. + 7. Rows past N repeat row N - 1. NULL if not
     * built. Costs a second copy of the bf16 weights (ceil(N / 16) 32 K
     * bytes). */
    const uint16_t *wt;
    void *wt_mem; /* owned by the layer after pj_eng_layer_init_tiles */
} pj_eng_layer;

/* The name the tuned table knows the layer by. */
static inline const char *pj_eng_table_name(const pj_eng_layer *L)
{
    return L->table_name[0] ? L->table_name : L->name;
}

/* Build the layer's derived device data (the z12 exception slot table) from
 * its z12 arrays; a no-op for other formats. Enqueued on s and synchronised.
 * Call once after upload; pj_eng_layer_fini frees it. 0 or -errno. */
int pj_eng_layer_init(pj_eng_layer *L, cudaStream_t s, char *err, size_t errlen);
void pj_eng_layer_fini(pj_eng_layer *L);

/* Build the fragment-major copy of a bf16 layer's weights (L->wt) for the
 * streamed GEMV's pipe = 3; a no-op for split layers, layers without bf16
 * weights, or K not a multiple of 32. Enqueued on s and synchronised. Costs
 * device memory equal to the bf16 weights; pj_eng_layer_fini frees it.
 * 0 or -errno with err. */
int pj_eng_layer_init_tiles(pj_eng_layer *L, cudaStream_t s, char *err, size_t errlen);

/* Debug: print the streamed GEMV's per-unit timestamps of its last launch
 * (kernels/gemvs.cu) to stdout. Only builds with -DPJ_GEMVS_TRACE record
 * them; elsewhere -ENOSYS. 0 or -errno. */
int pj_gemvs_trace_dump(void);

/* Per (layer, stream) scratch: one allocation, two regions. The first
 * acc_rows x acc_ld floats are split-K accumulators that must be zero at
 * every launch's start (each launch leaves them zero again); the rest
 * (part_floats) is free scratch for ordered partial sums. */
typedef struct pj_eng_ws {
    float *f;
    size_t acc_ld, acc_rows;
    float *part;
    size_t part_floats;
    unsigned *cnt; /* arrival counters, zeroed at init, self-resetting */
    size_t n_cnt;
    /* The slab GEMV's words at the boundaries between its CTAs (gemvz
     * pipe = 6): zeroed at init, zero again after every launch; in cnt's
     * allocation. */
    unsigned long long *tag;
} pj_eng_ws;

/* Per stream: cuBLAS handles and their workspace, the Lt plan cache. */
typedef struct pj_eng_stream pj_eng_stream;

/* One projection. */
typedef struct pj_eng_call {
    const pj_eng_layer *L;
    pj_eng_ws *ws;
    const uint16_t *x; /* m x K, row stride ldx (elements) */
    size_t ldx;
    uint16_t *y; /* m x n, row stride ldy (elements) */
    size_t ldy;
    uint32_t m, n;
} pj_eng_call;

/* The device's limits (current device). 0 or -errno with err. */
int pj_eng_dev_limits(pj_dev_limits *lim, char *err, size_t errlen);

/* Create the per-stream context (cuBLAS + Lt handles bound to s, a 32 MiB
 * cuBLAS workspace). Owns them until pj_eng_stream_destroy. */
int pj_eng_stream_create(cudaStream_t s, pj_eng_stream **out, char *err, size_t errlen);
void pj_eng_stream_destroy(pj_eng_stream *es);
cudaStream_t pj_eng_stream_get(const pj_eng_stream *es);

/* Allocate and zero the workspace every engine needs for this layer at any
 * m <= max_m (enqueued on s; synchronises s before returning). */
int pj_eng_ws_init(const pj_eng_layer *L, uint32_t max_m, cudaStream_t s, pj_eng_ws *ws, char *err,
                   size_t errlen);
void pj_eng_ws_free(pj_eng_ws *ws);

/* The engine's untuned knobs for this shape (what the dispatcher runs with
 * no table entry, and the base a forced "name=value" knob string edits). */
pj_eng_knobs pj_eng_default_knobs(pj_eng_kind k, const pj_eng_layer *L, uint32_t m);

/* Can this engine with these knobs serve (L, m, n, strides) on this device?
 * 0 = yes; else -errno with the reason. Cheap; no device calls after the
 * first (kernel attributes are cached). */
int pj_eng_can_run(pj_eng_kind k, const pj_eng_knobs *kn, const pj_eng_call *c,
                   const pj_dev_limits *lim, char *why, size_t whylen);

/* Checker for pj_tune_parse: engine exists for the knobs, its kernel fits the
 * device (threads, registers, shared memory, no spills, occupancy >= 1 CTA
 * per SM). ctx: const pj_dev_limits *. */
int pj_eng_check_entry(void *ctx, const pj_tune_entry *e, char *why, size_t whylen);

/* Enqueue the projection. Does not check the shape: call pj_eng_can_run
 * once per (engine, knobs, shape) first. 0 or -errno (a launch error). */
int pj_eng_launch(pj_eng_kind k, const pj_eng_knobs *kn, const pj_eng_call *c, pj_eng_stream *es);

/* Does the engine with these knobs read the layer's z12 tiles (gemvz; the
 * tiled GEMM with pipe = 5)? Such variants must reproduce the weights' bits
 * on one-hot inputs. kn may be NULL (the engine's bf16 form). */
int pj_eng_reads_z12(pj_eng_kind k, const pj_eng_knobs *kn);

/* Bytes of weights (and x) the engine reads from device memory for this
 * call, for the read-floor comparison (kn may be NULL, as above). */
size_t pj_eng_bytes_read(pj_eng_kind k, const pj_eng_knobs *kn, const pj_eng_call *c);

/* Does the engine give the same bits every run at this m? (The tiled
 * split-K form's atomics with ks > 1 do not; its cluster form does.) */
int pj_eng_deterministic(pj_eng_kind k, const pj_eng_knobs *kn, uint32_t m);

/* The ladder: forced (engine name and optional knobs, "" = none), then the
 * table entry for (layer, m), then engines' own defaults in the order gemv,
 * gemvz (those two only for m <= PJ_ENG_DEFAULT_GEMV_M), router, then cuBLAS. Every step checks
 * pj_eng_can_run. Fills *k and *kn; returns the step that decided (0 forced, 1 table, 2 default, 3
 * cublas). */
int pj_eng_choose(const pj_tune_table *t, const char *force_engine, const char *force_knobs,
                  const pj_eng_call *c, const pj_dev_limits *lim, pj_eng_kind *k, pj_eng_knobs *kn);

/* pj_eng_choose, and when a forced engine or the table's entry was passed
 * over, why, in note ("forced X refused: ..." or "table entry m=.. E(knobs)
 * refused: ..."; the forced one when both were); "" when the first step
 * offered was taken. */
int pj_eng_choose_note(const pj_tune_table *t, const char *force_engine, const char *force_knobs,
                       const pj_eng_call *c, const pj_dev_limits *lim, pj_eng_kind *k,
                       pj_eng_knobs *kn, char *note, size_t notelen);

/* SGLang's path, the benchmark's baseline: x @ W.T through cuBLAS (algo 0:
 * cublasGemmEx default, 1: cublasLt heuristic); a split layer runs two GEMMs
 * (hi, lo) into bf16 and adds them (tmp: m x n bf16 scratch of the caller). */
int pj_eng_baseline(int algo, const pj_eng_call *c, uint16_t *tmp, pj_eng_stream *es);

/* Whether cuBLASLt's heuristic has a plan for c's shape: without one, the
 * baseline's algo 1 runs cublasGemmEx's default (as the daemon would), and
 * the benchmark says so rather than naming cuBLASLt. */
int pj_eng_baseline_has_lt(const pj_eng_call *c, pj_eng_stream *es);

/* cuBLASLt's configuration space for one bf16 matrix (round 38's survey,
 * projd-bench --lt-survey): an algorithm id with the tile, stages, K split,
 * reduction, swizzle, cluster shape and custom option it is run with. */
typedef struct pj_lt_cfg {
    int32_t id;
    uint32_t tile, stages, sk, red, swz, custom;
    uint16_t cluster;
    uint64_t ws; /* workspace bytes cublasLtMatmulAlgoCheck asks for */
} pj_lt_cfg;

/* The configurations cuBLASLt accepts for call's shape (cublasLtMatmulAlgoCheck
 * within the engine's workspace; operands as the tuner's candidates take
 * them), in a fixed order, up to max of them into out: the heuristic's own
 * choices first (*nheur of them: algo 1's and the tuner's candidates), then
 * each one's neighbourhood (every tile and stages of its algorithm, and
 * every cluster shape x custom option x K split). Stops widening after
 * budget_s seconds of checks. *checked: configurations asked about. One
 * caller at a time (scratch lists are static). Returns the count or -errno. */
int pj_eng_lt_space(pj_eng_stream *es, const pj_eng_call *c, pj_lt_cfg *out, int max, int *nheur,
                    long *checked, double budget_s);

/* The cublas knobs that name configuration c (lt = 1, algo 0; its
 * reduction follows from the split, as lt_cfg_of_knobs reads it back). */
pj_eng_knobs pj_eng_lt_knobs(const pj_lt_cfg *c);

/* Run configuration cfg on call (one bf16 matrix). */
int pj_eng_lt_run(pj_eng_stream *es, const pj_eng_call *c, const pj_lt_cfg *cfg);

/* cuBLAS's version number (cublasGetVersion), for result files. */
int pj_eng_cublas_version(void);

#ifdef __cplusplus
}
#endif

#endif
