"""A request inside a simulated engine: what it asked for and how far it has got.

Token accounting (all engines): ``num_computed`` tokens have KV in the cache; ``output_len`` tokens
have been generated. A prefill that completes a prompt (or a re-prefill of prompt + outputs after a
preemption) samples one token; every decode computes the KV of the last generated token and samples
the next. A request is finished when ``output_len == max_tokens`` (the trace asks for exactly that many,
as with ``ignore_eos``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from simulator.kernels import ROOT_HASH, chain_states, chain_states_constant


class SharedHead:
    """The first ``n_tokens`` of every prompt that starts with one shared prefix (a trace's prefix group): their
    block hash chain is the same for all those prompts, so it is computed once per block size."""

    __slots__ = ("n_tokens", "_chains")

    def __init__(self, n_tokens: int):
        self.n_tokens = n_tokens
        self._chains: dict[int, tuple[list[int], int]] = {}

    def chain(self, prompt: np.ndarray, block_size: int) -> tuple[list[int], int]:
        """(hashes of the head's full blocks, the chain's state after them), from any prompt that has the head."""
        got = self._chains.get(block_size)
        if got is None:
            st = chain_states(prompt[:self.n_tokens // block_size * block_size], block_size, ROOT_HASH)
            got = self._chains[block_size] = (st.tolist(), int(st[-1]) if st.shape[0] else ROOT_HASH)
        return got


class Request:
    __slots__ = ("idx", "dag", "role", "prompt", "prompt_len", "max_tokens", "output_len", "num_computed",
                 "send_s", "planned_s", "first_token_s", "last_token_s", "cached_tokens", "preemptions",
                 "token_times", "error", "engine", "_hashes", "_states", "_hash_bs", "arrival_seq", "match_memo",
                 "head", "sink")

    def __init__(self, idx: int, dag: int, role: str, prompt: np.ndarray, max_tokens: int,
                 planned_s: float, send_s: float, arrival_seq: int, record_tokens: bool = False,
                 head: SharedHead | None = None):
        self.idx, self.dag, self.role = idx, dag, role
        self.prompt = prompt
        self.prompt_len = int(prompt.shape[0])
        self.max_tokens = max_tokens
        self.output_len = 0
        self.num_computed = 0
        self.planned_s, self.send_s = planned_s, send_s
        self.first_token_s = float("nan")
        self.last_token_s = float("nan")
        self.cached_tokens = -1
        self.preemptions = 0
        self.token_times: list[float] | None = [] if record_tokens else None
        self.error = ""
        self.engine: Any = None  # engine-specific per-request state (block table, radix node, …)
        self._hashes: list[int] | None = None   # cache keys of the full blocks hashed so far
        self._states = ROOT_HASH                 # the hash chain's state after them
        self._hash_bs = 0
        self.arrival_seq = arrival_seq
        self.match_memo: Any = None    # SGLang: its last radix match while waiting (schedulers.sglang.MatchMemo)
        self.head = head               # the shared prefix its prompt starts with (block hashes memoised there)
        self.sink: Callable[[Request, float], None] | None = None   # handed each token as it is emitted (serve)

    # --- derived ---------------------------------------------------------------------------------
    @property
    def output_token_id(self) -> int:
        """Generated tokens are simulated as one id unique to the request (never equal to a prompt id)."""
        return -(self.idx + 1)

    @property
    def fill_len(self) -> int:
        """Tokens a (re-)prefill must cover: the prompt plus every token generated so far."""
        return self.prompt_len + self.output_len

    @property
    def remaining_prefill(self) -> int:
        return self.prompt_len + self.output_len - self.num_computed

    @property
    def in_prefill(self) -> bool:
        return self.output_len == 0 or self.prompt_len + self.output_len - self.num_computed > 1

    @property
    def is_finished(self) -> bool:
        return self.output_len >= self.max_tokens

    @property
    def context_len(self) -> int:
        """Tokens in KV that a decode of this request attends to."""
        return self.num_computed

    def tokens(self, n: int) -> np.ndarray:
        """The first n tokens of prompt + generated."""
        if n <= self.prompt_len:
            return self.prompt[:n]
        gen = np.full(n - self.prompt_len, self.output_token_id, dtype=np.int32)
        return np.concatenate([self.prompt, gen])

    def block_hashes(self, n_blocks: int, block_size: int) -> list[int]:
        """Chained hashes of the first n full blocks (a list of the caller's own)."""
        return self.hash_memo(n_blocks, block_size)[:n_blocks]

    def hash_memo(self, n_blocks: int, block_size: int) -> list[int]:
        """The memo of chained block hashes, covering at least the first n full blocks (extended as outputs grow):
        read it, never change it."""
        h = self._hashes
        if h is None or self._hash_bs != block_size:
            full = max(n_blocks, self.prompt_len // block_size)
            lead, state = self.head.chain(self.prompt, block_size) if self.head is not None else ([], ROOT_HASH)
            st = chain_states(self.tokens(full * block_size)[len(lead) * block_size:], block_size, state)
            h = lead + st.tolist()
            self._hashes, self._hash_bs = h, block_size
            self._states = int(st[-1]) if st.shape[0] else state
        elif len(h) < n_blocks:
            start = len(h)
            if start * block_size >= self.prompt_len:         # generated tokens only: one repeated id
                states = chain_states_constant(self.output_token_id, block_size, n_blocks - start, self._states)
                h.extend(states)
                self._states = states[-1]
            else:
                toks = self.tokens(n_blocks * block_size)[start * block_size:]
                st = chain_states(toks, block_size, self._states)
                h.extend(st.tolist())
                self._states = int(st[-1])
        return h

    # --- events ----------------------------------------------------------------------------------
    def emit_token(self, now: float) -> None:
        self.output_len += 1
        if self.output_len == 1:
            self.first_token_s = now
        self.last_token_s = now
        if self.token_times is not None:
            self.token_times.append(now)
        if self.sink is not None:
            self.sink(self, now)

    def restamp_last_token(self, now: float) -> None:
        """The last emitted token reached the client later than its step ended (SGLang's overlap scheduler
        on a CPU streams a batch's results after the next batch's forward)."""
        if self.output_len == 1:
            self.first_token_s = now
        self.last_token_s = now
        if self.token_times:
            self.token_times[-1] = now

    def delay_tokens(self, by: float) -> None:
        """Every token reached the client ``by`` seconds after the engine produced it."""
        self.first_token_s += by
        self.last_token_s += by
        if self.token_times:
            self.token_times[:] = [t + by for t in self.token_times]

    def delay_last_token(self, by: float) -> None:
        """The token just emitted reached the client ``by`` seconds after its step ended (the front end
        wrote the step's streams in turn: simulator.front_end)."""
        self.restamp_last_token(self.last_token_s + by)

    def release_tokens(self) -> None:
        """Drop the token arrays once the request is done (only its scalars go into the record)."""
        self.prompt = np.zeros(0, dtype=np.int32)
        self._hashes = None
        self.match_memo = None

    def reset_for_recompute(self) -> None:
        """Preempted by recompute / retracted: KV gone, outputs kept, prefill starts again."""
        self.num_computed = 0
        self.preemptions += 1
        self.engine = None
