/* benchk.h — GPU helpers of the benchmark, the tuner and the GPU tests:
 * the exact reference projection on the device, the output comparison,
 * poison fill, the L2 flush and the read-floor kernel.
 *
 * The reference kernel computes refgemm.h's definition exactly (fp32 sum in
 * increasing k, product and sum each rounded, x*hi then x*lo for split
 * layers), so its bf16 result must equal pj_ref_project's bit for bit; the
 * tests check that on sampled rows and then use it for every output.
 */
#ifndef PJ_BENCHK_H
#define PJ_BENCHK_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ref[i * n + r] = fp32 sum, sabs[i * n + r] = sum |x w| (for the error
 * bound), for i < m, r < n. w: bf16 n x k (row stride ldw); lo: NULL or the
 * split layer's second half. */
int pj_bk_ref(cudaStream_t s, const uint16_t *w, const uint16_t *lo, size_t ldw, uint32_t k,
              const uint16_t *x, size_t ldx, uint32_t m, uint32_t n, float *ref, float *sabs);

/* Outcome of comparing an engine's y against the reference. */
typedef struct pj_bk_cmp {
    unsigned long long bad;       /* outside the bound */
    unsigned long long unwritten; /* still the poison pattern */
    unsigned long long mismatch;  /* bits differ from bf16(ref) (informational) */
    double err2, ref2;            /* sum of squared errors, of squared ref */
    float worst;                  /* max |err| / bound */
    unsigned long long first_bad; /* index i * n + r of the first bad output, or ~0 */
} pj_bk_cmp;

/* Compare y (m x n, row stride ldy) with ref/sabs: bound(i, r) =
 * 2^-8 |ref| + 2^-13 sabs + 2^-126. scratch: device memory of at least
 * sizeof(pj_bk_cmp) bytes. Synchronises s. */
int pj_bk_compare(cudaStream_t s, const uint16_t *y, size_t ldy, uint32_t m, uint32_t n,
                  const float *ref, const float *sabs, void *scratch, pj_bk_cmp *out);

/* The poison pattern (a NaN no engine produces) over m x n of y. */
#define PJ_BK_POISON 0x7fa5u
int pj_bk_poison(cudaStream_t s, uint16_t *y, size_t ldy, uint32_t m, uint32_t n);

/* Read `bytes` of buf (16-byte granules) over the whole GPU and keep a
 * checksum in sink so nothing is optimised away. variant 0: grid-stride;
 * 1..3: a contiguous slab per CTA with 4 or 8 loads in flight per thread;
 * 4: the GEMV's pattern (rows of 8 KiB, 16 rows per CTA, 8 rows x 64 bytes
 * per warp load, over whole 128 KiB blocks; the rest, if any, by variant
 * 0's kernel after it, a second launch); 5..7: a slab per CTA by
 * bulk copies into a shared-memory ring (one CTA per SM with 128 or 192 KB
 * in flight, or two with 96 KB each). The read floor is the fastest
 * variant; pj_bk_flush kinds 0, 2 and 3 use variants 0 and 6. */
#define PJ_BK_READ_VARIANTS 8
int pj_bk_read(cudaStream_t s, const void *buf, size_t bytes, unsigned *sink, int variant, int sms);

/* The benchmark's L2 flush over `bytes` of buf, by kind: 0 the grid-stride
 * read (variant 0, read-only path, 256-byte L2 prefetch), 1 a grid-stride
 * read with plain default-cached loads, 2 bulk copies (variant 6), 3 kind 0
 * then kind 2, 4 a memset (a write). Kinds 1-3 leave nothing of the
 * previous run in L2; kind 0, the flush of rounds 1-16, leaves much of what
 * cp.async and bulk copies loaded; kind 4's dirty lines are written back
 * during the next op (kernels/NOTES.md, round 17). projd-bench uses kind 1.
 * 0, -EINVAL or -EIO. */
int pj_bk_flush(cudaStream_t s, void *buf, size_t bytes, unsigned *sink, int kind, int sms);

/* Ask for a shared-memory carveout (percent, 0..100) for variant 0, the
 * old flush (kind 0): an experiment on what state the SMs carry from one kernel through
 * the flush to the next (kernels/NOTES.md, round 16; asking for all L1 did
 * not clear it). By default the flush asks for none. 0 or -EINVAL. */
int pj_bk_read_carveout(int pct);

/* The same read (grid-stride, one CTA per SM) by a kernel that reserves
 * `smem` bytes of shared memory it does not use: a neighbour that leaves
 * the SMs split mostly shared, for the probe (round 16). 0, -EINVAL, -EIO. */
int pj_bk_read_smem(cudaStream_t s, const void *buf, size_t bytes, unsigned *sink, int sms,
                    size_t smem);

/* A kernel of ~500 KB of straight-line code and no shared memory, one CTA
 * per SM: a neighbour that evicts the SMs' instruction caches, for the
 * probe (round 16). 0 or -EIO. */
int pj_bk_code(cudaStream_t s, unsigned *sink, int sms);

/* Read one word every `stride` bytes of `bytes` of buf: warms the address
 * translations of its pages and puts a sector per stride in L2 (the touch
 * probe, round 17). bytes = 0 launches one block that reads nothing.
 * 0, -EINVAL (stride 0) or -EIO. */
int pj_bk_touch(cudaStream_t s, const void *buf, size_t bytes, size_t stride, unsigned *sink);

/* Fill a device bf16 buffer with a value pattern (for one-hot inputs). */
int pj_bk_fill_bf16(cudaStream_t s, uint16_t *p, size_t count, uint16_t v);

#ifdef __cplusplus
}
#endif

#endif
