/* SPDX-License-Identifier: MIT */
/*
 * pdbench: the brokers. With --local they are pdbroker children in a
 * private rundir on loopback; otherwise they are running already and are
 * only described (pdb_segs.c reads their segments).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <libgen.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "pd_segment.h"
#include "pd_time.h"
#include "pdb.h"

#define START_WAIT_MS 10000u
#define START_TRIES   3

static void nap_ms(uint32_t ms)
{
	struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

	(void)nanosleep(&ts, NULL);
}

static int free_port(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port = -EADDRNOTAVAIL;

	if (fd < 0)
		return -errno;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		port = ntohs(a.sin_port);
	(void)close(fd);
	return port;
}

static int find_broker_bin(const struct pd_bench_opts *o, char *buf, size_t len)
{
	char self[PD_BENCH_PATH_MAX];
	ssize_t n;

	if (o->broker_bin) {
		(void)snprintf(buf, len, "%s", o->broker_bin);
	} else {
		n = readlink("/proc/self/exe", self, sizeof(self) - 1);
		if (n < 0)
			return -errno;
		self[n] = '\0';
		(void)snprintf(buf, len, "%s/pdbroker", dirname(self));
	}
	if (access(buf, X_OK) < 0) {
		(void)fprintf(stderr, "pdbench: cannot run %s: %s%s\n", buf, strerror(errno),
			o->broker_bin ? "" : " (give --broker-bin)");
		return -ENOENT;
	}
	return 0;
}

/* In the child: exec the broker with its output in its log. */
static void broker_exec(const char *bin, const struct pd_bench_opts *o,
			const struct pd_bench_cluster *c, const struct pd_bench_broker *b)
{
	char slot[32], send[16], recv[16], data[80], pools[16];
	const char *argv[32] = { bin, "--name", b->name, "--rundir", c->rundir, "--ctrl", b->ctrl,
				 "--data", data, "--heartbeat", "200ms", "--log-file",
				 b->log, "--slot-size", slot, "--transport", o->transport,
				 "--send-slots", send, "--recv-slots", recv };
	int n = 21, in = open("/dev/null", O_RDONLY), fd = open(b->log, O_WRONLY | O_CREAT |
								   O_APPEND, 0644);

	(void)snprintf(data, sizeof(data), "%s:0", b->decode ? o->dhost : o->phost);
	(void)snprintf(slot, sizeof(slot), "%" PRIu64 "K", o->slot_size >> 10);
	(void)snprintf(send, sizeof(send), "%" PRIu32, b->decode ? 0 : o->send_slots);
	(void)snprintf(recv, sizeof(recv), "%" PRIu32, b->decode ? o->recv_slots : 0);
	if (!b->decode && o->send_pools > 1) {
		(void)snprintf(pools, sizeof(pools), "%" PRIu32, o->send_pools);
		argv[n++] = "--send-pools";
		argv[n++] = pools;
	}
	if (!b->decode && o->proxy[0]) {
		argv[n++] = "--proxy";
		argv[n++] = o->proxy;
	}
	argv[n] = NULL;
	if (in >= 0)
		(void)dup2(in, 0);
	if (fd >= 0) {
		(void)dup2(fd, 1);
		(void)dup2(fd, 2);
	}
	execv(bin, (char *const *)(uintptr_t)argv); /* execv's prototype predates const */
	_exit(127);
}

static pid_t broker_fork(const char *bin, const struct pd_bench_opts *o,
			 const struct pd_bench_cluster *c, const struct pd_bench_broker *b)
{
	pid_t parent = getpid(), pid;
	sigset_t none;

	(void)fflush(NULL);
	pid = fork();
	if (pid != 0)
		return pid < 0 ? -errno : pid;
	(void)setpgid(0, 0); /* a terminal's ^C goes to pdbench, which stops us in order */
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	if (getppid() != parent)
		_exit(127);
	(void)sigemptyset(&none);
	(void)sigprocmask(SIG_SETMASK, &none, NULL);
	(void)signal(SIGINT, SIG_DFL);
	(void)signal(SIGTERM, SIG_DFL);
	broker_exec(bin, o, c, b);
	return 0;
}

/* Wait for the attach socket. 0; -ECHILD it died; -ETIMEDOUT; -EINTR stop. */
static int wait_sock(struct pd_bench_cluster *c, struct pd_bench_broker *b,
		     const volatile sig_atomic_t *stop)
{
	uint64_t deadline = pd_deadline_ms(START_WAIT_MS);
	char path[PD_BENCH_PATH_MAX + 80];
	struct stat st;
	int status;

	(void)snprintf(path, sizeof(path), "%s/%s.sock", c->rundir, b->name);
	while (stat(path, &st) < 0) {
		if (waitpid(b->pid, &status, WNOHANG) == b->pid) {
			b->pid = 0;
			return -ECHILD;
		}
		if (*stop)
			return -EINTR;
		if (pd_now_ns() >= deadline)
			return -ETIMEDOUT;
		nap_ms(5);
	}
	return 0;
}

/* Start broker i, retrying with another port if it dies at once (a port
 * taken between our probe and its bind). */
static int broker_start(struct pd_bench_cluster *c, uint32_t i, const char *bin,
			const struct pd_bench_opts *o, const volatile sig_atomic_t *stop)
{
	struct pd_bench_broker *b = &c->b[i];
	int rc = -ECHILD;

	for (int t = 0; t < START_TRIES && rc == -ECHILD; t++) {
		int port = free_port();

		if (port < 0)
			return port;
		(void)snprintf(b->ctrl, sizeof(b->ctrl), "tcp://%s:%d",
			       b->decode ? o->dhost : o->phost, port);
		b->pid = broker_fork(bin, o, c, b);
		if (b->pid < 0) {
			rc = (int)b->pid;
			b->pid = 0;
			return rc;
		}
		rc = wait_sock(c, b, stop);
	}
	if (rc < 0 && rc != -EINTR) {
		(void)fprintf(stderr, "pdbench: broker %s did not come up (%s)\n", b->name,
			rc == -ECHILD ? "it exited" : "no attach socket after 10 s");
		pd_bench_cluster_tail(c, i);
	}
	return rc;
}

static void describe(struct pd_bench_cluster *c, const struct pd_bench_opts *o)
{
	for (uint32_t i = 0; i < c->nprefill + c->ndecode; i++) {
		struct pd_bench_broker *b = &c->b[i];

		b->decode = i >= c->nprefill;
		if (o->local) {
			char log[sizeof(b->log)];

			(void)snprintf(b->name, sizeof(b->name), "pdb%d%c%" PRIu32, (int)getpid(),
				       b->decode ? 'd' : 'p', b->decode ? i - c->nprefill : i);
			(void)snprintf(log, sizeof(log), "%s/%s.log", c->rundir, b->name);
			memcpy(b->log, log, sizeof(log));
		} else if (b->decode) {
			(void)snprintf(b->name, sizeof(b->name), "%s", o->dname[i - c->nprefill]);
			(void)snprintf(b->ctrl, sizeof(b->ctrl), "%s", o->dctrl[i - c->nprefill]);
		} else {
			(void)snprintf(b->name, sizeof(b->name), "%s", o->pname[i]);
		}
	}
}

int pd_bench_cluster_up(struct pd_bench_cluster *c, const struct pd_bench_opts *o,
			const volatile sig_atomic_t *stop)
{
	char bin[PD_BENCH_PATH_MAX];
	int rc;

	memset(c, 0, sizeof(*c));
	c->nprefill = o->nprefill;
	c->ndecode = o->ndecode;
	if (!o->local) {
		if (o->rundir)
			(void)snprintf(c->rundir, sizeof(c->rundir), "%s", o->rundir);
		describe(c, o);
		return 0;
	}
	rc = find_broker_bin(o, bin, sizeof(bin));
	if (rc < 0)
		return rc;
	(void)strcpy(c->rundir, "/tmp/pdbench.XXXXXX");
	if (!mkdtemp(c->rundir)) {
		rc = -errno;
		(void)fprintf(stderr, "pdbench: mkdtemp: %s\n", strerror(-rc));
		c->rundir[0] = '\0';
		return rc;
	}
	c->own_rundir = 1;
	describe(c, o);
	for (uint32_t i = 0; i < c->nprefill + c->ndecode; i++) {
		rc = broker_start(c, i, bin, o, stop);
		if (rc < 0)
			return rc;
	}
	return 0;
}

int pd_bench_cluster_check(struct pd_bench_cluster *c)
{
	int status;

	for (uint32_t i = 0; i < c->nprefill + c->ndecode; i++) {
		struct pd_bench_broker *b = &c->b[i];

		if (b->pid <= 0 || waitpid(b->pid, &status, WNOHANG) != b->pid)
			continue;
		b->pid = 0;
		(void)fprintf(stderr, "\npdbench: broker %s %s %d\n", b->name,
			WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
			WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
		pd_bench_cluster_tail(c, i);
		return (int)i;
	}
	return -1;
}

void pd_bench_cluster_tail(const struct pd_bench_cluster *c, uint32_t i)
{
	char buf[4096];
	const char *p = buf;
	FILE *f = c->b[i].log[0] ? fopen(c->b[i].log, "r") : NULL;
	size_t n;
	long sz;

	if (!f)
		return;
	if (fseek(f, 0, SEEK_END) == 0 && (sz = ftell(f)) > (long)sizeof(buf) - 1)
		(void)fseek(f, sz - (long)sizeof(buf) + 1, SEEK_SET);
	else
		(void)fseek(f, 0, SEEK_SET);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	buf[n] = '\0';
	(void)fclose(f);
	if (n == sizeof(buf) - 1 && strchr(buf, '\n'))
		p = strchr(buf, '\n') + 1; /* from a line's start */
	(void)fprintf(stderr, "---- tail of %s ----\n%s%s---- end of log ----\n", c->b[i].log, p,
		n && buf[n - 1] != '\n' ? "\n" : "");
}

/* Remove our rundir and what the brokers left in it. */
static void remove_rundir(struct pd_bench_cluster *c)
{
	char path[2 * PD_BENCH_PATH_MAX];
	DIR *d = opendir(c->rundir);
	struct dirent *e;

	while (d && (e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		(void)snprintf(path, sizeof(path), "%s/%s", c->rundir, e->d_name);
		(void)unlink(path);
	}
	if (d)
		(void)closedir(d);
	(void)rmdir(c->rundir);
}

/* A broker that ended: report an unclean exit (not ours to judge when
 * we killed it). 1 unclean, else 0. */
static uint32_t broker_reaped(struct pd_bench_cluster *c, uint32_t i, int status)
{
	c->b[i].pid = 0;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	(void)fprintf(stderr, "pdbench: broker %s %s %d on SIGTERM\n", c->b[i].name,
		WIFSIGNALED(status) ? "was killed by signal" : "exited with status",
		WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
	pd_bench_cluster_tail(c, i);
	return 1;
}

/* SIGTERM every broker, wait (bounded), SIGKILL the rest. */
static uint32_t stop_brokers(struct pd_bench_cluster *c)
{
	uint64_t deadline = pd_deadline_ms(5000);
	uint32_t n = c->nprefill + c->ndecode, left, bad = 0;
	int status;

	for (uint32_t i = 0; i < n; i++)
		if (c->b[i].pid > 0)
			(void)kill(c->b[i].pid, SIGTERM);
	do {
		left = 0;
		for (uint32_t i = 0; i < n; i++) {
			if (c->b[i].pid > 0 && waitpid(c->b[i].pid, &status, WNOHANG) == c->b[i].pid)
				bad += broker_reaped(c, i, status);
			left += c->b[i].pid > 0;
		}
		if (left)
			nap_ms(10);
	} while (left && pd_now_ns() < deadline);
	for (uint32_t i = 0; i < n; i++) {
		if (c->b[i].pid <= 0)
			continue;
		(void)fprintf(stderr, "pdbench: broker %s did not stop in 5 s: killed\n", c->b[i].name);
		(void)kill(c->b[i].pid, SIGKILL);
		(void)waitpid(c->b[i].pid, &status, 0);
		c->b[i].pid = 0;
		bad++;
	}
	/* A broker that was killed could not remove its segment. */
	for (uint32_t i = 0; i < n; i++)
		if (c->b[i].name[0] && pd_segment_probe(c->b[i].name, NULL) == 0)
			(void)pd_segment_unlink(c->b[i].name);
	return bad;
}

uint32_t pd_bench_cluster_down(struct pd_bench_cluster *c, int keep)
{
	uint32_t bad;

	for (uint32_t i = 0; i < c->nprefill + c->ndecode; i++) {
		free(c->b[i].stats0);
		c->b[i].stats0 = NULL;
	}
	if (!c->own_rundir)
		return 0;
	bad = stop_brokers(c);
	if (keep)
		(void)fprintf(stderr, "pdbench: broker logs kept in %s\n", c->rundir);
	else
		remove_rundir(c);
	c->own_rundir = 0;
	return bad;
}
