/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_AGENTS_INT_H
#define PD_BROKER_PD_AGENTS_INT_H

/*
 * Internal to pd_agents*.c. pd_agents.c holds the agent table (rings,
 * completions, detaching, lifetime); pd_agents_attach.c the attach socket:
 * connections waiting for their hello, each with its own deadline, in a
 * table of their own, so that they never take an agent's slot.
 */
#include <stdint.h>
#include <sys/socket.h>

#include "pd_agents.h"
#include "pd_attach.h"
#include "pd_tree.h"

#define E_FREE     0u
#define E_ATTACHED 1u
#define E_FENCED   2u /* its leases broke: killed, gone when its socket closes */

struct pending {
	STAILQ_ENTRY(pending) link;
	struct pd_cqe c;
};

/* One agent slot of the table. */
struct ent {
	struct pd_agents *ag;
	uint32_t id;                 /* 1-based; slot id - 1 in the table */
	uint32_t state;
	int fd;
	int bell;                    /* the broker rings it: completions ready */
	struct pd_ring_view sq, cq;
	STAILQ_HEAD(, pending) pend;
	uint32_t npend;
	int32_t pid;                 /* from SO_PEERCRED at hello (0: not visible here) */
	struct pd_agent_proc proc;   /* from its hello; kept after it goes */
	uint32_t tp_rank, tp_size;   /* from its hello (checked: rank < size) */
};

/* A connection accepted whose hello has not been read yet. */
struct hello_conn {
	struct pd_agents *ag;
	struct pd_attach_conn conn;  /* conn.fd -1: free; conn.start_ns: accepted at */
};

struct pd_agents {
	struct pd_agents_opts o;
	char path[108];
	int lfd;
	int bell;                    /* agents ring it: submissions ready */
	uint32_t nattached;
	uint32_t max;
	struct pd_sqe *buf;          /* one PUT: header + PD_RX_MAX_BATCH chunks */
	struct pd_agents_stats st;   /* st.pending is kept in nhello */
	uint64_t fenced;             /* agents fenced (pd_agents_fence()) */
	uint64_t cq_dropped;         /* completions refused: the agent's queue was full */
	uint32_t nhello;             /* connections in hello[] */
	int accept_paused;           /* the listening socket unwatched until the next tick */
	uint32_t full_burst;         /* refusals of a full table since the one logged */
	uint64_t full_last_ns;       /* the latest of them */
	struct hello_conn hello[PD_AGENTS_HELLO_MAX];
	struct ent ent[PD_MAX_AGENTS];
};

/* pd_agents.c: agent slot e takes the connection fd of a valid hello from
 * a peer with credentials cred: rings reset, doorbell made, ack with the
 * fds sent, on_attach run. On failure fd is closed and e stays free.
 * @return 0 or -errno. */
int pd_agents_admit(struct ent *e, int fd, const struct pd_attach_hello *h,
		    const struct ucred *cred);

/* pd_agents_attach.c: the listening socket's handler, and the hello table's
 * share of the tick (deadlines, the end of a burst of refusals, accepting
 * again after running out of file descriptors). */
void pd_agents_on_accept(void *ctx, uint32_t events);
void pd_agents_hello_tick(struct pd_agents *ag, uint64_t now_ns);
/* Close every connection still waiting for its hello. */
void pd_agents_hello_close_all(struct pd_agents *ag);

#endif
