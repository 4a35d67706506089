/* SPDX-License-Identifier: MIT */
/*
 * The metric families of a broker's statistics (pd_expo.h): names, types,
 * help, labels and values, handed to a writer.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pd_expo.h"
#include "pd_stats.h"

/* Families at most: the fixed ones, every value, every histogram. */
#define MAX_FAMILIES (PD_STATS_MAX_VALUES + PD_STATS_MAX_HIST + 32u)
#define NAME_LEN     (PD_STATS_NAME_MAX + 24u) /* "pdkv_" + name + "_seconds" + NUL */
#define LABELS_MAX   4u                        /* broker + 3 */

struct expo {
	const struct pd_expo_writer *w;
	const char *broker;
	int skip;                     /* the current family was written already */
	uint32_t nfam;
	char fam[MAX_FAMILIES][NAME_LEN];
};

void pd_expo_decimal(char *buf, size_t len, uint64_t v, unsigned int digits)
{
	uint64_t div = 1;
	size_t n;

	for (unsigned int i = 0; i < digits; i++)
		div *= 10;
	(void)snprintf(buf, len, "%" PRIu64 ".%0*" PRIu64, v / div, (int)digits, v % div);
	n = strlen(buf);
	while (n > 0 && buf[n - 1] == '0')
		buf[--n] = '\0';
	if (n > 0 && buf[n - 1] == '.')
		buf[--n] = '\0';
}

/* [a-zA-Z_:][a-zA-Z0-9_:]*: every other byte as '_'. */
static void sanitize(char *dst, size_t len, const char *src)
{
	size_t i = 0;

	for (; src[i] && i + 1 < len; i++) {
		char c = src[i];
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
			 c == ':' || (i > 0 && c >= '0' && c <= '9');

		dst[i] = ok ? c : '_';
	}
	dst[i] = '\0';
}

static void family(struct expo *x, const char *name, const char *type, const char *help)
{
	char *f;

	x->skip = 1;
	if (x->nfam >= MAX_FAMILIES)
		return;
	f = x->fam[x->nfam];
	sanitize(f, NAME_LEN, name);
	for (uint32_t i = 0; i < x->nfam; i++)
		if (strcmp(x->fam[i], f) == 0)
			return; /* the same name twice would make the exposition invalid */
	x->nfam++;
	x->skip = 0;
	x->w->family(x->w->ctx, f, type, help);
}

/* A sample of the current family: broker="..." first, then l. */
static void sample(struct expo *x, const char *suffix, const struct pd_expo_label *l,
		   uint32_t nl, const char *value)
{
	struct pd_expo_label all[LABELS_MAX] = { { "broker", x->broker } };
	char name[NAME_LEN + 8];

	if (x->skip)
		return;
	for (uint32_t i = 0; i < nl && i + 1 < LABELS_MAX; i++)
		all[i + 1] = l[i];
	(void)snprintf(name, sizeof(name), "%s%s", x->fam[x->nfam - 1], suffix ? suffix : "");
	x->w->sample(x->w->ctx, name, all, nl + 1 < LABELS_MAX ? nl + 1 : LABELS_MAX, value);
}

static void sample_u64(struct expo *x, const struct pd_expo_label *l, uint32_t nl, uint64_t v)
{
	char buf[24];

	(void)snprintf(buf, sizeof(buf), "%" PRIu64, v);
	sample(x, NULL, l, nl, buf);
}

/* Nanoseconds as exact decimal seconds. */
static void sample_ns(struct expo *x, const char *suffix, uint64_t ns)
{
	char buf[32];

	pd_expo_decimal(buf, sizeof(buf), ns, 9);
	sample(x, suffix, NULL, 0, buf);
}

/* ---- the families --------------------------------------------------------------------- */

static void broker_families(struct expo *x, const struct pd_expo_view *v)
{
	char pid[16], epoch[24];
	const struct pd_expo_label l[] = { { "pid", pid }, { "epoch", epoch },
					   { "state", v->state } };

	(void)snprintf(pid, sizeof(pid), "%d", (int)v->pid);
	(void)snprintf(epoch, sizeof(epoch), "%" PRIu64, v->epoch);
	family(x, "pdkv_broker_info", "gauge", "The broker's identity (always 1).");
	sample_u64(x, l, v->state ? 3 : 2, 1);
	family(x, "pdkv_broker_start_time_seconds", "gauge",
	       "When the broker started, in seconds since the Unix epoch.");
	sample_ns(x, NULL, v->start_ns);
	family(x, "pdkv_stats_age_seconds", "gauge",
	       "Seconds since the broker last published its statistics (or since its start, if "
	       "never).");
	sample_ns(x, NULL, v->age_ns);
	family(x, "pdkv_agents_attached", "gauge", "Agents attached now.");
	sample_u64(x, NULL, 0, v->agents);
}

/* what: 0 slots by state, 1 capacity, 2 high water. */
static void pool_samples(struct expo *x, const char *pool, const struct pd_expo_pool *p,
			 int what)
{
	struct pd_expo_label l[2] = { { "pool", pool }, { "state", "free" } };

	if (!p->present)
		return;
	if (what == 0) {
		sample_u64(x, l, 2, p->free);
		l[1].v = "used";
		sample_u64(x, l, 2, p->used);
	} else {
		sample_u64(x, l, 1, what == 1 ? p->slots : p->hwm);
	}
}

static void pool_families(struct expo *x, const struct pd_expo_view *v)
{
	static const char *const name[] = { "pdkv_pool_slots", "pdkv_pool_capacity_slots",
					    "pdkv_pool_high_water_slots" };
	static const char *const help[] = { "Slots of a pool by state.", "Slots in a pool.",
					    "Most slots of a pool ever in use at once." };

	for (int what = 0; what < 3; what++) {
		family(x, name[what], "gauge", help[what]);
		pool_samples(x, "send", &v->send, what);
		pool_samples(x, "recv", &v->recv, what);
	}
}

static void admission_families(struct expo *x, const struct pd_expo_view *v)
{
	const struct pd_stat_info *i = &v->st->info;

	if (!v->recv.present)
		return;
	family(x, "pdkv_admission_reserved_slots", "gauge",
	       "Receive slots reserved by admitted requests.");
	sample_u64(x, NULL, 0, i->reserved);
	family(x, "pdkv_admission_granted_slots", "gauge",
	       "Reserved receive slots already granted to chunks.");
	sample_u64(x, NULL, 0, i->granted);
	family(x, "pdkv_admission_waiting_requests", "gauge", "Requests waiting for admission.");
	sample_u64(x, NULL, 0, i->waiting);
	family(x, "pdkv_admission_oldest_wait_seconds", "gauge",
	       "How long the oldest waiting request has waited (0: none).");
	sample_ns(x, NULL, v->oldest_wait_ns);
}

/* what: 0 up, 1 lanes, 2 bytes, 3 chunks. */
static void peer_family(struct expo *x, const struct pd_stats *s, int what)
{
	static const char *const name[] = { "pdkv_peer_up", "pdkv_peer_lanes", "pdkv_peer_bytes",
					    "pdkv_peer_chunks" };
	static const char *const help[] = {
		"1 when the peer broker is up.", "Data connections up to the peer.",
		"Payload bytes exchanged with the peer.", "Chunks exchanged with the peer." };

	family(x, name[what], what < 2 ? "gauge" : "counter", help[what]);
	for (uint32_t i = 0; i < s->npeers && i < PD_STATS_MAX_PEERS; i++) {
		const struct pd_stat_peer *p = &s->peer[i];
		struct pd_expo_label l[3] = { { "peer", p->name }, { "ctrl", p->ctrl },
					      { "dir", "tx" } };

		if (what < 2) {
			sample_u64(x, l, 2, what == 0 ? p->state == PD_PEER_UP : p->lanes);
			continue;
		}
		sample_u64(x, l, 3, what == 2 ? p->bytes_tx : p->chunks_tx);
		l[2].v = "rx";
		sample_u64(x, l, 3, what == 2 ? p->bytes_rx : p->chunks_rx);
	}
}

static void value_families(struct expo *x, const struct pd_expo_view *v)
{
	char name[NAME_LEN], help[NAME_LEN + 32];

	for (uint32_t i = 0; i < v->nvals; i++) {
		const struct pd_expo_val *e = &v->vals[i];
		int gauge = e->kind == PD_STAT_KIND_GAUGE;

		(void)snprintf(name, sizeof(name), "pdkv_%s", e->name);
		(void)snprintf(help, sizeof(help), "Broker %s %s.", gauge ? "gauge" : "counter",
			       e->name);
		family(x, name, gauge ? "gauge" : "counter", help);
		sample_u64(x, NULL, 0, e->v);
	}
}

static void hist_family(struct expo *x, const struct pd_stat_hist *h)
{
	char name[NAME_LEN], help[NAME_LEN + 32], le[32], cnt[24];
	struct pd_expo_label l = { "le", le };
	uint64_t cum = 0;

	(void)snprintf(name, sizeof(name), "pdkv_%s_seconds", h->name);
	(void)snprintf(help, sizeof(help), "Latency of %s, in seconds.", h->name);
	family(x, name, "histogram", help);
	for (uint32_t b = 0; b < PD_STATS_BUCKETS; b++) {
		uint64_t us = pd_stats_bucket_le_us(b);

		cum += h->bucket[b];
		if (us == UINT64_MAX)
			(void)snprintf(le, sizeof(le), "+Inf");
		else
			pd_expo_decimal(le, sizeof(le), us, 6);
		(void)snprintf(cnt, sizeof(cnt), "%" PRIu64, cum);
		sample(x, "_bucket", &l, 1, cnt);
	}
	sample_ns(x, "_sum", h->sum_ns);
	/* _count equals the +Inf bucket, as the format requires. */
	(void)snprintf(cnt, sizeof(cnt), "%" PRIu64, cum);
	sample(x, "_count", NULL, 0, cnt);
}

int pd_expo_write(const struct pd_expo_view *v, const struct pd_expo_writer *w)
{
	struct expo *x = calloc(1, sizeof(*x));
	const struct pd_stats *s = v->st;

	if (!x)
		return -ENOMEM;
	x->w = w;
	x->broker = v->broker ? v->broker : "";
	broker_families(x, v);
	pool_families(x, v);
	admission_families(x, v);
	for (int what = 0; s->npeers && what < 4; what++)
		peer_family(x, s, what);
	value_families(x, v);
	for (uint32_t i = 0; i < s->nhist && i < PD_STATS_MAX_HIST; i++)
		if (s->hist[i].name[0])
			hist_family(x, &s->hist[i]);
	free(x);
	return 0;
}
