#!/usr/bin/env python
"""Guided search against the paper's protocol: best suite mean found against item evaluations spent.

The protocol (Hitit et al. 2025) merges every method on random subsets of every size and evaluates each merge on
every item. The guided search (``wildmerge.search``) tunes each method by TAS, ranks subsets by a weight-only proxy
and spends its budget by successive halving on nested item subsets. Both are measured here on one pool by replay:
every merge either of them touches is merged once (in memory, saved) and scored once on every item with per-item
scores kept (``record_items``); the protocol's cost is its merges' full evaluations, the guided search's cost is the
items its rungs would score (``halving.halve`` on the recorded items, the same subsets and decisions as a live
``wildmerge search``: zero-shot, single-leaf tasks such as the demo suite). The winner's reported score is its full
evaluation. Both sides also pay one full evaluation of the base.

    python benchmarks/experiment_guided_search.py --out runs/exp-guided --seeds 0,1,2 --limit 40
    python benchmarks/experiment_guided_search.py --pool smollm2 --suite smollm2 ...   # the real family, when built

Writes ``results.json``, ``table.md`` and ``best_vs_cost.png`` under ``--out``.
"""

import argparse
import itertools
import json
import time
from pathlib import Path

import numpy as np

from wildmerge.atomic import write_json, write_text
from wildmerge.eval.screening.stats import paired_interval, screen_items, suite_score
from wildmerge.recipes.method import safe_name
from wildmerge.search.candidates import candidate_id, interleave, ranked_subsets
from wildmerge.search.halving import candidates_for, halve

PROTOCOL_METHODS = "ta,ties,model_stock,tsv_m,iso_c,ta_sb,ties_sb"  # the paper's seven


class Universe:
    """Every merge either side touches: merged once, scored once on every item (items cached on disk)."""

    def __init__(self, out: Path, pool_name: str, suite: str, limit, workers: int):
        from wildmerge.hub import resolve_all
        from wildmerge.pools.adapters import full_checkpoints
        from wildmerge.pools import load_pool

        self.out, self.suite, self.limit, self.workers = out, suite, limit, workers
        self.pool = load_pool(pool_name)
        rel = Path(self.pool.source).parent if self.pool.source else None
        refs = [("base", self.pool.base.model, self.pool.base.revision)] + [
            (e.label, e.model, e.revision) for e in self.pool.experts]
        resolved = resolve_all(refs, relative_to=rel)
        self.base = resolved[0].path
        self.experts = {label: r.path for (label, _, _), r in zip(refs[1:], resolved[1:])}
        self.experts = full_checkpoints(self.base, self.experts)  # as the search: LoRA adapters folded into the base
        self.specs, self.items = {}, {}
        self.by_recipe, self.same = {}, {}  # recipe -> the first id that has it; id -> that id
        self.cache = out / "items.json"
        if self.cache.is_file():
            cached = json.loads(self.cache.read_text())
            self.items = {k: {t: np.asarray(v) for t, v in d.items()} for k, d in cached.items()}
        self.seconds = {"merge": 0.0, "eval": 0.0}
        self.merger = None

    def add(self, cid: str, method, subset) -> str:
        """Register a merge; one whose recipe another id already has (e.g. a TAS choice equal to the recipe's
        setting) is the same model: it is merged and scored once and its items are shared."""
        from wildmerge.search.live import subset_recipe

        spec = self.specs.setdefault(cid, {"recipe": subset_recipe(method, "base", list(subset), self.experts)})
        key = json.dumps(spec["recipe"], sort_keys=True)
        self.same.setdefault(cid, self.by_recipe.setdefault(key, cid))
        return cid

    def score(self, ids) -> None:
        """Full per-item scores of every id not scored yet (merged first), in one evaluation call."""
        from wildmerge.eval.evaluate import evaluate_models
        from wildmerge.eval.options import EvalOptions
        from wildmerge.eval.store import OK, ResultStore
        from wildmerge.run import RunFolder
        from wildmerge.search.live import LiveEvaluator
        from wildmerge.eval.suites import load_suite

        for i in ids:  # an id whose recipe was scored under another id shares its items
            if i not in self.items and self.same.get(i, i) in self.items:
                self.items[i] = self.items[self.same[i]]
        todo = [i for i in dict.fromkeys(self.same.get(i, i) for i in ids) if i not in self.items]
        if not todo:
            return
        if self.merger is None:  # base and experts loaded once; it merges and saves, the harness scores
            self.merger = LiveEvaluator(RunFolder(self.out), self.base, self.experts, self.specs,
                                        load_suite(self.suite))
        start = time.perf_counter()
        paths = {i: self.experts[i[2:]] if i.startswith("x_") else self.merger.model_path(i) for i in todo}
        self.seconds["merge"] += time.perf_counter() - start
        start = time.perf_counter()
        ev = evaluate_models(list(paths.values()), self.suite, self.out / "eval",
                             EvalOptions(limit=self.limit or None, record_items=True, workers=self.workers))
        self.seconds["eval"] += time.perf_counter() - start
        store = ResultStore(ev["store"])
        for i, path in paths.items():
            record = store.load(ev["index"][path])
            if record["status"] != OK:
                raise SystemExit(f"{i}: {record.get('error')}")
            self.items[i] = {t: np.asarray(v, dtype=np.float64) for t, v in sorted(record["items"].items())}
        for i in ids:
            self.items.setdefault(i, self.items.get(self.same.get(i, i)))
        write_json(self.cache, {k: {t: v.tolist() for t, v in d.items()} for k, d in self.items.items()})

    def full(self, cid: str) -> float:
        return suite_score(self.items[cid])


def _all(items: dict) -> dict:
    return {t: np.arange(len(v)) for t, v in items.items()}


def protocol(u: Universe, methods: dict, seed: int, per_size: int, sizes) -> dict:
    """Random subsets of every size (``per_size`` each), every method, every merge fully evaluated, in a random
    order: the best suite mean after each evaluation."""
    rng = np.random.default_rng(seed)
    names = list(u.experts)
    ids, members = [], {}
    for k in sizes:
        combos = list(itertools.combinations(names, k))
        for j in rng.choice(len(combos), min(per_size, len(combos)), replace=False):
            for name, method in methods.items():
                cid = "p_" + candidate_id({"method": name, "experts": list(combos[j])})
                ids.append(u.add(cid, method, combos[j]))
                members[cid] = list(combos[j])
    u.score(ids + ["base"])
    order = [ids[i] for i in rng.permutation(len(ids))]
    best = np.maximum.accumulate([u.full(i) for i in order])
    per_model = sum(len(v) for v in u.items["base"].values())
    spent = per_model * (1 + np.arange(1, len(order) + 1))  # the base, then one merge after another
    winner = order[int(np.argmax([u.full(i) for i in order]))]
    return {"merges": len(ids), "items_per_model": per_model,
            "curve": [[int(s), float(b)] for s, b in zip(spent, best)],
            "best": float(best[-1]), "winner": winner, "items_spent": int(spent[-1]), "members": members}


def guided(u: Universe, methods: dict, budget: float, seed: int, first: float, eta: float, geometry: dict,
           score=None, prefix: str = "g_") -> dict:
    """The search's own rule (``halving.halve``) replayed on the recorded items; ``score``: a fitted predictor's
    ranking instead of the proxy's."""
    names = geometry["experts"]
    ranked = ranked_subsets(names, geometry["cosine"], geometry["norms"], range(2, len(names) + 1), seed=0,
                            score=score)
    n = candidates_for(budget, first, eta, sum(len(v) for v in ranked.values()) * len(methods))
    chosen = interleave(ranked, list(methods), n)
    ids = [u.add(prefix + candidate_id(c), methods[c["method"]], c["experts"]) for c in chosen]
    u.score(ids + ["base"])
    sizes = {t: len(v) for t, v in u.items["base"].items()}

    def evaluate(cands, fraction):
        subset = screen_items(sizes, fraction, seed)
        out = {}
        for c in cands:
            items = {t: u.items[c][t][subset[t]] for t in sizes}
            out[c] = (items, sum(len(v) for v in items.values()))
        return out

    trace = []
    result = halve(ids, evaluate, first=first, eta=eta, seed=seed, log=trace.append)
    curve = [[r["items_spent"], max(d["score"] for d in r["decisions"].values()) if r["fraction"] >= 1 else None]
             for r in trace]
    return {"candidates": len(ids), "winner": result["winner"], "score": result["score"],
            "candidates_best": max(u.full(i) for i in ids),  # what a perfect selection among them would find
            "full_score_check": u.full(result["winner"]), "vs_base": result["vs_base"],
            "items_spent": result["items_spent"], "rungs": [[r["fraction"], len(r["decisions"])] for r in trace],
            "curve": curve}


def spread(items: dict, members: dict) -> dict:
    """How hard the protocol's best is to reach: how many of its merges score within 2 and 4.5 points (about the
    paired interval of two merges here) of its best, each method's mean, and the best single expert where scored."""
    scores = {c: suite_score(items[c]) for c in members}
    best = max(scores.values())
    by_method = {}
    for c, v in scores.items():
        by_method.setdefault(c[2:].split("__")[0], []).append(v)
    experts = {c[2:]: suite_score(v) for c, v in items.items() if c.startswith("x_")}
    top = max(experts, key=experts.get) if experts else None
    return {"within_2_points": sum(v >= best - 0.02 - 1e-9 for v in scores.values()),
            "within_4.5_points": sum(v >= best - 0.045 - 1e-9 for v in scores.values()),
            "method_mean": {m: float(np.mean(v)) for m, v in by_method.items()},
            "best_expert": [top, experts[top]] if top else None}


def predicted(u: Universe, geometry: dict, train: dict):
    """A ranking by the search's predictor (``search.predictor``) fitted on the protocol merges of other seeds."""
    from wildmerge.search.predictor import features, fit, scorer, target

    names = geometry["experts"]
    where = {n: i for i, n in enumerate(names)}
    cosine, norms = np.asarray(geometry["cosine"]), np.asarray(geometry["norms"])
    u.score(["x_" + n for n in names] + ["base"])
    experts = {n: u.full("x_" + n) for n in names}
    x = [features([where[e] for e in m], cosine, norms, len(names)) for m in train.values()]
    y = [target(u.full(cid), [experts[e] for e in m], u.full("base")) for cid, m in train.items()]
    model = fit(np.array(x), np.array(y))
    return scorer(model, cosine, norms, len(names)), {"rows": model.rows, "r2": model.r2,
                                                      "weights": model.weights.tolist()}


def proxy_spearman(u: Universe, geometry: dict, members: dict) -> dict:
    """How well the weight-only proxy ranks the protocol's merges: Spearman with their full suite mean, per size
    (the search ranks within a size) averaged over sizes, and over all merges."""
    from wildmerge.analysis.tas.check import spearman
    from wildmerge.search.candidates import proxy

    where = {n: i for i, n in enumerate(geometry["experts"])}
    cosine, norms = np.asarray(geometry["cosine"]), np.asarray(geometry["norms"])
    rows = [(len(m), proxy([where[e] for e in m], cosine, norms), u.full(c)) for c, m in members.items()]
    per_size = [spearman([r[1] for r in rows if r[0] == k], [r[2] for r in rows if r[0] == k])
                for k in sorted({r[0] for r in rows})]
    per_size = [v for v in per_size if v == v]
    return {"all": spearman([r[1] for r in rows], [r[2] for r in rows]),
            "within_size_mean": float(np.mean(per_size)) if per_size else float("nan")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/exp-guided")
    p.add_argument("--pool", default="demo")
    p.add_argument("--suite", default="demo")
    p.add_argument("--limit", type=int, help="items per task (default: every item)")
    p.add_argument("--seeds", default="0,1,2")
    p.add_argument("--methods", default=PROTOCOL_METHODS, help="the protocol's methods (also the guided search's)")
    p.add_argument("--sizes", help="subset sizes of the protocol (default 2..N)")
    p.add_argument("--per-size", type=int, default=15, help="random subsets per size and seed (the paper: 15)")
    p.add_argument("--fractions-of-protocol", default="0.2", help="guided budgets, as fractions of the protocol's")
    p.add_argument("--first", type=float, default=0.125)
    p.add_argument("--eta", type=float, default=2.0)
    p.add_argument("--tune-samples", type=int, default=32)
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--untuned", action="store_true",
                   help="also run the guided search with the recipes' own settings (what TAS tuning changes)")
    p.add_argument("--replot", action="store_true", help="redraw table and figure from --out's results.json")
    p.add_argument("--predictor", action="store_true",
                   help="also rank subsets by a predictor fitted on the other seeds' protocol merges")
    args = p.parse_args()
    if args.replot:
        results = json.loads((Path(args.out) / "results.json").read_text())
        cache = Path(args.out) / "items.json"
        if cache.is_file():  # recompute what is derived from the recorded items
            items = {k: {t: np.asarray(v) for t, v in d.items()} for k, d in json.loads(cache.read_text()).items()}
            for r in results["seeds"].values():  # a seed recorded in another --out keeps what it has
                if all(c in items for c in r["protocol"]["members"]):
                    r["protocol"]["spread"] = spread(items, r["protocol"]["members"])
            write_json(Path(args.out) / "results.json", results)
        write_text(Path(args.out) / "table.md", table(results))
        plot(results, Path(args.out) / "best_vs_cost")
        return
    import torch

    torch.set_num_threads(args.threads)
    from wildmerge.analysis.pool.geometry import task_vector_geometry
    from wildmerge.analysis.tas.tune import tune_methods
    from wildmerge.recipes.method import load_methods

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    u = Universe(out, args.pool, args.suite, args.limit, args.workers)
    defaults = load_methods(args.methods.split(","))
    start = time.perf_counter()
    tuned, choice = tune_methods(u.pool, defaults, out / "tune", samples=args.tune_samples)
    tas_seconds = time.perf_counter() - start
    geometry = task_vector_geometry(u.base, u.experts, progress=False)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(range(2, len(u.experts) + 1))
    results = {"args": vars(args), "tas_seconds": tas_seconds, "tuned": {k: v["hparams"] for k, v in choice.items()},
               "seeds": {}}
    seeds = [int(s) for s in args.seeds.split(",")]
    protocols = {seed: protocol(u, defaults, seed, args.per_size, sizes) for seed in seeds}
    all_members = {c: m for p in protocols.values() for c, m in p["members"].items()}
    results["proxy_spearman"] = proxy_spearman(u, geometry, all_members)
    for seed in seeds:
        prot = protocols[seed]
        runs = {}
        for frac in (float(f) for f in args.fractions_of_protocol.split(",")):
            budget = frac * prot["items_spent"] / prot["items_per_model"]
            runs[str(frac)] = guided(u, tuned, budget, seed, args.first, args.eta, geometry)
            if args.untuned:
                runs[f"{frac} untuned"] = guided(u, defaults, budget, seed, args.first, args.eta, geometry,
                                                 prefix="d_")
            if args.predictor and len(seeds) > 1:
                train = {c: m for other in seeds if other != seed for c, m in protocols[other]["members"].items()}
                score, fitted = predicted(u, geometry, train)
                runs[f"{frac} predictor"] = {**guided(u, tuned, budget, seed, args.first, args.eta, geometry,
                                                      score=score, prefix="f_"), "fit": fitted}
        for g in runs.values():  # is the gap to the protocol's best larger than the items' noise?
            gap = paired_interval(u.items[g["winner"]], u.items[prot["winner"]], _all(u.items["base"]))
            g["vs_protocol_best"] = [100 * x for x in gap]
        prot["spread"] = spread(u.items, prot["members"])
        results["seeds"][seed] = {"protocol": prot, "guided": runs}
        print(json.dumps({"seed": seed, "protocol_best": prot["best"], "protocol_items": prot["items_spent"],
                          **{f"guided@{k}": [g["score"], g["items_spent"]] for k, g in runs.items()}}))
        write_json(out / "results.json", {**results, "seconds": {**u.seconds, "wall": time.perf_counter() - started}})
    results["seconds"] = {**u.seconds, "wall": time.perf_counter() - started}
    write_json(out / "results.json", results)
    write_text(out / "table.md", table(results))
    plot(results, out / "best_vs_cost")
    print(table(results))


def table(results: dict) -> str:
    lines = ["| seed | protocol merges | protocol best | protocol items | guided budget | guided candidates | "
             "guided winner (full eval) | vs base, points [95 % CI] | guided items | items / protocol's | gap to "
             "protocol best, points [paired 95 % CI] | best of its candidates |", "|" + "---|" * 12]
    for seed, r in results["seeds"].items():
        prot = r["protocol"]
        for frac, g in r["guided"].items():
            d, lo, hi = g["vs_base"]
            lines.append(f"| {seed} | {prot['merges']} | {prot['best']:.4f} | {prot['items_spent']} | {frac} | "
                         f"{g['candidates']} | {g['score']:.4f} ({g['winner']}) | {d:+.2f} [{lo:+.2f}, {hi:+.2f}] | "
                         f"{g['items_spent']} | {g['items_spent'] / prot['items_spent']:.3f} | "
                         f"{_ci(g.get('vs_protocol_best'))} | {g['candidates_best']:.4f} |")
    spreads = {seed: r["protocol"]["spread"] for seed, r in results["seeds"].items() if "spread" in r["protocol"]}
    if spreads:
        methods = list(next(iter(spreads.values()))["method_mean"])
        lines += ["", "| seed | merges within 2 points of the protocol's best | within 4.5 points | "
                  + " | ".join(f"{m} mean" for m in methods) + " | best single expert |",
                  "|" + "---|" * (4 + len(methods))]
        for seed, sp in spreads.items():
            expert = f"{sp['best_expert'][0]} {sp['best_expert'][1]:.4f}" if sp.get("best_expert") else "not scored"
            lines.append(f"| {seed} | {sp['within_2_points']} | {sp['within_4.5_points']} | "
                         + " | ".join(f"{sp['method_mean'][m]:.4f}" for m in methods) + f" | {expert} |")
    return "\n".join(lines) + "\n"


def _ci(v) -> str:
    return f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]" if v else ""


def plot(results: dict, stem: Path) -> None:
    """Colour = seed (protocol: its best-so-far curve); marker = guided variant, one per budget."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8))
    markers = {"": "*", "untuned": "s", "predictor": "P"}
    labelled = set()
    for i, (seed, r) in enumerate(results["seeds"].items()):
        prot = r["protocol"]
        per = prot["items_per_model"]
        xs, ys = zip(*prot["curve"])
        ax.step(np.array(xs) / per, ys, where="post", color=f"C{i}", alpha=0.8, label=f"protocol, seed {seed}")
        for key, g in r["guided"].items():
            frac, _, variant = key.partition(" ")
            label = f"guided, {variant}" if variant else "guided (TAS-tuned methods, proxy)"
            ax.scatter([g["items_spent"] / per], [g["score"]], color=f"C{i}", s=90, zorder=3, alpha=0.85,
                       marker=markers.get(variant, "o"), edgecolor="black",
                       label=label if label not in labelled else None)
            labelled.add(label)
    ax.set_xlabel("item evaluations spent (in full evaluations of the suite)")
    ax.set_ylabel("best suite mean found (full evaluation)")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("guided search (budgets 1/10 and 1/5 of the protocol's) vs the protocol")
    fig.tight_layout()
    save_figure(fig, stem)


if __name__ == "__main__":
    main()
