/* SPDX-License-Identifier: MIT */
/*
 * The broker's configuration table and what it drives: defaults, long
 * flags, config files, validation, --help and dump.
 * Values themselves are parsed and checked in pd_config_val.c.
 *
 * Config files are parsed here rather than with inih: the format is four
 * rules (key = value, '#' comments, blank lines, trimming), and errors must
 * carry the file, the line and the flag name in one message.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <pdkv/version.h>

#include "pd_config_int.h"
#include "pd_layout.h"
#include "pd_pages.h"
#include "pd_rundir.h"
#include "pd_log.h"
#include "pd_text.h"

#define MS  UINT64_C(1000000)
#define SEC UINT64_C(1000000000)
#define LINE_MAX_LEN 4096
#define USAGE_COLS 80
#define USAGE_FLAG_COLS 28

#define FIELD(f) .off = offsetof(struct pd_config, f), .len = sizeof(((struct pd_config *)0)->f)

static const char *const xport_names[PD_XPORT_MAX] = PD_XPORT_NAMES;

static const char *const level_names[] = {
	[PD_LOG_NONE] = "none", [PD_LOG_ERR] = "err", [PD_LOG_WARN] = "warn",
	[PD_LOG_INFO] = "info", [PD_LOG_DEBUG] = "debug",
};

static const char *const huge_names[] = {
	[PD_HUGE_AUTO] = "auto", [PD_HUGE_ON] = "on", [PD_HUGE_OFF] = "off",
};

#define XPORTS .names = xport_names, .nnames = PD_XPORT_MAX

static const struct pd_cfg_def pd_cfg[] = {
	{ .name = "name", .type = PD_CFG_T_STRING, .flags = PD_CFG_F_REQUIRED, FIELD(name),
	  .min = 1, .max = PD_CFG_NAME_MAX - 1, .arg = "NAME",
	  .help = "broker name, 1..63 of [A-Za-z0-9._-] (required)" },
	{ .name = "config", .type = PD_CFG_T_INCLUDE, .flags = PD_CFG_F_CLI, .arg = "FILE",
	  .help = "load key = value lines here; later flags override" },
	{ .name = "rundir", .type = PD_CFG_T_PATH, FIELD(rundir), .min = 1,
	  .dyndef = pd_config_default_rundir, .arg = "DIR",
	  .help = "directory for the attach socket and the pidfile" },
	{ .name = "ctrl", .type = PD_CFG_T_ENDPOINT, .flags = PD_CFG_F_PORT_ANY, FIELD(ctrl),
	  .min = 1, .def = "tcp://127.0.0.1:17500", .arg = "ENDPOINT",
	  .help = "ZMQ ROUTER bind, tcp://HOST:PORT or ipc://PATH" },
	{ .name = "data", .type = PD_CFG_T_HOSTPORT, .flags = PD_CFG_F_PORT_ANY, FIELD(data),
	  .min = 1, .def = "127.0.0.1:17600", .arg = "HOST:PORT",
	  .help = "TCP data-plane listener (port 0: any free one)" },
	{ .name = "metrics-listen", .type = PD_CFG_T_HOSTPORT, .flags = PD_CFG_F_PORT_ANY,
	  FIELD(metrics_listen), .def = "", .arg = "HOST:PORT",
	  .help = "Prometheus metrics over HTTP at /metrics (port 0: any free one)" },
	{ .name = "send-slots", .type = PD_CFG_T_U32, FIELD(send_slots), .max = PD_CFG_SLOTS_MAX,
	  .def = "256", .arg = "N", .help = "slots in the send pool" },
	{ .name = "send-pools", .type = PD_CFG_T_U32, FIELD(send_pools), .min = 1,
	  .max = PD_CFG_SEND_POOLS_MAX, .def = "1", .arg = "N",
	  .help = "split the send slots into N pools: each sender writes only its own" },
	{ .name = "recv-slots", .type = PD_CFG_T_U32, FIELD(recv_slots), .max = PD_CFG_SLOTS_MAX,
	  .def = "256", .arg = "N", .help = "slots in the receive pool" },
	{ .name = "slot-size", .type = PD_CFG_T_SIZE, FIELD(slot_size), .min = PD_CFG_SLOT_ALIGN,
	  .max = PD_CFG_SLOT_MAX, .align = PD_CFG_SLOT_ALIGN, .def = "1M", .arg = "SIZE",
	  .help = "payload bytes per slot, a multiple of 4K" },
	{ .name = "proxy", .type = PD_CFG_T_ENDPOINT, FIELD(proxy), .def = "", .arg = "ENDPOINT",
	  .help = "ZMQ PUSH target for ProxyNotif" },
	{ .name = "transport", .type = PD_CFG_T_LIST, FIELD(transport), XPORTS, .min = 1,
	  .max = PD_XPORT_MAX, .def = "tcp", .arg = "LIST",
	  .help = "data transports by preference, of rdma,tcp,shm" },
	{ .name = "require", .type = PD_CFG_T_LIST, FIELD(require), XPORTS, .max = PD_XPORT_MAX,
	  .def = "", .arg = "LIST", .help = "transports peers must use: no fallback" },
	{ .name = "rdma-dev", .type = PD_CFG_T_STRING, FIELD(rdma_dev), .max = PD_CFG_NAME_MAX - 1,
	  .def = "", .arg = "NAME",
	  .help = "RDMA device (mlx5_0, rxe0); none: the one owning the --data address" },
	{ .name = "rdma-qps", .type = PD_CFG_T_U32, FIELD(rdma_qps), .min = 1, .max = 16,
	  .def = "2", .arg = "N", .help = "RDMA queue pairs per peer" },
	{ .name = "admission-timeout", .type = PD_CFG_T_SECONDS, FIELD(admission_timeout_ns),
	  .min = MS, .max = 86400 * SEC, .def = "30s", .arg = "SEC",
	  .help = "longest wait of a request for receive slots" },
	{ .name = "admit-grants", .type = PD_CFG_T_U32, FIELD(admit_grants), .max = 4096,
	  .def = "16", .arg = "N",
	  .help = "grants asked with an admission (first chunks need no AllocRequest)" },
	{ .name = "recv-ttl", .type = PD_CFG_T_SECONDS, FIELD(recv_ttl_ns), .min = MS,
	  .max = 86400 * SEC, .def = "120s", .arg = "SEC",
	  .help = "drop a received request idle this long; also a pin's lease" },
	{ .name = "peer-max-requests", .type = PD_CFG_T_U32, FIELD(peer_max_requests),
	  .max = 65536, .def = "0", .arg = "N",
	  .help = "requests a peer may hold; 0: a fair share" },
	{ .name = "peer-max-reserved", .type = PD_CFG_T_U32, FIELD(peer_max_reserved),
	  .max = PD_CFG_SLOTS_MAX, .def = "0", .arg = "N",
	  .help = "recv slots a peer's requests may need; 0: no cap" },
	{ .name = "loan-timeout", .type = PD_CFG_T_SECONDS, FIELD(loan_timeout_ns),
	  .max = 86400 * SEC, .def = "30s", .arg = "SEC",
	  .help = "kill an agent holding a send slot this long; 0: never" },
	{ .name = "preempt-idle", .type = PD_CFG_T_SECONDS, FIELD(preempt_idle_ns),
	  .max = 86400 * SEC, .def = "5s", .arg = "SEC",
	  .help = "fail a request idle this long for a starved peer; 0: never" },
	{ .name = "heartbeat", .type = PD_CFG_T_SECONDS, FIELD(heartbeat_ns), .min = MS,
	  .max = 3600 * SEC, .def = "1s", .arg = "SEC", .help = "peer heartbeat interval" },
	{ .name = "hugepages", .type = PD_CFG_T_ENUM, FIELD(hugepages), .names = huge_names,
	  .nnames = PD_ARRAY_SIZE(huge_names), .def = "auto", .arg = "MODE",
	  .help = "2 MiB staging pages: auto (hugetlb, else /dev/shm THP), on, off" },
	{ .name = "data-threads", .type = PD_CFG_T_U32, FIELD(data_threads), .min = 1, .max = 64,
	  .def = "2", .arg = "N", .help = "data-plane worker threads" },
	{ .name = "max-agents", .type = PD_CFG_T_U32, FIELD(max_agents), .min = 1,
	  .max = PD_MAX_AGENTS, .def = "32", .arg = "N",
	  .help = "agents attached at once, up to the segment's table of agent slots" },
	{ .name = "group", .type = PD_CFG_T_STRING, FIELD(group), .max = PD_CFG_NAME_MAX - 1,
	  .def = "", .arg = "NAME", .help = "group of the socket and segment (mode 0660)" },
	{ .name = "notify-failures", .type = PD_CFG_T_BOOL, FIELD(notify_failures),
	  .def = "false", .help = "tell the proxy about failed requests" },
	{ .name = "log-level", .type = PD_CFG_T_ENUM, FIELD(log_level), .names = level_names,
	  .nnames = PD_ARRAY_SIZE(level_names), .def = "info", .arg = "LEVEL",
	  .help = "none, err, warn, info or debug" },
	{ .name = "log-file", .type = PD_CFG_T_PATH, FIELD(log_file), .def = "", .arg = "FILE",
	  .help = "log to FILE instead of stderr" },
	{ .name = "curve-key", .type = PD_CFG_T_PATH, FIELD(curve_key), .def = "", .arg = "FILE",
	  .help = "CURVE key pair of this broker (--keygen); needs --curve-peers" },
	{ .name = "curve-peers", .type = PD_CFG_T_PATH, FIELD(curve_peers), .def = "",
	  .arg = "FILE", .help = "keys admitted: 'NAME KEY [CTRL-ENDPOINT...]' lines" },
	{ .name = "peer-grace", .type = PD_CFG_T_SECONDS, FIELD(peer_grace_ns), .min = MS,
	  .max = 86400 * SEC, .def = "60s", .arg = "SEC",
	  .help = "forget a peer down this long (at once if the table is full)" },
	{ .name = "keygen", .type = PD_CFG_T_PATH, .flags = PD_CFG_F_CLI, FIELD(keygen),
	  .arg = "FILE", .help = "write a new CURVE key pair to FILE (0600), print its public key" },
	{ .name = "help", .type = PD_CFG_T_BOOL, .flags = PD_CFG_F_CLI, FIELD(show_help),
	  .help = "print this help and exit" },
	{ .name = "version", .type = PD_CFG_T_BOOL, .flags = PD_CFG_F_CLI, FIELD(show_version),
	  .help = "print the version and exit" },
};

const struct pd_cfg_def *pd_config_defs(size_t *n)
{
	*n = PD_ARRAY_SIZE(pd_cfg);
	return pd_cfg;
}

int pd_config_default_rundir(char *buf, size_t len)
{
	return pd_default_rundir(buf, len);
}

void pd_config_defaults(struct pd_config *cfg)
{
	const struct pd_cfg_def *d;
	int rc;

	memset(cfg, 0, sizeof(*cfg));
	for (d = pd_cfg; d < pd_cfg + PD_ARRAY_SIZE(pd_cfg); d++) {
		if (d->dyndef)
			rc = d->dyndef((char *)cfg + d->off, d->len);
		else if (d->def)
			rc = pd_cfg_set(d, cfg, d->def, NULL, 0);
		else
			rc = 0;
		PD_ASSERT(rc == 0);   /* the table's own defaults */
	}
}

static const struct pd_cfg_def *find_def(const char *key, size_t n)
{
	for (const struct pd_cfg_def *d = pd_cfg; d < pd_cfg + PD_ARRAY_SIZE(pd_cfg); d++)
		if (strlen(d->name) == n && strncmp(d->name, key, n) == 0)
			return d;
	return NULL;
}

/* argv[*i] and, when it takes one as a separate word, its value. */
static int parse_one(struct pd_config *c, int argc, char *const argv[], int *i, char *err,
		     size_t errlen)
{
	const char *arg = argv[*i], *key = arg + 2, *eq, *val;
	const struct pd_cfg_def *d;
	size_t klen;

	if (strncmp(arg, "--", 2) != 0 || arg[2] == '\0')
		return pd_cfg_fail(err, errlen, "unexpected argument '%s'", arg);
	eq = strchr(key, '=');
	klen = eq ? (size_t)(eq - key) : strlen(key);
	d = find_def(key, klen);
	if (!d)
		return pd_cfg_fail(err, errlen, "unknown option --%.*s", (int)klen, key);
	if (eq)
		val = eq + 1;
	else if (d->type == PD_CFG_T_BOOL)
		val = "true";
	else if (*i + 1 >= argc || !argv[*i + 1] || strncmp(argv[*i + 1], "--", 2) == 0)
		return pd_cfg_fail(err, errlen, "--%s: missing value", d->name);
	else
		val = argv[++*i];
	if (d->type == PD_CFG_T_INCLUDE)
		return pd_config_load_file(c, val, err, errlen);
	return pd_cfg_set(d, c, val, err, errlen);
}

int pd_config_parse_args(struct pd_config *cfg, int argc, char *const argv[], char *err,
			 size_t errlen)
{
	struct pd_config tmp;
	int rc;

	if (!cfg || argc < 0 || (argc > 0 && !argv))
		return pd_cfg_fail(err, errlen, "bad arguments");
	tmp = *cfg;
	for (int i = 1; i < argc && argv[i]; i++) {
		rc = parse_one(&tmp, argc, argv, &i, err, errlen);
		if (rc < 0)
			return rc;
	}
	*cfg = tmp;
	return 0;
}

/* One line of a config file; the message has no file or line yet. */
static int load_line(struct pd_config *c, char *line, size_t n, char *msg, size_t msglen)
{
	const struct pd_cfg_def *d;
	char *s, *eq, *key;

	if (n > LINE_MAX_LEN)
		return pd_cfg_fail(msg, msglen, "line longer than %d bytes", LINE_MAX_LEN);
	if (strlen(line) != n)
		return pd_cfg_fail(msg, msglen, "NUL byte in line");
	s = pd_text_trim(line);
	if (*s == '\0' || *s == '#')
		return 0;
	eq = strchr(s, '=');
	if (!eq || eq == s)
		return pd_cfg_fail(msg, msglen, "expected 'key = value', got '%s'", s);
	*eq = '\0';
	key = pd_text_trim(s);
	if (key[0] == '-')
		return pd_cfg_fail(msg, msglen, "write '%s' without the dashes", key);
	d = find_def(key, strlen(key));
	if (!d)
		return pd_cfg_fail(msg, msglen, "unknown option --%s", key);
	if (d->flags & PD_CFG_F_CLI)
		return pd_cfg_fail(msg, msglen, "--%s: only on the command line", d->name);
	return pd_cfg_set(d, c, pd_text_trim(eq + 1), msg, msglen);
}

static int io_fail(char *err, size_t errlen, const char *what, const char *path, int rc)
{
	(void)pd_cfg_fail(err, errlen, "--config: cannot %s '%s': %s", what, path, strerror(-rc));
	return rc;
}

int pd_config_load_file(struct pd_config *cfg, const char *path, char *err, size_t errlen)
{
	char *line = NULL, msg[512];
	size_t cap = 0;
	unsigned int lineno = 0;
	struct pd_config tmp;
	ssize_t n;
	FILE *f;
	int rc = 0;

	if (!cfg || !path)
		return pd_cfg_fail(err, errlen, "--config: no file");
	f = fopen(path, "re");
	if (!f)
		return io_fail(err, errlen, "open", path, -errno);
	tmp = *cfg;
	errno = 0;
	while (rc == 0 && (n = getline(&line, &cap, f)) >= 0) {
		lineno++;
		rc = load_line(&tmp, line, (size_t)n, msg, sizeof(msg));
		if (rc < 0)
			(void)pd_cfg_fail(err, errlen, "%s:%u: %s", path, lineno, msg);
	}
	if (rc == 0 && ferror(f))
		rc = io_fail(err, errlen, "read", path, errno ? -errno : -EIO);
	free(line);
	(void)fclose(f);
	if (rc == 0)
		*cfg = tmp;
	return rc;
}

int pd_config_validate(const struct pd_config *cfg, char *err, size_t errlen)
{
	const struct pd_cfg_def *d;
	uint32_t extra;
	int rc;

	if (!cfg)
		return pd_cfg_fail(err, errlen, "no config");
	for (d = pd_cfg; d < pd_cfg + PD_ARRAY_SIZE(pd_cfg); d++) {
		if ((d->flags & PD_CFG_F_REQUIRED) && *((const char *)cfg + d->off) == '\0')
			return pd_cfg_fail(err, errlen, "--%s is required", d->name);
		rc = pd_cfg_check(d, cfg, err, errlen);
		if (rc < 0)
			return rc;
	}
	if ((uint64_t)cfg->send_slots + cfg->recv_slots == 0)
		return pd_cfg_fail(err, errlen, "--send-slots, --recv-slots: both are 0");
	if (cfg->send_slots % cfg->send_pools)
		return pd_cfg_fail(err, errlen, "--send-pools %u: must divide --send-slots (%u)",
				   cfg->send_pools, cfg->send_slots);
	if (!cfg->curve_key[0] != !cfg->curve_peers[0])
		return pd_cfg_fail(err, errlen, cfg->curve_key[0] ?
				   "--curve-key: needs --curve-peers (the keys it admits)" :
				   "--curve-peers: needs --curve-key (this broker's own pair)");
	extra = cfg->require.mask & ~cfg->transport.mask;
	if (extra)
		return pd_cfg_fail(err, errlen, "--require: %s is not in --transport",
				   xport_names[__builtin_ctz(extra)]);
	return 0;
}

/* "  --flag ARG   help [range] (default: X)"; range and default go on a
 * line of their own when one line would pass USAGE_COLS. */
static void usage_line(FILE *out, const struct pd_cfg_def *d)
{
	char flag[48], range[80], def[PD_CFG_PATH_MAX], tail[PD_CFG_PATH_MAX + 128];
	int n;

	(void)snprintf(flag, sizeof(flag), "--%s%s%s", d->name, d->arg ? " " : "",
		       d->arg ? d->arg : "");
	pd_cfg_format_bounds(d, range, sizeof(range));
	def[0] = '\0';
	if (d->dyndef) {
		if (d->dyndef(def, sizeof(def)) < 0)
			def[0] = '\0';
	} else if (d->def) {
		(void)snprintf(def, sizeof(def), "%s", d->def[0] ? d->def : "none");
	}
	(void)snprintf(tail, sizeof(tail), "%s%s%s%s%s%s", range[0] ? "[" : "", range,
		       range[0] ? "] " : "", def[0] ? "(default: " : "", def, def[0] ? ")" : "");
	n = fprintf(out, "  %-*s %s", USAGE_FLAG_COLS, flag, d->help);
	if (tail[0] && n + 1 + (int)strlen(tail) > USAGE_COLS)
		(void)fprintf(out, "\n  %-*s", USAGE_FLAG_COLS, "");
	(void)fprintf(out, "%s%s\n", tail[0] ? " " : "", tail);
}

void pd_config_usage(FILE *out, const char *prog)
{
	(void)fprintf(out, "Usage: %s --name NAME [options]\n"
		      "pdkv broker %s. Every option also works in --config FILE as\n"
		      "'key = value'; sizes take K/M/G; SEC is seconds, or Nms.\n\n",
		      prog ? prog : "pdbroker", PD_VERSION_STRING);
	for (const struct pd_cfg_def *d = pd_cfg; d < pd_cfg + PD_ARRAY_SIZE(pd_cfg); d++)
		usage_line(out, d);
}

void pd_config_dump(FILE *out, const struct pd_config *cfg)
{
	char val[PD_CFG_PATH_MAX + 64];

	(void)fprintf(out, "# pdbroker %s configuration\n", PD_VERSION_STRING);
	for (const struct pd_cfg_def *d = pd_cfg; d < pd_cfg + PD_ARRAY_SIZE(pd_cfg); d++) {
		if (d->flags & PD_CFG_F_CLI)
			continue;
		pd_cfg_format(d, cfg, val, sizeof(val));
		(void)fprintf(out, "%s =%s%s\n", d->name, val[0] ? " " : "", val);
	}
}
