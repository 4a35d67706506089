/* SPDX-License-Identifier: MIT */
/*
 * Wire codec, positive cases: golden byte vectors written by hand from the
 * msgpack specification for the four messages LMCache's PD backend sends
 * (msgspec: a map whose first entry is "type": "<Class>", then every field
 * in declaration order, defaults included), pdkv's encodings of them, pdkv's
 * own Reserve, round trips of every message, unknown fields and field order.
 */
#include <msgpack.h>

#include "wire_fixture.h"

/* AllocRequest{keys: ["k0", "k1"], fmt: 1, shape: [2, 16], dtype: "bfloat16",
 * last_chunk_toks: 7, req_id: "r1", is_last_batch: true, total_chunks: 2} */
static const uint8_t lmc_alloc_req[] = {
	0x89,                                           /* fixmap, 9 entries */
	0xa4, 't', 'y', 'p', 'e',                       /* fixstr 4 "type" */
	0xac, 'A', 'l', 'l', 'o', 'c', 'R', 'e', 'q', 'u', 'e', 's', 't', /* fixstr 12 */
	0xa4, 'k', 'e', 'y', 's',                       /* "keys" */
	0x92,                                           /* fixarray, 2 */
	0xa2, 'k', '0',                                 /* "k0" */
	0xa2, 'k', '1',                                 /* "k1" */
	0xa3, 'f', 'm', 't',                            /* "fmt" */
	0x01,                                           /* positive fixint 1 */
	0xa5, 's', 'h', 'a', 'p', 'e',                  /* "shape" */
	0x92, 0x02, 0x10,                               /* [2, 16] */
	0xa5, 'd', 't', 'y', 'p', 'e',                  /* "dtype" */
	0xa8, 'b', 'f', 'l', 'o', 'a', 't', '1', '6',   /* fixstr 8 "bfloat16" */
	0xaf, 'l', 'a', 's', 't', '_', 'c', 'h', 'u', 'n', 'k', '_', 't', 'o', 'k', 's',
	0x07,                                           /* last_chunk_toks: 7 */
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',             /* "req_id" */
	0xa2, 'r', '1',                                 /* "r1" */
	0xad, 'i', 's', '_', 'l', 'a', 's', 't', '_', 'b', 'a', 't', 'c', 'h',
	0xc3,                                           /* true */
	0xac, 't', 'o', 't', 'a', 'l', '_', 'c', 'h', 'u', 'n', 'k', 's',
	0x02,                                           /* total_chunks: 2 */
};

/* AllocRequest{keys: ["k0"], fmt: 1, shape: [2, 16], dtype: "bfloat16",
 * last_chunk_toks: 16, req_id: "", is_last_batch: false, total_chunks: 1} */
static const uint8_t lmc_alloc_req_noid[] = {
	0x89,                                           /* fixmap, 9 entries */
	0xa4, 't', 'y', 'p', 'e',
	0xac, 'A', 'l', 'l', 'o', 'c', 'R', 'e', 'q', 'u', 'e', 's', 't',
	0xa4, 'k', 'e', 'y', 's',
	0x91, 0xa2, 'k', '0',                           /* ["k0"] */
	0xa3, 'f', 'm', 't', 0x01,
	0xa5, 's', 'h', 'a', 'p', 'e', 0x92, 0x02, 0x10,
	0xa5, 'd', 't', 'y', 'p', 'e',
	0xa8, 'b', 'f', 'l', 'o', 'a', 't', '1', '6',
	0xaf, 'l', 'a', 's', 't', '_', 'c', 'h', 'u', 'n', 'k', '_', 't', 'o', 'k', 's',
	0x10,                                           /* 16 */
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',
	0xa0,                                           /* fixstr 0: "" */
	0xad, 'i', 's', '_', 'l', 'a', 's', 't', '_', 'b', 'a', 't', 'c', 'h',
	0xc2,                                           /* false */
	0xac, 't', 'o', 't', 'a', 'l', '_', 'c', 'h', 'u', 'n', 'k', 's',
	0x01,
};

/* AllocResponse{remote_indexes: [3, -1], already_sent_indexes: []} */
static const uint8_t lmc_alloc_resp[] = {
	0x83,                                           /* fixmap, 3 entries */
	0xa4, 't', 'y', 'p', 'e',
	0xad, 'A', 'l', 'l', 'o', 'c', 'R', 'e', 's', 'p', 'o', 'n', 's', 'e', /* fixstr 13 */
	0xae, 'r', 'e', 'm', 'o', 't', 'e', '_', 'i', 'n', 'd', 'e', 'x', 'e', 's',
	0x92, 0x03, 0xff,                               /* [3, -1]: -1 is negative fixint 0xff */
	0xb4, 'a', 'l', 'r', 'e', 'a', 'd', 'y', '_', 's', 'e', 'n', 't', '_',
	'i', 'n', 'd', 'e', 'x', 'e', 's',              /* fixstr 20 */
	0x90,                                           /* [] */
};

/* ProxyNotif{req_id: "r1"} */
static const uint8_t lmc_proxy[] = {
	0x82,                                           /* fixmap, 2 entries */
	0xa4, 't', 'y', 'p', 'e',
	0xaa, 'P', 'r', 'o', 'x', 'y', 'N', 'o', 't', 'i', 'f', /* fixstr 10 */
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',
	0xa2, 'r', '1',
};

/* CancelNotif{req_id: "r1", keys: ["k0"]} */
static const uint8_t lmc_cancel[] = {
	0x83,                                           /* fixmap, 3 entries */
	0xa4, 't', 'y', 'p', 'e',
	0xab, 'C', 'a', 'n', 'c', 'e', 'l', 'N', 'o', 't', 'i', 'f', /* fixstr 11 */
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',
	0xa2, 'r', '1',
	0xa4, 'k', 'e', 'y', 's',
	0x91, 0xa2, 'k', '0',                           /* ["k0"] */
};

/* pdkv's own: Reserve{seq: 5, req_id: "r1", total_chunks: 2, world_size: 2,
 * rank: 1}, every field in the table's order (all of them required). */
static const uint8_t pd_reserve[] = {
	0x86,                                           /* fixmap, 6 entries */
	0xa4, 't', 'y', 'p', 'e',
	0xa7, 'R', 'e', 's', 'e', 'r', 'v', 'e',        /* fixstr 7 */
	0xa3, 's', 'e', 'q',
	0x05,
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',
	0xa2, 'r', '1',
	0xac, 't', 'o', 't', 'a', 'l', '_', 'c', 'h', 'u', 'n', 'k', 's',
	0x02,
	0xaa, 'w', 'o', 'r', 'l', 'd', '_', 's', 'i', 'z', 'e', /* fixstr 10 */
	0x02,
	0xa4, 'r', 'a', 'n', 'k',
	0x01,
};

/* The same with the widest values: seq 2^64-1 (uint64), total 65536
 * (uint32), world 300 and rank 299 (uint16), a 32-byte req_id (str8). */
static const uint8_t pd_reserve_wide[] = {
	0x86,
	0xa4, 't', 'y', 'p', 'e',
	0xa7, 'R', 'e', 's', 'e', 'r', 'v', 'e',
	0xa3, 's', 'e', 'q',
	0xcf, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,
	0xa6, 'r', 'e', 'q', '_', 'i', 'd',
	0xd9, 0x20,                                     /* str8, 32 bytes */
	'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f',
	'0', '1', '2', '3', '4', '5', '6', '7', '8', '9', 'a', 'b', 'c', 'd', 'e', 'f',
	0xac, 't', 'o', 't', 'a', 'l', '_', 'c', 'h', 'u', 'n', 'k', 's',
	0xce, 0x00, 0x01, 0x00, 0x00,
	0xaa, 'w', 'o', 'r', 'l', 'd', '_', 's', 'i', 'z', 'e',
	0xcd, 0x01, 0x2c,
	0xa4, 'r', 'a', 'n', 'k',
	0xcd, 0x01, 0x2b,
};

static void decode_ok(struct pd_wire_dec *d, const void *p, size_t len, struct pd_msg *m)
{
	char err[160] = "";
	int rc = fx_decode(d, p, len, m, err, sizeof(err));

	if (rc != 0)
		fail_msg("decode: %d (%s)", rc, err);
}

static void encode_ok(const struct pd_msg *m, struct pd_wire_buf *b)
{
	assert_int_equal(pd_wire_encode(m, b), 0);
	assert_true(b->len > 0);
}

static void assert_bytes(struct pd_bytes b, const char *s)
{
	fx_bytes_eq(b, fx_b(s));
}

static void test_golden_alloc_request(void **state)
{
	const struct pd_msg_alloc_req *r;
	struct pd_wire_dec d;
	struct pd_msg m;

	(void)state;
	pd_wire_dec_init(&d);
	decode_ok(&d, lmc_alloc_req, sizeof(lmc_alloc_req), &m);
	r = &m.u.alloc_req;
	assert_int_equal(m.type, PD_MSG_ALLOC_REQ);
	assert_int_equal(r->nkeys, 2);
	assert_bytes(r->keys[0], "k0");
	assert_bytes(r->keys[1], "k1");
	assert_bytes(r->req_id, "r1");
	assert_int_equal(r->is_last_batch, 1);
	assert_int_equal(r->total_chunks, 2);
	/* What LMCache does not send takes its default. */
	assert_int_equal(r->has_seq, 0);
	assert_null(r->lens);
	assert_int_equal(r->world_size, 1);
	assert_int_equal(r->rank, 0);

	/* req_id "" (LMCache's default: no identifier) decodes. */
	decode_ok(&d, lmc_alloc_req_noid, sizeof(lmc_alloc_req_noid), &m);
	assert_int_equal(m.u.alloc_req.req_id.len, 0);
	assert_int_equal(m.u.alloc_req.is_last_batch, 0);
	assert_int_equal(m.u.alloc_req.nkeys, 1);
	assert_int_equal(m.u.alloc_req.total_chunks, 1);
	pd_wire_dec_fini(&d);
}

static void test_golden_alloc_response(void **state)
{
	static const int32_t remote[2] = { 3, -1 };
	struct pd_wire_dec d;
	struct pd_wire_buf b;
	struct pd_msg m, mine = { .type = PD_MSG_ALLOC_RESP };

	(void)state;
	pd_wire_dec_init(&d);
	decode_ok(&d, lmc_alloc_resp, sizeof(lmc_alloc_resp), &m);
	assert_int_equal(m.type, PD_MSG_ALLOC_RESP);
	assert_int_equal(m.u.alloc_resp.n, 2);
	assert_int_equal(m.u.alloc_resp.remote_indexes[0], 3);
	assert_int_equal(m.u.alloc_resp.remote_indexes[1], -1);
	assert_int_equal(m.u.alloc_resp.nalready, 0);
	assert_int_equal(m.u.alloc_resp.has_seq, 0);
	assert_int_equal(m.u.alloc_resp.err, 0);
	assert_int_equal(m.u.alloc_resp.errmsg.len, 0);
	pd_wire_dec_fini(&d);

	/* pdkv without seq/err/errmsg sends exactly what LMCache sends. */
	mine.u.alloc_resp.n = 2;
	mine.u.alloc_resp.remote_indexes = remote;
	pd_wire_buf_init(&b);
	encode_ok(&mine, &b);
	assert_int_equal(b.len, sizeof(lmc_alloc_resp));
	assert_memory_equal(b.data, lmc_alloc_resp, b.len);
	/* With seq: the LMCache entries first, seq after them. */
	mine.u.alloc_resp.has_seq = 1;
	mine.u.alloc_resp.seq = 5;
	encode_ok(&mine, &b);
	assert_int_equal(b.data[0], 0x84);
	assert_memory_equal(b.data + 1, lmc_alloc_resp + 1, sizeof(lmc_alloc_resp) - 1);
	assert_memory_equal(b.data + sizeof(lmc_alloc_resp), "\xa3" "seq" "\x05", 5);
	pd_wire_buf_fini(&b);
}

static void test_golden_proxy(void **state)
{
	struct pd_msg m, mine = { .type = PD_MSG_PROXY };
	struct pd_wire_dec d;
	struct pd_wire_buf b;

	(void)state;
	pd_wire_dec_init(&d);
	decode_ok(&d, lmc_proxy, sizeof(lmc_proxy), &m);
	assert_int_equal(m.type, PD_MSG_PROXY);
	assert_bytes(m.u.proxy.req_id, "r1");
	assert_int_equal(m.u.proxy.has_ext, 0);

	mine.u.proxy.req_id = fx_b("r1");
	pd_wire_buf_init(&b);
	encode_ok(&mine, &b);
	assert_int_equal(b.len, sizeof(lmc_proxy));
	assert_memory_equal(b.data, lmc_proxy, b.len);

	/* Extensions follow LMCache's entries, so LMCache's proxy reads it. */
	fx_fill(PD_MSG_PROXY, &mine);
	mine.u.proxy.req_id = fx_b("r1");
	encode_ok(&mine, &b);
	assert_int_equal(b.data[0], 0x87);
	assert_memory_equal(b.data + 1, lmc_proxy + 1, sizeof(lmc_proxy) - 1);
	decode_ok(&d, b.data, b.len, &m);
	fx_msg_eq(&mine, &m);
	pd_wire_buf_fini(&b);
	pd_wire_dec_fini(&d);
}

static void test_golden_cancel(void **state)
{
	struct pd_msg m;
	struct pd_wire_dec d;
	struct pd_wire_buf b;

	(void)state;
	pd_wire_dec_init(&d);
	decode_ok(&d, lmc_cancel, sizeof(lmc_cancel), &m);
	assert_int_equal(m.type, PD_MSG_CANCEL);
	assert_bytes(m.u.cancel.req_id, "r1");
	assert_int_equal(m.u.cancel.nkeys, 1);
	assert_bytes(m.u.cancel.keys[0], "k0");
	assert_int_equal(m.u.cancel.rank, 0);

	/* Re-encoded (rank 0 is the default, not sent): the same bytes. */
	pd_wire_buf_init(&b);
	encode_ok(&m, &b);
	assert_int_equal(b.len, sizeof(lmc_cancel));
	assert_memory_equal(b.data, lmc_cancel, b.len);
	pd_wire_buf_fini(&b);
	pd_wire_dec_fini(&d);
}

static void test_golden_reserve(void **state)
{
	static const char id32[] = "0123456789abcdef0123456789abcdef";
	struct pd_msg m, mine = { .type = PD_MSG_RESERVE };
	struct pd_wire_dec d;
	struct pd_wire_buf b;

	(void)state;
	pd_wire_dec_init(&d);
	decode_ok(&d, pd_reserve, sizeof(pd_reserve), &m);
	assert_int_equal(m.type, PD_MSG_RESERVE);
	assert_int_equal(m.u.reserve.seq, 5);
	assert_bytes(m.u.reserve.req_id, "r1");
	assert_int_equal(m.u.reserve.total_chunks, 2);
	assert_int_equal(m.u.reserve.world_size, 2);
	assert_int_equal(m.u.reserve.rank, 1);

	mine.u.reserve = (struct pd_msg_reserve){ .seq = 5, .req_id = fx_b("r1"),
						  .total_chunks = 2, .world_size = 2, .rank = 1 };
	pd_wire_buf_init(&b);
	encode_ok(&mine, &b);
	assert_int_equal(b.len, sizeof(pd_reserve));
	assert_memory_equal(b.data, pd_reserve, b.len);

	mine.u.reserve = (struct pd_msg_reserve){ .seq = UINT64_MAX, .req_id = fx_b(id32),
						  .total_chunks = 65536, .world_size = 300,
						  .rank = 299 };
	encode_ok(&mine, &b);
	assert_int_equal(b.len, sizeof(pd_reserve_wide));
	assert_memory_equal(b.data, pd_reserve_wide, b.len);
	decode_ok(&d, pd_reserve_wide, sizeof(pd_reserve_wide), &m);
	fx_msg_eq(&mine, &m);
	pd_wire_buf_fini(&b);
	pd_wire_dec_fini(&d);
}

/* pdkv's AllocRequest carries LMCache's fields, typed as msgspec wants, in
 * LMCache's order, then its own. Read back with plain msgpack-c. */
static void test_encode_alloc_request_order(void **state)
{
	static const struct {
		const char *key;
		msgpack_object_type type;
	} want[] = {
		{ "type", MSGPACK_OBJECT_STR },
		{ "keys", MSGPACK_OBJECT_ARRAY },
		{ "fmt", MSGPACK_OBJECT_POSITIVE_INTEGER },
		{ "shape", MSGPACK_OBJECT_ARRAY },
		{ "dtype", MSGPACK_OBJECT_STR },
		{ "last_chunk_toks", MSGPACK_OBJECT_POSITIVE_INTEGER },
		{ "req_id", MSGPACK_OBJECT_STR },
		{ "is_last_batch", MSGPACK_OBJECT_BOOLEAN },
		{ "total_chunks", MSGPACK_OBJECT_POSITIVE_INTEGER },
		{ "seq", MSGPACK_OBJECT_POSITIVE_INTEGER },
		{ "lens", MSGPACK_OBJECT_ARRAY },
		{ "world_size", MSGPACK_OBJECT_POSITIVE_INTEGER },
		{ "rank", MSGPACK_OBJECT_POSITIVE_INTEGER },
	};
	struct pd_wire_buf b;
	struct pd_msg m;
	msgpack_unpacked up;
	size_t off = 0;

	(void)state;
	fx_fill(PD_MSG_ALLOC_REQ, &m);
	pd_wire_buf_init(&b);
	encode_ok(&m, &b);
	msgpack_unpacked_init(&up);
	assert_int_equal(msgpack_unpack_next(&up, (const char *)b.data, b.len, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(off, b.len);
	assert_int_equal(up.data.type, MSGPACK_OBJECT_MAP);
	assert_int_equal(up.data.via.map.size, FX_N(want));
	for (size_t i = 0; i < FX_N(want); i++) {
		const msgpack_object_kv *kv = &up.data.via.map.ptr[i];

		assert_int_equal(kv->key.type, MSGPACK_OBJECT_STR);
		assert_int_equal(kv->key.via.str.size, strlen(want[i].key));
		assert_memory_equal(kv->key.via.str.ptr, want[i].key, strlen(want[i].key));
		assert_int_equal(kv->val.type, want[i].type);
	}
	msgpack_unpacked_destroy(&up);
	pd_wire_buf_fini(&b);
}

/* encode -> decode -> equal, and the decoded message re-encodes the same. */
static void test_roundtrip_all(void **state)
{
	struct pd_wire_buf b1, b2;
	struct pd_wire_dec d;
	struct pd_msg in, out;

	(void)state;
	pd_wire_buf_init(&b1);
	pd_wire_buf_init(&b2);
	pd_wire_dec_init(&d);
	for (uint32_t t = 1; t <= PD_MSG_MAX; t++) {
		fx_fill(t, &in);
		encode_ok(&in, &b1);
		decode_ok(&d, b1.data, b1.len, &out);  /* fx_decode frees its copy */
		fx_msg_eq(&in, &out);
		encode_ok(&out, &b2);
		assert_int_equal(b1.len, b2.len);
		assert_memory_equal(b1.data, b2.data, b1.len);
	}
	pd_wire_dec_fini(&d);
	pd_wire_buf_fini(&b2);
	pd_wire_buf_fini(&b1);
}

/* Messages with their optional fields absent come back the same. */
static void test_roundtrip_minimal(void **state)
{
	struct pd_wire_buf b;
	struct pd_wire_dec d;
	struct pd_msg in, out;

	(void)state;
	pd_wire_buf_init(&b);
	pd_wire_dec_init(&d);
	for (uint32_t t = 1; t <= PD_MSG_MAX; t++) {
		fx_fill(t, &in);
		if (t == PD_MSG_ALLOC_REQ) {
			in.u.alloc_req.has_seq = 0;
			in.u.alloc_req.lens = NULL;
			in.u.alloc_req.world_size = 1;
			in.u.alloc_req.rank = 0;
			in.u.alloc_req.nkeys = 0;
		} else if (t == PD_MSG_ALLOC_RESP) {
			in.u.alloc_resp = (struct pd_msg_alloc_resp){ .n = 0 };
		} else if (t == PD_MSG_PROXY) {
			in.u.proxy = (struct pd_msg_proxy){ .req_id = fx_b("") };
		} else if (t == PD_MSG_ERROR) {
			in.u.error = (struct pd_msg_error){ .code = -EIO };
		} else if (t == PD_MSG_HELLO) {
			in.u.hello.rdma_gid.len = 0;
			in.u.hello.rdma_qpn = in.u.hello.rdma_rkey = 0;
			in.u.hello.rdma_base = 0;
		}
		encode_ok(&in, &b);
		decode_ok(&d, b.data, b.len, &out);
		fx_msg_eq(&in, &out);
	}
	pd_wire_dec_fini(&d);
	pd_wire_buf_fini(&b);
}

/* Decode a fixture message as built with edit e; compare with the plain one. */
static void same_as_plain(const struct fx_msg *fm, const struct fx_edit *e)
{
	static uint8_t p1[2048], p2[2048];
	struct fx_edit plain = fx_edit_none();
	struct pd_wire_dec d1, d2;
	struct pd_msg m1, m2;
	size_t n1 = fx_build(p1, sizeof(p1), fm, &plain);
	size_t n2 = fx_build(p2, sizeof(p2), fm, e);

	pd_wire_dec_init(&d1);
	pd_wire_dec_init(&d2);
	decode_ok(&d1, p1, n1, &m1);
	decode_ok(&d2, p2, n2, &m2);
	assert_int_equal(m1.type, fm->id);
	fx_msg_eq(&m1, &m2);
	pd_wire_dec_fini(&d2);
	pd_wire_dec_fini(&d1);
}

static void test_unknown_fields_ignored(void **state)
{
	static const char extra[] =
		"\xa5" "color" "\xa4" "blue"                          /* str */
		"\xa4" "deep" "\x81\xa1" "a" "\x92\x81\xa1" "b" "\x90\xc0" /* nested map/array */
		"\xa3" "ext" "\xd6\x05\x01\x02\x03\x04"               /* fixext4 */
		"\xa3" "f64" "\xcb\x40\x09\x21\xfb\x54\x44\x2d\x18"   /* 3.14159... */
		"\xa3" "bin" "\xc4\x03\x00\x01\x02"                   /* bin8 */
		"\x07" "\xa4" "int!"                                  /* non-string key */
		"\xa5" "Keys!" "\x01";                                /* near miss */
	struct fx_edit e = fx_edit_none();
	size_t n;
	const struct fx_msg *fm = fx_msgs(&n);

	(void)state;
	e.extra.p = extra;
	e.extra.n = sizeof(extra) - 1;
	e.nextra = 7;
	for (size_t i = 0; i < n; i++)
		same_as_plain(&fm[i], &e);
}

static void test_any_order(void **state)
{
	struct fx_edit e = fx_edit_none();
	size_t n;
	const struct fx_msg *fm = fx_msgs(&n);

	(void)state;
	e.reverse = true;  /* fields reversed, "type" last */
	for (size_t i = 0; i < n; i++)
		same_as_plain(&fm[i], &e);
}

static void test_type_names(void **state)
{
	size_t n;
	const struct fx_msg *fm = fx_msgs(&n);

	(void)state;
	assert_int_equal(n, PD_MSG_MAX);
	for (size_t i = 0; i < n; i++)
		assert_string_equal(pd_wire_type_name(fm[i].id), fm[i].type);
}

/* One decoder, many decodes: a failure in between leaves it usable. */
static void test_decoder_reuse(void **state)
{
	struct pd_wire_dec d;
	struct pd_msg m;

	(void)state;
	pd_wire_dec_init(&d);
	for (int i = 0; i < 3; i++) {
		decode_ok(&d, lmc_alloc_req, sizeof(lmc_alloc_req), &m);
		assert_int_equal(fx_decode(&d, lmc_cancel, 5, &m, NULL, 0), -EPROTO);
		decode_ok(&d, lmc_cancel, sizeof(lmc_cancel), &m);
		assert_bytes(m.u.cancel.keys[0], "k0");
	}
	pd_wire_dec_fini(&d);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_golden_alloc_request),
		cmocka_unit_test(test_golden_alloc_response),
		cmocka_unit_test(test_golden_proxy),
		cmocka_unit_test(test_golden_cancel),
		cmocka_unit_test(test_golden_reserve),
		cmocka_unit_test(test_encode_alloc_request_order),
		cmocka_unit_test(test_roundtrip_all),
		cmocka_unit_test(test_roundtrip_minimal),
		cmocka_unit_test(test_unknown_fields_ignored),
		cmocka_unit_test(test_any_order),
		cmocka_unit_test(test_type_names),
		cmocka_unit_test(test_decoder_reuse),
	};

	return cmocka_run_group_tests_name("wire (golden, round trip)", tests, NULL, NULL);
}
