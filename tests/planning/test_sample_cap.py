"""Chain of Merges' calibration-sample sweep capped by the texts each expert of the pool has, said in the dry run
before any merge (the shipped pools have 256 texts per expert, ``data: generate`` 64; the sweep asks up to 500)."""

import json

import pytest

from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.pools import load_pool
from wildmerge.recipes.sweeps import load_sweeps
from wildmerge.planning.sample_cap import cap_sample_sweeps


def _pool(root, tiny_family, counts=(12, 7), generate=6):
    """Experts with local jsonl files of ``counts`` records (token ids: the tiny base has no tokenizer), the third
    with ``data: generate`` of ``generate`` texts where ``counts`` names only two."""
    lines = ["name: capped", f"base: {{model: {tiny_family['base']}}}", "experts:"]
    for i, n in enumerate(counts):
        path = root / f"x{i}.jsonl"
        path.write_text("".join(json.dumps({"input_ids": [5 + i, 6 + k % 50, 7, 8, 9]}) + "\n" for k in range(n)))
        lines.append(f"  - {{model: {tiny_family['experts'][i]}, name: x{i}, data: {{text: {path.name}}}}}")
    if len(counts) == 2:
        generated = "{generate: {n_samples: %d}}" % generate
        lines.append(f"  - {{model: {tiny_family['experts'][2]}, name: x2, data: {{text: {generated}}}}}")
    (root / "pool.yml").write_text("\n".join(lines) + "\n")
    return root / "pool.yml"


def test_points_above_the_fewest_texts_are_left_out(tiny_family, tmp_path):
    pool = load_pool(_pool(tmp_path, tiny_family))
    sweeps = load_sweeps(["com_samples", "ta_lambda"])
    capped, notes = cap_sample_sweeps(pool, sweeps)
    # the fewest: x2's generate draws 6 (nothing is generated to know it); the files have 12 and 7 lines
    points = sorted(p["n_samples"] for p in capped["com_samples"].points())
    assert points == [n for n in sweeps["com_samples"].grid["n_samples"] if n <= 6] == [2, 5]
    assert capped["ta_lambda"] is sweeps["ta_lambda"]  # a sweep without n_samples is untouched
    assert capped["com_samples"].recipe.name == "com"  # still merges with its recipe
    assert notes == ["sweep 'com_samples': n_samples 10, 50, 100, 200, 300, 400, 500 left out: expert 'x2' has 6 "
                     "calibration texts, the fewest of the pool's 3 experts; the sweep keeps 2, 5"]
    # with more generated texts the fewest is the 7-line file
    pool = load_pool(_pool(tmp_path, tiny_family, generate=64))
    capped, notes = cap_sample_sweeps(pool, sweeps)
    assert [p["n_samples"] for p in capped["com_samples"].points()] == [2, 5] and "expert 'x1' has 7" in notes[0]


def test_enough_texts_keep_every_point_and_none_is_an_error(tiny_family, tmp_path):
    sweeps = load_sweeps(["com_samples"])
    pool = load_pool(_pool(tmp_path, tiny_family, counts=(500, 600), generate=512))
    capped, notes = cap_sample_sweeps(pool, sweeps)
    assert notes == [] and capped["com_samples"].points() == sweeps["com_samples"].points()
    pool = load_pool(_pool(tmp_path, tiny_family, counts=(1, 7)))
    with pytest.raises(ConfigError, match=r"sweep 'com_samples': every n_samples point .* expert 'x0' has \(1\)"):
        cap_sample_sweeps(pool, sweeps)


def test_the_dry_run_says_so_before_the_plan(tiny_family, tmp_path, capsys):
    pool = _pool(tmp_path, tiny_family, counts=(12, 7, 9))
    assert main(["sample", "--base", str(pool), "--sizes", "2", "--k", "1", "--methods", "ta",
                 "--ablation", "com_samples", "--no-evaluate", "--dry-run", "--out", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    said = out.index("capped: sweep 'com_samples': n_samples 10, 50, 100, 200, 300, 400, 500 left out: expert "
                     "'x1' has 7 calibration texts")
    assert said < out.index("  plan:")
    planned = [line.split()[0] for line in out.split("  plan:")[1].splitlines() if line.strip()]
    assert [m for m in planned if m.startswith("com__")] == ["com__n03_full__n_samples-2", "com__n03_full__n_samples-5"]
    assert not (tmp_path / "run").exists()  # a dry run writes nothing


def test_an_expert_without_data_is_left_to_the_preflight(tiny_family, tmp_path):
    path = _pool(tmp_path, tiny_family)
    path.write_text(path.read_text().replace(", data: {text: {generate: {n_samples: 6}}}", ""))
    pool = load_pool(path)
    assert pool.data_for("x2") is None
    capped, notes = cap_sample_sweeps(pool, load_sweeps(["com_samples"]))  # the files' 12 and 7 texts count
    assert [p["n_samples"] for p in capped["com_samples"].points()] == [2, 5] and "expert 'x1' has 7" in notes[0]
