/* engupload.h — one layer's weights onto the device as a pj_eng_layer: the
 * stored format the engines read (bf16; split hi + lo; z12 tiles, block
 * offsets and exceptions) plus, when asked, a z12 layer's unpacked bf16 copy
 * for the engines that read bf16 (cuBLAS, gemv, splitk). Shared by the
 * daemon (daemon/backend_cuda.c) and projload --compare
 * (client/loadgpu_cuda.c), so both run the engines on identical memory.
 * Host code calling CUDA: built into libpjcuda.a.
 */
#ifndef PJ_ENGUPLOAD_H
#define PJ_ENGUPLOAD_H

#include <stddef.h>

#include "kernels/engine.h"
#include "kernels/refgemm.h"

/* The device arrays behind one uploaded layer (NULL where the format has
 * none) and what they cost. */
typedef struct pj_engup_mem {
    void *w, *lo, *tiles, *blk, *exc; /* w: bf16, split hi or z12's bf16 copy */
    void *zt_off, *zt_ent;            /* z12: the exceptions by tile (engine.h) */
    size_t stored_bytes;              /* the stored format on the device */
    size_t bf16_copy_bytes;           /* a z12 layer's bf16 copy (0 when not made) */
} pj_engup_mem;

/* Uploads w (a layer called name) and fills L's name, fmt, N, K, ldw, w, lo
 * and z12 fields (with the by-tile exception table where the exceptions
 * allow one: pj_z12_tile_exc) with the device pointers, and *mem with the
 * arrays it owns
 * (free them with pj_engup_free). An empty array (z12 without exceptions)
 * gets a valid 16-byte, zero-filled allocation. want_bf16_copy: for a z12
 * layer, also upload the unpacked bf16 matrix as L->w (ignored otherwise),
 * unpacked on up to `threads` threads (0: every CPU this process may use).
 * Returns 0; -ENOMEM when host or device memory runs out or a copy fails
 * ("layer NAME: uploading WHAT (BYTES bytes): cudaErrorX: text"), or -EINVAL
 * for an unknown format; on error *mem is freed and zeroed. */
int pj_engup_layer(const char *name, const pj_weights *w, int want_bf16_copy, unsigned threads,
                   pj_eng_layer *L, pj_engup_mem *mem, char *err, size_t errlen);

/* For a z12 layer uploaded without its bf16 copy: unpack and upload it now
 * as L->w (mem owns it; a no-op for other formats or when there is one).
 * 0 or -ENOMEM as pj_engup_layer, leaving the layer as it was. */
int pj_engup_add_bf16_copy(const char *name, const pj_weights *w, unsigned threads, pj_eng_layer *L,
                           pj_engup_mem *mem, char *err, size_t errlen);

/* The by-tile exception table of a z12 layer (pj_z12_tile_exc), made on the
 * host and uploaded: *off and *ent are device arrays the caller frees
 * (cudaFree). 0; -ENOTSUP when the layer's entries do not allow a table
 * (*off, *ent NULL; the tiled GEMM's z12 forms are then unavailable);
 * -ENOMEM. err names the layer. */
int pj_engup_tile_exc(const char *name, const pj_z12 *z, void **off, void **ent, char *err,
                      size_t errlen);

/* Frees mem's device arrays (any may be NULL) and zeroes it. */
void pj_engup_free(pj_engup_mem *mem);

#endif
