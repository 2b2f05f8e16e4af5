/* zfmt.c — pack and unpack the lossless 12-bit weight format (see zfmt.h and
 * kernels/ZFORMAT.md for the bit and tile layout).
 *
 * Out-of-window weights are stored saturated: the window value nearest to
 * them (code 0 with low byte 0x00 below the window, code 7 with low byte 0xff
 * above it), sign kept. Their exception entry is "cancel and restore":
 * c1 = -w_d, c2 = w. Both are bf16 values, so for a one-hot input of any bf16
 * value x the products w_d*x, c1*x, c2*x are exact in fp32, w_d*x + c1*x is
 * exactly 0 and the result is fl(w*x), the same number the reference computes.
 * A difference-based pair (c1 = fl(w - w_d), c2 = the TwoSum error) is exact
 * only for x = 1, which is why it is merely the fallback. Every entry is
 * verified by simulating the fp32 sum before it is stored.
 */
#include "kernels/zfmt.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/parfor.h"

#define Z12_E7_COUNT  128
#define Z12_BASE_MAX  120 /* base + 7 <= 127: the code add never carries into the sign */
#define Z12_K_LIMIT   (1u << 28)
#define Z12_NIB_PLANE (2 * PJ_Z12_PLANE_BYTES)

/* Pack stores a lane's bytes as 8- and 4-byte words built from 16-bit
 * halves, so the tile's byte order is the host's. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "z12 pack assumes a little-endian host");

/* Where element (rr, cc) of a 16 x 64 tile lives: the inverse of
 * row = g + 8 * ((j >> 1) & 1), col = 16 s + 2 t + (j & 1) + 8 * (j >> 2)
 * with lane L = 4 g + t and element e = 8 s + j. */
typedef struct z12_pos {
    uint32_t low;   /* byte offset of the low byte in the tile */
    uint32_t nib;   /* byte offset of the nibble byte in the tile */
    uint32_t shift; /* 0: low nibble, 4: high nibble */
} z12_pos;

static z12_pos z12_locate(uint32_t rr, uint32_t cc)
{
    uint32_t g = rr & 7, h = rr >> 3;
    uint32_t s = cc >> 4, q = cc & 15;
    uint32_t t = (q & 7) >> 1;
    uint32_t j = ((q >> 3) << 2) | (h << 1) | (q & 1);
    uint32_t lane = 4 * g + t, e = 8 * s + j;
    z12_pos p;
    p.low = (e >> 4) * PJ_Z12_PLANE_BYTES + 16 * lane + (e & 15);
    p.nib = Z12_NIB_PLANE + 16 * lane + 4 * s + (j & 3);
    p.shift = (j >> 2) * 4;
    return p;
}

static size_t z12_tile_offset(const pj_z12 *z, uint32_t row, uint32_t col)
{
    size_t rb = row / PJ_Z12_TILE_ROWS, kt = col / PJ_Z12_TILE_K;
    return (rb * (z->k / PJ_Z12_TILE_K) + kt) * PJ_Z12_TILE_BYTES;
}

/* The bf16 a decoder yields from a nibble and a low byte. */
static uint16_t z12_decode(uint32_t base, uint32_t nib, uint32_t low)
{
    return (uint16_t)(((nib & 8u) << 12) | ((base + (nib & 7u)) << 8) | low);
}

/* The window (see zfmt.h, pj_z12_choose_base). blk_hist holds n_blk row
 * blocks' histograms of e7, Z12_E7_COUNT counts each. */
static uint32_t z12_base_from_blocks(const uint32_t *blk_hist, uint32_t n_blk, uint32_t k)
{
    uint64_t hist[Z12_E7_COUNT] = {0}, all = 0;
    for (uint32_t b = 0; b < n_blk; b++)
        for (uint32_t e = 0; e < Z12_E7_COUNT; e++)
            hist[e] += blk_hist[(size_t)b * Z12_E7_COUNT + e];
    for (uint32_t e = 0; e < Z12_E7_COUNT; e++)
        all += hist[e];
    /* out[b]: the matrix's exceptions under base b */
    uint64_t out[Z12_BASE_MAX + 1], in = 0;
    for (uint32_t e = 0; e < 8; e++)
        in += hist[e];
    out[0] = all - in;
    uint32_t fewest = 0; /* strict: ties keep the smallest base */
    for (uint32_t b = 1; b <= Z12_BASE_MAX; b++) {
        in += hist[b + 7] - hist[b - 1];
        out[b] = all - in;
        if (out[b] < out[fewest])
            fewest = b;
    }
    /* excess[b]: the heaviest block under base b, past what the GEMV
     * stages while it streams. With every block within it, the fewest
     * exceptions win; otherwise the least excess among the bases allowed
     * (z12_allowed_exc), then the fewest, then the smallest base. */
    uint64_t excess[Z12_BASE_MAX + 1] = {0};
    for (uint32_t b = 0; b < n_blk; b++) {
        const uint32_t *h = blk_hist + (size_t)b * Z12_E7_COUNT;
        uint64_t bt = 0, bin = 0;
        for (uint32_t e = 0; e < Z12_E7_COUNT; e++)
            bt += h[e];
        for (uint32_t e = 0; e < 8; e++)
            bin += h[e];
        for (uint32_t base = 0;; base++) {
            const uint64_t bo = bt - bin;
            if (bo > PJ_Z12_BLOCK_EXC_STREAMED && bo - PJ_Z12_BLOCK_EXC_STREAMED > excess[base])
                excess[base] = bo - PJ_Z12_BLOCK_EXC_STREAMED;
            if (base == Z12_BASE_MAX)
                break;
            bin = bin + h[base + 8] - h[base]; /* in 64 bits: the difference may be < 0 */
        }
    }
    if (excess[fewest] == 0)
        return fewest;
    /* Exceptions a base may have to win on its blocks: twice the fewest
     * plus one a block, or as many more as add 1 % to the tiles' bytes
     * (12 bytes each against 1.5 a weight), whichever allows more. */
    const uint64_t by_count = 2 * out[fewest] + n_blk;
    const uint64_t by_bytes =
        out[fewest] + (uint64_t)n_blk * PJ_Z12_TILE_ROWS * k * 3 / 2 / 100 / 12;
    const uint64_t allowed = by_count > by_bytes ? by_count : by_bytes;
    uint32_t best = fewest;
    for (uint32_t b = 0; b <= Z12_BASE_MAX; b++)
        if (out[b] <= allowed &&
            (excess[b] < excess[best] || (excess[b] == excess[best] && out[b] < out[best])))
            best = b; /* ascending b: ties keep the smallest */
    return best;
}

/* Rows [r0, r1) of w as one row block's histogram h. Four interleaved
 * histograms: trained weights fall into a few bins, and one array would make
 * every increment wait for the previous one to the same bin (store to load);
 * four independent chains run about 3x faster. */
static void z12_hist_block(const uint16_t *w, uint32_t r0, uint32_t r1, uint32_t k, size_t ld,
                           uint32_t *h)
{
    uint32_t h4[4][Z12_E7_COUNT] = {{0}};
    for (uint32_t r = r0; r < r1; r++) {
        const uint16_t *row = w + (size_t)r * ld;
        uint32_t c = 0;
        for (; c + 4 <= k; c += 4) {
            h4[0][(row[c] >> 8) & 0x7f]++;
            h4[1][(row[c + 1] >> 8) & 0x7f]++;
            h4[2][(row[c + 2] >> 8) & 0x7f]++;
            h4[3][(row[c + 3] >> 8) & 0x7f]++;
        }
        for (; c < k; c++) /* pj_z12_choose_base takes any k */
            h4[0][(row[c] >> 8) & 0x7f]++;
    }
    for (uint32_t e = 0; e < Z12_E7_COUNT; e++)
        h[e] = h4[0][e] + h4[1][e] + h4[2][e] + h4[3][e];
}

/* fp32 simulation of the correction a kernel applies with x = 1. Volatile
 * stores keep each sum rounded to fp32 whatever the compiler's evaluation
 * method. */
static int z12_exact(float wd, float c1, float c2, float w)
{
    volatile float s1 = wd + c1;
    volatile float s2 = s1 + c2;
    return s2 == w;
}

/* Find c1, c2 with fl(fl(w_d + c1) + c2) == w; 0 or -ERANGE. */
static int z12_correction(uint16_t wd_bits, uint16_t w_bits, float *c1, float *c2)
{
    float wd = pj_bf16_to_f32(wd_bits), w = pj_bf16_to_f32(w_bits);
    /* Cancel and restore (see the file comment). */
    if (z12_exact(wd, -wd, w, w)) {
        *c1 = -wd;
        *c2 = w;
        return 0;
    }
    /* TwoSum of w and -w_d: c1 + c2 == w - w_d exactly. */
    volatile float s = w - wd;
    volatile float bv = s - w;
    volatile float av = s - bv;
    float err = (w - av) + (-wd - bv);
    if (z12_exact(wd, s, err, w)) {
        *c1 = s;
        *c2 = err;
        return 0;
    }
    return -ERANGE;
}

void pj_z12_free(pj_z12 *z)
{
    if (!z)
        return;
    free(z->tiles);
    free(z->blk_exc);
    free(z->exc);
    free(z->exc_orig);
    memset(z, 0, sizeof *z);
}

int pj_z12_tile_exc(const pj_z12 *z, uint32_t **off, uint32_t **ent, char *err, size_t errlen)
{
    *off = NULL;
    *ent = NULL;
    const uint32_t kt_n = z->k / PJ_Z12_TILE_K, nblk = z->n_pad / PJ_Z12_TILE_ROWS;
    const size_t ntiles = (size_t)nblk * kt_n;
    uint32_t *o = calloc(ntiles + 1, sizeof *o);
    uint32_t *e = z->n_exc ? malloc((size_t)z->n_exc * sizeof *e) : NULL;
    if (!o || (z->n_exc && !e)) {
        free(o);
        free(e);
        snprintf(err, errlen, "z12 tile exceptions: out of memory (%zu tiles)", ntiles);
        return -ENOMEM;
    }
    /* Counting sort by tile; list order (row, then column) within a tile. */
    for (uint32_t rb = 0; rb < nblk; rb++)
        for (uint32_t i = z->blk_exc[rb]; i < z->blk_exc[rb + 1]; i++) {
            const uint32_t col = z->exc[i].rk & (Z12_K_LIMIT - 1);
            o[(size_t)rb * kt_n + col / PJ_Z12_TILE_K + 1]++;
        }
    for (size_t t = 0; t < ntiles; t++)
        o[t + 1] += o[t];
    for (uint32_t rb = 0; rb < nblk; rb++)
        for (uint32_t i = z->blk_exc[rb]; i < z->blk_exc[rb + 1]; i++) {
            const pj_z12_exc *x = &z->exc[i];
            const uint32_t rr = x->rk >> 28, col = x->rk & (Z12_K_LIMIT - 1);
            uint32_t c2bits;
            memcpy(&c2bits, &x->c2, 4);
            const float wd = pj_bf16_to_f32(pj_z12_decoded(z, rb * PJ_Z12_TILE_ROWS + rr, col));
            volatile float s = wd + x->c1;
            volatile float r = s + x->c2;
            if ((c2bits & 0xffffu) || r != x->c2) {
                free(o);
                free(e);
                snprintf(err, errlen,
                         "z12 tile exceptions: the entry of row %u, column %u is not "
                         "cancel-and-restore (c1 %g, c2 %g)",
                         rb * PJ_Z12_TILE_ROWS + rr, col, (double)x->c1, (double)x->c2);
                return -ENOTSUP;
            }
            /* Fill from the tile's start; o[t] walks up to o[t + 1] (restored below). */
            const size_t t = (size_t)rb * kt_n + col / PJ_Z12_TILE_K;
            e[o[t]++] = (rr * PJ_Z12_TILE_K + col % PJ_Z12_TILE_K) << 16 | c2bits >> 16;
        }
    for (size_t t = ntiles; t > 0; t--)
        o[t] = o[t - 1];
    o[0] = 0;
    *off = o;
    *ent = e;
    return 0;
}

static int z12_check_args(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, char *err,
                          size_t errlen)
{
    if (!w) {
        snprintf(err, errlen, "z12 pack: no weights given");
        return -EINVAL;
    }
    if (n == 0 || k == 0) {
        snprintf(err, errlen, "z12 pack: empty matrix (n=%u, k=%u)", n, k);
        return -EINVAL;
    }
    if (k % PJ_Z12_TILE_K != 0) {
        snprintf(err, errlen, "z12 pack: k=%u is not a multiple of %d", k, PJ_Z12_TILE_K);
        return -EINVAL;
    }
    if (k >= Z12_K_LIMIT) {
        snprintf(err, errlen, "z12 pack: k=%u does not fit the 28-bit exception column", k);
        return -EINVAL;
    }
    if (n > UINT32_MAX - (PJ_Z12_TILE_ROWS - 1)) {
        snprintf(err, errlen, "z12 pack: n=%u cannot be padded to a multiple of 16", n);
        return -EINVAL;
    }
    if (ld < k) {
        snprintf(err, errlen, "z12 pack: row stride %zu is smaller than k=%u", ld, k);
        return -EINVAL;
    }
    return 0;
}

/* The pack runs in passes over row blocks (16 rows), which are independent:
 * a histogram for the window, a count of each row's exceptions (and the
 * first non-finite weight), a prefix sum that gives every row its slice of
 * the exception list, then the tiles. Each pass splits the blocks over
 * pj_parfor's workers; a block's bytes and entries do not depend on which
 * worker wrote them, so the result is the same for any thread count. */

typedef struct z12_job {
    const uint16_t *w;
    uint32_t n, k;
    size_t ld;
    uint32_t base;
    uint32_t *blk_hist;  /* per row block: Z12_E7_COUNT counts of e7 */
    uint32_t *row_cnt;   /* per row: its exceptions */
    uint64_t *first_bad; /* per worker: flat index of the first bad weight */
    pj_z12 *z;
} z12_job;

static void z12_hist_blocks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    (void)worker;
    const z12_job *j = ctx;
    for (size_t rb = begin; rb < end; rb++) {
        const uint32_t r0 = (uint32_t)rb * PJ_Z12_TILE_ROWS;
        const uint32_t r1 = r0 + PJ_Z12_TILE_ROWS < j->n ? r0 + PJ_Z12_TILE_ROWS : j->n;
        z12_hist_block(j->w, r0, r1, j->k, j->ld, j->blk_hist + rb * Z12_E7_COUNT);
    }
}

uint32_t pj_z12_choose_base(const uint16_t *w, uint32_t n, uint32_t k, size_t ld)
{
    /* A block's counts are 32 bits: 16 k of them must fit. */
    if (k >= Z12_K_LIMIT)
        return UINT32_MAX;
    const uint32_t n_blk = (n + PJ_Z12_TILE_ROWS - 1) / PJ_Z12_TILE_ROWS;
    z12_job job = {.w = w, .n = n, .k = k, .ld = ld};
    job.blk_hist = calloc(n_blk ? n_blk : 1, Z12_E7_COUNT * sizeof *job.blk_hist);
    /* Without the blocks' counts the heavy-block rule cannot be applied, and
     * a base chosen without it could differ from the one pj_z12_pack takes. */
    if (!job.blk_hist)
        return UINT32_MAX;
    z12_hist_blocks(&job, 0, n_blk, 0);
    uint32_t base = z12_base_from_blocks(job.blk_hist, n_blk, k);
    free(job.blk_hist);
    return base;
}

/* Exceptions are counted before anything is allocated so the arrays are
 * exact-sized, a count beyond uint32 is refused up front, and a caller can
 * learn the packed size without packing. Non-finite weights are found in the
 * same pass; a worker stops at its first, and the smallest index over all
 * workers is the first in row-major order, as a single pass would find.
 * The inner loop runs over one tile width (a constant trip count, no
 * branch), which the compiler vectorizes at -O2; a chunk that holds a
 * non-finite weight is walked again for its column. */
static void z12_count_blocks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const z12_job *j = ctx;
    const uint32_t lo = j->base;
    for (size_t rb = begin; rb < end; rb++) {
        uint32_t r0 = (uint32_t)rb * PJ_Z12_TILE_ROWS;
        uint32_t r1 = r0 + PJ_Z12_TILE_ROWS < j->n ? r0 + PJ_Z12_TILE_ROWS : j->n;
        for (uint32_t r = r0; r < r1; r++) {
            const uint16_t *row = j->w + (size_t)r * j->ld;
            uint32_t cnt = 0;
            for (uint32_t c0 = 0; c0 < j->k; c0 += PJ_Z12_TILE_K) {
                const uint16_t *ch = row + c0;
                uint16_t out = 0, bad = 0;
                for (uint32_t c = 0; c < PJ_Z12_TILE_K; c++) {
                    uint16_t b = ch[c];
                    /* e7 - lo wraps to a large value below the window */
                    out += (uint16_t)((uint16_t)(((b >> 8) & 0x7fu) - lo) > 7u);
                    bad |= (uint16_t)((b & 0x7f80u) == 0x7f80u);
                }
                if (bad) {
                    uint32_t c = 0;
                    while ((ch[c] & 0x7f80u) != 0x7f80u)
                        c++;
                    j->first_bad[worker] = (uint64_t)r * j->k + c0 + c;
                    return;
                }
                cnt += out;
            }
            j->row_cnt[r] = cnt;
        }
    }
}

/* Tiles and exception entries of row blocks [begin, end). Block rb's
 * entries go to exc[blk_exc[rb] ..], in (row, column) order. A weight
 * without an exact correction (cannot happen for finite weights) stops the
 * worker and is reported like a non-finite one.
 *
 * A block is packed tile by tile, so that a tile's 1536 bytes are written
 * while they are in L1. First each row's 64 columns of the tile are encoded
 * into a low byte and a nibble each (branch-free, vectorized), a nibble
 * byte pairing columns c and c + 8 (c & 8 == 0) as the format does; then
 * the tile is gathered a lane and k16-step at a time: its 8 low bytes and 4
 * nibble bytes are consecutive in the tile and come from rows g and g + 8,
 * columns 16 s + 2 t + {0, 1} (+ 8), two adjacent bytes at a time
 * (ZFORMAT.md). The counting pass gave every row its slice of the list, so
 * an exception goes straight to its slot although tiles come before rows. */
static void z12_pack_blocks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const z12_job *j = ctx;
    pj_z12 *z = j->z;
    const uint32_t k = j->k, base = z->base;
    for (size_t rb = begin; rb < end; rb++) {
        uint32_t r0 = (uint32_t)rb * PJ_Z12_TILE_ROWS;
        uint32_t rows = j->n - r0 < PJ_Z12_TILE_ROWS ? j->n - r0 : PJ_Z12_TILE_ROWS;
        uint32_t next[PJ_Z12_TILE_ROWS]; /* each row's next slot in exc */
        next[0] = z->blk_exc[rb];
        for (uint32_t rr = 1; rr < rows; rr++)
            next[rr] = next[rr - 1] + j->row_cnt[r0 + rr - 1];
        /* Pad rows (n % 16) stay zero, as a decoder expects. */
        uint8_t low[PJ_Z12_TILE_ROWS][PJ_Z12_TILE_K] = {{0}};
        uint8_t pair[PJ_Z12_TILE_ROWS][PJ_Z12_TILE_K / 2] = {{0}}; /* c | (c + 8) << 4 */
        uint8_t *tile = z->tiles + rb * (k / PJ_Z12_TILE_K) * PJ_Z12_TILE_BYTES;
        for (uint32_t c0 = 0; c0 < k; c0 += PJ_Z12_TILE_K, tile += PJ_Z12_TILE_BYTES) {
            for (uint32_t rr = 0; rr < rows; rr++) {
                const uint16_t *ch = j->w + (size_t)(r0 + rr) * j->ld + c0;
                uint8_t nib[PJ_Z12_TILE_K];
                uint16_t out = 0;
                for (uint32_t c = 0; c < PJ_Z12_TILE_K; c++) {
                    uint16_t b = ch[c];
                    /* Saturated outside the window: code 0 and low 0x00
                     * below it, code 7 and low 0xff above (file comment). */
                    int16_t d = (int16_t)(((b >> 8) & 0x7f) - (int)base);
                    uint16_t inside = (uint16_t)((uint16_t)d <= 7u);
                    uint16_t above = (uint16_t)(d > 7);
                    int16_t code = d < 0 ? 0 : (d > 7 ? 7 : d);
                    uint16_t lb = inside ? (uint16_t)(b & 0xffu) : (uint16_t)(above ? 0xffu : 0u);
                    low[rr][c] = (uint8_t)lb;
                    nib[c] = (uint8_t)((b >> 15) << 3 | (uint16_t)code);
                    out |= (uint16_t)!inside;
                }
                for (uint32_t s = 0; s < 4; s++)
                    for (uint32_t q = 0; q < 8; q++)
                        pair[rr][8 * s + q] = (uint8_t)(nib[16 * s + q] | nib[16 * s + q + 8] << 4);
                if (!out)
                    continue;
                for (uint32_t c = 0; c < PJ_Z12_TILE_K; c++) {
                    uint16_t b = ch[c];
                    uint32_t e7 = (b >> 8) & 0x7fu;
                    if (e7 >= base && e7 <= base + 7)
                        continue;
                    uint32_t at = next[rr]++;
                    pj_z12_exc *x = &z->exc[at];
                    if (z12_correction(z12_decode(base, nib[c], low[rr][c]), b, &x->c1, &x->c2)) {
                        j->first_bad[worker] = (uint64_t)(r0 + rr) * k + c0 + c;
                        return;
                    }
                    x->rk = rr << 28 | (c0 + c);
                    z->exc_orig[at] = b;
                }
            }
            for (uint32_t lane = 0; lane < 32; lane++) {
                const uint32_t g = lane >> 2, t = lane & 3;
                for (uint32_t s = 0; s < 4; s++) {
                    const uint32_t c = 16 * s + 2 * t, i = 8 * s + 2 * t;
                    uint16_t a0, b0, a8, b8, pa, pb;
                    memcpy(&a0, &low[g][c], 2);
                    memcpy(&b0, &low[g + 8][c], 2);
                    memcpy(&a8, &low[g][c + 8], 2);
                    memcpy(&b8, &low[g + 8][c + 8], 2);
                    memcpy(&pa, &pair[g][i], 2);
                    memcpy(&pb, &pair[g + 8][i], 2);
                    /* Element j at byte j: little-endian (asserted above). */
                    uint64_t lw =
                        (uint64_t)a0 | (uint64_t)b0 << 16 | (uint64_t)a8 << 32 | (uint64_t)b8 << 48;
                    uint32_t nw = (uint32_t)pa | (uint32_t)pb << 16;
                    memcpy(tile + (s >> 1) * PJ_Z12_PLANE_BYTES + 16 * lane + 8 * (s & 1), &lw, 8);
                    memcpy(tile + Z12_NIB_PLANE + 16 * lane + 4 * s, &nw, 4);
                }
            }
        }
    }
}

static uint64_t z12_first_bad(const uint64_t *first_bad, unsigned workers)
{
    uint64_t m = UINT64_MAX;
    for (unsigned i = 0; i < workers; i++)
        m = first_bad[i] < m ? first_bad[i] : m;
    return m;
}

int pj_z12_pack_mt(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, unsigned threads,
                   size_t max_bytes, pj_z12 *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    int rc = z12_check_args(w, n, k, ld, err, errlen);
    if (rc)
        return rc;

    pj_z12 z = {0};
    z.n = n;
    z.k = k;
    z.n_pad = (n + PJ_Z12_TILE_ROWS - 1) / PJ_Z12_TILE_ROWS * PJ_Z12_TILE_ROWS;
    uint32_t n_blk = z.n_pad / PJ_Z12_TILE_ROWS;
    size_t n_tiles = (size_t)n_blk * (k / PJ_Z12_TILE_K);
    if (n_tiles > SIZE_MAX / PJ_Z12_TILE_BYTES) {
        snprintf(err, errlen, "z12 pack: %u x %u does not fit in memory", n, k);
        return -ENOMEM;
    }

    unsigned nw = pj_parfor_workers(n_blk, threads);
    z12_job job = {.w = w, .n = n, .k = k, .ld = ld, .z = &z};
    job.blk_hist = malloc((size_t)n_blk * Z12_E7_COUNT * sizeof *job.blk_hist);
    job.first_bad = malloc(nw * sizeof *job.first_bad);
    job.row_cnt = malloc((size_t)n * sizeof *job.row_cnt);
    if (!job.blk_hist || !job.first_bad || !job.row_cnt) {
        snprintf(err, errlen, "z12 pack: out of memory for %u x %u", n, k);
        rc = -ENOMEM;
        goto fail;
    }

    pj_parfor(n_blk, threads, z12_hist_blocks, &job);
    z.base = job.base = z12_base_from_blocks(job.blk_hist, n_blk, k);

    for (unsigned i = 0; i < nw; i++)
        job.first_bad[i] = UINT64_MAX;
    unsigned bw = pj_parfor_workers(n_blk, threads);
    pj_parfor(n_blk, threads, z12_count_blocks, &job);
    uint64_t bad = z12_first_bad(job.first_bad, bw);
    if (bad != UINT64_MAX) {
        uint32_t r = (uint32_t)(bad / k), c = (uint32_t)(bad % k);
        uint16_t b = w[(size_t)r * ld + c];
        snprintf(err, errlen, "z12 pack: weight at row %u, column %u is %s (0x%04x)", r, c,
                 (b & 0x7fu) ? "NaN" : "infinite", b);
        rc = -EDOM;
        goto fail;
    }
    uint64_t n_exc = 0;
    for (uint32_t r = 0; r < n; r++)
        n_exc += job.row_cnt[r];
    if (n_exc > UINT32_MAX) {
        snprintf(err, errlen, "z12 pack: %llu exceptions exceed the 32-bit offsets",
                 (unsigned long long)n_exc);
        rc = -EINVAL;
        goto fail;
    }
    z.n_exc = (uint32_t)n_exc;
    z.tiles_bytes = n_tiles * PJ_Z12_TILE_BYTES;
    if (max_bytes && pj_z12_bytes(&z) > max_bytes) {
        /* The size is known now; packing would only be thrown away. */
        snprintf(err, errlen, "z12 pack: %zu bytes would exceed the limit of %zu (%u exceptions)",
                 pj_z12_bytes(&z), max_bytes, z.n_exc);
        free(job.blk_hist);
        free(job.first_bad);
        free(job.row_cnt);
        *out = z; /* shape, base and n_exc only: no arrays */
        return -EFBIG;
    }

    /* Pack writes every byte of every tile (pad rows as zeros), so calloc
     * is not needed for them; it is kept because its pages are first
     * touched by the workers, which spreads a large matrix's page faults
     * over them. */
    z.tiles = calloc(z.tiles_bytes, 1);
    z.blk_exc = malloc(((size_t)n_blk + 1) * sizeof *z.blk_exc);
    if (n_exc) {
        z.exc = malloc((size_t)n_exc * sizeof *z.exc);
        z.exc_orig = malloc((size_t)n_exc * sizeof *z.exc_orig);
    }
    if (!z.tiles || !z.blk_exc || (n_exc && (!z.exc || !z.exc_orig))) {
        snprintf(err, errlen, "z12 pack: out of memory for %u x %u (%llu exceptions)", n, k,
                 (unsigned long long)n_exc);
        rc = -ENOMEM;
        goto fail;
    }
    uint32_t off = 0;
    for (uint32_t r = 0; r < n; r++) {
        if (r % PJ_Z12_TILE_ROWS == 0)
            z.blk_exc[r / PJ_Z12_TILE_ROWS] = off;
        off += job.row_cnt[r];
    }
    z.blk_exc[n_blk] = off;

    pj_parfor(n_blk, threads, z12_pack_blocks, &job);
    bad = z12_first_bad(job.first_bad, bw);
    if (bad != UINT64_MAX) {
        uint32_t r = (uint32_t)(bad / k), c = (uint32_t)(bad % k);
        snprintf(err, errlen, "z12 pack: no exact fp32 correction for row %u, column %u (0x%04x)",
                 r, c, w[(size_t)r * ld + c]);
        rc = -ERANGE;
        goto fail;
    }
    free(job.blk_hist);
    free(job.first_bad);
    free(job.row_cnt);
    *out = z;
    return 0;

fail:
    free(job.blk_hist);
    free(job.first_bad);
    free(job.row_cnt);
    pj_z12_free(&z);
    return rc;
}

int pj_z12_pack(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, pj_z12 *out, char *err,
                size_t errlen)
{
    return pj_z12_pack_mt(w, n, k, ld, 1, 0, out, err, errlen);
}

uint16_t pj_z12_decoded(const pj_z12 *z, uint32_t row, uint32_t col)
{
    const uint8_t *tile = z->tiles + z12_tile_offset(z, row, col);
    z12_pos p = z12_locate(row % PJ_Z12_TILE_ROWS, col % PJ_Z12_TILE_K);
    return z12_decode(z->base, (tile[p.nib] >> p.shift) & 0xfu, tile[p.low]);
}

/* Walks the row's positions forward: in each tile the row is lane group
 * g = rr % 8 (lanes 4g..4g+3, one per t) and, per k16-step s, the fragment
 * elements j0 = 2 * (rr / 8) and j0 + 1 (low nibbles of nibble bytes j0,
 * j0 + 1; columns 16 s + 2 t + {0, 1}) and j0 + 4, j0 + 5 (the high nibbles
 * of the same bytes; those columns + 8). */
void pj_z12_unpack_row(const pj_z12 *z, uint32_t row, uint16_t *row_out)
{
    uint32_t rb = row / PJ_Z12_TILE_ROWS, rr = row % PJ_Z12_TILE_ROWS;
    uint32_t g = rr & 7, j0 = 2 * (rr >> 3), kts = z->k / PJ_Z12_TILE_K;
    uint16_t high[16]; /* nibble -> high byte, already shifted */
    for (uint32_t v = 0; v < 16; v++)
        high[v] = (uint16_t)(((v & 8u) << 12) | ((z->base + (v & 7u)) << 8));
    const uint8_t *blk = z->tiles + (size_t)rb * kts * PJ_Z12_TILE_BYTES;
    for (uint32_t kt = 0; kt < kts; kt++) {
        const uint8_t *tile = blk + (size_t)kt * PJ_Z12_TILE_BYTES;
        uint16_t *out = row_out + (size_t)kt * PJ_Z12_TILE_K;
        for (uint32_t t = 0; t < 4; t++) {
            uint32_t lane = 4 * g + t;
            for (uint32_t s = 0; s < 4; s++) {
                const uint8_t *lb = tile + (s >> 1) * PJ_Z12_PLANE_BYTES + 16 * lane + 8 * (s & 1);
                const uint8_t *nb = tile + Z12_NIB_PLANE + 16 * lane + 4 * s;
                uint16_t *o = out + 16 * s + 2 * t;
                uint32_t n0 = nb[j0], n1 = nb[j0 + 1];
                o[0] = high[n0 & 15] | lb[j0];
                o[1] = high[n1 & 15] | lb[j0 + 1];
                o[8] = high[n0 >> 4] | lb[j0 + 4];
                o[9] = high[n1 >> 4] | lb[j0 + 5];
            }
        }
    }
    /* The row's exceptions: a contiguous run of the block's list, sorted by
     * rk, found by binary search for rk >= rr << 28. */
    uint32_t lo = z->blk_exc[rb], hi = z->blk_exc[rb + 1];
    uint32_t key = rr << 28;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (z->exc[mid].rk < key)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (uint32_t i = lo; i < z->blk_exc[rb + 1] && (z->exc[i].rk >> 28) == rr; i++)
        row_out[z->exc[i].rk & (Z12_K_LIMIT - 1)] = z->exc_orig[i];
}

/* A lane's eight low bytes of k16-step s are consecutive in the tile and
 * its four nibble bytes too, and together they hold rows g and g + 8 at
 * columns 16 s + 2 t + {0, 1} and the same + 8 (the inverse of
 * z12_locate). So a tile is decoded by lane and step with two loads,
 * into a 16 x 64 scratch whose rows are then copied out. */
void pj_z12_unpack_block(const pj_z12 *z, uint32_t rb, uint16_t *out, size_t ld)
{
    assert(ld >= z->k);
    if (rb >= z->n_pad / PJ_Z12_TILE_ROWS)
        return;
    const uint32_t kts = z->k / PJ_Z12_TILE_K, r0 = rb * PJ_Z12_TILE_ROWS;
    const uint32_t rows = z->n - r0 < PJ_Z12_TILE_ROWS ? z->n - r0 : PJ_Z12_TILE_ROWS;
    uint16_t high[16]; /* nibble -> high byte, already shifted */
    for (uint32_t v = 0; v < 16; v++)
        high[v] = (uint16_t)(((v & 8u) << 12) | ((z->base + (v & 7u)) << 8));
    uint16_t dec[PJ_Z12_TILE_ROWS][PJ_Z12_TILE_K];
    const uint8_t *tile = z->tiles + (size_t)rb * kts * PJ_Z12_TILE_BYTES;
    for (uint32_t kt = 0; kt < kts; kt++, tile += PJ_Z12_TILE_BYTES) {
        for (uint32_t lane = 0; lane < 32; lane++) {
            const uint32_t g = lane >> 2, t = lane & 3;
            for (uint32_t s = 0; s < 4; s++) {
                const uint8_t *lb = tile + (s >> 1) * PJ_Z12_PLANE_BYTES + 16 * lane + 8 * (s & 1);
                const uint8_t *nb = tile + Z12_NIB_PLANE + 16 * lane + 4 * s;
                uint16_t *a = &dec[g][16 * s + 2 * t], *b = &dec[g + 8][16 * s + 2 * t];
                a[0] = high[nb[0] & 15] | lb[0];
                a[1] = high[nb[1] & 15] | lb[1];
                b[0] = high[nb[2] & 15] | lb[2];
                b[1] = high[nb[3] & 15] | lb[3];
                a[8] = high[nb[0] >> 4] | lb[4];
                a[9] = high[nb[1] >> 4] | lb[5];
                b[8] = high[nb[2] >> 4] | lb[6];
                b[9] = high[nb[3] >> 4] | lb[7];
            }
        }
        for (uint32_t rr = 0; rr < rows; rr++)
            memcpy(out + rr * ld + (size_t)kt * PJ_Z12_TILE_K, dec[rr], sizeof dec[rr]);
    }
    for (uint32_t i = z->blk_exc[rb]; i < z->blk_exc[rb + 1]; i++)
        out[(z->exc[i].rk >> 28) * ld + (z->exc[i].rk & (Z12_K_LIMIT - 1))] = z->exc_orig[i];
}

typedef struct z12_unpack_job {
    const pj_z12 *z;
    uint16_t *w;
    size_t ld;
} z12_unpack_job;

static void z12_unpack_blocks(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const z12_unpack_job *j = ctx;
    (void)worker;
    for (size_t rb = begin; rb < end; rb++)
        pj_z12_unpack_block(j->z, (uint32_t)rb, j->w + rb * PJ_Z12_TILE_ROWS * j->ld, j->ld);
}

void pj_z12_unpack_mt(const pj_z12 *z, uint16_t *w, size_t ld, unsigned threads)
{
    /* Rows that overlap would be written by two workers at once. */
    assert(ld >= z->k);
    z12_unpack_job j = {z, w, ld};
    pj_parfor(z->n_pad / PJ_Z12_TILE_ROWS, threads, z12_unpack_blocks, &j);
}

void pj_z12_unpack(const pj_z12 *z, uint16_t *w, size_t ld)
{
    pj_z12_unpack_mt(z, w, ld, 1);
}

size_t pj_z12_bytes(const pj_z12 *z)
{
    return z->tiles_bytes + ((size_t)z->n_pad / PJ_Z12_TILE_ROWS + 1) * sizeof(uint32_t) +
           (size_t)z->n_exc * sizeof(pj_z12_exc);
}
