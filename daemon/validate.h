/* validate.h — the checks a PROJECT op passes before anything executes.
 *
 * Pure functions of the op, the model, the limits and the connection's
 * buffers: no side effects, no references taken. Every arithmetic step on
 * client-supplied numbers is overflow-checked.
 */
#ifndef PJ_VALIDATE_H
#define PJ_VALIDATE_H

#include <stdint.h>

#include "daemon/backend.h"
#include "daemon/bufreg.h"
#include "daemon/model.h"
#include "protocol/wire.h"

/* The bytes a span of rows x width bf16 elements with row stride ld covers
 * from its first element: ((rows - 1) * ld + width) * 2; rows >= 1 is the
 * caller's. 0, or -1 when that overflows 64 bits. */
int pj_span_bytes(uint32_t rows, uint64_t ld, uint32_t width, uint64_t *bytes);

/* Does a span of rows x width bf16 elements with row stride ld, starting at
 * byte off, fit in size bytes? The span ends at
 * off + ((rows - 1) * ld + width) * 2. rows >= 1, width >= 1, ld >= width
 * are the caller's (checked before). Returns PJ_OK, with the span's bytes
 * in *span unless span is NULL, or PJ_E_BOUNDS (odd offset, overflow, past
 * the end) with err naming what ("x", "y"). */
int pj_validate_span(const char *what, uint64_t off, uint32_t rows, uint64_t ld, uint32_t width,
                     uint64_t size, uint64_t *span, char *err, size_t errlen);

/* Does any of x's m rows share a byte with any of y's? x's rows start at
 * address xa, xs bytes apart, xw bytes each; y's likewise (xs >= xw,
 * ys >= yw, xw, yw >= 1 and spans that do not wrap are the caller's). 1
 * with *at the lowest address of the first pair of rows found to meet,
 * else 0. O(m): the rows of each are ascending and disjoint, so one pass
 * over both lists finds a pair that meets if there is one. */
int pj_rows_overlap(uint64_t xa, uint64_t xs, uint64_t xw, uint64_t ya, uint64_t ys, uint64_t yw,
                    uint32_t m, uint64_t *at);

/* Check op (index i, for messages) in this order: layer (PJ_E_LAYER),
 * 1 <= m <= max_m and 1 <= n <= max_n (PJ_E_SHAPE), x_ld >= k and y_ld >= n
 * (PJ_E_SHAPE), for m > 1 both strides at most max_pitch bytes (0: no
 * limit; the backend's max_row_pitch) (PJ_E_SHAPE), op flags (PJ_E_FLAGS),
 * buffers registered and intact
 * (PJ_E_BUFFER), spans inside the buffers (PJ_E_BOUNDS), y sharing no
 * byte with x where both lie in one mapping (PJ_E_BOUNDS: by address, so
 * one buffer, or two registrations the daemon maps once; a memory mapped
 * twice apart is not seen). On PJ_OK, *out is
 * the resolved op (addresses = buffer address + offset) and *xb, *yb the
 * buffers (no reference taken). */
int pj_validate_op(const pj_op *op, uint32_t i, const pj_model *model, uint32_t max_m,
                   uint64_t max_pitch, pj_bufreg *reg, pj_exec_op *out, pj_buf **xb, pj_buf **yb,
                   char *err, size_t errlen);

#endif
