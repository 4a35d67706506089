/* SPDX-License-Identifier: MIT */
/*
 * TCP transport, send side: peers (owner thread) and their lane threads.
 *
 * A lane thread: connect + HELLO (bounded by connect_timeout_ms), then a
 * loop of
 *   refill   the owner's direct frame back into the window, if any, and
 *            pending -> window (p->lock), up to `window` frames; with
 *            nothing at all, the lane goes idle: the owner may then send a
 *            frame itself (pd_tcp_direct.c) and the lane thread touches
 *            neither socket nor window until its next refill;
 *   send     sendmsg() of header + payload iovecs from the first unsent
 *            byte on, several frames per call, never blocking;
 *   wait     poll(socket: IN, OUT while bytes are unsent; wake eventfd),
 *            io_timeout_ms after the last progress while frames are
 *            outstanding; idle: the socket's hang-up only, and
 *            io_timeout_ms (to check a direct frame's deadline);
 *   recv     ACKs, matched against the oldest frame of the window.
 * It ends on its first error, or when the peer's err is set (by a sibling
 * lane or by disconnect), and then fails everything it holds (lane_close).
 */
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

#define LANE_IOV 64 /* iovecs per sendmsg: up to 32 frames */

struct lane_ctx {
	struct pd_tcp_lane *l;
	int aborted;                   /* ended by the peer's err, not its own */
	int idle;                      /* l->idle as this thread last set it */
	int took;                      /* the last refill took a direct frame back */
};

#define POLL_RX (POLLIN | POLLERR | POLLHUP | POLLRDHUP)

/* ---- lane: connect and HELLO -------------------------------------------------- */

/* The lane's wake eventfd fired: carry on unless the peer is being torn down. */
static int lane_check(void *arg)
{
	struct lane_ctx *lc = arg;
	struct pd_tcp_peer *p = lc->l->p;
	int err;

	pd_efd_drain(lc->l->wake_fd);
	pd_lock(&p->lock);
	err = p->err;
	pd_unlock(&p->lock);
	if (err)
		lc->aborted = 1;
	return err;
}

static int lane_hello(struct lane_ctx *lc, uint64_t deadline, const struct pd_tcp_wait *w)
{
	struct pd_tcp_lane *l = lc->l;
	struct pd_tcp_hdr h = {
		.magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION, .type = PD_TCP_T_HELLO,
		.slot = l->idx, .gen = l->p->nlanes, .tag = l->p->token,
	};
	uint8_t buf[PD_TCP_HDR_SIZE];
	int rc;

	pd_tcp_hdr_encode(&h, buf);
	rc = pd_tcp_io_send_all(l->fd, buf, sizeof(buf), deadline, w);
	if (rc == 0)
		rc = pd_tcp_io_recv_all(l->fd, buf, sizeof(buf), deadline, w);
	if (rc < 0)
		return rc;
	if (pd_tcp_hdr_decode(buf, 0, &h) < 0 || h.type != PD_TCP_T_HELLO) {
		PD_TCP_STAT_INC(l->p->t, proto_errors, 1);
		return -EPROTO;
	}
	return h.status; /* 0, or the receiver's refusal (-EACCES, -EPROTO, ...) */
}

static int lane_open(struct lane_ctx *lc)
{
	struct pd_tcp_lane *l = lc->l;
	struct pd_tcp_peer *p = l->p;
	struct pd_tcp_wait w = { .wake_fd = l->wake_fd, .check = lane_check, .arg = lc };
	uint64_t deadline = pd_deadline_ms(p->t->o.connect_timeout_ms);
	socklen_t elen = sizeof(int);
	int rc, soerr = 0;

	rc = pd_sys_rc(socket(p->addr.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
	if (rc < 0)
		return rc;
	l->fd = rc;
	rc = pd_tcp_sock_tune(l->fd);
	if (rc == 0)
		rc = pd_sys_rc(connect(l->fd, (const struct sockaddr *)&p->addr, p->addrlen));
	if (rc == -EINPROGRESS) {
		rc = pd_tcp_io_wait(l->fd, POLLOUT, deadline, &w);
		if (rc == 0)
			rc = pd_sys_rc(getsockopt(l->fd, SOL_SOCKET, SO_ERROR, &soerr, &elen));
		if (rc == 0)
			rc = -soerr;
	}
	if (rc < 0)
		return rc;
	return lane_hello(lc, deadline, &w);
}

/* ---- lane: the data loop -------------------------------------------------------- */

/* Take the owner's direct frame back and move pending writes into the
 * window; with nothing to do and nothing seen on the socket (ev), go idle.
 * The peer's err when it is set. */
static int lane_refill(struct lane_ctx *lc, short ev)
{
	struct pd_tcp_lane *l = lc->l;
	struct pd_tcp_peer *p = l->p;
	uint32_t window = p->t->o.window;
	int was_idle;
	int err;

	pd_lock(&p->lock);
	err = p->err;
	lc->took = l->direct != NULL;
	pd_tcp_direct_take_locked(l);
	was_idle = l->win.n == 0;
	while (!err && l->win.n < window && l->pending.n) {
		struct pd_tcp_node *n = pd_tcp_fifo_pop(&l->pending);

		pd_tcp_fifo_append(&l->win, n);
		if (!l->next_send) {
			l->next_send = n;
			l->send_off = 0;
		}
	}
	l->idle = !err && !l->win.n && !(ev & POLL_RX);
	lc->idle = l->idle;
	pd_unlock(&p->lock);
	if (err)
		lc->aborted = 1;
	else if (was_idle && l->win.n)
		l->progress_ns = pd_now_ns(); /* the no-progress clock starts now */
	return err;
}

/* iovecs from the first unsent byte on: header rest, then payload rest.
 * iov_base is not const-qualified, but sendmsg only reads: hence the casts. */
static int lane_iov(const struct pd_tcp_lane *l, struct iovec *iov, int max)
{
	const struct pd_tcp_node *n = l->next_send;
	uint32_t off = l->send_off;
	int k = 0;

	for (; n && k + 2 <= max; n = pd_tcp_node_next(n), off = 0) {
		if (off < PD_TCP_HDR_SIZE) {
			iov[k++] = (struct iovec){ (void *)(uintptr_t)(n->hdr + off),
						   PD_TCP_HDR_SIZE - off };
			off = PD_TCP_HDR_SIZE;
		}
		off -= PD_TCP_HDR_SIZE; /* now: payload bytes sent */
		if (n->x.len > off)
			iov[k++] = (struct iovec){
				(void *)(uintptr_t)((const uint8_t *)n->x.src + off),
				n->x.len - off };
	}
	return k;
}

static void lane_advance(struct pd_tcp_lane *l, size_t sent)
{
	struct pd_tcp *t = l->p->t;
	uint64_t frames = 0, bytes = 0;

	while (sent) {
		struct pd_tcp_node *n = l->next_send;
		size_t left = PD_TCP_HDR_SIZE + (size_t)n->x.len - l->send_off;

		if (sent < left) {
			l->send_off += (uint32_t)sent;
			break;
		}
		sent -= left;
		frames++;
		bytes += n->x.len;
		l->next_send = pd_tcp_node_next(n);
		l->send_off = 0;
	}
	PD_TCP_STAT_INC(t, frames_tx, frames);
	PD_TCP_STAT_INC(t, bytes_tx, bytes);
}

static int lane_send(struct pd_tcp_lane *l)
{
	struct iovec iov[LANE_IOV];
	struct msghdr m = { .msg_iov = iov };

	while (l->next_send) {
		ssize_t r;

		m.msg_iovlen = (size_t)lane_iov(l, iov, LANE_IOV);
		r = sendmsg(l->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
		if (r < 0) {
			int rc = -errno;

			if (rc == -EINTR)
				continue;
			return rc == -EAGAIN ? 0 : rc;
		}
		l->progress_ns = pd_now_ns();
		lane_advance(l, (size_t)r);
	}
	return 0;
}

/* One ACK: it must answer the oldest frame of the window, fully sent. */
static int lane_ack(struct pd_tcp_lane *l, const uint8_t *buf, struct pd_cplq_fifo *done)
{
	struct pd_tcp_node *n = pd_tcp_node_of(l->win.head);
	int32_t status;

	if (n == l->next_send || pd_tcp_ack_match(buf, n, &status) < 0) {
		PD_TCP_STAT_INC(l->p->t, proto_errors, 1);
		return -EPROTO;
	}
	n = pd_tcp_fifo_pop(&l->win);
	n->c.status = status;
	pd_tcp_fifo_append(done, n);
	return 0;
}

static int lane_acks(struct pd_tcp_lane *l, struct pd_cplq_fifo *done)
{
	uint32_t off = 0;
	int rc = 0;

	while (rc == 0 && l->rlen - off >= PD_TCP_HDR_SIZE) {
		rc = lane_ack(l, l->rbuf + off, done);
		off += PD_TCP_HDR_SIZE;
	}
	memmove(l->rbuf, l->rbuf + off, l->rlen - off);
	l->rlen -= off;
	return rc;
}

void pd_tcp_lane_done(struct pd_tcp_lane *l, struct pd_cplq_fifo *done)
{
	struct pd_tcp_peer *p = l->p;
	uint64_t bytes = 0;

	if (!done->n)
		return;
	for (const struct pd_tcp_node *n = pd_tcp_node_of(done->head); n; n = pd_tcp_node_next(n))
		bytes += PD_TCP_HDR_SIZE + (uint64_t)n->x.len;
	PD_TCP_STAT_INC(p->t, acks_rx, done->n);
	pd_lock(&p->lock);
	p->outstanding -= done->n;
	l->load -= bytes;
	pd_unlock(&p->lock);
	pd_tcp_cq_push(p->t, done);
}

/* Hand acknowledged writes to the completion queue. */
static void lane_complete(struct pd_tcp_lane *l, struct pd_cplq_fifo *done)
{
	if (done->n)
		l->progress_ns = pd_now_ns();
	pd_tcp_lane_done(l, done);
}

static int lane_recv(struct pd_tcp_lane *l)
{
	struct pd_cplq_fifo done = { 0 };
	int rc = 0;

	for (;;) {
		size_t room = sizeof(l->rbuf) - l->rlen;
		ssize_t r = recv(l->fd, l->rbuf + l->rlen, room, MSG_DONTWAIT);

		if (r == 0) {
			rc = -ECONNRESET; /* the receiver closed: it refused something */
			break;
		}
		if (r < 0) {
			rc = -errno;
			if (rc == -EINTR)
				continue;
			rc = rc == -EAGAIN ? 0 : rc;
			break;
		}
		l->rlen += (uint32_t)r;
		rc = lane_acks(l, &done);
		if (rc < 0 || (size_t)r < room)
			break;
	}
	if (rc == 0)
		rc = lane_acks(l, &done); /* what the owner read of a direct frame's ACK */
	lane_complete(l, &done);
	return rc;
}

/* Block until the socket or the wake eventfd has something, or the
 * no-progress deadline passes (only while frames are outstanding). Idle,
 * the socket is the owner's to read: only its hang-up wakes us, and the
 * period io_timeout_ms, for the deadline of a direct frame. */
static int lane_wait(struct lane_ctx *lc, short *revents)
{
	struct pd_tcp_lane *l = lc->l;
	short in = lc->idle ? POLLRDHUP : POLLIN;
	struct pollfd pfd[2] = {
		{ .fd = l->fd, .events = (short)(in | (l->next_send ? POLLOUT : 0)) },
		{ .fd = l->wake_fd, .events = POLLIN },
	};
	uint64_t io_ns = l->p->t->o.io_timeout_ms * PD_NS_PER_MS;
	uint64_t deadline = 0;
	int ms, rc;

	if (l->win.n)
		deadline = l->progress_ns + io_ns;
	ms = lc->idle ? (int)l->p->t->o.io_timeout_ms : pd_tcp_wait_ms(deadline);
	if (ms == 0)
		return -ETIMEDOUT;
	*revents = 0;
	rc = pd_sys_rc(poll(pfd, 2, ms));
	if (rc < 0)
		return rc == -EINTR ? 0 : rc;
	if (pfd[1].revents)
		pd_efd_drain(l->wake_fd);
	*revents = pfd[0].revents;
	return 0;
}

static int lane_run(struct lane_ctx *lc)
{
	struct pd_tcp_lane *l = lc->l;
	short ev = 0;
	int rc;

	for (;;) {
		rc = lane_refill(lc, ev);
		if (rc == 0 && !lc->idle && (lc->took || (ev & POLL_RX))) {
			rc = lane_recv(l);
			if (rc == 0) /* the window has room again */
				rc = lane_refill(lc, 0);
		}
		if (rc == 0 && !lc->idle)
			rc = lane_send(l);
		if (rc == 0)
			rc = lane_wait(lc, &ev);
		if (rc < 0)
			return rc;
	}
}

/* ---- lane: the end ------------------------------------------------------------ */

static void peer_wake(struct pd_tcp_peer *p)
{
	for (uint32_t i = 0; i < p->nlanes; i++)
		pd_efd_signal(p->lane[i].wake_fd);
}

static void fail_all(struct pd_cplq_fifo *f, int err)
{
	for (struct pd_cplq_node *n = f->head; n; n = n->next)
		n->status = err;
}

/* The first error of any lane becomes the peer's: the siblings stop, every
 * write of the peer fails with it, and the last lane out queues the peer
 * completion (after all of the peer's write completions). */
static void lane_close(struct lane_ctx *lc, int rc)
{
	struct pd_tcp_lane *l = lc->l;
	struct pd_tcp_peer *p = l->p;
	struct pd_cplq_fifo dead = { 0 }, pc = { 0 };
	uint32_t ndead;
	int first = 0, err;

	PD_ASSERT(rc < 0);
	pd_lock(&p->lock);
	pd_tcp_direct_take_locked(l); /* before the close: the owner may read fd till then */
	l->idle = 0;
	if (!p->err) {
		p->err = rc;
		p->failed = first = 1;
	}
	err = p->err;
	pd_cplq_fifo_splice(&dead, &l->win);
	pd_cplq_fifo_splice(&dead, &l->pending);
	ndead = dead.n;
	p->outstanding -= ndead;
	l->load = 0;
	pd_unlock(&p->lock);
	if (l->fd >= 0)
		(void)close(l->fd);
	l->fd = -1;
	l->next_send = NULL;
	if (first)
		peer_wake(p);
	if (!lc->aborted) {
		PD_TCP_STAT_INC(p->t, conn_errors, 1);
		PD_TCP_LOG_RL(p->t, WARN, "peer %u lane %u: %s", p->id, l->idx, pd_strerror(rc));
	}
	fail_all(&dead, err);
	pd_tcp_cq_push(p->t, &dead);
	pd_lock(&p->lock);
	if (--p->live == 0 && p->failed) {
		pd_tcp_fifo_append(&pc, p->peer_cpl);
		p->peer_cpl = NULL;
	}
	pd_unlock(&p->lock);
	fail_all(&pc, err);
	pd_tcp_cq_push(p->t, &pc);
}

static void *lane_main(void *arg)
{
	struct lane_ctx lc = { .l = arg };
	int rc = lane_open(&lc);

	if (rc == 0)
		rc = lane_run(&lc);
	lane_close(&lc, rc);
	return NULL;
}

/* ---- peers (owner thread) ----------------------------------------------------- */

static struct pd_tcp_peer **peer_find(struct pd_tcp *t, uint32_t id)
{
	for (uint32_t i = 0; i < t->o.max_peers; i++)
		if (t->peers[i] && t->peers[i]->id == id)
			return &t->peers[i];
	return NULL;
}

static struct pd_tcp_peer **peer_free_entry(struct pd_tcp *t)
{
	for (uint32_t i = 0; i < t->o.max_peers; i++)
		if (!t->peers[i])
			return &t->peers[i];
	return NULL;
}

static int lanes_open(struct pd_tcp_peer *p)
{
	for (uint32_t i = 0; i < p->nlanes; i++) {
		struct pd_tcp_lane *l = &p->lane[i];

		*l = (struct pd_tcp_lane){ .p = p, .idx = i, .fd = -1 };
		l->wake_fd = pd_efd_create();
		if (l->wake_fd < 0) {
			int rc = l->wake_fd;

			while (i--)
				(void)close(p->lane[i].wake_fd);
			return rc;
		}
	}
	return 0;
}

static void lanes_close(struct pd_tcp_peer *p)
{
	for (uint32_t i = 0; i < p->nlanes; i++)
		(void)close(p->lane[i].wake_fd);
}

static int peer_alloc(struct pd_tcp *t, uint32_t id, const struct sockaddr_storage *ss,
		      socklen_t len, uint64_t token, struct pd_tcp_peer **out)
{
	struct pd_cplq_fifo one = { 0 };
	struct pd_tcp_peer *p;
	int rc;

	p = calloc(1, sizeof(*p) + t->o.lanes * sizeof(p->lane[0]));
	if (!p)
		return -ENOMEM;
	*p = (struct pd_tcp_peer){ .t = t, .id = id, .nlanes = t->o.lanes, .token = token,
				   .addr = *ss, .addrlen = len };
	rc = pd_pthread_rc(pthread_mutex_init(&p->lock, NULL));
	if (rc < 0)
		goto out_free;
	rc = lanes_open(p);
	if (rc < 0)
		goto out_destroy_lock;
	rc = pd_tcp_pool_get(t, 1, &one);
	if (rc < 0)
		goto out_close_lanes;
	p->peer_cpl = pd_tcp_node_of(one.head);
	p->peer_cpl->c.kind = PD_CPL_PEER;
	p->peer_cpl->c.peer = id;
	p->peer_cpl->c.cookie = 0;
	p->peer_cpl->x = (struct pd_xfer){ .cookie = 0 };
	*out = p;
	return 0;

out_close_lanes:
	lanes_close(p);
out_destroy_lock:
	(void)pthread_mutex_destroy(&p->lock);
out_free:
	free(p);
	return rc;
}

static void peer_free(struct pd_tcp_peer *p)
{
	struct pd_cplq_fifo one = { 0 };

	if (p->peer_cpl) {
		pd_tcp_fifo_append(&one, p->peer_cpl);
		pd_tcp_pool_put(p->t, &one);
	}
	lanes_close(p);
	(void)pthread_mutex_destroy(&p->lock);
	free(p);
}

/* Requested end: err -ECONNABORTED unless the peer already failed; quiet:
 * no peer completion either way; unstarted: lanes never started. Joins. */
static void peer_halt(struct pd_tcp_peer *p, int quiet, uint32_t unstarted)
{
	pd_lock(&p->lock);
	if (!p->err)
		p->err = -ECONNABORTED;
	if (quiet)
		p->failed = 0;
	p->live -= unstarted;
	pd_unlock(&p->lock);
	peer_wake(p);
	for (uint32_t i = 0; i < p->nlanes; i++)
		if (p->lane[i].started)
			pd_thread_join(p->lane[i].thr);
	PD_ASSERT(p->live == 0 && p->outstanding == 0);
}

/* live counts the lanes not yet started too, so no lane can be the last
 * one out (and queue a peer completion) before all are started. A connect
 * that fails as a whole queues no peer completion. */
static int peer_start(struct pd_tcp_peer *p)
{
	uint32_t i;
	int rc = 0;

	p->live = p->nlanes;
	for (i = 0; i < p->nlanes && rc == 0; i++) {
		rc = pd_thread_start(&p->lane[i].thr, lane_main, &p->lane[i]);
		p->lane[i].started = rc == 0;
	}
	if (rc < 0)
		peer_halt(p, 1, p->nlanes - i + 1);
	return rc;
}

int pd_tcp_connect(struct pd_tcp *t, uint32_t peer, const char *host, uint16_t port,
		   uint64_t token)
{
	struct sockaddr_storage ss;
	struct pd_tcp_peer **entry, *p = NULL;
	socklen_t len;
	int rc;

	if (!t || port == 0 || pd_sock_addr(host, port, &ss, &len) < 0)
		return -EINVAL;
	if (t->stopped)
		return -ESHUTDOWN;
	if (peer_find(t, peer))
		return -EEXIST;
	entry = peer_free_entry(t);
	if (!entry)
		return -ENOBUFS;
	rc = peer_alloc(t, peer, &ss, len, token, &p);
	if (rc < 0)
		return rc;
	PD_ASSERT(p); /* for gcc -O1's flow analysis: set whenever rc == 0 */
	rc = peer_start(p);
	if (rc < 0) {
		peer_free(p);
		return rc;
	}
	*entry = p;
	return 0;
}

int pd_tcp_disconnect(struct pd_tcp *t, uint32_t peer)
{
	struct pd_tcp_peer **entry;

	if (!t)
		return -EINVAL;
	entry = peer_find(t, peer);
	if (!entry)
		return -ENOENT;
	peer_halt(*entry, 0, 0);
	peer_free(*entry);
	*entry = NULL;
	return 0;
}

void pd_tcp_peers_stop(struct pd_tcp *t)
{
	for (uint32_t i = 0; i < t->o.max_peers; i++)
		if (t->peers[i])
			(void)pd_tcp_disconnect(t, t->peers[i]->id);
}

/* ---- post (owner thread) ------------------------------------------------------ */

static int xfers_valid(const struct pd_tcp *t, const struct pd_xfer *x, uint32_t n)
{
	if (n > t->o.queue_depth)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (x[i].len > t->o.max_frame || (x[i].len && !x[i].src))
			return 0;
	return 1;
}

/* Count n writes against the peer's queue_depth. */
static int post_reserve(struct pd_tcp_peer *p, uint32_t n)
{
	int rc = 0;

	pd_lock(&p->lock);
	if (p->err)
		rc = -ENOTCONN;
	else if (p->outstanding + n > p->t->o.queue_depth)
		rc = -EAGAIN;
	else
		p->outstanding += n;
	pd_unlock(&p->lock);
	return rc;
}

static void post_fill(struct pd_cplq_fifo *f, uint32_t peer, const struct pd_xfer *x)
{
	struct pd_tcp_node *n = pd_tcp_node_of(f->head);

	for (uint32_t i = 0; n; n = pd_tcp_node_next(n), i++) {
		struct pd_tcp_hdr h = {
			.magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
			.type = PD_TCP_T_DATA, .slot = x[i].slot, .gen = x[i].gen,
			.len = x[i].len, .cookie = x[i].cookie, .tag = x[i].tag,
		};

		n->x = x[i];
		n->c.cookie = x[i].cookie;
		n->c.peer = peer;
		n->c.kind = PD_CPL_WRITE;
		n->c.status = 0;
		pd_tcp_hdr_encode(&h, n->hdr);
	}
}

/* The lane with the fewest bytes pending or unacknowledged. */
static struct pd_tcp_lane *lane_least(struct pd_tcp_peer *p)
{
	struct pd_tcp_lane *best = &p->lane[0];

	for (uint32_t i = 1; i < p->nlanes; i++)
		if (p->lane[i].load < best->load)
			best = &p->lane[i];
	return best;
}

/* A single small write on an idle lane: sent from here (pd_tcp_direct.c);
 * the mask of lanes to wake. */
static uint32_t post_direct(struct pd_tcp_peer *p, struct pd_cplq_fifo *f)
{
	struct pd_tcp_lane *l = f->n == 1 ? pd_tcp_direct_lane(p, pd_tcp_node_of(f->head)) : NULL;
	struct pd_tcp_node *node;

	if (!l)
		return 0;
	node = pd_tcp_fifo_pop(f);
	l->load += PD_TCP_HDR_SIZE + (uint64_t)node->x.len;
	return pd_tcp_direct_send_locked(l, node) ? 1u << l->idx : 0;
}

/* Spread over the lanes and wake those that got work; -ENOTCONN (nothing
 * queued) if the peer failed since post_reserve. */
static int post_queue(struct pd_tcp_peer *p, struct pd_cplq_fifo *f)
{
	uint32_t n = f->n, mask = 0;
	struct pd_tcp_node *node;
	int err;

	pd_lock(&p->lock);
	err = p->err;
	if (err)
		p->outstanding -= n;
	else
		mask = post_direct(p, f);
	while (!err && (node = pd_tcp_fifo_pop(f))) {
		struct pd_tcp_lane *l = lane_least(p);

		l->load += PD_TCP_HDR_SIZE + (uint64_t)node->x.len;
		pd_tcp_fifo_append(&l->pending, node);
		mask |= 1u << l->idx;
	}
	pd_unlock(&p->lock);
	if (err) {
		pd_tcp_pool_put(p->t, f);
		return -ENOTCONN;
	}
	for (uint32_t i = 0; i < p->nlanes; i++)
		if (mask & (1u << i))
			pd_efd_signal(p->lane[i].wake_fd);
	return (int)n;
}

int pd_tcp_post(struct pd_tcp *t, uint32_t peer, const struct pd_xfer *x, uint32_t n)
{
	struct pd_cplq_fifo f = { 0 };
	struct pd_tcp_peer **entry;
	int rc;

	if (!t || (!x && n) || !xfers_valid(t, x, n))
		return -EINVAL;
	entry = peer_find(t, peer);
	if (!entry)
		return -ENOENT;
	if (n == 0)
		return 0;
	rc = post_reserve(*entry, n);
	if (rc < 0)
		return rc;
	rc = pd_tcp_pool_get(t, n, &f);
	if (rc < 0) {
		pd_lock(&(*entry)->lock);
		(*entry)->outstanding -= n;
		pd_unlock(&(*entry)->lock);
		return rc;
	}
	post_fill(&f, peer, x);
	return post_queue(*entry, &f);
}
