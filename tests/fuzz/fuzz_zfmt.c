/* fuzz_zfmt.c — the 12-bit format's promise on adversarial weights.
 *
 * The input picks a shape (n 1..48, k 64..256) and the weights' bits: taken
 * as they come, or with the exponent pushed to an end of the range (huge,
 * tiny, subnormal, signed zeros) so that windows at base 0 and 120 and
 * exceptions on both sides of them are reached. Then:
 * - a matrix holding a NaN or an infinity is refused (-EDOM), nothing kept;
 * - any finite matrix packs (never -ERANGE) and unpacks to its exact bits,
 *   whole, by block and by row, and on 3 threads byte for byte as on 1;
 * - every weight's decoded value is itself inside the window, and outside
 *   it the exception's two terms restore it exactly in fp32, as a kernel
 *   computes (fl(fl(w_d + c1) + c2) == w, as numbers: -0 gives +0); the
 *   list is sorted and complete;
 * - the by-tile exception table holds each exception once, at its place. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/bf16.h"
#include "kernels/zfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

static int finite_bf16(uint16_t b)
{
    return (b & 0x7f80u) != 0x7f80u;
}

static int same_z12(const pj_z12 *a, const pj_z12 *b)
{
    return a->n == b->n && a->k == b->k && a->base == b->base && a->n_exc == b->n_exc &&
           a->tiles_bytes == b->tiles_bytes && !memcmp(a->tiles, b->tiles, a->tiles_bytes) &&
           !memcmp(a->blk_exc, b->blk_exc, (a->n_pad / PJ_Z12_TILE_ROWS + 1) * 4) &&
           (!a->n_exc || (!memcmp(a->exc, b->exc, a->n_exc * sizeof *a->exc) &&
                          !memcmp(a->exc_orig, b->exc_orig, a->n_exc * 2)));
}

/* fl(fl(wd + c1) + c2) in fp32, each sum rounded (volatile: no wider
 * evaluation, no fused form). */
static float corrected(float wd, float c1, float c2)
{
    volatile float s1 = wd + c1;
    volatile float s2 = s1 + c2;
    return s2;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    const uint32_t n = 1 + data[0] % 48, k = 64 * (1 + data[1] % 4);
    const uint8_t mode = data[2];
    data += 3;
    size -= 3;
    const size_t count = (size_t)n * k;
    uint16_t *w = malloc(count * 2), *back = malloc(count * 2);
    check(w && back);
    int finite = 1;
    for (size_t i = 0; i < count; i++) {
        size_t at = (2 * i) % size;
        uint16_t b = (uint16_t)(data[at] | (at + 1 < size ? data[at + 1] : 0) << 8);
        switch (mode % 5) {
        case 1: /* huge: exponent near the top, finite */
            b = (uint16_t)((b & 0x807f) | (0x7e00 - (uint16_t)((b >> 7) & 0x7) * 0x80));
            break;
        case 2: /* tiny and subnormal */
            b = (uint16_t)(b & 0x81ff);
            break;
        case 3: /* a narrow band with a few far outliers, as trained weights */
            b = (i * 7919 + mode) % 61 ? (uint16_t)((b & 0x80ff) | 0x3c00) : b;
            break;
        case 4: /* signed zeros among ones */
            b = (b & 1) ? (uint16_t)(b & 0x8000) : (uint16_t)(0x3f80 | (b & 0x8000));
            break;
        }
        w[i] = b;
        finite &= finite_bf16(b);
    }
    pj_z12 z, z3;
    char err[256];
    int rc = pj_z12_pack(w, n, k, k, &z, err, sizeof err);
    if (!finite) {
        check(rc == -EDOM && z.tiles == NULL && z.exc == NULL);
        free(w);
        free(back);
        return 0;
    }
    check(rc == 0);
    check(z.base <= 120);
    check(pj_z12_pack_mt(w, n, k, k, 3, 0, &z3, err, sizeof err) == 0);
    check(same_z12(&z, &z3));
    pj_z12_free(&z3);

    memset(back, 0xff, count * 2);
    pj_z12_unpack(&z, back, k);
    check(!memcmp(back, w, count * 2));
    memset(back, 0xff, count * 2);
    pj_z12_unpack_mt(&z, back, k, 3);
    check(!memcmp(back, w, count * 2));
    memset(back, 0xff, count * 2);
    for (uint32_t rb = 0; rb < z.n_pad / PJ_Z12_TILE_ROWS; rb++)
        pj_z12_unpack_block(&z, rb, back + (size_t)rb * PJ_Z12_TILE_ROWS * k, k);
    check(!memcmp(back, w, count * 2));
    memset(back, 0xff, (size_t)k * 2);
    pj_z12_unpack_row(&z, n - 1, back);
    check(!memcmp(back, w + (size_t)(n - 1) * k, (size_t)k * 2));

    /* The decode and the corrections, as a kernel sees them. */
    uint32_t seen = 0;
    for (uint32_t r = 0; r < n; r++) {
        const uint32_t rb = r / PJ_Z12_TILE_ROWS;
        uint32_t e = z.blk_exc[rb];
        for (uint32_t c = 0; c < k; c++) {
            const uint16_t orig = w[(size_t)r * k + c], wd = pj_z12_decoded(&z, r, c);
            const uint32_t e7 = (orig >> 8) & 0x7f;
            const int inside = e7 >= z.base && e7 <= z.base + 7;
            check(finite_bf16(wd));
            /* the block's entries of this row, in (row, k) order */
            while (e < z.blk_exc[rb + 1] &&
                   ((z.exc[e].rk >> 28) < r % 16 ||
                    ((z.exc[e].rk >> 28) == r % 16 && (z.exc[e].rk & 0x0fffffffu) < c)))
                e++;
            const int listed = e < z.blk_exc[rb + 1] && (z.exc[e].rk >> 28) == r % 16 &&
                               (z.exc[e].rk & 0x0fffffffu) == c;
            check(listed == !inside);
            if (inside) {
                check(wd == orig);
                continue;
            }
            seen++;
            /* stored saturated: the decoded value is inside the window */
            const uint32_t d7 = (wd >> 8) & 0x7f;
            check(d7 >= z.base && d7 <= z.base + 7);
            check(z.exc_orig[e] == orig);
            const float got = corrected(pj_bf16_to_f32(wd), z.exc[e].c1, z.exc[e].c2);
            const float want = pj_bf16_to_f32(orig);
            /* Equal as numbers: a -0 comes back +0 (ZFORMAT.md, "Signed
             * zero"), which no output shows, every accumulator starting at
             * +0. */
            check(got == want);
        }
    }
    check(seen == z.n_exc);

    /* Every entry is cancel-and-restore, so the by-tile table always
     * builds; each position in it once, and only outside the window. */
    uint32_t *off = NULL, *ent = NULL;
    check(pj_z12_tile_exc(&z, &off, &ent, err, sizeof err) == 0);
    const uint32_t tiles = z.n_pad / PJ_Z12_TILE_ROWS * (k / PJ_Z12_TILE_K);
    check(off[0] == 0 && off[tiles] == z.n_exc);
    uint8_t *hit = calloc(count, 1);
    check(hit != NULL);
    for (uint32_t t = 0; t < tiles; t++) {
        const uint32_t rb = t / (k / PJ_Z12_TILE_K), kt = t % (k / PJ_Z12_TILE_K);
        check(off[t] <= off[t + 1]);
        for (uint32_t i = off[t]; i < off[t + 1]; i++) {
            const uint32_t pos = ent[i] >> 16;
            const uint32_t r = rb * PJ_Z12_TILE_ROWS + pos / 64, c = kt * 64 + pos % 64;
            check(pos < PJ_Z12_TILE_ROWS * 64 && r < n);
            const uint16_t orig = w[(size_t)r * k + c];
            const uint32_t e7 = (orig >> 8) & 0x7f;
            check((ent[i] & 0xffffu) == orig && (e7 < z.base || e7 > z.base + 7));
            check(!hit[(size_t)r * k + c]);
            hit[(size_t)r * k + c] = 1;
        }
    }
    free(hit);
    free(off);
    free(ent);
    pj_z12_free(&z);
    free(w);
    free(back);
    return 0;
}
