/* engupload_cuda.c — see engupload.h. */
#include "kernels/engupload.h"

#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/parfor.h"
#include "kernels/zfmt.h"

/* One array: a new device allocation in *dst holding src's bytes (zeros when
 * src is NULL). 0 bytes still allocate 16 so the engines get a valid pointer
 * for an empty array (a z12 layer without exceptions). */
static int up(void **dst, const void *src, size_t bytes, const char *what, const char *layer,
              char *err, size_t errlen)
{
    *dst = NULL;
    if (bytes == 0)
        bytes = 16;
    cudaError_t ce = cudaMalloc(dst, bytes);
    if (ce == cudaSuccess && src)
        ce = cudaMemcpy(*dst, src, bytes, cudaMemcpyHostToDevice);
    else if (ce == cudaSuccess)
        ce = cudaMemset(*dst, 0, bytes);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "layer %s: uploading %s (%zu bytes): %s: %s", layer, what, bytes,
                 cudaGetErrorName(ce), cudaGetErrorString(ce));
        cudaGetLastError(); /* a failed allocation is not sticky: clear it */
        if (*dst)
            cudaFree(*dst);
        *dst = NULL;
        return -ENOMEM;
    }
    return 0;
}

int pj_engup_tile_exc(const char *name, const pj_z12 *z, void **off, void **ent, char *err,
                      size_t errlen)
{
    *off = *ent = NULL;
    uint32_t *h_off, *h_ent;
    char why[160];
    int rc = pj_z12_tile_exc(z, &h_off, &h_ent, why, sizeof why);
    if (rc) {
        snprintf(err, errlen, "layer %s: %s", name, why);
        return rc;
    }
    const size_t ntiles = (size_t)z->n_pad / 16 * (z->k / 64);
    rc = up(off, h_off, (ntiles + 1) * 4, "z12 tile offsets", name, err, errlen);
    if (!rc)
        rc = up(ent, h_ent, (size_t)z->n_exc * 4, "z12 tile exceptions", name, err, errlen);
    if (rc) {
        cudaFree(*off);
        *off = NULL;
    }
    free(h_off);
    free(h_ent);
    return rc;
}

void pj_engup_free(pj_engup_mem *mem)
{
    cudaFree(mem->w);
    cudaFree(mem->lo);
    cudaFree(mem->tiles);
    cudaFree(mem->blk);
    cudaFree(mem->exc);
    cudaFree(mem->zt_off);
    cudaFree(mem->zt_ent);
    memset(mem, 0, sizeof *mem);
}

/* A z12 layer's matrix unpacked to bf16 and uploaded as mem->w. */
static int bf16_copy(const char *name, const pj_weights *w, unsigned threads, pj_engup_mem *mem,
                     char *err, size_t errlen)
{
    const size_t mat = (size_t)w->n * w->k * 2;
    uint16_t *h = malloc(mat);
    if (!h) {
        snprintf(err, errlen, "layer %s: out of memory unpacking z12", name);
        return -ENOMEM;
    }
    /* Most of an upload's time on one core (the copy itself runs at
     * several GB/s): the rows split over the CPUs. */
    pj_z12_unpack_mt(w->z, h, w->k, threads ? threads : pj_cpu_count());
    int rc = up(&mem->w, h, mat, "bf16 copy", name, err, errlen);
    free(h);
    if (!rc)
        mem->bf16_copy_bytes = mat;
    return rc;
}

int pj_engup_add_bf16_copy(const char *name, const pj_weights *w, unsigned threads, pj_eng_layer *L,
                           pj_engup_mem *mem, char *err, size_t errlen)
{
    if (w->fmt != PJ_FMT_Z12 || mem->w)
        return 0;
    int rc = bf16_copy(name, w, threads, mem, err, errlen);
    if (!rc)
        L->w = mem->w;
    return rc;
}

int pj_engup_layer(const char *name, const pj_weights *w, int want_bf16_copy, unsigned threads,
                   pj_eng_layer *L, pj_engup_mem *mem, char *err, size_t errlen)
{
    memset(mem, 0, sizeof *mem);
    snprintf(L->name, sizeof L->name, "%s", name);
    L->table_name[0] = 0;
    L->fmt = w->fmt;
    L->N = w->n;
    L->K = w->k;
    L->ldw = w->k;
    size_t mat = (size_t)w->n * w->k * 2;
    int rc = 0;
    switch (w->fmt) {
    case PJ_FMT_BF16:
        rc = up(&mem->w, w->bf16, mat, "bf16 weights", name, err, errlen);
        mem->stored_bytes = mat;
        break;
    case PJ_FMT_SPLIT:
        rc = up(&mem->w, w->hi, mat, "hi weights", name, err, errlen);
        if (!rc)
            rc = up(&mem->lo, w->lo, mat, "lo weights", name, err, errlen);
        mem->stored_bytes = 2 * mat;
        break;
    case PJ_FMT_Z12: {
        const pj_z12 *z = w->z;
        size_t blk = ((size_t)z->n_pad / 16 + 1) * sizeof(uint32_t);
        size_t exc = (size_t)z->n_exc * sizeof(pj_z12_exc);
        rc = up(&mem->tiles, z->tiles, z->tiles_bytes, "z12 tiles", name, err, errlen);
        if (!rc)
            rc = up(&mem->blk, z->blk_exc, blk, "z12 block offsets", name, err, errlen);
        if (!rc)
            rc = up(&mem->exc, exc ? z->exc : NULL, exc, "z12 exceptions", name, err, errlen);
        mem->stored_bytes = z->tiles_bytes + blk + exc;
        if (!rc) {
            /* Derived, not stored: a layer whose entries do not allow it
             * (-ENOTSUP) simply has no z12 tiled GEMM. */
            int trc = pj_engup_tile_exc(name, z, &mem->zt_off, &mem->zt_ent, err, errlen);
            if (trc && trc != -ENOTSUP)
                rc = trc;
        }
        L->z_base = z->base;
        L->z_n_pad = z->n_pad;
        L->z_n_exc = z->n_exc;
        if (!rc && want_bf16_copy)
            rc = bf16_copy(name, w, threads, mem, err, errlen);
        break;
    }
    default:
        snprintf(err, errlen, "layer %s: unknown format %d", name, (int)w->fmt);
        rc = -EINVAL;
        break;
    }
    if (rc) {
        pj_engup_free(mem);
        return rc;
    }
    L->w = mem->w;
    L->lo = mem->lo;
    L->z_tiles = mem->tiles;
    L->z_blk_exc = mem->blk;
    L->z_exc = mem->exc;
    L->zt_off = mem->zt_off;
    L->zt_ent = mem->zt_ent;
    return 0;
}
