"""requests.parquet's columns, filled as requests finish.

A request's scalars are final once the client has seen its completion (the engine's ``on_finish``: its last token
restamped, its delivery delay applied), so the driver writes its row then and keeps the request no longer: what a
run holds per request is its row (about 70 bytes), not the request, whatever the run's length. A request never
issued keeps the row it starts with ("not issued"); one still in flight when the run ends is written as it stands.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from analysis.records import REQUEST_COLUMNS
from scenarios.trace import ROLE_NAMES, Trace
from simulator.request import Request


class RequestLog:
    def __init__(self, trace: Trace, record_tokens: bool = False):
        n = trace.n_requests
        a = trace.arrays
        nan = np.full(n, np.nan)
        roles = np.array(ROLE_NAMES, dtype=object)
        self.cols: dict[str, np.ndarray] = {
            "request_id": np.arange(n, dtype=np.int64), "dag_id": a["dag"].astype(np.int64),
            "role": roles[a["role"]] if n else np.zeros(0, object), "planned_s": nan,
            "send_s": nan.copy(), "first_token_s": nan.copy(), "last_token_s": nan.copy(),
            "output_tokens": np.zeros(n, np.int64), "prompt_tokens": trace.prompt_lengths().astype(np.int64),
            "cached_tokens": nan.copy(), "ok": np.zeros(n, bool), "error": np.full(n, "not issued", dtype=object)}
        self.token_times: dict[int, list[float]] | None = {} if record_tokens else None

    def record(self, r: Request) -> None:
        """Write r's row (its final scalars; its token times where they are kept)."""
        c, i = self.cols, r.idx
        ok = r.is_finished and not r.error
        c["dag_id"][i], c["role"][i] = r.dag, r.role
        c["planned_s"][i], c["send_s"][i] = r.planned_s, r.send_s
        c["first_token_s"][i], c["last_token_s"][i] = r.first_token_s, r.last_token_s
        c["output_tokens"][i], c["prompt_tokens"][i] = r.output_len, r.prompt_len
        c["cached_tokens"][i] = r.cached_tokens if r.cached_tokens >= 0 else np.nan
        c["ok"][i], c["error"][i] = ok, ("" if ok else r.error)
        if self.token_times is not None and r.token_times:
            self.token_times[i] = r.token_times

    def columns(self, in_flight: Iterable[Request] = ()) -> dict[str, np.ndarray]:
        """The columns, in ``REQUEST_COLUMNS``' order and types, with the requests still in flight written as
        they stand."""
        for r in in_flight:
            self.record(r)
        return {name: self.cols[name].astype(dtype, copy=False) for name, dtype in REQUEST_COLUMNS.items()}

    def chunks(self, in_flight: Iterable[Request] = ()) -> dict[str, np.ndarray]:
        """chunks.parquet's columns: every kept token time, by request id, then time order."""
        for r in in_flight:
            self.record(r)
        times = self.token_times or {}
        ids = sorted(times)
        counts = [len(times[i]) for i in ids]
        t = np.fromiter((x for i in ids for x in times[i]), np.float64, sum(counts))
        rid = np.repeat(np.asarray(ids, np.int64), counts)
        return {"request_id": rid, "t_s": t, "tokens": np.ones(len(rid), np.int64)}
