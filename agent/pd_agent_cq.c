/* SPDX-License-Identifier: MIT */
/* libpdagent: submissions, and the completion ring shared by waiting threads. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_time.h"

int pd_ag_req_copy(uint8_t *dst, uint8_t *dst_len, const char *req_id)
{
	size_t n = req_id ? strnlen(req_id, PD_REQ_ID_MAX + 1) : 0;

	if (n == 0 || n > PD_REQ_ID_MAX)
		return -EINVAL;
	memcpy(dst, req_id, n);
	*dst_len = (uint8_t)n;
	return 0;
}

/* Enqueue n entries at once; sq_lock held. */
/* The broker is gone, or has fenced this agent (latched, said once): what
 * a submission and a wait check, a load or two of memory. */
static int gone(struct pd_agent *a)
{
	return atomic_load(&a->gone) || (pd_ag_fenced(a) && pd_ag_check_broker(a) < 0);
}

int pd_ag_submit_locked(struct pd_agent *a, const struct pd_sqe *e, uint32_t n)
{
	uint64_t one = 1;
	int rc;

	if (gone(a))
		return -ENOTCONN;
	rc = pd_ring_enqueue_bulk_sp(&a->sq, e, n);
	if (rc > 0 && pd_ring_needs_wakeup(&a->sq))
		(void)!write(a->bell_out, &one, sizeof(one));
	if (rc < 0)
		return -EPROTO;
	return rc == 0 ? -EAGAIN : 0;
}

int pd_ag_submit(struct pd_agent *a, const struct pd_sqe *e, uint32_t n)
{
	int rc;

	(void)pthread_mutex_lock(&a->sq_lock);
	rc = pd_ag_submit_locked(a, e, n);
	(void)pthread_mutex_unlock(&a->sq_lock);
	return rc;
}

/* ---- cancels ----------------------------------------------------------------- */

int pd_ag_is_cancelled(struct pd_agent *a, uint64_t tag)
{
	int hit = 0;

	(void)pthread_mutex_lock(&a->lock);
	for (uint32_t i = 0; i < a->ncancelled && i < AG_MAX_CANCELLED; i++)
		hit |= a->cancelled[i] == tag;
	(void)pthread_mutex_unlock(&a->lock);
	return hit;
}

void pd_ag_mark_cancelled(struct pd_agent *a, uint64_t tag)
{
	(void)pthread_mutex_lock(&a->lock);
	a->cancelled[a->ncancelled++ % AG_MAX_CANCELLED] = tag;
	(void)pthread_mutex_unlock(&a->lock);
}

/* ---- completions --------------------------------------------------------------- */

/* An answer whose caller gave up: forget the ask and drop the answer. */
static int abandoned(struct pd_agent *a, uint64_t user)
{
	for (uint32_t i = 0; user && i < AG_MAX_ABANDONED; i++) {
		if (a->abandoned[i] == user) {
			a->abandoned[i] = 0;
			return 1;
		}
	}
	return 0;
}

/* File an answer for its caller; the mailbox never fills with answers
 * nobody will take: those of abandoned asks are dropped, and when full the
 * oldest answer makes room. */
static void file_mail(struct pd_agent *a, const struct pd_cqe *c)
{
	if (abandoned(a, c->user))
		return;
	if (a->nmail == AG_MAX_MAIL) {
		AG_LOG(a, WARN, "mailbox full: the oldest answer dropped");
		memmove(a->mail, a->mail + 1, (AG_MAX_MAIL - 1) * sizeof(a->mail[0]));
		a->nmail--;
	}
	a->mail[a->nmail++] = *c;
}

static int is_event(uint32_t type)
{
	return type == PD_CQ_PUT_DONE || type == PD_CQ_PUT_FAILED || type == PD_CQ_ADMITTED;
}

/* A request's admission or end: the staging gate learns it before the
 * event is queued, so pd_alloc() never lags behind pd_next_event(). */
static void note(struct pd_agent *a, const struct pd_cqe *c)
{
	uint32_t len = c->req_id_len <= PD_REQ_ID_MAX ? c->req_id_len : 0;

	if (c->type == PD_CQ_ADMITTED)
		pd_reqtab_admitted(&a->reqs, c->req_id, len, c->rank);
	else
		pd_reqtab_ended(&a->reqs, c->req_id, len, c->rank,
				c->type == PD_CQ_PUT_DONE ? 0 : c->status < 0 ? c->status : -EPROTO);
}

static void file(struct pd_agent *a, const struct pd_cqe *c)
{
	if (is_event(c->type)) {
		note(a, c);
		if (a->ev_count < AG_MAX_EVENTS) {
			a->events[(a->ev_head + a->ev_count) % AG_MAX_EVENTS] = *c;
			a->ev_count++;
		} else {
			AG_LOG(a, ERR, "event queue full: an event of request %.*s dropped",
			       (int)(c->req_id_len <= PD_REQ_ID_MAX ? c->req_id_len : 0),
			       (const char *)c->req_id);
		}
	} else {
		file_mail(a, c);
	}
}

/* The completion ring is armed (pd_ring_arm at attach): the broker rings
 * bell_in, the descriptor pd_agent_fd() hands out, at every completion.
 * Clear it before reading the ring, so that what arrives after a read
 * leaves it readable for whoever polls it. */
static void clear_bell(struct pd_agent *a)
{
	uint64_t v;

	(void)!read(a->bell_in, &v, sizeof(v)); /* non-blocking; -EAGAIN: not rung */
}

/* Sleep until the broker rings or timeout_ms passes; notices its death. */
static void doze(struct pd_agent *a, uint32_t timeout_ms)
{
	struct pollfd p[2] = { { .fd = a->bell_in, .events = POLLIN },
			       { .fd = a->sock, .events = POLLIN | POLLRDHUP } };

	if (poll(p, 2, (int)timeout_ms) > 0 && p[1].revents)
		(void)pd_ag_check_broker(a);
}

/* Become the reader for one round: drain the ring, or (may_doze) doze.
 * lazy: an empty ring is left at that, bell and all (a look that costs no
 * syscall, for calls that never stand behind pd_agent_fd()'s readiness).
 * Lock held on entry and exit. */
static void read_round(struct pd_agent *a, uint32_t timeout_ms, int may_doze, int lazy)
{
	struct pd_cqe c[16];
	int n;

	a->reader = 1;
	(void)pthread_mutex_unlock(&a->lock);
	n = 0;
	if (!lazy || pd_ring_count(&a->cq)) {
		clear_bell(a);
		n = pd_ring_dequeue_burst_sc(&a->cq, c, 16);
	}
	if (n == 0 && may_doze)
		doze(a, timeout_ms);
	(void)pthread_mutex_lock(&a->lock);
	if (n < 0)
		atomic_store(&a->gone, 1); /* a corrupt ring: treat the broker as gone */
	for (int i = 0; i < n; i++)
		file(a, &c[i]);
	a->reader = 0;
	(void)pthread_cond_broadcast(&a->cond);
}

void pd_ag_poll(struct pd_agent *a, int lazy)
{
	(void)pthread_mutex_lock(&a->lock);
	if (!a->reader)
		read_round(a, 0, 0, lazy);
	(void)pthread_mutex_unlock(&a->lock);
}

static void wait_turn(struct pd_agent *a, uint64_t deadline)
{
	uint64_t now = pd_now_ns(), slice = now + AG_SLICE_MS * PD_NS_PER_MS;
	uint64_t until = slice < deadline ? slice : deadline;

	if (!a->reader) {
		read_round(a, (uint32_t)((until > now ? until - now : 0) / PD_NS_PER_MS), 1, 0);
	} else {
		struct timespec ts = pd_ns_to_ts(until);

		(void)pthread_cond_timedwait(&a->cond, &a->lock, &ts);
	}
}

/* Wait until pick() finds what it looks for (lock held while it looks),
 * or deadline. */
static int wait_for(struct pd_agent *a, int (*pick)(struct pd_agent *, const void *, void *),
		    const void *key, void *out, uint64_t deadline)
{
	int rc;

	(void)pthread_mutex_lock(&a->lock);
	for (;;) {
		if (pick(a, key, out)) {
			rc = 0;
			break;
		}
		if (gone(a)) {
			rc = -ENOTCONN;
			break;
		}
		if (pd_now_ns() >= deadline) {
			rc = -ETIMEDOUT;
			break;
		}
		wait_turn(a, deadline);
	}
	(void)pthread_mutex_unlock(&a->lock);
	return rc;
}

static int pick_event(struct pd_agent *a, const void *key, void *out)
{
	(void)key;
	if (!a->ev_count)
		return 0;
	*(struct pd_cqe *)out = a->events[a->ev_head];
	a->ev_head = (a->ev_head + 1) % AG_MAX_EVENTS;
	a->ev_count--;
	return 1;
}

static int pick_mail(struct pd_agent *a, const void *key, void *out)
{
	uint64_t user = *(const uint64_t *)key;

	for (uint32_t i = 0; i < a->nmail; i++) {
		if (a->mail[i].user != user)
			continue;
		*(struct pd_cqe *)out = a->mail[i];
		a->mail[i] = a->mail[--a->nmail];
		return 1;
	}
	return 0;
}

int pd_ag_wait_event(struct pd_agent *a, struct pd_cqe *out, uint32_t timeout_ms)
{
	if (timeout_ms == 0)
		pd_ag_poll(a, 0); /* "do not wait" still reads what has arrived, and
				   * clears the bell of an application polling
				   * pd_agent_fd() */
	return wait_for(a, pick_event, NULL, out, pd_deadline_ms(timeout_ms));
}

int pd_ag_wait_mail(struct pd_agent *a, uint64_t user, struct pd_cqe *out, uint32_t timeout_ms)
{
	int rc = wait_for(a, pick_mail, &user, out, pd_deadline_ms(timeout_ms));

	if (rc == -ETIMEDOUT) { /* a late answer must not stay in the mailbox */
		(void)pthread_mutex_lock(&a->lock);
		if (!pick_mail(a, &user, out)) {
			a->abandoned[a->abandoned_next] = user;
			a->abandoned_next = (a->abandoned_next + 1) % AG_MAX_ABANDONED;
		}
		(void)pthread_mutex_unlock(&a->lock);
	}
	return rc;
}

struct gate_key {
	const uint8_t *id;
	uint32_t len;
};

/* The request's gate has an answer other than "not admitted yet". */
static int pick_gate(struct pd_agent *a, const void *key, void *out)
{
	const struct gate_key *k = key;
	int rc = pd_reqtab_gate(&a->reqs, k->id, k->len);

	*(int *)out = rc;
	return rc != -EAGAIN;
}

int pd_ag_wait_admitted(struct pd_agent *a, const uint8_t *id, uint32_t len, uint64_t deadline_ns)
{
	struct gate_key k = { id, len };
	int gate = -EAGAIN, rc;

	pd_ag_poll(a, 1); /* a timeout of 0 still sees an admission that has arrived */
	rc = wait_for(a, pick_gate, &k, &gate, deadline_ns);
	if (rc == -ENOTCONN)
		return rc;
	return rc == -ETIMEDOUT ? -EAGAIN : gate;
}
