#include "daemon/digest.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/parfor.h"

/* Slicing by 8: eight bytes per step through eight tables (8 KiB), about
 * 2 GB/s per core, so that a model's digests cost a fraction of its load. */
static uint32_t g_tab[8][256];
static pthread_once_t g_tab_once = PTHREAD_ONCE_INIT;

static void tab_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int b = 0; b < 8; b++)
            c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
        g_tab[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int s = 1; s < 8; s++)
            g_tab[s][i] = (g_tab[s - 1][i] >> 8) ^ g_tab[0][g_tab[s - 1][i] & 0xffu];
}

uint32_t pj_crc32(uint32_t crc, const void *p, size_t n)
{
    pthread_once(&g_tab_once, tab_init);
    const uint8_t *b = p;
    uint32_t c = ~crc;
    while (n >= 8) {
        uint32_t lo =
            (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24;
        lo ^= c;
        c = g_tab[7][lo & 0xffu] ^ g_tab[6][(lo >> 8) & 0xffu] ^ g_tab[5][(lo >> 16) & 0xffu] ^
            g_tab[4][lo >> 24] ^ g_tab[3][b[4]] ^ g_tab[2][b[5]] ^ g_tab[1][b[6]] ^ g_tab[0][b[7]];
        b += 8;
        n -= 8;
    }
    while (n--)
        c = (c >> 8) ^ g_tab[0][(c ^ *b++) & 0xffu];
    return ~c;
}

typedef struct digest_job {
    const uint8_t *p;
    size_t n;
    uint8_t *crcs; /* 4 little-endian bytes per piece */
} digest_job;

static void digest_pieces(void *ctx, size_t begin, size_t end, unsigned worker)
{
    const digest_job *j = ctx;
    (void)worker;
    for (size_t i = begin; i < end; i++) {
        size_t from = i * PJ_DIGEST_PIECE;
        size_t len = j->n - from < PJ_DIGEST_PIECE ? j->n - from : PJ_DIGEST_PIECE;
        uint32_t c = pj_crc32(0, j->p + from, len);
        for (int b = 0; b < 4; b++)
            j->crcs[4 * i + (size_t)b] = (uint8_t)(c >> (8 * b));
    }
}

int pj_digest(const void *p, size_t n, unsigned threads, uint32_t *out)
{
    size_t pieces = (n + PJ_DIGEST_PIECE - 1) / PJ_DIGEST_PIECE;
    if (pieces == 0) {
        *out = 0;
        return 0;
    }
    uint8_t *crcs = malloc(4 * pieces);
    if (!crcs)
        return -ENOMEM;
    digest_job j = {.p = p, .n = n, .crcs = crcs};
    pj_parfor(pieces, threads, digest_pieces, &j);
    *out = pj_crc32(0, crcs, 4 * pieces);
    free(crcs);
    return 0;
}
