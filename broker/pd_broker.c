/* SPDX-License-Identifier: MIT */
/* pdbroker: build, run, tear down. */
#include <errno.h>
#include <inttypes.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "pd_admin.h"
#include "pd_admin_proto.h"
#include "pd_broker_int.h"
#include "pd_rundir.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_pages.h"
#include "pd_metrics_http.h"
#include "pd_time.h"

#define TICK_NS      (100 * PD_NS_PER_MS)
#define IDLE_TICK_NS PD_NS_PER_S /* nothing to time: one tick a second (stats fresh) */
#define IDLE_AFTER   3u          /* ticks with nothing to time before slowing */
#define SQ_ENTRIES   2048u
#define CQ_ENTRIES   512u
#define MAX_REQUESTS 65536u
#define TOMBSTONE_NS (60 * PD_NS_PER_S)
#define MAX_HELD     (64ull << 20)
#define DRAIN_NS     (2 * PD_NS_PER_S) /* SIGTERM: bound on finishing in-flight sends */
#define FDS_BESIDE_AGENTS 512u         /* peers' lanes, the data port's, admin, ZeroMQ */

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

/* Anything that needs the 100 ms tick: hellos, requests, recv waits,
 * retries, queued completions, a session being set up, an admin or metrics
 * connection, a stop. Without, the deadlines the tick checks are a
 * heartbeat or more away (attached agents' leases, sessions' beats and
 * silence); a wait that could begin (an attach, a message, an admin
 * request) wakes the loop, which speeds the tick up then. */
static int has_timed_work(const struct pd_broker *b)
{
	struct pd_metrics_stats ms;
	struct pd_agents_stats as;
	uint64_t queued, dropped;
	struct pd_tx_stats ts;
	struct pd_rx_stats rs;

	if (b->stopping || !LIST_EMPTY(&b->waiters) || b->nfree_later || b->nreclaim_later ||
	    memchr(b->send_resync, 1, sizeof(b->send_resync)) || pd_ctrl_timed(b->ctrl) ||
	    pd_admin_open(b->admin))
		return 1;
	pd_agents_get_stats(b->agents, &as);
	pd_agents_cq_stats(b->agents, &queued, &dropped);
	if (as.pending || queued)
		return 1;
	if (b->metrics) {
		pd_metrics_get_stats(b->metrics, &ms);
		if (ms.conns)
			return 1;
	}
	if (b->tx) {
		pd_tx_get_stats(b->tx, &ts);
		if (ts.live_requests || ts.live_batches || ts.writes_in_flight)
			return 1;
	}
	if (b->rx) {
		pd_rx_get_stats(b->rx, &rs);
		if (rs.live_requests || rs.waiting_requests)
			return 1;
	}
	return 0;
}

/* The slow tick: a second; with a session up, once a heartbeat (each tick
 * sends one), between the fast tick and a second. */
static uint64_t slow_tick_ns(const struct pd_broker *b)
{
	uint64_t hb = b->cfg.heartbeat_ns;
	struct pd_ctrl_stats cs = { 0 };

	pd_ctrl_stats(b->ctrl, &cs);
	if (!cs.peers_live)
		return IDLE_TICK_NS;
	return hb < TICK_NS ? TICK_NS : hb > IDLE_TICK_NS ? IDLE_TICK_NS : hb;
}

/* The tick's pace: 100 ms with timed work, slow after IDLE_AFTER ticks
 * without (an idle broker wakes once a heartbeat, not ten times a second). */
static void pace(struct pd_broker *b, int fast)
{
	if (fast == !b->tick_slow)
		return;
	if (pd_loop_set_tick(b->loop, fast ? TICK_NS : slow_tick_ns(b)) == 0)
		b->tick_slow = !fast;
	b->idle_ticks = 0;
}

static void on_tick(void *ctx)
{
	struct pd_broker *b = ctx;
	uint64_t now = pd_now_ns();

	pd_agents_tick(b->agents, now);
	pd_broker_leases_check(b, now);
	pd_broker_waiters_expire(b, now);
	if (b->rx)
		(void)pd_rx_tick(b->rx, now);
	if (b->tx)
		(void)pd_tx_tick(b->tx, now);
	pd_ctrl_tick(b->ctrl, now);
	pd_broker_xport_tick(b); /* a peer gone unannounced (shm: its segment) fails */
	pd_admin_tick(b->admin, now);
	pd_metrics_tick(b->metrics, now);
	pd_broker_stats_publish(b);
	if (b->stopping)
		check_drained(b, now);
	if (has_timed_work(b))
		pace(b, 1);
	else if (!b->tick_slow && ++b->idle_ticks >= IDLE_AFTER)
		pace(b, 0);
}

static void before_sleep(void *ctx)
{
	struct pd_broker *b = ctx;

	/* Slow, and what woke the loop brought timed work: back to the fast
	 * tick (on_tick slows down again once there is none). */
	if (b->tick_slow && has_timed_work(b))
		pace(b, 1);

	pd_agents_before_sleep(b->agents);
	pd_broker_fail_unreachable(b);
}

/* SIGHUP: with --log-file, reopen it (the rotation renamed the old one
 * away: new lines go to a new file); without, nothing to do. */
static void on_hangup(struct pd_broker *b)
{
	int rc;

	if (!b->cfg.log_file[0]) {
		PD_LOG(INFO, ctl, "SIGHUP: received and ignored (no --log-file to reopen)");
		return;
	}
	rc = pd_log_stderr_to(b->cfg.log_file);
	if (rc < 0)
		PD_LOG(WARN, ctl, "SIGHUP: cannot reopen --log-file %s: %s; logging on here",
		       b->cfg.log_file, pd_strerror(rc));
	else
		PD_LOG(INFO, ctl, "SIGHUP: log reopened");
}

static void on_signal(void *ctx, int signo)
{
	struct pd_broker *b = ctx;

	if (signo == SIGHUP) {
		on_hangup(b);
		return;
	}
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
	int n, rc = pd_rundir_make(b->cfg.rundir, b->gid, err, errlen); /* --group's too */

	if (rc < 0)
		return rc;
	n = snprintf(b->sock_path, sizeof(b->sock_path), "%s/%s.sock", b->cfg.rundir,
		     b->cfg.name);
	if (n < 0 || (size_t)n >= sizeof(b->sock_path)) {
		pd_err_set(err, errlen, "--rundir: path too long");
		return -ENAMETOOLONG;
	}
	return 0;
}

int pd_broker_shm_create(struct pd_broker *b, const struct pd_layout_opts *o, char *err,
			 size_t errlen)
{
	int rc = pd_layout_create(o, &b->shm, err, errlen);

	if (rc < 0)
		return rc;
	for (uint32_t k = 0; k < b->shm.send_parts; k++) /* an unusable send pool */
		b->shm.send_part[k].resetter = 1;         /* mutex is made new here */
	b->have_shm = 1;
	if (b->shm.has_recv) {
		b->grant = calloc(b->shm.recv.nslots, sizeof(*b->grant));
		if (!b->grant)
			return -ENOMEM;
	}
	return 0;
}

/* What the staging arenas got, and with --hugepages auto why not more. */
static void log_pages(const struct pd_broker *b)
{
	char why[160];

	if (b->shm.seg.arena_size) {
		PD_LOG(INFO, broker, "staging arenas in 2 MiB hugetlb pages (%" PRIu64 " pages)",
		       b->shm.seg.arena_size / PD_HUGE_PAGE);
		return;
	}
	if (b->cfg.hugepages == PD_HUGE_OFF) {
		PD_LOG(INFO, broker, "staging arenas in 4 KiB pages (--hugepages off)");
		return;
	}
	if (b->shm.seg.page_size == PD_HUGE_PAGE) {
		PD_LOG(INFO, broker, "staging arenas in 2 MiB transparent huge pages of "
		       "/dev/shm (not hugetlb: %s)", b->shm.seg.pages_why);
		return;
	}
	pd_pages_why_not(why, sizeof(why));
	PD_LOG(INFO, broker, "staging arenas in 4 KiB pages: %s; %s (vm.nr_hugepages or "
	       "huge=within_size gives 2 MiB pages)", b->shm.seg.pages_why, why);
}

_Static_assert(PD_CFG_SEND_POOLS_MAX == PD_SEND_PARTS_MAX, "--send-pools' bound");

static int make_shm(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_layout_opts o = { .name = b->cfg.name, .send_slots = b->cfg.send_slots,
				    .send_parts = b->cfg.send_pools, .recv_slots = b->cfg.recv_slots,
				    .slot_size = b->cfg.slot_size, .max_agents = b->cfg.max_agents,
				    .sq_entries = SQ_ENTRIES, .cq_entries = CQ_ENTRIES,
				    .epoch = b->epoch, .hugepages = b->cfg.hugepages };
	int rc;

	if (getrandom(&o.index_seed, sizeof(o.index_seed), 0) != sizeof(o.index_seed))
		o.index_seed = b->epoch;
	rc = pd_broker_shm_create(b, &o, err, errlen);
	if (rc < 0)
		return rc;
	log_pages(b);
	if (b->gid != (gid_t)-1 && fchown(b->shm.seg.fd, (uid_t)-1, b->gid) < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "--group %s: cannot give the segment to it: %s",
			   b->cfg.group, pd_strerror(rc));
		return rc;
	}
	return 0;
}

/* Each agent holds two fds here (its socket, its doorbell), each connection
 * waiting for its hello one: a soft RLIMIT_NOFILE short of that is raised
 * towards the hard one, and one that stays short is said. */
static void fds_for_agents(const struct pd_broker *b)
{
	rlim_t want = (rlim_t)b->cfg.max_agents * 2 + PD_AGENTS_HELLO_MAX + FDS_BESIDE_AGENTS;
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= want)
		return;
	rl.rlim_cur = rl.rlim_max == RLIM_INFINITY || rl.rlim_max >= want ? want : rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0 && getrlimit(RLIMIT_NOFILE, &rl) < 0)
		return;
	if (rl.rlim_cur < want)
		PD_LOG(WARN, ctl, "--max-agents %u: %llu file descriptors allowed (ulimit -n, "
		       "LimitNOFILE), about %llu wanted: attaches fail once they run out",
		       b->cfg.max_agents, (unsigned long long)rl.rlim_cur,
		       (unsigned long long)want);
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
	fds_for_agents(b);
	ao.loop = b->loop;
	return pd_agents_create(&ao, &b->agents, err, errlen);
}

int pd_broker_engines_create(struct pd_broker *b)
{
	struct pd_rx_opts ro = { .pool = &b->shm.recv, .index = &b->shm.index,
				 .ops = &pd_broker_rx_ops, .ctx = b, .owner = BROKER_OWNER,
				 .max_requests = MAX_REQUESTS,
				 .admission_timeout_ns = b->cfg.admission_timeout_ns,
				 .ttl_ns = b->cfg.recv_ttl_ns, .tombstone_ns = TOMBSTONE_NS,
				 .max_held_bytes = MAX_HELD,
				 .peer_max_requests = b->cfg.peer_max_requests ?
					 b->cfg.peer_max_requests : PD_RX_FAIR_SHARE,
				 .peer_max_slots = b->cfg.peer_max_reserved,
				 .preempt_idle_ns = b->cfg.preempt_idle_ns,
				 .max_peers = MAX_TOKENS };
	struct pd_tx_opts to = { .ops = &pd_broker_tx_ops, .ctx = b,
				 .max_requests = MAX_REQUESTS,
				 .alloc_timeout_ns = b->cfg.admission_timeout_ns + 5 * PD_NS_PER_S,
				 .tombstone_ns = TOMBSTONE_NS,
				 .notify_failures = b->cfg.notify_failures,
				 .admit_grants = b->cfg.admit_grants };
	int rc = 0;

	if (b->shm.has_recv)
		rc = pd_rx_create(&ro, &b->rx);
	if (rc == 0 && b->shm.has_send)
		rc = pd_tx_create(&to, &b->tx);
	return rc;
}

static int make_ctrl(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_ctrl_opts o = { .loop = b->loop, .ops = &pd_broker_ctrl_ops, .ctx = b,
				  .bind = b->cfg.ctrl, .proxy = b->cfg.proxy,
				  .name = b->cfg.name, .host_id = b->host_id, .epoch = b->epoch,
				  .slot_size = b->cfg.slot_size, .recv_slots = b->cfg.recv_slots,
				  .heartbeat_ns = b->cfg.heartbeat_ns,
				  /* trust: ids fit the per-peer tables, down peers forgotten */
				  .max_peers = MAX_TOKENS - 1, .evict_ns = b->cfg.peer_grace_ns,
				  .keys = b->keys };
	int rc;

	o.nxports = pd_broker_hello_xports(b, o.xport, o.addr);
	if (b->offer[PD_XPORT_RDMA].addr[0]) { /* "rdma" offered: the recv arena's key and base */
		o.rdma_rkey = b->offer[PD_XPORT_RDMA].rdma_rkey;
		o.rdma_base = b->offer[PD_XPORT_RDMA].rdma_base;
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

/* Transports are set up and chosen per peer in pd_broker_xport.c: here,
 * what they all count into. */
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

/* --metrics-listen: Prometheus over HTTP from this loop (off when not set). */
static int make_metrics(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_metrics_opts o = { .loop = b->loop, .listen = b->cfg.metrics_listen,
				     .broker = b->cfg.name, .shm = &b->shm };

	return b->cfg.metrics_listen[0] ? pd_metrics_create(&o, &b->metrics, err, errlen) : 0;
}

int pd_broker_create(const struct pd_config *cfg, struct pd_broker **out, char *err,
		     size_t errlen)
{
	struct pd_broker *b;
	struct timespec now;
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
	rc = pd_broker_scratch_alloc(b);
	if (rc == 0)
		rc = pick_transport(b);
	if (rc == 0)
		rc = pd_broker_keys_load(b, err, errlen); /* a bad key file: before anything */
	if (rc == 0)
		rc = resolve_group(b, err, errlen);
	if (rc == 0)
		rc = make_rundir(b, err, errlen);
	if (rc == 0)
		rc = make_shm(b, err, errlen);
	if (rc == 0)
		rc = make_loop_and_agents(b, err, errlen);
	if (rc == 0)
		rc = pd_broker_leases_init(b);
	if (rc == 0)
		rc = pd_broker_engines_create(b);
	if (rc == 0)
		rc = pd_broker_xport_init(b, err, errlen);
	if (rc == 0)
		rc = make_ctrl(b, err, errlen);
	if (rc == 0)
		rc = make_admin(b, err, errlen);
	if (rc == 0)
		rc = make_metrics(b, err, errlen);
	if (rc < 0) {
		pd_broker_destroy(b);
		return rc;
	}
	(void)snprintf(b->data_addr, sizeof(b->data_addr), "%s", b->offer[PD_XPORT_TCP].addr);
	pd_broker_stats_publish(b);
	pd_segment_publish(&b->shm.seg);
	PD_LOG(INFO, ctl, "broker %s ready: ctrl %s, data %s%s%s, epoch %llu", b->cfg.name,
	       pd_ctrl_endpoint(b->ctrl), b->data_addr, b->metrics ? ", metrics " : "",
	       b->metrics ? pd_metrics_addr(b->metrics) : "", (unsigned long long)b->epoch);
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
	pd_metrics_destroy(b->metrics);
	pd_admin_destroy(b->admin);
	pd_ctrl_goodbye(b->ctrl);
	pd_ctrl_destroy(b->ctrl);
	pd_ctrl_keys_free(b->keys); /* lent to the ctrl: after it */
	pd_broker_xport_fini(b); /* threads joined, QPs gone: nothing lands, nothing is read */
	pd_tx_destroy(b->tx);
	pd_rx_destroy(b->rx);
	pd_agents_destroy(b->agents);
	pd_loop_destroy(b->loop);
	while ((w = LIST_FIRST(&b->waiters))) {
		LIST_REMOVE(w, link);
		free(w);
	}
	pd_broker_wbatches_free(b);
	if (b->have_shm)
		pd_layout_close(&b->shm);
	free(b->grant);
	pd_broker_scratch_free(b);
	pd_broker_leases_fini(b);
	free(b->acct);
	(void)pthread_mutex_destroy(&b->tok_lock);
	free(b);
}
