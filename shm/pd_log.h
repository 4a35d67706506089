/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_LOG_H
#define PD_SHM_PD_LOG_H

/*
 * One logger per process: the broker's and pdctl's lines, the agent
 * library's, and what the core (shm/) logs for either of them.
 *
 * Where a line goes:
 *  - on a thread inside an agent call, the core's lines belong to that
 *    agent (pd_log_scope_enter()): when its sink has a function, the
 *    function gets every line, of every level, as "comp: message";
 *  - otherwise the process's destination takes the lines up to the
 *    process level (pd_log_set_level(), or PD_LOG_LEVEL through
 *    pd_log_init_env()): the function of pd_log_set_fn(), else the file
 *    PD_LOG_FILE names, else stderr.
 * Silent by default: the process level starts at PD_LOG_NONE.
 *
 * Thread-safety: every function may be called from any thread. A
 * destination changes under a write lock and a line is delivered under
 * the read lock, so once pd_log_set_fn() or pd_log_sink_set() returns,
 * the function replaced is not running and will not be called again. A
 * log function must not call back into the logger's setters.
 */
#include <stdint.h>

#include <pdkv/types.h> /* PD_LOG_ERR .. PD_LOG_DEBUG: the levels are the public ones */

#include "pd_compiler.h"

/* Levels; a message is emitted when its level <= the current level. */
#define PD_LOG_NONE 0

typedef void pd_log_fn(void *ctx, int level, const char *comp, const char *msg);

/* The most verbose level any destination wants: PD_LOG checks it before
 * evaluating its arguments. Written by the setters below only. */
extern _Atomic int pd_log_level;

/* The process level (clamped to PD_LOG_NONE .. PD_LOG_DEBUG). */
void pd_log_set_level(int level);
/* Route the process's lines to fn (NULL restores the file or stderr). */
void pd_log_set_fn(pd_log_fn *fn, void *ctx);
/* Parse "none|err|warn|info|debug" (any case); -EINVAL when unknown. */
int pd_log_level_parse(const char *s);
/* Once per process (later calls do nothing): PD_LOG_LEVEL sets the process
 * level, PD_LOG_FILE (appended; stderr when it cannot be opened) its
 * destination. Unset, "none" or unknown: silent. The agent library calls
 * it at attach; the broker does not (it has --log-level, --log-file). */
void pd_log_init_env(void);

/* stderr (fd 2) becomes the file at path, opened for appending (created
 * with mode 0640): the broker's --log-file, and its reopening on SIGHUP
 * after a rotation renamed the old file away. A line written meanwhile by
 * another thread goes whole to one file or the other.
 * @return 0; -errno from open() or dup2() (stderr is unchanged). */
int pd_log_stderr_to(const char *path);

/* ---- per-agent sinks ----------------------------------------------------- */

/* The function of a sink: one call per line, "comp: message" (the same
 * type as the public pd_agent_log_fn). */
typedef void pd_log_line_fn(void *ctx, int level, const char *line);

/* A destination for one scope (an agent). Zero-initialised: none. Its
 * fields are written by pd_log_sink_set() only. */
struct pd_log_sink {
	pd_log_line_fn *fn;          /* NULL: the process's destination */
	void *ctx;
};

/* Set s's function (NULL: none). Call it with NULL before s's memory goes. */
void pd_log_sink_set(struct pd_log_sink *s, pd_log_line_fn *fn, void *ctx);
/* Until pd_log_scope_leave(), what this thread logs goes to s (NULL: the
 * process's destination). @return the scope to restore. */
const struct pd_log_sink *pd_log_scope_enter(const struct pd_log_sink *s);
void pd_log_scope_leave(const struct pd_log_sink *prev);

void pd_log_emit(int level, const char *comp, const char *file, int line,
		 const char *fmt, ...) PD_PRINTF(5, 6);
/* The same, to s instead of this thread's scope. */
void pd_log_emit_to(const struct pd_log_sink *s, int level, const char *comp, const char *file,
		    int line, const char *fmt, ...) PD_PRINTF(6, 7);
/* Rate limit: at most one message per site per second; 1 = emit. */
int pd_log_ratelimit(_Atomic uint64_t *last_ns);

/* The level check comes before the arguments are evaluated. */
#define PD_LOG(lvl, comp, ...)                                                \
	do {                                                                  \
		if (PD_LOG_##lvl <= pd_log_level)                             \
			pd_log_emit(PD_LOG_##lvl, #comp, __FILE__, __LINE__,   \
				    __VA_ARGS__);                             \
	} while (0)

#define PD_LOG_RL(lvl, comp, ...)                                             \
	do {                                                                  \
		static _Atomic uint64_t pd_rl_last_;                          \
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
