/* SPDX-License-Identifier: MIT */
/*
 * pdctl status --json: one object.
 *   {"name", "pid", "epoch", "state", "start_ns", "uptime_s",
 *    "info": {...}, "pools": {"send": {slots, used, free, hwm, pools}, "recv": ...},
 *    "admission": {...}, "agents": N, "max_agents": N, "peers": [...],
 *    "requests": {...},
 *    "moved": {...}, "errors": {...}, "counters": {name: value},
 *    "kinds": {name: "counter"|"gauge"}, "histograms": {...},
 *    "published": bool, "stale_s": S, "warning": "..." (when stale)}
 */
#include "pdctl.h"

static json_t *pool_json(const struct pdctl_pool *p)
{
	return json_pack("{s:b, s:I, s:I, s:I, s:I, s:I}", "present", p->present,
			 "slots", (json_int_t)p->slots, "used", (json_int_t)p->used,
			 "free", (json_int_t)p->free, "hwm", (json_int_t)p->hwm,
			 "pools", (json_int_t)p->pools);
}

static json_t *info_json(const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;

	return json_pack("{s:o, s:o, s:o, s:o, s:o, s:o}", "ctrl", pdctl_json_str(i->ctrl),
			 "data", pdctl_json_str(i->data), "transport", pdctl_json_str(i->transport),
			 "slot_size", pdctl_json_u64(i->slot_size),
			 "page_size", pdctl_json_u64(i->page_size),
			 "control_plane", pdctl_json_str(i->ctrl_auth[0] ? i->ctrl_auth :
								    "unauthenticated"));
}

static json_t *admission_json(const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;

	return json_pack("{s:I, s:o, s:o, s:o, s:o}", "capacity", (json_int_t)s->recv.slots,
			 "reserved", pdctl_json_u64(i->reserved),
			 "granted", pdctl_json_u64(i->granted), "waiting", pdctl_json_u64(i->waiting),
			 "oldest_wait_s", pdctl_json_f64(pdctl_oldest_wait_s(s)));
}

/* Seconds since ns (0: never, null). */
static json_t *ago_json(const struct pdctl_snap *s, uint64_t ns)
{
	if (!ns)
		return json_null();
	return pdctl_json_f64(s->now_ns > ns ? (double)(s->now_ns - ns) / 1e9 : 0.0);
}

static json_t *peer_json(const struct pdctl_snap *s, const struct pd_stat_peer *p)
{
	return json_pack("{s:o, s:o, s:s, s:o, s:o, s:o, s:o, s:o,"
			 " s:o, s:o, s:o, s:o, s:o, s:o, s:o}",
			 "name", pdctl_json_str(p->name), "ctrl", pdctl_json_str(p->ctrl),
			 "state", pdctl_peer_state_name(p->state),
			 "transport", pdctl_json_str(p->transport), "why", pdctl_json_str(p->why),
			 "lanes", pdctl_json_u64(p->lanes), "epoch", pdctl_json_u64(p->epoch),
			 "last_seen_s", ago_json(s, p->last_seen_ns),
			 "bytes_tx", pdctl_json_u64(p->bytes_tx),
			 "bytes_rx", pdctl_json_u64(p->bytes_rx),
			 "chunks_tx", pdctl_json_u64(p->chunks_tx),
			 "chunks_rx", pdctl_json_u64(p->chunks_rx),
			 "requests", pdctl_json_u64(p->requests_live),
			 "auth", pdctl_json_str(p->auth), "error", pdctl_json_str(p->error));
}

static json_t *peers_json(const struct pdctl_snap *s)
{
	json_t *arr = json_array();

	for (uint32_t i = 0; arr && i < s->st->npeers; i++) {
		if (json_array_append_new(arr, peer_json(s, &s->st->peer[i])) < 0) {
			json_decref(arr);
			arr = NULL;
		}
	}
	return arr;
}

/* An object of the values filter picks (NULL: all); kinds: their kinds instead. */
static json_t *vals_json(const struct pdctl_snap *s, int (*filter)(const struct pd_expo_val *v),
			 int kinds)
{
	json_t *obj = json_object();

	for (uint32_t i = 0; obj && i < s->nvals; i++) {
		const struct pd_expo_val *v = &s->vals[i];
		const char *kind = v->kind == PD_STAT_KIND_GAUGE ? "gauge" : "counter";

		if (filter && !filter(v))
			continue;
		if (pdctl_json_set(obj, v->name, kinds ? json_string(kind) :
				   pdctl_json_u64(v->v)) < 0) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

static json_t *hist_json(const struct pd_stat_hist *h)
{
	return json_pack("{s:o, s:o, s:o, s:o, s:o}", "count", pdctl_json_u64(h->count),
			 "sum_s", pdctl_json_f64((double)h->sum_ns / 1e9),
			 "p50_s", pdctl_json_f64((double)pd_stats_hist_quantile_ns(h, 0.5) / 1e9),
			 "p90_s", pdctl_json_f64((double)pd_stats_hist_quantile_ns(h, 0.9) / 1e9),
			 "p99_s", pdctl_json_f64((double)pd_stats_hist_quantile_ns(h, 0.99) / 1e9));
}

static json_t *hists_json(const struct pdctl_snap *s)
{
	json_t *obj = json_object();

	for (uint32_t i = 0; obj && i < s->st->nhist; i++) {
		const struct pd_stat_hist *h = &s->st->hist[i];

		if (h->name[0] && pdctl_json_set(obj, h->name, hist_json(h)) < 0) {
			json_decref(obj);
			obj = NULL;
		}
	}
	return obj;
}

int pdctl_status_json(const struct pdctl_snap *s, int pretty)
{
	char warn[256];
	const char *w = pdctl_stale_warning(s, warn, sizeof(warn));
	double up = s->now_ns > s->start_ns ? (double)(s->now_ns - s->start_ns) / 1e9 : 0.0;

	return pdctl_json_print(json_pack(
		"{s:o, s:I, s:o, s:s, s:o, s:o, s:o, s:{s:o, s:o}, s:o, s:I, s:I, s:o,"
		" s:o, s:o, s:o, s:o, s:o, s:o, s:b, s:o, s:o*}",
		"name", pdctl_json_str(s->name), "pid", (json_int_t)s->pid,
		"epoch", pdctl_json_u64(s->epoch), "state", pd_segment_state_name(s->state),
		"start_ns", pdctl_json_u64(s->start_ns), "uptime_s", pdctl_json_f64(up),
		"info", info_json(s),
		"pools", "send", pool_json(&s->send), "recv", pool_json(&s->recv),
		"admission", admission_json(s), "agents", (json_int_t)s->agents,
		"max_agents", (json_int_t)s->max_agents,
		"peers", peers_json(s),
		"requests", vals_json(s, pdctl_val_is_request, 0),
		"moved", vals_json(s, pdctl_val_is_moved, 0),
		"errors", vals_json(s, pdctl_val_is_error, 0),
		"counters", vals_json(s, NULL, 0), "kinds", vals_json(s, NULL, 1),
		"histograms", hists_json(s), "published", s->published,
		"stale_s", pdctl_json_f64((double)s->stale_ns / 1e9),
		"warning", w ? pdctl_json_str(w) : NULL), pretty);
}
