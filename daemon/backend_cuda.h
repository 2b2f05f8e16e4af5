/* backend_cuda.h — the cuda backend (daemon/backend_cuda.c; daemon/CUDA.md
 * is its design note and measurements).
 *
 * Public surface: pj_backend_cuda_ops() and pj_backend_cuda_probe(), both
 * declared in backend.h; this header's existence is what makes
 * backend_select.c compile the cuda choice in. The constants below are the
 * engine ids the backend reports per op (pj_exec_op.engine, DONE's engine):
 * low byte = pj_eng_kind (kernels/dispatch.h), high byte = the path.
 */
#ifndef PJ_BACKEND_CUDA_H
#define PJ_BACKEND_CUDA_H

#include "daemon/backend.h"

#define PJ_CUDA_PATH_GRAPH         1 /* graph replay, rebound to the client's buffers */
#define PJ_CUDA_PATH_GRAPH_STAGED  2 /* x copied in, graph replay on staging, y copied out */
#define PJ_CUDA_PATH_DIRECT        3 /* direct launch on the client's buffers */
#define PJ_CUDA_PATH_DIRECT_STAGED 4 /* direct launch through the staging buffers */

/* A lane's launch budget (backend_cuda.c, "Launch budget"): behind a
 * client wait a lane takes at most PJ_CUDA_LANE_JOBS jobs, and jobs
 * charged at most PJ_CUDA_LANE_LAUNCHES launches in all, a job of n ops
 * PJ_CUDA_JOB_LAUNCHES + n * PJ_CUDA_OP_LAUNCHES; one past either waits
 * (or fails with E_LIMIT when the lane has not moved for a second). Here
 * for the tests. */
#define PJ_CUDA_LANE_JOBS     48
#define PJ_CUDA_LANE_LAUNCHES 960
#define PJ_CUDA_JOB_LAUNCHES  3
#define PJ_CUDA_OP_LAUNCHES   10

#define PJ_CUDA_ENGINE_ID(kind, path) ((uint16_t)(((path) << 8) | (kind)))

#endif
