/* SPDX-License-Identifier: MIT */
/* The fuzz targets' broker (see fuzz_broker.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_broker.h"
#include "fuzz_ctrl.h"
#include "fuzz_xport.h"
#include "pd_attach_client.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define MAX_REQUESTS 64u
#define TOMBSTONE_NS (60 * PD_NS_PER_S)
#define MAX_HELD     (1ull << 20)
#define MAX_TURNS    16u /* for an attach or a detach to be seen */
#define IDLE_NS      (2 * TOMBSTONE_NS)

static char rundir[64];
static struct fzb *live; /* the broker built last and not destroyed yet */

void fzb_die(const char *what, int rc)
{
	(void)fprintf(stderr, "fuzz fixture: %s: %s\n", what, pd_strerror(rc));
	abort();
}

static void rundir_remove(void)
{
	(void)rmdir(rundir);
}

/* A target keeps its broker for the run: at exit its socket goes. */
static void live_destroy(void)
{
	if (live)
		fzb_destroy(live);
}

/* One directory per process for the attach socket; quiet logs. */
static void once(void)
{
	if (rundir[0])
		return;
	(void)snprintf(rundir, sizeof(rundir), "/tmp/pdkv-fuzz.XXXXXX");
	if (!mkdtemp(rundir))
		fzb_die("mkdtemp", -errno);
	(void)atexit(rundir_remove);
	(void)atexit(live_destroy); /* first: the directory is empty after it */
	pd_log_set_level(getenv("FUZZ_LOG") ? PD_LOG_DEBUG : PD_LOG_NONE);
}

/* ---- the loop's hooks, as pdbroker's ---------------------------------------------- */

static void before_sleep(void *ctx)
{
	struct fzb *f = ctx;

	pd_agents_before_sleep(f->b->agents);
	pd_broker_fail_unreachable(f->b);
	if (f->turns == 0 || --f->turns == 0)
		pd_loop_stop(f->b->loop);
}

static void cpls(void *ctx, const struct pd_cpl *c, int n)
{
	pd_broker_cpls_handle(ctx, c, n);
}

/* Every turn's dispatch: what the control plane and the transport would
 * bring in through their fds. */
static void on_kick(void *ctx, uint32_t events)
{
	struct fzb *f = ctx;

	(void)events; /* never read: it stays readable */
	fzc_step(f->b->ctrl);
	fzx_drain(f->b->xp[PD_XPORT_TCP], cpls, f->b);
}

void fzb_turns(struct fzb *f, uint32_t n)
{
	f->turns = n + 1; /* the last before_sleep stops the run */
	if (n && pd_loop_run(f->b->loop) < 0)
		fzb_die("loop", -EIO);
}

void fzb_tick(struct fzb *f)
{
	struct pd_broker *b = f->b;
	uint64_t now = pd_now_ns();

	pd_agents_tick(b->agents, now);
	pd_broker_waiters_expire(b, now);
	if (b->rx)
		(void)pd_rx_tick(b->rx, now);
	if (b->tx)
		(void)pd_tx_tick(b->tx, now);
	pd_broker_xport_tick(b);
	pd_broker_stats_publish(b);
	pd_broker_fail_unreachable(b);
}

void fzb_idle(struct fzb *f)
{
	struct pd_broker *b = f->b;
	uint64_t later = pd_now_ns() + IDLE_NS;
	struct pd_tx_stats ts = { 0 };
	struct pd_rx_stats rs = { 0 };

	b->busy_ns = 0; /* who refers to which peer: counted afresh */
	fzc_reset(b->ctrl);
	pd_broker_fail_unreachable(b);
	if (b->tx)
		pd_tx_get_stats(b->tx, &ts);
	if (b->tx && !ts.live_requests && !ts.admitting)
		(void)pd_tx_tick(b->tx, later);
	if (b->rx)
		pd_rx_get_stats(b->rx, &rs);
	if (b->rx && !rs.live_requests)
		(void)pd_rx_tick(b->rx, later);
}

/* ---- building, as pd_broker_create() ------------------------------------------------ */

static int make_shm(struct pd_broker *b)
{
	struct pd_layout_opts o = { .name = b->cfg.name, .send_slots = b->cfg.send_slots,
				    .recv_slots = b->cfg.recv_slots,
				    .slot_size = b->cfg.slot_size, .max_agents = FZB_MAX_AGENTS,
				    .sq_entries = FZB_SQ_ENTRIES, .cq_entries = FZB_CQ_ENTRIES,
				    .epoch = b->epoch, .index_seed = 1, .pins_per_agent = 64 };
	int rc = pd_broker_shm_create(b, &o, NULL, 0);

	if (rc < 0)
		return rc;
	/* Agents get its fd: no name is needed, and none is left in /dev/shm
	 * whatever ends the run. */
	(void)pd_segment_unlink(b->cfg.name);
	if (b->shm.has_recv) {
		b->slot_len = calloc(b->shm.recv.nslots, sizeof(*b->slot_len));
		if (!b->slot_len)
			return -ENOMEM;
	}
	return 0;
}

static int make_loop_and_agents(struct fzb *f)
{
	struct pd_broker *b = f->b;
	struct pd_loop_opts lo = { .before_sleep = before_sleep, .ctx = f };
	struct pd_agents_opts ao = { .shm = &b->shm, .sock_path = f->sock, .group = (gid_t)-1,
				     .epoch = b->epoch, .ops = &pd_broker_agent_ops, .ctx = b };
	int rc = pd_loop_create(&lo, &b->loop);

	if (rc < 0)
		return rc;
	f->kick = eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK);
	if (f->kick < 0)
		return -errno;
	rc = pd_loop_add(b->loop, f->kick, EPOLLIN, on_kick, f);
	ao.loop = b->loop;
	return rc < 0 ? rc : pd_agents_create(&ao, &b->agents, NULL, 0);
}

/* The tables pd_broker_xport_init() makes, and the transport of fuzz_xport.h as tcp. */
static int make_tables(struct pd_broker *b)
{
	b->xp[PD_XPORT_TCP] = fzx_create(&b->shm);
	b->xp[PD_XPORT_TCP]->ops->offer(b->xp[PD_XPORT_TCP], &b->offer[PD_XPORT_TCP]);
	LIST_INIT(&b->held);
	b->px = calloc(MAX_TOKENS, sizeof(*b->px));
	b->sc_idx = calloc(PD_WIRE_MAX_KEYS, sizeof(*b->sc_idx));
	b->acct = calloc(MAX_TOKENS, sizeof(*b->acct));
	return b->px && b->sc_idx && b->acct ? pd_broker_scratch_alloc(b) : -ENOMEM;
}

static int make_ctrl(struct pd_broker *b)
{
	struct pd_ctrl_opts o = { .loop = b->loop, .ops = &pd_broker_ctrl_ops, .ctx = b,
				  .name = b->cfg.name, .epoch = b->epoch };

	return pd_ctrl_create(&o, &b->ctrl);
}

static struct pd_broker *broker_new(uint32_t send_slots, uint32_t recv_slots)
{
	struct pd_broker *b = calloc(1, sizeof(*b));

	if (!b)
		fzb_die("calloc", -ENOMEM);
	pd_config_defaults(&b->cfg);
	(void)snprintf(b->cfg.name, sizeof(b->cfg.name), "fuzz-%d", (int)getpid());
	b->cfg.send_slots = send_slots;
	b->cfg.recv_slots = recv_slots;
	b->cfg.slot_size = FZB_SLOT_SIZE;
	b->epoch = 1;
	b->gid = (gid_t)-1;
	LIST_INIT(&b->waiters);
	RB_INIT(&b->wbatches);
	(void)pthread_mutex_init(&b->tok_lock, NULL);
	return b;
}

void fzb_create(struct fzb *f, uint32_t send_slots, uint32_t recv_slots)
{
	int rc;

	once();
	*f = (struct fzb){ .kick = -1, .b = broker_new(send_slots, recv_slots) };
	(void)snprintf(f->sock, sizeof(f->sock), "%s/%s.sock", rundir, f->b->cfg.name);
	rc = make_tables(f->b);
	if (rc == 0)
		rc = make_shm(f->b);
	if (rc == 0)
		rc = make_loop_and_agents(f);
	if (rc == 0)
		rc = pd_broker_engines_create(f->b);
	if (rc == 0)
		rc = make_ctrl(f->b);
	if (rc < 0)
		fzb_die("broker", rc);
	pd_segment_publish(&f->b->shm.seg);
	live = f;
}

void fzb_destroy(struct fzb *f)
{
	if (live == f)
		live = NULL;
	pd_broker_destroy(f->b); /* what it did not make is NULL */
	if (f->kick >= 0)
		(void)close(f->kick);
	for (uint32_t i = 0; i < FZB_NRW; i++)
		free(f->snap[i]);
	*f = (struct fzb){ .kick = -1 };
}

/* ---- the regions agents write ---------------------------------------------------- */

static void *rw_region(const struct fzb *f, uint32_t i, size_t *len)
{
	static const uint32_t id[FZB_NRW] = FZB_RW_REGIONS;

	return pd_segment_region(&f->b->shm.seg, id[i], len);
}

void fzb_snapshot(struct fzb *f)
{
	for (uint32_t i = 0; i < FZB_NRW; i++) {
		size_t len;
		const void *mem = rw_region(f, i, &len);

		free(f->snap[i]);
		f->snap[i] = malloc(len);
		if (!f->snap[i])
			fzb_die("snapshot", -ENOMEM);
		memcpy(f->snap[i], mem, len);
	}
}

/* Nothing of the broker's refers into the regions agents write. */
static int quiet(const struct pd_broker *b)
{
	struct pd_tx_stats ts = { 0 };
	struct pd_rx_stats rs = { 0 };

	if (b->tx)
		pd_tx_get_stats(b->tx, &ts);
	if (b->rx)
		pd_rx_get_stats(b->rx, &rs);
	return pd_agents_count(b->agents) == 0 && !ts.live_requests && !ts.live_batches &&
	       !ts.writes_in_flight && !ts.admitting && !rs.live_requests &&
	       (!b->shm.has_recv || pd_pool_nfree(&b->shm.recv) == b->shm.recv.nslots) &&
	       LIST_EMPTY(&b->waiters) && RB_EMPTY(&b->wbatches) && LIST_EMPTY(&b->held);
}

int fzb_restore(struct fzb *f)
{
	if (!f->snap[0] || !quiet(f->b))
		return -EBUSY;
	for (uint32_t i = 0; i < FZB_NRW; i++) {
		size_t len;
		void *mem = rw_region(f, i, &len);

		memcpy(mem, f->snap[i], len);
	}
	return 0;
}

/* ---- agents ---------------------------------------------------------------------- */

static int connect_hello(const struct fzb *f, uint32_t roles, uint32_t tp_rank)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	struct pd_attach_hello h;
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0)
		fzb_die("socket", -errno);
	(void)snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", f->sock);
	pd_attach_hello_init(&h, roles, tp_rank, tp_rank + 1);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ||
	    send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h))
		fzb_die("connect", -errno);
	return fd;
}

/* The ack, its fds closed (this process maps the segment already).
 * 1 got it, 0 not yet. */
static int read_ack(int fd, struct pd_attach_ack *ack)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(PD_ATTACH_NFDS * sizeof(int))];
	} cm;
	struct iovec iov = { .iov_base = ack, .iov_len = sizeof(*ack) };
	struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
			    .msg_controllen = sizeof(cm.b) };
	ssize_t n = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
	struct cmsghdr *c;

	if (n < 0 && errno == EAGAIN)
		return 0;
	if (n != (ssize_t)sizeof(*ack))
		fzb_die("ack", n < 0 ? -errno : -EPROTO);
	for (c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c)) {
		const int *fds = (const int *)(void *)CMSG_DATA(c);
		size_t nfds = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);

		for (size_t i = 0; c->cmsg_type == SCM_RIGHTS && i < nfds; i++)
			(void)close(fds[i]);
	}
	return 1;
}

int fzb_attach(struct fzb *f, struct fzb_agent *a, uint32_t roles, uint32_t tp_rank)
{
	struct pd_attach_ack ack;
	int got = 0, rc;

	*a = (struct fzb_agent){ .sock = connect_hello(f, roles, tp_rank) };
	for (uint32_t i = 0; i < MAX_TURNS && !got; i++) {
		fzb_turns(f, 1);
		got = read_ack(a->sock, &ack);
	}
	if (!got)
		fzb_die("attach: no ack", -ETIMEDOUT);
	if (ack.status < 0) {
		(void)close(a->sock);
		a->sock = -1;
		return ack.status;
	}
	a->id = ack.agent_id;
	rc = pd_layout_rings(&f->b->shm, a->id - 1, &a->sq, &a->cq);
	if (rc < 0)
		fzb_die("rings", rc);
	return 0;
}

int fzb_alive(struct fzb_agent *a)
{
	char c;

	if (a->sock < 0)
		return 0;
	if (recv(a->sock, &c, 1, MSG_DONTWAIT | MSG_PEEK) < 0 && errno == EAGAIN)
		return 1;
	(void)close(a->sock);
	a->sock = -1;
	return 0;
}

void fzb_detach(struct fzb *f, struct fzb_agent *a)
{
	uint32_t n = pd_agents_count(f->b->agents);

	if (a->sock < 0)
		return;
	(void)close(a->sock);
	a->sock = -1;
	for (uint32_t i = 0; i < MAX_TURNS && pd_agents_count(f->b->agents) == n; i++)
		fzb_turns(f, 1);
}
