/* envknob.c — numeric environment knobs (envknob.h). */
#include "daemon/envknob.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>

#include "daemon/log.h"

int pj_envknob_u64(const char *name, uint64_t lo, uint64_t hi, uint64_t *v)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return 0;
    /* strtoull takes a sign and leading blanks ("-1" as 2^64 - 1): digits
     * only. */
    char *end = NULL;
    errno = 0;
    unsigned long long n = isdigit((unsigned char)*s) ? strtoull(s, &end, 10) : 0;
    if (!end || *end || errno == ERANGE || n < lo || n > hi) {
        pj_log_warn("%s=%s is not a whole number from %" PRIu64 " to %" PRIu64
                    ": ignored, the default kept",
                    name, s, lo, hi);
        return 0;
    }
    *v = n;
    return 1;
}

int pj_envknob_u32(const char *name, uint32_t lo, uint32_t hi, uint32_t *v)
{
    uint64_t n;
    if (!pj_envknob_u64(name, lo, hi, &n))
        return 0;
    *v = (uint32_t)n;
    return 1;
}
