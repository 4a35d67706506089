/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: the statistics region (shm/pd_stats.h), republished from the
 * engines' own counters on every tick, so that pdctl reads everything from
 * the segment without asking the broker.
 */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <bsd/string.h>

#include "pd_broker_int.h"
#include "pd_metrics_http.h"
#include "pd_time.h"

#define C PD_STAT_KIND_COUNTER
#define G PD_STAT_KIND_GAUGE

struct field {
	const char *name;
	size_t off;
	uint32_t kind;
};

#define F(s, f, k) { #f, offsetof(struct s, f), k }

static const struct field rx_fields[] = {
	F(pd_rx_stats, batches, C), F(pd_rx_stats, reserves, C), F(pd_rx_stats, granted, C), F(pd_rx_stats, deduped, C),
	F(pd_rx_stats, pregranted, C), F(pd_rx_stats, bound, C),
	F(pd_rx_stats, committed, C), F(pd_rx_stats, ready, C), F(pd_rx_stats, released, C),
	F(pd_rx_stats, release_waits, C),
	F(pd_rx_stats, failed, C), F(pd_rx_stats, cancelled, C),
	F(pd_rx_stats, ttl_reclaimed, C), F(pd_rx_stats, rejected_tomb, C),
	F(pd_rx_stats, rejected_zero, C), F(pd_rx_stats, rejected_big, C),
	F(pd_rx_stats, rejected_busy, C), F(pd_rx_stats, rejected_foreign, C),
	F(pd_rx_stats, rejected_peer_requests, C), F(pd_rx_stats, rejected_peer_slots, C),
	F(pd_rx_stats, preempted, C), F(pd_rx_stats, pool_repairs, C),
	F(pd_rx_stats, proto_errors, C), F(pd_rx_stats, grant_errors, C),
	F(pd_rx_stats, late_putdone, C),
	F(pd_rx_stats, live_requests, G), F(pd_rx_stats, waiting_requests, G),
};

static const struct field admit_fields[] = {
	F(pd_admit_stats, admitted, C), F(pd_admit_stats, admitted_at_once, C),
	F(pd_admit_stats, rejected_zero, C), F(pd_admit_stats, rejected_big, C),
	F(pd_admit_stats, timed_out, C), F(pd_admit_stats, wait_ns, C),
	F(pd_admit_stats, wait_max_ns, G),
};

static const struct field tx_fields[] = {
	F(pd_tx_stats, batches, C), F(pd_tx_stats, pregranted, C),
	F(pd_tx_stats, declared, C), F(pd_tx_stats, admitted, C),
	F(pd_tx_stats, chunks, C), F(pd_tx_stats, bytes, C),
	F(pd_tx_stats, requests_done, C), F(pd_tx_stats, requests_failed, C),
	F(pd_tx_stats, requests_cancelled, C), F(pd_tx_stats, stale_responses, C),
	F(pd_tx_stats, refused, C), F(pd_tx_stats, live_requests, G),
	F(pd_tx_stats, live_batches, G), F(pd_tx_stats, writes_in_flight, G),
	F(pd_tx_stats, tombstones, G), F(pd_tx_stats, admitting, G),
};

static const struct field ctrl_fields[] = {
	F(pd_ctrl_stats, rx_msgs, C), F(pd_ctrl_stats, tx_msgs, C), F(pd_ctrl_stats, tx_again, C),
	F(pd_ctrl_stats, tx_fail, C), F(pd_ctrl_stats, queued, C), F(pd_ctrl_stats, dropped, C),
	F(pd_ctrl_stats, bad_frames, C), F(pd_ctrl_stats, bad_size, C),
	F(pd_ctrl_stats, bad_msgpack, C), F(pd_ctrl_stats, bad_schema, C),
	F(pd_ctrl_stats, bad_peer, C), F(pd_ctrl_stats, bad_state, C),
	F(pd_ctrl_stats, errors_sent, C), F(pd_ctrl_stats, hellos_sent, C),
	F(pd_ctrl_stats, heartbeats_sent, C), F(pd_ctrl_stats, heartbeats_rcvd, C),
	F(pd_ctrl_stats, peers_up, C), F(pd_ctrl_stats, peers_down, C),
	F(pd_ctrl_stats, aliases, C), F(pd_ctrl_stats, hellos_refused, C),
	F(pd_ctrl_stats, refusals, C), F(pd_ctrl_stats, evicted, C),
	F(pd_ctrl_stats, auth_ok, C), F(pd_ctrl_stats, auth_denied, C),
	F(pd_ctrl_stats, auth_plain, C), F(pd_ctrl_stats, auth_failed, C),
	F(pd_ctrl_stats, auth_name, C),
};

static const struct field pool_fields[] = {
	F(pd_pool_counters, in_use, G), F(pd_pool_counters, high_water, G),
	F(pd_pool_counters, allocs, C), F(pd_pool_counters, frees, C),
	F(pd_pool_counters, waits, C), F(pd_pool_counters, wait_ns, C),
	F(pd_pool_counters, wait_max_ns, G), F(pd_pool_counters, timeouts, C),
	F(pd_pool_counters, cancels, C), F(pd_pool_counters, reclaimed, C),
	F(pd_pool_counters, repairs, C), F(pd_pool_counters, refused, C),
};

static const struct field metrics_fields[] = { /* --metrics-listen */
	F(pd_metrics_stats, scrapes, C), F(pd_metrics_stats, not_found, C),
	F(pd_metrics_stats, bad_requests, C), F(pd_metrics_stats, failed, C),
	F(pd_metrics_stats, timeouts, C), F(pd_metrics_stats, evicted, C),
	F(pd_metrics_stats, aborted, C), F(pd_metrics_stats, accept_errors, C),
	F(pd_metrics_stats, conns, G),
};

static const struct field agents_fields[] = {
	F(pd_agents_stats, pins_reclaimed, C), F(pd_agents_stats, refused_full, C),
	F(pd_agents_stats, pending_evicted, C),
	F(pd_agents_stats, hello_timeouts, C), F(pd_agents_stats, accept_failed, C),
	F(pd_agents_stats, pending, G),
};

#undef F

/* The header's counters (PD_STAT_*), under the names pdctl shows. */
static const struct field hdr_fields[] = {
	{ "agents", PD_STAT_AGENTS, G },
	{ "requests_done", PD_STAT_REQ_DONE, C },
	{ "requests_failed", PD_STAT_REQ_FAILED, C },
	{ "chunks_sent", PD_STAT_CHUNKS_SENT, C },
	{ "chunks_recv", PD_STAT_CHUNKS_RECV, C },
	{ "bytes_sent", PD_STAT_BYTES_SENT, C },
	{ "bytes_recv", PD_STAT_BYTES_RECV, C },
	{ "agents_reclaimed", PD_STAT_AGENTS_RECLAIMED, C },
};

struct pub {
	struct pd_stats *s;
	uint32_t n;
};

static void put_table(struct pub *p, const char *prefix, const struct field *f, size_t nf,
		      const void *base, int atomics)
{
	char name[PD_STATS_NAME_MAX + 1];

	for (size_t i = 0; i < nf; i++) {
		const uint8_t *at = (const uint8_t *)base + f[i].off;
		uint64_t v = atomics ? atomic_load_explicit((const _Atomic uint64_t *)at,
							    memory_order_relaxed) :
				       *(const uint64_t *)at;

		(void)snprintf(name, sizeof(name), "%s%s", prefix, f[i].name);
		pd_stats_set(p->s, p->n++, name, f[i].kind, v);
	}
}

/* The send pools' counters as one: sums, and the longest wait. */
static void sum_send(const struct pd_broker *b, struct pd_pool_counters *out)
{
	memset(out, 0, sizeof(*out));
	for (uint32_t k = 0; k < b->shm.send_parts; k++) {
		const uint8_t *from = (const uint8_t *)&b->shm.send_part[k].shm->stats;

		for (size_t i = 0; i < PD_ARRAY_SIZE(pool_fields); i++) {
			_Atomic uint64_t *to = (_Atomic uint64_t *)((uint8_t *)out + pool_fields[i].off);
			uint64_t v = atomic_load_explicit((const _Atomic uint64_t *)(from +
									 pool_fields[i].off),
							  memory_order_relaxed);
			uint64_t was = atomic_load_explicit(to, memory_order_relaxed);

			v = pool_fields[i].off == offsetof(struct pd_pool_counters, wait_max_ns) ?
			    (v > was ? v : was) : was + v;
			atomic_store_explicit(to, v, memory_order_relaxed);
		}
	}
}

static uint64_t send_lock_resets(const struct pd_broker *b)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < b->shm.send_parts; k++)
		n += b->shm.send_part[k].lock_resets;
	return n;
}

/* The send pools' high-water marks added up (the pools' own, each). */
static uint64_t send_hwm(const struct pd_broker *b)
{
	uint64_t n = 0;

	for (uint32_t k = 0; k < b->shm.send_parts; k++) {
		uint64_t h = atomic_load_explicit(&b->shm.send_part[k].shm->stats.high_water,
						  memory_order_relaxed);

		n += h < b->shm.send_part[k].nslots ? h : b->shm.send_part[k].nslots; /* shm */
	}
	return n;
}

static void put_header(struct pub *p, const struct pd_broker *b)
{
	const _Atomic uint64_t *st = b->shm.seg.hdr->stats;

	for (size_t i = 0; i < PD_ARRAY_SIZE(hdr_fields); i++)
		pd_stats_set(p->s, p->n++, hdr_fields[i].name, hdr_fields[i].kind,
			     atomic_load_explicit(&st[hdr_fields[i].off], memory_order_relaxed));
}

static uint64_t count_waiters(const struct pd_broker *b)
{
	const struct waiter *w;
	uint64_t n = 0;

	LIST_FOREACH(w, &b->waiters, link)
		n++;
	return n;
}

/* Every transport's counters, "<name>.<counter>". */
static void put_xports(struct pub *p, const struct pd_broker *b)
{
	char names[128][PD_STATS_NAME_MAX + 1];
	uint64_t v[128];
	uint32_t n = pd_broker_xport_counters(b, names, v, 128);

	for (uint32_t i = 0; i < n; i++)
		pd_stats_set(p->s, p->n++, names[i], C, v[i]);
}

/* What the broker keeps about its agents: the attach socket, pins, leases,
 * completion queues. */
static void put_agents(struct pub *p, const struct pd_broker *b)
{
	struct pd_agents_stats as;
	uint64_t queued, dropped;

	pd_agents_get_stats(b->agents, &as);
	put_table(p, "agents.", agents_fields, PD_ARRAY_SIZE(agents_fields), &as, 0);
	pd_stats_set(p->s, p->n++, "agents.fenced", C, pd_agents_fenced(b->agents));
	pd_agents_cq_stats(b->agents, &queued, &dropped);
	pd_stats_set(p->s, p->n++, "agents.cq_queued", G, queued);
	pd_stats_set(p->s, p->n++, "agents.cq_dropped", C, dropped);
	pd_stats_set(p->s, p->n++, "pool.send.loans_orphaned", C, b->loans_orphaned);
	pd_stats_set(p->s, p->n++, "pool.send.lock_resets", C, send_lock_resets(b));
	pd_stats_set(p->s, p->n++, "pool.send.descs_scrubbed", C, b->descs_scrubbed);
	pd_stats_set(p->s, p->n++, "pool.send.headers_restored", C, b->headers_restored);
}

static void put_values(struct pub *p, const struct pd_broker *b)
{
	struct pd_rx_stats rs;
	struct pd_tx_stats ts;
	struct pd_ctrl_stats cs;

	put_header(p, b);
	pd_stats_set(p->s, p->n++, "recv_waiters", G, count_waiters(b));
	pd_stats_set(p->s, p->n++, "recv_waits_refused", C, b->recv_waits_refused);
	pd_stats_set(p->s, p->n++, "data.refused_writes", C, pd_stat_get(&b->refused_writes));
	pd_stats_set(p->s, p->n++, "admin.requests", C, b->admin_requests);
	pd_stats_set(p->s, p->n++, "admin.bad", C, b->admin_bad);
	put_agents(p, b);
	if (b->rx) {
		pd_rx_get_stats(b->rx, &rs);
		put_table(p, "rx.", rx_fields, PD_ARRAY_SIZE(rx_fields), &rs, 0);
		put_table(p, "admit.", admit_fields, PD_ARRAY_SIZE(admit_fields),
			  &pd_rx_admit(b->rx)->stats, 0);
	}
	if (b->tx) {
		pd_tx_get_stats(b->tx, &ts);
		put_table(p, "tx.", tx_fields, PD_ARRAY_SIZE(tx_fields), &ts, 0);
	}
	pd_ctrl_stats(b->ctrl, &cs);
	put_table(p, "ctrl.", ctrl_fields, PD_ARRAY_SIZE(ctrl_fields), &cs, 0);
	put_xports(p, b);
	if (b->metrics) { /* --metrics-listen */
		struct pd_metrics_stats ms;

		pd_metrics_get_stats(b->metrics, &ms);
		put_table(p, "metrics.", metrics_fields, PD_ARRAY_SIZE(metrics_fields), &ms, 0);
	}
	if (b->shm.has_send) {
		struct pd_pool_counters sc;

		sum_send(b, &sc);
		put_table(p, "pool.send.", pool_fields, PD_ARRAY_SIZE(pool_fields), &sc, 1);
		pd_stats_set(p->s, p->n++, "pool.send.pools", G, b->shm.send_parts);
	}
	if (b->shm.has_recv)
		put_table(p, "pool.recv.", pool_fields, PD_ARRAY_SIZE(pool_fields),
			  &b->shm.recv.shm->stats, 1);
}

static void put_hist(struct pd_stats *s, uint32_t id, const char *name,
		     const struct pd_stat_hist *h)
{
	struct pd_stat_hist *d = &s->hist[id];

	if (h)
		*d = *h;
	else
		memset(d, 0, sizeof(*d));
	(void)snprintf(d->name, sizeof(d->name), "%s", name);
	if (id >= s->nhist)
		s->nhist = id + 1;
}


static void put_info(struct pd_stats *s, const struct pd_broker *b, uint64_t now)
{
	struct pd_stat_info *i = &s->info;
	const struct pd_admit *a = b->rx ? pd_rx_admit(b->rx) : NULL;
	const struct pd_adm_entry *oldest = a ? pd_admit_oldest(a) : NULL;

	(void)snprintf(i->ctrl, sizeof(i->ctrl), "%s", pd_ctrl_endpoint(b->ctrl));
	(void)strlcpy(i->data, b->data_addr, sizeof(i->data));
	pd_broker_xport_list(b, i->transport, sizeof(i->transport));
	i->start_ns = b->shm.seg.hdr->broker_start_ns;
	i->epoch = b->epoch;
	i->pid = b->shm.seg.hdr->broker_pid;
	i->send_slots = pd_layout_send_slots(&b->shm);
	i->recv_slots = b->shm.has_recv ? b->shm.recv.nslots : 0;
	i->send_used_hwm = (uint32_t)send_hwm(b);
	i->recv_used_hwm = b->shm.has_recv ? (uint32_t)b->shm.recv.shm->stats.high_water : 0;
	i->slot_size = b->cfg.slot_size;
	i->page_size = b->shm.seg.page_size;
	i->reserved = a ? a->outstanding : 0;
	i->granted = a ? a->capacity - a->free : 0;
	i->waiting = a ? a->nwaiting : 0;
	i->oldest_wait_ns = oldest ? oldest->since_ns : 0;
	i->now_mono_ns = now;
	pd_ctrl_keys_describe(b->keys, i->ctrl_auth, sizeof(i->ctrl_auth));
}

static void put_peer(struct pd_stat_peer *d, const struct pd_broker *b, uint32_t id,
		     const struct pd_ctrl_peer_info *pi, uint64_t now)
{
	const struct peer_acct *ac = &b->acct[id];

	memset(d, 0, sizeof(*d));
	if (pi->hello)
		(void)snprintf(d->name, sizeof(d->name), "%.*s", (int)pi->hello->name.len,
			       (const char *)pi->hello->name.p);
	(void)snprintf(d->ctrl, sizeof(d->ctrl), "%s", pi->endpoint ? pi->endpoint : "");
	pd_broker_xport_describe(b, id, d->transport, sizeof(d->transport), d->why, sizeof(d->why));
	d->state = pi->state;
	if (pi->authenticated)
		(void)snprintf(d->auth, sizeof(d->auth), "curve %s", pi->key_id);
	else
		(void)snprintf(d->auth, sizeof(d->auth), "none");
	(void)snprintf(d->error, sizeof(d->error), "%s", pi->refusal ? pi->refusal : "");
	d->lanes = pd_broker_xport_lanes(b, id);
	d->epoch = pi->epoch;
	d->last_seen_ns = pi->last_rx_ns && now > pi->last_rx_ns ?
				  pd_realtime_ns() - (now - pi->last_rx_ns) : 0;
	d->bytes_tx = atomic_load_explicit(&ac->bytes_tx, memory_order_relaxed);
	d->bytes_rx = atomic_load_explicit(&ac->bytes_rx, memory_order_relaxed);
	d->chunks_tx = atomic_load_explicit(&ac->chunks_tx, memory_order_relaxed);
	d->chunks_rx = atomic_load_explicit(&ac->chunks_rx, memory_order_relaxed);
}

uint32_t pd_broker_peers_describe(const struct pd_broker *b, struct pd_stat_peer *out,
			       uint32_t *ids, uint32_t max)
{
	struct pd_ctrl_peer_info pi;
	uint64_t now = pd_now_ns();
	uint32_t n = 0;

	for (uint32_t id = 1; id < MAX_TOKENS && n < max; id++) {
		int rc = pd_ctrl_peer_info(b->ctrl, id, &pi);

		if (rc == -ENOENT)
			break;
		if (rc < 0 || pi.id != id) /* an alias: shown under its canonical id */
			continue;
		if (ids)
			ids[n] = id;
		put_peer(&out[n++], b, id, &pi, now);
	}
	return n;
}

void pd_broker_stats_publish(struct pd_broker *b)
{
	struct pd_stats *s = b->shm.stats;
	struct pub p = { .s = s };
	uint64_t now = pd_now_ns();

	if (!s)
		return;
	pd_stats_write_begin(s);
	put_values(&p, b);
	s->nvalues = p.n;
	put_info(s, b, now);
	s->npeers = pd_broker_peers_describe(b, s->peer, NULL, PD_STATS_MAX_PEERS);
	put_hist(s, PD_HIST_ADMIT_WAIT, "admit_wait", b->rx ? pd_rx_wait_hist(b->rx) : NULL);
	put_hist(s, PD_HIST_TRANSFER, "transfer", b->rx ? pd_rx_xfer_hist(b->rx) : NULL);
	put_hist(s, PD_HIST_REQUEST, "request", b->tx ? pd_tx_req_hist(b->tx) : NULL);
	s->publish_ns = pd_realtime_ns();
	pd_stats_write_end(s);
}
