/* SPDX-License-Identifier: MIT */
#ifndef PD_AGENT_PD_AGENT_INT_H
#define PD_AGENT_PD_AGENT_INT_H

/* libpdagent internals, shared by the agent library sources only. */
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include <pdkv/agent.h>

#include "pd_layout.h"
#include "pd_log.h"
#include "pd_reqtab.h"

#define AG_MAX_EVENTS    4096u /* completions waiting for pd_next_event() */
#define AG_MAX_MAIL      256u  /* answers waiting for their caller */
#define AG_MAX_ABANDONED 1024u /* asks whose caller timed out: their late answers are dropped */
#define AG_MAX_CANCELLED 64u   /* remembered cancels (refuse later allocs) */
#define AG_SLICE_MS      100u  /* waits re-check the broker at least this often */
#define AG_ATTACH_MS     5000u /* attach_timeout_ms 0 */
#define AG_ASK_MS        5000u /* bound on an answer the broker owes at once */

struct ag_pin {
	uint64_t req_tag;
	uint64_t rec;                /* the hazard it holds (PD_INDEX_HAZARD) */
	uint32_t cell;               /* our journal cell that records this pin */
};

struct pd_agent {
	struct pd_shm shm;
	int sock;                    /* to the broker: its closing is the broker's death */
	int bell_in;                 /* the broker rings it: completions */
	int bell_out;                /* we ring it: submissions */
	uint32_t id;
	uint32_t roles;              /* PD_AGENT_SEND | PD_AGENT_RECV, as attached */
	uint64_t epoch;
	struct pd_ring_view sq, cq;
	_Atomic int gone;            /* the broker is gone: everything fails -ENOTCONN */
	_Atomic uint64_t sock_seen_ns; /* the socket was last polled (pd_ag_check_broker) */

	pthread_mutex_t sq_lock;     /* one producer at a time */
	struct pd_sqe *sqbuf;        /* a PUT being built (under sq_lock) */
	uint32_t sqbuf_cap;

	pthread_mutex_t lock;        /* everything below */
	pthread_cond_t cond;         /* a completion was filed */
	int reader;                  /* a thread is reading the completion ring */
	struct pd_cqe *events;       /* PUT_DONE / PUT_FAILED, FIFO */
	uint32_t ev_head, ev_count;
	struct pd_cqe mail[AG_MAX_MAIL]; /* answers, found by user */
	uint32_t nmail;
	uint64_t abandoned[AG_MAX_ABANDONED]; /* ring of user ids; 0 = empty */
	uint32_t abandoned_next;
	uint64_t next_user;
	uint64_t cancelled[AG_MAX_CANCELLED]; /* request tags */
	uint32_t ncancelled;
	struct pd_reqtab reqs;       /* requests declared here: the staging gate */
	struct ag_pin *pins;
	uint32_t npins, pins_cap;
	/* Our pin journal in shm (slot id - 1): our hazards, which the broker
	 * empties if we die. A pin is taken only with a free cell. */
	_Atomic uint64_t *journal;   /* NULL: none (no recv side) */
	uint32_t njournal;           /* its cells */
	uint32_t *free_cells;        /* stack of free cell numbers */
	uint32_t nfree_cells;

	struct pd_log_sink sink;     /* pd_agent_set_log_fn(): this agent's lines */
};

/* pd_agent.c */
int pd_ag_check_broker(void *ctx);
/* 1 when the broker fenced this agent (a lease broke) and serves it no
 * more: its slot of the agent table says so. */
int pd_ag_fenced(const struct pd_agent *a);
/* 1 when a attached as a sender and its broker has a send pool. */
int pd_ag_sends(const struct pd_agent *a);
uint64_t pd_ag_tag(const void *req_id, uint32_t len);

/* pd_agent_abi.c */
/* The caller's options (NULL: the defaults) as this library's struct: the
 * fields its opts_size holds, defaults for the rest. 0; -EINVAL opts_size
 * too small or too large, or bytes past this library's fields not zero. */
int pd_ag_opts_read(const struct pd_agent_opts *in, struct pd_agent_opts *out);
/* 1 when the n bytes at p are all zero (reserved bytes unused). */
int pd_ag_zeroed(const void *p, size_t n);

/* A line of this agent (component "agent"), to its sink; the level check
 * comes before the arguments are evaluated. */
#define AG_LOG(a, lvl, ...)                                                             \
	do {                                                                            \
		if (PD_LOG_##lvl <= pd_log_level)                                       \
			pd_log_emit_to(&(a)->sink, PD_LOG_##lvl, "agent", __FILE__, __LINE__, \
				       __VA_ARGS__);                                    \
	} while (0)

static inline void ag_scope_end(const struct pd_log_sink *const *prev)
{
	pd_log_scope_leave(*prev);
}

/* Until the end of the enclosing block, what the core logs on this thread
 * (a pool repaired after a dead holder, ...) is a's: it goes to a's sink.
 * Every public call on an agent that reaches the core opens one; a may be
 * NULL (the process's destination). */
#define AG_LOG_SCOPE(a)                                                        \
	const struct pd_log_sink *const ag_scope_prev_                         \
		__attribute__((cleanup(ag_scope_end), unused)) =               \
			pd_log_scope_enter((a) ? &(a)->sink : NULL)

/* pd_agent_recv.c */
int pd_ag_journal_init(struct pd_agent *a);
void pd_ag_unpin_all(struct pd_agent *a);

/* pd_agent_cq.c */
int pd_ag_submit(struct pd_agent *a, const struct pd_sqe *e, uint32_t n);
int pd_ag_submit_locked(struct pd_agent *a, const struct pd_sqe *e, uint32_t n);
int pd_ag_wait_event(struct pd_agent *a, struct pd_cqe *out, uint32_t timeout_ms);
int pd_ag_wait_mail(struct pd_agent *a, uint64_t user, struct pd_cqe *out, uint32_t timeout_ms);
/* File what the broker has sent so far, without waiting (unless another
 * thread is reading: then nothing). lazy: an empty ring costs no syscall
 * (its bell is not cleared: not for pd_next_event(), whose caller may
 * poll pd_agent_fd()). */
void pd_ag_poll(struct pd_agent *a, int lazy);
/* Until req_id may take staging or deadline_ns: pd_reqtab_gate()'s answer
 * (-EAGAIN at the deadline); -ENOTCONN. */
int pd_ag_wait_admitted(struct pd_agent *a, const uint8_t *id, uint32_t len, uint64_t deadline_ns);
int pd_ag_is_cancelled(struct pd_agent *a, uint64_t tag);
void pd_ag_mark_cancelled(struct pd_agent *a, uint64_t tag);
int pd_ag_req_copy(uint8_t *dst, uint8_t *dst_len, const char *req_id);

#endif
