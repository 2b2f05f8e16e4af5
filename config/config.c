/* config.c — projd's configuration: a table-driven schema walked by the
 * parser, the renderer and the reload check, so the three cannot drift.
 *
 * Every apply works on a private copy of the target and copies it back only
 * when the whole document (and the cross-key checks) passed, which is what
 * makes "a bad config changes nothing" true by construction.
 */
#include "config/config.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "config/replacefile.h"
#include "kernels/dispatch.h"
#include "protocol/sockpath.h"

/* Enums are stored through an int; the schema assumes they are int-sized. */
_Static_assert(sizeof(pj_backend_kind) == sizeof(int), "enum size");
_Static_assert(sizeof(pj_format_pref) == sizeof(int), "enum size");
_Static_assert(sizeof(pj_log_level) == sizeof(int), "enum size");

/* A config file larger than this is certainly a mistake (the full schema
 * with 32 layers of maximal strings is far below it). */
#define CFG_FILE_MAX (1u << 20)

/* Ranges; CONFIG.md documents the same numbers. */
#define MAX_N_LIMIT (1u << 24)
#define MAX_M_LIMIT 4096u
#define ID_MAX      4294967294u /* (uid_t)-1 means "no id" to the kernel */
#define BYTES_MIN   4096ll      /* buffer byte limits: one page .. 1 PiB */
#define BYTES_MAX   (1ll << 50)

/* ---- schema ------------------------------------------------------------- */

typedef enum fkind {
    F_SECTION, /* a nested object, merged key by key */
    F_STRING,  /* char[size], validated by rule */
    F_UINT,    /* uint32_t in min..max */
    F_INT,     /* int32_t in min..max */
    F_U64,     /* uint64_t in min..max (max below 2^53: exact in a JSON double) */
    F_ENUM,    /* int-sized enum, given by name */
    F_MODE,    /* uint32_t file mode: "0660" or 432 */
    F_LAYERS,  /* model.layers: the whole array is replaced */
    F_U32LIST, /* uint32_t[cap] with a uint32_t count: replaced as a whole */
} fkind;

typedef enum strrule {
    S_ANY,           /* anything that fits */
    S_NONEMPTY,      /* at least one byte */
    S_NAME,          /* 1.. bytes of [A-Za-z0-9_.-] */
    S_NAME_OR_EMPTY, /* "" or S_NAME */
    S_GROUP,         /* "" or S_NAME not starting with '-' */
    S_UUID,          /* "" or GPU-/MIG- followed by hex digits and dashes */
    S_IPC_URL,       /* "" or ipc://<path of 1..107 bytes> */
    S_ENGINE,        /* "" or an engine's name (kernels/dispatch.h) */
} strrule;

typedef enum listorder {
    L_ASCENDING, /* strictly increasing */
    L_UNIQUE,    /* any order, no repeats */
} listorder;

struct cfg_ctx;

typedef struct field {
    const char *key;
    fkind kind;
    size_t off;  /* from the base of the enclosing struct (pj_config or pj_layer_config) */
    size_t size; /* F_STRING: buffer size; F_U32LIST: capacity */
    int64_t min, max;
    const char *const *names; /* F_ENUM: NULL-terminated, index = value */
    strrule rule;
    listorder order;
    size_t count_off; /* F_U32LIST: offset of the uint32_t count */
    uint32_t min_count;
    bool required; /* layer keys that must be present */
    bool reload;   /* may change on SIGHUP (inherited by a section's keys) */
    const struct field *sub;
    /* F_SECTION: cross-key checks once the section is applied; seen has
     * bit i set when sub[i] was given in this document. */
    int (*check)(struct cfg_ctx *c, const pj_config *cfg, uint32_t seen);
} field;

static const char *const backend_names[] = {"auto", "cpu", "cuda", NULL};
static const char *const format_names[] = {"auto", "bf16", "z12", "split", NULL};
static const char *const level_names[] = {"error", "warn", "info", "debug", NULL};

#define CFG(m)   offsetof(pj_config, m)
#define LAYER(m) offsetof(pj_layer_config, m)

static const field layer_fields[] = {
    {.key = "name",
     .kind = F_STRING,
     .off = LAYER(name),
     .size = PJ_CFG_NAME,
     .rule = S_NAME,
     .required = true},
    {.key = "tensor",
     .kind = F_STRING,
     .off = LAYER(tensor),
     .size = PJ_CFG_PATH,
     .rule = S_NONEMPTY,
     .required = true},
    {.key = "format", .kind = F_ENUM, .off = LAYER(format), .names = format_names},
    {.key = "max_n", .kind = F_UINT, .off = LAYER(max_n), .min = 0, .max = MAX_N_LIMIT},
    {.key = "graph_rows",
     .kind = F_U32LIST,
     .off = LAYER(graph_rows),
     .size = PJ_CFG_MAX_GRAPH_ROWS,
     .count_off = LAYER(n_graph_rows),
     .min = 1,
     .max = MAX_N_LIMIT,
     .order = L_ASCENDING},
    {.key = "engine",
     .kind = F_STRING,
     .off = LAYER(engine),
     .size = PJ_CFG_NAME,
     .rule = S_ENGINE},
    {.key = "tuned_as",
     .kind = F_STRING,
     .off = LAYER(tuned_as),
     .size = PJ_CFG_NAME,
     .rule = S_NAME_OR_EMPTY},
    {0},
};

static const field socket_fields[] = {
    {.key = "url",
     .kind = F_STRING,
     .off = CFG(socket.url),
     .size = PJ_CFG_PATH,
     .rule = S_IPC_URL},
    {.key = "mode", .kind = F_MODE, .off = CFG(socket.mode), .min = 0, .max = 0777},
    {.key = "group",
     .kind = F_STRING,
     .off = CFG(socket.group),
     .size = PJ_CFG_NAME,
     .rule = S_GROUP},
    {0},
};

static const field device_fields[] = {
    {.key = "backend", .kind = F_ENUM, .off = CFG(device.backend), .names = backend_names},
    {.key = "index", .kind = F_INT, .off = CFG(device.index), .min = 0, .max = 255},
    {.key = "uuid", .kind = F_STRING, .off = CFG(device.uuid), .size = PJ_CFG_NAME, .rule = S_UUID},
    {0},
};

static const field model_fields[] = {
    {.key = "path",
     .kind = F_STRING,
     .off = CFG(model.path),
     .size = PJ_CFG_PATH,
     .rule = S_NONEMPTY},
    {.key = "load_threads",
     .kind = F_UINT,
     .off = CFG(model.load_threads),
     .min = 0,
     .max = PJ_CFG_MAX_LOAD_THREADS},
    {.key = "layers",
     .kind = F_LAYERS,
     .off = CFG(model.layers),
     .size = PJ_CFG_MAX_LAYERS,
     .count_off = CFG(model.n_layers),
     .min_count = 1,
     .sub = layer_fields},
    {0},
};

static int check_shapes(struct cfg_ctx *c, const pj_config *cfg, uint32_t seen);

static const field shapes_fields[] = {
    {.key = "m",
     .kind = F_U32LIST,
     .off = CFG(shapes.m),
     .size = PJ_CFG_MAX_SHAPES,
     .count_off = CFG(shapes.n_m),
     .min = 1,
     .max = MAX_M_LIMIT,
     .order = L_ASCENDING,
     .min_count = 1},
    {.key = "max_m", .kind = F_UINT, .off = CFG(shapes.max_m), .min = 1, .max = MAX_M_LIMIT},
    {0},
};

static const field limits_fields[] = {
    {.key = "max_message_bytes",
     .kind = F_UINT,
     .off = CFG(limits.max_message_bytes),
     .min = 1024,
     .max = 64 << 20},
    {.key = "max_buffers_per_conn",
     .kind = F_UINT,
     .off = CFG(limits.max_buffers_per_conn),
     .min = 1,
     .max = 4096},
    {.key = "max_ops_per_request",
     .kind = F_UINT,
     .off = CFG(limits.max_ops_per_request),
     .min = 1,
     .max = 1024},
    {.key = "max_connections",
     .kind = F_UINT,
     .off = CFG(limits.max_connections),
     .min = 1,
     .max = 4096},
    {.key = "max_connections_per_uid",
     .kind = F_UINT,
     .off = CFG(limits.max_connections_per_uid),
     .min = 0,
     .max = 4096},
    {.key = "max_inflight_per_conn",
     .kind = F_UINT,
     .off = CFG(limits.max_inflight_per_conn),
     .min = 1,
     .max = 1024},
    {.key = "hello_timeout_ms",
     .kind = F_UINT,
     .off = CFG(limits.hello_timeout_ms),
     .min = 0,
     .max = 3600000},
    {.key = "max_buffer_bytes",
     .kind = F_U64,
     .off = CFG(limits.max_buffer_bytes),
     .min = BYTES_MIN,
     .max = BYTES_MAX},
    {.key = "max_conn_buffer_bytes",
     .kind = F_U64,
     .off = CFG(limits.max_conn_buffer_bytes),
     .min = BYTES_MIN,
     .max = BYTES_MAX},
    {.key = "max_total_buffer_bytes",
     .kind = F_U64,
     .off = CFG(limits.max_total_buffer_bytes),
     .min = BYTES_MIN,
     .max = BYTES_MAX},
    {0},
};

static const field auth_fields[] = {
    {.key = "allow_uids",
     .kind = F_U32LIST,
     .off = CFG(auth.uids),
     .size = PJ_CFG_MAX_IDS,
     .count_off = CFG(auth.n_uids),
     .min = 0,
     .max = ID_MAX,
     .order = L_UNIQUE},
    {.key = "allow_gids",
     .kind = F_U32LIST,
     .off = CFG(auth.gids),
     .size = PJ_CFG_MAX_IDS,
     .count_off = CFG(auth.n_gids),
     .min = 0,
     .max = ID_MAX,
     .order = L_UNIQUE},
    {0},
};

static const field log_fields[] = {
    {.key = "level", .kind = F_ENUM, .off = CFG(log.level), .names = level_names, .reload = true},
    {0},
};

static const field tuning_fields[] = {
    {.key = "table",
     .kind = F_STRING,
     .off = CFG(tuning.table),
     .size = PJ_CFG_PATH,
     .rule = S_ANY},
    {0},
};

static const field cpu_fields[] = {
    {.key = "threads", .kind = F_UINT, .off = CFG(cpu.threads), .min = 0, .max = 1024},
    {.key = "min_op_us", .kind = F_UINT, .off = CFG(cpu.min_op_us), .min = 0, .max = 10000000},
    {0},
};

static const field ring_fields[] = {
    {.key = "enabled", .kind = F_UINT, .off = CFG(ring.enabled), .min = 0, .max = 1},
    {.key = "spin_us", .kind = F_UINT, .off = CFG(ring.spin_us), .min = 0, .max = 1000000},
    {.key = "max_slots", .kind = F_UINT, .off = CFG(ring.max_slots), .min = 2, .max = 4096},
    {.key = "spin_min_cores",
     .kind = F_UINT,
     .off = CFG(ring.spin_min_cores),
     .min = 0,
     .max = 4096},
    {0},
};

static const field root_fields[] = {
    {.key = "socket", .kind = F_SECTION, .sub = socket_fields},
    {.key = "device", .kind = F_SECTION, .sub = device_fields},
    {.key = "model", .kind = F_SECTION, .sub = model_fields},
    {.key = "shapes", .kind = F_SECTION, .sub = shapes_fields, .check = check_shapes},
    {.key = "limits", .kind = F_SECTION, .sub = limits_fields, .reload = true},
    {.key = "auth", .kind = F_SECTION, .sub = auth_fields, .reload = true},
    {.key = "log", .kind = F_SECTION, .sub = log_fields},
    {.key = "tuning", .kind = F_SECTION, .sub = tuning_fields},
    {.key = "ring", .kind = F_SECTION, .sub = ring_fields},
    {.key = "cpu", .kind = F_SECTION, .sub = cpu_fields},
    {0},
};

/* ---- key paths and error messages -------------------------------------- */

typedef struct cfg_ctx {
    char *err;
    size_t errlen;
    const char *file; /* prefix for every message, or NULL */
    char path[192];   /* the key path being applied, e.g. "model.layers[2].max_n" */
    size_t plen;
} cfg_ctx;

static bool is_name_char(unsigned char ch)
{
    return (ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
           ch == '_' || ch == '.' || ch == '-';
}

void pj_append_escaped(char *dst, size_t n, size_t *len, const char *s, size_t max)
{
    size_t i;
    for (i = 0; s[i] != '\0' && i < max; i++) {
        unsigned char ch = (unsigned char)s[i];
        char tmp[8];
        if (ch == '"' || ch == '\\')
            snprintf(tmp, sizeof tmp, "\\%c", ch);
        else if (ch < 0x20 || ch >= 0x7f)
            snprintf(tmp, sizeof tmp, "\\x%02x", ch);
        else
            snprintf(tmp, sizeof tmp, "%c", ch);
        size_t t = strlen(tmp);
        if (*len + t + 4 >= n)
            break;
        memcpy(dst + *len, tmp, t + 1);
        *len += t;
    }
    if (s[i] != '\0' && *len + 4 < n) {
        memcpy(dst + *len, "...", 4);
        *len += 3;
    }
}

/* Push ".key" (or "key" at the root) onto the path; returns the length to pop
 * back to. Keys that are not plain names are quoted. */
static size_t path_push_key(cfg_ctx *c, const char *key)
{
    size_t old = c->plen;
    bool plain = key[0] != '\0';
    for (const char *p = key; *p; p++)
        plain = plain && is_name_char((unsigned char)*p) && *p != '.';
    if (c->plen > 0 && c->plen + 1 < sizeof c->path)
        c->path[c->plen++] = '.';
    c->path[c->plen] = '\0';
    if (plain) {
        pj_append_escaped(c->path, sizeof c->path, &c->plen, key, 48);
    } else {
        if (c->plen + 1 < sizeof c->path)
            c->path[c->plen++] = '"';
        c->path[c->plen] = '\0';
        pj_append_escaped(c->path, sizeof c->path, &c->plen, key, 48);
        if (c->plen + 1 < sizeof c->path)
            c->path[c->plen++] = '"';
        c->path[c->plen] = '\0';
    }
    return old;
}

static size_t path_push_index(cfg_ctx *c, size_t i)
{
    size_t old = c->plen;
    int n = snprintf(c->path + c->plen, sizeof c->path - c->plen, "[%zu]", i);
    if (n > 0)
        c->plen = strlen(c->path);
    return old;
}

static void path_pop(cfg_ctx *c, size_t old)
{
    c->plen = old;
    c->path[old] = '\0';
}

/* "<file>: <path>: <message>"; returns -EINVAL so callers can return it. */
static int fail(cfg_ctx *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(cfg_ctx *c, const char *fmt, ...)
{
    if (c->err == NULL || c->errlen == 0)
        return -EINVAL;
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->err, c->errlen, "%s%s%s: %s", c->file ? c->file : "", c->file ? ": " : "",
             c->plen ? c->path : "config", msg);
    return -EINVAL;
}

/* Describe a JSON value for "got ...": strings quoted (shortened), numbers in
 * their shortest exact form, containers by kind. */
static void describe(const cJSON *v, char *buf, size_t n)
{
    if (cJSON_IsString(v)) {
        size_t len = strlen(v->valuestring);
        if (len > 64) {
            snprintf(buf, n, "a string of %zu bytes", len);
            return;
        }
        size_t at = 0;
        buf[0] = '\0';
        if (n > 1) {
            buf[at++] = '"';
            buf[at] = '\0';
        }
        pj_append_escaped(buf, n, &at, v->valuestring, 40);
        if (at + 1 < n) {
            buf[at++] = '"';
            buf[at] = '\0';
        }
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (!isfinite(d)) {
            snprintf(buf, n, "a number too large to represent");
            return;
        }
        /* Whole numbers as written ("100000", not "1e+05"), up to 2^53 */
        if (d == floor(d) && fabs(d) <= 9007199254740992.0) {
            snprintf(buf, n, "%.0f", d);
            return;
        }
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, n, "%.*g", prec, d);
            if (strtod(buf, NULL) == d)
                break;
        }
    } else if (cJSON_IsTrue(v)) {
        snprintf(buf, n, "true");
    } else if (cJSON_IsFalse(v)) {
        snprintf(buf, n, "false");
    } else if (cJSON_IsNull(v)) {
        snprintf(buf, n, "null");
    } else if (cJSON_IsArray(v)) {
        int k = cJSON_GetArraySize(v);
        if (k == 0)
            snprintf(buf, n, "an empty array");
        else
            snprintf(buf, n, "an array of %d element%s", k, k == 1 ? "" : "s");
    } else if (cJSON_IsObject(v)) {
        snprintf(buf, n, "an object");
    } else {
        snprintf(buf, n, "an unknown value");
    }
}

/* "expected <what>, got <v>" at the current path. */
static int fail_got(cfg_ctx *c, const char *what, const cJSON *v)
{
    char got[128];
    describe(v, got, sizeof got);
    return fail(c, "expected %s, got %s", what, got);
}

/* ---- values ------------------------------------------------------------- */

/* An integral JSON number in min..max; booleans, strings and fractions are
 * rejected rather than coerced. */
static int get_integer(cfg_ctx *c, const cJSON *v, int64_t min, int64_t max, int64_t *out)
{
    if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && d >= (double)min && d <= (double)max) {
            *out = (int64_t)d;
            return 0;
        }
    }
    char what[96];
    snprintf(what, sizeof what, "an integer in %lld..%lld", (long long)min, (long long)max);
    return fail_got(c, what, v);
}

static bool all_chars(const char *s, bool (*ok)(unsigned char))
{
    for (; *s; s++)
        if (!ok((unsigned char)*s))
            return false;
    return true;
}

static bool is_uuid_char(unsigned char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'f') || (ch >= 'A' && ch <= 'F') ||
           ch == '-';
}

static bool string_ok(strrule rule, const char *s, size_t len)
{
    switch (rule) {
    case S_ANY:
        return true;
    case S_NONEMPTY:
        return len > 0;
    case S_NAME:
        return len > 0 && all_chars(s, is_name_char);
    case S_NAME_OR_EMPTY:
        return all_chars(s, is_name_char);
    case S_GROUP:
        return s[0] != '-' && all_chars(s, is_name_char);
    case S_UUID:
        return len == 0 || ((strncmp(s, "GPU-", 4) == 0 || strncmp(s, "MIG-", 4) == 0) && len > 4 &&
                            all_chars(s + 4, is_uuid_char));
    case S_IPC_URL:
        /* The rule a start applies to any URL it would listen on (an
         * absolute path: the daemon checks its directory by path). */
        return len == 0 || pj_sockpath_check_served(s, "", NULL, 0) == 0;
    case S_ENGINE:
        return len == 0 || pj_eng_from_name(s) >= 0;
    }
    return false;
}

static void string_expectation(const field *f, char *buf, size_t n)
{
    size_t max = f->size - 1;
    switch (f->rule) {
    case S_ANY:
        snprintf(buf, n, "a string of at most %zu bytes", max);
        break;
    case S_NONEMPTY:
        snprintf(buf, n, "a non-empty string of at most %zu bytes", max);
        break;
    case S_NAME:
        snprintf(buf, n, "a name of 1..%zu characters from [A-Za-z0-9_.-]", max);
        break;
    case S_NAME_OR_EMPTY:
        snprintf(buf, n, "\"\" or a name of 1..%zu characters from [A-Za-z0-9_.-]", max);
        break;
    case S_GROUP:
        snprintf(buf, n,
                 "\"\" or a group name of 1..%zu characters from [A-Za-z0-9_.-], "
                 "not starting with '-'",
                 max);
        break;
    case S_UUID:
        snprintf(buf, n,
                 "\"\" or a device UUID (\"GPU-\" or \"MIG-\" then hex digits and "
                 "dashes, at most %zu characters)",
                 max);
        break;
    case S_IPC_URL:
        snprintf(buf, n,
                 "\"\", \"ipc://\" followed by an absolute socket path of 1..%d bytes, or an "
                 "absolute path (taken as its ipc:// URL)",
                 PJ_SOCKPATH_MAX);
        break;
    case S_ENGINE: {
        size_t at = (size_t)snprintf(buf, n, "\"\" or an engine:");
        for (int k = 0; k < PJ_ENG_COUNT && at < n; k++)
            at += (size_t)snprintf(buf + at, n - at, "%s %s", k ? "," : "",
                                   pj_eng_name((pj_eng_kind)k));
        break;
    }
    }
}

static int apply_string(cfg_ctx *c, const field *f, const cJSON *v, char *dst)
{
    char what[160];
    string_expectation(f, what, sizeof what);
    if (!cJSON_IsString(v))
        return fail_got(c, what, v);
    const char *val = v->valuestring;
    /* An absolute path is the ipc:// URL of it, as --socket and
     * $PROJD_SOCKET take it. */
    char url[PJ_CFG_PATH + 16];
    if (f->rule == S_IPC_URL && val[0] == '/' && strlen(val) < sizeof url - 6) {
        snprintf(url, sizeof url, "ipc://%s", val);
        val = url;
    }
    size_t len = strlen(val);
    if (len >= f->size) /* refused, never truncated */
        return fail(c, "expected %s, got a string of %zu bytes", what, len);
    /* A socket path too long is said as the path's length, not the URL's. */
    if (f->rule == S_IPC_URL && strncmp(val, "ipc://", 6) == 0 && len - 6 > PJ_SOCKPATH_MAX)
        return fail(c, "expected %s, got a path of %zu bytes", what, len - 6);
    if (!string_ok(f->rule, val, len))
        return fail_got(c, what, v);
    /* The whole buffer is rewritten so equal configs compare equal bytewise. */
    memset(dst, 0, f->size);
    memcpy(dst, val, len);
    return 0;
}

static int apply_enum(cfg_ctx *c, const field *f, const cJSON *v, int *dst)
{
    if (cJSON_IsString(v)) {
        for (int i = 0; f->names[i]; i++) {
            if (strcmp(v->valuestring, f->names[i]) == 0) {
                *dst = i;
                return 0;
            }
        }
    }
    char what[128];
    size_t at = (size_t)snprintf(what, sizeof what, "one of");
    for (int i = 0; f->names[i] && at < sizeof what; i++)
        at += (size_t)snprintf(what + at, sizeof what - at, "%s \"%s\"", i ? "," : "", f->names[i]);
    return fail_got(c, what, v);
}

/* A mode is written as a string of octal digits ("0660") because JSON has no
 * octal literals; a plain integer is taken as the numeric value. */
static int apply_mode(cfg_ctx *c, const field *f, const cJSON *v, uint32_t *dst)
{
    if (cJSON_IsString(v)) {
        const char *s = v->valuestring;
        size_t len = strlen(s);
        uint32_t mode = 0;
        bool ok = len >= 1 && len <= 4;
        for (size_t i = 0; ok && i < len; i++) {
            ok = s[i] >= '0' && s[i] <= '7';
            mode = mode * 8 + (uint32_t)(s[i] - '0');
        }
        if (ok && mode <= (uint32_t)f->max) {
            *dst = mode;
            return 0;
        }
    } else if (cJSON_IsNumber(v)) {
        double d = v->valuedouble;
        if (isfinite(d) && d == floor(d) && d >= 0 && d <= (double)f->max) {
            *dst = (uint32_t)d;
            return 0;
        }
    }
    char what[128];
    snprintf(what, sizeof what, "an octal string \"0000\"..\"%04llo\" or an integer 0..%lld",
             (unsigned long long)f->max, (long long)f->max);
    return fail_got(c, what, v);
}

static int apply_u32list(cfg_ctx *c, const field *f, const cJSON *v, void *base)
{
    uint32_t *arr = (uint32_t *)((char *)base + f->off);
    uint32_t *count = (uint32_t *)((char *)base + f->count_off);
    char what[160];
    snprintf(what, sizeof what, "an array of %u..%zu integers in %lld..%lld", f->min_count, f->size,
             (long long)f->min, (long long)f->max);
    if (!cJSON_IsArray(v))
        return fail_got(c, what, v);
    int n = cJSON_GetArraySize(v);
    if (n < (int)f->min_count || (size_t)n > f->size)
        return fail_got(c, what, v);

    uint32_t vals[PJ_CFG_MAX_SHAPES > PJ_CFG_MAX_IDS ? PJ_CFG_MAX_SHAPES : PJ_CFG_MAX_IDS];
    _Static_assert(PJ_CFG_MAX_SHAPES <= sizeof vals / sizeof vals[0], "list buffer");
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t old = path_push_index(c, i);
        int64_t x;
        int rc = get_integer(c, e, f->min, f->max, &x);
        if (rc == 0 && i > 0 && f->order == L_ASCENDING && (uint32_t)x <= vals[i - 1]) {
            char w[128];
            snprintf(w, sizeof w, "an integer greater than %u (sorted ascending, no repeats)",
                     vals[i - 1]);
            rc = fail_got(c, w, e);
        }
        for (size_t j = 0; rc == 0 && f->order == L_UNIQUE && j < i; j++) {
            if (vals[j] == (uint32_t)x) {
                char w[128];
                snprintf(w, sizeof w, "a value not listed before (also at [%zu])", j);
                rc = fail_got(c, w, e);
            }
        }
        if (rc != 0)
            return rc;
        path_pop(c, old);
        vals[i] = (uint32_t)x;
    }
    memset(arr, 0, f->size * sizeof *arr);
    memcpy(arr, vals, i * sizeof *arr);
    *count = (uint32_t)i;
    return 0;
}

static int apply_object(cfg_ctx *c, const cJSON *obj, const field *table, void *base,
                        uint32_t *seen_out);

/* Each layer is built from scratch (keys it omits take their documented
 * defaults), then the whole array replaces the old one. */
static int apply_layers(cfg_ctx *c, const field *f, const cJSON *v, void *base)
{
    pj_layer_config *layers = (pj_layer_config *)((char *)base + f->off);
    uint32_t *count = (uint32_t *)((char *)base + f->count_off);
    char what[96];
    snprintf(what, sizeof what, "an array of %u..%zu layer objects", f->min_count, f->size);
    if (!cJSON_IsArray(v))
        return fail_got(c, what, v);
    int n = cJSON_GetArraySize(v);
    if (n < (int)f->min_count || (size_t)n > f->size)
        return fail_got(c, what, v);

    pj_layer_config *tmp = calloc(f->size, sizeof *tmp);
    if (tmp == NULL)
        return fail(c, "out of memory");
    int rc = 0;
    size_t i = 0;
    for (const cJSON *e = v->child; e; e = e->next, i++) {
        size_t old = path_push_index(c, i);
        if (!cJSON_IsObject(e)) {
            rc = fail_got(c, "a layer object", e);
            goto out;
        }
        tmp[i].format = PJ_FPREF_AUTO;
        uint32_t seen = 0;
        rc = apply_object(c, e, f->sub, &tmp[i], &seen);
        if (rc != 0)
            goto out;
        for (size_t k = 0; f->sub[k].key; k++) {
            if (f->sub[k].required && !(seen & (1u << k))) {
                char exp[160];
                string_expectation(&f->sub[k], exp, sizeof exp);
                path_push_key(c, f->sub[k].key);
                rc = fail(c, "expected %s, got nothing (the key is required)", exp);
                goto out;
            }
        }
        for (size_t j = 0; j < i; j++) {
            if (strcmp(tmp[j].name, tmp[i].name) == 0) {
                path_push_key(c, "name");
                char w[96];
                snprintf(w, sizeof w, "a name no other layer uses (also model.layers[%zu].name)",
                         j);
                rc = fail_got(c, w, cJSON_GetObjectItemCaseSensitive(e, "name"));
                goto out;
            }
        }
        path_pop(c, old);
    }
    memcpy(layers, tmp, f->size * sizeof *tmp);
    *count = (uint32_t)i;
out:
    free(tmp);
    return rc;
}

static int apply_value(cfg_ctx *c, const field *f, const cJSON *v, void *base)
{
    char *p = (char *)base + f->off;
    int64_t x;
    int rc;
    switch (f->kind) {
    case F_SECTION: {
        if (!cJSON_IsObject(v))
            return fail_got(c, "an object", v);
        uint32_t seen = 0;
        rc = apply_object(c, v, f->sub, base, &seen);
        if (rc == 0 && f->check)
            rc = f->check(c, base, seen);
        return rc;
    }
    case F_STRING:
        return apply_string(c, f, v, p);
    case F_UINT:
        rc = get_integer(c, v, f->min, f->max, &x);
        if (rc == 0)
            *(uint32_t *)(void *)p = (uint32_t)x;
        return rc;
    case F_INT:
        rc = get_integer(c, v, f->min, f->max, &x);
        if (rc == 0)
            *(int32_t *)(void *)p = (int32_t)x;
        return rc;
    case F_U64:
        rc = get_integer(c, v, f->min, f->max, &x);
        if (rc == 0)
            *(uint64_t *)(void *)p = (uint64_t)x;
        return rc;
    case F_ENUM:
        return apply_enum(c, f, v, (int *)(void *)p);
    case F_MODE:
        return apply_mode(c, f, v, (uint32_t *)(void *)p);
    case F_LAYERS:
        return apply_layers(c, f, v, base);
    case F_U32LIST:
        return apply_u32list(c, f, v, base);
    }
    return fail(c, "internal error: unknown schema kind");
}

/* Apply every member of obj through table; unknown and repeated keys are
 * errors. seen_out gets bit i for each table[i] that was given. */
static int apply_object(cfg_ctx *c, const cJSON *obj, const field *table, void *base,
                        uint32_t *seen_out)
{
    uint32_t seen = 0;
    for (const cJSON *m = obj->child; m; m = m->next) {
        const char *key = m->string ? m->string : "";
        size_t k;
        for (k = 0; table[k].key; k++)
            if (strcmp(table[k].key, key) == 0)
                break;
        size_t old = path_push_key(c, key);
        if (table[k].key == NULL) {
            char keys[256];
            size_t at = 0;
            keys[0] = '\0';
            for (size_t j = 0; table[j].key && at < sizeof keys; j++)
                at += (size_t)snprintf(keys + at, sizeof keys - at, "%s%s", j ? ", " : "",
                                       table[j].key);
            return fail(c, "unknown key; expected one of: %s", keys);
        }
        if (seen & (1u << k))
            return fail(c, "key given twice; expected each key at most once per object");
        seen |= 1u << k;
        int rc = apply_value(c, &table[k], m, base);
        if (rc != 0)
            return rc;
        path_pop(c, old);
    }
    if (seen_out)
        *seen_out = seen;
    return 0;
}

/* shapes.m must fit under shapes.max_m; blame whichever of the two this
 * document changed (the list when both). */
static int check_shapes(cfg_ctx *c, const pj_config *cfg, uint32_t seen)
{
    uint32_t n = cfg->shapes.n_m;
    if (n == 0 || cfg->shapes.m[n - 1] <= cfg->shapes.max_m)
        return 0;
    if (seen & 1u) { /* shapes_fields[0] is "m" */
        size_t i = 0;
        while (cfg->shapes.m[i] <= cfg->shapes.max_m)
            i++;
        path_push_key(c, "m");
        path_push_index(c, i);
        return fail(c, "expected an integer in 1..%u (at most shapes.max_m), got %u",
                    cfg->shapes.max_m, cfg->shapes.m[i]);
    }
    path_push_key(c, "max_m");
    return fail(c, "expected an integer in %u..%u (at least the largest of shapes.m), got %u",
                cfg->shapes.m[n - 1], MAX_M_LIMIT, cfg->shapes.max_m);
}

/* ---- the document ------------------------------------------------------- */

static void line_col(const char *json, size_t off, unsigned *line, unsigned *col)
{
    unsigned l = 1, cc = 1;
    for (size_t i = 0; i < off; i++) {
        if (json[i] == '\n') {
            l++;
            cc = 1;
        } else {
            cc++;
        }
    }
    *line = l;
    *col = cc;
}

/* cJSON turns "\u0000" into a NUL that silently cuts the string short, and
 * it copies a raw 0 byte inside a string (invalid JSON, which it does not
 * refuse) with the same effect; find either in the (already valid) text so
 * it can be refused instead. Returns its offset or -1. */
long pj_json_nul_escape(const char *json, size_t len)
{
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        if (!in_str) {
            in_str = json[i] == '"';
        } else if (json[i] == '\0') {
            return (long)i;
        } else if (json[i] == '"') {
            in_str = false;
        } else if (json[i] == '\\' && i + 1 < len) {
            if (json[i + 1] == 'u' && i + 5 < len && memcmp(json + i + 2, "0000", 4) == 0)
                return (long)i;
            i++; /* the escaped character */
        }
    }
    return -1;
}

long pj_json_strict(const char *json, size_t len, int integers_only, char *what, size_t whatlen)
{
    bool in_str = false;
    for (size_t i = 0; i < len; i++) {
        const unsigned char c = (unsigned char)json[i];
        if (in_str) {
            if (c == '"') {
                in_str = false;
            } else if (c == '\\' && i + 1 < len) {
                i++; /* the escaped character */
            } else if (c < 0x20) {
                snprintf(what, whatlen, "an unescaped control byte (0x%02x) in a string", c);
                return (long)i;
            }
        } else if (c == '"') {
            in_str = true;
        } else if (c < 0x20 && c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            snprintf(what, whatlen, "a control byte (0x%02x) where only white space may be", c);
            return (long)i;
        } else if (integers_only && (c == '-' || (c >= '0' && c <= '9'))) {
            size_t j = i, digits = i + (c == '-');
            /* a leading zero is not JSON either (cJSON reads 01 as 1) */
            bool whole = !(digits + 1 < len && json[digits] == '0' && json[digits + 1] >= '0' &&
                           json[digits + 1] <= '9');
            while (j < len &&
                   (json[j] == '-' || json[j] == '+' || json[j] == '.' || json[j] == 'e' ||
                    json[j] == 'E' || (json[j] >= '0' && json[j] <= '9'))) {
                whole &= json[j] != '.' && json[j] != 'e' && json[j] != 'E';
                j++;
            }
            if (!whole) {
                snprintf(what, whatlen, "a number that is not a whole one (%.*s)",
                         (int)(j - i < 32 ? j - i : 32), json + i);
                return (long)i;
            }
            i = j - 1;
        }
    }
    return -1;
}

static int apply_doc(pj_config *cfg, const char *json, size_t len, const char *file, char *err,
                     size_t errlen)
{
    cfg_ctx c = {.err = err, .errlen = errlen, .file = file};
    const char *doc = file ? file : "config";
    if (err && errlen)
        err[0] = '\0';
    if (json == NULL)
        len = 0;

    size_t ws = 0;
    while (ws < len &&
           (json[ws] == ' ' || json[ws] == '\t' || json[ws] == '\n' || json[ws] == '\r'))
        ws++;
    if (ws == len) {
        if (err && errlen)
            snprintf(err, errlen, "%s: expected a JSON object, got an empty document", doc);
        return -EINVAL;
    }

    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (root != NULL) {
        /* cJSON stops after the first value; anything but whitespace after it
         * is an error too. */
        size_t off = (size_t)(end - json);
        while (off < len &&
               (json[off] == ' ' || json[off] == '\t' || json[off] == '\n' || json[off] == '\r'))
            off++;
        if (off < len)
            end = json + off;
        else
            end = NULL;
    }
    if (root == NULL || end != NULL) {
        size_t off = end && end >= json && end <= json + len ? (size_t)(end - json) : 0;
        unsigned line, col;
        line_col(json, off, &line, &col);
        if (err && errlen)
            snprintf(err, errlen, "%s: invalid JSON at line %u, column %u%s", doc, line, col,
                     root ? " (text after the top-level value)" : "");
        cJSON_Delete(root);
        return -EINVAL;
    }
    long nul = pj_json_nul_escape(json, len);
    if (nul >= 0) {
        unsigned line, col;
        line_col(json, (size_t)nul, &line, &col);
        if (err && errlen)
            snprintf(err, errlen, "%s: line %u, column %u: %s is not allowed in strings", doc, line,
                     col, json[nul] == '\0' ? "a NUL byte" : "\\u0000");
        cJSON_Delete(root);
        return -EINVAL;
    }
    char what[96];
    long bad = pj_json_strict(json, len, 0, what, sizeof what);
    if (bad >= 0) {
        unsigned line, col;
        line_col(json, (size_t)bad, &line, &col);
        if (err && errlen)
            snprintf(err, errlen, "%s: line %u, column %u: %s", doc, line, col, what);
        cJSON_Delete(root);
        return -EINVAL;
    }
    if (!cJSON_IsObject(root)) {
        char got[128];
        describe(root, got, sizeof got);
        if (err && errlen)
            snprintf(err, errlen, "%s: expected a JSON object at the top level, got %s", doc, got);
        cJSON_Delete(root);
        return -EINVAL;
    }

    pj_config *tmp = malloc(sizeof *tmp);
    if (tmp == NULL) {
        cJSON_Delete(root);
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", doc);
        return -ENOMEM;
    }
    memcpy(tmp, cfg, sizeof *tmp);
    int rc = apply_object(&c, root, root_fields, tmp, NULL);
    if (rc == 0)
        memcpy(cfg, tmp, sizeof *tmp);
    free(tmp);
    cJSON_Delete(root);
    return rc;
}

int pj_config_defaults(pj_config *cfg)
{
    memset(cfg, 0, sizeof *cfg);
    return apply_doc(cfg, pj_config_default_json, strlen(pj_config_default_json), NULL, NULL, 0);
}

int pj_config_apply_json(pj_config *cfg, const char *json, size_t len, char *err, size_t errlen)
{
    return apply_doc(cfg, json, len, NULL, err, errlen);
}

int pj_config_apply_file(pj_config *cfg, const char *path, char *err, size_t errlen)
{
    char ebuf[128];
    struct stat st;
    const char *failed;
    int fd = pj_open_regular(path, &st, &failed);
    if (fd < 0 && failed) {
        snprintf(err, errlen, "%s: %s: %s", path, failed, strerror_r(-fd, ebuf, sizeof ebuf));
        return fd;
    }
    if (fd < 0) {
        snprintf(err, errlen, "%s: not a regular file (%s): a configuration is read from a file",
                 path, pj_file_kind(st.st_mode));
        return fd;
    }
    size_t cap = 4096, len = 0;
    char *buf = malloc(cap);
    int rc = 0;
    if (buf == NULL) {
        snprintf(err, errlen, "%s: out of memory", path);
        rc = -ENOMEM;
        goto out;
    }
    for (;;) {
        if (len == cap) {
            if (cap > CFG_FILE_MAX) {
                snprintf(err, errlen, "%s: file too large (more than %u bytes)", path,
                         CFG_FILE_MAX);
                rc = -EFBIG;
                goto out;
            }
            char *nb = realloc(buf, cap * 2);
            if (nb == NULL) {
                snprintf(err, errlen, "%s: out of memory", path);
                rc = -ENOMEM;
                goto out;
            }
            buf = nb;
            cap *= 2;
        }
        ssize_t n = read(fd, buf + len, cap - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            int e = errno;
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror_r(e, ebuf, sizeof ebuf));
            rc = -e;
            goto out;
        }
        if (n == 0)
            break;
        len += (size_t)n;
    }
    if (len > CFG_FILE_MAX) {
        snprintf(err, errlen, "%s: file too large (more than %u bytes)", path, CFG_FILE_MAX);
        rc = -EFBIG;
        goto out;
    }
    rc = apply_doc(cfg, buf, len, path, err, errlen);
out:
    free(buf);
    close(fd);
    return rc;
}

/* ---- rendering ---------------------------------------------------------- */

static cJSON *render_object(const field *table, const void *base);

static cJSON *render_value(const field *f, const void *base)
{
    const char *p = (const char *)base + f->off;
    switch (f->kind) {
    case F_SECTION:
        return render_object(f->sub, base);
    case F_STRING:
        return cJSON_CreateString(p);
    case F_UINT:
        return cJSON_CreateNumber(*(const uint32_t *)(const void *)p);
    case F_INT:
        return cJSON_CreateNumber(*(const int32_t *)(const void *)p);
    case F_U64:
        return cJSON_CreateNumber((double)*(const uint64_t *)(const void *)p);
    case F_ENUM: {
        int e = *(const int *)(const void *)p;
        int n = 0;
        while (f->names[n])
            n++;
        /* An out-of-range value (only possible if a caller wrote the struct
         * by hand) renders as null so re-applying it fails loudly. */
        return e >= 0 && e < n ? cJSON_CreateString(f->names[e]) : cJSON_CreateNull();
    }
    case F_MODE: {
        char s[16];
        snprintf(s, sizeof s, "%04o", *(const uint32_t *)(const void *)p);
        return cJSON_CreateString(s);
    }
    case F_LAYERS: {
        const pj_layer_config *layers = (const pj_layer_config *)(const void *)p;
        uint32_t n = *(const uint32_t *)(const void *)((const char *)base + f->count_off);
        cJSON *arr = cJSON_CreateArray();
        for (uint32_t i = 0; arr && i < n && i < f->size; i++) {
            cJSON *o = render_object(f->sub, &layers[i]);
            if (o == NULL || !cJSON_AddItemToArray(arr, o)) {
                cJSON_Delete(o);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    case F_U32LIST: {
        const uint32_t *vals = (const uint32_t *)(const void *)p;
        uint32_t n = *(const uint32_t *)(const void *)((const char *)base + f->count_off);
        cJSON *arr = cJSON_CreateArray();
        for (uint32_t i = 0; arr && i < n && i < f->size; i++) {
            cJSON *x = cJSON_CreateNumber(vals[i]);
            if (x == NULL || !cJSON_AddItemToArray(arr, x)) {
                cJSON_Delete(x);
                cJSON_Delete(arr);
                return NULL;
            }
        }
        return arr;
    }
    }
    return NULL;
}

static cJSON *render_object(const field *table, const void *base)
{
    cJSON *obj = cJSON_CreateObject();
    for (size_t k = 0; obj && table[k].key; k++) {
        cJSON *v = render_value(&table[k], base);
        if (v == NULL || !cJSON_AddItemToObject(obj, table[k].key, v)) {
            cJSON_Delete(v);
            cJSON_Delete(obj);
            return NULL;
        }
    }
    return obj;
}

char *pj_config_to_json(const pj_config *cfg)
{
    cJSON *root = render_object(root_fields, cfg);
    if (root == NULL)
        return NULL;
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    return s;
}

/* ---- reload ------------------------------------------------------------- */

static bool value_equal(const field *f, const void *a, const void *b)
{
    const char *pa = (const char *)a + f->off, *pb = (const char *)b + f->off;
    switch (f->kind) {
    case F_SECTION:
        return true; /* compared key by key by the caller */
    case F_STRING:
        return strcmp(pa, pb) == 0;
    case F_UINT:
    case F_INT:
    case F_ENUM:
    case F_MODE:
        return memcmp(pa, pb, 4) == 0;
    case F_U64:
        return memcmp(pa, pb, 8) == 0;
    case F_LAYERS:
    case F_U32LIST: {
        uint32_t na = *(const uint32_t *)(const void *)((const char *)a + f->count_off);
        uint32_t nb = *(const uint32_t *)(const void *)((const char *)b + f->count_off);
        if (na != nb || na > f->size)
            return na == nb;
        if (f->kind == F_U32LIST)
            return memcmp(pa, pb, na * sizeof(uint32_t)) == 0;
        const pj_layer_config *la = (const void *)pa, *lb = (const void *)pb;
        for (uint32_t i = 0; i < na; i++) {
            for (size_t k = 0; f->sub[k].key; k++)
                if (!value_equal(&f->sub[k], &la[i], &lb[i]))
                    return false;
        }
        return true;
    }
    }
    return false;
}

static int reload_walk(cfg_ctx *c, const field *table, const pj_config *cur, const pj_config *next,
                       bool reloadable)
{
    for (size_t k = 0; table[k].key; k++) {
        const field *f = &table[k];
        bool r = reloadable || f->reload;
        size_t old = path_push_key(c, f->key);
        if (f->kind == F_SECTION) {
            int rc = reload_walk(c, f->sub, cur, next, r);
            if (rc != 0)
                return rc;
        } else if (!r && !value_equal(f, cur, next)) {
            return fail(c, "changed, but only log.level, limits.* and auth.* can change on "
                           "reload; restart projd to apply it");
        }
        path_pop(c, old);
    }
    return 0;
}

int pj_config_check_reload(const pj_config *cur, const pj_config *next, char *err, size_t errlen)
{
    cfg_ctx c = {.err = err, .errlen = errlen};
    if (err && errlen)
        err[0] = '\0';
    return reload_walk(&c, root_fields, cur, next, false);
}

/* ---- lookups ------------------------------------------------------------ */

int pj_config_layer_index(const pj_config *cfg, const char *name)
{
    if (name == NULL)
        return -1;
    for (uint32_t i = 0; i < cfg->model.n_layers && i < PJ_CFG_MAX_LAYERS; i++)
        if (strcmp(cfg->model.layers[i].name, name) == 0)
            return (int)i;
    return -1;
}

const char *pj_backend_name(pj_backend_kind b)
{
    return (unsigned)b < 3 ? backend_names[b] : "unknown";
}

const char *pj_log_level_name(pj_log_level l)
{
    return (unsigned)l < 4 ? level_names[l] : "unknown";
}
