/* SPDX-License-Identifier: MIT */
/* The process's logger: see pd_log.h for where a line goes. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

_Static_assert(PD_LOG_NONE == 0 && PD_LOG_ERR == 1 && PD_LOG_WARN == 2 && PD_LOG_INFO == 3 &&
	       PD_LOG_DEBUG == 4, "level_names[] is indexed by level");

#define MSG_MAX  512  /* a message, formatted */
#define COMP_MAX 15   /* a component's name */
#define LINE_MAX 1024 /* a line with its time, ids, level and place */

_Atomic int pd_log_level = PD_LOG_NONE;

/* The destinations. Written under the write lock, read under the read lock. */
static pthread_rwlock_t lock = PTHREAD_RWLOCK_INITIALIZER;
static int proc_level = PD_LOG_NONE;
static pd_log_fn *proc_fn;
static void *proc_ctx;
static int proc_fd = -1;      /* PD_LOG_FILE; -1: stderr */
static uint32_t nsinks;       /* sinks with a function: they take every level */

static _Thread_local const struct pd_log_sink *scope;
static pthread_once_t env_once = PTHREAD_ONCE_INIT;

static const char *const level_names[] = { "none", "err", "warn", "info", "debug" };

static int clamp(int level)
{
	return level < PD_LOG_NONE ? PD_LOG_NONE : level > PD_LOG_DEBUG ? PD_LOG_DEBUG : level;
}

/* Write lock held. */
static void update_gate(void)
{
	atomic_store_explicit(&pd_log_level, nsinks ? PD_LOG_DEBUG : proc_level,
			      memory_order_relaxed);
}

void pd_log_set_level(int level)
{
	(void)pthread_rwlock_wrlock(&lock);
	proc_level = clamp(level);
	update_gate();
	(void)pthread_rwlock_unlock(&lock);
}

void pd_log_set_fn(pd_log_fn *fn, void *ctx)
{
	(void)pthread_rwlock_wrlock(&lock);
	proc_fn = fn;
	proc_ctx = ctx;
	(void)pthread_rwlock_unlock(&lock);
}

void pd_log_sink_set(struct pd_log_sink *s, pd_log_line_fn *fn, void *ctx)
{
	if (!s)
		return;
	(void)pthread_rwlock_wrlock(&lock);
	nsinks += (fn != NULL) - (s->fn != NULL);
	s->fn = fn;
	s->ctx = fn ? ctx : NULL;
	update_gate();
	(void)pthread_rwlock_unlock(&lock);
}

const struct pd_log_sink *pd_log_scope_enter(const struct pd_log_sink *s)
{
	const struct pd_log_sink *prev = scope;

	scope = s;
	return prev;
}

void pd_log_scope_leave(const struct pd_log_sink *prev)
{
	scope = prev;
}

int pd_log_level_parse(const char *s)
{
	for (int i = 0; s && i < (int)PD_ARRAY_SIZE(level_names); i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return i;
	return -EINVAL;
}

int pd_log_ratelimit(_Atomic uint64_t *last_ns)
{
	uint64_t now = pd_now_ns();
	uint64_t last = atomic_load_explicit(last_ns, memory_order_relaxed);

	if (last && now - last < PD_NS_PER_S)
		return 0;
	/* One thread of those racing here wins the second. */
	return atomic_compare_exchange_strong_explicit(last_ns, &last, now, memory_order_relaxed,
						       memory_order_relaxed);
}

/* ---- the environment ------------------------------------------------------- */

static void load_env(void)
{
	const char *lv = getenv("PD_LOG_LEVEL"), *path = getenv("PD_LOG_FILE");
	int level = lv ? pd_log_level_parse(lv) : PD_LOG_NONE;
	int fd = -1, err = 0;

	if (level < 0) /* the user asked for logs: say once why there are none */
		(void)fprintf(stderr, "pdkv: PD_LOG_LEVEL=%s: not none|err|warn|info|debug; "
			      "logging stays off\n", lv);
	if (level <= PD_LOG_NONE)
		return;
	if (path && *path) {
		fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
		err = fd < 0 ? errno : 0;
	}
	(void)pthread_rwlock_wrlock(&lock);
	proc_fd = fd;
	proc_level = level;
	update_gate();
	(void)pthread_rwlock_unlock(&lock);
	if (err)
		PD_LOG(WARN, log, "PD_LOG_FILE %s: %s; logging to stderr", path, strerror(err));
}

void pd_log_init_env(void)
{
	int saved = errno;

	(void)pthread_once(&env_once, load_env);
	errno = saved;
}

int pd_log_stderr_to(const char *path)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
	int rc = 0;

	if (fd < 0)
		return -errno;
	if (fd == STDERR_FILENO) /* stderr was closed: the file took its place */
		return pd_sys_rc(fcntl(fd, F_SETFD, 0));
	(void)fflush(stderr);
	if (dup2(fd, STDERR_FILENO) < 0) /* atomic: a write goes to the old or the new file */
		rc = -errno;
	(void)close(fd);
	return rc;
}

/* ---- delivery ---------------------------------------------------------------- */

/* One line, the broker's format: RFC3339 time (ms), pid, tid, level,
 * component, message, place. Written at once: lines never interleave. */
static void write_line(int level, const char *comp, const char *file, int line,
		       const char *msg)
{
	char buf[LINE_MAX];
	struct timespec ts;
	struct tm tm;
	char when[32];
	int n;

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	(void)gmtime_r(&ts.tv_sec, &tm);
	(void)strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	n = snprintf(buf, sizeof(buf), "%s.%03ldZ %d %ld %s %s: %s (%s:%d)\n", when,
		     ts.tv_nsec / 1000000, (int)getpid(), (long)syscall(SYS_gettid),
		     level_names[level], comp, msg, file, line);
	if (n < 0)
		return;
	if ((size_t)n >= sizeof(buf)) { /* truncated: keep the newline */
		n = (int)sizeof(buf) - 1;
		buf[n - 1] = '\n';
	}
	if (proc_fd >= 0)
		(void)!write(proc_fd, buf, (size_t)n);
	else
		(void)fputs(buf, stderr);
}

/* Lock held for reading. line_buf is "comp: message"; msg its message. */
static void deliver(const struct pd_log_sink *s, int level, const char *comp, const char *file,
		    int line, const char *line_buf, const char *msg)
{
	if (s && s->fn)
		s->fn(s->ctx, level, line_buf);
	else if (level > proc_level)
		return;
	else if (proc_fn)
		proc_fn(proc_ctx, level, comp, msg);
	else
		write_line(level, comp, file, line, msg);
}

PD_PRINTF(6, 0)
static void vemit(const struct pd_log_sink *s, int level, const char *comp, const char *file,
		  int line, const char *fmt, va_list ap)
{
	char buf[COMP_MAX + 2 + MSG_MAX]; /* "comp: message" */
	int saved = errno;
	int pre = snprintf(buf, COMP_MAX + 3, "%s: ", comp);

	if (pre < 0 || pre > COMP_MAX + 2)
		pre = 0;
	(void)vsnprintf(buf + pre, sizeof(buf) - (size_t)pre, fmt, ap);
	if (level < PD_LOG_ERR || level > PD_LOG_DEBUG)
		level = PD_LOG_ERR;
	if (pthread_rwlock_rdlock(&lock) == 0) { /* else the line is dropped */
		deliver(s, level, comp, file, line, buf, buf + pre);
		(void)pthread_rwlock_unlock(&lock);
	}
	errno = saved;
}

void pd_log_emit(int level, const char *comp, const char *file, int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vemit(scope, level, comp, file, line, fmt, ap);
	va_end(ap);
}

void pd_log_emit_to(const struct pd_log_sink *s, int level, const char *comp, const char *file,
		    int line, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vemit(s, level, comp, file, line, fmt, ap);
	va_end(ap);
}

void pd_assert_fail(const char *expr, const char *file, int line)
{
	(void)fprintf(stderr, "pdkv: assertion failed: %s (%s:%d)\n", expr, file, line);
	abort();
}
