/* SPDX-License-Identifier: MIT */
#ifndef PD_TESTS_SUPPORT_PD_CURVE_FIXTURE_H
#define PD_TESTS_SUPPORT_PD_CURVE_FIXTURE_H

/*
 * Brokers with CURVE on the control plane, for integration tests and
 * benchmarks. A peers file binds each key to a broker name, and a dialling
 * broker's lists the control endpoint of the broker it dials: so the names
 * and endpoints are chosen first (pd_test_broker_prepare()), the keys and
 * files written (pd_curve_make()), and only then are the brokers started
 * (pd_test_broker_restart() starts a prepared broker). Header only.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "pd_ctrl.h"
#include "pd_proc.h"
#include "pd_test.h"

/* Name, rundir, log and a fresh control endpoint, as pd_test_broker_start()
 * would choose them; not started. 0 or -errno. */
static inline int pd_test_broker_prepare(struct pd_test_broker *b, const char *tag)
{
	int port = pd_test_free_port();

	if (port < 0)
		return port;
	memset(b, 0, sizeof(*b));
	pd_test_name(b->name, sizeof(b->name), tag);
	(void)snprintf(b->rundir, sizeof(b->rundir), "/tmp/pdkv-it-%d", (int)getpid());
	(void)snprintf(b->ctrl, sizeof(b->ctrl), "tcp://127.0.0.1:%d", port);
	(void)snprintf(b->log, sizeof(b->log), "%s/%s.log", b->rundir, b->name);
	(void)mkdir(b->rundir, 0700);
	return 0;
}

#define PD_CURVE_MAX 4u

/* Key pairs in a directory of their own: key[i] (file), pub[i] (Z85). */
struct pd_curve {
	char dir[96];
	uint32_t n;
	char key[PD_CURVE_MAX][160];
	char pub[PD_CURVE_MAX][41];
	char peers[PD_CURVE_MAX][160];  /* written by pd_curve_peers() */
};

/* n key pairs (pd_ctrl_keygen, as pdbroker --keygen). 0 or -errno. */
static inline int pd_curve_make(struct pd_curve *k, uint32_t n)
{
	static unsigned seq;
	char err[256];
	int rc;

	if (n > PD_CURVE_MAX)
		return -EINVAL;
	memset(k, 0, sizeof(*k));
	(void)snprintf(k->dir, sizeof(k->dir), "/tmp/pdkv-curve-%d.%u", (int)getpid(), seq++);
	if (mkdir(k->dir, 0700) < 0)
		return -errno;
	for (k->n = 0; k->n < n; k->n++) {
		char dir[sizeof(k->dir)];

		memcpy(dir, k->dir, sizeof(dir));
		(void)snprintf(k->key[k->n], sizeof(k->key[0]), "%s/%u.key", dir, k->n);
		rc = pd_ctrl_keygen(k->key[k->n], k->pub[k->n], err, sizeof(err));
		if (rc < 0) {
			(void)fprintf(stderr, "pd_curve_make: %s\n", err);
			return rc;
		}
	}
	return 0;
}

/* Peers file i: the text given ("NAME KEY [ENDPOINT]" lines). 0 or -errno. */
static inline int pd_curve_peers(struct pd_curve *k, uint32_t i, const char *text)
{
	FILE *f;

	char dir[sizeof(k->dir)];

	memcpy(dir, k->dir, sizeof(dir));
	(void)snprintf(k->peers[i], sizeof(k->peers[0]), "%s/%u.peers", dir, i);
	f = fopen(k->peers[i], "w");
	if (!f)
		return -errno;
	(void)fputs(text, f);
	return fclose(f) == 0 ? 0 : -errno;
}

static inline void pd_curve_clean(struct pd_curve *k)
{
	for (uint32_t i = 0; i < PD_CURVE_MAX; i++) {
		if (k->key[i][0])
			(void)unlink(k->key[i]);
		if (k->peers[i][0])
			(void)unlink(k->peers[i]);
	}
	if (k->dir[0])
		(void)rmdir(k->dir);
	k->dir[0] = '\0';
}

#endif
