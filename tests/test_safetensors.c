/* test_safetensors.c — reader validation (bad files), writer round trips. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "daemon/safetensors.h"
#include "tests/helpers/fixture.h"

/* A file image: 8-byte length, the header text verbatim (length taken from
 * it unless hlen_override is nonzero), then data_len bytes of 0xA5. */
static uint8_t *image(const char *header, uint64_t hlen_override, size_t data_len, size_t *len)
{
    size_t hl = strlen(header);
    *len = 8 + hl + data_len;
    uint8_t *b = malloc(*len ? *len : 1);
    ck_assert_ptr_nonnull(b);
    uint64_t h = hlen_override ? hlen_override : hl;
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(h >> (8 * i));
    memcpy(b + 8, header, hl);
    memset(b + 8 + hl, 0xA5, data_len);
    return b;
}

/* Parse an image that must fail with -EINVAL and an error containing want. */
static void expect_bad(const uint8_t *b, size_t len, const char *want)
{
    char err[512] = "";
    pj_st_file *f = (pj_st_file *)0x1;
    int rc = pj_st_parse(b, len, "model.safetensors", &f, err, sizeof err);
    ck_assert_msg(rc == -EINVAL, "rc %d for '%s' (err: %s)", rc, want, err);
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err, want) != NULL, "error '%s' lacks '%s'", err, want);
    ck_assert_msg(strncmp(err, "model.safetensors: ", 19) == 0, "error '%s' names no file", err);
    ck_assert_msg(strchr(err, '\n') == NULL, "error is not one line: '%s'", err);
}

static void expect_bad_header(const char *header, size_t data_len, const char *want)
{
    size_t len;
    uint8_t *b = image(header, 0, data_len, &len);
    expect_bad(b, len, want);
    free(b);
}

START_TEST(bad_too_short)
{
    const uint8_t b[5] = {2, 0, 0, 0, 0};
    expect_bad(b, sizeof b, "file is 5 bytes, too short for the 8-byte header length");
    expect_bad(b, 0, "file is 0 bytes");
}
END_TEST

START_TEST(bad_header_len_past_eof)
{
    size_t len;
    uint8_t *b = image("{}", 1000, 0, &len);
    expect_bad(b, len, "header length 1000 runs past the end of the file (10 bytes)");
    free(b);
    /* A cut file whose length's bytes read as a pickle's magic (640 is
     * 80 02 ...) is still said to be cut. */
    b = image("{}", 640, 0, &len);
    expect_bad(b, len, "header length 640 runs past the end of the file (10 bytes)");
    free(b);
}
END_TEST

START_TEST(bad_header_len_huge)
{
    size_t len;
    uint8_t *b = image("{}", 0xffffffffffffull, 0, &len);
    expect_bad(b, len, "header length 281474976710655 exceeds the 100 MiB limit");
    free(b);
    b = image("{}", (100u << 20) + 1, 0, &len);
    expect_bad(b, len, "exceeds the 100 MiB limit");
    free(b);
}
END_TEST

/* A file that is something else, where its header length reads as
 * nonsense, is named for what it is. */
START_TEST(bad_not_safetensors)
{
    static const struct {
        const char *bytes;
        size_t len;
        const char *want;
    } cases[] = {
        {"version https://git-lfs.github.com/spec/v1\noid sha256:4d7a\nsize 67108872\n", 0,
         "not a safetensors file: a Git LFS pointer, not the file it points at (git lfs pull "
         "fetches it)"},
        {"PK\3\4\24\0\0\0\10\0", 10, "not a safetensors file: a zip archive (a PyTorch"},
        {"GGUF\3\0\0\0\0\0\0\0", 12, "not a safetensors file: a GGUF file"},
        {"\x80\x02\x8a\nl\xfc\x9c"
         "F\xf9 j\xa8",
         12, "not a safetensors file: a Python pickle"},
        {"{\n  \"o.weight\": {\"dtype\": \"BF16\"}}\n", 0,
         "not a safetensors file: JSON text beginning \"{\" (a safetensors file begins with its "
         "JSON header's 8-byte length)"},
        {"hello, this is a README, not weights\n", 0,
         "not a safetensors file: text beginning \"hello, this is a README, not weights\""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t len = cases[i].len ? cases[i].len : strlen(cases[i].bytes);
        expect_bad((const uint8_t *)cases[i].bytes, len, cases[i].want);
    }
}
END_TEST

START_TEST(bad_header_len_small)
{
    size_t len;
    uint8_t *b = image("{}", 0, 0, &len);
    b[0] = 1; /* header length 1 */
    expect_bad(b, len, "header length 1 is too small");
    free(b);
}
END_TEST

START_TEST(bad_json)
{
    expect_bad_header("{\"a\": {\"dtype\": \"BF16\",", 0, "header is not valid JSON");
    expect_bad_header("not json at all", 0, "header is not valid JSON");
}
END_TEST

START_TEST(bad_trailing_bytes)
{
    expect_bad_header("{}  x", 0, "unexpected bytes after the JSON value (at byte 4)");
    /* spaces after the object are the padding the format allows */
    size_t len;
    uint8_t *b = image("{}      ", 0, 0, &len);
    char err[256];
    pj_st_file *f;
    ck_assert_int_eq(pj_st_parse(b, len, "x", &f, err, sizeof err), 0);
    ck_assert_uint_eq(pj_st_count(f), 0);
    pj_st_close(f);
    free(b);
}
END_TEST

START_TEST(bad_not_object)
{
    expect_bad_header("[1, 2, 3]", 0, "header is an array, expected a JSON object");
    expect_bad_header("\"str\"", 0, "header is a string, expected a JSON object");
    expect_bad_header("{\"t\": 5}", 0, "tensor 't': entry is 5, not an object");
}
END_TEST

START_TEST(bad_overlap)
{
    expect_bad_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                      "\"b\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[12,28]}}",
                      32, "tensor 'b' data_offsets [12, 28] overlap tensor 'a' [0, 16]");
    /* the same range twice */
    expect_bad_header("{\"a\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]},"
                      "\"b\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[4,8]}}",
                      8, "overlap tensor");
}
END_TEST

START_TEST(bad_offsets_past_data)
{
    expect_bad_header("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,4],\"data_offsets\":[0,16]}}", 15,
                      "tensor 'w': data_offsets [0, 16] run past the data section (15 bytes)");
}
END_TEST

START_TEST(bad_span)
{
    expect_bad_header(
        "{\"o.weight\":{\"dtype\":\"BF16\",\"shape\":[4096,2048],\"data_offsets\":[0,100]}}", 100,
        "tensor 'o.weight': data_offsets [0, 100] span 100 bytes but shape [4096, 2048] x BF16 "
        "needs 16777216");
    expect_bad_header("{\"x\":{\"dtype\":\"I64\",\"shape\":[1099511627776,1099511627776],"
                      "\"data_offsets\":[0,8]}}",
                      8, "overflows 64 bits");
}
END_TEST

START_TEST(bad_shape_entries)
{
    expect_bad_header("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2,-3],\"data_offsets\":[0,0]}}", 0,
                      "tensor 'w': shape[1] is -3, not a non-negative integer");
    expect_bad_header("{\"w\":{\"dtype\":\"BF16\",\"shape\":[2.5],\"data_offsets\":[0,0]}}", 0,
                      "shape[0] is 2.5, not a non-negative integer");
    expect_bad_header("{\"w\":{\"dtype\":\"BF16\",\"shape\":[\"2\"],\"data_offsets\":[0,0]}}", 0,
                      "shape[0] is a string");
    expect_bad_header("{\"w\":{\"dtype\":\"BF16\",\"shape\":4,\"data_offsets\":[0,0]}}", 0,
                      "\"shape\" is 4, expected an array");
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[1,1,1,1,1,1,1,1,1],"
                      "\"data_offsets\":[0,1]}}",
                      1, "shape has 9 dimensions (at most 8)");
}
END_TEST

START_TEST(bad_begin_after_end)
{
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8,4]}}", 8,
                      "tensor 'w': data_offsets [8, 4] have begin > end");
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[8]}}", 8,
                      "\"data_offsets\" must be [begin, end]");
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[-1,0]}}", 8,
                      "\"data_offsets\" must be [begin, end]");
}
END_TEST

START_TEST(bad_dtype)
{
    expect_bad_header("{\"w\":{\"dtype\":\"Q4_K\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                      "tensor 'w': unknown dtype 'Q4_K'");
    expect_bad_header("{\"w\":{\"dtype\":7,\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                      "tensor 'w': \"dtype\" is 7, expected a string");
    expect_bad_header("{\"w\":{\"shape\":[1],\"data_offsets\":[0,1]}}", 1, "\"dtype\" is missing");
}
END_TEST

START_TEST(bad_duplicate_name)
{
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]},"
                      "\"w\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[1,2]}}",
                      2, "tensor 'w' appears twice");
}
END_TEST

/* A tensor entry naming a field twice read as its first value here (BF16
 * below) while other readers refuse the entry or take the last (F32): the
 * same file meant two models. */
START_TEST(bad_repeated_field)
{
    expect_bad_header(
        "{\"w\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[0,4],\"dtype\":\"F32\"}}", 4,
        "tensor 'w': \"dtype\" appears 2 times");
    expect_bad_header("{\"w\":{\"dtype\":\"U8\",\"shape\":[4],\"shape\":[2,2],\"data_offsets\":[0,"
                      "4]}}",
                      4, "tensor 'w': \"shape\" appears 2 times");
    expect_bad_header("{\"w\":{\"data_offsets\":[0,4],\"dtype\":\"U8\",\"shape\":[4],\"data_"
                      "offsets\":[4,8]}}",
                      8, "tensor 'w': \"data_offsets\" appears 2 times");
}
END_TEST

START_TEST(bad_metadata)
{
    expect_bad_header("{\"__metadata__\":{\"seed\":5}}", 0,
                      "\"__metadata__\" entry 'seed' is 5, not a string");
    expect_bad_header("{\"__metadata__\":[]}", 0, "\"__metadata__\" is an array");
}
END_TEST

START_TEST(bad_name_escaped)
{
    /* a newline and a quote in a tensor name must not break the one-line rule */
    expect_bad_header("{\"a\\nb'c\":{\"dtype\":\"XX\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
                      "tensor 'a\\x0ab\\x27c': unknown dtype 'XX'");
    /* \u0000 in a name: cJSON would cut it there, so "o.weight\u0000x"
     * would load as the layer o.weight. */
    expect_bad_header(
        "{\"o.weight\\u0000x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 1,
        "header has \\u0000 in a string at byte 10");
    /* A raw 0 byte in a name (invalid JSON that cJSON copies) cuts it the
     * same way: "o.weight<NUL>x" loaded as o.weight. */
    char hdr[] = "{\"o.weight?x\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}";
    size_t len;
    uint8_t *b = image(hdr, 0, 1, &len);
    b[8 + 10] = 0; /* the '?' */
    expect_bad(b, len, "header has a NUL byte in a string at byte 10");
    free(b);
}
END_TEST

/* What cJSON takes and JSON (and the reference reader) does not: 1.0 and
 * 1e0 read as integers, 01 as 1, a control byte as white space. (2.5 is
 * refused with its tensor named: bad_shape_entries.) */
START_TEST(bad_not_json_integers)
{
    expect_bad_header("{\"o.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1.0]}}", 1,
                      "header has a number that is not a whole one (1.0) at byte 56");
    expect_bad_header("{\"o.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1e0]}}", 1,
                      "header has a number that is not a whole one (1e0) at byte 56");
    expect_bad_header("{\"o.weight\":{\"dtype\":\"U8\",\"shape\":[01],\"data_offsets\":[0,1]}}", 1,
                      "header has a number that is not a whole one (01) at byte 35");
    expect_bad_header("{\"o.weight\":\x01{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}",
                      1,
                      "header has a control byte (0x01) where only white space may be at byte 12");
    /* and the same header written as JSON loads */
    size_t len;
    uint8_t *b =
        image("{\"o.weight\":{\"dtype\":\"U8\",\"shape\":[1],\"data_offsets\":[0,1]}}", 0, 1, &len);
    char err[512] = "";
    pj_st_file *f = NULL;
    ck_assert_msg(pj_st_parse(b, len, "model.safetensors", &f, err, sizeof err) == 0, "%s", err);
    pj_st_close(f);
    free(b);
}
END_TEST

/* A small valid file on disk, then cut short: the truncated data is caught. */
START_TEST(bad_truncated_file)
{
    char path[1024], err[512];
    pj_fixture_path(path, sizeof path, "trunc.safetensors");
    float v[64];
    for (int i = 0; i < 64; i++)
        v[i] = (float)i;
    pj_st_wtensor t = {.name = "w", .dtype = PJ_ST_F32, .ndim = 2, .shape = {8, 8}, .data = v};
    ck_assert_int_eq(pj_st_write(path, &t, 1, NULL, 0, err, sizeof err), 0);
    struct stat st;
    ck_assert_int_eq(stat(path, &st), 0);
    ck_assert_int_eq(truncate(path, st.st_size - 4), 0);
    pj_st_file *f;
    int rc = pj_st_open(path, &f, err, sizeof err);
    ck_assert_int_eq(rc, -EINVAL);
    ck_assert_msg(strstr(err, "tensor 'w': data_offsets [0, 256] run past the data section (252 "
                              "bytes)") != NULL,
                  "%s", err);
    ck_assert_msg(strncmp(err, path, strlen(path)) == 0, "%s", err);
    /* cut into the header */
    ck_assert_int_eq(truncate(path, 20), 0);
    ck_assert_int_eq(pj_st_open(path, &f, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "runs past the end of the file (20 bytes)") != NULL, "%s", err);
    ck_assert_int_eq(truncate(path, 0), 0);
    ck_assert_int_eq(pj_st_open(path, &f, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "file is 0 bytes") != NULL, "%s", err);
    unlink(path);
    ck_assert_int_eq(pj_st_open(path, &f, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "cannot open") != NULL, "%s", err);
}
END_TEST

START_TEST(good_minimal)
{
    /* empty tensors, a 0-d tensor, gaps in the data section, other dtypes */
    const char *h = "{\"__metadata__\":{\"format\":\"pt\"},"
                    "\"e\":{\"dtype\":\"F32\",\"shape\":[0,4],\"data_offsets\":[4,4]},"
                    "\"s\":{\"dtype\":\"I64\",\"shape\":[],\"data_offsets\":[8,16]},"
                    "\"h\":{\"dtype\":\"F16\",\"shape\":[2],\"data_offsets\":[0,4]}}";
    size_t len;
    uint8_t *b = image(h, 0, 24, &len);
    char err[256];
    pj_st_file *f;
    ck_assert_int_eq(pj_st_parse(b, len, "x", &f, err, sizeof err), 0);
    ck_assert_uint_eq(pj_st_count(f), 3);
    ck_assert_str_eq(pj_st_get(f, 0)->name, "e");
    const pj_st_tensor *s = pj_st_find(f, "s");
    ck_assert_ptr_nonnull(s);
    ck_assert_int_eq(s->dtype, PJ_ST_I64);
    ck_assert_uint_eq(s->ndim, 0);
    ck_assert_uint_eq(s->nbytes, 8);
    ck_assert_ptr_eq(s->data, b + 8 + strlen(h) + 8);
    ck_assert_ptr_null(pj_st_find(f, "zz"));
    ck_assert_str_eq(pj_st_meta(f, "format"), "pt");
    ck_assert_uint_eq(pj_st_meta_count(f), 1);
    ck_assert_int_eq(pj_st_dtype_is_float(s->dtype), 0);
    pj_st_close(f);
    free(b);
}
END_TEST

static void fill_bytes(uint8_t *p, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (uint8_t)(seed >> 24);
    }
}

START_TEST(roundtrip)
{
    char path[1024], err[512];
    pj_fixture_path(path, sizeof path, "rt.safetensors");
    static uint8_t f32[3 * 5 * 4], bf[7 * 3 * 2], h16[9 * 2], i64[8];
    fill_bytes(f32, sizeof f32, 1);
    fill_bytes(bf, sizeof bf, 2);
    fill_bytes(h16, sizeof h16, 3);
    fill_bytes(i64, sizeof i64, 4);
    pj_st_wtensor t[] = {
        {.name = "layer.f32", .dtype = PJ_ST_F32, .ndim = 2, .shape = {3, 5}, .data = f32},
        {.name = "step", .dtype = PJ_ST_I64, .ndim = 0, .data = i64},
        {.name = "layer.bf16", .dtype = PJ_ST_BF16, .ndim = 2, .shape = {7, 3}, .data = bf},
        {.name = "empty", .dtype = PJ_ST_BF16, .ndim = 2, .shape = {0, 3}, .data = NULL},
        {.name = "quote\"name", .dtype = PJ_ST_F16, .ndim = 1, .shape = {9}, .data = h16},
    };
    const char *meta[] = {"generator", "test", "seed", "42"};
    ck_assert_int_eq(pj_st_write(path, t, 5, meta, 2, err, sizeof err), 0);

    pj_st_file *f;
    ck_assert_msg(pj_st_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_uint_eq(pj_st_count(f), 5);
    ck_assert_uint_eq((8 + pj_st_header_len(f)) % 8, 0);
    uint64_t expect_begin = 0;
    for (int i = 0; i < 5; i++) {
        const pj_st_tensor *r = pj_st_find(f, t[i].name);
        ck_assert_ptr_nonnull(r);
        ck_assert_ptr_eq(r, pj_st_get(f, (size_t)i)); /* header keeps the order */
        ck_assert_int_eq(r->dtype, t[i].dtype);
        ck_assert_uint_eq(r->ndim, t[i].ndim);
        for (uint32_t d = 0; d < r->ndim; d++)
            ck_assert_uint_eq(r->shape[d], t[i].shape[d]);
        ck_assert_uint_eq(r->begin, expect_begin); /* contiguous, declaration order */
        expect_begin = r->end;
        if (r->nbytes)
            ck_assert_int_eq(memcmp(r->data, t[i].data, r->nbytes), 0);
    }
    ck_assert_uint_eq(pj_st_file_size(f), 8 + pj_st_header_len(f) + expect_begin);
    ck_assert_str_eq(pj_st_meta(f, "generator"), "test");
    ck_assert_str_eq(pj_st_meta(f, "seed"), "42");
    pj_st_close(f);

    /* no temporary file is left behind */
    ck_assert_int_eq(pj_fixture_temporaries(path), 0);
}
END_TEST

/* A file rewritten while it is read. Cut short under the mapping (cp over
 * it truncates first), the reads past the new end used to kill the process
 * with SIGBUS and no word; now they read zeros and pj_st_verify says what
 * happened. Written in place, its size or modification time tells. */
START_TEST(changed_while_read)
{
    char path[1024], err[512];
    pj_fixture_path(path, sizeof path, "changing.safetensors");
    static uint8_t bf[512 * 64 * 2];
    fill_bytes(bf, sizeof bf, 5);
    pj_st_wtensor t[] = {
        {.name = "w", .dtype = PJ_ST_BF16, .ndim = 2, .shape = {512, 64}, .data = bf}};
    ck_assert_int_eq(pj_st_write(path, t, 1, NULL, 0, err, sizeof err), 0);
    /* An old modification time, so a write now is sure to move it. */
    struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);

    pj_st_file *f;
    ck_assert_msg(pj_st_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(pj_st_verify(f, err, sizeof err), 0);
    ck_assert_int_eq(truncate(path, 0), 0);
    const pj_st_tensor *w = pj_st_find(f, "w");
    ck_assert_ptr_nonnull(w);
    const volatile uint8_t *p = w->data;
    unsigned sum = 0;
    for (size_t i = 0; i < w->nbytes; i += 4096)
        sum += p[i]; /* SIGBUS before: absorbed, zeros */
    ck_assert_uint_eq(sum, 0);
    ck_assert_int_eq(pj_st_verify(f, err, sizeof err), -EIO);
    ck_assert_msg(strstr(err, "shrank while it was read") && strstr(err, "changing.safetensors"),
                  "%s", err);
    pj_st_close(f);

    /* Rewritten in place, same size: the modification time moved. */
    ck_assert_int_eq(pj_st_write(path, t, 1, NULL, 0, err, sizeof err), 0);
    ck_assert_int_eq(utimensat(AT_FDCWD, path, old, 0), 0);
    ck_assert_msg(pj_st_open(path, &f, err, sizeof err) == 0, "%s", err);
    int fd = open(path, O_WRONLY);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, "\x7f", 1, (off_t)pj_st_file_size(f) - 1), 1);
    close(fd);
    ck_assert_int_eq(pj_st_verify(f, err, sizeof err), -EIO);
    ck_assert_msg(strstr(err, "changed while it was read"), "%s", err);
    pj_st_close(f);

    /* A file that stays as it is passes, and an image in memory always. */
    ck_assert_int_eq(pj_st_write(path, t, 1, NULL, 0, err, sizeof err), 0);
    ck_assert_msg(pj_st_open(path, &f, err, sizeof err) == 0, "%s", err);
    ck_assert_int_eq(pj_st_verify(f, err, sizeof err), 0);
    pj_st_close(f);
    unlink(path);
}
END_TEST

START_TEST(streaming)
{
    char path[1024], err[512];
    pj_fixture_path(path, sizeof path, "stream.safetensors");
    enum { ROWS = 33, COLS = 17 };
    static uint16_t rows[ROWS][COLS];
    fill_bytes((uint8_t *)rows, sizeof rows, 9);
    float fixed[4] = {1, 2, 3, 4};
    pj_st_writer *w;
    ck_assert_int_eq(pj_st_writer_open(path, &w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_meta(w, "k", "v", err, sizeof err), 0);
    uint64_t s1[2] = {4, 1}, s2[2] = {ROWS, COLS};
    ck_assert_int_eq(pj_st_writer_add(w, "fixed", PJ_ST_F32, 2, s1, fixed, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "rows", PJ_ST_BF16, 2, s2, NULL, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "after", PJ_ST_F32, 2, s1, fixed, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_begin_data(w, err, sizeof err), 0);
    for (int r = 0; r < ROWS; r++)
        ck_assert_int_eq(pj_st_writer_append(w, rows[r], sizeof rows[r], err, sizeof err), 0);
    ck_assert_msg(pj_st_writer_finish(w, err, sizeof err) == 0, "%s", err);

    pj_st_file *f;
    ck_assert_int_eq(pj_st_open(path, &f, err, sizeof err), 0);
    const pj_st_tensor *t = pj_st_find(f, "rows");
    ck_assert_uint_eq(t->nbytes, sizeof rows);
    ck_assert_int_eq(memcmp(t->data, rows, sizeof rows), 0);
    ck_assert_int_eq(memcmp(pj_st_find(f, "after")->data, fixed, sizeof fixed), 0);
    /* wider dtype added first: every tensor is aligned to its element size */
    ck_assert_uint_eq((uintptr_t)pj_st_find(f, "fixed")->data % 4, 0);
    pj_st_close(f);
}
END_TEST

START_TEST(writer_errors)
{
    char path[1024], err[512];
    pj_fixture_path(path, sizeof path, "werr.safetensors");
    unlink(path);
    uint64_t s[1] = {4};
    uint8_t d[4] = {0};
    pj_st_writer *w;

    ck_assert_int_eq(pj_st_writer_open(path, &w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "a", PJ_ST_U8, 1, s, d, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "a", PJ_ST_U8, 1, s, d, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "tensor 'a' added twice") != NULL, "%s", err);
    ck_assert_int_eq(pj_st_writer_finish(w, err, sizeof err), -EINVAL);
    ck_assert_int_ne(access(path, F_OK), 0);

    ck_assert_int_eq(pj_st_writer_open(path, &w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "__metadata__", PJ_ST_U8, 1, s, d, err, sizeof err),
                     -EINVAL);
    pj_st_writer_abort(w);

    ck_assert_int_eq(pj_st_writer_open(path, &w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "s", PJ_ST_U8, 1, s, NULL, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_begin_data(w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_append(w, d, 3, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_append(w, d, 2, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "runs past tensor 's' (3 of 4 written)") != NULL, "%s", err);
    pj_st_writer_abort(w);

    ck_assert_int_eq(pj_st_writer_open(path, &w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_add(w, "s", PJ_ST_U8, 1, s, NULL, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_begin_data(w, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_append(w, d, 3, err, sizeof err), 0);
    ck_assert_int_eq(pj_st_writer_finish(w, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "tensor 's' has 3 of 4 bytes written") != NULL, "%s", err);
    ck_assert_int_ne(access(path, F_OK), 0);

    pj_st_wtensor t = {.name = "x", .dtype = PJ_ST_U8, .ndim = 1, .shape = {4}, .data = NULL};
    ck_assert_int_eq(pj_st_write(path, &t, 1, NULL, 0, err, sizeof err), -EINVAL);
    ck_assert_msg(strstr(err, "tensor 'x' has no data") != NULL, "%s", err);

    char bad[1100];
    snprintf(bad, sizeof bad, "%s/no/such/dir/x.safetensors", pj_fixture_tmpdir());
    ck_assert_int_eq(pj_st_writer_open(bad, &w, err, sizeof err), -ENOENT);
    ck_assert_msg(strstr(err, "cannot create") != NULL, "%s", err);
}
END_TEST

START_TEST(dtype_names)
{
    for (int d = 0; d < PJ_ST_DTYPE_COUNT; d++) {
        ck_assert_int_eq(pj_st_dtype_from_name(pj_st_dtype_name((pj_st_dtype)d)), d);
        ck_assert_uint_gt(pj_st_dtype_size((pj_st_dtype)d), 0);
    }
    ck_assert_int_eq(pj_st_dtype_from_name("bf16"), -1);
    ck_assert_str_eq(pj_st_dtype_name(PJ_ST_DTYPE_COUNT), "?");
    char b[64];
    uint64_t s[3] = {1, 22, 333};
    ck_assert_str_eq(pj_st_shape_str(s, 3, b, sizeof b), "[1, 22, 333]");
    ck_assert_str_eq(pj_st_shape_str(s, 0, b, sizeof b), "[]");
}
END_TEST

/* Every prefix of a valid file, and single-byte corruptions of it, must
 * be rejected or accepted without touching memory outside the buffer (ASan
 * builds check the latter). */
START_TEST(mutations)
{
    const char *h = "{\"__metadata__\":{\"a\":\"b\"},"
                    "\"w\":{\"dtype\":\"BF16\",\"shape\":[2,3],\"data_offsets\":[0,12]},"
                    "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[12,20]}}";
    size_t len;
    uint8_t *b = image(h, 0, 20, &len);
    char err[512];
    pj_st_file *f;
    ck_assert_int_eq(pj_st_parse(b, len, "m", &f, err, sizeof err), 0);
    pj_st_close(f);
    for (size_t cut = 0; cut < len; cut++) {
        uint8_t *c = malloc(cut ? cut : 1);
        memcpy(c, b, cut);
        ck_assert_int_eq(pj_st_parse(c, cut, "m", &f, err, sizeof err), -EINVAL);
        free(c);
    }
    uint32_t seed = 7;
    for (int i = 0; i < 4000; i++) {
        uint8_t *c = malloc(len);
        memcpy(c, b, len);
        seed = seed * 1664525u + 1013904223u;
        size_t at = (seed >> 8) % (8 + strlen(h));
        c[at] = (uint8_t)(seed >> 24);
        if (pj_st_parse(c, len, "m", &f, err, sizeof err) == 0)
            pj_st_close(f);
        else
            ck_assert(strchr(err, '\n') == NULL);
        free(c);
    }
    free(b);
}
END_TEST

static Suite *st_suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *bad = tcase_create("bad_files");
    tcase_add_test(bad, bad_too_short);
    tcase_add_test(bad, bad_header_len_past_eof);
    tcase_add_test(bad, bad_header_len_huge);
    tcase_add_test(bad, bad_header_len_small);
    tcase_add_test(bad, bad_not_safetensors);
    tcase_add_test(bad, bad_json);
    tcase_add_test(bad, bad_trailing_bytes);
    tcase_add_test(bad, bad_not_object);
    tcase_add_test(bad, bad_overlap);
    tcase_add_test(bad, bad_offsets_past_data);
    tcase_add_test(bad, bad_span);
    tcase_add_test(bad, bad_shape_entries);
    tcase_add_test(bad, bad_begin_after_end);
    tcase_add_test(bad, bad_dtype);
    tcase_add_test(bad, bad_duplicate_name);
    tcase_add_test(bad, bad_metadata);
    tcase_add_test(bad, bad_repeated_field);
    tcase_add_test(bad, bad_name_escaped);
    tcase_add_test(bad, bad_not_json_integers);
    tcase_add_test(bad, bad_truncated_file);
    tcase_add_test(bad, mutations);
    tcase_set_timeout(bad, 60);
    suite_add_tcase(s, bad);
    TCase *good = tcase_create("good_files");
    tcase_add_test(good, good_minimal);
    tcase_add_test(good, roundtrip);
    tcase_add_test(good, streaming);
    tcase_add_test(good, changed_while_read);
    tcase_add_test(good, writer_errors);
    tcase_add_test(good, dtype_names);
    tcase_set_timeout(good, 60);
    suite_add_tcase(s, good);
    return s;
}

int main(void)
{
    if (!pj_fixture_tmpdir())
        return 1;
    SRunner *sr = srunner_create(st_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
