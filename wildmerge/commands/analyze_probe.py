"""``wildmerge analyze probe RUN [RUN ...] --suite S``: the fresh-head probe of the fresh-head probe paper on every model
of a run; several runs (model seeds) are also aggregated, and ``--partitions`` adds the geometry boundary."""

import argparse
import dataclasses

from wildmerge.analysis.probe.partitions import DEFAULT_TASKS
from wildmerge.commands.options import comma_ints, device, int_at_least, positive_float, positive_int
from wildmerge.run import DEFAULT_OUT

HELP = "fresh-head probe: native vs a new linear head on frozen features (is the knowledge still there?)"
DESCRIPTION = ("For every model of a run (or --model), on the suite's tasks with train / validation / test splits and "
               "a fixed label set: native accuracy N, fresh-head accuracy FH (AdamW 1e-3, wd 1e-4, batch 64, 10 "
               "epochs, best validation epoch), FH - N and, with --reference J, R = (FH - N) / (J - N) and U = J - FH "
               "(the fresh-head probe paper, 'A Fresh-Head Probe for Parameter-Space Model Merging'). --composition adds the "
               "ensemble and the centroid-routed composer of every subset as lm-eval-scored baselines. Several runs "
               "(subset draws: runs sampled with different --seed) add mean ± SD over them (Tables 5-6 over draws; "
               "over model seeds, families of their own seeds: analyze probe-families); "
               "--partitions ward,random:100 adds the composer-minus-ensemble table over class partitions "
               "(Tables 2 and 7, Fig. 2).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("run", nargs="*", help="run folder(s), one per subset draw (omit with --model)")
    p.add_argument("--suite", required=True, help="suite name or YAML (demo family: demo_probe)")
    p.add_argument("--model", action="append", default=[], help="probe this model instead of a run (repeatable)")
    p.add_argument("--models", help="comma-separated model ids of the run to probe (default: all)")
    p.add_argument("--base", help="with --model: the base a LoRA adapter among them is folded into (default: the base "
                                  "its adapter_config.json names, where that resolves locally)")
    p.add_argument("--reference", help="joint reference model J for R and U (demo family: demo:joint)")
    p.add_argument("--seeds", type=comma_ints, default=[0, 1, 2], help="fresh-head seeds (default 0,1,2)")
    p.add_argument("--device", default="cpu", type=device, help="device for the frozen models (cpu, cuda, cuda:1)")
    p.add_argument("--batch-size", type=positive_int, default=32)
    p.add_argument("--threads", type=positive_int,
                   default=1, help="CPU threads for torch (default 1: on a shared CPU more "
                                                          "threads mostly spin)")
    p.add_argument("--max-memory-gib", type=positive_float,
                   help="memory the model and its features may use (default: the "
                                                        "device's free memory)")
    p.add_argument("--composition", action="store_true",
                   help="add an ensemble and a composer of every subset (n >= 2) to the run, scored by lm-eval")
    p.add_argument("--join-leaderboard", action="store_true",
                   help="also write RUN/report/leaderboard_probe.csv: the suite's scores with N, FH and R per task")
    p.add_argument("--partitions", help="class partitions for the composer-minus-ensemble table (Tables 2 and 7, "
                                        "Fig. 2): ward and / or random:SEED, comma-separated (paper: "
                                        "ward,random:100,random:200)")
    p.add_argument("--partition-tasks", type=int_at_least(2), default=DEFAULT_TASKS,
                   help=f"class sets T per partition (default {DEFAULT_TASKS}, the paper's)")
    p.add_argument("--router", help="model whose features build the Ward partition and route the composer (default: "
                                    "the run's base; with --model, the first --model)")
    p.add_argument("--out", help="output folder (default: RUN/probe/<suite>/ or "
                                 f"./{DEFAULT_OUT['probe'].format(suite='<suite>')}/; with several runs, where the "
                                 "tables over model seeds go)")


def run(args) -> int:
    from wildmerge.analysis.probe.job import ProbeJob, probe_job

    return probe_job(ProbeJob(**{f.name: getattr(args, f.name) for f in dataclasses.fields(ProbeJob)}))
