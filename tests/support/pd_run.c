/* SPDX-License-Identifier: MIT */
/*
 * Run one of this build's programs from a test and capture what it prints.
 *
 * The child gets stdin from /dev/null, a pipe for stdout and one for
 * stderr, its own process group (so a timeout kills whatever it started)
 * and PR_SET_PDEATHSIG(SIGKILL). A third, close-on-exec pipe reports an
 * exec failure back as an errno. The parent polls the pipes and the child
 * until both pipes reach EOF and the child has exited, or the deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include "pd_run.h"
#include "pd_time.h"

#ifndef PD_BUILD_DIR
#define PD_BUILD_DIR "build/release"
#endif

#define RUN_CAP      (16u << 20) /* per stream; the rest is read and dropped */
#define RUN_SLICE_MS 20          /* poll slice: notices the child's exit */

struct run_buf {
	char *p;
	size_t len, cap;
	int fd;       /* -1 once at EOF */
};

int pd_run_bin(const char *prog, char *buf, size_t len)
{
	int n;

	if (!prog || !buf)
		return -EINVAL;
	n = snprintf(buf, len, "%s/%s", PD_BUILD_DIR, prog);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

/* In the child: only async-signal-safe calls from here to exec. */
static void child_exec(const char *const *argv, int out_w, int err_w, int st_w)
{
	sigset_t none;
	int in = open("/dev/null", O_RDONLY);
	int e;

	(void)setpgid(0, 0);
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	(void)sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	if (in < 0 || dup2(in, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0)
		goto out_report;
	/* The test died between fork and prctl: do not outlive it. */
	if (getppid() == 1)
		_exit(128 + SIGKILL);
	execv(argv[0], (char *const *)(uintptr_t)argv); /* execv's prototype predates const */
out_report:
	e = errno;
	(void)!write(st_w, &e, sizeof(e));
	_exit(127);
}

static int grow(struct run_buf *b, size_t want)
{
	size_t cap = b->cap ? b->cap : 4096;
	char *p;

	while (cap < want)
		cap *= 2;
	if (cap > RUN_CAP + 1)
		cap = RUN_CAP + 1;
	p = realloc(b->p, cap);
	if (!p)
		return -ENOMEM;
	b->p = p;
	b->cap = cap;
	return 0;
}

/* Read what is there (at most ~1 MiB: a chatty child must not starve the
 * deadline check). 0 (more may come), 1 at EOF, -errno. */
static int drain(struct run_buf *b)
{
	char scratch[4096];

	for (int budget = 256; budget > 0; budget--) {
		char *dst = scratch;
		size_t room = sizeof(scratch);
		ssize_t n;

		if (b->len < RUN_CAP) {
			if (b->cap - b->len < 4096 + 1 && grow(b, b->len + 4096 + 1) < 0)
				return -ENOMEM;
			dst = b->p + b->len;
			room = b->cap - 1 - b->len;
			if (room > RUN_CAP - b->len)
				room = RUN_CAP - b->len;
		}
		n = read(b->fd, dst, room);
		if (n > 0 && dst != scratch)
			b->len += (size_t)n;
		if (n > 0)
			continue;
		if (n == 0)
			return 1;
		if (errno == EINTR)
			continue;
		return errno == EAGAIN ? 0 : -errno;
	}
	return 0;
}

static void close_at_eof(struct run_buf *b)
{
	(void)close(b->fd);
	b->fd = -1;
}

/* Poll both streams for one slice. 0 or -errno. */
static int pump(struct run_buf *bufs, int ms)
{
	struct pollfd pfd[2];
	nfds_t n = 0;

	for (int i = 0; i < 2; i++)
		if (bufs[i].fd >= 0)
			pfd[n++] = (struct pollfd){ .fd = bufs[i].fd, .events = POLLIN };
	if (n == 0) {
		struct timespec nap = { 0, (long)ms * 1000000L };

		(void)nanosleep(&nap, NULL);
		return 0;
	}
	if (poll(pfd, n, ms) < 0 && errno != EINTR)
		return -errno;
	for (int i = 0; i < 2; i++) {
		int rc;

		if (bufs[i].fd < 0)
			continue;
		rc = drain(&bufs[i]);
		if (rc < 0)
			return rc;
		if (rc == 1)
			close_at_eof(&bufs[i]);
	}
	return 0;
}

static int status_code(int status)
{
	if (WIFEXITED(status))
		return WEXITSTATUS(status);
	return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
}

static void kill_child(pid_t pid)
{
	if (kill(-pid, SIGKILL) < 0)
		(void)kill(pid, SIGKILL);
}

/*
 * Collect output until both pipes close and the child exits. Once it has
 * exited, what it wrote is in the pipes: read that and stop, even when a
 * grandchild still holds a pipe open. -errno or the exit code.
 */
static int collect(pid_t pid, struct run_buf *bufs, uint32_t timeout_ms)
{
	uint64_t deadline = pd_deadline_ms(timeout_ms);
	int status, code = -1, rc = 0;

	while (code < 0) {
		pid_t w = waitpid(pid, &status, WNOHANG);

		if (w == pid)
			code = status_code(status);
		else if (w < 0 && errno != EINTR)
			rc = -errno;
		if (rc == 0)
			rc = pump(bufs, code >= 0 ? 0 : RUN_SLICE_MS);
		/* Exited: what it wrote is in the pipes (at most ~1 MiB each). */
		for (int k = 0; code >= 0 && rc == 0 && k < 16; k++)
			rc = pump(bufs, 0);
		if (rc < 0 || (code < 0 && pd_now_ns() >= deadline)) {
			if (code < 0) { /* not reaped yet */
				kill_child(pid);
				(void)waitpid(pid, &status, 0);
			}
			return rc < 0 ? rc : 128 + SIGKILL;
		}
	}
	return code;
}

/* The exec-status pipe: an errno if exec failed, EOF if it worked. */
static int exec_status(int st_r)
{
	int e = 0;
	ssize_t n;

	do
		n = read(st_r, &e, sizeof(e));
	while (n < 0 && errno == EINTR);
	return n == (ssize_t)sizeof(e) ? -(e ? e : EIO) : 0;
}

static void finish(struct run_buf *b, char **out, size_t *len)
{
	if (b->fd >= 0)
		close_at_eof(b);
	if (!b->p && grow(b, 1) < 0) {
		*out = NULL;
		*len = 0;
		return;
	}
	b->p[b->len] = '\0';
	*out = b->p;
	*len = b->len;
}

static void close_pipes(int p[3][2])
{
	for (int i = 0; i < 3; i++)
		for (int j = 0; j < 2; j++)
			if (p[i][j] >= 0)
				(void)close(p[i][j]);
}

/* Parent side once the child runs. 0 or -errno. */
static int parent(pid_t pid, int p[3][2], uint32_t timeout_ms, struct pd_run_result *r)
{
	struct run_buf bufs[2] = { { .fd = p[0][0] }, { .fd = p[1][0] } };
	int rc;

	(void)setpgid(pid, pid); /* also here: no race with a kill on timeout */
	p[0][0] = p[1][0] = -1;  /* owned by bufs now */
	rc = exec_status(p[2][0]);
	for (int i = 0; i < 2 && rc == 0; i++)
		if (fcntl(bufs[i].fd, F_SETFL, O_NONBLOCK) < 0)
			rc = -errno;
	if (rc == 0)
		rc = collect(pid, bufs, timeout_ms);
	else
		(void)waitpid(pid, NULL, 0);
	finish(&bufs[0], &r->out, &r->out_len);
	finish(&bufs[1], &r->err, &r->err_len);
	if (rc >= 0 && (!r->out || !r->err))
		rc = -ENOMEM;
	if (rc < 0) {
		pd_run_free(r);
		return rc;
	}
	r->exit_code = rc;
	return 0;
}

int pd_run(const char *const *argv, uint32_t timeout_ms, struct pd_run_result *r)
{
	int p[3][2] = { { -1, -1 }, { -1, -1 }, { -1, -1 } };
	pid_t pid;
	int rc;

	if (!argv || !argv[0] || !r)
		return -EINVAL;
	*r = (struct pd_run_result){ .exit_code = -1 };
	for (int i = 0; i < 3; i++) {
		if (pipe2(p[i], O_CLOEXEC) < 0) {
			rc = -errno;
			close_pipes(p);
			return rc;
		}
	}
	pid = fork();
	if (pid < 0) {
		rc = -errno;
		close_pipes(p);
		return rc;
	}
	if (pid == 0)
		child_exec(argv, p[0][1], p[1][1], p[2][1]);
	for (int i = 0; i < 3; i++) {
		(void)close(p[i][1]);
		p[i][1] = -1;
	}
	rc = parent(pid, p, timeout_ms, r);
	close_pipes(p);
	return rc;
}

void pd_run_free(struct pd_run_result *r)
{
	if (!r)
		return;
	free(r->out);
	free(r->err);
	r->out = r->err = NULL;
	r->out_len = r->err_len = 0;
}

char *pd_run_slurp(const char *path)
{
	FILE *f = fopen(path, "r");
	char *text = NULL;
	long n;

	if (!f)
		return NULL;
	if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0) {
		text = calloc(1, (size_t)n + 1);
		if (text && fread(text, 1, (size_t)n, f) != (size_t)n) {
			free(text);
			text = NULL;
		}
	}
	(void)fclose(f);
	return text;
}
