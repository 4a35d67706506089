/* SPDX-License-Identifier: MIT */
/* pdbroker: build, run, tear down. */
#include <errno.h>
#include <grp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pd_admin.h"
#include "pd_admin_proto.h"
#include "pd_broker_int.h"
#include "pd_rundir.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define TICK_NS      (100 * PD_NS_PER_MS)
#define MAX_AGENTS   32u
#define SQ_ENTRIES   2048u
#define CQ_ENTRIES   512u
#define MAX_REQUESTS 65536u
#define TOMBSTONE_NS (60 * PD_NS_PER_S)
#define MAX_HELD     (64ull << 20)
#define DRAIN_NS     (2 * PD_NS_PER_S) /* SIGTERM: bound on finishing in-flight sends */

/* ---- loop hooks --------------------------------------------------------------------- */

/* Stopping: done once no batch this broker sends is in flight (requests
 * waiting for their agent's next batch are not waited for), or at the bound. */
static void check_drained(struct pd_broker *b, uint64_t now)
{
	struct pd_tx_stats ts;

	pd_tx_get_stats(b->tx, &ts);
	if ((ts.live_batches == 0 && ts.writes_in_flight == 0) || now >= b->stop_deadline) {
		if (ts.live_requests)
			PD_LOG(WARN, ctl, "stopping with %llu requests unfinished (they fail)",
			       (unsigned long long)ts.live_requests);
		pd_loop_stop(b->loop);
	}
}

static void on_tick(void *ctx)
{
	struct pd_broker *b = ctx;
	uint64_t now = pd_now_ns();

	pd_agents_tick(b->agents, now);
	broker_waiters_expire(b, now);
	if (b->rx)
		(void)pd_rx_tick(b->rx, now);
	if (b->tx)
		(void)pd_tx_tick(b->tx, now);
	pd_ctrl_tick(b->ctrl, now);
	if (b->shmx)
		(void)pd_shmx_check(b->shmx); /* a peer's segment gone: it failed */
	pd_admin_tick(b->admin, now);
	broker_stats_publish(b);
	if (b->stopping)
		check_drained(b, now);
}

static void before_sleep(void *ctx)
{
	struct pd_broker *b = ctx;

	pd_agents_before_sleep(b->agents);
	broker_fail_unreachable(b);
}

static void on_signal(void *ctx)
{
	struct pd_broker *b = ctx;

	if (b->stopping) { /* a second signal: at once */
		pd_loop_stop(b->loop);
		return;
	}
	PD_LOG(INFO, ctl, "signal: shutting down (in-flight sends get up to %llu ms)",
	       (unsigned long long)(DRAIN_NS / PD_NS_PER_MS));
	b->stopping = 1;
	b->stop_deadline = pd_now_ns() + DRAIN_NS;
	pd_segment_set_state(&b->shm.seg, PD_SHM_DRAINING);
	check_drained(b, pd_now_ns());
}

/* ---- building ------------------------------------------------------------------------ */

static int make_rundir(struct pd_broker *b, char *err, size_t errlen)
{
	int n;

	if (mkdir(b->cfg.rundir, 0770) < 0 && errno != EEXIST) {
		pd_err_set(err, errlen, "--rundir %s: %s", b->cfg.rundir, pd_strerror(-errno));
		return -errno;
	}
	n = snprintf(b->sock_path, sizeof(b->sock_path), "%s/%s.sock", b->cfg.rundir,
		     b->cfg.name);
	if (n < 0 || (size_t)n >= sizeof(b->sock_path)) {
		pd_err_set(err, errlen, "--rundir: path too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

static int make_shm(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_layout_opts o = { .name = b->cfg.name, .send_slots = b->cfg.send_slots,
				    .recv_slots = b->cfg.recv_slots,
				    .slot_size = b->cfg.slot_size, .max_agents = MAX_AGENTS,
				    .sq_entries = SQ_ENTRIES, .cq_entries = CQ_ENTRIES,
				    .epoch = b->epoch };
	int rc;

	if (getrandom(&o.index_seed, sizeof(o.index_seed), 0) != sizeof(o.index_seed))
		o.index_seed = b->epoch;
	rc = pd_layout_create(&o, &b->shm, err, errlen);
	if (rc < 0)
		return rc;
	b->have_shm = 1;
	if (b->gid != (gid_t)-1 && fchown(b->shm.seg.fd, (uid_t)-1, b->gid) < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "--group %s: cannot give the segment to it: %s",
			   b->cfg.group, pd_strerror(rc));
		return rc;
	}
	if (b->shm.has_recv) {
		b->grant = calloc(b->shm.recv.nslots, sizeof(*b->grant));
		if (!b->grant)
			return -ENOMEM;
	}
	return 0;
}

static int make_loop_and_agents(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_loop_opts lo = { .tick_ns = TICK_NS, .on_tick = on_tick,
				   .before_sleep = before_sleep, .on_signal = on_signal,
				   .ctx = b };
	struct pd_agents_opts ao = { .shm = &b->shm, .sock_path = b->sock_path,
				     .group = b->gid, .epoch = b->epoch,
				     .ops = &pd_broker_agent_ops, .ctx = b };
	int rc = pd_loop_create(&lo, &b->loop);

	if (rc < 0)
		return rc;
	ao.loop = b->loop;
	return pd_agents_create(&ao, &b->agents, err, errlen);
}

static int make_engines(struct pd_broker *b)
{
	struct pd_rx_opts ro = { .pool = &b->shm.recv, .index = &b->shm.index,
				 .ops = &pd_broker_rx_ops, .ctx = b, .owner = BROKER_OWNER,
				 .max_requests = MAX_REQUESTS,
				 .admission_timeout_ns = b->cfg.admission_timeout_ns,
				 .ttl_ns = b->cfg.recv_ttl_ns, .tombstone_ns = TOMBSTONE_NS,
				 .max_held_bytes = MAX_HELD };
	struct pd_tx_opts to = { .ops = &pd_broker_tx_ops, .ctx = b,
				 .max_requests = MAX_REQUESTS,
				 .alloc_timeout_ns = b->cfg.admission_timeout_ns + 5 * PD_NS_PER_S,
				 .tombstone_ns = TOMBSTONE_NS,
				 .notify_failures = b->cfg.notify_failures };
	int rc = 0;

	if (b->shm.has_recv)
		rc = pd_rx_create(&ro, &b->rx);
	if (rc == 0 && b->shm.has_send)
		rc = pd_tx_create(&to, &b->tx);
	return rc;
}

/* "HOST:PORT" -> host, port ("*" and 0: any free port). */
static int split_hostport(const char *s, char *host, size_t hlen, uint16_t *port)
{
	const char *colon = strrchr(s, ':');
	unsigned long p = 0;
	char *end = NULL;

	if (!colon || (size_t)(colon - s) >= hlen)
		return -EINVAL;
	if (strcmp(colon + 1, "*")) {
		p = strtoul(colon + 1, &end, 10);
		if (*end || p > 65535)
			return -EINVAL;
	}
	memcpy(host, s, (size_t)(colon - s));
	host[colon - s] = '\0';
	*port = (uint16_t)p;
	return 0;
}

static int make_tcp(struct pd_broker *b, char *addr, size_t alen, char *err, size_t errlen)
{
	struct pd_tcp_opts o;
	char host[256];
	uint16_t port;
	int rc;

	pd_tcp_opts_init(&o);
	o.ops = &pd_broker_tcp_ops;
	o.ctx = b;
	o.lanes = b->cfg.data_threads;
	if (b->cfg.send_slots > o.queue_depth)
		o.queue_depth = b->cfg.send_slots;
	if (b->cfg.slot_size > o.max_frame)
		o.max_frame = (uint32_t)b->cfg.slot_size;
	rc = pd_tcp_create(&o, &b->tcp);
	if (rc == 0)
		rc = pd_loop_add(b->loop, pd_tcp_event_fd(b->tcp), EPOLLIN, broker_tcp_drain, b);
	if (rc < 0 || !b->shm.has_recv)
		return rc;
	rc = split_hostport(b->cfg.data, host, sizeof(host), &port);
	if (rc == 0)
		rc = pd_tcp_listen(b->tcp, host, port);
	if (rc < 0) {
		pd_err_set(err, errlen, "--data %s: %s", b->cfg.data, pd_strerror(rc));
		return rc;
	}
	(void)snprintf(addr, alen, "%s:%d", strcmp(host, "0.0.0.0") ? host : "127.0.0.1",
		       pd_tcp_port(b->tcp));
	return 0;
}

static int make_ctrl(struct pd_broker *b, const char *addr, char *err, size_t errlen)
{
	struct pd_ctrl_opts o = { .loop = b->loop, .ops = &pd_broker_ctrl_ops, .ctx = b,
				  .bind = b->cfg.ctrl, .proxy = b->cfg.proxy,
				  .name = b->cfg.name, .host_id = b->host_id, .epoch = b->epoch,
				  .slot_size = b->cfg.slot_size, .recv_slots = b->cfg.recv_slots,
				  .heartbeat_ns = b->cfg.heartbeat_ns };
	struct pd_rdma_local l;
	int rc;

	o.nxports = broker_hello_xports(b, addr, o.xport, o.addr);
	if (b->rdma_addr[0] && pd_rdma_local_info(b->rdma, &l) == 0) {
		o.rdma_rkey = l.rkey; /* with "rdma" offered: the recv arena's key and base */
		o.rdma_base = l.base;
	}
	rc = pd_ctrl_create(&o, &b->ctrl);

	if (rc < 0)
		pd_err_set(err, errlen, "--ctrl %s: %s", b->cfg.ctrl, pd_strerror(rc));
	return rc;
}

/* --group NAME: the gid that shares the sockets and the segment (0660). */
static int resolve_group(struct pd_broker *b, char *err, size_t errlen)
{
	struct group gr, *res = NULL;
	char buf[4096];
	int rc;

	b->gid = (gid_t)-1;
	if (!b->cfg.group[0])
		return 0;
	rc = getgrnam_r(b->cfg.group, &gr, buf, sizeof(buf), &res);
	if (rc != 0 || !res) {
		pd_err_set(err, errlen, "--group %s: %s", b->cfg.group,
			   rc ? pd_strerror(-rc) : "no such group");
		return rc ? -rc : -ENOENT;
	}
	b->gid = gr.gr_gid;
	return 0;
}

/* Transports are chosen per peer (pd_shmx_broker.c); rdma is set up once
 * the segment is (pd_rdma_broker.c): here, what they all count into. */
static int pick_transport(struct pd_broker *b)
{
	b->acct = calloc(MAX_TOKENS, sizeof(*b->acct));
	return b->acct ? 0 : -ENOMEM;
}

static int make_admin(struct pd_broker *b, char *err, size_t errlen)
{
	char path[sizeof(b->sock_path)];
	int rc = pd_rundir_path(b->cfg.rundir, b->cfg.name, PD_ADMIN_SUFFIX, path, sizeof(path));

	if (rc == 0)
		rc = pd_admin_create(b, path, &b->admin);
	if (rc < 0)
		pd_err_set(err, errlen, "admin socket in %s: %s", b->cfg.rundir, pd_strerror(rc));
	return rc;
}

int pd_broker_create(const struct pd_config *cfg, struct pd_broker **out, char *err,
		     size_t errlen)
{
	struct pd_broker *b;
	struct timespec now;
	char addr[300] = "";
	int rc;

	if (!cfg || !out)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->cfg = *cfg;
	(void)clock_gettime(CLOCK_REALTIME, &now);
	b->epoch = (uint64_t)now.tv_sec * PD_NS_PER_S + (uint64_t)now.tv_nsec;
	LIST_INIT(&b->waiters);
	RB_INIT(&b->wbatches);
	(void)pthread_mutex_init(&b->tok_lock, NULL);
	rc = broker_scratch_alloc(b);
	if (rc == 0)
		rc = pick_transport(b);
	if (rc == 0)
		rc = resolve_group(b, err, errlen);
	if (rc == 0)
		rc = make_rundir(b, err, errlen);
	if (rc == 0)
		rc = make_shm(b, err, errlen);
	if (rc == 0)
		rc = make_loop_and_agents(b, err, errlen);
	if (rc == 0)
		rc = make_engines(b);
	if (rc == 0)
		rc = make_tcp(b, addr, sizeof(addr), err, errlen);
	if (rc == 0)
		rc = broker_xport_init(b, err, errlen);
	if (rc == 0)
		rc = broker_rdma_init(b, err, errlen);
	if (rc == 0)
		rc = make_ctrl(b, addr, err, errlen);
	if (rc == 0)
		rc = make_admin(b, err, errlen);
	if (rc < 0) {
		pd_broker_destroy(b);
		return rc;
	}
	(void)snprintf(b->data_addr, sizeof(b->data_addr), "%s", addr);
	broker_stats_publish(b);
	pd_segment_publish(&b->shm.seg);
	PD_LOG(INFO, ctl, "broker %s ready: ctrl %s, data %s, epoch %llu", b->cfg.name,
	       pd_ctrl_endpoint(b->ctrl), addr, (unsigned long long)b->epoch);
	*out = b;
	return 0;
}

int pd_broker_run(struct pd_broker *b)
{
	return b ? pd_loop_run(b->loop) : -EINVAL;
}

void pd_broker_destroy(struct pd_broker *b)
{
	struct waiter *w;

	if (!b)
		return;
	if (b->have_shm)
		pd_segment_set_state(&b->shm.seg, PD_SHM_DRAINING);
	pd_admin_destroy(b->admin);
	pd_ctrl_goodbye(b->ctrl);
	pd_ctrl_destroy(b->ctrl);
	if (b->tcp) {
		pd_loop_del(b->loop, pd_tcp_event_fd(b->tcp));
		pd_tcp_destroy(b->tcp); /* joins the data threads: no write lands after */
	}
	broker_rdma_fini(b); /* QPs and MRs gone before the arenas are unmapped */
	broker_xport_fini(b); /* shm copies end (joined) before the staging goes */
	pd_tx_destroy(b->tx);
	pd_rx_destroy(b->rx);
	pd_agents_destroy(b->agents);
	pd_loop_destroy(b->loop);
	while ((w = LIST_FIRST(&b->waiters))) {
		LIST_REMOVE(w, link);
		free(w);
	}
	broker_wbatches_free(b);
	if (b->have_shm)
		pd_layout_close(&b->shm);
	free(b->grant);
	broker_scratch_free(b);
	free(b->acct);
	(void)pthread_mutex_destroy(&b->tok_lock);
	free(b);
}
