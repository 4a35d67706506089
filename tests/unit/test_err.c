/* SPDX-License-Identifier: MIT */
/* Error boundary, messages, logging helpers. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include <pdkv/pdkv.h>

#include "pd_err.h"
#include "pd_log.h"
#include "pd_sync.h"

static void test_err_set_null_buffer(void **state)
{
	char buf[8] = "keep";

	(void)state;
	pd_err_set(NULL, 10, "x%d", 1);
	pd_err_set(buf, 0, "x%d", 1);
	assert_string_equal(buf, "keep");
	pd_err_set(buf, sizeof(buf), "%s", "truncated message");
	assert_int_equal(strlen(buf), sizeof(buf) - 1);
}

static void test_rc_conversions(void **state)
{
	(void)state;
	errno = EACCES;
	assert_int_equal(pd_sys_rc(-1), -EACCES);
	assert_int_equal(pd_sys_rc(5), 5);
	assert_int_equal(pd_pthread_rc(ETIMEDOUT), -ETIMEDOUT);
	assert_int_equal(pd_pthread_rc(0), 0);
}

static void test_strerror_codes(void **state)
{
	static const int codes[] = { EINVAL, EPROTO, ENOBUFS, EAGAIN, EBUSY, ETIMEDOUT,
				     ECANCELED, E2BIG, ESTALE, ENOTCONN, EOWNERDEAD, ENOMEM,
				     EUSERS };

	(void)state;
	for (size_t i = 0; i < sizeof(codes) / sizeof(codes[0]); i++) {
		const char *neg = pd_strerror(-codes[i]);

		assert_non_null(neg);
		assert_true(strlen(neg) > 0);
		/* Same message for the positive and negative form. */
		assert_string_equal(neg, pd_strerror(codes[i]));
	}
	assert_string_equal(pd_strerror(0), "success");
	assert_string_equal(pd_strerror(-ENOTCONN), "broker gone");
	assert_non_null(strstr(pd_strerror(-EUSERS), "--max-agents"));
	assert_non_null(pd_strerror(-99999));
}

static void test_version(void **state)
{
	(void)state;
	assert_string_equal(pd_version(), PD_VERSION_STRING);
}

static void test_log_level_parse(void **state)
{
	(void)state;
	assert_int_equal(pd_log_level_parse("bogus"), -EINVAL);
	assert_int_equal(pd_log_level_parse(NULL), -EINVAL);
	assert_int_equal(pd_log_level_parse("none"), PD_LOG_NONE);
	assert_int_equal(pd_log_level_parse("WARN"), PD_LOG_WARN);
	assert_int_equal(pd_log_level_parse("debug"), PD_LOG_DEBUG);
}

struct captured {
	int calls;
	int level;
	char msg[128];
};

static void capture(void *ctx, int level, const char *comp, const char *msg)
{
	struct captured *c = ctx;

	c->calls++;
	c->level = level;
	(void)snprintf(c->msg, sizeof(c->msg), "%s:%s", comp, msg);
}

static void test_log_silent_by_default_and_routed(void **state)
{
	struct captured c = { 0 };

	(void)state;
	assert_int_equal(pd_log_level, PD_LOG_NONE);
	pd_log_set_fn(capture, &c);
	PD_LOG(ERR, shm, "dropped %d", 1);
	assert_int_equal(c.calls, 0);
	pd_log_set_level(PD_LOG_WARN);
	errno = EXDEV;
	PD_LOG(WARN, shm, "kept %d", 2);
	assert_int_equal(errno, EXDEV); /* logging preserves errno */
	PD_LOG(INFO, shm, "filtered");
	assert_int_equal(c.calls, 1);
	assert_int_equal(c.level, PD_LOG_WARN);
	assert_string_equal(c.msg, "shm:kept 2");
	for (int i = 0; i < 5; i++)
		PD_LOG_RL(ERR, slot, "burst %d", i);
	assert_int_equal(c.calls, 2); /* one per second per site */
	pd_log_set_level(PD_LOG_NONE);
	pd_log_set_fn(NULL, NULL);
}

static void test_self_pid(void **state)
{
	(void)state;
	assert_int_equal(pd_self_pid(), (int32_t)getpid());
	assert_int_equal(pd_self_pid(), (int32_t)getpid());
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_err_set_null_buffer),
		cmocka_unit_test(test_rc_conversions),
		cmocka_unit_test(test_strerror_codes),
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_log_level_parse),
		cmocka_unit_test(test_log_silent_by_default_and_routed),
		cmocka_unit_test(test_self_pid),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
