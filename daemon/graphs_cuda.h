/* graphs_cuda.h — CUDA graphs of one projection whose x and y pointers can
 * be rebound per request without capturing again.
 *
 * pj_cg_capture records whatever an enqueue function launches on a stream
 * (an engine of kernels/engine.h: our kernels or cuBLAS's), reading x from
 * [x0, x0 + x_bytes) and writing y into [y0, y0 + y_bytes). It then looks
 * through the captured graph for every place that names those ranges: a
 * 64-bit word inside a kernel node's parameters (found with the driver's
 * parameter layout, cuFuncGetParamInfo / cuKernelGetParamInfo) or a memset
 * node's destination. pj_cg_bind rewrites exactly those words in the
 * instantiated graph (cuGraphExecKernelNodeSetParams /
 * cuGraphExecMemsetNodeSetParams), which only affects later launches.
 *
 * A pointer a kernel holds in a form other than a plain 64-bit word (a TMA
 * descriptor, say) is not found, so a rebound graph could still read the
 * capture buffers. The caller therefore validates a rebound graph once
 * against a direct launch before trusting it (daemon/backend_cuda.c does);
 * a graph that fails, or that holds node types this module does not know,
 * is still usable at its capture binding (the caller stages x and y there).
 *
 * Driver entry points come from cudaGetDriverEntryPointByVersion; nothing
 * links libcuda. Loop-thread use only (not thread-safe per graph).
 */
#ifndef PJ_GRAPHS_CUDA_H
#define PJ_GRAPHS_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

typedef struct pj_cg_node pj_cg_node; /* private */

/* What a graph launches, enqueued on s. 0 or a negative errno. */
typedef int (*pj_cg_enqueue_fn)(void *ctx, cudaStream_t s);

typedef struct pj_cgraph {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    uintptr_t x0, y0; /* capture ranges */
    size_t x_bytes, y_bytes;
    uintptr_t x_cur, y_cur; /* what the instantiated graph reads and writes now */
    int rebindable;         /* x and y were found and every node is understood */
    char why[160];          /* when not rebindable: why */
    uint32_t n_nodes;       /* nodes in the graph */
    uint32_t n_kernels;     /* kernel nodes */
    uint32_t n_sites;       /* words rewritten per rebinding */
    uint32_t n_patch_nodes; /* nodes touched per rebinding */
    pj_cg_node *nodes;      /* nodes holding sites */
} pj_cgraph;

/* Resolve the driver entry points (once per process). 0, or -ENOSYS with
 * err naming the missing symbol. */
int pj_cg_init(char *err, size_t errlen);

/* Capture fn on s (thread-local capture mode), instantiate, find the
 * rebinding sites. The graph starts bound to (x0, y0). 0, or a negative
 * errno with err; *g is empty then. A graph that cannot be rebound is not an
 * error: g->rebindable = 0 and g->why says why. */
int pj_cg_capture(pj_cgraph *g, cudaStream_t s, pj_cg_enqueue_fn fn, void *ctx, const void *x0,
                  size_t x_bytes, void *y0, size_t y_bytes, char *err, size_t errlen);

/* Point the instantiated graph at x and y (the same offsets inside them as
 * inside x0 and y0). Binding back to (x0, y0) always works; anything else
 * needs g->rebindable. Nothing is done when the binding is already that.
 * 0 or -EINVAL / -EIO with err (CUDA's error name and text). */
int pj_cg_bind(pj_cgraph *g, const void *x, void *y, char *err, size_t errlen);

/* cudaGraphLaunch on s. */
cudaError_t pj_cg_launch(pj_cgraph *g, cudaStream_t s);

/* Destroy (an empty or zeroed graph is fine). */
void pj_cg_free(pj_cgraph *g);

/* The driver's cuMemGetAddressRange (NULL before a successful pj_cg_init):
 * base and size of the allocation holding ptr. 0 or -EINVAL. */
int pj_cg_address_range(const void *ptr, uintptr_t *base, size_t *size);

#endif
