/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_LOG_H
#define PD_SHM_PD_LOG_H

#include <stdint.h>

#include "pd_compiler.h"

/* Levels; a message is emitted when its level <= the current level. */
#define PD_LOG_NONE  0
#define PD_LOG_ERR   1
#define PD_LOG_WARN  2
#define PD_LOG_INFO  3
#define PD_LOG_DEBUG 4

typedef void pd_log_fn(void *ctx, int level, const char *comp, const char *msg);

/* Silent by default (the agent library must print nothing unless asked). */
extern int pd_log_level;

void pd_log_set_level(int level);
/* Route messages to fn (NULL restores stderr). */
void pd_log_set_fn(pd_log_fn *fn, void *ctx);
/* Parse "none|err|warn|info|debug"; -EINVAL when unknown. */
int pd_log_level_parse(const char *s);

void pd_log_emit(int level, const char *comp, const char *file, int line,
		 const char *fmt, ...) PD_PRINTF(5, 6);
/* Rate limit: at most one message per site per second; 1 = emit. */
int pd_log_ratelimit(uint64_t *last_ns);

/* The level check comes before the arguments are evaluated. */
#define PD_LOG(lvl, comp, ...)                                                \
	do {                                                                  \
		if (PD_LOG_##lvl <= pd_log_level)                             \
			pd_log_emit(PD_LOG_##lvl, #comp, __FILE__, __LINE__,   \
				    __VA_ARGS__);                             \
	} while (0)

#define PD_LOG_RL(lvl, comp, ...)                                             \
	do {                                                                  \
		static uint64_t pd_rl_last_;                                  \
		if (PD_LOG_##lvl <= pd_log_level &&                           \
		    pd_log_ratelimit(&pd_rl_last_))                           \
			pd_log_emit(PD_LOG_##lvl, #comp, __FILE__, __LINE__,   \
				    __VA_ARGS__);                             \
	} while (0)

#ifdef PD_DEBUG
#define PD_DLOG(comp, ...) PD_LOG(DEBUG, comp, __VA_ARGS__)
#else
#define PD_DLOG(comp, ...) do { } while (0)
#endif

/* Always-on assertion for the process's own invariants (never for data
 * from another process: that is validated and returns -EPROTO). */
#define PD_ASSERT(e)                                                          \
	do {                                                                  \
		if (PD_UNLIKELY(!(e)))                                        \
			pd_assert_fail(#e, __FILE__, __LINE__);               \
	} while (0)

PD_NORETURN void pd_assert_fail(const char *expr, const char *file, int line);

#endif
