/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_AGENTS_H
#define PD_BROKER_PD_AGENTS_H

/*
 * The broker's side of its agents: the attach socket, one entry per
 * attached agent (its socket is its liveness), draining each agent's
 * submission ring and filling its completion ring, with the NEED_WAKEUP
 * doorbells so that neither side spins. Control thread only.
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

struct pd_agents;

struct pd_agents_ops {
	/* Entries dequeued from agent id's submission ring (a PUT header
	 * arrives together with its chunk entries). @return entries used
	 * (the rest is offered again next turn), or -EPROTO: the agent sent
	 * garbage and is detached. */
	int (*on_sqes)(void *ctx, uint32_t id, const struct pd_sqe *e, uint32_t n);
	/* Agent id attached / is gone (socket closed: it exited or died). */
	void (*on_attach)(void *ctx, uint32_t id, const struct pd_agent_slot *s);
	void (*on_detach)(void *ctx, uint32_t id);
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
 * allows). @return 0; -ENOENT no such agent; -ENOMEM. */
int pd_agents_complete(struct pd_agents *ag, uint32_t id, const struct pd_cqe *c);

/* Drop agent id (protocol error, shutdown); on_detach runs. */
void pd_agents_kick(struct pd_agents *ag, uint32_t id);

/* Attached agents (gauge). */
uint32_t pd_agents_count(const struct pd_agents *ag);

/* Recv index pins dropped from the journals of agents that went away
 * (counter; see pd_layout_pins_reclaim()). */
uint64_t pd_agents_pins_reclaimed(const struct pd_agents *ag);

#endif
