/* zfmt_ab.c — session 43's A/B of the z12 pack and unpack: the previous
 * kernels/zfmt.o (its global symbols renamed old_*) linked beside the new
 * one, the two alternated on the same matrix, medians printed; every
 * unpack is compared with the source. Build (from the repository root,
 * OLD = zfmt.o of 7c50dcf, NEW = build-m):
 *   nm OLD | awk '$2=="T"{print $3" old_"$3}' > ren.txt
 *   objcopy --redefine-syms=ren.txt OLD old_ren.o
 *   gcc -O2 -std=c11 -I. -pthread bench/results/2026-12-04-s43/zfmt_ab.c old_ren.o \
 *       build-m/obj/kernels/{zfmt,parfor,bf16}.o -o zfmt_ab
 * Run: zfmt_ab RAW_BF16_FILE N K THREADS [REPS]. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "kernels/zfmt.h"
int old_pj_z12_pack_mt(const uint16_t *w, uint32_t n, uint32_t k, size_t ld, unsigned threads,
                       size_t max_bytes, pj_z12 *out, char *err, size_t errlen);
void old_pj_z12_unpack_mt(const pj_z12 *z, uint16_t *w, size_t ld, unsigned threads);
static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}
static int cmpd(const void *a, const void *b)
{
    double x = *(double *)a, y = *(double *)b;
    return x < y ? -1 : x > y;
}
int main(int argc, char **argv)
{
    uint32_t n = atoi(argv[2]), k = atoi(argv[3]);
    unsigned th = atoi(argv[4]);
    int reps = argc > 5 ? atoi(argv[5]) : 9;
    size_t cnt = (size_t)n * k;
    uint16_t *w = malloc(cnt * 2);
    FILE *fp = fopen(argv[1], "rb");
    if (fread(w, 2, cnt, fp) != cnt)
        return 1;
    fclose(fp);
    uint16_t *u = malloc(cnt * 2);
    memset(u, 0, cnt * 2);
    char err[256];
    double tp[2][64], tu[2][64];
    for (int r = 0; r < reps; r++)
        for (int v = 0; v < 2; v++) {
            int who = (r & 1) ? v : 1 - v;
            pj_z12 z;
            double t0 = now();
            int rc = who ? pj_z12_pack_mt(w, n, k, k, th, 0, &z, err, sizeof err)
                         : old_pj_z12_pack_mt(w, n, k, k, th, 0, &z, err, sizeof err);
            double t1 = now();
            if (rc) {
                puts(err);
                return 1;
            }
            memset(u, 0xff, cnt * 2);
            double t2 = now();
            if (who)
                pj_z12_unpack_mt(&z, u, k, th);
            else
                old_pj_z12_unpack_mt(&z, u, k, th);
            double t3 = now();
            if (memcmp(u, w, cnt * 2)) {
                puts("MISMATCH");
                return 1;
            }
            tp[who][r] = t1 - t0;
            tu[who][r] = t3 - t2;
            pj_z12_free(&z);
        }
    double mb = cnt * 2 / 1e6;
    for (int v = 0; v < 2; v++) {
        qsort(tp[v], reps, 8, cmpd);
        qsort(tu[v], reps, 8, cmpd);
    }
    printf("%ux%u threads %u, median of %d (alternated): pack old %.1f ms new %.1f ms (%.2fx, new "
           "%.0f MB/s); unpack old %.1f new %.1f ms (%.2fx, new %.0f MB/s)\n",
           n, k, th, reps, tp[0][reps / 2], tp[1][reps / 2], tp[0][reps / 2] / tp[1][reps / 2],
           mb / tp[1][reps / 2] * 1e3, tu[0][reps / 2], tu[1][reps / 2],
           tu[0][reps / 2] / tu[1][reps / 2], mb / tu[1][reps / 2] * 1e3);
    return 0;
}
