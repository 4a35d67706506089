/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
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
