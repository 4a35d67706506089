"""What the reference, the prefill ranks and the decode ranks share: the
workload (prompts and the chunked-prefill schedule) and the decode step.

The prefill covers prompt[:-1] (see model.py): request i's KV is
``prefill_tokens(i)`` tokens in ``blocks_for(prefill_tokens(i))`` blocks per
layer.  The decode feeds prompt[-1] first, then each generated token, and
after ``new_tokens`` steps has the tokens and the last step's logits.
"""
from dataclasses import dataclass, field

import numpy as np

from model import (Config, chunk_schedule, finished_blocks, greedy, local_allreduce,
                   make_prompts)


@dataclass
class Workload:
    """Everything both sides derive from the seed and the options."""
    seed: int = 0
    requests: int = 12
    new_tokens: int = 16
    budget: int = 32
    max_chunk: int = 16
    max_running: int = 4
    cfg: Config = field(default_factory=Config)

    def __post_init__(self):
        self.prompts = make_prompts(self.cfg, self.seed, self.requests)
        self.steps = chunk_schedule([len(p) - 1 for p in self.prompts],
                                    self.cfg.block_tokens, self.budget,
                                    self.max_chunk, self.max_running)

    def req_id(self, i):
        return f"req{i:03d}"

    def prefill_tokens(self, i):
        return len(self.prompts[i]) - 1

    def prefill_blocks(self, i):
        return self.cfg.blocks_for(self.prefill_tokens(i))

    def total_blocks(self, i):
        """Blocks request i needs at the decode: its prompt and new tokens."""
        return self.cfg.blocks_for(self.prefill_tokens(i) + self.new_tokens)

    def step_items(self, step, tables):
        """A schedule step as Model.forward items plus, per request, the
        (logical block, block id) pairs the step finishes in each layer."""
        items, done = [], {}
        for r, s, e in step:
            items.append((self.prompts[r][s:e], s, tables[r]))
            done[r] = [(lb, int(tables[r][lb])) for lb in finished_blocks(self.cfg, s, e)]
        return items, done


class Decoding:
    """Greedy decode of one request from its cache (block table ``table``)."""

    def __init__(self, wl, i, table):
        self.i, self.table = i, list(table)
        self.pos = wl.prefill_tokens(i)          # position of the next token fed
        self.next = int(wl.prompts[i][-1])
        self.left = wl.new_tokens
        self.tokens, self.logits = [], None

    def item(self):
        return ([self.next], self.pos, self.table)

    def advance(self, logits):
        self.logits = logits[0].astype(np.float32)
        self.next = greedy(logits)
        self.tokens.append(self.next)
        self.pos += 1
        self.left -= 1


def decode_step(model, caches, decs, allreduce=local_allreduce):
    """One decode iteration over ``decs`` (each one row, its own matmuls)."""
    live = [d for d in decs if d.left > 0]
    if live:
        for d, lg in zip(live, model.forward([d.item() for d in live], caches,
                                             allreduce)):
            d.advance(lg)
    return live


def results(wl, decs):
    """(tokens [requests, new_tokens] int64, logits [requests, vocab] f32);
    the rows of requests missing from decs are -1 and NaN."""
    tokens = np.full((wl.requests, wl.new_tokens), -1, dtype=np.int64)
    logits = np.full((wl.requests, wl.cfg.vocab), np.nan, dtype=np.float32)
    for d in decs:
        tokens[d.i], logits[d.i] = d.tokens, d.logits
    return tokens, logits
