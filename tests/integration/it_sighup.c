/* SPDX-License-Identifier: MIT */
/* SIGHUP: a broker with --log-file reopens it (as logrotate expects), one
 * without says it ignored it; either stays up and keeps serving. */
#include <signal.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "it_fixture.h"

/* A transfer from the prefill to the decode broker, every byte verified. */
static void moves_data(struct it *t, const char *req)
{
	assert_int_equal(it_put(t, req, 0, 3, 3), 0);
	it_expect_event(t, req, PD_EV_PUT_DONE);
	it_verify(t, req, 3);
	assert_int_equal(pd_recv_release(t->da, req), 0);
}

/* Lines of the file at path that contain needle (0 when it does not exist). */
static uint32_t file_count(const char *path, const char *needle)
{
	char line[1024];
	FILE *f = fopen(path, "r");
	uint32_t n = 0;

	while (f && fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	if (f)
		(void)fclose(f);
	return n;
}

/* Wait (bounded) until the file at path has want lines with needle; how many. */
static uint32_t file_wait_n(const char *path, const char *needle, uint32_t want)
{
	uint64_t deadline = pd_deadline_ms(3000);
	uint32_t n;

	while ((n = file_count(path, needle)) < want && pd_now_ns() < deadline)
		(void)nanosleep(&(struct timespec){ 0, 10 * 1000 * 1000 }, NULL);
	return n;
}

static uint32_t file_wait(const char *path, const char *needle)
{
	return file_wait_n(path, needle, 1);
}

/* b runs: it has not exited (nor been killed). */
static void still_running(const struct pd_test_broker *b)
{
	int status;

	assert_int_equal(waitpid(b->pid, &status, WNOHANG), 0);
}

static void hangup(const struct pd_test_broker *b)
{
	assert_int_equal(kill(b->pid, SIGHUP), 0);
}

static char log_path[128], rotated[sizeof(log_path) + 2];
static const char *const with_log_file[] = { "--log-file", log_path, NULL };

/* A decode broker logging to log_path (fresh: neither file exists). */
static struct it *start_with_log_file(void)
{
	(void)snprintf(log_path, sizeof(log_path), "/tmp/pdkv-it-hup-%d.log", (int)getpid());
	(void)snprintf(rotated, sizeof(rotated), "%s.1", log_path);
	(void)unlink(log_path);
	(void)rmdir(log_path); /* left by a failed run */
	(void)unlink(rotated);
	return it_start_opts(&(struct it_opts){ .send_slots = 8, .recv_slots = 16,
						.d_extra = with_log_file });
}

/* A decode broker with --log-file: the file renamed away (what logrotate
 * does), then SIGHUP: a new file at the path takes the new lines ("SIGHUP:
 * log reopened", an agent attached after it), the renamed one keeps the
 * old and gets none of them; the broker stays up, its agents and a new
 * one move data, and SIGTERM still ends it cleanly. */
static void test_sighup_reopens_the_log_file(void **state)
{
	struct it *t = start_with_log_file();
	struct pd_agent *late;

	(void)state;
	assert_int_equal(file_wait(log_path, "agent 1 attached"), 1);
	moves_data(t, "before-hup");
	assert_int_equal(rename(log_path, rotated), 0);
	hangup(&t->d);
	assert_int_equal(file_wait(log_path, "SIGHUP: log reopened"), 1);
	still_running(&t->d);
	late = it_attach(&t->d, PD_AGENT_RECV);
	assert_int_equal(file_wait(log_path, "agent 2 attached"), 1);
	moves_data(t, "after-hup");
	assert_int_equal(file_count(rotated, " ready: ctrl "), 1); /* its start-up line */
	assert_int_equal(file_count(rotated, "agent 1 attached"), 1);
	assert_int_equal(file_count(rotated, "SIGHUP"), 0);
	assert_int_equal(file_count(rotated, "agent 2 attached"), 0);
	assert_int_equal(file_count(log_path, "agent 1 attached"), 0);
	pd_agent_detach(late);
	pd_agent_detach(t->da);
	t->da = NULL;
	assert_int_equal(pd_test_broker_stop(&t->d), 0); /* exit 0 */
	assert_int_equal(file_wait(log_path, "shutting down"), 1);
	assert_int_equal(unlink(log_path), 0);
	assert_int_equal(unlink(rotated), 0);
	it_stop(t, 0);
}

/* The path cannot be opened any more (a directory took its place): the
 * broker says so where it logged until then, stays up and serves. */
static void test_sighup_keeps_the_log_it_cannot_reopen(void **state)
{
	struct it *t = start_with_log_file();

	(void)state;
	assert_int_equal(file_wait(log_path, "agent 1 attached"), 1);
	assert_int_equal(rename(log_path, rotated), 0);
	assert_int_equal(mkdir(log_path, 0700), 0);
	hangup(&t->d);
	assert_int_equal(file_wait(rotated, "SIGHUP: cannot reopen --log-file"), 1);
	still_running(&t->d);
	moves_data(t, "after-hup");
	it_stop(t, 0);
	assert_int_equal(rmdir(log_path), 0);
	assert_int_equal(unlink(rotated), 0);
}

#define IGNORED "SIGHUP: received and ignored (no --log-file to reopen)"

/* Brokers without --log-file: SIGHUP, twice, is logged as ignored; both
 * stay up, their agents move data, a new agent attaches. */
static void test_sighup_without_log_file_is_ignored(void **state)
{
	struct it *t = it_start(8, 16);
	struct pd_agent *late;

	(void)state;
	for (uint32_t i = 1; i <= 2; i++) {
		hangup(&t->p);
		hangup(&t->d);
		assert_int_equal(file_wait_n(t->p.log, IGNORED, i), i);
		assert_int_equal(file_wait_n(t->d.log, IGNORED, i), i);
	}
	still_running(&t->p);
	still_running(&t->d);
	moves_data(t, "after-hup");
	late = it_attach(&t->d, PD_AGENT_RECV);
	pd_agent_detach(late);
	moves_data(t, "again");
	it_stop(t, 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_sighup_reopens_the_log_file),
		cmocka_unit_test(test_sighup_keeps_the_log_it_cannot_reopen),
		cmocka_unit_test(test_sighup_without_log_file_is_ignored),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
