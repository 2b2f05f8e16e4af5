/* graphs_cuda.c — see graphs_cuda.h. */
#include "daemon/graphs_cuda.h"

#include <cuda.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Entry points are asked for by the ABI of this CUDA version: the
 * _v2 kernel-node calls (12.0) and the parameter-layout queries (12.4). */
#define PJ_CG_DRIVER_ABI 12040
#define PJ_CG_MAX_PARAMS 256

typedef CUresult (*fn_kget)(CUgraphNode, CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*fn_kset)(CUgraphExec, CUgraphNode, const CUDA_KERNEL_NODE_PARAMS *);
typedef CUresult (*fn_fparam)(CUfunction, size_t, size_t *, size_t *);
typedef CUresult (*fn_kparam)(CUkernel, size_t, size_t *, size_t *);
typedef CUresult (*fn_mget)(CUgraphNode, CUDA_MEMSET_NODE_PARAMS *);
typedef CUresult (*fn_mset)(CUgraphExec, CUgraphNode, const CUDA_MEMSET_NODE_PARAMS *, CUcontext);
typedef CUresult (*fn_ctxget)(CUcontext *);
typedef CUresult (*fn_range)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*fn_errname)(CUresult, const char **);

static struct {
    pthread_once_t once;
    int rc;
    char err[160];
    fn_kget kget;
    fn_kset kset;
    fn_fparam fparam;
    fn_kparam kparam;
    fn_mget mget;
    fn_mset mset;
    fn_ctxget ctxget;
    fn_range range;
    fn_errname errname;
} drv = {.once = PTHREAD_ONCE_INIT};

/* One rewritten word. */
typedef struct cg_site {
    uint32_t off;   /* byte offset in the node's blob (kernel) or 0 (memset dst) */
    uint8_t which;  /* 0: x, 1: y */
    uint64_t delta; /* pointer - range start at capture */
} cg_site;

struct pj_cg_node {
    CUgraphNode node;
    int is_memset;
    CUDA_KERNEL_NODE_PARAMS kp; /* kernelParams/extra point into blob/args below */
    CUDA_MEMSET_NODE_PARAMS mp;
    uint8_t *blob; /* every parameter, packed at its own offset */
    size_t blob_len;
    void **args;    /* kernelParams form: pointers into blob */
    void *extra[5]; /* extra form */
    size_t extra_size;
    cg_site *sites;
    uint32_t n_sites;
};

static void *entry(const char *sym, int *ok)
{
    void *fn = NULL;
    enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
    cudaError_t ce =
        cudaGetDriverEntryPointByVersion(sym, &fn, PJ_CG_DRIVER_ABI, cudaEnableDefault, &q);
    if (ce != cudaSuccess || q != cudaDriverEntryPointSuccess || !fn) {
        cudaGetLastError();
        if (*ok)
            snprintf(drv.err, sizeof drv.err, "driver entry point %s unavailable (%s)", sym,
                     ce != cudaSuccess ? cudaGetErrorName(ce) : "not found for CUDA 12.4 ABI");
        *ok = 0;
        return NULL;
    }
    return fn;
}

static void init_once(void)
{
    int ok = 1;
    drv.kget = (fn_kget)entry("cuGraphKernelNodeGetParams", &ok);
    drv.kset = (fn_kset)entry("cuGraphExecKernelNodeSetParams", &ok);
    drv.fparam = (fn_fparam)entry("cuFuncGetParamInfo", &ok);
    drv.kparam = (fn_kparam)entry("cuKernelGetParamInfo", &ok);
    drv.mget = (fn_mget)entry("cuGraphMemsetNodeGetParams", &ok);
    drv.mset = (fn_mset)entry("cuGraphExecMemsetNodeSetParams", &ok);
    drv.ctxget = (fn_ctxget)entry("cuCtxGetCurrent", &ok);
    drv.range = (fn_range)entry("cuMemGetAddressRange", &ok);
    drv.errname = (fn_errname)entry("cuGetErrorName", &ok);
    drv.rc = ok ? 0 : -ENOSYS;
}

int pj_cg_init(char *err, size_t errlen)
{
    pthread_once(&drv.once, init_once);
    if (drv.rc)
        snprintf(err, errlen, "%s", drv.err);
    return drv.rc;
}

int pj_cg_address_range(const void *ptr, uintptr_t *base, size_t *size)
{
    if (!drv.range)
        return -EINVAL;
    CUdeviceptr b = 0;
    size_t s = 0;
    if (drv.range(&b, &s, (CUdeviceptr)(uintptr_t)ptr) != CUDA_SUCCESS)
        return -EINVAL;
    *base = (uintptr_t)b;
    *size = s;
    return 0;
}

static const char *cu_name(CUresult r)
{
    const char *s = NULL;
    if (drv.errname && drv.errname(r, &s) == CUDA_SUCCESS && s)
        return s;
    return "CUDA_ERROR_?";
}

static void free_nodes(pj_cgraph *g)
{
    /* Slots past n_patch_nodes are zeroed or hold a node given up half way. */
    for (uint32_t i = 0; g->nodes && i < g->n_nodes; i++) {
        free(g->nodes[i].blob);
        free(g->nodes[i].args);
        free(g->nodes[i].sites);
    }
    free(g->nodes);
    g->nodes = NULL;
    g->n_patch_nodes = 0;
}

void pj_cg_free(pj_cgraph *g)
{
    if (!g)
        return;
    if (g->ge)
        cudaGraphExecDestroy(g->ge);
    if (g->g)
        cudaGraphDestroy(g->g);
    free_nodes(g);
    memset(g, 0, sizeof *g);
}

/* Which range (if any) a 64-bit value points into. */
static int classify(const pj_cgraph *g, uint64_t v, uint8_t *which, uint64_t *delta)
{
    if (v >= g->x0 && v < g->x0 + g->x_bytes) {
        *which = 0;
        *delta = v - g->x0;
        return 1;
    }
    if (v >= g->y0 && v < g->y0 + g->y_bytes) {
        *which = 1;
        *delta = v - g->y0;
        return 1;
    }
    return 0;
}

static int add_site(pj_cg_node *n, uint32_t off, uint8_t which, uint64_t delta)
{
    cg_site *s = realloc(n->sites, (n->n_sites + 1) * sizeof *s);
    if (!s)
        return -ENOMEM;
    n->sites = s;
    s[n->n_sites].off = off;
    s[n->n_sites].which = which;
    s[n->n_sites].delta = delta;
    n->n_sites++;
    return 0;
}

/* Copy a kernel node's parameters into n (blob + args or extra) and find
 * the words that point into the x or y range. 0, -ENOMEM, or -ENOTSUP with
 * why (layout unknown). */
static int scan_kernel(pj_cgraph *g, CUgraphNode node, pj_cg_node *n, char *why, size_t whylen)
{
    CUDA_KERNEL_NODE_PARAMS p;
    memset(&p, 0, sizeof p);
    CUresult r = drv.kget(node, &p);
    if (r != CUDA_SUCCESS) {
        snprintf(why, whylen, "cuGraphKernelNodeGetParams: %s", cu_name(r));
        return -ENOTSUP;
    }
    n->node = node;
    n->kp = p;
    if (p.extra) {
        /* {BUFFER_POINTER, ptr, BUFFER_SIZE, &size, END} in some order. */
        void *buf = NULL;
        size_t size = 0;
        for (int i = 0; i < 8 && p.extra[i] != CU_LAUNCH_PARAM_END; i += 2) {
            if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_POINTER)
                buf = p.extra[i + 1];
            else if (p.extra[i] == CU_LAUNCH_PARAM_BUFFER_SIZE && p.extra[i + 1])
                size = *(size_t *)p.extra[i + 1];
        }
        if (!buf || !size) {
            snprintf(why, whylen, "kernel node with an unknown 'extra' parameter form");
            return -ENOTSUP;
        }
        n->blob = malloc(size);
        if (!n->blob)
            return -ENOMEM;
        memcpy(n->blob, buf, size);
        n->blob_len = size;
        n->extra_size = size;
        n->extra[0] = CU_LAUNCH_PARAM_BUFFER_POINTER;
        n->extra[1] = n->blob;
        n->extra[2] = CU_LAUNCH_PARAM_BUFFER_SIZE;
        n->extra[3] = &n->extra_size;
        n->extra[4] = CU_LAUNCH_PARAM_END;
        n->kp.extra = n->extra;
        n->kp.kernelParams = NULL;
        for (size_t off = 0; off + 8 <= size; off += 8) {
            uint64_t v;
            memcpy(&v, n->blob + off, 8);
            uint8_t which;
            uint64_t delta;
            if (classify(g, v, &which, &delta) && add_site(n, (uint32_t)off, which, delta))
                return -ENOMEM;
        }
        return 0;
    }
    if (!p.kernelParams) {
        /* A kernel without parameters cannot name x or y. */
        return 0;
    }
    size_t offs[PJ_CG_MAX_PARAMS], sizes[PJ_CG_MAX_PARAMS];
    size_t np = 0, end = 0;
    for (; np < PJ_CG_MAX_PARAMS; np++) {
        CUresult q = p.func ? drv.fparam(p.func, np, &offs[np], &sizes[np])
                            : drv.kparam(p.kern, np, &offs[np], &sizes[np]);
        if (q != CUDA_SUCCESS)
            break;
        if (offs[np] + sizes[np] > end)
            end = offs[np] + sizes[np];
    }
    if (np == PJ_CG_MAX_PARAMS) {
        snprintf(why, whylen, "kernel with more than %d parameters", PJ_CG_MAX_PARAMS);
        return -ENOTSUP;
    }
    if (np == 0)
        return 0;
    n->blob = calloc(1, end);
    n->args = calloc(np, sizeof *n->args);
    if (!n->blob || !n->args)
        return -ENOMEM;
    n->blob_len = end;
    for (size_t i = 0; i < np; i++) {
        memcpy(n->blob + offs[i], p.kernelParams[i], sizes[i]);
        n->args[i] = n->blob + offs[i];
        /* Pointers sit at 8-byte offsets of a parameter (the parameter
         * itself starts at its own alignment). */
        for (size_t o = 0; o + 8 <= sizes[i]; o += 8) {
            uint64_t v;
            memcpy(&v, n->blob + offs[i] + o, 8);
            uint8_t which;
            uint64_t delta;
            if (classify(g, v, &which, &delta) &&
                add_site(n, (uint32_t)(offs[i] + o), which, delta))
                return -ENOMEM;
        }
    }
    n->kp.kernelParams = n->args;
    n->kp.extra = NULL;
    return 0;
}

/* Walk the graph: every node must be a kernel, memset or empty node; keep
 * the ones that hold sites. */
static int find_sites(pj_cgraph *g, char *err, size_t errlen)
{
    size_t count = 0;
    cudaError_t ce = cudaGraphGetNodes(g->g, NULL, &count);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "cudaGraphGetNodes: %s", cudaGetErrorName(ce));
        return -EIO;
    }
    g->n_nodes = (uint32_t)count;
    cudaGraphNode_t *nodes = calloc(count ? count : 1, sizeof *nodes);
    g->nodes = calloc(count ? count : 1, sizeof *g->nodes);
    if (!nodes || !g->nodes) {
        free(nodes);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    ce = cudaGraphGetNodes(g->g, nodes, &count);
    if (ce != cudaSuccess) {
        free(nodes);
        snprintf(err, errlen, "cudaGraphGetNodes: %s", cudaGetErrorName(ce));
        return -EIO;
    }
    int have_x = 0, have_y = 0, rc = 0;
    char why[160] = "";
    for (size_t i = 0; i < count && !why[0]; i++) {
        enum cudaGraphNodeType t;
        if (cudaGraphNodeGetType(nodes[i], &t) != cudaSuccess) {
            snprintf(why, sizeof why, "node type unknown");
            break;
        }
        pj_cg_node *n = &g->nodes[g->n_patch_nodes];
        memset(n, 0, sizeof *n);
        if (t == cudaGraphNodeTypeKernel) {
            g->n_kernels++;
            rc = scan_kernel(g, (CUgraphNode)nodes[i], n, why, sizeof why);
            if (rc == -ENOMEM)
                break;
            rc = 0;
        } else if (t == cudaGraphNodeTypeMemset) {
            CUDA_MEMSET_NODE_PARAMS mp;
            CUresult r = drv.mget((CUgraphNode)nodes[i], &mp);
            if (r != CUDA_SUCCESS) {
                snprintf(why, sizeof why, "cuGraphMemsetNodeGetParams: %s", cu_name(r));
                break;
            }
            uint8_t which;
            uint64_t delta;
            n->node = (CUgraphNode)nodes[i];
            n->is_memset = 1;
            n->mp = mp;
            if (classify(g, (uint64_t)mp.dst, &which, &delta) && add_site(n, 0, which, delta)) {
                rc = -ENOMEM;
                break;
            }
        } else if (t != cudaGraphNodeTypeEmpty) {
            snprintf(why, sizeof why, "graph holds a node of type %d (only kernels, memsets)",
                     (int)t);
            break;
        }
        if (n->n_sites) {
            for (uint32_t j = 0; j < n->n_sites; j++) {
                have_x |= n->sites[j].which == 0;
                have_y |= n->sites[j].which == 1;
            }
            g->n_sites += n->n_sites;
            g->n_patch_nodes++;
        } else {
            free(n->blob);
            free(n->args);
            memset(n, 0, sizeof *n);
        }
    }
    free(nodes);
    if (rc == -ENOMEM) {
        snprintf(err, errlen, "out of memory");
        return rc;
    }
    if (!why[0] && (!have_x || !have_y))
        snprintf(why, sizeof why, "no plain %s pointer found in the kernels' parameters",
                 !have_x ? "x" : "y");
    if (why[0]) {
        g->rebindable = 0;
        snprintf(g->why, sizeof g->why, "%s", why);
        free_nodes(g);
    } else {
        g->rebindable = 1;
    }
    return 0;
}

int pj_cg_capture(pj_cgraph *g, cudaStream_t s, pj_cg_enqueue_fn fn, void *ctx, const void *x0,
                  size_t x_bytes, void *y0, size_t y_bytes, char *err, size_t errlen)
{
    memset(g, 0, sizeof *g);
    int rc = pj_cg_init(err, errlen);
    if (rc)
        return rc;
    g->x0 = g->x_cur = (uintptr_t)x0;
    g->y0 = g->y_cur = (uintptr_t)y0;
    g->x_bytes = x_bytes;
    g->y_bytes = y_bytes;
    cudaError_t ce = cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "cudaStreamBeginCapture: %s: %s", cudaGetErrorName(ce),
                 cudaGetErrorString(ce));
        return -EIO;
    }
    int frc = fn(ctx, s);
    ce = cudaStreamEndCapture(s, &g->g);
    if (frc || ce != cudaSuccess || !g->g) {
        if (ce == cudaSuccess)
            ce = cudaGetLastError();
        else
            cudaGetLastError();
        snprintf(err, errlen, "capture: %s%s%s", frc ? "the launch failed" : "",
                 frc && ce != cudaSuccess ? "; " : "",
                 ce != cudaSuccess ? cudaGetErrorString(ce) : "");
        pj_cg_free(g);
        return -EIO;
    }
    ce = cudaGraphInstantiate(&g->ge, g->g, 0);
    if (ce != cudaSuccess) {
        snprintf(err, errlen, "cudaGraphInstantiate: %s: %s", cudaGetErrorName(ce),
                 cudaGetErrorString(ce));
        cudaGetLastError();
        g->ge = NULL;
        pj_cg_free(g);
        return -EIO;
    }
    rc = find_sites(g, err, errlen);
    if (rc) {
        pj_cg_free(g);
        return rc;
    }
    return 0;
}

int pj_cg_bind(pj_cgraph *g, const void *x, void *y, char *err, size_t errlen)
{
    uintptr_t xv = (uintptr_t)x, yv = (uintptr_t)y;
    if (xv == g->x_cur && yv == g->y_cur)
        return 0;
    if (!g->rebindable && !(xv == g->x0 && yv == g->y0)) {
        snprintf(err, errlen, "graph cannot be rebound: %s", g->why);
        return -EINVAL;
    }
    if (!g->rebindable) { /* back to the capture binding: nothing was changed */
        g->x_cur = xv;
        g->y_cur = yv;
        return 0;
    }
    CUcontext cx = NULL;
    for (uint32_t i = 0; i < g->n_patch_nodes; i++) {
        pj_cg_node *n = &g->nodes[i];
        int changed = 0;
        for (uint32_t j = 0; j < n->n_sites; j++) {
            const cg_site *st = &n->sites[j];
            if ((st->which == 0 && xv == g->x_cur) || (st->which == 1 && yv == g->y_cur))
                continue;
            uint64_t v = (st->which == 0 ? (uint64_t)xv : (uint64_t)yv) + st->delta;
            if (n->is_memset)
                n->mp.dst = (CUdeviceptr)v;
            else
                memcpy(n->blob + st->off, &v, 8);
            changed = 1;
        }
        if (!changed)
            continue;
        CUresult r;
        if (n->is_memset) {
            if (!cx && drv.ctxget(&cx) != CUDA_SUCCESS)
                cx = NULL;
            r = drv.mset((CUgraphExec)g->ge, n->node, &n->mp, cx);
        } else {
            r = drv.kset((CUgraphExec)g->ge, n->node, &n->kp);
        }
        if (r != CUDA_SUCCESS) {
            /* The graph is now half rebound: its binding is unknown. */
            g->x_cur = g->y_cur = 0;
            snprintf(err, errlen, "rebinding graph node: %s", cu_name(r));
            return -EIO;
        }
    }
    g->x_cur = xv;
    g->y_cur = yv;
    return 0;
}

cudaError_t pj_cg_launch(pj_cgraph *g, cudaStream_t s)
{
    return cudaGraphLaunch(g->ge, s);
}
