/* backend_cpu.h — the cpu backend: the CPU reference on a worker pool.
 *
 * Executes PROJECT ops on host shared-memory buffers with
 * pj_ref_project_rows (fp32 accumulation over the layer's stored format).
 * cfg->cpu.threads workers (0 = one per online core) take chunks of rows:
 * an op big enough is split across workers, the ops of one job run in
 * order, and jobs of different connections run side by side. The table is
 * returned by pj_backend_cpu_ops() (backend.h); nothing else is public.
 * CUDA IPC buffers are refused with PJ_E_REGISTER.
 */
#ifndef PJ_BACKEND_CPU_H
#define PJ_BACKEND_CPU_H

#include "daemon/backend.h"

/* Rows of one op's chunk are split so that each chunk does at least this
 * many multiply-adds (below it the hand-off costs more than it saves). */
#define PJ_CPU_MIN_CHUNK_MACS (1u << 20)

#endif
