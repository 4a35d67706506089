/* SPDX-License-Identifier: MIT */
#ifndef PD_TOOLS_PDCTL_PDCTL_H
#define PD_TOOLS_PDCTL_PDCTL_H

/*
 * pdctl internals, shared by its files:
 *   pdctl.c          main: options, dispatch, --help
 *   pdctl_seg.c      the segment, read-only: attach, classify, snapshot
 *   pdctl_status.c   status and watch (text and JSON)
 *   pdctl_metrics.c  Prometheus text exposition (and JSON)
 *   pdctl_admin.c    the admin socket client (one msgpack frame each way)
 *   pdctl_rows.c     admin answers as tables or JSON; cancel
 *   pdctl_json.c     JSON values (jansson) from text, numbers and msgpack
 */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>
#include <msgpack.h>

#include "pd_compiler.h"
#include "pd_expo.h"
#include "pd_layout.h"
#include "pd_stats.h"

/* Exit codes (documented in --help). */
#define PDCTL_EXIT_OK       0
#define PDCTL_EXIT_FAIL     1 /* anything else (e.g. cancel of an unknown request) */
#define PDCTL_EXIT_USAGE    2 /* unknown command or flag, missing argument */
#define PDCTL_EXIT_NOBROKER 3 /* no segment and no admin socket under that name */
#define PDCTL_EXIT_DEAD     4 /* the segment belongs to a dead broker */
#define PDCTL_EXIT_TIMEOUT  5 /* the broker did not answer in time (or refused) */

#define PDCTL_TIMEOUT_MS  2000u
#define PDCTL_STALE_NS    (2ull * 1000000000ull) /* stats older than this: warn */
#define PDCTL_MAX_ARGS    8

struct pdctl_opts {
	char name[PD_SHM_NAME_MAX + 1];
	const char *rundir;        /* NULL: $PDKV_RUNDIR, else the default */
	char admin_path[256];      /* <rundir>/<name>.admin */
	int json;
	uint32_t timeout_ms;
	const char *cmd;
	const char *args[PDCTL_MAX_ARGS];
	int nargs;
	const char *state;         /* requests --state */
	uint32_t count;            /* watch --count (0: until SIGINT) */
	uint32_t interval_ms;      /* watch --interval */
};

/* ---- pdctl_json.c: JSON values built with jansson. A constructor returns
 * a new reference, or NULL when out of memory; json_pack's "o" takes it and
 * fails on a NULL, so a failure anywhere reaches the document's root. */
/* s[0..len) as a JSON string, invalid UTF-8 -> U+FFFD. */
json_t *pdctl_json_strn(const char *s, size_t len);
json_t *pdctl_json_str(const char *s);
/* An integer; above INT64_MAX (beyond jansson's integers) a real. */
json_t *pdctl_json_u64(uint64_t v);
/* A real; null when v is not finite. */
json_t *pdctl_json_f64(double v);
/* num: a decimal number as text ("42", "0.5"): an integer or a real. */
json_t *pdctl_json_num(const char *num);
/* A msgpack object as JSON (nesting bounded; deeper becomes null). */
json_t *pdctl_json_mp(const msgpack_object *o);
/* obj[key] = v, the key made valid UTF-8; takes v (NULL: fails).
 * @return 0 or -ENOMEM. */
int pdctl_json_setn(json_t *obj, const char *key, size_t klen, json_t *v);
int pdctl_json_set(json_t *obj, const char *key, json_t *v);
/* doc to stdout (pretty: indented, else one line) and a newline; takes doc.
 * @return 0; -ENOMEM doc is NULL (said on stderr); -EIO writing failed. */
int pdctl_json_print(json_t *doc, int pretty);
/* s[0..len) for a terminal: control bytes and invalid UTF-8 -> '?'.
 * @return the number of columns written (code points). */
size_t pdctl_text_write(FILE *f, const char *s, size_t len);
/* Length (1..4) of the valid UTF-8 sequence at s[0..len), 0 if invalid. */
size_t pdctl_utf8_len(const unsigned char *s, size_t len);
/* Columns pdctl_text_write() would take. */
size_t pdctl_text_width(const char *s, size_t len);

/* pdctl.c */
void pdctl_err(const char *fmt, ...) PD_PRINTF(1, 2);
/* Flush stdout; PDCTL_EXIT_FAIL (with a message) when writing failed. */
int pdctl_flush(int code);

/* ---- pdctl_seg.c: the values a command shows are a struct pd_expo_val
 * list (pd_expo.h): the region's, else the header's. */

struct pdctl_pool {
	int present;
	uint32_t slots, free, used, hwm;
	uint32_t pools;          /* pools added up (--send-pools); 1 for the recv pool */
};

/* Everything status and metrics show, copied out of the segment. */
struct pdctl_snap {
	char name[PD_SHM_NAME_MAX + 1];
	int32_t pid;
	uint64_t epoch;
	uint32_t state;            /* PD_SHM_* */
	uint64_t start_ns;         /* CLOCK_REALTIME */
	uint64_t now_ns;           /* CLOCK_REALTIME when read */
	uint64_t now_mono_ns;
	uint32_t agents;           /* attached, from the agent table */
	uint32_t max_agents;       /* the table's slots (--max-agents) */
	struct pdctl_pool send, recv;
	int published;             /* the stats region was ever published */
	uint64_t stale_ns;         /* since the last publish (or since start) */
	struct pd_stats *st;       /* a consistent copy (malloc'ed) */
	struct pd_expo_val *vals;    /* the region's values, else the header's */
	uint32_t nvals;
};

/* Attach read-only and copy; on failure print why and return the exit code. */
int pdctl_snap_take(const struct pdctl_opts *o, struct pdctl_snap *s);
void pdctl_snap_free(struct pdctl_snap *s);
/* The exit code (with a message printed) for a broker that could not be
 * reached through its admin socket (rc from pdctl_admin_call). */
int pdctl_explain_admin(const struct pdctl_opts *o, int rc);
const char *pdctl_peer_state_name(uint32_t state);
/* A value of the snapshot by name: 0 or -ENOENT. */
int pdctl_snap_find(const struct pdctl_snap *s, const char *name, uint64_t *v);

/* ---- pdctl_status.c: the sections of status pick values by name. */
int pdctl_val_is_request(const struct pd_expo_val *v); /* "rx." / "tx." gauges */
int pdctl_val_is_moved(const struct pd_expo_val *v);   /* counters of bytes, chunks */
int pdctl_val_is_error(const struct pd_expo_val *v);   /* non-zero error counters */
/* How long the oldest admission wait has lasted (0: none). */
uint64_t pdctl_oldest_wait_ns(const struct pdctl_snap *s);
double pdctl_oldest_wait_s(const struct pdctl_snap *s);
/* The staleness warning, or NULL when the statistics are fresh. */
const char *pdctl_stale_warning(const struct pdctl_snap *s, char *buf, size_t len);
int pdctl_cmd_status(const struct pdctl_opts *o);
int pdctl_cmd_watch(const struct pdctl_opts *o);

/* ---- pdctl_status_json.c: 0, or -errno (said on stderr, or by pdctl_flush). */
int pdctl_status_json(const struct pdctl_snap *s, int pretty);

/* ---- pdctl_metrics.c, pdctl_expo.c: the families of pd_expo.h, written
 * as Prometheus text or as JSON. */
struct pdctl_expo {
	int json;
	json_t *doc;               /* JSON: {"broker", "families": [...]} */
	json_t *samples;           /* JSON: the current family's (borrowed from doc) */
	int err;                   /* JSON: -ENOMEM once a value could not be built */
};

/* The writer of x (text to stdout, or JSON into x->doc). */
void pdctl_expo_init(struct pdctl_expo *x, int json, const char *broker,
		     struct pd_expo_writer *w);
/* The end (JSON: the document printed). 0 or -errno (said on stderr). */
int pdctl_expo_end(struct pdctl_expo *x);
int pdctl_cmd_metrics(const struct pdctl_opts *o);

/* ---- pdctl_admin.c */
struct pdctl_answer {
	msgpack_unpacked msg;      /* owns the objects below */
	const msgpack_object *root; /* the answer map */
	char *buf;
};
/**
 * One exchange: {"cmd": cmd[, key: val]} out, one answer in (a map), all
 * within o->timeout_ms.
 * @return 0; -ENOENT no socket; -ECONNREFUSED; -ETIMEDOUT; -EPROTO a bad
 *         answer; -ENOMEM; -errno.
 */
int pdctl_admin_call(const struct pdctl_opts *o, const char *cmd, const char *key,
		     const char *val, struct pdctl_answer *ans);
void pdctl_answer_free(struct pdctl_answer *ans);
/* The member key of map m, or NULL. */
const msgpack_object *pdctl_mp_get(const msgpack_object *m, const char *key);

/* ---- pdctl_rows.c */
int pdctl_cmd_list(const struct pdctl_opts *o);
int pdctl_cmd_cancel(const struct pdctl_opts *o);

#endif
