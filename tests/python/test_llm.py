# SPDX-License-Identifier: MIT
"""The tiny numpy transformer served disaggregated (examples/llm): a small
run of make demo-llm at tp 1 and tp 2, each with a receive pool smaller
than its requests together (admission queues them); the decode ranks'
tokens and final logits must equal the single-process run's bit for bit."""
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
DEMO = os.path.join(HERE, "..", "..", "examples", "llm", "demo.py")


@pytest.mark.parametrize("tp", [1, 2])
def test_disaggregated_tokens_equal_single_process(tp):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    out = subprocess.run([sys.executable, DEMO, "--tp", str(tp), "--quick", "--timeout", "60"],
                         capture_output=True, text=True, timeout=120, env=env)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text
    assert "admission queues them" in text, text
    assert "final logits bit-identical (float32, every decode rank): yes" in text, text
    assert "tokens identical to the single-process run: yes" in text, text
