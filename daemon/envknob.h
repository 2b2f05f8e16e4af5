/* envknob.h — the daemon's numeric environment knobs, most of them for the
 * test suites only (a drain bound a suite can wait out, a pause while the
 * model loads, the cpu backend made to look like the cuda one). One parse
 * and one rule for every knob that is a single number (reapwatch.c's
 * two-part test knobs parse their own lists): an unset or empty variable
 * leaves the default; a value that is not a whole decimal number inside
 * the knob's range is refused with a warning that names the variable, the
 * value and the range, and also leaves the default. Before this each knob parsed on
 * its own, and some took "12abc" as 12 or wrapped a huge value silently.
 */
#ifndef PJ_ENVKNOB_H
#define PJ_ENVKNOB_H

#include <stdint.h>

/* 1 with *v set when name holds a number in [lo, hi]; 0 (and *v as it
 * was) when it is unset, empty, or refused (logged). */
int pj_envknob_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *v);

/* The same for a knob held in 32 bits (hi is at most UINT32_MAX). */
int pj_envknob_u32(const char *name, uint32_t lo, uint32_t hi, uint32_t *v);

#endif
