#!/usr/bin/env python
"""The search (``wildmerge.search.bandit``) against the protocol's order and random search, replayed on recorded items.

Recording (paid once, resumable): the protocol's candidates, the paper's methods (or any: RegMean and CoM merge
through mergekit with each expert's data, as in a live search) at their recipes' settings on
``--per-size`` random subsets of every size (drawn with ``--record-seed``), every expert alone and the base, each
merged once and scored once on every item with per-item scores kept (``<out>/items.json``, written after every
batch of ``--batch`` models: a killed recording resumes where it stopped).

Replay (per seed, offline, seconds): four ways to spend evaluations, all on these recorded items -
- **protocol order**: the recorded merges in a random order (the seed's), each scored on every item (best so far);
- **random search**: ``bandit.search`` with ``rule="random"``: arms drawn uniformly, the same successive halving;
- **the search**: ``bandit.search`` with its Thompson rule, exactly what a live ``wildmerge search`` decides (the
  same function; here ``evaluate`` looks the recorded items up instead of merging and running lm-eval), restricted
  to the recorded subsets (``bandit.Space`` with fixed lists);
- **the search, experts not screened**: the same with ``screen=False``: what screening the experts adds.
Budgets are fractions of the protocol's item evaluations. Each search is reported by its winner's full evaluation.
The testbed's resolution is printed: the 95 % paired interval of the difference between the protocol's two best
merges, and the median half-width over pairs of its merges.

    python benchmarks/experiment_guided_search.py --suite demo_large --out runs/exp-guided-large \\
        --methods ta,ties,tsv_m --sizes 2,3,5,8,12 --per-size 1 --seeds 0,1,2 --fractions-of-protocol 0.2
    python benchmarks/experiment_guided_search.py --out runs/exp-guided-large --replot   # table and figure again
    python benchmarks/experiment_guided_search.py --out runs/replot --replot \
        --results benchmarks/results/guided_search_demo_large.json   # from the committed results

Writes ``results.json``, ``table.md`` and ``best_vs_cost.png`` under ``--out``.
"""

import argparse
import itertools
import json
import math
import time
from pathlib import Path

import numpy as np

import search_recording
from wildmerge.atomic import write_json, write_text
from wildmerge.eval.screening.stats import paired_interval, screen_items, suite_score
from wildmerge.search.bandit import EXPERT, Space, search
from wildmerge.search.candidates import candidate_id

PROTOCOL_METHODS = "ta,ties,model_stock,tsv_m,iso_c,ta_sb,ties_sb"  # the paper's seven
VARIANTS = ("random", "thompson", "unscreened")  # random search, the search, the search without screening
NAMES = {"random": "random search", "thompson": "the search (Thompson)",
         "unscreened": "the search, experts not screened"}  # the last: what the screening adds, measured
SUMMARY_HEAD = ("| budget | search | mean winner (full eval) | mean vs protocol best, points | "
                "mean items / protocol's | seeds within 1 point at <= 1/5 of the items | seeds on target |")
WIDE = 1.5  # points: a testbed whose paired 95 % half-width is wider cannot tell 1 point (the search's target)


def within_one_point(gap: float, share: float) -> bool:
    """The winner at most 1 point below the protocol's best, at most 1/5 of its items."""
    return gap >= -1.0 and share <= 0.2


def on_target(vs_best, share: float, half_width: float) -> bool:
    """The search's target for one seed: at most 1/5 of the protocol's items, and the winner at most 1 point below the
    protocol's best; on a testbed whose paired 95 % half-width is over ``WIDE`` points, within that interval instead
    (its paired interval to the best reaches 0). ``vs_best``: [difference, low, high] in points."""
    return within_one_point(vs_best[0], share) or (share <= 0.2 and half_width > WIDE and vs_best[2] >= 0)


class Recording:
    """Every candidate merged once and scored once on every item; per-item scores cached in ``items.json``."""

    def __init__(self, out: Path, pool_name: str, suite: str, limit, workers: int):
        from wildmerge.pools import load_pool, resolve

        self.out, self.suite, self.limit, self.workers = out, suite, limit, workers
        self.pool = load_pool(pool_name)
        resolved = resolve(self.pool)  # as the search: LoRA adapters folded into the base
        self.base, self.experts, self.resolved = resolved.base_path, resolved.experts, resolved
        self.specs, self.items, self.methods = {}, {}, {}
        self.cache = out / "items.json"
        if self.cache.is_file():
            self.items = {k: {t: np.asarray(v, dtype=np.float64) for t, v in d.items()}
                          for k, d in json.loads(self.cache.read_text()).items()}
        self.seconds = {"merge": 0.0, "eval": 0.0}
        self.merger = None

    def add(self, method_name: str, method, subset) -> str:
        from wildmerge.search.live import subset_recipe

        cid = candidate_id({"method": method_name, "experts": list(subset)})
        recipe = None if method is None else subset_recipe(method, "base", list(subset), self.experts)
        self.specs.setdefault(cid, {"recipe": recipe, "experts": list(subset), "method": method_name})
        if method is not None:
            self.methods[method_name] = method  # RegMean / CoM merge through mergekit with the experts' data
        return cid

    def record(self, ids, batch: int) -> None:
        """Score every id not recorded yet, ``batch`` models per evaluation call, saving after each."""
        todo = [i for i in ids if i not in self.items]
        for start in range(0, len(todo), batch):
            self._score(todo[start:start + batch])
            print(f"recorded {len(self.items)} models ({len(todo) - start - batch if start + batch < len(todo) else 0}"
                  f" to go)", flush=True)

    def _score(self, ids) -> None:
        from wildmerge.eval.evaluate import evaluate_models
        from wildmerge.eval.options import EvalOptions
        from wildmerge.eval.store import OK, ResultStore
        from wildmerge.eval.suites import load_suite
        from wildmerge.run import RunFolder
        from wildmerge.search.live import LiveEvaluator

        if self.merger is None:  # base and experts loaded once; it merges and saves, the harness scores
            self.merger = LiveEvaluator(RunFolder(self.out), self.base, self.experts, self.specs,
                                        load_suite(self.suite), pool_models=self.resolved.pool_models(),
                                        methods=self.methods)
        start = time.perf_counter()
        paths = {i: self.base if i == "base" else self.merger.model_path(i) for i in ids}
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
        write_json(self.cache, {k: {t: v.tolist() for t, v in d.items()} for k, d in self.items.items()})


def recorded_set(rec: Recording, methods: dict, sizes, per_size: int, seed: int) -> dict:
    """{arm: [subsets]} of the protocol's merges (random subsets, the same for every method) and the experts."""
    names = list(rec.experts)
    arms = {(EXPERT, 1): [(n,) for n in names]}
    for k in sizes:  # one permutation per size: a smaller --per-size or --sizes records a subset of a larger one
        combos = list(itertools.combinations(names, k))
        picked = [combos[j] for j in np.random.default_rng([seed, k]).permutation(len(combos))[:per_size]]
        for m in methods:
            arms[(m, k)] = picked
    for s in arms[(EXPERT, 1)]:
        rec.add(EXPERT, None, s)
    for j in range(per_size):  # recorded in this order: the first subset of every arm, then the second, ...
        for (m, k), subsets in arms.items():
            if m != EXPERT and j < len(subsets):
                rec.add(m, methods[m], subsets[j])
    return arms


def recorded_arms(arms: dict, items: dict) -> dict:
    """The arms cut to the subsets whose candidate was scored already (arms with none left out)."""
    out = {}
    for (m, k), subsets in arms.items():
        kept = [s for s in subsets if candidate_id({"method": m, "experts": list(s)}) in items]
        if kept:
            out[(m, k)] = kept
    return out


def recorded_summary(arms: dict) -> dict:
    """What the replay drew from: per method, the subsets recorded at each size."""
    out = {}
    for (m, k), subsets in arms.items():
        out.setdefault(m, {})[str(k)] = len(subsets)
    return out


def lookup(items: dict, seed: int):
    """``evaluate`` for ``bandit.search`` on recorded items: the fraction's seeded items of each task."""
    sizes = {t: len(v) for t, v in items["base"].items()}

    def evaluate(ids, fraction):
        subset = screen_items(sizes, fraction, seed)
        out = {}
        for c in ids:
            got = {t: items[c][t][subset[t]] for t in sizes}
            out[c] = (got, sum(len(v) for v in got.values()))
        return out
    return evaluate


def protocol(items: dict, merges: list, seed: int) -> dict:
    order = [merges[i] for i in np.random.default_rng(seed).permutation(len(merges))]
    scores = [suite_score(items[c]) for c in order]
    per_model = sum(len(v) for v in items["base"].values())
    spent = per_model * (1 + np.arange(1, len(order) + 1))  # the base, then one merge after another
    best = np.maximum.accumulate(scores)
    return {"merges": len(order), "items_per_model": per_model, "items_spent": int(spent[-1]),
            "curve": [[int(s), float(b)] for s, b in zip(spent, best)], "best": float(best[-1]),
            "winner": order[int(np.argmax(scores))]}


def replay(items: dict, arms: dict, budget: float, seed: int, rule: str, first: float, eta: float,
           bracket=None) -> dict:
    space = Space(sorted({e for v in arms.values() for s in v for e in s}), {a: list(v) for a, v in arms.items()})
    r = search(space, lookup(items, seed), budget, lambda arm, s: candidate_id({"method": arm[0], "experts": list(s)}),
               first=first, eta=eta, seed=seed, rule="thompson" if rule == "unscreened" else rule, bracket=bracket,
               screen=False if rule == "unscreened" else None)
    return {"winner": r["winner"], "score": r["score"], "full_score_check": suite_score(items[r["winner"]]),
            "vs_base": r["vs_base"], "items_spent": r["items_spent"], "candidates": len(r["candidates"]),
            "candidates_best": max(suite_score(items[c]) for c in r["candidates"]),
            "methods_drawn": {m: sum(c["method"] == m for c in r["candidates"].values())
                              for m in dict.fromkeys(a[0] for a in arms)},
            "curve": r["curve"]}


def planned_merges(methods, sizes, per_size: int, experts: int) -> int:
    """How many merges ``recorded_set`` records: ``per_size`` subsets of each size (all of them where a size has
    fewer, none above the pool's ``experts``), with every method."""
    return len(methods) * sum(min(per_size, math.comb(experts, k)) for k in sizes)


def enough_merges(merges: int, where: str) -> None:
    """The testbed's resolution compares the protocol's two best merges: fewer than two is one line, not a
    traceback."""
    if merges < 2:
        raise SystemExit(f"experiment_guided_search: {where} {merges} merge(s), and the testbed's resolution (the "
                         f"paired interval of the protocol's two best merges) needs at least two: give more --methods, "
                         f"more --sizes or a larger --per-size")


def checked_sizes(args) -> list:
    """The subset sizes to record (``--sizes``, default 2..N), once the arguments are known to record at least two
    merges: the pool file is read, no model."""
    from wildmerge.pools import load_pool

    experts = len(load_pool(args.pool).experts)
    sizes = [int(s) for s in args.sizes.split(",")] if args.sizes else list(range(2, experts + 1))
    if not args.recorded_only:  # a replay counts what the recording holds (``resolution``)
        enough_merges(planned_merges(args.methods.split(","), sizes, args.per_size, experts), "these arguments record")
    return sizes


def resolution(items: dict, merges: list, seed: int = 0, pairs: int = 60) -> dict:
    """How far apart two merges must be to tell: the paired 95 % interval of the protocol's two best merges, and the
    median half-width over random pairs of its merges."""
    enough_merges(len(merges), "the recording holds")
    every = {t: np.arange(len(v)) for t, v in items["base"].items()}
    ranked = sorted(merges, key=lambda c: -suite_score(items[c]))
    top = [100 * x for x in paired_interval(items[ranked[0]], items[ranked[1]], every)]
    rng = np.random.default_rng(seed)
    widths = []
    for _ in range(min(pairs, len(merges) * (len(merges) - 1) // 2)):
        a, b = rng.choice(len(merges), 2, replace=False)
        _, lo, hi = paired_interval(items[merges[a]], items[merges[b]], every, iters=500)
        widths.append(50 * (hi - lo))
    return {"best_two": [ranked[0], ranked[1]], "best_two_points": top, "median_half_width_points":
            float(np.median(widths)), "items_per_task": {t: len(v) for t, v in items["base"].items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="runs/exp-guided-large")
    p.add_argument("--pool", default="demo")
    p.add_argument("--suite", default="demo_large")
    p.add_argument("--limit", type=int, help="items per task (default: every item)")
    p.add_argument("--seeds", default="0,1,2", help="the searches' (and the protocol order's) seeds")
    p.add_argument("--record-seed", type=int, default=0, help="draws the recorded subsets, once for every seed")
    p.add_argument("--methods", default=PROTOCOL_METHODS, help="the protocol's methods (also the searches')")
    p.add_argument("--sizes", help="subset sizes (default 2..N)")
    p.add_argument("--per-size", type=int, default=3, help="random subsets per size (the paper: 15)")
    p.add_argument("--fractions-of-protocol", default="0.2", help="the searches' budgets, fractions of the protocol's")
    p.add_argument("--first", type=float, default=0.125)
    p.add_argument("--eta", type=float, default=2.0)
    p.add_argument("--bracket", type=int, help="candidates per bracket (default: the search's, eta ** (rungs - 1))")
    p.add_argument("--batch", type=int, default=4, help="models per evaluation call while recording")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--summary-seeds", type=int, default=0,
                   help="also average both searches over this many more seeds (offline, cheap) in the summary")
    p.add_argument("--replot", action="store_true", help="redraw table and figure from --out's results.json")
    p.add_argument("--results", help="with --replot: the results JSON to draw (default --out's results.json)")
    p.add_argument("--no-experts", action="store_true",
                   help="the searches draw merges only, as `wildmerge search --no-experts` (the recording keeps them)")
    p.add_argument("--recorded-only", action="store_true",
                   help="record nothing: replay on the candidates already in --out's items.json (a recording that "
                        "is still running, or was stopped)")
    p.add_argument("--save-recording", metavar="FILE.json.gz",
                   help="also write the recording as one file (items, arms, the family's record), to replay anywhere")
    p.add_argument("--record-only", action="store_true",
                   help="record (and save) but replay nothing: a held-out testbed's recording, made before the "
                        "search's rules are frozen")
    p.add_argument("--from-recording", metavar="FILE.json.gz",
                   help="replay from a recording file (benchmarks/recordings/): no family, no model, no recording")
    args = p.parse_args()
    out = Path(args.out)
    if args.replot:
        results = json.loads(Path(args.results or out / "results.json").read_text())
        out.mkdir(parents=True, exist_ok=True)
        write_text(out / "table.md", table(results))
        plot(results, out / "best_vs_cost")
        print(table(results))
        return
    started = time.perf_counter()
    if args.from_recording:  # offline: no family, no model
        loaded, seconds = search_recording.load(args.from_recording), {}
        out.mkdir(parents=True, exist_ok=True)
        items, arms, merges, expert_ids = loaded["items"], loaded["arms"], loaded["merges"], loaded["experts"]
    else:
        items, arms, merges, expert_ids, seconds = record(args, out)
        if args.record_only:
            print(f"recorded {len(merges)} merges, {len(expert_ids)} experts and the base; nothing replayed")
            return
    if args.no_experts:
        arms = {a: v for a, v in arms.items() if a[0] != EXPERT}
    experts = {cid: suite_score(items[cid]) for cid in expert_ids}
    results = {"args": vars(args), "resolution": resolution(items, merges), "seeds": {},
               "best_expert": [max(experts, key=experts.get), max(experts.values())],
               "arms": {f"{a[0]}@{a[1]}": [list(s) for s in v] for a, v in arms.items()},
               "recorded": recorded_summary(arms)}
    print(json.dumps(results["resolution"]))
    for seed in (int(s) for s in args.seeds.split(",")):
        prot = protocol(items, merges, seed)
        runs = {}
        for frac in (float(f) for f in args.fractions_of_protocol.split(",")):
            budget = frac * prot["items_spent"] / prot["items_per_model"]
            for rule in VARIANTS[:2] if args.no_experts else VARIANTS:  # nothing to screen
                g = replay(items, arms, budget, seed, rule, args.first, args.eta, args.bracket)
                every = {t: np.arange(len(v)) for t, v in items["base"].items()}
                g["vs_protocol_best"] = [100 * x for x in paired_interval(items[g["winner"]], items[prot["winner"]],
                                                                          every)]
                runs[f"{frac} {rule}"] = g
        results["seeds"][str(seed)] = {"protocol": prot, "searches": runs}
    if args.summary_seeds:  # the same budgets on more seeds: the searches' own luck averaged out
        results["summary_seeds"] = summary(items, merges, arms, args, range(100, 100 + args.summary_seeds),
                                           results["resolution"]["median_half_width_points"])
    results["seconds"] = {**seconds, "wall": time.perf_counter() - started}
    write_json(out / "results.json", results)
    write_text(out / "table.md", table(results))
    plot(results, out / "best_vs_cost")
    print(table(results))


def record(args, out: Path):
    """Record what is missing (or, with ``--recorded-only``, take what is there); with ``--save-recording``, write it
    as one file. Returns the items, the arms, the merges and experts in recording order, and the seconds spent."""
    sizes = checked_sizes(args)  # before any model is read or recorded
    import torch

    from wildmerge.analysis.report.environment import family_record, family_root
    from wildmerge.recipes.method import load_methods
    from wildmerge.versions import record as versions_record

    torch.set_num_threads(args.threads)
    methods = load_methods(args.methods.split(","))  # an unknown method said before the pool is resolved
    out.mkdir(parents=True, exist_ok=True)
    rec = Recording(out, args.pool, args.suite, args.limit, args.workers)
    arms = recorded_set(rec, methods, sizes, args.per_size, args.record_seed)
    if args.recorded_only:
        arms = recorded_arms(arms, rec.items)
        rec.specs = {cid: s for cid, s in rec.specs.items() if cid in rec.items}
    else:
        rec.record(["base"] + [cid for cid, s in rec.specs.items() if s["recipe"] is None]
                   + [cid for cid, s in rec.specs.items() if s["recipe"] is not None], args.batch)
    merges = [cid for cid, s in rec.specs.items() if s["recipe"] is not None]
    experts = [cid for cid, s in rec.specs.items() if s["recipe"] is None]
    if args.save_recording:
        root = family_root(rec.base)
        meta = {"pool": args.pool, "suite": args.suite, "limit": args.limit, "methods": args.methods,
                "sizes": args.sizes, "per_size": args.per_size, "record_seed": args.record_seed,
                "family": family_record(root, ["base", *rec.experts]) if root else None,
                "versions": versions_record()}
        search_recording.save(args.save_recording, {c: rec.items[c] for c in ["base", *experts, *merges]}, arms,
                              merges, experts, meta)
        print(f"wrote {args.save_recording}: {len(merges)} merges, {len(experts)} experts and the base")
    return rec.items, arms, merges, experts, rec.seconds


def summary(items: dict, merges: list, arms: dict, args, seeds, half_width: float) -> dict:
    """Per budget and rule, over ``seeds``: mean winner score, mean gap to the protocol's best, seeds within 1 point
    at <= 1/5 of the protocol's items, and seeds on the search's target (``on_target``)."""
    every = {t: np.arange(len(v)) for t, v in items["base"].items()}
    out = {}
    for seed in seeds:
        prot = protocol(items, merges, seed)
        for frac in (float(f) for f in args.fractions_of_protocol.split(",")):
            budget = frac * prot["items_spent"] / prot["items_per_model"]
            for rule in VARIANTS[:2] if args.no_experts else VARIANTS:  # nothing to screen
                g = replay(items, arms, budget, seed, rule, args.first, args.eta, args.bracket)
                gap, share = 100 * (g["score"] - prot["best"]), g["items_spent"] / prot["items_spent"]
                vs_best = [100 * x for x in paired_interval(items[g["winner"]], items[prot["winner"]], every,
                                                            iters=500)]
                out.setdefault(f"{frac} {rule}", []).append([g["score"], gap, share, within_one_point(gap, share),
                                                             g["methods_drawn"], g["winner"].split("__")[0],
                                                             on_target(vs_best, share, half_width)])
    return {k: {"seeds": len(v), "mean_score": float(np.mean([x[0] for x in v])),
                "mean_gap_points": float(np.mean([x[1] for x in v])), "mean_share": float(np.mean([x[2] for x in v])),
                "reached": int(sum(x[3] for x in v)), "on_target": int(sum(x[6] for x in v)),
                "methods_drawn": {m: sum(x[4][m] for x in v) for m in v[0][4]},
                "winners": {m: sum(x[5] == m for x in v) for m in v[0][4] if any(x[5] == m for x in v)}}
            for k, v in out.items()}


def _ci(v) -> str:
    return f"{v[0]:+.2f} [{v[1]:+.2f}, {v[2]:+.2f}]"


def recorded_line(recorded: dict) -> str:
    """One sentence: what was recorded, per method and size (the experts alone counted once)."""
    parts = []
    for m, per in recorded.items():
        if m == EXPERT:
            parts.append(f"{sum(per.values())} experts alone")
        else:
            parts.append(f"{m} " + ", ".join(f"{k}:{n}" for k, n in per.items()))
    return "Recorded (method size:subsets): " + "; ".join(parts) + "; and the base."


def table(results: dict) -> str:
    res = results["resolution"]
    lines = [f"Testbed: {sum(res['items_per_task'].values())} items per model "
             f"({', '.join(f'{t} {n}' for t, n in res['items_per_task'].items())}); paired 95 % interval of the "
             f"difference of the protocol's two best merges {_ci(res['best_two_points'])} points; median half-width "
             f"over pairs of its merges +-{res['median_half_width_points']:.2f} points. Best expert alone: "
             f"{results['best_expert'][0]} {results['best_expert'][1]:.4f}.", "",
             *([recorded_line(results["recorded"]), ""] if "recorded" in results else []),
             "| seed | protocol merges | protocol best | protocol items | budget | search | candidates | winner (full "
             "eval) | vs base, points [95 % CI] | items | items / protocol's | vs protocol best, points "
             "[paired 95 % CI] | best of its candidates |", "|" + "---|" * 13]
    means = {}
    for seed, r in results["seeds"].items():
        prot = r["protocol"]
        for key, g in r["searches"].items():
            frac, rule = key.split(" ")
            name = NAMES[rule]
            share = g["items_spent"] / prot["items_spent"]
            lines.append(f"| {seed} | {prot['merges']} | {prot['best']:.4f} | {prot['items_spent']} | {frac} | "
                         f"{name} | {g['candidates']} | {g['score']:.4f} ({g['winner']}) | {_ci(g['vs_base'])} | "
                         f"{g['items_spent']} | {share:.3f} | {_ci(g['vs_protocol_best'])} | "
                         f"{g['candidates_best']:.4f} |")
            means.setdefault((frac, name), []).append((g["score"], g["vs_protocol_best"][0], share,
                                                       within_one_point(g["vs_protocol_best"][0], share),
                                                       on_target(g["vs_protocol_best"], share,
                                                                 res["median_half_width_points"])))
    lines += ["", SUMMARY_HEAD, "|" + "---|" * 7]
    for (frac, name), v in means.items():
        a = np.array([x[:3] for x in v])
        lines.append(f"| {frac} | {name} | {a[:, 0].mean():.4f} | {a[:, 1].mean():+.2f} | {a[:, 2].mean():.3f} | "
                     f"{sum(x[3] for x in v)} of {len(v)} | {sum(x[4] for x in v)} of {len(v)} |")
    more = results.get("summary_seeds")
    if more:
        wins = "winners" in next(iter(more.values()))
        lines += ["", f"Over {next(iter(more.values()))['seeds']} more seeds (100, 101, ...; replay only):", "",
                  SUMMARY_HEAD + " candidates drawn, per method |" + (" winners, per method |" if wins else ""),
                  "|" + "---|" * (9 if wins else 8)]
        for key, v in more.items():
            frac, rule = key.split(" ")
            name = NAMES[rule]
            drawn = ", ".join(f"{m} {n}" for m, n in v.get("methods_drawn", {}).items())
            won = ", ".join(f"{m} {n}" for m, n in v.get("winners", {}).items())
            target = f"{v['on_target']} of {v['seeds']}" if "on_target" in v else "-"  # older results: not kept
            lines.append(f"| {frac} | {name} | {v['mean_score']:.4f} | {v['mean_gap_points']:+.2f} | "
                         f"{v['mean_share']:.3f} | {v['reached']} of {v['seeds']} | {target} | {drawn} |"
                         + (f" {won} |" if wins else ""))
    return "\n".join(lines) + "\n"


def plot(results: dict, stem: Path) -> None:
    """Best full suite mean found against item evaluations: protocol order (steps), random search and the search
    at the largest budget (their best so far after each bracket); colour = seed."""
    from wildmerge.analysis.plotting import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots(figsize=(9, 4.8))
    styles = {"random": ("--", "o", NAMES["random"]), "thompson": ("-", "*", NAMES["thompson"])}
    for i, (seed, r) in enumerate(results["seeds"].items()):
        prot = r["protocol"]
        per = prot["items_per_model"]
        xs, ys = zip(*prot["curve"])
        ax.step(np.array(xs) / per, ys, where="post", color=f"C{i}", alpha=0.5, lw=1,
                label=f"protocol order, seed {seed}")
        top = max(float(k.split(" ")[0]) for k in r["searches"])  # the largest budget (its curve covers the others)
        for key, g in r["searches"].items():
            if float(key.split(" ")[0]) != top:
                continue
            if key.split(" ")[1] not in styles:
                continue  # the plot keeps to the two the page compares
            line, marker, label = styles[key.split(" ")[1]]
            xs, ys = zip(*g["curve"])
            ax.plot(np.array(xs) / per, ys, line, marker=marker, color=f"C{i}", ms=8 if marker == "*" else 5,
                    label=f"{label}, seed {seed}")
    prot = next(iter(results["seeds"].values()))["protocol"]
    ax.axvline(0.2 * prot["items_spent"] / prot["items_per_model"], color="gray", ls=":", lw=1)
    ax.set_xlabel("item evaluations spent (in full evaluations of the suite; dotted: 1/5 of the protocol's)")
    ax.set_ylabel("best suite mean found (full evaluation)")
    ax.set_xscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5))
    ax.set_title("the search vs random search vs the protocol's order, on recorded items")
    fig.tight_layout()
    save_figure(fig, stem)


if __name__ == "__main__":
    main()
