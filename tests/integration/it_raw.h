/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_INTEGRATION_IT_RAW_H
#define PD_TESTS_INTEGRATION_IT_RAW_H

/*
 * A raw client of a broker's TCP data port, for tests of what it refuses:
 * connections, frames of our choosing (pd_tcp.h's wire format), and what
 * the receive arena holds. Static inline helpers only.
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "it_fixture.h"
#include "pd_segment.h"
#include "pd_tcp.h"

/* The port after key (e.g. ", data 127.0.0.1:") in b's log, its start-up
 * line; -1 when not found (yet). */
static inline int it_logged_port(const struct pd_test_broker *b, const char *key)
{
	char line[512];
	FILE *f = fopen(b->log, "r");
	int port = -1;

	while (f && fgets(line, sizeof(line), f)) {
		const char *p = strstr(line, key);

		if (p)
			port = atoi(p + strlen(key));
	}
	if (f)
		(void)fclose(f);
	return port;
}

/* b's data port, from its start-up line, which comes a moment after the
 * sockets pd_test_broker_start() waits for: waited for (5 s at most); -1
 * when not found. */
static inline int it_data_port(const struct pd_test_broker *b)
{
	uint64_t deadline = pd_deadline_ms(5000);
	int port;

	while ((port = it_logged_port(b, ", data 127.0.0.1:")) <= 0 && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 5 * 1000 * 1000 }, NULL);
	return port;
}

/* A connection to 127.0.0.1:port, or -1. */
static inline int it_raw_try_connect(int port)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
				 .sin_addr.s_addr = htonl(0x7f000001) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		(void)close(fd);
		fd = -1;
	}
	return fd;
}

static inline int it_raw_connect(int port)
{
	int fd = it_raw_try_connect(port);

	assert_true(fd >= 0);
	return fd;
}

/* A frame; a DATA frame's payload is len bytes of 0xee. */
static inline void it_raw_frame(int fd, uint16_t type, uint32_t slot, uint32_t gen, uint64_t tag,
				uint32_t len)
{
	struct pd_tcp_hdr h = { .magic = PD_TCP_MAGIC, .version = PD_TCP_WIRE_VERSION,
				.type = type, .slot = slot, .gen = gen, .len = len, .tag = tag };
	uint8_t b[PD_TCP_HDR_SIZE], payload[4096];

	pd_tcp_hdr_encode(&h, b);
	memset(payload, 0xee, sizeof(payload));
	/* MSG_NOSIGNAL: the broker may close first, which is what is tested */
	(void)!send(fd, b, sizeof(b), MSG_NOSIGNAL);
	for (uint32_t left = len; left;) {
		uint32_t n = left < sizeof(payload) ? left : (uint32_t)sizeof(payload);

		if (send(fd, payload, n, MSG_NOSIGNAL) != (ssize_t)n)
			break; /* refused and closed: the caller looks */
		left -= n;
	}
}

/* The next frame the broker sends (within 3 s): 0 and *h, or -1. */
static inline int it_raw_read(int fd, struct pd_tcp_hdr *h)
{
	uint8_t b[PD_TCP_HDR_SIZE];
	size_t got = 0;
	struct pollfd p = { .fd = fd, .events = POLLIN };

	while (got < sizeof(b) && poll(&p, 1, 3000) > 0) {
		ssize_t r = read(fd, b + got, sizeof(b) - got);

		if (r <= 0)
			return -1;
		got += (size_t)r;
	}
	return got == sizeof(b) && pd_tcp_hdr_decode(b, 0, h) == 0 ? 0 : -1;
}

/* HELLO with token: the status of the broker's reply (-1: none). */
static inline int it_raw_hello(int fd, uint64_t token)
{
	struct pd_tcp_hdr h;

	it_raw_frame(fd, PD_TCP_T_HELLO, 0, 0, token, 0);
	return it_raw_read(fd, &h) == 0 && h.type == PD_TCP_T_HELLO ? h.status : -1;
}

/* The broker closes the connection (reads reach EOF) within 3 s. */
static inline void it_expect_closed(int fd)
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

/* A copy of b's receive arena (free() it), its length in *len. */
static inline void *it_arena_copy(const struct pd_test_broker *b, size_t *len)
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

#endif
