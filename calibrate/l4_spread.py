"""How far the calibration's three seeds stand from what the profile does on average: every condition of C1-C6
over seeds 1..N, and for each target the distribution of its value over every three distinct seeds (the study's
aggregate: a geometric mean of three runs) — its mean, spread, 5th and 95th percentiles, and where the published
figure falls in it. Then each target against the seeds' draw of arrivals: at the nominal count of graphs (λT), how
much it moves with the count, and how many graphs three seeds of the study would have had to bring for the profile
to give the published figure, with the chance of such a draw (``calibrate.l4_seeds.by_arrivals``).

    python -m calibrate.l4_spread [--seeds 30] [--workers 2] [--at KEY=VALUE ...]

A published figure is one draw of three runs; seeds 1-3 here are another draw, of this generator, not the study's.
Where a target's spread over three seeds is wider than its tolerance, the fit's error on seeds 1-3 says little: the
published figure's percentile in the simulated distribution (5-95 % is consistent with the model at that spread)
does. ``--at`` replaces the shipped coefficients as in ``python -m calibrate.l4_default --at``.
"""

from __future__ import annotations

import argparse

from calibrate import l4_targets as T
from calibrate.l4_default import HERE, WORKLOAD, parse_at, split
from calibrate.l4_seeds import by_arrivals, spread
from simulator.profiles import load_hardware


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, default=30)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--at", nargs="+", default=[], metavar="KEY=VALUE")
    a = ap.parse_args(argv)
    hw = load_hardware(str(HERE / "l4.yaml"))
    try:
        if not 3 <= a.seeds <= 200:
            raise ValueError(f"--seeds {a.seeds}: expected a whole number of seeds from 3 to 200")
        values = parse_at(a.at, hw)
    except ValueError as e:
        print(f"error: {e}")
        return 2
    coef, tool = split({WORKLOAD: T.fitted_tool_median(), **values})
    seeds = tuple(range(1, a.seeds + 1))
    runs = T.simulate_conditions(T.with_coefficients(hw, coef), T.CONDITIONS, a.workers, tool, seeds)
    print(f"  {'target':22s} {'published':>9s} {'seeds 1-3':>9s} {'mean':>8s} {'sd %':>5s} {'p5':>8s} {'p95':>8s}"
          f" {'published at':>12s}")
    for k, r in spread(runs, a.seeds).items():
        print(f"  {k:22s} {r['published']:9.4f} {r['seeds_1_3']:9.4f} {r['mean']:8.4f} {r['sd_pct']:5.1f} "
              f"{r['p5']:8.4f} {r['p95']:8.4f} {r['published_percentile']:11.1f}%")
    print(f"\n  {'target':22s} {'published':>9s} {'at nominal count':>16s} {'elasticity':>10s} {'count needed':>12s}"
          f" {'chance':>7s}")
    for k, r in by_arrivals(runs, a.seeds).items():
        print(f"  {k:22s} {r['published']:9.4f} {r['expected']:16.4f} {r['elasticity']:10.3f} "
              f"{r['count_needed']:12.4f} {r['p_count']:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
