# SPDX-License-Identifier: MIT
"""The Python binding beside C, in one run (make bench-python).

Per call: the same libpdagent calls from a Python loop and from a C loop in
the same process (pdkv._pdkv._c_loop): req_state (a local lookup) and
alloc(1) + release (the pool's mutex); the difference is the binding's cost.

Throughput: a Python prefill worker (slots of --slot-size, each filled by
numpy.copyto from a prepared array, then put) and a Python decode worker
(another process: recv_wait, lookup of each chunk, every byte of it
compared with what was sent, recv_release), against pdbench (the C workers, every byte verified)
over the same brokers' shape in the same run. Each figure --runs times;
the range is printed.
"""
import argparse
import multiprocessing as mp
import os
import select
import subprocess
import sys
import time

here = os.path.dirname(os.path.abspath(__file__))
build = os.environ.get("PD_BUILD_DIR", os.path.join(here, "..", "..", "build", "release"))
sys.path.insert(0, os.path.join(build, "python"))

import numpy as np  # noqa: E402
import pdkv  # noqa: E402
import pdkv.local  # noqa: E402
from pdkv import _pdkv  # noqa: E402

SIZES = {"K": 1 << 10, "M": 1 << 20}


def size(s):
    return int(s[:-1]) * SIZES[s[-1]] if s[-1] in SIZES else int(s)


def per_call(n):
    """(python ns, C ns) per call of req_state and of alloc(1)+release."""
    out = {}
    with pdkv.local.LocalBroker(role="decode", recv_slots=16, slot_size="4K") as dec, \
            pdkv.local.LocalBroker(role="prefill", send_slots=16, slot_size="4K") as pre, \
            pre.agent() as ag:
        ag.declare("bench", dec.ctrl, total_chunks=1)
        while ag.next_event(5.0).type != pdkv.EV_ADMITTED:
            pass
        t0 = time.perf_counter()
        for _ in range(n):
            ag.req_state("bench")
        py = time.perf_counter() - t0
        out["req_state"] = (py / n * 1e9, _pdkv._c_loop(ag, "req_state", "bench", n) / n * 1e9)
        m = n // 10
        t0 = time.perf_counter()
        for _ in range(m):
            ag.release(ag.alloc("bench", 1))
        py = time.perf_counter() - t0
        out["alloc+release"] = (py / m * 1e9,
                                _pdkv._c_loop(ag, "alloc_release", "bench", m) / m * 1e9)
        ag.cancel("bench")
    return out


def source(slot):
    return np.random.default_rng(1).integers(0, 255, slot, dtype=np.uint8)


def decoder(broker, rundir, nreq, chunks, slot, q):
    src = source(slot)
    with pdkv.Agent(broker=broker, rundir=rundir, roles=pdkv.RECV) as ag:
        bad = 0
        for i in range(nreq):
            info = ag.recv_wait("r%d" % i, timeout=60)
            for c in range(chunks):
                ch = ag.lookup(b"r%d/%d" % (i, c))
                v = np.frombuffer(ch, np.uint8)
                stamp = v[:16].view(np.int64)
                bad += int(stamp[0] != i or stamp[1] != c or info.status != 0 or
                           not np.array_equal(v[16:], src[16:]))
                del v, stamp, ch
            ag.recv_release("r%d" % i)
        q.put((time.monotonic(), bad))


def py_throughput(a):
    slot = size(a.slot_size)
    src = source(slot)
    with pdkv.local.LocalBroker(role="decode", recv_slots=a.recv_slots, slot_size=a.slot_size,
                                transport=a.transport) as dec, \
            pdkv.local.LocalBroker(role="prefill", send_slots=a.send_slots,
                                   slot_size=a.slot_size, transport=a.transport) as pre, \
            pre.agent() as ag:
        ctx = mp.get_context("spawn")
        q = ctx.Queue()
        p = ctx.Process(target=decoder, args=(dec.name, dec.rundir, a.requests, a.chunks, slot, q))
        p.start()
        t0 = time.monotonic()
        declared = done = 0
        admitted, staged = [], set()
        while done < a.requests:
            while declared < a.requests and declared - done < a.concurrency:
                ag.declare("r%d" % declared, dec.ctrl, total_chunks=a.chunks)
                declared += 1
            for ev in ag.events():
                if ev.type == pdkv.EV_ADMITTED:
                    admitted.append(ev.req_id)
                elif ev.type == pdkv.EV_PUT_DONE:
                    done += 1
                else:
                    raise RuntimeError("%s failed: %s" % (ev.req_id, pdkv.strerror(ev.status)))
            for req in [r for r in admitted if r not in staged]:
                try:
                    loans = ag.alloc(req, a.chunks, timeout=0)
                except pdkv.PdkvTimeout:
                    break
                i = int(req[1:])
                batch = []
                for c, loan in enumerate(loans):
                    view = np.frombuffer(loan, np.uint8)
                    np.copyto(view, src)
                    view[:16].view(np.int64)[:] = (i, c)
                    del view
                    batch.append((loan, b"%s/%d" % (req.encode(), c), slot))
                ag.put(req, dec.ctrl, batch, a.chunks, last=True)
                staged.add(req)
            admitted = [r for r in admitted if r not in staged]
            if done < a.requests:  # doze until the broker says something (or 1 ms)
                select.select([ag.fileno()], [], [], 0.001)
        t_end, bad = q.get(timeout=120)
        p.join(30)
        if bad:
            raise RuntimeError("%d chunks with a wrong stamp" % bad)
    return a.requests * a.chunks * slot / (t_end - t0) / 1e9


def c_throughput(a):
    cmd = [os.path.join(build, "pdbench"), "--local", "--prefill", "1", "--decode", "1",
           "--tp", "1", "--transport", a.transport, "--requests", str(a.requests),
           "--chunks", str(a.chunks), "--batch", str(a.chunks), "--slot-size", a.slot_size,
           "--send-slots", str(a.send_slots), "--recv-slots", str(a.recv_slots),
           "--concurrency", str(a.concurrency)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600).stdout
    for line in out.splitlines():
        if line.strip().startswith("data") and "GB/s" in line:
            return float(line.split("=")[1].split()[0])
    raise RuntimeError("pdbench printed no figure:\n" + out[-2000:])


def rng(v):
    return "%.2f..%.2f" % (min(v), max(v)) if len(v) > 1 else "%.2f" % v[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--calls", type=int, default=200000)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--slot-size", default="1M")
    ap.add_argument("--send-slots", type=int, default=64)
    ap.add_argument("--recv-slots", type=int, default=64)
    ap.add_argument("--transport", default="shm", choices=("shm", "tcp"))
    a = ap.parse_args()
    calls = [per_call(a.calls) for _ in range(a.runs)]
    print("per call, ns (%d runs of %d calls; python loop / C loop / the binding's cost):" %
          (a.runs, a.calls))
    for k in calls[0]:
        py = [c[k][0] for c in calls]
        cc = [c[k][1] for c in calls]
        print("  %-14s python %s  C %s  cost %s" % (k, rng(py), rng(cc),
                                                     rng([p - c for p, c in zip(py, cc)])))
    pys, cs = [], []
    for r in range(a.runs):
        pys.append(py_throughput(a))
        cs.append(c_throughput(a))
        print("  run %d: python %.2f GB/s, C %.2f GB/s" % (r + 1, pys[-1], cs[-1]), flush=True)
    print("throughput, %s chunks, %s, %d requests x %d chunks, %d in flight:" %
          (a.slot_size, a.transport, a.requests, a.chunks, a.concurrency))
    print("  python workers (numpy copy in, every byte verified)  %s GB/s" % rng(pys))
    print("  C workers (pdbench, every byte verified)             %s GB/s" % rng(cs))
    print("  python / C                                           %s" %
          rng([p / c for p, c in zip(pys, cs)]))


if __name__ == "__main__":
    main()
