/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: the data transports, through the interface only (pd_xport.h).
 *
 * Start: every transport of --transport is created (tcp always: it is the
 * fallback); one that cannot be set up says why, is not offered, and its
 * reason becomes every sender's "fallback: <name>: <why>", or, in
 * --require, a refusal to start. PDKV_XPORT_FAULT (tests) wraps each one
 * in the fault-injecting transport.
 *
 * Sender (a broker with send slots), at each peer's Hello: the first
 * transport of its own --transport order that the peer offers and that
 * connects, else tcp as the fallback, else (--require) none: the peer's
 * batches fail with -EPROTONOSUPPORT. The choice and its reason are kept
 * per peer for pdctl, and logged when they change.
 *
 * Receiver (a broker with recv slots): offers every transport set up, in
 * --transport order, tcp last when not named. Writes of an "unseen"
 * transport (shm, rdma) land without our data threads: pd_broker_recv.c
 * vets their PutDones.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include <bsd/string.h>

#include "pd_broker_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define FAULT_ENV "PDKV_XPORT_FAULT"

/*
 * This boot's id: the same for every process and container of one boot of
 * one kernel, and for no other. Equal ids are what makes shm possible;
 * the connect (the segment must be visible in our /dev/shm, and check
 * out) proves the rest. Without it, the host name (a wrong "other host"
 * only costs the shm transport).
 */
#define HOST_ID_PATH "/proc/sys/kernel/random/boot_id"

static const char *xname(uint32_t id)
{
	const struct pd_xport_ops *o = pd_xport_ops_of(id);

	return o ? o->name : "none";
}

/* ---- setup --------------------------------------------------------------------------- */

static void drain(void *ctx, uint32_t events)
{
	struct xdrain *d = ctx;
	struct pd_cpl c[64];
	int n;

	(void)events;
	while ((n = d->x->ops->poll(d->x, c, 64)) > 0)
		pd_broker_cpls_handle(d->b, c, n);
}

static struct pd_xport_env env_of(struct pd_broker *b)
{
	return (struct pd_xport_env){ .shm = &b->shm, .name = b->cfg.name, .data = b->cfg.data,
				      .rdma_dev = b->cfg.rdma_dev,
				      .threads = b->cfg.data_threads, .rdma_qps = b->cfg.rdma_qps,
				      .queue_depth = b->cfg.send_slots,
				      .max_frame = b->cfg.slot_size, .up = &pd_broker_up_ops,
				      .ctx = b };
}

/* A refusal to start: the reason, without the error's own text (the
 * caller adds it). */
static int refuse_start(struct pd_broker *b, uint32_t id, int rc, char *err, size_t errlen)
{
	const char *w = b->xwhy[id], *e = pd_strerror(rc);
	size_t n = strlen(w), en = strlen(e);

	if (n > en + 2 && !strcmp(w + n - en, e) && w[n - en - 2] == ':')
		n -= en + 2;
	if (id == PD_XPORT_TCP)
		pd_err_set(err, errlen, "%.*s", (int)n, w);
	else
		pd_err_set(err, errlen, "--require %s: %s cannot be set up: %.*s", xname(id),
			   id == PD_XPORT_RDMA ? "RDMA" : xname(id), (int)n, w);
	return rc;
}

/* Wrapped in the fault-injecting transport when the tests ask for it. */
static int wrap_faults(struct pd_xport **x, char *why, size_t wlen)
{
	const char *spec = getenv(FAULT_ENV);
	struct pd_xport *w;
	int rc;

	if (!spec || !spec[0])
		return 0;
	rc = pd_xport_fault_wrap(*x, spec, &w);
	if (rc < 0) {
		(void)snprintf(why, wlen, "%s=%s: not a fault spec", FAULT_ENV, spec);
		return rc;
	}
	PD_LOG(WARN, ctl, "%s: faults injected by %s=%s", w->ops->name, FAULT_ENV, spec);
	*x = w;
	return 0;
}

static int make_one(struct pd_broker *b, uint32_t id, char *err, size_t errlen)
{
	const struct pd_xport_ops *ops = pd_xport_ops_of(id);
	struct pd_xport_env env = env_of(b);
	struct pd_xport *x = NULL;
	char *why = b->xwhy[id];
	int rc = ops->create(&env, b->shm.has_recv, &x, why, PD_XPORT_WHY_MAX);

	if (rc == 0 && (rc = wrap_faults(&x, why, PD_XPORT_WHY_MAX)) < 0)
		ops->destroy(x);
	if (rc < 0 && (id == PD_XPORT_TCP || (b->cfg.require.mask & (1u << id))))
		return refuse_start(b, id, rc, err, errlen);
	if (rc < 0) {
		PD_LOG(WARN, ctl, "%s not offered, peers get the next transport: %s", ops->name,
		       why);
		return 0;
	}
	b->xdrain[id] = (struct xdrain){ .b = b, .x = x };
	if (x->ops->event_fd(x) >= 0 &&
	    (rc = pd_loop_add(b->loop, x->ops->event_fd(x), EPOLLIN, drain, &b->xdrain[id])) < 0) {
		x->ops->destroy(x);
		pd_err_set(err, errlen, "--transport %s: %s", ops->name, pd_strerror(rc));
		return rc;
	}
	x->ops->offer(x, &b->offer[id]);
	b->xp[id] = x;
	return 0;
}

static int tables_alloc(struct pd_broker *b)
{
	b->px = calloc(MAX_TOKENS, sizeof(*b->px));
	b->sc_idx = calloc(PD_WIRE_MAX_KEYS, sizeof(*b->sc_idx));
	if (b->shm.has_recv)
		b->slot_len = calloc(b->shm.recv.nslots, sizeof(*b->slot_len));
	return b->px && b->sc_idx && (!b->shm.has_recv || b->slot_len) ? 0 : -ENOMEM;
}

int pd_broker_xport_init(struct pd_broker *b, char *err, size_t errlen)
{
	uint32_t mask = b->cfg.transport.mask | (1u << PD_XPORT_TCP);
	int rc;

	pd_ctrl_host_id_read(HOST_ID_PATH, b->host_id, sizeof(b->host_id));
	LIST_INIT(&b->held);
	rc = tables_alloc(b);
	for (uint32_t id = 0; rc == 0 && id < PD_XPORT_MAX; id++)
		if (mask & (1u << id))
			rc = make_one(b, id, err, errlen);
	return rc;
}

void pd_broker_xport_fini(struct pd_broker *b)
{
	struct held_lens *h;

	/* rdma first: its QPs and MRs go before anything else touches the arenas;
	 * every transport joins its threads, so nothing lands after this. */
	for (uint32_t id = 0; id < PD_XPORT_MAX; id++) {
		struct pd_xport *x = b->xp[id];

		if (!x)
			continue;
		if (x->ops->event_fd(x) >= 0)
			pd_loop_del(b->loop, x->ops->event_fd(x));
		x->ops->destroy(x);
		b->xp[id] = NULL;
	}
	while ((h = LIST_FIRST(&b->held))) {
		LIST_REMOVE(h, link);
		free(h);
	}
	free(b->slot_len);
	free(b->sc_idx);
	free(b->px);
}

/* Ours by preference, offered ones only, then tcp, always there as the fallback. */
uint32_t pd_broker_hello_xports(const struct pd_broker *b, const char **xport, const char **addr)
{
	const struct pd_cfg_xports *t = &b->cfg.transport;
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t id = t->order[i];

		if (b->xp[id] && b->offer[id].addr[0]) {
			xport[n] = xname(id);
			addr[n++] = b->offer[id].addr;
		}
	}
	if (!(t->mask & (1u << PD_XPORT_TCP)) && b->offer[PD_XPORT_TCP].addr[0]) {
		xport[n] = xname(PD_XPORT_TCP);
		addr[n++] = b->offer[PD_XPORT_TCP].addr;
	}
	return n;
}

void pd_broker_xport_list(const struct pd_broker *b, char *out, size_t len)
{
	const struct pd_cfg_xports *t = &b->cfg.transport;
	size_t n = 0;

	out[0] = '\0';
	for (uint32_t i = 0; i < t->n && n < len; i++)
		if (b->xp[t->order[i]])
			n += (size_t)snprintf(out + n, len - n, "%s%s", n ? "," : "",
					      xname(t->order[i]));
	if (!(t->mask & (1u << PD_XPORT_TCP)) && n < len)
		(void)snprintf(out + n, len - n, "%stcp", n ? "," : "");
}

/* ---- choosing, per peer ------------------------------------------------------------------ */

/* A peer's Hello, as a transport needs it (strings copied into s). */
struct peer_buf {
	struct pd_xport_peer p;
	char name[PD_WIRE_NAME_MAX + 1];
	char addr[PD_WIRE_ADDR_MAX + 1];
};

static int bytes_is(const struct pd_bytes *v, const char *s)
{
	return v->len == strlen(s) && memcmp(v->p, s, v->len) == 0;
}

static void peer_of(const struct pd_broker *b, const struct pd_msg_hello *h, uint32_t id,
		    struct peer_buf *s)
{
	memset(s, 0, sizeof(*s));
	(void)snprintf(s->name, sizeof(s->name), "%.*s", (int)h->name.len, (const char *)h->name.p);
	for (uint32_t i = 0; i < h->nxports && !s->p.addr; i++) {
		if (!bytes_is(&h->xport[i], xname(id)))
			continue;
		(void)snprintf(s->addr, sizeof(s->addr), "%.*s", (int)h->addr[i].len,
			       (const char *)h->addr[i].p);
		s->p.addr = s->addr;
	}
	s->p.name = s->name;
	s->p.same_host = bytes_is(&h->host_id, b->host_id);
	s->p.epoch = h->epoch;
	s->p.slot_size = h->slot_size;
	s->p.recv_slots = h->recv_slots;
	s->p.rdma_rkey = h->rdma_rkey;
	s->p.rdma_base = h->rdma_base;
}

static int try_xport(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
		     uint32_t id, char *r, size_t rlen)
{
	struct pd_xport *x = b->xp[id];
	struct peer_buf s;

	if (!x) {
		(void)strlcpy(r, b->xwhy[id][0] ? b->xwhy[id] : "not set up", rlen);
		return -ENODEV;
	}
	peer_of(b, h, id, &s);
	s.p.token = pd_broker_present_token(b, peer); /* its HelloAck's secret */
	return x->ops->connect(x, peer, &s.p, r, rlen);
}

/* dst = a b c, cut to fit (reasons are for people: a cut one still reads). */
static void cat3(char *dst, size_t len, const char *a, const char *b, const char *c)
{
	(void)strlcpy(dst, a, len);
	(void)strlcat(dst, b, len);
	(void)strlcat(dst, c, len);
}

/* The first of our order (within --require, when given) that works; else
 * tcp without --require. why: the first failure, if any. */
static uint32_t choose(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
		       char *why, size_t wlen)
{
	const struct pd_cfg_xports *t = &b->cfg.transport;
	uint32_t allowed = b->cfg.require.mask ? b->cfg.require.mask : ~0u;
	char r[PD_XPORT_WHY_MAX];

	why[0] = '\0';
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t id = t->order[i];

		if (!(allowed & (1u << id)))
			continue;
		if (try_xport(b, peer, h, id, r, sizeof(r)) == 0)
			return id + 1;
		if (!why[0])
			cat3(why, wlen, xname(id), ": ", r);
	}
	if (b->cfg.require.mask || (t->mask & (1u << PD_XPORT_TCP)))
		return 0;
	return try_xport(b, peer, h, PD_XPORT_TCP, r, sizeof(r)) == 0 ? PD_XPORT_TCP + 1 : 0;
}

static void record(uint32_t peer, struct peer_xport *x, const char *why)
{
	int changed = strcmp(x->why, why) != 0;

	(void)strlcpy(x->why, why, sizeof(x->why));
	if (!changed)
		return; /* said before (a peer's new session) */
	if (x->refused)
		PD_LOG(ERR, ctl, "peer %u: no data transport: %s", peer, why);
	else if (!strncmp(why, "fallback", 8))
		PD_LOG(WARN, ctl, "peer %u: %s, %s", peer, xname(x->send - 1), why);
	else
		PD_LOG(INFO, ctl, "peer %u: %s (%s)", peer, x->send ? xname(x->send - 1) : "none",
		       why);
}

static void choose_for(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
		       struct peer_xport *x)
{
	char first[96], why[sizeof(x->why)];

	x->send = choose(b, peer, h, first, sizeof(first));
	cat3(why, sizeof(why),
	     x->send && !first[0]    ? "configured (--transport)" :
	     x->send                 ? "fallback: " :
	     b->cfg.require.mask     ? "refused (--require): " :
				       "no usable transport: ", first, "");
	x->refused = !x->send && b->cfg.require.mask ? -EPROTONOSUPPORT : 0;
	x->chosen = 1;
	record(peer, x, why);
}

/* The transports this peer may write our arena through unseen, no
 * connection needed (shm on one host). */
static uint32_t admitted(const struct pd_broker *b, const struct pd_msg_hello *h)
{
	uint32_t mask = 0;
	struct peer_buf s;

	for (uint32_t id = 0; id < PD_XPORT_MAX; id++) {
		const struct pd_xport *x = b->xp[id];

		if (!x || !x->ops->admits)
			continue;
		peer_of(b, h, id, &s);
		mask |= x->ops->admits(x, &s.p) ? 1u << id : 0;
	}
	return mask;
}

/* A lane of a session that is no more (control thread, which alone
 * changes sessions). */
static int lane_stale(void *ctx, uint32_t lane)
{
	const struct pd_broker *b = ctx;
	uint32_t peer = LANE_PEER(lane);

	return peer >= MAX_TOKENS || (b->sess[peer] & GRANT_SESS_MASK) != LANE_SESS(lane);
}

/* A session ended: close the connections of every session that did. */
static void fence_stale(struct pd_broker *b)
{
	for (uint32_t id = 0; id < PD_XPORT_MAX; id++)
		if (b->xp[id] && b->xp[id]->ops->fence)
			b->xp[id]->ops->fence(b->xp[id], lane_stale, b);
}

void pd_broker_xport_up(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h)
{
	struct peer_xport *x;
	char r[PD_XPORT_WHY_MAX];

	fence_stale(b); /* its last session's connections, if it restarted */
	if (peer >= MAX_TOKENS) { /* beyond our per-peer tables: tcp, as always */
		if (b->tx && h->recv_slots)
			(void)try_xport(b, peer, h, PD_XPORT_TCP, r, sizeof(r));
		return;
	}
	x = &b->px[peer];
	x->admitted = b->shm.has_recv ? admitted(b, h) : 0;
	x->recv = 0;
	if (b->tx && h->recv_slots)
		choose_for(b, peer, h, x);
}

void pd_broker_xport_down(struct pd_broker *b, uint32_t peer)
{
	struct held_lens *h, *next;

	for (uint32_t id = 0; id < PD_XPORT_MAX; id++) /* posted writes complete */
		if (b->xp[id])
			b->xp[id]->ops->disconnect(b->xp[id], peer);
	fence_stale(b); /* and what it sent us lands no more */
	for (h = LIST_FIRST(&b->held); h; h = next) {
		next = LIST_NEXT(h, link);
		if (h->peer == peer) {
			LIST_REMOVE(h, link);
			free(h);
		}
	}
	if (peer < MAX_TOKENS) {
		b->px[peer].send = 0;
		b->px[peer].refused = 0;
		b->px[peer].admitted = 0;
		b->px[peer].chosen = 0;
	}
}

void pd_broker_xport_tick(struct pd_broker *b)
{
	for (uint32_t id = 0; id < PD_XPORT_MAX; id++)
		if (b->xp[id] && b->xp[id]->ops->tick)
			b->xp[id]->ops->tick(b->xp[id]);
}

void pd_broker_xport_describe(const struct pd_broker *b, uint32_t peer, char *name, size_t nlen,
			   char *why, size_t wlen)
{
	const struct peer_xport *x = peer < MAX_TOKENS ? &b->px[peer] : NULL;

	name[0] = why[0] = '\0';
	if (x && x->chosen) {
		(void)snprintf(name, nlen, "%s", x->send ? xname(x->send - 1) : "none");
		(void)snprintf(why, wlen, "%s", x->why);
	} else if (x && x->recv) {
		(void)snprintf(name, nlen, "%s", xname(x->recv - 1));
		(void)snprintf(why, wlen, "receiving: the sender's choice");
	}
}

uint32_t pd_broker_xport_lanes(const struct pd_broker *b, uint32_t peer)
{
	int id = pd_broker_xport_of(b, peer);
	const struct pd_xport *x = id >= 0 ? b->xp[id] : NULL;

	return x && peer < MAX_TOKENS && b->px[peer].chosen ? x->ops->lanes(x, peer) : 0;
}

uint32_t pd_broker_xport_counters(const struct pd_broker *b, char (*names)[PD_STATS_NAME_MAX + 1],
			       uint64_t *values, uint32_t max)
{
	const char *nm[64];
	uint64_t v[64];
	uint32_t n = 0;

	for (uint32_t id = 0; id < PD_XPORT_MAX; id++) {
		const struct pd_xport *x = b->xp[id];
		uint32_t k = x && x->ops->counters ? x->ops->counters(x, nm, v, 64) : 0;

		for (uint32_t i = 0; i < k && n < max; i++, n++) {
			(void)snprintf(names[n], sizeof(names[n]), "%s.%s", xname(id), nm[i]);
			values[n] = v[i];
		}
	}
	return n;
}

/* ---- sending ------------------------------------------------------------------------- */

int pd_broker_xport_of(const struct pd_broker *b, uint32_t peer)
{
	const struct peer_xport *x = peer < MAX_TOKENS ? &b->px[peer] : NULL;
	uint32_t id = x && x->send ? x->send - 1 : PD_XPORT_TCP;

	if (x && x->refused)
		return x->refused;
	if (!b->xp[id] || !b->xp[id]->ops->ready(b->xp[id], peer))
		return -ENOTCONN;
	return (int)id;
}

int pd_broker_xport_refuse(struct pd_broker *b, const struct pd_tx_batch_view *v)
{
	int rc = pd_broker_xport_of(b, v->peer);

	if (rc >= 0 || b->nrefused >= MAX_REFUSED)
		return 0; /* (full: sent; its write is refused instead) */
	b->refused[b->nrefused].peer = v->peer;
	b->refused[b->nrefused].seq = v->seq;
	b->refused[b->nrefused++].err = rc;
	return 1;
}

/* As if the receiver had answered with the error: the request fails. */
void pd_broker_fail_refused(struct pd_broker *b)
{
	while (b->nrefused) {
		uint32_t i = --b->nrefused;
		struct pd_tx_resp r = { .peer = b->refused[i].peer, .seq = b->refused[i].seq,
					.err = b->refused[i].err };

		if (b->tx)
			(void)pd_tx_alloc_resp(b->tx, &r, pd_now_ns());
	}
}

/* Post k transfers; a shortfall is an error for the rest. */
static int post_some(struct pd_xport *x, uint32_t peer, const struct pd_xfer *v, uint32_t k,
		     uint32_t *posted)
{
	int rc = x->ops->post(x, peer, v, k);

	*posted += rc > 0 ? (uint32_t)rc : 0;
	return rc < 0 ? rc : (uint32_t)rc < k ? -EAGAIN : 0;
}

/* The staging bytes of send slot ref, in whichever send pool it is of;
 * NULL when the slot is not live at ref's generation. */
static void *staging(const struct pd_broker *b, pd_slot_ref ref)
{
	int k = pd_layout_send_part(&b->shm, ref);

	return k < 0 ? NULL : pd_pool_data(&b->shm.send_part[k], ref);
}

/* Every chunk to write still has its staging bytes: its slot's descriptor
 * (in shm, which agents may write) still says the broker's generation. */
static int staging_ok(const struct pd_broker *b, const struct pd_tx_batch_view *v)
{
	for (uint32_t i = 0; i < v->n; i++)
		if (v->remote[i] >= 0 && v->chunks[i].len && !staging(b, v->chunks[i].slot))
			return 0;
	return 1;
}

int pd_broker_xport_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted)
{
	int id = pd_broker_xport_of(b, v->peer);
	struct pd_xport *x = id >= 0 ? b->xp[id] : NULL;
	struct pd_xfer t[64];
	uint32_t k = 0;
	int rc = 0;

	if (!x)
		return id < 0 ? id : -ENOTCONN;
	if (!staging_ok(b, v))
		return -ESTALE; /* nothing posted: no transfer without its bytes */
	for (uint32_t i = 0; i <= v->n && rc == 0; i++) {
		if (k && (i == v->n || k == PD_ARRAY_SIZE(t))) {
			rc = post_some(x, v->peer, t, k, posted);
			k = 0;
		}
		if (i == v->n || v->remote[i] < 0)
			continue;
		t[k++] = (struct pd_xfer){ .cookie = v->seq, .len = v->chunks[i].len,
					   .src = staging(b, v->chunks[i].slot),
					   .slot = (uint32_t)v->remote[i],
					   .gen = v->gens ? v->gens[i] : 0 };
	}
	return rc;
}
