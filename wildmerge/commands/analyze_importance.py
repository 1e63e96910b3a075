"""``wildmerge analyze importance --run RUN``: Chain of Merges' importance weights against the experts' accuracy gap,
their reference ablation and the merge's FLOPs / memory (Buzzega et al., arXiv 2508.21421, Figs. 2 / 4, 5, 6)."""

import argparse

from wildmerge.commands.options import device

HELP = "CoM's importance weights vs the experts' accuracy gap, the omega-reference ablation, FLOPs / memory"
DESCRIPTION = ("For a run's Chain of Merges merges: each expert's importance weight (omega, Eq. 6) against its "
               "fine-tuned minus base score (Figs. 2 / 4), with --reference the omegas measured through the base "
               "model instead of the merged one (Fig. 6), and the forward passes, FLOPs and Gram memory counted from "
               "the model config beside the measured peak RSS (Fig. 5).")


def configure(p: argparse.ArgumentParser) -> None:
    p.add_argument("--run", required=True, help="a run folder with evaluated CoM merges, base and experts")
    p.add_argument("--suite", help="evaluated suite of the run (default: the only one)")
    p.add_argument("--reference", action="store_true",
                   help="also measure the omegas through the base model (forward passes over the calibration data)")
    p.add_argument("--device", default="cpu", type=device, help="device of the --reference forward passes (default cpu)")
    p.add_argument("--out", help="output folder (default: RUN/com_importance)")


def run(args) -> int:
    from wildmerge.analysis.com.importance import write_importance

    for path in write_importance(args.run, args.out, args.suite, args.reference, args.device):
        print(f"wrote {path}")
    return 0
