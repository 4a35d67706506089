/* SPDX-License-Identifier: MIT */
/*
 * TCP transport, the owner's direct path: a single small write posted to
 * a lane whose thread is idle (nothing queued, sent or unacknowledged) is
 * sent by the posting thread itself, and its ACK is read by the owner when
 * the lane's socket, armed in t->ep (the transport's event fd), becomes
 * readable. The write then costs no wake-up of the lane thread on either
 * side of the round trip.
 *
 * Everything here runs under the peer's lock, which is what hands the
 * lane's socket and rbuf between the owner and the lane thread: while
 * l->direct is set the lane thread waits (poll on its wake eventfd and
 * the socket's hang-up only) and touches neither; at its next wake-up
 * (work posted behind the direct frame, a hang-up, its periodic check of
 * the deadline) it takes the frame back into its window
 * (pd_tcp_direct_take_locked) and goes on as for any frame it sent. So a
 * direct frame that gets no ACK still fails after io_timeout_ms without
 * progress, and any error or unexpected byte is left to the lane thread,
 * which fails the peer as ever. The owner only completes a frame whose
 * ACK matches it, after the receiver's landed().
 */
#include <errno.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "pd_err.h"
#include "pd_tcp_int.h"
#include "pd_time.h"

#define DIRECT_MAX  (64u * 1024u) /* larger frames: the lane thread copies them */
#define DIRECT_EVTS 16

int pd_tcp_ack_match(const uint8_t *buf, const struct pd_tcp_node *n, int32_t *status)
{
	struct pd_tcp_hdr h;

	if (pd_tcp_hdr_decode(buf, 0, &h) < 0 || h.type != PD_TCP_T_ACK || !n ||
	    h.cookie != n->x.cookie || h.slot != n->x.slot || h.gen != n->x.gen ||
	    h.tag != n->x.tag)
		return -EPROTO;
	*status = h.status;
	return 0;
}

struct pd_tcp_lane *pd_tcp_direct_lane(struct pd_tcp_peer *p, const struct pd_tcp_node *n)
{
	if (n->x.len > DIRECT_MAX)
		return NULL;
	for (uint32_t i = 0; i < p->nlanes; i++)
		if (p->lane[i].idle)
			return &p->lane[i];
	return NULL;
}

static int arm(struct pd_tcp_lane *l)
{
	struct pd_tcp *t = l->p->t;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLRDHUP, .data.ptr = l };
	int rc = pd_sys_rc(epoll_ctl(t->ep, EPOLL_CTL_ADD, l->fd, &ev));

	if (rc == 0) {
		l->armed = 1;
		atomic_fetch_add_explicit(&t->narmed, 1, memory_order_relaxed);
	}
	return rc;
}

static void disarm(struct pd_tcp_lane *l)
{
	struct pd_tcp *t = l->p->t;

	if (!l->armed)
		return;
	(void)epoll_ctl(t->ep, EPOLL_CTL_DEL, l->fd, NULL);
	l->armed = 0;
	atomic_fetch_sub_explicit(&t->narmed, 1, memory_order_relaxed);
}

int pd_tcp_direct_send_locked(struct pd_tcp_lane *l, struct pd_tcp_node *n)
{
	struct pd_tcp *t = l->p->t;
	struct iovec iov[2] = {
		{ n->hdr, PD_TCP_HDR_SIZE },
		{ (void *)(uintptr_t)n->x.src, n->x.len }, /* sendmsg only reads */
	};
	struct msghdr m = { .msg_iov = iov, .msg_iovlen = n->x.len ? 2 : 1 };
	ssize_t r = sendmsg(l->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
	int partial = r >= 0 || errno == EAGAIN; /* else an error, the lane thread's to meet */

	l->idle = 0;
	l->direct = n;
	l->direct_off = r > 0 ? (uint32_t)r : 0;
	l->direct_ns = pd_now_ns();
	if (l->direct_off < PD_TCP_HDR_SIZE + n->x.len) {
		if (partial)
			PD_TCP_STAT_INC(t, direct_partial, 1);
		return 1; /* the lane thread sends the rest, or meets the error */
	}
	PD_TCP_STAT_INC(t, frames_tx, 1);
	PD_TCP_STAT_INC(t, direct_tx, 1);
	PD_TCP_STAT_INC(t, bytes_tx, n->x.len);
	return arm(l) < 0;
}

void pd_tcp_direct_take_locked(struct pd_tcp_lane *l)
{
	struct pd_tcp_node *n = l->direct;

	if (!n)
		return;
	disarm(l);
	l->direct = NULL;
	pd_tcp_fifo_append(&l->win, n);
	if (l->direct_off < PD_TCP_HDR_SIZE + n->x.len) {
		l->next_send = n;
		l->send_off = l->direct_off;
	}
	l->progress_ns = l->direct_ns;
}

/* The ACK is in rbuf: complete direct into done and leave the lane idle;
 * anything else (-EPROTO) is the lane thread's to find. */
static int direct_acked(struct pd_tcp_lane *l, struct pd_cplq_fifo *done)
{
	struct pd_tcp_node *n = l->direct;
	int32_t status;

	if (pd_tcp_ack_match(l->rbuf, n, &status) < 0)
		return -EPROTO;
	disarm(l);
	n->c.status = status;
	l->direct = NULL;
	l->rlen = 0;
	l->idle = 1;
	pd_tcp_fifo_append(done, n);
	return 0;
}

/* Read what there is of l's ACK. 1: wake the lane thread (EOF, an error, a
 * bad ACK: it takes the frame back and fails the peer as usual). */
static int direct_read_locked(struct pd_tcp_lane *l, struct pd_cplq_fifo *done)
{
	ssize_t r;

	if (!l->direct || !l->armed)
		return 0; /* taken back meanwhile */
	r = recv(l->fd, l->rbuf + l->rlen, PD_TCP_HDR_SIZE - l->rlen, MSG_DONTWAIT);
	if (r < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (r > 0)
		l->rlen += (uint32_t)r;
	if (r > 0 && l->rlen < PD_TCP_HDR_SIZE)
		return 0;
	if (r > 0 && direct_acked(l, done) == 0)
		return 0;
	disarm(l);
	return 1;
}

static void direct_read(struct pd_tcp_lane *l)
{
	struct pd_tcp_peer *p = l->p;
	struct pd_cplq_fifo done = { 0 };
	int wake;

	pd_lock(&p->lock);
	wake = direct_read_locked(l, &done);
	pd_unlock(&p->lock);
	if (wake)
		pd_efd_signal(l->wake_fd);
	pd_tcp_lane_done(l, &done);
}

void pd_tcp_direct_poll(struct pd_tcp *t)
{
	struct epoll_event ev[DIRECT_EVTS];
	int n;

	if (!atomic_load_explicit(&t->narmed, memory_order_relaxed))
		return;
	n = epoll_wait(t->ep, ev, DIRECT_EVTS, 0);
	for (int i = 0; i < n; i++)
		if (ev[i].data.ptr)
			direct_read(ev[i].data.ptr);
}
