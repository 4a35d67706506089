/* SPDX-License-Identifier: MIT */
/*
 * pdbroker: the control plane's trust as the broker sees it.
 *
 *  - Data secrets: per peer id, the secret its data connections must
 *    present to us (token[], checked by up_accept) and the one ours present
 *    to it (present[]). The control plane makes them at random per session
 *    and hands them over in HelloAcks; on_peer_up sets both with the new
 *    session (pd_broker_net.c), on_peer_secrets when the session's other
 *    route changed them, on_peer_down clears the accepted one.
 *  - Peers forgotten: the control plane evicts a down peer only while
 *    peer_busy() says no request of ours (sender or receiver side) still
 *    names its id; on_peer_evicted clears what the broker kept per id, so
 *    the id starts clean for the next broker that gets it. The session
 *    counter (sess[]) only ever grows: a connection of the old holder of an
 *    id never matches a session of the new one.
 *  - CURVE keys: loaded at start from --curve-key and --curve-peers (a bad
 *    file is a refusal to start that names the flag), lent to the control
 *    plane.
 */
#include <errno.h>
#include <string.h>

#include "pd_broker_int.h"
#include "pd_log.h"
#include "pd_time.h"

#define BUSY_TTL_NS PD_NS_PER_MS /* busy[] is counted again after this */

void pd_broker_on_secrets(void *ctx, uint32_t peer, const struct pd_ctrl_secrets *s)
{
	struct pd_broker *b = ctx;

	if (peer >= MAX_TOKENS)
		return;
	(void)pthread_mutex_lock(&b->tok_lock);
	b->token[peer] = s->accept; /* the same session: sess[] stays */
	b->present[peer] = s->present;
	(void)pthread_mutex_unlock(&b->tok_lock);
}

uint64_t pd_broker_present_token(const struct pd_broker *b, uint32_t peer)
{
	return peer < MAX_TOKENS ? b->present[peer] : 0;
}

static void mark_tx(void *ctx, const struct pd_tx_info *i)
{
	uint8_t *busy = ctx;

	if (i->peer < MAX_TOKENS)
		busy[i->peer] = 1;
}

static void mark_rx(void *ctx, const struct pd_rx_info *i)
{
	uint8_t *busy = ctx;

	if (i->peer < MAX_TOKENS)
		busy[i->peer] = 1;
}

/* The peers our live requests name, counted once per burst of questions. */
int pd_broker_peer_busy(void *ctx, uint32_t peer)
{
	struct pd_broker *b = ctx;
	uint64_t now = pd_now_ns();

	if (peer >= MAX_TOKENS)
		return 0;
	if (!b->busy_ns || now - b->busy_ns >= BUSY_TTL_NS) {
		memset(b->busy, 0, sizeof(b->busy));
		if (b->tx)
			pd_tx_foreach(b->tx, mark_tx, b->busy);
		if (b->rx)
			pd_rx_foreach(b->rx, mark_rx, b->busy);
		b->busy_ns = now;
	}
	return b->busy[peer];
}

void pd_broker_peer_evicted(void *ctx, uint32_t peer)
{
	struct pd_broker *b = ctx;

	if (peer >= MAX_TOKENS)
		return;
	(void)pthread_mutex_lock(&b->tok_lock);
	b->token[peer] = 0;
	b->present[peer] = 0;
	b->sess[peer]++; /* never reset: the old holder's connections stay stale */
	atomic_store(&b->unseen_in[peer], 0);
	(void)pthread_mutex_unlock(&b->tok_lock);
	memset(&b->px[peer], 0, sizeof(b->px[peer]));
	atomic_store(&b->acct[peer].bytes_tx, 0);
	atomic_store(&b->acct[peer].chunks_tx, 0);
	atomic_store(&b->acct[peer].bytes_rx, 0);
	atomic_store(&b->acct[peer].chunks_rx, 0);
}

int pd_broker_keys_load(struct pd_broker *b, char *err, size_t errlen)
{
	if (!b->cfg.curve_key[0])
		return 0;
	return pd_ctrl_keys_load(b->cfg.curve_key, b->cfg.curve_peers, &b->keys, err, errlen);
}
