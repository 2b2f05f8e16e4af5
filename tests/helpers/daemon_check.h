/* daemon_check.h — checked projections against a running daemon.
 *
 * pjc_init loads the small test model in the test process and precomputes,
 * for every layer and every m of PJC_MS, two inputs and their CPU
 * reference outputs (pj_ref_project over all N rows; a request for n rows
 * must return the first n columns bit for bit). pjc_run writes one input
 * into the client's x buffer at the requested offset and stride, fills the
 * whole y buffer with 0xffff (a NaN no finite result produces), runs the
 * PROJECT and checks every element of the y buffer: the m x n result equals
 * the reference, everything else is still 0xffff.
 */
#ifndef PJ_TEST_DAEMON_CHECK_H
#define PJ_TEST_DAEMON_CHECK_H

#include <stddef.h>
#include <stdint.h>

#include "daemon/model.h"
#include "tests/helpers/wire_client.h"

#define PJC_N_MS 6
extern const uint32_t PJC_MS[PJC_N_MS]; /* 1, 8, 16, 32, 128, 256 */
#define PJC_VARIANTS 2
#define PJC_POISON   0xffffu
/* x's buffer outside the rows pjc_stage writes: a quiet bf16 NaN. */
#define PJC_X_OUTSIDE 0x7fc0u

/* Generate/load the small model once per process. model_path receives its
 * path. Returns 0 or a negative errno (reason on stderr). */
int pjc_init(char *model_path, size_t cap);
const pj_model *pjc_model(void);

/* Reference input (m x k, contiguous) and output (m x N, contiguous). */
const uint16_t *pjc_ref_x(uint32_t layer, uint32_t mi, uint32_t variant);
const uint16_t *pjc_ref_y(uint32_t layer, uint32_t mi, uint32_t variant);

/* A client with an x and a y shm buffer registered. */
typedef struct pjc_conn {
    pjt_client c;
    pjt_shm xs, ys;
    uint32_t xid, yid;
} pjc_conn;

/* From now on pjc_open also attaches a ring of this many slots (0: no
 * ring, the default), so that PROJECT and PING go through it. */
void pjc_use_ring(uint32_t slots);

/* Connect, HELLO, create and register the two buffers. 0 or -1 (why). */
int pjc_open(pjc_conn *t, const char *url, size_t xbytes, size_t ybytes, int timeout_ms, char *why,
             size_t whylen);
void pjc_close(pjc_conn *t);

/* One op; offsets and strides in elements. */
typedef struct pjc_shape {
    uint32_t layer, mi, variant, n;
    uint64_t x_off, x_ld, y_off, y_ld;
} pjc_shape;

/* Build the op (buffers of t) for a shape. */
pj_op pjc_op(const pjc_conn *t, const pjc_shape *s);

/* An image of x's buffer (count elements) for shape s: m rows of x (k
 * each, contiguous) at s's offset and stride, every other element
 * PJC_X_OUTSIDE. */
void pjc_fill_x(uint16_t *X, size_t count, const pjc_shape *s, uint32_t m, uint32_t k,
                const uint16_t *x);

/* Stage x for a shape (pjc_fill_x of its reference x) and poison the y
 * buffer. */
void pjc_stage(pjc_conn *t, const pjc_shape *s);

/* Check the y buffer after a shape ran. 0 or -1 (why). */
int pjc_verify(const pjc_conn *t, const pjc_shape *s, char *why, size_t whylen);

/* Stage, PROJECT, expect DONE with every status PJ_OK, verify. 0 or -1. */
int pjc_run(pjc_conn *t, const pjc_shape *s, char *why, size_t whylen);

/* Two ops in one request, the second reading what the first wrote: layer a
 * (x -> y at 0, stride N_a), then layer b (x = that y region, y after it).
 * Needs N_a == k_b. 0 or -1 (why). */
int pjc_run_chain(pjc_conn *t, uint32_t a, uint32_t b, uint32_t mi, uint32_t variant, char *why,
                  size_t whylen);

/* A layer pair usable by pjc_run_chain; 0 when found. */
int pjc_chain_pair(uint32_t *a, uint32_t *b);

/* A valid small request (layer 0, m = 1, n = all) on t: 0 or -1 (why). */
int pjc_sanity(pjc_conn *t, char *why, size_t whylen);

/* Integer env var, or def. */
long pjc_env_long(const char *name, long def);

#endif
