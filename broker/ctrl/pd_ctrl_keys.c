/* SPDX-License-Identifier: MIT */
/*
 * CURVE key files: this broker's key pair (--curve-key, written by
 * pdbroker --keygen) and the keys it admits (--curve-peers), each bound to
 * the one broker name it may use.
 *
 *   key file     # comments
 *                public-key = <40 Z85 characters>
 *                secret-key = <40 Z85 characters>
 *   peers file   # comments
 *                NAME PUBLIC-KEY [ENDPOINT ...]   (whitespace-separated)
 *
 * A key appears once (one name per key); a name may have several keys (a
 * key being replaced); an endpoint, the control endpoint a DEALER dials,
 * belongs to one key (it is the server key demanded there). Every error
 * names the flag, the file and, for a line, its number.
 */
#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bsd/string.h>

#include "pd_ctrl_int.h"
#include "pd_err.h"
#include "pd_text.h"

#define FLAG_KEY    "--curve-key"
#define FLAG_PEERS  "--curve-peers"
#define LINE_MAX_B  4096u
#define PEERS_MAX   65536u

int pd_ctrl_curve_available(void)
{
	return zmq_has("curve") != 0;
}

void pd_ctrl_key_id(const uint8_t key[PD_CTRL_KEY_LEN], char out[PD_CTRL_KEY_ID_LEN + 1])
{
	char z[PD_CTRL_Z85_LEN + 1];

	if (!zmq_z85_encode(z, key, PD_CTRL_KEY_LEN))
		memset(z, '?', sizeof(z));
	memcpy(out, z, PD_CTRL_KEY_ID_LEN);
	out[PD_CTRL_KEY_ID_LEN] = '\0';
}

/* 40 Z85 characters into 32 bytes. */
static int z85_key(const char *s, uint8_t key[PD_CTRL_KEY_LEN])
{
	if (strlen(s) != PD_CTRL_Z85_LEN)
		return -EINVAL;
	return zmq_z85_decode(key, s) ? 0 : -EINVAL;
}

static int no_curve(char *err, size_t errlen, const char *flag)
{
	pd_err_set(err, errlen, "%s: this libzmq has no CURVE (it was built without libsodium)",
		   flag);
	return -ENOTSUP;
}

int pd_ctrl_keygen(const char *path, char pub[41], char *err, size_t errlen)
{
	char sec[PD_CTRL_Z85_LEN + 1], mine[PD_CTRL_Z85_LEN + 1];
	FILE *f;
	int fd, rc = 0;

	if (!path || !path[0] || !pub)
		return -EINVAL;
	if (!pd_ctrl_curve_available())
		return no_curve(err, errlen, "--keygen");
	if (zmq_curve_keypair(mine, sec) < 0)
		return pd_zmq_rc(-1);
	fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0) {
		rc = -errno;
		pd_err_set(err, errlen, "--keygen %s: %s%s", path, pd_strerror(rc),
			   rc == -EEXIST ? " (a key is never overwritten)" : "");
		explicit_bzero(sec, sizeof(sec));
		return rc;
	}
	f = fdopen(fd, "w");
	if (!f) {
		rc = -errno;
		(void)close(fd);
	} else {
		(void)fprintf(f, "# pdkv CURVE key pair (pdbroker --keygen): keep it secret, mode 0600.\n"
			      "# The brokers that admit this one list the public key in their\n"
			      "# --curve-peers file, bound to this broker's --name.\n"
			      "public-key = %s\nsecret-key = %s\n", mine, sec);
		if (fflush(f) != 0 || fsync(fd) != 0)
			rc = -errno;
		if (fclose(f) != 0 && rc == 0)
			rc = -errno;
	}
	explicit_bzero(sec, sizeof(sec));
	if (rc < 0) {
		pd_err_set(err, errlen, "--keygen %s: %s", path, pd_strerror(rc));
		(void)unlink(path);
		return rc;
	}
	memcpy(pub, mine, sizeof(mine)); /* set on success only */
	return 0;
}

/* ---- the key pair ------------------------------------------------------------------ */

/* A secret key must be the owner's alone. */
static int check_mode(FILE *f, const char *path, char *err, size_t errlen)
{
	struct stat st;

	if (fstat(fileno(f), &st) < 0) {
		pd_err_set(err, errlen, FLAG_KEY " %s: %s", path, pd_strerror(-errno));
		return -errno;
	}
	if (!S_ISREG(st.st_mode)) {
		pd_err_set(err, errlen, FLAG_KEY " %s: not a regular file", path);
		return -EINVAL;
	}
	if (st.st_mode & 077) {
		pd_err_set(err, errlen, FLAG_KEY " %s: mode %04o lets others read the secret key "
			   "(chmod 600 it)", path, (unsigned)(st.st_mode & 07777));
		return -EINVAL;
	}
	return 0;
}

/* "public-key = K" or "secret-key = K" into the pair; what is missing counted. */
static int pair_line(struct pd_ctrl_keys *k, char *line, uint32_t *have, char *msg, size_t mlen)
{
	char *s = pd_text_trim(line), *eq = strchr(s, '='), *key, *val;
	int pub;

	if (*s == '\0' || *s == '#')
		return 0;
	if (!eq) {
		pd_err_set(msg, mlen, "expected 'public-key = KEY' or 'secret-key = KEY'");
		return -EINVAL;
	}
	*eq = '\0';
	key = pd_text_trim(s);
	val = pd_text_trim(eq + 1);
	pub = strcmp(key, "public-key") == 0;
	if (!pub && strcmp(key, "secret-key") != 0) {
		pd_err_set(msg, mlen, "unknown key '%s' (public-key, secret-key)", key);
		return -EINVAL;
	}
	if (z85_key(val, pub ? k->pub : k->sec) < 0) {
		pd_err_set(msg, mlen, "%s is not a CURVE key (40 Z85 characters)", key);
		return -EINVAL;
	}
	*have |= pub ? 1u : 2u;
	return 0;
}

/* The pair in file order, then: both there, and the public key the secret one's. */
static int pair_check(struct pd_ctrl_keys *k, uint32_t have, const char *path, char *err,
		      size_t errlen)
{
	char sec_z85[PD_CTRL_Z85_LEN + 1], derived[PD_CTRL_Z85_LEN + 1];
	int ok;

	if (have != 3u) {
		pd_err_set(err, errlen, FLAG_KEY " %s: no %s line", path,
			   have & 1u ? "secret-key" : "public-key");
		return -EINVAL;
	}
	ok = zmq_z85_encode(sec_z85, k->sec, PD_CTRL_KEY_LEN) &&
	     zmq_curve_public(derived, sec_z85) == 0 &&
	     zmq_z85_encode(k->pub_z85, k->pub, PD_CTRL_KEY_LEN) &&
	     strcmp(derived, k->pub_z85) == 0;
	explicit_bzero(sec_z85, sizeof(sec_z85));
	if (!ok) {
		pd_err_set(err, errlen, FLAG_KEY " %s: the public key is not the secret key's", path);
		return -EINVAL;
	}
	return 0;
}

static int load_pair(struct pd_ctrl_keys *k, const char *path, char *err, size_t errlen)
{
	char *line = NULL, msg[160];
	unsigned int lineno = 0;
	uint32_t have = 0;
	size_t cap = 0;
	FILE *f = fopen(path, "re");
	int rc;

	if (!f) {
		rc = -errno;
		pd_err_set(err, errlen, FLAG_KEY " %s: %s", path, pd_strerror(rc));
		return rc;
	}
	rc = check_mode(f, path, err, errlen);
	while (rc == 0 && getline(&line, &cap, f) >= 0) {
		lineno++;
		rc = strlen(line) > LINE_MAX_B ? -EINVAL : pair_line(k, line, &have, msg, sizeof(msg));
		if (rc < 0)
			pd_err_set(err, errlen, FLAG_KEY " %s:%u: %s", path, lineno,
				   strlen(line) > LINE_MAX_B ? "line too long" : msg);
	}
	if (line)
		explicit_bzero(line, cap);
	free(line);
	(void)fclose(f);
	return rc < 0 ? rc : pair_check(k, have, path, err, errlen);
}

/* ---- the peers ------------------------------------------------------------------------ */

static int name_ok(const char *s)
{
	size_t n = strlen(s);

	if (n < 1 || n > PD_WIRE_NAME_MAX)
		return 0;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && !strchr("._-", s[i]))
			return 0;
	return 1;
}

static int endpoint_ok(const char *s)
{
	return strlen(s) < PD_CTRL_ENDPOINT_MAX &&
	       (strncmp(s, "tcp://", 6) == 0 || strncmp(s, "ipc://", 6) == 0) && s[6];
}

static int grow(struct pd_ctrl_keys *k, uint32_t *cap)
{
	struct pd_ctrl_key_entry *t;
	uint32_t n = *cap ? 2 * *cap : 16;

	if (k->n == PEERS_MAX)
		return -E2BIG;
	t = reallocarray(k->e, n, sizeof(*t));
	if (!t)
		return -ENOMEM;
	k->e = t;
	*cap = n;
	return 0;
}

/* The endpoints of a line: each well formed, none another key's. */
static int take_endpoints(struct pd_ctrl_keys *k, struct pd_ctrl_key_entry *e, char **save,
			  char *msg, size_t mlen)
{
	char *tok;

	while ((tok = strtok_r(NULL, " \t\r\n", save))) {
		const struct pd_ctrl_key_entry *o = pd_ctrl_keys_at(k, tok);

		if (!endpoint_ok(tok)) {
			pd_err_set(msg, mlen, "'%.64s' is not an endpoint (tcp://HOST:PORT, ipc://PATH)",
				   tok);
			return -EINVAL;
		}
		for (uint32_t i = 0; !o && i < e->nep; i++)
			o = strcmp(e->ep[i], tok) == 0 ? e : NULL;
		if (o) {
			pd_err_set(msg, mlen, "endpoint %.64s is listed for %s already", tok,
				   o == e ? "this key" : o->name);
			return -EINVAL;
		}
		if (e->nep == PD_CTRL_KEY_EPS) {
			pd_err_set(msg, mlen, "more than %u endpoints", PD_CTRL_KEY_EPS);
			return -EINVAL;
		}
		(void)strlcpy(e->ep[e->nep++], tok, sizeof(e->ep[0]));
	}
	return 0;
}

static int peer_line(struct pd_ctrl_keys *k, char *line, uint32_t *cap, char *msg, size_t mlen)
{
	struct pd_ctrl_key_entry e = { 0 };
	const struct pd_ctrl_key_entry *dup;
	char *save = NULL, *name = strtok_r(line, " \t\r\n", &save), *key;
	int rc;

	if (!name || name[0] == '#')
		return 0;
	key = strtok_r(NULL, " \t\r\n", &save);
	if (!name_ok(name)) {
		pd_err_set(msg, mlen, "'%.64s' is not a broker name (1..63 of [A-Za-z0-9._-])", name);
		return -EINVAL;
	}
	if (!key || z85_key(key, e.key) < 0) {
		pd_err_set(msg, mlen, "expected 'NAME PUBLIC-KEY [ENDPOINT...]': %s",
			   key ? "the key is not 40 Z85 characters" : "no key");
		return -EINVAL;
	}
	dup = pd_ctrl_keys_find(k, e.key);
	if (dup) {
		pd_err_set(msg, mlen, "this key is bound to %s already (one name per key)",
			   dup->name);
		return -EINVAL;
	}
	(void)strlcpy(e.name, name, sizeof(e.name));
	(void)strlcpy(e.z85, key, sizeof(e.z85));
	rc = take_endpoints(k, &e, &save, msg, mlen);
	if (rc == 0 && k->n == *cap)
		rc = grow(k, cap);
	if (rc == -E2BIG || rc == -ENOMEM)
		pd_err_set(msg, mlen, rc == -E2BIG ? "more than %u keys" : "out of memory",
			   PEERS_MAX);
	if (rc == 0)
		k->e[k->n++] = e;
	return rc;
}

static int load_peers(struct pd_ctrl_keys *k, const char *path, char *err, size_t errlen)
{
	char *line = NULL, msg[200];
	unsigned int lineno = 0;
	uint32_t cap = 0;
	size_t lcap = 0;
	ssize_t n;
	FILE *f = fopen(path, "re");
	int rc = 0;

	if (!f) {
		rc = -errno;
		pd_err_set(err, errlen, FLAG_PEERS " %s: %s", path, pd_strerror(rc));
		return rc;
	}
	while (rc == 0 && (n = getline(&line, &lcap, f)) >= 0) {
		lineno++;
		if ((size_t)n > LINE_MAX_B || strlen(line) != (size_t)n) {
			pd_err_set(msg, sizeof(msg), (size_t)n > LINE_MAX_B ? "line too long" :
									   "NUL byte in line");
			rc = -EINVAL;
		} else {
			rc = peer_line(k, line, &cap, msg, sizeof(msg));
		}
		if (rc < 0)
			pd_err_set(err, errlen, FLAG_PEERS " %s:%u: %s", path, lineno, msg);
	}
	if (rc == 0 && ferror(f)) {
		rc = -EIO;
		pd_err_set(err, errlen, FLAG_PEERS " %s: %s", path, pd_strerror(rc));
	}
	free(line);
	(void)fclose(f);
	return rc;
}

int pd_ctrl_keys_load(const char *key_path, const char *peers_path,
		      struct pd_ctrl_keys **out, char *err, size_t errlen)
{
	struct pd_ctrl_keys *k;
	int rc;

	if (!key_path || !peers_path || !out)
		return -EINVAL;
	if (!pd_ctrl_curve_available())
		return no_curve(err, errlen, FLAG_KEY);
	k = calloc(1, sizeof(*k));
	if (!k)
		return -ENOMEM;
	rc = load_pair(k, key_path, err, errlen);
	if (rc == 0)
		rc = load_peers(k, peers_path, err, errlen);
	if (rc < 0) {
		pd_ctrl_keys_free(k);
		return rc;
	}
	*out = k;
	return 0;
}

void pd_ctrl_keys_free(struct pd_ctrl_keys *k)
{
	if (!k)
		return;
	explicit_bzero(k->sec, sizeof(k->sec));
	free(k->e);
	free(k);
}

void pd_ctrl_keys_describe(const struct pd_ctrl_keys *k, char *out, size_t len)
{
	if (!k) {
		(void)strlcpy(out, "unauthenticated", len);
		return;
	}
	(void)snprintf(out, len, "curve, key %.*s, %u peer key%s", (int)PD_CTRL_KEY_ID_LEN,
		       k->pub_z85, k->n, k->n == 1 ? "" : "s");
}

/* ---- lookups ------------------------------------------------------------------------- */

const struct pd_ctrl_key_entry *pd_ctrl_keys_find(const struct pd_ctrl_keys *k,
						  const uint8_t key[PD_CTRL_KEY_LEN])
{
	for (uint32_t i = 0; k && i < k->n; i++)
		if (memcmp(k->e[i].key, key, PD_CTRL_KEY_LEN) == 0)
			return &k->e[i];
	return NULL;
}

const struct pd_ctrl_key_entry *pd_ctrl_keys_find_z85(const struct pd_ctrl_keys *k,
						      const char *z85)
{
	uint8_t key[PD_CTRL_KEY_LEN];

	return z85 && z85_key(z85, key) == 0 ? pd_ctrl_keys_find(k, key) : NULL;
}

const struct pd_ctrl_key_entry *pd_ctrl_keys_at(const struct pd_ctrl_keys *k, const char *ep)
{
	for (uint32_t i = 0; k && i < k->n; i++)
		for (uint32_t j = 0; j < k->e[i].nep; j++)
			if (strcmp(k->e[i].ep[j], ep) == 0)
				return &k->e[i];
	return NULL;
}

const struct pd_ctrl_key_entry *pd_ctrl_keys_only(const struct pd_ctrl_keys *k,
						  const char *name)
{
	const struct pd_ctrl_key_entry *found = NULL;

	for (uint32_t i = 0; k && i < k->n; i++) {
		if (strcmp(k->e[i].name, name) != 0)
			continue;
		if (found)
			return NULL; /* two keys: which one is not ours to guess */
		found = &k->e[i];
	}
	return found;
}
