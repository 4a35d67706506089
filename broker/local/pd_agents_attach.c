/* SPDX-License-Identifier: MIT */
/*
 * Agents: the attach socket. Every connection accepted waits for its hello
 * in the hello table, never in an agent slot: at most PD_AGENTS_HELLO_MAX
 * at once (one more evicts the oldest), each closed when it has said
 * nothing valid within PD_AGENTS_HELLO_MS. Accepting never blocks, so
 * connections that stay silent hold no one else's attach up. A valid hello
 * from a permitted peer then takes a free agent slot (pd_agents_admit()),
 * or is refused with -EUSERS when every slot is taken: logged once per
 * burst (the first, then how many more once FULL_QUIET_NS passed without
 * one), counted each time. Out of file descriptors, accepting pauses until
 * the next tick instead of spinning on a socket that stays readable.
 */
#include <errno.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "pd_agents_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define HELLO_TIMEOUT_NS ((uint64_t)PD_AGENTS_HELLO_MS * PD_NS_PER_MS)
#define FULL_QUIET_NS    (5 * PD_NS_PER_S) /* a burst of full-table refusals ends */

static void hello_close(struct hello_conn *c)
{
	struct pd_agents *ag = c->ag;

	pd_loop_del(ag->o.loop, c->conn.fd);
	(void)close(c->conn.fd);
	c->conn.fd = -1;
	ag->nhello--;
}

/* The connection leaves the table, its fd kept (now the caller's). */
static int hello_take(struct hello_conn *c)
{
	int fd = c->conn.fd;

	pd_loop_del(c->ag->o.loop, fd);
	c->conn.fd = -1;
	c->ag->nhello--;
	return fd;
}

static void refuse(int fd, int32_t status)
{
	struct pd_attach_ack ack;

	pd_attach_ack_init(&ack, status);
	(void)pd_attach_send_ack(fd, &ack, NULL);
}

static int peer_ok(const struct pd_agents *ag, int fd, struct ucred *cred)
{
	if (pd_attach_peer_cred(fd, cred) < 0 ||
	    !pd_attach_cred_ok(fd, cred, geteuid(), ag->o.group))
		return -EACCES;
	return 0;
}

static struct ent *free_ent(struct pd_agents *ag)
{
	for (uint32_t i = 0; i < ag->max; i++)
		if (ag->ent[i].state == E_FREE)
			return &ag->ent[i];
	return NULL;
}

static void refused_full(struct pd_agents *ag)
{
	ag->st.refused_full++;
	ag->full_last_ns = pd_now_ns();
	if (ag->full_burst++ == 0)
		PD_LOG(WARN, ctl, "attach refused: all %u agent slots taken (--max-agents); "
		       "refusing with -EUSERS until one is free", ag->max);
}

/* The burst of full-table refusals is over: how many followed the one logged. */
static void full_burst_end(struct pd_agents *ag, uint64_t now_ns)
{
	if (!ag->full_burst || now_ns - ag->full_last_ns < FULL_QUIET_NS)
		return;
	if (ag->full_burst > 1)
		PD_LOG(WARN, ctl, "attach: %u more refused while all agent slots were taken",
		       ag->full_burst - 1);
	ag->full_burst = 0;
}

/* A complete, valid hello: the peer's credentials, then a free agent slot. */
static int hello_done(struct hello_conn *c, const struct pd_attach_hello *h)
{
	struct pd_agents *ag = c->ag;
	struct ucred cred;
	struct ent *e;
	int rc = peer_ok(ag, c->conn.fd, &cred);

	if (rc < 0)
		return rc;
	e = free_ent(ag);
	if (!e)
		return -EUSERS;
	return pd_agents_admit(e, hello_take(c), h, &cred);
}

static void on_hello(void *ctx, uint32_t events)
{
	struct hello_conn *c = ctx;
	struct pd_attach_hello h;
	int rc = pd_attach_conn_read(&c->conn, &h);

	(void)events;
	if (rc == -EAGAIN)
		return;
	if (rc == 0)
		rc = hello_done(c, &h);
	if (rc == 0)
		return;
	if (rc == -EUSERS)
		refused_full(c->ag);
	else
		PD_LOG_RL(WARN, ctl, "attach refused: %s", pd_strerror(rc));
	if (c->conn.fd < 0)
		return; /* an agent slot took it, and closed it */
	if (rc == -EPROTO || rc == -EACCES || rc == -EUSERS)
		refuse(c->conn.fd, rc);
	hello_close(c);
}

/* The connection waiting longest (the table is full: never NULL). */
static struct hello_conn *hello_oldest(struct pd_agents *ag)
{
	struct hello_conn *old = NULL;

	for (uint32_t i = 0; i < PD_AGENTS_HELLO_MAX; i++) {
		struct hello_conn *c = &ag->hello[i];

		if (c->conn.fd >= 0 && (!old || c->conn.start_ns < old->conn.start_ns))
			old = c;
	}
	return old;
}

static struct hello_conn *hello_free(struct pd_agents *ag)
{
	for (uint32_t i = 0; i < PD_AGENTS_HELLO_MAX; i++)
		if (ag->hello[i].conn.fd < 0)
			return &ag->hello[i];
	return NULL;
}

/* A connection accepted joins the table; its hello may be there already. */
static void hello_add(struct pd_agents *ag, int fd)
{
	struct hello_conn *c;

	if (ag->nhello >= PD_AGENTS_HELLO_MAX) {
		hello_close(hello_oldest(ag));
		ag->st.pending_evicted++;
		PD_LOG_RL(WARN, ctl, "attach: %u connections without a hello: the oldest closed",
			  PD_AGENTS_HELLO_MAX);
	}
	c = hello_free(ag);
	pd_attach_conn_init(&c->conn, fd);
	if (pd_loop_add(ag->o.loop, fd, EPOLLIN | EPOLLRDHUP, on_hello, c) < 0) {
		(void)close(fd);
		c->conn.fd = -1;
		return;
	}
	ag->nhello++;
	on_hello(c, EPOLLIN);
}

/* accept4() failed with err: out of file descriptors, the connection stays
 * queued and the socket readable; stop watching it until the next tick. */
static void accept_pause(struct pd_agents *ag, int err)
{
	if (ag->accept_paused || pd_loop_mod(ag->o.loop, ag->lfd, 0) < 0)
		return;
	ag->accept_paused = 1;
	ag->st.accept_failed++;
	PD_LOG_RL(WARN, ctl, "attach: cannot accept: %s; trying again at the next tick",
		  pd_strerror(err));
}

static void accept_resume(struct pd_agents *ag)
{
	if (ag->accept_paused && pd_loop_mod(ag->o.loop, ag->lfd, EPOLLIN) == 0)
		ag->accept_paused = 0;
}

void pd_agents_on_accept(void *ctx, uint32_t events)
{
	struct pd_agents *ag = ctx;
	int fd;

	(void)events;
	while ((fd = accept4(ag->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC)) >= 0)
		hello_add(ag, fd);
	if (errno == EMFILE || errno == ENFILE)
		accept_pause(ag, -errno);
}

void pd_agents_hello_tick(struct pd_agents *ag, uint64_t now_ns)
{
	full_burst_end(ag, now_ns);
	accept_resume(ag);
	for (uint32_t i = 0; i < PD_AGENTS_HELLO_MAX; i++) {
		struct hello_conn *c = &ag->hello[i];

		if (c->conn.fd < 0 || !pd_attach_conn_expired(&c->conn, now_ns, HELLO_TIMEOUT_NS))
			continue;
		hello_close(c);
		ag->st.hello_timeouts++;
		PD_LOG_RL(WARN, ctl, "attach: no hello within %u ms: closed", PD_AGENTS_HELLO_MS);
	}
}

void pd_agents_hello_close_all(struct pd_agents *ag)
{
	for (uint32_t i = 0; i < PD_AGENTS_HELLO_MAX; i++)
		if (ag->hello[i].conn.fd >= 0)
			hello_close(&ag->hello[i]);
}
