/* SPDX-License-Identifier: MIT */
#ifndef PD_SHM_PD_STATS_H
#define PD_SHM_PD_STATS_H

/*
 * The statistics region of a broker's segment (PD_REGION_STATS): what an
 * operator's tools (pdctl status/metrics, pdbench) read without talking to
 * the broker, so they work even when its loop is stuck.
 *
 * Single writer: the broker's control thread, which republishes everything
 * on every tick (100 ms) and after each burst of work. Readers take a
 * consistent copy with pd_stats_snapshot() (a sequence lock: the writer
 * makes seq odd, writes, makes it even again). Self-describing: values and
 * histograms carry their names, so a reader needs no list of its own.
 *
 * Names: "[a-z0-9_.]+", e.g. "rx.ready", "ctrl.bad_msgpack". Kinds say
 * whether a value is a counter (only grows) or a gauge.
 */
#include <stddef.h>
#include <stdint.h>

#define PD_STATS_MAGIC      0x54415453u /* "STAT" */
#define PD_STATS_VERSION    2u         /* 2: peers' auth and refusal, ctrl_auth */
#define PD_STATS_NAME_MAX   47u         /* + NUL */
#define PD_STATS_MAX_VALUES 224u
#define PD_STATS_MAX_PEERS  64u
#define PD_STATS_MAX_HIST   4u
/* Bucket i (0..PD_STATS_BUCKETS-2) counts samples <= 2^i microseconds; the
 * last bucket counts the rest (+Inf). 2^26 us is about 67 s. */
#define PD_STATS_BUCKETS    28u

#define PD_STAT_KIND_COUNTER 1u
#define PD_STAT_KIND_GAUGE   2u

/* Histogram ids (fixed positions; names are in the region too). */
#define PD_HIST_ADMIT_WAIT 0u /* receiver: AllocRequest -> admitted */
#define PD_HIST_TRANSFER   1u /* sender: first AllocRequest -> last chunk written */
#define PD_HIST_REQUEST    2u /* sender: first batch from the agent -> PUT_DONE/FAILED */

/* Peer states (as pd_ctrl reports them). */
#define PD_PEER_NEW  1u
#define PD_PEER_UP   2u
#define PD_PEER_DOWN 3u

struct pd_stat_value {
	char name[PD_STATS_NAME_MAX + 1];
	uint32_t kind;                 /* PD_STAT_KIND_* */
	uint32_t _pad;
	uint64_t v;
	uint64_t _rsvd;
};
_Static_assert(sizeof(struct pd_stat_value) == 72, "stats ABI");

struct pd_stat_hist {
	char name[PD_STATS_NAME_MAX + 1];
	uint64_t count;
	uint64_t sum_ns;
	uint64_t bucket[PD_STATS_BUCKETS]; /* not cumulative */
};

struct pd_stat_peer {
	char name[64];                 /* the peer broker's name ("" before its Hello) */
	char ctrl[128];                /* its control endpoint, as dialled or announced */
	char transport[16];            /* "tcp", "rdma", "shm", or "" when none yet */
	char why[96];                  /* why this transport (e.g. a fallback's reason) */
	uint32_t state;                /* PD_PEER_* */
	uint32_t lanes;                /* data lanes this broker opened to it (0: none, e.g.
					* it only sends to us) */
	uint64_t epoch;                /* the peer's epoch, 0 before its Hello */
	uint64_t last_seen_ns;         /* CLOCK_REALTIME of the last message from it */
	uint64_t bytes_tx, bytes_rx;
	uint64_t chunks_tx, chunks_rx;
	uint64_t requests_live;        /* this broker's live requests with that peer */
	char auth[32];                 /* "curve <key id>" when its key is proven, else "none" */
	char error[96];                /* why it refused our Hello ("" none) */
};

/* Broker-wide facts that are not counters. */
struct pd_stat_info {
	char ctrl[128];                /* --ctrl */
	char data[64];                 /* data listener, HOST:PORT as bound */
	char transport[32];            /* --transport */
	uint64_t start_ns;             /* CLOCK_REALTIME at start */
	uint64_t epoch;
	int32_t pid;
	uint32_t send_slots, recv_slots;
	uint32_t send_used_hwm;        /* high-water marks of slots in use */
	uint32_t recv_used_hwm;
	uint32_t page_size;            /* the staging arenas' pages: 4096 or 2 MiB */
	uint64_t slot_size;
	/* admission (receiver) */
	uint64_t reserved;             /* slots promised to admitted requests, not yet granted */
	uint64_t granted;              /* slots holding chunks (granted or written) */
	uint32_t waiting;              /* requests waiting for admission */
	uint32_t _pad2;
	uint64_t oldest_wait_ns;       /* CLOCK_MONOTONIC start of the oldest wait, 0: none */
	uint64_t now_mono_ns;          /* CLOCK_MONOTONIC at publish (to age oldest_wait_ns) */
	char ctrl_auth[64];            /* "unauthenticated", or "curve, key <id>, <n> peer keys" */
};

struct pd_stats {
	uint32_t magic;                /* PD_STATS_MAGIC once initialised */
	uint32_t version;
	uint64_t seq;                  /* sequence lock (atomic access only) */
	uint64_t publish_ns;           /* CLOCK_REALTIME of the last publish: a stuck loop shows */
	uint32_t nvalues, npeers, nhist;
	uint32_t _pad;
	struct pd_stat_info info;
	struct pd_stat_hist hist[PD_STATS_MAX_HIST];
	struct pd_stat_peer peer[PD_STATS_MAX_PEERS];
	struct pd_stat_value val[PD_STATS_MAX_VALUES];
};

/* Upper bound (microseconds) of bucket i; UINT64_MAX for the last. */
uint64_t pd_stats_bucket_le_us(uint32_t i);
/* The bucket a sample of ns nanoseconds falls in. */
uint32_t pd_stats_bucket_of(uint64_t ns);
/* Add one sample to h. */
void pd_stats_hist_add(struct pd_stat_hist *h, uint64_t ns);
/* The q-quantile (0..1) of h in nanoseconds, from the buckets' upper
 * bounds (an overestimate by at most 2x); 0 when h is empty. */
uint64_t pd_stats_hist_quantile_ns(const struct pd_stat_hist *h, double q);

/* Writer: initialise a zeroed region. */
void pd_stats_init(struct pd_stats *s);
/* Writer: open and close an update (readers retry meanwhile). */
void pd_stats_write_begin(struct pd_stats *s);
void pd_stats_write_end(struct pd_stats *s);
/* Writer, between begin and end: set value i (name copied, truncated). */
void pd_stats_set(struct pd_stats *s, uint32_t i, const char *name, uint32_t kind, uint64_t v);

/**
 * Reader: a consistent copy of the live region (which may be read-only).
 * @return 0; -EAGAIN the writer kept changing it (retried ~1 ms);
 *         -EPROTO not a stats region (magic, version, counts out of range).
 */
int pd_stats_snapshot(const struct pd_stats *live, struct pd_stats *copy);

/* Reader: make any copy safe to print (counts clamped, strings
 * terminated), e.g. one taken while the writer was stuck mid-update. */
void pd_stats_sanitize(struct pd_stats *c);

/* Reader: the value called name in a snapshot, or -ENOENT. */
int pd_stats_find(const struct pd_stats *s, const char *name, uint64_t *v);

#endif
