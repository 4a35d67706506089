/* SPDX-License-Identifier: MIT */
/*
 * pdctl metrics: the segment (read-only) as the metric families of
 * pd_expo.h, in the Prometheus text format or as JSON (pdctl_expo.c).
 */
#include <stdlib.h>

#include "pdctl.h"

static struct pd_expo_pool pool_view(const struct pdctl_pool *p)
{
	return (struct pd_expo_pool){ .present = p->present != 0, .slots = p->slots,
				      .free = p->free, .used = p->used, .hwm = p->hwm };
}

/* What the families show, from the snapshot. */
static void view_of(const struct pdctl_snap *s, struct pd_expo_view *v)
{
	*v = (struct pd_expo_view){ .broker = s->name, .state = pd_segment_state_name(s->state),
				    .pid = s->pid, .epoch = s->epoch, .start_ns = s->start_ns,
				    .age_ns = s->stale_ns, .agents = s->agents,
				    .send = pool_view(&s->send), .recv = pool_view(&s->recv),
				    .oldest_wait_ns = pdctl_oldest_wait_ns(s), .st = s->st,
				    .vals = s->vals, .nvals = s->nvals };
}

static int print_metrics(const struct pdctl_opts *o, const struct pdctl_snap *s)
{
	struct pdctl_expo x;
	struct pd_expo_writer w;
	struct pd_expo_view v;
	int rc;

	pdctl_expo_init(&x, o->json, s->name, &w);
	view_of(s, &v);
	rc = pd_expo_write(&v, &w);
	if (rc < 0)
		x.err = rc;
	if (rc < 0 && !o->json)
		pdctl_err("out of memory");
	rc = pdctl_expo_end(&x);
	return rc < 0 || x.err ? PDCTL_EXIT_FAIL : PDCTL_EXIT_OK;
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
