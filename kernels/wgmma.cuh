// wgmma.cuh — Hopper warpgroup MMA (wgmma.mma_async) for the tiled GEMM:
// shared-memory matrix descriptors for the 128-byte-swizzled K-major layout
// tgemm.cu already writes (rows of 128 bytes, 16-byte piece p of row r at
// p ^ (r % 8), 1024-byte aligned stages), and m64nNk16 bf16 -> fp32 wrappers
// with D += A * B (both operands K-major). The accumulator layout per warp
// of the warpgroup (warp w owns rows 16 w .. 16 w + 15) is that of
// mma.sync m16n8: d[4 j + {0, 1, 2, 3}] = (row g, col 8 j + 2 t + {0, 1}),
// (row g + 8, the same cols), g = lane / 4, t = lane % 4.
#pragma once

#include <cstdint>

// Descriptor of a K-major, 128-byte-swizzled operand starting at shared
// address addr (the 16-element K slice kk of a stage is addr + 32 kk): 8-row
// groups 1024 bytes apart (stride byte offset), layout type 1 (SW128).
__device__ __forceinline__ uint64_t wg_desc_sw128(uint32_t addr)
{
    uint64_t d = 0;
    d |= (uint64_t)((addr & 0x3FFFF) >> 4);
    d |= (uint64_t)1 << 16;           // leading byte offset (unused with swizzle)
    d |= (uint64_t)(1024 >> 4) << 32; // stride byte offset
    d |= (uint64_t)1 << 62;           // 128-byte swizzle
    return d;
}

__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Keeps r live (and unchanged) up to this point: the register operands of
// an issued wgmma must not be reused by the compiler before wg_wait.
__device__ __forceinline__ void wg_keep(uint32_t &r)
{
    asm volatile("" : "+r"(r)::"memory");
}
// cp.async (generic proxy) writes become visible to wgmma (async proxy).
__device__ __forceinline__ void fence_proxy_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

// The accumulators of an m64nNk16 wgmma: N / 2 fp32 per thread, d[0] ..
// d[N / 2 - 1], asm operands %0 .. %(N / 2 - 1) in both forms below, as
// operand lists ("+f": read and written) and as PTX register lists.
#define WG_D8(o)                                                                                   \
    "+f"(d[o]), "+f"(d[o + 1]), "+f"(d[o + 2]), "+f"(d[o + 3]), "+f"(d[o + 4]), "+f"(d[o + 5]),    \
        "+f"(d[o + 6]), "+f"(d[o + 7])
#define WG_OUT16  WG_D8(0)
#define WG_OUT32  WG_OUT16, WG_D8(8)
#define WG_OUT64  WG_OUT32, WG_D8(16), WG_D8(24)
#define WG_OUT128 WG_OUT64, WG_D8(32), WG_D8(40), WG_D8(48), WG_D8(56)
#define WG_OUT256                                                                                  \
    WG_OUT128, WG_D8(64), WG_D8(72), WG_D8(80), WG_D8(88), WG_D8(96), WG_D8(104), WG_D8(112),      \
        WG_D8(120)
#define WG_ACC16 "%0, %1, %2, %3, %4, %5, %6, %7"
#define WG_ACC32 WG_ACC16 ", %8, %9, %10, %11, %12, %13, %14, %15"
#define WG_ACC64                                                                                   \
    WG_ACC32 ", %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
#define WG_ACC128                                                                                  \
    WG_ACC64 ", %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
             "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
#define WG_ACC256                                                                                  \
    WG_ACC128 ", %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, "      \
              "%79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, "   \
              "%95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, "    \
              "%109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, "     \
              "%122, %123, %124, %125, %126, %127"

// D += A * B (scale-d predicate true; operand scales 1; both K-major).
// Operands: the N / 2 accumulators, then the descriptors of A and B.
template <int N> struct Wgmma;

// D += A * B with A from registers (the z12 tiled GEMM, pipe = 5): warp w of
// the warpgroup holds rows 16 w .. 16 w + 15 of the 64 x 16 A slice as the
// mma.m16n8k16 A fragment (a[0]: row g, k 2t, 2t+1; a[1]: row g + 8; a[2],
// a[3]: the same rows, k + 8), B as above. The hardware reads a[] after the
// instruction issues: the caller keeps them unchanged until wg_wait.
template <int N> struct WgmmaRA;

// One specialisation of each per N. The operand numbers after the
// accumulators (N / 2 onwards) are written out: the preprocessor cannot
// count. Shared-memory form: %IA, %IB the descriptors, %IP the scale-d 1.
#define WG_SS(N, IA, IB, IP)                                                                       \
    template <> struct Wgmma<N> {                                                                  \
        static __device__ __forceinline__ void run(float *d, uint64_t da, uint64_t db)             \
        {                                                                                          \
            asm volatile("{\n"                                                                     \
                         ".reg .pred p;\n"                                                         \
                         "setp.ne.b32 p, %" #IP ", 0;\n"                                           \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" WG_ACC##N    \
                         "}, %" #IA ", %" #IB ", p, 1, 1, 0, 0;\n"                                 \
                         "}\n"                                                                     \
                         : WG_OUT##N                                                               \
                         : "l"(da), "l"(db), "r"(1));                                              \
        }                                                                                          \
    };
// Register-A form: %I0 .. %I3 the A fragment, %IB B's descriptor, %IP the
// scale-d 1.
#define WG_RA(N, I0, I1, I2, I3, IB, IP)                                                           \
    template <> struct WgmmaRA<N> {                                                                \
        static __device__ __forceinline__ void run(float *d, const uint32_t (&a)[4], uint64_t db)  \
        {                                                                                          \
            asm volatile("{\n"                                                                     \
                         ".reg .pred p;\n"                                                         \
                         "setp.ne.b32 p, %" #IP ", 0;\n"                                           \
                         "wgmma.mma_async.sync.aligned.m64n" #N "k16.f32.bf16.bf16 {" WG_ACC##N    \
                         "}, {%" #I0 ", %" #I1 ", %" #I2 ", %" #I3 "}, %" #IB ", p, 1, 1, 0;\n"    \
                         "}\n"                                                                     \
                         : WG_OUT##N                                                               \
                         : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));           \
        }                                                                                          \
    };

WG_SS(16, 8, 9, 10)
WG_SS(32, 16, 17, 18)
WG_SS(64, 32, 33, 34)
WG_SS(128, 64, 65, 66)
WG_SS(256, 128, 129, 130)
WG_RA(16, 8, 9, 10, 11, 12, 13)
WG_RA(32, 16, 17, 18, 19, 20, 21)
WG_RA(64, 32, 33, 34, 35, 36, 37)

#undef WG_SS
#undef WG_RA
#undef WG_ACC16
#undef WG_ACC32
#undef WG_ACC64
#undef WG_ACC128
#undef WG_ACC256
#undef WG_OUT16
#undef WG_OUT32
#undef WG_OUT64
#undef WG_OUT128
#undef WG_OUT256
#undef WG_D8
