/* SPDX-License-Identifier: MIT */
/* Hostile input against a running decode broker: it refuses, counts, and
 * keeps serving. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zmq.h>

#include "it_fixture.h"
#include "pd_tcp.h"

/* A transfer that must still work afterwards. */
static void still_serves(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 3, 3), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 3);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* Garbage, truncated msgpack, wrong types and a huge count from a raw
 * DEALER: none stops the broker; a valid request right after is served. */
static void test_garbage_on_the_control_plane(void **state)
{
	static const char *const bad[] = {
		"\xff\xfe\xfd garbage",
		/* truncated */
		"\x82\xa4type\xac" "AllocRequ",
		/* type not a string */
		"\x81\xa4type\x2a",
		/* 4097 keys claimed, none there */
		"\x82\xa4type\xac" "AllocRequest\xa4keys\xdd\x00\x00\x10\x01",
		/* req_id of the wrong type */
		"\x83\xa4type\xac" "AllocRequest\xa4keys\x91\xa1k\xa6" "req_id\x05",
	};
	struct it *t = it_start(8, 16);
	void *ctx = zmq_ctx_new(), *s = zmq_socket(ctx, ZMQ_DEALER);
	int linger = 0, tmo = 200;
	char buf[512];

	(void)state;
	assert_int_equal(zmq_setsockopt(s, ZMQ_LINGER, &linger, sizeof(linger)), 0);
	assert_int_equal(zmq_setsockopt(s, ZMQ_RCVTIMEO, &tmo, sizeof(tmo)), 0);
	assert_int_equal(zmq_connect(s, t->d.ctrl), 0);
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		assert_true(zmq_send(s, "", 0, ZMQ_SNDMORE) == 0);
		assert_true(zmq_send(s, bad[i], strlen(bad[i]), 0) > 0);
	}
	assert_true(zmq_send(s, "only one frame", 14, 0) > 0);
	while (zmq_recv(s, buf, sizeof(buf), 0) >= 0)
		; /* Error replies, if any */
	(void)zmq_close(s);
	(void)zmq_ctx_term(ctx);
	still_serves(t, "after-garbage");
	it_stop(t, 0);
}

/* The data port the decode broker advertised (from its log). */
static int data_port(const struct pd_test_broker *b)
{
	char line[512];
	FILE *f = fopen(b->log, "r");
	int port = -1;

	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, ", data 127.0.0.1:");

		if (p)
			port = atoi(p + strlen(", data 127.0.0.1:"));
	}
	if (f)
		(void)fclose(f);
	return port;
}

static int raw_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(0x7f000001) };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	assert_true(fd >= 0);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

static void send_frame(int fd, uint16_t type, uint32_t slot, uint64_t tag, uint32_t len)
{
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				.type = type, .slot = slot, .len = len, .tag = tag };
	uint8_t b[PD_TCP_HDR_SIZE], payload[4096];

	pd_tcp_hdr_encode(&h, b);
	memset(payload, 0xee, sizeof(payload));
	(void)!write(fd, b, sizeof(b));
	if (len)
		(void)!write(fd, payload, len < sizeof(payload) ? len : sizeof(payload));
}

/* The broker closes the connection (reads reach EOF) within 3 s. */
static void expect_closed(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint64_t deadline = pd_deadline_ms(3000);
	char b[256];

	while (pd_now_ns() < deadline) {
		if (poll(&p, 1, 100) > 0 && read(fd, b, sizeof(b)) <= 0)
			break;
	}
	assert_true(pd_now_ns() < deadline);
	(void)close(fd);
}

static void *arena_copy(const struct pd_test_broker *b, size_t *len)
{
	struct pd_segment seg;
	size_t n;
	void *copy, *arena;

	assert_int_equal(pd_segment_attach(b->name, PD_SEG_RDONLY, 1000, &seg, NULL, 0), 0);
	arena = pd_segment_region(&seg, PD_REGION_RECV_ARENA, &n);
	copy = malloc(n);
	assert_non_null(copy);
	memcpy(copy, arena, n);
	pd_segment_destroy(&seg);
	*len = n;
	return copy;
}

/* A raw TCP client writing into slots it was not granted: refused, and
 * not one byte of the receive arena changes. */
static void test_raw_writes_to_ungranted_slots(void **state)
{
	struct it *t = it_start(8, 16);
	int port = data_port(&t->d), fd;
	size_t n1, n2;
	void *before, *after;

	(void)state;
	assert_true(port > 0);
	before = arena_copy(&t->d, &n1);
	fd = raw_connect(port);                          /* DATA without HELLO */
	send_frame(fd, PD_TCP_T_DATA, 0, 0, 4096);
	expect_closed(fd);
	fd = raw_connect(port);                          /* a token nobody issued */
	send_frame(fd, PD_TCP_T_HELLO, 0, 0x5eed, 0);
	send_frame(fd, PD_TCP_T_DATA, 1, 0x5eed, 4096);
	expect_closed(fd);
	fd = raw_connect(port);                          /* not even a frame */
	(void)!write(fd, "GET / HTTP/1.0\r\nHost: pdkv\r\nUser-Agent: nobody-at-all\r\n\r\n", 58);
	expect_closed(fd);
	after = arena_copy(&t->d, &n2);
	assert_int_equal(n1, n2);
	assert_memory_equal(before, after, n1);
	free(before);
	free(after);
	still_serves(t, "after-raw-writes");
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_garbage_on_the_control_plane),
		cmocka_unit_test(test_raw_writes_to_ungranted_slots),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
