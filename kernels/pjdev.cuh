// pjdev.cuh — small device helpers shared by the engines: cache-hinted
// loads, mma.sync, ldmatrix, cp.async, the split-K arrival counter.
#pragma once

#include <cstddef>
#include <cstdint>

// Weights are read exactly once: skip L1, ask L2 to fetch 256 B around the
// line so a warp's next loads along the row find it there.
__device__ __forceinline__ uint4 ld_stream16(const void *p)
{
    uint4 r;
    asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

// x is small and shared by every CTA: keep it in L1.
__device__ __forceinline__ uint4 ld_x16(const void *p)
{
    uint4 r;
    asm("ld.global.nc.v4.u32 {%0,%1,%2,%3}, [%4];"
        : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
        : "l"(p));
    return r;
}

__device__ __forceinline__ uint32_t ld_x4(const void *p)
{
    uint32_t r;
    asm("ld.global.nc.b32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

// D += A (16x16, row) * B (16x8, col), bf16 in, fp32 accumulate.
__device__ __forceinline__ void mma_bf16(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2,
                                         uint32_t a3, uint32_t b0, uint32_t b1)
{
    asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_u32(const void *p)
{
    return (uint32_t)__cvta_generic_to_shared(p);
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

__device__ __forceinline__ void cp_async16(uint32_t saddr, const void *g)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(g));
}
// The same, asking L2 to fetch the whole 256-byte block around the source:
// for row-tiled reads of 128 bytes per row and stage, the next stage's bytes
// of the row arrive with this one.
__device__ __forceinline__ void cp_async16_l2pf(uint32_t saddr, const void *g)
{
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;" ::"r"(saddr), "l"(g));
}
// The same, ordered after the thread's earlier shared-memory reads by the
// compiler too (a ring slot is refilled right after it was read). L1: through
// L1 (.ca), for sources that other CTAs on the SM read at about the same
// time (x in the z12 GEMV, kernels/NOTES.md round 26); else L2 only (.cg).
template <bool L1 = false>
__device__ __forceinline__ void cp_async16_mem(uint32_t saddr, const void *g)
{
    if constexpr (L1)
        asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(g) : "memory");
    else
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(saddr), "l"(g) : "memory");
}
// 4 bytes (cp.async's smallest unit; for sources without 16-byte alignment).
__device__ __forceinline__ void cp_async4(uint32_t saddr, const void *g)
{
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" ::"r"(saddr), "l"(g) : "memory");
}
// A 16-byte shared-memory read, ordered after earlier barriers and copies.
__device__ __forceinline__ uint4 lds128(uint32_t saddr)
{
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(saddr)
                 : "memory");
    return v;
}
// Named barriers (ids 1..15; 0 is __syncthreads): n threads, a multiple
// of 32, meet; arrive does not wait.
__device__ __forceinline__ void nbar_sync(uint32_t id, uint32_t n)
{
    asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(n) : "memory");
}
__device__ __forceinline__ void nbar_arrive(uint32_t id, uint32_t n)
{
    asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(n) : "memory");
}
// mbarriers (shared-memory addresses): init, arrive with an expected
// transaction count, plain arrive, wait for a phase parity.
__device__ __forceinline__ void mbar_init(uint32_t a, uint32_t count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(a), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint32_t a, uint32_t bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(a), "r"(bytes)
                 : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint32_t a)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(a) : "memory");
}
// CLUSTER: acquire at cluster scope, for bytes other CTAs of the cluster
// wrote (st.async) and counted on this barrier; else the default (CTA).
template <bool CLUSTER = false>
__device__ __forceinline__ void mbar_wait(uint32_t a, uint32_t parity)
{
#define PJ_MBAR_TRY_WAIT(SEM)                                                                      \
    asm volatile("{\n\t.reg .pred p;\n\t"                                                          \
                 "mbarrier.try_wait.parity" SEM ".shared::cta.b64 p, [%1], %2;\n\t"                \
                 "selp.u32 %0, 1, 0, p;\n\t}"                                                      \
                 : "=r"(ok)                                                                        \
                 : "r"(a), "r"(parity)                                                             \
                 : "memory")
    uint32_t ok;
    do {
        if constexpr (CLUSTER)
            PJ_MBAR_TRY_WAIT(".acquire.cluster");
        else
            PJ_MBAR_TRY_WAIT("");
    } while (!ok);
#undef PJ_MBAR_TRY_WAIT
}

// The split-K partials of a thread-block cluster (cl = 1) meet by push:
// outputs 0 .. n - 1 are dealt to the ks ranks in contiguous pieces of
// per = ceil(n / ks), and every rank stores its partial of output i into the
// owner's slot recv[rank * per + i % per] with st.async, which counts its
// bytes on the owner's receive mbarrier (cl_rbar). The owner expects
// (outputs it owns) x ks x sizeof(T) bytes, waits for them on its own
// barrier and sums its outputs' ks slots in rank order, the order of the
// earlier forms: the bits do not change. No cluster barrier after the
// pushes: a CTA waits only for the bytes it receives, and may exit once
// they are in, since nothing is sent to it after them (kernels/NOTES.md,
// round 24; round 14 replaced remote loads by remote stores and a cluster
// barrier, whose release fence and wait were still ~15 % of the router's
// stall samples). recv holds ks * per <= n + ks - 1 elements. A remote CTA's
// shared memory (and barrier) may only be used once that CTA runs and has
// set its barrier up: cl_started() early in the kernel, cl_all_started()
// before the first push (by then it costs nothing).
__device__ __forceinline__ uint32_t cl_rbar()
{
    __shared__ __align__(8) uint64_t bar; // one per CTA, used once
    return smem_u32(&bar);
}
__device__ __forceinline__ void cl_started()
{
    if (threadIdx.x == 0) {
        mbar_init(cl_rbar(), 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncwarp();
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
}
__device__ __forceinline__ void cl_all_started()
{
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
}
template <typename T>
__device__ __forceinline__ void cl_push(T *recv, uint32_t i, uint32_t per, uint32_t rank, T v)
{
    const uint32_t own = i / per;
    const uint32_t local = (uint32_t)__cvta_generic_to_shared(recv + rank * per + (i - own * per));
    uint32_t remote, rbar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(own));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(rbar) : "r"(cl_rbar()), "r"(own));
    if constexpr (sizeof(T) == 4) {
        asm volatile(
            "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(
                remote),
            "r"(__float_as_uint(v)), "r"(rbar)
            : "memory");
    } else {
        static_assert(sizeof(T) == 16, "float or float4");
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, "
                     "%3, %4}, [%5];" ::"r"(remote),
                     "r"(__float_as_uint(v.x)), "r"(__float_as_uint(v.y)),
                     "r"(__float_as_uint(v.z)), "r"(__float_as_uint(v.w)), "r"(rbar)
                     : "memory");
    }
}
__device__ __forceinline__ void cl_add(float &s, float v)
{
    s += v;
}
__device__ __forceinline__ void cl_add(float4 &s, const float4 &v)
{
    s.x += v.x;
    s.y += v.y;
    s.z += v.z;
    s.w += v.w;
}
// The whole exchange for n outputs over a cluster of ks ranks, by this CTA's
// thread tid of nthreads: part(i) is this rank's partial of output i,
// done(i, s) gets the sum of an output this rank owns, summed from zero in
// rank order. recv: ks * ceil(n / ks) elements of this CTA's shared memory
// that nothing else uses from the kernel's start (cl_started) on. Called
// once per kernel (the receive barrier's phase 0), by every rank of the
// cluster with the same n and ks: an owner waits for exactly the bytes the
// others push, so a rank that skips it, or counts differently, leaves its
// owners waiting forever (the cluster barrier before round 24 only waited
// for the threads that had not exited).
template <typename T, typename Part, typename Done>
__device__ __forceinline__ void cl_reduce(T *recv, uint32_t n, uint32_t ks, uint32_t rank,
                                          uint32_t tid, uint32_t nthreads, Part part, Done done)
{
    const uint32_t per = (n + ks - 1) / ks;
    const uint32_t mine = rank * per < n ? min(per, n - rank * per) : 0;
    cl_all_started();
    if (tid == 0)
        mbar_expect_tx(cl_rbar(), mine * ks * (uint32_t)sizeof(T));
    for (uint32_t i = tid; i < n; i += nthreads)
        cl_push(recv, i, per, rank, part(i));
    mbar_wait<true>(cl_rbar(), 0);
    for (uint32_t lp = tid; lp < mine; lp += nthreads) {
        T s{};
        for (uint32_t j = 0; j < ks; j++)
            cl_add(s, recv[j * per + lp]);
        done(rank * per + lp, s);
    }
}
__device__ __forceinline__ void sts32(uint32_t saddr, uint32_t v)
{
    asm volatile("st.shared.u32 [%0], %1;" ::"r"(saddr), "r"(v) : "memory");
}
__device__ __forceinline__ void cp_async_commit()
{
    asm volatile("cp.async.commit_group;");
}
template <int N> __device__ __forceinline__ void cp_async_wait()
{
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

__device__ __forceinline__ uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    return __byte_perm(a, b, sel);
}

// fp32 -> bf16 bits, round to nearest even (NaN kept quiet), as bf16.h.
__device__ __forceinline__ uint16_t f2bf(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7f800000u) == 0x7f800000u && (u & 0x007fffffu) != 0)
        return (uint16_t)((u >> 16) | 0x0040u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float bf2f(uint16_t h)
{
    return __uint_as_float((uint32_t)h << 16);
}

// Split-K arrival: every thread of the CTA calls it after its partial is in
// global memory; returns true in all threads of the CTA that arrived last,
// which then owns the tile and resets the counter for the next launch.
__device__ __forceinline__ bool splitk_arrive_last(unsigned *cnt, unsigned ks, int *s_flag)
{
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned prev = atomicAdd(cnt, 1u);
        int last = prev == ks - 1;
        if (last)
            *cnt = 0; // nobody else touches it in this launch any more
        *s_flag = last;
    }
    __syncthreads();
    bool last = *s_flag != 0;
    if (last)
        __threadfence();
    return last;
}

// Loads that must see other CTAs' writes of this launch: bypass L1.
__device__ __forceinline__ float ld_cg_f32(const float *p)
{
    return __ldcg(p);
}

// Global -> shared bulk copy, completion counted in bytes on the mbarrier.
__device__ __forceinline__ void bulk_g2s(uint32_t dst, const void *src, uint32_t bytes,
                                         uint32_t mbar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];" ::"r"(dst),
                 "l"(src), "r"(bytes), "r"(mbar)
                 : "memory");
}
// TMA: a 2-D tile of the tensor map tmap (a __grid_constant__ parameter)
// at element coordinates (c0 inner, c1 outer) into shared memory at dst,
// completion counted in bytes on mbar.
__device__ __forceinline__ void tma_load_2d(uint32_t dst, const void *tmap, int c0, int c1,
                                            uint32_t mbar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];" ::"r"(dst),
                 "l"(tmap), "r"(c0), "r"(c1), "r"(mbar)
                 : "memory");
}
