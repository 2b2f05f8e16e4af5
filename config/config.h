/* config.h — projd's configuration: schema, embedded defaults, parser.
 *
 * The schema is documented in config/CONFIG.md; config/default.json is the
 * default, embedded in every binary (pj_config_default_json). A file given
 * with --config is applied on top of the defaults: keys it names replace
 * the default values, unknown keys are errors. Every error is one line that
 * names the key path, what was expected and what was found, e.g.
 *   model.layers[2].max_n: expected an integer in 0..16777216, got "abc"
 * Parsing never half-applies: on error the target is left untouched.
 */
#ifndef PJ_CONFIG_H
#define PJ_CONFIG_H

#include <stddef.h>
#include <stdint.h>

/* Layers one instance serves: a whole model's projections (a 70B model's
 * 80 decoder layers x 4 fused projections is 320). Every layer is sent in
 * the WELCOME (protocol/wire.h, PJ_WIRE_MAX_LAYERS_ALL). */
#define PJ_CFG_MAX_LAYERS 1024
#define PJ_CFG_MAX_SHAPES 32
/* Row counts below max_n a layer's graphs may be captured at too. */
#define PJ_CFG_MAX_GRAPH_ROWS 4
#define PJ_CFG_MAX_IDS        32
#define PJ_CFG_NAME           64
#define PJ_CFG_PATH           512
/* model.load_threads: the most it may name, and where 0 (auto) stops. */
#define PJ_CFG_MAX_LOAD_THREADS 64

typedef enum pj_backend_kind {
    PJ_BACKEND_AUTO = 0, /* cuda when a GPU is visible, else cpu */
    PJ_BACKEND_CPU = 1,
    PJ_BACKEND_CUDA = 2,
} pj_backend_kind;

typedef enum pj_format_pref {
    PJ_FPREF_AUTO = 0, /* bf16 -> z12 when k % 64 == 0 and smaller, else bf16; f32/f16 -> split */
    PJ_FPREF_BF16 = 1,
    PJ_FPREF_Z12 = 2,
    PJ_FPREF_SPLIT = 3,
} pj_format_pref;

typedef enum pj_log_level {
    PJ_LOG_ERROR = 0,
    PJ_LOG_WARN = 1,
    PJ_LOG_INFO = 2,
    PJ_LOG_DEBUG = 3,
} pj_log_level;

typedef struct pj_layer_config {
    char name[PJ_CFG_NAME];   /* what requests and tables call it */
    char tensor[PJ_CFG_PATH]; /* tensor name in the safetensors file */
    pj_format_pref format;
    uint32_t max_n; /* rows a request may use; 0 = all N */
    /* Row counts below max_n to capture graphs at as well (cuda backend):
     * a request of n rows runs at the smallest of them >= n, else at
     * max_n. Ascending, each at most max_n (checked at load). */
    uint32_t graph_rows[PJ_CFG_MAX_GRAPH_ROWS];
    uint32_t n_graph_rows;
    char engine[PJ_CFG_NAME]; /* force an engine ("" = dispatcher decides) */
    /* The tuned table's layer whose entries serve this one ("" = its own
     * name): layers named as a serving framework names them (SGLang's
     * "model.layers.3.self_attn.qkv_proj") use a table tuned once per shape. */
    char tuned_as[PJ_CFG_NAME];
} pj_layer_config;

typedef struct pj_config {
    struct {
        char url[PJ_CFG_PATH];   /* "" = /run/projd/projd.sock as root, else per-user runtime dir */
        uint32_t mode;           /* socket file mode, e.g. 0660 */
        char group[PJ_CFG_NAME]; /* socket file group ("" = leave) */
    } socket;
    struct {
        pj_backend_kind backend;
        int32_t index;          /* CUDA device index, when uuid is "" */
        char uuid[PJ_CFG_NAME]; /* "GPU-..." or "" */
    } device;
    struct {
        char path[PJ_CFG_PATH];
        /* Threads converting and verifying z12 at load (start-up only);
         * 0 = the CPUs the process may run on, at most 64. */
        uint32_t load_threads;
        uint32_t n_layers;
        pj_layer_config layers[PJ_CFG_MAX_LAYERS];
    } model;
    struct {
        uint32_t n_m;
        uint32_t m[PJ_CFG_MAX_SHAPES]; /* graph shapes captured at start */
        uint32_t max_m;                /* largest m a request may use */
    } shapes;
    struct {
        uint32_t max_message_bytes;
        uint32_t max_buffers_per_conn;
        uint32_t max_ops_per_request;
        uint32_t max_connections;
        uint32_t max_connections_per_uid; /* 0: no cap but max_connections */
        uint32_t max_inflight_per_conn;
        /* A connection that has not said HELLO this long after it was
         * accepted is closed (0: never). */
        uint32_t hello_timeout_ms;
        /* Bytes of registered buffers (what the daemon maps): one buffer,
         * one connection's sum, the whole daemon's sum. */
        uint64_t max_buffer_bytes;
        uint64_t max_conn_buffer_bytes;
        uint64_t max_total_buffer_bytes;
    } limits;
    struct {
        /* Empty lists: only root, the daemon's own uid and the members of
         * socket.group may connect. */
        uint32_t n_uids, n_gids;
        uint32_t uids[PJ_CFG_MAX_IDS];
        uint32_t gids[PJ_CFG_MAX_IDS];
    } auth;
    struct {
        pj_log_level level;
    } log;
    struct {
        char table[PJ_CFG_PATH]; /* "" = config/tuning/<gpu>.json next to the binary's share dir */
    } tuning;
    struct {
        uint32_t enabled;        /* RING_ATTACH accepted (1) or refused (0) */
        uint32_t spin_us;        /* a poller spins this long after its last request, then sleeps */
        uint32_t spin_min_cores; /* below this many online cores nothing spins */
        uint32_t max_slots;      /* largest ring a client may attach */
    } ring;
    struct {
        uint32_t threads;   /* cpu backend worker threads; 0 = number of cores */
        uint32_t min_op_us; /* each op takes at least this long (0 = as fast as it runs) */
    } cpu;
} pj_config;

/* The default config as JSON text (generated from config/default.json). */
extern const char pj_config_default_json[];

/* Fill *cfg with the embedded defaults. Returns 0 (the defaults are tested). */
int pj_config_defaults(pj_config *cfg);

/* Apply the JSON text (len bytes) on top of *cfg. 0 on success; -EINVAL with
 * a one-line message in err otherwise, *cfg untouched. */
int pj_config_apply_json(pj_config *cfg, const char *json, size_t len, char *err, size_t errlen);

/* Read a file and apply it; errors name the file. */
int pj_config_apply_file(pj_config *cfg, const char *path, char *err, size_t errlen);

/* For SIGHUP: 0 when next differs from cur only in keys that may change
 * without a restart (log.level, limits.*, auth.*); otherwise -EINVAL and err
 * names the first other key that changed. */
int pj_config_check_reload(const pj_config *cur, const pj_config *next, char *err, size_t errlen);

/* Render *cfg as JSON (malloc'd string, caller frees); NULL on ENOMEM. */
char *pj_config_to_json(const pj_config *cfg);

/* Lookups and names. */
int pj_config_layer_index(const pj_config *cfg, const char *name); /* -1 if absent */
const char *pj_backend_name(pj_backend_kind b);
const char *pj_log_level_name(pj_log_level l);

/* The offset of the first \u0000 escape or raw 0 byte inside a JSON string
 * of json (json[offset] tells which), or -1. cJSON cuts a string at its NUL,
 * so a name carrying one would read as its prefix (config keys, a
 * safetensors header's tensor names): callers refuse such documents. */
long pj_json_nul_escape(const char *json, size_t len);

/* The offset of the first byte of json that JSON does not allow but cJSON
 * takes, or -1: a control byte (below 0x20) outside a string other than
 * space, tab, CR and LF (cJSON skips it as white space), one unescaped
 * inside a string, and, with integers_only, a number with a fraction, an
 * exponent or a leading zero (cJSON reads 6.4e1 as 64, 01 as 1). what
 * (whatlen bytes) says which, in words. Run after pj_json_nul_escape. */
long pj_json_strict(const char *json, size_t len, int integers_only, char *what, size_t whatlen);

/* Appends s to dst (n bytes, NUL-terminated at *len, which moves on) as
 * printable ASCII: quotes and backslashes escaped, other bytes as \xNN,
 * and more than max input bytes cut with "...". Keeps a message one line
 * whatever text from a file it quotes. */
void pj_append_escaped(char *dst, size_t n, size_t *len, const char *s, size_t max);

/* FNV-1a of a NUL-terminated string: the hash of the name tables that
 * open addressing serves (a trace's layer names, the metric families). */
static inline uint32_t pj_str_hash(const char *s)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        h = (h ^ *p) * 16777619u;
    return h;
}

#endif
