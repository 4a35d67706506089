/* SPDX-License-Identifier: MIT */
/*
 * pdctl metrics: the segment (read-only) in the Prometheus text format.
 * Every value of the statistics region becomes pdkv_<name, '.' -> '_'>
 * (counter or gauge, as the region says); pools, admission, peers and the
 * broker itself get their own families; histograms become
 * pdkv_<name>_seconds with cumulative buckets (le in seconds), _sum, _count.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pdctl.h"

#define PEER_LABELS 2

static void broker_families(struct pdctl_expo *x, const struct pdctl_snap *s)
{
	char pid[16], epoch[24];
	const struct pdctl_label l[] = { { "pid", pid }, { "epoch", epoch },
					 { "state", pdctl_state_name(s->state) } };

	(void)snprintf(pid, sizeof(pid), "%d", s->pid);
	(void)snprintf(epoch, sizeof(epoch), "%llu", (unsigned long long)s->epoch);
	pdctl_expo_family(x, "pdkv_broker_info", "gauge", "The broker's identity (always 1).");
	pdctl_expo_u64(x, l, PD_ARRAY_SIZE(l), 1);
	pdctl_expo_family(x, "pdkv_broker_start_time_seconds", "gauge",
			  "When the broker started, in seconds since the Unix epoch.");
	pdctl_expo_ns(x, NULL, NULL, 0, s->start_ns);
	pdctl_expo_family(x, "pdkv_stats_age_seconds", "gauge",
			  "Seconds since the broker last published its statistics (or since "
			  "its start, if never).");
	pdctl_expo_ns(x, NULL, NULL, 0, s->stale_ns);
	pdctl_expo_family(x, "pdkv_agents_attached", "gauge", "Agents attached now.");
	pdctl_expo_u64(x, NULL, 0, s->agents);
}

static void pool_samples(struct pdctl_expo *x, const char *pool, const struct pdctl_pool *p,
			 int what)
{
	struct pdctl_label l[2] = { { "pool", pool }, { "state", "free" } };

	if (!p->present)
		return;
	if (what == 0) {
		pdctl_expo_u64(x, l, 2, p->free);
		l[1].v = "used";
		pdctl_expo_u64(x, l, 2, p->used);
	} else {
		pdctl_expo_u64(x, l, 1, what == 1 ? p->slots : p->hwm);
	}
}

static void pool_families(struct pdctl_expo *x, const struct pdctl_snap *s)
{
	static const char *const name[] = { "pdkv_pool_slots", "pdkv_pool_capacity_slots",
					    "pdkv_pool_high_water_slots" };
	static const char *const help[] = { "Slots of a pool by state.", "Slots in a pool.",
					    "Most slots of a pool ever in use at once." };

	for (int what = 0; what < 3; what++) {
		pdctl_expo_family(x, name[what], "gauge", help[what]);
		pool_samples(x, "send", &s->send, what);
		pool_samples(x, "recv", &s->recv, what);
	}
}

static void admission_families(struct pdctl_expo *x, const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;
	double w = pdctl_oldest_wait_s(s);

	if (!s->recv.present)
		return;
	pdctl_expo_family(x, "pdkv_admission_reserved_slots", "gauge",
			  "Receive slots reserved by admitted requests.");
	pdctl_expo_u64(x, NULL, 0, i->reserved);
	pdctl_expo_family(x, "pdkv_admission_granted_slots", "gauge",
			  "Reserved receive slots already granted to chunks.");
	pdctl_expo_u64(x, NULL, 0, i->granted);
	pdctl_expo_family(x, "pdkv_admission_waiting_requests", "gauge",
			  "Requests waiting for admission.");
	pdctl_expo_u64(x, NULL, 0, i->waiting);
	pdctl_expo_family(x, "pdkv_admission_oldest_wait_seconds", "gauge",
			  "How long the oldest waiting request has waited (0: none).");
	pdctl_expo_ns(x, NULL, NULL, 0, (uint64_t)(w * 1e9));
}

static void peer_labels(const struct pd_stat_peer *p, struct pdctl_label *l)
{
	l[0] = (struct pdctl_label){ "peer", p->name };
	l[1] = (struct pdctl_label){ "ctrl", p->ctrl };
}

/* what: 0 up, 1 lanes, 2 bytes, 3 chunks. */
static void peer_family(struct pdctl_expo *x, const struct pdctl_snap *s, int what)
{
	static const char *const name[] = { "pdkv_peer_up", "pdkv_peer_lanes", "pdkv_peer_bytes",
					    "pdkv_peer_chunks" };
	static const char *const help[] = {
		"1 when the peer broker is up.", "Data connections up to the peer.",
		"Payload bytes exchanged with the peer.", "Chunks exchanged with the peer." };
	struct pdctl_label l[PEER_LABELS + 1];

	pdctl_expo_family(x, name[what], what < 2 ? "gauge" : "counter", help[what]);
	for (uint32_t i = 0; i < s->st->npeers; i++) {
		const struct pd_stat_peer *p = &s->st->peer[i];

		peer_labels(p, l);
		if (what < 2) {
			pdctl_expo_u64(x, l, PEER_LABELS, what == 0 ? p->state == PD_PEER_UP :
								       p->lanes);
			continue;
		}
		l[PEER_LABELS] = (struct pdctl_label){ "dir", "tx" };
		pdctl_expo_u64(x, l, PEER_LABELS + 1, what == 2 ? p->bytes_tx : p->chunks_tx);
		l[PEER_LABELS].v = "rx";
		pdctl_expo_u64(x, l, PEER_LABELS + 1, what == 2 ? p->bytes_rx : p->chunks_rx);
	}
}

static void value_families(struct pdctl_expo *x, const struct pdctl_snap *s)
{
	char name[128], help[128];

	for (uint32_t i = 0; i < s->nvals; i++) {
		const struct pdctl_val *v = &s->vals[i];
		int gauge = v->kind == PD_STAT_KIND_GAUGE;

		(void)snprintf(name, sizeof(name), "pdkv_%s", v->name);
		(void)snprintf(help, sizeof(help), "Broker %s %s.", gauge ? "gauge" : "counter",
			       v->name);
		pdctl_expo_family(x, name, gauge ? "gauge" : "counter", help);
		pdctl_expo_u64(x, NULL, 0, v->v);
	}
}

static void hist_family(struct pdctl_expo *x, const struct pd_stat_hist *h)
{
	char name[128], help[128], le[32], cnt[24];
	struct pdctl_label l = { "le", le };
	uint64_t cum = 0;

	(void)snprintf(name, sizeof(name), "pdkv_%s_seconds", h->name);
	(void)snprintf(help, sizeof(help), "Latency of %s, in seconds.", h->name);
	pdctl_expo_family(x, name, "histogram", help);
	for (uint32_t b = 0; b < PD_STATS_BUCKETS; b++) {
		uint64_t us = pd_stats_bucket_le_us(b);

		cum += h->bucket[b];
		if (us == UINT64_MAX)
			(void)snprintf(le, sizeof(le), "+Inf");
		else
			pdctl_fmt_decimal(le, sizeof(le), us, 6);
		(void)snprintf(cnt, sizeof(cnt), "%llu", (unsigned long long)cum);
		pdctl_expo_sample(x, "_bucket", &l, 1, cnt);
	}
	pdctl_expo_ns(x, "_sum", NULL, 0, h->sum_ns);
	/* _count equals the +Inf bucket, as the format requires. */
	(void)snprintf(cnt, sizeof(cnt), "%llu", (unsigned long long)cum);
	pdctl_expo_sample(x, "_count", NULL, 0, cnt);
}

static int print_metrics(const struct pdctl_opts *o, const struct pdctl_snap *s)
{
	struct pdctl_expo *x = calloc(1, sizeof(*x));
	int rc;

	if (!x) {
		pdctl_err("out of memory");
		return PDCTL_EXIT_FAIL;
	}
	pdctl_expo_init(x, o->json, s->name);
	broker_families(x, s);
	pool_families(x, s);
	admission_families(x, s);
	for (int what = 0; s->st->npeers && what < 4; what++)
		peer_family(x, s, what);
	value_families(x, s);
	for (uint32_t i = 0; i < s->st->nhist; i++)
		if (s->st->hist[i].name[0])
			hist_family(x, &s->st->hist[i]);
	rc = pdctl_expo_end(x);
	free(x);
	return rc < 0 ? PDCTL_EXIT_FAIL : PDCTL_EXIT_OK;
}

int pdctl_cmd_metrics(const struct pdctl_opts *o)
{
	struct pdctl_snap s;
	int rc = pdctl_snap_take(o, &s);

	if (rc != PDCTL_EXIT_OK)
		return rc;
	rc = print_metrics(o, &s);
	pdctl_snap_free(&s);
	return pdctl_flush(rc);
}
