/* trace.h — projload's request traces: parse, check against a daemon,
 * generate, write.
 *
 * A trace is JSON lines, one request per line (client/TRACE.md is the
 * normative text):
 *   {"t_us": 1200, "client": 3, "ops": [{"layer": "o", "m": 8}, ...]}
 * Blank lines and lines whose first non-blank character is '#' are skipped.
 * Every parse error is one line naming the file, the line and the field:
 *   trace.jsonl:17: ops[1].m: expected an integer >= 1, got -3
 * Layer names are kept as text until pj_trace_resolve maps them onto the
 * layers a daemon announced in WELCOME (unknown names, m over max_m and n
 * over a layer's rows fail there, before any request is sent).
 */
#ifndef PJ_TRACE_H
#define PJ_TRACE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "protocol/wire.h"

#define PJ_TRACE_NAME_MAX 63   /* longest layer name (the wire's limit) */
#define PJ_TRACE_MAX_OPS  1024 /* ops per request the parser accepts */
/* Ops per request the generator writes at most: what a daemon takes by
 * default (limits.max_ops_per_request). */
#define PJ_TRACE_GEN_MAX_OPS 64
#define PJ_TRACE_MAX_M       1000000 /* largest m the parser accepts */
#define PJ_TRACE_MAX_N       1000000 /* largest n the parser accepts */
#define PJ_TRACE_MAX_CLIENT  1023    /* client ids are 0..this */
#define PJ_TRACE_MAX_T_US    (1ll << 50)
#define PJ_TRACE_MAX_BYTES   ((size_t)256 << 20) /* largest trace file pj_trace_load reads */

typedef struct pj_trace_op {
    uint32_t name;  /* index into pj_trace.names */
    uint32_t m;     /* rows of x (tokens) */
    uint32_t n_req; /* n as written; 0 when the line left it out */
    uint32_t n;     /* effective n: n_req, or the layer's rows once resolved */
    int32_t layer;  /* the daemon's layer index after pj_trace_resolve; -1 before */
} pj_trace_op;

typedef struct pj_trace_req {
    int64_t t_us;    /* microseconds from the start; -1 when the line has none */
    uint32_t client; /* stream id, 0 when the line has none */
    uint32_t op0;    /* first op in pj_trace.ops */
    uint32_t n_ops;
    uint32_t line; /* 1-based line in the file; 0 for a generated request */
} pj_trace_req;

typedef struct pj_trace {
    char file[256]; /* name used in messages ("trace.jsonl", "<generated>") */
    pj_trace_req *reqs;
    size_t n_reqs, cap_reqs;
    pj_trace_op *ops;
    size_t n_ops, cap_ops;
    char (*names)[PJ_TRACE_NAME_MAX + 1];
    size_t n_names, cap_names;
    uint16_t *name_slots; /* open-addressing index of names: 1 + index, 0 free */
    size_t n_timed;       /* requests carrying t_us */
} pj_trace;

/* An empty trace whose messages call it `file` (NULL: "<trace>"). */
void pj_trace_init(pj_trace *t, const char *file);

/* Frees the arrays and leaves an empty trace. */
void pj_trace_free(pj_trace *t);

/* Parses len bytes of JSON-lines text into t (initialised by the caller;
 * requests are appended). Returns 0, -EINVAL with "file:line: field: why"
 * in err (t keeps the requests of the lines before the bad one), or
 * -ENOMEM. A trace with no request at all is an error, and so are a string
 * holding \u0000, a number written with a fraction, exponent or leading zero (1.0, 1e2, 01)
 * and more than PJ_WIRE_MAX_LAYERS_ALL distinct layer names. */
int pj_trace_parse(pj_trace *t, const char *text, size_t len, char *err, size_t errlen);

/* Reads the file at path and parses it into t (pj_trace_init'd here, named
 * by its base name). Returns 0, a negative errno from reading (err names
 * the path; -EFBIG for a file over PJ_TRACE_MAX_BYTES), or what
 * pj_trace_parse returns. The caller frees t. */
int pj_trace_load(pj_trace *t, const char *path, char *err, size_t errlen);
/* The same with another size limit (tests). */
int pj_trace_load_limit(pj_trace *t, const char *path, size_t max_bytes, char *err, size_t errlen);

/* Appends one request (the generator and the tests use it). layers[i] are
 * names, ms[i] and ns[i] (0: layer's rows) the shapes, t_us -1 for none.
 * Returns 0, -EINVAL (a value the parser would refuse, including a
 * (PJ_WIRE_MAX_LAYERS_ALL + 1)-th distinct name) or -ENOMEM. */
int pj_trace_add(pj_trace *t, int64_t t_us, uint32_t client, const char *const *layers,
                 const uint32_t *ms, const uint32_t *ns, uint32_t n_ops);

/* Maps every op onto the daemon's layers: op.layer = index in pj_welcome_layers(w),
 * op.n = n_req or the layer's rows. Fails (-EINVAL, err naming the line
 * and field) on an unknown layer, m > w->max_m, n > the layer's rows, or
 * more ops in a request than w->max_ops_per_request. */
int pj_trace_resolve(pj_trace *t, const pj_welcome *w, char *err, size_t errlen);

/* The op list of request r as a signature: "qkv_gate,o,unpooler/1024"
 * (n shown only when the line gave one) followed by " m=" and the m values
 * through mset_label (or the plain m when mset_label is NULL): one " m=" at
 * the end when every op has the same label, else one after each op. A run
 * of consecutive equal ops (layer, n, label) is written once with its
 * length: "qkv_gate*30 m=1". Writes at most cap bytes (always terminated);
 * returns the length it needed (a caller that needs distinct keys checks
 * it against cap). */
typedef void (*pj_trace_mset_fn)(void *ctx, uint32_t m, char *out, size_t cap);
size_t pj_trace_signature(const pj_trace *t, size_t r, pj_trace_mset_fn mset_label, void *ctx,
                          char *out, size_t cap);

/* Writes t as JSON lines (the format pj_trace_parse reads), with `header`
 * as a '#' comment first when non-NULL. Returns 0 or -EIO. */
int pj_trace_write(const pj_trace *t, FILE *f, const char *header);

/* ---- generator ---------------------------------------------------------- */

typedef enum pj_trace_kind {
    PJ_TRACE_DECODE = 0,    /* decode steps, batch size drifting in 1..max_batch */
    PJ_TRACE_VERIFY = 1,    /* verify steps, m = batch x draft, capped at max_m */
    PJ_TRACE_REFERENCE = 2, /* the six reference loads, m = 1 8 16 32 128 256 */
} pj_trace_kind;

typedef struct pj_trace_gen {
    pj_trace_kind kind;
    uint64_t seed;
    uint32_t count;       /* requests */
    uint32_t clients;     /* streams, each its own batch walk (>= 1) */
    uint32_t draft;       /* verify: draft tokens per sequence (>= 1) */
    uint32_t max_m;       /* cap on m (>= 1) */
    uint32_t max_batch;   /* decode/verify: batch walk bound (1..max_m) */
    uint32_t unpooler_n;  /* n of the unpooler op; 0: leave n out (layer's rows) */
    uint32_t interval_us; /* mean time between one stream's steps (t_us) */
    /* The layers requests name instead of the reference five (NULL: those,
     * with unpooler_n): a served model's own, e.g. its 128 projections.
     * Each request takes ops_per_request of them (1..64; 0: all, when
     * there are at most 64), one stream's requests walking the list in
     * order and wrapping, as a worker runs its layers in turn; n is left
     * out (each layer's rows). */
    const char *const *layers;
    uint32_t n_layers;
    uint32_t ops_per_request;
} pj_trace_gen;

/* The defaults: decode, seed 1, 1000 requests, 1 client, draft 4, max_m
 * 256, max_batch 256, unpooler_n 1024, interval_us 2000. */
void pj_trace_gen_defaults(pj_trace_gen *g);

/* "decode" / "verify" / "reference"; NULL for another value. */
const char *pj_trace_kind_name(pj_trace_kind k);
/* The kind called name, or -1. */
int pj_trace_kind_from_name(const char *name);

/* The five layers every generated request names, in order. */
extern const char *const pj_trace_gen_layers[5];
/* The six reference m values. */
extern const uint32_t pj_trace_ref_m[6];

/* Fills t (pj_trace_init'd here, named "<generated>") with g->count
 * requests, each the five layers (or g->layers' next ops_per_request) at
 * one m, sorted by t_us. The same g
 * gives the same trace on any machine. Returns 0, -EINVAL (bad option,
 * err says which) or -ENOMEM. */
int pj_trace_generate(pj_trace *t, const pj_trace_gen *g, char *err, size_t errlen);

#endif
