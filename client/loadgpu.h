/* loadgpu.h — projload's GPU side (client/loadgpu_cuda.c, built only with
 * CUDA: callers test PJ_HAVE_CUDA).
 *
 * Two parts, both with plain C types so projload_main.c needs no CUDA
 * header:
 *
 *   pj_lgpu_*  one client's x and y buffers in device memory (cudaMalloc in
 *              this process), registered with the daemon as CUDA IPC
 *              buffers (client/projd_cuda.h), with pinned host mirrors and
 *              a stream of the client's own for the copies that checked
 *              requests need.
 *   pj_lcmp_*  compare mode: the model's layers uploaded into this process
 *              and each request of a trace executed here, with cuBLAS as
 *              SGLang runs it (pj_eng_baseline) and with the tuned engines
 *              (pj_eng_choose + pj_eng_launch), timed per request.
 */
#ifndef PJ_LOADGPU_H
#define PJ_LOADGPU_H

#include <stddef.h>
#include <stdint.h>

#include "client/projd.h"
#include "daemon/model.h"

/* ---- client buffers --------------------------------------------------------------- */

typedef struct pj_lgpu_bufs pj_lgpu_bufs;

/* 1 when this process sees a CUDA device, else 0 with why. Initialises
 * CUDA in this process (projload never forks afterwards). */
int pj_lgpu_available(char *why, size_t len);

/* Allocates x (xbytes) and y (ybytes) on the current device, pinned host
 * mirrors of both, and a non-blocking stream; registers both allocations on
 * c. Owns them until pj_lgpu_destroy. 0, or a libprojd code (pj_status from
 * the daemon, negative errno locally) with err. */
int pj_lgpu_create(projd_conn *c, size_t xbytes, size_t ybytes, pj_lgpu_bufs **out, char *err,
                   size_t errlen);

/* Host mirrors (what the client fills and reads) and the registered ids;
 * *_off is the byte offset of the buffer's start in the registered
 * allocation (add it to x_off / y_off). */
uint8_t *pj_lgpu_host_x(const pj_lgpu_bufs *b);
uint8_t *pj_lgpu_host_y(const pj_lgpu_bufs *b);
uint32_t pj_lgpu_x_id(const pj_lgpu_bufs *b);
uint32_t pj_lgpu_y_id(const pj_lgpu_bufs *b);
uint64_t pj_lgpu_x_off(const pj_lgpu_bufs *b);
uint64_t pj_lgpu_y_off(const pj_lgpu_bufs *b);

/* Copies host x [xo, xo + xlen) and host y [yo, yo + ylen) to the device
 * and waits until both copies have landed: the daemon does not wait on this
 * client's stream. ylen may be 0. 0 or -EIO with err. */
int pj_lgpu_to_device(pj_lgpu_bufs *b, size_t xo, size_t xlen, size_t yo, size_t ylen, char *err,
                      size_t errlen);

/* Copies device y [yo, yo + ylen) back into the host mirror and waits.
 * 0 or -EIO with err. */
int pj_lgpu_y_to_host(pj_lgpu_bufs *b, size_t yo, size_t ylen, char *err, size_t errlen);

/* Unregisters (when c is still open; NULL skips it) and frees everything.
 * NULL is a no-op. */
void pj_lgpu_destroy(pj_lgpu_bufs *b, projd_conn *c);

/* ---- compare mode ------------------------------------------------------------------- */

typedef struct pj_lcmp pj_lcmp;

/* One op of a request: layer = index into the map given to pj_lcmp_open. */
typedef struct pj_lcmp_op {
    uint32_t layer, m, n;
} pj_lcmp_op;

#define PJ_LCMP_CUBLAS 0 /* pj_eng_baseline(0): cublasGemmEx, router = 2 GEMMs + add */
#define PJ_LCMP_TUNED  1 /* pj_eng_choose over the table + pj_eng_launch */

/* Uploads the model layers that layer_map names (layer_map[i]: index into
 * model->layers of the caller's layer i, or -1 when unused; n_map entries)
 * as the daemon does (bf16, z12 + its bf16 copy, split hi + lo), creates a
 * stream, workspaces for m <= max_m, device x / y / scratch for one request
 * of at most slot_x / slot_y bytes, and loads the tuning table (NULL or "":
 * untuned ladder). Owns it all until pj_lcmp_close. 0 or -errno with err. */
int pj_lcmp_open(const pj_model *model, const int *layer_map, uint32_t n_map, uint32_t max_m,
                 size_t slot_x, size_t slot_y, const char *table, pj_lcmp **out, char *err,
                 size_t errlen);

/* What pj_lcmp_open loaded, one line ("device ..., table ... (N entries)"). */
const char *pj_lcmp_describe(const pj_lcmp *c);

/* Runs one request's ops in order (x and y regions laid out as projload's
 * slots: each op's region 256-byte aligned after the previous) with path
 * PJ_LCMP_CUBLAS or PJ_LCMP_TUNED. Times it twice: *host_ns = host clock
 * from before the first launch until an event recorded after the last has
 * completed (spinning on it), *gpu_ns = CUDA events around the launches.
 * 0 or -errno with err (a launch or device error). */
int pj_lcmp_run(pj_lcmp *c, int path, const pj_lcmp_op *ops, size_t n, uint64_t *host_ns,
                uint64_t *gpu_ns, char *err, size_t errlen);

/* The engine the tuned path runs for (layer, m, n) as "gemvz (table)";
 * "" when none can. */
void pj_lcmp_engine(pj_lcmp *c, uint32_t layer, uint32_t m, uint32_t n, char *out, size_t cap);

/* Relative L2 difference of the tuned path's y from cuBLAS's for one op
 * (both run on the same random x); -1 on a device error. */
double pj_lcmp_diff(pj_lcmp *c, uint32_t layer, uint32_t m, uint32_t n);

void pj_lcmp_close(pj_lcmp *c);

#endif
