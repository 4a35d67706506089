/* SPDX-License-Identifier: MIT */
/*
 * pdctl status --json: one object.
 *   {"name", "pid", "epoch", "state", "start_ns", "uptime_s",
 *    "info": {...}, "pools": {"send": {slots, used, free, hwm}, "recv": ...},
 *    "admission": {...}, "agents": N, "peers": [...], "requests": {...},
 *    "moved": {...}, "errors": {...}, "counters": {name: value},
 *    "kinds": {name: "counter"|"gauge"}, "histograms": {...},
 *    "published": bool, "stale_s": S, "warning": "..." (when stale)}
 */
#include "pdctl.h"

static void pool_json(struct pdctl_json *j, const char *key, const struct pdctl_pool *p)
{
	pdctl_json_obj_begin(j, key);
	pdctl_json_bool(j, "present", p->present);
	pdctl_json_u64(j, "slots", p->slots);
	pdctl_json_u64(j, "used", p->used);
	pdctl_json_u64(j, "free", p->free);
	pdctl_json_u64(j, "hwm", p->hwm);
	pdctl_json_obj_end(j);
}

static void info_json(struct pdctl_json *j, const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;

	pdctl_json_obj_begin(j, "info");
	pdctl_json_str(j, "ctrl", i->ctrl);
	pdctl_json_str(j, "data", i->data);
	pdctl_json_str(j, "transport", i->transport);
	pdctl_json_u64(j, "slot_size", i->slot_size);
	pdctl_json_obj_end(j);
}

static void admission_json(struct pdctl_json *j, const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;

	pdctl_json_obj_begin(j, "admission");
	pdctl_json_u64(j, "capacity", s->recv.slots);
	pdctl_json_u64(j, "reserved", i->reserved);
	pdctl_json_u64(j, "granted", i->granted);
	pdctl_json_u64(j, "waiting", i->waiting);
	pdctl_json_f64(j, "oldest_wait_s", pdctl_oldest_wait_s(s));
	pdctl_json_obj_end(j);
}

static void peer_json(struct pdctl_json *j, const struct pdctl_snap *s,
		      const struct pd_stat_peer *p)
{
	pdctl_json_obj_begin(j, NULL);
	pdctl_json_str(j, "name", p->name);
	pdctl_json_str(j, "ctrl", p->ctrl);
	pdctl_json_str(j, "state", pdctl_peer_state_name(p->state));
	pdctl_json_str(j, "transport", p->transport);
	pdctl_json_str(j, "why", p->why);
	pdctl_json_u64(j, "lanes", p->lanes);
	pdctl_json_u64(j, "epoch", p->epoch);
	if (p->last_seen_ns)
		pdctl_json_f64(j, "last_seen_s", s->now_ns > p->last_seen_ns ?
			       (double)(s->now_ns - p->last_seen_ns) / 1e9 : 0.0);
	else
		pdctl_json_null(j, "last_seen_s");
	pdctl_json_u64(j, "bytes_tx", p->bytes_tx);
	pdctl_json_u64(j, "bytes_rx", p->bytes_rx);
	pdctl_json_u64(j, "chunks_tx", p->chunks_tx);
	pdctl_json_u64(j, "chunks_rx", p->chunks_rx);
	pdctl_json_u64(j, "requests", p->requests_live);
	pdctl_json_obj_end(j);
}

static void vals_json(struct pdctl_json *j, const struct pdctl_snap *s, const char *key,
		      int (*filter)(const struct pdctl_val *v))
{
	pdctl_json_obj_begin(j, key);
	for (uint32_t i = 0; i < s->nvals; i++)
		if (!filter || filter(&s->vals[i]))
			pdctl_json_u64(j, s->vals[i].name, s->vals[i].v);
	pdctl_json_obj_end(j);
}

static void kinds_json(struct pdctl_json *j, const struct pdctl_snap *s)
{
	pdctl_json_obj_begin(j, "kinds");
	for (uint32_t i = 0; i < s->nvals; i++)
		pdctl_json_str(j, s->vals[i].name,
			       s->vals[i].kind == PD_STAT_KIND_GAUGE ? "gauge" : "counter");
	pdctl_json_obj_end(j);
}

static void hist_json(struct pdctl_json *j, const struct pd_stat_hist *h)
{
	pdctl_json_obj_begin(j, h->name);
	pdctl_json_u64(j, "count", h->count);
	pdctl_json_f64(j, "sum_s", (double)h->sum_ns / 1e9);
	pdctl_json_f64(j, "p50_s", (double)pd_stats_hist_quantile_ns(h, 0.5) / 1e9);
	pdctl_json_f64(j, "p90_s", (double)pd_stats_hist_quantile_ns(h, 0.9) / 1e9);
	pdctl_json_f64(j, "p99_s", (double)pd_stats_hist_quantile_ns(h, 0.99) / 1e9);
	pdctl_json_obj_end(j);
}

static void head_json(struct pdctl_json *j, const struct pdctl_snap *s)
{
	pdctl_json_str(j, "name", s->name);
	pdctl_json_i64(j, "pid", s->pid);
	pdctl_json_u64(j, "epoch", s->epoch);
	pdctl_json_str(j, "state", pdctl_state_name(s->state));
	pdctl_json_u64(j, "start_ns", s->start_ns);
	pdctl_json_f64(j, "uptime_s", s->now_ns > s->start_ns ?
		       (double)(s->now_ns - s->start_ns) / 1e9 : 0.0);
}

void pdctl_status_json(const struct pdctl_snap *s, int pretty)
{
	struct pdctl_json j;
	char warn[256];

	pdctl_json_init(&j, stdout, pretty);
	pdctl_json_obj_begin(&j, NULL);
	head_json(&j, s);
	info_json(&j, s);
	pdctl_json_obj_begin(&j, "pools");
	pool_json(&j, "send", &s->send);
	pool_json(&j, "recv", &s->recv);
	pdctl_json_obj_end(&j);
	admission_json(&j, s);
	pdctl_json_u64(&j, "agents", s->agents);
	pdctl_json_arr_begin(&j, "peers");
	for (uint32_t i = 0; i < s->st->npeers; i++)
		peer_json(&j, s, &s->st->peer[i]);
	pdctl_json_arr_end(&j);
	vals_json(&j, s, "requests", pdctl_val_is_request);
	vals_json(&j, s, "moved", pdctl_val_is_moved);
	vals_json(&j, s, "errors", pdctl_val_is_error);
	vals_json(&j, s, "counters", NULL);
	kinds_json(&j, s);
	pdctl_json_obj_begin(&j, "histograms");
	for (uint32_t i = 0; i < s->st->nhist; i++)
		if (s->st->hist[i].name[0])
			hist_json(&j, &s->st->hist[i]);
	pdctl_json_obj_end(&j);
	pdctl_json_bool(&j, "published", s->published);
	pdctl_json_f64(&j, "stale_s", (double)s->stale_ns / 1e9);
	if (pdctl_stale_warning(s, warn, sizeof(warn)))
		pdctl_json_str(&j, "warning", warn);
	pdctl_json_obj_end(&j);
	pdctl_json_end(&j);
}
