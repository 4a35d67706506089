/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_AGENTS_H
#define PD_BROKER_PD_AGENTS_H

/*
 * The broker's side of its agents: the attach socket, one entry per
 * attached agent (its socket is its liveness), draining each agent's
 * submission ring and filling its completion ring, with the NEED_WAKEUP
 * doorbells so that neither side spins. Control thread only.
 *
 * Attach: a connection accepted waits for its hello in a table of its own
 * (PD_AGENTS_HELLO_MAX at once; one more evicts the oldest), each with a
 * deadline of PD_AGENTS_HELLO_MS, so connections that never say hello
 * neither take an agent's slot nor hold anyone else's attach up. A valid
 * hello from a permitted peer takes a free agent slot; with every slot
 * taken (the segment's max_agents, --max-agents) it is refused with
 * -EUSERS, counted, and logged once per burst of such refusals.
 *
 * When an agent goes (socket closed, or kicked), the recv index pins
 * recorded in its pin journal are dropped before on_detach runs; the
 * journal is walked again before the slot's next agent is admitted.
 *
 * Doorbells: one eventfd the broker sleeps on (every agent may ring it) and
 * one per agent (the broker rings it). Before the loop sleeps the broker
 * raises every submission ring's flag and re-checks; an agent that
 * enqueues after that sees the flag and rings.
 */
#include <stdint.h>
#include <sys/types.h>

#include "pd_layout.h"
#include "pd_loop.h"
#include "pd_sync.h"

#define PD_AGENTS_HELLO_MAX 64u   /* connections waiting for their hello at once */
#define PD_AGENTS_HELLO_MS  2000u /* each one's deadline, from its accept */

struct pd_agents;

/* Counters (and the pending gauge) for the statistics region. */
struct pd_agents_stats {
	uint64_t pins_reclaimed;     /* recv pins emptied from gone agents' journals */
	uint64_t refused_full;       /* hellos refused: every agent slot taken (-EUSERS) */
	uint64_t pending_evicted;    /* closed before their hello: newer ones filled the table */
	uint64_t hello_timeouts;     /* closed: no hello within PD_AGENTS_HELLO_MS */
	uint64_t accept_failed;      /* accepting paused: out of file descriptors */
	uint64_t pending;            /* gauge: connections waiting for their hello */
};

struct pd_agents_ops {
	/* Entries dequeued from agent id's submission ring (a PUT header
	 * arrives together with its chunk entries). @return entries used
	 * (the rest is offered again next turn), or -EPROTO: the agent sent
	 * garbage and is detached. */
	int (*on_sqes)(void *ctx, uint32_t id, const struct pd_sqe *e, uint32_t n);
	/* Agent id attached / is gone (socket closed: it exited or died). */
	void (*on_attach)(void *ctx, uint32_t id, const struct pd_agent_slot *s);
	void (*on_detach)(void *ctx, uint32_t id);
	/* Agent id was fenced and could not be killed (pd_agents_fence()): its
	 * requests end now; its loans stay its own until on_detach (optional). */
	void (*on_fence)(void *ctx, uint32_t id);
};

struct pd_agents_opts {
	struct pd_shm *shm;         /* borrowed */
	struct pd_loop *loop;       /* borrowed */
	const char *sock_path;
	uint32_t mode;              /* socket mode; 0: 0660 */
	gid_t group;                /* (gid_t)-1: none */
	uint64_t epoch;
	const struct pd_agents_ops *ops;
	void *ctx;
};

int pd_agents_create(const struct pd_agents_opts *o, struct pd_agents **out, char *err,
		     size_t errlen);
/* Detach everyone (no callbacks), close and unlink the socket. NULL-safe. */
void pd_agents_destroy(struct pd_agents *ag);

/* Loop hook, once per turn: drain submission rings, flush pending
 * completions; when all is quiet, arm the doorbells. */
void pd_agents_before_sleep(struct pd_agents *ag);

/* Periodic: hello deadlines, retry of completions waiting for ring room. */
void pd_agents_tick(struct pd_agents *ag, uint64_t now_ns);

/* Queue a completion for agent id (kept in order; delivered as ring room
 * allows). At most 4096 wait per agent beyond its ring: an agent that
 * reads none costs the broker that much, no more; the rest are dropped,
 * counted and logged. @return 0; -ENOENT no such agent; -ENOBUFS its
 * queue is full (dropped); -ENOMEM. */
int pd_agents_complete(struct pd_agents *ag, uint32_t id, const struct pd_cqe *c);

/* Drop agent id (protocol error, shutdown); on_detach runs. */
void pd_agents_kick(struct pd_agents *ag, uint32_t id);

/**
 * Fence agent id, attached as process pid, for why (logged): it is no
 * longer served and its process is sent SIGKILL, since it can still write
 * the staging memory it was loaned, which is given to others only once it
 * cannot: its socket closes as it dies and on_detach runs as for any agent
 * gone. When it cannot be killed (another user's, or the broker's own
 * process), its pins are dropped and on_fence runs now; its loans wait for
 * its detach or exit. The id is not given to a new agent meanwhile. @return 0; -ENOENT not attached, or not
 * as pid.
 */
int pd_agents_fence(struct pd_agents *ag, uint32_t id, int32_t pid, const char *why);

/* The pid agent id attached as (SO_PEERCRED) while attached or fenced
 * and not yet gone; 0 otherwise, and when its process is not visible in
 * the broker's pid namespace. */
int32_t pd_agents_pid(const struct pd_agents *ag, uint32_t id);
/* The tensor-parallel rank and size agent id said at its hello; -ENOENT not attached. */
int pd_agents_tp(const struct pd_agents *ag, uint32_t id, uint32_t *rank, uint32_t *size);

/* Completions waiting for room in agents' rings (gauge) and dropped
 * because an agent's queue was full (counter). */
void pd_agents_cq_stats(const struct pd_agents *ag, uint64_t *queued, uint64_t *dropped);

/* An agent's process as its records in the send pool name it: the pid
 * and pid namespace its hello said (pd_self_pidns(); the two differ from
 * SO_PEERCRED's pid when it runs in another pid namespace, a container).
 * Only ever matched against those records; what is killed is the
 * SO_PEERCRED pid. */
struct pd_agent_proc {
	int32_t pid;
	uint32_t pidns;
};

/* Does a pool record of pid in namespace pidns name process p (pd_proc_is)? */
static inline int pd_agent_proc_is(const struct pd_agent_proc *p, int32_t pid, uint32_t pidns)
{
	return pd_proc_is(pid, pidns, p->pid, p->pidns);
}

/* 1 while agent id is attached or fenced and not yet gone, else 0. */
int pd_agents_live(const struct pd_agents *ag, uint32_t id);
/* The process of slot id's agent, or of its last one once gone (until the
 * slot is taken again). @return 0; -ENOENT never attached. */
int pd_agents_proc(const struct pd_agents *ag, uint32_t id, struct pd_agent_proc *out);
/* The attached agent of that process (its first), 0 when none. */
uint32_t pd_agents_by_proc(const struct pd_agents *ag, const struct pd_agent_proc *proc);

/* Agents fenced since start (counter). */
uint64_t pd_agents_fenced(const struct pd_agents *ag);

/* Attached agents (gauge). */
uint32_t pd_agents_count(const struct pd_agents *ag);

/* The counters; pins_reclaimed counts the recv pins (non-empty journal
 * cells) emptied for agents that went away (see pd_layout_pins_reclaim()). */
void pd_agents_get_stats(const struct pd_agents *ag, struct pd_agents_stats *out);

#endif
