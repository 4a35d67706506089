/* SPDX-License-Identifier: MIT */
/*
 * pdctl status | watch: what the segment says, read-only. The sections
 * pick values by name when present; "counters" shows every value, so new
 * ones appear without a pdctl change.
 */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "pd_time.h"
#include "pdctl.h"

static volatile sig_atomic_t stop_watch;

static int has_prefix(const char *s, const char *p)
{
	return strncmp(s, p, strlen(p)) == 0;
}

int pdctl_val_is_request(const struct pd_expo_val *v)
{
	return v->kind == PD_STAT_KIND_GAUGE &&
	       (has_prefix(v->name, "rx.") || has_prefix(v->name, "tx."));
}

int pdctl_val_is_moved(const struct pd_expo_val *v)
{
	return v->kind == PD_STAT_KIND_COUNTER &&
	       (strstr(v->name, "bytes") || strstr(v->name, "chunks"));
}

int pdctl_val_is_error(const struct pd_expo_val *v)
{
	static const char *const causes[] = { "bad", "err", "reject", "refused",
					      "timed_out", "fail" };

	if (v->kind != PD_STAT_KIND_COUNTER || v->v == 0)
		return 0;
	for (size_t i = 0; i < PD_ARRAY_SIZE(causes); i++)
		if (strstr(v->name, causes[i]))
			return 1;
	return 0;
}

uint64_t pdctl_oldest_wait_ns(const struct pdctl_snap *s)
{
	uint64_t since = s->st->info.oldest_wait_ns;

	if (since == 0 || s->st->info.waiting == 0 || s->now_mono_ns <= since)
		return 0;
	return s->now_mono_ns - since;
}

double pdctl_oldest_wait_s(const struct pdctl_snap *s)
{
	return (double)pdctl_oldest_wait_ns(s) / 1e9;
}

const char *pdctl_stale_warning(const struct pdctl_snap *s, char *buf, size_t len)
{
	double age = (double)s->stale_ns / 1e9;

	if (s->stale_ns <= PDCTL_STALE_NS)
		return NULL;
	if (s->published)
		(void)snprintf(buf, len, "the broker has not published statistics for %.0f s: "
			       "its loop may be stuck", age);
	else
		(void)snprintf(buf, len, "the broker has not published statistics in its %.0f s "
			       "of uptime: its loop may be stuck (or it predates the statistics "
			       "region); showing the header's counters", age);
	return buf;
}

static void fmt_dur(char *buf, size_t len, double s)
{
	if (s < 1e-3)
		(void)snprintf(buf, len, "%.0f us", s * 1e6);
	else if (s < 1)
		(void)snprintf(buf, len, "%.1f ms", s * 1e3);
	else if (s < 120)
		(void)snprintf(buf, len, "%.1f s", s);
	else if (s < 3 * 3600)
		(void)snprintf(buf, len, "%" PRIu64 "m%02" PRIu64 "s", (uint64_t)s / 60,
			       (uint64_t)s % 60);
	else
		(void)snprintf(buf, len, "%.1f h", s / 3600);
}

static void fmt_bytes(char *buf, size_t len, uint64_t v)
{
	static const char *const unit[] = { "B", "KiB", "MiB", "GiB", "TiB", "PiB" };
	double d = (double)v;
	size_t u = 0;

	while (d >= 1024 && u + 1 < PD_ARRAY_SIZE(unit)) {
		d /= 1024;
		u++;
	}
	(void)snprintf(buf, len, u ? "%.1f %s" : "%.0f %s", d, unit[u]);
}

static void print_header(const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;
	double up = s->now_ns > s->start_ns ? (double)(s->now_ns - s->start_ns) / 1e9 : 0;
	char d[32], z[32], pg[32];

	fmt_dur(d, sizeof(d), up);
	printf("broker %s  pid %d  epoch %" PRIu64 "  state %s  up %s\n", s->name, s->pid,
	       s->epoch, pd_segment_state_name(s->state), d);
	if (!s->published)
		return;
	fmt_bytes(z, sizeof(z), i->slot_size);
	fmt_bytes(pg, sizeof(pg), i->page_size);
	printf("  ctrl %s  data %s  transport %s  slot size %s  pages %s\n",
	       i->ctrl[0] ? i->ctrl : "-", i->data[0] ? i->data : "-",
	       i->transport[0] ? i->transport : "-", z, i->page_size ? pg : "-");
	printf("  control plane: %s\n", i->ctrl_auth[0] ? i->ctrl_auth : "unauthenticated");
}

static void print_pool(const char *name, const struct pdctl_pool *p)
{
	if (!p->present)
		printf("  %-6s %8s\n", name, "none");
	else if (p->pools > 1)
		printf("  %-6s %8u %8u %8u %8u  (%u pools of %u, one per sender)\n", name,
		       p->slots, p->used, p->free, p->hwm, p->pools, p->slots / p->pools);
	else
		printf("  %-6s %8u %8u %8u %8u\n", name, p->slots, p->used, p->free, p->hwm);
}

static void print_pools(const struct pdctl_snap *s)
{
	printf("%-9s%8s %8s %8s %8s\n", "pools:", "slots", "used", "free", "hwm");
	print_pool("send", &s->send);
	print_pool("recv", &s->recv);
}

static void print_admission(const struct pdctl_snap *s)
{
	const struct pd_stat_info *i = &s->st->info;
	char d[32];

	if (!s->recv.present) {
		printf("admission: none (no recv pool)\n");
		return;
	}
	printf("admission: %" PRIu64 " of %u recv slots reserved, %" PRIu64 " granted; %u "
	       "waiting", i->reserved, s->recv.slots, i->granted, i->waiting);
	if (i->waiting) {
		fmt_dur(d, sizeof(d), pdctl_oldest_wait_s(s));
		printf(" (oldest for %s)", d);
	}
	(void)fputc('\n', stdout);
}

/* One "  name  value" line per value that filter picks; "none" if none. */
static void print_vals(const struct pdctl_snap *s, const char *title,
		       int (*filter)(const struct pd_expo_val *v))
{
	int any = 0;
	char h[32];

	printf("%s:", title);
	for (uint32_t i = 0; i < s->nvals; i++) {
		const struct pd_expo_val *v = &s->vals[i];

		if (filter && !filter(v))
			continue;
		printf("\n  %-40s %20" PRIu64, v->name, v->v);
		any = 1;
		if (strstr(v->name, "bytes") && v->kind == PD_STAT_KIND_COUNTER && v->v >= 1024) {
			fmt_bytes(h, sizeof(h), v->v);
			printf("  (%s)", h);
		}
		if (!filter && v->kind == PD_STAT_KIND_GAUGE)
			printf("  gauge");
	}
	printf("%s\n", any ? "" : " none");
}

static void print_peer(const struct pdctl_snap *s, const struct pd_stat_peer *p)
{
	char tx[32], rx[32], seen[32];

	fmt_bytes(tx, sizeof(tx), p->bytes_tx);
	fmt_bytes(rx, sizeof(rx), p->bytes_rx);
	if (p->last_seen_ns && s->now_ns > p->last_seen_ns)
		fmt_dur(seen, sizeof(seen), (double)(s->now_ns - p->last_seen_ns) / 1e9);
	else
		(void)snprintf(seen, sizeof(seen), "%s", p->last_seen_ns ? "now" : "never");
	printf("  %s (%s): %s, transport %s", p->name[0] ? p->name : "?", p->ctrl,
	       pdctl_peer_state_name(p->state), p->transport[0] ? p->transport : "none");
	if (p->why[0])
		printf(" [%s]", p->why);
	printf(", auth %s", p->auth[0] ? p->auth : "none");
	if (p->error[0])
		printf(", refused: %s", p->error);
	printf(", %u lane%s, sent %s in %" PRIu64 " chunks, received %s in %" PRIu64
	       " chunks, %" PRIu64 " live requests, last seen %s%s\n", p->lanes,
	       p->lanes == 1 ? "" : "s", tx, p->chunks_tx, rx, p->chunks_rx, p->requests_live,
	       seen, strcmp(seen, "now") && strcmp(seen, "never") ? " ago" : "");
}

static void print_hists(const struct pdctl_snap *s)
{
	int any = 0;

	printf("latency:");
	for (uint32_t i = 0; i < s->st->nhist; i++) {
		const struct pd_stat_hist *h = &s->st->hist[i];
		char mean[32], p50[32], p99[32];

		if (!h->name[0])
			continue;
		printf("\n  %-12s %8" PRIu64 " samples", h->name, h->count);
		any = 1;
		if (h->count == 0)
			continue;
		fmt_dur(mean, sizeof(mean), (double)h->sum_ns / (double)h->count / 1e9);
		fmt_dur(p50, sizeof(p50), (double)pd_stats_hist_quantile_ns(h, 0.5) / 1e9);
		fmt_dur(p99, sizeof(p99), (double)pd_stats_hist_quantile_ns(h, 0.99) / 1e9);
		printf("  mean %s  p50 <= %s  p99 <= %s", mean, p50, p99);
	}
	printf("%s\n", any ? "" : " none");
}

static void print_status(const struct pdctl_snap *s)
{
	char warn[256];

	if (pdctl_stale_warning(s, warn, sizeof(warn)))
		printf("WARNING: %s\n", warn);
	print_header(s);
	print_pools(s);
	print_admission(s);
	printf("agents attached: %u of %u\n", s->agents, s->max_agents);
	printf("peers:%s\n", s->st->npeers ? "" : " none");
	for (uint32_t i = 0; i < s->st->npeers; i++)
		print_peer(s, &s->st->peer[i]);
	print_vals(s, "requests", pdctl_val_is_request);
	print_vals(s, "moved", pdctl_val_is_moved);
	print_vals(s, "errors", pdctl_val_is_error);
	print_hists(s);
	print_vals(s, "counters", NULL);
}

/* One frame. pretty: JSON indentation (watch writes one line per frame). */
static int status_once(const struct pdctl_opts *o, int pretty)
{
	struct pdctl_snap s;
	int rc = pdctl_snap_take(o, &s);

	if (rc != PDCTL_EXIT_OK)
		return rc;
	if (o->json && pdctl_status_json(&s, pretty) < 0)
		rc = PDCTL_EXIT_FAIL;
	else if (!o->json)
		print_status(&s);
	pdctl_snap_free(&s);
	return pdctl_flush(rc);
}

int pdctl_cmd_status(const struct pdctl_opts *o)
{
	return status_once(o, 1);
}

static void on_sigint(int sig)
{
	(void)sig;
	stop_watch = 1;
}

/* Sleep ms, cut short by SIGINT. */
static void nap_ms(uint32_t ms)
{
	struct timespec left = pd_ns_to_ts((uint64_t)ms * PD_NS_PER_MS);

	while (!stop_watch && nanosleep(&left, &left) < 0 && errno == EINTR)
		;
}

int pdctl_cmd_watch(const struct pdctl_opts *o)
{
	struct sigaction sa = { .sa_handler = on_sigint }; /* no SA_RESTART: wakes the nap */
	int tty = isatty(STDOUT_FILENO) && !o->json;
	int rc = PDCTL_EXIT_OK;

	(void)sigemptyset(&sa.sa_mask);
	(void)sigaction(SIGINT, &sa, NULL);
	(void)sigaction(SIGTERM, &sa, NULL);
	for (uint32_t n = 0; !stop_watch && (o->count == 0 || n < o->count); n++) {
		if (n > 0)
			nap_ms(o->interval_ms);
		if (stop_watch)
			break;
		if (tty)
			(void)fputs("\033[H\033[2J", stdout); /* home, clear screen */
		else if (n > 0 && !o->json)
			(void)fputc('\n', stdout);
		rc = status_once(o, 0);
		if (rc != PDCTL_EXIT_OK)
			break;
	}
	return rc;
}
