/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "pd_proc.h"
#include "pd_segment.h"
#include "pd_test.h"
#include "pd_time.h"

#ifndef PD_BUILD_DIR
#define PD_BUILD_DIR "build/release"
#endif

/* Is port free on 127.0.0.1 now (0: the kernel's pick)? The port, or -1. */
static int try_port(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001),
				 .sin_port = htons((uint16_t)port) };
	socklen_t len = sizeof(a);
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), got = -1;

	if (fd < 0)
		return -1;
	if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
	    getsockname(fd, (struct sockaddr *)&a, &len) == 0)
		got = ntohs(a.sin_port);
	(void)close(fd);
	return got;
}

/* The low end of the kernel's ephemeral range (what "port 0" picks from). */
static int ephemeral_low(void)
{
	return (int)pd_test_read_num("/proc/sys/net/ipv4/ip_local_port_range", 32768);
}

/*
 * A port below the ephemeral range, so that no listener bound to port 0
 * meanwhile (a broker's --data 127.0.0.1:0) can be given it between this
 * call and its use; the kernel's pick when that range is too narrow.
 */
int pd_test_free_port(void)
{
	static unsigned int seq;
	int lo = 20000, hi = ephemeral_low();

	for (int i = 0; hi - lo >= 1000 && i < 64; i++) {
		unsigned int r = (unsigned int)getpid() * 2654435761u + seq++ * 40503u;
		int port = try_port(lo + (int)(r % (unsigned int)(hi - lo)));

		if (port > 0)
			return port;
	}
	return try_port(0);
}

/* PD_TEST_BIN_DIR (e.g. in the RDMA guest, where programs are copied
 * elsewhere), else this variant's build directory. */
static void broker_path(char *buf, size_t len)
{
	const char *dir = getenv("PD_TEST_BIN_DIR");

	(void)snprintf(buf, len, "%s/pdbroker", dir && *dir ? dir : PD_BUILD_DIR);
}

static void exec_broker(const struct pd_test_broker *b, const char *path,
			const char *const *args)
{
	const char *argv[64] = { path, "--name", b->name, "--rundir",
				 b->rundir, "--ctrl", b->ctrl, "--data", "127.0.0.1:0" };
	int n = 9, fd = open(b->log, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	for (; args && *args && n < 62; args++)
		argv[n++] = *args;
	argv[n] = NULL;
	if (fd >= 0) {
		(void)dup2(fd, 2);
		(void)close(fd);
	}
	(void)prctl(PR_SET_PDEATHSIG, SIGTERM); /* never outlive the test */
	execv(argv[0], (char *const *)(uintptr_t)argv); /* execv's prototype predates const */
	_exit(127);
}

/* Wait for the attach socket, then the admin socket (made a little later). */
static int wait_socket(const struct pd_test_broker *b, uint32_t ms)
{
	static const char *const suffix[] = { ".sock", ".admin" };
	uint64_t deadline = pd_deadline_ms(ms);
	char path[200];
	struct stat st;

	for (int i = 0; i < 2; i++) {
		(void)snprintf(path, sizeof(path), "%s/%s%s", b->rundir, b->name, suffix[i]);
		while (stat(path, &st) < 0) {
			if (pd_now_ns() >= deadline || kill(b->pid, 0) < 0)
				return -ETIMEDOUT;
			(void)usleep(2000);
		}
	}
	return 0;
}

pid_t pd_test_fork_init(void)
{
	uid_t uid = geteuid();
	gid_t gid = getegid();
	unsigned long flags = CLONE_NEWPID | (uid ? CLONE_NEWUSER : 0);
	pid_t pid = (pid_t)syscall(SYS_clone, flags | SIGCHLD, NULL, NULL, NULL, 0);

	if (pid == 0 && (flags & CLONE_NEWUSER) && pd_test_map_ids(uid, gid) < 0)
		_exit(126);
	return pid;
}

/* Fork and exec the broker, then wait for its socket. */
static int spawn(struct pd_test_broker *b, const char *const *args)
{
	char path[256];

	broker_path(path, sizeof(path));
	b->pid = b->pidns ? pd_test_fork_init() : fork();
	if (b->pid < 0)
		return -errno;
	if (b->pid == 0)
		exec_broker(b, path, args);
	return wait_socket(b, 10000);
}

int pd_test_broker_restart(struct pd_test_broker *b, const char *const *args)
{
	char path[200];

	/* The dead one's socket file stays: wait for the new one's, not that. */
	(void)snprintf(path, sizeof(path), "%s/%s.sock", b->rundir, b->name);
	(void)unlink(path);
	(void)mkdir(b->rundir, 0700); /* removed with the last broker stopped */
	return spawn(b, args);
}

int pd_test_broker_start(struct pd_test_broker *b, const char *tag, const char *const *args)
{
	return pd_test_broker_start_ns(b, tag, args, 0);
}

int pd_test_broker_start_ns(struct pd_test_broker *b, const char *tag, const char *const *args,
			    int pidns)
{
	int port = pd_test_free_port();

	b->pidns = pidns != 0;
	if (port < 0)
		return port;
	pd_test_name(b->name, sizeof(b->name), tag);
	(void)snprintf(b->rundir, sizeof(b->rundir), "/tmp/pdkv-it-%d", (int)getpid());
	(void)snprintf(b->ctrl, sizeof(b->ctrl), "tcp://127.0.0.1:%d", port);
	(void)snprintf(b->log, sizeof(b->log), "%s/%s.log", b->rundir, b->name);
	(void)mkdir(b->rundir, 0700);
	return spawn(b, args);
}

/* The broker is gone: what it leaves when it cannot clean up (killed) goes,
 * its log too, and the rundir once the last broker's files are gone. */
static void leftovers_remove(const struct pd_test_broker *b)
{
	static const char *const ext[] = { "sock", "admin" };
	char path[sizeof(b->rundir) + sizeof(b->name) + 8];

	if (!b->name[0] || !b->rundir[0])
		return;
	(void)pd_segment_unlink(b->name);
	for (size_t i = 0; i < sizeof(ext) / sizeof(ext[0]); i++) {
		(void)snprintf(path, sizeof(path), "%s/%s.%s", b->rundir, b->name, ext[i]);
		(void)unlink(path);
	}
	(void)unlink(b->log);
	(void)rmdir(b->rundir); /* fails while another broker's files are there */
}

int pd_test_broker_stop(struct pd_test_broker *b)
{
	int rc = 0;

	if (b->pid > 0) {
		(void)kill(b->pid, SIGTERM);
		rc = pd_test_wait(b->pid, 10000); /* SIGKILLed at the deadline: gone either way */
		b->pid = 0;
	}
	leftovers_remove(b);
	return rc;
}

int pd_test_broker_log_has(const struct pd_test_broker *b, const char *text)
{
	char line[1024];
	FILE *f = fopen(b->log, "r");
	int found = 0;

	while (f && !found && fgets(line, sizeof(line), f))
		found = strstr(line, text) != NULL;
	if (f)
		(void)fclose(f);
	return found;
}

int pd_test_broker_wait_log(const struct pd_test_broker *b, const char *text, uint32_t ms)
{
	uint64_t deadline = pd_deadline_ms(ms);

	while (!pd_test_broker_log_has(b, text)) {
		if (pd_now_ns() >= deadline) {
			pd_test_broker_dump_log(b);
			return 0;
		}
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	}
	return 1;
}

void pd_test_broker_dump_log(const struct pd_test_broker *b)
{
	char line[512];
	FILE *f = fopen(b->log, "r");

	if (!f)
		return;
	fprintf(stderr, "---- log of %s ----\n", b->name);
	while (fgets(line, sizeof(line), f))
		fputs(line, stderr);
	(void)fclose(f);
}
