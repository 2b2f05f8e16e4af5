/* memplan.c — see memplan.h. */
#include "daemon/memplan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/zfmt.h"

/* The engine name of a "name[:knobs]" spec is the z12 GEMV's, or none. */
static int forced_reads_bf16(const char *spec)
{
    if (!spec || !spec[0])
        return 0;
    size_t l = strcspn(spec, ":");
    return !(l == strlen("gemvz") && strncmp(spec, "gemvz", l) == 0);
}

int pj_memplan_copies_bf16(uint32_t max_m, const char *forced)
{
    return max_m > PJ_ENG_MAX_GEMV_M || forced_reads_bf16(forced);
}

void pj_memplan_weights(const pj_model *m, uint32_t max_m, const char *force_engine,
                        pj_memplan *out)
{
    memset(out, 0, sizeof *out);
    out->max_m = max_m;
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
            /* Tiles, block offsets and entries, always uploaded. The
             * per-tile exception tables are not counted: the upload skips
             * them for a layer whose entries are not all cancel-and-restore
             * (none today), and a lower bound must not count what may not
             * be there. */
            const pj_z12 *z = L->w.z;
            out->stored += pj_z12_bytes(z);
            out->z12_layers++;
            const char *f = force_engine && force_engine[0] ? force_engine : L->engine;
            if (pj_memplan_copies_bf16(max_m, f)) {
                out->bf16_copies += mat;
                out->copied++;
            }
            if (pj_memplan_copies_bf16(PJ_ENG_MAX_GEMV_M, f))
                out->copies_decode += mat;
            break;
        }
        }
    }
}

static double mib(uint64_t b)
{
    return (double)b / (1024.0 * 1024.0);
}

int pj_memplan_check(const pj_memplan *p, uint64_t free_bytes, char *err, size_t errlen)
{
    const uint64_t need = p->stored + p->bf16_copies;
    if (need <= free_bytes)
        return 0;
    int n = snprintf(err, errlen,
                     "the weights need at least %.1f MiB of device memory (stored formats %.1f "
                     "MiB + bf16 copies of %u z12 layers %.1f MiB) and %.1f MiB are free",
                     mib(need), mib(p->stored), p->copied, mib(p->bf16_copies), mib(free_bytes));
    size_t at = n < 0 ? 0 : (size_t)n < errlen ? (size_t)n : errlen;
    const uint64_t decode = p->stored + p->copies_decode;
    if (p->max_m > PJ_ENG_MAX_GEMV_M && p->bf16_copies > p->copies_decode && decode <= free_bytes)
        snprintf(err + at, errlen - at,
                 ": shapes.max_m <= %d keeps only the copies forced engines read (at least %.1f "
                 "MiB; requests of m up to %d only), or serve fewer layers",
                 PJ_ENG_MAX_GEMV_M, mib(decode), PJ_ENG_MAX_GEMV_M);
    else if (p->copies_decode && p->stored <= free_bytes)
        snprintf(err + at, errlen - at,
                 ": %.1f MiB of it are copies for forced engines that read bf16 (config "
                 "\"engine\" or PROJD_FORCE_ENGINE); without them at least %.1f MiB",
                 mib(p->copies_decode), mib(p->stored));
    else
        snprintf(err + at, errlen - at, ": serve fewer layers");
    return -ENOMEM;
}
