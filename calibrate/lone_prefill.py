"""The prefill scale of an engine that writes no step log (vLLM's CPU build), from the requests of a live
run that it served alone: sent with no other request in flight and answered before the next was sent, so
the engine ran nothing but their prefill. Against the run's twin (simulated with the unscaled profile),
each such request's TTFT beyond the profile's fixed latencies (front end and output path) is its prefill
steps' time; the median of live / twin over those requests is how much slower (> 1) or faster the
instance's prefill ran than its probes price — the counterpart of an SGLang instance's step-log prefill
scale (``calibrate.engine_steps.prefill_scale``).

vLLM only: on a CPU, SGLang streams a prefill's first token after the *next* forward (its inline overlap
scheduler), so a lone request's TTFT there holds another forward; SGLang's prefill scale comes from its
step log.

Measured: the prefill of vLLM's lone requests took 1.00–1.30× the twin's (the scale, per run) in the 36
vLLM study runs of two studies, 0.98–1.21 on the calibration traces of eight (9–15
lone requests each; docs/studies/twin-2-engine-timing.md); its probes, sent one at a time to an idle
engine, are priced within a few per cent, so the difference is the instance under serving.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.records import RunRecord
from calibrate.streams import in_flight_at_send

MIN_LONE = 5          # fewer requests served alone than this in a run: no prefill scale measured


def served_alone(live: RunRecord, sim: RunRecord) -> pd.DataFrame:
    """The live run's requests sent with no other in flight whose first token came before the next request
    was sent, with their live and simulated TTFT (s), by request id."""
    lv = live.requests.set_index("request_id")
    lv = lv.assign(in_flight=in_flight_at_send(lv))
    sv = sim.requests.set_index("request_id")[["send_s", "first_token_s"]].add_suffix("_sim")
    both = lv.join(sv, how="inner").dropna(subset=["send_s", "first_token_s", "first_token_s_sim"])
    sends = np.sort(lv["send_s"].dropna().to_numpy(float))
    after = np.searchsorted(sends, both["send_s"].to_numpy(float), side="right")
    next_send = np.where(after < len(sends), sends[np.minimum(after, len(sends) - 1)], np.inf)
    alone = both[(both["in_flight"] == 0) & (next_send > both["first_token_s"].to_numpy(float))]
    return pd.DataFrame({"live_ttft": alone["first_token_s"] - alone["send_s"],
                         "sim_ttft": alone["first_token_s_sim"] - alone["send_s_sim"]}).sort_index()


def lone_prefill_scale(live: RunRecord, sim: RunRecord, fixed_s: float) -> tuple[float, int] | None:
    """Median over the requests served alone of (live TTFT − fixed) / (twin TTFT − fixed), and how many;
    None below MIN_LONE. ``fixed_s``: the profile's latencies outside the steps (request_s + deliver_s)."""
    df = served_alone(live, sim)
    df = df[df["sim_ttft"] > fixed_s]
    if len(df) < MIN_LONE:
        return None
    ratio = (df["live_ttft"] - fixed_s) / (df["sim_ttft"] - fixed_s)
    return float(ratio.median()), len(df)
