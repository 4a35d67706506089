/* SPDX-License-Identifier: MIT */
/*
 * pdctl: the broker's segment, mapped read-only. Never the socket: this
 * works when the broker's loop is stuck (or stopped). Also where a broker
 * that cannot be reached is diagnosed (no broker, a dead one, a stuck one).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "pd_err.h"
#include "pd_time.h"
#include "pdctl.h"

/* The header's live counters, under the names the broker publishes them,
 * for a broker that has not published its statistics region. */
static const struct {
	const char *name;
	uint32_t idx, kind;
} hdr_names[] = {
	{ "agents", PD_STAT_AGENTS, PD_STAT_KIND_GAUGE },
	{ "requests_active", PD_STAT_REQ_ACTIVE, PD_STAT_KIND_GAUGE },
	{ "requests_done", PD_STAT_REQ_DONE, PD_STAT_KIND_COUNTER },
	{ "requests_failed", PD_STAT_REQ_FAILED, PD_STAT_KIND_COUNTER },
	{ "requests_cancelled", PD_STAT_REQ_CANCELLED, PD_STAT_KIND_COUNTER },
	{ "chunks_sent", PD_STAT_CHUNKS_SENT, PD_STAT_KIND_COUNTER },
	{ "chunks_recv", PD_STAT_CHUNKS_RECV, PD_STAT_KIND_COUNTER },
	{ "bytes_sent", PD_STAT_BYTES_SENT, PD_STAT_KIND_COUNTER },
	{ "bytes_recv", PD_STAT_BYTES_RECV, PD_STAT_KIND_COUNTER },
	{ "errors_proto", PD_STAT_ERR_PROTO, PD_STAT_KIND_COUNTER },
	{ "errors_xport", PD_STAT_ERR_XPORT, PD_STAT_KIND_COUNTER },
	{ "errors_timeout", PD_STAT_ERR_TIMEOUT, PD_STAT_KIND_COUNTER },
	{ "agents_reclaimed", PD_STAT_AGENTS_RECLAIMED, PD_STAT_KIND_COUNTER },
};

const char *pdctl_peer_state_name(uint32_t state)
{
	switch (state) {
	case PD_PEER_NEW: return "new";
	case PD_PEER_UP: return "up";
	case PD_PEER_DOWN: return "down";
	default: return "unknown";
	}
}

static int say_dead(const struct pdctl_opts *o, int32_t pid)
{
	pdctl_err("broker %s (pid %d) is dead; its segment /dev/shm%s%s is stale: start the "
		  "broker again to reclaim it, or remove the file", o->name, pid, PD_SHM_PREFIX,
		  o->name);
	return PDCTL_EXIT_DEAD;
}

/* Exit code for a probe result other than 1 (alive), with its message. */
static int say_probe(const struct pdctl_opts *o, int probe, int32_t pid)
{
	struct stat st;

	if (probe == 0)
		return say_dead(o, pid);
	if (probe == -ENOENT && stat(o->admin_path, &st) == 0) {
		pdctl_err("broker %s has no segment /dev/shm%s%s, but %s exists: the broker is "
			  "starting, or that socket is stale", o->name, PD_SHM_PREFIX, o->name,
			  o->admin_path);
		return PDCTL_EXIT_FAIL;
	}
	if (probe == -ENOENT) {
		pdctl_err("no broker named %s: no segment /dev/shm%s%s and no admin socket %s",
			  o->name, PD_SHM_PREFIX, o->name, o->admin_path);
		return PDCTL_EXIT_NOBROKER;
	}
	if (probe == -EPROTO) {
		pdctl_err("/dev/shm%s%s is not a pdkv segment (or is still being created)",
			  PD_SHM_PREFIX, o->name);
		return PDCTL_EXIT_FAIL;
	}
	pdctl_err("cannot open /dev/shm%s%s: %s", PD_SHM_PREFIX, o->name, pd_strerror(probe));
	return PDCTL_EXIT_FAIL;
}

int pdctl_explain_admin(const struct pdctl_opts *o, int rc)
{
	int32_t pid = 0;
	int probe = pd_segment_probe(o->name, &pid);

	if (probe == 0)
		return say_dead(o, pid);
	if (probe == 1 && rc == -ETIMEDOUT) {
		pdctl_err("broker %s (pid %d) did not answer on %s within %u ms: its loop may be "
			  "stuck ('pdctl status' still works)", o->name, pid, o->admin_path,
			  o->timeout_ms);
		return PDCTL_EXIT_TIMEOUT;
	}
	if (probe == 1 && rc == -ECONNREFUSED) {
		pdctl_err("broker %s (pid %d) is alive but refused the connection on %s", o->name,
			  pid, o->admin_path);
		return PDCTL_EXIT_TIMEOUT;
	}
	if (probe == 1 && rc == -ENOENT) {
		pdctl_err("broker %s (pid %d) runs, but there is no admin socket %s (another "
			  "--rundir?)", o->name, pid, o->admin_path);
		return PDCTL_EXIT_FAIL;
	}
	if (probe == 1 || (probe == -ENOENT && rc != -ENOENT && rc != -ECONNREFUSED)) {
		pdctl_err("admin socket %s: %s", o->admin_path,
			  rc == -EPROTO ? "malformed answer" : pd_strerror(rc));
		return rc == -ETIMEDOUT ? PDCTL_EXIT_TIMEOUT : PDCTL_EXIT_FAIL;
	}
	return say_probe(o, probe, pid);
}

/* A copy taken while the writer is mid-update (e.g. stopped there): clamp
 * the counts and terminate the strings so it is at least safe to print. */
static void copy_torn(const struct pd_stats *live, struct pd_stats *c)
{
	memcpy(c, live, sizeof(*c));
	pd_stats_sanitize(c);
}

static int copy_stats(const struct pd_shm *shm, struct pdctl_snap *s)
{
	int rc;

	s->st = calloc(1, sizeof(*s->st));
	if (!s->st)
		return -ENOMEM;
	rc = pd_stats_snapshot(shm->stats, s->st);
	if (rc == -EAGAIN) {
		copy_torn(shm->stats, s->st);
		rc = 0;
	}
	if (rc < 0) /* not initialised (or not a stats region): show nothing from it */
		memset(s->st, 0, sizeof(*s->st));
	s->published = s->st->publish_ns != 0;
	return 0;
}

/* The region's values, or (never published) the header's counters. */
static int build_values(const struct pd_shm *shm, struct pdctl_snap *s)
{
	uint32_t max = PD_STATS_MAX_VALUES + PD_ARRAY_SIZE(hdr_names);

	s->vals = calloc(max, sizeof(*s->vals));
	if (!s->vals)
		return -ENOMEM;
	if (s->published) {
		for (uint32_t i = 0; i < s->st->nvalues; i++) {
			const struct pd_stat_value *v = &s->st->val[i];

			if (v->name[0])
				s->vals[s->nvals++] = (struct pd_expo_val){ v->name, v->kind, v->v };
		}
		return 0;
	}
	for (uint32_t i = 0; i < PD_ARRAY_SIZE(hdr_names); i++)
		s->vals[s->nvals++] = (struct pd_expo_val){
			hdr_names[i].name, hdr_names[i].kind,
			atomic_load_explicit(&shm->seg.hdr->stats[hdr_names[i].idx],
					     memory_order_relaxed) };
	return 0;
}

/* n pools (the send pools, or the recv pool) as one. */
static void read_pool(const struct pd_pool *p, uint32_t n, struct pdctl_pool *out)
{
	memset(out, 0, sizeof(*out));
	out->present = n != 0;
	out->pools = n;
	for (uint32_t k = 0; k < n; k++) {
		uint32_t hwm = (uint32_t)atomic_load_explicit(&p[k].shm->stats.high_water,
							      memory_order_relaxed);

		out->slots += p[k].nslots;
		out->free += pd_pool_nfree(&p[k]);
		out->hwm += hwm > p[k].nslots ? p[k].nslots : hwm;
	}
	out->used = out->slots - out->free;
}

static void read_header(const struct pd_shm *shm, struct pdctl_snap *s)
{
	const struct pd_shm_hdr *h = shm->seg.hdr;

	memcpy(s->name, shm->seg.name, sizeof(s->name));
	s->name[sizeof(s->name) - 1] = '\0';
	s->pid = h->broker_pid;
	s->epoch = h->epoch;
	s->state = atomic_load_explicit(&h->state, memory_order_acquire);
	s->start_ns = h->broker_start_ns;
	s->now_ns = pd_realtime_ns();
	s->now_mono_ns = pd_now_ns();
	s->max_agents = shm->max_agents;
	for (uint32_t i = 0; i < shm->max_agents; i++)
		if (atomic_load_explicit(&shm->agents->slot[i].state, memory_order_relaxed) ==
		    PD_AGENT_ATTACHED)
			s->agents++;
	read_pool(shm->send_part, shm->has_send ? shm->send_parts : 0, &s->send);
	read_pool(&shm->recv, shm->has_recv, &s->recv);
}

static int fill(const struct pd_shm *shm, struct pdctl_snap *s)
{
	uint64_t since;
	int rc;

	read_header(shm, s);
	rc = copy_stats(shm, s);
	if (rc == 0)
		rc = build_values(shm, s);
	since = s->published ? s->st->publish_ns : s->start_ns;
	s->stale_ns = s->now_ns > since ? s->now_ns - since : 0;
	return rc;
}

static int attach_failed(const struct pdctl_opts *o, int rc, const char *err)
{
	if (rc == -ENOENT)
		return say_probe(o, rc, 0); /* gone meanwhile */
	if (rc == -ETIMEDOUT) {
		pdctl_err("broker %s: its segment is still initialising after %u ms", o->name,
			  o->timeout_ms);
		return PDCTL_EXIT_TIMEOUT;
	}
	pdctl_err("broker %s: cannot read its segment: %s", o->name,
		  err[0] ? err : pd_strerror(rc));
	return PDCTL_EXIT_FAIL;
}

int pdctl_snap_take(const struct pdctl_opts *o, struct pdctl_snap *s)
{
	struct pd_segment seg;
	struct pd_shm shm;
	char err[256] = "";
	int32_t pid = 0;
	int rc;

	memset(s, 0, sizeof(*s));
	rc = pd_segment_probe(o->name, &pid);
	if (rc != 1)
		return say_probe(o, rc, pid);
	rc = pd_segment_attach(o->name, PD_SEG_RDONLY, o->timeout_ms, &seg, err, sizeof(err));
	if (rc < 0)
		return attach_failed(o, rc, err);
	rc = pd_layout_open(&seg, &shm, err, sizeof(err));
	if (rc < 0) {
		pd_segment_destroy(&seg);
		return attach_failed(o, rc, err);
	}
	rc = fill(&shm, s);
	if (pid > 0)
		s->pid = pid; /* the lock holder's, from the kernel, not the header's word */
	pd_layout_close(&shm);
	if (rc < 0) {
		pdctl_snap_free(s);
		pdctl_err("%s", pd_strerror(rc));
		return PDCTL_EXIT_FAIL;
	}
	return PDCTL_EXIT_OK;
}

void pdctl_snap_free(struct pdctl_snap *s)
{
	if (!s)
		return;
	free(s->vals);
	free(s->st);
	s->vals = NULL;
	s->st = NULL;
	s->nvals = 0;
}

int pdctl_snap_find(const struct pdctl_snap *s, const char *name, uint64_t *v)
{
	for (uint32_t i = 0; i < s->nvals; i++) {
		if (strcmp(s->vals[i].name, name) == 0) {
			*v = s->vals[i].v;
			return 0;
		}
	}
	return -ENOENT;
}
