/* safetensors.h — reading and writing safetensors files.
 *
 * A file is: u64 little-endian header length H, H bytes of JSON (an object
 * mapping tensor name -> {"dtype", "shape", "data_offsets": [begin, end]},
 * plus an optional "__metadata__" object of string -> string), then the data
 * section; offsets are relative to the start of the data section.
 *
 * The reader checks everything before anyone dereferences tensor data:
 * header length (2 .. 100 MiB, inside the file), valid JSON object, known
 * dtype, non-negative integer shape, shape x itemsize == end - begin
 * (overflow-checked), begin <= end <= data size, no two tensors overlapping,
 * no duplicate names, no field repeated in an entry, no NUL in a string.
 * Gaps in the data section are allowed. Every error is one line naming the
 * file (as the caller spelled it) and the problem, e.g.
 *   model.safetensors: tensor 'o.weight': data_offsets [0, 100] span 100 bytes
 *   but shape [4096, 2048] x BF16 needs 16777216
 *
 * Dtypes other than BF16/F16/F32 are parsed (so a model file that also holds
 * integer tensors opens and inspects fine); whoever uses a tensor decides
 * whether its dtype is acceptable (pj_st_dtype_is_float).
 */
#ifndef PJ_SAFETENSORS_H
#define PJ_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#define PJ_ST_MAX_DIMS   8
#define PJ_ST_MAX_HEADER (100u << 20) /* 100 MiB, as the reference implementation */

typedef enum pj_st_dtype {
    PJ_ST_BF16 = 0,
    PJ_ST_F16,
    PJ_ST_F32,
    PJ_ST_F64,
    PJ_ST_I8,
    PJ_ST_U8,
    PJ_ST_I16,
    PJ_ST_U16,
    PJ_ST_I32,
    PJ_ST_U32,
    PJ_ST_I64,
    PJ_ST_U64,
    PJ_ST_BOOL,
    PJ_ST_F8_E4M3,
    PJ_ST_F8_E5M2,
    PJ_ST_DTYPE_COUNT
} pj_st_dtype;

/* One tensor of an open file. Pointers stay valid until pj_st_close. */
typedef struct pj_st_tensor {
    const char *name;
    pj_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[PJ_ST_MAX_DIMS];
    uint64_t begin, end; /* relative to the data section */
    const void *data;    /* start of the bytes (no alignment promised) */
    size_t nbytes;       /* end - begin */
} pj_st_tensor;

typedef struct pj_st_file pj_st_file;

/* "BF16", "F32", ...; "?" for an out-of-range value. */
const char *pj_st_dtype_name(pj_st_dtype d);
/* Bytes per element (0 for an out-of-range value). */
size_t pj_st_dtype_size(pj_st_dtype d);
/* Name -> dtype; -1 when the name is not a safetensors dtype. */
int pj_st_dtype_from_name(const char *name);
/* 1 for the dtypes projd can serve (BF16, F16, F32). */
int pj_st_dtype_is_float(pj_st_dtype d);

/* Open, map read-only and validate path. Owns: *out (pj_st_close), which
 * keeps the mapping. Returns 0, -errno from the system (err names the call),
 * or -EINVAL for a malformed file. */
int pj_st_open(const char *path, pj_st_file **out, char *err, size_t errlen);

/* Validate a whole file image already in memory (len bytes). buf is
 * borrowed and must outlive *out; label names it in errors. Same checks
 * and returns as pj_st_open. */
int pj_st_parse(const void *buf, size_t len, const char *label, pj_st_file **out, char *err,
                size_t errlen);

/* Tensors in header order. */
size_t pj_st_count(const pj_st_file *f);
const pj_st_tensor *pj_st_get(const pj_st_file *f, size_t i);
/* By name (binary search); NULL when absent. */
const pj_st_tensor *pj_st_find(const pj_st_file *f, const char *name);

/* "__metadata__" entries: count, i-th pair, lookup (NULL when absent). */
size_t pj_st_meta_count(const pj_st_file *f);
void pj_st_meta_at(const pj_st_file *f, size_t i, const char **key, const char **value);
const char *pj_st_meta(const pj_st_file *f, const char *key);

/* Header length and file size as read. */
uint64_t pj_st_header_len(const pj_st_file *f);
uint64_t pj_st_file_size(const pj_st_file *f);
const char *pj_st_label(const pj_st_file *f);

/* For a file pj_st_open mapped: 0 while it is as it was at open, else -EIO
 * with err saying how it changed (shrank under the mapping: those reads
 * gave zeros, see daemon/shmguard.h; or its size or modification time
 * moved). Call it after reading what is kept. Images of pj_st_parse: 0. */
int pj_st_verify(const pj_st_file *f, char *err, size_t errlen);

/* Unmap and free; NULL is fine. */
void pj_st_close(pj_st_file *f);

/* Writes "[4096, 2048]" into buf (truncated to cap); returns buf. */
char *pj_st_shape_str(const uint64_t *shape, uint32_t ndim, char *buf, size_t cap);

/* ---- writer ---------------------------------------------------------------
 * Usage: open, add tensors (and metadata), begin_data, append the bytes of
 * the tensors added with data == NULL (in order; tensors given with data are
 * written when the cursor reaches them), finish. Data is laid out contiguously
 * in the order tensors were added, starting right after a header padded with
 * spaces to 8-byte alignment, so a caller that adds wider dtypes first gets
 * every tensor aligned to its element size. Output goes to a temporary beside
 * path ("<path>.tmp.XXXXXX", mode 0644 less the umask; config/replacefile.h)
 * and is renamed over path by finish; abort (or any failed call) removes it.
 * After a failed call the writer only accepts pj_st_writer_abort. */
typedef struct pj_st_writer pj_st_writer;

/* Owns: *out until finish or abort. 0 or -errno (err names the file). */
int pj_st_writer_open(const char *path, pj_st_writer **out, char *err, size_t errlen);
/* Add a metadata pair (strings copied). 0, -EINVAL (duplicate key, after
 * begin_data) or -ENOMEM. */
int pj_st_writer_meta(pj_st_writer *w, const char *key, const char *value, char *err,
                      size_t errlen);
/* Declare a tensor. data (borrowed until it is written) or NULL to stream it
 * with append. 0, -EINVAL (empty/duplicate/reserved name, bad dtype, too many
 * dims, size overflow) or -ENOMEM. */
int pj_st_writer_add(pj_st_writer *w, const char *name, pj_st_dtype dtype, uint32_t ndim,
                     const uint64_t *shape, const void *data, char *err, size_t errlen);
/* Write the header (and any leading tensors given with data). */
int pj_st_writer_begin_data(pj_st_writer *w, char *err, size_t errlen);
/* Stream len bytes into the current streamed tensor; len may not run past
 * its end (-EINVAL). */
int pj_st_writer_append(pj_st_writer *w, const void *buf, size_t len, char *err, size_t errlen);
/* Check every byte was written, flush, fsync, rename; frees w in all cases. */
int pj_st_writer_finish(pj_st_writer *w, char *err, size_t errlen);
/* Remove the temporary file and free; NULL is fine. */
void pj_st_writer_abort(pj_st_writer *w);

/* One-shot writer for tensors already in memory. meta: n_meta key/value
 * pairs as meta[2i], meta[2i+1] (may be NULL when n_meta is 0). */
typedef struct pj_st_wtensor {
    const char *name;
    pj_st_dtype dtype;
    uint32_t ndim;
    uint64_t shape[PJ_ST_MAX_DIMS];
    const void *data;
} pj_st_wtensor;
int pj_st_write(const char *path, const pj_st_wtensor *t, size_t n, const char *const *meta,
                size_t n_meta, char *err, size_t errlen);

#endif
