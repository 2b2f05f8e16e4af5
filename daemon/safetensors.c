/* safetensors.c — validating reader (mmap) and atomic writer. */
#include "daemon/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "config/config.h"
#include "config/replacefile.h"
#include "daemon/shmguard.h"

/* Largest integer a JSON number (a double) carries exactly. */
#define ST_MAX_INT 9007199254740992.0 /* 2^53 */
/* How much of a tensor name an error message quotes. */
#define ST_NAME_QUOTE 80

static const struct {
    const char *name;
    size_t size;
} st_dtypes[PJ_ST_DTYPE_COUNT] = {
    [PJ_ST_BF16] = {"BF16", 2}, [PJ_ST_F16] = {"F16", 2},         [PJ_ST_F32] = {"F32", 4},
    [PJ_ST_F64] = {"F64", 8},   [PJ_ST_I8] = {"I8", 1},           [PJ_ST_U8] = {"U8", 1},
    [PJ_ST_I16] = {"I16", 2},   [PJ_ST_U16] = {"U16", 2},         [PJ_ST_I32] = {"I32", 4},
    [PJ_ST_U32] = {"U32", 4},   [PJ_ST_I64] = {"I64", 8},         [PJ_ST_U64] = {"U64", 8},
    [PJ_ST_BOOL] = {"BOOL", 1}, [PJ_ST_F8_E4M3] = {"F8_E4M3", 1}, [PJ_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *pj_st_dtype_name(pj_st_dtype d)
{
    if ((unsigned)d >= PJ_ST_DTYPE_COUNT)
        return "?";
    return st_dtypes[d].name;
}

size_t pj_st_dtype_size(pj_st_dtype d)
{
    if ((unsigned)d >= PJ_ST_DTYPE_COUNT)
        return 0;
    return st_dtypes[d].size;
}

int pj_st_dtype_from_name(const char *name)
{
    for (int i = 0; i < PJ_ST_DTYPE_COUNT; i++)
        if (strcmp(name, st_dtypes[i].name) == 0)
            return i;
    return -1;
}

int pj_st_dtype_is_float(pj_st_dtype d)
{
    return d == PJ_ST_BF16 || d == PJ_ST_F16 || d == PJ_ST_F32;
}

char *pj_st_shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap)
{
    size_t used = 0;
    if (cap == 0)
        return buf;
    buf[0] = '\0';
    used += (size_t)snprintf(buf, cap, "[");
    for (uint32_t i = 0; i < ndim && used < cap; i++)
        used += (size_t)snprintf(buf + used, cap - used, "%s%llu", i ? ", " : "",
                                 (unsigned long long)shape[i]);
    if (used < cap)
        snprintf(buf + used, cap - used, "]");
    return buf;
}

/* A name as an error message shows it: control bytes escaped, long names
 * cut, so a hostile header cannot break the one-line rule. */
static const char *quote_name(const char *s, char *buf, size_t cap)
{
    size_t o = 0;
    for (size_t i = 0; s[i] && o + 5 < cap; i++) {
        unsigned char c = (unsigned char)s[i];
        if (i >= ST_NAME_QUOTE) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        if (c < 0x20 || c == 0x7f || c == '\'' || c == '\\')
            o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", c);
        else
            buf[o++] = (char)c;
    }
    buf[o] = '\0';
    return buf;
}

#if defined(__GNUC__)
__attribute__((format(printf, 4, 5)))
#endif
static int
st_fail(char *err, size_t errlen, const char *label, const char *fmt, ...)
{
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: ", label);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return -EINVAL;
}

/* ---- reader --------------------------------------------------------------- */

struct pj_st_file {
    const uint8_t *buf;
    size_t len;
    void *map; /* non-NULL when we own a mapping of map_len bytes */
    size_t map_len;
    char *label;
    cJSON *root;
    uint64_t hlen;
    pj_st_tensor *t;
    size_t n;
    size_t *by_name;   /* indices into t sorted by name */
    const char **meta; /* 2 * n_meta pointers into root */
    size_t n_meta;
    /* A mapped file: kept open, and its mapping under the SIGBUS guard, so
     * that a file cut short while it is read (cp over it truncates first)
     * reads zeros instead of killing the process, and pj_st_verify can
     * tell that it changed. */
    int fd;
    int guard;
    struct stat st0;
};

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

/* JSON number -> integer in [0, 2^53]; 0 on success. */
static int json_uint(const cJSON *j, uint64_t *out)
{
    if (!cJSON_IsNumber(j))
        return -1;
    double d = j->valuedouble;
    if (!(d >= 0.0 && d <= ST_MAX_INT) || d != (double)(uint64_t)d)
        return -1;
    *out = (uint64_t)d;
    return 0;
}

/* How a bad JSON value looks in an error message. */
static const char *json_show(const cJSON *j, char *buf, size_t cap)
{
    if (cJSON_IsNumber(j))
        snprintf(buf, cap, "%.17g", j->valuedouble);
    else if (cJSON_IsString(j))
        snprintf(buf, cap, "a string");
    else if (cJSON_IsBool(j))
        snprintf(buf, cap, "a boolean");
    else if (cJSON_IsNull(j))
        snprintf(buf, cap, "null");
    else if (cJSON_IsArray(j))
        snprintf(buf, cap, "an array");
    else if (cJSON_IsObject(j))
        snprintf(buf, cap, "an object");
    else
        snprintf(buf, cap, "invalid");
    return buf;
}

static int cmp_by_begin(const void *a, const void *b)
{
    const pj_st_tensor *x = *(pj_st_tensor *const *)a, *y = *(pj_st_tensor *const *)b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    return x->end < y->end ? -1 : x->end > y->end;
}

static int cmp_by_name(const void *a, const void *b, void *ctx)
{
    const pj_st_tensor *t = ctx;
    return strcmp(t[*(const size_t *)a].name, t[*(const size_t *)b].name);
}

static int parse_tensor(const cJSON *e, pj_st_tensor *t, uint64_t data_len, const char *label,
                        char *err, size_t errlen)
{
    char qn[4 * ST_NAME_QUOTE + 8], shown[64];
    quote_name(e->string, qn, sizeof qn);
    if (!cJSON_IsObject(e))
        return st_fail(err, errlen, label, "tensor '%s': entry is %s, not an object", qn,
                       json_show(e, shown, sizeof shown));

    /* cJSON keeps a repeated key and lookups find the first; other readers
     * refuse the entry (or take the last), so one file would be two models. */
    static const char *const fields[] = {"dtype", "shape", "data_offsets"};
    for (size_t f = 0; f < sizeof fields / sizeof fields[0]; f++) {
        int seen = 0;
        for (const cJSON *c = e->child; c; c = c->next)
            seen += c->string && strcmp(c->string, fields[f]) == 0;
        if (seen > 1)
            return st_fail(err, errlen, label, "tensor '%s': \"%s\" appears %d times", qn,
                           fields[f], seen);
    }

    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    if (!cJSON_IsString(dt))
        return st_fail(err, errlen, label, "tensor '%s': \"dtype\" is %s, expected a string", qn,
                       dt ? json_show(dt, shown, sizeof shown) : "missing");
    int d = pj_st_dtype_from_name(dt->valuestring);
    if (d < 0) {
        char qd[4 * ST_NAME_QUOTE + 8];
        return st_fail(err, errlen, label, "tensor '%s': unknown dtype '%s'", qn,
                       quote_name(dt->valuestring, qd, sizeof qd));
    }

    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    if (!cJSON_IsArray(sh))
        return st_fail(err, errlen, label, "tensor '%s': \"shape\" is %s, expected an array", qn,
                       sh ? json_show(sh, shown, sizeof shown) : "missing");
    int nd = cJSON_GetArraySize(sh);
    if (nd > PJ_ST_MAX_DIMS)
        return st_fail(err, errlen, label, "tensor '%s': shape has %d dimensions (at most %d)", qn,
                       nd, PJ_ST_MAX_DIMS);
    t->ndim = (uint32_t)nd;
    int i = 0;
    for (const cJSON *s = sh->child; s; s = s->next, i++)
        if (json_uint(s, &t->shape[i]) != 0)
            return st_fail(err, errlen, label,
                           "tensor '%s': shape[%d] is %s, not a non-negative integer", qn, i,
                           json_show(s, shown, sizeof shown));

    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2 ||
        json_uint(off->child, &t->begin) != 0 || json_uint(off->child->next, &t->end) != 0)
        return st_fail(err, errlen, label,
                       "tensor '%s': \"data_offsets\" must be [begin, end], two non-negative "
                       "integers",
                       qn);
    if (t->begin > t->end)
        return st_fail(err, errlen, label,
                       "tensor '%s': data_offsets [%llu, %llu] have begin > end", qn,
                       (unsigned long long)t->begin, (unsigned long long)t->end);
    if (t->end > data_len)
        return st_fail(err, errlen, label,
                       "tensor '%s': data_offsets [%llu, %llu] run past the data section (%llu "
                       "bytes)",
                       qn, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)data_len);

    t->dtype = (pj_st_dtype)d;
    char ss[PJ_ST_MAX_DIMS * 24 + 4];
    uint64_t need = pj_st_dtype_size(t->dtype);
    for (uint32_t k = 0; k < t->ndim; k++)
        if (__builtin_mul_overflow(need, t->shape[k], &need))
            return st_fail(err, errlen, label, "tensor '%s': shape %s x %s overflows 64 bits", qn,
                           pj_st_shape_str(t->shape, t->ndim, ss, sizeof ss), dt->valuestring);
    if (need != t->end - t->begin)
        return st_fail(err, errlen, label,
                       "tensor '%s': data_offsets [%llu, %llu] span %llu bytes but shape %s x %s "
                       "needs %llu",
                       qn, (unsigned long long)t->begin, (unsigned long long)t->end,
                       (unsigned long long)(t->end - t->begin),
                       pj_st_shape_str(t->shape, t->ndim, ss, sizeof ss), dt->valuestring,
                       (unsigned long long)need);
    t->name = e->string;
    t->nbytes = (size_t)(t->end - t->begin);
    return 0;
}

static int parse_meta(pj_st_file *f, const cJSON *m, char *err, size_t errlen)
{
    char shown[64], qn[4 * ST_NAME_QUOTE + 8];
    if (f->meta)
        return st_fail(err, errlen, f->label, "\"__metadata__\" appears twice");
    if (!cJSON_IsObject(m))
        return st_fail(err, errlen, f->label, "\"__metadata__\" is %s, expected an object",
                       json_show(m, shown, sizeof shown));
    size_t n = (size_t)cJSON_GetArraySize(m);
    f->meta = calloc(2 * n + 1, sizeof *f->meta);
    if (!f->meta)
        return st_fail(err, errlen, f->label, "out of memory reading \"__metadata__\"");
    for (const cJSON *e = m->child; e; e = e->next) {
        if (!cJSON_IsString(e))
            return st_fail(err, errlen, f->label, "\"__metadata__\" entry '%s' is %s, not a string",
                           quote_name(e->string, qn, sizeof qn), json_show(e, shown, sizeof shown));
        f->meta[2 * f->n_meta] = e->string;
        f->meta[2 * f->n_meta + 1] = e->valuestring;
        f->n_meta++;
    }
    return 0;
}

/* What a file whose header length makes no sense is instead, from its
 * first bytes, for the message (a Git LFS pointer where the model should
 * be is a common deployment slip): NULL when nothing is recognised. */
static const char *foreign_kind(const uint8_t *b, size_t len, char *buf, size_t buflen)
{
    static const struct {
        const char *magic;
        size_t n;
        const char *kind;
    } known[] = {
        {"version https://git-lfs", 23,
         "a Git LFS pointer, not the file it points at (git lfs pull fetches it)"},
        {"PK\3\4", 4, "a zip archive (a PyTorch .bin / .pt checkpoint?); projd reads safetensors"},
        {"GGUF", 4, "a GGUF file; projd reads safetensors"},
        {"\x80\x02", 2, "a Python pickle (a PyTorch checkpoint?); projd reads safetensors"},
        {"\x80\x04", 2, "a Python pickle (a PyTorch checkpoint?); projd reads safetensors"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (len >= known[i].n && memcmp(b, known[i].magic, known[i].n) == 0)
            return known[i].kind;
    /* Text: say how it begins (its first line, printable bytes only). */
    size_t n = 0;
    while (n < len && n < 16 &&
           (b[n] == '\t' || b[n] == '\n' || b[n] == '\r' || (b[n] >= 0x20 && b[n] < 0x7f)))
        n++;
    if (n < 8 && n < len)
        return NULL;
    size_t w = 0;
    for (size_t i = 0; i < len && i < 48 && b[i] >= 0x20 && b[i] < 0x7f && b[i] != '"'; i++)
        w++;
    snprintf(buf, buflen, "%s beginning \"%.*s\"%s",
             b[0] == '{' || b[0] == '[' ? "JSON text" : "text", (int)w, (const char *)b,
             b[0] == '{' ? " (a safetensors file begins with its JSON header's 8-byte length)"
                         : "");
    return buf;
}

static int parse_image(pj_st_file *f, char *err, size_t errlen)
{
    const char *label = f->label;
    if (f->len < 8)
        return st_fail(err, errlen, label,
                       "file is %zu bytes, too short for the 8-byte header length", f->len);
    uint64_t hlen = le64(f->buf);
    f->hlen = hlen;
    char kbuf[160];
    /* Not for a length in range that runs past the end: that is a cut
     * file (whose length's bytes can read as some magic: 640 is 80 02). */
    const char *kind = hlen < 2 || hlen > PJ_ST_MAX_HEADER
                           ? foreign_kind(f->buf, f->len, kbuf, sizeof kbuf)
                           : NULL;
    if (kind)
        return st_fail(err, errlen, label, "not a safetensors file: %s", kind);
    if (hlen < 2)
        return st_fail(err, errlen, label, "header length %llu is too small (at least 2 bytes)",
                       (unsigned long long)hlen);
    if (hlen > PJ_ST_MAX_HEADER)
        return st_fail(err, errlen, label, "header length %llu exceeds the %u MiB limit",
                       (unsigned long long)hlen, PJ_ST_MAX_HEADER >> 20);
    if (hlen > f->len - 8)
        return st_fail(err, errlen, label,
                       "header length %llu runs past the end of the file (%zu bytes)",
                       (unsigned long long)hlen, f->len);

    const char *json = (const char *)f->buf + 8;
    const char *end = NULL;
    long nul = pj_json_nul_escape(json, (size_t)hlen);
    if (nul >= 0)
        return st_fail(err, errlen, label,
                       "header has %s in a string at byte %ld (a tensor name would read as "
                       "its part before it)",
                       json[nul] == '\0' ? "a NUL byte" : "\\u0000", nul);
    f->root = cJSON_ParseWithLengthOpts(json, (size_t)hlen, &end, 0);
    if (!f->root) {
        size_t at = (end && end >= json && end <= json + hlen) ? (size_t)(end - json) : 0;
        return st_fail(err, errlen, label, "header is not valid JSON (error near byte %zu of %llu)",
                       at, (unsigned long long)hlen);
    }
    /* The header may be padded with whitespace, nothing else. */
    for (const char *p = end; p < json + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            return st_fail(err, errlen, label,
                           "header has unexpected bytes after the JSON value (at byte %zu)",
                           (size_t)(p - json));
    if (!cJSON_IsObject(f->root)) {
        char shown[64];
        return st_fail(err, errlen, label, "header is %s, expected a JSON object",
                       json_show(f->root, shown, sizeof shown));
    }

    uint64_t data_len = f->len - 8 - hlen;
    size_t count = (size_t)cJSON_GetArraySize(f->root);
    f->t = calloc(count + 1, sizeof *f->t);
    f->by_name = calloc(count + 1, sizeof *f->by_name);
    pj_st_tensor **by_begin = calloc(count + 1, sizeof *by_begin);
    int rc = 0;
    if (!f->t || !f->by_name || !by_begin) {
        rc = st_fail(err, errlen, label, "out of memory for %zu header entries", count);
        goto out;
    }
    for (const cJSON *e = f->root->child; e; e = e->next) {
        if (strcmp(e->string, "__metadata__") == 0) {
            if ((rc = parse_meta(f, e, err, errlen)) != 0)
                goto out;
            continue;
        }
        pj_st_tensor *t = &f->t[f->n];
        if ((rc = parse_tensor(e, t, data_len, label, err, errlen)) != 0)
            goto out;
        t->data = f->buf + 8 + hlen + t->begin;
        f->by_name[f->n] = f->n;
        by_begin[f->n] = t;
        f->n++;
    }
    /* What cJSON took and JSON does not allow, in one pass once the
     * entries are read (a fraction is named there, with its tensor): a
     * control byte, read as white space or copied into a string, and a
     * whole number written as 1.0, 6.4e1 or 01. */
    char what[96];
    long bad = pj_json_strict(json, (size_t)hlen, 1, what, sizeof what);
    if (bad >= 0) {
        rc = st_fail(err, errlen, label, "header has %s at byte %ld", what, bad);
        goto out;
    }

    qsort_r(f->by_name, f->n, sizeof *f->by_name, cmp_by_name, f->t);
    for (size_t i = 1; i < f->n; i++) {
        const char *a = f->t[f->by_name[i - 1]].name, *b = f->t[f->by_name[i]].name;
        if (strcmp(a, b) == 0) {
            char qn[4 * ST_NAME_QUOTE + 8];
            rc = st_fail(err, errlen, label, "tensor '%s' appears twice in the header",
                         quote_name(a, qn, sizeof qn));
            goto out;
        }
    }

    /* Empty tensors occupy no bytes and cannot overlap anything. */
    qsort(by_begin, f->n, sizeof *by_begin, cmp_by_begin);
    const pj_st_tensor *prev = NULL;
    for (size_t i = 0; i < f->n; i++) {
        const pj_st_tensor *t = by_begin[i];
        if (t->begin == t->end)
            continue;
        if (prev && t->begin < prev->end) {
            char qa[4 * ST_NAME_QUOTE + 8], qb[4 * ST_NAME_QUOTE + 8];
            rc = st_fail(err, errlen, label,
                         "tensor '%s' data_offsets [%llu, %llu] overlap tensor '%s' [%llu, %llu]",
                         quote_name(t->name, qa, sizeof qa), (unsigned long long)t->begin,
                         (unsigned long long)t->end, quote_name(prev->name, qb, sizeof qb),
                         (unsigned long long)prev->begin, (unsigned long long)prev->end);
            goto out;
        }
        prev = t;
    }
out:
    free(by_begin);
    return rc;
}

void pj_st_close(pj_st_file *f)
{
    if (!f)
        return;
    pj_shmguard_remove(f->guard);
    if (f->map)
        munmap(f->map, f->map_len);
    if (f->fd >= 0)
        close(f->fd);
    cJSON_Delete(f->root);
    free(f->t);
    free(f->by_name);
    free(f->meta);
    free(f->label);
    free(f);
}

static pj_st_file *st_new(const char *label)
{
    pj_st_file *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->label = strdup(label ? label : "safetensors");
    if (!f->label) {
        free(f);
        return NULL;
    }
    f->fd = -1;
    f->guard = -1;
    return f;
}

int pj_st_parse(const void *buf, size_t len, const char *label, pj_st_file **out, char *err,
                size_t errlen)
{
    *out = NULL;
    pj_st_file *f = st_new(label);
    if (!f) {
        snprintf(err, errlen, "%s: out of memory", label ? label : "safetensors");
        return -ENOMEM;
    }
    f->buf = buf;
    f->len = len;
    int rc = parse_image(f, err, errlen);
    if (rc != 0) {
        pj_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int pj_st_open(const char *path, pj_st_file **out, char *err, size_t errlen)
{
    *out = NULL;
    struct stat st;
    const char *failed;
    int fd = pj_open_regular(path, &st, &failed);
    if (fd < 0 && failed) {
        snprintf(err, errlen, "%s: %s: %s", path, failed, strerror(-fd));
        return fd;
    }
    if (fd < 0) {
        snprintf(err, errlen, "%s: not a regular file (%s)", path, pj_file_kind(st.st_mode));
        return -EINVAL;
    }
    pj_st_file *f = st_new(path);
    if (!f) {
        snprintf(err, errlen, "%s: out of memory", path);
        close(fd);
        return -ENOMEM;
    }
    f->len = (size_t)st.st_size;
    f->st0 = st;
    if (f->len > 0) {
        /* Read-only private mapping: nothing we do can write the file, and
         * only the pages a caller touches are read. */
        void *p = mmap(NULL, f->len, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            snprintf(err, errlen, "%s: mmap of %zu bytes: %s", path, f->len, strerror(e));
            close(fd);
            pj_st_close(f);
            return -e;
        }
        f->map = p;
        f->map_len = f->len;
        f->buf = p;
        /* Without a guard slot (or handler) the file is read unguarded,
         * as it always was. */
        if (pj_shmguard_install() == 0)
            f->guard = pj_shmguard_add(p, f->len);
        f->fd = fd;
    } else {
        f->buf = (const uint8_t *)"";
        close(fd);
    }
    int rc = parse_image(f, err, errlen);
    /* A header that reads as malformed because it shrank says so. */
    if (rc != 0 && pj_st_verify(f, err, errlen) != 0)
        rc = -EIO;
    if (rc != 0) {
        pj_st_close(f);
        return rc;
    }
    *out = f;
    return 0;
}

int pj_st_verify(const pj_st_file *f, char *err, size_t errlen)
{
    if (f->guard >= 0 && pj_shmguard_faulted(f->guard)) {
        snprintf(err, errlen,
                 "%s: the file shrank while it was read (rewritten in place, as cp over it "
                 "does?): nothing read from it is used; replace a model by renaming a "
                 "complete file over it",
                 f->label);
        return -EIO;
    }
    struct stat now;
    if (f->fd >= 0 && fstat(f->fd, &now) == 0 &&
        (now.st_size != f->st0.st_size || now.st_mtim.tv_sec != f->st0.st_mtim.tv_sec ||
         now.st_mtim.tv_nsec != f->st0.st_mtim.tv_nsec)) {
        snprintf(err, errlen,
                 "%s: the file changed while it was read (size %lld -> %lld bytes, or its "
                 "modification time): nothing read from it is used; replace a model by "
                 "renaming a complete file over it",
                 f->label, (long long)f->st0.st_size, (long long)now.st_size);
        return -EIO;
    }
    return 0;
}

size_t pj_st_count(const pj_st_file *f)
{
    return f->n;
}

const pj_st_tensor *pj_st_get(const pj_st_file *f, size_t i)
{
    return i < f->n ? &f->t[i] : NULL;
}

const pj_st_tensor *pj_st_find(const pj_st_file *f, const char *name)
{
    size_t lo = 0, hi = f->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const pj_st_tensor *t = &f->t[f->by_name[mid]];
        int c = strcmp(name, t->name);
        if (c == 0)
            return t;
        if (c < 0)
            hi = mid;
        else
            lo = mid + 1;
    }
    return NULL;
}

size_t pj_st_meta_count(const pj_st_file *f)
{
    return f->n_meta;
}

void pj_st_meta_at(const pj_st_file *f, size_t i, const char **key, const char **value)
{
    *key = i < f->n_meta ? f->meta[2 * i] : NULL;
    *value = i < f->n_meta ? f->meta[2 * i + 1] : NULL;
}

const char *pj_st_meta(const pj_st_file *f, const char *key)
{
    for (size_t i = 0; i < f->n_meta; i++)
        if (strcmp(f->meta[2 * i], key) == 0)
            return f->meta[2 * i + 1];
    return NULL;
}

uint64_t pj_st_header_len(const pj_st_file *f)
{
    return f->hlen;
}

uint64_t pj_st_file_size(const pj_st_file *f)
{
    return f->len;
}

const char *pj_st_label(const pj_st_file *f)
{
    return f->label;
}

/* ---- writer --------------------------------------------------------------- */

enum { WR_DECLARE = 0, WR_DATA = 1, WR_FAILED = 2 };

typedef struct wr_tensor {
    char *name;
    pj_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[PJ_ST_MAX_DIMS];
    const void *data;
    uint64_t begin, nbytes;
} wr_tensor;

struct pj_st_writer {
    pj_replacing out; /* the file, replaced whole at finish */
    int state;
    wr_tensor *t;
    size_t n, cap;
    char **meta; /* key, value, key, value, ... */
    size_t n_meta, meta_cap;
    uint64_t total;   /* data section bytes declared so far */
    size_t cur;       /* tensor being written */
    uint64_t cur_off; /* bytes of it written */
};

#if defined(__GNUC__)
__attribute__((format(printf, 5, 6)))
#endif
static int
wr_fail(pj_st_writer *w, char *err, size_t errlen, int rc, const char *fmt, ...)
{
    w->state = WR_FAILED;
    if (err && errlen) {
        int n = snprintf(err, errlen, "%s: ", w->out.path);
        if (n >= 0 && (size_t)n < errlen) {
            va_list ap;
            va_start(ap, fmt);
            vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
            va_end(ap);
        }
    }
    return rc;
}

int pj_st_writer_open(const char *path, pj_st_writer **out, char *err, size_t errlen)
{
    *out = NULL;
    pj_st_writer *w = calloc(1, sizeof *w);
    if (!w) {
        snprintf(err, errlen, "%s: out of memory", path);
        return -ENOMEM;
    }
    int rc = pj_replacing_open(&w->out, path, 0644, PJ_MODE_UMASKED, err, errlen);
    if (rc) {
        free(w);
        return rc;
    }
    /* Large buffer: the generator appends one row (a few KiB) at a time. */
    setvbuf(w->out.f, NULL, _IOFBF, 1u << 20);
    *out = w;
    return 0;
}

void pj_st_writer_abort(pj_st_writer *w)
{
    if (!w)
        return;
    pj_replacing_abort(&w->out);
    for (size_t i = 0; i < w->n; i++)
        free(w->t[i].name);
    for (size_t i = 0; i < 2 * w->n_meta; i++)
        free(w->meta[i]);
    free(w->t);
    free(w->meta);
    free(w);
}

int pj_st_writer_meta(pj_st_writer *w, const char *key, const char *value, char *err, size_t errlen)
{
    if (w->state != WR_DECLARE)
        return wr_fail(w, err, errlen, -EINVAL, "metadata added after the data began");
    for (size_t i = 0; i < w->n_meta; i++)
        if (strcmp(w->meta[2 * i], key) == 0)
            return wr_fail(w, err, errlen, -EINVAL, "metadata key '%s' given twice", key);
    if (w->n_meta == w->meta_cap) {
        size_t nc = w->meta_cap ? 2 * w->meta_cap : 8;
        char **m = realloc(w->meta, 2 * nc * sizeof *m);
        if (!m)
            return wr_fail(w, err, errlen, -ENOMEM, "out of memory");
        w->meta = m;
        w->meta_cap = nc;
    }
    char *k = strdup(key), *v = strdup(value);
    if (!k || !v) {
        free(k);
        free(v);
        return wr_fail(w, err, errlen, -ENOMEM, "out of memory");
    }
    w->meta[2 * w->n_meta] = k;
    w->meta[2 * w->n_meta + 1] = v;
    w->n_meta++;
    return 0;
}

int pj_st_writer_add(pj_st_writer *w, const char *name, pj_st_dtype dtype, uint32_t ndim,
                     const uint64_t *shape, const void *data, char *err, size_t errlen)
{
    if (w->state != WR_DECLARE)
        return wr_fail(w, err, errlen, -EINVAL, "tensor '%s' added after the data began", name);
    if (!name || !name[0] || strcmp(name, "__metadata__") == 0)
        return wr_fail(w, err, errlen, -EINVAL, "tensor name '%s' is empty or reserved",
                       name ? name : "");
    if ((unsigned)dtype >= PJ_ST_DTYPE_COUNT)
        return wr_fail(w, err, errlen, -EINVAL, "tensor '%s': bad dtype %d", name, (int)dtype);
    if (ndim > PJ_ST_MAX_DIMS)
        return wr_fail(w, err, errlen, -EINVAL, "tensor '%s': %u dimensions (at most %d)", name,
                       ndim, PJ_ST_MAX_DIMS);
    for (size_t i = 0; i < w->n; i++)
        if (strcmp(w->t[i].name, name) == 0)
            return wr_fail(w, err, errlen, -EINVAL, "tensor '%s' added twice", name);
    uint64_t bytes = pj_st_dtype_size(dtype), end;
    for (uint32_t i = 0; i < ndim; i++)
        if (__builtin_mul_overflow(bytes, shape[i], &bytes))
            return wr_fail(w, err, errlen, -EINVAL, "tensor '%s': size overflows", name);
    if (__builtin_add_overflow(w->total, bytes, &end) || (double)end > ST_MAX_INT)
        return wr_fail(w, err, errlen, -EINVAL, "tensor '%s': data section exceeds 2^53 bytes",
                       name);
    if (w->n == w->cap) {
        size_t nc = w->cap ? 2 * w->cap : 8;
        wr_tensor *t = realloc(w->t, nc * sizeof *t);
        if (!t)
            return wr_fail(w, err, errlen, -ENOMEM, "out of memory");
        w->t = t;
        w->cap = nc;
    }
    wr_tensor *t = &w->t[w->n];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return wr_fail(w, err, errlen, -ENOMEM, "out of memory");
    t->dtype = dtype;
    t->ndim = ndim;
    if (ndim)
        memcpy(t->shape, shape, ndim * sizeof *shape);
    t->data = data;
    t->begin = w->total;
    t->nbytes = bytes;
    w->total = end;
    w->n++;
    return 0;
}

static int wr_put(pj_st_writer *w, const void *p, size_t len, char *err, size_t errlen)
{
    if (len && fwrite(p, 1, len, w->out.f) != len) {
        int e = errno ? errno : EIO;
        return wr_fail(w, err, errlen, -e, "write to %s: %s", w->out.tmp, strerror(e));
    }
    return 0;
}

/* Write every tensor from the cursor on that needs no streaming. */
static int wr_advance(pj_st_writer *w, char *err, size_t errlen)
{
    while (w->cur < w->n && (w->t[w->cur].data || w->t[w->cur].nbytes == 0)) {
        const wr_tensor *t = &w->t[w->cur];
        int rc = wr_put(w, t->data, (size_t)t->nbytes, err, errlen);
        if (rc)
            return rc;
        w->cur++;
        w->cur_off = 0;
    }
    return 0;
}

int pj_st_writer_begin_data(pj_st_writer *w, char *err, size_t errlen)
{
    if (w->state != WR_DECLARE)
        return wr_fail(w, err, errlen, -EINVAL, "begin_data called twice or after a failure");
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    int rc = 0;
    if (!root)
        goto nomem;
    if (w->n_meta) {
        cJSON *m = cJSON_AddObjectToObject(root, "__metadata__");
        if (!m)
            goto nomem;
        for (size_t i = 0; i < w->n_meta; i++)
            if (!cJSON_AddStringToObject(m, w->meta[2 * i], w->meta[2 * i + 1]))
                goto nomem;
    }
    for (size_t i = 0; i < w->n; i++) {
        const wr_tensor *t = &w->t[i];
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        if (!e || !cJSON_AddStringToObject(e, "dtype", pj_st_dtype_name(t->dtype)))
            goto nomem;
        cJSON *sh = cJSON_AddArrayToObject(e, "shape");
        if (!sh)
            goto nomem;
        for (uint32_t d = 0; d < t->ndim; d++) {
            cJSON *v = cJSON_CreateNumber((double)t->shape[d]);
            if (!v || !cJSON_AddItemToArray(sh, v)) {
                cJSON_Delete(v);
                goto nomem;
            }
        }
        cJSON *off = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON *b = cJSON_CreateNumber((double)t->begin);
        cJSON *en = cJSON_CreateNumber((double)(t->begin + t->nbytes));
        if (!off || !b || !en) {
            cJSON_Delete(b);
            cJSON_Delete(en);
            goto nomem;
        }
        cJSON_AddItemToArray(off, b);
        cJSON_AddItemToArray(off, en);
    }
    json = cJSON_PrintUnformatted(root);
    if (!json)
        goto nomem;
    size_t jl = strlen(json);
    size_t hlen = (jl + 7) & ~(size_t)7; /* 8 + hlen stays 8-byte aligned */
    uint8_t lenb[8];
    for (int i = 0; i < 8; i++)
        lenb[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    static const char spaces[8] = "        ";
    w->state = WR_DATA;
    if ((rc = wr_put(w, lenb, 8, err, errlen)) || (rc = wr_put(w, json, jl, err, errlen)) ||
        (rc = wr_put(w, spaces, hlen - jl, err, errlen)))
        goto out;
    rc = wr_advance(w, err, errlen);
    goto out;
nomem:
    rc = wr_fail(w, err, errlen, -ENOMEM, "out of memory building the header");
out:
    free(json);
    cJSON_Delete(root);
    return rc;
}

int pj_st_writer_append(pj_st_writer *w, const void *buf, size_t len, char *err, size_t errlen)
{
    if (w->state != WR_DATA)
        return wr_fail(w, err, errlen, -EINVAL, "append outside the data phase");
    if (w->cur >= w->n)
        return wr_fail(w, err, errlen, -EINVAL, "append of %zu bytes after the last tensor", len);
    wr_tensor *t = &w->t[w->cur];
    if (len > t->nbytes - w->cur_off)
        return wr_fail(w, err, errlen, -EINVAL,
                       "append of %zu bytes runs past tensor '%s' (%llu of %llu written)", len,
                       t->name, (unsigned long long)w->cur_off, (unsigned long long)t->nbytes);
    int rc = wr_put(w, buf, len, err, errlen);
    if (rc)
        return rc;
    w->cur_off += len;
    if (w->cur_off == t->nbytes) {
        w->cur++;
        w->cur_off = 0;
        return wr_advance(w, err, errlen);
    }
    return 0;
}

int pj_st_writer_finish(pj_st_writer *w, char *err, size_t errlen)
{
    int rc = 0;
    if (w->state == WR_DECLARE && (rc = pj_st_writer_begin_data(w, err, errlen)) != 0)
        goto fail;
    if (w->state != WR_DATA) {
        rc = wr_fail(w, err, errlen, -EINVAL, "writer is in a failed state");
        goto fail;
    }
    if (w->cur < w->n) {
        rc = wr_fail(w, err, errlen, -EINVAL, "tensor '%s' has %llu of %llu bytes written",
                     w->t[w->cur].name, (unsigned long long)w->cur_off,
                     (unsigned long long)w->t[w->cur].nbytes);
        goto fail;
    }
    /* Synced before the rename: a model file is large and written once,
     * and a crash must not leave a renamed file whose pages never reached
     * the disk in place of a good one. */
    if ((rc = pj_replacing_commit(&w->out, 1, err, errlen)) != 0)
        goto fail;
    pj_st_writer_abort(w); /* nothing left to remove: only frees */
    return 0;
fail:
    pj_st_writer_abort(w);
    return rc;
}

int pj_st_write(const char *path, const pj_st_wtensor *t, size_t n, const char *const *meta,
                size_t n_meta, char *err, size_t errlen)
{
    pj_st_writer *w;
    int rc = pj_st_writer_open(path, &w, err, errlen);
    if (rc)
        return rc;
    for (size_t i = 0; i < n_meta; i++)
        if ((rc = pj_st_writer_meta(w, meta[2 * i], meta[2 * i + 1], err, errlen)) != 0)
            goto fail;
    for (size_t i = 0; i < n; i++) {
        if ((rc = pj_st_writer_add(w, t[i].name, t[i].dtype, t[i].ndim, t[i].shape, t[i].data, err,
                                   errlen)) != 0)
            goto fail;
        /* NULL data means "stream" to the writer, which this one-shot call
         * cannot do; only an empty tensor may come without bytes. */
        if (!t[i].data && w->t[w->n - 1].nbytes) {
            rc = wr_fail(w, err, errlen, -EINVAL, "tensor '%s' has no data", t[i].name);
            goto fail;
        }
    }
    return pj_st_writer_finish(w, err, errlen);
fail:
    pj_st_writer_abort(w);
    return rc;
}
