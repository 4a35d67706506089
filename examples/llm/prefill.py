"""A prefill rank process: chunked prefill, KV sent through pdkv.kv.

Like an engine's TP worker, it runs the schedule step by step: declares each
request when the schedule first gives it a chunk, computes the step layer by
layer (all-reducing its heads' partials with the other ranks), hands each
layer's blocks finished in the step to ``save_kv_layer``, submits at the end
of the step with ``wait_for_save`` and polls ``get_finished``.  Blocks of
requests not admitted yet stay in the cache (never reused here) until the
connector reports the request; a request reported failed is aborted (the
rest of its prompt is not computed).  After the last step it goes on with
empty steps until every request is sent or failed.

``run`` is the process's entry point (multiprocessing, 'spawn'); it sends a
dict of per-request figures back over ``out``.
"""
import os
import time
import traceback

from model import Model
from tp import PipeGroup


def layer_names(cfg):
    return [f"layer.{l}" for l in range(cfg.n_layers)]


class Figures:
    """Per-request transfer figures of one rank."""

    def __init__(self, wl, rank, tp, notify=None):
        self.wl, self.rank, self.notify = wl, rank, notify
        self.block_bytes = wl.cfg.block_bytes(tp)
        self.req = {}

    def declared(self, i, step):
        self.req[self.wl.req_id(i)] = {
            "i": i, "step": step, "blocks": self.wl.prefill_blocks(i),
            "bytes": self.wl.prefill_blocks(i) * self.wl.cfg.n_layers * self.block_bytes,
            "t_declare": time.monotonic(), "t_admit": None, "t_sent": None, "staged_bytes": None,
            "error": None}

    def failed(self):
        return {rid for rid, f in self.req.items() if f["error"] is not None}

    def poll(self, conn, agent):
        """Collects admissions (agent.req_state) and what the connector
        reports finished; True when every request is sent or failed."""
        import pdkv
        sent, _ = conn.get_finished()
        fails = conn.failures()
        now = time.monotonic()
        for rid, f in self.req.items():
            if f["t_admit"] is None and f["t_sent"] is None:
                try:
                    if agent.req_state(rid)[0] in (pdkv.REQ_ADMITTED, pdkv.REQ_DONE):
                        f["t_admit"] = now
                except pdkv.PdkvError:
                    pass
        for rid in sent:
            f = self.req[rid]
            if f["t_sent"] is None:
                f["t_sent"] = now
                f["staged_bytes"] = conn.stats.get(rid, (None,))[0]  # the connector's count
        for rid, err in fails.items():
            if self.req[rid]["error"] is None:
                self.req[rid]["error"] = f"{type(err).__name__}: {err}"
                self.req[rid]["t_sent"] = self.req[rid]["t_sent"] or now
                if self.notify:
                    self.notify(rid, self.req[rid]["error"])
        return (len(self.req) == self.wl.requests
                and all(f["t_sent"] is not None for f in self.req.values()))


def prefill(wl, rank, tp, agent, endpoint, group, timeout, parent=None, notify=None):
    """Runs the schedule on this rank and sends every request's KV;
    returns the Figures once all are sent or failed.  notify(req_id,
    error) is called as a request fails (the demo tells the decode side,
    as a serving system's scheduler would)."""
    from pdkv import kv
    cfg = wl.cfg
    model = Model(cfg, wl.seed, tp, [rank])
    tables, nxt = [], 0
    for i in range(wl.requests):
        tables.append(list(range(nxt, nxt + wl.prefill_blocks(i))))
        nxt += wl.prefill_blocks(i)
    caches = model.new_caches(nxt)
    names = layer_names(cfg)
    conn = kv.KVConnector(agent, role="sender", tp_rank=rank, tp_size=tp)
    conn.register_kv_caches({names[l]: caches[0][l] for l in range(cfg.n_layers)})
    figs = Figures(wl, rank, tp, notify)
    deadline = time.monotonic() + timeout
    for n, step in enumerate(wl.steps):
        for r, s, _ in step:
            if s == 0:
                conn.declare(wl.req_id(r), endpoint, wl.prefill_blocks(r))
                figs.declared(r, n)
        # a request reported failed (to any rank) is aborted: no more chunks
        failed = set().union(*group.exchange_obj(figs.failed()))
        step = [c for c in step if wl.req_id(c[0]) not in failed]
        items, done = wl.step_items(step, tables)
        blocks = {wl.req_id(r): b for r, b in done.items()}
        model.forward(items, caches, group.allreduce,
                      on_layer=lambda l: conn.save_kv_layer(names[l], blocks))
        conn.wait_for_save()
        figs.poll(conn, agent)
    while True:                       # empty steps until everything is sent
        conn.wait_for_save()
        if figs.poll(conn, agent):
            return figs
        if time.monotonic() > deadline:
            left = [rid for rid, f in figs.req.items() if f["t_sent"] is None]
            raise TimeoutError(f"rank {rank}: not sent in {timeout:.0f} s: {left}")
        if parent is not None and os.getppid() != parent:
            raise RuntimeError("the demo process is gone")
        time.sleep(0.001)


def run(wl, rank, tp, broker, rundir, endpoint, peers, out, timeout=60.0, parent=None):
    """Process entry: attach to the prefill broker, prefill, report."""
    try:
        import pdkv
        group = PipeGroup(rank, tp, peers, timeout)
        with pdkv.Agent(broker=broker, rundir=rundir, roles=pdkv.SEND,
                        tp_rank=rank, tp_size=tp) as agent:
            figs = prefill(wl, rank, tp, agent, endpoint, group, timeout, parent,
                           notify=lambda rid, err: out.send({"failed": rid, "error": err}))
        out.send({"ok": True, "rank": rank, "req": figs.req})
    except BaseException as e:  # reported to the demo, which kills the rest
        out.send({"ok": False, "rank": rank,
                  "error": f"{type(e).__name__}: {e}", "trace": traceback.format_exc()})
