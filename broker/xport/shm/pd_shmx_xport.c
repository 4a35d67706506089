/* SPDX-License-Identifier: MIT */
/*
 * The shm transport behind the data-plane interface (pd_xport.h). Sending:
 * data threads copy granted chunks straight into a same-host receiver's
 * arena, mapped at connect (pd_shmx). Receiving: nothing runs; we offer our
 * segment's name, and a peer on this host may write our arena unseen
 * (admits): the PutDone vouches for it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_segment.h"
#include "pd_shmx.h"
#include "pd_xport.h"

struct shm_x {
	struct pd_xport base;
	struct pd_shmx *s;             /* NULL: we do not send */
	struct pd_xport_offer offer;
};

static struct shm_x *of(struct pd_xport *x)
{
	return pd_container_of(x, struct shm_x, base);
}

static const struct shm_x *cof(const struct pd_xport *x)
{
	return pd_container_of_const(x, struct shm_x, base);
}

static void shm_destroy(struct pd_xport *base)
{
	struct shm_x *x = base ? of(base) : NULL;

	if (!x)
		return;
	pd_shmx_destroy(x->s); /* joins the data threads: no copy runs after */
	free(x);
}

static int make_copier(struct shm_x *x, const struct pd_xport_env *env, char *why, size_t wlen)
{
	struct pd_shmx_opts o;
	int rc;

	pd_shmx_opts_init(&o);
	o.threads = env->threads;
	o.queue_depth = pd_xport_queue_depth(env, o.queue_depth, PD_SHMX_MAX_DEPTH);
	rc = pd_shmx_create(&o, &x->s);
	if (rc < 0)
		(void)snprintf(why, wlen, "%s", pd_strerror(rc));
	return rc;
}

static int shm_create(const struct pd_xport_env *env, int recv_side, struct pd_xport **out,
		      char *why, size_t wlen)
{
	struct shm_x *x = calloc(1, sizeof(*x));
	int rc = 0;

	if (!x)
		return -ENOMEM;
	x->base.ops = &pd_xport_shm_ops;
	if (recv_side && pd_segment_path(env->name, x->offer.addr, sizeof(x->offer.addr)) < 0)
		rc = -EINVAL;
	if (rc == 0 && env->shm->has_send)
		rc = make_copier(x, env, why, wlen);
	if (rc < 0) {
		shm_destroy(&x->base);
		return rc;
	}
	*out = &x->base;
	return 0;
}

static void shm_offer(const struct pd_xport *base, struct pd_xport_offer *o)
{
	*o = cof(base)->offer;
}

/* We offer shm and it runs on this boot: it may copy into our arena. */
static int shm_admits(const struct pd_xport *base, const struct pd_xport_peer *p)
{
	return cof(base)->offer.addr[0] && p->same_host;
}

/* Its segment, if it offers shm and is on this boot; it must be the one its
 * name gives (an address pointing elsewhere is refused, not followed). */
static int shm_connect(struct pd_xport *base, uint32_t peer, const struct pd_xport_peer *p,
		       char *why, size_t wlen)
{
	struct shm_x *x = of(base);
	struct pd_shmx_target t = { .name = p->name, .slot_size = p->slot_size,
				    .recv_slots = p->recv_slots, .epoch = p->epoch };
	char path[PD_XPORT_ADDR_MAX];

	if (!x->s) {
		(void)snprintf(why, wlen, "not set up");
		return -ENODEV;
	}
	if (!p->addr) {
		(void)snprintf(why, wlen, "not offered by the peer");
		return -ENOENT;
	}
	if (!p->same_host) {
		(void)snprintf(why, wlen, "the peer is on another host");
		return -EXDEV;
	}
	if (pd_segment_path(p->name, path, sizeof(path)) < 0 || strcmp(p->addr, path)) {
		(void)snprintf(why, wlen, "advertised segment is not its own");
		return -EPROTO;
	}
	(void)pd_shmx_disconnect(x->s, peer); /* a mapping left from its last session */
	return pd_shmx_connect(x->s, peer, &t, why, wlen);
}

static void shm_disconnect(struct pd_xport *base, uint32_t peer)
{
	struct shm_x *x = of(base);

	if (x->s) /* its copies complete: -ECONNABORTED */
		(void)pd_shmx_disconnect(x->s, peer);
}

static int shm_ready(const struct pd_xport *base, uint32_t peer)
{
	(void)peer;
	return cof(base)->s != NULL;
}

static int shm_post(struct pd_xport *base, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	return pd_shmx_post(of(base)->s, peer, v, n); /* all n, or none */
}

static int shm_poll(struct pd_xport *base, struct pd_cpl *c, uint32_t max)
{
	struct shm_x *x = of(base);

	return x->s ? pd_shmx_poll(x->s, c, max) : 0;
}

static int shm_event_fd(const struct pd_xport *base)
{
	const struct shm_x *x = cof(base);

	return x->s ? pd_shmx_event_fd(x->s) : -ENODEV;
}

static uint32_t shm_lanes(const struct pd_xport *base, uint32_t peer)
{
	(void)base;
	(void)peer;
	return 0; /* no connection: a mapping */
}

/* A peer's broker or segment gone fails it (-ECONNRESET, as lanes that drop). */
static void shm_tick(struct pd_xport *base)
{
	struct shm_x *x = of(base);

	if (x->s)
		(void)pd_shmx_check(x->s);
}

static uint32_t shm_counters(const struct pd_xport *base, const char **names, uint64_t *values,
			     uint32_t max)
{
	struct pd_shmx_stats st;
	uint32_t n = 0;

	pd_shmx_get_stats(cof(base)->s, &st);
	PD_SHMX_STAT_FIELDS(PD_XPORT_COUNTER)
	return n;
}

const struct pd_xport_ops pd_xport_shm_ops = {
	.name = "shm", .id = PD_XPORT_SHM, .flags = PD_XPORT_F_UNSEEN,
	.create = shm_create, .destroy = shm_destroy, .offer = shm_offer, .admits = shm_admits,
	.connect = shm_connect, .disconnect = shm_disconnect, .ready = shm_ready,
	.post = shm_post, .poll = shm_poll, .event_fd = shm_event_fd, .lanes = shm_lanes,
	.tick = shm_tick, .counters = shm_counters,
};
