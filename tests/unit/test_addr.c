/* SPDX-License-Identifier: MIT */
/* host:port (shm/pd_addr.c): the one parser every flag, Hello and endpoint uses. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pd_addr.h"

static int split(const char *s, uint32_t flags, char *host, size_t hlen, uint16_t *port)
{
	return pd_addr_split(s, strlen(s), flags, host, hlen, port);
}

static void test_refused(void **state)
{
	static const char *const bad[] = {
		"", ":", "host", "host:", ":80", "host:0", "host:65536", "host:80x", "host:-1",
		"::1:80",              /* an IPv6 host needs brackets */
		"[::1]", "[]:80", "[::1:80", "ho st:80", "host:123456", "host:*",
	};
	char host[64];
	uint16_t port;

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		if (split(bad[i], 0, host, sizeof(host), &port) != -EINVAL)
			fail_msg("'%s' accepted", bad[i]);
	assert_int_equal(pd_addr_split(NULL, 0, 0, host, sizeof(host), &port), -EINVAL);
	assert_int_equal(split("a-long-host-name:80", 0, host, 8, &port), -ENAMETOOLONG);
}

static void test_accepted(void **state)
{
	char host[64];
	uint16_t port = 0;

	(void)state;
	assert_int_equal(split("10.0.0.2:17600", 0, host, sizeof(host), &port), 0);
	assert_string_equal(host, "10.0.0.2");
	assert_int_equal(port, 17600);
	assert_int_equal(split("[::1]:65535", 0, host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1"); /* no brackets */
	assert_int_equal(port, 65535);
	assert_int_equal(split("[fe80::1%eth0]:1", 0, host, sizeof(host), &port), 0);
	assert_string_equal(host, "fe80::1%eth0");
	assert_int_equal(split("*:0", PD_ADDR_PORT_ANY, host, sizeof(host), &port), 0);
	assert_string_equal(host, "*");
	assert_int_equal(port, 0);
	assert_int_equal(split("h:*", PD_ADDR_PORT_ANY, host, sizeof(host), &port), 0);
	assert_int_equal(port, 0);
	assert_int_equal(split("h:*", PD_ADDR_PORT_STAR, host, sizeof(host), &port), 0);
	assert_int_equal(split("h:0", PD_ADDR_PORT_STAR, host, sizeof(host), &port), -EINVAL);
	/* Only len bytes count: a Hello address is not NUL-terminated. */
	assert_int_equal(pd_addr_split("h:80garbage", 4, 0, host, sizeof(host), &port), 0);
	assert_int_equal(port, 80);
	assert_int_equal(split("h:80", 0, NULL, 0, NULL), 0); /* a check only */
}

static void test_join(void **state)
{
	char out[64];

	(void)state;
	assert_int_equal(pd_addr_join(out, sizeof(out), "10.0.0.2", 7), 10);
	assert_string_equal(out, "10.0.0.2:7");
	(void)pd_addr_join(out, sizeof(out), "::1", 80);
	assert_string_equal(out, "[::1]:80");
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_refused),
		cmocka_unit_test(test_accepted),
		cmocka_unit_test(test_join),
	};

	return cmocka_run_group_tests_name("addr", tests, NULL, NULL);
}
