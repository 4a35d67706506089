# SPDX-License-Identifier: MIT
"""pytest glue for pdkv's Python tests: brokers as fixtures, and a closing
summary in the form tests/run.sh counts ("[  PASSED  ] N test(s).")."""
import os
import sys

import pytest

# The package under test: the build's (PD_BUILD_DIR, e.g. build/release).
_build = os.environ.get("PD_BUILD_DIR",
                        os.path.join(os.path.dirname(__file__), "..", "..", "build", "release"))
sys.path.insert(0, os.path.abspath(os.path.join(_build, "python")))

import pdkv.local  # noqa: E402


@pytest.fixture
def decode_broker():
    with pdkv.local.LocalBroker(role="decode", recv_slots=32, slot_size="64K") as b:
        yield b


@pytest.fixture
def prefill_broker():
    with pdkv.local.LocalBroker(role="prefill", send_slots=32, slot_size="64K") as b:
        yield b


@pytest.fixture
def pair(prefill_broker, decode_broker):
    """(sending agent, receiving agent, decode endpoint) on two real brokers."""
    with prefill_broker.agent() as tx, decode_broker.agent() as rx:
        yield tx, rx, decode_broker.ctrl


def pytest_terminal_summary(terminalreporter):
    st = terminalreporter.stats
    n = {k: len([r for r in st.get(k, []) if getattr(r, "when", "call") in ("call", "setup")])
         for k in ("passed", "failed", "error", "skipped")}
    terminalreporter.write_line("[  PASSED  ] %d test(s)." % n["passed"])
    if n["failed"] + n["error"]:
        terminalreporter.write_line("[  FAILED  ] %d test(s)." % (n["failed"] + n["error"]))
    if n["skipped"]:
        terminalreporter.write_line("[  SKIPPED ] %d test(s)." % n["skipped"])
