/* zfmt.h — the lossless 12-bit weight format ("z12"), CPU reference.
 *
 * A bf16 weight is sign(1) | exponent(8) | mantissa(7). z12 keeps the low
 * byte (exponent LSB + mantissa) raw and replaces the high byte (sign + the
 * exponent's 7 high bits, "e7") by a 4-bit nibble: sign << 3 | code, with
 * e7 = base + code, code in 0..7. base (0..120) is chosen per matrix so the
 * window [base, base+7] covers the most weights, unless that leaves a 16-row
 * block with more exceptions than the GEMV stages (pj_z12_choose_base). A
 * weight outside the window
 * is stored clamped into it (the decoder then yields a wrong but finite
 * value w_d) and its row's exception list carries two exact fp32 terms
 * c1, c2 such that, in fp32, (w_d + c1) + c2 == w exactly. (One term is not
 * always enough: 0 or 1e-30 against a window near 2^-10 leaves a difference
 * that fp32 cannot hold.)
 *
 * GPU layout (see kernels/ZFORMAT.md): the matrix is cut into tiles of
 * 16 rows x 64 k, ordered row-block major: tile (rb, kt) starts at byte
 * (rb * (k / 64) + kt) * 1536. A tile is three 512-byte planes, each read by
 * one warp-wide 16-byte load (lane L reads bytes [16L, 16L+16) of a plane):
 *   plane 0: low bytes of lane L's elements  0..15
 *   plane 1: low bytes of lane L's elements 16..31
 *   plane 2: nibbles of lane L's elements 0..31: byte b of 32-bit word w holds
 *            element 8w+b in its low nibble and element 8w+b+4 in its high one.
 * Lane L's element e (0..31) is the mma.m16n8k16 A-fragment element j = e % 8
 * of k16-step s = e / 8: with g = L / 4, t = L % 4,
 *   row = 16 rb + g + 8 * ((j >> 1) & 1)
 *   col = 64 kt + 16 s + 2 t + (j & 1) + 8 * (j >> 2).
 * Decoding 8 elements (one nibble word N, low words L0, L1) is byte
 * arithmetic: H0 = ((N & 0x07070707) + base * 0x01010101) | ((N << 4) & 0x80808080)
 * gives the high bytes of elements 0..3, H1 = (((N >> 4) & 0x07070707) +
 * base * 0x01010101) | (N & 0x80808080) those of 4..7, and four byte
 * permutes interleave them with L0, L1 into bf16 pairs.
 *
 * Requirements: k % 64 == 0 (else the layer stays bf16); rows are padded to
 * a multiple of 16 with zero low bytes and zero nibbles (decoder garbage that
 * no kernel ever writes out).
 */
#ifndef PJ_ZFMT_H
#define PJ_ZFMT_H

#include <stddef.h>
#include <stdint.h>

#define PJ_Z12_TILE_ROWS   16
#define PJ_Z12_TILE_K      64
#define PJ_Z12_TILE_BYTES  1536
#define PJ_Z12_PLANE_BYTES 512
/* Exceptions a row block may hold before the window choice avoids it: the
 * z12 GEMV's exception warp loads that many of a block in its first round
 * (the slot table, PJ_GEMVZ_XCAP in engint.cuh; engine.cu checks that the
 * two agree). Past it a block's entries come a round later (the overflow
 * table) or after the main loop, and that block's CTA finishes last: on
 * the served reference model's qkv_gate (a block of 117) and an 8B-shaped
 * o_proj (124) the layer ran up to 1.2x slower at m = 8-16 than with every
 * block within 64 (kernels/NOTES.md, round 44). */
#define PJ_Z12_BLOCK_EXC_STREAMED 64

/* One exception: rk = row_in_block << 28 | k (k < 2^28). Decoded weight w_d
 * is corrected as ((w_d * x + c1 * x) + c2 * x); CPU unpack ignores c1/c2
 * and restores the original bits from `orig`. */
typedef struct pj_z12_exc {
    uint32_t rk;
    float c1;
    float c2;
} pj_z12_exc;

typedef struct pj_z12 {
    uint32_t n, k;  /* logical shape */
    uint32_t n_pad; /* n rounded up to 16 */
    uint32_t base;  /* window: e7 in [base, base + 7] */
    uint8_t *tiles; /* (n_pad / 16) * (k / 64) tiles */
    size_t tiles_bytes;
    uint32_t *blk_exc;  /* n_pad / 16 + 1 offsets into exc (per row block) */
    pj_z12_exc *exc;    /* sorted by (row block, row, k) */
    uint16_t *exc_orig; /* original bf16 bits per exception (CPU unpack, tests) */
    uint32_t n_exc;
} pj_z12;

/* The window for w (n x k, row stride ld elements): histogram the high-7
 * exponent bits per 16-row block and return the base that leaves the fewest
 * weights outside [base, base + 7] (ties: the smallest base), unless under
 * it a row block holds more than PJ_Z12_BLOCK_EXC_STREAMED exceptions. Then the
 * base whose heaviest block exceeds that the least wins, among those whose
 * exceptions are within twice the fewest plus one per block, or add at most
 * 1 % to the tiles' bytes, whichever allows more (ties: fewer exceptions,
 * then the smaller base). A block's exceptions are
 * corrected on one warp of the CTA that streams it, so one heavy block sets
 * the GEMV's time (kernels/ZFORMAT.md, section 4). */
/* UINT32_MAX when k >= 2^28 (pj_z12_pack's limit too) or out of memory. */
uint32_t pj_z12_choose_base(const uint16_t *w, uint32_t n, uint32_t k, size_t ld);

/* Pack w (n x k bf16, row stride ld) into *out (caller's struct, zeroed here).
 * Returns 0; -EINVAL (k % 64 != 0, n == 0, ...) or -EDOM (a non-finite weight:
 * err names its row and column) leave *out empty; -ENOMEM likewise; -ERANGE
 * (no exact c1, c2 found: cannot happen for finite weights) likewise.
 * Out-of-window weights are stored saturated (nearest window value) with
 * c1 = -w_d, c2 = w; see kernels/ZFORMAT.md section 4.
 * Owns: out's arrays, freed by pj_z12_free. */
int pj_z12_pack(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, pj_z12 *out, char *err,
                size_t errlen);

/* pj_z12_pack on up to `threads` threads (kernels/parfor.h; 0 or 1: the
 * caller's thread only). The result is byte-identical to pj_z12_pack for
 * any thread count: row blocks are packed independently, each into the
 * slice of the exception list that a counting pass gave it.
 * max_bytes != 0: when pj_z12_bytes of the result would exceed it, nothing
 * is packed or allocated and -EFBIG is returned, err saying so; *out then
 * holds only n, k, n_pad, base, n_exc and tiles_bytes (no arrays, so
 * pj_z12_bytes(out) is the size it would have taken; pj_z12_free is
 * harmless). The other returns are pj_z12_pack's. */
int pj_z12_pack_mt(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, unsigned threads,
                   size_t max_bytes, pj_z12 *out, char *err, size_t errlen);

/* Restore the original bf16 bits of rows [0, n) into w (row stride ld,
 * at least k: rows that overlap are a caller's error, asserted). */
void pj_z12_unpack(const pj_z12 *z, uint16_t *w, size_t ld);

/* pj_z12_unpack on up to `threads` threads (0 or 1: the caller's only);
 * the row blocks are split between them, and w ends up identical. */
void pj_z12_unpack_mt(const pj_z12 *z, uint16_t *w, size_t ld, unsigned threads);

/* Restore the rows of row block rb (rows 16 rb .. up to 16 rb + 15, those
 * below n) into out, row stride ld: the row i of the block at out + i * ld.
 * A tile at a time, ~1.4x the rate of pj_z12_unpack_row. rb past the last
 * block (n_pad / 16 or more) writes nothing. */
void pj_z12_unpack_block(const pj_z12 *z, uint32_t rb, uint16_t *out, size_t ld);

/* Restore one row (k elements) into row_out. */
void pj_z12_unpack_row(const pj_z12 *z, uint32_t row, uint16_t *row_out);

/* The value a GPU kernel's decoder yields at (row, col) before corrections. */
uint16_t pj_z12_decoded(const pj_z12 *z, uint32_t row, uint32_t col);

/* Every byte the format keeps and the device holds: tiles, block offsets,
 * exception entries (the exc_orig copy is a CPU-side aid and is not
 * counted). No header: z12 lives in memory only, made at load from bf16,
 * and the memory plan and inspect's sizes are this one figure. */
size_t pj_z12_bytes(const pj_z12 *z);

void pj_z12_free(pj_z12 *z);
/* The exceptions again, by tile, for kernels that put the weights' own bits
 * into the decoded fragments (the tiled GEMM, kernels/ZFORMAT.md section 7):
 * (*off)[t] .. (*off)[t + 1] delimit tile t = rb * (k / 64) + kt's entries in
 * *ent, in list order; an entry is pos << 16 | the weight's bf16 bits, pos =
 * (row % 16) * 64 + col % 64. Needs cancel-and-restore entries (c2 = w, a
 * bf16 value, fl(fl(w_d + c1) + c2) == w): -ENOTSUP naming the first that is
 * not; -ENOMEM. On success the caller owns *off (n_pad / 16 * k / 64 + 1
 * offsets) and *ent (n_exc entries; NULL when there are none) and frees
 * them with free(). */
int pj_z12_tile_exc(const pj_z12 *z, uint32_t **off, uint32_t **ent, char *err, size_t errlen);

#endif
