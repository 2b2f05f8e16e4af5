/* projd_cuda.c — see projd_cuda.h. */
#include "client/projd_cuda.h"

#include <cuda.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef CUresult (*fn_range)(CUdeviceptr *, size_t *, CUdeviceptr);
typedef CUresult (*fn_attr)(void *, CUpointer_attribute, CUdeviceptr);

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static fn_range g_range;
static fn_attr g_attr;

static void resolve(void)
{
    enum cudaDriverEntryPointQueryResult q;
    void *fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        g_range = (fn_range)fn;
    fn = NULL;
    if (cudaGetDriverEntryPointByVersion("cuPointerGetAttribute", &fn, 12000, cudaEnableDefault,
                                         &q) == cudaSuccess &&
        q == cudaDriverEntryPointSuccess)
        g_attr = (fn_attr)fn;
    cudaGetLastError();
}

void projd_cuda_uuid_str(const uint8_t u[PJ_WIRE_UUID_SIZE], char *out, size_t cap)
{
    snprintf(out, cap, "GPU-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x",
             u[0], u[1], u[2], u[3], u[4], u[5], u[6], u[7], u[8], u[9], u[10], u[11], u[12], u[13],
             u[14], u[15]);
}

static int cuda_fail(cudaError_t ce, const char *what, char *err, size_t errlen)
{
    snprintf(err, errlen, "%s: %s: %s", what, cudaGetErrorName(ce), cudaGetErrorString(ce));
    cudaGetLastError();
    return -EIO;
}

int projd_cuda_describe(const void *dev_ptr, projd_cuda_region *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    if (!dev_ptr) {
        snprintf(err, errlen, "projd_cuda_describe: NULL pointer");
        return -EINVAL;
    }
    pthread_once(&g_once, resolve);
    if (!g_range || !g_attr) {
        snprintf(err, errlen,
                 "projd_cuda_describe: the CUDA driver's cuMemGetAddressRange / "
                 "cuPointerGetAttribute entry points are unavailable");
        return -ENOSYS;
    }
    struct cudaPointerAttributes pa;
    cudaError_t ce = cudaPointerGetAttributes(&pa, dev_ptr);
    if (ce != cudaSuccess)
        return cuda_fail(ce, "cudaPointerGetAttributes", err, errlen);
    if (pa.type == cudaMemoryTypeManaged) {
        snprintf(err, errlen,
                 "managed memory (cudaMallocManaged) has no legacy CUDA IPC handle; allocate "
                 "with cudaMalloc");
        return -ENOTSUP;
    }
    if (pa.type != cudaMemoryTypeDevice) {
        snprintf(err, errlen,
                 "%p is not device memory (%s); register host memory as a shared-memory buffer",
                 dev_ptr, pa.type == cudaMemoryTypeHost ? "pinned host memory" : "not CUDA memory");
        return -EINVAL;
    }
    CUdeviceptr p = (CUdeviceptr)(uintptr_t)dev_ptr;
    int capable = 0;
    CUresult r = g_attr(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p);
    if (r != CUDA_SUCCESS || !capable) {
        snprintf(err, errlen,
                 "memory from cudaMallocAsync or cuMemCreate has no legacy CUDA IPC handle; "
                 "allocate with cudaMalloc or disable PyTorch expandable segments "
                 "(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False)");
        return -ENOTSUP;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    r = g_range(&base, &size, p);
    if (r != CUDA_SUCCESS) {
        snprintf(err, errlen, "cuMemGetAddressRange(%p) failed (CUresult %d)", dev_ptr, (int)r);
        return -EIO;
    }
    cudaIpcMemHandle_t h;
    ce = cudaIpcGetMemHandle(&h, (void *)(uintptr_t)base);
    if (ce != cudaSuccess)
        return cuda_fail(ce, "cudaIpcGetMemHandle", err, errlen);
    struct cudaDeviceProp prop;
    ce = cudaGetDeviceProperties(&prop, pa.device);
    if (ce != cudaSuccess)
        return cuda_fail(ce, "cudaGetDeviceProperties", err, errlen);
    out->base = (void *)(uintptr_t)base;
    out->alloc_size = size;
    out->offset = (uint64_t)(p - base);
    out->device = pa.device;
    memcpy(out->handle, &h, sizeof h < sizeof out->handle ? sizeof h : sizeof out->handle);
    memcpy(out->uuid, prop.uuid.bytes, PJ_WIRE_UUID_SIZE);
    return 0;
}

void projd_cuda_register_req(const projd_cuda_region *r, pj_register *req)
{
    memset(req, 0, sizeof *req);
    req->kind = PJ_BUF_CUDA;
    req->size = r->alloc_size;
    memcpy(req->ipc_handle, r->handle, PJ_WIRE_IPC_HANDLE_SIZE);
    memcpy(req->device_uuid, r->uuid, PJ_WIRE_UUID_SIZE);
}

#ifdef PROJD_CUDA_HAVE_LIBPROJD
int projd_cuda_register(projd_conn *c, const void *dev_ptr, uint32_t *id, uint64_t *offset,
                        projd_error *e)
{
    projd_cuda_region r;
    char why[sizeof e->msg];
    int rc = projd_cuda_describe(dev_ptr, &r, why, sizeof why);
    if (rc != 0) {
        if (e) {
            e->code = rc;
            snprintf(e->msg, sizeof e->msg, "%s", why);
        }
        return rc;
    }
    rc = projd_register_cuda_ipc(c, r.handle, r.uuid, r.alloc_size, id, e);
    if (rc == 0 && offset)
        *offset = r.offset;
    return rc;
}
#endif
