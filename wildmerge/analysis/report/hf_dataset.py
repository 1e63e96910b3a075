"""A run's leaderboard as a Hugging Face dataset folder (``wildmerge report RUN --hf-dataset OUT``): the report's
CSVs, one dataset config each (``scores`` the default), and a dataset card whose YAML front matter the hub reads.
Ready for ``huggingface-cli upload USER/NAME OUT --repo-type dataset``; nothing here talks to the hub."""

import shutil
from pathlib import Path
from typing import Dict

import yaml

from wildmerge.atomic import write_text

TAGS = ["model-merging", "lm-eval", "leaderboard", "wildmerge"]


def write_hf_dataset(written: Dict[str, Path], run_name: str, out, licence: str = "cc-by-4.0") -> Path:
    """Copy the CSVs of ``written`` (``write_report``'s answer) into ``out`` and write its README.md card."""
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
    front = {"license": licence, "tags": TAGS, "pretty_name": f"wildmerge leaderboard: {run_name}",
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
