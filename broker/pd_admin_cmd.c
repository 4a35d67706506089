/* SPDX-License-Identifier: MIT */
/* The admin socket's commands (shm/pd_admin_proto.h), run on the control thread. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_admin.h"
#include "pd_admin_proto.h"
#include "pd_attach_proto.h"
#include "pd_broker_int.h"
#include "pd_time.h"

#define PD_STR_(x) #x
#define PD_STR(x)  PD_STR_(x)

struct args {
	const char *cmd;
	uint32_t cmd_len;
	const char *state;             /* NULL: none given */
	uint32_t state_len;
	const char *req_id;
	uint32_t req_id_len;
};

/* ---- packing ------------------------------------------------------------------------ */

static void pack_str(msgpack_packer *pk, const char *s, size_t len)
{
	(void)msgpack_pack_str(pk, len);
	(void)msgpack_pack_str_body(pk, s, len);
}

static void kv_str(msgpack_packer *pk, const char *k, const char *v, size_t vlen)
{
	pack_str(pk, k, strlen(k));
	pack_str(pk, v, vlen);
}

static void kv_u64(msgpack_packer *pk, const char *k, uint64_t v)
{
	pack_str(pk, k, strlen(k));
	(void)msgpack_pack_uint64(pk, v);
}

static void kv_i64(msgpack_packer *pk, const char *k, int64_t v)
{
	pack_str(pk, k, strlen(k));
	(void)msgpack_pack_int64(pk, v);
}

static void answer_error(msgpack_packer *pk, const char *msg)
{
	(void)msgpack_pack_map(pk, 2);
	pack_str(pk, "ok", 2);
	(void)msgpack_pack_false(pk);
	kv_str(pk, "error", msg, strlen(msg));
}

static void answer_rows(msgpack_packer *pk, uint32_t n)
{
	(void)msgpack_pack_map(pk, 2);
	pack_str(pk, "ok", 2);
	(void)msgpack_pack_true(pk);
	pack_str(pk, "rows", 4);
	(void)msgpack_pack_array(pk, n);
}

static uint64_t age_ms(uint64_t now, uint64_t since)
{
	return since && now > since ? (now - since) / PD_NS_PER_MS : 0;
}

/* ---- agents ------------------------------------------------------------------------- */

static const char *roles_name(uint32_t roles)
{
	return roles == PD_ROLE_ALL  ? "send+recv" :
	       roles & PD_ROLE_SEND ? "send" :
	       roles & PD_ROLE_RECV ? "recv" : "none";
}

static void cmd_agents(struct pd_broker *b, msgpack_packer *pk)
{
	const struct pd_agent_table *t = b->shm.agents;
	uint64_t now = pd_realtime_ns();
	uint32_t n = 0;

	for (uint32_t i = 0; i < b->shm.max_agents; i++)
		n += atomic_load(&t->slot[i].state) == PD_AGENT_ATTACHED;
	answer_rows(pk, n);
	for (uint32_t i = 0; i < b->shm.max_agents; i++) {
		const struct pd_agent_slot *s = &t->slot[i];
		const char *roles = roles_name(s->roles);

		if (atomic_load(&s->state) != PD_AGENT_ATTACHED)
			continue;
		(void)msgpack_pack_map(pk, 9);
		kv_u64(pk, "id", i);
		kv_i64(pk, "pid", s->pid);
		kv_str(pk, "roles", roles, strlen(roles));
		/* the send pool it loans from (--send-pools), -1 for a receiver */
		kv_i64(pk, "send_pool", s->roles & PD_ROLE_SEND ? (int64_t)s->send_part : -1);
		kv_u64(pk, "tp_rank", s->tp_rank);
		kv_u64(pk, "age_s", now > s->attached_ns ? (now - s->attached_ns) / PD_NS_PER_S : 0);
		kv_u64(pk, "submitted", atomic_load(&s->submitted));
		kv_u64(pk, "completed", atomic_load(&s->completed));
		kv_u64(pk, "bad", atomic_load(&s->bad));
	}
}

/* ---- requests ----------------------------------------------------------------------- */

struct req_row {
	uint8_t id[PD_REQ_ID_MAX];
	uint32_t id_len;
	const char *side, *state;
	uint32_t peer, chunks, done;
	uint64_t since_ns;
};

struct req_rows {
	struct req_row *row;
	uint32_t n, cap;
	const struct args *filter;
	int oom;
};

static void row_add(struct req_rows *r, const struct req_row *row)
{
	const struct args *f = r->filter;

	if (f->state && (strlen(row->state) != f->state_len ||
			 memcmp(row->state, f->state, f->state_len) != 0))
		return;
	if (r->n == r->cap) {
		uint32_t cap = r->cap ? 2 * r->cap : 64;
		struct req_row *t = cap <= PD_ADMIN_MAX_ROWS ?
					    reallocarray(r->row, cap, sizeof(*t)) : NULL;

		if (!t) {
			r->oom = 1;
			return;
		}
		r->row = t;
		r->cap = cap;
	}
	r->row[r->n++] = *row;
}

static void on_tx(void *ctx, const struct pd_tx_info *i)
{
	static const char *const st[] = { [PD_TX_INFO_ALLOCATING] = "allocating",
					   [PD_TX_INFO_WRITING] = "writing",
					   [PD_TX_INFO_IDLE] = "admitted",
					   [PD_TX_INFO_DRAINING] = "draining",
					   [PD_TX_INFO_DECLARED] = "declared" };
	struct req_row row = { .side = "send", .peer = i->peer, .chunks = i->total,
			       .done = i->completed, .since_ns = i->start_ns,
			       .id_len = i->req_id_len };

	row.state = i->state < PD_ARRAY_SIZE(st) && st[i->state] ? st[i->state] : "?";
	memcpy(row.id, i->req_id, i->req_id_len);
	row_add(ctx, &row);
}

static void on_rx(void *ctx, const struct pd_rx_info *i)
{
	struct req_row row = { .side = "recv", .peer = i->peer, .chunks = i->need,
			       .done = i->committed, .since_ns = i->since_ns,
			       .id_len = i->req_id_len };

	row.state = i->state == PD_RX_WAITING ? "waiting" :
		    i->state == PD_RX_READY   ? "ready" :
						"admitted";
	memcpy(row.id, i->req_id, i->req_id_len);
	row_add(ctx, &row);
}

static int by_age(const void *x, const void *y)
{
	const struct req_row *a = x, *b = y;

	return a->since_ns < b->since_ns ? -1 : a->since_ns > b->since_ns;
}

static void peer_name(struct pd_broker *b, uint32_t peer, char *buf, size_t len)
{
	struct pd_ctrl_peer_info pi;

	if (peer == UINT32_MAX || pd_ctrl_peer_info(b->ctrl, peer, &pi) < 0)
		(void)snprintf(buf, len, "-");
	else if (pi.hello)
		(void)snprintf(buf, len, "%.*s", (int)pi.hello->name.len,
			       (const char *)pi.hello->name.p);
	else
		(void)snprintf(buf, len, "%s", pi.endpoint);
}

static void cmd_requests(struct pd_broker *b, const struct args *a, msgpack_packer *pk)
{
	struct req_rows r = { .filter = a };
	uint64_t now = pd_now_ns();
	char peer[128];

	if (b->tx)
		pd_tx_foreach(b->tx, on_tx, &r);
	if (b->rx)
		pd_rx_foreach(b->rx, on_rx, &r);
	if (r.oom) {
		answer_error(pk, "out of memory listing requests");
		free(r.row);
		return;
	}
	if (r.n > 1)
		qsort(r.row, r.n, sizeof(*r.row), by_age);
	answer_rows(pk, r.n);
	for (uint32_t i = 0; i < r.n; i++) {
		const struct req_row *w = &r.row[i];

		peer_name(b, w->peer, peer, sizeof(peer));
		(void)msgpack_pack_map(pk, 7);
		kv_str(pk, "req_id", (const char *)w->id, w->id_len);
		kv_str(pk, "side", w->side, strlen(w->side));
		kv_str(pk, "state", w->state, strlen(w->state));
		kv_str(pk, "peer", peer, strlen(peer));
		kv_u64(pk, "chunks", w->chunks);
		kv_u64(pk, "done", w->done);
		kv_u64(pk, "age_ms", age_ms(now, w->since_ns));
	}
	free(r.row);
}

/* ---- peers -------------------------------------------------------------------------- */

static const char *peer_state(uint32_t s)
{
	return s == PD_PEER_UP ? "up" : s == PD_PEER_DOWN ? "down" : "new";
}

static void pack_peer(msgpack_packer *pk, const struct pd_stat_peer *p, uint64_t now_rt,
		      uint64_t live)
{
	(void)msgpack_pack_map(pk, 11);
	kv_str(pk, "name", p->name, strlen(p->name));
	kv_str(pk, "ctrl", p->ctrl, strlen(p->ctrl));
	kv_str(pk, "state", peer_state(p->state), strlen(peer_state(p->state)));
	kv_str(pk, "transport", p->transport, strlen(p->transport));
	kv_str(pk, "why", p->why, strlen(p->why));
	kv_u64(pk, "epoch", p->epoch);
	kv_u64(pk, "lanes", p->lanes);
	kv_u64(pk, "last_seen_ms", p->last_seen_ns ? age_ms(now_rt, p->last_seen_ns) : 0);
	kv_u64(pk, "requests", live);
	kv_str(pk, "auth", p->auth, strlen(p->auth));
	kv_str(pk, "error", p->error, strlen(p->error));
}

static void count_tx(void *ctx, const struct pd_tx_info *i)
{
	uint64_t *live = ctx;

	if (i->peer < MAX_TOKENS)
		live[i->peer]++;
}

static void cmd_peers(struct pd_broker *b, msgpack_packer *pk)
{
	struct pd_stat_peer *p = calloc(PD_STATS_MAX_PEERS, sizeof(*p));
	uint64_t *live = calloc(MAX_TOKENS, sizeof(*live));
	uint32_t ids[PD_STATS_MAX_PEERS];
	uint32_t n;

	if (!p || !live) {
		answer_error(pk, "out of memory listing peers");
		free(p);
		free(live);
		return;
	}
	if (b->tx)
		pd_tx_foreach(b->tx, count_tx, live);
	n = pd_broker_peers_describe(b, p, ids, PD_STATS_MAX_PEERS);
	answer_rows(pk, n);
	for (uint32_t i = 0; i < n; i++)
		pack_peer(pk, &p[i], pd_realtime_ns(), live[ids[i]]);
	free(p);
	free(live);
}

/* ---- cancel ------------------------------------------------------------------------- */

static void cmd_cancel(struct pd_broker *b, const struct args *a, msgpack_packer *pk)
{
	const uint8_t *id = (const uint8_t *)a->req_id;
	uint64_t now = pd_now_ns();
	int n = 0;

	if (!a->req_id || a->req_id_len == 0 || a->req_id_len > PD_REQ_ID_MAX) {
		answer_error(pk, "cancel needs a req_id of 1.." PD_STR(PD_REQ_ID_MAX) " bytes");
		return;
	}
	pd_broker_send_cancel(b, pd_req_tag(id, a->req_id_len));
	if (b->tx)
		n += pd_tx_cancel(b->tx, id, a->req_id_len, PD_TX_ANY_RANK, now) > 0;
	if (b->rx)
		n += pd_rx_cancel(b->rx, id, a->req_id_len, now) > 0;
	pd_broker_fail_unreachable(b);
	if (n == 0) {
		answer_error(pk, "no live request with that req_id");
		return;
	}
	(void)msgpack_pack_map(pk, 2);
	pack_str(pk, "ok", 2);
	(void)msgpack_pack_true(pk);
	kv_u64(pk, "cancelled", (uint64_t)n);
}

/* ---- dispatch ----------------------------------------------------------------------- */

static int is(const msgpack_object *o, const char *s)
{
	return o->type == MSGPACK_OBJECT_STR && o->via.str.size == strlen(s) &&
	       memcmp(o->via.str.ptr, s, o->via.str.size) == 0;
}

static void get_str(const msgpack_object *v, const char **p, uint32_t *len)
{
	if (v->type != MSGPACK_OBJECT_STR)
		return;
	*p = v->via.str.ptr;
	*len = v->via.str.size;
}

static int parse(const msgpack_object *o, struct args *a)
{
	if (o->type != MSGPACK_OBJECT_MAP)
		return -EINVAL;
	for (uint32_t i = 0; i < o->via.map.size; i++) {
		const msgpack_object_kv *kv = &o->via.map.ptr[i];

		if (is(&kv->key, "cmd"))
			get_str(&kv->val, &a->cmd, &a->cmd_len);
		else if (is(&kv->key, "state"))
			get_str(&kv->val, &a->state, &a->state_len);
		else if (is(&kv->key, "req_id"))
			get_str(&kv->val, &a->req_id, &a->req_id_len);
	}
	return a->cmd ? 0 : -EINVAL;
}

static int cmd_is(const struct args *a, const char *s)
{
	return a->cmd_len == strlen(s) && memcmp(a->cmd, s, a->cmd_len) == 0;
}

int pd_admin_run(struct pd_broker *b, const uint8_t *req, size_t len, msgpack_sbuffer *ans)
{
	msgpack_packer pk;
	msgpack_unpacked u;
	struct args a = { 0 };
	size_t off = 0;

	msgpack_packer_init(&pk, ans, msgpack_sbuffer_write);
	msgpack_unpacked_init(&u);
	if (msgpack_unpack_next(&u, (const char *)req, len, &off) != MSGPACK_UNPACK_SUCCESS ||
	    parse(&u.data, &a) < 0) {
		b->admin_bad++;
		answer_error(&pk, "a request is a map with a \"cmd\" string");
	} else if (cmd_is(&a, "agents")) {
		cmd_agents(b, &pk);
	} else if (cmd_is(&a, "requests")) {
		cmd_requests(b, &a, &pk);
	} else if (cmd_is(&a, "peers")) {
		cmd_peers(b, &pk);
	} else if (cmd_is(&a, "cancel")) {
		cmd_cancel(b, &a, &pk);
	} else {
		b->admin_bad++;
		answer_error(&pk, "unknown cmd (agents, requests, peers, cancel)");
	}
	msgpack_unpacked_destroy(&u);
	return ans->size > PD_ADMIN_ANS_MAX + 4 ? -EMSGSIZE : 0;
}
