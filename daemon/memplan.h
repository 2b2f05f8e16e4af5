/* memplan.h — the device memory a model's weights take on the cuda backend,
 * known before anything is uploaded.
 *
 * The upload (kernels/engupload_cuda.c) allocates, per layer: bf16 and
 * split weights as stored; a z12 layer's tiles, block offsets, exception
 * entries and its per-tile exception tables; and, for a z12 layer that an
 * engine other than the z12 GEMV may serve, a bf16 copy of the matrix. That
 * copy is the big term: every z12 layer keeps one when the daemon serves
 * m above the z12 GEMV's limit (shapes.max_m > PJ_ENG_MAX_GEMV_M, 32), or
 * when a forced engine reads bf16. The sum here is a lower bound of what
 * the upload takes (allocation rounding, a table's fragment-major copies
 * and the lanes' buffers come on top), so a start whose weights alone
 * exceed the device's free memory is refused before it uploads anything,
 * with what would make it fit, instead of failing at some layer's
 * cudaMalloc minutes later. `projctl inspect` prints the same figures.
 * The copy rule is the backend's own (pj_memplan_copies_bf16, which its
 * upload calls); copies the backend adds for a layer no z12 GEMV form can
 * take at some m are not foreseen (none of the reference shapes). */
#ifndef PJ_MEMPLAN_H
#define PJ_MEMPLAN_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/model.h"

typedef struct pj_memplan {
    uint64_t stored;        /* the stored formats as uploaded */
    uint64_t bf16_copies;   /* the z12 layers' bf16 copies this configuration keeps */
    uint64_t copies_decode; /* of them, those kept at shapes.max_m <= 32 too (forced engines) */
    uint32_t z12_layers;    /* layers stored as z12 */
    uint32_t copied;        /* of them, those that keep a copy */
    uint32_t max_m;         /* the shapes.max_m it was planned for */
} pj_memplan;

/* The plan for model m served with shapes.max_m = max_m; force_engine is
 * PROJD_FORCE_ENGINE's engine name (no knobs; NULL or "" for none), which
 * wins over a layer's own "engine", as in the backend. */
void pj_memplan_weights(const pj_model *m, uint32_t max_m, const char *force_engine,
                        pj_memplan *out);

/* Does a z12 layer keep a bf16 copy: when the daemon serves m above the
 * z12 GEMV's limit (max_m > PJ_ENG_MAX_GEMV_M), or when the engine forced
 * on it ("name[:knobs]": PROJD_FORCE_ENGINE's, else the layer's config
 * "engine"; NULL or "" for none) is not the z12 GEMV (gemvz). */
int pj_memplan_copies_bf16(uint32_t max_m, const char *forced);

/* 0 when the weights fit in free_bytes; else -ENOMEM, and err says how
 * much they need, how much is free, and what would make them fit (the
 * bf16 copies dropped by shapes.max_m <= 32, when that is enough). */
int pj_memplan_check(const pj_memplan *p, uint64_t free_bytes, char *err, size_t errlen);

#endif
