/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_XPORT_PD_XPORT_H
#define PD_BROKER_XPORT_PD_XPORT_H

/*
 * The data-plane interface: how the broker talks to a transport, and the
 * only way it does. One table of operations, three transports (tcp, shm,
 * rdma) and a fourth implementation for tests that wraps any of them and
 * fails on purpose (pd_xport_fault_wrap()).
 *
 * The broker owns the choice (which transport for which peer, and why) and
 * every trust decision; a transport owns its connections and threads and
 * reports each transfer's end as a completion. Upward, a transport sees only
 * struct pd_xport_env: the arenas it moves between, a few settings, and the
 * receive-side checks (struct pd_xport_up), all of them the broker's.
 *
 * Threads: every operation is called from the broker's control thread.
 * The upcalls may be called from a transport's data threads.
 */
#include <stddef.h>
#include <stdint.h>

#include "pd_layout.h"
#include "pd_xfer.h"
#include "pd_xport_ids.h"


/* Writes of this transport land in our receive arena without our data
 * threads seeing them (shm copies, RDMA WRITEs): the PutDone is the only
 * sign, and its vetting needs to know the peer could write that way. */
#define PD_XPORT_F_UNSEEN 0x1u

#define PD_XPORT_ADDR_MAX 128u  /* an address in Hello, NUL included */
#define PD_XPORT_WHY_MAX  80u   /* a reason, for people */

/* The receive side: checks that stay the broker's (data threads call them). */
struct pd_xport_up {
	/* A connection presents token: 0 and the id it is known by from now on
	 * (*lane: the broker's, opaque to the transport, handed back to claim
	 * and landed), or -EACCES. id: the transport (an unseen one marks the
	 * peer as able to write). */
	int (*accept_peer)(void *ctx, uint64_t token, uint32_t id, uint32_t *lane);
	/* A write on connection lane into (slot, gen), len bytes: 0 and where
	 * the bytes go (at most *cap), or -EPERM (not granted so: another
	 * peer, session or generation, another length, written already). */
	int (*claim)(void *ctx, uint32_t lane, uint32_t slot, uint32_t gen, uint32_t len,
		     void **dst, uint64_t *cap);
	/* Those bytes are in place (status 0), or the write failed. */
	void (*landed)(void *ctx, uint32_t lane, uint32_t slot, uint32_t gen, uint32_t len,
		       int status);
};

/* What the broker lends a transport it creates. */
struct pd_xport_env {
	struct pd_shm *shm;            /* the segment: send (staging) and recv arenas */
	const char *name;              /* this broker's name */
	const char *data;              /* --data "host:port" ("[v6]:port") */
	const char *rdma_dev;          /* --rdma-dev, "" for the device of the data host */
	uint32_t threads;              /* --data-threads */
	uint32_t rdma_qps;             /* --rdma-qps */
	uint32_t queue_depth;          /* transfers a peer may have posted at once */
	uint64_t max_frame;            /* the slot size */
	const struct pd_xport_up *up;
	void *ctx;
};

/* The writes a peer may have out at once for a transport of default dflt
 * and most max: every write is one staging slot, so env->queue_depth (the
 * send slots) is never short, unless the transport takes fewer. */
static inline uint32_t pd_xport_queue_depth(const struct pd_xport_env *env, uint32_t dflt,
					    uint32_t max)
{
	uint32_t d = env->queue_depth > dflt ? env->queue_depth : dflt;

	return d < max ? d : max;
}

/* Our entry in Hello. */
struct pd_xport_offer {
	char addr[PD_XPORT_ADDR_MAX];  /* "" : not offered */
	uint32_t rdma_rkey;            /* rdma: the recv arena's key */
	uint64_t rdma_base;            /* rdma: the address of recv slot 0 */
};

/* What a transport needs of a peer's Hello to send to it. */
struct pd_xport_peer {
	const char *name;              /* its broker name */
	const char *addr;              /* its address for this transport, NULL: not offered */
	uint32_t same_host;            /* its host id is ours */
	uint64_t epoch;                /* its start */
	uint64_t slot_size;
	uint32_t recv_slots;
	uint32_t rdma_rkey;
	uint64_t rdma_base;
	uint64_t token;                /* ours: what our connections present to it */
};

struct pd_xport;

struct pd_xport_ops {
	const char *name;              /* as in --transport and Hello */
	uint32_t id;                   /* PD_XPORT_* */
	uint32_t flags;                /* PD_XPORT_F_* */
	/* Set it up (recv_side: listen for peers too): 0, or -errno and why. */
	int (*create)(const struct pd_xport_env *env, int recv_side, struct pd_xport **out,
		      char *why, size_t wlen);
	void (*destroy)(struct pd_xport *x);        /* NULL-safe; joins its threads */
	/* Our Hello entry (addr "" : not offered). */
	void (*offer)(const struct pd_xport *x, struct pd_xport_offer *o);
	/* May this peer write our arena through us this session without a
	 * connection we accept (shm: same host)? NULL: no. */
	int (*admits)(const struct pd_xport *x, const struct pd_xport_peer *p);
	/* Start sending to peer (its last session's connection is dropped
	 * first): 0, or -errno and why. Connections may come up later;
	 * transfers posted meanwhile wait for them. */
	int (*connect)(struct pd_xport *x, uint32_t peer, const struct pd_xport_peer *p, char *why,
		       size_t wlen);
	/* Stop sending to peer: posted transfers complete (-ECONNABORTED at worst). */
	void (*disconnect)(struct pd_xport *x, uint32_t peer);
	/* Connected (or connecting) to peer: transfers may be posted. */
	int (*ready)(const struct pd_xport *x, uint32_t peer);
	/* n transfers to peer, all or none: n accepted, or -errno. */
	int (*post)(struct pd_xport *x, uint32_t peer, const struct pd_xfer *v, uint32_t n);
	/* Up to max completions (peer ids the broker's). */
	int (*poll)(struct pd_xport *x, struct pd_cpl *c, uint32_t max);
	/* Readable while completions are pending. */
	int (*event_fd)(const struct pd_xport *x);
	/* Connections open to peer (for pdctl; 0 when none). */
	uint32_t (*lanes)(const struct pd_xport *x, uint32_t peer);
	/* Close the connections we accepted whose lane stale() says is stale
	 * (its session ended): nothing more of them lands. NULL: no such
	 * connections (the transport fences otherwise, or keeps none). */
	void (*fence)(struct pd_xport *x, int (*stale)(void *ctx, uint32_t lane), void *ctx);
	/* Every tick: notice peers that died unannounced. NULL: nothing to do. */
	void (*tick)(struct pd_xport *x);
	/* Append "name value" counters (for the statistics region); NULL: none.
	 * @return counters written, at most max. */
	uint32_t (*counters)(const struct pd_xport *x, const char **names, uint64_t *values,
			     uint32_t max);
};

/* In a counters() implementation: one field of an X-macro list of a stats
 * struct st, as names[n] / values[n] (n < max counted up). */
#define PD_XPORT_COUNTER(f)             \
	if (n < max) {                  \
		names[n] = #f;          \
		values[n++] = st.f;     \
	}

/* Every transport embeds this first. */
struct pd_xport {
	const struct pd_xport_ops *ops;
};

/* The table of transport id (PD_XPORT_*), or NULL. */
const struct pd_xport_ops *pd_xport_ops_of(uint32_t id);

extern const struct pd_xport_ops pd_xport_tcp_ops;
extern const struct pd_xport_ops pd_xport_shm_ops;
extern const struct pd_xport_ops pd_xport_rdma_ops;

/*
 * Tests: faults by spec, a comma-separated list of
 *   fail_nth=N     the Nth transfer posted is refused (post: -EIO)
 *   short_nth=N    the Nth transfer goes out one byte short (a receiver must
 *                  refuse it: the granted length is the one that counts)
 *   delay_us=N     every post waits N us first (a slow data plane)
 * (N >= 1; counted over every peer). inner is wrapped: it keeps its name,
 * id and flags, and is destroyed with the wrapper. The broker wraps every
 * transport it creates when PDKV_XPORT_FAULT holds a spec.
 * @return 0; -EINVAL a bad spec (inner untouched); -ENOMEM.
 */
int pd_xport_fault_wrap(struct pd_xport *inner, const char *spec, struct pd_xport **out);

#endif
