// benchk.cu — reference, comparison, poison, flush and read kernels for the
// benchmark, the tuner and the GPU tests (see benchk.h).
#include "kernels/benchk.h"

#include <cerrno>
#include <cstring>

#include "kernels/pjdev.cuh"

// One thread per output (row = 32 rows per warp across lanes, token per
// warp). Each thread walks its row in increasing k, 8 values per 16-byte
// load, rounding every product and every sum as the CPU reference does.
__global__ void __launch_bounds__(256)
    ref_kernel(const uint16_t *w, const uint16_t *lo, size_t ldw, uint32_t k, const uint16_t *x,
               size_t ldx, uint32_t m, uint32_t n, float *ref, float *sabs)
{
    const uint32_t r = blockIdx.x * 32 + (threadIdx.x & 31);
    const uint32_t i = blockIdx.y * 8 + (threadIdx.x >> 5);
    if (r >= n || i >= m)
        return;
    const uint16_t *wr = w + (size_t)r * ldw;
    const uint16_t *lr = lo ? lo + (size_t)r * ldw : nullptr;
    const uint16_t *xr = x + (size_t)i * ldx;
    float acc = 0.f, sa = 0.f;
    uint32_t c = 0;
    const bool vec = ((ldw | ldx) % 8 == 0) && ((uintptr_t)w % 16 == 0) &&
                     ((uintptr_t)x % 16 == 0) && (!lo || (uintptr_t)lo % 16 == 0);
    if (vec) {
        for (; c + 8 <= k; c += 8) {
            const uint4 wv = *(const uint4 *)(wr + c);
            const uint4 xv = *(const uint4 *)(xr + c);
            uint4 lv = make_uint4(0, 0, 0, 0);
            if (lr)
                lv = *(const uint4 *)(lr + c);
            const uint32_t wa[4] = {wv.x, wv.y, wv.z, wv.w};
            const uint32_t xa[4] = {xv.x, xv.y, xv.z, xv.w};
            const uint32_t la[4] = {lv.x, lv.y, lv.z, lv.w};
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const float xf = bf2f((uint16_t)(xa[j >> 1] >> ((j & 1) * 16)));
                const float wf = bf2f((uint16_t)(wa[j >> 1] >> ((j & 1) * 16)));
                const float p = __fmul_rn(xf, wf);
                acc = __fadd_rn(acc, p);
                sa += fabsf(p);
                if (lr) {
                    const float lf = bf2f((uint16_t)(la[j >> 1] >> ((j & 1) * 16)));
                    const float q = __fmul_rn(xf, lf);
                    acc = __fadd_rn(acc, q);
                    sa += fabsf(q);
                }
            }
        }
    }
    for (; c < k; c++) {
        const float xf = bf2f(xr[c]);
        const float p = __fmul_rn(xf, bf2f(wr[c]));
        acc = __fadd_rn(acc, p);
        sa += fabsf(p);
        if (lr) {
            const float q = __fmul_rn(xf, bf2f(lr[c]));
            acc = __fadd_rn(acc, q);
            sa += fabsf(q);
        }
    }
    ref[(size_t)i * n + r] = acc;
    sabs[(size_t)i * n + r] = sa;
}

extern "C" int pj_bk_ref(cudaStream_t s, const uint16_t *w, const uint16_t *lo, size_t ldw,
                         uint32_t k, const uint16_t *x, size_t ldx, uint32_t m, uint32_t n,
                         float *ref, float *sabs)
{
    dim3 grid((n + 31) / 32, (m + 7) / 8);
    ref_kernel<<<grid, 256, 0, s>>>(w, lo, ldw, k, x, ldx, m, n, ref, sabs);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

// Each thread folds its outputs into locals; warps reduce with shuffles and
// lane 0 does one atomic per field (per-element atomics on two doubles would
// serialise millions of updates).
__global__ void cmp_kernel(const uint16_t *y, size_t ldy, uint32_t m, uint32_t n, const float *ref,
                           const float *sabs, pj_bk_cmp *out)
{
    const size_t total = (size_t)m * n;
    unsigned long long bad = 0, unw = 0, mis = 0, first = ~0ull;
    double e2 = 0, r2 = 0;
    float worst = 0.f;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x) {
        const size_t i = idx / n, r = idx % n;
        const uint16_t yb = y[i * ldy + r];
        const float rf = ref[idx];
        if (yb == PJ_BK_POISON) {
            unw++;
            first = first < idx ? first : idx;
            continue;
        }
        mis += yb != f2bf(rf);
        const float err = fabsf(bf2f(yb) - rf);
        const float bound = ldexpf(fabsf(rf), -8) + ldexpf(sabs[idx], -13) + 1.2e-38f;
        const float ratio = err / bound;
        if (!(ratio <= 1.f)) { // NaN counts as bad
            bad++;
            first = first < idx ? first : idx;
        }
        worst = ratio == ratio ? fmaxf(worst, ratio) : 3.0e38f;
        e2 += (double)err * err;
        r2 += (double)rf * rf;
    }
    for (int o = 16; o; o >>= 1) {
        bad += __shfl_xor_sync(0xffffffffu, bad, o);
        unw += __shfl_xor_sync(0xffffffffu, unw, o);
        mis += __shfl_xor_sync(0xffffffffu, mis, o);
        const unsigned long long f2 = __shfl_xor_sync(0xffffffffu, first, o);
        first = first < f2 ? first : f2;
        e2 += __shfl_xor_sync(0xffffffffu, e2, o);
        r2 += __shfl_xor_sync(0xffffffffu, r2, o);
        worst = fmaxf(worst, __shfl_xor_sync(0xffffffffu, worst, o));
    }
    if ((threadIdx.x & 31) == 0) {
        if (bad)
            atomicAdd(&out->bad, bad);
        if (unw)
            atomicAdd(&out->unwritten, unw);
        if (mis)
            atomicAdd(&out->mismatch, mis);
        if (first != ~0ull)
            atomicMin(&out->first_bad, first);
        atomicAdd(&out->err2, e2);
        atomicAdd(&out->ref2, r2);
        atomicMax((int *)&out->worst, __float_as_int(worst)); // worst >= 0: int order
    }
}

extern "C" int pj_bk_compare(cudaStream_t s, const uint16_t *y, size_t ldy, uint32_t m, uint32_t n,
                             const float *ref, const float *sabs, void *scratch, pj_bk_cmp *out)
{
    pj_bk_cmp init;
    memset(&init, 0, sizeof init);
    init.first_bad = ~0ull;
    if (cudaMemcpyAsync(scratch, &init, sizeof init, cudaMemcpyHostToDevice, s) != cudaSuccess)
        return -EIO;
    size_t total = (size_t)m * n;
    unsigned blocks = (unsigned)((total + 255) / 256);
    if (blocks > 1024)
        blocks = 1024;
    cmp_kernel<<<blocks, 256, 0, s>>>(y, ldy, m, n, ref, sabs, (pj_bk_cmp *)scratch);
    if (cudaGetLastError() != cudaSuccess)
        return -EIO;
    if (cudaMemcpyAsync(out, scratch, sizeof *out, cudaMemcpyDeviceToHost, s) != cudaSuccess)
        return -EIO;
    return cudaStreamSynchronize(s) == cudaSuccess ? 0 : -EIO;
}

__global__ void fill_kernel(uint16_t *y, size_t ldy, uint32_t m, uint32_t n, uint16_t v)
{
    const size_t total = (size_t)m * n;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < total;
         idx += (size_t)gridDim.x * blockDim.x)
        y[(idx / n) * ldy + idx % n] = v;
}

extern "C" int pj_bk_poison(cudaStream_t s, uint16_t *y, size_t ldy, uint32_t m, uint32_t n)
{
    size_t total = (size_t)m * n;
    unsigned blocks = (unsigned)((total + 255) / 256);
    if (blocks > 2048)
        blocks = 2048;
    fill_kernel<<<blocks, 256, 0, s>>>(y, ldy, m, n, PJ_BK_POISON);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int pj_bk_fill_bf16(cudaStream_t s, uint16_t *p, size_t count, uint16_t v)
{
    unsigned blocks = (unsigned)((count + 255) / 256);
    if (blocks > 2048)
        blocks = 2048;
    if (blocks < 1)
        blocks = 1;
    fill_kernel<<<blocks, 256, 0, s>>>(p, count, 1, (uint32_t)count, v);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

// Two read patterns. Grid-stride (variant 0): every pass of the grid covers
// one contiguous span. Slabs (variants 1..3): each CTA reads its own
// contiguous slab, UNR * blockDim 16-byte loads in flight per pass, as the
// GEMV streams its rows. The XOR of all words goes to *sink only if it
// equals a value it practically never has, so the loads stay and nothing is
// written.
// A default-cached 16-byte load: no read-only path, no L2 hints (the
// plain flush, pj_bk_flush kind 1).
__device__ __forceinline__ uint4 ld_plain16(const void *p)
{
    uint4 v;
    asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}

// PLAIN: the loads are ld_plain16 instead of the read-only path's.
template <int UNR, bool PLAIN = false>
__global__ void read_stride_kernel(const uint4 *__restrict__ p, size_t n16, unsigned *sink)
{
    const size_t stride = (size_t)gridDim.x * blockDim.x;
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    uint32_t acc = 0;
    for (; i + (UNR - 1) * stride < n16; i += UNR * stride) {
        uint4 v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++)
            v[u] = PLAIN ? ld_plain16(p + i + u * stride) : ld_stream16(p + i + u * stride);
#pragma unroll
        for (int u = 0; u < UNR; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    for (; i < n16; i += stride) {
        const uint4 v = PLAIN ? ld_plain16(p + i) : ld_stream16(p + i);
        acc ^= v.x ^ v.y ^ v.z ^ v.w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

template <int UNR>
__global__ void read_slab_kernel(const uint4 *__restrict__ p, size_t n16, unsigned *sink)
{
    const size_t per = (n16 + gridDim.x - 1) / gridDim.x;
    const size_t beg = blockIdx.x * per;
    const size_t end = beg + per < n16 ? beg + per : n16;
    uint32_t acc = 0;
    for (size_t i = beg + threadIdx.x; i < end; i += (size_t)UNR * blockDim.x) {
        uint4 v[UNR];
#pragma unroll
        for (int u = 0; u < UNR; u++) {
            const size_t j = i + (size_t)u * blockDim.x;
            v[u] = j < end ? ld_stream16(p + j) : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < UNR; u++)
            acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

// The GEMV's own pattern (variant 4): the buffer as rows of 8 KiB, a CTA per
// 16 rows, 8 warps splitting each row in 1 KiB pieces, a lane reading rows g
// and g + 8 at 16 t + 64 i: 8 rows x 64 bytes per load instruction.
template <int U>
__global__ void __launch_bounds__(256)
    read_rows_kernel(const uint8_t *__restrict__ p, unsigned *sink)
{
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
    const uint8_t *r0 = p + ((size_t)blockIdx.x * 16 + g) * 8192 + warp * 1024 + t * 16;
    const uint8_t *r1 = r0 + 8 * 8192;
    uint32_t acc = 0;
#pragma unroll 1
    for (int i = 0; i < 16; i += U) {
        uint4 a[U], b[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            a[u] = ld_stream16(r0 + (i + u) * 64);
            b[u] = ld_stream16(r1 + (i + u) * 64);
        }
#pragma unroll
        for (int u = 0; u < U; u++)
            acc ^= a[u].x ^ a[u].y ^ a[u].z ^ a[u].w ^ b[u].x ^ b[u].y ^ b[u].z ^ b[u].w;
    }
    if (acc == 0x9e3779b9u)
        *sink = acc;
}

// Bulk copies (variants 5..7): one thread per CTA streams the CTA's slab
// of chunks into an S-slot shared-memory ring with cp.async.bulk, reusing a
// slot once its copy has landed, and reads nothing itself: bytes in flight
// per SM without any per-thread issue cost (round 17: the grid-stride and
// slab readers reach ~3.5 TB/s where cuBLAS and the tiled GEMM stream 37.7
// MB at 4 TB/s and more).
template <int S, int CH>
__global__ void __launch_bounds__(32)
    read_bulk_kernel(const unsigned char *__restrict__ p, size_t bytes, unsigned *sink)
{
    extern __shared__ __align__(128) unsigned char ring[];
    __shared__ __align__(8) unsigned long long bar[S];
    if (threadIdx.x != 0)
        return;
    const size_t nch = (bytes + CH - 1) / CH;
    const size_t c0 = nch * blockIdx.x / gridDim.x, c1 = nch * (blockIdx.x + 1) / gridDim.x;
    for (int s = 0; s < S; s++)
        mbar_init(smem_u32(&bar[s]), 1);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    for (size_t i = c0; i < c1; i++) {
        const uint32_t k = (uint32_t)(i - c0), s = k % S;
        if (k >= S)
            mbar_wait(smem_u32(&bar[s]), ((k - S) / S) & 1);
        const size_t off = i * CH;
        const uint32_t n = (uint32_t)(bytes - off < CH ? bytes - off : CH);
        mbar_expect_tx(smem_u32(&bar[s]), n);
        bulk_g2s(smem_u32(ring + (size_t)s * CH), p + off, n, smem_u32(&bar[s]));
    }
    const uint32_t tot = (uint32_t)(c1 - c0);
    for (uint32_t k = tot > S ? tot - S : 0; k < tot; k++)
        mbar_wait(smem_u32(&bar[k % S]), (k / S) & 1);
    if (tot && *(const volatile unsigned *)ring == 0x9e3779b9u)
        *sink = 1;
}

template <int S, int CH>
static int read_bulk(cudaStream_t s, const void *buf, size_t bytes, unsigned *sink, int grid)
{
    const int smem = S * CH;
    if (cudaFuncSetAttribute(read_bulk_kernel<S, CH>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             smem) != cudaSuccess)
        return -EINVAL;
    read_bulk_kernel<S, CH>
        <<<grid, 32, smem, s>>>((const unsigned char *)buf, bytes / 16 * 16, sink);
    return 0;
}

extern "C" int pj_bk_flush(cudaStream_t s, void *buf, size_t bytes, unsigned *sink, int kind,
                           int sms)
{
    switch (kind) {
    case 0:
        return pj_bk_read(s, buf, bytes, sink, 0, sms);
    case 1: // one load in flight per thread per pass, as a plain grid-stride loop
        read_stride_kernel<1, true><<<sms * 4, 512, 0, s>>>((const uint4 *)buf, bytes / 16, sink);
        return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
    case 2:
        return pj_bk_read(s, buf, bytes, sink, 6, sms);
    case 3:
        return pj_bk_flush(s, buf, bytes, sink, 0, sms) ? -EIO
                                                        : pj_bk_flush(s, buf, bytes, sink, 2, sms);
    case 4:
        return cudaMemsetAsync(buf, 1, bytes, s) == cudaSuccess ? 0 : -EIO;
    }
    return -EINVAL;
}

extern "C" int pj_bk_read_carveout(int pct)
{
    return cudaFuncSetAttribute(read_stride_kernel<4>,
                                cudaFuncAttributePreferredSharedMemoryCarveout, pct) == cudaSuccess
               ? 0
               : -EINVAL;
}

// A kernel that is mostly code: PJ_BK_CODE_STEPS unrolled mixing steps
// (three or four instructions each, every one with its own constants; the
// empty asm keeps the compiler from folding them), run once by one CTA per
// SM. ~500 KB of instructions, more than an SM's instruction caches hold,
// and no shared memory: a neighbour that only evicts code (the probe,
// kernels/NOTES.md round 16).
#define PJ_BK_CODE_STEPS 4096
__global__ void __launch_bounds__(128) code_kernel(unsigned *sink, uint32_t seed)
{
    uint32_t v = seed ^ (threadIdx.x * 0x9e3779b1u);
#pragma unroll
    for (int i = 0; i < PJ_BK_CODE_STEPS; i++) {
        v = v * (0x9e3779b1u + 2u * (uint32_t)i) + (0x7f4a7c15u ^ (uint32_t)i);
        v ^= v >> (7 + i % 11);
        asm volatile("" : "+r"(v));
    }
    if (v == 0x12345678u)
        *sink = v;
}

extern "C" int pj_bk_code(cudaStream_t s, unsigned *sink, int sms)
{
    code_kernel<<<sms, 128, 0, s>>>(sink, 1u);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

// One word every `stride` bytes of buf: the translations of its pages are
// loaded and L2 gets one sector per stride (the touch probe, kernels/NOTES.md
// round 17). bytes = 0: one block that reads nothing (a tiny kernel).
__global__ void touch_kernel(const unsigned char *__restrict__ p, size_t bytes, size_t stride,
                             unsigned *sink)
{
    const size_t i = (blockIdx.x * (size_t)blockDim.x + threadIdx.x) * stride;
    if (i < bytes) {
        const unsigned v = *(const volatile unsigned *)(p + i);
        if (v == 0x9e3779b9u)
            *sink = v;
    }
}

extern "C" int pj_bk_touch(cudaStream_t s, const void *buf, size_t bytes, size_t stride,
                           unsigned *sink)
{
    if (!stride)
        return -EINVAL;
    const size_t n = (bytes + stride - 1) / stride;
    const unsigned blocks = n ? (unsigned)((n + 255) / 256) : 1;
    touch_kernel<<<blocks, 256, 0, s>>>((const unsigned char *)buf, bytes, stride, sink);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int pj_bk_read_smem(cudaStream_t s, const void *buf, size_t bytes, unsigned *sink,
                               int sms, size_t smem)
{
    // Its own instantiation, so that the flush keeps its attributes.
    if (cudaFuncSetAttribute(read_stride_kernel<2>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             (int)smem) != cudaSuccess)
        return -EINVAL;
    read_stride_kernel<2><<<sms, 512, smem, s>>>((const uint4 *)buf, bytes / 16, sink);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int pj_bk_read(cudaStream_t s, const void *buf, size_t bytes, unsigned *sink,
                          int variant, int sms)
{
    const size_t n16 = bytes / 16;
    const uint4 *p = (const uint4 *)buf;
    switch (variant) {
    case 0:
        read_stride_kernel<4><<<sms * 4, 512, 0, s>>>(p, n16, sink);
        break;
    case 1:
        read_slab_kernel<4><<<sms * 4, 512, 0, s>>>(p, n16, sink);
        break;
    case 2:
        read_slab_kernel<8><<<sms * 2, 512, 0, s>>>(p, n16, sink);
        break;
    case 4: {
        // Whole 128 KiB blocks of rows, then what is left by the grid-stride
        // kernel: below one block the rows kernel alone read nothing, and an
        // empty graph's time was the floor of a small layer.
        const size_t block = 16 * 8192, whole = bytes / block * block;
        if (whole)
            read_rows_kernel<4>
                <<<(unsigned)(whole / block), 256, 0, s>>>((const uint8_t *)buf, sink);
        if ((bytes - whole) / 16)
            read_stride_kernel<4><<<sms * 4, 512, 0, s>>>(
                (const uint4 *)((const uint8_t *)buf + whole), (bytes - whole) / 16, sink);
        break;
    }
    case 5:
        if (read_bulk<8, 16384>(s, buf, bytes, sink, sms))
            return -EINVAL;
        break;
    case 6:
        if (read_bulk<6, 32768>(s, buf, bytes, sink, sms))
            return -EINVAL;
        break;
    case 7:
        if (read_bulk<6, 16384>(s, buf, bytes, sink, sms * 2))
            return -EINVAL;
        break;
    default:
        read_slab_kernel<8><<<sms * 4, 256, 0, s>>>(p, n16, sink);
        break;
    }
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}
