/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_RUN_H
#define PD_TESTS_SUPPORT_PD_RUN_H

/* Running this build's programs (pdctl, pdbench) from tests. */
#include <stddef.h>
#include <stdint.h>

/* "<build dir of this variant>/<prog>" (e.g. build/asan/pdctl). 0 or -ENAMETOOLONG. */
int pd_run_bin(const char *prog, char *buf, size_t len);

struct pd_run_result {
	int exit_code;              /* exit status, or 128 + signal */
	char *out;                  /* stdout, NUL-terminated (malloc'ed; free it) */
	size_t out_len;
	char *err;                  /* stderr, likewise */
	size_t err_len;
};

/**
 * Run argv (argv[0]: a path) with stdin from /dev/null, capture stdout and
 * stderr (each up to 16 MiB), wait at most timeout_ms (then SIGKILL: exit
 * 128 + 9). The child dies with the test (PR_SET_PDEATHSIG).
 * @return 0 (see r); -errno when it could not be started.
 */
int pd_run(const char *const *argv, uint32_t timeout_ms, struct pd_run_result *r);

/* Free what pd_run() allocated. NULL-safe. */
void pd_run_free(struct pd_run_result *r);

/* A file's whole text, NUL-terminated (malloc'ed; free it), e.g. what a
 * program wrote with --json FILE; NULL if it cannot be read. */
char *pd_run_slurp(const char *path);

#endif
