/* SPDX-License-Identifier: MIT */
/* A control plane without sockets, for the fuzz targets (see fuzz_ctrl.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_ctrl.h"

#define SELF "tcp://127.0.0.1:1"

struct peer {
	char endpoint[PD_CTRL_ENDPOINT_MAX];
	char name[16];
	struct pd_msg_hello hello;   /* valid once up */
	int up;
};

struct pd_ctrl {
	struct pd_ctrl_opts o;
	struct peer peer[FZC_PEERS]; /* id p at p - 1 */
	uint32_t npeers;
	struct pd_ctrl_stats st;
	uint64_t refused;
	uint64_t sent[PD_MSG_MAX + 1];
	struct pd_wire_buf buf;
	struct pd_wire_dec dec[PD_MSG_MAX + 1];
	struct pd_msg last[PD_MSG_MAX + 1];
	uint32_t last_peer[PD_MSG_MAX + 1];
};

int pd_ctrl_create(const struct pd_ctrl_opts *o, struct pd_ctrl **out)
{
	struct pd_ctrl *c;

	if (!o || !out || !o->ops || !o->ops->on_msg || !o->ops->on_peer_up ||
	    !o->ops->on_peer_down)
		return -EINVAL;
	c = calloc(1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	c->o = *o;
	pd_wire_buf_init(&c->buf);
	for (uint32_t t = 0; t <= PD_MSG_MAX; t++)
		pd_wire_dec_init(&c->dec[t]);
	*out = c;
	return 0;
}

void pd_ctrl_destroy(struct pd_ctrl *c)
{
	if (!c)
		return;
	for (uint32_t t = 0; t <= PD_MSG_MAX; t++)
		pd_wire_dec_fini(&c->dec[t]);
	pd_wire_buf_fini(&c->buf);
	free(c);
}

void pd_ctrl_host_id_read(const char *path, char *out, size_t len)
{
	(void)path;
	if (len)
		(void)snprintf(out, len, "fuzz-host");
}

const char *pd_ctrl_endpoint(const struct pd_ctrl *c)
{
	return c ? SELF : NULL;
}

int pd_ctrl_peer(struct pd_ctrl *c, const char *endpoint, uint32_t *peer)
{
	size_t n = endpoint ? strnlen(endpoint, PD_CTRL_ENDPOINT_MAX) : 0;

	if (!c || !peer || n == 0 || n >= PD_CTRL_ENDPOINT_MAX || !strcmp(endpoint, SELF))
		return -EINVAL;
	for (uint32_t i = 0; i < c->npeers; i++) {
		if (!strcmp(c->peer[i].endpoint, endpoint)) {
			*peer = i + 1;
			return 0;
		}
	}
	if (c->npeers == FZC_PEERS)
		return -ENOBUFS;
	c->peer[c->npeers] = (struct peer){ .up = 0 };
	memcpy(c->peer[c->npeers].endpoint, endpoint, n + 1);
	*peer = ++c->npeers;
	return 0;
}

static int sendable(uint32_t type)
{
	return type == PD_MSG_ALLOC_REQ || type == PD_MSG_ALLOC_RESP || type == PD_MSG_PUT_DONE ||
	       type == PD_MSG_CANCEL || type == PD_MSG_RESERVE || type == PD_MSG_ERROR;
}

/* Encoded and decoded again, as the peer would see it. */
static int deliver(struct pd_ctrl *c, uint32_t peer, const struct pd_msg *m)
{
	int rc = pd_wire_encode(m, &c->buf);

	if (rc == 0)
		rc = pd_wire_decode(&c->dec[m->type], c->buf.data, c->buf.len, &c->last[m->type],
				    NULL, 0);
	if (rc < 0) {
		c->refused++;
		c->st.tx_fail++;
		return rc;
	}
	c->last_peer[m->type] = peer;
	c->sent[m->type]++;
	c->st.tx_msgs++;
	return 0;
}

int pd_ctrl_send(struct pd_ctrl *c, uint32_t peer, const struct pd_msg *m)
{
	if (!c || !m || !sendable(m->type))
		return -EINVAL;
	if (peer == 0 || peer > c->npeers)
		return -ENOENT;
	return deliver(c, peer, m);
}

int pd_ctrl_proxy_notif(struct pd_ctrl *c, const struct pd_msg_proxy *p)
{
	struct pd_msg m = { .type = PD_MSG_PROXY };

	if (!c || !p)
		return -EINVAL;
	m.u.proxy = *p;
	return deliver(c, 0, &m) < 0 ? -EINVAL : -ENOTCONN; /* checked; no proxy here */
}

void pd_ctrl_tick(struct pd_ctrl *c, uint64_t now_ns)
{
	(void)c;
	(void)now_ns;
}

int pd_ctrl_timed(const struct pd_ctrl *c)
{
	for (uint32_t i = 0; c && i < c->npeers; i++)
		if (!c->peer[i].up)
			return 1; /* as the real one: a peer not up yet is being set up */
	return 0;
}

int pd_ctrl_peer_info(const struct pd_ctrl *c, uint32_t peer, struct pd_ctrl_peer_info *info)
{
	const struct peer *p;

	if (!c || !info)
		return -EINVAL;
	if (peer == 0 || peer > c->npeers)
		return -ENOENT;
	p = &c->peer[peer - 1];
	*info = (struct pd_ctrl_peer_info){ .id = peer,
					    .state = p->up ? PD_CTRL_PEER_UP : PD_CTRL_PEER_NEW,
					    .epoch = 1, .hello = p->up ? &p->hello : NULL,
					    .endpoint = p->endpoint, .refusal = "" };
	return 0;
}

void pd_ctrl_stats(const struct pd_ctrl *c, struct pd_ctrl_stats *st)
{
	if (!c || !st)
		return;
	*st = c->st;
	st->peers = c->npeers;
	for (uint32_t i = 0; i < c->npeers; i++)
		st->peers_live += c->peer[i].up;
}

int pd_ctrl_peer_reset(struct pd_ctrl *c, uint32_t peer, int err)
{
	(void)err;
	if (!c)
		return -EINVAL;
	return peer == 0 || peer > c->npeers ? -ENOENT : 0;
}

void pd_ctrl_goodbye(struct pd_ctrl *c)
{
	(void)c;
}

int pd_ctrl_curve_available(void)
{
	return 0;
}

int pd_ctrl_keygen(const char *path, char pub[41], char *err, size_t errlen)
{
	(void)path;
	(void)pub;
	(void)err;
	(void)errlen;
	return -ENOTSUP;
}

int pd_ctrl_keys_load(const char *key_path, const char *peers_path, struct pd_ctrl_keys **out,
		      char *err, size_t errlen)
{
	(void)key_path;
	(void)peers_path;
	(void)out;
	(void)err;
	(void)errlen;
	return -ENOTSUP;
}

void pd_ctrl_keys_free(struct pd_ctrl_keys *k)
{
	(void)k;
}

void pd_ctrl_keys_describe(const struct pd_ctrl_keys *k, char *out, size_t len)
{
	(void)k;
	if (len)
		(void)snprintf(out, len, "unauthenticated");
}

/* The Hello peer id says: tcp at an address, on another host. */
static void hello_of(struct peer *p, uint32_t id)
{
	static const uint8_t tcp[] = "tcp", addr[] = "127.0.0.1:9", host[] = "fuzz-peer-host";
	struct pd_msg_hello *h = &p->hello;

	(void)snprintf(p->name, sizeof(p->name), "peer%u", id);
	*h = (struct pd_msg_hello){ .proto = PD_WIRE_PROTO, .epoch = 1, .slot_size = 4096,
				    .recv_slots = 64, .nxports = 1 };
	h->name = (struct pd_bytes){ (const uint8_t *)p->name, (uint32_t)strlen(p->name) };
	h->host_id = (struct pd_bytes){ host, sizeof(host) - 1 };
	h->xport[0] = (struct pd_bytes){ tcp, sizeof(tcp) - 1 };
	h->addr[0] = (struct pd_bytes){ addr, sizeof(addr) - 1 };
}

void fzc_step(struct pd_ctrl *c)
{
	for (uint32_t id = 1; id <= c->npeers; id++) {
		struct pd_ctrl_secrets s = { .accept = 0x5ec0 + id, .present = 0x5ec1 + id };
		struct peer *p = &c->peer[id - 1];

		if (p->up)
			continue;
		p->up = 1;
		hello_of(p, id);
		c->o.ops->on_peer_up(c->o.ctx, id, &p->hello, &s);
	}
}

void fzc_reset(struct pd_ctrl *c)
{
	const struct pd_ctrl_ops *ops = c->o.ops;

	for (uint32_t p = 1; p <= c->npeers; p++) {
		if (c->peer[p - 1].up)
			ops->on_peer_down(c->o.ctx, p, -ETIMEDOUT);
		c->peer[p - 1].up = 0;
	}
	for (uint32_t p = 1; ops->peer_busy && p <= c->npeers; p++)
		if (ops->peer_busy(c->o.ctx, p))
			return;
	for (uint32_t p = 1; ops->on_peer_evicted && p <= c->npeers; p++)
		ops->on_peer_evicted(c->o.ctx, p);
	c->npeers = 0;
	memset(c->sent, 0, sizeof(c->sent));
}

uint64_t fzc_refused(const struct pd_ctrl *c)
{
	return c ? c->refused : 0;
}

uint64_t fzc_sent(const struct pd_ctrl *c, uint32_t type)
{
	return c && type <= PD_MSG_MAX ? c->sent[type] : 0;
}

const struct pd_msg *fzc_last(struct pd_ctrl *c, uint32_t type, uint32_t *peer)
{
	if (!c || type > PD_MSG_MAX || !c->sent[type])
		return NULL;
	if (peer)
		*peer = c->last_peer[type];
	return &c->last[type];
}
