"""Scores where people share them: lm-eval's own Weights & Biases logger (``--wandb-args``), one W&B run per scored
job, with the run's manifest as its config. The logger, its tables and its results artifact are lm-eval's; this
module only says what each run is called and carries its config to the worker."""

import sys
from typing import Any, Dict, List, Optional


def init_keys() -> List[str]:
    """The arguments ``wandb.init`` takes (what ``--wandb-args`` may set); a ``ConfigError`` when wandb is missing."""
    import inspect

    from wildmerge.errors import ConfigError

    try:
        import wandb
    except ImportError:
        raise ConfigError("--wandb-args needs Weights & Biases: pip install wandb (or drop --wandb-args)") from None
    return [name for name, p in inspect.signature(wandb.init).parameters.items()
            if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]


def wandb_spec(wandb_args: Optional[Dict[str, str]], config: Dict[str, Any], job: Dict[str, Any],
               group: Optional[str] = None) -> Optional[Dict[str, Any]]:
    """What the worker passes to ``WandbLogger`` for ``job``: wandb.init's arguments (the user's; by default the
    job's first model as the name and ``group`` as the group) and the config; None when W&B is off."""
    if not wandb_args:
        return None
    models = job.get("models") or [job["job_id"]]
    name = models[0] + (f" (+{len(models) - 1} same weights)" if len(models) > 1 else "")
    init = {"name": name, "job_type": "eval", **({"group": group} if group else {}), **wandb_args}
    return {"init": init, "config": {**config, "wildmerge_job": {"job_id": job["job_id"], "models": models,
                                                                   "suite": job.get("suite")}}}


def log_to_wandb(spec: Dict[str, Any], outputs: List[Dict[str, Any]]) -> None:
    """Log each ``simple_evaluate`` output of one job with lm-eval's ``WandbLogger``, then close the W&B run. A
    logging failure is printed and the scores stand (as lm-eval's own command line does)."""
    try:
        from lm_eval.loggers import WandbLogger

        logger = WandbLogger(init_args=dict(spec["init"]), config_args=spec["config"])
    except Exception as exc:  # wandb missing or unreachable: the evaluation itself is not at stake
        print(f"warning: Weights & Biases logging is off for this job ({type(exc).__name__}: {exc}); "
              f"`pip install wandb` and `wandb login` (or WANDB_MODE=offline)", file=sys.stderr)
        return
    try:
        for out in outputs:
            logger.post_init(out)
            logger.log_eval_result()
    except Exception as exc:
        print(f"warning: logging to Weights & Biases failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        logger.run.finish()
