/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_PROC_H
#define PD_TESTS_SUPPORT_PD_PROC_H

/* Integration-test helpers: real pdbroker processes on loopback. */
#include <stdint.h>
#include <sys/types.h>

struct pd_test_broker {
	pid_t pid;
	char name[64];
	char rundir[96];
	char ctrl[64];              /* tcp://127.0.0.1:PORT */
	char log[192];              /* its stderr */
	uint8_t pidns;              /* 1: the init of a pid namespace of its own (a
				     * container's broker; not root: in a user
				     * namespace too); pd_test_broker_start_ns() */
};

/* fork(), the child the init (pid 1) of a pid namespace of its own, in a
 * user namespace mapping our ids too when not root; what it runs must exec
 * at once (a broker, as a container's). */
pid_t pd_test_fork_init(void);

/* A TCP port that was free a moment ago (bind to 0, read, close). */
int pd_test_free_port(void);

/* Start build/<variant>/pdbroker ($PD_TEST_BIN_DIR/pdbroker when that is
 * set) with the given extra arguments (NULL-terminated; a later --data
 * overrides the default 127.0.0.1:0), a unique name and rundir, and a
 * fresh control port; wait (bounded) until its attach socket exists. 0 or
 * -errno. */
int pd_test_broker_start(struct pd_test_broker *b, const char *tag, const char *const *args);
/* The same, in a pid namespace of its own when pidns (restarts too). */
int pd_test_broker_start_ns(struct pd_test_broker *b, const char *tag, const char *const *args,
			    int pidns);

/* Start b again under the same name, rundir and control endpoint (after a
 * kill: the stale segment and socket are taken over). 0 or -errno. */
int pd_test_broker_restart(struct pd_test_broker *b, const char *const *args);

/* SIGTERM, wait (bounded), SIGKILL if needed; print its log on request. */
int pd_test_broker_stop(struct pd_test_broker *b);
void pd_test_broker_dump_log(const struct pd_test_broker *b);
/* 1 when a line of b's log has text. */
int pd_test_broker_log_has(const struct pd_test_broker *b, const char *text);
/* 1 once a line of b's log has text, within ms; 0 (and the log printed)
 * when none did. */
int pd_test_broker_wait_log(const struct pd_test_broker *b, const char *text, uint32_t ms);

#endif
