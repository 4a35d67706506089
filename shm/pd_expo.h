/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_EXPO_H
#define PD_SHM_PD_EXPO_H

/*
 * A broker's statistics as Prometheus metric families: the one list that
 * `pdctl metrics` (text or JSON) and pdbroker's --metrics-listen (text over
 * HTTP) both write, so the two never disagree on a name, a type or a label.
 *
 *   pdkv_broker_info{pid,epoch[,state]} 1   pdkv_broker_start_time_seconds
 *   pdkv_stats_age_seconds                  pdkv_agents_attached
 *   pdkv_pool_slots{pool,state}             pdkv_pool_capacity_slots{pool}
 *   pdkv_pool_high_water_slots{pool}
 *   pdkv_admission_reserved_slots, _granted_slots, _waiting_requests,
 *     _oldest_wait_seconds                  (a broker with receive slots)
 *   pdkv_peer_up, pdkv_peer_lanes{peer,ctrl}
 *   pdkv_peer_bytes, pdkv_peer_chunks{peer,ctrl,dir="tx"|"rx"} (counters)
 *   pdkv_<value>   every named value, each byte outside [A-Za-z0-9_:] as '_'
 *                  (rx.admitted -> pdkv_rx_admitted), a counter or a gauge
 *                  as the region says
 *   pdkv_<histogram>_seconds   _bucket{le} (cumulative, le in seconds,
 *                  "+Inf" last), _sum, _count
 *
 * Every sample's first label is broker="<name>". Names are sanitised here;
 * a family whose name was already written is dropped with its samples (the
 * format allows each once). Escaping label values and HELP text is the
 * writer's: this file decides what is said, a writer how.
 */
#include <stddef.h>
#include <stdint.h>

struct pd_stats;

struct pd_expo_label {
	const char *k, *v;
};

struct pd_expo_writer {
	void *ctx;
	/* A family: name valid and never repeated, type "counter", "gauge"
	 * or "histogram", help plain text. */
	void (*family)(void *ctx, const char *name, const char *type, const char *help);
	/* A sample of the last family: its full name (with _bucket, _sum or
	 * _count for histograms), nl labels, broker first; the value as text
	 * (a decimal number, or "+Inf"). */
	void (*sample)(void *ctx, const char *name, const struct pd_expo_label *l, uint32_t nl,
		       const char *value);
};

struct pd_expo_pool {
	uint32_t present;             /* 0: the broker has no such pool (no samples) */
	uint32_t slots, free, used, hwm;
};

/* One value to write as its own family (a name from the region or a
 * reader's list; borrowed). */
struct pd_expo_val {
	const char *name;
	uint32_t kind;                /* PD_STAT_KIND_* */
	uint64_t v;
};

/* What is written; the caller reads it from wherever it has it. */
struct pd_expo_view {
	const char *broker;           /* every sample's broker label */
	const char *state;            /* pdkv_broker_info's state label; NULL: none */
	int32_t pid;
	uint64_t epoch;
	uint64_t start_ns;            /* CLOCK_REALTIME */
	uint64_t age_ns;              /* since the statistics were published (or the start) */
	uint64_t agents;
	struct pd_expo_pool send, recv;
	uint64_t oldest_wait_ns;      /* how long the oldest admission wait lasts, 0: none */
	const struct pd_stats *st;    /* a consistent or sanitised copy: admission, peers,
				       * histograms */
	const struct pd_expo_val *vals; /* the values, in order */
	uint32_t nvals;
};

/**
 * Every family of v, in the order above, through w.
 * @return 0; -ENOMEM (nothing was written).
 */
int pd_expo_write(const struct pd_expo_view *v, const struct pd_expo_writer *w);

/* v / 10^digits as an exact decimal, trailing zeros dropped ("1.5", "2"). */
void pd_expo_decimal(char *buf, size_t len, uint64_t v, unsigned int digits);

#endif
