"""``wildmerge demo build|report``: build (or reuse) the synthetic family; score it with lm-eval.

The report is an ordinary run of the protocol (``wildmerge.protocol.family_report``): a run folder
(``<family>-report/``) whose plan holds the base, every expert and one merge of all experts, evaluated by the
harness on the demo suite and read back through the leaderboard's score table.
"""

import argparse


from wildmerge.commands.options import nonnegative_int, positive_int


def configure(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="demo_command", metavar="ACTION", required=True)
    for name, help_text in (("build", "build the family, or reuse the cached one if it is intact"),
                            ("report", "score the base, every expert and their average on the demo tasks")):
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--out", metavar="DIR", help="cache folder (default: $WILDMERGE_DEMO_CACHE or "
                                                    "~/.cache/wildmerge/demo)")
        p.add_argument("--seed", type=nonnegative_int, default=0, help="build seed (default 0)")
        p.add_argument("--quick", action="store_true", help="the reduced family: tiny model, 3 experts, seconds")
        p.add_argument("--threads", type=positive_int, default=1, help="torch threads for training (default 1: "
                                                              "deterministic and fastest for this size)")
        p.add_argument("--partition", metavar="random:SEED:T",
                       help="the partition family: the five skills split at random by SEED into T tasks, one expert "
                            "each, with its own joint reference (demo family only; WILDMERGE_DEMO_PARTITION for "
                            "demo: references)")
        if name == "build":
            p.add_argument("--rebuild", action="store_true", help="rebuild even if the cache is intact")
            p.add_argument("--family", choices=("demo", "smollm2"), default="demo",
                           help="demo (default): the synthetic family; smollm2: SmolLM2-135M-Instruct and its "
                                "experts fine-tuned on CPU (cache $WILDMERGE_SMOLLM2_CACHE; --quick: 2 experts)")
        else:
            p.add_argument("--report-dir", metavar="DIR", help="where to write report.json/csv "
                                                                "(default: next to the family, <key>-report/)")
            p.add_argument("--limit", type=positive_int, help="score only the first N items of each task")


def run(args) -> int:
    from wildmerge.families.demo.family import ensure_family

    extra = {"partition": args.partition} if args.partition else {}
    if getattr(args, "family", "demo") == "smollm2":
        from wildmerge.errors import ConfigError
        from wildmerge.families.smollm2.family import ensure_family

        if args.partition:
            raise ConfigError("--partition makes a partition family of the demo family only; leave out --family "
                              "smollm2")
    info = ensure_family(args.out, seed=args.seed, quick=args.quick, threads=args.threads,
                         rebuild=getattr(args, "rebuild", False), **extra)
    if args.demo_command == "build":
        print(f"{getattr(args, 'family', 'demo')} family: {info['root']}")
        print(f"  base      {info['base']}")
        for e in info["pool"]["experts"]:
            print(f"  {e['name']} {info['experts'][e['name']]}  [{e['domain']}] {e['description']}")
        print(f"  tasks     {info['tasks']}  ({', '.join(info['task_names'])})")
        print(f"  pool file {info['pool_file']}")
        return 0
    from wildmerge.protocol import family_report

    family_report(info, out_dir=args.report_dir, limit=args.limit)
    return 0
