"""Plain implementations of the searches, written from their rules, for differential tests.

Nothing here is shared with `search/`: every statistic is recomputed from the
tree by walking it, the released code's visit counts are kept in plain dicts
updated exactly as its rules say, and the budget is a plain loop.  Slow
(O(N) per selection) and obviously correct is the point.

Rules, `paper` (the equations) / `reference` (the released code,
github.com/Sora-Miyamoto/bg-mcts):

* BG-MCTS: BG-PUCT = mean over the child's subtree of Q + kappa (1 - rho) d / d_ans,
  plus c rho P sqrt(ln visits(parent) / |subtree|); widen (one child) when
  mu + lambda rho sigma^2 >= the best child's score; a leaf gets k children.
  visits(p) is |subtree(p)|, except that the released code never counts visits
  at the root (visits(root) = 1).
* MCTS: PUCT with W/m and m = |subtree|; in the released code a node's own
  statistics are updated at creation and again by backpropagation (which also
  reaches the root), and the weight is sqrt(sqrt(2)).
* LiteSearch: limit(x) = the smallest C with 1 - (1 - v)^C > epsilon, over depth,
  rounded up (paper) or int(ln(1 - eps) / (depth ln(1 - v))) (released code); the
  root gets the maximum; pick the highest-valued node whose children are fewer than
  its limit (earliest on ties); incremental: one child; batch: fill the node.
* Budget: `paper`: one request per expansion, every choice the same share of
  what is left (trailing choices dropped when the share is below one token), no
  charge for "Step 1:", the continuation prompt charged at its token count;
  `reference`: one request per child, each capped at what is left after its
  fixed charge (4 per root child, 15 per continuation).  When a fixed charge
  alone leaves no room the released code adds an empty node of Q = 0 and ends;
  this implementation, like `search/`, just ends (the one budget-end difference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tests.search.world import Path, generate

Result = tuple[list[tuple[Path, float, bool]], int]  # (path, Q, answered) per node, tokens spent
CONTINUATION = "\nBut wait, let me think about the problem again.\nStep"


@dataclass
class SNode:
    path: Path
    parent: SNode | None
    q: float = 0.0
    answered: bool = False
    children: list[SNode] = field(default_factory=list)

    @property
    def depth(self) -> int:
        return len(self.path)

    def subtree(self) -> list[SNode]:
        out, stack = [], [self]
        while stack:
            node = stack.pop()
            out.append(node)
            stack.extend(node.children)
        return out

    def steps_since_answer(self) -> int:
        """d(x): 0 when answered, else the unanswered nodes from x up to the last answered one."""
        d, node = 0, self
        while node.parent is not None and not node.answered:
            d, node = d + 1, node.parent
        return d


@dataclass
class Straightforward:
    world: object
    budget: int
    reference: bool
    full: bool = False
    cap: int = 1024
    nodes: list[SNode] = field(default_factory=list)
    used: int = 0
    answer_depths: list[int] = field(default_factory=list)
    max_depth: int = 0

    def __post_init__(self) -> None:
        self.root = SNode((), None)
        self.nodes.append(self.root)

    # ------------------------------------------------------------ budget + generation
    def charge(self, parent: SNode) -> int:
        if parent.parent is None:
            return 4 if self.reference else 0
        if parent.answered:
            text = CONTINUATION if not self.full else CONTINUATION[: -len("Step")]
            return 15 if self.reference else len(text.split())
        return 0

    def add(self, parent: SNode, max_tokens: int) -> SNode:
        path = (*parent.path, len(parent.children))
        g = generate(self.world, path, max_tokens)  # type: ignore[arg-type]
        node = SNode(path, parent, self.world.outcome(path).q, g.finish.value == "eos")  # type: ignore[attr-defined]
        self.used += g.output_tokens
        parent.children.append(node)
        self.nodes.append(node)
        if node.answered:
            self.answer_depths.append(parent.steps_since_answer() + 1)
        self.max_depth = max(self.max_depth, node.depth)
        return node

    def expand(self, parent: SNode, n: int) -> list[SNode]:
        """n children of `parent` under the budget rule; [] when none fits."""
        charge = self.charge(parent)
        if self.reference:
            made = []
            for _ in range(n):
                left = self.budget - self.used - charge
                if left < 1:
                    break
                self.used += charge
                made.append(self.add(parent, min(self.cap, left)))
            return made
        while n > 0:
            share = (self.budget - self.used - n * charge) // n
            if share >= 1:
                self.used += n * charge
                return [self.add(parent, min(self.cap, share)) for _ in range(n)]
            n -= 1
        return []

    @property
    def rho(self) -> float:
        return 1.0 - self.used / self.budget

    def d_ans(self) -> float:
        if self.answer_depths:
            return sum(self.answer_depths) / len(self.answer_depths)
        return float(max(1, self.max_depth))

    def run(self, select) -> list[tuple[Path, float, bool]]:  # type: ignore[no-untyped-def]
        while self.budget - self.used >= 1:
            choice = select()
            if choice is None:
                break
            node, n = choice
            if not self.expand(node, n):
                break
        return [(x.path, x.q, x.answered) for x in self.nodes[1:]]


def _priors(parent: SNode) -> list[float]:
    exps = [math.exp(c.q - max(x.q for x in parent.children)) for c in parent.children]
    return [e / sum(exps) for e in exps]


def bg_mcts(world: object, budget: int, reference: bool, k: int = 2) -> Result:
    s = Straightforward(world, budget, reference)
    c, kappa, lam = math.sqrt(2), 1.0, 1.0

    def select():  # type: ignore[no-untyped-def]
        node, rho, d_ans = s.root, s.rho, s.d_ans()
        while node.children:
            # released code: the root's visit count is never updated (stays 1)
            visits_p = 1 if reference and node.parent is None else len(node.subtree())
            scores = []
            for child, prior in zip(node.children, _priors(node), strict=True):
                sub = child.subtree()
                exploit = sum(y.q + kappa * (1 - rho) * y.steps_since_answer() / d_ans for y in sub)
                explore = c * rho * prior * math.sqrt(math.log(visits_p) / len(sub))
                scores.append(exploit / len(sub) + explore)
            best = max(range(len(scores)), key=lambda i: scores[i])
            qs = [x.q for x in node.children]
            mu = sum(qs) / len(qs)
            var = sum((x - mu) ** 2 for x in qs) / len(qs)
            if mu + lam * rho * var >= scores[best]:
                return node, 1
            node = node.children[best]
        return node, k

    return s.run(select), s.used


def mcts(world: object, budget: int, reference: bool, k: int = 2) -> Result:
    s = Straightforward(world, budget, reference)
    visits: dict[Path, int] = {}
    values: dict[Path, float] = {}
    seen = 1  # nodes whose statistics are in the dicts (the root counts as seen)
    c = math.sqrt(math.sqrt(2)) if reference else math.sqrt(2)

    def update() -> None:
        nonlocal seen
        for node in s.nodes[seen:]:  # the released rule, node by node in creation order
            visits[node.path], values[node.path] = 1, node.q
            current: SNode | None = node
            while current is not None:
                visits[current.path] = visits.get(current.path, 0) + 1
                values[current.path] = values.get(current.path, 0.0) + node.q
                current = current.parent
        seen = len(s.nodes)

    def stats(node: SNode) -> tuple[float, int]:
        if reference:
            return values[node.path], visits.get(node.path, 1)
        sub = node.subtree()
        return sum(y.q for y in sub), len(sub)

    def select():  # type: ignore[no-untyped-def]
        update()
        node = s.root
        while node.children:
            _, visits_p = stats(node)
            scores = []
            for child, prior in zip(node.children, _priors(node), strict=True):
                w, m = stats(child)
                scores.append(w / m + c * prior * math.sqrt(math.log(visits_p) / m))
            node = node.children[max(range(len(scores)), key=lambda i: scores[i])]
        return node, k

    return s.run(select), s.used


def litesearch_limit(node: SNode, reference: bool, eps: float, max_width: int) -> int:
    if node.parent is None:
        return max_width
    v, depth = node.q, node.depth
    if reference:
        if v == 0.0:
            return max_width
        if v == 1.0:
            return 1
        return min(max_width, max(1, int(math.log(1 - eps) / (depth * math.log(1 - v)))))
    needed = 1
    while needed < max_width * depth and 1 - (1 - v) ** needed <= eps:
        needed += 1
    return min(max_width, max(1, math.ceil(needed / depth)))


def litesearch(
    world: object, budget: int, reference: bool, batch: bool, eps: float = 0.9, max_width: int = 10
) -> Result:
    s = Straightforward(world, budget, reference)

    def select():  # type: ignore[no-untyped-def]
        if any(x.answered and x.q > 0.9 for x in s.nodes):
            return None  # early stop (App. C)
        open_ = [
            x for x in s.nodes if len(x.children) < litesearch_limit(x, reference, eps, max_width)
        ]
        if not open_:
            return None
        best = max(open_, key=lambda x: 0.0 if x.parent is None else x.q)
        room = litesearch_limit(best, reference, eps, max_width) - len(best.children)
        return best, room if batch else 1

    return s.run(select), s.used


def repeated_sampling(world: object, budget: int, reference: bool) -> Result:
    s = Straightforward(world, budget, reference, full=True, cap=4096)
    return s.run(lambda: (s.root, 1)), s.used


def refinement(world: object, budget: int, reference: bool) -> Result:
    s = Straightforward(world, budget, reference, full=True, cap=4096)
    return s.run(lambda: (s.nodes[-1], 1)), s.used
