/* SPDX-License-Identifier: MIT */
/*
 * Trust on the control plane: the data secrets of a peer's session, and
 * the authority of a Hello over a session that is up (pd_ctrl.h, "Trust").
 *
 * One secret per session: whoever answers the first Hello of a session
 * makes it; a later handshake of the same session (the peer dials us back,
 * or we it) hands out the one the session already has, so the values the
 * broker accepts and presents do not change under connections already
 * opened with them. Only when both Hellos cross (each side answers before
 * it has the other's HelloAck) does a session get two: then each side
 * accepts the one of its own HelloAck and presents the one of the other's.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>

#include "pd_ctrl_int.h"
#include "pd_err.h"

/* A random non-zero u64 (getrandom: the kernel's CSPRNG). */
static int random_u64(uint64_t *v)
{
	for (int i = 0; i < 8; i++) {
		ssize_t n = getrandom(v, sizeof(*v), 0);

		if (n == (ssize_t)sizeof(*v) && *v)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
	return -EIO;
}

int pd_ctrl_secret_ours(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	(void)c;
	if (p->sec_ours)
		return 0;
	if (p->sec_theirs) { /* the session has one: its other route gets the same */
		p->sec_ours = p->sec_theirs;
		return 0;
	}
	return random_u64(&p->sec_ours);
}

void pd_ctrl_secrets_report(struct pd_ctrl *c, struct pd_ctrl_peer *p)
{
	struct pd_ctrl_secrets s = { .accept = p->sec_ours ? p->sec_ours : p->sec_theirs,
				     .present = p->sec_theirs ? p->sec_theirs : p->sec_ours };

	if (p->state != PD_CTRL_PEER_UP || (s.accept == p->rep_accept && s.present == p->rep_present))
		return; /* not up yet: on_peer_up tells them */
	p->rep_accept = s.accept;
	p->rep_present = s.present;
	if (c->ops.on_peer_secrets)
		c->ops.on_peer_secrets(c->o.ctx, p->id, &s);
}

void pd_ctrl_secrets_end(struct pd_ctrl_peer *p)
{
	uint64_t last = p->sec_theirs ? p->sec_theirs : p->sec_ours;

	if (last) /* what the peer will know this session by, when it says Hello again */
		p->resume = last;
	p->sec_ours = p->sec_theirs = 0;
	p->rep_accept = p->rep_present = 0;
	p->has_key = 0;
}

static int same_route(const struct pd_ctrl_peer *p, const struct pd_ctrl_from *f)
{
	return p->rid_len && p->rid_len == f->rid_len && memcmp(p->rid, f->rid, f->rid_len) == 0;
}

/*
 * p is up. An older epoch is a stale process: refused. With CURVE, the key
 * decides (the ZAP handler and the name check let only the holder of a key
 * bound to p's name get here): the session's own key may start a new
 * session, another key (the name's second one) may not while this one
 * lives. Without CURVE, anybody can send anything, so only what a stranger
 * cannot know counts: a newer epoch (a restart), or the session's secret
 * (the same process, on a new DEALER after its data lanes failed). A Hello
 * on the route the session came by, or on a route it has not got yet (the
 * peer dials us back), joins the session without resetting it.
 */
int pd_ctrl_hello_authority(const struct pd_ctrl *c, const struct pd_ctrl_peer *p,
			    const struct pd_ctrl_from *f, const struct pd_msg_hello *h,
			    const uint8_t *key, int *reset, char *text, size_t tlen)
{
	const char *n = p->hello.name;

	*reset = 0;
	if (h->epoch < p->epoch) {
		pd_err_set(text, tlen, "Hello refused: %s is up with a newer epoch", n);
		return -ESTALE;
	}
	if (c->keys) {
		if (p->has_key && (!key || memcmp(key, p->key, PD_CTRL_KEY_LEN) != 0)) {
			pd_err_set(text, tlen, "Hello refused: %s is up with another key", n);
			return -EPERM;
		}
		*reset = h->epoch != p->epoch || (p->rid_len && !same_route(p, f));
		return 0;
	}
	if (h->epoch > p->epoch) {
		*reset = 1;
		return 0;
	}
	if (same_route(p, f) || !p->rid_len)
		return 0;
	if (h->resume && (h->resume == p->sec_ours || h->resume == p->sec_theirs)) {
		*reset = 1;
		return 0;
	}
	pd_err_set(text, tlen, "Hello refused: %s is up (a new session needs a newer epoch "
		   "or the session's secret)", n);
	return -EPERM;
}
