/* SPDX-License-Identifier: MIT */
/*
 * libpdagent's ABI and its environment, with no broker: pd_agent_opts_init()
 * and pd_agent_attach() for every opts_size a caller may pass, the
 * version number, and PD_LOG_LEVEL / PD_LOG_FILE (read once per process,
 * so each case runs this binary again, as "--attach-child DIR", in a fresh
 * process with the environment it sets). Against a broker: test_agent.c.
 */
#include <errno.h>
#include <fcntl.h>
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

#include <pdkv/pdkv.h>

#include "pd_log.h"
#include "pd_test.h"

#define OLD_SIZE offsetof(struct pd_agent_opts, log_fn) /* before log_fn existed */
#define MIN_SIZE (offsetof(struct pd_agent_opts, flags) + sizeof(uint32_t))
#define BYTE     0x5a

extern char **environ;

static char self[512];          /* this binary, for the children */

union big_opts {                 /* a newer caller's larger struct */
	struct pd_agent_opts o;
	uint8_t raw[sizeof(struct pd_agent_opts) + 16];
};

static int all_bytes(const void *p, size_t n, uint8_t b)
{
	for (size_t i = 0; i < n; i++)
		if (((const uint8_t *)p)[i] != b)
			return 0;
	return 1;
}

/* ---- pd_agent_opts_init ----------------------------------------------------------- */

static void test_opts_init_fills_what_fits(void **state)
{
	union big_opts u;

	(void)state;
	memset(&u, BYTE, sizeof(u));
	pd_agent_opts_init(&u.o, OLD_SIZE);
	assert_int_equal(u.o.opts_size, OLD_SIZE);
	assert_int_equal(u.o.roles, PD_AGENT_SEND | PD_AGENT_RECV);
	assert_int_equal(u.o.tp_size, 1);
	assert_int_equal(u.o.attach_timeout_ms, 5000);
	assert_null(u.o.broker);
	assert_int_equal(u.o.flags, 0);
	assert_true(all_bytes(u.raw + OLD_SIZE, sizeof(u) - OLD_SIZE, BYTE)); /* not its */

	memset(&u, BYTE, sizeof(u)); /* a size that ends before tp_size */
	pd_agent_opts_init(&u.o, offsetof(struct pd_agent_opts, tp_size));
	assert_int_equal(u.o.roles, PD_AGENT_SEND | PD_AGENT_RECV);
	assert_true(all_bytes(&u.o.tp_size, sizeof(u.o.tp_size), BYTE));

	memset(&u, BYTE, sizeof(u)); /* too small for opts_size itself: untouched */
	pd_agent_opts_init(&u.o, sizeof(size_t) - 1);
	assert_true(all_bytes(&u, sizeof(u), BYTE));
	pd_agent_opts_init(NULL, sizeof(u.o));

	memset(&u, BYTE, sizeof(u)); /* this version's size */
	pd_agent_opts_init(&u.o, sizeof(u.o));
	assert_int_equal(u.o.opts_size, sizeof(u.o));
	assert_null(u.o.log_fn);
	assert_null(u.o.log_ctx);
	assert_true(all_bytes(u.raw + sizeof(u.o), sizeof(u) - sizeof(u.o), BYTE));

	memset(&u, BYTE, sizeof(u)); /* a newer caller's: the fields it adds are 0 */
	pd_agent_opts_init(&u.o, sizeof(u));
	assert_int_equal(u.o.opts_size, sizeof(u));
	assert_int_equal(u.o.tp_size, 1);
	assert_true(all_bytes(u.raw + sizeof(u.o), sizeof(u) - sizeof(u.o), 0));
}

/* ---- pd_agent_attach's opts_size (no broker: -ENOENT means "accepted") ----------- */

static int attach_to_nobody(const struct pd_agent_opts *o)
{
	struct pd_agent *a = NULL;
	int rc = pd_agent_attach(o, &a);

	if (rc == 0)
		pd_agent_detach(a);
	return a || rc == 0 ? 1000 : rc; /* there is no broker to attach to */
}

static void nobody(struct pd_agent_opts *o, const char *dir)
{
	o->broker = "nobody";
	o->rundir = dir;
	o->attach_timeout_ms = 50;
}

static void test_attach_reads_only_what_opts_size_holds(void **state)
{
	char dir[] = "/tmp/pdkv-abi-XXXXXX";
	union big_opts u;

	(void)state;
	assert_non_null(mkdtemp(dir));
	/* An older caller: garbage past its struct, a log_fn among it, that
	 * the attach's first line would call if it were read. */
	memset(&u, BYTE, sizeof(u));
	pd_agent_opts_init(&u.o, OLD_SIZE);
	nobody(&u.o, dir);
	assert_int_equal(attach_to_nobody(&u.o), -ENOENT);
	u.o.opts_size = MIN_SIZE; /* the first version's fields, unpadded */
	assert_int_equal(attach_to_nobody(&u.o), -ENOENT);
	u.o.opts_size = MIN_SIZE - 1; /* flags does not fit */
	assert_int_equal(attach_to_nobody(&u.o), -EINVAL);
	u.o.opts_size = 0; /* never initialised */
	assert_int_equal(attach_to_nobody(&u.o), -EINVAL);
	u.o.opts_size = 4097;
	assert_int_equal(attach_to_nobody(&u.o), -EINVAL);

	/* A newer caller: its fields this library lacks must be unset. */
	pd_agent_opts_init(&u.o, sizeof(u));
	nobody(&u.o, dir);
	assert_int_equal(attach_to_nobody(&u.o), -ENOENT);
	u.raw[sizeof(u.o)] = 1;
	assert_int_equal(attach_to_nobody(&u.o), -EINVAL);
	assert_int_equal(rmdir(dir), 0);
}

/* ---- the version number ----------------------------------------------------------- */

static void test_version_number_matches_the_string(void **state)
{
	unsigned maj, min, pat;
	uint32_t v = pd_version_number();

	(void)state;
	assert_int_equal(sscanf(pd_version(), "%u.%u.%u", &maj, &min, &pat), 3);
	assert_int_equal(v, (maj << 16) | (min << 8) | pat);
	assert_int_equal(v, PD_VERSION_NUMBER);
	assert_int_equal(v, PD_VERSION_NUM(PD_VERSION_MAJOR, PD_VERSION_MINOR, PD_VERSION_PATCH));
	assert_string_equal(pd_version(), PD_VERSION_STRING);
	assert_true(PD_VERSION_NUM(1, 0, 0) > PD_VERSION_NUM(0, 255, 255));
#if PD_VERSION_NUMBER < PD_VERSION_NUM(0, 1, 0) /* usable in #if */
	fail();
#endif
}

/* ---- the one logger: an agent's sink beside the process's level ------------------ */

struct seen {
	int n, level;
	char line[128];
};

static void sink_fn(void *ctx, int level, const char *line)
{
	struct seen *s = ctx;

	s->n++;
	s->level = level;
	(void)snprintf(s->line, sizeof(s->line), "%s", line);
}

static void proc_fn(void *ctx, int level, const char *comp, const char *msg)
{
	struct seen *s = ctx;

	s->n++;
	s->level = level;
	(void)snprintf(s->line, sizeof(s->line), "%s|%s", comp, msg);
}

/* A sink with a function takes every level of what is logged in its
 * scope (so the gate opens to debug while it exists); outside it, the
 * process's level still filters; a sink set back to NULL closes the gate. */
static void test_log_sink_beside_the_process_level(void **state)
{
	struct pd_log_sink sink = { 0 };
	struct seen in = { 0 }, out = { 0 };
	const struct pd_log_sink *prev;

	(void)state;
	pd_log_set_level(PD_LOG_WARN);
	pd_log_set_fn(proc_fn, &out);
	pd_log_sink_set(&sink, sink_fn, &in);
	assert_int_equal(pd_log_level, PD_LOG_DEBUG);
	PD_LOG(DEBUG, slot, "outside %d", 1); /* the process's: above its level */
	assert_int_equal(out.n, 0);
	PD_LOG(WARN, slot, "outside %d", 2);
	assert_int_equal(out.n, 1);
	assert_string_equal(out.line, "slot|outside 2");
	prev = pd_log_scope_enter(&sink);
	PD_LOG(DEBUG, shm, "inside %d", 3);
	pd_log_scope_leave(prev);
	assert_int_equal(in.n, 1);
	assert_int_equal(in.level, PD_LOG_DEBUG);
	assert_string_equal(in.line, "shm: inside 3");
	assert_int_equal(out.n, 1);
	pd_log_emit_to(&sink, PD_LOG_ERR, "agent", __FILE__, __LINE__, "to %s", "it");
	assert_int_equal(in.level, PD_LOG_ERR);
	assert_string_equal(in.line, "agent: to it");
	pd_log_sink_set(&sink, NULL, NULL);
	assert_int_equal(pd_log_level, PD_LOG_WARN);
	prev = pd_log_scope_enter(&sink); /* a sink without a function: the process's */
	PD_LOG(WARN, shm, "inside %d", 4);
	pd_log_scope_leave(prev);
	assert_int_equal(in.n, 2);
	assert_int_equal(out.n, 2);
	pd_log_set_fn(NULL, NULL);
	pd_log_set_level(PD_LOG_NONE);
	assert_int_equal(pd_log_level, PD_LOG_NONE);
}

/* ---- PD_LOG_LEVEL / PD_LOG_FILE -------------------------------------------------- */

/* The child: attach to no broker in dir; 0 when that is -ENOENT. */
static int attach_child(const char *dir)
{
	struct pd_agent_opts o;

	pd_agent_opts_init(&o, sizeof(o));
	nobody(&o, dir);
	return attach_to_nobody(&o) == -ENOENT ? 0 : 1;
}

struct child {
	const char *dir;
	const char *level;           /* NULL: PD_LOG_LEVEL unset */
	int file;                    /* PD_LOG_FILE=dir/log */
};

/* Environment of the child: ours without PD_LOG_*, PDKV_*, then its own. */
static int exec_child(void *arg)
{
	const struct child *c = arg;
	char *env[256], lv[64], file[128], err[128], flag[] = "--attach-child", dir[64];
	int n = 0, fd;

	for (char **e = environ; *e && n < 250; e++)
		if (strncmp(*e, "PD_LOG_", 7) && strncmp(*e, "PDKV_", 5))
			env[n++] = *e;
	(void)snprintf(lv, sizeof(lv), "PD_LOG_LEVEL=%s", c->level ? c->level : "");
	(void)snprintf(file, sizeof(file), "PD_LOG_FILE=%s/log", c->dir);
	if (c->level)
		env[n++] = lv;
	if (c->file)
		env[n++] = file;
	env[n] = NULL;
	(void)snprintf(err, sizeof(err), "%s/stderr", c->dir);
	fd = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	if (fd < 0 || dup2(fd, 2) < 0)
		return 90;
	(void)snprintf(dir, sizeof(dir), "%s", c->dir);
	(void)execve(self, (char *[]){ self, flag, dir, NULL }, env);
	return 91;
}

/* Run a child; what it wrote to dir/log and to its stderr. */
static void run_child(const char *level, int file, char *log, size_t loglen, char *err,
		      size_t errlen)
{
	char dir[] = "/tmp/pdkv-abi-XXXXXX", path[128];
	struct child c = { .dir = dir, .level = level, .file = file };
	char *out[2] = { log, err };
	size_t len[2] = { loglen, errlen };
	const char *name[2] = { "log", "stderr" };

	assert_non_null(mkdtemp(dir));
	assert_int_equal(pd_test_wait(pd_test_fork(exec_child, &c), 5000), 0);
	for (int i = 0; i < 2; i++) {
		FILE *fp;
		size_t n = 0;

		(void)snprintf(path, sizeof(path), "%s/%s", dir, name[i]);
		fp = fopen(path, "r");
		if (fp) {
			n = fread(out[i], 1, len[i] - 1, fp);
			(void)fclose(fp);
			(void)unlink(path);
		}
		out[i][n] = '\0';
	}
	assert_int_equal(rmdir(dir), 0);
}

#define ATTACHING " debug agent: attaching to "
#define FAILED    " warn agent: attach to broker 'nobody' failed: "

static void test_log_env_debug_writes_the_file(void **state)
{
	char log[8192], err[8192];

	(void)state;
	run_child("debug", 1, log, sizeof(log), err, sizeof(err));
	assert_non_null(strstr(log, ATTACHING));
	assert_non_null(strstr(log, FAILED));
	assert_string_equal(err, ""); /* all of it in the file */
}

static void test_log_env_level_filters(void **state)
{
	char log[8192], err[8192];

	(void)state;
	run_child("WARN", 1, log, sizeof(log), err, sizeof(err));
	assert_non_null(strstr(log, FAILED));
	assert_null(strstr(log, ATTACHING));
}

static void test_log_env_without_a_file_is_stderr(void **state)
{
	char log[8192], err[8192];

	(void)state;
	run_child("debug", 0, log, sizeof(log), err, sizeof(err));
	assert_string_equal(log, "");
	assert_non_null(strstr(err, ATTACHING));
}

/* Silent by default: no PD_LOG_LEVEL (PD_LOG_FILE alone), or "none". */
static void test_log_env_silent_by_default(void **state)
{
	char log[8192], err[8192];

	(void)state;
	run_child(NULL, 1, log, sizeof(log), err, sizeof(err));
	assert_string_equal(log, "");
	assert_string_equal(err, "");
	run_child("none", 1, log, sizeof(log), err, sizeof(err));
	assert_string_equal(log, "");
	assert_string_equal(err, "");
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_opts_init_fills_what_fits),
		cmocka_unit_test(test_attach_reads_only_what_opts_size_holds),
		cmocka_unit_test(test_version_number_matches_the_string),
		cmocka_unit_test(test_log_sink_beside_the_process_level),
		cmocka_unit_test(test_log_env_debug_writes_the_file),
		cmocka_unit_test(test_log_env_level_filters),
		cmocka_unit_test(test_log_env_without_a_file_is_stderr),
		cmocka_unit_test(test_log_env_silent_by_default),
	};
	ssize_t n;

	if (argc == 3 && !strcmp(argv[1], "--attach-child"))
		return attach_child(argv[2]);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	if (n <= 0)
		return 1;
	self[n] = '\0';
	return cmocka_run_group_tests(tests, NULL, NULL);
}
