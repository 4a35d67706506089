/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer target for what agents submit: entries written into an agent's
 * submission ring as an agent writes them, taken by the broker's agent
 * module (broker/local/pd_agents.c: a PUT with its chunks, or the agent is
 * kicked) and checked and run by the broker's agent ops
 * (broker/pd_broker_agents.c), on a broker of pdbroker's own parts
 * (fuzz_broker.h). A bad entry is refused (a failed completion, or the
 * agent kicked), never a crash, an assertion or a leak. Every completion
 * the broker writes is well formed. Once the agent is gone the broker
 * holds nothing of it: every send slot is free, no request is live, the
 * engines' own checks pass, and no message the broker built was refused
 * by the codec.
 *
 *   make fuzz-ring FUZZ_SECONDS=60
 *
 * Input: records, until the input ends.
 *   [ctl < 0xf0][len u16][len bytes]  a submission entry: these bytes at
 *       its start, zeros after (len is capped at an entry). ctl bit 0:
 *       its chunk.slot becomes a slot this agent holds (the slot field's
 *       low byte picks which); bit 1: the entries so far go into the ring
 *       now (each enqueue is one bulk, as the agent's) and the broker
 *       takes a turn.
 *   [0xf0 + action][arg]  the agent, its receiver or the transport acts:
 *       0 loan arg % 8 + 1 slots, 1 free a slot held, 2 submit and take
 *       turns, 3 the broker's tick, 4 the receiver answers the last
 *       AllocRequest (arg bit 0: Reserve; bit 1: refused), 5 detach and
 *       attach again (at tp rank arg % 4), 6 writes fail from now on
 *       (arg bit 0) or not.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_broker.h"
#include "fuzz_ctrl.h"
#include "fuzz_input.h"
#include "fuzz_play.h"
#include "fuzz_xport.h"

#define SEND_SLOTS 16u
#define RECV_SLOTS 16u
#define MAX_LOANS  SEND_SLOTS
#define MAX_BATCH  (FZB_SQ_ENTRIES - 1u)
#define ACTION     0xf0u

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

struct ring_fx {
	struct fzb f;
	struct fzb_agent a;
	pd_slot_ref loan[MAX_LOANS];
	uint32_t nloans;
	struct pd_sqe batch[MAX_BATCH];
	uint32_t nbatch;
};

PD_NORETURN static void fail(const char *why)
{
	fzb_die(why, -EPROTO);
}

/* ---- the agent ------------------------------------------------------------------- */

/* Completions as the agent reads them: each well formed. */
static void reap(struct ring_fx *x)
{
	struct pd_cqe c;

	if (!fzb_alive(&x->a))
		return;
	while (pd_ring_dequeue_burst_sc(&x->a.cq, &c, 1) == 1)
		if (c.type == 0 || c.type > PD_CQ_TYPE_MAX || c.req_id_len > PD_REQ_ID_MAX ||
		    c.status > 0)
			fail("a malformed completion");
}

/* The entries so far into the ring, one bulk (room made by broker turns). */
static void submit(struct ring_fx *x)
{
	int rc = 0;

	for (uint32_t i = 0; x->nbatch && fzb_alive(&x->a) && i < 8; i++) {
		rc = pd_ring_enqueue_bulk_sp(&x->a.sq, x->batch, x->nbatch);
		if (rc != 0)
			break;
		fzb_turns(&x->f, 1);
		reap(x);
	}
	if (rc < 0)
		fail("the submission ring refused its producer");
	x->nbatch = 0;
	fzb_turns(&x->f, 1);
	reap(x);
}

static void loan(struct ring_fx *x, uint32_t n)
{
	if (fzb_alive(&x->a) && n <= MAX_LOANS - x->nloans &&
	    fzp_loan(&x->f, &x->a, n, x->loan + x->nloans) == 0)
		x->nloans += n;
}

/* The agent frees a slot it holds: the broker must notice when it is named. */
static void unloan(struct ring_fx *x, uint32_t i)
{
	if (x->nloans == 0)
		return;
	i %= x->nloans;
	(void)pd_pool_free(x->f.b->shm.send, &x->loan[i], 1);
	x->loan[i] = x->loan[--x->nloans];
}

/* What it wrote so far goes in, then the broker takes n turns. */
static void wait_turns(struct ring_fx *x, uint32_t n)
{
	submit(x);
	fzb_turns(&x->f, n);
	reap(x);
}

/* What it wrote so far goes in, then it goes and a new agent comes. */
static void reattach(struct ring_fx *x, uint32_t rank)
{
	submit(x);
	fzb_detach(&x->f, &x->a);
	x->nloans = 0;
	x->nbatch = 0;
	if (fzb_attach(&x->f, &x->a, PD_ROLE_ALL, rank) < 0)
		fail("no agent slot after a detach");
}

/* ---- input ------------------------------------------------------------------------- */

static void act(struct ring_fx *x, uint32_t action, uint32_t arg)
{
	switch (action) {
	case 0: loan(x, arg % 8 + 1); break;
	case 1: unloan(x, arg); break;
	case 2: wait_turns(x, arg % 4 + 1); break;
	case 3: fzb_tick(&x->f); break;
	case 4: fzp_answer(&x->f, arg & 1 ? PD_MSG_RESERVE : PD_MSG_ALLOC_REQ,
			   arg & 2 ? -ENOSPC : 0); break;
	case 5: reattach(x, arg % 4); break;
	case 6: fzx_fail(x->f.b->xp[PD_XPORT_TCP], arg & 1 ? -EIO : 0); break;
	default: break;
	}
}

static void entry(struct ring_fx *x, uint32_t ctl, struct fzi *in)
{
	struct pd_sqe *e = &x->batch[x->nbatch];
	uint32_t len = fzi_u16(in);

	memset(e, 0, sizeof(*e));
	(void)fzi_bytes(in, e, len < sizeof(*e) ? len : sizeof(*e));
	if ((ctl & 1) && x->nloans)
		e->u.chunk.slot = x->loan[(e->u.chunk.slot & 0xff) % x->nloans];
	if (++x->nbatch == MAX_BATCH || (ctl & 2))
		submit(x);
}

/* After the agent is gone: nothing of it is left. */
static void check_gone(struct ring_fx *x)
{
	struct pd_broker *b = x->f.b;
	struct pd_tx_stats ts;

	pd_tx_get_stats(b->tx, &ts);
	if (ts.live_requests || ts.live_batches)
		fail("a request of a detached agent is live");
	if (pd_pool_nfree(b->shm.send) != SEND_SLOTS)
		fail("a send slot is held after its agent detached");
	if (!LIST_EMPTY(&b->waiters))
		fail("a detached agent's wait is kept");
	if (pd_tx_check(b->tx) < 0 || pd_rx_check(b->rx) < 0)
		fail("an engine's own check");
	if (fzc_refused(b->ctrl))
		fail("the broker built a message the codec refuses");
}

/* One broker for the whole run: each input is one agent's session, and
 * time passes between two (fzb_idle()). */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct ring_fx x;
	struct fzi in = { data, size };

	if (!x.f.b)
		fzb_create(&x.f, SEND_SLOTS, RECV_SLOTS);
	fzx_fail(x.f.b->xp[PD_XPORT_TCP], 0);
	x.nloans = x.nbatch = 0;
	if (fzb_attach(&x.f, &x.a, PD_ROLE_ALL, 0) < 0)
		fail("attach");
	while (fzi_more(&in)) {
		uint32_t ctl = fzi_u8(&in);

		if (ctl >= ACTION)
			act(&x, ctl - ACTION, fzi_u8(&in));
		else
			entry(&x, ctl, &in);
	}
	submit(&x);
	fzb_detach(&x.f, &x.a);
	check_gone(&x);
	fzb_idle(&x.f);
	return 0;
}
