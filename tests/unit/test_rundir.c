/* SPDX-License-Identifier: MIT */
/*
 * The rundir (shm/pd_rundir.c): a broker with --group gives the directory
 * it makes, or one of its own the group cannot enter, to the group (mode
 * 2750); one the group can enter, or of another owner, is left as it is.
 * A client's path: the directory it is told, or its own default first.
 */
#include <errno.h>
#include <grp.h>
#include <limits.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "pd_rundir.h"

struct fx {
	char dir[64];
	char path[128];
	gid_t gid;          /* a group of ours that is not our egid; (gid_t)-1: none */
};

/* A group we may give files to: any as root, else one of getgroups(). */
static gid_t other_group(void)
{
	gid_t g[NGROUPS_MAX];
	int n;

	if (geteuid() == 0)
		return getegid() == 65534 ? 65533 : 65534;
	n = getgroups(NGROUPS_MAX, g);
	for (int i = 0; i < n; i++)
		if (g[i] != getegid())
			return g[i];
	return (gid_t)-1;
}

static int setup(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	(void)snprintf(f->dir, sizeof(f->dir), "/tmp/pdkv-rundir-XXXXXX");
	if (!mkdtemp(f->dir)) {
		free(f);
		return -1;
	}
	(void)snprintf(f->path, sizeof(f->path), "%s/run", f->dir);
	f->gid = other_group();
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	(void)unlink(f->path);
	(void)rmdir(f->path);
	(void)rmdir(f->dir);
	free(f);
	return 0;
}

static void need_group(const struct fx *f)
{
	if (f->gid == (gid_t)-1) {
		(void)printf("no group of ours but our egid: cannot give a directory to one\n");
		skip();
	}
}

static struct stat stat_of(const char *path)
{
	struct stat st;

	assert_int_equal(stat(path, &st), 0);
	return st;
}

static void test_made_for_a_group(void **state)
{
	struct fx *f = *state;
	struct stat st;
	char err[256] = "";

	need_group(f);
	assert_int_equal(pd_rundir_make(f->path, f->gid, err, sizeof(err)), 0);
	st = stat_of(f->path);
	assert_true(S_ISDIR(st.st_mode));
	assert_int_equal(st.st_gid, f->gid);
	assert_int_equal(st.st_mode & 07777, 02750);
	/* Again: nothing changes, no error. */
	assert_int_equal(pd_rundir_make(f->path, f->gid, err, sizeof(err)), 0);
	assert_int_equal(stat_of(f->path).st_mode & 07777, 02750);
}

static void test_without_group_as_before(void **state)
{
	struct fx *f = *state;
	mode_t um = umask(022);
	struct stat st;

	assert_int_equal(pd_rundir_make(f->path, (gid_t)-1, NULL, 0), 0);
	(void)umask(um);
	st = stat_of(f->path);
	assert_int_equal(st.st_mode & 07777, 0750);
	assert_int_equal(st.st_gid, stat_of(f->dir).st_gid);
}

/* One of ours the group cannot enter (made without --group before) is
 * given to it; one it can enter keeps its mode. */
static void test_ours_fixed_only_when_the_group_cannot_enter(void **state)
{
	struct fx *f = *state;
	struct stat st;

	need_group(f);
	assert_int_equal(mkdir(f->path, 0700), 0);
	assert_int_equal(pd_rundir_make(f->path, f->gid, NULL, 0), 0);
	st = stat_of(f->path);
	assert_int_equal(st.st_gid, f->gid);
	assert_int_equal(st.st_mode & 07777, 02750);
	assert_int_equal(chmod(f->path, 0711), 0); /* anyone may enter */
	assert_int_equal(chown(f->path, (uid_t)-1, getegid()), 0);
	assert_int_equal(pd_rundir_make(f->path, f->gid, NULL, 0), 0);
	st = stat_of(f->path);
	assert_int_equal(st.st_gid, getegid());
	assert_int_equal(st.st_mode & 07777, 0711);
}

/* Another user's directory is not ours to change (root only: chown). */
static void test_of_another_owner_left_alone(void **state)
{
	struct fx *f = *state;
	struct stat st;

	if (geteuid() != 0) {
		(void)printf("not root: cannot make a directory of another user's\n");
		skip();
	}
	assert_int_equal(mkdir(f->path, 0700), 0);
	assert_int_equal(chown(f->path, 65534, 65534), 0);
	assert_int_equal(pd_rundir_make(f->path, 4242, NULL, 0), 0);
	st = stat_of(f->path);
	assert_int_equal(st.st_uid, 65534);
	assert_int_equal(st.st_gid, 65534);
	assert_int_equal(st.st_mode & 07777, 0700);
}

static void test_refused(void **state)
{
	struct fx *f = *state;
	char err[256] = "", missing[160];
	FILE *file = fopen(f->path, "w");

	assert_non_null(file);
	(void)fclose(file);
	assert_int_equal(pd_rundir_make(f->path, (gid_t)-1, err, sizeof(err)), -ENOTDIR);
	assert_non_null(strstr(err, f->path));
	(void)snprintf(missing, sizeof(missing), "%s/no/such", f->dir);
	assert_int_equal(pd_rundir_make(missing, (gid_t)-1, err, sizeof(err)), -ENOENT);
	assert_non_null(strstr(err, "--rundir"));
	assert_int_equal(pd_rundir_make(NULL, (gid_t)-1, NULL, 0), -EINVAL);
}

static void test_path(void **state)
{
	char buf[64];

	(void)state;
	assert_int_equal(pd_rundir_path("/x", "b", ".sock", buf, sizeof(buf)), 0);
	assert_string_equal(buf, "/x/b.sock");
	assert_int_equal(pd_rundir_path("/x", "b", ".sock", buf, 9), -ENAMETOOLONG);
	assert_int_equal(pd_rundir_path("/x", NULL, ".sock", buf, sizeof(buf)), -EINVAL);
	assert_int_equal(pd_rundir_path(NULL, "b", ".sock", buf, 4), -ENAMETOOLONG);
}

/* Not root: the user's own default comes first when the file is there
 * ($XDG_RUNTIME_DIR/pdkv here); root looks in /run/pdkv only. */
static void test_client_default_first(void **state)
{
	struct fx *f = *state;
	char sock[192], buf[192];
	FILE *file;

	if (geteuid() == 0) {
		assert_int_equal(pd_rundir_path(NULL, "b", ".sock", buf, sizeof(buf)), 0);
		assert_string_equal(buf, PD_RUNDIR_SYSTEM "/b.sock");
		return;
	}
	assert_int_equal(mkdir(f->path, 0700), 0);
	(void)snprintf(sock, sizeof(sock), "%s/pdkv", f->path);
	assert_int_equal(mkdir(sock, 0700), 0);
	(void)snprintf(sock, sizeof(sock), "%s/pdkv/b.sock", f->path);
	file = fopen(sock, "w");
	assert_non_null(file);
	(void)fclose(file);
	assert_int_equal(setenv("XDG_RUNTIME_DIR", f->path, 1), 0);
	assert_int_equal(pd_rundir_path(NULL, "b", ".sock", buf, sizeof(buf)), 0);
	assert_string_equal(buf, sock);
	(void)unlink(sock);
	(void)snprintf(sock, sizeof(sock), "%s/pdkv", f->path);
	(void)rmdir(sock);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_made_for_a_group, setup, teardown),
		cmocka_unit_test_setup_teardown(test_without_group_as_before, setup, teardown),
		cmocka_unit_test_setup_teardown(test_ours_fixed_only_when_the_group_cannot_enter,
						setup, teardown),
		cmocka_unit_test_setup_teardown(test_of_another_owner_left_alone, setup, teardown),
		cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
		cmocka_unit_test_setup_teardown(test_path, setup, teardown),
		cmocka_unit_test_setup_teardown(test_client_default_first, setup, teardown),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
