/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_sync.h"
#include "pd_time.h"

int pd_mutex_init(struct pd_mutex *mx)
{
	pthread_mutexattr_t a;
	int rc;

	if (!mx)
		return -EINVAL;
	rc = pthread_mutexattr_init(&a);
	if (rc)
		return pd_pthread_rc(rc);
	rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (!rc)
		rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (!rc)
		rc = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK);
	if (!rc)
		rc = pthread_mutex_init(&mx->m, &a);
	(void)pthread_mutexattr_destroy(&a);
	return pd_pthread_rc(rc);
}

int pd_cond_init(struct pd_cond *cv)
{
	pthread_condattr_t a;
	int rc;

	if (!cv)
		return -EINVAL;
	rc = pthread_condattr_init(&a);
	if (rc)
		return pd_pthread_rc(rc);
	rc = pthread_condattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (!rc)
		rc = pthread_condattr_setclock(&a, CLOCK_MONOTONIC);
	if (!rc)
		rc = pthread_cond_init(&cv->c, &a);
	(void)pthread_condattr_destroy(&a);
	return pd_pthread_rc(rc);
}

/* The holder died: repair, then declare the state consistent. On a failed
 * repair the mutex is unlocked without consistent(), which leaves it
 * permanently unrecoverable: better than handing out corrupt state. */
static int recover(struct pd_mutex *mx, pd_repair_fn *repair, void *ctx)
{
	int rc = repair ? repair(ctx) : 0;

	if (rc < 0) {
		PD_LOG(ERR, shm, "repair after owner death failed: %s", pd_strerror(rc));
		(void)pthread_mutex_unlock(&mx->m);
		return -ENOTRECOVERABLE;
	}
	rc = pthread_mutex_consistent(&mx->m);
	if (rc) {
		(void)pthread_mutex_unlock(&mx->m);
		return pd_pthread_rc(rc);
	}
	PD_LOG(WARN, shm, "mutex holder died; state repaired");
	return 1;
}

int pd_mutex_lock_until(struct pd_mutex *mx, uint64_t deadline_ns,
			pd_repair_fn *repair, void *ctx)
{
	struct timespec ts = pd_ns_to_ts(deadline_ns);
	int rc;

	if (!mx)
		return -EINVAL;
	rc = pthread_mutex_clocklock(&mx->m, CLOCK_MONOTONIC, &ts);
	if (rc == EOWNERDEAD)
		return recover(mx, repair, ctx);
	return pd_pthread_rc(rc);
}

int pd_mutex_lock_timeout(struct pd_mutex *mx, uint32_t timeout_ms,
			  pd_repair_fn *repair, void *ctx)
{
	int rc;

	if (!mx)
		return -EINVAL;
	rc = pthread_mutex_trylock(&mx->m);
	if (rc == 0)
		return 0;
	if (rc == EOWNERDEAD)
		return recover(mx, repair, ctx);
	if (rc != EBUSY)
		return pd_pthread_rc(rc);
	return pd_mutex_lock_until(mx, pd_deadline_ms(timeout_ms), repair, ctx);
}

void pd_mutex_unlock(struct pd_mutex *mx)
{
	int rc = pthread_mutex_unlock(&mx->m);

	PD_ASSERT(rc == 0);
}

int pd_cond_wait_until(struct pd_cond *cv, struct pd_mutex *mx, uint64_t deadline_ns,
		       pd_repair_fn *repair, void *ctx)
{
	struct timespec ts = pd_ns_to_ts(deadline_ns);
	int rc;

	if (!cv || !mx)
		return -EINVAL;
	rc = pthread_cond_timedwait(&cv->c, &mx->m, &ts);
	if (rc == EOWNERDEAD)
		return recover(mx, repair, ctx);
	return pd_pthread_rc(rc);
}

void pd_cond_signal(struct pd_cond *cv)
{
	(void)pthread_cond_signal(&cv->c);
}

void pd_cond_broadcast(struct pd_cond *cv)
{
	(void)pthread_cond_broadcast(&cv->c);
}

static _Atomic int32_t self_pid;
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;

static void self_pid_reset(void)
{
	atomic_store_explicit(&self_pid, 0, memory_order_relaxed);
}

static void self_pid_register(void)
{
	(void)pthread_atfork(NULL, NULL, self_pid_reset);
}

int32_t pd_self_pid(void)
{
	int32_t pid = atomic_load_explicit(&self_pid, memory_order_relaxed);

	if (PD_LIKELY(pid))
		return pid;
	(void)pthread_once(&self_pid_once, self_pid_register);
	pid = (int32_t)getpid();
	atomic_store_explicit(&self_pid, pid, memory_order_relaxed);
	return pid;
}

int pd_pid_alive(int32_t pid)
{
	if (pid <= 0)
		return 0;
	return kill(pid, 0) == 0 || errno == EPERM;
}

int pd_pid_start_time(int32_t pid, uint64_t *out)
{
	char path[64], buf[1024];
	ssize_t n;
	char *p;
	int fd;

	if (pid <= 0 || !out)
		return -EINVAL;
	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	n = read(fd, buf, sizeof(buf) - 1);
	(void)close(fd);
	if (n <= 0)
		return n < 0 ? -errno : -EPROTO;
	buf[n] = '\0';
	/* The command name may hold spaces and ')': fields resume after the last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return -EPROTO;
	/* After ")": the space before field N, for N = 3 .. 22 (starttime). */
	for (int field = 3; field <= 22; field++) {
		p = strchr(p + 1, ' ');
		if (!p)
			return -EPROTO;
	}
	*out = strtoull(p + 1, NULL, 10);
	return 0;
}
