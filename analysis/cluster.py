"""Where a cluster's requests went: per-replica counts, and how often a request went to a replica that had
already been sent a request with its prefix (the router's chance to reuse a cache)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd


def holder_share(requests: pd.DataFrame, groups: np.ndarray) -> float:
    """Of the requests whose prefix group some replica had already been sent (in send order), the share that
    went to such a replica. ``groups[i]`` is request i's prefix group; requests never sent are left out."""
    r = requests[requests["replica"] >= 0].sort_values(["send_s", "request_id"], kind="stable")
    held: dict[int, set[int]] = {}
    seen_anywhere: set[int] = set()
    eligible = hit = 0
    for i, k in zip(r["request_id"].to_numpy(), r["replica"].to_numpy(), strict=True):
        g = int(groups[int(i)])
        if g in seen_anywhere:
            eligible += 1
            hit += g in held.get(int(k), set())
        held.setdefault(int(k), set()).add(g)
        seen_anywhere.add(g)
    return hit / eligible if eligible else float("nan")


def per_replica(requests: pd.DataFrame, n: int) -> list[dict[str, Any]]:
    """Requests and TTFT p50 per replica."""
    out = []
    for k in range(n):
        g = requests[(requests["replica"] == k) & requests["ok"]]
        ttft = (g["first_token_s"] - g["send_s"]).to_numpy()
        out.append({"replica": k, "requests": int((requests["replica"] == k).sum()),
                    "ttft_p50": float(np.median(ttft)) if ttft.size else float("nan")})
    return out
