"""Honesty on small samples: the n below which a report warns, flags for intervals that carry no information, the
paired difference the exact McNemar test detects with 80% power at a given n (``stats.min_detectable_diff``), and
ties reported as ties rather than as a "best".

An interval over most of the scale (a Wilson interval at n = 2, a paired interval at n = 2) says
next to nothing, and one of zero width looks certain; these helpers make such cells visibly suspect.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence

from inmind_exp.protocol.metrics import Z95

#: Below this many valid tasks per configuration the report warns that intervals are wide and rankings anecdotal.
MIN_N = 30
#: An interval wider than this (percentage points) spans most of what it could say; flagged as uninformative.
WIDE_PP = 50.0
#: Marker appended to a cell whose interval is degenerate (zero width) or uninformative (wider than ``WIDE_PP``).
FLAG = "†"
FLAG_NOTE = (f"{FLAG}: degenerate interval: zero width (it shows no uncertainty although there is some) or wider "
             f"than {WIDE_PP:.0f} points (n too small to say much); do not read such a cell as a finding.")
#: Shares of discordant tasks (a paired comparison's tasks where exactly one configuration scores 1) at which the
#: report states the minimum detectable difference for its n.
DISCORDANCES = (0.05, 0.10, 0.15, 0.30)


def degenerate(lo: float, hi: float, n: int) -> bool:
    """True for an interval (in points) with zero width or wider than ``WIDE_PP``; never for an empty sample."""
    if not n or math.isnan(lo) or math.isnan(hi):
        return False
    return hi - lo <= 0.0 or hi - lo > WIDE_PP


def flag(lo: float, hi: float, n: int) -> str:
    return FLAG if degenerate(lo, hi, n) else ""


def detectable(n: int, discordances: Sequence[float] = DISCORDANCES) -> str:
    """What ``n`` paired tasks can tell apart, as a clause: the 80%-power minimum detectable difference of the exact
    McNemar test at each share of discordant tasks, e.g. "at n=125 the paired test detects with 80% power a
    difference of 8.0 points when 10% of tasks are discordant, 9.9 at 15%, 14.1 at 30%, none at 5%"."""
    from analysis.stats import min_detectable_diff

    if n <= 0:
        return "with no valid task nothing can be detected"
    found = [(d, 100.0 * min_detectable_diff(n, d)) for d in sorted(discordances)]
    some = [(d, m) for d, m in found if not math.isnan(m)]
    none = [f"{100 * d:.0f}%" for d, m in found if math.isnan(m)]
    if not some:
        return (f"at n={n} the paired test has under 80% power for any difference even when "
                f"{100 * max(discordances):.0f}% of tasks are discordant")
    parts = [f"{m:.1f} points when {100 * d:.0f}% of tasks are discordant" if i == 0 else f"{m:.1f} at {100 * d:.0f}%"
             for i, (d, m) in enumerate(some)]
    tail = f" (none at {', '.join(none)}: too few discordant tasks)" if none else ""
    return f"at n={n} the paired test detects with 80% power a difference of {', '.join(parts)}{tail}"


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
    return (f"Small samples: {len(small)} of {len(sizes)} configuration(s) have fewer than {MIN_N} valid tasks: "
            f"{listed}. {(d := detectable(smallest))[0].upper()}{d[1:]}; intervals are wide, and a ranking or a 'best' "
            f"configuration is an anecdote, not a finding. Run more tasks (dataset.sample) before drawing "
            f"conclusions.")

