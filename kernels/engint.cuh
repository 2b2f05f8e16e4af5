// engint.cuh — what engine.cu knows of the kernel files: argument blocks,
// kernel pickers (a variant per knob combination, nullptr where none was
// compiled) and the tile geometries of the split-K GEMM.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda.h>

#include "kernels/engine.h"
#include "kernels/zfmt.h"

// v rounded up to a multiple of 16: the offsets of the kernels' shared-memory
// layouts (16-byte copies and vector stores).
static __host__ __device__ constexpr size_t al16(size_t v)
{
    return (v + 15) & ~(size_t)15;
}

// The exception area of a z12 GEMV's shared memory (gemvz, gemvzs): the
// list entries (rk, c1, c2) of up to cap exceptions, their x for mtok
// tokens, the row starts of nrb row blocks (and one past) and nbnd block
// bounds, each 16-byte aligned, laid out from offset off.
struct ZxArea {
    size_t e_rk, e_c1, e_c2, e_x, rowst, bnd;
};
// Places the area at off; returns the offset past it.
static __host__ __device__ inline size_t zx_area(ZxArea &z, size_t off, size_t cap, size_t mtok,
                                                 size_t nrb, size_t nbnd)
{
    z.e_rk = off;
    off += al16(cap * 4);
    z.e_c1 = off;
    off += al16(cap * 4);
    z.e_c2 = off;
    off += al16(cap * 4);
    z.e_x = off;
    off += al16(cap * mtok * 4);
    z.rowst = off;
    off += al16((nrb * 16 + 1) * 4);
    z.bnd = off;
    off += al16(nbnd * 4);
    return off;
}
// The area's arrays in the shared memory at sm.
struct ZxArrays {
    uint32_t *e_rk;
    float *e_c1, *e_c2, *e_x;
    int *rowst;
    uint32_t *bnd;
};
static __device__ inline ZxArrays zx_arrays(unsigned char *sm, const ZxArea &z)
{
    return {(uint32_t *)(sm + z.e_rk), (float *)(sm + z.e_c1), (float *)(sm + z.e_c2),
            (float *)(sm + z.e_x),     (int *)(sm + z.rowst),  (uint32_t *)(sm + z.bnd)};
}

// Shared-memory exception capacity of a gemvz CTA (entries); a CTA whose
// row blocks hold more reads them from global memory at the end instead.
#define PJ_GEMVZ_ECAP 128
// Slots per row block in the derived exception table (pj_eng_layer_init).
// Entries XCAP .. 2 * XCAP - 1 of a block go to a second table of the same
// shape, read only by the CTAs of the blocks that hold that many
// (kernels/NOTES.md, round 36c).
#define PJ_GEMVZ_XCAP 64

// What every engine's argument block starts with: the layer's bf16 weights
// (w1: the router's lo, else = w0; unused by the z12 kernels) and the call's
// activations. engine.cu fills it once (io_of) for every launcher.
struct EngIo {
    const uint16_t *w0, *w1;
    size_t ldw;
    uint32_t N; // rows present in w (loads clamp to N - 1)
    const uint16_t *x;
    size_t ldx;
    uint16_t *y;
    size_t ldy;
    uint32_t m, n;
};

struct GemvArgs : EngIo {
    uint32_t kc, ks; // k per split (a multiple of 32 * nw * u), splits
    float *ws;       // partials: grid.x * ks * 16 * MTOK floats
    unsigned *cnt;   // one counter per row block
};
typedef void (*GemvFn)(GemvArgs);
// pipe = 5 (template PIPE = 2): stages of the per-lane shared-memory prefetch.
#define PJ_GV_STAGES 4
// 16-byte pieces per lane per 32-k chunk: rows g and g + 8 of each row block
// (and of lo), and x of each n8 tile.
static inline __host__ __device__ int gemv_pieces(int dual, int rb, int mt)
{
    return rb * (dual ? 4 : 2) + mt;
}
// Dynamic shared memory of a pipe = 5 launch: one ring per warp.
static inline size_t gemv_ring_smem(int nw, int u, int dual, int rb, int mt)
{
    return (size_t)nw * PJ_GV_STAGES * u * gemv_pieces(dual, rb, mt) * 512;
}
// cl = 1: the cluster (DSMEM) split-K reduction variants (rb = 1, pipe 0/1).
GemvFn gemv_pick(int dual, int nw, int u, int mt, int pipe, int minb, int rb, int cl);

// The streamed GEMV (gemvs.cu; gemv / router with pipe = 2).
#define PJ_GEMVS_MAX_STAGES 8
struct GemvsArgs : EngIo {
    uint32_t kc, nkc;     // k per unit (multiple of 32 * nw), units per row group (K / kc)
    uint32_t ngroups;     // row groups of 16 rb rows holding the requested rows
    uint32_t stages;      // ring slots (2..PJ_GEMVS_MAX_STAGES)
    uint32_t pitch;       // bytes per row in a slot
    uint32_t stage_bytes; // bytes per slot
    float *ws;            // partials: grid * 2 * 16 rb * 8 mt floats
    unsigned *cnt;        // one counter per row group
    const uint16_t *wt;   // pipe = 3: the layer's fragment-major copy (engine.h)
};
typedef void (*GemvsFn)(GemvsArgs);
GemvsFn gemvs_pick(int dual, int nw, int mt, int rb);
// pipe = 3: weights from the fragment-major copy; single matrix, m <= 8.
GemvsFn gemvs_pick_tiled(int nw, int rb);
// Dynamic shared memory of a gemvs launch; also returns the slot geometry.
size_t gemvs_smem(int dual, int nw, int mt, int rb, uint32_t m, uint32_t kc, uint32_t stages,
                  uint32_t *pitch, uint32_t *stage_bytes, int tiled);

// A z12 layer's device arrays as the z12 engines read them.
struct Z12Src {
    const uint8_t *tiles;
    const uint32_t *blk_exc;
    const pj_z12_exc *exc;
    const uint32_t *zx_n, *zx_rk; // derived slot table, or NULL
    const float *zx_c1, *zx_c2;
    const uint32_t *zx2_rk; // its overflow: a block's entries XCAP .. 2 XCAP - 1
    const float *zx2_c1, *zx2_c2;
    uint32_t base;
};

struct GemvzArgs : EngIo {
    Z12Src z;
    uint32_t kt_total;  // K / 64
    uint32_t nblk;      // row blocks holding requested rows: ceil(n / 16)
    uint32_t nblk_all;  // n_pad / 16 (bound of blk_exc)
    uint32_t kc, ks, r; // k per split (multiple of 64 * nw * u), splits, warp groups per CTA
    float *ws;
    unsigned *cnt;
    // Tail split (knob ts, with ks = 1): CTAs 0 .. nfull - 1 are whole row
    // groups; CTA nfull + i is part i % ts of row group nfull + i / ts.
    uint32_t nfull, ts;
};
typedef void (*GemvzFn)(GemvzArgs);
GemvzFn gemvz_pick(int nw, int u, int mt, int pipe, int xs, int rb);
// The cluster (DSMEM) split-K variants: pipe = 5, rb = 1, xs 0 or 2.
GemvzFn gemvz_pick_cl(int nw, int u, int mt, int pipe, int xs, int rb);
// The tail-split variants (knob ts): pipe = 5, rb = 1, nw 4 or 8, u 1 or 2,
// xs 0 or 2.
GemvzFn gemvz_pick_ts(int nw, int u, int mt, int pipe, int xs, int rb);
// The variants with x shared by the CTA through its own ring (xs = 4,
// gemvzx.cu): pipe = 5, nw 1, 2 or 4, u 1 or 2, rb 1 or 2 (1 with cl = 1).
GemvzFn gemvz_pick_xr(int nw, int u, int mt, int pipe, int rb, int cl);
// The variants with a ring of st = 2 stages instead of 4 (knob st,
// gemvzr.cu): pipe = 5, xs = 2, mt 2 or 4, nw 4 or 8, u 1 or 2, rb 1 or 2,
// no cl or ts.
GemvzFn gemvz_pick_st(int nw, int u, int mt, int pipe, int xs, int rb, int st);
// Dynamic shared memory of a gemvz launch (st: ring stages, 0 = 4).
size_t gemvz_smem(int nw, int mt, int xs, uint32_t r, uint32_t rb, uint32_t kc, int u, int pipe,
                  uint32_t m, int st);
// Largest R for a given NW (threads = R * NW * 32 + 32 within the kernel's
// launch bound).
#define PJ_GEMVZ_MAX_R(nw) ((nw) >= 16 ? 1 : 8 / (nw))

// The balanced GEMV (gemvb.cu; pipe = 4 of gemv, gemvz and router).
#define PJ_GB_Z12  0
#define PJ_GB_BF16 1
#define PJ_GB_DUAL 2
// Most warps in a balanced grid (sizes the workspace: ws_need).
#define PJ_GB_MAX_WARPS 4096
struct GemvbArgs : EngIo {
    Z12Src z;                 // z12 (the bf16 kinds read EngIo's w0, w1)
    uint32_t kt_total;        // K / 64
    uint32_t nblk;            // ceil(n / 16)
    uint32_t panels, ctas_pp; // K panels, CTAs per panel
    float *ws;                // partials: panels * (nblk + ctas_pp * nw) * 16 * MTOK floats
    unsigned *cnt;            // one counter per row block
};
typedef void (*GemvbFn)(GemvbArgs);
GemvbFn gemvb_pick(int kind, int nw, int u, int mt);
// Dynamic shared memory of a gemvb launch (x staged for one panel).
size_t gemvb_smem(uint32_t m, uint32_t K, uint32_t panels);

// The slab GEMV (gemvzs.cu; gemvz pipe = 6, m <= 8).
// Exception entries a CTA keeps in shared memory (more: read from global).
#define PJ_GZS_ECAP 512
// Most CTAs in a slab grid: sizes the workspace's tag words (pj_eng_ws.tag,
// 256 per boundary between neighbouring CTAs).
#define PJ_GZS_MAX_CTAS 512
// Most row blocks one slab may touch: the finisher warp keeps one per lane,
// with one lane past the last (its exception bounds).
#define PJ_GZS_MAX_SPAN 31
struct GemvzsArgs : EngIo {
    Z12Src z;
    uint32_t kt_total;       // K / 64
    uint32_t tgroups;        // groups of nw * u tiles in ceil(n / 16) row blocks
    uint32_t jmax;           // row blocks a slab touches, at most
    unsigned *cnt;           // one counter per boundary
    unsigned long long *tag; // 256 words per boundary, zero between launches
};
typedef void (*GemvzsFn)(GemvzsArgs);
// nc consumer warps (8, 16), u tiles per warp and stage (1, 2), s stages
// (4, 6, 8), xm how x comes (knob xs: 0 whole, first; 1 whole, before the
// weights; 2 with each stage).
GemvzsFn gemvzs_pick(int nc, int u, int s, int xm);
size_t gemvzs_smem(int nc, int u, int s, int xm, uint32_t m, uint32_t K, uint32_t jmax);

// The z12 GEMV with x in registers (gemvzq.cu; gemvz pipe = 7, m <= 32):
// a persistent grid of CTAs, each taking row blocks blockIdx.x + i * grid.
struct GemvzqArgs : EngIo {
    Z12Src z;
    uint32_t kt_total; // K / 64
    uint32_t nblk;     // row blocks holding requested rows: ceil(n / 16)
};
typedef void (*GemvzqFn)(GemvzqArgs);
// Exceptions the staging warp copies to shared memory for a CTA's first
// 32 row blocks; a block whose list does not fit whole (and any block past
// the 32nd) is finished from global memory.
#define PJ_GZQ_ECAP 256
// nw streaming warps (8, 16), tpw tiles per warp and unit (2..4; K = nw *
// tpw * 64), mq tiles of 16 tokens (1, 2), s ring stages (4, 6).
GemvzqFn gemvzq_pick(int nw, int tpw, int mq, int s);
size_t gemvzq_smem(int nw, int s, int mq);

struct TgemmArgs : EngIo {
    uint32_t kc, ks;
    float *acc; // zeroed fp32 accumulators [token][row], row stride acc_ld
    size_t acc_ld;
    unsigned *cnt;                   // one per (row tile, token tile)
    CUtensorMap tw[2];               // pipe = 4, 7: TMA maps of w0 (and w1), 64 x BM boxes
    CUtensorMap tx;                  // pipe = 7: TMA map of x, 64 x BN boxes
    Z12Src z;                        // pipe = 5: the layer's z12 arrays
    const uint32_t *zt_off, *zt_ent; // pipe = 5: exceptions by tile (engine.h)
    uint32_t kt_total;               // pipe = 5: K / 64
    uint32_t nblk_all;               // pipe = 5: n_pad / 16
};
typedef void (*TgemmFn)(TgemmArgs);

struct TileGeom {
    int bm, bn, threads, stages;
    int dual_ok;
};
#define PJ_TGEMM_NTILES PJ_ENG_TGEMM_TILES
extern const TileGeom tgemm_geom[PJ_TGEMM_NTILES];
// cl = 1: the cluster form (launched with cluster dims 1 x 1 x ks); mode =
// knob pipe: 0 mma.sync, 1 the same with the L2 256-byte prefetch hint, 2
// wgmma, 3 wgmma with one group in flight, 4 the same with the weights
// copied by TMA (2-4 not for tile 5), 5 wgmma over the layer's z12 tiles
// (one matrix; tiles whose warpgroups hold at most 64 tokens), 6 the same
// warp-specialised (64-row tiles of at most 64 tokens, 256 threads), 7
// bf16 warp-specialised (both operands by TMA, BM / 64 consumer
// warpgroups and a producer warp).
TgemmFn tgemm_pick(int tile, int dual, int cl, int mode);
// Dynamic shared memory of a launch (cl: the cluster form, whose landing
// area for the other ranks' partials follows the rest).
size_t tgemm_smem(int tile, int dual, int mode, int cl);
// Threads of a launch: the tile's, 256 for the warp-specialised z12 form
// (mode 6: a producer and a consumer warpgroup), or BM / 64 warpgroups
// and a warp for the bf16 one (mode 7: tgemm_ws_threads).
int tgemm_ws_threads(int tile);
static inline int tgemm_threads(int tile, int mode)
{
    return mode == 6 ? 256 : mode == 7 ? tgemm_ws_threads(tile) : tgemm_geom[tile].threads;
}
