/* projd_cuda.h — client side of CUDA IPC buffers: turn a device pointer
 * into what REGISTER needs (protocol/PROTOCOL.md, REGISTER_BUFFER, CUDA).
 *
 * projd opens a legacy CUDA IPC handle, and such a handle always names the
 * base of an allocation. projd_cuda_describe finds the allocation holding a
 * pointer (cuMemGetAddressRange through the driver entry point; nothing
 * links libcuda), makes the handle of its base (cudaIpcGetMemHandle), and
 * reports the device's UUID and the pointer's offset from the base: register
 * (handle, alloc_size, uuid) once, then address the pointer as buffer offset
 * `offset` in x_off / y_off.
 *
 * Memory without a legacy IPC handle is refused with -ENOTSUP and a message
 * that says what to do: cudaMallocAsync / memory pools, cuMemCreate (VMM,
 * which PyTorch's expandable segments use), managed memory. Host memory is
 * -EINVAL (use a shared-memory buffer for it).
 *
 * Call from a process that has a CUDA context on the pointer's device (any
 * runtime call makes one). Thread-safe.
 */
#ifndef PROJD_CUDA_H
#define PROJD_CUDA_H

#include <stddef.h>
#include <stdint.h>

#include "protocol/wire.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct projd_cuda_region {
    void *base;                              /* the allocation's base */
    uint64_t alloc_size;                     /* bytes of the allocation, from base */
    uint64_t offset;                         /* pointer - base: add to x_off / y_off */
    int device;                              /* CUDA device ordinal in this process */
    uint8_t handle[PJ_WIRE_IPC_HANDLE_SIZE]; /* cudaIpcMemHandle_t of base */
    uint8_t uuid[PJ_WIRE_UUID_SIZE];         /* the device's UUID */
} projd_cuda_region;

/* Describe the allocation holding dev_ptr. Returns 0, or -EINVAL (NULL,
 * host or unknown memory), -ENOTSUP (no legacy IPC handle: message says
 * why), -ENOSYS (driver entry points missing), -EIO (a CUDA call failed);
 * err gets one line. */
int projd_cuda_describe(const void *dev_ptr, projd_cuda_region *out, char *err, size_t errlen);

/* "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (nvidia-smi's form). */
void projd_cuda_uuid_str(const uint8_t uuid[PJ_WIRE_UUID_SIZE], char *out, size_t cap);

/* Fill a REGISTER request (kind CUDA) for the region. */
void projd_cuda_register_req(const projd_cuda_region *r, pj_register *req);

/* With libprojd (client/projd.h): describe dev_ptr, register its whole
 * allocation on c, and return the buffer id and dev_ptr's offset in it.
 * 0 or an error code as libprojd's (a pj_status from the daemon, or a
 * negative errno from describe with its message in e). */
#if defined(__has_include)
#if __has_include("client/projd.h")
#include "client/projd.h"
#define PROJD_CUDA_HAVE_LIBPROJD 1
int projd_cuda_register(projd_conn *c, const void *dev_ptr, uint32_t *id, uint64_t *offset,
                        projd_error *e);
#endif
#endif

#ifdef __cplusplus
}
#endif

#endif
