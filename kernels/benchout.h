/* benchout.h — projd-bench's arithmetic and its result files, apart from the
 * GPU: the median of a shape's repetitions, the sums per load, the score with
 * its paired bootstrap interval, and the four files of a run (bench.json,
 * bench.md, samples.csv, speedups.dat). The GPU side
 * (kernels/projd_bench_gpu_main.c) times the shapes and fills pj_bo_shape;
 * what it then computes and writes is here, where a test without a GPU can
 * check it (tests/test_benchout.c).
 *
 * Files are written whole: each under a temporary name in --out's folder,
 * renamed over its target once every byte is written and the file closed
 * without error. A run that fails part way (a full disk, a quota) leaves no
 * half-written bench.json, and it says which file and why. */
#ifndef PJ_BENCHOUT_H
#define PJ_BENCHOUT_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "config/config.h"

#define PJ_BO_FLOORS    8 /* read-floor variants timed per shape (benchk.h) */
#define PJ_BO_MAX_LOADS PJ_CFG_MAX_SHAPES
#define PJ_BO_BOOTS     1000 /* bootstrap resamples of the score */

/* One timed shape (layer, m). */
typedef struct pj_bo_shape {
    char layer[PJ_CFG_NAME];
    uint32_t m, n, k;
    char engine[16]; /* the engine timed */
    char chosen[16]; /* the engine the ladder chose (engine, unless it fell back) */
    char knobs[96];  /* the timed engine's knobs */
    int step;        /* the ladder's step (engine.h: 1 table, 2 default, 3 cuBLAS) */
    int valid;       /* chosen passed validation; else why, and engine is cuBLAS */
    char why[200];
    int base_lt; /* the baseline's path: 1 cublasLt's heuristic, 0 cublasGemmEx */
    int lt_plan; /* cuBLASLt had a plan (else its column ran cublasGemmEx too) */
    float base_us, ours_us, gemmex_us, lt_us; /* medians */
    uint64_t bytes;                           /* what the timed engine reads */
    float floor_us;                           /* the fastest read of those bytes */
    float floor_var[PJ_BO_FLOORS];            /* every read variant's median */
    double rel_err;                           /* against the reference, before timing */
    int after_ok;                             /* y right after the timed replays */
    char after_why[160];
    const float *tb, *to; /* the run's samples, baseline and ours: reps each, in order */
} pj_bo_shape;

/* The run: what was timed, where, and how. */
typedef struct pj_bo_run {
    char device[256];
    int sm_count;
    char date[32];                       /* UTC, ISO 8601 */
    const char *commit, *table, *config; /* NULL: not given */
    int cuda_driver, cuda_runtime, cublas_version;
    int reps;
    uint64_t seed;      /* the generated weights' (--seed) */
    int primed;         /* each timed op ran once untimed first */
    int flush_kind;     /* pj_bk_flush's kind, 0..4 */
    int flush_carveout; /* --flush-carveout's percentage, -1 when not given */
    int ingraph;        /* events inside the graphs (else around the launch) */
    int nl, nm;         /* layers and loads: shapes[mi * nl + li] */
    uint32_t m[PJ_BO_MAX_LOADS];
    int own_model; /* --config's model: loads named by m alone */
} pj_bo_run;

typedef struct pj_bo_score {
    double base_sum[PJ_BO_MAX_LOADS], ours_sum[PJ_BO_MAX_LOADS], speedup[PJ_BO_MAX_LOADS];
    double score, lo, hi; /* geometric mean of the loads' speedups; 95 % interval */
} pj_bo_score;

/* The median of v[0..n) (the mean of the middle two when n is even); scratch
 * holds n floats. n >= 1. */
float pj_bo_median(const float *v, int n, float *scratch);

/* The sums per load (the layers' medians), their speedups, the score, and
 * its interval: boots resamples, each drawing every shape's repetitions in
 * pairs (baseline and ours of one round go together, so what moved both
 * sides at once moves neither's ratio), with the xorshift64 state seed
 * (nonzero). 0, or -EINVAL (no shapes, reps < 1, boots < 40, seed 0),
 * -ENOMEM. */
int pj_bo_score_run(const pj_bo_run *run, const pj_bo_shape *sh, int boots, uint64_t seed,
                    pj_bo_score *sc);

/* Load mi's name: "decode M" (M <= 32) and "verify M" for the reference
 * model, "m M" for a configured one. */
void pj_bo_load_name(const pj_bo_run *run, int mi, char *out, size_t len);

/* Removes an earlier run's result files from the folder (dirfd), so that a
 * run that dies leaves none of them to be read as its own. 0, or -errno
 * with err naming the file (dir is the folder's name for messages). */
int pj_bo_clear(int dirfd, const char *dir, char *err, size_t errlen);

/* Writes the four files into the folder, each whole (see above). 0, or
 * -errno with err naming the file, the step and the cause; files written
 * before the failure stay. */
int pj_bo_write(int dirfd, const char *dir, const pj_bo_run *run, const pj_bo_shape *sh,
                const pj_bo_score *sc, char *err, size_t errlen);

/* The tables the run prints last (per shape, per load, the SCORE line). */
void pj_bo_print(FILE *f, const pj_bo_run *run, const pj_bo_shape *sh, const pj_bo_score *sc);

#endif
