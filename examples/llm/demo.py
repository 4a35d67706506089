"""Prefill/decode-disaggregated serving of a tiny numpy transformer over pdkv.

Starts a prefill broker and a decode broker (pdkv.local.LocalBroker, TCP on
loopback; the decode broker's receive pool is smaller than all requests'
blocks, so admission has to queue them), runs tp prefill rank processes and
tp decode rank processes, and checks that the decode ranks' tokens and
final logits are bit-identical to a single-process run of the same model,
prompts and chunked-prefill schedule.

    PYTHONPATH=build/release/python /usr/bin/python3 examples/llm/demo.py --tp 2

Ends with "tokens identical to the single-process run: yes" (exit 0), or
"no" (exit 1).  Everything it makes goes with it: the brokers' rundirs and
segments, its temporary directory, its child processes.
"""
import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # before numpy: same kernels everywhere
os.environ.setdefault("OMP_NUM_THREADS", "1")

import argparse  # noqa: E402
import multiprocessing as mp  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
try:
    import pdkv  # noqa: F401
except ImportError:  # run from a checkout without PYTHONPATH: use the build's
    sys.path.insert(0, os.path.join(HERE, "..", "..", "build", "release", "python"))
    import pdkv  # noqa: F401
import pdkv.local  # noqa: E402

import decode  # noqa: E402
import prefill  # noqa: E402
from engine import Workload  # noqa: E402
from reference import reference  # noqa: E402
from tp import make_mesh  # noqa: E402


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tp", type=int, default=2, help="tensor parallelism (1 or 2)")
    ap.add_argument("--requests", type=int, default=12)
    ap.add_argument("--new-tokens", type=int, default=16)
    ap.add_argument("--recv-slots", type=int, default=0,
                    help="decode broker's receive slots (0: as many as the largest "
                         "request needs, so admission queues)")
    ap.add_argument("--send-slots", type=int, default=256)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="deadline of the run, s")
    ap.add_argument("--quick", action="store_true", help="6 requests, 8 new tokens")
    a = ap.parse_args(argv)
    if a.tp < 1 or Workload().cfg.n_heads % a.tp or a.requests < 1 or a.new_tokens < 1:
        ap.error("--tp must divide the 4 heads; --requests and --new-tokens >= 1")
    if a.quick:
        a.requests, a.new_tokens = 6, 8
    return a


def supervise(procs, pipes, deadline, ctls):
    """Collects one result per child; relays the prefill's failed requests
    to the decode ranks (ctls); raises if a child fails, dies or the
    deadline passes (the caller then kills the rest)."""
    res = [None] * len(procs)
    while any(r is None for r in res):
        for k, (rd, _) in enumerate(pipes):
            while res[k] is None and rd.poll(0.01):
                try:
                    msg = rd.recv()
                except EOFError:    # its end closed without a word: it died
                    procs[k].join(1)
                    raise RuntimeError(f"{procs[k].name} died (exit code "
                                       f"{procs[k].exitcode})") from None
                if "failed" in msg:
                    for c in ctls:
                        try:
                            c.send(msg)
                        except OSError:
                            pass    # that rank is done already
                    continue
                res[k] = msg
                if not res[k]["ok"]:
                    raise RuntimeError(f"{procs[k].name}: {res[k]['error']}\n{res[k]['trace']}")
        if time.monotonic() > deadline:
            late = [p.name for k, p in enumerate(procs) if res[k] is None]
            raise TimeoutError(f"not finished in time: {', '.join(late)}")
    return res


def run_cluster(a, wl, recv_slots, out_dir):
    """Brokers and rank processes; returns (prefill results, decode results)."""
    ctx = mp.get_context("spawn")
    slot = max(4096, wl.cfg.block_bytes(a.tp))
    with pdkv.local.LocalBroker(role="decode", recv_slots=recv_slots, slot_size=slot) as db, \
            pdkv.local.LocalBroker(role="prefill", send_slots=a.send_slots,
                                   slot_size=slot) as pb:
        procs, pipes = [], []
        dmesh, pmesh = make_mesh(ctx, a.tp), make_mesh(ctx, a.tp)
        ctls = [ctx.Pipe(duplex=False) for _ in range(a.tp)]  # demo -> decode rank
        me = os.getpid()
        for r in range(a.tp):
            pipes.append(ctx.Pipe(duplex=False))
            procs.append(ctx.Process(
                name=f"decode rank {r}", target=decode.run, daemon=True,
                args=(wl, r, a.tp, db.name, db.rundir, dmesh[r], out_dir, pipes[-1][1],
                      a.timeout, me, ctls[r][0])))
        for r in range(a.tp):
            pipes.append(ctx.Pipe(duplex=False))
            procs.append(ctx.Process(
                name=f"prefill rank {r}", target=prefill.run, daemon=True,
                args=(wl, r, a.tp, pb.name, pb.rundir, db.ctrl, pmesh[r], pipes[-1][1],
                      a.timeout, me)))
        try:
            for p in procs:
                p.start()
            mine = [w for _, w in pipes] + [r for r, _ in ctls]
            for conn in mine + [c for m in dmesh + pmesh for c in m.values()]:
                conn.close()    # the children hold these ends now: a death is an EOF
            res = supervise(procs, pipes, time.monotonic() + a.timeout + 20,
                            [w for _, w in ctls])
        except Exception:
            print(f"prefill broker log:\n{pb.log_tail()}\ndecode broker log:\n{db.log_tail()}",
                  file=sys.stderr)
            raise
        finally:
            for p in procs:
                if p.is_alive():
                    p.kill()
                p.join(5)
    return res[a.tp:], res[:a.tp]


def report(wl, pres, dres, ok_req):
    """Per-request figures: bytes over all ranks, declare->sent at the
    prefill (slowest rank), declare->received at the decode, match."""
    print(f"{'request':8} {'prompt':>6} {'blocks':>6} {'KV bytes':>9} {'step':>4} "
          f"{'declare->admit':>14} {'declare->sent':>13} {'declare->recv':>13} {'match':>5}")
    errors = []
    for i in range(wl.requests):
        rid = wl.req_id(i)
        pf = [p["req"][rid] for p in pres]
        df = [d["req"][rid] for d in dres]
        t0 = min(f["t_declare"] for f in pf)
        sent = max(f["t_sent"] for f in pf)
        recv = [f["t_received"] for f in df]
        rtxt = f"{(max(recv) - t0) * 1e3:10.1f} ms" if None not in recv else "         -"
        adm = [f["t_admit"] for f in pf]
        atxt = f"{(max(adm) - t0) * 1e3:11.1f} ms" if None not in adm else "          -"
        print(f"{rid:8} {len(wl.prompts[i]):6} {pf[0]['blocks']:6} "
              f"{sum(f['bytes'] for f in pf):9} {pf[0]['step']:4} {atxt} "
              f"{(sent - t0) * 1e3:10.1f} ms {rtxt} {'yes' if ok_req[i] else 'NO':>5}")
        errors += [f"{rid}: {f['error']}" for f in pf + df if f["error"]]
        errors += [f"{rid}: rank {r} staged {f['staged_bytes']} bytes, not {f['bytes']}"
                   for r, f in enumerate(pf) if not f["error"] and f["staged_bytes"] != f["bytes"]]
    for e in dict.fromkeys(errors):     # once each (ranks report the same)
        print(f"  failed: {e}")
    return not errors


def main(argv=None):
    a = parse(argv)
    # SIGTERM unwinds like Ctrl-C: children killed, brokers stopped, files gone
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    wl = Workload(seed=a.seed, requests=a.requests, new_tokens=a.new_tokens)
    cfg = wl.cfg
    need = [wl.prefill_blocks(i) * cfg.n_layers * a.tp for i in range(wl.requests)]
    recv_slots = a.recv_slots or max(need)
    if recv_slots < max(need):
        print(f"warning: --recv-slots {recv_slots} < {max(need)} (the largest request's "
              f"chunks): the decode broker refuses such requests; they fail")
    t0 = time.monotonic()
    ref_tokens, ref_logits = reference(wl, a.tp)
    print(f"model: {cfg.n_layers} layers, {cfg.n_heads} heads x {cfg.head_dim}, "
          f"d_model {cfg.d_model}, vocab {cfg.vocab}; blocks of {cfg.block_tokens} tokens, "
          f"{cfg.block_bytes(a.tp)} bytes per block per layer per rank")
    print(f"{wl.requests} requests (prompts {min(map(len, wl.prompts))}.."
          f"{max(map(len, wl.prompts))} tokens), {len(wl.steps)} prefill steps of "
          f"<= {wl.budget} tokens, {wl.new_tokens} new tokens each, tp {a.tp}; "
          f"reference in {time.monotonic() - t0:.2f} s")
    print(f"receive pool: {recv_slots} slots; all requests together need {sum(need)}"
          f"{' (admission queues them)' if recv_slots < sum(need) else ''}")
    with tempfile.TemporaryDirectory(prefix="pdkv-llm-") as out_dir:
        t1 = time.monotonic()
        try:
            pres, dres = run_cluster(a, wl, recv_slots, out_dir)
        except Exception as e:
            print(f"demo failed: {type(e).__name__}: {e}", file=sys.stderr)
            print("tokens identical to the single-process run: no")
            return 1
        wall = time.monotonic() - t1
        outs = []
        for r in range(a.tp):
            try:
                outs.append((np.load(os.path.join(out_dir, f"tokens_rank{r}.npy")),
                             np.load(os.path.join(out_dir, f"logits_rank{r}.npy"))))
            except OSError:
                outs.append(None)
    ok_req = [all(o is not None and np.array_equal(o[0][i], ref_tokens[i]) for o in outs)
              for i in range(wl.requests)]
    no_fail = report(wl, pres, dres, ok_req)
    same_tokens = all(ok_req) and no_fail
    same_logits = all(o is not None and o[1].dtype == ref_logits.dtype
                      and o[1].tobytes() == ref_logits.tobytes() for o in outs)
    moved = sum(f["bytes"] for p in pres for f in p["req"].values() if not f["error"])
    print(f"disaggregated run: {wall:.2f} s, {moved} KV bytes moved, "
          f"{a.tp} prefill + {a.tp} decode rank processes")
    print(f"final logits bit-identical (float32, every decode rank): "
          f"{'yes' if same_logits else 'no'}")
    print(f"tokens identical to the single-process run: {'yes' if same_tokens else 'no'}")
    return 0 if same_tokens and same_logits else 1


if __name__ == "__main__":
    sys.exit(main())
