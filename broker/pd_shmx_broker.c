/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: the data transport per peer (DESIGN.md section 7).
 *
 * Sender (a broker with send slots), at each peer's Hello: the first
 * transport of its own --transport order that the peer offers and that
 * works (shm: the same host id, and its segment maps and checks out;
 * rdma: ours was set up, and the connect starts (pd_rdma_broker.c);
 * tcp: lanes open), else tcp as the fallback, else (--require) none: the
 * peer's batches fail with -EPROTONOSUPPORT. The choice and its reason
 * are kept per peer for pdctl, and logged when they change.
 *
 * Receiver (a broker with recv slots): offers "shm" (its segment's name)
 * and "rdma" (its listener) when --transport has them. It never sees shm
 * or RDMA bytes arrive, so the PutDone is the signal: see pd_shmx_recv.c.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <bsd/string.h>

#include "pd_broker_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define NONE_WHY "none: not a receiver, or not up"

static const char *const xname[PD_XPORT_MAX] = {
	[PD_XPORT_RDMA] = "rdma", [PD_XPORT_TCP] = "tcp", [PD_XPORT_SHM] = "shm",
};

/* ---- setup --------------------------------------------------------------------------- */

/*
 * This boot's id: the same for every process and container of one boot of
 * one kernel, and for no other. Equal ids are what makes shm possible;
 * the connect (the segment must be visible in our /dev/shm, and check
 * out) proves the rest. Without it, the host name (a wrong "other host"
 * only costs the shm transport).
 */
#define HOST_ID_PATH "/proc/sys/kernel/random/boot_id"

static int shmx_make(struct pd_broker *b, char *err, size_t errlen)
{
	struct pd_shmx_opts o;
	int rc;

	pd_shmx_opts_init(&o);
	o.threads = b->cfg.data_threads;
	if (b->cfg.send_slots > o.queue_depth)
		o.queue_depth = b->cfg.send_slots;
	rc = pd_shmx_create(&o, &b->shmx);
	if (rc == 0)
		rc = pd_loop_add(b->loop, pd_shmx_event_fd(b->shmx), EPOLLIN, broker_shmx_drain, b);
	if (rc < 0)
		pd_err_set(err, errlen, "--transport shm: %s", pd_strerror(rc));
	return rc;
}

int broker_xport_init(struct pd_broker *b, char *err, size_t errlen)
{
	pd_ctrl_host_id_read(HOST_ID_PATH, b->host_id, sizeof(b->host_id));
	LIST_INIT(&b->held);
	if (pd_segment_path(b->cfg.name, b->seg_path, sizeof(b->seg_path)) < 0)
		return -EINVAL;
	b->px = calloc(MAX_TOKENS, sizeof(*b->px));
	b->sc_idx = calloc(PD_WIRE_MAX_KEYS, sizeof(*b->sc_idx));
	if (!b->px || !b->sc_idx)
		return -ENOMEM;
	if (b->shm.has_recv) {
		b->slot_len = calloc(b->shm.recv.nslots, sizeof(*b->slot_len));
		if (!b->slot_len)
			return -ENOMEM;
	}
	if (b->shm.has_send && (b->cfg.transport.mask & (1u << PD_XPORT_SHM)))
		return shmx_make(b, err, errlen);
	return 0;
}

void broker_xport_fini(struct pd_broker *b)
{
	struct held_lens *h;

	if (b->shmx) {
		pd_loop_del(b->loop, pd_shmx_event_fd(b->shmx));
		pd_shmx_destroy(b->shmx); /* joins the data threads: no copy runs after */
		b->shmx = NULL;
	}
	while ((h = LIST_FIRST(&b->held))) {
		LIST_REMOVE(h, link);
		free(h);
	}
	free(b->slot_len);
	free(b->sc_idx);
	free(b->px);
}

/* Ours by preference (shm and rdma only with a recv pool to write into;
 * rdma only once set up), then tcp, which is always there as the fallback. */
uint32_t broker_hello_xports(const struct pd_broker *b, const char *tcp_addr, const char **xport,
			     const char **addr)
{
	const struct pd_cfg_xports *t = &b->cfg.transport;
	uint32_t n = 0;

	for (uint32_t i = 0; i < t->n; i++) {
		if (t->order[i] == PD_XPORT_SHM && b->shm.has_recv) {
			xport[n] = "shm";
			addr[n++] = b->seg_path;
		} else if (t->order[i] == PD_XPORT_RDMA && b->rdma_addr[0]) {
			xport[n] = "rdma";
			addr[n++] = b->rdma_addr;
		} else if (t->order[i] == PD_XPORT_TCP) {
			xport[n] = "tcp";
			addr[n++] = tcp_addr;
		}
	}
	if (!(t->mask & (1u << PD_XPORT_TCP))) {
		xport[n] = "tcp";
		addr[n++] = tcp_addr;
	}
	return n;
}

/* ---- choosing, per peer ------------------------------------------------------------------ */

/* dst = a b c, cut to fit (reasons are for people: a cut one still reads). */
static void cat3(char *dst, size_t len, const char *a, const char *b, const char *c)
{
	(void)strlcpy(dst, a, len);
	(void)strlcat(dst, b, len);
	(void)strlcat(dst, c, len);
}

static int bytes_is(const struct pd_bytes *v, const char *s)
{
	return v->len == strlen(s) && memcmp(v->p, s, v->len) == 0;
}

static const struct pd_bytes *offered(const struct pd_msg_hello *h, const char *x)
{
	for (uint32_t i = 0; i < h->nxports; i++)
		if (bytes_is(&h->xport[i], x))
			return &h->addr[i];
	return NULL;
}

int broker_offered_hostport(const struct pd_msg_hello *h, const char *x, char *host, size_t hlen,
			    uint16_t *port)
{
	const struct pd_bytes *a = offered(h, x);
	char buf[PD_WIRE_ADDR_MAX + 1], *colon, *end = NULL, *start = buf;
	unsigned long p;

	if (!a)
		return -ENOENT;
	(void)snprintf(buf, sizeof(buf), "%.*s", (int)a->len, (const char *)a->p);
	colon = strrchr(buf, ':');
	if (!colon)
		return -EINVAL;
	*colon = '\0';
	p = strtoul(colon + 1, &end, 10);
	if (*buf == '[' && colon > buf + 1 && colon[-1] == ']') { /* "[v6]:port" */
		start = buf + 1;
		colon[-1] = '\0';
	}
	if (p == 0 || p > 65535 || *end || strlen(start) >= hlen)
		return -EINVAL;
	(void)strlcpy(host, start, hlen);
	*port = (uint16_t)p;
	return 0;
}

/* Its segment, if it offers shm and is on this boot; it must be the one its
 * name gives (an address pointing elsewhere is refused, not followed). */
static int try_shm(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h, char *r,
		   size_t rlen)
{
	const struct pd_bytes *a = offered(h, "shm");
	char name[PD_WIRE_NAME_MAX + 1], path[sizeof(b->seg_path)];
	struct pd_shmx_target t = { .name = name, .slot_size = h->slot_size,
				    .recv_slots = h->recv_slots, .epoch = h->epoch };

	if (!a) {
		(void)snprintf(r, rlen, "not offered by the peer");
		return -ENOENT;
	}
	if (!bytes_is(&h->host_id, b->host_id)) {
		(void)snprintf(r, rlen, "the peer is on another host");
		return -EXDEV;
	}
	(void)snprintf(name, sizeof(name), "%.*s", (int)h->name.len, (const char *)h->name.p);
	if (pd_segment_path(name, path, sizeof(path)) < 0 || !bytes_is(a, path)) {
		(void)snprintf(r, rlen, "advertised segment is not its own");
		return -EPROTO;
	}
	(void)pd_shmx_disconnect(b->shmx, peer); /* a mapping left from its last session */
	return pd_shmx_connect(b->shmx, peer, &t, r, rlen);
}

static int try_xport(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
		     uint32_t x, char *r, size_t rlen)
{
	int rc = -ENOTSUP;

	if (x == PD_XPORT_SHM && b->shmx)
		return try_shm(b, peer, h, r, rlen);
	if (x == PD_XPORT_RDMA)
		return broker_rdma_try(b, peer, h, r, rlen);
	if (x == PD_XPORT_TCP && b->tcp) {
		rc = broker_tcp_open(b, peer, h);
		if (rc < 0)
			(void)snprintf(r, rlen, "%s", rc == -ENOENT ? "not offered by the peer" :
							     pd_strerror(rc));
		return rc;
	}
	(void)snprintf(r, rlen, "not available in this build");
	return rc;
}

/* The first of our order (within --require, when given) that works; else
 * tcp without --require. why: the first failure, if any. */
static uint32_t choose(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h,
		       char *why, size_t wlen)
{
	const struct pd_cfg_xports *t = &b->cfg.transport;
	uint32_t allowed = b->cfg.require.mask ? b->cfg.require.mask : ~0u;
	char r[80];

	why[0] = '\0';
	for (uint32_t i = 0; i < t->n; i++) {
		uint32_t x = t->order[i];

		if (!(allowed & (1u << x)))
			continue;
		if (try_xport(b, peer, h, x, r, sizeof(r)) == 0)
			return x + 1;
		if (!why[0])
			cat3(why, wlen, xname[x], ": ", r);
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
		PD_LOG(WARN, ctl, "peer %u: %s, %s", peer, xname[x->send - 1], why);
	else
		PD_LOG(INFO, ctl, "peer %u: %s (%s)", peer, x->send ? xname[x->send - 1] : "none",
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

void broker_xport_up(struct pd_broker *b, uint32_t peer, const struct pd_msg_hello *h)
{
	struct peer_xport *x;

	if (peer >= MAX_TOKENS) { /* beyond our per-peer tables: tcp, as always */
		if (b->tx && h->recv_slots)
			(void)broker_tcp_open(b, peer, h);
		return;
	}
	x = &b->px[peer];
	x->shm_in = b->shm.has_recv && (b->cfg.transport.mask & (1u << PD_XPORT_SHM)) &&
		    bytes_is(&h->host_id, b->host_id);
	x->recv = 0;
	if (b->tx && h->recv_slots)
		choose_for(b, peer, h, x);
}

void broker_xport_down(struct pd_broker *b, uint32_t peer)
{
	struct held_lens *h, *next;

	if (b->shmx)
		(void)pd_shmx_disconnect(b->shmx, peer); /* its copies complete: -ECONNABORTED */
	broker_rdma_down(b, peer); /* likewise its writes (drained when it has not failed) */
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
		b->px[peer].shm_in = 0;
		b->px[peer].chosen = 0;
	}
}

void broker_xport_describe(const struct pd_broker *b, uint32_t peer, char *name, size_t nlen,
			   char *why, size_t wlen)
{
	const struct peer_xport *x = peer < MAX_TOKENS ? &b->px[peer] : NULL;

	name[0] = why[0] = '\0';
	if (x && x->chosen) {
		(void)snprintf(name, nlen, "%s", x->send ? xname[x->send - 1] : "none");
		(void)snprintf(why, wlen, "%s", x->why);
	} else if (x && x->recv) {
		(void)snprintf(name, nlen, "%s", xname[x->recv - 1]);
		(void)snprintf(why, wlen, "receiving: the sender's choice");
	}
}

/* ---- sending ------------------------------------------------------------------------- */

int broker_xport_of(const struct pd_broker *b, uint32_t peer)
{
	const struct peer_xport *x = peer < MAX_TOKENS ? &b->px[peer] : NULL;

	if (x && x->refused)
		return x->refused;
	if (x && x->send == PD_XPORT_SHM + 1)
		return b->shmx ? (int)PD_XPORT_SHM : -ENOTCONN;
	if (x && x->send == PD_XPORT_RDMA + 1)
		return broker_rdma_ready(b, peer) ? (int)PD_XPORT_RDMA : -ENOTCONN;
	return b->tcp ? (int)PD_XPORT_TCP : -ENOTCONN;
}

int broker_xport_refuse(struct pd_broker *b, const struct pd_tx_batch_view *v)
{
	int rc = broker_xport_of(b, v->peer);

	if (rc >= 0 || b->nrefused >= MAX_REFUSED)
		return 0; /* (full: sent; its write is refused instead) */
	b->refused[b->nrefused].peer = v->peer;
	b->refused[b->nrefused].seq = v->seq;
	b->refused[b->nrefused++].err = rc;
	return 1;
}

/* As if the receiver had answered with the error: the request fails. */
void broker_fail_refused(struct pd_broker *b)
{
	while (b->nrefused) {
		uint32_t i = --b->nrefused;
		struct pd_tx_resp r = { .peer = b->refused[i].peer, .seq = b->refused[i].seq,
					.err = b->refused[i].err };

		if (b->tx)
			(void)pd_tx_alloc_resp(b->tx, &r, pd_now_ns());
	}
}

static int shm_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted)
{
	struct pd_shmx_xfer x[64];
	uint32_t k = 0;
	int rc = 0;

	for (uint32_t i = 0; i <= v->n && rc >= 0; i++) {
		if (k && (i == v->n || k == PD_ARRAY_SIZE(x))) {
			rc = pd_shmx_post(b->shmx, v->peer, x, k); /* all k, or none */
			*posted += rc > 0 ? (uint32_t)rc : 0;
			k = 0;
		}
		if (i == v->n || v->remote[i] < 0)
			continue;
		x[k++] = (struct pd_shmx_xfer){ .cookie = v->seq, .len = v->chunks[i].len,
						.src = pd_pool_data(&b->shm.send, v->chunks[i].slot),
						.slot = (uint32_t)v->remote[i] };
	}
	return rc < 0 ? rc : 0;
}

static int tcp_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted)
{
	struct pd_tcp_xfer x;
	int rc = 0;

	for (uint32_t i = 0; i < v->n && rc == 0; i++) {
		if (v->remote[i] < 0)
			continue;
		x = (struct pd_tcp_xfer){ .cookie = v->seq, .len = v->chunks[i].len,
					  .src = pd_pool_data(&b->shm.send, v->chunks[i].slot),
					  .slot = (uint32_t)v->remote[i] };
		rc = pd_tcp_post(b->tcp, v->peer, &x, 1); /* accepted count, or -errno */
		if (rc == 1)
			(*posted)++;
		rc = rc == 1 ? 0 : rc < 0 ? rc : -EAGAIN;
	}
	return rc;
}

int broker_xport_post(struct pd_broker *b, const struct pd_tx_batch_view *v, uint32_t *posted)
{
	switch (broker_xport_of(b, v->peer)) {
	case PD_XPORT_SHM:
		return shm_post(b, v, posted);
	case PD_XPORT_RDMA:
		return broker_rdma_post(b, v, posted);
	default:
		return tcp_post(b, v, posted);
	}
}

void broker_shmx_drain(void *ctx, uint32_t events)
{
	struct pd_broker *b = ctx;
	struct pd_cpl c[64];
	int n;

	(void)events;
	while ((n = pd_shmx_poll(b->shmx, c, 64)) > 0)
		broker_cpls_handle(b, c, n);
}
