/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd_test.h"
#include "pd_time.h"

void pd_test_name(char *buf, size_t len, const char *tag)
{
	static unsigned counter;

	(void)snprintf(buf, len, "test.%d.%u.%s", (int)getpid(), counter++, tag ? tag : "x");
}

void *pd_test_shared_alloc(size_t len)
{
	void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);

	return p == MAP_FAILED ? NULL : p;
}

void pd_test_shared_free(void *p, size_t len)
{
	if (p)
		(void)munmap(p, len);
}

pid_t pd_test_fork(int (*fn)(void *arg), void *arg)
{
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (pid == 0)
		_exit(fn(arg) & 0xff);
	return pid;
}

static int write_file(const char *path, const char *text)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : write(fd, text, strlen(text));

	if (fd >= 0)
		(void)close(fd);
	return n == (ssize_t)strlen(text) ? 0 : -1;
}

int64_t pd_test_read_num(const char *path, int64_t dflt)
{
	FILE *f = fopen(path, "re");
	long long n = dflt;

	if (f) {
		if (fscanf(f, "%lld", &n) != 1)
			n = dflt;
		(void)fclose(f);
	}
	return n;
}

int pd_test_write_num(const char *path, int64_t v)
{
	char text[32];

	(void)snprintf(text, sizeof(text), "%lld\n", (long long)v);
	return write_file(path, text);
}

int pd_test_map_ids(uid_t uid, gid_t gid)
{
	char map[64];

	(void)snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)uid, (unsigned)uid);
	if (write_file("/proc/self/uid_map", map) < 0 ||
	    write_file("/proc/self/setgroups", "deny") < 0)
		return -1;
	(void)snprintf(map, sizeof(map), "%u %u 1\n", (unsigned)gid, (unsigned)gid);
	return write_file("/proc/self/gid_map", map);
}

/* A pid namespace for this process's children (and a user namespace mapping
 * our ids, when not root). */
static int new_pidns(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();

	if (uid == 0)
		return unshare(CLONE_NEWPID);
	if (unshare(CLONE_NEWUSER | CLONE_NEWPID) < 0)
		return -1;
	return pd_test_map_ids(uid, gid);
}

/* The exit status of a reaped child, as an exit code to pass on. */
static int pass_on(pid_t pid)
{
	int st;

	if (waitpid(pid, &st, 0) != pid)
		return 125;
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* The namespace's init: skip burn pids (ns_last_pid, else by forking a
 * few), run fn in its child, pass on its end. */
static int ns_init(int (*fn)(void *arg), void *arg, unsigned burn)
{
	char last[16];
	pid_t pid;

	(void)snprintf(last, sizeof(last), "%u", 1 + burn);
	if (burn && write_file("/proc/sys/kernel/ns_last_pid", last) == 0)
		burn = 0;
	else if (burn > 64)
		return 124;
	for (unsigned i = 0; i < burn; i++) {
		pid = fork();
		if (pid == 0)
			_exit(0);
		if (pid < 0 || pass_on(pid) != 0)
			return 124;
	}
	pid = fork();
	if (pid < 0)
		return 124;
	if (pid == 0) {
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(fn(arg) & 0xff);
	}
	return pass_on(pid);
}

pid_t pd_test_fork_pidns(int (*fn)(void *arg), void *arg, unsigned burn)
{
	pid_t pid = fork(), init;

	if (pid < 0)
		return -errno;
	if (pid > 0)
		return pid;
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (new_pidns() < 0)
		_exit(123);
	init = fork();
	if (init == 0) {
		(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
		_exit(ns_init(fn, arg, burn));
	}
	_exit(init < 0 ? 124 : pass_on(init));
}

static int in_pidns(void *arg)
{
	(void)arg;
	return getpid() == 2 ? 0 : 1;
}

int pd_test_pidns_ok(void)
{
	pid_t pid = pd_test_fork_pidns(in_pidns, NULL, 0);

	return pid > 0 && pd_test_wait(pid, 5000) == 0;
}

int pd_test_wait(pid_t pid, uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);
	struct timespec nap = { 0, 1000000 };
	int status;

	for (;;) {
		pid_t r = waitpid(pid, &status, WNOHANG);

		if (r == pid)
			break;
		if (r < 0)
			return -errno;
		if (pd_now_ns() >= deadline) {
			(void)kill(pid, SIGKILL);
			(void)waitpid(pid, &status, 0);
			return -ETIMEDOUT;
		}
		(void)nanosleep(&nap, NULL);
	}
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return 128 + WTERMSIG(status);
}

int pd_test_unix_listening(const char *path)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	int fd, ok;

	if (strlen(path) >= sizeof(sa.sun_path))
		return 0;
	memcpy(sa.sun_path, path, strlen(path) + 1);
	fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	ok = connect(fd, (const struct sockaddr *)&sa, sizeof(sa)) == 0;
	(void)close(fd);
	return ok;
}

uint64_t pd_test_cpu_ticks(pid_t pid)
{
	char path[64], b[1024], *p = NULL;
	unsigned long ut = 0, st = 0;
	FILE *f;
	size_t n;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "r");
	if (!f)
		return 0;
	n = fread(b, 1, sizeof(b) - 1, f);
	(void)fclose(f);
	b[n] = '\0';
	p = strrchr(b, ')'); /* comm may hold spaces */
	/* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt
	 * majflt cmajflt utime stime */
	if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
			 &st) != 2)
		return 0;
	return (uint64_t)ut + st;
}
