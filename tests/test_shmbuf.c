/* test_shmbuf.c — client/shmbuf: the host shared-memory segments libprojd
 * creates for buffers and rings, where /dev/shm cannot hold them. (Names,
 * mode, zero fill and unlink are in test_client_offline's test_shmbuf.) */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "client/shmbuf.h"

/* 1 when /dev/shm holds an object whose name starts with this process's
 * prefix: something a failed create left behind. */
static int own_objects_left(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "ls /dev/shm | grep -q '^projd-%ld-'", (long)getpid());
    return system(cmd) == 0;
}

/* Every page is backed when create returns: a sparse object would let the
 * first store past what tmpfs can hold kill the process with SIGBUS. */
START_TEST(shmbuf_pages_are_reserved)
{
    char err[256];
    pj_shmbuf a;
    size_t size = 4u << 20;
    ck_assert_int_eq(pj_shmbuf_create(&a, size, err, sizeof err), 0);
    int fd = shm_open(a.name, O_RDONLY, 0);
    ck_assert_int_ge(fd, 0);
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    close(fd);
    int zero = 1;
    for (size_t i = 0; i < size; i += 4096)
        zero &= ((unsigned char *)a.ptr)[i] == 0;
    char name[PJ_SHMBUF_NAME_MAX];
    snprintf(name, sizeof name, "%s", a.name);
    pj_shmbuf_destroy(&a); /* first: a failed assertion leaves nothing in /dev/shm */
    ck_assert_msg((unsigned long long)st.st_blocks * 512 >= size,
                  "%s: %llu bytes of %zu backed after create", name,
                  (unsigned long long)st.st_blocks * 512, size);
    ck_assert_msg(zero, "not zero-filled");
}
END_TEST

/* A segment larger than /dev/shm is refused with ENOSPC and a message that
 * says where, and leaves no object behind (before, it was created, and the
 * first store past the free space raised SIGBUS). */
START_TEST(shmbuf_larger_than_dev_shm_is_refused)
{
    struct statvfs vfs;
    ck_assert_int_eq(statvfs("/dev/shm", &vfs), 0);
    /* tmpfs without size= has no limit to pass; every usual /dev/shm has one. */
    ck_assert_msg(vfs.f_blocks > 0, "/dev/shm reports no size limit");
    size_t size = (size_t)vfs.f_blocks * vfs.f_frsize + (64u << 20);
    char err[256];
    pj_shmbuf a;
    int rc = pj_shmbuf_create(&a, size, err, sizeof err);
    if (rc == 0)
        pj_shmbuf_destroy(&a);
    ck_assert_msg(rc == -ENOSPC, "create of %zu bytes: %d (%s)", size, rc, rc ? err : "created");
    ck_assert_msg(strstr(err, "/dev/shm") && strstr(err, "No space left"), "%s", err);
    ck_assert_ptr_null(a.ptr);
    ck_assert_int_eq(a.linked, 0);
    ck_assert_int_eq(own_objects_left(), 0);
    /* The next create works. */
    ck_assert_int_eq(pj_shmbuf_create(&a, 4096, err, sizeof err), 0);
    pj_shmbuf_destroy(&a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shmbuf");
    TCase *tc = tcase_create("shmbuf");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, shmbuf_pages_are_reserved);
    tcase_add_test(tc, shmbuf_larger_than_dev_shm_is_refused);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
