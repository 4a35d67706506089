"""A tiny decoder-only transformer in numpy with a paged KV cache.

Everything is float32 and drawn from ``numpy.random.default_rng(seed)``:
nothing is downloaded.  The model is deliberately small (vocab 64, d_model
64, 3 layers, 4 heads of 16) but has the parts a serving engine deals with:

* a **paged KV cache**: per layer one array of shape
  ``[num_blocks, 2, block_tokens, n_heads_local, head_dim]`` (2 = K, V);
  a request owns a list of block ids (its block table); logical block i of
  the request holds its tokens ``[i*block_tokens, (i+1)*block_tokens)``;
* **tensor parallelism**: rank r of tp holds heads
  ``[r*H/tp, (r+1)*H/tp)`` (their Q/K/V columns, their rows of the output
  projection, their KV cache) and computes a partial attention output; the
  partials are summed in rank order (p0 + p1 + ...) by an all-reduce; the
  MLP, embeddings and head are replicated;
* **chunked prefill**: :func:`chunk_schedule` splits the prompts into chunks
  under a per-step token budget, several requests per step, and every chunk
  but a request's last is a whole number of blocks, so each step finishes
  whole KV blocks.

Determinism: every request's rows go through their own matmuls (one row set
per request, never stacked with other requests), so the shapes of every
BLAS call depend only on the request and its chunk, not on which requests
happen to share a step or a process.  A single process that holds all
shards (:class:`Model` with ``ranks=range(tp)``) computes the same partials
as the rank processes and sums them in the same order, so its results are
bit-identical to theirs.

The prefill computes the KV of every prompt token but the last; the decode
side feeds the last prompt token as its first decode step (which yields the
first generated token), so the decode needs nothing from the prefill but
the KV cache.
"""
from dataclasses import dataclass

import numpy as np

F32 = np.float32


@dataclass(frozen=True)
class Config:
    """Model and cache geometry."""
    vocab: int = 64
    d_model: int = 64
    n_layers: int = 3
    n_heads: int = 4
    head_dim: int = 16
    d_mlp: int = 128
    block_tokens: int = 8
    max_pos: int = 512
    eps: float = 1e-5

    def heads_local(self, tp):
        if tp < 1 or self.n_heads % tp:
            raise ValueError(f"tp={tp} must divide n_heads={self.n_heads}")
        return self.n_heads // tp

    def block_shape(self, tp):
        """Shape of one block of one layer: [2, block_tokens, heads, head_dim]."""
        return (2, self.block_tokens, self.heads_local(tp), self.head_dim)

    def block_bytes(self, tp):
        return int(np.prod(self.block_shape(tp))) * 4

    def blocks_for(self, n_tokens):
        return -(-n_tokens // self.block_tokens)


def init_weights(cfg, seed):
    """All weights, float32, from default_rng(seed) (scaled by 1/sqrt(fan_in))."""
    rng = np.random.default_rng(seed)
    D, M, HD = cfg.d_model, cfg.d_mlp, cfg.n_heads * cfg.head_dim

    def mat(rows, cols):
        return (rng.standard_normal((rows, cols)) / np.sqrt(rows)).astype(F32)

    w = {"emb": rng.standard_normal((cfg.vocab, D)).astype(F32),
         "pos": (0.5 * rng.standard_normal((cfg.max_pos, D))).astype(F32),
         "norm_f": np.ones(D, F32), "head": mat(D, cfg.vocab), "layers": []}
    for _ in range(cfg.n_layers):
        w["layers"].append({
            "norm1": (1 + 0.1 * rng.standard_normal(D)).astype(F32),
            "wq": mat(D, HD), "wk": mat(D, HD), "wv": mat(D, HD),
            "wo": mat(HD, D),
            "norm2": (1 + 0.1 * rng.standard_normal(D)).astype(F32),
            "w1": mat(D, M), "w2": mat(M, D)})
    return w


def rmsnorm(x, g, eps):
    ms = np.mean(x * x, axis=-1, keepdims=True)
    return (x / np.sqrt(ms + F32(eps))) * g


def silu(x):
    return x / (F32(1) + np.exp(-x))


def new_caches(cfg, tp, num_blocks):
    """One zeroed paged cache per layer for one rank."""
    shape = (num_blocks,) + cfg.block_shape(tp)
    return [np.zeros(shape, F32) for _ in range(cfg.n_layers)]


def slots(cfg, table, start, end):
    """(block ids, offsets) of token positions [start, end) of a request."""
    pos = np.arange(start, end)
    blocks = np.asarray(table, dtype=np.int64)[pos // cfg.block_tokens]
    return blocks, pos % cfg.block_tokens


class Shard:
    """The attention weights of one TP rank: its heads' Q/K/V and Wo rows."""

    def __init__(self, cfg, weights, rank, tp):
        self.cfg, self.rank, self.tp = cfg, rank, tp
        self.h = cfg.heads_local(tp)
        lo, hi = rank * self.h * cfg.head_dim, (rank + 1) * self.h * cfg.head_dim
        self.layers = [{k: np.ascontiguousarray(lw[k][:, lo:hi])
                        for k in ("wq", "wk", "wv")} for lw in weights["layers"]]
        for lw, sw in zip(weights["layers"], self.layers):
            sw["wo"] = np.ascontiguousarray(lw["wo"][lo:hi, :])

    def attend(self, layer, xn, start, table, cache):
        """Partial attention output of this shard for rows at positions
        [start, start+n): writes their K/V into ``cache`` (this layer's
        paged cache) through ``table``, attends causally over positions
        [0, start+n), returns ``out @ Wo[rows of this shard]`` ([n, D])."""
        cfg, w = self.cfg, self.layers[layer]
        n, hd = xn.shape[0], cfg.head_dim
        end = start + n
        q = (xn @ w["wq"]).reshape(n, self.h, hd)
        k = (xn @ w["wk"]).reshape(n, self.h, hd)
        v = (xn @ w["wv"]).reshape(n, self.h, hd)
        b, o = slots(cfg, table, start, end)
        cache[b, 0, o] = k
        cache[b, 1, o] = v
        b, o = slots(cfg, table, 0, end)
        K = np.ascontiguousarray(cache[b, 0, o].transpose(1, 2, 0))  # [h, hd, T]
        V = np.ascontiguousarray(cache[b, 1, o].transpose(1, 0, 2))  # [h, T, hd]
        Q = np.ascontiguousarray(q.transpose(1, 0, 2))               # [h, n, hd]
        s = (Q @ K) * F32(1.0 / np.sqrt(hd))                          # [h, n, T]
        mask = np.arange(end)[None, :] > np.arange(start, end)[:, None]
        s = np.where(mask[None], F32(-1e30), s)
        s = np.exp(s - s.max(axis=-1, keepdims=True))
        p = s / s.sum(axis=-1, keepdims=True)
        out = np.ascontiguousarray((p @ V).transpose(1, 0, 2)).reshape(n, self.h * hd)
        return out @ w["wo"]


def sum_in_rank_order(parts):
    """p0 + p1 + ... in rank order: the all-reduce's arithmetic, shared by
    the single-process reference and the rank processes."""
    out = parts[0]
    for p in parts[1:]:
        out = out + p
    return out


def local_allreduce(parts_per_item):
    """All-reduce of a process that holds every shard: per item, the sum of
    its shards' partials in rank order."""
    return [sum_in_rank_order(parts) for parts in parts_per_item]


class Model:
    """The replicated weights plus the attention shards of ``ranks``.

    A rank process builds ``Model(cfg, seed, tp, [rank])``; the
    single-process reference builds ``Model(cfg, seed, tp, range(tp))``.
    ``caches[i][layer]`` is the paged cache of shard i (of ``self.shards``).
    """

    def __init__(self, cfg, seed, tp, ranks):
        self.cfg, self.tp = cfg, tp
        self.w = init_weights(cfg, seed)
        self.shards = [Shard(cfg, self.w, r, tp) for r in ranks]

    def new_caches(self, num_blocks):
        return [new_caches(self.cfg, self.tp, num_blocks) for _ in self.shards]

    def mlp(self, layer, h):
        lw = self.w["layers"][layer]
        x = rmsnorm(h, lw["norm2"], self.cfg.eps)
        return h + silu(x @ lw["w1"]) @ lw["w2"]

    def logits(self, h):
        return rmsnorm(h, self.w["norm_f"], self.cfg.eps) @ self.w["head"]

    def forward(self, items, caches, allreduce=local_allreduce, on_layer=None):
        """One engine step, layer by layer over the step's items.

        items: list of (tokens, start, block_table), one per request chunk
        (tokens at positions [start, start+len)).  After each layer,
        ``on_layer(layer)`` is called (its KV of every item is in the cache
        by then).  Returns each item's logits of its last row ([1, vocab]).
        """
        cfg = self.cfg
        hs = []
        for toks, start, _ in items:
            toks = np.asarray(toks, dtype=np.int64)
            hs.append(self.w["emb"][toks] + self.w["pos"][start:start + len(toks)])
        for layer in range(cfg.n_layers):
            norm1 = self.w["layers"][layer]["norm1"]
            parts = []
            for h, (_, start, table) in zip(hs, items):
                xn = rmsnorm(h, norm1, cfg.eps)
                parts.append([s.attend(layer, xn, start, table, c[layer])
                              for s, c in zip(self.shards, caches)])
            attn = allreduce(parts)
            hs = [self.mlp(layer, h + a) for h, a in zip(hs, attn)]
            if on_layer is not None:
                on_layer(layer)
        return [self.logits(h[-1:]) for h in hs]


def make_prompts(cfg, seed, n, lo=20, hi=70):
    """n prompts of random lengths in [lo, hi] and random tokens."""
    rng = np.random.default_rng(seed + 7919)
    return [rng.integers(0, cfg.vocab, size=int(rng.integers(lo, hi + 1))).astype(np.int64)
            for _ in range(n)]


def chunk_schedule(lengths, block_tokens, budget=32, max_chunk=16, max_running=4):
    """Chunked-prefill schedule: a list of steps, each a list of
    (request index, start, end) chunks.

    Per step at most ``budget`` tokens; running requests (admitted in FIFO
    order, at most ``max_running``) are served oldest first, each at most
    ``max_chunk`` tokens; leftover budget admits the next waiting requests.
    Every chunk but a request's last is a multiple of ``block_tokens``, so a
    step finishes whole blocks (the last block at the prompt's end).
    """
    if budget < block_tokens or max_chunk < block_tokens:
        raise ValueError("budget and max_chunk must hold a block")
    done = [0] * len(lengths)
    waiting, running, steps = list(range(len(lengths))), [], []

    def take(r, left):
        cap = min(left, max_chunk)
        rem = lengths[r] - done[r]
        return rem if rem <= cap else cap // block_tokens * block_tokens

    while waiting or running:
        left, step = budget, []
        for r in list(running):
            n = take(r, left)
            if n:
                step.append((r, done[r], done[r] + n))
                done[r] += n
                left -= n
        while waiting and len(running) < max_running and take(waiting[0], left):
            r = waiting.pop(0)
            running.append(r)
            n = take(r, left)
            step.append((r, 0, n))
            done[r] = n
            left -= n
        running = [r for r in running if done[r] < lengths[r]]
        steps.append(step)
    return steps


def finished_blocks(cfg, start, end):
    """Logical blocks a chunk [start, end) finishes (start is block-aligned)."""
    assert start % cfg.block_tokens == 0
    return list(range(start // cfg.block_tokens, cfg.blocks_for(end)))


def greedy(logits):
    return int(np.argmax(logits[0]))
