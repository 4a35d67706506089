# SPDX-License-Identifier: MIT
"""Local brokers for development, examples and tests.

    with pdkv.local.LocalBroker(role="decode", recv_slots=64) as dec, \\
         pdkv.local.LocalBroker(role="prefill") as pre:
        with pre.agent(roles=pdkv.SEND) as ag:
            ag.declare("r1", dec.ctrl, total_chunks=4)

Each LocalBroker is a real pdbroker process on loopback with a private
rundir (a temporary directory, removed with it). The program is
$PDKV_PDBROKER, else the pdbroker of the build this package sits in,
else the one on PATH.
"""
import os
import random
import shutil
import signal
import socket
import subprocess
import tempfile
import time

from . import Agent, SEND, RECV

_START_S = 10.0
_STOP_S = 10.0


def _die_with_parent():
    """In the broker child: SIGKILL when the thread that started it ends (Linux
    prctl; start brokers from a thread that outlives them, e.g. the main one),
    so a killed test or script leaves no daemon behind."""
    try:
        import ctypes
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def pdbroker_path():
    """The pdbroker program this package uses (see the module's doc)."""
    env = os.environ.get("PDKV_PDBROKER")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    built = os.path.normpath(os.path.join(here, "..", "..", "pdbroker"))
    if os.access(built, os.X_OK):
        return built
    found = shutil.which("pdbroker")
    if not found:
        raise FileNotFoundError("pdbroker not found: set PDKV_PDBROKER or put it on PATH")
    return found


def free_port():
    """A loopback TCP port free now, below the kernel's ephemeral range (so a
    listener bound to port 0 meanwhile is never given it)."""
    for _ in range(200):
        port = random.randrange(20000, 32000)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise OSError("no free port in 20000..32000")


class LocalBroker:
    """A pdbroker child on loopback. role: "prefill" (a send pool, no receive
    pool), "decode" (the reverse) or "both". Other keyword arguments become
    its flags (heartbeat="200ms" -> --heartbeat 200ms)."""

    def __init__(self, name=None, role="both", send_slots=64, recv_slots=64,
                 slot_size="64K", transport="tcp", **flags):
        if role not in ("prefill", "decode", "both"):
            raise ValueError("role: prefill, decode or both")
        self.role = role
        self.name = name or "py%d-%d" % (os.getpid(), random.randrange(1 << 30))
        self.rundir = tempfile.mkdtemp(prefix="pdkv-py-")
        self.ctrl = "tcp://127.0.0.1:%d" % free_port()
        self.log = os.path.join(self.rundir, "broker.log")
        args = [pdbroker_path(), "--name", self.name, "--rundir", self.rundir,
                "--ctrl", self.ctrl, "--data", "127.0.0.1:0", "--log-file", self.log,
                "--slot-size", str(slot_size), "--transport", transport,
                "--send-slots", str(0 if role == "decode" else send_slots),
                "--recv-slots", str(0 if role == "prefill" else recv_slots)]
        flags.setdefault("heartbeat", "200ms")
        for k, v in flags.items():
            args += ["--" + k.replace("_", "-"), str(v)]
        self.proc = None
        try:
            self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                         start_new_session=True, preexec_fn=_die_with_parent)
            self._wait_ready()
        except BaseException:
            self.stop()
            raise

    def _wait_ready(self):
        sock = os.path.join(self.rundir, self.name + ".sock")
        deadline = time.monotonic() + _START_S
        while not os.path.exists(sock):
            if self.proc.poll() is not None:
                raise RuntimeError("pdbroker exited (%d): %s" % (self.proc.returncode,
                                                                 self.log_tail()))
            if time.monotonic() > deadline:
                raise TimeoutError("pdbroker did not start in %.0f s: %s" % (_START_S,
                                                                           self.log_tail()))
            time.sleep(0.01)

    def log_tail(self, lines=20):
        """The last lines of the broker's log."""
        try:
            with open(self.log, errors="replace") as f:
                return "".join(f.readlines()[-lines:])
        except OSError:
            return "(no log)"

    def agent(self, roles=None, **kw):
        """An Agent attached to this broker (roles: its role's by default)."""
        if roles is None:
            roles = {"prefill": SEND, "decode": RECV}.get(self.role, SEND | RECV)
        return Agent(broker=self.name, rundir=self.rundir, roles=roles, **kw)

    def stop(self):
        """SIGTERM (SIGKILL after 10 s), then remove the rundir, and the segment
        of a broker that died by a signal (a broker that stops removes its own).
        Idempotent."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(_STOP_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self.proc is not None and self.proc.returncode < 0:
            try:
                os.unlink("/dev/shm/pdkv." + self.name)  # names are this object's own
            except OSError:
                pass
        self.proc = None
        if self.rundir:
            shutil.rmtree(self.rundir, ignore_errors=True)
            self.rundir = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __del__(self):
        self.stop()
