/* SPDX-License-Identifier: MIT */
/* libpdagent: attach, detach, broker liveness, logging. */
#include <errno.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pd_agent_int.h"
#include "pd_rundir.h"
#include "pd_attach_client.h"
#include "pd_err.h"
#include "pd_time.h"

#define DEFAULT_ATTACH_MS 5000u

void pd_agent_opts_init(struct pd_agent_opts *o, size_t opts_size)
{
	if (!o || opts_size < sizeof(*o))
		return;
	memset(o, 0, opts_size);
	o->opts_size = sizeof(*o);
	o->roles = PD_AGENT_SEND | PD_AGENT_RECV;
	o->tp_size = 1;
	o->attach_timeout_ms = DEFAULT_ATTACH_MS;
}

uint64_t ag_tag(const void *req_id, uint32_t len)
{
	return pd_req_tag(req_id, len);
}

void ag_log(struct pd_agent *a, int level, const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	if (!a->log)
		return;
	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	a->log(a->log_ctx, level, msg);
}

void pd_agent_set_log_fn(struct pd_agent *a, pd_agent_log_fn *fn, void *ctx)
{
	if (!a)
		return;
	a->log = fn;
	a->log_ctx = ctx;
}

/* 0 while the broker lives; -ENOTCONN (latched) once it is gone. */
int ag_check_broker(void *ctx)
{
	struct pd_agent *a = ctx;
	struct pollfd p = { .fd = a->sock, .events = POLLIN | POLLRDHUP };
	uint32_t st = atomic_load_explicit(&a->shm.seg.hdr->state, memory_order_acquire);

	if (atomic_load(&a->gone))
		return -ENOTCONN;
	if ((poll(&p, 1, 0) > 0 && p.revents) || st == PD_SHM_DEAD || st == PD_SHM_DRAINING ||
	    a->shm.seg.hdr->epoch != a->epoch) {
		atomic_store(&a->gone, 1);
		ag_log(a, 2, "broker gone");
		return -ENOTCONN;
	}
	return 0;
}

int pd_agent_fd(const struct pd_agent *a)
{
	return a ? a->bell_in : -EINVAL;
}

uint64_t pd_slot_size(const struct pd_agent *a)
{
	return a && a->shm.has_send ? a->shm.send.slot_size :
	       a && a->shm.has_recv ? a->shm.recv.slot_size : 0;
}

/* ---- attach ---------------------------------------------------------------------- */

static int sock_path(const struct pd_agent_opts *o, char *buf, size_t len)
{
	const char *name = o->broker ? o->broker : getenv("PDKV_BROKER");
	const char *dir = o->rundir ? o->rundir : getenv("PDKV_RUNDIR");

	return pd_rundir_path(dir, name ? name : "default", ".sock", buf, len);
}

static void close_fds(int *fds, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		if (fds[i] >= 0)
			(void)close(fds[i]);
}

/* Map the segment the broker sent and find our rings in it. */
static int map_segment(struct pd_agent *a, int seg_fd, const struct pd_attach_ack *ack)
{
	struct pd_segment seg;
	int rc = pd_segment_attach_fd(seg_fd, 0, 1000, &seg, NULL, 0);

	if (rc < 0)
		return rc;
	if (seg.len != ack->segment_size || seg.hdr->epoch != ack->epoch ||
	    pd_layout_open(&seg, &a->shm, NULL, 0) < 0) {
		pd_segment_destroy(&seg);
		return -EPROTO;
	}
	rc = ack->agent_id >= 1 && ack->agent_id <= a->shm.max_agents ?
	     pd_layout_rings(&a->shm, ack->agent_id - 1, &a->sq, &a->cq) : -EPROTO;
	if (rc < 0)
		pd_layout_close(&a->shm);
	else /* pd_agent_fd() turns readable for every completion */
		pd_ring_arm(&a->cq);
	return rc;
}

static int init_state(struct pd_agent *a)
{
	a->events = calloc(AG_MAX_EVENTS, sizeof(*a->events));
	if (!a->events)
		return -ENOMEM;
	(void)pthread_mutex_init(&a->sq_lock, NULL);
	(void)pthread_mutex_init(&a->lock, NULL);
	{
		pthread_condattr_t ca;

		(void)pthread_condattr_init(&ca);
		(void)pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
		(void)pthread_cond_init(&a->cond, &ca);
		(void)pthread_condattr_destroy(&ca);
	}
	a->next_user = 1;
	pd_reqtab_init(&a->reqs, 0);
	return 0;
}

static int connect_broker(struct pd_agent *a, const struct pd_agent_opts *o)
{
	struct pd_attach_hello h;
	struct pd_attach_ack ack;
	int fds[PD_ATTACH_NFDS] = { -1, -1, -1 };
	char path[256];
	int rc = sock_path(o, path, sizeof(path));

	if (rc < 0)
		return rc;
	pd_attach_hello_init(&h, o->roles, o->tp_rank, o->tp_size);
	rc = pd_attach_connect(path, &h, o->attach_timeout_ms ? o->attach_timeout_ms :
				DEFAULT_ATTACH_MS, &ack, fds, &a->sock, NULL, 0);
	if (rc < 0)
		return rc;
	rc = map_segment(a, fds[0], &ack);
	(void)close(fds[0]);
	if (rc < 0) {
		close_fds(fds + 1, 2);
		(void)close(a->sock);
		return rc;
	}
	a->bell_in = fds[1];
	a->bell_out = fds[2];
	a->id = ack.agent_id;
	a->epoch = ack.epoch;
	return 0;
}

int pd_agent_attach(const struct pd_agent_opts *o, struct pd_agent **out)
{
	struct pd_agent_opts def;
	struct pd_agent *a;
	int rc;

	if (!out)
		return -EINVAL;
	if (!o) {
		pd_agent_opts_init(&def, sizeof(def));
		o = &def;
	}
	if (o->opts_size < offsetof(struct pd_agent_opts, reserved) || o->flags ||
	    !o->roles || (o->roles & ~(PD_AGENT_SEND | PD_AGENT_RECV)))
		return -EINVAL;
	a = calloc(1, sizeof(*a));
	if (!a)
		return -ENOMEM;
	rc = init_state(a);
	if (rc == 0)
		rc = connect_broker(a, o);
	if (rc < 0) {
		free(a->events);
		free(a);
		return rc;
	}
	rc = ag_journal_init(a);
	if (rc < 0) {
		pd_agent_detach(a);
		return rc;
	}
	*out = a;
	return 0;
}

void pd_agent_detach(struct pd_agent *a)
{
	if (!a)
		return;
	ag_unpin_all(a);
	if (a->shm.has_send)
		(void)pd_pool_reclaim(&a->shm.send, a->id);
	(void)close(a->sock);
	(void)close(a->bell_in);
	(void)close(a->bell_out);
	pd_layout_close(&a->shm);
	(void)pthread_mutex_destroy(&a->sq_lock);
	(void)pthread_mutex_destroy(&a->lock);
	(void)pthread_cond_destroy(&a->cond);
	free(a->sqbuf);
	free(a->pins);
	free(a->free_cells);
	free(a->events);
	pd_reqtab_fini(&a->reqs);
	free(a);
}
