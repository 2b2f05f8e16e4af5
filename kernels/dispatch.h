/* dispatch.h — engine names, tuning knobs, device limits and the tuned table.
 *
 * Pure C (no CUDA types), so the table loader and its tests build and run
 * on machines without a GPU. The engines themselves live behind
 * kernels/engine.h; this module only knows their names and knob sets, and
 * asks a caller-supplied checker whether an entry fits the device.
 *
 * Table file (config/tuning/<gpu>.json):
 *   { "device": "NVIDIA H200", "sm_count": 132, "commit": "...", "date": "...",
 *     "entries": [ { "layer": "qkv_gate", "n": 4608, "k": 4096, "m": 1,
 *                    "engine": "gemvz",
 *                    "knobs": { "nw": 8, "ks": 1, "u": 2, "pipe": 1, ... },
 *                    "us": 9.4, "base_us": 13.8 }, ... ] }
 * An entry timed on a row prefix of its layer (the unpooler's requests use
 * the first 1024 of its 8192 rows) says so: "rows": 1024. Without "rows"
 * the rows it was timed on are not known (tables of projd-bench before
 * session 60) or are the layer's n.
 * Unknown engine names, knob values out of range, duplicate (layer, n, k, m)
 * and entries the checker refuses are dropped with one message each; the
 * rest of the table still loads. One table may hold layers of the same name
 * and different shapes (several models on one kind of GPU).
 */
#ifndef PJ_DISPATCH_H
#define PJ_DISPATCH_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum pj_eng_kind {
    PJ_ENG_GEMV = 0,   /* bf16 GEMV, m <= 32 */
    PJ_ENG_GEMVZ = 1,  /* z12 GEMV, m <= 32 */
    PJ_ENG_SPLITK = 2, /* tiled GEMM (mma.sync or wgmma), split-K */
    PJ_ENG_ROUTER = 3, /* hi + lo fused: GEMV form (m <= 32) or split-K form */
    PJ_ENG_CUBLAS = 4, /* always correct, always last */
    PJ_ENG_COUNT = 5,
} pj_eng_kind;

/* The largest m of the GEMV forms (gemv, gemvz, the router's GEMV form). */
#define PJ_ENG_MAX_GEMV_M 32

/* The cublas engine's last algo: 0 and 1 (the baseline's two), then up to
 * PJ_ENG_CUBLAS_MAX_ALGO - 1 cuBLASLt candidates (pj_eng_knobs.algo). */
#define PJ_ENG_CUBLAS_MAX_ALGO 49

/* Knobs of every engine in one struct; each engine reads the ones it has.
 * nw, ks, u and r must be >= 1 where the engine reads them. */
typedef struct pj_eng_knobs {
    uint8_t nw;   /* gemv/gemvz/router-gemv: streaming warps per row block (4, 8, 16;
                   * gemvz with xs = 4 also 1, 2) */
    uint8_t ks;   /* K split across CTAs (1..64) */
    uint8_t u;    /* loads in flight per lane: 32-k chunks (gemv) or 64-k tiles (gemvz) */
    uint8_t pipe; /* 1: next batch's loads issued before this batch's mma;
                   * 2 (gemv, router m <= 32): streamed through a shared-memory
                   * ring by bulk copies on a persistent grid (kernels/gemvs.cu);
                   * then nw = consumer warps (4, 8), u = ring slots (2..8),
                   * ks = K chunks per row (a unit is K / ks wide), rb = row
                   * blocks per unit, minb = 1: two CTAs per SM;
                   * 3 (gemv, m <= 8): as 2, weights from the layer's
                   * fragment-major copy (pj_eng_layer_init_tiles), one bulk
                   * copy per row block and unit; refused without the copy;
                   * 5 (gemv, gemvz, router m <= 32): each lane cp.asyncs its
                   * own pieces into a per-warp shared-memory ring of 4
                   * stages of u chunks/tiles (kernels/gemv.cuh, gemvz.cu);
                   * 4 (gemv, gemvz, router m <= 32): balanced persistent grid
                   * (kernels/gemvb.cu): every warp streams an equal run of
                   * 16 x 64 units; then u = units per batch (two batches in
                   * flight), ks = K panels (1, 2, 4), r = CTAs per SM.
                   * 6 (gemvz, m <= 8): the slab GEMV (kernels/gemvzs.cu; an
                   * experiment, slower than pipe 0/5 on the reference shapes):
                   * one contiguous slab of the layer's tiles per CTA, streamed
                   * by a producer thread's bulk copies into a ring of st
                   * stages (4, 6, 8; 0 = 6) of nw * u tiles; nw = consumer
                   * warps (8, 16), u = tiles per warp and stage (1, 2), r =
                   * CTAs per SM (1, 2), xs = how x comes (0 whole and first,
                   * 1 whole before the weights, 2 with each stage).
                   * 7 (gemvz, m <= 32): x in registers (kernels/gemvzq.cu):
                   * nw = 8 or 16 warps split the whole K (2..4 tiles of 64
                   * each, so K = nw * 64 * 2..4), each keeps its K range of
                   * x as mma A fragments and streams row blocks through a
                   * ring of st tiles (4, 6; 0 = 4); a persistent grid of r
                   * (1, 2) CTAs per SM, or with r = 0 a CTA per row block;
                   * ks = 1, xs = 0, u = 1.
                   * Tiled GEMM (splitk, router m > 32, kernels/tgemm.cu):
                   * 0 mma.sync, 1 the same with the L2 256-byte prefetch,
                   * 2 wgmma, 3 wgmma with one group in flight, 4 as 3 with
                   * the weight tiles copied by TMA, 5 wgmma over the layer's
                   * z12 tiles (A fragments rebuilt in registers; z12 layers
                   * with the by-tile exception table), 6 the same split into
                   * a producer warpgroup (copy, decode into a bf16 stage)
                   * and a consumer warpgroup (wgmma), 7 bf16 warp-specialised:
                   * a producer warp's TMA copies of both operands into a
                   * ring that BM / 64 consumer warpgroups read by wgmma */
    uint8_t minb; /* 1: register cap so two CTAs fit per SM (launch-bounds hint) */
    uint8_t xs;   /* gemvz: 1 = x staged in shared memory, 0 = read from global,
                   * 2 (pipe = 5) = x through the prefetch ring per tile,
                   * 3 (pipe = 5, m <= 8, nw 4/8, rb 1) = as 1, only the m
                   * real tokens staged (1 keeps 8 rows per n8 tile),
                   * 4 (pipe = 5, nw 1/2/4, u 1/2) = x of each batch copied
                   * once into a ring of the CTA and read by all r groups */
    uint8_t r;    /* gemvz: row blocks per CTA sharing x (1, 2, 4); pipe = 4: CTAs per SM */
    uint8_t tile; /* splitk/router-splitk: tile geometry 0..9 (rows x tokens,
                   * warps, ring depth: kernels/tgemm.cu's TG_TILES) */
    uint8_t algo; /* cublas: 0 = cublasGemmEx default, 1 = cublasLt heuristic's
                   * first choice, 2 + i = candidate i of the heuristic's list
                   * and of the same kernels with K split 2-16 ways
                   * (16-byte operands, split-K parts summed in fp32;
                   * engine.cu's lt_cands), picked by the tuner's timing */
    uint8_t rb;   /* gemv/gemvz: row blocks per warp sharing x fragments (0 or 1 = one) */
    uint8_t cl;   /* gemv/router (pipe 0/1, rb 1, ks 2..16), gemvz (pipe 5, rb 1,
                   * xs 0/2/4, ks 2..16), tiled GEMM (ks 2..16): 1 = the ks CTAs
                   * of a row block (tile) form a thread-block cluster and sum
                   * their partials in distributed shared memory, in rank
                   * order (deterministic) */
    uint8_t ts;   /* gemvz (ks 1, cl 0): tail split. The row groups past the
                   * largest multiple of the SM count are each split in K
                   * over ts CTAs (global split-K epilogue, deterministic),
                   * so that every SM streams nearly the same bytes; 0 or 1
                   * = off */
    uint8_t st;   /* gemvz (pipe 5, m > 8, xs 2, no cl or ts): stages of the
                   * prefetch ring, 2; 0 or 4 = the default 4. The shallower
                   * ring takes half the shared memory, so twice the CTAs
                   * share an SM. gemvz pipe 6: ring stages 4, 6, 8 (0 = 6) */
    /* cublas: an explicit cuBLASLt configuration instead of algo (round
     * 38: the heuristic's kernel family run with a tile, cluster shape,
     * custom option or K split the heuristic does not offer; found by
     * projd-bench --lt-survey). lt = 1 turns it on at the entry's own m;
     * the other m the dispatcher routes to the entry run algo (a
     * configuration can be far off away from the m it was timed at);
     * lid = the algorithm id, ltile = CUBLASLT_ALGO_CONFIG_TILE_ID, lst =
     * STAGES_ID, lsk = SPLITK_NUM (1..16; > 1 sums the parts in fp32
     * workspace), lcu = CUSTOM_OPTION, lcl = CLUSTER_SHAPE_ID, lsw =
     * CTA_SWIZZLING. The checker asks cuBLASLt whether the configuration
     * runs this shape (cublasLtMatmulAlgoCheck) and refuses it if not. */
    uint8_t lt, lid, lst, lsk, lcu, lcl, lsw;
    uint16_t ltile;
} pj_eng_knobs;

/* What the checker needs to know about the device (filled by the CUDA side
 * from cudaGetDeviceProperties). */
typedef struct pj_dev_limits {
    char name[64];
    int cc_major, cc_minor;
    int sm_count;
    int max_threads_per_block;
    int max_threads_per_sm;
    int regs_per_block;
    int regs_per_sm;
    size_t smem_per_block_optin; /* dynamic + static, after cudaFuncSetAttribute */
    size_t smem_per_sm;
    size_t l2_bytes;
} pj_dev_limits;

#define PJ_TUNE_NAME 64
#define PJ_TUNE_MAX  256

typedef struct pj_tune_entry {
    char layer[PJ_TUNE_NAME];
    /* The layer shape the entry was tuned for. pj_dispatch_choose takes 0
     * for any shape, but the daemon's loads refuse such an entry
     * (pj_tune_entry_has_shape): a table must name its shapes. */
    uint32_t n, k;
    /* The rows its requests computed when it was timed, at most n (the
     * tuner writes it for a row prefix: the layer's max_n below n); 0 =
     * not known (tables before session 60, and the tuner's entries of
     * all n rows). It picks no entry; the cuda backend captures the
     * layer's graphs at a prefix's rows too (pj_tune_rows_below), since the
     * layer's requests are likely to use them. */
    uint32_t rows;
    uint32_t m;
    pj_eng_kind eng;
    pj_eng_knobs knobs;
    float us;      /* measured time when tuned (informational) */
    float base_us; /* baseline time when tuned (informational) */
} pj_tune_entry;

typedef struct pj_tune_table {
    char device[64];
    int sm_count;
    /* "compute_capability": "9.0" (0.0 when the file has none: tables of
     * projd-bench before session 50). The nearest-table fallback takes
     * only a table of the device's own compute capability. */
    int cc_major, cc_minor;
    uint32_t n;
    pj_tune_entry e[PJ_TUNE_MAX];
} pj_tune_table;

/* A checker says whether an entry can run on this device: 0 = yes, else a
 * negative errno with a one-line reason in why. */
typedef int (*pj_tune_check_fn)(void *ctx, const pj_tune_entry *e, char *why, size_t whylen);

/* Receives one message per rejected entry (may be NULL). */
typedef void (*pj_tune_msg_fn)(void *ctx, const char *msg);

const char *pj_eng_name(pj_eng_kind k);
/* Engine by name; -1 when unknown. */
int pj_eng_from_name(const char *name);

/* Knobs as "nw=8,ks=1,u=2,pipe=1" (only the fields the engine uses). */
void pj_eng_knobs_str(pj_eng_kind k, const pj_eng_knobs *kn, char *buf, size_t len);
/* Parse "nw=8,ks=2,..." into *kn (fields not named stay as they are) for
 * engine eng (a pj_eng_kind; -1: any engine): a knob eng does not read, a
 * knob given twice and an empty item are refused. 0 or -EINVAL with a
 * message naming the bad field. */
int pj_eng_knobs_parse(const char *s, int eng, pj_eng_knobs *kn, char *err, size_t errlen);

/* Parse table JSON text into *t. Structural errors (not JSON, no "entries"
 * array, a top-level key given twice, more than 64 top-level keys, a
 * "device" that is not a string, an "sm_count" that is not a whole number
 * 0..4096, a malformed "compute_capability") fail the whole load: -EINVAL
 * and err; so do more than PJ_TUNE_MAX entries that parse (-ENOSPC).
 * Entries are counted, and their duplicates found, before check's
 * verdicts, so that a load with and one without check agree: the table is
 * not half applied. Bad entries (among them one with an unknown or
 * repeated key, a knob given twice, more than 64 knobs, a second entry of
 * one layer, shape and m) are dropped, each reported through msg (the
 * first 32, then a count), as is an unknown top-level key (ignored); check
 * (may be NULL) vets the rest. Returns the number of entries kept (>= 0). */
int pj_tune_parse(const char *json, size_t len, pj_tune_table *t, pj_tune_check_fn check,
                  void *check_ctx, pj_tune_msg_fn msg, void *msg_ctx, char *err, size_t errlen);

/* Read a file and parse it as above; errors name the file. */
int pj_tune_load(const char *path, pj_tune_table *t, pj_tune_check_fn check, void *check_ctx,
                 pj_tune_msg_fn msg, void *msg_ctx, char *err, size_t errlen);

/* Render the table as JSON (malloc'd, caller frees); NULL on ENOMEM. */
char *pj_tune_to_json(const pj_tune_table *t, const char *commit, const char *date);

/* Write the table as JSON to path: to path.tmp.XXXXXX first, then renamed over
 * path, so a failed write leaves what was there. 0, or -errno with err
 * naming the file and the reason. */
int pj_tune_save(const char *path, const pj_tune_table *t, const char *commit, const char *date,
                 char *err, size_t errlen);

/* Add or replace the entry for (e->layer, e->n, e->k, e->m). 0 or -ENOSPC. */
int pj_tune_put(pj_tune_table *t, const pj_tune_entry *e);

/* A pj_tune_check_fn (ctx unused): refuses an entry without its layer's
 * shape (n or k 0), which the daemon does not serve from. The one
 * refusal of the device's check (pj_eng_check_entry, which calls it) that
 * needs no device: --check-config uses it alone. */
int pj_tune_entry_has_shape(void *ctx, const pj_tune_entry *e, char *why, size_t whylen);

/* A loader message (pj_tune_msg_fn's msg) without its "tuning table: "
 * lead, for a caller that names the table itself. */
const char *pj_tune_msg_text(const char *msg);

/* Was e tuned for a layer of shape n x k? An n or k of 0, in the entry or
 * here, matches any. */
int pj_tune_entry_fits(const pj_tune_entry *e, uint32_t n, uint32_t k);

/* The rows ("rows") entries of layer (shape n x k) say they were timed
 * on, below `below` (the rows the caller's requests may use, its max_n):
 * each value once, ascending, the smallest cap of them in out. Returns how
 * many there are (more than cap when some did not fit). Entries without "rows"
 * say nothing: their rows are not known. */
uint32_t pj_tune_rows_below(const pj_tune_table *t, const char *layer, uint32_t n, uint32_t k,
                            uint32_t below, uint32_t *out, uint32_t cap);

/* The entry that serves (layer, m) for a layer of shape n x k: the entry of
 * that layer with the smallest m' >= m, else the one with the largest m'.
 * Entries tuned for another shape (n, k non-zero and different) are ignored,
 * and so are router entries of the other form (m' <= PJ_ENG_MAX_GEMV_M, the
 * GEMV, against m above it, the tiled GEMM, or the reverse). NULL when the
 * layer has none. */
const pj_tune_entry *pj_dispatch_choose(const pj_tune_table *t, const char *layer, uint32_t n,
                                        uint32_t k, uint32_t m);

/* The knobs entry e runs m with: its own at the entry's m. A cublas
 * entry's choices of cuBLASLt's are for its own shape and can be far off
 * at the other m routed to it, so there a named configuration (lt = 1)
 * is dropped (round 38's probe: o's m = 256 configuration is 19 % slower
 * at m = 140), and an algo of 2 or more (a place in the heuristic's list
 * for the entry's shape) runs as algo 0, cuBLAS's own choice for the m
 * (session 52: the H100's pooler m = 32 entry's algo ran m = 20 / 24 at
 * 0.85x the baseline, algo 0 at 0.996x); algo 0 and 1 stay. */
pj_eng_knobs pj_tune_entry_knobs(const pj_tune_entry *e, uint32_t m);

#ifdef __cplusplus
}
#endif

#endif
