/* fuzz_safetensors.c — arbitrary bytes as a whole safetensors file image:
 * the parser must reject or accept without reading outside the buffer, and
 * whatever it accepts must be safe to walk. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "daemon/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    pj_st_file *f = NULL;
    if (pj_st_parse(data, size, "fuzz", &f, err, sizeof err) != 0) {
        /* one line, always terminated */
        if (memchr(err, '\0', sizeof err) == NULL || strchr(err, '\n'))
            __builtin_trap();
        return 0;
    }
    volatile uint8_t sink = 0;
    for (size_t i = 0; i < pj_st_count(f); i++) {
        const pj_st_tensor *t = pj_st_get(f, i);
        const uint8_t *p = t->data;
        for (size_t b = 0; b < t->nbytes; b++)
            sink ^= p[b];
        if (pj_st_find(f, t->name) != t)
            __builtin_trap();
    }
    for (size_t i = 0; i < pj_st_meta_count(f); i++) {
        const char *k, *v;
        pj_st_meta_at(f, i, &k, &v);
        sink ^= (uint8_t)(strlen(k) + strlen(v));
    }
    (void)sink;
    pj_st_close(f);
    return 0;
}
