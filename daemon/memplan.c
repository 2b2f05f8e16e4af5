/* memplan.c — see memplan.h. */
#include "daemon/memplan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/zfmt.h"

/* The engine name of a "name[:knobs]" spec is z12's own GEMV, or none. */
static int forced_reads_bf16(const char *spec)
{
    if (!spec || !spec[0])
        return 0;
    size_t l = strcspn(spec, ":");
    return !(l == strlen("gemvz") && strncmp(spec, "gemvz", l) == 0);
}

void pj_memplan_weights(const pj_model *m, uint32_t max_m, const char *force_engine,
                        pj_memplan *out)
{
    memset(out, 0, sizeof *out);
    out->max_m = max_m;
    const int all_copy = max_m > PJ_ENG_MAX_GEMV_M;
    for (uint32_t i = 0; i < m->n_layers; i++) {
        const pj_model_layer *L = &m->layers[i];
        const uint64_t mat = (uint64_t)L->w.n * L->w.k * 2;
        switch (L->w.fmt) {
        case PJ_FMT_BF16:
            out->stored += mat;
            break;
        case PJ_FMT_SPLIT:
            out->stored += 2 * mat;
            break;
        case PJ_FMT_Z12: {
            const pj_z12 *z = L->w.z;
            const uint64_t tiles = (uint64_t)z->n_pad / PJ_Z12_TILE_ROWS * (z->k / PJ_Z12_TILE_K);
            out->stored += z->tiles_bytes + ((uint64_t)z->n_pad / PJ_Z12_TILE_ROWS + 1) * 4 +
                           (uint64_t)z->n_exc * sizeof(pj_z12_exc) + (tiles + 1) * 4 +
                           (uint64_t)z->n_exc * 4;
            out->z12_layers++;
            out->copies_if_all += mat;
            const char *f = force_engine && force_engine[0] ? force_engine : L->engine;
            if (all_copy || forced_reads_bf16(f)) {
                out->bf16_copies += mat;
                out->copied++;
            }
            break;
        }
        }
    }
}

static double gib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0 * 1024.0);
}

int pj_memplan_check(const pj_memplan *p, uint64_t free_bytes, char *err, size_t errlen)
{
    const uint64_t need = p->stored + p->bf16_copies;
    if (need <= free_bytes)
        return 0;
    int n = snprintf(err, errlen,
                     "the weights need at least %.2f GiB of device memory (stored formats %.2f "
                     "GiB + bf16 copies of %u z12 layers %.2f GiB) and %.2f GiB are free",
                     gib(need), gib(p->stored), p->copied, gib(p->bf16_copies), gib(free_bytes));
    size_t at = n < 0 ? 0 : (size_t)n < errlen ? (size_t)n : errlen;
    if (p->bf16_copies && p->stored <= free_bytes && p->max_m > PJ_ENG_MAX_GEMV_M)
        snprintf(err + at, errlen - at,
                 ": shapes.max_m <= %d drops the copies (%.2f GiB without them; requests of m "
                 "up to %d only), or serve fewer layers",
                 PJ_ENG_MAX_GEMV_M, gib(p->stored), PJ_ENG_MAX_GEMV_M);
    else if (p->bf16_copies && p->stored <= free_bytes)
        snprintf(err + at, errlen - at,
                 ": the copies are for forced engines that read bf16 (config \"engine\" or "
                 "PROJD_FORCE_ENGINE); without them %.2f GiB",
                 gib(p->stored));
    else
        snprintf(err + at, errlen - at,
                 ": serve fewer layers, or store more of them as z12 (format auto)");
    return -ENOMEM;
}
