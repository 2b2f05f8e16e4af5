/* ycheck.h — a y block from the GPU held to the CPU reference, element by
 * element, where the GPU may sum in another order than the reference does.
 *
 * The reference (kernels/refgemm.h) rounds an fp32 sum in increasing k to
 * bf16; an engine that sums the same products in another order (split K,
 * tensor-core fragments, a cluster reduction) may round a few elements to
 * the neighbouring bf16. So an element passes when
 *
 *     |y - ref| <= 2^-7 |ref| + 2^-12 sum_k |x_k w_k|
 *
 * (the two roundings to bf16, and what fp32 sums of the same products in
 * another order can differ by, with room to spare), and the block passes
 * when, besides, no element is NaN or left at the 0xffff poison, every
 * element outside the block is still poison, and at most
 * max(PJY_DIFFER_FLOOR, block / PJY_DIFFER_DIV) elements differ from the
 * reference in their bits at all. That last limit is what catches the
 * faults the per-element bound lets through because each of them moves an
 * element by one rounding step: a conversion that truncates instead of
 * rounding (half the elements differ), a one-ulp offset or a scale of
 * 1.003 (all of them). The GPU suites' relative L2 errors against this
 * reference were at most 2.2e-4 (cuda_latency, session 40), a few tenths
 * of a per cent of elements one ulp off; the limit is 5 %.
 *
 * The CPU suites need none of this (the cpu backend runs the reference
 * itself: bit for bit, daemon_check.h); tests/test_ycheck.c shows the
 * check failing on each of the faults above without a GPU.
 */
#ifndef PJ_TEST_YCHECK_H
#define PJ_TEST_YCHECK_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/refgemm.h"
#include "tests/helpers/daemon_check.h"

#define PJY_DIFFER_FLOOR 4
#define PJY_DIFFER_DIV   20

/* The most an element may differ from a reference value want, where sabs
 * is sum_k |x_k w_k| over its row of x and its row of W. */
double pjy_bound(double want, double sabs);

/* Row r of |W| (k floats) into out. 0, or -1 when out of memory or the
 * format is unknown. */
int pjy_abs_w_row(const pj_weights *w, uint32_t r, float *out);

/* The counts of a check, element by element: pjy_verify's over a whole
 * block, and cuda_latency's over the columns of W it can afford to judge
 * (every element still scanned for poison and NaN). */
typedef struct pjy_tally {
    size_t in_block, judged;                         /* elements seen, elements judged */
    size_t beyond, differ, unwritten, nans, bad_ref; /* in the block */
    size_t outside;                                  /* written outside it */
    size_t first_bad, first_differ;                  /* (size_t)-1: none */
    double worst, num, den;                          /* the worst err / bound; the L2 sums */
} pjy_tally;

void pjy_tally_init(pjy_tally *t);

/* Element e outside the block: it must still be poison. */
void pjy_tally_outside(pjy_tally *t, size_t e, uint16_t got);

/* Element e of the block: 1 when it holds a value to judge, 0 when it was
 * counted as unwritten (poison) or NaN. */
int pjy_tally_written(pjy_tally *t, size_t e, uint16_t got);

/* A written element judged against the reference's bits want; sabs as
 * pjy_bound takes it. A reference that is not finite fails it. */
void pjy_tally_judge(pjy_tally *t, size_t e, uint16_t got, uint16_t want, double sabs);

/* The relative L2 error over the judged elements. */
double pjy_tally_rel(const pjy_tally *t);

/* 0 when the tally passes: nothing beyond the bound, unwritten, NaN,
 * against a reference not finite or written outside, and at most
 * max(PJY_DIFFER_FLOOR, judged / PJY_DIFFER_DIV) elements differing. Else
 * -1 with why: prefix, then the counts and the first bad element. */
int pjy_tally_verdict(const pjy_tally *t, const char *prefix, char *why, size_t whylen);

/* What the passing verdicts so far (this process, all threads) saw of
 * elements differing from the reference: how near correct engines come to
 * the differ limit, the measure that limit was set without. */
typedef struct pjy_seen {
    size_t blocks, judged, differ;     /* passing blocks; their elements judged, differing */
    size_t worst_differ, worst_judged; /* the block with the largest share differing */
} pjy_seen;

void pjy_seen_get(pjy_seen *out);

/* One line of it for a suite's log ("<suite>: ycheck: ..."); nothing when
 * no block was judged. */
void pjy_seen_print(const char *suite);

/* Checks a y buffer (count elements, a host copy) after shape s ran with
 * m rows on the weights w: the block is m x s->n at s->y_off, row stride
 * s->y_ld; x is m rows of w->k, contiguous; ref is m x w->n, contiguous
 * (pj_ref_project of that x). 0, or -1 with why saying what failed, how
 * often, and the first bad element. *rel_out (may be NULL): the relative
 * L2 error over the block, for a report. */
int pjy_verify(const uint16_t *Y, size_t count, const pjc_shape *s, uint32_t m, const pj_weights *w,
               const uint16_t *x, const uint16_t *ref, double *rel_out, char *why, size_t whylen);

#endif
