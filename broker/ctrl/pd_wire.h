/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_WIRE_H
#define PD_BROKER_PD_WIRE_H

/*
 * Broker <-> broker control messages: msgpack maps
 * with a "type" field naming the message; fields are found by name, unknown
 * fields are ignored, a missing or mistyped required field is -EPROTO with
 * a reason. Field names of LMCache's PD backend messages are kept, and the
 * shapes LMCache's msgspec encoder produces decode as they are.
 *
 * Hard bounds are checked on the raw bytes before anything is allocated:
 * message <= PD_WIRE_MAX_MSG bytes, key <= PD_KEY_MAX bytes, req_id <=
 * PD_REQ_ID_MAX bytes, <= PD_WIRE_MAX_KEYS keys (or indexes) per message,
 * nesting <= PD_WIRE_MAX_DEPTH.
 *
 * A decoded message borrows from its struct pd_wire_dec: byte strings point
 * into the decoder's storage and stay valid until the next pd_wire_decode()
 * or pd_wire_dec_fini() on that decoder.
 *
 * Wire fields, in the order the encoder emits them ("type" always first,
 * then LMCache's fields in LMCache's declaration order, then pdkv's own).
 * R = required; o = optional (default in brackets; the encoder omits it
 * when it holds the default, or when its has_* flag is 0); L = LMCache
 * field pdkv ignores on input and sends as a type-correct placeholder
 * (fmt 0, shape [], dtype "", last_chunk_toks 0) so msgspec accepts it.
 * Byte strings accept msgpack str or bin; booleans must be msgpack bool.
 *
 *   Hello, HelloAck  R proto (>= 1), name (1..NAME_MAX), epoch,
 *                    host_id (1..NAME_MAX), slot_size (>= 1), recv_slots,
 *                    xports (1..MAX_XPORTS names), addrs (one per xport,
 *                    0..ADDR_MAX); o rdma_gid (bin, 0 or 16 bytes),
 *                    rdma_qpn (24 bits), rdma_rkey, rdma_base [0];
 *                    o Hello only: resume [0]; HelloAck only: data_secret [0]
 *                    (u64 each; the other message's is unknown, so ignored)
 *   AllocRequest     R keys (0..MAX_KEYS, each 1..PD_KEY_MAX); L fmt, shape,
 *                    dtype, last_chunk_toks; R req_id (0..PD_REQ_ID_MAX),
 *                    is_last_batch, total_chunks; o seq (has_seq),
 *                    lens (NULL; one per key), world_size [1], rank [0]
 *                    (rank < world_size)
 *   AllocResponse    R remote_indexes (-1..INT32_MAX), already_sent_indexes
 *                    (0..MAX_KEYS-1); o seq (has_seq), err [0]
 *                    (-4095..0), errmsg [""] (0..ADDR_MAX), remote_gens
 *                    (NULL; one per remote index)
 *   PutDone          R seq, req_id, rank, indexes (0..INT32_MAX); o gens
 *                    (NULL; one per index), keys (NULL; one per index, each
 *                    1..PD_KEY_MAX) and lens (NULL; one per index): with
 *                    keys, the indexes are slots granted with the admission
 *                    and the PutDone binds each key (of that length) to its
 *                    slot as it commits it
 *   CancelNotif      R req_id, keys; o rank [0]
 *   ProxyNotif       R req_id; o status (-4095..0), rank, world_size (>= 1),
 *                    chunks, bytes: all present when has_ext (set when any
 *                    of them is; the absent ones take 0, world_size 1);
 *                    rank < world_size
 *   Heartbeat        R epoch, time_ns
 *   Reserve          R seq, req_id (1..PD_REQ_ID_MAX), total_chunks (>= 1),
 *                    world_size (>= 1), rank (rank < world_size); o grants
 *                    [0] (0..total_chunks, at most MAX_KEYS): answered by an
 *                    AllocResponse of that seq once the request is admitted
 *                    (err 0) or refused (err < 0); admitted, it carries up
 *                    to grants slots (with their remote_gens) for the rank's
 *                    first chunks, none when grants is 0 (or the receiver
 *                    predates them)
 *   Error            R code (-4095..-1); o seq [0], text [""] (0..ADDR_MAX)
 *
 * A known field given twice is -EPROTO (a peer must not be able to make two
 * decoders disagree); unknown fields, whatever their shape, are skipped.
 */
#include <stddef.h>
#include <stdint.h>

#include <pdkv/types.h>

#define PD_WIRE_PROTO       4u       /* 2: Reserve; 3: data_secret, resume, generations;
				      * 4: grants with admission (Reserve's grants, PutDone's keys) */
#define PD_WIRE_MAX_MSG     (4u << 20)
#define PD_WIRE_MAX_KEYS    4096u
#define PD_WIRE_MAX_DEPTH   8u       /* containers nested, the top-level map counting 1 */
#define PD_WIRE_MAX_OBJS    32768u   /* msgpack objects per message: bounds the decoder's zone */
#define PD_WIRE_MAX_XPORTS  4u
#define PD_WIRE_NAME_MAX    63u   /* broker name, host id */
#define PD_WIRE_ADDR_MAX    255u  /* transport address, error text */

/* Message types (uint32_t on purpose: never an enum in a wire struct). */
#define PD_MSG_HELLO      1u  /* "Hello" */
#define PD_MSG_HELLO_ACK  2u  /* "HelloAck" */
#define PD_MSG_ALLOC_REQ  3u  /* "AllocRequest" (LMCache) */
#define PD_MSG_ALLOC_RESP 4u  /* "AllocResponse" (LMCache) */
#define PD_MSG_PUT_DONE   5u  /* "PutDone" */
#define PD_MSG_CANCEL     6u  /* "CancelNotif" (LMCache) */
#define PD_MSG_PROXY      7u  /* "ProxyNotif" (LMCache) */
#define PD_MSG_HEARTBEAT  8u  /* "Heartbeat" */
#define PD_MSG_ERROR      9u  /* "Error" */
#define PD_MSG_RESERVE    10u /* "Reserve" (pdkv): admission before any batch */
#define PD_MSG_MAX        10u

/* A byte string borrowed from a decoder or a caller (not NUL-terminated). */
struct pd_bytes {
	const uint8_t *p;
	uint32_t len;
};

/* Hello and HelloAck. */
struct pd_msg_hello {
	uint32_t proto;
	struct pd_bytes name;      /* broker name */
	uint64_t epoch;            /* bumped at each broker start */
	struct pd_bytes host_id;   /* same host id: the shm transport is possible */
	uint64_t slot_size;
	uint32_t recv_slots;
	uint32_t nxports;
	struct pd_bytes xport[PD_WIRE_MAX_XPORTS];  /* "rdma", "tcp", "shm" by preference */
	struct pd_bytes addr[PD_WIRE_MAX_XPORTS];   /* address of each */
	/* RDMA rendezvous (optional: present when "rdma" is offered). */
	struct pd_bytes rdma_gid;  /* 16 bytes */
	uint32_t rdma_qpn;
	uint32_t rdma_rkey;
	uint64_t rdma_base;
	/* Trust (0: absent). In a HelloAck only: the random secret the data
	 * connections of the broker that said Hello present to us this
	 * session. In a Hello only: the secret of our last session with the
	 * broker we say it to, proving that a new DEALER is the same broker
	 * (a same-epoch reset; see pd_ctrl.h). */
	uint64_t data_secret;
	uint64_t resume;
};

/* AllocRequest. LMCache's fmt, shape, dtype and last_chunk_toks are
 * accepted and ignored. */
struct pd_msg_alloc_req {
	uint64_t seq;              /* valid when has_seq (pdkv senders); LMCache has none */
	uint32_t has_seq;
	struct pd_bytes req_id;    /* may be empty: a one-batch request of its own */
	uint32_t nkeys;
	const struct pd_bytes *keys;
	const uint32_t *lens;      /* NULL when absent (LMCache); else nkeys entries */
	uint32_t total_chunks;     /* chunks this rank declares for the request */
	uint32_t world_size;       /* sender ranks; 1 when absent */
	uint32_t rank;             /* 0 when absent */
	uint32_t is_last_batch;    /* 0 or 1 */
};

/* AllocResponse: one remote index per key, -1 = failed; already_sent lists
 * positions (into the request's keys) that were deduplicated. */
struct pd_msg_alloc_resp {
	uint64_t seq;
	uint32_t has_seq;
	uint32_t n;
	const int32_t *remote_indexes;
	const uint32_t *remote_gens; /* NULL when absent (LMCache); else n: each slot's
				      * generation, which its writes must carry */
	uint32_t nalready;
	const int32_t *already_sent_indexes;
	int32_t err;               /* 0, or a negative errno */
	struct pd_bytes errmsg;    /* may be empty */
};

/* PutDone: the data of these remote indexes is in place. */
struct pd_msg_put_done {
	uint64_t seq;
	struct pd_bytes req_id;
	uint32_t rank;
	uint32_t n;
	const int32_t *indexes;
	const uint32_t *gens;      /* NULL when absent; else n: the generation each was granted at */
	const struct pd_bytes *keys; /* NULL when absent; else n: the key each slot now holds
				      * (slots granted with the admission, keyless until now) */
	const uint32_t *lens;      /* NULL when absent; else n: each chunk's length */
};

/* CancelNotif (LMCache: req_id, keys). */
struct pd_msg_cancel {
	struct pd_bytes req_id;
	uint32_t rank;
	uint32_t nkeys;
	const struct pd_bytes *keys;
};

/* ProxyNotif (LMCache: req_id; the rest are pdkv extensions, present when
 * has_ext). */
struct pd_msg_proxy {
	struct pd_bytes req_id;
	uint32_t has_ext;
	int32_t status;            /* 0 ok, or a negative errno */
	uint32_t rank;
	uint32_t world_size;
	uint32_t chunks;
	uint64_t bytes;
};

struct pd_msg_heartbeat {
	uint64_t epoch;
	uint64_t time_ns;
	uint32_t bye;              /* 1: the sender is shutting down (present when has_bye) */
	uint32_t has_bye;
};

/* Reserve: a sender rank declares a request before staging any of it; the
 * receiver admits the whole request (gang: total_chunks x world_size) on
 * the first rank's Reserve, later ranks join it. */
struct pd_msg_reserve {
	uint64_t seq;
	struct pd_bytes req_id;
	uint32_t total_chunks;     /* this rank's chunks */
	uint32_t world_size;
	uint32_t rank;
	uint32_t grants;           /* slots the rank can use with the admission answer (0: none) */
};

/* Error reply to a message that could not be handled. */
struct pd_msg_error {
	uint64_t seq;              /* of the offending message, when it had one */
	int32_t code;              /* negative errno */
	struct pd_bytes text;
};

struct pd_msg {
	uint32_t type;             /* PD_MSG_* */
	union {
		struct pd_msg_hello hello;       /* HELLO and HELLO_ACK */
		struct pd_msg_alloc_req alloc_req;
		struct pd_msg_alloc_resp alloc_resp;
		struct pd_msg_put_done put_done;
		struct pd_msg_cancel cancel;
		struct pd_msg_proxy proxy;
		struct pd_msg_heartbeat heartbeat;
		struct pd_msg_error error;
		struct pd_msg_reserve reserve;
	} u;
};

/* Growable output buffer for encoding. */
struct pd_wire_buf {
	uint8_t *data;
	size_t len;
	size_t cap;
};

void pd_wire_buf_init(struct pd_wire_buf *b);
void pd_wire_buf_fini(struct pd_wire_buf *b);

/**
 * Encode m (replacing b's contents; b->len is 0 after a failure). Checks
 * the same bounds as the decoder, so pdkv never sends what it would refuse.
 * @param m  borrowed; its arrays hold as many entries as its counts say.
 * @param b  borrowed; initialised with pd_wire_buf_init(); grown as needed.
 * @return 0; -EINVAL NULL argument, bad type or a bound exceeded; -EMSGSIZE
 *         the encoding would exceed PD_WIRE_MAX_MSG; -ENOMEM.
 * Thread-safety: none needed beyond exclusive use of b.
 */
int pd_wire_encode(const struct pd_msg *m, struct pd_wire_buf *b);

/* Decoder state; the decoded message borrows from it. */
struct pd_wire_dec {
	void *priv;
};

void pd_wire_dec_init(struct pd_wire_dec *d);
/* Free what the last decode holds. Safe to call more than once. */
void pd_wire_dec_fini(struct pd_wire_dec *d);

/**
 * Decode one message from buf (len bytes, borrowed: copied into d, so buf
 * may be freed on return). Releases what d held from a previous decode.
 * The raw bytes are pre-scanned (size, truncation, trailing bytes, depth,
 * container sizes, object count) before msgpack-c allocates anything.
 * @param err  optional (may be NULL): on -EPROTO/-EMSGSIZE, why.
 * @return 0; -EINVAL NULL d, buf or out; -EPROTO empty, malformed, unknown
 *         type, missing or mistyped required field, or a bound exceeded
 *         (err says which); -EMSGSIZE len > PD_WIRE_MAX_MSG; -ENOMEM.
 *         On failure *out is zeroed.
 * Thread-safety: one decoder per thread.
 */
int pd_wire_decode(struct pd_wire_dec *d, const void *buf, size_t len, struct pd_msg *out,
		   char *err, size_t errlen);

/* "AllocRequest" etc., or NULL for an unknown type. */
const char *pd_wire_type_name(uint32_t type);

/* Structural pre-scan of raw msgpack before msgpack-c sees it (no
 * allocation): sizes, truncation, trailing bytes, depth and counts within
 * the PD_WIRE_MAX_* bounds. 0 or -EPROTO/-EMSGSIZE (err says why). */
int pd_wire_scan(const uint8_t *p, size_t len, char *err, size_t errlen);

#endif
