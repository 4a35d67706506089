/* SPDX-License-Identifier: MIT */
#include <dirent.h>
#include <errno.h>
#include <linux/futex.h>
#include <limits.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
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
	atomic_store_explicit(&mx->unrecoverable, 0, memory_order_relaxed);
	rc = pthread_mutexattr_init(&a);
	if (rc)
		return pd_pthread_rc(rc);
	rc = pthread_mutexattr_setpshared(&a, PTHREAD_PROCESS_SHARED);
	if (!rc)
		rc = pthread_mutexattr_setrobust(&a, PTHREAD_MUTEX_ROBUST);
	if (!rc)
		/* Not ERRORCHECK: glibc takes a holder of our thread id for us
		 * (EDEADLK), and thread ids repeat across pid namespaces: an agent
		 * in one container would fail to lock what a thread of another
		 * holds. A relock by the holder waits out its deadline instead. */
		rc = pthread_mutexattr_settype(&a, PTHREAD_MUTEX_NORMAL);
	if (!rc)
		rc = pthread_mutex_init(&mx->m, &a);
	(void)pthread_mutexattr_destroy(&a);
	return pd_pthread_rc(rc);
}

int pd_cond_init(struct pd_cond *cv)
{
	if (!cv)
		return -EINVAL;
	atomic_store_explicit(&cv->seq, 0, memory_order_relaxed);
	atomic_store_explicit(&cv->waiters, 0, memory_order_relaxed);
	return 0;
}

/* The holder died: repair, then declare the state consistent. On a failed
 * repair the mutex is unlocked without consistent(), which leaves it
 * permanently unrecoverable: better than handing out corrupt state. */
static int recover(struct pd_mutex *mx, pd_repair_fn *repair, void *ctx)
{
	int rc = repair ? repair(ctx) : 0;

	if (rc < 0) {
		PD_LOG(ERR, shm, "repair after owner death failed: %s", pd_strerror(rc));
		atomic_store_explicit(&mx->unrecoverable, 1, memory_order_relaxed);
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

/* Lock with an absolute CLOCK_MONOTONIC deadline. TSan (gcc 12) does not
 * intercept pthread_mutex_clocklock: its builds use timedlock on the
 * equivalent CLOCK_REALTIME deadline. */
static int lock_abs(pthread_mutex_t *m, uint64_t deadline_ns)
{
#ifdef __SANITIZE_THREAD__
	struct timespec rt;
	uint64_t now = pd_now_ns(), left = deadline_ns > now ? deadline_ns - now : 0;

	(void)clock_gettime(CLOCK_REALTIME, &rt);
	rt = pd_ns_to_ts((uint64_t)rt.tv_sec * PD_NS_PER_S + (uint64_t)rt.tv_nsec + left);
	return pthread_mutex_timedlock(m, &rt);
#else
	struct timespec ts = pd_ns_to_ts(deadline_ns);

	return pthread_mutex_clocklock(m, CLOCK_MONOTONIC, &ts);
#endif
}

/*
 * After a lock that gave up (timed out), glibc leaves the thread's robust
 * list naming the mutex as the operation in progress. Should the thread
 * exit before its next lock, the kernel then marks the mutex's holder dead
 * if the holder's thread id equals this thread's: never in one pid
 * namespace, but thread ids repeat across namespaces (agents in
 * containers), and a live holder's mutex would be "repaired" under it.
 * The thread's robust list head is the kernel's to tell (get_robust_list).
 */
static void forget_pending_op(void)
{
	static __thread struct robust_list_head *head;
	size_t len;

	if (!head && syscall(SYS_get_robust_list, 0, &head, &len) < 0)
		head = NULL;
	if (head)
		__atomic_store_n(&head->list_op_pending, NULL, __ATOMIC_RELAXED);
}

/* Try once; only when the mutex is busy wait until deadline_ns, or, when
 * that is 0, timeout_ms from now (the clock is read only then). */
static int lock_impl(struct pd_mutex *mx, uint64_t deadline_ns, uint32_t timeout_ms,
		     pd_repair_fn *repair, void *ctx)
{
	int rc;

	if (!mx)
		return -EINVAL;
	if (atomic_load_explicit(&mx->unrecoverable, memory_order_relaxed))
		return -ENOTRECOVERABLE;
	rc = pthread_mutex_trylock(&mx->m);
	if (rc == EBUSY) {
		rc = lock_abs(&mx->m, deadline_ns ? deadline_ns : pd_deadline_ms(timeout_ms));
		if (rc != 0 && rc != EOWNERDEAD)
			forget_pending_op();
	}
	if (rc == EOWNERDEAD)
		return recover(mx, repair, ctx);
	return pd_pthread_rc(rc);
}

int pd_mutex_lock_until(struct pd_mutex *mx, uint64_t deadline_ns,
			pd_repair_fn *repair, void *ctx)
{
	return lock_impl(mx, deadline_ns, 0, repair, ctx);
}

int pd_mutex_lock_timeout(struct pd_mutex *mx, uint32_t timeout_ms,
			  pd_repair_fn *repair, void *ctx)
{
	return lock_impl(mx, 0, timeout_ms, repair, ctx);
}

void pd_mutex_unlock(struct pd_mutex *mx)
{
	int rc = pthread_mutex_unlock(&mx->m);

	/* Not ours any more: its bytes were written over in shared memory (and
	 * maybe made new by the broker) while we held it. Input, not a bug. */
	if (rc)
		PD_LOG_RL(ERR, shm, "mutex unlock: %s (overwritten while held?)",
			  pd_strerror(-rc));
}

int pd_mutex_owner_alive(const struct pd_mutex *mx, int32_t pid)
{
	/* glibc: the holder's TID, FUTEX_OWNER_DIED and FUTEX_WAITERS bits. */
	uint32_t tid = (uint32_t)__atomic_load_n(&mx->m.__data.__owner, __ATOMIC_RELAXED) &
		       FUTEX_TID_MASK;
	char path[64];

	if (tid == 0 || tid > INT32_MAX)
		return 0;
	if (pid > 0)
		(void)snprintf(path, sizeof(path), "/proc/%d/task/%u", (int)pid, tid);
	else
		(void)snprintf(path, sizeof(path), "/proc/%u", tid);
	return access(path, F_OK) == 0;
}

/* The last number of status's "NSpid:" line (the id in its own
 * namespace), 0 when none. */
static unsigned long nspid_of(const char *status)
{
	char *line = NULL;
	size_t cap = 0;
	unsigned long id = 0;
	FILE *f = fopen(status, "re");

	while (f && getline(&line, &cap, f) >= 0) {
		const char *p = strncmp(line, "NSpid:", 6) == 0 ? line + 6 : NULL;
		char *end;

		for (unsigned long v; p && (v = strtoul(p, &end, 10), end != p); p = end)
			id = v;
		if (p)
			break;
	}
	free(line);
	if (f)
		(void)fclose(f);
	return id;
}

int pd_mutex_owner_in(const struct pd_mutex *mx, int32_t pid)
{
	uint32_t tid = (uint32_t)__atomic_load_n(&mx->m.__data.__owner, __ATOMIC_RELAXED) &
		       FUTEX_TID_MASK;
	char path[96];
	struct dirent *e;
	DIR *d;
	int found = 0;

	if (tid == 0 || pid <= 0)
		return 0;
	(void)snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	d = opendir(path);
	while (d && !found && (e = readdir(d))) {
		if (e->d_name[0] < '0' || e->d_name[0] > '9')
			continue;
		(void)snprintf(path, sizeof(path), "/proc/%d/task/%.16s/status", (int)pid,
			       e->d_name);
		found = nspid_of(path) == tid;
	}
	if (d)
		(void)closedir(d);
	return found;
}

void pd_mutex_wake_all(struct pd_mutex *mx)
{
	/* glibc sleeps on its lock word; shared: the sleepers are other processes. */
	(void)syscall(SYS_futex, &mx->m.__data.__lock, FUTEX_WAKE, INT32_MAX, NULL, NULL, 0);
}

static long futex(_Atomic uint32_t *word, int op, uint32_t val, const struct timespec *ts)
{
	/* Shared (not FUTEX_PRIVATE_FLAG): waiters live in other processes.
	 * FUTEX_WAIT_BITSET takes an absolute CLOCK_MONOTONIC timeout. */
	return syscall(SYS_futex, word, op, val, ts, NULL, FUTEX_BITSET_MATCH_ANY);
}

int pd_cond_wait_until(struct pd_cond *cv, struct pd_mutex *mx, uint64_t deadline_ns,
		       pd_repair_fn *repair, void *ctx)
{
	struct timespec ts = pd_ns_to_ts(deadline_ns);
	uint32_t seq;
	int timed_out, rc;

	if (!cv || !mx)
		return -EINVAL;
	/* Read under the mutex: a signal after our unlock changes seq, and
	 * the futex then returns at once instead of sleeping through it. */
	seq = atomic_load_explicit(&cv->seq, memory_order_acquire);
	atomic_fetch_add_explicit(&cv->waiters, 1, memory_order_relaxed);
	pd_mutex_unlock(mx);
	timed_out = futex(&cv->seq, FUTEX_WAIT_BITSET, seq, &ts) < 0 && errno == ETIMEDOUT;
	atomic_fetch_sub_explicit(&cv->waiters, 1, memory_order_relaxed);
	rc = pd_mutex_lock_until(mx, pd_deadline_ms(PD_COND_RELOCK_MS), repair, ctx);
	if (rc == -ETIMEDOUT)
		return -ENOLCK;
	if (rc < 0)
		return rc;
	return timed_out && rc == 0 ? -ETIMEDOUT : rc;
}

static void wake(struct pd_cond *cv, int n)
{
	atomic_fetch_add_explicit(&cv->seq, 1, memory_order_release);
	if (atomic_load_explicit(&cv->waiters, memory_order_relaxed))
		(void)futex(&cv->seq, FUTEX_WAKE, (uint32_t)n, NULL);
}

void pd_cond_signal(struct pd_cond *cv)
{
	wake(cv, 1);
}

void pd_cond_broadcast(struct pd_cond *cv)
{
	wake(cv, INT32_MAX);
}

static _Atomic int32_t self_pid;
static _Atomic uint32_t self_pidns;
static pthread_once_t self_pid_once = PTHREAD_ONCE_INIT;

static void self_pid_reset(void)
{
	atomic_store_explicit(&self_pid, 0, memory_order_relaxed);
	atomic_store_explicit(&self_pidns, 0, memory_order_relaxed);
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

uint32_t pd_self_pidns(void)
{
	uint32_t ns = atomic_load_explicit(&self_pidns, memory_order_relaxed);
	struct stat st;

	if (PD_LIKELY(ns))
		return ns;
	(void)pd_self_pid(); /* the fork hook resets this too */
	/* Namespace inodes are 32-bit numbers (proc_alloc_inum()). */
	ns = stat("/proc/self/ns/pid", &st) == 0 ? (uint32_t)st.st_ino : PD_PIDNS_UNKNOWN;
	atomic_store_explicit(&self_pidns, ns, memory_order_relaxed);
	return ns;
}

int pd_proc_alive(int32_t pid, uint32_t pidns)
{
	/* Another namespace's pid (or one that may be: either side unknown)
	 * means another process here, or none: cannot tell. */
	if (pidns != pd_self_pidns())
		return 1;
	return pd_pid_alive(pid);
}

/* State letter of pid from /proc (field 3), or 0 when unreadable. */
static char pid_state(int32_t pid)
{
	char path[64], buf[512], *p;
	ssize_t n;
	int fd;

	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return 0;
	n = read(fd, buf, sizeof(buf) - 1);
	(void)close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	p = strrchr(buf, ')');
	return p && p[1] == ' ' ? p[2] : 0;
}

int pd_pid_alive(int32_t pid)
{
	char st;

	if (pid <= 0)
		return 0;
	if (kill(pid, 0) < 0 && errno != EPERM)
		return 0;
	/* A zombie still answers kill(); it holds nothing any more. */
	st = pid_state(pid);
	return st != 'Z' && st != 'X';
}

/* Field 22 (starttime) of a /proc/.../stat file. */
static int stat_start_time(const char *path, uint64_t *out)
{
	char buf[1024];
	ssize_t n;
	char *p;
	int fd;

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

int pd_pid_start_time(int32_t pid, uint64_t *out)
{
	char path[64];

	if (pid <= 0 || !out)
		return -EINVAL;
	(void)snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	return stat_start_time(path, out);
}

int pd_self_start_time(uint64_t *out)
{
	return out ? stat_start_time("/proc/self/stat", out) : -EINVAL;
}
