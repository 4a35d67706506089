/* SPDX-License-Identifier: MIT */
/*
 * Control plane: options, our identity (the Hello we send), create and
 * destroy, and the calls the rest of the broker makes. See pd_ctrl.h.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <bsd/string.h>

#include "pd_ctrl_int.h"
#include "pd_err.h"
#include "pd_log.h"
#include "pd_time.h"

#define DEF_MAX_PEERS 1024u
#define DEF_QUEUE_MAX 512u
#define DEF_SNDHWM    1000u

/* A string of min..max bytes (NULL counts as empty). */
static int str_ok(const char *s, size_t min, size_t max)
{
	size_t n = s ? strnlen(s, max + 1) : 0;

	return n >= min && n <= max;
}

static int check_xports(const struct pd_ctrl_opts *o)
{
	if (o->nxports > PD_CTRL_MAX_XPORTS)
		return -EINVAL;
	for (uint32_t i = 0; i < o->nxports; i++) {
		if (!str_ok(o->xport[i], 1, PD_WIRE_NAME_MAX) ||
		    strcmp(o->xport[i], PD_CTRL_XPORT_CTRL) == 0 ||
		    !str_ok(o->addr[i], 0, PD_WIRE_ADDR_MAX))
			return -EINVAL;
	}
	return 0;
}

static int check_opts(const struct pd_ctrl_opts *o)
{
	const struct pd_ctrl_ops *ops = o->ops;

	if (!o->loop || !ops || !ops->on_msg || !ops->on_peer_up || !ops->on_peer_down)
		return -EINVAL;
	if (!str_ok(o->name, 1, PD_WIRE_NAME_MAX) || !str_ok(o->bind, 1, PD_CTRL_ENDPOINT_MAX - 1))
		return -EINVAL;
	if (!str_ok(o->proxy, 0, PD_CTRL_ENDPOINT_MAX - 1) ||
	    (o->host_id && !str_ok(o->host_id, 1, PD_WIRE_NAME_MAX)) ||
	    (o->advertise && !str_ok(o->advertise, 1, PD_WIRE_ADDR_MAX)))
		return -EINVAL;
	if (!o->heartbeat_ns || !o->slot_size)
		return -EINVAL;
	return check_xports(o);
}

void pd_ctrl_host_id_read(const char *path, char *out, size_t len)
{
	FILE *f = fopen(path, "re");
	int ok = 0;

	if (f) {
		ok = fgets(out, (int)len, f) != NULL;
		(void)fclose(f);
		out[strcspn(out, "\r\n")] = '\0';
	}
	if (ok && out[0])
		return;
	if (gethostname(out, len) < 0 || !out[0])
		(void)strlcpy(out, "unknown", len);
	out[len - 1] = '\0';
}

/* What peers dial: o->advertise, else the bound endpoint with a wildcard
 * host ("tcp://0.0.0.0:P", "tcp://[::]:P") replaced by the host name. */
static void advertise(struct pd_ctrl *c, const char *adv)
{
	static const char *const wild[] = { "tcp://0.0.0.0:", "tcp://[::]:" };
	char host[PD_WIRE_NAME_MAX + 1];

	(void)strlcpy(c->advertise, adv ? adv : c->endpoint, sizeof(c->advertise));
	if (adv)
		return;
	for (size_t i = 0; i < sizeof(wild) / sizeof(wild[0]); i++) {
		size_t n = strlen(wild[i]);

		if (strncmp(c->endpoint, wild[i], n) != 0 || gethostname(host, sizeof(host)) < 0)
			continue;
		host[sizeof(host) - 1] = '\0';
		(void)snprintf(c->advertise, sizeof(c->advertise), "tcp://%s:%s", host,
			       c->endpoint + n);
	}
}

static struct pd_bytes bytes_of(const char *s)
{
	struct pd_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };

	return b;
}

/* Our Hello: the options' transports, then "ctrl" with our control endpoint. */
static void build_hello(struct pd_ctrl *c, const struct pd_ctrl_opts *o)
{
	struct pd_msg_hello *h = &c->hello.u.hello;
	uint32_t n = o->nxports;

	c->hello.type = PD_MSG_HELLO;
	*h = (struct pd_msg_hello){ .proto = PD_WIRE_PROTO, .epoch = o->epoch,
				    .slot_size = o->slot_size, .recv_slots = o->recv_slots };
	h->name = bytes_of(c->name);
	h->host_id = bytes_of(c->host_id);
	for (uint32_t i = 0; i < n; i++) {
		(void)strlcpy(c->xport[i], o->xport[i], sizeof(c->xport[i]));
		(void)strlcpy(c->addr[i], o->addr[i] ? o->addr[i] : "", sizeof(c->addr[i]));
	}
	(void)strlcpy(c->xport[n], PD_CTRL_XPORT_CTRL, sizeof(c->xport[n]));
	(void)strlcpy(c->addr[n], c->advertise, sizeof(c->addr[n]));
	h->nxports = n + 1;
	for (uint32_t i = 0; i < h->nxports; i++) {
		h->xport[i] = bytes_of(c->xport[i]);
		h->addr[i] = bytes_of(c->addr[i]);
	}
	if (o->rdma_gid) {
		memcpy(c->gid, o->rdma_gid, sizeof(c->gid));
		h->rdma_gid = (struct pd_bytes){ c->gid, sizeof(c->gid) };
	}
	h->rdma_qpn = o->rdma_qpn; /* 0 (the default) leaves a field off the wire */
	h->rdma_rkey = o->rdma_rkey;
	h->rdma_base = o->rdma_base;
}

static struct pd_ctrl *alloc_ctrl(const struct pd_ctrl_opts *o)
{
	struct pd_ctrl *c = calloc(1, sizeof(*c));

	if (!c)
		return NULL;
	c->o = *o;
	c->ops = *o->ops;
	c->o.ops = &c->ops;
	c->o.max_peers = o->max_peers ? o->max_peers : DEF_MAX_PEERS;
	c->o.queue_max = o->queue_max ? o->queue_max : DEF_QUEUE_MAX;
	c->o.sndhwm = o->sndhwm ? o->sndhwm : DEF_SNDHWM;
	c->router_fd = c->kick_fd = c->zap_fd = c->rmon_fd = -1;
	c->keys = o->keys;
	(void)strlcpy(c->name, o->name, sizeof(c->name));
	if (o->host_id)
		(void)strlcpy(c->host_id, o->host_id, sizeof(c->host_id));
	else
		pd_ctrl_host_id_read("/etc/machine-id", c->host_id, sizeof(c->host_id));
	LIST_INIT(&c->graveyard);
	pd_wire_buf_init(&c->enc);
	pd_wire_dec_init(&c->dec);
	c->now_ns = pd_now_ns();
	return c;
}

static int open_ctx(struct pd_ctrl *c)
{
	c->zctx = zmq_ctx_new();
	if (!c->zctx)
		return pd_zmq_rc(-1);
	(void)zmq_ctx_set(c->zctx, ZMQ_BLOCKY, 0);  /* zmq_ctx_term never waits */
	/* CURVE: each DEALER also has a monitor (two sockets: libzmq's and ours) */
	return pd_zmq_rc(zmq_ctx_set(c->zctx, ZMQ_MAX_SOCKETS,
				     (int)c->o.max_peers * (c->keys ? 3 : 1) + 16));
}

static int open_router(struct pd_ctrl *c)
{
	size_t len = sizeof(c->endpoint);
	int one = 1, rc;

	c->router = zmq_socket(c->zctx, ZMQ_ROUTER);
	if (!c->router)
		return pd_zmq_rc(-1);
	rc = pd_ctrl_sock_setup(c, c->router);
	if (rc == 0)  /* an unknown route is an error, a full one -EAGAIN: never a silent drop */
		rc = pd_zmq_rc(zmq_setsockopt(c->router, ZMQ_ROUTER_MANDATORY, &one, sizeof(one)));
	if (rc == 0)  /* a DEALER reconnecting with its routing id takes its route over */
		rc = pd_zmq_rc(zmq_setsockopt(c->router, ZMQ_ROUTER_HANDOVER, &one, sizeof(one)));
	if (rc == 0)  /* CURVE server and its monitor, before any connection comes */
		rc = pd_ctrl_auth_server(c, c->router);
	if (rc == 0)
		rc = pd_zmq_rc(zmq_bind(c->router, c->o.bind));
	if (rc == 0)
		rc = pd_zmq_rc(zmq_getsockopt(c->router, ZMQ_LAST_ENDPOINT, c->endpoint, &len));
	if (rc == 0)
		rc = pd_ctrl_watch(c, c->router, &c->router_fd, pd_ctrl_on_router, c);
	return rc;
}

static int open_push(struct pd_ctrl *c)
{
	int rc;

	if (!c->o.proxy || !c->o.proxy[0])
		return 0;
	c->push = zmq_socket(c->zctx, ZMQ_PUSH);
	if (!c->push)
		return pd_zmq_rc(-1);
	rc = pd_ctrl_sock_setup(c, c->push);
	if (rc == 0)
		rc = pd_zmq_rc(zmq_connect(c->push, c->o.proxy));
	return rc;
}

static int open_kick(struct pd_ctrl *c)
{
	c->kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (c->kick_fd < 0)
		return -errno;
	return pd_loop_add(c->o.loop, c->kick_fd, EPOLLIN, pd_ctrl_on_kick, c);
}

/* Say whether anyone who reaches the endpoint can speak as any broker. */
static void log_start(const struct pd_ctrl *c)
{
	char auth[96];

	pd_ctrl_keys_describe(c->keys, auth, sizeof(auth));
	PD_LOG(INFO, ctl, "control plane of %s on %s (advertised %s): %s", c->name, c->endpoint,
	       c->advertise, auth);
	if (!c->keys)
		PD_LOG(WARN, ctl, "control plane: unauthenticated (no --curve-key): whoever reaches "
		       "%s can speak as any broker; for a trusted network only", c->endpoint);
}

int pd_ctrl_create(const struct pd_ctrl_opts *o, struct pd_ctrl **out)
{
	struct pd_ctrl *c;
	int rc;

	if (!o || !out)
		return -EINVAL;
	rc = check_opts(o);
	if (rc < 0)
		return rc;
	c = alloc_ctrl(o);
	if (!c)
		return -ENOMEM;
	rc = open_ctx(c);
	if (rc < 0)
		goto out_term_ctx;
	rc = open_kick(c);  /* first: what comes next may kick */
	if (rc < 0)
		goto out_close_kick;
	rc = pd_ctrl_auth_open(c);  /* the ZAP handler before the ROUTER it answers for */
	if (rc < 0)
		goto out_close_router;
	rc = open_router(c);
	if (rc < 0)
		goto out_close_router;
	rc = open_push(c);
	if (rc < 0)
		goto out_close_push;
	advertise(c, o->advertise);
	build_hello(c, o);
	log_start(c);
	*out = c;
	return 0;

out_close_push:
	if (c->push)
		(void)zmq_close(c->push);
out_close_router:
	pd_ctrl_auth_close(c);
	if (c->router_fd >= 0)
		pd_loop_del(c->o.loop, c->router_fd);
	if (c->router)
		(void)zmq_close(c->router);
out_close_kick:
	if (c->kick_fd >= 0) {
		pd_loop_del(c->o.loop, c->kick_fd);
		(void)close(c->kick_fd);
	}
out_term_ctx:
	if (c->zctx)
		(void)zmq_ctx_term(c->zctx);
	pd_wire_dec_fini(&c->dec);
	pd_wire_buf_fini(&c->enc);
	free(c);
	return rc;
}

void pd_ctrl_destroy(struct pd_ctrl *c)
{
	if (!c)
		return;
	for (uint32_t i = 0; i < c->npeers; i++) {
		pd_ctrl_dealer_retire(c, c->peers[i]->d);
		pd_ctrl_peer_free(c->peers[i]);
	}
	free(c->peers);
	c->depth = 0;
	pd_ctrl_bury(c);
	pd_loop_del(c->o.loop, c->kick_fd);
	(void)close(c->kick_fd);
	if (c->push)
		(void)zmq_close(c->push);
	pd_ctrl_auth_close(c);
	pd_loop_del(c->o.loop, c->router_fd);
	(void)zmq_close(c->router);
	(void)zmq_ctx_term(c->zctx);  /* LINGER 0, or PD_CTRL_BYE_LINGER_MS after a goodbye */
	pd_wire_dec_fini(&c->dec);
	pd_wire_buf_fini(&c->enc);
	free(c);
}

const char *pd_ctrl_endpoint(const struct pd_ctrl *c)
{
	return c ? c->endpoint : NULL;
}

int pd_ctrl_encode(struct pd_ctrl *c, const struct pd_msg *m)
{
	return pd_wire_encode(m, &c->enc);
}

int pd_ctrl_peer(struct pd_ctrl *c, const char *endpoint, uint32_t *peer)
{
	struct pd_ctrl_peer *p;
	int rc;

	if (!c || !peer || !str_ok(endpoint, 1, PD_CTRL_ENDPOINT_MAX - 1) ||
	    !strcmp(endpoint, c->endpoint) || !strcmp(endpoint, c->advertise))
		return -EINVAL;
	p = pd_ctrl_peer_by_dial(c, endpoint);
	if (p) {
		if (!p->dialled[0])  /* known by its Hello: our requests use its session */
			(void)strlcpy(p->dialled, endpoint, sizeof(p->dialled));
		*peer = p->id;
		return 0;
	}
	rc = pd_ctrl_peer_new(c, &p);
	if (rc == -ENOBUFS && pd_ctrl_evict_one(c))
		rc = pd_ctrl_peer_new(c, &p);
	if (rc < 0)
		return rc;
	(void)strlcpy(p->dialled, endpoint, sizeof(p->dialled));
	c->now_ns = pd_now_ns();
	rc = pd_ctrl_dealer_open(c, p, endpoint);
	if (rc < 0) {  /* take the entry back, its id was never seen */
		pd_ctrl_peer_unnew(c, p);
		return rc;
	}
	*peer = p->id;
	return 0;
}

static int sendable(const struct pd_msg *m)
{
	switch (m->type) {
	case PD_MSG_ALLOC_REQ:
	case PD_MSG_ALLOC_RESP:
	case PD_MSG_PUT_DONE:
	case PD_MSG_CANCEL:
	case PD_MSG_RESERVE:
		return 1;
	case PD_MSG_ERROR:  /* -ENOTCONN means "no session": the ctrl's own */
		return m->u.error.code != -ENOTCONN;
	default:
		return 0;
	}
}

int pd_ctrl_send(struct pd_ctrl *c, uint32_t peer, const struct pd_msg *m)
{
	struct pd_ctrl_peer *p;
	int rc;

	if (!c || !m || !sendable(m))
		return -EINVAL;
	p = pd_ctrl_peer_canon(c, peer);
	if (!p)
		return -ENOENT;
	if (p->state == PD_CTRL_PEER_DOWN)
		return -ENOTCONN;
	rc = pd_ctrl_encode(c, m);
	if (rc < 0)
		return rc;
	return pd_ctrl_peer_transmit(c, p, m->type, c->enc.data, c->enc.len);
}

int pd_ctrl_proxy_notif(struct pd_ctrl *c, const struct pd_msg_proxy *p)
{
	struct pd_msg m = { .type = PD_MSG_PROXY };
	int rc;

	if (!c || !p)
		return -EINVAL;
	if (!c->push)
		return -ENOTCONN;
	m.u.proxy = *p;
	rc = pd_ctrl_encode(c, &m);
	if (rc < 0)
		return rc;
	rc = pd_zmq_rc(zmq_send(c->push, c->enc.data, c->enc.len, ZMQ_DONTWAIT));
	if (rc >= 0) {
		c->st.tx_msgs++;
		return 0;
	}
	if (rc == -EAGAIN)
		c->st.tx_again++;
	else
		c->st.tx_fail++;
	return rc;
}

int pd_ctrl_peer_info(const struct pd_ctrl *c, uint32_t peer, struct pd_ctrl_peer_info *info)
{
	const struct pd_ctrl_peer *p;

	if (!c || !info)
		return -EINVAL;
	p = pd_ctrl_peer_canon(c, peer);
	if (!p)
		return pd_ctrl_peer_slot(c, peer) ? -ESRCH : -ENOENT;
	info->id = p->id;
	info->state = p->state;
	info->epoch = p->epoch;
	info->hello = p->has_hello ? &p->hello.view : NULL;
	info->endpoint = p->dialled[0] ? p->dialled : p->advertised;
	info->last_rx_ns = p->last_rx_ns;
	info->authenticated = p->has_key;
	info->key_id[0] = '\0';
	if (p->has_key)
		pd_ctrl_key_id(p->key, info->key_id);
	info->refusal = p->refusal;
	return 0;
}

void pd_ctrl_stats(const struct pd_ctrl *c, struct pd_ctrl_stats *st)
{
	if (c && st)
		*st = c->st;
}
