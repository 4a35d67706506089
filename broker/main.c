/* SPDX-License-Identifier: MIT */
/* pdbroker: the per-node broker daemon. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include <pdkv/version.h>

#include "pd_broker.h"
#include "pd_ctrl.h"
#include "pd_err.h"
#include "pd_log.h"

/* --keygen FILE: a new key pair there; its public key on stdout. */
static int keygen(const char *path)
{
	char pub[41], err[512] = "";
	int rc = pd_ctrl_keygen(path, pub, err, sizeof(err));

	if (rc < 0) {
		(void)fprintf(stderr, "pdbroker: %s\n", err[0] ? err : pd_strerror(rc));
		return 1;
	}
	(void)printf("%s\n", pub);
	return 0;
}

static int configure(struct pd_config *cfg, int argc, char **argv)
{
	char err[512] = "";

	pd_config_defaults(cfg);
	if (pd_config_parse_args(cfg, argc, argv, err, sizeof(err)) < 0) {
		(void)fprintf(stderr, "pdbroker: %s\n", err);
		return 2;
	}
	if (cfg->show_help) {
		pd_config_usage(stdout, "pdbroker");
		return 0;
	}
	if (cfg->show_version) {
		(void)printf("pdbroker %s (shm ABI %d.%d)\n", pd_version(), PD_SHM_ABI_MAJOR,
			     PD_SHM_ABI_MINOR);
		return 0;
	}
	if (cfg->keygen[0])
		return keygen(cfg->keygen);
	if (pd_config_validate(cfg, err, sizeof(err)) < 0) {
		(void)fprintf(stderr, "pdbroker: %s\n", err);
		return 2;
	}
	return -1; /* carry on */
}

/* --log-file: stderr goes there (opened first, so that a failure is still
 * said on the stderr we have). */
static int open_log(const struct pd_config *cfg)
{
	int rc;

	pd_log_set_level((int)cfg->log_level);
	if (cfg->log_file[0]) {
		rc = pd_log_stderr_to(cfg->log_file);
		if (rc < 0) {
			(void)fprintf(stderr, "pdbroker: --log-file %s: cannot open: %s\n",
				      cfg->log_file, pd_strerror(rc));
			return -1;
		}
	}
	(void)setvbuf(stderr, NULL, _IOLBF, 0);
	return 0;
}

/* A SIGHUP during start-up waits for the loop (which handles it) instead of
 * killing the broker half made: log rotation may come at any time. */
static void hold_hangups(void)
{
	sigset_t set;

	(void)sigemptyset(&set);
	(void)sigaddset(&set, SIGHUP);
	(void)sigprocmask(SIG_BLOCK, &set, NULL);
}

int main(int argc, char **argv)
{
	struct pd_config cfg;
	struct pd_broker *b;
	char err[512] = "";
	int rc = configure(&cfg, argc, argv);

	if (rc >= 0)
		return rc;
	if (open_log(&cfg) < 0)
		return 2;
	(void)signal(SIGPIPE, SIG_IGN);
	hold_hangups();
	rc = pd_broker_create(&cfg, &b, err, sizeof(err));
	if (rc < 0) {
		(void)fprintf(stderr, "pdbroker: %s%s%s\n", err[0] ? err : "", err[0] ? ": " : "",
			      pd_strerror(rc));
		return 1;
	}
	rc = pd_broker_run(b);
	pd_broker_destroy(b);
	if (rc < 0) {
		(void)fprintf(stderr, "pdbroker: event loop failed: %s\n", pd_strerror(rc));
		return 1;
	}
	return 0;
}
