/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_TEST_H
#define PD_TESTS_SUPPORT_PD_TEST_H

/* Helpers shared by the tests: unique names, shared memory for fork tests,
 * child processes with deadlines. Children never call cmocka asserts: they
 * _exit(code) and the parent checks the status. */
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* "test.<pid>.<n>.<tag>": unique per process and call. */
void pd_test_name(char *buf, size_t len, const char *tag);

/* Anonymous MAP_SHARED memory (zeroed, page aligned) inherited across
 * fork(); pd_test_shared_free() unmaps it. NULL on failure. */
void *pd_test_shared_alloc(size_t len);
void pd_test_shared_free(void *p, size_t len);

/* Fork; the child runs fn(arg) and _exit()s with its return value. -errno on failure. */
pid_t pd_test_fork(int (*fn)(void *arg), void *arg);

/* As pd_test_fork(), with fn run in a pid namespace of its own, as in a
 * container: the child forked unshares one (and, not root, a user namespace
 * mapping its own ids to themselves), its child is the namespace's init,
 * which skips `burn` pids (ns_last_pid; else, up to 64, by forking) and
 * forks fn's process (pid 2 + burn there). A
 * signal that kills fn's process ends the returned pid with 128 + it, as
 * pd_test_wait() reports a signal; each process dies with its parent. */
pid_t pd_test_fork_pidns(int (*fn)(void *arg), void *arg, unsigned burn);
/* 1 when pd_test_fork_pidns() can work here, else 0 (no namespaces). */
int pd_test_pidns_ok(void);
/* Just after unshare(CLONE_NEWUSER) (or a clone with it): map uid and gid,
 * this process's before, to themselves there. 0 or -1. */
int pd_test_map_ids(uid_t uid, gid_t gid);

/* The first number in a file (/proc/sys/...), or dflt when it cannot be
 * read; write one (0 or -1). */
int64_t pd_test_read_num(const char *path, int64_t dflt);
int pd_test_write_num(const char *path, int64_t v);

/* Wait for pid at most timeout_ms; on timeout it is SIGKILLed and
 * -ETIMEDOUT returned. Otherwise the exit code (0..255), or 128 + signal. */
int pd_test_wait(pid_t pid, uint32_t timeout_ms);

/* 1 when a unix socket at path accepts a connection, else 0. */
int pd_test_unix_listening(const char *path);

/* The CPU time (utime + stime, in clock ticks) process pid has used; 0 when
 * it cannot be read. */
uint64_t pd_test_cpu_ticks(pid_t pid);

#endif
