"""The in-the-wild subsets: every expert alone, k random distinct subsets for each size n, the full pool.

Draws are seeded per size (``seed``, ``n``), so adding a size to a run leaves the other sizes' subsets unchanged,
and the result depends only on the pool's expert order, never on dict or set ordering. The paper's sizes and k are
``wildmerge.protocol.PAPER_SIZES`` and ``PAPER_K``.
"""

import itertools
import math
import random
from dataclasses import asdict, dataclass, field

from wildmerge.errors import ConfigError


@dataclass(frozen=True)
class Subset:
    subset_id: str
    n: int
    experts: tuple[str, ...]
    exhaustive: bool = False  # C(N, n) <= k: every combination was taken
    domain: str | None = None

    def as_dict(self) -> dict:
        d = asdict(self)
        d["experts"] = list(self.experts)
        return d


@dataclass
class Draw:
    subsets: list[Subset]
    notes: list[str] = field(default_factory=list)
    combinations: dict[int, dict] = field(default_factory=dict)


def _rng(seed: int, n: int) -> random.Random:
    return random.Random(f"wildmerge-subsets:{seed}:{n}")  # str seeds are hashed stably (sha512)


def draw_subsets(experts: list[str], sizes, k: int, seed: int = 0, full: bool = True) -> Draw:
    """Subsets of ``experts`` (names, pool order) for each size; ``full`` adds n = N."""
    N = len(experts)
    if len(set(experts)) != N:
        raise ConfigError("duplicate expert names in the pool; give every expert a distinct name")
    if k < 1:
        raise ConfigError(f"k must be at least 1 (got {k})")
    sizes = sorted(set(int(n) for n in sizes) | ({N} if full else set()))
    bad = [n for n in sizes if n < 1 or n > N]
    if bad:
        raise ConfigError(f"subset size(s) {bad} impossible for a pool of {N} experts; use sizes between 1 and {N}")
    out = Draw([])
    for n in sizes:
        total = math.comb(N, n)
        width = max(2, len(str(max(k, N) - 1)))
        if n == 1:  # every expert alone: the paper's n = 1 column
            combos, exhaustive = [(i,) for i in range(N)], True
        elif total <= k:
            combos, exhaustive = list(itertools.combinations(range(N), n)), True
            if n != N:
                out.notes.append(f"n={n}: C({N},{n}) = {total} <= k = {k}, so all {total} combinations are taken")
        else:
            rng, seen, combos = _rng(seed, n), set(), []
            while len(combos) < k:
                c = tuple(sorted(rng.sample(range(N), n)))
                if c not in seen:
                    seen.add(c)
                    combos.append(c)
            exhaustive = False
        out.combinations[n] = {"total": total, "taken": len(combos), "exhaustive": exhaustive}
        for j, c in enumerate(combos):
            sid = f"n{n:02d}_full" if n == N else f"n{n:02d}_s{j:0{width}d}"
            out.subsets.append(Subset(sid, n, tuple(experts[i] for i in c), exhaustive))
    return out


def domain_subsets(experts: list[str], domains: list[str | None]) -> Draw:
    """Appendix E's homogeneous configurations: one subset per domain, and all experts together."""
    if any(d is None for d in domains):
        missing = [e for e, d in zip(experts, domains) if d is None]
        raise ConfigError(f"--homogeneous needs a 'domain:' on every expert; missing on {missing}")
    out = Draw([])
    for d in dict.fromkeys(domains):
        members = tuple(e for e, dd in zip(experts, domains) if dd == d)
        out.subsets.append(Subset(f"domain_{d}", len(members), members, True, domain=d))
    out.subsets.append(Subset("domain_all", len(experts), tuple(experts), True, domain="all"))
    out.notes.append("homogeneous configurations (Appendix E): one merge per domain and one of all experts")
    return out


PREDICTOR_NOTE = "subsets chosen by a fitted mergeability predictor (the k best-scored per size)"


def top_subsets(experts: list[str], sizes, k: int, score, full: bool = True, note: str = PREDICTOR_NOTE) -> Draw:
    """The ``k`` best-scored subsets of each size (every combination scored by ``score(names)``, highest first,
    ties broken by pool order); n = 1 keeps every expert alone and n = N the full pool, as the random draw.
    ``note`` says in the dry run and the manifest what the score was."""
    N = len(experts)
    base = draw_subsets(experts, sizes=sizes, k=k, seed=0, full=full)  # validates the sizes; n = 1 and N as usual
    out = Draw([], notes=[note])
    for n in sorted({s.n for s in base.subsets}):
        if n in (1, N):
            out.subsets += [s for s in base.subsets if s.n == n]
            out.combinations[n] = base.combinations[n]
            continue
        ranked = sorted(itertools.combinations(range(N), n), key=lambda c: -score([experts[i] for i in c]))
        width = max(2, len(str(max(k, N) - 1)))
        total = math.comb(N, n)
        out.combinations[n] = {"total": total, "taken": min(k, total), "exhaustive": total <= k}
        for j, c in enumerate(ranked[:k]):
            out.subsets.append(Subset(f"n{n:02d}_p{j:0{width}d}", n, tuple(experts[i] for i in c), total <= k))
    return out
