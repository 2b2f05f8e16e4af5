/* test_config.c — the config parser: defaults, error messages, no partial
 * application, merge semantics, rendering round trip, files, reload check. */
#include "config/config.h"

#include <check.h>
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static pj_config *fresh_defaults(void)
{
    pj_config *c = malloc(sizeof *c);
    ck_assert_ptr_nonnull(c);
    memset(c, 0xA5, sizeof *c); /* poison: defaults must overwrite every byte */
    ck_assert_int_eq(pj_config_defaults(c), 0);
    return c;
}

static int apply_str(pj_config *c, const char *json, char *err, size_t errlen)
{
    return pj_config_apply_json(c, json, strlen(json), err, errlen);
}

/* Write text to a fresh temporary file; returns its malloc'd path. */
static char *write_temp(const char *text)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    char *path = malloc(strlen(dir) + 32);
    ck_assert_ptr_nonnull(path);
    sprintf(path, "%s/pjcfg-XXXXXX", dir);
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    size_t len = strlen(text);
    ck_assert_int_eq(write(fd, text, len), (ssize_t)len);
    close(fd);
    return path;
}

/* ---- defaults ----------------------------------------------------------- */

START_TEST(defaults_match_documentation)
{
    pj_config *c = fresh_defaults();
    ck_assert_str_eq(c->socket.url, "");
    ck_assert_uint_eq(c->socket.mode, 0660);
    ck_assert_str_eq(c->socket.group, "");
    ck_assert_int_eq(c->device.backend, PJ_BACKEND_AUTO);
    ck_assert_int_eq(c->device.index, 0);
    ck_assert_str_eq(c->device.uuid, "");
    ck_assert_str_eq(c->model.path, "/var/lib/projd/model.safetensors");
    ck_assert_uint_eq(c->model.load_threads, 0);
    ck_assert_uint_eq(c->model.n_layers, 5);
    static const char *names[] = {"qkv_gate", "o", "pooler", "unpooler", "router"};
    for (int i = 0; i < 5; i++) {
        char tensor[64];
        snprintf(tensor, sizeof tensor, "%s.weight", names[i]);
        ck_assert_str_eq(c->model.layers[i].name, names[i]);
        ck_assert_str_eq(c->model.layers[i].tensor, tensor);
        ck_assert_int_eq(c->model.layers[i].format, i == 4 ? PJ_FPREF_SPLIT : PJ_FPREF_AUTO);
        ck_assert_uint_eq(c->model.layers[i].max_n, 0);
        ck_assert_str_eq(c->model.layers[i].engine, "");
        ck_assert_int_eq(pj_config_layer_index(c, names[i]), i);
    }
    ck_assert_int_eq(pj_config_layer_index(c, "nope"), -1);
    ck_assert_int_eq(pj_config_layer_index(c, NULL), -1);
    static const uint32_t m[] = {1, 8, 16, 32, 128, 256};
    ck_assert_uint_eq(c->shapes.n_m, 6);
    for (int i = 0; i < 6; i++)
        ck_assert_uint_eq(c->shapes.m[i], m[i]);
    ck_assert_uint_eq(c->shapes.max_m, 256);
    ck_assert_uint_eq(c->limits.max_message_bytes, 65536);
    ck_assert_uint_eq(c->limits.max_buffers_per_conn, 64);
    ck_assert_uint_eq(c->limits.max_ops_per_request, 64);
    ck_assert_uint_eq(c->limits.max_connections, 64);
    ck_assert_uint_eq(c->limits.max_inflight_per_conn, 32);
    ck_assert_uint_eq(c->limits.hello_timeout_ms, 10000);
    ck_assert_uint_eq(c->limits.max_buffer_bytes, 16ull << 30);
    ck_assert_uint_eq(c->limits.max_conn_buffer_bytes, 64ull << 30);
    ck_assert_uint_eq(c->limits.max_total_buffer_bytes, 256ull << 30);
    ck_assert_uint_eq(c->auth.n_uids, 0);
    ck_assert_uint_eq(c->auth.n_gids, 0);
    ck_assert_int_eq(c->log.level, PJ_LOG_INFO);
    ck_assert_str_eq(c->tuning.table, "");
    ck_assert_uint_eq(c->cpu.threads, 0);

    /* Defaults are deterministic to the byte (unused slots are zeroed). */
    pj_config *d = fresh_defaults();
    ck_assert_int_eq(memcmp(c, d, sizeof *c), 0);
    free(c);
    free(d);
}
END_TEST

START_TEST(names)
{
    ck_assert_str_eq(pj_backend_name(PJ_BACKEND_AUTO), "auto");
    ck_assert_str_eq(pj_backend_name(PJ_BACKEND_CPU), "cpu");
    ck_assert_str_eq(pj_backend_name(PJ_BACKEND_CUDA), "cuda");
    ck_assert_str_eq(pj_backend_name((pj_backend_kind)7), "unknown");
    ck_assert_str_eq(pj_log_level_name(PJ_LOG_ERROR), "error");
    ck_assert_str_eq(pj_log_level_name(PJ_LOG_WARN), "warn");
    ck_assert_str_eq(pj_log_level_name(PJ_LOG_INFO), "info");
    ck_assert_str_eq(pj_log_level_name(PJ_LOG_DEBUG), "debug");
    ck_assert_str_eq(pj_log_level_name((pj_log_level)-1), "unknown");
}
END_TEST

/* ---- bad configs -------------------------------------------------------- */

typedef struct bad_case {
    const char *json;
    const char *path; /* must appear in the message */
    const char *msg;  /* the exact message */
} bad_case;

static const bad_case bad_cases[] = {
    /* 1: wrong type inside a layer (the documented example) */
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"a.w\"},{\"name\":\"b\",\"tensor\":\"b."
     "w\"},"
     "{\"name\":\"c\",\"tensor\":\"c.w\",\"max_n\":\"abc\"}]}}",
     "model.layers[2].max_n",
     "model.layers[2].max_n: expected an integer in 0..16777216, got \"abc\""},
    /* 2: unknown top-level key */
    {"{\"sockets\":{}}", "sockets",
     "sockets: unknown key; expected one of: socket, device, model, shapes, limits, auth, log, "
     "tuning, ring, cpu"},
    /* 3: unknown nested key */
    {"{\"limits\":{\"max_conns\":4}}", "limits.max_conns",
     "limits.max_conns: unknown key; expected one of: max_message_bytes, max_buffers_per_conn, "
     "max_ops_per_request, max_connections, max_connections_per_uid, max_inflight_per_conn, "
     "hello_timeout_ms, max_buffer_bytes, max_conn_buffer_bytes, max_total_buffer_bytes"},
    /* 4: unknown key inside a layer */
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"colour\":1}]}}",
     "model.layers[0].colour",
     "model.layers[0].colour: unknown key; expected one of: name, tensor, format, max_n, "
     "graph_rows, engine, tuned_as"},
    /* 5: fraction where an integer is due */
    {"{\"limits\":{\"max_connections\":1.5}}", "limits.max_connections",
     "limits.max_connections: expected an integer in 1..4096, got 1.5"},
    /* 6: boolean where an integer is due */
    {"{\"cpu\":{\"threads\":true}}", "cpu.threads",
     "cpu.threads: expected an integer in 0..1024, got true"},
    /* 7: negative for an unsigned key */
    {"{\"auth\":{\"allow_uids\":[1000,-1]}}", "auth.allow_uids[1]",
     "auth.allow_uids[1]: expected an integer in 0..4294967294, got -1"},
    /* 8: huge number */
    {"{\"limits\":{\"max_message_bytes\":1e100}}", "limits.max_message_bytes",
     "limits.max_message_bytes: expected an integer in 1024..67108864, got 1e+100"},
    /* 9: below a range */
    {"{\"limits\":{\"max_message_bytes\":1023}}", "limits.max_message_bytes",
     "limits.max_message_bytes: expected an integer in 1024..67108864, got 1023"},
    /* 9b: above a range, said as written (was "1e+08") */
    {"{\"limits\":{\"max_message_bytes\":100000000}}", "limits.max_message_bytes",
     "limits.max_message_bytes: expected an integer in 1024..67108864, got 100000000"},
    /* 10: number given as a string */
    {"{\"shapes\":{\"max_m\":\"128\"}}", "shapes.max_m",
     "shapes.max_m: expected an integer in 1..4096, got \"128\""},
    /* 11: bad enum */
    {"{\"log\":{\"level\":\"verbose\"}}", "log.level",
     "log.level: expected one of \"error\", \"warn\", \"info\", \"debug\", got \"verbose\""},
    {"{\"device\":{\"backend\":\"rocm\"}}", "device.backend",
     "device.backend: expected one of \"auto\", \"cpu\", \"cuda\", got \"rocm\""},
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"format\":\"fp8\"}]}}",
     "model.layers[0].format",
     "model.layers[0].format: expected one of \"auto\", \"bf16\", \"z12\", \"split\", got "
     "\"fp8\""},
    /* 12: socket mode: not octal, too large, fraction */
    {"{\"socket\":{\"mode\":\"0690\"}}", "socket.mode",
     "socket.mode: expected an octal string \"0000\"..\"0777\" or an integer 0..511, got "
     "\"0690\""},
    {"{\"socket\":{\"mode\":512}}", "socket.mode",
     "socket.mode: expected an octal string \"0000\"..\"0777\" or an integer 0..511, got 512"},
    {"{\"socket\":{\"mode\":\"1777\"}}", "socket.mode",
     "socket.mode: expected an octal string \"0000\"..\"0777\" or an integer 0..511, got "
     "\"1777\""},
    /* 13: section of the wrong type */
    {"{\"limits\":[]}", "limits", "limits: expected an object, got an empty array"},
    /* 14: null */
    {"{\"tuning\":{\"table\":null}}", "tuning.table",
     "tuning.table: expected a string of at most 511 bytes, got null"},
    /* 15: string too long for its field (no truncation) */
    {"{\"device\":{\"uuid\":\"GPU-0123456789abcdef0123456789abcdef0123456789abcdef0123456789ab"
     "\"}}",
     "device.uuid",
     "device.uuid: expected \"\" or a device UUID (\"GPU-\" or \"MIG-\" then hex digits and "
     "dashes, at most 63 characters), got a string of 64 bytes"},
    /* 16: layer name with a bad character, and a 64-byte one */
    {"{\"model\":{\"layers\":[{\"name\":\"q k\",\"tensor\":\"t\"}]}}", "model.layers[0].name",
     "model.layers[0].name: expected a name of 1..63 characters from [A-Za-z0-9_.-], got \"q "
     "k\""},
    {"{\"model\":{\"layers\":[{\"name\":\"\",\"tensor\":\"t\"}]}}", "model.layers[0].name",
     "model.layers[0].name: expected a name of 1..63 characters from [A-Za-z0-9_.-], got \"\""},
    /* 17: duplicate layer names */
    {"{\"model\":{\"layers\":[{\"name\":\"o\",\"tensor\":\"a\"},{\"name\":\"p\",\"tensor\":\"b\"},"
     "{\"name\":\"o\",\"tensor\":\"c\"}]}}",
     "model.layers[2].name",
     "model.layers[2].name: expected a name no other layer uses (also model.layers[0].name), got "
     "\"o\""},
    /* 18: a required layer key missing */
    {"{\"model\":{\"layers\":[{\"name\":\"a\"}]}}", "model.layers[0].tensor",
     "model.layers[0].tensor: expected a non-empty string of at most 511 bytes, got nothing (the "
     "key is required)"},
    /* 19: layer list empty, layer not an object */
    {"{\"model\":{\"layers\":[]}}", "model.layers",
     "model.layers: expected an array of 1..1024 layer objects, got an empty array"},
    {"{\"model\":{\"layers\":[\"o\"]}}", "model.layers[0]",
     "model.layers[0]: expected a layer object, got \"o\""},
    /* 20: shapes not sorted / repeated / over max_m / max_m under the list */
    {"{\"shapes\":{\"m\":[1,16,8]}}", "shapes.m[2]",
     "shapes.m[2]: expected an integer greater than 16 (sorted ascending, no repeats), got 8"},
    {"{\"shapes\":{\"m\":[1,8,8]}}", "shapes.m[2]",
     "shapes.m[2]: expected an integer greater than 8 (sorted ascending, no repeats), got 8"},
    {"{\"shapes\":{\"m\":[1,8,512]}}", "shapes.m[2]",
     "shapes.m[2]: expected an integer in 1..256 (at most shapes.max_m), got 512"},
    {"{\"shapes\":{\"max_m\":128}}", "shapes.max_m",
     "shapes.max_m: expected an integer in 256..4096 (at least the largest of shapes.m), got 128"},
    {"{\"shapes\":{\"m\":[0,8]}}", "shapes.m[0]",
     "shapes.m[0]: expected an integer in 1..4096, got 0"},
    {"{\"shapes\":{\"m\":[]}}", "shapes.m",
     "shapes.m: expected an array of 1..32 integers in 1..4096, got an empty array"},
    /* 21: repeated id */
    {"{\"auth\":{\"allow_gids\":[5,6,5]}}", "auth.allow_gids[2]",
     "auth.allow_gids[2]: expected a value not listed before (also at [0]), got 5"},
    /* 22: a key given twice */
    {"{\"log\":{\"level\":\"info\",\"level\":\"debug\"}}", "log.level",
     "log.level: key given twice; expected each key at most once per object"},
    /* 23: socket url that is not ipc:// */
    {"{\"socket\":{\"url\":\"tcp://127.0.0.1:5555\"}}", "socket.url",
     "socket.url: expected \"\", \"ipc://\" followed by an absolute socket path of 1..107 "
     "bytes, or an absolute path (taken as its ipc:// URL), got \"tcp://127.0.0.1:5555\""},
    /* 23b: a socket path one byte too long, said as the path's length
     * (was the URL's, 114) */
    {"{\"socket\":{\"url\":\"ipc:///"
     "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
     "aaaaaaaaaaaaaa\"}}",
     "socket.url",
     "socket.url: expected \"\", \"ipc://\" followed by an absolute socket path of 1..107 "
     "bytes, or an absolute path (taken as its ipc:// URL), got a path of 108 bytes"},
    /* 24: a valid key followed by a bad one: nothing of the first may stick */
    {"{\"log\":{\"level\":\"debug\"},\"limits\":{\"max_connections\":64,\"max_ops_per_request\":0}"
     "}",
     "limits.max_ops_per_request",
     "limits.max_ops_per_request: expected an integer in 1..1024, got 0"},
    /* 25: odd bytes in an unknown key are escaped, the message stays one line */
    {"{\"cpu\":{\"a\\nb\":1}}", "cpu.\"a\\x0ab\"",
     "cpu.\"a\\x0ab\": unknown key; expected one of: threads, min_op_us"},
    /* 25b: a forced engine must be one: a typo would be ignored by the backend */
    {"{\"model\":{\"layers\":[{\"name\":\"o\",\"tensor\":\"o.w\",\"engine\":\"cublass\"}]}}",
     "model.layers[0].engine",
     "model.layers[0].engine: expected \"\" or an engine: gemv, gemvz, splitk, router, cublas, got "
     "\"cublass\""},
    /* 25c: tuned_as is a layer name as the table writes them */
    {"{\"model\":{\"layers\":[{\"name\":\"o\",\"tensor\":\"o.w\",\"tuned_as\":\"qkv gate\"}]}}",
     "model.layers[0].tuned_as",
     "model.layers[0].tuned_as: expected \"\" or a name of 1..63 characters from [A-Za-z0-9_.-], "
     "got "
     "\"qkv gate\""},
    /* 26: document-level errors */
    {"{\n  \"log\": {\"level\": \"info\",}\n}", "config",
     /* cJSON points just past a token it could not start a key with */
     "config: invalid JSON at line 2, column 28"},
    {"{\"log\":{}} {}", "config",
     "config: invalid JSON at line 1, column 12 (text after the top-level value)"},
    {"[1, 2]", "config",
     "config: expected a JSON object at the top level, got an array of 2 "
     "elements"},
    {"  \n ", "config", "config: expected a JSON object, got an empty document"},
    {"{\"tuning\":{\"table\":\"a\\u0000b\"}}", "config",
     "config: line 1, column 22: \\u0000 is not allowed in strings"},
    /* cJSON skips any byte below 0x21 as white space, and copies control
     * bytes into strings; JSON allows neither. */
    {"{\"log\":{\"level\":\"info\"}\x01}", "config",
     "config: line 1, column 24: a control byte (0x01) where only white space may be"},
    {"{\"tuning\":{\"table\":\"a\tb\"}}", "config",
     "config: line 1, column 22: an unescaped control byte (0x09) in a string"},
    /* graph_rows: ascending, each row count at least 1, at most four */
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"graph_rows\":[512,256]}]}}",
     "model.layers[0].graph_rows[1]",
     "model.layers[0].graph_rows[1]: expected an integer greater than 512 (sorted ascending, no "
     "repeats), got 256"},
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"graph_rows\":[0]}]}}",
     "model.layers[0].graph_rows[0]",
     "model.layers[0].graph_rows[0]: expected an integer in 1..16777216, got 0"},
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"graph_rows\":[1,2,3,4,5]}]}}",
     "model.layers[0].graph_rows",
     "model.layers[0].graph_rows: expected an array of 0..4 integers in 1..16777216, got an "
     "array of 5 elements"},
    {"{\"model\":{\"layers\":[{\"name\":\"a\",\"tensor\":\"t\",\"graph_rows\":1024}]}}",
     "model.layers[0].graph_rows",
     "model.layers[0].graph_rows: expected an array of 0..4 integers in 1..16777216, got 1024"},
};

START_TEST(bad_config_exact_message_and_untouched)
{
    const bad_case *bc = &bad_cases[_i];
    pj_config *c = fresh_defaults();
    /* Start from a non-default state so "untouched" is not just "defaults". */
    char err[512];
    ck_assert_int_eq(
        apply_str(c, "{\"log\":{\"level\":\"warn\"},\"cpu\":{\"threads\":3}}", err, sizeof err), 0);
    pj_config *snap = malloc(sizeof *snap);
    ck_assert_ptr_nonnull(snap);
    memcpy(snap, c, sizeof *c);

    memset(err, 'X', sizeof err);
    int rc = apply_str(c, bc->json, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "case %d: rc %d for %s", _i, rc, bc->json);
    ck_assert_msg(strcmp(err, bc->msg) == 0, "case %d:\n got  [%s]\n want [%s]", _i, err, bc->msg);
    ck_assert_ptr_nonnull(strstr(err, bc->path));
    ck_assert_ptr_null(strchr(err, '\n'));
    ck_assert_msg(memcmp(c, snap, sizeof *c) == 0, "case %d changed the config", _i);
    free(snap);
    free(c);
}
END_TEST

START_TEST(truncated_error_buffer)
{
    pj_config *c = fresh_defaults();
    char err[16];
    memset(err, 'X', sizeof err);
    ck_assert_int_eq(apply_str(c, "{\"log\":{\"level\":1}}", err, 8), -EINVAL);
    ck_assert_uint_eq(strlen(err), 7); /* NUL-terminated inside errlen */
    ck_assert_int_eq(err[8], 'X');
    /* No error buffer at all is allowed. */
    ck_assert_int_eq(apply_str(c, "{\"log\":{\"level\":1}}", NULL, 0), -EINVAL);
    ck_assert_int_eq(pj_config_apply_json(c, NULL, 0, NULL, 0), -EINVAL);
    free(c);
}
END_TEST

/* Not NUL-terminated input: the parser must stay inside len. */
START_TEST(length_bounded_input)
{
    pj_config *c = fresh_defaults();
    char err[256];
    const char text[] = "{\"cpu\":{\"threads\":7}}garbage";
    ck_assert_int_eq(pj_config_apply_json(c, text, 21, err, sizeof err), 0);
    ck_assert_uint_eq(c->cpu.threads, 7);
    char *exact = malloc(21); /* exactly the bytes, no terminator (ASan checks) */
    memcpy(exact, "{\"cpu\":{\"threads\":9}}", 21);
    ck_assert_int_eq(pj_config_apply_json(c, exact, 21, err, sizeof err), 0);
    ck_assert_uint_eq(c->cpu.threads, 9);
    ck_assert_int_eq(pj_config_apply_json(c, exact, 20, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "config: invalid JSON at line 1"));
    free(exact);
    free(c);
}
END_TEST

/* A raw 0 byte inside a string is invalid JSON that cJSON copies, cutting
 * the string there: a tensor "o.weight<NUL>x" read as "o.weight". It is
 * refused like \u0000, naming where, and changes nothing. */
START_TEST(nul_byte_in_string)
{
    pj_config *c = fresh_defaults();
    pj_config *snap = malloc(sizeof *snap);
    ck_assert_ptr_nonnull(snap);
    memcpy(snap, c, sizeof *c);
    char err[256];
    const char text[] = "{\"model\":{\"layers\":[\n{\"name\":\"a\",\"tensor\":\"o.weight\0x\"}]}}";
    ck_assert_int_eq(pj_config_apply_json(c, text, sizeof text - 1, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config: line 2, column 31: a NUL byte is not allowed in strings");
    ck_assert_msg(memcmp(c, snap, sizeof *c) == 0, "a refused document changed the config");
    /* The same byte in a key. */
    const char key[] = "{\"cpu\":{\"threads\0x\":2}}";
    ck_assert_int_eq(pj_config_apply_json(c, key, sizeof key - 1, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "config: line 1, column 17: a NUL byte is not allowed in strings");
    ck_assert_msg(memcmp(c, snap, sizeof *c) == 0, "a refused document changed the config");
    free(snap);
    free(c);
}
END_TEST

/* ---- good overrides ----------------------------------------------------- */

START_TEST(objects_merge_key_by_key)
{
    pj_config *c = fresh_defaults();
    char err[512];
    int rc = apply_str(c,
                       "{\"socket\":{\"mode\":\"0600\"},\"limits\":{\"max_connections\":8},"
                       "\"device\":{\"backend\":\"cpu\"}}",
                       err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(c->socket.mode, 0600);
    ck_assert_str_eq(c->socket.url, "");
    ck_assert_uint_eq(c->limits.max_connections, 8);
    ck_assert_uint_eq(c->limits.max_message_bytes, 65536);
    ck_assert_uint_eq(c->limits.max_inflight_per_conn, 32);
    ck_assert_uint_eq(c->limits.hello_timeout_ms, 10000);
    ck_assert_uint_eq(c->limits.max_buffer_bytes, 16ull << 30);
    ck_assert_uint_eq(c->limits.max_conn_buffer_bytes, 64ull << 30);
    ck_assert_uint_eq(c->limits.max_total_buffer_bytes, 256ull << 30);
    ck_assert_int_eq(c->device.backend, PJ_BACKEND_CPU);
    ck_assert_uint_eq(c->model.n_layers, 5);

    /* An integer mode is the numeric value (JSON has no octal). */
    ck_assert_int_eq(apply_str(c, "{\"socket\":{\"mode\":416}}", err, sizeof err), 0);
    ck_assert_uint_eq(c->socket.mode, 0640);
    ck_assert_int_eq(apply_str(c, "{\"socket\":{\"mode\":\"7\"}}", err, sizeof err), 0);
    ck_assert_uint_eq(c->socket.mode, 07);
    /* An empty object changes nothing. */
    pj_config *snap = malloc(sizeof *snap);
    memcpy(snap, c, sizeof *c);
    ck_assert_int_eq(apply_str(c, "{}", err, sizeof err), 0);
    ck_assert_int_eq(apply_str(c, "{\"limits\":{}}", err, sizeof err), 0);
    ck_assert_int_eq(memcmp(c, snap, sizeof *c), 0);
    free(snap);
    free(c);
}
END_TEST

START_TEST(arrays_replace_whole)
{
    pj_config *c = fresh_defaults();
    char err[512];
    int rc =
        apply_str(c,
                  "{\"model\":{\"layers\":[{\"name\":\"lm.head-2\",\"tensor\":\"lm_head.weight\","
                  "\"format\":\"z12\",\"max_n\":1024,\"graph_rows\":[16,512],"
                  "\"engine\":\"gemvz\",\"tuned_as\":\"o\"}]},"
                  "\"shapes\":{\"m\":[2,4],\"max_m\":64},"
                  "\"auth\":{\"allow_uids\":[1000,0,4294967294],\"allow_gids\":[27]}}",
                  err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_uint_eq(c->model.n_layers, 1);
    ck_assert_str_eq(c->model.layers[0].name, "lm.head-2");
    ck_assert_str_eq(c->model.layers[0].tensor, "lm_head.weight");
    ck_assert_int_eq(c->model.layers[0].format, PJ_FPREF_Z12);
    ck_assert_uint_eq(c->model.layers[0].max_n, 1024);
    ck_assert_uint_eq(c->model.layers[0].n_graph_rows, 2);
    ck_assert_uint_eq(c->model.layers[0].graph_rows[0], 16);
    ck_assert_uint_eq(c->model.layers[0].graph_rows[1], 512);
    ck_assert_str_eq(c->model.layers[0].engine, "gemvz");
    ck_assert_str_eq(c->model.layers[0].tuned_as, "o");
    /* Slots past the new end are cleared, not left over from the defaults. */
    ck_assert_str_eq(c->model.layers[1].name, "");
    ck_assert_int_eq(pj_config_layer_index(c, "o"), -1);
    ck_assert_uint_eq(c->shapes.n_m, 2);
    ck_assert_uint_eq(c->shapes.m[0], 2);
    ck_assert_uint_eq(c->shapes.m[1], 4);
    ck_assert_uint_eq(c->shapes.m[2], 0);
    ck_assert_uint_eq(c->shapes.max_m, 64);
    ck_assert_uint_eq(c->auth.n_uids, 3);
    ck_assert_uint_eq(c->auth.uids[2], 4294967294u);
    ck_assert_uint_eq(c->auth.n_gids, 1);
    ck_assert_uint_eq(c->auth.gids[0], 27);

    /* Layers given a second time start from the layer defaults again. */
    rc = apply_str(c, "{\"model\":{\"layers\":[{\"name\":\"x\",\"tensor\":\"y\"}]}}", err,
                   sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_int_eq(c->model.layers[0].format, PJ_FPREF_AUTO);
    ck_assert_uint_eq(c->model.layers[0].max_n, 0);
    ck_assert_uint_eq(c->model.layers[0].n_graph_rows, 0);
    ck_assert_uint_eq(c->model.layers[0].graph_rows[0], 0);
    ck_assert_str_eq(c->model.layers[0].engine, "");
    ck_assert_str_eq(c->model.layers[0].tuned_as, "");
    /* An empty id list clears it. */
    ck_assert_int_eq(apply_str(c, "{\"auth\":{\"allow_uids\":[]}}", err, sizeof err), 0);
    ck_assert_uint_eq(c->auth.n_uids, 0);
    ck_assert_uint_eq(c->auth.uids[0], 0);
    free(c);
}
END_TEST

START_TEST(limits_at_their_bounds)
{
    pj_config *c = fresh_defaults();
    char err[512];
    /* PJ_CFG_MAX_LAYERS (1024: a whole model's projections) is the
     * maximum, one more is refused. */
    size_t bcap = 64 * 1024;
    char *buf = malloc(bcap);
    ck_assert_ptr_nonnull(buf);
    size_t at = (size_t)snprintf(buf, bcap, "{\"model\":{\"layers\":[");
    for (int i = 0; i < PJ_CFG_MAX_LAYERS + 1; i++)
        at += (size_t)snprintf(buf + at, bcap - at, "%s{\"name\":\"l%d\",\"tensor\":\"t\"}",
                               i ? "," : "", i);
    ck_assert_uint_lt(at + 4, bcap);
    snprintf(buf + at, bcap - at, "]}}");
    ck_assert_int_eq(apply_str(c, buf, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "model.layers: expected an array of 1..1024 layer objects, got an array "
                          "of 1025 elements");
    char *cut = strstr(buf, ",{\"name\":\"l1024\"");
    ck_assert_ptr_nonnull(cut);
    strcpy(cut, "]}}");
    ck_assert_msg(apply_str(c, buf, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(c->model.n_layers, 1024);
    ck_assert_int_eq(pj_config_layer_index(c, "l1023"), 1023);
    ck_assert_str_eq(c->model.layers[1023].name, "l1023");

    /* A 63-byte name fits, 64 does not. */
    char name[80];
    memset(name, 'n', 64);
    name[63] = '\0';
    snprintf(buf, bcap, "{\"model\":{\"layers\":[{\"name\":\"%s\",\"tensor\":\"t\"}]}}", name);
    ck_assert_msg(apply_str(c, buf, err, sizeof err) == 0, "%s", err);
    ck_assert_str_eq(c->model.layers[0].name, name);
    name[63] = 'n';
    name[64] = '\0';
    snprintf(buf, bcap, "{\"model\":{\"layers\":[{\"name\":\"%s\",\"tensor\":\"t\"}]}}", name);
    ck_assert_int_eq(apply_str(c, buf, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "model.layers[0].name: expected a name of 1..63"));

    ck_assert_int_eq(apply_str(c,
                               "{\"shapes\":{\"m\":[4096],\"max_m\":4096},\"limits\":{"
                               "\"max_message_bytes\":67108864},\"device\":{\"index\":255},"
                               "\"socket\":{\"mode\":\"0777\"}}",
                               err, sizeof err),
                     0);
    ck_assert_int_eq(apply_str(c, "{\"shapes\":{\"max_m\":4097}}", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "shapes.max_m: expected an integer in 1..4096, got 4097");
    ck_assert_int_eq(apply_str(c, "{\"limits\":{\"max_message_bytes\":67108865}}", err, sizeof err),
                     -EINVAL);
    ck_assert_int_eq(apply_str(c, "{\"device\":{\"index\":256}}", err, sizeof err), -EINVAL);
    /* model.load_threads: 0 (auto) .. 64. */
    ck_assert_msg(apply_str(c, "{\"model\":{\"load_threads\":64}}", err, sizeof err) == 0, "%s",
                  err);
    ck_assert_uint_eq(c->model.load_threads, 64);
    ck_assert_int_eq(apply_str(c, "{\"model\":{\"load_threads\":65}}", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "model.load_threads: expected an integer in 0..64, got 65");
    ck_assert_int_eq(apply_str(c, "{\"model\":{\"load_threads\":-1}}", err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "model.load_threads: expected an integer in 0..64, got -1");
    ck_assert_int_eq(apply_str(c, "{\"model\":{\"load_threads\":\"4\"}}", err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "model.load_threads: expected an integer in 0..64, got \"4\"");
    ck_assert_uint_eq(c->model.load_threads, 64);
    ck_assert_msg(apply_str(c, "{\"model\":{\"load_threads\":0}}", err, sizeof err) == 0, "%s",
                  err);
    ck_assert_int_eq(apply_str(c, "{\"auth\":{\"allow_uids\":[4294967295]}}", err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "auth.allow_uids[0]: expected an integer in 0..4294967294, got "
                          "4294967295");
    /* The byte limits: 64-bit, one page .. 1 PiB. */
    ck_assert_msg(apply_str(c,
                            "{\"limits\":{\"max_buffer_bytes\":4096,\"max_conn_buffer_bytes\":"
                            "1125899906842624,\"max_total_buffer_bytes\":8589934592}}",
                            err, sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(c->limits.max_buffer_bytes, 4096);
    ck_assert_uint_eq(c->limits.max_conn_buffer_bytes, 1ull << 50);
    ck_assert_uint_eq(c->limits.max_total_buffer_bytes, 8ull << 30);
    ck_assert_int_eq(apply_str(c, "{\"limits\":{\"max_buffer_bytes\":4095}}", err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "limits.max_buffer_bytes: expected an integer in 4096..1125899906842624, "
                          "got 4095");
    ck_assert_int_eq(
        apply_str(c, "{\"limits\":{\"max_total_buffer_bytes\":1125899906842625}}", err, sizeof err),
        -EINVAL);
    ck_assert_uint_eq(c->limits.max_total_buffer_bytes, 8ull << 30);
    free(buf);
    free(c);
}
END_TEST

/* ---- round trip --------------------------------------------------------- */

static void assert_round_trip(const pj_config *c)
{
    char *text = pj_config_to_json(c);
    ck_assert_ptr_nonnull(text);
    pj_config *d = fresh_defaults();
    char err[512];
    int rc = apply_str(d, text, err, sizeof err);
    ck_assert_msg(rc == 0, "%s\n%s", err, text);
    ck_assert_msg(memcmp(c, d, sizeof *c) == 0, "round trip differs:\n%s", text);
    /* Rendering is stable. */
    char *again = pj_config_to_json(d);
    ck_assert_str_eq(text, again);
    free(again);
    free(text);
    free(d);
}

START_TEST(round_trip_defaults)
{
    pj_config *c = fresh_defaults();
    assert_round_trip(c);
    free(c);
}
END_TEST

START_TEST(round_trip_everything_changed)
{
    pj_config *c = fresh_defaults();
    char err[512];
    int rc = apply_str(
        c,
        "{\"socket\":{\"url\":\"ipc:///tmp/pj \\\"q\\\"\\\\.sock\",\"mode\":\"0600\","
        "\"group\":\"projd\"},"
        "\"device\":{\"backend\":\"cuda\",\"index\":3,\"uuid\":\"GPU-5fd1a2b3-0000-ffff\"},"
        "\"model\":{\"path\":\"/m/\\u00e9t\\u00e9\\ttab.safetensors\",\"load_threads\":3,"
        "\"layers\":["
        "{\"name\":\"a\",\"tensor\":\"x.w\",\"format\":\"bf16\",\"max_n\":16777216},"
        "{\"name\":\"b\",\"tensor\":\"y.w\",\"format\":\"z12\",\"engine\":\"splitk\"},"
        "{\"name\":\"c\",\"tensor\":\"z.w\",\"format\":\"split\",\"max_n\":1}]},"
        "\"shapes\":{\"m\":[1,2,3,4096],\"max_m\":4096},"
        "\"limits\":{\"max_message_bytes\":1024,\"max_buffers_per_conn\":4096,"
        "\"max_ops_per_request\":1,\"max_connections\":2,\"max_inflight_per_conn\":1024,"
        "\"max_buffer_bytes\":4096,\"max_conn_buffer_bytes\":1125899906842624,"
        "\"max_total_buffer_bytes\":123456789},"
        "\"auth\":{\"allow_uids\":[0,4294967294,12],\"allow_gids\":[7]},"
        "\"log\":{\"level\":\"debug\"},\"tuning\":{\"table\":\"/etc/projd/t.json\"},"
        "\"cpu\":{\"threads\":1024}}",
        err, sizeof err);
    ck_assert_msg(rc == 0, "%s", err);
    ck_assert_str_eq(c->socket.url, "ipc:///tmp/pj \"q\"\\.sock");
    ck_assert_str_eq(c->model.path, "/m/\xc3\xa9t\xc3\xa9\ttab.safetensors");
    /* An absolute path is its ipc:// URL (as --socket takes it); a relative
     * one is refused, since it would depend on the working directory. */
    ck_assert_msg(apply_str(c, "{\"socket\":{\"url\":\"/run/x/p.sock\"}}", err, sizeof err) == 0,
                  "%s", err);
    ck_assert_str_eq(c->socket.url, "ipc:///run/x/p.sock");
    ck_assert_int_ne(apply_str(c, "{\"socket\":{\"url\":\"run/p.sock\"}}", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "or an absolute path"), "%s", err);
    /* ... and so is a relative path after ipc:// (nng takes it from the
     * working directory, where the directory check never looked). */
    ck_assert_int_ne(apply_str(c, "{\"socket\":{\"url\":\"ipc://p.sock\"}}", err, sizeof err), 0);
    ck_assert_msg(strstr(err, "an absolute socket path"), "%s", err);
    ck_assert_msg(apply_str(c, "{\"socket\":{\"url\":\"ipc:///tmp/pj \\\"q\\\"\\\\.sock\"}}", err,
                            sizeof err) == 0,
                  "%s", err);
    ck_assert_uint_eq(c->model.load_threads, 3);
    assert_round_trip(c);
    free(c);
}
END_TEST

/* ---- files -------------------------------------------------------------- */

START_TEST(file_errors_name_the_file)
{
    pj_config *c = fresh_defaults();
    pj_config *snap = malloc(sizeof *snap);
    memcpy(snap, c, sizeof *c);
    char err[1024], want[1024];

    ck_assert_int_eq(pj_config_apply_file(c, "/nonexistent/projd.json", err, sizeof err), -ENOENT);
    ck_assert_str_eq(err, "/nonexistent/projd.json: cannot open: No such file or directory");
    /* A FIFO (no writer: the open must not wait for one) is refused for
     * what it is, as is a directory (below). */
    char fifo[] = "/tmp/pjt-cfg-fifo-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(fifo));
    char fifo_path[64];
    snprintf(fifo_path, sizeof fifo_path, "%s/projd.json", fifo);
    ck_assert_int_eq(mkfifo(fifo_path, 0600), 0);
    ck_assert_int_eq(pj_config_apply_file(c, fifo_path, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want,
             "%s: not a regular file (a FIFO): a configuration is read from a file", fifo_path);
    ck_assert_str_eq(err, want);
    unlink(fifo_path);
    rmdir(fifo);

    char *bad = write_temp("{\n  \"limits\": {\n    \"max_connections\": 0\n  }\n}\n");
    ck_assert_int_eq(pj_config_apply_file(c, bad, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: limits.max_connections: expected an integer in 1..4096, got 0",
             bad);
    ck_assert_str_eq(err, want);

    char *broken = write_temp("{\n  \"limits\": {\n    \"max_connections\" 5\n  }\n}\n");
    ck_assert_int_eq(pj_config_apply_file(c, broken, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: invalid JSON at line 3, column 23", broken);
    ck_assert_str_eq(err, want);

    char *empty = write_temp("");
    ck_assert_int_eq(pj_config_apply_file(c, empty, err, sizeof err), -EINVAL);
    snprintf(want, sizeof want, "%s: expected a JSON object, got an empty document", empty);
    ck_assert_str_eq(err, want);

    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    ck_assert_int_eq(pj_config_apply_file(c, dir, err, sizeof err), -EISDIR);
    snprintf(want, sizeof want,
             "%s: not a regular file (a directory): a configuration is read from a file", dir);
    ck_assert_str_eq(err, want);

    ck_assert_int_eq(memcmp(c, snap, sizeof *c), 0);

    char *good = write_temp("{\"log\": {\"level\": \"error\"}, \"shapes\": {\"m\": [1, 2]}}\n");
    ck_assert_msg(pj_config_apply_file(c, good, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(c->log.level, PJ_LOG_ERROR);
    ck_assert_uint_eq(c->shapes.n_m, 2);

    for (char **p = (char *[]){bad, broken, empty, good, NULL}; *p; p++) {
        unlink(*p);
        free(*p);
    }
    free(snap);
    free(c);
}
END_TEST

START_TEST(file_too_large)
{
    pj_config *c = fresh_defaults();
    size_t n = (1u << 20) + 10;
    char *text = malloc(n + 1);
    memset(text, ' ', n);
    text[0] = '{';
    text[n - 1] = '}';
    text[n] = '\0';
    char *path = write_temp(text);
    char err[1024], want[1024];
    ck_assert_int_eq(pj_config_apply_file(c, path, err, sizeof err), -EFBIG);
    snprintf(want, sizeof want, "%s: file too large (more than 1048576 bytes)", path);
    ck_assert_str_eq(err, want);
    unlink(path);
    free(path);
    free(text);
    free(c);
}
END_TEST

/* ---- reload ------------------------------------------------------------- */

START_TEST(reload_check)
{
    pj_config *cur = fresh_defaults();
    pj_config *next = fresh_defaults();
    char err[512];
    ck_assert_int_eq(pj_config_check_reload(cur, next, err, sizeof err), 0);
    ck_assert_int_eq(apply_str(next,
                               "{\"log\":{\"level\":\"debug\"},\"limits\":{\"max_connections\":2,"
                               "\"max_buffer_bytes\":65536},"
                               "\"auth\":{\"allow_uids\":[1000]}}",
                               err, sizeof err),
                     0);
    ck_assert_int_eq(pj_config_check_reload(cur, next, err, sizeof err), 0);

    ck_assert_int_eq(apply_str(next, "{\"cpu\":{\"threads\":2}}", err, sizeof err), 0);
    ck_assert_int_eq(pj_config_check_reload(cur, next, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "cpu.threads: changed, but only log.level, limits.* and auth.* can "
                          "change on reload; restart projd to apply it");

    /* Start-up only: the threads are gone once the model is loaded. */
    pj_config *n3 = fresh_defaults();
    ck_assert_int_eq(apply_str(n3, "{\"model\":{\"load_threads\":1}}", err, sizeof err), 0);
    ck_assert_int_eq(pj_config_check_reload(cur, n3, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "model.load_threads: changed, but only log.level, limits.* and auth.* "
                          "can change on reload; restart projd to apply it");
    free(n3);

    pj_config *n2 = fresh_defaults();
    ck_assert_int_eq(apply_str(n2,
                               "{\"model\":{\"layers\":[{\"name\":\"qkv_gate\",\"tensor\":"
                               "\"qkv_gate.weight\",\"max_n\":5}]}}",
                               err, sizeof err),
                     0);
    ck_assert_int_eq(pj_config_check_reload(cur, n2, err, sizeof err), -EINVAL);
    ck_assert_ptr_nonnull(strstr(err, "model.layers: changed"));
    free(n2);
    free(cur);
    free(next);
}
END_TEST

/* ---- the documentation -------------------------------------------------- */

static char *read_doc(void)
{
    const char *dir = getenv("PJ_SRCDIR") ? getenv("PJ_SRCDIR") : ".";
    char path[4096];
    snprintf(path, sizeof path, "%s/config/CONFIG.md", dir);
    FILE *f = fopen(path, "rb");
    ck_assert_msg(f != NULL, "cannot open %s (run from the repository root or set PJ_SRCDIR)",
                  path);
    char *buf = calloc(1, 1 << 20);
    size_t n = fread(buf, 1, (1 << 20) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Every key the renderer writes is documented as `section.key` (layer keys
 * as `key`), so the schema table and CONFIG.md cannot drift apart. */
static void assert_documented(const char *doc, const cJSON *obj, const char *prefix)
{
    for (const cJSON *m = obj->child; m; m = m->next) {
        char want[256];
        if (strcmp(prefix, "model.layers") == 0)
            snprintf(want, sizeof want, "`%s`", m->string);
        else
            snprintf(want, sizeof want, "`%s%s%s`", prefix, *prefix ? "." : "", m->string);
        if (cJSON_IsObject(m)) {
            char sub[256];
            snprintf(sub, sizeof sub, "%s%s%s", prefix, *prefix ? "." : "", m->string);
            assert_documented(doc, m, sub);
            continue;
        }
        ck_assert_msg(strstr(doc, want) != NULL, "CONFIG.md does not document %s", want);
        if (strcmp(m->string, "layers") == 0 && cJSON_IsArray(m) && m->child)
            assert_documented(doc, m->child, "model.layers");
    }
}

START_TEST(documentation_covers_schema)
{
    char *doc = read_doc();
    pj_config *c = fresh_defaults();
    char *text = pj_config_to_json(c);
    cJSON *root = cJSON_Parse(text);
    ck_assert_ptr_nonnull(root);
    assert_documented(doc, root, "");
    cJSON_Delete(root);
    free(text);

    /* The example in CONFIG.md applies cleanly. */
    char *start = strstr(doc, "```json\n");
    ck_assert_ptr_nonnull(start);
    start += 8;
    char *end = strstr(start, "```");
    ck_assert_ptr_nonnull(end);
    char err[512];
    int rc = pj_config_apply_json(c, start, (size_t)(end - start), err, sizeof err);
    ck_assert_msg(rc == 0, "CONFIG.md example: %s", err);
    ck_assert_int_eq(c->model.n_layers, 3);
    free(c);
    free(doc);
}
END_TEST

static Suite *config_suite(void)
{
    Suite *s = suite_create("config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, defaults_match_documentation);
    tcase_add_test(tc, names);
    tcase_add_loop_test(tc, bad_config_exact_message_and_untouched, 0,
                        (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, truncated_error_buffer);
    tcase_add_test(tc, length_bounded_input);
    tcase_add_test(tc, nul_byte_in_string);
    tcase_add_test(tc, objects_merge_key_by_key);
    tcase_add_test(tc, arrays_replace_whole);
    tcase_add_test(tc, limits_at_their_bounds);
    tcase_add_test(tc, round_trip_defaults);
    tcase_add_test(tc, round_trip_everything_changed);
    tcase_add_test(tc, file_errors_name_the_file);
    tcase_add_test(tc, file_too_large);
    tcase_add_test(tc, reload_check);
    tcase_add_test(tc, documentation_covers_schema);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(config_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
