"""Where does a twin's TTFT miss? Each live request's TTFT minus its simulated twin's, binned by how many
other requests of the live run were in flight (sent, not yet finished) when it was sent. A twin that is
right for lone requests but short under concurrency points at work the model does not carry — for the
CPU engines here, the front end streaming other requests' tokens.

    servetwin twin-study diagnose ttft-residuals LIVE_RUN SIM_RUN [LIVE_RUN SIM_RUN ...]

(``servetwin compare`` writes the twins: ``SIM_DIR/<configuration>/<live run folder>``.)
"""

from __future__ import annotations

import argparse

import pandas as pd

from analysis.records import RunRecord, read_run
from analysis.tables import to_markdown
from calibrate.streams import in_flight_at_send
from foundation.errors import ServetwinError

CAP = 3          # concurrency bins 0, 1, 2 and 3 or more


def residuals(live: RunRecord, sim: RunRecord) -> pd.DataFrame:
    """One row per request answered in both runs: live and simulated TTFT (s), their difference, and the
    live run's concurrency when it was sent."""
    if live.meta.get("trace_digest") != sim.meta.get("trace_digest"):
        raise ServetwinError(f"{sim.path} is not a twin of {live.path}: their trace digests differ")
    lv = live.requests.set_index("request_id")
    sv = sim.requests.set_index("request_id")
    lv = lv.assign(in_flight=in_flight_at_send(lv))
    sv = sv[["send_s", "first_token_s"]].rename(columns=lambda c: f"{c}_sim")
    both = lv.join(sv, how="inner").dropna(subset=["first_token_s", "first_token_s_sim"])
    out = pd.DataFrame({"live_ttft": both["first_token_s"] - both["send_s"],
                        "sim_ttft": both["first_token_s_sim"] - both["send_s_sim"],
                        "in_flight": both["in_flight"].astype(int)})
    out["residual"] = out["live_ttft"] - out["sim_ttft"]
    return out


def by_concurrency(frames: list[pd.DataFrame]) -> pd.DataFrame:
    """Median residual (ms) and request count per concurrency bin (the last bin is CAP or more)."""
    df = pd.concat(frames, ignore_index=True)
    df["in_flight"] = df["in_flight"].clip(upper=CAP)
    g = df.groupby("in_flight")
    return pd.DataFrame({"requests": g.size(), "median_residual_ms": g["residual"].median() * 1000,
                         "median_live_ttft_ms": g["live_ttft"].median() * 1000}).reset_index()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="servetwin twin-study diagnose ttft-residuals",
                                 description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="pairs: LIVE_RUN SIM_RUN …")
    a = ap.parse_args(argv)
    if len(a.runs) % 2:
        raise SystemExit("ttft_residuals: give the runs in pairs, LIVE_RUN SIM_RUN")
    pairs = list(zip(a.runs[::2], a.runs[1::2], strict=True))
    try:
        frames = [residuals(read_run(lv), read_run(sv)) for lv, sv in pairs]
    except ServetwinError as err:
        raise SystemExit(f"ttft_residuals: {err}") from None
    table = by_concurrency(frames)
    table["in_flight"] = [f"{v}+" if v == CAP else str(v) for v in table["in_flight"]]
    print(to_markdown(table))
    return 0
