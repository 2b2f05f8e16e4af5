/* model.h — the model loader: config + safetensors file -> each layer's
 * weights in its stored format (bf16, z12 or split), verified.
 *
 * Per layer the format follows the config's preference (pj_format_pref):
 *   auto:  BF16 tensor -> z12 when K % 64 == 0 and z12 stores fewer bytes
 *          than bf16 (too many exceptions: bf16, with a warning), else
 *          bf16; F32/F16 -> split
 *   bf16:  BF16 tensor -> bf16 (an F32/F16 tensor is an error: it would round)
 *   z12:   BF16 tensor with K % 64 == 0 -> z12 (anything else is an error)
 *   split: F32/F16 -> hi = bf16(w), lo = bf16(w - hi) (exact for F16);
 *          BF16 -> hi = w, lo = 0
 * A BF16 layer holding a non-finite weight stays bf16 under auto, and the
 * warn callback names the tensor and (row, col); forcing z12 on it is an
 * error. Every z12 layer is unpacked again after packing and compared bit
 * for bit with the source; a difference fails the load. The copy, the
 * non-finite scan, the pack and this check run on cfg->model.load_threads
 * threads (0: one per CPU the process may use, at most 64); the result is
 * the same for any number.
 *
 * The file is mapped only while loading: every array a layer points at is
 * the model's own copy, so the file may change or vanish once load returns.
 */
#ifndef PJ_MODEL_H
#define PJ_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config/config.h"
#include "daemon/hostmem.h"
#include "daemon/safetensors.h"
#include "kernels/refgemm.h"
#include "kernels/zfmt.h"

/* Largest N and K a layer may have (the wire protocol's and engines' limit). */
#define PJ_MODEL_MAX_DIM 65536u

typedef struct pj_model_layer {
    char name[PJ_CFG_NAME];
    char tensor[PJ_CFG_PATH];
    pj_weights w;   /* kernels/refgemm.h; arrays owned by the model */
    uint32_t max_n; /* rows a request may use (config, 0 -> N) */
    /* Config's graph_rows below max_n (ascending; one equal to max_n is
     * dropped): row counts the cuda backend captures graphs at as well. */
    uint32_t graph_rows[PJ_CFG_MAX_GRAPH_ROWS];
    uint32_t n_graph_rows;
    int src_dtype;          /* pj_st_dtype of the tensor in the file */
    size_t stored_bytes;    /* everything the stored format keeps */
    size_t bf16_bytes;      /* n * k * 2 */
    uint32_t z_base, n_exc; /* z12 only: window [z_base, z_base + 7], exceptions */
    double exc_rate;        /* n_exc / (n * k); 0 unless z12 */
    /* z12 only: the most exceptions one 16-row block holds, and that
     * block's first row. The z12 GEMV corrects a block's exceptions on one
     * warp, so a block far above the others is its slowest CTA
     * (kernels/NOTES.md, round 36). */
    uint32_t blk_exc_max, blk_exc_max_row;
    char engine[PJ_CFG_NAME];   /* forced engine from config, "" if none */
    char tuned_as[PJ_CFG_NAME]; /* the table's layer name for it (config; "" = name) */
    /* The tensor's bytes as the file stores them, digested (daemon/digest.h):
     * what a client compares with the weights it loaded itself. */
    uint32_t digest;
} pj_model_layer;

/* Private per-layer storage (what pj_model_layer.w points into). */
typedef struct pj_model_store {
    uint16_t *a, *b; /* bf16: a; split: a = hi, b = lo */
    pj_z12 z;        /* z12 */
} pj_model_store;

typedef struct pj_model {
    char path[PJ_CFG_PATH];
    /* path made absolute (realpath at the load), for those who read it
     * elsewhere (STATS model.path: a client in another working directory);
     * path itself when it cannot be resolved or does not fit. */
    char abs_path[PJ_CFG_PATH];
    uint32_t n_layers;
    pj_model_layer layers[PJ_CFG_MAX_LAYERS];
    double load_ms, convert_ms; /* reading + copying; packing + splitting + verifying */
    uint64_t file_bytes;        /* size of the safetensors file */
    uint32_t load_threads;      /* threads the load used (config model.load_threads) */
    /* z12 packs done (each verified). An auto layer whose exception count
     * shows z12 would be larger than bf16 is stored bf16 without one. */
    uint32_t z12_packs;
    pj_model_store store[PJ_CFG_MAX_LAYERS]; /* private: use layers[].w */
} pj_model;

/* Receives one line per real problem that does not stop the load. */
typedef void (*pj_model_warn_fn)(void *ctx, const char *msg);

/* Load cfg->model.path with cfg's layer list. Owns: *out (pj_model_free).
 * warn may be NULL. Returns 0; -EINVAL (bad file, missing tensor, wrong
 * dtype/rank/size, impossible format, max_n > N, failed verification),
 * -ENOMEM, or -errno from opening the file. err: one line naming the file
 * and the layer. */
int pj_model_load(const pj_config *cfg, pj_model **out, pj_model_warn_fn warn, void *ctx, char *err,
                  size_t errlen);

/* pj_model_load that also hands over the safetensors file it read (file
 * != NULL: *file, pj_st_close it; NULL on failure), for a caller that wants
 * the same file's header (its metadata) without opening the path again,
 * where another file may have been put since. */
int pj_model_load_file(const pj_config *cfg, pj_model **out, pj_st_file **file,
                       pj_model_warn_fn warn, void *ctx, char *err, size_t errlen);

/* Called before layer `index` (0-based) of `count` is loaded; a non-zero
 * return stops the load: it fails with -ECANCELED, err naming the layer it
 * stopped before, and the layers loaded so far are freed. */
typedef int (*pj_model_progress_fn)(void *ctx, uint32_t index, uint32_t count, const char *layer);

/* pj_model_load_file with a progress callback (may be NULL; it gets the
 * same ctx as warn). */
int pj_model_load_progress(const pj_config *cfg, pj_model **out, pj_st_file **file,
                           pj_model_warn_fn warn, pj_model_progress_fn progress, void *ctx,
                           char *err, size_t errlen);

/* What pj_model_load decides from the file's header alone, without reading
 * or converting any weight (for --check-config): the file opens and is a
 * valid safetensors file, and every layer's tensor is there with a shape,
 * dtype, max_n and format the load takes. Same returns and messages as
 * pj_model_load; what only the weights show (a non-finite value under
 * format z12, a failed verification, memory) is left to the load. */
int pj_model_check(const pj_config *cfg, char *err, size_t errlen);

/* Host memory. The loaded layers are private copies (above), held until
 * the daemon stops: at least 2 bytes per weight for bf16, 1.5 for z12, 4
 * for split, and beside them the layer being converted (a z12 layer's bf16
 * copy, an F32 / F16 layer's floats). Before it reads any weight, the load
 * adds that up from the file's header and compares it with the memory the
 * process may take (daemon/hostmem.h: MemAvailable and SwapFree, and the
 * limit of its memory cgroup, a unit's MemoryMax= or a container's, where
 * that is lower): more than memory and swap together is refused (-ENOMEM,
 * err with the figures and what binds them), since the load would
 * otherwise be killed by the kernel part way with no word; more than the
 * memory alone is a warning (the load will swap), and so is more than a
 * cgroup's memory.high leaves (the kernel throttles the load there, a
 * unit's MemoryHigh=). Before each later layer
 * the layers left are checked again against the memory then left: what
 * another program took meanwhile is refused with a message instead of a
 * kill. (Daemons starting at one moment, projd@0..7 at boot, take turns
 * at their loads, daemon/loadturn.h, so each one's check sees the others'
 * copies.)
 * The figures are lower bounds. Where /proc/meminfo cannot be read there
 * is no check, and PROJD_HOST_MEM_CHECK=0 skips it (a file system cache
 * the kernel does not count as available, as ZFS's, makes it refuse what
 * would fit). pj_model_check (--check-config) does not take it: run beside
 * the serving daemon it would count that daemon's copies against the
 * next. */
typedef struct pj_model_host_need {
    uint64_t held;      /* the layers' stored bytes, at least */
    uint64_t transient; /* the largest layer's conversion copy */
} pj_model_host_need;

/* The bytes cfg's layers need from the header of st (layers the load would
 * refuse count nothing: the load says why). */
void pj_model_host_need_of(const pj_config *cfg, const pj_st_file *st, pj_model_host_need *out);

/* The decision above for need against h: 0 (fits), 1 (a warning in err:
 * it fits only with swap, or only past a cgroup's memory.high) or -ENOMEM (err says what the layers
 * need, what is free, what binds it, and what to do). */
int pj_model_host_check(const pj_model_host_need *need, uint32_t n_layers, const pj_hostmem *h,
                        const char *path, char *err, size_t errlen);

/* Tests: read the host memory figures under root (pj_hostmem_read's)
 * instead of the system's own (NULL). */
void pj_model_set_host_root(const char *root);

/* The root the loader reads them under (NULL: the system's), for reports
 * that show the figures the load checks against (projctl inspect). */
const char *pj_model_host_root(void);

/* Index of the layer called name, or -1. */
int pj_model_find(const pj_model *m, const char *name);

/* 1 when a z12 layer's busiest 16-row block (blk_exc_max) is heavy: more
 * exceptions than the z12 GEMV's first per-block slot table holds (64; the
 * rest come a round later from the overflow table) and more than three
 * times the other blocks' mean. That block's CTA gathers and adds its
 * exceptions on one warp and finishes last, by more the more tokens a
 * request has (the served reference qkv_gate's block of 117: the H100
 * table's m = 16 entry 16.2 us on even blocks, 19.5 us there;
 * kernels/NOTES.md, session 54), so a table tuned on other weights may
 * pick the z12 GEMV where cuBLAS is faster for this layer. 0 otherwise. */
int pj_model_layer_heavy_block(const pj_model_layer *L);
/* The last row of the busiest block (blk_exc_max_row + 15, or the layer's
 * last row), and the exceptions per 16-row block on average: what the
 * reports of a heavy block print beside blk_exc_max. */
uint32_t pj_model_layer_busiest_block_end(const pj_model_layer *L);
double pj_model_layer_block_exc_mean(const pj_model_layer *L);

/* Frees every layer's arrays and m; NULL is fine. */
void pj_model_free(pj_model *m);

#endif
