/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_UNIT_WIRE_FIXTURE_H
#define PD_TESTS_UNIT_WIRE_FIXTURE_H

/*
 * Shared by test_wire.c and test_wire_golden.c: raw msgpack field tables
 * for every message (built by hand, independent of the encoder under
 * test), a map builder that can drop, swap or reorder fields, full
 * messages for round trips, and message equality.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "pd_wire.h"

#define FX_N(a) (sizeof(a) / sizeof((a)[0]))

/* Raw msgpack bytes. */
struct fx_raw {
	const char *p;
	size_t n;
};
#define FX_RAW(s) { (s), sizeof(s) - 1 }
#define FX_NONE   { NULL, 0 }

/* A field as a peer sends it: a valid value, and a value of a wrong type. */
struct fx_field {
	const char *name;
	struct fx_raw val;
	struct fx_raw bad;  /* FX_NONE: not type-checked (LMCache fields pdkv ignores) */
	bool req;
};

struct fx_msg {
	const char *type;
	uint32_t id;
	const struct fx_field *f;
	size_t n;
};

/* How fx_build() departs from the valid message. */
struct fx_edit {
	int omit;             /* field index left out, or -1 */
	int swap;             /* field index whose value is `with`, or -1 */
	struct fx_raw with;
	struct fx_raw extra;  /* raw key/value pairs appended */
	uint32_t nextra;      /* how many pairs `extra` holds */
	bool reverse;         /* fields in reverse order, "type" last */
};

static inline struct fx_edit fx_edit_none(void)
{
	struct fx_edit e = { .omit = -1, .swap = -1 };

	return e;
}

static inline const struct fx_msg *fx_msgs(size_t *n)
{
	static const struct fx_field hello[] = {
		{ "proto", FX_RAW("\x01"), FX_RAW("\xa1" "x"), true },
		{ "name", FX_RAW("\xa2" "b1"), FX_RAW("\x01"), true },
		{ "epoch", FX_RAW("\x07"), FX_RAW("\xa1" "x"), true },
		{ "host_id", FX_RAW("\xa2" "h1"), FX_RAW("\x05"), true },
		{ "slot_size", FX_RAW("\xcd\x10\x00"), FX_RAW("\xa1" "x"), true },
		{ "recv_slots", FX_RAW("\x10"), FX_RAW("\xc2"), true },
		{ "xports", FX_RAW("\x92\xa3" "tcp" "\xa4" "rdma"), FX_RAW("\xa3" "tcp"), true },
		{ "addrs", FX_RAW("\x92\xa4" "h:10" "\xa0"), FX_RAW("\x01"), true },
		{ "rdma_gid", FX_RAW("\xc4\x10" "0123456789abcdef"), FX_RAW("\x01"), false },
		{ "rdma_qpn", FX_RAW("\xcd\x01\x00"), FX_RAW("\xa1" "x"), false },
		{ "rdma_rkey", FX_RAW("\x2a"), FX_RAW("\xc3"), false },
		{ "rdma_base", FX_RAW("\xcf\x00\x00\x00\x01\x00\x00\x00\x00"), FX_RAW("\xa1" "x"),
		  false },
	};
	static const struct fx_field alloc_req[] = {
		{ "keys", FX_RAW("\x92\xa2" "k0" "\xa2" "k1"), FX_RAW("\x01"), true },
		{ "fmt", FX_RAW("\x01"), FX_NONE, false },
		{ "shape", FX_RAW("\x92\x02\x10"), FX_NONE, false },
		{ "dtype", FX_RAW("\xa8" "bfloat16"), FX_NONE, false },
		{ "last_chunk_toks", FX_RAW("\x07"), FX_NONE, false },
		{ "req_id", FX_RAW("\xa2" "r1"), FX_RAW("\x01"), true },
		{ "is_last_batch", FX_RAW("\xc3"), FX_RAW("\x01"), true },
		{ "total_chunks", FX_RAW("\x02"), FX_RAW("\xc3"), true },
		{ "seq", FX_RAW("\x05"), FX_RAW("\xa1" "x"), false },
		{ "lens", FX_RAW("\x92\x10\x20"), FX_RAW("\x10"), false },
		{ "world_size", FX_RAW("\x02"), FX_RAW("\xa1" "x"), false },
		{ "rank", FX_RAW("\x00"), FX_RAW("\xc2"), false },
	};
	static const struct fx_field alloc_resp[] = {
		{ "remote_indexes", FX_RAW("\x92\x03\xff"), FX_RAW("\x03"), true },
		{ "already_sent_indexes", FX_RAW("\x91\x00"), FX_RAW("\xc0"), true },
		{ "seq", FX_RAW("\x05"), FX_RAW("\xc3"), false },
		{ "err", FX_RAW("\xfe"), FX_RAW("\xa1" "x"), false },
		{ "errmsg", FX_RAW("\xa2" "no"), FX_RAW("\x01"), false },
	};
	static const struct fx_field put_done[] = {
		{ "seq", FX_RAW("\x09"), FX_RAW("\xa1" "x"), true },
		{ "req_id", FX_RAW("\xa2" "r1"), FX_RAW("\x90"), true },
		{ "rank", FX_RAW("\x00"), FX_RAW("\xc2"), true },
		{ "indexes", FX_RAW("\x92\x03\x04"), FX_RAW("\xa1" "x"), true },
	};
	static const struct fx_field cancel[] = {
		{ "req_id", FX_RAW("\xa2" "r1"), FX_RAW("\x01"), true },
		{ "keys", FX_RAW("\x91\xa2" "k0"), FX_RAW("\xa2" "k0"), true },
		{ "rank", FX_RAW("\x00"), FX_RAW("\xa1" "x"), false },
	};
	static const struct fx_field proxy[] = {
		{ "req_id", FX_RAW("\xa2" "r1"), FX_RAW("\x01"), true },
		{ "status", FX_RAW("\x00"), FX_RAW("\xc2"), false },
		{ "rank", FX_RAW("\x00"), FX_RAW("\xa1" "x"), false },
		{ "world_size", FX_RAW("\x02"), FX_RAW("\xa1" "x"), false },
		{ "chunks", FX_RAW("\x03"), FX_RAW("\xc3"), false },
		{ "bytes", FX_RAW("\xcd\x10\x00"), FX_RAW("\xa1" "x"), false },
	};
	static const struct fx_field heartbeat[] = {
		{ "epoch", FX_RAW("\x01"), FX_RAW("\xa1" "x"), true },
		/* A float is not an integer, even an integral one. */
		{ "time_ns", FX_RAW("\xce\x00\x01\x00\x00"), FX_RAW("\xca\x00\x00\x00\x00"), true },
	};
	static const struct fx_field error[] = {
		{ "seq", FX_RAW("\x05"), FX_RAW("\xa1" "x"), false },
		{ "code", FX_RAW("\xf2"), FX_RAW("\xa1" "x"), true },
		{ "text", FX_RAW("\xa3" "bad"), FX_RAW("\x01"), false },
	};
	static const struct fx_field reserve[] = {
		{ "seq", FX_RAW("\x05"), FX_RAW("\xa1" "x"), true },
		{ "req_id", FX_RAW("\xa2" "r1"), FX_RAW("\x01"), true },
		{ "total_chunks", FX_RAW("\x02"), FX_RAW("\xc3"), true },
		{ "world_size", FX_RAW("\x02"), FX_RAW("\xa1" "x"), true },
		{ "rank", FX_RAW("\x01"), FX_RAW("\xc2"), true },
	};
#define FX_MSG(t, id, f) { t, id, f, FX_N(f) }
	static const struct fx_msg msgs[] = {
		FX_MSG("Hello", PD_MSG_HELLO, hello),
		FX_MSG("HelloAck", PD_MSG_HELLO_ACK, hello),
		FX_MSG("AllocRequest", PD_MSG_ALLOC_REQ, alloc_req),
		FX_MSG("AllocResponse", PD_MSG_ALLOC_RESP, alloc_resp),
		FX_MSG("PutDone", PD_MSG_PUT_DONE, put_done),
		FX_MSG("CancelNotif", PD_MSG_CANCEL, cancel),
		FX_MSG("ProxyNotif", PD_MSG_PROXY, proxy),
		FX_MSG("Heartbeat", PD_MSG_HEARTBEAT, heartbeat),
		FX_MSG("Error", PD_MSG_ERROR, error),
		FX_MSG("Reserve", PD_MSG_RESERVE, reserve),
	};
#undef FX_MSG
	*n = FX_N(msgs);
	return msgs;
}

static inline size_t fx_put(uint8_t *out, size_t at, size_t cap, const void *p, size_t n)
{
	assert_true(n <= cap - at);
	memcpy(out + at, p, n);
	return at + n;
}

static inline size_t fx_put_str(uint8_t *out, size_t at, size_t cap, const char *s)
{
	uint8_t h = (uint8_t)(0xa0 | strlen(s));

	assert_true(strlen(s) < 32);
	at = fx_put(out, at, cap, &h, 1);
	return fx_put(out, at, cap, s, strlen(s));
}

static inline size_t fx_put_type(uint8_t *out, size_t at, size_t cap, const struct fx_msg *m)
{
	at = fx_put_str(out, at, cap, "type");
	return fx_put_str(out, at, cap, m->type);
}

static inline size_t fx_put_field(uint8_t *out, size_t at, size_t cap, const struct fx_msg *m,
				  size_t i, const struct fx_edit *e)
{
	const struct fx_raw *v = (int)i == e->swap ? &e->with : &m->f[i].val;

	at = fx_put_str(out, at, cap, m->f[i].name);
	return fx_put(out, at, cap, v->p, v->n);
}

/* The message m as a msgpack map, edited by e; returns its length. */
static inline size_t fx_build(uint8_t *out, size_t cap, const struct fx_msg *m,
			      const struct fx_edit *e)
{
	size_t n = 1 + m->n + e->nextra - (e->omit >= 0), at;
	uint8_t hdr[3] = { 0xde, (uint8_t)(n >> 8), (uint8_t)n };

	if (n < 16) {
		hdr[0] = (uint8_t)(0x80 | n);
		at = fx_put(out, 0, cap, hdr, 1);
	} else {
		at = fx_put(out, 0, cap, hdr, 3);
	}
	if (!e->reverse)
		at = fx_put_type(out, at, cap, m);
	for (size_t k = 0; k < m->n; k++) {
		size_t i = e->reverse ? m->n - 1 - k : k;

		if ((int)i != e->omit)
			at = fx_put_field(out, at, cap, m, i, e);
	}
	if (e->nextra)
		at = fx_put(out, at, cap, e->extra.p, e->extra.n);
	if (e->reverse)
		at = fx_put_type(out, at, cap, m);
	return at;
}

/* A copy in a buffer of exactly len bytes, so ASan sees any overread. */
static inline int fx_decode(struct pd_wire_dec *d, const void *p, size_t len, struct pd_msg *m,
			    char *err, size_t errlen)
{
	void *copy = malloc(len ? len : 1);
	int rc;

	assert_non_null(copy);
	if (len)
		memcpy(copy, p, len);
	rc = pd_wire_decode(d, copy, len, m, err, errlen);
	free(copy);
	return rc;
}

/* Decode must fail with rc, and err must mention `why` (when not NULL). */
static inline void fx_expect(const void *p, size_t len, int rc, const char *why)
{
	struct pd_wire_dec d;
	struct pd_msg m;
	char err[160] = "";

	pd_wire_dec_init(&d);
	assert_int_equal(fx_decode(&d, p, len, &m, err, sizeof(err)), rc);
	if (why && !strstr(err, why))
		fail_msg("error '%s' does not mention '%s'", err, why);
	assert_int_equal(m.type, 0);
	pd_wire_dec_fini(&d);
}

static inline struct pd_bytes fx_b(const char *s)
{
	struct pd_bytes b = { (const uint8_t *)s, (uint32_t)strlen(s) };

	return b;
}

static inline void fx_fill_hello(struct pd_msg_hello *h)
{
	static const uint8_t gid[16] = { 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8 };

	h->proto = PD_WIRE_PROTO;
	h->name = fx_b("broker-a");
	h->epoch = 42;
	h->host_id = fx_b("host-1");
	h->slot_size = 1u << 20;
	h->recv_slots = 64;
	h->nxports = 2;
	h->xport[0] = fx_b("rdma");
	h->xport[1] = fx_b("tcp");
	h->addr[0] = fx_b("10.0.0.1:7471");
	h->addr[1] = fx_b("10.0.0.1:17501");
	h->rdma_gid.p = gid;
	h->rdma_gid.len = sizeof(gid);
	h->rdma_qpn = 0x1234;
	h->rdma_rkey = 0xdeadbeef;
	h->rdma_base = 0x7f0000001000ull;
}

static inline void fx_fill_lists(struct pd_msg *m)
{
	static const struct pd_bytes keys[3] = {
		{ (const uint8_t *)"model@0@abc", 11 },
		{ (const uint8_t *)"model@0@def", 11 },
		{ (const uint8_t *)"\x00\xff\x01", 3 },  /* bin-ish bytes survive */
	};
	static const uint32_t lens[3] = { 4096, 4096, 100 };
	static const int32_t remote[3] = { 5, -1, INT32_MAX };
	static const int32_t already[1] = { 1 };

	switch (m->type) {
	case PD_MSG_ALLOC_REQ:
		m->u.alloc_req.nkeys = 3;
		m->u.alloc_req.keys = keys;
		m->u.alloc_req.lens = lens;
		break;
	case PD_MSG_ALLOC_RESP:
		m->u.alloc_resp.n = 3;
		m->u.alloc_resp.remote_indexes = remote;
		m->u.alloc_resp.nalready = 1;
		m->u.alloc_resp.already_sent_indexes = already;
		break;
	case PD_MSG_PUT_DONE:
		m->u.put_done.n = 1;
		m->u.put_done.indexes = already;
		m->u.put_done.keys = keys;   /* a bind: slots granted with the admission */
		m->u.put_done.lens = lens;
		break;
	default:
		m->u.cancel.nkeys = 2;
		m->u.cancel.keys = keys;
		break;
	}
}

/* Every message type with every field set. */
static inline void fx_fill(uint32_t type, struct pd_msg *m)
{
	memset(m, 0, sizeof(*m));
	m->type = type;
	switch (type) {
	case PD_MSG_HELLO:
	case PD_MSG_HELLO_ACK:
		fx_fill_hello(&m->u.hello);
		break;
	case PD_MSG_ALLOC_REQ:
		m->u.alloc_req = (struct pd_msg_alloc_req){ .seq = 7, .has_seq = 1,
			.req_id = fx_b("req-1"), .total_chunks = 10, .world_size = 4,
			.rank = 3, .is_last_batch = 1 };
		fx_fill_lists(m);
		break;
	case PD_MSG_ALLOC_RESP:
		m->u.alloc_resp = (struct pd_msg_alloc_resp){ .seq = UINT64_MAX, .has_seq = 1,
			.err = -ENOSPC, .errmsg = fx_b("partial") };
		fx_fill_lists(m);
		break;
	case PD_MSG_PUT_DONE:
		m->u.put_done = (struct pd_msg_put_done){ .seq = 8, .req_id = fx_b("req-1"),
			.rank = 2 };
		fx_fill_lists(m);
		break;
	case PD_MSG_CANCEL:
		m->u.cancel = (struct pd_msg_cancel){ .req_id = fx_b("req-1"), .rank = 1 };
		fx_fill_lists(m);
		break;
	case PD_MSG_PROXY:
		m->u.proxy = (struct pd_msg_proxy){ .req_id = fx_b("req-1"), .has_ext = 1,
			.status = -ETIMEDOUT, .rank = 1, .world_size = 2, .chunks = 10,
			.bytes = 1ull << 40 };
		break;
	case PD_MSG_HEARTBEAT:
		m->u.heartbeat = (struct pd_msg_heartbeat){ .epoch = 42,
			.time_ns = 1700000000123456789ull };
		break;
	case PD_MSG_RESERVE:
		m->u.reserve = (struct pd_msg_reserve){ .seq = 1ull << 40,
			.req_id = fx_b("req-1"), .total_chunks = 100000, .world_size = 4,
			.rank = 3, .grants = 16 };
		break;
	default:
		m->u.error = (struct pd_msg_error){ .seq = 9, .code = -EPROTO,
			.text = fx_b("corrupt") };
		break;
	}
}

static inline void fx_bytes_eq(struct pd_bytes a, struct pd_bytes b)
{
	assert_int_equal(a.len, b.len);
	if (a.len)
		assert_memory_equal(a.p, b.p, a.len);
}

static inline void fx_keys_eq(const struct pd_bytes *a, const struct pd_bytes *b, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		fx_bytes_eq(a[i], b[i]);
}

static inline void fx_arr_eq(const void *a, const void *b, uint32_t n)
{
	if (n)
		assert_memory_equal(a, b, n * sizeof(uint32_t));
}

static inline void fx_hello_eq(const struct pd_msg_hello *a, const struct pd_msg_hello *b)
{
	assert_int_equal(a->proto, b->proto);
	fx_bytes_eq(a->name, b->name);
	assert_int_equal(a->epoch, b->epoch);
	fx_bytes_eq(a->host_id, b->host_id);
	assert_int_equal(a->slot_size, b->slot_size);
	assert_int_equal(a->recv_slots, b->recv_slots);
	assert_int_equal(a->nxports, b->nxports);
	fx_keys_eq(a->xport, b->xport, a->nxports);
	fx_keys_eq(a->addr, b->addr, a->nxports);
	fx_bytes_eq(a->rdma_gid, b->rdma_gid);
	assert_int_equal(a->rdma_qpn, b->rdma_qpn);
	assert_int_equal(a->rdma_rkey, b->rdma_rkey);
	assert_int_equal(a->rdma_base, b->rdma_base);
}

static inline void fx_alloc_req_eq(const struct pd_msg_alloc_req *a,
				   const struct pd_msg_alloc_req *b)
{
	assert_int_equal(a->has_seq, b->has_seq);
	if (a->has_seq)
		assert_int_equal(a->seq, b->seq);
	fx_bytes_eq(a->req_id, b->req_id);
	assert_int_equal(a->nkeys, b->nkeys);
	fx_keys_eq(a->keys, b->keys, a->nkeys);
	assert_int_equal(a->lens == NULL, b->lens == NULL);
	if (a->lens)
		fx_arr_eq(a->lens, b->lens, a->nkeys);
	assert_int_equal(a->total_chunks, b->total_chunks);
	assert_int_equal(a->world_size, b->world_size);
	assert_int_equal(a->rank, b->rank);
	assert_int_equal(a->is_last_batch, b->is_last_batch);
}

static inline void fx_alloc_resp_eq(const struct pd_msg_alloc_resp *a,
				    const struct pd_msg_alloc_resp *b)
{
	assert_int_equal(a->has_seq, b->has_seq);
	if (a->has_seq)
		assert_int_equal(a->seq, b->seq);
	assert_int_equal(a->n, b->n);
	fx_arr_eq(a->remote_indexes, b->remote_indexes, a->n);
	assert_int_equal(a->nalready, b->nalready);
	fx_arr_eq(a->already_sent_indexes, b->already_sent_indexes, a->nalready);
	assert_int_equal(a->err, b->err);
	fx_bytes_eq(a->errmsg, b->errmsg);
}

static inline void fx_proxy_eq(const struct pd_msg_proxy *a, const struct pd_msg_proxy *b)
{
	fx_bytes_eq(a->req_id, b->req_id);
	assert_int_equal(a->has_ext, b->has_ext);
	if (!a->has_ext)
		return;
	assert_int_equal(a->status, b->status);
	assert_int_equal(a->rank, b->rank);
	assert_int_equal(a->world_size, b->world_size);
	assert_int_equal(a->chunks, b->chunks);
	assert_int_equal(a->bytes, b->bytes);
}

static inline void fx_msg_eq(const struct pd_msg *a, const struct pd_msg *b)
{
	assert_int_equal(a->type, b->type);
	switch (a->type) {
	case PD_MSG_HELLO:
	case PD_MSG_HELLO_ACK:
		fx_hello_eq(&a->u.hello, &b->u.hello);
		break;
	case PD_MSG_ALLOC_REQ:
		fx_alloc_req_eq(&a->u.alloc_req, &b->u.alloc_req);
		break;
	case PD_MSG_ALLOC_RESP:
		fx_alloc_resp_eq(&a->u.alloc_resp, &b->u.alloc_resp);
		break;
	case PD_MSG_PUT_DONE:
		assert_int_equal(a->u.put_done.seq, b->u.put_done.seq);
		fx_bytes_eq(a->u.put_done.req_id, b->u.put_done.req_id);
		assert_int_equal(a->u.put_done.rank, b->u.put_done.rank);
		assert_int_equal(a->u.put_done.n, b->u.put_done.n);
		fx_arr_eq(a->u.put_done.indexes, b->u.put_done.indexes, a->u.put_done.n);
		assert_int_equal(!a->u.put_done.keys, !b->u.put_done.keys);
		if (a->u.put_done.keys) {
			fx_keys_eq(a->u.put_done.keys, b->u.put_done.keys, a->u.put_done.n);
			fx_arr_eq(a->u.put_done.lens, b->u.put_done.lens, a->u.put_done.n);
		}
		break;
	case PD_MSG_CANCEL:
		fx_bytes_eq(a->u.cancel.req_id, b->u.cancel.req_id);
		assert_int_equal(a->u.cancel.rank, b->u.cancel.rank);
		assert_int_equal(a->u.cancel.nkeys, b->u.cancel.nkeys);
		fx_keys_eq(a->u.cancel.keys, b->u.cancel.keys, a->u.cancel.nkeys);
		break;
	case PD_MSG_PROXY:
		fx_proxy_eq(&a->u.proxy, &b->u.proxy);
		break;
	case PD_MSG_HEARTBEAT:
		assert_int_equal(a->u.heartbeat.epoch, b->u.heartbeat.epoch);
		assert_int_equal(a->u.heartbeat.time_ns, b->u.heartbeat.time_ns);
		break;
	case PD_MSG_RESERVE:
		assert_int_equal(a->u.reserve.seq, b->u.reserve.seq);
		fx_bytes_eq(a->u.reserve.req_id, b->u.reserve.req_id);
		assert_int_equal(a->u.reserve.total_chunks, b->u.reserve.total_chunks);
		assert_int_equal(a->u.reserve.world_size, b->u.reserve.world_size);
		assert_int_equal(a->u.reserve.rank, b->u.reserve.rank);
		assert_int_equal(a->u.reserve.grants, b->u.reserve.grants);
		break;
	default:
		assert_int_equal(a->u.error.seq, b->u.error.seq);
		assert_int_equal(a->u.error.code, b->u.error.code);
		fx_bytes_eq(a->u.error.text, b->u.error.text);
		break;
	}
}

#endif
