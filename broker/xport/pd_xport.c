/* SPDX-License-Identifier: MIT */
/*
 * The data-plane interface (pd_xport.h): the table of transports, and the
 * fault-injecting wrapper tests use (it forwards everything to the
 * transport it wraps, and breaks the transfers its spec names).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "pd_xport.h"

static const struct pd_xport_ops *const table[PD_XPORT_MAX] = {
	[PD_XPORT_RDMA] = &pd_xport_rdma_ops,
	[PD_XPORT_TCP] = &pd_xport_tcp_ops,
	[PD_XPORT_SHM] = &pd_xport_shm_ops,
};

const struct pd_xport_ops *pd_xport_ops_of(uint32_t id)
{
	return id < PD_XPORT_MAX ? table[id] : NULL;
}

/* ---- the fault wrapper --------------------------------------------------------------- */

struct fault_spec {
	uint64_t fail_nth, short_nth, delay_us;
};

struct fault_x {
	struct pd_xport base;
	struct pd_xport_ops ops;       /* the wrapper's, under the inner's name and id */
	struct pd_xport *in;
	struct fault_spec f;
	uint64_t posted;               /* transfers seen by post, all peers */
};

static struct fault_x *fx_of(struct pd_xport *x)
{
	return pd_container_of(x, struct fault_x, base);
}

static const struct pd_xport *inner(const struct pd_xport *x)
{
	return pd_container_of_const(x, struct fault_x, base)->in;
}

static struct pd_xport *inner_mut(struct pd_xport *x)
{
	return fx_of(x)->in;
}

/* "key=N,key=N": every key known, every N >= 1. 0 or -EINVAL. */
static int spec_parse(const char *p, struct fault_spec *f)
{
	static const char *const keys[] = { "fail_nth", "short_nth", "delay_us" };
	uint64_t *const at[] = { &f->fail_nth, &f->short_nth, &f->delay_us };

	memset(f, 0, sizeof(*f));
	if (!*p)
		return -EINVAL;
	while (*p) {
		size_t i, kn = 0;
		char *end;

		for (i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
			kn = strlen(keys[i]);
			if (!strncmp(p, keys[i], kn) && p[kn] == '=')
				break;
		}
		if (i == sizeof(keys) / sizeof(keys[0]))
			return -EINVAL;
		*at[i] = strtoull(p + kn + 1, &end, 10);
		if (*at[i] == 0 || (*end != ',' && *end != '\0'))
			return -EINVAL;
		p = *end ? end + 1 : end;
	}
	return 0;
}

static int fault_post(struct pd_xport *x, uint32_t peer, const struct pd_xfer *v, uint32_t n)
{
	struct fault_x *w = fx_of(x);
	struct pd_xfer *c = NULL;
	uint64_t first = w->posted + 1;
	int rc;

	if (w->f.delay_us)
		(void)nanosleep(&(struct timespec){ (time_t)(w->f.delay_us / 1000000),
						    (long)(w->f.delay_us % 1000000) * 1000 }, NULL);
	if (w->f.fail_nth >= first && w->f.fail_nth < first + n) {
		w->posted += n;
		return -EIO;
	}
	if (w->f.short_nth >= first && w->f.short_nth < first + n &&
	    v[w->f.short_nth - first].len > 0 && (c = malloc(n * sizeof(*c)))) {
		memcpy(c, v, n * sizeof(*c));
		c[w->f.short_nth - first].len--;
	}
	rc = w->in->ops->post(w->in, peer, c ? c : v, n);
	free(c);
	w->posted += rc > 0 ? (uint64_t)rc : 0;
	return rc;
}

static void fault_destroy(struct pd_xport *x)
{
	struct fault_x *w = x ? fx_of(x) : NULL;

	if (!w)
		return;
	w->in->ops->destroy(w->in);
	free(w);
}

static void fault_offer(const struct pd_xport *x, struct pd_xport_offer *o)
{
	inner(x)->ops->offer(inner(x), o);
}

static int fault_admits(const struct pd_xport *x, const struct pd_xport_peer *p)
{
	return inner(x)->ops->admits ? inner(x)->ops->admits(inner(x), p) : 0;
}

static int fault_connect(struct pd_xport *x, uint32_t peer, const struct pd_xport_peer *p,
			 char *why, size_t wlen)
{
	return inner_mut(x)->ops->connect(inner_mut(x), peer, p, why, wlen);
}

static void fault_disconnect(struct pd_xport *x, uint32_t peer)
{
	inner_mut(x)->ops->disconnect(inner_mut(x), peer);
}

static int fault_ready(const struct pd_xport *x, uint32_t peer)
{
	return inner(x)->ops->ready(inner(x), peer);
}

static int fault_poll(struct pd_xport *x, struct pd_cpl *c, uint32_t max)
{
	return inner_mut(x)->ops->poll(inner_mut(x), c, max);
}

static int fault_event_fd(const struct pd_xport *x)
{
	return inner(x)->ops->event_fd(inner(x));
}

static uint32_t fault_lanes(const struct pd_xport *x, uint32_t peer)
{
	return inner(x)->ops->lanes(inner(x), peer);
}

static void fault_tick(struct pd_xport *x)
{
	if (inner_mut(x)->ops->tick)
		inner_mut(x)->ops->tick(inner_mut(x));
}

static uint32_t fault_counters(const struct pd_xport *x, const char **names, uint64_t *values,
			       uint32_t max)
{
	const struct pd_xport *in = inner(x);

	return in->ops->counters ? in->ops->counters(in, names, values, max) : 0;
}

static const struct pd_xport_ops fault_ops = {
	.destroy = fault_destroy, .offer = fault_offer, .admits = fault_admits,
	.connect = fault_connect, .disconnect = fault_disconnect, .ready = fault_ready,
	.post = fault_post, .poll = fault_poll, .event_fd = fault_event_fd,
	.lanes = fault_lanes, .tick = fault_tick, .counters = fault_counters,
};

int pd_xport_fault_wrap(struct pd_xport *in, const char *spec, struct pd_xport **out)
{
	struct fault_x *w;
	struct fault_spec f;

	if (!in || !spec || !out || spec_parse(spec, &f) < 0)
		return -EINVAL;
	w = calloc(1, sizeof(*w));
	if (!w)
		return -ENOMEM;
	w->ops = fault_ops;
	w->ops.name = in->ops->name;
	w->ops.id = in->ops->id;
	w->ops.flags = in->ops->flags;
	w->ops.create = in->ops->create;
	w->base.ops = &w->ops;
	w->in = in;
	w->f = f;
	*out = &w->base;
	return 0;
}
