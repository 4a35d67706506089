/* SPDX-License-Identifier: MIT */
#ifndef PD_AGENT_PD_REQTAB_H
#define PD_AGENT_PD_REQTAB_H

/*
 * The requests an agent declared (pd_declare), and where each stands: the
 * gate that lets pd_alloc() loan staging only to admitted requests. Pure
 * data, no locking (the agent holds its lock around every call), no I/O.
 *
 * An entry is one req_id; it records which ranks this agent declared for
 * it (an agent normally sends one rank, tests may send several), which of
 * them the broker admitted, which ended, and the first failure. It answers:
 *   DECLARED  some declared rank is not admitted yet
 *   ADMITTED  every declared rank is admitted, none failed or all ended
 *   DONE      every declared rank ended, none failed
 *   FAILED    a rank failed (its status)
 * Entries whose ranks all ended are kept (so a late call still gets the
 * request's outcome, not "never declared") until room is needed: then the
 * oldest ended entry goes.
 */
#include <stdint.h>

#include <pdkv/types.h>

#include <bsd/sys/queue.h>
#include <bsd/sys/tree.h>

#define PD_REQTAB_MAX   65536u /* entries, live and ended */
#define PD_REQTAB_RANKS 64u    /* ranks per request (the receiver's bound) */

/* Where a request stands (the public PD_REQ_* values). */
#define PD_REQTAB_DECLARED 1
#define PD_REQTAB_ADMITTED 2
#define PD_REQTAB_DONE     3
#define PD_REQTAB_FAILED   4

struct pd_reqtab_ent {
	RB_ENTRY(pd_reqtab_ent) node;
	TAILQ_ENTRY(pd_reqtab_ent) ended_link; /* on t->ended once every rank ended */
	uint64_t ranks;              /* bit per rank declared here */
	uint64_t admitted;           /* of them, admitted */
	uint64_t ended;              /* of them, ended (done or failed) */
	int32_t status;              /* first failure, 0 none */
	uint8_t id_len;
	uint8_t id[PD_REQ_ID_MAX];
};

RB_HEAD(pd_reqtab_tree, pd_reqtab_ent);
TAILQ_HEAD(pd_reqtab_list, pd_reqtab_ent);

struct pd_reqtab {
	struct pd_reqtab_tree by_id;
	struct pd_reqtab_list ended; /* oldest first */
	uint32_t n;                  /* entries */
	uint32_t nended;
	uint32_t max;                /* entries at most (0: PD_REQTAB_MAX) */
};

void pd_reqtab_init(struct pd_reqtab *t, uint32_t max);
void pd_reqtab_fini(struct pd_reqtab *t);

/* Rank `rank` of id is declared here. @return 0; -EEXIST that rank is
 * known (live or ended); -EINVAL rank >= PD_REQTAB_RANKS; -EBUSY every
 * entry is live; -ENOMEM. */
int pd_reqtab_declare(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank);
/* Forget a declaration that never reached the broker. */
void pd_reqtab_undeclare(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank);

/* Events from the broker for (id, rank): admitted; ended (status 0 done,
 * < 0 failed). Unknown ids and ranks are ignored. */
void pd_reqtab_admitted(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank);
void pd_reqtab_ended(struct pd_reqtab *t, const uint8_t *id, uint32_t len, uint32_t rank,
		     int32_t status);

/* Where id stands: PD_REQTAB_* (status set for FAILED, else 0), or
 * -ENOENT never declared here (or forgotten long after it ended). */
int pd_reqtab_state(const struct pd_reqtab *t, const uint8_t *id, uint32_t len,
		    int32_t *status);

/*
 * May id take staging now? 0 yes (admitted); -EAGAIN not admitted yet;
 * -ENOENT never declared; -EALREADY it completed; -ECANCELED it failed or
 * was cancelled (pd_reqtab_state() has the status).
 */
int pd_reqtab_gate(const struct pd_reqtab *t, const uint8_t *id, uint32_t len);

#endif
