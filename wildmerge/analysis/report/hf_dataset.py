"""A run's leaderboard as a Hugging Face dataset folder (``wildmerge report RUN --hf-dataset OUT``): the report's
CSVs, one dataset config each (``scores`` the default), and a dataset card whose YAML front matter the hub reads.
Ready for ``huggingface-cli upload USER/NAME OUT --repo-type dataset``; nothing here talks to the hub."""

import shutil
from pathlib import Path
from typing import Dict

import yaml

from wildmerge.atomic import write_text
from wildmerge.errors import ConfigError

TAGS = ["model-merging", "lm-eval", "leaderboard", "wildmerge"]


def _pretty_name(run_name: str) -> str:
    return f"wildmerge leaderboard: {run_name}"


def check_hf_dataset_target(out, run_name: str) -> None:
    """Refuse ``--hf-dataset OUT`` before the report is written: a file, or a folder with anything in it unless it
    is an earlier dataset folder of this run (its card's ``pretty_name`` names the run, and it holds nothing but the
    card and CSVs): the CSVs are copied in beside whatever is there."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--hf-dataset {out}: that is a file, not a folder; give a new or empty folder")
    if not out.is_dir() or not any(out.iterdir()):
        return
    try:
        front = yaml.safe_load((out / "README.md").read_text().split("---\n")[1])
        ours = isinstance(front, dict) and front.get("pretty_name") == _pretty_name(run_name)
    except (OSError, IndexError, yaml.YAMLError):
        ours = False
    if not ours or any(f.name != "README.md" and f.suffix != ".csv" for f in out.iterdir()):
        raise ConfigError(f"--hf-dataset {out}: that folder is not empty and is no dataset folder of run "
                          f"{run_name!r}; the dataset's files would be mixed into it: give a new or empty folder")


def write_hf_dataset(written: Dict[str, Path], run_name: str, out, licence: str = "cc-by-4.0") -> Path:
    """Copy the CSVs of ``written`` (``write_report``'s answer) into ``out`` and write its README.md card."""
    check_hf_dataset_target(out, run_name)
    out = Path(out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    configs = []
    for name, path in sorted(written.items()):
        if path.suffix != ".csv":
            continue
        config = name.removesuffix("_csv").replace("/", "__")  # a suite's folder of a multi-suite report
        shutil.copyfile(path, out / f"{config}.csv")
        configs.append({"config_name": config, "data_files": f"{config}.csv"})
    if not configs:
        from wildmerge.errors import WildmergeError

        raise WildmergeError(f"the report of {run_name} has no CSV to publish; evaluate the run first")
    default = next((c for c in configs if c["config_name"].endswith("scores")), configs[0])
    default["default"] = True
    front = {"license": licence, "tags": TAGS, "pretty_name": _pretty_name(run_name),
             "configs": configs}
    names = ", ".join(f"`{c['config_name']}`" for c in configs)
    write_text(out / "README.md", "---\n" + yaml.safe_dump(front, sort_keys=False) + "---\n\n"
               f"# Model-merging leaderboard: {run_name}\n\n"
               f"Scores of a base model, its experts and their merges, evaluated with lm-eval and written by "
               f"`wildmerge report`. One config per table: {names} (`{default['config_name']}`: one row per model, "
               f"one column per task).\n\n"
               f"```python\nfrom datasets import load_dataset\nscores = load_dataset(\"USER/NAME\")\n```\n\n"
               f"Upload: `huggingface-cli upload USER/NAME {out.name} --repo-type dataset`.\n")
    return out
