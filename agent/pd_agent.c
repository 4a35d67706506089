/* SPDX-License-Identifier: MIT */
/* libpdagent: attach, detach, broker liveness, logging. */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_rundir.h"
#include "pd_attach_client.h"
#include "pd_err.h"
#include "pd_pages.h"
#include "pd_time.h"

uint64_t pd_ag_tag(const void *req_id, uint32_t len)
{
	return pd_req_tag(req_id, len);
}

void pd_agent_set_log_fn(struct pd_agent *a, pd_agent_log_fn *fn, void *ctx)
{
	if (a)
		pd_log_sink_set(&a->sink, fn, ctx);
}

/* The broker's socket closed (it died) or has something: a poll of it, at
 * most one per SOCK_POLL_NS (a call that costs a syscall, made by every
 * call of the API: pd_req_state() in an engine's step loop among them). */
#define SOCK_POLL_NS 1000000u

static int sock_closed(struct pd_agent *a)
{
	struct pollfd p = { .fd = a->sock, .events = POLLIN | POLLRDHUP };
	uint64_t now = pd_now_ns();

	if (now - atomic_load_explicit(&a->sock_seen_ns, memory_order_relaxed) < SOCK_POLL_NS)
		return 0;
	atomic_store_explicit(&a->sock_seen_ns, now, memory_order_relaxed);
	return poll(&p, 1, 0) > 0 && p.revents;
}

int pd_ag_sends(const struct pd_agent *a)
{
	return a && a->shm.has_send && (a->roles & PD_AGENT_SEND);
}

int pd_ag_fenced(const struct pd_agent *a)
{
	const struct pd_agent_table *t = a->shm.agents;

	return t && a->id >= 1 && a->id <= a->shm.max_agents &&
	       atomic_load_explicit(&t->slot[a->id - 1].state, memory_order_acquire) ==
		       PD_AGENT_FENCED;
}

/* 0 while the broker lives and serves this agent; -ENOTCONN (latched)
 * once it is gone, or has fenced this agent: a fenced agent the broker
 * could not kill takes no more staging, and what it holds comes back
 * when it detaches. */
int pd_ag_check_broker(void *ctx)
{
	struct pd_agent *a = ctx;
	uint32_t st = atomic_load_explicit(&a->shm.seg.hdr->state, memory_order_acquire);

	if (atomic_load(&a->gone))
		return -ENOTCONN;
	if (pd_ag_fenced(a)) {
		if (!atomic_exchange(&a->gone, 1))
			AG_LOG(a, ERR, "agent %u fenced by the broker (a lease broke, see its log): "
			       "detach", a->id);
		return -ENOTCONN;
	}
	if (st == PD_SHM_DEAD || st == PD_SHM_DRAINING || a->shm.seg.hdr->epoch != a->epoch ||
	    sock_closed(a)) {
		if (!atomic_exchange(&a->gone, 1)) /* said once */
			AG_LOG(a, WARN, "broker gone (agent %u)", a->id);
		return -ENOTCONN;
	}
	return 0;
}

int pd_agent_fd(const struct pd_agent *a)
{
	return a ? a->bell_in : -EINVAL;
}

uint64_t pd_slot_size(const struct pd_agent *a)
{
	return a && a->shm.has_send ? a->shm.send->slot_size :
	       a && a->shm.has_recv ? a->shm.recv.slot_size : 0;
}

/* ---- attach ---------------------------------------------------------------------- */

static const char *broker_name(const struct pd_agent_opts *o)
{
	const char *name = o->broker ? o->broker : getenv("PDKV_BROKER");

	return name ? name : "default";
}

static int sock_path(const struct pd_agent_opts *o, char *buf, size_t len)
{
	const char *dir = o->rundir ? o->rundir : getenv("PDKV_RUNDIR");

	return pd_rundir_path(dir, broker_name(o), ".sock", buf, len);
}

static void close_fds(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			(void)close(fds[i]);
}

/* The regions an agent writes: its own rings and pin journal (the rest of
 * the agents region turns read-only once our slot is known) and, a
 * sender only, the send pool it allocates from under the pool's mutex and
 * the arena it fills (with several send pools, only its own of each:
 * pd_layout_send_own(); with one, all of it, as loans move between
 * senders at allocation rate and an mprotect per loan costs more than
 * the copy of its bytes). The rest (header, recv pool, arena and index, statistics;
 * the send side for a receiver) it only reads: its pins are hazards in
 * its own journal. */
static uint32_t rw_regions(uint32_t roles)
{
	uint32_t send = (1u << PD_REGION_SEND_POOL) | (1u << PD_REGION_SEND_ARENA);

	return (1u << PD_REGION_AGENTS) | (roles & PD_AGENT_SEND ? send : 0);
}

/* The arena file, when the segment has one: the one the ack describes. */
static int map_arenas(struct pd_segment *seg, int arena_fd, const struct pd_attach_ack *ack)
{
	if (ack->arena_size != seg->arena_size)
		return -EPROTO;
	return seg->arena_size ? pd_segment_map_arenas(seg, arena_fd, 0) : 0;
}

/* Map the segment the broker sent and find our rings in it. */
static int map_segment(struct pd_agent *a, const int *fds, const struct pd_attach_ack *ack)
{
	struct pd_segment seg;
	int rc = pd_segment_attach_fd(fds[0], 0, 1000, &seg, NULL, 0);

	if (rc < 0)
		return rc;
	if (seg.len != ack->segment_size || seg.hdr->epoch != ack->epoch ||
	    map_arenas(&seg, fds[3], ack) < 0 || pd_layout_open(&seg, &a->shm, NULL, 0) < 0) {
		pd_segment_destroy(&seg);
		return -EPROTO;
	}
	/* What only the broker writes is read-only here: a stray write of this
	 * process faults in it, not in the broker or the other agents. */
	rc = pd_segment_protect(&a->shm.seg, rw_regions(a->roles));
	if (rc < 0 && rc != -ENOTSUP) {
		pd_layout_close(&a->shm);
		return rc;
	}
	rc = ack->agent_id >= 1 && ack->agent_id <= a->shm.max_agents ?
	     pd_layout_rings(&a->shm, ack->agent_id - 1, &a->sq, &a->cq) : -EPROTO;
	if (rc == 0) {
		rc = pd_layout_protect_agents(&a->shm, ack->agent_id - 1);
		rc = rc == -ENOTSUP ? 0 : rc;
	}
	if (rc == 0 && (a->roles & PD_AGENT_SEND) && a->shm.has_send) {
		/* The send pool the broker chose for us: the only one we write. */
		rc = pd_layout_send_own(&a->shm, a->shm.agents->slot[ack->agent_id - 1].send_part);
		rc = rc == -EINVAL ? -EPROTO : rc;
	}
	if (rc < 0)
		pd_layout_close(&a->shm);
	else /* pd_agent_fd() turns readable for every completion */
		pd_ring_arm(&a->cq);
	return rc;
}

/* Fill the page tables of [p, p + len) now, not one fault per 4 KiB page
 * in the first copies. Best effort: a failure leaves the pages to fault in. */
static void prefault(struct pd_agent *a, void *p, size_t len, int write)
{
	int rc = p ? pd_pages_populate(p, len, write) : 0;

	if (rc == -ENOSYS)
		pd_pages_touch(p, len);
	else if (rc < 0)
		AG_LOG(a, DEBUG, "arena pages left to fault in: %s", pd_strerror(rc));
}

static int init_state(struct pd_agent *a)
{
	a->events = calloc(AG_MAX_EVENTS, sizeof(*a->events));
	if (!a->events)
		return -ENOMEM;
	(void)pthread_mutex_init(&a->sq_lock, NULL);
	(void)pthread_mutex_init(&a->lock, NULL);
	{
		pthread_condattr_t ca;

		(void)pthread_condattr_init(&ca);
		(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		(void)pthread_cond_init(&a->cond, &ca);
		(void)pthread_condattr_destroy(&ca);
	}
	a->next_user = 1;
	pd_reqtab_init(&a->reqs, 0);
	return 0;
}

static int connect_broker(struct pd_agent *a, const struct pd_agent_opts *o)
{
	struct pd_attach_hello h;
	struct pd_attach_ack ack;
	int fds[PD_ATTACH_NFDS] = { -1, -1, -1, -1 };
	uint32_t ms = o->attach_timeout_ms ? o->attach_timeout_ms : AG_ATTACH_MS;
	char path[256];
	int rc = sock_path(o, path, sizeof(path));

	if (rc < 0)
		return rc;
	AG_LOG(a, DEBUG, "attaching to %s (roles %#x, rank %u of %u, timeout %u ms)", path,
	       o->roles, o->tp_rank, o->tp_size, ms);
	pd_attach_hello_init(&h, o->roles, o->tp_rank, o->tp_size);
	a->roles = o->roles;
	rc = pd_attach_connect(path, &h, ms, &ack, fds, &a->sock, NULL, 0);
	if (rc < 0)
		return rc;
	rc = map_segment(a, fds, &ack);
	(void)close(fds[0]);
	if (fds[3] >= 0)
		(void)close(fds[3]); /* the mapping keeps the file */
	if (rc == 0 && (o->roles & PD_AGENT_SEND) && a->shm.has_send) /* the arena it copies into */
		prefault(a, a->shm.send->arena, a->shm.send->nslots * a->shm.send->slot_size, 1);
	if (rc == 0 && (o->roles & PD_AGENT_RECV) && a->shm.has_recv) /* and out of */
		prefault(a, a->shm.recv.arena, a->shm.recv.nslots * a->shm.recv.slot_size, 0);
	if (rc < 0) {
		close_fds(fds + 1, 2);
		(void)close(a->sock);
		return rc;
	}
	a->bell_in = fds[1];
	a->bell_out = fds[2];
	a->id = ack.agent_id;
	a->epoch = ack.epoch;
	return 0;
}

/* What an attached agent holds, but its memory; its pointers are left NULL. */
static void release(struct pd_agent *a)
{
	pd_ag_unpin_all(a);
	if (pd_ag_sends(a))
		(void)pd_pool_reclaim(a->shm.send, a->id);
	(void)close(a->sock);
	(void)close(a->bell_in);
	(void)close(a->bell_out);
	pd_layout_close(&a->shm);
	(void)pthread_mutex_destroy(&a->sq_lock);
	(void)pthread_mutex_destroy(&a->lock);
	(void)pthread_cond_destroy(&a->cond);
	free(a->sqbuf);
	free(a->pins);
	free(a->free_cells);
	free(a->events);
	a->sqbuf = NULL;
	a->pins = NULL;
	a->free_cells = NULL;
	a->events = NULL;
	pd_reqtab_fini(&a->reqs);
}

/* Everything of the attach but a's memory and sink, logged to a's sink. On
 * failure a holds nothing but its events array (NULL or to free). */
static int attach_scoped(struct pd_agent *a, const struct pd_agent_opts *o)
{
	AG_LOG_SCOPE(a);
	int rc = init_state(a);

	if (rc == 0)
		rc = connect_broker(a, o);
	if (rc == 0) {
		rc = pd_ag_journal_init(a);
		if (rc < 0)
			release(a);
	}
	if (rc < 0)
		AG_LOG(a, WARN, "attach to broker '%s' failed: %s", broker_name(o),
		       pd_strerror(rc));
	else
		AG_LOG(a, DEBUG, "attached as agent %u (epoch %llu, %s%s)", a->id,
		       (unsigned long long)a->epoch, a->shm.has_send ? "send" : "",
		       a->shm.has_recv ? " recv" : "");
	return rc;
}

int pd_agent_attach(const struct pd_agent_opts *uo, struct pd_agent **out)
{
	struct pd_agent_opts o;
	struct pd_agent *a;
	int rc;

	pd_log_init_env(); /* PD_LOG_LEVEL, PD_LOG_FILE: once per process */
	if (!out)
		return -EINVAL;
	rc = pd_ag_opts_read(uo, &o);
	if (rc < 0)
		return rc;
	if (o.flags || !o.roles || (o.roles & ~(PD_AGENT_SEND | PD_AGENT_RECV)) ||
	    o.tp_size == 0 || o.tp_rank >= o.tp_size)
		return -EINVAL; /* the broker would refuse the hello (-EPROTO) */
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	pd_log_sink_set(&a->sink, o.log_fn, o.log_ctx);
	rc = attach_scoped(a, &o);
	if (rc < 0) {
		pd_log_sink_set(&a->sink, NULL, NULL);
		free(a->events);
		free(a);
		return rc;
	}
	*out = a;
	return 0;
}

static void detach_scoped(struct pd_agent *a)
{
	AG_LOG_SCOPE(a);

	AG_LOG(a, DEBUG, "detaching agent %u", a->id);
	release(a);
}

void pd_agent_detach(struct pd_agent *a)
{
	if (!a)
		return;
	detach_scoped(a);
	pd_log_sink_set(&a->sink, NULL, NULL);
	free(a);
}
