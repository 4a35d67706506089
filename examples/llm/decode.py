"""A decode rank process: receives the KV through pdkv.kv, then generates.

It allocates each request's blocks in its own paged cache (ids drawn from a
shuffled free list, so they differ from the prefill's), calls
``start_load_kv(req_id, block_ids)`` for the prompt's blocks and polls
``get_finished``: a received request's chunks are in the cache by then and
their receive slots are free again.  The TP ranks agree every iteration on
which requests all of them have received (an all-gather over the pipes) and
decode those one token per iteration, continuous-batching style, each
request with its own matmuls; a request's later blocks hold its new tokens.

``run`` is the process's entry point (multiprocessing, 'spawn'): it writes
``tokens_rank{r}.npy`` and ``logits_rank{r}.npy`` into ``out_dir`` (rows of
failed requests: -1 and NaN) and sends
per-request figures back over ``out``.
"""
import os
import time
import traceback

import numpy as np

from engine import Decoding, decode_step, results
from model import Model
from prefill import layer_names
from tp import PipeGroup


def allocate(wl, seed):
    """Block tables for every request (prompt and new tokens) from a
    shuffled free list; returns (tables, num_blocks)."""
    total = sum(wl.total_blocks(i) for i in range(wl.requests))
    free = list(np.random.default_rng(seed + 104729).permutation(total))
    tables = []
    for i in range(wl.requests):
        tables.append([int(free.pop()) for _ in range(wl.total_blocks(i))])
    return tables, total


def decode(wl, rank, tp, agent, group, timeout, parent=None, ctl=None):
    """Loads every request's KV and decodes them; returns (decs, figures).
    ctl: a Connection on which the demo says which requests failed at the
    prefill ({"failed": req_id, "error": str}): their loads are cancelled."""
    from pdkv import kv
    cfg = wl.cfg
    model = Model(cfg, wl.seed, tp, [rank])
    tables, nblocks = allocate(wl, wl.seed)
    caches = model.new_caches(nblocks)
    names = layer_names(cfg)
    conn = kv.KVConnector(agent, role="receiver", tp_rank=rank, tp_size=tp,
                          load_timeout=timeout)
    try:
        conn.register_kv_caches({names[l]: caches[0][l] for l in range(cfg.n_layers)})
        return load_and_decode(wl, rank, conn, model, caches, tables, group, timeout,
                               parent, ctl)
    finally:
        conn.close()


def load_and_decode(wl, rank, conn, model, caches, tables, group, timeout, parent, ctl):
    """The decode loop proper (see the module's doc)."""
    ids = {wl.req_id(i): i for i in range(wl.requests)}
    figs = {}
    t0 = time.monotonic()
    for i in range(wl.requests):
        conn.start_load_kv(wl.req_id(i), tables[i][:wl.prefill_blocks(i)])
        figs[wl.req_id(i)] = {"t_start": time.monotonic(), "t_received": None,
                              "t_ready": None, "t_done": None, "error": None}
    got, failed, decs, done = set(), set(), {}, set()
    deadline = t0 + timeout + 5      # the connector fails a late request first
    while len(done) + len(failed) < wl.requests:
        _, received = conn.get_finished()
        fails = conn.failures()         # failed requests are reported received too
        for rid, err in fails.items():
            figs[rid]["error"] = f"{type(err).__name__}: {err}"
        for rid in received - set(fails):
            got.add(rid)
            figs[rid]["t_received"] = time.monotonic()
        while ctl is not None and ctl.poll(0):
            msg = ctl.recv()
            if msg["failed"] not in got and not figs[msg["failed"]]["error"]:
                conn.cancel_load(msg["failed"])
                figs[msg["failed"]]["error"] = f"failed at the prefill: {msg['error']}"
        mine_failed = {rid for rid, f in figs.items() if f["error"]}
        views = group.exchange_obj((sorted(got), sorted(mine_failed)))
        failed = set().union(*(set(v[1]) for v in views))
        ready = set.intersection(*(set(v[0]) for v in views)) - failed
        for rid in sorted(ready - set(decs) - done, key=ids.get):
            decs[rid] = Decoding(wl, ids[rid], tables[ids[rid]])
            figs[rid]["t_ready"] = time.monotonic()
        active = [decs[rid] for rid in sorted(set(decs) - done, key=ids.get)]
        decode_step(model, caches, active, group.allreduce)
        for d in active:
            if d.left == 0:
                done.add(wl.req_id(d.i))
                figs[wl.req_id(d.i)]["t_done"] = time.monotonic()
        if not active:
            if time.monotonic() > deadline:
                left = sorted(set(ids) - got - failed)
                raise TimeoutError(f"rank {rank}: not received in {timeout:.0f} s: {left}")
            if parent is not None and os.getppid() != parent:
                raise RuntimeError("the demo process is gone")
            time.sleep(0.001)
    return [decs[rid] for rid in sorted(done, key=ids.get)], figs


def run(wl, rank, tp, broker, rundir, peers, out_dir, out, timeout=60.0, parent=None,
        ctl=None):
    """Process entry: attach to the decode broker, load, decode, write."""
    try:
        import pdkv
        group = PipeGroup(rank, tp, peers, timeout)
        with pdkv.Agent(broker=broker, rundir=rundir, roles=pdkv.RECV,
                        tp_rank=rank, tp_size=tp) as agent:
            decs, figs = decode(wl, rank, tp, agent, group, timeout, parent, ctl)
        tokens, logits = results(wl, decs)   # failed requests' rows: -1, NaN
        np.save(os.path.join(out_dir, f"tokens_rank{rank}.npy"), tokens)
        np.save(os.path.join(out_dir, f"logits_rank{rank}.npy"), logits)
        out.send({"ok": True, "rank": rank, "req": figs, "complete": len(decs)})
    except BaseException as e:  # reported to the demo, which kills the rest
        out.send({"ok": False, "rank": rank,
                  "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
