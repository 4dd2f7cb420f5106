"""Honesty on small samples: the n below which a report warns, flags for intervals that carry no information, the
smallest gap two separate rates can resolve at a given n, and ties reported as ties rather than as a "best".

A run of 2 tasks prints ``+100.0 [+100.0, +100.0]`` from a percentile bootstrap: every resample gives the same
difference, so the interval has zero width and looks certain. These helpers make such cells visibly suspect.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from inmind_exp.metrics import Z95

#: Below this many valid tasks per configuration the report warns that intervals are wide and rankings anecdotal.
MIN_N = 30
#: An interval wider than this (percentage points) spans most of what it could say; flagged as uninformative.
WIDE_PP = 50.0
#: Marker appended to a cell whose interval is degenerate (zero width) or uninformative (wider than ``WIDE_PP``).
FLAG = "†"
FLAG_NOTE = (f"{FLAG}: degenerate interval: zero width (every bootstrap resample gave the same difference, so it "
             f"shows no uncertainty although there is some) or wider than {WIDE_PP:.0f} points (n too small to say "
             f"much); do not read such a cell as a finding.")


def degenerate(lo: float, hi: float, n: int) -> bool:
    """True for an interval (in points) with zero width or wider than ``WIDE_PP``; never for an empty sample."""
    if not n or math.isnan(lo) or math.isnan(hi):
        return False
    return hi - lo <= 0.0 or hi - lo > WIDE_PP


def flag(lo: float, hi: float, n: int) -> str:
    return FLAG if degenerate(lo, hi, n) else ""


def resolvable_gap_pp(n: int, z: float = Z95) -> float:
    """The smallest gap (points) between two independent rates of ``n`` tasks each that a 95% test can resolve at
    the worst case p = 0.5: z·sqrt(2·0.25/n). 12.4 points at n=125, 21.9 at n=40, 98 at n=2."""
    return 100.0 * z * math.sqrt(0.5 / n) if n > 0 else math.nan


def wilson_halfwidth_pp(n: int, z: float = Z95) -> float:
    """Half-width (points) of a Wilson interval at an observed 50%: the widest it gets for ``n`` tasks."""
    if n <= 0:
        return math.nan
    return 100.0 * z * math.sqrt(0.25 / n + z * z / (4 * n * n)) / (1 + z * z / n)


def n_range(ns: Iterable[int]) -> str:
    """``"40"`` or ``"38–40"`` for the valid-task counts of several configurations (empty ones left out)."""
    vals = sorted(n for n in ns if n)
    if not vals:
        return "0"
    return str(vals[0]) if vals[0] == vals[-1] else f"{vals[0]}–{vals[-1]}"


def small_sample_warning(sizes: Sequence[tuple[str, int]]) -> str | None:
    """One warning naming every configuration with fewer than ``MIN_N`` valid tasks, or None when all have enough."""
    small = [(label, n) for label, n in sizes if n < MIN_N]
    if not small:
        return None
    smallest = min(n for _, n in small)
    listed = ", ".join(f"{label} (n={n})" for label, n in small)
    gap = resolvable_gap_pp(smallest)
    return (f"Small samples: {len(small)} of {len(sizes)} configuration(s) have fewer than {MIN_N} valid tasks: "
            f"{listed}. At n={smallest} two separate rates must differ by about "
            f"{min(gap, 100.0):.0f} points to be distinguishable, intervals are wide, and a ranking or a 'best' "
            f"configuration is an anecdote, not a finding. Run more tasks (dataset.limit) before drawing conclusions.")

