/* SPDX-License-Identifier: MIT */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "pd_log.h"
#include "pd_time.h"

int pd_log_level = PD_LOG_NONE;
static pd_log_fn *log_fn;
static void *log_ctx;

static const char *const level_names[] = { "none", "err", "warn", "info", "debug" };

void pd_log_set_level(int level)
{
	if (level < PD_LOG_NONE)
		level = PD_LOG_NONE;
	if (level > PD_LOG_DEBUG)
		level = PD_LOG_DEBUG;
	pd_log_level = level;
}

void pd_log_set_fn(pd_log_fn *fn, void *ctx)
{
	log_fn = fn;
	log_ctx = ctx;
}

int pd_log_level_parse(const char *s)
{
	for (int i = 0; s && i < (int)PD_ARRAY_SIZE(level_names); i++)
		if (strcasecmp(s, level_names[i]) == 0)
			return i;
	return -EINVAL;
}

int pd_log_ratelimit(uint64_t *last_ns)
{
	uint64_t now = pd_now_ns();

	if (*last_ns && now - *last_ns < PD_NS_PER_S)
		return 0;
	*last_ns = now;
	return 1;
}

static void log_stderr(int level, const char *comp, const char *file, int line,
		       const char *msg)
{
	struct timespec ts;
	struct tm tm;
	char when[32];

	(void)clock_gettime(CLOCK_REALTIME, &ts);
	(void)gmtime_r(&ts.tv_sec, &tm);
	(void)strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	(void)fprintf(stderr, "%s.%03ldZ %d %ld %s %s: %s (%s:%d)\n", when,
		      ts.tv_nsec / 1000000, (int)getpid(), (long)syscall(SYS_gettid),
		      level_names[level], comp, msg, file, line);
}

void pd_log_emit(int level, const char *comp, const char *file, int line,
		 const char *fmt, ...)
{
	int saved = errno;
	char msg[512];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	if (level < PD_LOG_ERR || level > PD_LOG_DEBUG)
		level = PD_LOG_ERR;
	if (log_fn)
		log_fn(log_ctx, level, comp, msg);
	else
		log_stderr(level, comp, file, line, msg);
	errno = saved;
}

void pd_assert_fail(const char *expr, const char *file, int line)
{
	(void)fprintf(stderr, "pdkv: assertion failed: %s (%s:%d)\n", expr, file, line);
	abort();
}
