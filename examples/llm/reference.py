"""The single-process reference: the same model, prompts and chunked-prefill
schedule as the disaggregated run, then a local decode from its own cache.

One process holds every TP shard and sums their partials in rank order, so
its tokens and logits are bit-identical to tp rank processes that exchange
partials (``--check-ranks`` shows it without pdkv: tp rank processes, each
with its own shard and cache, all-reduce over pipes and must agree bit for
bit).

    /usr/bin/python3 examples/llm/reference.py --tp 2 --requests 8 --check-ranks
"""
import argparse
import multiprocessing as mp
import sys
import time

import numpy as np

from engine import Decoding, Workload, decode_step, results
from model import Model, local_allreduce


def run_prefill_decode(wl, model, allreduce=local_allreduce):
    """Prefill every request by the schedule, then decode them all, in one
    process over ``model``'s shards.  Returns (tokens, logits)."""
    tables, nxt = [], 0
    for i in range(wl.requests):
        n = wl.total_blocks(i)
        tables.append(list(range(nxt, nxt + n)))
        nxt += n
    caches = model.new_caches(nxt)
    for step in wl.steps:
        items, _ = wl.step_items(step, tables)
        model.forward(items, caches, allreduce)
    decs = [Decoding(wl, i, tables[i]) for i in range(wl.requests)]
    while decode_step(model, caches, decs, allreduce):
        pass
    return results(wl, decs)


def reference(wl, tp):
    """Tokens [requests, new_tokens] and final logits [requests, vocab]."""
    return run_prefill_decode(wl, Model(wl.cfg, wl.seed, tp, range(tp)))


def _rank_main(wl, rank, tp, peers, out):
    """A rank process of --check-ranks: its own shard, cache and pipes."""
    from tp import PipeGroup
    group = PipeGroup(rank, tp, peers, timeout=60.0)
    tokens, logits = run_prefill_decode(wl, Model(wl.cfg, wl.seed, tp, [rank]),
                                        group.allreduce)
    out.send((tokens, logits))


def run_rank_processes(wl, tp, timeout=120.0):
    """Run tp rank processes (spawned) without pdkv; returns each rank's
    (tokens, logits).  Any death or overrun kills the others."""
    from tp import make_mesh
    ctx = mp.get_context("spawn")
    mesh = make_mesh(ctx, tp)
    pipes = [ctx.Pipe(duplex=False) for _ in range(tp)]
    procs = [ctx.Process(target=_rank_main, args=(wl, r, tp, mesh[r], pipes[r][1]),
                         daemon=True) for r in range(tp)]
    try:
        for p in procs:
            p.start()
        deadline, res = time.monotonic() + timeout, [None] * tp
        while any(x is None for x in res):
            for r, (rd, _) in enumerate(pipes):
                if res[r] is None and rd.poll(0.05):
                    res[r] = rd.recv()
            dead = [r for r, p in enumerate(procs) if res[r] is None and not p.is_alive()
                    and not pipes[r][0].poll(0)]
            if dead:
                raise RuntimeError(f"rank {dead[0]} died (exit {procs[dead[0]].exitcode})")
            if time.monotonic() > deadline:
                raise TimeoutError("rank processes did not finish in time")
        return res
    finally:
        for p in procs:
            if p.is_alive():
                p.kill()
            p.join(5)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--check-ranks", action="store_true",
                    help="also run tp rank processes (pipes, no pdkv) and compare")
    a = ap.parse_args(argv)
    wl = Workload(seed=a.seed, requests=a.requests, new_tokens=a.new_tokens)
    t0 = time.monotonic()
    tokens, logits = reference(wl, a.tp)
    print(f"reference tp={a.tp}: {a.requests} requests, {len(wl.steps)} prefill steps, "
          f"{time.monotonic() - t0:.2f} s")
    for i in range(wl.requests):
        print(f"  {wl.req_id(i)} prompt {len(wl.prompts[i]):3d} -> {tokens[i].tolist()}")
    if not a.check_ranks:
        return 0
    ok = True
    for r, (t, lg) in enumerate(run_rank_processes(wl, a.tp)):
        same = np.array_equal(t, tokens) and lg.tobytes() == logits.tobytes()
        ok &= same
        print(f"rank process {r}/{a.tp}: tokens and logits bit-identical: "
              f"{'yes' if same else 'no'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
