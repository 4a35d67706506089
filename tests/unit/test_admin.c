/* SPDX-License-Identifier: MIT */
/*
 * The admin socket's requests without a socket (pd_admin_frame_len,
 * pd_admin_answer), on a broker that holds nothing: frame bounds, and
 * refusals that say what the protocol (shm/pd_admin_proto.h) accepts.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <msgpack.h>

#include "pd_admin.h"
#include "pd_admin_proto.h"
#include "pd_broker_int.h"

/* No segment, no engine, no control plane. */
static struct pd_broker *empty_broker(void)
{
	struct pd_broker *b = calloc(1, sizeof(*b));

	assert_non_null(b);
	LIST_INIT(&b->waiters);
	return b;
}

/* {"cmd": "cancel", "req_id": len bytes} */
static void cancel_req(msgpack_sbuffer *req, uint32_t len)
{
	char id[PD_REQ_ID_MAX + 2];
	msgpack_packer pk;

	memset(id, 'r', sizeof(id));
	msgpack_sbuffer_init(req);
	msgpack_packer_init(&pk, req, msgpack_sbuffer_write);
	assert_int_equal(msgpack_pack_map(&pk, 2), 0);
	assert_int_equal(msgpack_pack_str_with_body(&pk, "cmd", 3), 0);
	assert_int_equal(msgpack_pack_str_with_body(&pk, "cancel", 6), 0);
	assert_int_equal(msgpack_pack_str_with_body(&pk, "req_id", 6), 0);
	assert_int_equal(msgpack_pack_str_with_body(&pk, id, len), 0);
}

/* The "error" of a framed answer {"ok": false, "error": STR}, into err. */
static void answer_error(const msgpack_sbuffer *ans, char *err, size_t len)
{
	msgpack_unpacked u;
	const msgpack_object_map *m;
	size_t off = 0;

	assert_true(ans->size > 4);
	msgpack_unpacked_init(&u);
	assert_int_equal(msgpack_unpack_next(&u, ans->data + 4, ans->size - 4, &off),
			 MSGPACK_UNPACK_SUCCESS);
	assert_int_equal(u.data.type, MSGPACK_OBJECT_MAP);
	m = &u.data.via.map;
	assert_int_equal(m->size, 2);
	assert_int_equal(m->ptr[1].val.type, MSGPACK_OBJECT_STR);
	assert_true(m->ptr[1].val.via.str.size < len);
	memcpy(err, m->ptr[1].val.via.str.ptr, m->ptr[1].val.via.str.size);
	err[m->ptr[1].val.via.str.size] = '\0';
	msgpack_unpacked_destroy(&u);
}

static void cancel_says(struct pd_broker *b, uint32_t len, const char *want)
{
	msgpack_sbuffer req, ans = { 0 };
	char err[128];

	cancel_req(&req, len);
	assert_int_equal(pd_admin_answer(b, (const uint8_t *)req.data, (uint32_t)req.size, &ans,
					 err, sizeof(err)), 0);
	answer_error(&ans, err, sizeof(err));
	assert_string_equal(err, want);
	msgpack_sbuffer_destroy(&ans);
	msgpack_sbuffer_destroy(&req);
}

static void test_frame_len(void **state)
{
	static const uint8_t zero[4], max[4] = { 0, 0, 0x10, 0 }, over[4] = { 0, 0, 0x10, 1 };
	static const uint8_t huge[4] = { 0xff, 0xff, 0xff, 0xff };

	(void)state;
	assert_int_equal(pd_admin_frame_len(zero), 0);
	assert_int_equal(pd_admin_frame_len(max), PD_ADMIN_REQ_MAX);
	assert_int_equal(pd_admin_frame_len(over), 0);
	assert_int_equal(pd_admin_frame_len(huge), 0);
}

/* A req_id is 1..PD_REQ_ID_MAX bytes, and the refusal says so. */
static void test_cancel_req_id_bounds(void **state)
{
	struct pd_broker *b = empty_broker();

	(void)state;
	cancel_says(b, 0, "cancel needs a req_id of 1..127 bytes");
	cancel_says(b, PD_REQ_ID_MAX + 1, "cancel needs a req_id of 1..127 bytes");
	cancel_says(b, PD_REQ_ID_MAX, "no live request with that req_id");
	cancel_says(b, 1, "no live request with that req_id");
	free(b);
}

/* Not msgpack within the wire bounds: refused before anything runs, with why. */
static void test_scan_refused(void **state)
{
	static const uint8_t truncated[] = { 0x82, 0xa3, 'c', 'm' };
	struct pd_broker *b = empty_broker();
	msgpack_sbuffer ans = { 0 };
	char err[128] = "";

	(void)state;
	assert_int_equal(pd_admin_answer(b, truncated, sizeof(truncated), &ans, err, sizeof(err)),
			 -EPROTO);
	assert_true(err[0] != '\0');
	assert_null(ans.data);
	free(b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_frame_len),
		cmocka_unit_test(test_cancel_req_id_bounds),
		cmocka_unit_test(test_scan_refused),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
