/* SPDX-License-Identifier: MIT */
#ifndef PD_BROKER_PD_CONFIG_H
#define PD_BROKER_PD_CONFIG_H

/*
 * pdbroker configuration.
 *
 * One table (pd_config_defs()) drives defaults, long flags (--key value and
 * --key=value), config files (key = value, the same names), bounds checks,
 * --help and pd_config_dump(). Usual sequence:
 *
 *   pd_config_defaults(&c);
 *   pd_config_parse_args(&c, argc, argv, err, sizeof(err));  (--config FILE loads there)
 *   if (c.show_help || c.show_version) ... print and exit 0
 *   pd_config_validate(&c, err, sizeof(err));
 *
 * Units: sizes in bytes (uint64_t), counts uint32_t, durations in
 * nanoseconds (uint64_t, *_ns; the text form is whole seconds or "<n>ms"),
 * booleans uint32_t 0/1. Empty strings mean "not set" (proxy, group,
 * log_file, rdma_dev). Every error message names the flag ("--slot-size:
 * 5000 is not a multiple of 4096"; file errors add "FILE:LINE: " in front)
 * and goes to the optional caller buffer err (may be NULL).
 *
 * Not thread-safe: the broker's main thread configures before starting
 * other threads. No function keeps a pointer to its arguments.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "pd_xport_ids.h"

#define PD_CFG_NAME_MAX     64u        /* incl. NUL: names are 1..63 chars */
#define PD_CFG_PATH_MAX     256u       /* incl. NUL */
#define PD_CFG_ENDPOINT_MAX 256u       /* incl. NUL */
#define PD_CFG_IPC_PATH_MAX 107u       /* sun_path minus the NUL */
#define PD_CFG_SLOTS_MAX    (1u << 24) /* per pool */
#define PD_CFG_SEND_POOLS_MAX 64u      /* PD_SEND_PARTS_MAX of the segment */
#define PD_CFG_SLOT_ALIGN   4096u
#define PD_CFG_SLOT_MAX     (1ull << 30)

/* Transports by id (pd_xport_ids.h); bit (1u << id) in a mask. */
/* A list of distinct transports: mask plus the order they were given in. */
struct pd_cfg_xports {
	uint32_t mask;                 /* bit (1u << PD_XPORT_*) per member */
	uint32_t n;                    /* members in order[] */
	uint32_t order[PD_XPORT_MAX];  /* PD_XPORT_*, most preferred first */
};

struct pd_config {
	char name[PD_CFG_NAME_MAX];       /* --name: required, [A-Za-z0-9._-] */
	char rundir[PD_CFG_PATH_MAX];     /* --rundir: sockets, pidfile */
	char ctrl[PD_CFG_ENDPOINT_MAX];   /* --ctrl: ZMQ ROUTER bind */
	char data[PD_CFG_ENDPOINT_MAX];   /* --data: HOST:PORT TCP listener */
	char metrics_listen[PD_CFG_ENDPOINT_MAX]; /* --metrics-listen: HOST:PORT, "" = off */
	char proxy[PD_CFG_ENDPOINT_MAX];  /* --proxy: PUSH target, "" = none */
	char group[PD_CFG_NAME_MAX];      /* --group: "" = the broker's own */
	char log_file[PD_CFG_PATH_MAX];   /* --log-file: "" = stderr */
	char rdma_dev[PD_CFG_NAME_MAX];   /* --rdma-dev: "" = the device of the --data host */
	char curve_key[PD_CFG_PATH_MAX];  /* --curve-key: this broker's key pair, "" = none */
	char curve_peers[PD_CFG_PATH_MAX]; /* --curve-peers: keys admitted, "" = none */
	char keygen[PD_CFG_PATH_MAX];     /* --keygen FILE (command line only) */
	uint64_t peer_grace_ns;           /* --peer-grace: a down peer is forgotten after it */
	uint64_t slot_size;               /* bytes, multiple of 4 KiB */
	uint64_t admission_timeout_ns;
	uint64_t recv_ttl_ns;
	uint64_t heartbeat_ns;
	uint32_t send_slots;
	uint32_t send_pools;              /* --send-pools: 1..PD_CFG_SEND_POOLS_MAX, divides send_slots */
	uint32_t recv_slots;
	uint32_t data_threads;
	uint32_t max_agents;              /* --max-agents: 1..PD_MAX_AGENTS (the segment's table) */
	uint32_t log_level;               /* PD_LOG_* (pd_log.h) */
	uint32_t hugepages;               /* --hugepages: PD_HUGE_* (pd_pages.h) */
	uint32_t notify_failures;         /* 0/1 */
	uint32_t rdma_qps;                /* --rdma-qps: QPs per RDMA peer, 1..16 */
	uint32_t peer_max_requests;       /* --peer-max-requests: 0 = fair share */
	uint32_t peer_max_reserved;       /* --peer-max-reserved (slots): 0 = no cap */
	uint64_t preempt_idle_ns;         /* --preempt-idle: 0 = never preempt */
	uint64_t loan_timeout_ns;         /* --loan-timeout: 0 = loans never expire */
	uint32_t admit_grants;            /* --admit-grants: slots asked with an admission */
	struct pd_cfg_xports transport;   /* --transport: 1..3, by preference */
	struct pd_cfg_xports require;     /* --require: 0..3, subset of transport */
	uint32_t show_help;               /* --help given (command line only) */
	uint32_t show_version;            /* --version given (command line only) */
};

/* Value kinds of a table entry. */
#define PD_CFG_T_STRING   1u  /* identifier [A-Za-z0-9._-], min..max chars */
#define PD_CFG_T_PATH     2u  /* no control characters, min..len-1 chars */
#define PD_CFG_T_ENDPOINT 3u  /* tcp://HOST:PORT or ipc://PATH ("" if min 0) */
#define PD_CFG_T_HOSTPORT 4u  /* HOST:PORT, port 1..65535 */
#define PD_CFG_T_U32      5u  /* decimal, min..max */
#define PD_CFG_T_SIZE     6u  /* bytes, K/M/G or KiB/MiB/GiB, min..max, align */
#define PD_CFG_T_SECONDS  7u  /* "<n>", "<n>s" or "<n>ms"; stored in ns */
#define PD_CFG_T_BOOL     8u  /* true/false/yes/no/on/off/1/0; bare flag = 1 */
#define PD_CFG_T_ENUM     9u  /* one of names[], stored as its index */
#define PD_CFG_T_LIST     10u /* comma-separated distinct names[], min..max */
#define PD_CFG_T_INCLUDE  11u /* --config FILE: loaded where it appears */

#define PD_CFG_F_CLI      (1u << 0) /* command line only: not in files or dumps */
#define PD_CFG_F_PORT_ANY (1u << 1) /* endpoint: tcp port "*" allowed (bind) */
#define PD_CFG_F_REQUIRED (1u << 2) /* string: "" (unset) parses, validate refuses it */

struct pd_cfg_def {
	const char *name;              /* flag without "--", file key */
	uint32_t type;                 /* PD_CFG_T_* */
	uint32_t flags;                /* PD_CFG_F_* */
	size_t off;                    /* offsetof(struct pd_config, field) */
	size_t len;                    /* sizeof the field */
	uint64_t min, max;             /* value bounds, or length bounds */
	uint64_t align;                /* SIZE: must be a multiple (0 = any) */
	const char *const *names;      /* ENUM, LIST: allowed names */
	uint32_t nnames;
	const char *def;               /* default as text; NULL = none */
	int (*dyndef)(char *buf, size_t len);  /* computed default, or NULL */
	const char *arg;               /* argument kind in --help; NULL = none */
	const char *help;
};

/**
 * The table that drives everything here, for --help, tests and pdctl.
 * @param n  out: number of entries (not NULL).
 * @return the static table; never NULL.
 */
const struct pd_cfg_def *pd_config_defs(size_t *n);

/**
 * The default run directory: /run/pdkv for root, else
 * $XDG_RUNTIME_DIR/pdkv when that is set, absolute and fits, else
 * /tmp/pdkv-<uid>.
 * @return 0; -EINVAL buf NULL; -ENAMETOOLONG len too small.
 */
int pd_config_default_rundir(char *buf, size_t len);

/* Fill cfg with every default of the table (name stays empty: required). */
void pd_config_defaults(struct pd_config *cfg);

/**
 * Apply long flags argv[1..argc-1] over cfg: --key value, --key=value, a
 * bare boolean flag means true; --config FILE loads FILE at that point.
 * cfg is unchanged on error.
 * @return 0; -EINVAL unknown option, missing or bad value, stray argument;
 *         the errors of pd_config_load_file() for --config.
 */
int pd_config_parse_args(struct pd_config *cfg, int argc, char *const argv[], char *err,
			 size_t errlen);

/**
 * Apply a config file over cfg: "key = value" lines; blank lines and lines
 * starting with '#' are skipped; spaces around key and value are trimmed.
 * cfg is unchanged on error.
 * @return 0; -EINVAL syntax, unknown key, bad value (message has the line);
 *         -errno from fopen() (-ENOENT, -EACCES, ...) or reading (-EISDIR,
 *         -EIO).
 */
int pd_config_load_file(struct pd_config *cfg, const char *path, char *err, size_t errlen);

/**
 * Check every field against the table and across fields: --name set,
 * send-slots + recv-slots > 0, --require a subset of --transport.
 * @return 0; -EINVAL with the first problem in err.
 */
int pd_config_validate(const struct pd_config *cfg, char *err, size_t errlen);

/* --help text generated from the table: each flag, its argument, default, help. */
void pd_config_usage(FILE *out, const char *prog);

/* "key = value" lines that pd_config_load_file() reads back identically. */
void pd_config_dump(FILE *out, const struct pd_config *cfg);

#endif
