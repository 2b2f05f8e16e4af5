/* test_zfmt.c — the z12 format: lossless round trip, the GPU tile layout
 * (checked against an independent emulation of the documented decoder), the
 * exception entries, the window choice, errors and the byte accounting. */
#include "tests/helpers/testrng.h"
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kernels/bf16.h"
#include "kernels/parfor.h"
#include "kernels/zfmt.h"

/* ck_assert* records every passing check (a write to the parent process in
 * fork mode), which dominates loops over millions of elements; REQUIRE only
 * acts on failure. */
#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

/* ---- helpers ------------------------------------------------------------ */

/* A random finite bf16 with any exponent. */
static uint16_t rand_finite_bf16(uint64_t *s)
{
    uint16_t b;
    do {
        b = (uint16_t)sm_next(s);
    } while ((b & 0x7f80u) == 0x7f80u);
    return b;
}

static uint16_t *alloc_u16(size_t count)
{
    uint16_t *p = malloc(count * sizeof *p + 1);
    ck_assert_ptr_nonnull(p);
    return p;
}

/* Weights like a trained layer: rows scaled log-normally, Gaussian values,
 * a few large outliers and exact zeros. */
static void fill_realistic(uint16_t *w, uint32_t n, uint32_t k, uint64_t seed)
{
    uint64_t s = seed;
    for (uint32_t r = 0; r < n; r++) {
        double scale = 0.02 * exp(0.5 * sm_normal(&s));
        for (uint32_t c = 0; c < k; c++) {
            double v = scale * sm_normal(&s);
            double u = sm_unit(&s);
            if (u < 2e-5)
                v = 0.0;
            else if (u < 4e-5)
                v *= 300.0;
            w[(size_t)r * k + c] = pj_f32_to_bf16((float)v);
        }
    }
}

/* ---- an independent model of the documented layout ----------------------- */

/* PTX prmt.b32 (default mode): byte i of the result is byte sel_i of the
 * 8-byte value {b, a} (a = bytes 0..3, b = bytes 4..7). */
static uint32_t prmt(uint32_t a, uint32_t b, uint32_t sel)
{
    uint64_t v = (uint64_t)b << 32 | a;
    uint32_t d = 0;
    for (int i = 0; i < 4; i++) {
        uint32_t k = (sel >> (4 * i)) & 7u;
        d |= (uint32_t)((v >> (8 * k)) & 0xffu) << (8 * i);
    }
    return d;
}

static uint32_t load32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* Decode the whole padded matrix the way a warp does: per tile, per lane,
 * per k16-step s: N = nibble word s, L0/L1 = low-byte words, two byte-add
 * expressions for the high bytes, four permutes into the four A registers,
 * then the mma fragment map (lane, element) -> (row, col). dec is
 * n_pad x k. Also checks that the map hits every position once. */
static void emulate_decode(const pj_z12 *z, uint16_t *dec)
{
    uint32_t kts = z->k / 64, rbs = z->n_pad / 16;
    uint32_t basew = z->base * 0x01010101u;
    uint8_t *hit = calloc((size_t)z->n_pad * z->k, 1);
    ck_assert_ptr_nonnull(hit);
    for (uint32_t rb = 0; rb < rbs; rb++) {
        for (uint32_t kt = 0; kt < kts; kt++) {
            const uint8_t *tile = z->tiles + ((size_t)rb * kts + kt) * 1536;
            for (uint32_t lane = 0; lane < 32; lane++) {
                uint32_t g = lane / 4, t = lane % 4;
                for (uint32_t s = 0; s < 4; s++) {
                    uint32_t N = load32(tile + 1024 + 16 * lane + 4 * s);
                    const uint8_t *lp = tile + (s / 2) * 512 + 16 * lane + 8 * (s % 2);
                    uint32_t L0 = load32(lp), L1 = load32(lp + 4);
                    uint32_t H0 = ((N & 0x07070707u) + basew) | ((N << 4) & 0x80808080u);
                    uint32_t H1 = (((N >> 4) & 0x07070707u) + basew) | (N & 0x80808080u);
                    uint32_t a[4] = {prmt(L0, H0, 0x5140), prmt(L0, H0, 0x7362),
                                     prmt(L1, H1, 0x5140), prmt(L1, H1, 0x7362)};
                    for (uint32_t j = 0; j < 8; j++) {
                        uint16_t v = (uint16_t)(a[j / 2] >> (16 * (j & 1)));
                        uint32_t row = 16 * rb + g + 8 * ((j >> 1) & 1);
                        uint32_t col = 64 * kt + 16 * s + 2 * t + (j & 1) + 8 * (j >> 2);
                        size_t at = (size_t)row * z->k + col;
                        REQUIRE(!hit[at], "(%u, %u) mapped twice", row, col);
                        hit[at] = 1;
                        dec[at] = v;
                    }
                }
            }
        }
    }
    for (size_t i = 0; i < (size_t)z->n_pad * z->k; i++)
        REQUIRE(hit[i], "position %zu never mapped", i);
    free(hit);
}

/* The window rule of zfmt.h, weight by weight: the fewest exceptions
 * (smallest base on ties), unless a 16-row block then holds more than
 * PJ_Z12_BLOCK_EXC_STREAMED; then the least excess of the heaviest block over
 * that among the bases with at most 2x the fewest exceptions plus one per
 * block or 1 % more bytes (12 per exception, 1.5 per padded weight),
 * then fewer exceptions, then the smaller base. */
static uint32_t brute_base(const uint16_t *w, uint32_t n, uint32_t k, size_t ld)
{
    uint64_t out[121], excess[121];
    const uint32_t n_blk = (n + 15) / 16;
    for (uint32_t b = 0; b <= 120; b++) {
        out[b] = excess[b] = 0;
        for (uint32_t rb = 0; rb < n_blk; rb++) {
            uint64_t in_blk = 0;
            for (uint32_t r = rb * 16; r < n && r < rb * 16 + 16; r++)
                for (uint32_t c = 0; c < k; c++) {
                    uint32_t e7 = (w[(size_t)r * ld + c] >> 8) & 0x7f;
                    in_blk += !(e7 >= b && e7 <= b + 7);
                }
            out[b] += in_blk;
            if (in_blk > PJ_Z12_BLOCK_EXC_STREAMED &&
                in_blk - PJ_Z12_BLOCK_EXC_STREAMED > excess[b])
                excess[b] = in_blk - PJ_Z12_BLOCK_EXC_STREAMED;
        }
    }
    uint32_t fewest = 0;
    for (uint32_t b = 1; b <= 120; b++)
        if (out[b] < out[fewest])
            fewest = b;
    if (excess[fewest] == 0)
        return fewest;
    uint32_t best = fewest;
    for (uint32_t b = 0; b <= 120; b++) {
        const uint64_t by_bytes = out[fewest] + (uint64_t)n_blk * 16 * k * 3 / 2 / 100 / 12;
        if (out[b] > 2 * out[fewest] + n_blk && out[b] > by_bytes)
            continue;
        if (excess[b] < excess[best] || (excess[b] == excess[best] && out[b] < out[best]) ||
            (excess[b] == excess[best] && out[b] == out[best] && b < best))
            best = b;
    }
    return best;
}

/* fl(fl(a + b) + c) in fp32. */
static float sum3(float a, float b, float c)
{
    volatile float s = a + b;
    volatile float t = s + c;
    return t;
}

static float mul(float a, float b)
{
    volatile float p = a * b;
    return p;
}

typedef struct check_stats {
    uint64_t weights, exceptions;
} check_stats;

/* Everything the format promises about one packed matrix. */
static void verify_packed(const pj_z12 *z, const uint16_t *w, uint32_t n, uint32_t k, size_t ld,
                          int full_decode, check_stats *st)
{
    REQUIRE((z->n) == (n), "z->n == n");
    REQUIRE((z->k) == (k), "z->k == k");
    REQUIRE((z->n_pad) == ((n + 15) / 16 * 16), "z->n_pad == (n + 15) / 16 * 16");
    REQUIRE((z->tiles_bytes) == ((size_t)z->n_pad * k * 3 / 2),
            "z->tiles_bytes == (size_t)z->n_pad * k * 3 / 2");
    REQUIRE((z->base) <= (120), "z->base <= 120");
    REQUIRE((z->base) == (pj_z12_choose_base(w, n, k, ld)),
            "z->base == pj_z12_choose_base(w, n, k, ld)");

    /* Round trip, whole and per row. */
    uint16_t *back = alloc_u16((size_t)n * (k + 3));
    for (size_t i = 0; i < (size_t)n * (k + 3); i++)
        back[i] = 0xdead;
    pj_z12_unpack(z, back, k + 3);
    for (uint32_t r = 0; r < n; r++) {
        for (uint32_t c = 0; c < k; c++)
            REQUIRE(back[(size_t)r * (k + 3) + c] == w[(size_t)r * ld + c],
                    "unpack (%u, %u): 0x%04x != 0x%04x", r, c, back[(size_t)r * (k + 3) + c],
                    w[(size_t)r * ld + c]);
        for (uint32_t c = k; c < k + 3; c++)
            REQUIRE((back[(size_t)r * (k + 3) + c]) == (0xdead),
                    "back[(size_t)r * (k + 3) + c] == 0xdead");
    }
    uint16_t *row = alloc_u16((size_t)k + 1);
    uint32_t step = n > 64 ? 7 : 1;
    for (uint32_t r = 0; r < n; r += step) {
        row[k] = 0xbeef;
        pj_z12_unpack_row(z, r, row);
        REQUIRE(memcmp(row, w + (size_t)r * ld, (size_t)k * 2) == 0, "unpack_row %u", r);
        REQUIRE((row[k]) == (0xbeef), "row[k] == 0xbeef");
    }

    /* Exception list structure. */
    uint32_t rbs = z->n_pad / 16;
    REQUIRE((z->blk_exc[0]) == (0), "z->blk_exc[0] == 0");
    REQUIRE((z->blk_exc[rbs]) == (z->n_exc), "z->blk_exc[rbs] == z->n_exc");
    for (uint32_t rb = 0; rb < rbs; rb++) {
        REQUIRE((z->blk_exc[rb]) <= (z->blk_exc[rb + 1]), "z->blk_exc[rb] <= z->blk_exc[rb + 1]");
        for (uint32_t i = z->blk_exc[rb]; i < z->blk_exc[rb + 1]; i++) {
            uint32_t rr = z->exc[i].rk >> 28, c = z->exc[i].rk & 0x0fffffffu;
            REQUIRE((16 * rb + rr) < (n), "16 * rb + rr < n");
            REQUIRE((c) < (k), "c < k");
            if (i > z->blk_exc[rb])
                REQUIRE((z->exc[i - 1].rk) < (z->exc[i].rk), "z->exc[i - 1].rk < z->exc[i].rk");
        }
    }

    /* Decoded values: independent emulation == pj_z12_decoded everywhere;
     * in-window weights decode to themselves; the others have an exception
     * with an exact correction and decode to the nearest window value. */
    uint16_t *dec = NULL;
    if (full_decode) {
        dec = alloc_u16((size_t)z->n_pad * k);
        emulate_decode(z, dec);
        for (uint32_t r = 0; r < z->n_pad; r++)
            for (uint32_t c = 0; c < k; c++)
                REQUIRE(dec[(size_t)r * k + c] == pj_z12_decoded(z, r, c),
                        "decoded (%u, %u): emulation 0x%04x, pj_z12_decoded 0x%04x", r, c,
                        dec[(size_t)r * k + c], pj_z12_decoded(z, r, c));
        /* Padding rows: zero low bytes and nibbles. */
        for (uint32_t r = n; r < z->n_pad; r++)
            for (uint32_t c = 0; c < k; c++)
                REQUIRE((dec[(size_t)r * k + c]) == (z->base << 8),
                        "dec[(size_t)r * k + c] == z->base << 8");
    }
    uint32_t ne = 0;
    for (uint32_t r = 0; r < n; r++) {
        uint32_t rb = r / 16;
        for (uint32_t c = 0; c < k; c++) {
            uint16_t b = w[(size_t)r * ld + c];
            uint16_t d = pj_z12_decoded(z, r, c);
            uint32_t e7 = (b >> 8) & 0x7f;
            int inside = e7 >= z->base && e7 <= z->base + 7;
            if (inside) {
                REQUIRE(d == b, "(%u, %u): decoded 0x%04x != 0x%04x", r, c, d, b);
                continue;
            }
            uint16_t sat = (uint16_t)((b & 0x8000u) |
                                      (e7 < z->base ? z->base << 8 : (z->base + 7) << 8 | 0xff));
            REQUIRE(d == sat, "(%u, %u): 0x%04x decoded 0x%04x, want saturated 0x%04x", r, c, b, d,
                    sat);
            REQUIRE((ne) < (z->n_exc), "ne < z->n_exc");
            const pj_z12_exc *x = &z->exc[ne];
            REQUIRE((ne) >= (z->blk_exc[rb]), "ne >= z->blk_exc[rb]");
            REQUIRE((ne) < (z->blk_exc[rb + 1]), "ne < z->blk_exc[rb + 1]");
            REQUIRE((x->rk) == ((r % 16) << 28 | c), "(%u, %u): rk 0x%08x", r, c, x->rk);
            REQUIRE((z->exc_orig[ne]) == (b), "z->exc_orig[ne] == b");
            float wd = pj_bf16_to_f32(d), wf = pj_bf16_to_f32(b);
            float got = sum3(wd, x->c1, x->c2);
            REQUIRE(got == wf, "(%u, %u): fl(fl(%a + %a) + %a) = %a != w = %a", r, c, (double)wd,
                    (double)x->c1, (double)x->c2, (double)got, (double)wf);
            /* The GPU product form with a one-hot input x: exact for x = 1
             * and, with this construction, for any x whose products stay
             * finite. */
            REQUIRE(sum3(mul(wd, 1.0f), mul(x->c1, 1.0f), mul(x->c2, 1.0f)) == wf,
                    "(%u, %u): x = 1 product form", r, c);
            static const float xs[] = {-1.0f, 0.5f, 3.0f, -0.0078125f, 1.5f, 97.0f, -1e-3f};
            for (size_t q = 0; q < sizeof xs / sizeof xs[0]; q++) {
                float xv = pj_bf16_to_f32(pj_f32_to_bf16(xs[q]));
                float want = mul(wf, xv);
                if (!isfinite(want) || !isfinite(mul(wd, xv)))
                    continue;
                float g2 = sum3(mul(wd, xv), mul(x->c1, xv), mul(x->c2, xv));
                REQUIRE(g2 == want, "(%u, %u) x=%a: %a != %a", r, c, (double)xv, (double)g2,
                        (double)want);
            }
            ne++;
        }
    }
    REQUIRE((ne) == (z->n_exc), "ne == z->n_exc");

    ck_assert_uint_eq(pj_z12_bytes(z),
                      z->tiles_bytes + (z->n_pad / 16 + 1) * 4 + (size_t)z->n_exc * 12);
    if (st) {
        st->weights += (uint64_t)n * k;
        st->exceptions += z->n_exc;
    }
    free(dec);
    free(row);
    free(back);
}

static void pack_ok(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, pj_z12 *z)
{
    char err[256] = "";
    int rc = pj_z12_pack(w, n, k, ld, z, err, sizeof err);
    REQUIRE(rc == 0, "pack %ux%u: rc=%d: %s", n, k, rc, err);
}

static const uint32_t odd_n[] = {1, 7, 16, 33, 100};
static const uint32_t odd_k[] = {64, 128, 320, 1024};

/* ---- tests ---------------------------------------------------------------- */

/* The header's (lane, element) -> (row, col) map is a bijection on a tile and
 * pj_z12_decoded agrees with it, checked on a matrix of distinct values. */
START_TEST(test_layout_worked_example)
{
    enum { N = 16, K = 64 };
    uint16_t w[N * K];
    /* Exponent fixed inside one window; low byte = the column, sign and
     * exponent LSB spread the rows. Each (row, col) gets a distinct value. */
    for (uint32_t r = 0; r < N; r++)
        for (uint32_t c = 0; c < K; c++)
            w[r * K + c] =
                (uint16_t)(((r & 1) << 15) | ((60 + (r >> 1)) << 8) | (c * 4 % 256) | (c >> 6));
    pj_z12 z;
    pack_ok(w, N, K, K, &z);
    ck_assert_uint_eq(z.n_exc, 0);
    /* The worked example of ZFORMAT.md: lane 13 (g = 3, t = 1), element 22
     * (s = 2, j = 6) is row 3 + 8 = 11, column 32 + 2 + 0 + 8 = 42. Its low
     * byte is byte 6 of lane 13's 16 bytes in plane 1; its nibble is the high
     * half (j >= 4) of byte j - 4 = 2 of lane 13's nibble word s = 2. */
    uint16_t v = w[11 * K + 42];
    ck_assert_uint_eq(z.tiles[512 + 16 * 13 + 6], v & 0xff);
    uint32_t nib = (z.tiles[1024 + 16 * 13 + 8 + 2] >> 4) & 0xf;
    ck_assert_uint_eq(nib, ((v >> 15) << 3) | (((v >> 8) & 0x7f) - z.base));
    verify_packed(&z, w, N, K, K, 1, NULL);
    pj_z12_free(&z);
}
END_TEST

START_TEST(test_roundtrip_random_odd_shapes)
{
    check_stats st = {0};
    for (size_t a = 0; a < sizeof odd_n / sizeof odd_n[0]; a++) {
        for (size_t b = 0; b < sizeof odd_k / sizeof odd_k[0]; b++) {
            for (uint64_t seed = 1; seed <= 3; seed++) {
                uint32_t n = odd_n[a], k = odd_k[b];
                uint64_t s = seed * 1000003 + n * 31 + k;
                uint16_t *w = alloc_u16((size_t)n * k);
                /* seed 1: any finite bit pattern; 2: a narrow band of
                 * exponents; 3: band plus 1% anything. */
                for (size_t i = 0; i < (size_t)n * k; i++) {
                    uint16_t any = rand_finite_bf16(&s);
                    uint16_t band = (uint16_t)((any & 0x80ffu) | ((56 + sm_next(&s) % 10) << 8));
                    w[i] = seed == 1 ? any : (seed == 3 && sm_next(&s) % 100 == 0) ? any : band;
                }
                pj_z12 z;
                pack_ok(w, n, k, k, &z);
                verify_packed(&z, w, n, k, k, 1, &st);
                pj_z12_free(&z);
                free(w);
            }
        }
    }
    ck_assert_uint_gt(st.exceptions, 0);
}
END_TEST

START_TEST(test_roundtrip_row_stride)
{
    /* ld > k: the gap between rows is never read into the format. */
    uint32_t n = 33, k = 192;
    size_t ld = 200;
    uint64_t s = 99;
    uint16_t *w = alloc_u16((size_t)n * ld);
    for (size_t i = 0; i < (size_t)n * ld; i++)
        w[i] = (i % ld) >= k ? 0x7fc0 /* NaN: must not be seen */ : rand_finite_bf16(&s);
    pj_z12 z;
    pack_ok(w, n, k, ld, &z);
    verify_packed(&z, w, n, k, ld, 1, NULL);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* Every finite bf16 value, under every window base: each base pinned by a
 * cluster ten times as large inside its window, the 65280 values spread
 * through it (most of them exceptions). Packed on 2 threads, unpacked on
 * 3 into rows of stride k + 3 whose gaps must stay untouched, and by
 * rows; every element must come back bit for bit. Then the last, partial
 * row block and the one past the end through pj_z12_unpack_block: rows
 * past n and a block past the end write nothing. */
START_TEST(test_every_value_every_base)
{
    const uint32_t n = 702, k = 1024; /* 718848 elements, 14 rows in the last block */
    const size_t ld = k + 3, count = (size_t)n * ld;
    uint16_t *vals = alloc_u16(65536), *w = alloc_u16(count), *got = alloc_u16(count);
    uint16_t *row = alloc_u16(k), *blk = alloc_u16(16 * ld);
    size_t nv = 0;
    for (uint32_t u = 0; u < 65536; u++)
        if (((u >> 7) & 0xff) != 0xff)
            vals[nv++] = (uint16_t)u;
    ck_assert_uint_eq(nv, 65280);
    const size_t step = (size_t)n * k / nv; /* 11 */
    char err[256] = "";
    for (uint32_t base = 0; base <= 120; base++) {
        uint64_t seed = 0xba5e0000u + base;
        for (size_t e = 0; e < count; e++) {
            const uint64_t r = sm_next(&seed);
            const uint32_t e7 = base + (uint32_t)(r & 7);
            uint32_t low = (uint32_t)(r >> 8) & 0xff;
            if (e7 == 127)
                low &= 0x7f; /* exponent 0xfe at most: finite */
            w[e] = (e % ld) >= k ? 0x7fc0 : (uint16_t)((r >> 20 & 1) << 15 | e7 << 8 | low);
        }
        for (size_t i = 0; i < nv; i++) {
            const size_t p = i * step;
            w[(p / k) * ld + p % k] = vals[i];
        }
        pj_z12 z;
        memset(&z, 0, sizeof z);
        int rc = pj_z12_pack_mt(w, n, k, ld, 2, 0, &z, err, sizeof err);
        REQUIRE(rc == 0, "base %u: pack: %d %s", base, rc, err);
        REQUIRE(z.base == base, "the window pinned at %u, chosen %u", base, z.base);
        REQUIRE(pj_z12_choose_base(w, n, k, ld) == base, "base %u: choose_base disagrees", base);
        for (size_t e = 0; e < count; e++)
            got[e] = 0x7fc1; /* a NaN no weight of this test is */
        pj_z12_unpack_mt(&z, got, ld, 3);
        for (size_t e = 0; e < count; e++)
            REQUIRE(got[e] == ((e % ld) >= k ? 0x7fc1 : w[e]),
                    "base %u: (%zu, %zu) 0x%04x, want 0x%04x", base, e / ld, e % ld, got[e],
                    (e % ld) >= k ? 0x7fc1 : w[e]);
        for (uint32_t r = base % 37; r < n; r += 37) {
            pj_z12_unpack_row(&z, r, row);
            REQUIRE(memcmp(row, w + (size_t)r * ld, (size_t)k * 2) == 0, "base %u: row %u", base,
                    r);
        }
        const uint32_t last = (n - 1) / 16;
        for (uint32_t rb = last; rb <= last + 1; rb++) {
            for (size_t e = 0; e < 16 * ld; e++)
                blk[e] = 0x7fc1;
            pj_z12_unpack_block(&z, rb, blk, ld);
            for (uint32_t rr = 0; rr < 16; rr++)
                for (uint32_t c = 0; c < ld; c++) {
                    const uint32_t r = rb * 16 + rr;
                    const uint16_t want = r < n && c < k ? w[(size_t)r * ld + c] : 0x7fc1;
                    REQUIRE(blk[(size_t)rr * ld + c] == want,
                            "base %u: block %u row %u col %u: 0x%04x, want 0x%04x", base, rb, rr, c,
                            blk[(size_t)rr * ld + c], want);
                }
        }
        pj_z12_free(&z);
    }
    /* Past the packer's k, the window is not chosen (a block's counts
     * would wrap). */
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, 1u << 28, (size_t)1 << 28), UINT32_MAX);
    free(vals);
    free(w);
    free(got);
    free(row);
    free(blk);
}
END_TEST

START_TEST(test_realistic)
{
    check_stats st = {0};
    for (size_t a = 0; a < sizeof odd_n / sizeof odd_n[0]; a++)
        for (size_t b = 0; b < sizeof odd_k / sizeof odd_k[0]; b++) {
            uint32_t n = odd_n[a], k = odd_k[b];
            uint16_t *w = alloc_u16((size_t)n * k);
            fill_realistic(w, n, k, n * 7919 + k);
            pj_z12 z;
            pack_ok(w, n, k, k, &z);
            verify_packed(&z, w, n, k, k, 1, &st);
            pj_z12_free(&z);
            free(w);
        }
    ck_assert_uint_gt(st.exceptions, 0);
}
END_TEST

/* Every exponent 0..254, both signs, zeros, subnormals. */
START_TEST(test_adversarial_all_exponents)
{
    uint32_t n = 33, k = 1024;
    uint64_t s = 4242;
    uint16_t *w = alloc_u16((size_t)n * k);
    for (uint32_t i = 0; i < n * k; i++) {
        uint32_t e = i % 255; /* biased exponent */
        uint16_t m = (uint16_t)sm_next(&s);
        w[i] = (uint16_t)((m & 0x8000u) | e << 7 | (m & 0x7fu));
    }
    w[0] = 0x0000;
    w[1] = 0x8000;
    w[2] = 0x0001; /* smallest subnormal */
    w[3] = 0x807f; /* largest negative subnormal */
    w[4] = 0x7f7f; /* largest finite */
    w[5] = 0xff7f;
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    verify_packed(&z, w, n, k, k, 1, NULL);
    /* 8 of 128 e7 values fit: most weights are exceptions. */
    ck_assert_uint_gt(z.n_exc, n * k * 8 / 10);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* A dominant cluster pins the window to [40, 47]; values planted at
 * e7 = 39, 40, 47, 48 (each exponent LSB, each sign) sit on its edges. */
START_TEST(test_adversarial_window_edges)
{
    uint32_t n = 16, k = 256;
    uint64_t s = 5;
    uint16_t *w = alloc_u16((size_t)n * k);
    for (uint32_t i = 0; i < n * k; i++)
        w[i] = (uint16_t)((sm_next(&s) & 0x80ffu) | (40 + sm_next(&s) % 8) << 8);
    const uint32_t edges[] = {39, 40, 47, 48};
    for (uint32_t i = 0; i < 64; i++) {
        uint32_t e7 = edges[i % 4];
        uint16_t v =
            (uint16_t)(((i >> 2) & 1) << 15 | e7 << 8 | ((i >> 3) & 1) << 7 | (sm_next(&s) & 0x7f));
        w[(i * 37) % (n * k)] = v;
    }
    /* Keep the window: e7 = 40 and 47 must both stay popular. */
    for (uint32_t i = 0; i < 200; i++)
        w[(i * 11 + 5) % (n * k)] = (uint16_t)((i % 2 ? 40 : 47) << 8 | (i & 0xff));
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    ck_assert_uint_eq(z.base, 40);
    verify_packed(&z, w, n, k, k, 1, NULL);
    uint32_t planted_out = 0;
    for (uint32_t i = 0; i < n * k; i++) {
        uint32_t e7 = (w[i] >> 8) & 0x7f;
        planted_out += e7 == 39 || e7 == 48;
    }
    ck_assert_uint_eq(z.n_exc, planted_out);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* Rows made only of exceptions (zeros, tiny values, huge outliers) among
 * ordinary rows, including a whole 16-row block and the last, partial one. */
START_TEST(test_adversarial_exception_rows)
{
    uint32_t n = 50, k = 320;
    uint16_t *w = alloc_u16((size_t)n * k);
    fill_realistic(w, n, k, 17);
    uint64_t s = 3;
    for (uint32_t c = 0; c < k; c++) {
        w[0 * k + c] = 0x0000;                                        /* +0 */
        w[1 * k + c] = 0x8000;                                        /* -0 */
        w[2 * k + c] = (uint16_t)(sm_next(&s) & 0x807fu);             /* subnormals */
        w[3 * k + c] = (uint16_t)(0x4000u | (sm_next(&s) & 0x8fffu)); /* huge */
        w[4 * k + c] = (uint16_t)((sm_next(&s) & 0x80ffu) | 0x0d00u); /* ~1e-30 */
        for (uint32_t r = 16; r < 32; r++)
            w[r * k + c] = (uint16_t)((sm_next(&s) & 0x80ffu) | (c % 2 ? 0x0500u : 0x7000u));
        w[49 * k + c] = (uint16_t)(c % 2 ? 0x0000 : 0x8000);
    }
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    verify_packed(&z, w, n, k, k, 1, NULL);
    ck_assert_uint_eq(z.blk_exc[2] - z.blk_exc[1] >= 16 * k, 1);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* The largest share of exceptions the window choice allows: e7 spread evenly
 * over all 128 values leaves 120 of every 128 weights outside. (A matrix of
 * only exceptions cannot exist: every e7 lies in some window, so the best
 * window holds at least one weight.) */
START_TEST(test_adversarial_nearly_all_exceptions)
{
    uint32_t n = 32, k = 128;
    uint64_t s = 77;
    uint16_t *w = alloc_u16((size_t)n * k);
    for (uint32_t i = 0; i < n * k; i++) {
        uint32_t e7 = i % 128;
        uint16_t v = (uint16_t)((sm_next(&s) & 0x80ffu) | e7 << 8);
        if ((v & 0x7f80u) == 0x7f80u)
            v &= 0xff7fu; /* exponent 255 -> 254 */
        w[i] = v;
    }
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    ck_assert_uint_eq(z.n_exc, n * k / 128 * 120);
    verify_packed(&z, w, n, k, k, 1, NULL);
    pj_z12_free(&z);
    free(w);
}
END_TEST

START_TEST(test_errors_nonfinite)
{
    uint32_t n = 20, k = 128;
    uint16_t *w = alloc_u16((size_t)n * k);
    fill_realistic(w, n, k, 1);
    const uint16_t bad[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x7f81};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        uint32_t r = (uint32_t)(3 + 4 * i), c = (uint32_t)(70 + i);
        uint16_t keep = w[r * k + c];
        w[r * k + c] = bad[i];
        pj_z12 z;
        memset(&z, 0xa5, sizeof z);
        char err[256] = "";
        int rc = pj_z12_pack(w, n, k, k, &z, err, sizeof err);
        ck_assert_int_eq(rc, -EDOM);
        char want[64];
        snprintf(want, sizeof want, "row %u, column %u", r, c);
        REQUIRE(strstr(err, want), "message '%s' lacks '%s'", err, want);
        ck_assert_ptr_null(z.tiles);
        ck_assert_ptr_null(z.exc);
        ck_assert_uint_eq(z.n_exc, 0);
        pj_z12_free(&z);
        w[r * k + c] = keep;
    }
    free(w);
}
END_TEST

START_TEST(test_errors_shape)
{
    uint16_t *w = alloc_u16(256 * 4);
    for (int i = 0; i < 256 * 4; i++)
        w[i] = 0x3f80;
    pj_z12 z;
    char err[256] = "";
    ck_assert_int_eq(pj_z12_pack(w, 4, 200, 200, &z, err, sizeof err), -EINVAL);
    REQUIRE(strstr(err, "k=200 is not a multiple of 64"), "message '%s'", err);
    ck_assert_ptr_null(z.tiles);
    ck_assert_int_eq(pj_z12_pack(w, 0, 64, 64, &z, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_z12_pack(w, 4, 0, 64, &z, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_z12_pack(w, 4, 128, 64, &z, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_z12_pack(NULL, 4, 64, 64, &z, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_z12_pack(w, 4, 1u << 28, 1u << 28, &z, err, sizeof err), -EINVAL);
    ck_assert_int_eq(pj_z12_pack(w, UINT32_MAX, 64, 64, &z, err, sizeof err), -EINVAL);
    /* The smallest legal shape works. */
    ck_assert_int_eq(pj_z12_pack(w, 1, 64, 64, &z, err, sizeof err), 0);
    verify_packed(&z, w, 1, 64, 64, 1, NULL);
    pj_z12_free(&z);
    pj_z12_free(&z); /* free leaves the struct empty: a second free is harmless */
    free(w);
}
END_TEST

/* One row holding count[e] weights with e7 = e (signs and low bytes vary). */
static uint16_t *hist_matrix(const uint32_t *count, uint32_t *k_out)
{
    uint32_t total = 0;
    for (int e = 0; e < 128; e++)
        total += count[e];
    uint16_t *w = alloc_u16(total);
    uint32_t i = 0;
    for (uint32_t e = 0; e < 128; e++)
        for (uint32_t c = 0; c < count[e]; c++, i++)
            w[i] = (uint16_t)((i & 1) << 15 | e << 8 | (i & 0xff));
    *k_out = total;
    return w;
}

START_TEST(test_choose_base_crafted)
{
    uint32_t cnt[128], n;
    uint16_t *w;

    /* One value: the first window containing it (ties -> smallest base). */
    memset(cnt, 0, sizeof cnt);
    cnt[50] = 64;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 43);
    free(w);

    memset(cnt, 0, sizeof cnt);
    cnt[3] = 64;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 0);
    free(w);

    /* e7 = 127 (exponents 254/255) is reachable only through base 120. */
    memset(cnt, 0, sizeof cnt);
    cnt[127] = 64;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 120);
    free(w);

    /* 10 at each of 20..27 and 100 at 28: [21, 28] holds 170, beats [20, 27]. */
    memset(cnt, 0, sizeof cnt);
    for (int e = 20; e < 28; e++)
        cnt[e] = 10;
    cnt[28] = 100;
    cnt[100] = 2;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 21);
    free(w);

    /* Two equal clusters 8 apart cannot share a window: the lower one wins. */
    memset(cnt, 0, sizeof cnt);
    cnt[30] = 64;
    cnt[38] = 64;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 23);
    free(w);

    /* 7 apart they can: [30, 37]. */
    memset(cnt, 0, sizeof cnt);
    cnt[30] = 64;
    cnt[37] = 64;
    cnt[29] = 5;
    w = hist_matrix(cnt, &n);
    ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), 30);
    free(w);

    /* Random histograms against a brute-force count. */
    uint64_t s = 11;
    for (int trial = 0; trial < 200; trial++) {
        for (int e = 0; e < 128; e++)
            cnt[e] = sm_next(&s) % 4 == 0 ? (uint32_t)(sm_next(&s) % 40) : 0;
        cnt[sm_next(&s) % 128] += 1;
        w = hist_matrix(cnt, &n);
        ck_assert_uint_eq(pj_z12_choose_base(w, 1, n, n), brute_base(w, 1, n, n));
        free(w);
    }
}
END_TEST

/* n x k weights of e7 = bulk (alternating signs and low bytes), then per
 * 16-row block `spread[rb]` weights of e7 = lo and, in block 0's row 3,
 * `heavy` weights of e7 = hi, written over the bulk. */
static uint16_t *blocks_matrix(uint32_t n, uint32_t k, uint32_t bulk, uint32_t lo,
                               const uint32_t *spread, uint32_t hi, uint32_t heavy)
{
    uint16_t *w = alloc_u16((size_t)n * k);
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = (uint16_t)((i & 1) << 15 | bulk << 8 | (i & 0xff));
    for (uint32_t rb = 0; rb < n / 16; rb++)
        for (uint32_t j = 0; j < spread[rb]; j++) /* one a row in turn, columns apart */
            w[(size_t)(rb * 16 + j % 16) * k + (j / 16) * 2 + 1] = (uint16_t)(lo << 8 | 0x12);
    for (uint32_t j = 0; j < heavy; j++)
        w[(size_t)3 * k + 2 * j] = (uint16_t)(0x8000u | hi << 8 | 0x34);
    return w;
}

/* The window pj_z12_choose_base and the brute-force rule give blocks_matrix's
 * weights: both must be want. */
static void expect_blocks_base(uint32_t n, uint32_t k, uint32_t bulk, uint32_t lo,
                               const uint32_t *spread, uint32_t hi, uint32_t heavy, uint32_t want)
{
    uint16_t *w = blocks_matrix(n, k, bulk, lo, spread, hi, heavy);
    const uint32_t got = pj_z12_choose_base(w, n, k, k), brute = brute_base(w, n, k, k);
    free(w);
    ck_assert_msg(got == want && brute == want,
                  "%u x %u, %u above in block 0, block 0 %u below: base %u (brute force %u), "
                  "want %u",
                  n, k, heavy, spread[0], got, brute, want);
}

/* The window avoids a block past the GEMV's first round of exception loads
 * (more than PJ_Z12_BLOCK_EXC_STREAMED exceptions) when a neighbouring base
 * spreads its exceptions over the blocks at a bounded cost in their count;
 * and the packed matrix uses that window and stays lossless. */
START_TEST(test_choose_base_heavy_block)
{
    const uint32_t n = 64, k = 512; /* 4 row blocks */
    /* 200 weights of e7 62 in one row of block 0, 60 a block of e7 54,
     * the rest 58. Bases 51-54 leave the 200 out, block 0 holding all of
     * them (the fewest: base 51). Base 55 leaves out the 240 of e7 54, no
     * block more than 60, within 2 x 200 + 4: base 55. */
    uint32_t spread[4] = {60, 60, 60, 60};
    uint16_t *w = blocks_matrix(n, k, 58, 54, spread, 62, 200);
    ck_assert_uint_eq(pj_z12_choose_base(w, n, k, k), 55);
    ck_assert_uint_eq(brute_base(w, n, k, k), 55);
    pj_z12 z;
    char err[256];
    ck_assert_int_eq(pj_z12_pack_mt(w, n, k, k, 3, 0, &z, err, sizeof err), 0);
    ck_assert_uint_eq(z.base, 55);
    ck_assert_uint_eq(z.n_exc, 240);
    uint32_t heaviest = 0;
    for (uint32_t rb = 0; rb < n / 16; rb++)
        if (z.blk_exc[rb + 1] - z.blk_exc[rb] > heaviest)
            heaviest = z.blk_exc[rb + 1] - z.blk_exc[rb];
    ck_assert_uint_eq(heaviest, 60);
    uint16_t *back = alloc_u16((size_t)n * k);
    pj_z12_unpack(&z, back, k);
    ck_assert(memcmp(back, w, (size_t)n * k * sizeof *w) == 0);
    free(back);
    pj_z12_free(&z);
    free(w);

    /* A block past the first round's 64 but within the overflow table's
     * 128 (the served reference qkv_gate's 117 under base 54) is avoided
     * too: 100 above in block 0, 40 a block below; base 55 holds at most 40. */
    for (int i = 0; i < 4; i++)
        spread[i] = 40;
    expect_blocks_base(n, k, 58, 54, spread, 62, 100, 55);
    /* ... and one of 64 is not: the fewest exceptions stay. */
    expect_blocks_base(n, k, 58, 54, spread, 62, PJ_Z12_BLOCK_EXC_STREAMED, 51);

    /* 110 a block of e7 54: base 55 would leave out 440 > 2 x 200 + 4,
     * so the fewest stays, heavy block and all. */
    for (int i = 0; i < 4; i++)
        spread[i] = 110;
    expect_blocks_base(n, k, 58, 54, spread, 62, 200, 51);

    /* Wider rows: the same weights at k = 8192 (4 x 120 below, 200 above)
     * are out of 2 x 200 + 4 but within 1 % of the bytes (200 + 655): base
     * 55, no block above 120. */
    for (int i = 0; i < 4; i++)
        spread[i] = 120;
    expect_blocks_base(n, 8192, 58, 54, spread, 62, 200, 55);

    /* A heavy block no base can lighten (its weights on both sides of
     * every window that holds the bulk): the fewest exceptions, as before. */
    memset(spread, 0, sizeof spread);
    spread[0] = 150;
    expect_blocks_base(n, k, 58, 40, spread, 80, 150, 51);

    /* Random block histograms against the brute-force rule. */
    uint64_t s = 17;
    for (int trial = 0; trial < 60; trial++) {
        const uint32_t bulk = 20 + (uint32_t)(sm_next(&s) % 80);
        const uint32_t lo = bulk - 1 - (uint32_t)(sm_next(&s) % 6);
        const uint32_t hi = bulk + 1 + (uint32_t)(sm_next(&s) % 6);
        for (int i = 0; i < 4; i++)
            spread[i] = (uint32_t)(sm_next(&s) % 160);
        const uint32_t heavy = (uint32_t)(sm_next(&s) % 256);
        w = blocks_matrix(n, k, bulk, lo, spread, hi, heavy);
        ck_assert_uint_eq(pj_z12_choose_base(w, n, k, k), brute_base(w, n, k, k));
        free(w);
    }
}
END_TEST

/* Exceptions under base b: all of them (return) and the heaviest 16-row
 * block's (*heaviest). */
static uint64_t exc_under(const uint16_t *w, uint32_t n, uint32_t k, uint32_t b, uint64_t *heaviest)
{
    uint64_t all = 0;
    *heaviest = 0;
    for (uint32_t rb = 0; rb < (n + 15) / 16; rb++) {
        uint64_t blk = 0;
        for (uint32_t r = rb * 16; r < n && r < rb * 16 + 16; r++)
            for (uint32_t c = 0; c < k; c++) {
                uint32_t e7 = (w[(size_t)r * k + c] >> 8) & 0x7f;
                blk += !(e7 >= b && e7 <= b + 7);
            }
        all += blk;
        *heaviest = blk > *heaviest ? blk : *heaviest;
    }
    return all;
}

/* Gaussian weights whose rows are scaled log-normally with sigma 0.3 (the
 * GPU visits' 8B-shaped layers): a row of large scale puts its largest
 * weights above the window the bulk sets, and the fewest-exceptions window
 * gathers them in its block. The chosen window takes every block to
 * PJ_Z12_BLOCK_EXC_STREAMED or fewer, the packed matrix uses it and stays lossless. */
START_TEST(test_window_row_scales)
{
    const uint32_t n = 1024, k = 4096;
    uint16_t *w = alloc_u16((size_t)n * k);
    uint64_t s = 3;
    for (uint32_t r = 0; r < n; r++) {
        const double scale = 0.02 * exp(0.3 * sm_normal(&s));
        for (uint32_t c = 0; c < k; c++)
            w[(size_t)r * k + c] = pj_f32_to_bf16((float)(scale * sm_normal(&s)));
    }
    uint32_t fewest = 0;
    uint64_t fewest_n = UINT64_MAX, heavy_fewest = 0, heavy_chosen = 0, h;
    for (uint32_t b = 0; b <= 120; b++) {
        const uint64_t e = exc_under(w, n, k, b, &h);
        if (e < fewest_n) {
            fewest_n = e;
            fewest = b;
            heavy_fewest = h;
        }
    }
    pj_z12 z;
    char err[256];
    ck_assert_int_eq(pj_z12_pack_mt(w, n, k, k, 2, 0, &z, err, sizeof err), 0);
    const uint64_t chosen_n = exc_under(w, n, k, z.base, &heavy_chosen);
    printf("z12 row scales 1024x4096: the fewest exceptions (base %u) %llu, heaviest block %llu; "
           "chosen base %u: %llu, heaviest block %llu\n",
           fewest, (unsigned long long)fewest_n, (unsigned long long)heavy_fewest, z.base,
           (unsigned long long)chosen_n, (unsigned long long)heavy_chosen);
    ck_assert_uint_gt(heavy_fewest, PJ_Z12_BLOCK_EXC_STREAMED); /* the case the rule is for */
    ck_assert_uint_le(heavy_chosen, PJ_Z12_BLOCK_EXC_STREAMED);
    ck_assert_uint_le(chosen_n, 2 * fewest_n + n / 16);
    ck_assert_uint_eq(z.n_exc, chosen_n);
    uint16_t *back = alloc_u16((size_t)n * k);
    pj_z12_unpack(&z, back, k);
    ck_assert(memcmp(back, w, (size_t)n * k * sizeof *w) == 0);
    free(back);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* The byte formula at the reference shapes with 0.014 % exceptions, and the
 * real numbers for a realistic 4096 x 2048 matrix. */
START_TEST(test_bytes)
{
    const uint32_t shapes[][2] = {{4096, 2048}, {4608, 4096}, {8192, 4096}};
    for (size_t i = 0; i < 3; i++) {
        pj_z12 z = {0};
        z.n = shapes[i][0];
        z.k = shapes[i][1];
        z.n_pad = z.n;
        z.tiles_bytes = (size_t)z.n / 16 * (z.k / 64) * 1536;
        z.n_exc = (uint32_t)((uint64_t)z.n * z.k * 14 / 100000 + 1);
        double dense = (double)z.n * z.k * 2;
        size_t want = (size_t)z.n * z.k * 3 / 2 + ((size_t)z.n / 16 + 1) * 4 + (size_t)z.n_exc * 12;
        ck_assert_uint_eq(pj_z12_bytes(&z), want);
        double ratio = (double)pj_z12_bytes(&z) / dense;
        REQUIRE(ratio <= 0.752, "%ux%u: ratio %.5f", z.n, z.k, ratio);
        ck_assert(ratio > 0.75);
    }

    uint32_t n = 4096, k = 2048;
    uint16_t *w = alloc_u16((size_t)n * k);
    fill_realistic(w, n, k, 20240601);
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    verify_packed(&z, w, n, k, k, 0, NULL);
    double rate = (double)z.n_exc / ((double)n * k);
    double ratio = (double)pj_z12_bytes(&z) / ((double)n * k * 2);
    printf("z12 realistic %ux%u: base %u, %u exceptions (%.4f %%), %zu bytes = %.5f of bf16\n", n,
           k, z.base, z.n_exc, 100 * rate, pj_z12_bytes(&z), ratio);
    fflush(stdout);
    /* This generator is harsher than the trained weights measured in the seed
     * report (0.014 %): Gaussian values with row scales spread log-normally
     * put more mass below the window. It measures 0.038 % here; the bound
     * guards the window choice (a base off by one costs far more). */
    REQUIRE(rate < 0.0005, "exception rate %.5f %%", 100 * rate);
    REQUIRE(ratio <= 0.7525, "ratio %.5f", ratio);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* The by-tile exception table: every exception listed once, in its tile,
 * with its position and the weight's own bits; nothing else listed; a
 * non-cancel-and-restore entry refused with its row and column. */
static void check_tile_exc(const pj_z12 *z, const uint16_t *w, uint32_t n, uint32_t k)
{
    uint32_t *off, *ent;
    char err[200];
    ck_assert_int_eq(pj_z12_tile_exc(z, &off, &ent, err, sizeof err), 0);
    const uint32_t kt_n = k / 64, nblk = z->n_pad / 16;
    const size_t ntiles = (size_t)nblk * kt_n;
    ck_assert_uint_eq(off[0], 0);
    ck_assert_uint_eq(off[ntiles], z->n_exc);
    uint8_t *listed = calloc((size_t)z->n_pad * k, 1);
    ck_assert_ptr_nonnull(listed);
    for (size_t t = 0; t < ntiles; t++) {
        ck_assert_uint_le(off[t], off[t + 1]);
        for (uint32_t i = off[t]; i < off[t + 1]; i++) {
            const uint32_t pos = ent[i] >> 16;
            const uint32_t row = (uint32_t)(t / kt_n) * 16 + (pos >> 6);
            const uint32_t col = (uint32_t)(t % kt_n) * 64 + (pos & 63);
            ck_assert_uint_lt(pos, 16 * 64);
            ck_assert_uint_lt(row, n);
            REQUIRE((ent[i] & 0xffffu) == w[(size_t)row * k + col],
                    "tile entry (%u, %u) holds %04x, weight %04x", row, col, ent[i] & 0xffffu,
                    w[(size_t)row * k + col]);
            ck_assert_uint_eq(listed[(size_t)row * k + col], 0);
            listed[(size_t)row * k + col] = 1;
        }
    }
    for (uint32_t r = 0; r < n; r++)
        for (uint32_t c = 0; c < k; c++) {
            const int differs = pj_z12_decoded(z, r, c) != w[(size_t)r * k + c];
            REQUIRE(differs == listed[(size_t)r * k + c],
                    "(%u, %u): decoded %s the weight but %s in the tile table", r, c,
                    differs ? "differs from" : "equals",
                    listed[(size_t)r * k + c] ? "is" : "is not");
        }
    free(listed);
    free(off);
    free(ent);
}

START_TEST(test_tile_exc)
{
    uint32_t n = 37, k = 256;
    uint64_t s = 99;
    uint16_t *w = alloc_u16((size_t)n * k);
    fill_realistic(w, n, k, 777);
    for (int i = 0; i < 300; i++) /* zeros and huge values: exceptions in many tiles */
        w[sm_next(&s) % ((size_t)n * k)] = (i & 1) ? 0x0000 : 0x7f00;
    pj_z12 z;
    pack_ok(w, n, k, k, &z);
    ck_assert_uint_gt(z.n_exc, 200);
    check_tile_exc(&z, w, n, k);

    /* An entry that is not cancel-and-restore (c2 not a bf16 value). */
    z.exc[5].c2 = 0.1f;
    uint32_t *off = (uint32_t *)1, *ent = (uint32_t *)1;
    char err[200];
    ck_assert_int_eq(pj_z12_tile_exc(&z, &off, &ent, err, sizeof err), -ENOTSUP);
    ck_assert_ptr_null(off);
    ck_assert_ptr_null(ent);
    REQUIRE(strstr(err, "not cancel-and-restore") != NULL, "message: %s", err);
    pj_z12_free(&z);

    /* No exceptions at all: offsets all zero, no entries. */
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = (uint16_t)(0x3f80 | (i & 0x7f)); /* one binade */
    pack_ok(w, n, k, k, &z);
    ck_assert_uint_eq(z.n_exc, 0);
    check_tile_exc(&z, w, n, k);
    pj_z12_free(&z);
    free(w);
}
END_TEST

/* ---- threads ---------------------------------------------------------------- */

/* Two packs are the same bytes: every array and every scalar. */
static void require_same_z12(const pj_z12 *a, const pj_z12 *b, const char *what)
{
    REQUIRE(a->n == b->n && a->k == b->k && a->n_pad == b->n_pad, "%s: shape", what);
    REQUIRE(a->base == b->base, "%s: base %u vs %u", what, a->base, b->base);
    REQUIRE(a->n_exc == b->n_exc, "%s: n_exc %u vs %u", what, a->n_exc, b->n_exc);
    REQUIRE(a->tiles_bytes == b->tiles_bytes, "%s: tiles_bytes", what);
    REQUIRE(memcmp(a->tiles, b->tiles, a->tiles_bytes) == 0, "%s: tiles differ", what);
    REQUIRE(memcmp(a->blk_exc, b->blk_exc, (a->n_pad / 16 + 1) * sizeof *a->blk_exc) == 0,
            "%s: blk_exc differs", what);
    if (a->n_exc) {
        REQUIRE(memcmp(a->exc, b->exc, a->n_exc * sizeof *a->exc) == 0, "%s: exc differs", what);
        REQUIRE(memcmp(a->exc_orig, b->exc_orig, a->n_exc * sizeof *a->exc_orig) == 0,
                "%s: exc_orig differs", what);
    }
}

/* pack_mt with 2, 3, 7 and 16 threads against the single-threaded pack,
 * and unpack_mt against unpack into a poisoned buffer. */
static void check_threads(const uint16_t *w, uint32_t n, uint32_t k, const char *what)
{
    static const unsigned th[] = {0, 2, 3, 7, 16};
    pj_z12 ref;
    pack_ok(w, n, k, k, &ref);
    size_t count = (size_t)n * k;
    uint16_t *want = alloc_u16(count), *got = alloc_u16(count);
    memset(want, 0xa5, count * 2);
    pj_z12_unpack(&ref, want, k);
    REQUIRE(memcmp(want, w, count * 2) == 0, "%s: unpack is not the source", what);
    for (size_t i = 0; i < sizeof th / sizeof th[0]; i++) {
        char label[128], err[256] = "";
        snprintf(label, sizeof label, "%s (%u x %u), %u threads", what, n, k, th[i]);
        pj_z12 z;
        int rc = pj_z12_pack_mt(w, n, k, k, th[i], 0, &z, err, sizeof err);
        REQUIRE(rc == 0, "%s: rc %d: %s", label, rc, err);
        require_same_z12(&ref, &z, label);
        pj_z12_free(&z);
        memset(got, 0x5a, count * 2);
        pj_z12_unpack_mt(&ref, got, k, th[i]);
        REQUIRE(memcmp(got, want, count * 2) == 0, "%s: unpack_mt differs", label);
    }
    pj_z12_free(&ref);
    free(want);
    free(got);
}

START_TEST(test_pack_threads_identical)
{
    /* n: below one row block, not a multiple of 16, one block per thread
     * for 2/3/7/16 threads, fewer blocks than threads, many blocks. */
    static const uint32_t ns[] = {1, 5, 15, 17, 32, 48, 112, 256, 100, 333};
    static const uint32_t ks[] = {64, 192};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ks / sizeof ks[0]; b++) {
            uint32_t n = ns[a], k = ks[b];
            uint16_t *w = alloc_u16((size_t)n * k);
            fill_realistic(w, n, k, 100 + a * 7 + b);
            check_threads(w, n, k, "realistic");
            /* any exponent: most weights are exceptions, in every block */
            uint64_t s = 7 + a;
            for (size_t i = 0; i < (size_t)n * k; i++)
                w[i] = rand_finite_bf16(&s);
            check_threads(w, n, k, "spread");
            /* all zero: a window at the bottom, no exceptions */
            memset(w, 0, (size_t)n * k * 2);
            check_threads(w, n, k, "zero");
            free(w);
        }
    /* Exceptions concentrated in one row block (the last but one) of an
     * otherwise exception-free matrix: the other blocks' slices are empty. */
    uint32_t n = 150, k = 256;
    uint16_t *w = alloc_u16((size_t)n * k);
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = (uint16_t)(0x3f80 | (i & 0x7f));
    uint64_t s = 99;
    for (uint32_t r = 128; r < 144; r++)
        for (uint32_t c = 0; c < k; c += 3)
            w[(size_t)r * k + c] = rand_finite_bf16(&s);
    check_threads(w, n, k, "one block");
    free(w);
}
END_TEST

/* A non-finite weight is reported at the same (row, column) whatever the
 * thread count: the first in row-major order, also when a later block (on
 * another thread) has one too. */
START_TEST(test_pack_threads_nonfinite)
{
    uint32_t n = 100, k = 128;
    uint16_t *w = alloc_u16((size_t)n * k);
    fill_realistic(w, n, k, 3);
    w[(size_t)90 * k + 5] = 0x7f80; /* last thread's blocks */
    w[(size_t)40 * k + 77] = 0xffc0;
    for (unsigned th = 1; th <= 8; th++) {
        pj_z12 z;
        char err[256] = "";
        ck_assert_int_eq(pj_z12_pack_mt(w, n, k, k, th, 0, &z, err, sizeof err), -EDOM);
        REQUIRE(strstr(err, "row 40, column 77 is NaN"), "%u threads: %s", th, err);
        ck_assert_ptr_null(z.tiles);
    }
    free(w);
}
END_TEST

/* max_bytes: a pack that would be larger is refused before anything is
 * allocated, with the size it would have had; one that fits is unchanged. */
START_TEST(test_pack_max_bytes)
{
    uint32_t n = 32, k = 128;
    uint16_t *w = alloc_u16((size_t)n * k);
    uint64_t s = 5;
    for (size_t i = 0; i < (size_t)n * k; i++)
        w[i] = rand_finite_bf16(&s);
    pj_z12 ref, z;
    pack_ok(w, n, k, k, &ref);
    size_t full = pj_z12_bytes(&ref);
    char err[256] = "";
    ck_assert_int_eq(pj_z12_pack_mt(w, n, k, k, 2, full - 1, &z, err, sizeof err), -EFBIG);
    ck_assert_ptr_null(z.tiles);
    ck_assert_ptr_null(z.exc);
    ck_assert_uint_eq(z.n_exc, ref.n_exc);
    ck_assert_uint_eq(z.base, ref.base);
    ck_assert_uint_eq(pj_z12_bytes(&z), full);
    REQUIRE(strstr(err, "would exceed"), "%s", err);
    pj_z12_free(&z);
    ck_assert_int_eq(pj_z12_pack_mt(w, n, k, k, 2, full, &z, err, sizeof err), 0);
    require_same_z12(&ref, &z, "max_bytes == size");
    pj_z12_free(&z);
    pj_z12_free(&ref);
    free(w);
}
END_TEST

typedef struct cover {
    unsigned char *hits;
    size_t n;
    unsigned threads;
    int bad_worker;
} cover;

static void cover_fn(void *ctx, size_t begin, size_t end, unsigned worker)
{
    cover *c = ctx;
    if (worker >= c->threads || begin > end || end > c->n)
        __atomic_store_n(&c->bad_worker, 1, __ATOMIC_RELAXED);
    for (size_t i = begin; i < end && i < c->n; i++)
        __atomic_fetch_add(&c->hits[i], 1, __ATOMIC_RELAXED);
}

START_TEST(test_parfor_covers_once)
{
    static const size_t ns[] = {0, 1, 2, 3, 7, 100, 1000003};
    static const unsigned ths[] = {0, 1, 2, 3, 8, 16, 300};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t b = 0; b < sizeof ths / sizeof ths[0]; b++) {
            cover c = {calloc(ns[a] + 1, 1), ns[a], ths[b] ? ths[b] : 1, 0};
            if (c.threads > PJ_PARFOR_MAX_THREADS)
                c.threads = PJ_PARFOR_MAX_THREADS;
            int ran = pj_parfor(ns[a], ths[b], cover_fn, &c);
            unsigned want = pj_parfor_workers(ns[a], ths[b]);
            REQUIRE(ran >= (ns[a] ? 1 : 0) && ran <= (int)want, "n %zu threads %u: ran %d", ns[a],
                    ths[b], ran);
            REQUIRE(want <= c.threads && (ns[a] == 0 || want >= 1) && want <= ns[a],
                    "workers %u for n %zu threads %u", want, ns[a], ths[b]);
            REQUIRE(!c.bad_worker, "n %zu threads %u: bad chunk", ns[a], ths[b]);
            for (size_t i = 0; i < ns[a]; i++)
                REQUIRE(c.hits[i] == 1, "n %zu threads %u: index %zu run %u times", ns[a], ths[b],
                        i, c.hits[i]);
            free(c.hits);
        }
    ck_assert_uint_ge(pj_cpu_count(), 1);
}
END_TEST

/* A thread that cannot be created loses no work: in a child whose address
 * space is capped just above what it uses, new thread stacks cannot be
 * mapped, and every index is still covered (by the caller's thread). The
 * sanitizers reserve address space of their own, so they skip this. */
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
static long vm_size_bytes(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmSize: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}
#endif

START_TEST(test_parfor_thread_create_fails)
{
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
    return;
#else
    enum { N = 100000, T = 64 };
    cover c = {calloc(N, 1), N, T, 0};
    ck_assert_ptr_nonnull(c.hits);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        long vm = vm_size_bytes();
        if (vm < 0)
            _exit(3);
        /* Room for the small bookkeeping allocations, not for 8 MiB stacks
         * (glibc keeps a few freed stacks for reuse, so some may start). */
        struct rlimit rl = {(rlim_t)vm + (2u << 20), (rlim_t)vm + (2u << 20)};
        if (setrlimit(RLIMIT_AS, &rl) != 0)
            _exit(4);
        int ran = pj_parfor(N, T, cover_fn, &c);
        for (size_t i = 0; i < N; i++)
            if (c.hits[i] != 1)
                _exit(5);
        _exit(c.bad_worker ? 6 : ran < T ? 0 : 7);
    }
    int st = 0;
    ck_assert_int_eq(waitpid(pid, &st, 0), pid);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
    free(c.hits);
#endif
}
END_TEST

static Suite *zfmt_suite(void)
{
    Suite *s = suite_create("zfmt");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 240);
    tcase_add_test(tc, test_layout_worked_example);
    tcase_add_test(tc, test_roundtrip_random_odd_shapes);
    tcase_add_test(tc, test_roundtrip_row_stride);
    tcase_add_test(tc, test_every_value_every_base);
    tcase_add_test(tc, test_realistic);
    tcase_add_test(tc, test_adversarial_all_exponents);
    tcase_add_test(tc, test_adversarial_window_edges);
    tcase_add_test(tc, test_adversarial_exception_rows);
    tcase_add_test(tc, test_adversarial_nearly_all_exceptions);
    tcase_add_test(tc, test_errors_nonfinite);
    tcase_add_test(tc, test_errors_shape);
    tcase_add_test(tc, test_choose_base_crafted);
    tcase_add_test(tc, test_choose_base_heavy_block);
    tcase_add_test(tc, test_window_row_scales);
    tcase_add_test(tc, test_bytes);
    tcase_add_test(tc, test_tile_exc);
    tcase_add_test(tc, test_pack_threads_identical);
    tcase_add_test(tc, test_pack_threads_nonfinite);
    tcase_add_test(tc, test_pack_max_bytes);
    tcase_add_test(tc, test_parfor_covers_once);
    tcase_add_test(tc, test_parfor_thread_create_fails);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(zfmt_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
