"""A paper's claim as a verdict: "holds", "does not hold" or "inconclusive" at a given coverage.

A directional claim ("A beats B": the effect A - B is > ``null``) holds when the whole interval
lies on the claimed side of ``null``, does not hold when the whole interval lies on the other side,
and is inconclusive when the interval contains ``null`` (or is undefined). A containment claim
("the world's own value lies in lambda*'s interval") holds when the value is inside.
"""

from __future__ import annotations

import math

from mmgrid.stats.errors import StatsError

HOLDS, FAILS, INCONCLUSIVE = "holds", "does not hold", "inconclusive"
DIRECTIONS = ("greater", "less")


def verdict(ci_low: float, ci_high: float, direction: str = "greater", null: float = 0.0) -> str:
    """The verdict of a directional claim from an interval of its effect.

    Args:
        ci_low, ci_high: the effect's interval.
        direction: ``"greater"`` (claim: effect > ``null``) or ``"less"`` (effect < ``null``).
        null: the value of no effect.
    """
    if direction not in DIRECTIONS:
        raise StatsError(f"direction {direction!r} is not one of {DIRECTIONS}")
    if any(not math.isfinite(float(v)) for v in (ci_low, ci_high)):
        return INCONCLUSIVE
    if ci_low > ci_high:
        raise StatsError(f"interval [{ci_low}, {ci_high}] has low > high")
    above, below = ci_low > null, ci_high < null
    if direction == "greater":
        return HOLDS if above else FAILS if below else INCONCLUSIVE
    return HOLDS if below else FAILS if above else INCONCLUSIVE


def contains(ci_low: float, ci_high: float, value: float) -> str:
    """``holds`` when ``value`` lies in [ci_low, ci_high], ``does not hold`` outside, ``inconclusive`` if undefined."""
    if any(not math.isfinite(float(v)) for v in (ci_low, ci_high, value)):
        return INCONCLUSIVE
    return HOLDS if ci_low <= value <= ci_high else FAILS


def verdict_line(claim: str, result: str, evidence: str, level: float = 0.95) -> str:
    """One Markdown line: ``- **holds** at 95%: claim (evidence)``."""
    return f"- **{result}** at {level:.0%}: {claim} ({evidence})"


def _shown(x: float) -> str:
    """Two decimals, or two significant digits where two decimals would print 0.00 (a published
    difference of 0.0022 points stays visible)."""
    return f"{x:.2f}" if x == 0 or abs(x) >= 0.005 else f"{x:.2g}"


def mde_note(ci_low: float, ci_high: float, level: float = 0.95, reported: float | None = None,
             what: str = "effect", unit: str = "", scale: float = 1.0, power: float = 0.8) -> str:
    """What an inconclusive verdict could have seen: its minimum detectable effect at ``power``.

    The standard error is read off the effect's ``level`` interval (width / (2 z), a normal
    approximation; :func:`mmgrid.stats.power.mde_from_interval`), so the note needs nothing but the
    interval the verdict was judged on. ``reported``: a published (or planted) effect to compare with.
    ``scale`` multiplies every number shown (100 for % points) and ``unit`` follows them.

    Example: ``inconclusive: this run detects |effect| >= 2.80 pts at 80% power; MMGRid reports 1.50 pts,
    below it``.
    """
    # lazy: keeps this module (imported by the registry through mmgrid.stats) to the standard library
    from mmgrid.stats.power import mde_from_interval

    x = mde_from_interval(ci_low, ci_high, level, power=power)
    if not math.isfinite(x):
        return "inconclusive (no interval: nothing to size)"
    text = f"inconclusive: this run detects |{what}| >= {_shown(x * scale)}{unit} at {power:.0%} power"
    if reported is not None and math.isfinite(float(reported)):
        side = "above it" if abs(float(reported)) >= x else "below it: this run could not have seen it"
        text += f"; MMGRid reports {_shown(float(reported) * scale)}{unit}, {side}"
    return text
