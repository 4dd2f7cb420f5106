"""Coverage by simulation of the paired-difference intervals at the official set's n = 125: the Bonett–Price
interval (``analysis.stats.bonett_price_ci``, what every paired difference of proportions is reported with),
Newcombe's hybrid score interval (``newcombe_paired_ci``) and the percentile paired bootstrap they replaced, in the
discordance cells where the paper's embedding shifts (1.6–6.4 points) live. A cell "2%/0%" is 2% of tasks where only A scores 1 and 0% where only B does; the
concordant tasks split by ``--both`` (the share where both score 1). Coverage is the share of simulated tables
whose interval contains the true difference; 95% is nominal. Also the rejection rate of the exact and mid-p McNemar
tests where the difference is 0 (their size), and the domain intervals at the release's domain sizes (46, 26, 16,
8, 7, 7, 5, 4, 3, 3) with no domain effect, where every estimand is the same difference: the within-domain
(stratified Bonett–Price) interval and the approximate CR2 / Bell–McCaffrey interval for another domain mix.

    python -m benchmarks.paired_interval_coverage [--reps 20000] [--n 125] [--bootstrap-reps 2000]
"""

from __future__ import annotations

import argparse
import functools

import numpy as np

from analysis.stats import (bonett_price_ci, cr2_bm_ci, mcnemar_exact, mcnemar_midp, newcombe_paired_ci,
                            paired_bootstrap_ci, stratified_bonett_price_ci)

#: (A only, B only) shares of the tasks
CELLS = ((0.02, 0.0), (0.03, 0.01), (0.05, 0.02), (0.07, 0.0), (0.02, 0.02), (0.10, 0.05), (0.0, 0.0))


#: the official release's tasks per domain
DOMAIN_SIZES = (46, 26, 16, 8, 7, 7, 5, 4, 3, 3)
DOMAIN_CELLS = ((0.02, 0.0), (0.03, 0.01), (0.05, 0.02), (0.10, 0.05), (0.15, 0.05))


def domain_cell(p10: float, p01: float, reps: int, seed: int) -> dict[str, float]:
    """Coverage of the per-task, within-domain and domain-mix intervals with the same discordance in every domain;
    the domain-mix share is of the tables where it is given (it is not when no task is discordant)."""
    rng = np.random.default_rng(seed)
    sizes = np.array(DOMAIN_SIZES)
    domains = np.repeat(np.arange(len(sizes)), sizes)
    truth, eps = p10 - p01, 1e-12
    hits = {"per_task": 0, "within": 0, "mix": 0}
    given = 0
    for _ in range(reps):
        cells = [rng.multinomial(int(m), [p10, p01, 1 - p10 - p01]) for m in sizes]
        b, c = sum(int(x[0]) for x in cells), sum(int(x[1]) for x in cells)
        lo, hi = bonett_price_ci(b, c, int(sizes.sum()))
        hits["per_task"] += lo - eps <= truth <= hi + eps
        lo, hi = stratified_bonett_price_ci([(int(x[0]), int(x[1]), int(m)) for x, m in zip(cells, sizes)])
        hits["within"] += lo - eps <= truth <= hi + eps
        diffs = np.concatenate([[1] * int(x[0]) + [-1] * int(x[1]) + [0] * int(x[2]) for x in cells])
        lo, hi, _ = cr2_bm_ci(diffs, domains)
        if not np.isnan(lo):
            given += 1
            hits["mix"] += lo - eps <= truth <= hi + eps
    return {"per_task": 100.0 * hits["per_task"] / reps, "within": 100.0 * hits["within"] / reps,
            "mix": 100.0 * hits["mix"] / given if given else float("nan"), "mix_given": 100.0 * given / reps}


@functools.lru_cache(maxsize=None)
def _newcombe(both: int, a_only: int, b_only: int, neither: int) -> tuple[float, float]:
    return newcombe_paired_ci(both, a_only, b_only, neither)


def _bootstrap(a_only: int, b_only: int, n: int, n_boot: int, seed: int) -> tuple[float, float]:
    xs = [1] * a_only + [0] * b_only + [0] * (n - a_only - b_only)
    ys = [0] * a_only + [1] * b_only + [0] * (n - a_only - b_only)
    return paired_bootstrap_ci(xs, ys, n_boot=n_boot, seed=seed)


def cell(n: int, p10: float, p01: float, both: float, reps: int, boot_reps: int, n_boot: int,
         seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    p00 = 1.0 - both - p10 - p01
    tables = rng.multinomial(n, [both, p10, p01, p00], size=reps)
    truth = p10 - p01
    eps = 1e-12  # an endpoint equal to the truth covers it
    bp = sum(lo - eps <= truth <= hi + eps for lo, hi in (bonett_price_ci(int(t[1]), int(t[2]), n) for t in tables))
    nc = sum(lo - eps <= truth <= hi + eps for lo, hi in (_newcombe(*map(int, t)) for t in tables))
    out = {"bonett_price": 100.0 * bp / reps, "newcombe": 100.0 * nc / reps}
    if boot_reps:
        hits = 0
        for i, t in enumerate(tables[:boot_reps]):
            lo, hi = _bootstrap(int(t[1]), int(t[2]), n, n_boot, seed=i)
            hits += lo - eps <= truth <= hi + eps
        out["bootstrap"] = 100.0 * hits / boot_reps
    if p10 == p01:
        out["exact_size"] = 100.0 * np.mean([mcnemar_exact(int(t[1]), int(t[2])) <= 0.05 for t in tables])
        out["midp_size"] = 100.0 * np.mean([mcnemar_midp(int(t[1]), int(t[2])) <= 0.05 for t in tables])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.paired_interval_coverage", description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=125, help="paired tasks per simulated table (default 125)")
    ap.add_argument("--reps", type=int, default=20_000, help="simulated tables per cell (default 20000)")
    ap.add_argument("--both", type=float, nargs="+", default=[0.1, 0.5, 0.8],
                    help="shares of tasks where both score 1 (default 0.1 0.5 0.8)")
    ap.add_argument("--bootstrap-reps", type=int, default=2000,
                    help="tables per cell also given the percentile bootstrap (slow; 0 skips it; default 2000)")
    ap.add_argument("--n-boot", type=int, default=2000, help="bootstrap resamples per table (default 2000)")
    ap.add_argument("--domain-reps", type=int, default=4000,
                    help="tables per cell for the domain intervals (0 skips them; default 4000)")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    print(f"coverage of 95% intervals for a paired difference, n={args.n}, {args.reps} tables per cell "
          f"(bootstrap: {args.bootstrap_reps} tables × {args.n_boot} resamples)")
    print(f"{'A only/B only':>14} {'both':>5} {'Bonett–Price':>13} {'Newcombe':>9} {'bootstrap':>10} {'exact size':>11} "
          f"{'mid-p size':>11}")
    worst = {"bonett_price": 100.0, "newcombe": 100.0}
    for p10, p01 in CELLS:
        for both in args.both:
            r = cell(args.n, p10, p01, both, args.reps, args.bootstrap_reps, args.n_boot, args.seed)
            worst = {k: min(v, r[k]) for k, v in worst.items()}
            boot = f"{r['bootstrap']:.2f}%" if "bootstrap" in r else "–"
            size = (f"{r['exact_size']:.2f}%", f"{r['midp_size']:.2f}%") if "exact_size" in r else ("–", "–")
            print(f"{100 * p10:>6.0f}%/{100 * p01:.0f}% {100 * both:>4.0f}% {r['bonett_price']:>12.2f}% {r['newcombe']:>8.2f}% {boot:>10} "
                  f"{size[0]:>11} {size[1]:>11}")
    print(f"lowest coverage: Bonett–Price {worst['bonett_price']:.2f}%, Newcombe {worst['newcombe']:.2f}%")
    if args.domain_reps:
        print(f"\ndomain intervals, domains of {', '.join(map(str, DOMAIN_SIZES))} tasks, no domain effect, "
              f"{args.domain_reps} tables per cell")
        print(f"{'A only/B only':>14} {'per task':>9} {'within-domain':>14} {'domain mix (CR2)':>17} {'CR2 given':>10}")
        for p10, p01 in DOMAIN_CELLS:
            r = domain_cell(p10, p01, args.domain_reps, args.seed)
            print(f"{100 * p10:>6.0f}%/{100 * p01:.0f}% {r['per_task']:>8.2f}% {r['within']:>13.2f}% "
                  f"{r['mix']:>16.2f}% {r['mix_given']:>9.1f}%")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
