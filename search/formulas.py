"""The paper's selection formulas as pure functions of tree statistics."""

from __future__ import annotations

import math


def exploration_bonus(prior: float, m_parent: int, m_child: int) -> float:
    """P(s|p) sqrt(ln(m_p) / m_s), shared by Eq. 1 and Eq. 3."""
    return prior * math.sqrt(math.log(m_parent) / m_child)


def puct(w: float, m_child: int, m_parent: int, prior: float, c: float) -> float:
    """PUCT(p, s) = W(s)/m_s + c P(s|p) sqrt(ln(m_p)/m_s)  (Eq. 1)."""
    return w / m_child + c * exploration_bonus(prior, m_parent, m_child)


def bg_puct(
    w_tilde: float, m_child: int, m_parent: int, prior: float, c: float, rho: float
) -> float:
    """BG-PUCT(p, s, rho) = W~(s, rho)/m_s + rho c P(s|p) sqrt(ln(m_p)/m_s)  (Eq. 3).

    `w_tilde` is the completion-biased value of Eq. 4 (see `Tree.w_tilde`).
    """
    return w_tilde / m_child + rho * c * exploration_bonus(prior, m_parent, m_child)


def e_gen(mu: float, variance: float, lam: float, rho: float) -> float:
    """Virtual generative child's score E_gen(p, rho) = mu(p) + lambda rho sigma^2(p)  (Eq. 5)."""
    return mu + lam * rho * variance


def litesearch_width(value: float, depth: int, epsilon: float, max_width: int) -> int:
    """LiteSearch's expansion budget for a node (LiteSearch, Sec. 3; paper App. C).

    The smallest C with 1 - (1 - v)^C > epsilon, divided by the depth and
    clipped to [1, max_width].  A node with v = 0 never reaches epsilon and gets
    the maximum; depth 0 (the root) is treated as depth 1.
    """
    # Count C upwards: exact to the definition, no log-ratio rounding at the boundary.
    # Past max_width * depth the clip gives max_width anyway.
    limit = max_width * max(1, depth)
    needed = 1
    while needed < limit and 1.0 - (1.0 - value) ** needed <= epsilon:
        needed += 1
    width = math.ceil(needed / max(1, depth))
    return int(min(max_width, max(1, width)))


def litesearch_width_truncated(value: float, depth: int, epsilon: float, max_width: int) -> int:
    """The released code's LiteSearch width: int(ln(1 - epsilon) / (depth ln(1 - v))), clipped.

    The same quantity as `litesearch_width` before rounding (C / depth with the real
    C solving (1 - v)^C = 1 - epsilon), truncated where that one rounds up: at
    epsilon = 0.9 and depth 1, v = 0.3 gives 6 here and 7 there.  The released code
    divides by zero at v = 0 and takes ln 0 at v = 1; here v = 0 never reaches
    epsilon (max_width) and v = 1 reaches it at once (1).
    """
    if value <= 0.0:
        return max_width
    if value >= 1.0:
        return 1
    width = int(math.log(1.0 - epsilon) / (max(1, depth) * math.log(1.0 - value)))
    return min(max_width, max(1, width))
