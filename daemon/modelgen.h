/* modelgen.h — the deterministic model generator.
 *
 * Writes a safetensors file holding the reference model (the five projection
 * shapes the scoring benchmark uses, bench/README.md; the design brief they
 * come from is not in this repository) or a small model with the same five
 * layer kinds, for tests, with weights
 * that look like a trained model's to the 12-bit format: per-row log-normal
 * scales, gaussian values, ~0.01 % outliers 20-50x the row scale, ~0.005 %
 * exact zeros, and a few dozen tiny values (~1e-30) per big layer that no
 * 16-exponent window reaches. Every value is finite.
 *
 * Same seed and preset -> the same bytes, on any IEEE-754 machine: the
 * generator uses its own PRNG (splitmix64), its own log/exp (no libm), and
 * seeds each row independently, so rows can be made in any order.
 */
#ifndef PJ_MODELGEN_H
#define PJ_MODELGEN_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/safetensors.h"

enum {
    PJ_MODELGEN_REFERENCE = 0, /* the five reference layers, ~193 MB */
    PJ_MODELGEN_SMALL = 1,     /* same five kinds, small shapes, for CI */
};

/* Called after each chunk written: done and total count data bytes. */
typedef void (*pj_modelgen_progress_fn)(void *ctx, const char *tensor, uint64_t done,
                                        uint64_t total);

typedef struct pj_modelgen_opts {
    uint64_t seed;
    int preset;                       /* PJ_MODELGEN_* */
    pj_modelgen_progress_fn progress; /* optional */
    void *progress_ctx;
} pj_modelgen_opts;

/* One generated layer. */
typedef struct pj_modelgen_layer {
    const char *name;   /* layer name in the default config */
    const char *tensor; /* tensor name in the file */
    uint32_t n, k;
    pj_st_dtype dtype; /* BF16, or F32 for the router */
    double scale;      /* median row scale */
    uint32_t n_tiny;   /* forced tiny values */
    uint32_t n_zero;   /* forced exact zeros (on top of the random ones) */
} pj_modelgen_layer;

/* The layers of a preset, in file order; NULL (count 0) for an unknown one. */
const pj_modelgen_layer *pj_modelgen_layers(int preset, size_t *count);

/* "reference" / "small" / NULL. */
const char *pj_modelgen_preset_name(int preset);
/* Name -> preset; -1 when unknown. */
int pj_modelgen_preset_from_name(const char *name);

/* Generate rows [r0, r1) of layer `layer` of o's preset into out ((r1 - r0)
 * * k elements of the layer's dtype: uint16_t bf16 bits or float). Exactly
 * the values pj_modelgen_write puts in the file. Returns 0 or -EINVAL (bad
 * preset, layer or row range). */
int pj_modelgen_rows(const pj_modelgen_opts *o, size_t layer, uint32_t r0, uint32_t r1, void *out);

/* Write the model to path (atomically: temporary file + rename). Metadata
 * records generator, seed and preset. Prints nothing. Returns 0, -EINVAL,
 * -ENOMEM or -errno from writing; err says which and where. */
int pj_modelgen_write(const char *path, const pj_modelgen_opts *o, char *err, size_t errlen);

#endif
