/* validate.c — see validate.h. */
#include "daemon/validate.h"

#include "daemon/shmguard.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

int pj_span_bytes(uint32_t rows, uint64_t ld, uint32_t width, uint64_t *bytes)
{
    uint64_t elems;
    if (__builtin_mul_overflow((uint64_t)(rows - 1), ld, &elems) ||
        __builtin_add_overflow(elems, (uint64_t)width, &elems) ||
        __builtin_mul_overflow(elems, (uint64_t)2, bytes))
        return -1;
    return 0;
}

int pj_validate_span(const char *what, uint64_t off, uint32_t rows, uint64_t ld, uint32_t width,
                     uint64_t size, uint64_t *span, char *err, size_t errlen)
{
    if (off % 2 != 0) {
        snprintf(err, errlen, "%s offset %" PRIu64 " is not 2-byte aligned", what, off);
        return PJ_E_BOUNDS;
    }
    uint64_t bytes, end;
    if (pj_span_bytes(rows, ld, width, &bytes) != 0 || __builtin_add_overflow(off, bytes, &end)) {
        snprintf(err, errlen,
                 "%s span overflows: offset %" PRIu64 " + ((%u - 1) * %" PRIu64 " + %u) * 2", what,
                 off, rows, ld, width);
        return PJ_E_BOUNDS;
    }
    if (end > size) {
        snprintf(err, errlen,
                 "%s span [%" PRIu64 ", %" PRIu64 ") is past the buffer's %" PRIu64 " bytes", what,
                 off, end, size);
        return PJ_E_BOUNDS;
    }
    if (span)
        *span = bytes;
    return PJ_OK;
}

int pj_rows_overlap(uint64_t xa, uint64_t xs, uint64_t xw, uint64_t ya, uint64_t ys, uint64_t yw,
                    uint32_t m, uint64_t *at)
{
    uint32_t i = 0, j = 0;
    while (i < m && j < m) {
        uint64_t x0 = xa + i * xs, y0 = ya + j * ys;
        if (x0 < y0 + yw && y0 < x0 + xw) {
            *at = x0 > y0 ? x0 : y0;
            return 1;
        }
        /* The row that ends first meets nothing further on in the other. */
        if (x0 + xw <= y0)
            i++;
        else
            j++;
    }
    return 0;
}

int pj_validate_op(const pj_op *op, uint32_t i, const pj_model *model, uint32_t max_m,
                   uint64_t max_pitch, pj_bufreg *reg, pj_exec_op *out, pj_buf **xb, pj_buf **yb,
                   char *err, size_t errlen)
{
    char why[256];
    if (op->layer >= model->n_layers) {
        snprintf(err, errlen, "op %u: layer %u does not exist (the model has %u)", i, op->layer,
                 model->n_layers);
        return PJ_E_LAYER;
    }
    const pj_model_layer *L = &model->layers[op->layer];
    uint32_t k = L->w.k;
    if (op->m < 1 || op->m > max_m) {
        snprintf(err, errlen, "op %u (%s): m = %u is outside 1..%u", i, L->name, op->m, max_m);
        return PJ_E_SHAPE;
    }
    if (op->n < 1 || op->n > L->max_n) {
        snprintf(err, errlen, "op %u (%s): n = %u is outside 1..%u", i, L->name, op->n, L->max_n);
        return PJ_E_SHAPE;
    }
    if (op->x_ld < k) {
        snprintf(err, errlen, "op %u (%s): x stride %" PRIu64 " is less than k = %u", i, L->name,
                 op->x_ld, k);
        return PJ_E_SHAPE;
    }
    if (op->y_ld < op->n) {
        snprintf(err, errlen, "op %u (%s): y stride %" PRIu64 " is less than n = %u", i, L->name,
                 op->y_ld, op->n);
        return PJ_E_SHAPE;
    }
    if (max_pitch && op->m > 1 && (op->x_ld > max_pitch / 2 || op->y_ld > max_pitch / 2)) {
        int x = op->x_ld > max_pitch / 2;
        uint64_t ld = x ? op->x_ld : op->y_ld;
        snprintf(err, errlen,
                 "op %u (%s): %s stride %" PRIu64 " elements is past the %" PRIu64
                 " bytes a row stride may have on this backend when m > 1 (the device's "
                 "largest copy pitch)",
                 i, L->name, x ? "x" : "y", ld, max_pitch);
        return PJ_E_SHAPE;
    }
    if (op->op_flags != 0) {
        snprintf(err, errlen, "op %u: unknown op flags 0x%x", i, op->op_flags);
        return PJ_E_FLAGS;
    }
    pj_buf *x = pj_bufreg_get(reg, op->x_buf);
    pj_buf *y = pj_bufreg_get(reg, op->y_buf);
    if (!x || !y) {
        snprintf(err, errlen, "op %u: %s buffer %u is not registered on this connection", i,
                 !x ? "x" : "y", !x ? op->x_buf : op->y_buf);
        return PJ_E_BUFFER;
    }
    if (pj_buf_faulted(x) || pj_buf_faulted(y)) {
        snprintf(err, errlen,
                 "op %u: buffer %u's shared memory object shrank after it was "
                 "registered" PJ_SHMGUARD_OR_NO_PAGE "; register it again",
                 i, pj_buf_faulted(x) ? x->id : y->id);
        return PJ_E_BUFFER;
    }
    uint64_t xbytes = 0, ybytes = 0;
    int st =
        pj_validate_span("x", op->x_off, op->m, op->x_ld, k, x->size, &xbytes, why, sizeof why);
    if (st == PJ_OK)
        st = pj_validate_span("y", op->y_off, op->m, op->y_ld, op->n, y->size, &ybytes, why,
                              sizeof why);
    if (st != PJ_OK) {
        snprintf(err, errlen, "op %u (%s, m %u, n %u): %s", i, L->name, op->m, op->n, why);
        return st;
    }
    /* A y that shares a byte with x is undefined (the engines read x while
     * they write y, in an order of their own): refused where the two lie in
     * one mapping, which their addresses show. Both spans fit their
     * buffers (checked above), so no address below wraps. */
    const uint64_t xa = (uint64_t)(uintptr_t)x->addr + op->x_off;
    const uint64_t ya = (uint64_t)(uintptr_t)y->addr + op->y_off;
    uint64_t at;
    if (xa < ya + ybytes && ya < xa + xbytes &&
        pj_rows_overlap(xa, op->x_ld * 2, (uint64_t)k * 2, ya, op->y_ld * 2, (uint64_t)op->n * 2,
                        op->m, &at)) {
        snprintf(err, errlen,
                 "op %u (%s, m %u, n %u): y shares bytes with x (%s %u, byte %" PRIu64
                 "): y must not overlap its own op's x",
                 i, L->name, op->m, op->n, x == y ? "buffer" : "x buffer", x->id,
                 at - (uint64_t)(uintptr_t)x->addr);
        return PJ_E_BOUNDS;
    }
    memset(out, 0, sizeof *out);
    out->layer = op->layer;
    out->L = L;
    out->m = op->m;
    out->n = op->n;
    out->k = k;
    out->x = (const char *)x->addr + op->x_off;
    out->y = (char *)y->addr + op->y_off;
    out->x_ld = op->x_ld;
    out->y_ld = op->y_ld;
    out->x_handle = x->handle;
    out->y_handle = y->handle;
    out->x_off = op->x_off;
    out->y_off = op->y_off;
    out->x_bytes = xbytes;
    out->y_bytes = ybytes;
    *xb = x;
    *yb = y;
    return PJ_OK;
}
