/* backend_select.c — which backend serves: auto, cpu or cuda (backend.h). */
#include "daemon/backend.h"

#include <errno.h>
#include <stdio.h>

/* The cuda backend (daemon/backend_cuda*.c) lives in libpjcuda.a, which
 * only CUDA builds of the programs link; the CPU test suites and fuzz
 * harnesses link libpjcore.a alone. So the references here are weak: a
 * program without the cuda backend sees NULL and says so. projd makes a
 * strong reference (projd_main.c), which pulls the backend in. */
#ifdef PJ_HAVE_CUDA
#define PJ_CUDA_BACKEND 1
extern const pj_backend_ops *pj_backend_cuda_ops(void) __attribute__((weak));
extern int pj_backend_cuda_probe(char *why, size_t whylen) __attribute__((weak));
extern int pj_backend_cuda_check_device(const pj_config *cfg, char *err, size_t errlen)
    __attribute__((weak));
#endif

int pj_backend_check_device(const pj_backend_ops *ops, const pj_config *cfg, char *err,
                            size_t errlen)
{
#ifdef PJ_CUDA_BACKEND
    if (ops && pj_backend_cuda_ops && pj_backend_cuda_check_device && ops == pj_backend_cuda_ops())
        return pj_backend_cuda_check_device(cfg, err, errlen);
#else
    (void)ops;
    (void)cfg;
    (void)err;
    (void)errlen;
#endif
    return 0;
}

int pj_backend_select(pj_backend_kind want, const pj_backend_ops **out, char *why, size_t whylen,
                      char *err, size_t errlen)
{
    *out = NULL;
    if (want == PJ_BACKEND_CPU) {
        *out = pj_backend_cpu_ops();
        snprintf(why, whylen, "cpu: asked for");
        return 0;
    }
#ifdef PJ_CUDA_BACKEND
    if (!pj_backend_cuda_ops || !pj_backend_cuda_probe) {
        if (want == PJ_BACKEND_CUDA) {
            snprintf(err, errlen, "backend cuda: this program was linked without the cuda backend");
            return -ENOTSUP;
        }
        *out = pj_backend_cpu_ops();
        snprintf(why, whylen, "cpu: auto, this program has no cuda backend");
        return 0;
    }
    char probe[256] = "";
    int n = pj_backend_cuda_probe(probe, sizeof probe);
    if (n > 0) {
        *out = pj_backend_cuda_ops();
        snprintf(why, whylen, "cuda: %s (%d device%s visible)",
                 want == PJ_BACKEND_CUDA ? "asked for" : "auto", n, n == 1 ? "" : "s");
        return 0;
    }
    if (want == PJ_BACKEND_CUDA) {
        snprintf(err, errlen, "backend cuda: no usable GPU: %s", probe[0] ? probe : "none visible");
        return -ENODEV;
    }
    *out = pj_backend_cpu_ops();
    snprintf(why, whylen, "cpu: auto, no GPU: %s", probe[0] ? probe : "none visible");
    return 0;
#else
    if (want == PJ_BACKEND_CUDA) {
        snprintf(err, errlen,
                 "backend cuda: this projd was built without the cuda backend "
                 "(build with CUDA=1 on a machine with the CUDA toolkit)");
        return -ENOTSUP;
    }
    *out = pj_backend_cpu_ops();
    snprintf(why, whylen, "cpu: auto, this build has no cuda backend");
    return 0;
#endif
}

int pj_backend_cpu_ignores(const pj_config *cfg, const pj_backend_ops *ops, const char *why,
                           char *out, size_t len)
{
    out[0] = 0;
    if (cfg->device.backend != PJ_BACKEND_AUTO || ops != pj_backend_cpu_ops())
        return 0;
    uint32_t engines = 0, rows = 0;
    for (uint32_t i = 0; i < cfg->model.n_layers && i < PJ_CFG_MAX_LAYERS; i++) {
        engines += cfg->model.layers[i].engine[0] != 0;
        rows += cfg->model.layers[i].n_graph_rows != 0;
    }
    char keys[400] = "";
    int n = 0;
    size_t at = 0;
#define SAY(...)                                                                                   \
    do {                                                                                           \
        if (at < sizeof keys)                                                                      \
            at += (size_t)snprintf(keys + at, sizeof keys - at, "%s", n ? ", " : "");              \
        if (at < sizeof keys)                                                                      \
            at += (size_t)snprintf(keys + at, sizeof keys - at, __VA_ARGS__);                      \
        n++;                                                                                       \
    } while (0)
    if (cfg->device.uuid[0])
        SAY("device.uuid %s", cfg->device.uuid);
    if (cfg->device.index != 0)
        SAY("device.index %d", (int)cfg->device.index);
    if (engines)
        SAY("%u layer%s", engines, engines == 1 ? "'s engine" : "s' engines");
    if (rows)
        SAY("%u layer%s graph_rows", rows, rows == 1 ? "'s" : "s'");
#undef SAY
    if (n == 0)
        return 0;
    snprintf(out, len, "backend %s; the configuration's %s %s for the cuda backend and ignored",
             why, keys, n == 1 ? "is" : "are");
    return 1;
}
