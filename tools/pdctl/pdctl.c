/* SPDX-License-Identifier: MIT */
/*
 * pdctl: the operator's view of a pdkv broker.
 *   status, metrics, watch    read the broker's segment (read-only)
 *   agents, requests, peers   ask its admin socket
 *   cancel REQ_ID             ask its admin socket to cancel a request
 */
#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <pdkv/version.h>

#include "pd_admin_proto.h"
#include "pd_rundir.h"
#include "pd_segment.h"
#include "pdctl.h"

#define OPT_NAME     1
#define OPT_RUNDIR   2
#define OPT_JSON     3
#define OPT_TIMEOUT  4
#define OPT_STATE    5
#define OPT_COUNT    6
#define OPT_INTERVAL 7
#define OPT_HELP     8
#define OPT_VERSION  9

static const struct {
	const char *name;
	int id;
	int has_arg;
} options[] = {
	{ "name", OPT_NAME, 1 },         { "rundir", OPT_RUNDIR, 1 },
	{ "json", OPT_JSON, 0 },         { "timeout", OPT_TIMEOUT, 1 },
	{ "state", OPT_STATE, 1 },       { "count", OPT_COUNT, 1 },
	{ "interval", OPT_INTERVAL, 1 }, { "help", OPT_HELP, 0 },
	{ "version", OPT_VERSION, 0 },
};

static const struct {
	const char *name;
	int nargs;
	int (*run)(const struct pdctl_opts *o);
} commands[] = {
	{ "status", 0, pdctl_cmd_status },  { "metrics", 0, pdctl_cmd_metrics },
	{ "watch", 0, pdctl_cmd_watch },    { "agents", 0, pdctl_cmd_list },
	{ "requests", 0, pdctl_cmd_list },  { "peers", 0, pdctl_cmd_list },
	{ "cancel", 1, pdctl_cmd_cancel },
};

static const char usage_text[] =
	"Usage: pdctl [--name NAME | --rundir DIR] [--json] [--timeout MS] COMMAND [ARGS]\n"
	"The operator's view of a pdkv broker (options may also follow the command).\n"
	"\n"
	"Commands:\n"
	"  status                 the broker from its segment, read-only: identity, pools,\n"
	"                         admission, agents, peers, traffic, errors, latency and\n"
	"                         every counter (works while the broker's loop is stuck)\n"
	"  metrics                the same values in the Prometheus text format\n"
	"  watch [--count N] [--interval MS]\n"
	"                         status every second (or MS) until Ctrl-C (N frames)\n"
	"  agents                 attached agents (from the admin socket)\n"
	"  requests [--state S]   live requests, oldest first, optionally in one state:\n"
	"                         sending: declared (waiting for admission), admitted\n"
	"                         (waiting for the agent's next batch), allocating,\n"
	"                         writing, draining; receiving: waiting, admitted, ready\n"
	"  peers                  peer brokers\n"
	"  cancel REQ_ID          cancel a request\n"
	"\n"
	"Options:\n"
	"  --name NAME     broker name (default: $PDKV_BROKER, else \"default\"); its\n"
	"                  segment is /dev/shm/pdkv.NAME\n"
	"  --rundir DIR    where its admin socket DIR/NAME.admin is (default:\n"
	"                  $PDKV_RUNDIR, else /run/pdkv for root, $XDG_RUNTIME_DIR/pdkv,\n"
	"                  else /tmp/pdkv-UID; not root, /run/pdkv next)\n"
	"  --json          JSON output (one object; watch: one object per line)\n"
	"  --timeout MS    how long to wait for the broker (default 2000)\n"
	"  --help, --version\n"
	"\n"
	"Exit status:\n"
	"  0  success\n"
	"  1  other failure (e.g. the broker refused: cancel of an unknown request)\n"
	"  2  usage: unknown command or option, missing or bad argument\n"
	"  3  no broker runs under that name (no segment and no admin socket)\n"
	"  4  the segment belongs to a dead broker (stale: restart the broker or\n"
	"     remove the file)\n"
	"  5  the broker did not answer in time (admin socket timeout, or it refused\n"
	"     the connection although its segment says it is alive)\n";

void pdctl_err(const char *fmt, ...)
{
	char buf[1024];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(buf, sizeof(buf), fmt, ap);
	va_end(ap);
	for (char *p = buf; *p; p++) /* one line, whatever the broker sent */
		if ((unsigned char)*p < 0x20 || *p == 0x7f)
			*p = '?';
	(void)fprintf(stderr, "pdctl: %s\n", buf);
}

int pdctl_flush(int code)
{
	if (fflush(stdout) != 0 || ferror(stdout)) {
		pdctl_err("cannot write the output: %s", strerror(errno));
		return code ? code : PDCTL_EXIT_FAIL;
	}
	return code;
}

static int usage(const char *fmt, ...) PD_PRINTF(1, 2);

static int usage(const char *fmt, ...)
{
	char msg[256];
	va_list ap;

	va_start(ap, fmt);
	(void)vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	pdctl_err("%s (see pdctl --help)", msg);
	return -EINVAL;
}

static int parse_u32(const char *opt, const char *s, uint32_t min, uint32_t max, uint32_t *out)
{
	char *end;
	unsigned long long v;

	errno = 0;
	v = strtoull(s, &end, 10);
	if (s[0] < '0' || s[0] > '9' || *end || errno || v < min || v > max) {
		pdctl_err("--%s %s: not a number in [%u, %u] (see pdctl --help)", opt, s, min,
			  max);
		return -EINVAL;
	}
	*out = (uint32_t)v;
	return 0;
}

static int set_option(struct pdctl_opts *o, int id, const char *opt, const char *val)
{
	switch (id) {
	case OPT_NAME:
		if (pd_segment_path(val, o->admin_path, sizeof(o->admin_path)) < 0)
			return usage("bad broker name '%s': 1..63 of [A-Za-z0-9._-]", val);
		(void)snprintf(o->name, sizeof(o->name), "%s", val);
		return 0;
	case OPT_RUNDIR: o->rundir = val; return 0;
	case OPT_JSON: o->json = 1; return 0;
	case OPT_TIMEOUT: return parse_u32(opt, val, 1, 3600000, &o->timeout_ms);
	case OPT_STATE: o->state = val; return 0;
	case OPT_COUNT: return parse_u32(opt, val, 1, UINT32_MAX, &o->count);
	case OPT_INTERVAL: return parse_u32(opt, val, 10, 3600000, &o->interval_ms);
	case OPT_HELP: (void)fputs(usage_text, stdout); return 1;
	case OPT_VERSION: printf("pdctl %s\n", PD_VERSION_STRING); return 1;
	default: return -EINVAL;
	}
}

/* "--opt", "--opt=val" or "--opt val" (consuming argv[*i + 1]). */
static int parse_option(struct pdctl_opts *o, int argc, char **argv, int *i, uint32_t *seen)
{
	const char *arg = argv[*i] + 2, *eq = strchr(arg, '=');
	size_t len = eq ? (size_t)(eq - arg) : strlen(arg);

	for (size_t k = 0; k < PD_ARRAY_SIZE(options); k++) {
		const char *val = eq ? eq + 1 : NULL;

		if (strlen(options[k].name) != len || strncmp(options[k].name, arg, len) != 0)
			continue;
		if (options[k].has_arg && !val) {
			if (*i + 1 >= argc)
				return usage("option --%s needs an argument", options[k].name);
			val = argv[++*i];
		}
		if (!options[k].has_arg && val)
			return usage("option --%s takes no argument", options[k].name);
		*seen |= 1u << options[k].id;
		return set_option(o, options[k].id, options[k].name, val);
	}
	return usage("unknown option '%s'", argv[*i]);
}

static int add_word(struct pdctl_opts *o, const char *w)
{
	if (!o->cmd) {
		o->cmd = w;
		return 0;
	}
	if (o->nargs >= PDCTL_MAX_ARGS)
		return usage("too many arguments (from '%s')", w);
	o->args[o->nargs++] = w;
	return 0;
}

static int parse_argv(struct pdctl_opts *o, int argc, char **argv, uint32_t *seen)
{
	int rc = 0, words_only = 0;

	for (int i = 1; i < argc && rc == 0; i++) {
		const char *a = argv[i];

		if (!words_only && strcmp(a, "--") == 0)
			words_only = 1;
		else if (!words_only && strcmp(a, "-h") == 0)
			rc = set_option(o, OPT_HELP, "help", NULL);
		else if (!words_only && strncmp(a, "--", 2) == 0)
			rc = parse_option(o, argc, argv, &i, seen);
		else if (!words_only && a[0] == '-' && a[1])
			rc = usage("unknown option '%s'", a);
		else
			rc = add_word(o, a);
	}
	return rc;
}

/* Options that belong to one command only. */
static int check_command(const struct pdctl_opts *o, uint32_t seen, int *cmd)
{
	*cmd = -1;
	if (!o->cmd)
		return usage("%s", "no command given");
	for (size_t k = 0; k < PD_ARRAY_SIZE(commands); k++)
		if (strcmp(o->cmd, commands[k].name) == 0)
			*cmd = (int)k;
	if (*cmd < 0)
		return usage("unknown command '%s'", o->cmd);
	if (o->nargs < commands[*cmd].nargs)
		return usage("%s: missing argument", o->cmd);
	if (o->nargs > commands[*cmd].nargs)
		return usage("%s: unexpected argument", o->args[commands[*cmd].nargs]);
	if ((seen & (1u << OPT_STATE)) && strcmp(o->cmd, "requests") != 0)
		return usage("%s", "--state goes with 'requests' only");
	if ((seen & (1u << OPT_COUNT | 1u << OPT_INTERVAL)) && strcmp(o->cmd, "watch") != 0)
		return usage("%s", "--count and --interval go with 'watch' only");
	return 0;
}

/* Name and admin socket path from the options, else the environment. */
static int resolve(struct pdctl_opts *o)
{
	const char *env = getenv("PDKV_BROKER");
	int rc;

	if (!o->name[0]) {
		const char *n = env && env[0] ? env : "default";

		if (pd_segment_path(n, o->admin_path, sizeof(o->admin_path)) < 0)
			return usage("bad broker name '%s' in $PDKV_BROKER", n);
		(void)snprintf(o->name, sizeof(o->name), "%s", n);
	}
	env = getenv("PDKV_RUNDIR");
	if (!o->rundir && env && env[0])
		o->rundir = env;
	rc = pd_rundir_path(o->rundir, o->name, PD_ADMIN_SUFFIX, o->admin_path,
			    sizeof(o->admin_path));
	if (rc < 0)
		return usage("--rundir %s: path too long", o->rundir ? o->rundir : "");
	return 0;
}

int main(int argc, char **argv)
{
	struct pdctl_opts o = { .timeout_ms = PDCTL_TIMEOUT_MS, .interval_ms = 1000 };
	uint32_t seen = 0;
	int cmd = -1, rc = parse_argv(&o, argc, argv, &seen);

	if (rc > 0)
		return pdctl_flush(PDCTL_EXIT_OK); /* --help, --version */
	if (rc == 0 && o.cmd && strcmp(o.cmd, "help") == 0 && o.nargs == 0) {
		(void)fputs(usage_text, stdout);
		return pdctl_flush(PDCTL_EXIT_OK);
	}
	if (rc == 0)
		rc = check_command(&o, seen, &cmd);
	if (rc == 0)
		rc = resolve(&o);
	if (rc < 0)
		return PDCTL_EXIT_USAGE;
	return commands[cmd].run(&o);
}
