"""Post-merge targets of pairwise merges, from a run's scores.

- ``normalized`` (Zhou et al., arXiv 2601.22285, Eq. 2 text) where each expert declares its own tasks:
  p_AB = 1/2 [acc_merge(A's tasks) / acc_A(A's tasks) + acc_merge(B's tasks) / acc_B(B's tasks)], with acc over
  an expert's tasks the mean of its own tasks' scores. The demo family knows each expert's skills; an expert whose
  ``domain`` names the suite (homogeneous pools) owns every task of the suite.
- ``relative`` for pools without own tasks: the merge's suite mean over the mean of its two experts' suite means.
"""

from typing import Dict, List, Optional

import numpy as np

from wildmerge.errors import WildmergeError


def demo_own_tasks(tasks: List[str]) -> Dict[str, List[str]]:
    """Each demo expert's skills as suite task labels (``add`` also owns ``add_gen``)."""
    from wildmerge.families.demo.spec import EXPERTS

    return {e.name: [t for t in tasks if any(t == s or t.startswith(s + "_") for s in e.mixture)] for e in EXPERTS}


def own_tasks_for(pool_name: str, suite: str, tasks: List[str], domains: Dict[str, Optional[str]]) -> Dict[str, list]:
    """{expert: own task labels} where they are known, else {}."""
    if pool_name == "demo" and suite.startswith("demo"):
        return {e: t for e, t in demo_own_tasks(tasks).items() if e in domains}
    if domains and all(d == suite for d in domains.values()):
        return {e: list(tasks) for e in domains}
    return {}


def pair_targets(run_dir, suite: Optional[str] = None, kind: str = "auto") -> "object":
    """One row per evaluated 2-expert merge: method, experts, target, target kind and the raw suite mean."""
    import pandas as pd

    from wildmerge.analysis.report.run_data import RunData
    from wildmerge.analysis.report.scores import collect_scores

    data = RunData.read(run_dir)
    suite = data.pick_suite(suite)
    df, tasks, _ = collect_scores(data, suite)
    manifest = data.manifest
    domains = {m.name: m.domain for m in manifest.models.experts} if manifest else {}
    own = own_tasks_for(manifest.pool if manifest else "", suite, tasks, domains)
    if kind == "normalized" and not own:
        raise WildmergeError("the normalized target needs each expert's own tasks: known for the demo family on the "
                             "demo suite and for homogeneous pools on their domain suite; use --target relative")
    kind = ("normalized" if own else "relative") if kind == "auto" else kind
    rows = targets_from_scores(df, tasks, own, kind)
    if not rows:
        raise WildmergeError(f"{run_dir}: no evaluated 2-expert merges with evaluated experts; run `wildmerge sample "
                             f"--sizes 2` with an evaluation suite first")
    return pd.DataFrame(rows)


def targets_from_scores(df, tasks: List[str], own: Dict[str, list], kind: str, sizes=(2,)) -> List[dict]:
    """Rows of target per evaluated merge of ``sizes`` experts (``collect_scores`` columns: kind, n, experts,
    method, status, one column per task, mean). For n > 2 the same definitions average over the n experts."""
    ok = df[df["status"] == "ok"]
    singles = {r["experts"] or r["model_id"]: r for _, r in ok[ok["kind"] == "expert"].iterrows()}
    rows = []
    for _, m in ok[(ok["kind"] == "merge") & (ok["n"].isin(list(sizes)))].iterrows():
        members = m["experts"].split(";")
        if any(x not in singles for x in members):
            continue
        if kind == "normalized":
            target = float(np.mean([_own_mean(m, own[x], tasks) / _own_mean(singles[x], own[x], tasks)
                                    for x in members]))
        else:
            target = m["mean"] / np.mean([singles[x]["mean"] for x in members])
        rows.append({"method": m["method"], "n": int(m["n"]), "experts": ";".join(members),
                     "expert_a": members[0], "expert_b": members[-1], "model_id": m["model_id"],
                     "subset_id": m["subset_id"], "target": target, "target_kind": kind, "suite_mean": m["mean"]})
    return rows


def _own_mean(row, own: List[str], tasks: List[str]) -> float:
    cols = own or tasks
    value = float(np.mean([row[t] for t in cols]))
    return value if value > 0 else float("nan")
