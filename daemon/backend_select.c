/* backend_select.c — which backend serves: auto, cpu or cuda (backend.h). */
#include "daemon/backend.h"

#include <errno.h>
#include <stdio.h>

/* The cuda backend is compiled in when this is a CUDA build and its header
 * exists (daemon/backend_cuda.h declares nothing beyond backend.h's pair). */
#if defined(PJ_HAVE_CUDA) && defined(__has_include)
#if __has_include("daemon/backend_cuda.h")
#include "daemon/backend_cuda.h"
#define PJ_CUDA_BACKEND 1
#endif
#endif

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
