/* SPDX-License-Identifier: MIT */
/*
 * --metrics-listen: the families of pd_expo.h (the same as `pdctl
 * metrics`) from a copy of the statistics region, as Prometheus text
 * (0.0.4) in a bounded buffer.
 *
 * Escaping kept here: label values escape backslash, double quote and
 * newline, HELP text backslash and newline, and any byte outside printable
 * ASCII becomes '?', so the text is ASCII (valid UTF-8) whatever a peer
 * called itself.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_expo.h"
#include "pd_metrics_int.h"
#include "pd_stats.h"

#define ESC_MAX 512u /* an escaped label value or HELP text: 2 bytes per byte */

/* ---- the writer ------------------------------------------------------------------------ */

/* s with \\ and \n escaped (and \" when quote), bytes outside printable ASCII as '?'. */
static void escape(char *dst, size_t len, const char *src, int quote)
{
	size_t o = 0;

	for (const unsigned char *p = (const unsigned char *)src; *p && o + 3 < len; p++) {
		if (*p == '\\' || *p == '\n' || (quote && *p == '"')) {
			dst[o++] = '\\';
			dst[o++] = *p == '\n' ? 'n' : (char)*p;
		} else {
			dst[o++] = *p >= 0x20 && *p < 0x7f ? (char)*p : '?';
		}
	}
	dst[o] = '\0';
}

static void family(void *ctx, const char *name, const char *type, const char *help)
{
	char esc[ESC_MAX];

	escape(esc, sizeof(esc), help, 0);
	pd_mbuf_printf(ctx, "# HELP %s %s\n# TYPE %s %s\n", name, esc, name, type);
}

static void sample(void *ctx, const char *name, const struct pd_expo_label *l, uint32_t nl,
		   const char *value)
{
	char esc[ESC_MAX];

	pd_mbuf_printf(ctx, "%s{", name);
	for (uint32_t i = 0; i < nl; i++) {
		escape(esc, sizeof(esc), l[i].v, 1);
		pd_mbuf_printf(ctx, "%s%s=\"%s\"", i ? "," : "", l[i].k, esc);
	}
	pd_mbuf_printf(ctx, "} %s\n", value);
}

/* ---- the view ------------------------------------------------------------------------- */

static uint64_t value_of(const struct pd_stats *s, const char *name)
{
	uint64_t v = 0;

	return pd_stats_find(s, name, &v) == 0 ? v : 0;
}

/* A pool as published: slots, in use (at most slots), high water. */
static struct pd_expo_pool pool_of(uint32_t slots, uint64_t in_use, uint32_t hwm)
{
	uint32_t used = in_use < slots ? (uint32_t)in_use : slots;

	return (struct pd_expo_pool){ .present = slots != 0, .slots = slots,
				      .free = slots - used, .used = used,
				      .hwm = hwm < slots ? hwm : slots };
}

/* The oldest admission wait as published, aged since (now: CLOCK_REALTIME). */
static uint64_t oldest_wait(const struct pd_stats *s, uint64_t now)
{
	const struct pd_stat_info *i = &s->info;
	uint64_t age = s->publish_ns && now > s->publish_ns ? now - s->publish_ns : 0;

	if (!i->waiting || !i->oldest_wait_ns || i->now_mono_ns <= i->oldest_wait_ns)
		return 0;
	return i->now_mono_ns - i->oldest_wait_ns + age;
}

static void view_of(const struct pd_stats *s, uint64_t now, struct pd_expo_view *v)
{
	const struct pd_stat_info *i = &s->info;
	uint64_t since = s->publish_ns ? s->publish_ns : i->start_ns;

	v->pid = i->pid;
	v->epoch = i->epoch;
	v->start_ns = i->start_ns;
	v->age_ns = now > since ? now - since : 0;
	v->agents = value_of(s, "agents");
	v->send = pool_of(i->send_slots, value_of(s, "pool.send.in_use"), i->send_used_hwm);
	v->recv = pool_of(i->recv_slots, value_of(s, "pool.recv.in_use"), i->recv_used_hwm);
	v->oldest_wait_ns = oldest_wait(s, now);
	v->st = s;
}

int pd_metrics_render(const struct pd_stats *s, const char *broker, const char *state,
		      uint64_t now_ns, struct pd_mbuf *out)
{
	struct pd_expo_val vals[PD_STATS_MAX_VALUES];
	struct pd_expo_writer w = { .ctx = out, .family = family, .sample = sample };
	struct pd_expo_view v = { .broker = broker, .state = state, .vals = vals };
	int rc;

	view_of(s, now_ns, &v);
	for (uint32_t i = 0; i < s->nvalues && i < PD_STATS_MAX_VALUES; i++)
		if (s->val[i].name[0])
			vals[v.nvals++] = (struct pd_expo_val){ s->val[i].name, s->val[i].kind,
								 s->val[i].v };
	rc = pd_expo_write(&v, &w);
	if (rc < 0)
		out->err = rc;
	return out->err;
}
