/* SPDX-License-Identifier: MIT */
/* Broker configuration: flags, files, validation, help and dump, all
 * driven by one table. Negative cases first. */
#include <errno.h>
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

#include "pd_config.h"
#include "pd_log.h"
#include "pd_test.h"

#define ERRLEN 512
#define MAXARGS 16
#define SEC UINT64_C(1000000000)
#define MS UINT64_C(1000000)

#define ARGS(...) ((const char *const[]){ __VA_ARGS__, NULL })

/* Parse args (NULL-terminated, without argv[0]) over c. */
static int run(struct pd_config *c, char *err, const char *const *args)
{
	static const char prog[] = "pdbroker";
	char store[MAXARGS][PD_CFG_PATH_MAX + 64];
	char *argv[MAXARGS + 1];
	int argc = 0;

	argv[argc++] = strcpy(store[0], prog);
	for (; *args; args++, argc++) {
		assert_true(argc < MAXARGS && strlen(*args) < sizeof(store[0]));
		argv[argc] = strcpy(store[argc], *args);
	}
	argv[argc] = NULL;
	err[0] = '\0';
	return pd_config_parse_args(c, argc, argv, err, ERRLEN);
}

static void defaults_named(struct pd_config *c)
{
	char err[ERRLEN];

	pd_config_defaults(c);
	assert_int_equal(run(c, err, ARGS("--name", "b0")), 0);
}

/* A file holding n bytes of text; path gets its name. */
static void write_file(char *path, size_t len, const char *text, size_t n)
{
	int fd;

	(void)snprintf(path, len, "/tmp/pd-test-cfg-%d-XXXXXX", (int)getpid());
	fd = mkstemp(path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, n), (ssize_t)n);
	assert_int_equal(close(fd), 0);
}

static int load_text(struct pd_config *c, const char *text, char *err)
{
	char path[64];
	int rc;

	write_file(path, sizeof(path), text, strlen(text));
	err[0] = '\0';
	rc = pd_config_load_file(c, path, err, ERRLEN);
	assert_int_equal(unlink(path), 0);
	return rc;
}

static void assert_has(const char *hay, const char *needle)
{
	if (!strstr(hay, needle))
		fail_msg("'%s' does not contain '%s'", hay, needle);
}

static void assert_same(const struct pd_config *a, const struct pd_config *b)
{
	assert_string_equal(a->name, b->name);
	assert_string_equal(a->rundir, b->rundir);
	assert_string_equal(a->ctrl, b->ctrl);
	assert_string_equal(a->data, b->data);
	assert_string_equal(a->proxy, b->proxy);
	assert_string_equal(a->group, b->group);
	assert_string_equal(a->log_file, b->log_file);
	assert_string_equal(a->rdma_dev, b->rdma_dev);
	assert_int_equal(a->rdma_qps, b->rdma_qps);
	assert_int_equal(a->slot_size, b->slot_size);
	assert_int_equal(a->admission_timeout_ns, b->admission_timeout_ns);
	assert_int_equal(a->recv_ttl_ns, b->recv_ttl_ns);
	assert_int_equal(a->heartbeat_ns, b->heartbeat_ns);
	assert_int_equal(a->send_slots, b->send_slots);
	assert_int_equal(a->recv_slots, b->recv_slots);
	assert_int_equal(a->data_threads, b->data_threads);
	assert_int_equal(a->log_level, b->log_level);
	assert_int_equal(a->notify_failures, b->notify_failures);
	assert_memory_equal(&a->transport, &b->transport, sizeof(a->transport));
	assert_memory_equal(&a->require, &b->require, sizeof(a->require));
}

/* ---- negative cases ---------------------------------------------------- */

struct bad {
	const char *flag;
	const char *value;
	const char *why;     /* expected in the message besides the flag; may be NULL */
};

static const char long_name[] = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
				"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"; /* 64 characters */

static const struct bad bad_values[] = {
	{ "name", "bad name", "A-Za-z0-9._-" }, { "name", "a/b", NULL },
	{ "name", long_name, NULL }, { "rundir", "", NULL }, { "rundir", "/tmp/a\x01", NULL },
	{ "rundir", " /lead", NULL }, { "ctrl", "http://h:1", "tcp://HOST:PORT" },
	{ "ctrl", "tcp://host", NULL }, { "ctrl", "tcp://:1", NULL }, { "ctrl", "tcp://h:0", NULL },
	{ "ctrl", "tcp://h:65536", NULL }, { "ctrl", "tcp://h:1x", NULL },
	{ "ctrl", "tcp://h/x:1", NULL }, { "ctrl", "ipc://", NULL }, { "ctrl", "", NULL },
	{ "data", "host", "HOST:PORT" }, { "data", "h:70000", NULL },
	{ "data", ":80", NULL }, { "data", "tcp://h:1", NULL },
	{ "send-slots", "-1", "not a number" }, { "send-slots", "1.5", NULL },
	{ "send-slots", "x", NULL }, { "send-slots", "1K", NULL },
	{ "send-slots", "16777217", "out of range 0..16777216" },
	{ "send-slots", "99999999999999999999", "too large" }, { "recv-slots", "-1", NULL },
	{ "recv-slots", "", NULL }, { "recv-slots", "16777217", NULL },
	{ "slot-size", "5000", "5000 is not a multiple of 4096" },
	{ "slot-size", "0", "out of range 4K..1G" }, { "slot-size", "2G", "2G is out of range" },
	{ "slot-size", "99999999999G", "too large" }, { "slot-size", "1.5M", "not a size" },
	{ "slot-size", "-1", "not a size" }, { "slot-size", "1MB", NULL },
	{ "slot-size", "4K ", NULL }, { "slot-size", " 4K", NULL }, { "slot-size", "", NULL },
	{ "slot-size", "1Q", NULL }, { "slot-size", "18446744073709551616", "too large" },
	{ "proxy", "foo", NULL }, { "proxy", "tcp://h:0", NULL },
	{ "transport", "udp", "not one of rdma|tcp|shm" }, { "transport", "tcp,tcp", "twice" },
	{ "transport", "", "needs 1..3" }, { "transport", "tcp,,rdma", "empty name" },
	{ "transport", "rdma,tcp,shm,tcp", "twice" }, { "require", "udp", NULL },
	{ "require", "shm,shm", "twice" }, { "admission-timeout", "0", "out of range 1ms..86400s" },
	{ "admission-timeout", "-5", "not a duration" }, { "admission-timeout", "1.5", NULL },
	{ "admission-timeout", "10m", NULL }, { "admission-timeout", "86401", NULL },
	{ "recv-ttl", "0", NULL }, { "recv-ttl", "abc", NULL }, { "heartbeat", "0ms", NULL },
	{ "heartbeat", "3601", NULL }, { "heartbeat", "99999999999999s", "too large" },
	{ "data-threads", "0", "out of range 1..64" }, { "data-threads", "65", NULL },
	{ "rdma-qps", "0", "out of range 1..16" }, { "rdma-qps", "17", NULL },
	{ "max-agents", "0", "out of range 1..256" }, { "max-agents", "257", "257 is out of range" },
	{ "max-agents", "-1", "not a number" },
	{ "rdma-dev", "mlx5 0", NULL }, { "rdma-dev", long_name, NULL },
	{ "group", "a b", NULL }, { "group", long_name, "longer than 63" },
	{ "notify-failures", "maybe", "true or false" }, { "log-level", "loud", "none|err" },
	{ "log-level", "", NULL }, { "log-file", "/x\x7f", NULL }, { "help", "2", NULL },
	{ "version", "maybe", NULL },
};

static void check_bad(const struct bad *b, const char *err, int rc)
{
	char flag[64];

	(void)snprintf(flag, sizeof(flag), "--%s", b->flag);
	if (rc != -EINVAL)
		fail_msg("--%s '%s': rc %d", b->flag, b->value, rc);
	assert_has(err, flag);
	if (b->why)
		assert_has(err, b->why);
}

static void test_every_flag_rejects_bad_values(void **state)
{
	struct pd_config c, before;
	char err[ERRLEN], eq[PD_CFG_PATH_MAX];
	int bools;

	(void)state;
	defaults_named(&before);
	for (size_t i = 0; i < PD_ARRAY_SIZE(bad_values); i++) {
		const struct bad *b = &bad_values[i];

		(void)snprintf(eq, sizeof(eq), "--%s=%s", b->flag, b->value);
		c = before;
		check_bad(b, err, run(&c, err, ARGS(eq)));
		assert_same(&c, &before);
		bools = !strcmp(b->flag, "notify-failures") || !strcmp(b->flag, "help") ||
			!strcmp(b->flag, "version");
		if (bools || b->value[0] == '\0')
			continue;   /* a bare boolean takes no word; "" is not a word */
		(void)snprintf(eq, sizeof(eq), "--%s", b->flag);
		check_bad(b, err, run(&c, err, ARGS(eq, b->value)));
		assert_same(&c, &before);
	}
}

static void test_unknown_options_and_stray_words(void **state)
{
	struct pd_config c;
	char err[ERRLEN];

	(void)state;
	defaults_named(&c);
	assert_int_equal(run(&c, err, ARGS("--bogus")), -EINVAL);
	assert_string_equal(err, "unknown option --bogus");
	assert_int_equal(run(&c, err, ARGS("--bogus=1")), -EINVAL);
	assert_string_equal(err, "unknown option --bogus");
	assert_int_equal(run(&c, err, ARGS("--slot")), -EINVAL);   /* no prefixes */
	assert_has(err, "unknown option --slot");
	assert_int_equal(run(&c, err, ARGS("-h")), -EINVAL);
	assert_has(err, "unexpected argument '-h'");
	assert_int_equal(run(&c, err, ARGS("--")), -EINVAL);
	assert_int_equal(run(&c, err, ARGS("--name", "x", "extra")), -EINVAL);
	assert_has(err, "'extra'");
	assert_int_equal(run(&c, err, ARGS("--notify-failures", "true")), -EINVAL);
	assert_int_equal(pd_config_parse_args(NULL, 0, NULL, err, ERRLEN), -EINVAL);
	assert_int_equal(pd_config_parse_args(&c, 2, NULL, NULL, 0), -EINVAL);
}

static void test_missing_values(void **state)
{
	struct pd_config c;
	char err[ERRLEN];

	(void)state;
	defaults_named(&c);
	assert_int_equal(run(&c, err, ARGS("--slot-size")), -EINVAL);
	assert_string_equal(err, "--slot-size: missing value");
	assert_int_equal(run(&c, err, ARGS("--name", "--rundir", "/x")), -EINVAL);
	assert_string_equal(err, "--name: missing value");
	assert_int_equal(run(&c, err, ARGS("--config")), -EINVAL);
	assert_string_equal(err, "--config: missing value");
	assert_string_equal(c.name, "b0");
}

static void test_failed_parse_changes_nothing(void **state)
{
	struct pd_config c, before;
	char err[ERRLEN];

	(void)state;
	defaults_named(&before);
	c = before;
	assert_int_equal(run(&c, err, ARGS("--slot-size", "8K", "--data-threads", "9",
					   "--heartbeat", "0")), -EINVAL);
	assert_has(err, "--heartbeat");
	assert_same(&c, &before);
}

static void test_validate_rejects(void **state)
{
	struct pd_config c, good;
	char err[ERRLEN];

	(void)state;
	pd_config_defaults(&c);
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_string_equal(err, "--name is required");
	assert_int_equal(run(&c, err, ARGS("--name", "x", "--name=")), 0);   /* unset again */
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_string_equal(err, "--name is required");
	assert_int_equal(pd_config_validate(NULL, NULL, 0), -EINVAL);
	defaults_named(&good);
	assert_int_equal(pd_config_validate(&good, err, ERRLEN), 0);

	c = good;
	c.send_slots = c.recv_slots = 0;
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--send-slots, --recv-slots");
	c = good;
	assert_int_equal(run(&c, err, ARGS("--require", "rdma")), 0);
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_string_equal(err, "--require: rdma is not in --transport");
	assert_int_equal(run(&c, err, ARGS("--transport", "tcp,rdma")), 0);
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), 0);

	c = good;
	c.slot_size = 5000;   /* fields set in code are checked too */
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_string_equal(err, "--slot-size: 5000 is not a multiple of 4096");
	c = good;
	c.data_threads = 0;
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_string_equal(err, "--data-threads: 0 is out of range 1..64");
	c = good;
	c.heartbeat_ns = 1500;
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--heartbeat");
	c = good;
	c.log_level = 9;
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--log-level");
	c = good;
	c.transport.order[1] = PD_XPORT_TCP;
	c.transport.n = 2;
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--transport");
	c = good;
	memset(c.ctrl, 'a', sizeof(c.ctrl));
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--ctrl");
	c = good;
	(void)strcpy(c.data, "nohost");
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), -EINVAL);
	assert_has(err, "--data");
}

static void test_file_errors_name_line_and_flag(void **state)
{
	static const struct {
		const char *text;
		const char *want;
	} cases[] = {
		{ "name = a\nslot-size = 5000\n",
		  ":2: --slot-size: 5000 is not a multiple of 4096" },
		{ "# c\n\n  bogus = 1\n", ":3: unknown option --bogus" },
		{ "name a\n", ":1: expected 'key = value'" },
		{ " = x\n", ":1: expected 'key = value'" },
		{ "help = true\n", ":1: --help: only on the command line" },
		{ "config = /etc/x\n", ":1: --config: only on the command line" },
		{ "name = b\n\n\n\ntransport = tcp,tcp\n", ":5: --transport: tcp given twice" },
		{ "slot-size = 1M # one meg\n", ":1: --slot-size: '1M # one meg' is not a size" },
		{ "--name = x\n", ":1: write '--name' without the dashes" },
	};
	struct pd_config c, before;
	char err[ERRLEN], path[64], big[5000];

	(void)state;
	defaults_named(&before);
	for (size_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		c = before;
		assert_int_equal(load_text(&c, cases[i].text, err), -EINVAL);
		assert_has(err, "/tmp/pd-test-cfg-");
		assert_has(err, cases[i].want);
		assert_same(&c, &before);   /* line 1 of case 0 was not applied */
	}
	write_file(path, sizeof(path), "name = a\0b\n", 11);
	assert_int_equal(pd_config_load_file(&c, path, err, ERRLEN), -EINVAL);
	assert_has(err, ":1: NUL byte");
	assert_int_equal(unlink(path), 0);
	memset(big, 'x', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	assert_int_equal(load_text(&c, big, err), -EINVAL);
	assert_has(err, ":1: line longer than 4096");
}

static void test_unreadable_files(void **state)
{
	struct pd_config c;
	char err[ERRLEN], path[64];

	(void)state;
	defaults_named(&c);
	assert_int_equal(pd_config_load_file(&c, "/nonexistent/pd.conf", err, ERRLEN), -ENOENT);
	assert_has(err, "--config: cannot open '/nonexistent/pd.conf'");
	assert_int_equal(pd_config_load_file(&c, "/", err, ERRLEN), -EISDIR);
	assert_has(err, "--config: cannot read '/'");
	assert_int_equal(run(&c, err, ARGS("--config", "/nonexistent/pd.conf")), -ENOENT);
	assert_int_equal(pd_config_load_file(&c, NULL, err, ERRLEN), -EINVAL);
	if (geteuid() == 0)
		return;   /* root reads anything: no -EACCES to see */
	write_file(path, sizeof(path), "name = a\n", 9);
	assert_int_equal(chmod(path, 0), 0);
	assert_int_equal(pd_config_load_file(&c, path, err, ERRLEN), -EACCES);
	assert_int_equal(unlink(path), 0);
}

/* ---- positive cases ---------------------------------------------------- */

static void test_defaults(void **state)
{
	struct pd_config c;
	char rundir[PD_CFG_PATH_MAX];

	(void)state;
	pd_config_defaults(&c);
	assert_int_equal(pd_config_default_rundir(rundir, sizeof(rundir)), 0);
	assert_string_equal(c.name, "");
	assert_string_equal(c.rundir, rundir);
	if (geteuid() == 0)
		assert_string_equal(c.rundir, "/run/pdkv");
	assert_string_equal(c.ctrl, "tcp://127.0.0.1:17500");
	assert_string_equal(c.data, "127.0.0.1:17600");
	assert_string_equal(c.proxy, "");
	assert_string_equal(c.group, "");
	assert_string_equal(c.log_file, "");
	assert_int_equal(c.send_slots, 256);
	assert_int_equal(c.recv_slots, 256);
	assert_int_equal(c.slot_size, 1u << 20);
	assert_int_equal(c.transport.mask, 1u << PD_XPORT_TCP);
	assert_int_equal(c.transport.n, 1);
	assert_int_equal(c.transport.order[0], PD_XPORT_TCP);
	assert_int_equal(c.require.mask, 0);
	assert_int_equal(c.require.n, 0);
	assert_int_equal(c.admission_timeout_ns, 30 * SEC);
	assert_int_equal(c.recv_ttl_ns, 120 * SEC);
	assert_int_equal(c.heartbeat_ns, 1 * SEC);
	assert_int_equal(c.data_threads, 2);
	assert_int_equal(c.max_agents, 32);
	assert_string_equal(c.rdma_dev, "");
	assert_int_equal(c.rdma_qps, 2);
	assert_int_equal(c.log_level, PD_LOG_INFO);
	assert_int_equal(c.notify_failures, 0);
	assert_int_equal(c.show_help, 0);
	assert_int_equal(c.show_version, 0);
}

struct rundir_case {
	const char *xdg;     /* NULL: unset */
	const char *want;
};

/* In a child that dropped root: the non-root branches. */
static int rundir_child(void *arg)
{
	static const struct rundir_case cases[] = {
		{ "/run/user/65534", "/run/user/65534/pdkv" },
		{ NULL, "/tmp/pdkv-65534" },
		{ "relative", "/tmp/pdkv-65534" },
		{ "", "/tmp/pdkv-65534" },
	};
	char buf[PD_CFG_PATH_MAX], longx[PD_CFG_PATH_MAX + 8];

	(void)arg;
	if (setresuid(65534, 65534, 65534) != 0)
		return 10;
	for (size_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		if (cases[i].xdg ? setenv("XDG_RUNTIME_DIR", cases[i].xdg, 1) :
				   unsetenv("XDG_RUNTIME_DIR"))
			return 11;
		if (pd_config_default_rundir(buf, sizeof(buf)) || strcmp(buf, cases[i].want))
			return 20 + (int)i;
	}
	memset(longx, 'd', sizeof(longx) - 1);
	longx[0] = '/';
	longx[sizeof(longx) - 1] = '\0';
	if (setenv("XDG_RUNTIME_DIR", longx, 1) || pd_config_default_rundir(buf, sizeof(buf)) ||
	    strcmp(buf, "/tmp/pdkv-65534"))
		return 30;
	return pd_config_default_rundir(buf, 8) == -ENAMETOOLONG ? 0 : 31;
}

static void test_default_rundir(void **state)
{
	char buf[PD_CFG_PATH_MAX];
	pid_t pid;

	(void)state;
	assert_int_equal(pd_config_default_rundir(NULL, 10), -EINVAL);
	assert_int_equal(pd_config_default_rundir(buf, 3), -ENAMETOOLONG);
	assert_int_equal(pd_config_default_rundir(buf, sizeof(buf)), 0);
	if (geteuid() != 0) {
		assert_true(strncmp(buf, "/tmp/pdkv-", 10) == 0 || strstr(buf, "/pdkv"));
		skip();   /* the other branches need root to switch users */
	}
	assert_string_equal(buf, "/run/pdkv");
	pid = pd_test_fork(rundir_child, NULL);
	assert_true(pid > 0);
	assert_int_equal(pd_test_wait(pid, 10000), 0);
}

struct good {
	const char *flag;
	const char *value;
	const char *canon;   /* as pd_config_dump() prints it */
};

static const struct good good_values[] = {
	{ "name", "b-1.x_Y", "b-1.x_Y" }, { "rundir", "/var/run/my dir", "/var/run/my dir" },
	{ "ctrl", "tcp://0.0.0.0:17500", "tcp://0.0.0.0:17500" },
	{ "ctrl", "tcp://*:1", "tcp://*:1" }, { "ctrl", "tcp://127.0.0.1:*", "tcp://127.0.0.1:*" },
	{ "ctrl", "tcp://[::1]:65535", "tcp://[::1]:65535" },
	{ "ctrl", "ipc:///tmp/pd.sock", "ipc:///tmp/pd.sock" },
	{ "data", "10.0.0.1:1", "10.0.0.1:1" }, { "data", "[fe80::1%eth0]:17600", NULL },
	{ "send-slots", "0", "0" }, { "send-slots", "16777216", "16777216" },
	{ "recv-slots", "1024", "1024" }, { "slot-size", "4096", "4K" },
	{ "slot-size", "1G", "1G" }, { "slot-size", "12288", "12K" },
	{ "proxy", "tcp://proxy.local:9000", "tcp://proxy.local:9000" }, { "proxy", "", "" },
	{ "transport", "rdma, tcp ,shm", "rdma,tcp,shm" }, { "transport", "SHM,tcp", "shm,tcp" },
	{ "require", "rdma", "rdma" }, { "require", "", "" },
	{ "admission-timeout", "5", "5s" }, { "admission-timeout", "86400s", "86400s" },
	{ "recv-ttl", "250ms", "250ms" }, { "recv-ttl", "2000ms", "2s" },
	{ "heartbeat", "1ms", "1ms" }, { "data-threads", "64", "64" },
	{ "data-threads", "1", "1" }, { "group", "pdkv", "pdkv" },
	{ "rdma-dev", "rxe0", "rxe0" }, { "rdma-dev", "", "" }, { "rdma-qps", "16", "16" },
	{ "rdma-qps", "1", "1" }, { "max-agents", "1", "1" }, { "max-agents", "256", "256" },
	{ "notify-failures", "yes", "true" }, { "notify-failures", "off", "false" },
	{ "log-level", "DEBUG", "debug" }, { "log-level", "none", "none" },
	{ "log-file", "/var/log/pd.log", "/var/log/pd.log" },
};

static void check_good(const struct good *g, const struct pd_config *c)
{
	char *buf = NULL, line[PD_CFG_PATH_MAX + 64];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	pd_config_dump(f, c);
	assert_int_equal(fclose(f), 0);
	(void)snprintf(line, sizeof(line), "\n%s =%s%s\n", g->flag, g->canon[0] ? " " : "",
		       g->canon);
	assert_has(buf, line);
	free(buf);
}

static void test_every_flag_parses_both_forms(void **state)
{
	struct pd_config a, b;
	char err[ERRLEN], eq[PD_CFG_PATH_MAX], flag[64];

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(good_values); i++) {
		struct good g = good_values[i];

		g.canon = g.canon ? g.canon : g.value;
		(void)snprintf(eq, sizeof(eq), "--%s=%s", g.flag, g.value);
		(void)snprintf(flag, sizeof(flag), "--%s", g.flag);
		defaults_named(&a);
		defaults_named(&b);
		if (run(&a, err, ARGS(eq)) != 0)
			fail_msg("%s: %s", eq, err);
		check_good(&g, &a);
		if (strcmp(g.flag, "notify-failures") && g.value[0]) {
			assert_int_equal(run(&b, err, ARGS(flag, g.value)), 0);
			assert_same(&a, &b);
		}
	}
}

static void test_fields_after_parse(void **state)
{
	struct pd_config c;
	char err[ERRLEN];

	(void)state;
	pd_config_defaults(&c);
	assert_int_equal(run(&c, err, ARGS("--name=n", "--rundir", "/r", "--ctrl",
					   "ipc:///tmp/c", "--data=h:2", "--send-slots", "7",
					   "--recv-slots=9", "--slot-size", "8K", "--proxy",
					   "tcp://p:3", "--transport", "shm,rdma")), 0);
	assert_int_equal(run(&c, err, ARGS("--require=shm", "--admission-timeout", "3",
					   "--recv-ttl=1500ms", "--heartbeat", "2s",
					   "--data-threads", "4", "--group=g", "--notify-failures",
					   "--log-level", "warn", "--log-file=/l")), 0);
	assert_string_equal(c.name, "n");
	assert_string_equal(c.rundir, "/r");
	assert_string_equal(c.ctrl, "ipc:///tmp/c");
	assert_string_equal(c.data, "h:2");
	assert_int_equal(c.send_slots, 7);
	assert_int_equal(c.recv_slots, 9);
	assert_int_equal(c.slot_size, 8192);
	assert_string_equal(c.proxy, "tcp://p:3");
	assert_int_equal(c.transport.mask, (1u << PD_XPORT_SHM) | (1u << PD_XPORT_RDMA));
	assert_int_equal(c.transport.n, 2);
	assert_int_equal(c.transport.order[0], PD_XPORT_SHM);
	assert_int_equal(c.transport.order[1], PD_XPORT_RDMA);
	assert_int_equal(c.require.mask, 1u << PD_XPORT_SHM);
	assert_int_equal(c.admission_timeout_ns, 3 * SEC);
	assert_int_equal(c.recv_ttl_ns, 1500 * MS);
	assert_int_equal(c.heartbeat_ns, 2 * SEC);
	assert_int_equal(c.data_threads, 4);
	assert_string_equal(c.group, "g");
	assert_int_equal(c.notify_failures, 1);
	assert_int_equal(c.log_level, PD_LOG_WARN);
	assert_string_equal(c.log_file, "/l");
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), 0);
	assert_int_equal(run(&c, err, ARGS("--notify-failures=false", "--help", "--version")), 0);
	assert_int_equal(c.notify_failures, 0);
	assert_int_equal(c.show_help, 1);
	assert_int_equal(c.show_version, 1);
}

static void test_sizes_take_every_suffix(void **state)
{
	static const struct {
		const char *text;
		uint64_t bytes;
	} cases[] = {
		{ "8192", 8192 }, { "8K", 8192 }, { "8k", 8192 }, { "8KiB", 8192 },
		{ "8kib", 8192 }, { "8KIB", 8192 }, { "2M", 2u << 20 }, { "2m", 2u << 20 },
		{ "2MiB", 2u << 20 }, { "2mib", 2u << 20 }, { "1G", 1u << 30 },
		{ "1g", 1u << 30 }, { "1GiB", 1u << 30 }, { "1gib", 1u << 30 },
		{ "4K", 4096 }, { "1048576K", 1u << 30 }, { "0004K", 4096 },
	};
	struct pd_config c;
	char err[ERRLEN], eq[64];

	(void)state;
	for (size_t i = 0; i < PD_ARRAY_SIZE(cases); i++) {
		defaults_named(&c);
		(void)snprintf(eq, sizeof(eq), "--slot-size=%s", cases[i].text);
		if (run(&c, err, ARGS(eq)) != 0)
			fail_msg("%s: %s", eq, err);
		assert_int_equal(c.slot_size, cases[i].bytes);
	}
}

static void test_file_then_flags_in_order(void **state)
{
	static const char text[] =
		"# broker b7\n"
		"\n"
		"   name   =   b7   \n"
		"slot-size=2M\n"
		"\tdata-threads = 4\t\r\n"
		"transport = rdma,tcp\n"
		"   # indented comment\n"
		"log-file = /var/log/pd b7.log\n";
	struct pd_config c;
	char err[ERRLEN], path[64];

	(void)state;
	write_file(path, sizeof(path), text, sizeof(text) - 1);
	pd_config_defaults(&c);
	assert_int_equal(run(&c, err, ARGS("--slot-size", "4M", "--config", path,
					   "--data-threads=8")), 0);
	assert_string_equal(c.name, "b7");
	assert_int_equal(c.slot_size, 2u << 20);   /* the file came after the flag */
	assert_int_equal(c.data_threads, 8);       /* the flag came after the file */
	assert_int_equal(c.transport.order[0], PD_XPORT_RDMA);
	assert_string_equal(c.log_file, "/var/log/pd b7.log");
	assert_int_equal(run(&c, err, ARGS("--config=", "x")), -ENOENT);
	assert_has(err, "--config: cannot open ''");
	pd_config_defaults(&c);
	assert_int_equal(pd_config_load_file(&c, path, err, ERRLEN), 0);
	assert_int_equal(c.data_threads, 4);
	assert_int_equal(pd_config_load_file(&c, path, NULL, 0), 0);
	assert_int_equal(unlink(path), 0);
	assert_int_equal(load_text(&c, "", err), 0);   /* empty file: nothing changes */
	assert_int_equal(c.data_threads, 4);
}

static void dump_load(const struct pd_config *src)
{
	struct pd_config back;
	char *buf = NULL, err[ERRLEN];
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	assert_non_null(f);
	pd_config_dump(f, src);
	assert_int_equal(fclose(f), 0);
	pd_config_defaults(&back);
	(void)strcpy(back.rundir, "/elsewhere");
	back.require.n = back.require.mask = 0;
	if (load_text(&back, buf, err) != 0)
		fail_msg("%s\n%s", err, buf);
	assert_same(&back, src);
	free(buf);
}

static void test_dump_load_round_trip(void **state)
{
	struct pd_config c;
	char err[ERRLEN];

	(void)state;
	pd_config_defaults(&c);
	dump_load(&c);   /* empty name, proxy, group, log-file, require */
	assert_int_equal(run(&c, err, ARGS("--name=rt", "--rundir=/r d", "--ctrl=tcp://*:*",
					   "--data=[::1]:9", "--send-slots=0", "--recv-slots=3",
					   "--slot-size=12K", "--proxy=ipc:///tmp/p",
					   "--transport=shm,rdma,tcp", "--require=tcp,rdma")), 0);
	assert_int_equal(run(&c, err, ARGS("--admission-timeout=1ms", "--recv-ttl=86400",
					   "--heartbeat=1500ms", "--data-threads=64",
					   "--group=g.1", "--notify-failures", "--log-level=none",
					   "--log-file=/tmp/x#y")), 0);
	assert_int_equal(pd_config_validate(&c, err, ERRLEN), 0);
	dump_load(&c);
}

static void test_usage_lists_every_flag(void **state)
{
	const struct pd_cfg_def *defs;
	char *buf = NULL, needle[96];
	size_t len = 0, n;
	FILE *f = open_memstream(&buf, &len);

	(void)state;
	assert_non_null(f);
	pd_config_usage(f, "pdbroker");
	assert_int_equal(fclose(f), 0);
	defs = pd_config_defs(&n);
	assert_true(n >= 21);
	for (size_t i = 0; i < n; i++) {
		(void)snprintf(needle, sizeof(needle), "  --%s%s%s ", defs[i].name,
			       defs[i].arg ? " " : "", defs[i].arg ? defs[i].arg : "");
		assert_has(buf, needle);
		assert_has(buf, defs[i].help);
	}
	assert_has(buf, "Usage: pdbroker --name NAME");
	assert_has(buf, "[4K..1G] (default: 1M)");
	assert_has(buf, "[1..64] (default: 2)");
	assert_has(buf, "[1..256] (default: 32)");
	assert_has(buf, "[1ms..86400s] (default: 30s)");
	assert_has(buf, "(default: tcp://127.0.0.1:17500)");
	assert_has(buf, "(default: none)");
	for (char *line = buf; (line = strchr(line, '\n')); line++)
		assert_true(strcspn(line + 1, "\n") <= 100);
	free(buf);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_every_flag_rejects_bad_values),
		cmocka_unit_test(test_unknown_options_and_stray_words),
		cmocka_unit_test(test_missing_values),
		cmocka_unit_test(test_failed_parse_changes_nothing),
		cmocka_unit_test(test_validate_rejects),
		cmocka_unit_test(test_file_errors_name_line_and_flag),
		cmocka_unit_test(test_unreadable_files),
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_default_rundir),
		cmocka_unit_test(test_every_flag_parses_both_forms),
		cmocka_unit_test(test_fields_after_parse),
		cmocka_unit_test(test_sizes_take_every_suffix),
		cmocka_unit_test(test_file_then_flags_in_order),
		cmocka_unit_test(test_dump_load_round_trip),
		cmocka_unit_test(test_usage_lists_every_flag),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
