/* SPDX-License-Identifier: MIT */
/* Agents: the table of attached agents, liveness, ring draining, completions,
 * doorbells. The attach socket and the hello phase are in pd_agents_attach.c. */
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "pd_agents_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_sync.h"
#include "pd_time.h"

#define OPS_PER_TURN     64u  /* per agent, so that one agent cannot starve others */
#define MAX_PENDING      4096u
#define BUF_ENTRIES      4097u

static void ring_bell(int fd)
{
	uint64_t one = 1;

	(void)!write(fd, &one, sizeof(one));
}

static void drain_bell(int fd)
{
	uint64_t v;

	(void)!read(fd, &v, sizeof(v));
}

/* ---- detaching ------------------------------------------------------------------ */

static void drop_pending(struct ent *e)
{
	struct pending *p;

	while ((p = STAILQ_FIRST(&e->pend))) {
		STAILQ_REMOVE_HEAD(&e->pend, link);
		free(p);
	}
	e->npend = 0;
}

/* Empty slot id's pin journal: its agent is gone (so the chunks its
 * hazards named are freed at the receiver's next retry), or a new one is
 * about to take the slot. */
static void reclaim_pins(struct pd_agents *ag, uint32_t id)
{
	uint32_t n = 0;

	(void)pd_layout_pins_reclaim(ag->o.shm, id - 1, &n);
	ag->st.pins_reclaimed += n;
	if (n)
		PD_LOG(INFO, ctl, "agent %u: %u recv pins reclaimed", id, n);
}

/* e's socket, doorbell and queued completions go; the slot is free again. */
static void release(struct ent *e)
{
	struct pd_agents *ag = e->ag;

	pd_loop_del(ag->o.loop, e->fd);
	(void)close(e->fd);
	if (e->bell >= 0)
		(void)close(e->bell);
	e->fd = e->bell = -1;
	drop_pending(e);
	e->state = E_FREE;
	atomic_store_explicit(&ag->o.shm->agents->slot[e->id - 1].state, PD_AGENT_FREE,
			      memory_order_release);
}

static void detach(struct ent *e, int notify)
{
	struct pd_agents *ag = e->ag;

	if (e->state != E_ATTACHED && e->state != E_FENCED)
		return;
	release(e);
	reclaim_pins(ag, e->id); /* before on_detach: its chunks may be freed now */
	ag->nattached--;
	PD_LOG(INFO, ctl, "agent %u detached", e->id);
	if (notify)
		ag->o.ops->on_detach(ag->o.ctx, e->id);
}

void pd_agents_kick(struct pd_agents *ag, uint32_t id)
{
	if (ag && id >= 1 && id <= ag->max)
		detach(&ag->ent[id - 1], 1);
}

int pd_agents_fence(struct pd_agents *ag, uint32_t id, int32_t pid, const char *why)
{
	struct ent *e;

	if (!ag || id < 1 || id > ag->max || ag->ent[id - 1].state != E_ATTACHED ||
	    ag->ent[id - 1].pid != pid)
		return -ENOENT;
	e = &ag->ent[id - 1];
	e->state = E_FENCED;
	ag->fenced++;
	atomic_store_explicit(&ag->o.shm->agents->slot[id - 1].state, PD_AGENT_FENCED,
			      memory_order_release);
	drop_pending(e);
	/* Never ourselves (an agent of the broker's own process), nor pid 0
	 * (one not visible in the broker's pid namespace: kill(0) is our group). */
	errno = pid > 0 ? EPERM : ESRCH;
	if (pid > 0 && pid != getpid() && kill(pid, SIGKILL) == 0) {
		/* its socket closes as it dies */
		PD_LOG(WARN, ctl, "agent %u (pid %d) fenced: %s; killed", id, pid, why);
		return 0;
	}
	PD_LOG(WARN, ctl, "agent %u (pid %d) fenced: %s; cannot kill it (%s): its requests "
	       "fail, its loans come back when it detaches or exits", id, pid, why,
	       pd_strerror(-errno));
	reclaim_pins(ag, id); /* it only reads what they hold: free now */
	if (ag->o.ops->on_fence)
		ag->o.ops->on_fence(ag->o.ctx, id);
	return 0;
}

int32_t pd_agents_pid(const struct pd_agents *ag, uint32_t id)
{
	if (!ag || id < 1 || id > ag->max ||
	    (ag->ent[id - 1].state != E_ATTACHED && ag->ent[id - 1].state != E_FENCED))
		return 0;
	return ag->ent[id - 1].pid;
}

int pd_agents_tp(const struct pd_agents *ag, uint32_t id, uint32_t *rank, uint32_t *size)
{
	if (!ag || id < 1 || id > ag->max || ag->ent[id - 1].state != E_ATTACHED)
		return -ENOENT;
	*rank = ag->ent[id - 1].tp_rank;
	*size = ag->ent[id - 1].tp_size;
	return 0;
}

int pd_agents_live(const struct pd_agents *ag, uint32_t id)
{
	return ag && id >= 1 && id <= ag->max &&
	       (ag->ent[id - 1].state == E_ATTACHED || ag->ent[id - 1].state == E_FENCED);
}

int pd_agents_proc(const struct pd_agents *ag, uint32_t id, struct pd_agent_proc *out)
{
	if (!ag || id < 1 || id > ag->max || !ag->ent[id - 1].proc.pid)
		return -ENOENT;
	*out = ag->ent[id - 1].proc;
	return 0;
}

uint32_t pd_agents_by_proc(const struct pd_agents *ag, const struct pd_agent_proc *proc)
{
	for (uint32_t i = 0; ag && proc->pid > 0 && i < ag->max; i++)
		if (ag->ent[i].state == E_ATTACHED && pd_agent_proc_is(&ag->ent[i].proc, proc->pid,
								       proc->pidns))
			return i + 1;
	return 0;
}

uint64_t pd_agents_fenced(const struct pd_agents *ag)
{
	return ag ? ag->fenced : 0;
}

void pd_agents_cq_stats(const struct pd_agents *ag, uint64_t *queued, uint64_t *dropped)
{
	*queued = *dropped = 0;
	for (uint32_t i = 0; ag && i < ag->max; i++)
		*queued += ag->ent[i].npend;
	if (ag)
		*dropped = ag->cq_dropped;
}

uint32_t pd_agents_count(const struct pd_agents *ag)
{
	return ag ? ag->nattached : 0;
}

void pd_agents_get_stats(const struct pd_agents *ag, struct pd_agents_stats *out)
{
	*out = (struct pd_agents_stats){ 0 };
	if (!ag)
		return;
	*out = ag->st;
	out->pending = ag->nhello;
}

/* ---- admitting ---------------------------------------------------------------------- */

/* The send pool for a sender taking agent slot id: the one the fewest
 * other senders (attached, or fenced and not yet gone) loan from, the
 * lowest such. With as many pools as senders, each has its own. */
static uint32_t pick_send_pool(const struct pd_shm *s, uint32_t id)
{
	uint32_t n[PD_SEND_PARTS_MAX], best = 0;

	pd_layout_send_users(s, id, n);
	for (uint32_t k = 1; k < s->send_parts; k++)
		best = n[k] < n[best] ? k : best;
	return best;
}

static void fill_slot(struct ent *e, const struct pd_attach_hello *h, const struct ucred *cred)
{
	struct pd_agent_slot *s = &e->ag->o.shm->agents->slot[e->id - 1];
	struct timespec now;

	(void)clock_gettime(CLOCK_REALTIME, &now);
	s->pid = cred->pid;
	s->roles = h->roles;
	s->tp_rank = h->tp_rank;
	/* An agent from before 4.3 knows one send pool: the first. */
	s->send_part = (h->roles & PD_ROLE_SEND) && h->abi_minor >= 3 ?
		       pick_send_pool(e->ag->o.shm, e->id) : 0;
	e->tp_rank = h->tp_rank;
	e->tp_size = h->tp_size;
	s->attached_ns = (uint64_t)now.tv_sec * PD_NS_PER_S + (uint64_t)now.tv_nsec;
	atomic_store_explicit(&s->state, PD_AGENT_ATTACHED, memory_order_release);
}

/* Rings reset, doorbell made, ack with the fds sent. */
static int send_welcome(struct ent *e, const struct pd_attach_hello *h,
			const struct ucred *cred)
{
	struct pd_agents *ag = e->ag;
	struct pd_attach_ack ack;
	int fds[PD_ATTACH_NFDS];
	int rc;

	/* Records a dropped agent left after its detach are dropped before the
	 * new agent may record. A cell this cannot empty (index lock) is
	 * skipped by the new agent and walked again at its detach. */
	reclaim_pins(ag, e->id);
	rc = pd_layout_rings_reset(ag->o.shm, e->id - 1);
	if (rc == 0)
		rc = pd_layout_rings(ag->o.shm, e->id - 1, &e->sq, &e->cq);
	if (rc < 0)
		return rc;
	e->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (e->bell < 0)
		return -errno;
	pd_attach_ack_init(&ack, 0);
	ack.agent_id = e->id;
	ack.epoch = ag->o.epoch;
	ack.segment_size = ag->o.shm->seg.len;
	fds[0] = ag->o.shm->seg.fd;
	fds[1] = e->bell;
	fds[2] = ag->bell;
	fds[3] = ag->o.shm->seg.arena_fd; /* -1 without an arena file */
	ack.arena_size = ag->o.shm->seg.arena_size;
	fill_slot(e, h, cred);
	return pd_attach_send_ack(e->fd, &ack, fds);
}

/* After the handshake the socket only tells us the agent is gone. */
static void on_conn(void *ctx, uint32_t events)
{
	struct ent *e = ctx;
	char b[64];
	ssize_t n;

	n = read(e->fd, b, sizeof(b));
	if (n == 0 || (n < 0 && errno != EAGAIN) || (events & (EPOLLHUP | EPOLLERR)))
		detach(e, 1);
	else if (n > 0)
		detach(e, 1); /* agents send nothing after hello */
}

int pd_agents_admit(struct ent *e, int fd, const struct pd_attach_hello *h,
		    const struct ucred *cred)
{
	struct pd_agents *ag = e->ag;
	int rc = pd_loop_add(ag->o.loop, fd, EPOLLIN | EPOLLRDHUP, on_conn, e);

	if (rc < 0) {
		(void)close(fd);
		return rc;
	}
	e->fd = fd;
	e->pid = cred->pid;
	e->proc = (struct pd_agent_proc){ .pid = h->pid, .pidns = h->pidns };
	rc = send_welcome(e, h, cred);
	if (rc < 0) {
		release(e);
		return rc;
	}
	e->state = E_ATTACHED;
	ag->nattached++;
	if (h->pidns == pd_self_pidns() || h->pidns == PD_PIDNS_UNKNOWN)
		PD_LOG(INFO, ctl, "agent %u attached (pid %d, rank %u)", e->id, cred->pid,
		       h->tp_rank);
	else /* a container's: its pid there is what its records in the send pool say */
		PD_LOG(INFO, ctl, "agent %u attached (pid %d here%s, %d in its own pid namespace, "
		       "rank %u)", e->id, cred->pid, cred->pid ? "" : ": not visible", h->pid,
		       h->tp_rank);
	ag->o.ops->on_attach(ag->o.ctx, e->id, &ag->o.shm->agents->slot[e->id - 1]);
	return 0;
}

/* ---- rings --------------------------------------------------------------------------- */

/* One op (a PUT with its chunks) from e's ring. 1 done, 0 ring empty, -EPROTO. */
static int take_one(struct ent *e)
{
	struct pd_agents *ag = e->ag;
	struct pd_agent_slot *s = &ag->o.shm->agents->slot[e->id - 1];
	uint32_t n = 0;
	int rc = pd_ring_dequeue_burst_sc(&e->sq, ag->buf, 1);

	if (rc <= 0)
		return rc;
	if (ag->buf[0].op == PD_SQ_PUT) {
		n = ag->buf[0].u.put.n;
		/* The agent enqueues a PUT whole: its chunks are all there. */
		if (n >= BUF_ENTRIES ||
		    (n && pd_ring_dequeue_bulk_sc(&e->sq, ag->buf + 1, n) != (int)n))
			return -EPROTO;
	}
	pd_stat_add(&s->submitted, 1 + n);
	rc = ag->o.ops->on_sqes(ag->o.ctx, e->id, ag->buf, 1 + n);
	if (rc < 0)
		pd_stat_add(&s->bad, 1 + n);
	return rc < 0 ? rc : 1;
}

/* @return 1 when entries may remain (come back soon). */
static int drain(struct ent *e)
{
	for (uint32_t i = 0; i < OPS_PER_TURN; i++) {
		int rc = take_one(e);

		if (rc == 0)
			return 0;
		if (rc < 0) { /* its memory is corrupt: it may write anything it can */
			(void)pd_agents_fence(e->ag, e->id, e->pid, "bad submission");
			return 0;
		}
	}
	return 1;
}

static void flush(struct ent *e)
{
	struct pd_agent_slot *s = &e->ag->o.shm->agents->slot[e->id - 1];
	struct pending *p;
	int sent = 0;

	while ((p = STAILQ_FIRST(&e->pend)) && pd_ring_enqueue_bulk_sp(&e->cq, &p->c, 1) == 1) {
		STAILQ_REMOVE_HEAD(&e->pend, link);
		e->npend--;
		free(p);
		sent++;
	}
	pd_stat_add(&s->completed, (uint64_t)sent);
	if (sent && pd_ring_needs_wakeup(&e->cq))
		ring_bell(e->bell);
}

int pd_agents_complete(struct pd_agents *ag, uint32_t id, const struct pd_cqe *c)
{
	struct pending *p;
	struct ent *e;

	if (!ag || id < 1 || id > ag->max || ag->ent[id - 1].state != E_ATTACHED)
		return -ENOENT;
	e = &ag->ent[id - 1];
	if (e->npend >= MAX_PENDING) { /* the agent stopped reading its events */
		ag->cq_dropped++;
		PD_LOG_RL(WARN, ctl, "agent %u (pid %d) reads no completions: %u queued, more "
			  "are dropped", id, e->pid, e->npend);
		return -ENOBUFS;
	}
	p = malloc(sizeof(*p));
	if (!p)
		return -ENOMEM;
	p->c = *c;
	STAILQ_INSERT_TAIL(&e->pend, p, link);
	e->npend++;
	flush(e);
	return 0;
}

/* Raise every submission ring's flag; 0 when all are still empty. */
static int arm(struct pd_agents *ag)
{
	int busy = 0;

	for (uint32_t i = 0; i < ag->max; i++)
		if (ag->ent[i].state == E_ATTACHED && !pd_ring_sleep_prepare(&ag->ent[i].sq))
			busy = 1;
	return busy;
}

void pd_agents_before_sleep(struct pd_agents *ag)
{
	int busy = 0;

	for (uint32_t i = 0; i < ag->max; i++) {
		struct ent *e = &ag->ent[i];

		if (e->state != E_ATTACHED)
			continue;
		busy |= drain(e);
		if (e->state == E_ATTACHED)
			flush(e);
	}
	if (busy || arm(ag))
		ring_bell(ag->bell); /* work left: do not sleep */
}

static void on_bell(void *ctx, uint32_t events)
{
	struct pd_agents *ag = ctx;

	(void)events;
	drain_bell(ag->bell);
	for (uint32_t i = 0; i < ag->max; i++)
		if (ag->ent[i].state == E_ATTACHED)
			pd_ring_sleep_done(&ag->ent[i].sq);
}

void pd_agents_tick(struct pd_agents *ag, uint64_t now_ns)
{
	if (!ag)
		return;
	pd_agents_hello_tick(ag, now_ns);
	for (uint32_t i = 0; i < ag->max; i++)
		if (ag->ent[i].state == E_ATTACHED && ag->ent[i].npend)
			flush(&ag->ent[i]);
}

/* ---- lifetime ------------------------------------------------------------------------- */

int pd_agents_create(const struct pd_agents_opts *o, struct pd_agents **out, char *err,
		     size_t errlen)
{
	struct pd_agents *ag;
	int rc;

	if (!o || !o->shm || !o->loop || !o->sock_path || !o->ops || !o->ops->on_sqes ||
	    !o->ops->on_attach || !o->ops->on_detach || !out ||
	    strlen(o->sock_path) >= sizeof(ag->path))
		return -EINVAL;
	ag = calloc(1, sizeof(*ag));
	if (!ag)
		return -ENOMEM;
	ag->o = *o;
	ag->max = o->shm->max_agents;
	ag->lfd = ag->bell = -1;
	memcpy(ag->path, o->sock_path, strlen(o->sock_path) + 1);
	for (uint32_t i = 0; i < PD_MAX_AGENTS; i++) {
		ag->ent[i] = (struct ent){ .ag = ag, .id = i + 1, .fd = -1, .bell = -1 };
		STAILQ_INIT(&ag->ent[i].pend);
	}
	for (uint32_t i = 0; i < PD_AGENTS_HELLO_MAX; i++)
		ag->hello[i] = (struct hello_conn){ .ag = ag, .conn.fd = -1 };
	ag->buf = calloc(BUF_ENTRIES, sizeof(*ag->buf));
	ag->bell = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	rc = !ag->buf ? -ENOMEM : ag->bell < 0 ? -errno : 0;
	if (rc == 0)
		rc = pd_attach_listen(ag->path, o->mode ? o->mode : 0660, o->group, &ag->lfd, err,
				      errlen);
	if (rc == 0)
		rc = pd_loop_add(o->loop, ag->lfd, EPOLLIN, pd_agents_on_accept, ag);
	if (rc == 0)
		rc = pd_loop_add(o->loop, ag->bell, EPOLLIN, on_bell, ag);
	if (rc < 0) {
		pd_agents_destroy(ag);
		return rc;
	}
	*out = ag;
	return 0;
}

void pd_agents_destroy(struct pd_agents *ag)
{
	if (!ag)
		return;
	pd_agents_hello_close_all(ag);
	for (uint32_t i = 0; i < ag->max; i++)
		detach(&ag->ent[i], 0);
	if (ag->lfd >= 0) {
		pd_loop_del(ag->o.loop, ag->lfd);
		pd_attach_unlisten(ag->lfd, ag->path);
	}
	if (ag->bell >= 0) {
		pd_loop_del(ag->o.loop, ag->bell);
		(void)close(ag->bell);
	}
	free(ag->buf);
	free(ag);
}
