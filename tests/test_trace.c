/* test_trace.c — projload traces: parsing (good lines, and many bad kinds
 * whose messages must name the line and the field), resolving against a
 * daemon's WELCOME, writing and re-reading, and the generator's
 * determinism and shape rules. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "client/trace.h"

#define REQUIRE(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond))                                                                               \
            ck_abort_msg(__VA_ARGS__);                                                             \
    } while (0)

static int parse_text(pj_trace *t, const char *name, const char *text, char *err, size_t errlen)
{
    pj_trace_init(t, name);
    err[0] = '\0';
    return pj_trace_parse(t, text, strlen(text), err, errlen);
}

/* A WELCOME like the small model's. */
static void small_welcome(pj_welcome *w)
{
    memset(w, 0, sizeof *w);
    w->version = 1;
    w->backend = 1;
    w->max_m = 256;
    w->max_ops_per_request = 8;
    w->max_buffers = 64;
    w->max_message_bytes = 65536;
    static const struct {
        const char *name;
        uint32_t n, k;
    } l[] = {{"qkv_gate", 320, 256},
             {"o", 256, 192},
             {"pooler", 384, 256},
             {"unpooler", 512, 256},
             {"router", 64, 256}};
    w->n_layers = 5;
    for (int i = 0; i < 5; i++) {
        snprintf(w->layers[i].name, sizeof w->layers[i].name, "%s", l[i].name);
        w->layers[i].n = l[i].n;
        w->layers[i].k = l[i].k;
    }
    static const uint32_t shapes[] = {1, 8, 16, 32, 128, 256};
    w->n_shapes = 6;
    memcpy(w->shapes, shapes, sizeof shapes);
}

/* ---- parsing good traces ------------------------------------------------------- */

START_TEST(parse_good)
{
    const char *text = "# a comment\n"
                       "\n"
                       "   \t\n"
                       "  # an indented comment\n"
                       "{\"t_us\": 0, \"client\": 2, \"ops\": [{\"layer\": \"o\", \"m\": 8}]}\n"
                       "{\"ops\":[{\"layer\":\"qkv_gate\",\"m\":1},{\"layer\":\"unpooler\",\"m\":1,"
                       "\"n\":128}]}\r\n"
                       "  {\"client\": 1023, \"t_us\": 1500, \"ops\": [{\"m\": 256, \"layer\": "
                       "\"o\"}]}  ";
    pj_trace t;
    char err[512];
    int rc = parse_text(&t, "good.jsonl", text, err, sizeof err);
    ck_assert_msg(rc == 0, "parse failed: %s", err);
    ck_assert_uint_eq(t.n_reqs, 3);
    ck_assert_uint_eq(t.n_ops, 4);
    ck_assert_uint_eq(t.n_timed, 2);
    ck_assert_uint_eq(t.n_names, 3);

    ck_assert_int_eq(t.reqs[0].t_us, 0);
    ck_assert_uint_eq(t.reqs[0].client, 2);
    ck_assert_uint_eq(t.reqs[0].line, 5);
    ck_assert_uint_eq(t.reqs[0].n_ops, 1);
    ck_assert_str_eq(t.names[t.ops[0].name], "o");
    ck_assert_uint_eq(t.ops[0].m, 8);
    ck_assert_uint_eq(t.ops[0].n_req, 0);
    ck_assert_int_eq(t.ops[0].layer, -1);

    ck_assert_int_eq(t.reqs[1].t_us, -1);
    ck_assert_uint_eq(t.reqs[1].client, 0);
    ck_assert_uint_eq(t.reqs[1].line, 6);
    ck_assert_uint_eq(t.reqs[1].op0, 1);
    ck_assert_uint_eq(t.reqs[1].n_ops, 2);
    ck_assert_str_eq(t.names[t.ops[2].name], "unpooler");
    ck_assert_uint_eq(t.ops[2].n_req, 128);

    ck_assert_int_eq(t.reqs[2].t_us, 1500);
    ck_assert_uint_eq(t.reqs[2].client, 1023);
    ck_assert_uint_eq(t.reqs[2].line, 7);
    ck_assert_uint_eq(t.ops[3].m, 256);
    ck_assert_uint_eq(t.ops[3].name, t.ops[0].name); /* interned */
    pj_trace_free(&t);
    ck_assert_uint_eq(t.n_reqs, 0);
    ck_assert_str_eq(t.file, "good.jsonl");
}
END_TEST

/* ---- parsing bad lines -------------------------------------------------------------- */

typedef struct bad_case {
    const char *line;
    const char *want; /* the message after "bad.jsonl:3: " */
} bad_case;

static const bad_case bad_cases[] = {
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8},{\"layer\":\"o\",\"m\":-3}]}",
     "ops[1].m: expected an integer >= 1, got -3"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":0}]}", "ops[0].m: expected an integer >= 1, got 0"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":2.5}]}", "ops[0].m: expected an integer >= 1, got 2.5"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":\"8\"}]}", "ops[0].m: expected an integer >= 1, got \"8\""},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":null}]}", "ops[0].m: expected an integer >= 1, got null"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":[8]}]}", "ops[0].m: expected an integer >= 1, got an array"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":1e300}]}",
     "ops[0].m: expected an integer <= 1000000, got 1e+300"},
    {"{\"ops\":[{\"layer\":\"o\"}]}", "ops[0].m: missing"},
    {"{\"ops\":[{\"m\":8}]}", "ops[0].layer: missing"},
    {"{\"ops\":[{\"layer\":5,\"m\":8}]}",
     "ops[0].layer: expected a layer name (1..63 characters), got 5"},
    {"{\"ops\":[{\"layer\":\"\",\"m\":8}]}",
     "ops[0].layer: expected a layer name (1..63 characters), got \"\""},
    {"{\"ops\":[{\"layer\":\"0123456789012345678901234567890123456789012345678901234567890123\","
     "\"m\":8}]}",
     "ops[0].layer: expected a layer name (1..63 characters), got "
     "\"012345678901234567890123456789012345..."},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8,\"n\":0}]}", "ops[0].n: expected an integer >= 1, got 0"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8,\"n\":true}]}",
     "ops[0].n: expected an integer >= 1, got true"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8,\"mm\":8}]}",
     "ops[0].mm: unknown key (expected one of layer, m, n)"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8,\"m\":9}]}", "ops[0].m: key given twice"},
    /* A key's control byte reaches the message escaped. */
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8,\"\\u001b[2J\":8}]}",
     "ops[0].\"\\u001b[2J\": unknown key (expected one of layer, m, n)"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8}],\"clinet\":1}",
     "clinet: unknown key (expected one of t_us, client, ops)"},
    {"{\"t_us\":-1,\"ops\":[{\"layer\":\"o\",\"m\":8}]}", "t_us: expected an integer >= 0, got -1"},
    {"{\"t_us\":\"soon\",\"ops\":[{\"layer\":\"o\",\"m\":8}]}",
     "t_us: expected an integer >= 0, got \"soon\""},
    {"{\"client\":1024,\"ops\":[{\"layer\":\"o\",\"m\":8}]}",
     "client: expected an integer <= 1023, got 1024"},
    {"{\"client\":1.5,\"ops\":[{\"layer\":\"o\",\"m\":8}]}",
     "client: expected an integer >= 0, got 1.5"},
    {"{\"t_us\":5}", "ops: missing (every request needs a list of ops)"},
    {"{\"ops\":{\"layer\":\"o\",\"m\":8}}", "ops: expected an array of ops, got an object"},
    {"{\"ops\":[]}", "ops: expected 1..1024 ops, got 0"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8}, 7]}",
     "ops[1]: expected an object {\"layer\": ..., \"m\": ...}, got 7"},
    {"{\"ops\": [", "not valid JSON (column"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":8}]} extra", "unexpected text after the request object "
                                                    "(column 31)"},
    {"[{\"layer\":\"o\",\"m\":8}]", "expected a JSON object per line, got an array"},
    {"42", "expected a JSON object per line, got 42"},
    /* Integers spelled as integers only; cJSON reads 1e2 and 100 alike. */
    {"{\"ops\":[{\"layer\":\"o\",\"m\":1e2}]}",
     "1e2 (column 26): integers must be written as integers"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\":1.0}]}",
     "1.0 (column 26): integers must be written as integers"},
    {"{\"t_us\":1E3,\"ops\":[{\"layer\":\"o\",\"m\":1}]}",
     "1E3 (column 9): integers must be written as integers"},
    /* A leading zero is not JSON (cJSON reads 01 as 1). */
    {"{\"ops\":[{\"layer\":\"o\",\"m\":01}]}",
     "01 (column 26): integers must be written as integers"},
    {"{\"t_us\":0070,\"ops\":[{\"layer\":\"o\",\"m\":1}]}",
     "0070 (column 9): integers must be written as integers"},
    /* A NUL escape would cut the name (or key) short. */
    {"{\"ops\":[{\"layer\":\"o\\u0000x\",\"m\":1}]}", "a string holds \\u0000 (column 20)"},
    {"{\"ops\":[{\"layer\":\"o\",\"m\\u0000\":1}]}", "a string holds \\u0000 (column 24)"},
    /* cJSON skips a control byte as white space; JSON does not. */
    {"{\"ops\":[{\"layer\":\"o\",\x02\"m\":1}]}",
     "a control byte (0x02) where only white space may be (column 22)"},
};

START_TEST(parse_bad)
{
    const bad_case *c = &bad_cases[_i];
    char text[1024], err[512], want[512];
    /* A comment and a good line first, so the bad one is line 3. */
    snprintf(text, sizeof text, "# header\n{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\n%s\n", c->line);
    pj_trace t;
    int rc = parse_text(&t, "bad.jsonl", text, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "case %d: rc %d for %s", _i, rc, c->line);
    snprintf(want, sizeof want, "bad.jsonl:3: %s", c->want);
    ck_assert_msg(strncmp(err, want, strlen(want)) == 0, "case %d:\n got: %s\nwant: %s", _i, err,
                  want);
    ck_assert_msg(strchr(err, '\n') == NULL, "message is not one line: %s", err);
    /* The good line before it was kept. */
    ck_assert_uint_eq(t.n_reqs, 1);
    pj_trace_free(&t);
}
END_TEST

START_TEST(parse_bad_misc)
{
    pj_trace t;
    char err[512];
    ck_assert_int_eq(parse_text(&t, "empty.jsonl", "# only\n\n  # comments\n", err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "empty.jsonl: no requests (every line is blank or a comment)");
    pj_trace_free(&t);

    ck_assert_int_eq(parse_text(&t, "e.jsonl", "", err, sizeof err), -EINVAL);
    pj_trace_free(&t);

    /* A line longer than any request needs is refused before it is
     * parsed (cJSON's tree of it would take ~40 times its bytes). */
    const size_t big = (size_t)2 << 20;
    char *line = malloc(big + 32);
    ck_assert_ptr_nonnull(line);
    strcpy(line, "{\"ops\": [");
    size_t at = strlen(line);
    while (at + 2 < big)
        at += (size_t)sprintf(line + at, "0,");
    strcpy(line + at, "0]}\n");
    ck_assert_int_eq(parse_text(&t, "long.jsonl", line, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "long.jsonl:1: a line of ") && strstr(err, "more than any request"),
                  "%s", err);
    pj_trace_free(&t);
    free(line);

    /* A NUL byte inside a line. */
    const char text[] = "{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\n{\"ops\":\0[]}\n";
    pj_trace_init(&t, "nul.jsonl");
    ck_assert_int_eq(pj_trace_parse(&t, text, sizeof text - 1, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "nul.jsonl:2: line holds a NUL byte");
    pj_trace_free(&t);

    /* Line numbers count blank and comment lines, and CRLF endings. */
    ck_assert_int_eq(parse_text(&t, "n.jsonl",
                                "\r\n#c\r\n{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\r\n\r\n"
                                "{\"ops\":[{\"layer\":\"o\",\"m\":-7}]}\r\n",
                                err, sizeof err),
                     -EINVAL);
    ck_assert_str_eq(err, "n.jsonl:5: ops[0].m: expected an integer >= 1, got -7");
    pj_trace_free(&t);
}
END_TEST

/* More distinct layer names than any daemon serves (PJ_WIRE_MAX_LAYERS_ALL):
 * refused at the 1025th, with the line and the field. */
START_TEST(parse_many_names)
{
    size_t cap = 1100 * 64, len = 0;
    char *text = malloc(cap), err[512];
    ck_assert_ptr_nonnull(text);
    for (int i = 0; i < 1100; i++)
        len +=
            (size_t)snprintf(text + len, cap - len, "{\"ops\":[{\"layer\":\"l%d\",\"m\":1}]}\n", i);
    pj_trace t;
    ck_assert_int_eq(parse_text(&t, "names.jsonl", text, err, sizeof err), -EINVAL);
    ck_assert_msg(strncmp(err,
                          "names.jsonl:1025: ops[0].layer: \"l1024\" would be the trace's "
                          "1025-th distinct layer name",
                          strlen("names.jsonl:1025: ops[0].layer: \"l1024\" would be the trace's "
                                 "1025-th distinct layer name")) == 0,
                  "%s", err);
    ck_assert_uint_eq(t.n_reqs, 1024);
    ck_assert_uint_eq(t.n_names, 1024);
    /* pj_trace_add refuses the 1025th too. */
    const char *names[1] = {"another"};
    uint32_t ms[1] = {1};
    ck_assert_int_eq(pj_trace_add(&t, -1, 0, names, ms, NULL, 1), -EINVAL);
    /* With the index full, every name is still found, as its own. */
    for (int i = 1023; i >= 0; i--) {
        char name[16];
        snprintf(name, sizeof name, "l%d", i);
        names[0] = name;
        ck_assert_int_eq(pj_trace_add(&t, -1, 0, names, ms, NULL, 1), 0);
        ck_assert_uint_eq(t.ops[t.n_ops - 1].name, (uint32_t)i);
        ck_assert_str_eq(t.names[i], name);
    }
    ck_assert_uint_eq(t.n_names, 1024);
    pj_trace_free(&t);
    free(text);
}
END_TEST

/* The reader stops at its size limit with a clear message instead of
 * reading an endless file into memory. */
START_TEST(load_size_limit)
{
    char dir[] = "/tmp/test_trace_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/big.jsonl", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    for (int i = 0; i < 1000; i++)
        fprintf(f, "{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\n");
    fclose(f);
    pj_trace t;
    ck_assert_int_eq(pj_trace_load_limit(&t, path, 1000, err, sizeof err), -EFBIG);
    ck_assert_msg(strstr(err, "big.jsonl: more than 1000 bytes, the most a trace may have"), "%s",
                  err);
    pj_trace_free(&t);
    ck_assert_int_eq(pj_trace_load_limit(&t, path, 1 << 20, err, sizeof err), 0);
    ck_assert_uint_eq(t.n_reqs, 1000);
    pj_trace_free(&t);
    /* An endless file. */
    ck_assert_int_eq(pj_trace_load_limit(&t, "/dev/zero", 3 << 20, err, sizeof err), -EFBIG);
    ck_assert_msg(strstr(err, "/dev/zero: more than 3145728 bytes"), "%s", err);
    pj_trace_free(&t);
    unlink(path);
    rmdir(dir);
}
END_TEST

START_TEST(load_file)
{
    char dir[] = "/tmp/test_trace_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char path[256], err[512];
    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    /* A long file, so the reader's buffer grows more than once. */
    for (int i = 0; i < 20000; i++)
        fprintf(f, "{\"t_us\":%d,\"client\":%d,\"ops\":[{\"layer\":\"qkv_gate\",\"m\":%d}]}\n",
                i * 10, i % 4, 1 + i % 256);
    fprintf(f, "{\"ops\":[{\"layer\":\"o\",\"m\":8},{\"layer\":\"o\",\"m\":-3}]}\n");
    fclose(f);
    pj_trace t;
    ck_assert_int_eq(pj_trace_load(&t, path, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "trace.jsonl:20001: ops[1].m: expected an integer >= 1, got -3");
    ck_assert_uint_eq(t.n_reqs, 20000);
    ck_assert_uint_eq(t.reqs[19999].line, 20000);
    ck_assert_int_eq(t.reqs[19999].t_us, 199990);
    pj_trace_free(&t);

    snprintf(path, sizeof path, "%s/missing.jsonl", dir);
    int rc = pj_trace_load(&t, path, err, sizeof err);
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_msg(strstr(err, "missing.jsonl: cannot open") != NULL, "%s", err);
    pj_trace_free(&t);
    /* A directory opens, then fails its first read: said as what it is. */
    rc = pj_trace_load(&t, dir, err, sizeof err);
    ck_assert_int_eq(rc, -EISDIR);
    ck_assert_msg(strstr(err, ": is a directory, not a trace file") != NULL, "%s", err);
    pj_trace_free(&t);

    snprintf(path, sizeof path, "%s/trace.jsonl", dir);
    unlink(path);
    rmdir(dir);
}
END_TEST

/* ---- resolving against WELCOME ----------------------------------------------------------- */

START_TEST(resolve)
{
    pj_welcome w;
    small_welcome(&w);
    pj_trace t;
    char err[512];
    ck_assert_int_eq(parse_text(&t, "r.jsonl",
                                "{\"ops\":[{\"layer\":\"router\",\"m\":3},{\"layer\":\"unpooler\","
                                "\"m\":256,\"n\":100}]}\n",
                                err, sizeof err),
                     0);
    ck_assert_int_eq(pj_trace_resolve(&t, &w, err, sizeof err), 0);
    ck_assert_int_eq(t.ops[0].layer, 4);
    ck_assert_uint_eq(t.ops[0].n, 64); /* the layer's rows */
    ck_assert_int_eq(t.ops[1].layer, 3);
    ck_assert_uint_eq(t.ops[1].n, 100);
    pj_trace_free(&t);

    static const struct {
        const char *text, *want;
    } bad[] = {
        {"{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\n\n{\"ops\":[{\"layer\":\"o\",\"m\":1},{\"layer\":"
         "\"qkv\",\"m\":1}]}",
         "r.jsonl:3: ops[1].layer: unknown layer \"qkv\" (the daemon serves qkv_gate, o, pooler, "
         "unpooler, router)"},
        /* A name from the file reaches the terminal escaped, not as the
         * escape sequence it holds. */
        {"{\"ops\":[{\"layer\":\"a\\u001b[2Jb\\\"\",\"m\":1}]}",
         "r.jsonl:1: ops[0].layer: unknown layer \"a\\u001b[2Jb\\\"\" (the daemon serves qkv_gate, "
         "o, pooler, unpooler, router)"},
        /* and a C1 control (U+009B, CSI in UTF-8: C2 9B) too */
        {"{\"ops\":[{\"layer\":\"x\\u009b31mRED\",\"m\":1}]}",
         "r.jsonl:1: ops[0].layer: unknown layer \"x\\u009b31mRED\" (the daemon serves qkv_gate, "
         "o, pooler, unpooler, router)"},
        {"{\"ops\":[{\"layer\":\"o\",\"m\":257}]}",
         "r.jsonl:1: ops[0].m: 257 is more than the daemon's max_m (256)"},
        {"{\"ops\":[{\"layer\":\"o\",\"m\":1,\"n\":257}]}",
         "r.jsonl:1: ops[0].n: 257 is more than layer \"o\" allows (256 rows)"},
        {"{\"ops\":[{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},"
         "{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},{\"layer\":"
         "\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1}]}",
         "r.jsonl:1: ops: 9 ops, the daemon allows at most 8 per request"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        ck_assert_int_eq(parse_text(&t, "r.jsonl", bad[i].text, err, sizeof err), 0);
        ck_assert_int_eq(pj_trace_resolve(&t, &w, err, sizeof err), -EINVAL);
        ck_assert_msg(strcmp(err, bad[i].want) == 0, "case %zu:\n got: %s\nwant: %s", i, err,
                      bad[i].want);
        pj_trace_free(&t);
    }
}
END_TEST

/* ---- writing and signatures ------------------------------------------------------------- */

static char *write_text(const pj_trace *t, const char *header, size_t *len)
{
    char *buf = NULL;
    size_t sz = 0;
    FILE *f = open_memstream(&buf, &sz);
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(pj_trace_write(t, f, header), 0);
    fclose(f);
    *len = sz;
    return buf;
}

START_TEST(write_roundtrip)
{
    pj_trace t;
    char err[512];
    const char *text =
        "{\"t_us\":7,\"client\":3,\"ops\":[{\"layer\":\"o\",\"m\":8},{\"layer\":\"we\\\"ird\\\\\","
        "\"m\":2,\"n\":5}]}\n{\"ops\":[{\"layer\":\"tab\\there\",\"m\":1}]}\n";
    ck_assert_int_eq(parse_text(&t, "w.jsonl", text, err, sizeof err), 0);
    size_t len;
    char *out = write_text(&t, "made by a test", &len);
    ck_assert_msg(strncmp(out, "# made by a test\n", 17) == 0, "%s", out);
    pj_trace u;
    ck_assert_int_eq(parse_text(&u, "w2.jsonl", out, err, sizeof err), 0);
    ck_assert_uint_eq(u.n_reqs, t.n_reqs);
    ck_assert_uint_eq(u.n_ops, t.n_ops);
    for (size_t r = 0; r < t.n_reqs; r++) {
        ck_assert_int_eq(u.reqs[r].t_us, t.reqs[r].t_us);
        ck_assert_uint_eq(u.reqs[r].client, t.reqs[r].client);
        ck_assert_uint_eq(u.reqs[r].n_ops, t.reqs[r].n_ops);
    }
    for (size_t i = 0; i < t.n_ops; i++) {
        ck_assert_str_eq(u.names[u.ops[i].name], t.names[t.ops[i].name]);
        ck_assert_uint_eq(u.ops[i].m, t.ops[i].m);
        ck_assert_uint_eq(u.ops[i].n_req, t.ops[i].n_req);
    }
    ck_assert_str_eq(u.names[u.ops[1].name], "we\"ird\\");
    ck_assert_str_eq(u.names[u.ops[2].name], "tab\there");
    /* The longest name, all of it escapes, survives the writer whole. */
    char longest[PJ_TRACE_NAME_MAX * 6 + 64] = "{\"ops\":[{\"layer\":\"";
    for (int i = 0; i < PJ_TRACE_NAME_MAX; i++)
        strcat(longest, "\\u0001");
    strcat(longest, "\",\"m\":1}]}\n");
    pj_trace lt, lu;
    ck_assert_int_eq(parse_text(&lt, "l.jsonl", longest, err, sizeof err), 0);
    ck_assert_uint_eq(strlen(lt.names[0]), PJ_TRACE_NAME_MAX);
    size_t llen;
    char *lout = write_text(&lt, NULL, &llen);
    ck_assert_int_eq(parse_text(&lu, "l2.jsonl", lout, err, sizeof err), 0);
    ck_assert_str_eq(lu.names[0], lt.names[0]);
    free(lout);
    pj_trace_free(&lt);
    pj_trace_free(&lu);
    /* Writing again gives the same bytes. */
    size_t len2;
    char *out2 = write_text(&u, "made by a test", &len2);
    ck_assert_uint_eq(len, len2);
    ck_assert_int_eq(memcmp(out, out2, len), 0);
    free(out);
    free(out2);
    pj_trace_free(&t);
    pj_trace_free(&u);
}
END_TEST

static void mset_pow2(void *ctx, uint32_t m, char *out, size_t cap)
{
    (void)ctx;
    uint32_t hi = 1;
    while (hi < m)
        hi *= 2;
    snprintf(out, cap, "%u-%u", hi / 2 + 1, hi);
}

START_TEST(signature)
{
    pj_trace t;
    char err[512], sig[256];
    ck_assert_int_eq(parse_text(&t, "s.jsonl",
                                "{\"ops\":[{\"layer\":\"qkv_gate\",\"m\":12},{\"layer\":"
                                "\"unpooler\",\"m\":12,\"n\":1024}]}\n"
                                "{\"ops\":[{\"layer\":\"o\",\"m\":12},{\"layer\":\"router\",\"m\":"
                                "3}]}\n",
                                err, sizeof err),
                     0);
    size_t need = pj_trace_signature(&t, 0, NULL, NULL, sig, sizeof sig);
    ck_assert_str_eq(sig, "qkv_gate,unpooler/1024 m=12");
    ck_assert_uint_eq(need, strlen(sig));
    pj_trace_signature(&t, 1, NULL, NULL, sig, sizeof sig);
    ck_assert_str_eq(sig, "o m=12,router m=3");
    pj_trace_signature(&t, 0, mset_pow2, NULL, sig, sizeof sig);
    ck_assert_str_eq(sig, "qkv_gate,unpooler/1024 m=9-16");
    pj_trace_signature(&t, 1, mset_pow2, NULL, sig, sizeof sig);
    ck_assert_str_eq(sig, "o m=9-16,router m=3-4");
    /* Truncation: terminated, and the needed length is still reported. */
    char small[8];
    need = pj_trace_signature(&t, 0, NULL, NULL, small, sizeof small);
    ck_assert_str_eq(small, "qkv_gat");
    ck_assert_uint_eq(need, strlen("qkv_gate,unpooler/1024 m=12"));
    pj_trace_free(&t);
    /* A name that would not print as itself (a control byte, or the
     * separator) is written quoted and escaped. */
    ck_assert_int_eq(parse_text(&t, "s.jsonl",
                                "{\"ops\":[{\"layer\":\"a,b\",\"m\":2},{\"layer\":\"c\\u0007\","
                                "\"m\":2}]}\n{\"ops\":[{\"layer\":\"o\",\"m\":1}]}\n",
                                err, sizeof err),
                     0);
    pj_trace_signature(&t, 0, NULL, NULL, sig, sizeof sig);
    ck_assert_str_eq(sig, "\"a,b\",\"c\\u0007\" m=2");
    pj_trace_free(&t);

    /* 30 ops of one layer at m=1 and at m=256: runs are written once with
     * their length, so the m survives in a key of PJ_LS_KEY_MAX (256) and
     * the two shapes stay apart. */
    char line[4096];
    size_t len = 0;
    char *text = malloc(8192);
    ck_assert_ptr_nonnull(text);
    text[0] = '\0';
    for (int r = 0; r < 2; r++) {
        len = (size_t)snprintf(line, sizeof line, "{\"ops\":[");
        for (int i = 0; i < 30; i++)
            len +=
                (size_t)snprintf(line + len, sizeof line - len,
                                 "%s{\"layer\":\"qkv_gate\",\"m\":%d}", i ? "," : "", r ? 256 : 1);
        snprintf(line + len, sizeof line - len, "]}\n");
        strcat(text, line);
    }
    strcat(text, "{\"ops\":[{\"layer\":\"o\",\"m\":1},{\"layer\":\"o\",\"m\":1},{\"layer\":"
                 "\"o\",\"m\":2},{\"layer\":\"o\",\"m\":1,\"n\":8},{\"layer\":\"o\",\"m\":1,"
                 "\"n\":8}]}\n");
    ck_assert_int_eq(parse_text(&t, "long.jsonl", text, err, sizeof err), 0);
    char a[256], b[256];
    pj_trace_signature(&t, 0, NULL, NULL, a, sizeof a);
    pj_trace_signature(&t, 1, NULL, NULL, b, sizeof b);
    ck_assert_str_eq(a, "qkv_gate*30 m=1");
    ck_assert_str_eq(b, "qkv_gate*30 m=256");
    pj_trace_signature(&t, 2, NULL, NULL, a, sizeof a);
    ck_assert_str_eq(a, "o*2 m=1,o m=2,o/8*2 m=1");
    pj_trace_signature(&t, 2, mset_pow2, NULL, a, sizeof a);
    ck_assert_str_eq(a, "o*2 m=1-1,o m=2-2,o/8*2 m=1-1");
    pj_trace_free(&t);
    free(text);
}
END_TEST

/* ---- generator ---------------------------------------------------------------------------- */

static char *gen_text(const pj_trace_gen *g, size_t *len)
{
    pj_trace t;
    char err[512];
    int rc = pj_trace_generate(&t, g, err, sizeof err);
    ck_assert_msg(rc == 0, "generate: %s", err);
    char *s = write_text(&t, NULL, len);
    pj_trace_free(&t);
    return s;
}

START_TEST(gen_deterministic)
{
    for (int kind = 0; kind < 3; kind++) {
        pj_trace_gen g;
        pj_trace_gen_defaults(&g);
        g.kind = (pj_trace_kind)kind;
        g.seed = 42;
        g.count = 3000;
        g.clients = 3;
        size_t la, lb, lc;
        char *a = gen_text(&g, &la);
        char *b = gen_text(&g, &lb);
        ck_assert_uint_eq(la, lb);
        ck_assert_msg(memcmp(a, b, la) == 0, "kind %d: same seed, different trace", kind);
        g.seed = 43;
        char *c = gen_text(&g, &lc);
        if (kind != PJ_TRACE_REFERENCE) /* reference loads do not depend on the seed */
            ck_assert_msg(la != lc || memcmp(a, c, la) != 0, "kind %d: seed ignored", kind);
        free(a);
        free(b);
        free(c);
    }
}
END_TEST

/* Per-request checks common to every kind: the five layers in order, one m,
 * unpooler with n = unpooler_n, times non-decreasing, clients in range. */
static void check_common(const pj_trace *t, const pj_trace_gen *g)
{
    ck_assert_uint_eq(t->n_reqs, g->count);
    ck_assert_uint_eq(t->n_timed, g->count);
    int64_t prev = 0;
    for (size_t r = 0; r < t->n_reqs; r++) {
        const pj_trace_req *q = &t->reqs[r];
        REQUIRE(q->n_ops == 5, "request %zu has %u ops", r, q->n_ops);
        REQUIRE(q->client < g->clients, "request %zu: client %u", r, q->client);
        REQUIRE(q->t_us >= prev, "request %zu: t_us %lld before %lld", r, (long long)q->t_us,
                (long long)prev);
        prev = q->t_us;
        for (uint32_t i = 0; i < 5; i++) {
            const pj_trace_op *o = &t->ops[q->op0 + i];
            REQUIRE(strcmp(t->names[o->name], pj_trace_gen_layers[i]) == 0,
                    "request %zu op %u is %s", r, i, t->names[o->name]);
            REQUIRE(o->m == t->ops[q->op0].m, "request %zu: ops differ in m", r);
            REQUIRE(o->m >= 1 && o->m <= g->max_m, "request %zu: m %u", r, o->m);
            REQUIRE(o->n_req == (i == 3 ? g->unpooler_n : 0), "request %zu op %u: n %u", r, i,
                    o->n_req);
        }
    }
}

START_TEST(gen_decode)
{
    pj_trace_gen g;
    pj_trace_gen_defaults(&g);
    g.kind = PJ_TRACE_DECODE;
    g.seed = 7;
    g.count = 4000;
    g.clients = 2;
    pj_trace t;
    char err[512];
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    check_common(&t, &g);
    /* Each client's batch drifts: small steps mostly, a few jumps, many
     * distinct sizes over the run, never outside 1..256. */
    uint32_t last[2] = {0, 0}, seen[257] = {0};
    size_t small_steps = 0, steps = 0, distinct = 0;
    for (size_t r = 0; r < t.n_reqs; r++) {
        uint32_t c = t.reqs[r].client, m = t.ops[t.reqs[r].op0].m;
        if (last[c]) {
            uint32_t d = m > last[c] ? m - last[c] : last[c] - m;
            REQUIRE(d <= 32, "step of %u", d);
            small_steps += d <= 2;
            steps++;
        }
        last[c] = m;
        distinct += seen[m]++ == 0;
    }
    ck_assert_msg(small_steps * 100 >= steps * 90, "%zu of %zu steps small", small_steps, steps);
    ck_assert_msg(small_steps < steps, "the walk never jumps");
    ck_assert_msg(distinct >= 40, "only %zu distinct batch sizes", distinct);
    pj_trace_free(&t);

    /* max_batch bounds the walk. */
    g.max_batch = 5;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    for (size_t r = 0; r < t.n_reqs; r++)
        REQUIRE(t.ops[t.reqs[r].op0].m <= 5, "m %u over max_batch", t.ops[t.reqs[r].op0].m);
    pj_trace_free(&t);
    g.max_batch = 1;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    for (size_t r = 0; r < t.n_reqs; r++)
        REQUIRE(t.ops[t.reqs[r].op0].m == 1, "m %u with max_batch 1", t.ops[t.reqs[r].op0].m);
    pj_trace_free(&t);
}
END_TEST

/* A served model's own layers: each request the next ops_per_request of
 * the list for its client, wrapping, all at the request's m, n left out;
 * the decode walk unchanged by the names. */
START_TEST(gen_layers)
{
    static const char *const names[10] = {"model.layers.0.self_attn.qkv_proj",
                                          "model.layers.0.self_attn.o_proj",
                                          "model.layers.0.mlp.gate_up_proj",
                                          "model.layers.0.mlp.down_proj",
                                          "l4",
                                          "l5",
                                          "l6",
                                          "l7",
                                          "l8",
                                          "l9"};
    pj_trace_gen g;
    pj_trace_gen_defaults(&g);
    g.count = 600;
    g.clients = 3;
    pj_trace ref;
    char err[512];
    ck_assert_int_eq(pj_trace_generate(&ref, &g, err, sizeof err), 0);
    g.layers = names;
    g.n_layers = 10;
    g.ops_per_request = 4;
    pj_trace t;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    ck_assert_uint_eq(t.n_reqs, 600);
    ck_assert_uint_eq(t.n_names, 10);
    uint32_t step[3] = {0, 0, 0};
    for (size_t r = 0; r < t.n_reqs; r++) {
        const pj_trace_req *q = &t.reqs[r];
        ck_assert_uint_eq(q->n_ops, 4);
        ck_assert_uint_eq(q->client, ref.reqs[r].client);
        ck_assert_int_eq(q->t_us, ref.reqs[r].t_us);
        for (uint32_t k = 0; k < 4; k++) {
            const pj_trace_op *o = &t.ops[q->op0 + k];
            REQUIRE(strcmp(t.names[o->name], names[(step[q->client] * 4 + k) % 10]) == 0,
                    "request %zu op %u: %s", r, k, t.names[o->name]);
            REQUIRE(o->m == ref.ops[ref.reqs[r].op0].m, "request %zu op %u: m %u", r, k, o->m);
            REQUIRE(o->n_req == 0, "request %zu op %u: n %u", r, k, o->n_req);
        }
        step[q->client]++;
    }
    pj_trace_free(&t);
    pj_trace_free(&ref);

    /* all of them a request when ops_per_request is 0 and they fit */
    g.ops_per_request = 0;
    g.count = 2;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    ck_assert_uint_eq(t.reqs[1].n_ops, 10);
    pj_trace_free(&t);
    /* refused: more than a request's 64 without ops_per_request, more per
     * request than listed, ops_per_request without layers, an empty name */
    const char *many[65];
    for (int i = 0; i < 65; i++)
        many[i] = "x";
    g.layers = many;
    g.n_layers = 65;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "give --ops-per-request"), "%s", err);
    g.layers = names;
    g.n_layers = 3;
    g.ops_per_request = 4;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "expected 1..3"), "%s", err);
    g.layers = NULL;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "--ops-per-request needs --layers"), "%s", err);
    static const char *const empty[1] = {""};
    g.layers = empty;
    g.n_layers = 1;
    g.ops_per_request = 0;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "a layer name is 1..63"), "%s", err);
}
END_TEST

START_TEST(gen_verify)
{
    pj_trace_gen g;
    pj_trace_gen_defaults(&g);
    g.kind = PJ_TRACE_VERIFY;
    g.seed = 9;
    g.count = 2000;
    g.draft = 5;
    g.max_batch = 80; /* 80 x 5 = 400 > 256: some steps are capped */
    g.unpooler_n = 0;
    pj_trace t;
    char err[512];
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    check_common(&t, &g);
    size_t capped = 0, uncapped = 0;
    for (size_t r = 0; r < t.n_reqs; r++) {
        uint32_t m = t.ops[t.reqs[r].op0].m;
        if (m == 256)
            capped++;
        else
            REQUIRE(m % 5 == 0, "verify m %u is not a multiple of the draft", m);
        uncapped += m < 256;
    }
    ck_assert_msg(capped > 0 && uncapped > 0, "capped %zu, uncapped %zu", capped, uncapped);
    pj_trace_free(&t);

    /* Default walk bound for verify: max_m / draft, so nothing is capped. */
    g.max_batch = 0;
    g.draft = 4;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    for (size_t r = 0; r < t.n_reqs; r++)
        REQUIRE(t.ops[t.reqs[r].op0].m % 4 == 0, "m %u", t.ops[t.reqs[r].op0].m);
    pj_trace_free(&t);
}
END_TEST

START_TEST(gen_reference)
{
    pj_trace_gen g;
    pj_trace_gen_defaults(&g);
    g.kind = PJ_TRACE_REFERENCE;
    g.count = 13;
    g.clients = 2;
    pj_trace t;
    char err[512];
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), 0);
    check_common(&t, &g);
    static const uint32_t want[] = {1, 8, 16, 32, 128, 256};
    for (size_t r = 0; r < t.n_reqs; r++) {
        ck_assert_uint_eq(t.ops[t.reqs[r].op0].m, want[r % 6]);
        ck_assert_uint_eq(t.reqs[r].client, r % 2);
        ck_assert_uint_eq(t.ops[t.reqs[r].op0 + 3].n_req, 1024);
    }
    pj_trace_free(&t);
}
END_TEST

START_TEST(gen_bad_options)
{
    pj_trace_gen g;
    pj_trace t;
    char err[512];

    pj_trace_gen_defaults(&g);
    g.count = 0;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: --count: expected 1..100000000, got 0");

    pj_trace_gen_defaults(&g);
    g.clients = 0;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: --clients: expected 1..1024, got 0");

    pj_trace_gen_defaults(&g);
    g.draft = 0;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: --draft: expected 1..64, got 0");

    pj_trace_gen_defaults(&g);
    g.max_batch = 300;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: --max-batch 300 is more than --max-m 256");

    pj_trace_gen_defaults(&g);
    g.kind = PJ_TRACE_REFERENCE;
    g.max_m = 128;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: reference loads go up to m = 256, more than --max-m 128 allows");

    pj_trace_gen_defaults(&g);
    g.kind = (pj_trace_kind)7;
    ck_assert_int_eq(pj_trace_generate(&t, &g, err, sizeof err), -EINVAL);
    ck_assert_str_eq(err, "gen: unknown kind 7");

    ck_assert_int_eq(pj_trace_kind_from_name("verify"), PJ_TRACE_VERIFY);
    ck_assert_int_eq(pj_trace_kind_from_name("prefill"), -1);
}
END_TEST

static Suite *trace_suite(void)
{
    Suite *s = suite_create("trace");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, parse_good);
    tcase_add_loop_test(tc, parse_bad, 0, (int)(sizeof bad_cases / sizeof bad_cases[0]));
    tcase_add_test(tc, parse_bad_misc);
    tcase_add_test(tc, load_file);
    tcase_add_test(tc, parse_many_names);
    tcase_add_test(tc, load_size_limit);
    tcase_add_test(tc, resolve);
    tcase_add_test(tc, write_roundtrip);
    tcase_add_test(tc, signature);
    suite_add_tcase(s, tc);
    tc = tcase_create("generate");
    tcase_add_test(tc, gen_deterministic);
    tcase_add_test(tc, gen_decode);
    tcase_add_test(tc, gen_verify);
    tcase_add_test(tc, gen_reference);
    tcase_add_test(tc, gen_bad_options);
    tcase_add_test(tc, gen_layers);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(trace_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
