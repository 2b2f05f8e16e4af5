/* engcheck.h — validation of engines against the reference, shared by the
 * GPU tests, the tuner and the benchmark (every variant is checked here
 * before it may be timed or chosen).
 *
 * A test layer is generated from a seed (realistic weights: per-row
 * log-normal scales, rare large outliers, exact zeros and tiny values that
 * fall outside any exponent window), stored in every format an engine may
 * read (bf16; z12 when k % 64 == 0; a split layer's hi and lo), uploaded,
 * and checked against the device reference (benchk.h), which itself is
 * checked bit for bit against the CPU reference (refgemm.h) on sampled rows.
 */
#ifndef PJ_ENGCHECK_H
#define PJ_ENGCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/benchk.h"
#include "kernels/engine.h"

/* Seed flag: the generated weights hold 5 % zeros, so a z12 layer's
 * exceptions (zeros lie outside every window but the lowest) overflow every
 * engine's shared-memory copy of them and take the global-memory paths. */
#define PJ_CHK_SEED_ZEROS (1ull << 40)

/* Weight generator: w (n x k bf16) from seed (PJ_CHK_SEED_ZEROS honoured). */
void pj_chk_gen_bf16(uint64_t seed, uint32_t n, uint32_t k, uint16_t *w);
/* fp32 weights (the router's source). */
void pj_chk_gen_f32(uint64_t seed, uint32_t n, uint32_t k, float *w);
/* x (m x k, row stride ldx): kind 0 normal, 1 with outliers (1 % of values
 * x 64, a few columns x 512, mixed signs). */
void pj_chk_gen_x(uint64_t seed, int kind, uint32_t m, uint32_t k, size_t ldx, uint16_t *x);

typedef struct pj_chk_layer {
    pj_eng_layer L; /* device view: bf16 copy always, z12 when packed */
    uint16_t *h_w;  /* host bf16 (split: hi) */
    uint16_t *h_lo; /* split: lo */
    pj_z12 z;       /* host z12 (when fmt is Z12) */
    void *d_w, *d_lo, *d_tiles, *d_blk, *d_exc, *d_zto, *d_zte;
} pj_chk_layer;

/* Make a layer of n x k in format fmt (PJ_FMT_BF16, PJ_FMT_Z12 = bf16 + z12,
 * PJ_FMT_SPLIT = hi + lo from fp32). 0 or -errno with err. */
int pj_chk_layer_make(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                      uint64_t seed, char *err, size_t errlen);
/* The same from given host weights (n x k bf16, row stride k; split: w is
 * hi and lo the low part), copied: a model's own weights. */
int pj_chk_layer_from(pj_chk_layer *cl, const char *name, uint32_t n, uint32_t k, pj_format fmt,
                      const uint16_t *w, const uint16_t *lo, char *err, size_t errlen);
void pj_chk_layer_free(pj_chk_layer *cl);

/* Everything a check needs on one stream, sized for m <= max_m, n <= max_n,
 * k <= max_k. */
typedef struct pj_chk_ctx {
    cudaStream_t s;
    pj_eng_stream *es;
    pj_dev_limits lim;
    uint32_t max_m, max_n, max_k;
    uint16_t *dx, *dy, *dy2; /* x, y, second y (determinism, one-hot) */
    float *dref, *dsabs;
    uint16_t *dx1;         /* one-hot x */
    float *dref1, *dsabs1; /* its reference */
    int have_onehot;       /* dx1/dref1 match cur */
    void *dcmp;
    uint16_t *hx, *hy, *hy2;
    /* what dx/dref hold now */
    const pj_chk_layer *cur;
    uint32_t cur_m, cur_n;
    int cur_kind;
    uint64_t cur_seed;
} pj_chk_ctx;

int pj_chk_ctx_init(pj_chk_ctx *c, uint32_t max_m, uint32_t max_n, uint32_t max_k, char *err,
                    size_t errlen);
void pj_chk_ctx_free(pj_chk_ctx *c);

/* Generate x (kind, seed) for (layer, m, n), upload, compute the device
 * reference. When cpu_rows > 0, also compare that many sampled rows (first,
 * last, rows holding z12 exceptions, spread) with the CPU reference bit for
 * bit; *cpu_mismatch gets the count of differing outputs (must be 0).
 * 0 or -errno. */
int pj_chk_prepare(pj_chk_ctx *c, const pj_chk_layer *cl, uint32_t m, uint32_t n, int kind,
                   uint64_t seed, uint32_t cpu_rows, unsigned long long *cpu_mismatch, char *err,
                   size_t errlen);

/* The call of the first n rows of layer L at m tokens from x to y (row
 * strides K and n): how the checker, the GPU tests and the benchmark call
 * an engine on their own buffers. */
pj_eng_call pj_chk_call(const pj_eng_layer *L, pj_eng_ws *ws, const uint16_t *x, uint16_t *y,
                        uint32_t m, uint32_t n);

typedef struct pj_chk_result {
    int ok;               /* every check passed */
    pj_bk_cmp cmp;        /* against the reference */
    int deterministic_ok; /* -1 not tested, 0 differs, 1 same bits */
    int onehot_ok;        /* -1 not tested, 0 failed, 1 bit-exact */
    unsigned long long onehot_mismatch;
    char why[200]; /* first failure */
} pj_chk_result;

/* Run the engine on the prepared (layer, m, n) with ws and check it: poison,
 * launch, compare; then (deterministic engines) run again and compare bits;
 * then (gemvz) one-hot inputs on exception columns must give the weights'
 * bits. Leaves dx/dref as prepared (one-hot uses dy2 and its own x).
 * 0 when the run itself worked (see res->ok for the verdict), -errno on a
 * CUDA failure. */
int pj_chk_run(pj_chk_ctx *c, pj_eng_ws *ws, pj_eng_kind k, const pj_eng_knobs *kn,
               pj_chk_result *res);

#endif
