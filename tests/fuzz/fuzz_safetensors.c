/* fuzz_safetensors.c — arbitrary bytes as a whole safetensors file image:
 * the parser must reject or accept without reading outside the buffer, and
 * whatever it accepts must be safe to walk and must keep the header's
 * promises (safetensors.h): each tensor's bytes lie inside the data section,
 * its size is its shape times its dtype's, no two non-empty tensors share a
 * byte, names are unique and found by pj_st_find. An accepted file is then
 * written back with the writer (what modelgen uses to make model files) and
 * opened again from disk (/dev/shm, else /tmp): the same tensors, dtypes,
 * shapes, bytes and metadata must come back. */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "daemon/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check(int ok)
{
    if (!ok)
        __builtin_trap();
}

/* The promises about one accepted image. */
static void check_layout(const pj_st_file *f, const uint8_t *data, size_t size)
{
    uint64_t hlen = pj_st_header_len(f);
    check(pj_st_file_size(f) == size && hlen >= 2 && hlen <= size - 8);
    const uint8_t *sec = data + 8 + hlen;
    uint64_t sec_len = size - 8 - hlen;
    size_t n = pj_st_count(f);
    check(pj_st_get(f, n) == NULL);
    for (size_t i = 0; i < n; i++) {
        const pj_st_tensor *t = pj_st_get(f, i);
        check(t != NULL && t->name != NULL);
        check(strcmp(t->name, "__metadata__") != 0);
        check(t->begin <= t->end && t->end <= sec_len);
        check((const uint8_t *)t->data == sec + t->begin && t->nbytes == t->end - t->begin);
        check(t->ndim <= PJ_ST_MAX_DIMS && (unsigned)t->dtype < PJ_ST_DTYPE_COUNT);
        uint64_t need = pj_st_dtype_size(t->dtype);
        for (uint32_t d = 0; d < t->ndim; d++)
            check(!__builtin_mul_overflow(need, t->shape[d], &need));
        check(need == t->nbytes);
        check(pj_st_find(f, t->name) == t);
        for (size_t j = 0; j < i; j++) {
            const pj_st_tensor *u = pj_st_get(f, j);
            check(strcmp(u->name, t->name) != 0);
            if (t->nbytes && u->nbytes)
                check(t->end <= u->begin || u->end <= t->begin);
        }
    }
}

/* Writes f back through the writer and opens the result from disk. */
static void check_round_trip(const pj_st_file *f)
{
    size_t n = pj_st_count(f), nm = pj_st_meta_count(f);
    /* The writer refuses a metadata key given twice and an empty tensor
     * name, which the reader accepts (nothing in projd looks a metadata key
     * up, and a layer's tensor name cannot be empty); skip those. */
    for (size_t i = 0; i < n; i++)
        if (pj_st_get(f, i)->name[0] == '\0')
            return;
    for (size_t i = 0; i < nm; i++)
        for (size_t j = 0; j < i; j++) {
            const char *ki, *vi, *kj, *vj;
            pj_st_meta_at(f, i, &ki, &vi);
            pj_st_meta_at(f, j, &kj, &vj);
            if (strcmp(ki, kj) == 0)
                return;
        }
    pj_st_wtensor *wt = calloc(n + 1, sizeof *wt);
    const char **meta = calloc(2 * nm + 1, sizeof *meta);
    check(wt != NULL && meta != NULL);
    for (size_t i = 0; i < n; i++) {
        const pj_st_tensor *t = pj_st_get(f, i);
        wt[i].name = t->name;
        wt[i].dtype = t->dtype;
        wt[i].ndim = t->ndim;
        memcpy(wt[i].shape, t->shape, sizeof wt[i].shape);
        wt[i].data = t->data;
    }
    for (size_t i = 0; i < nm; i++)
        pj_st_meta_at(f, i, &meta[2 * i], &meta[2 * i + 1]);

    /* In memory where there is a /dev/shm (the writer fsyncs each file). */
    static const char *dir;
    if (dir == NULL)
        dir = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    char path[64];
    snprintf(path, sizeof path, "%s/fuzz_st.%ld", dir, (long)getpid());
    char err[512];
    check(pj_st_write(path, wt, n, meta, nm, err, sizeof err) == 0);
    pj_st_file *g = NULL;
    int rc = pj_st_open(path, &g, err, sizeof err);
    unlink(path);
    check(rc == 0);
    check(pj_st_count(g) == n && pj_st_meta_count(g) == nm);
    for (size_t i = 0; i < n; i++) {
        const pj_st_tensor *t = pj_st_get(f, i), *u = pj_st_find(g, t->name);
        check(u != NULL && u->dtype == t->dtype && u->ndim == t->ndim &&
              memcmp(u->shape, t->shape, t->ndim * sizeof t->shape[0]) == 0 &&
              u->nbytes == t->nbytes &&
              (t->nbytes == 0 || memcmp(u->data, t->data, t->nbytes) == 0));
    }
    for (size_t i = 0; i < nm; i++) {
        const char *v = pj_st_meta(g, meta[2 * i]);
        check(v != NULL && strcmp(v, meta[2 * i + 1]) == 0);
    }
    pj_st_close(g);
    free(meta);
    free(wt);
}

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
    }
    for (size_t i = 0; i < pj_st_meta_count(f); i++) {
        const char *k, *v;
        pj_st_meta_at(f, i, &k, &v);
        sink ^= (uint8_t)(strlen(k) + strlen(v));
    }
    (void)sink;
    check_layout(f, data, size);
    check_round_trip(f);
    pj_st_close(f);
    return 0;
}
