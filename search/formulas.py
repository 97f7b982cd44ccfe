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
