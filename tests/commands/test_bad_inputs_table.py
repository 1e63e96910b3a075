"""Bad inputs over every command, as a table: each row is an argv, the substring its one-line error must
hold, and the folders that must not exist afterwards (no run folder, no model: the heavy work never started).

The numeric options are not listed by hand: they are read from the parsers themselves, so a new option is tried with
NaN, infinities and out-of-range values as soon as it exists (and an option typed plain ``int`` / ``float`` fails).
"""

import argparse
import math

import pytest
import yaml

from helpers import lm_family, one_error_line, write_pool  # noqa: F401 (fixture)
from wildmerge.cli import SUBCOMMANDS, build_parser, main
from wildmerge.resources import cuda_available


def _run(argv, capsys) -> tuple:
    """(exit status, stderr) of the real CLI in this process; argparse's own refusals included."""
    try:
        status = main([str(a) for a in argv])
    except SystemExit as exc:
        status = exc.code
    return status, capsys.readouterr().err


# --- every numeric option of every command, from the parsers -------------------------------------------------------

def _subparsers(parser):
    return [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]


def _commands(parser, prefix=()):
    """(argv prefix, parser) of every leaf command: ``sample``, ``analyze mergeability``, ``demo build`` ..."""
    subs = _subparsers(parser)
    if not subs:
        yield prefix, parser
    for sub in subs:
        for name, child in sub.choices.items():
            yield from _commands(child, (*prefix, name))


def _leaf_commands():
    for name in SUBCOMMANDS:
        top = build_parser(only=name)
        yield from _commands(_subparsers(top)[0].choices[name], (name,))


def _numeric_options():
    out = []
    for prefix, parser in _leaf_commands():
        for action in parser._actions:
            if action.type in (int, float):
                out.append((prefix, action, None))  # fails in the test below: use the shared types
            elif hasattr(action.type, "rule"):
                out.append((prefix, action, action.type.rule))
    return out


def _bad_values(rule) -> list:
    values = ["nan", "inf", "-inf", "NaN", "abc"]
    step = 1 if rule.integer else 0.5
    if rule.low is not None:
        values.append(str(rule.low if rule.low_open else rule.low - step))
    if rule.high is not None:
        values.append(str(rule.high if rule.high_open else rule.high + step))
    if rule.integer:
        values.append("1.5")
    return values


NUMERIC = _numeric_options()
NUMERIC_ROWS = [pytest.param(prefix, action.option_strings, value,
                             id=f"{' '.join(prefix)} {action.option_strings[0]} {value}")
                for prefix, action, rule in NUMERIC if rule is not None for value in _bad_values(rule)]


def test_every_numeric_option_uses_the_shared_types():
    plain = [f"{' '.join(prefix)} {action.option_strings[0]}" for prefix, action, rule in NUMERIC if rule is None]
    assert not plain, f"type=int / type=float options (use wildmerge.commands.options' types): {plain}"
    assert len(NUMERIC) > 40  # the walk found the options (sample, eval, tune, search, analyze, demo)


@pytest.mark.parametrize("prefix, flags, value", NUMERIC_ROWS)
def test_a_bad_number_is_refused_at_parse_time_with_the_option_name(prefix, flags, value, capsys, tmp_path,
                                                                    monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, err = _run([*prefix, f"{flags[0]}={value}"], capsys)  # --seed=-inf: not read as an option
    assert status == 2
    line = one_error_line(err)
    assert f"argument {'/'.join(flags)}: expected" in line and line.endswith(f"got {value}"), line
    assert not any(tmp_path.iterdir())  # nothing written (no runs/ folder)


# --- every checked text option (devices, --batch-size, --wandb-args, --calibrate-from, --hf-dataset) -----------------

CHECKED_TEXT = ("batch_size", "wandb_args", "calibrate_from", "hf_dataset")  # and every *device option


def _text_options():
    out = []
    for prefix, parser in _leaf_commands():
        for action in parser._actions:
            if hasattr(action.type, "rule"):
                continue  # a number (tune --batch-size): the numeric rows above
            if action.dest in CHECKED_TEXT or action.dest.endswith("device"):
                out.append((prefix, action, getattr(action.type, "bad_values", None), _required(parser)))
    return out


def _required(parser) -> list:
    """Good values for a command's required options (``--suite x``, ``--budget 2``), so its own check is reached."""
    out = []
    for action in parser._actions:
        if action.required and action.option_strings:
            rule = getattr(action.type, "rule", None)
            value = action.choices[0] if action.choices else \
                str(int(rule.low) + 1) if rule is not None and rule.low is not None else "1" if rule else "x"
            out += [action.option_strings[0], str(value)]
    return out


TEXT = _text_options()
TEXT_ROWS = [pytest.param(prefix, action.option_strings, value, required,
                          id=f"{' '.join(prefix)} {action.option_strings[0]} {value!r}")
             for prefix, action, values, required in TEXT if values for value in values]


def test_every_checked_text_option_has_a_checking_type():
    """A new device / batch-size / W&B / calibration / dataset-folder option cannot skip the rules."""
    plain = [f"{' '.join(prefix)} {action.option_strings[0]}" for prefix, action, values, _ in TEXT if not values]
    assert not plain, f"options without a type of wildmerge.commands.options (checked_text): {plain}"
    flags = {action.option_strings[0] for _, action, _, _ in TEXT}
    assert {"--batch-size", "--wandb-args", "--calibrate-from", "--hf-dataset", "--merge-device", "--device",
            "--eval-device"} <= flags, flags


@pytest.mark.parametrize("prefix, flags, value, required", TEXT_ROWS)
def test_a_bad_text_value_is_one_line_before_any_work(prefix, flags, value, required, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    status, err = _run([*prefix, f"{flags[0]}={value}", *required], capsys)
    assert status == 2, err
    line = one_error_line(err)
    assert any(f in line for f in flags) or "evaluation device" in line, line
    assert repr(value) in line or value in line, line
    assert not any(tmp_path.iterdir())  # nothing written (no runs/ folder)


def test_the_number_rules_accept_their_own_bounds_and_read_the_same_in_the_library():
    from wildmerge.errors import ConfigError
    from wildmerge.numbers import FRACTION, OPEN_FRACTION, POSITIVE_INT, float_at_least

    assert FRACTION.parse("0") == 0.0 and FRACTION.parse("1") == 1.0 and POSITIVE_INT.parse("3") == 3
    with pytest.raises(ValueError, match="strictly between 0 and 1"):
        OPEN_FRACTION.parse("1")
    with pytest.raises(ConfigError, match=r"^--budget: expected a number >= 2, got nan$"):
        float_at_least(2).check("--budget", math.nan)


# --- the table: one row per bad input --------------------------------------------------------------------------------

@pytest.fixture
def tiny(lm_family, tmp_path):  # noqa: F811
    """A two-expert pool of tiny models (no protocol defaults), a grid file writer and the run folder's path."""
    pool = write_pool(tmp_path, lm_family)

    def grid(data):
        path = tmp_path / "grid.yml"
        path.write_text(yaml.safe_dump(data))
        return path

    def pool_with(**extra):
        data = yaml.safe_load(open(pool))
        data.update(extra)
        path = tmp_path / f"pool{len(list(tmp_path.glob('pool*.yml')))}.yml"
        path.write_text(yaml.safe_dump(data))
        return path

    return {"pool": pool, "grid": grid, "pool_with": pool_with, "run": tmp_path / "run", "suite": lm_family["suite"],
            "family": lm_family}


def _cases(t):
    """(argv, expected substring of the one error line) for the bad inputs that need a pool."""
    ties = t["grid"]({"bad": {"method": "ties", "grid": {"density": [0, 2.0]}}})
    sample = ["sample", "--base", t["pool"], "--out", t["run"], "--sizes", "2", "--k", "1", "--methods", "ta"]
    rows = [
        # 2: tune --check needs 0 or >= 3 points, and a suite it names
        (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--check", "1"], "at least 3 points"),
        (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--check", "-1"], "argument --check"),
        (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--check", "3", "--out", t["run"]], "needs --suite"),
        (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--suite", t["suite"], "--out", t["run"]],
         "only applies to the --check"),
        (["tune", "--pool", t["pool"], "--adamerging", "tas", "--check", "3", "--suite", t["suite"], "--out", t["run"]],
         "without one: drop --check"),
        ([*sample, "--no-evaluate", "--tune", "--tune-check", "2"], "at least 3 points"),
        ([*sample, "--no-evaluate", "--tune", "--tune-check", "3"], "--tune-check needs a suite"),
        ([*sample, "--no-evaluate", "--tune-check", "3", "--suite", t["suite"]], "add --tune"),
        # 3: grids range-checked against the method's declared parameters
        (["tune", "--pool", t["pool"], "--grid", ties, "--out", t["run"]], "'density' = 0 is out of range"),
        ([*sample, "--no-evaluate", "--grid", ties], "'density' = 0 is out of range"),
        ([*sample, "--no-evaluate", "--grid", ties, "--dry-run"], "'density' = 0 is out of range"),
        # 4: search --budget nan
        (["search", "--base", t["pool"], "--budget", "nan", "--out", t["run"]], "argument --budget"),
        # 5: the dry run checks the protocol's suite
        ([*sample, "--evaluate", "--suite", "no_such_suite", "--dry-run"], "no_such_suite"),
        ([*sample, "--evaluate", "--suite", "no_such_suite"], "no_such_suite"),
        # 6 and 7: --tune-samples 0 with --no-tune, tune --adamerging --iterations 0
        (["search", "--base", t["pool"], "--budget", "4", "--no-tune", "--tune-samples", "0"], "--tune-samples"),
        ([*sample, "--tune-samples", "0"], "argument --tune-samples"),
        (["tune", "--pool", t["pool"], "--adamerging", "tas", "--iterations", "0"], "argument --iterations"),
        # eval's text options, checked by EvalOptions before any model is read
        (["eval", t["run"], "--suite", t["suite"], "--limit", "nan"], "--limit"),
        (["eval", t["run"], "--suite", t["suite"], "--batch-size", "nan"], "--batch-size"),
    ]
    if not cuda_available():
        rows += [  # 6: a GPU asked for on a machine without one, before any merge
            ([*sample, "--no-evaluate", "--merge-device", "cuda"], "--merge-device 'cuda'"),
            ([*sample, "--evaluate", "--suite", t["suite"], "--eval-device", "cuda"], "evaluation device 'cuda'"),
            ([*sample, "--evaluate", "--suite", t["suite"], "--eval-device", "cuda", "--dry-run"],
             "evaluation device 'cuda'"),
            (["search", "--base", t["pool"], "--budget", "4", "--merge-device", "cuda", "--out", t["run"]],
             "--merge-device 'cuda'"),
            (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--device", "cuda", "--out", t["run"]],
             "--device 'cuda'"),
            (["analyze", "mergeability", "--pool", t["pool"], "--device", "cuda", "--out", t["run"]],
             "--device 'cuda'"),
            (["analyze", "probe", "--model", t["family"]["base"], "--suite", t["suite"], "--device", "cuda",
              "--out", t["run"]], "--device 'cuda'"),
        ]
    return rows


def test_each_case_is_one_line_before_any_heavy_work(tiny, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # a default output folder would appear here
    for argv, expected in _cases(tiny):
        status, err = _run(argv, capsys)
        assert status == 2, (argv, err)
        line = one_error_line(err)
        assert expected in line, (argv, line)
        assert not tiny["run"].exists() and not (tmp_path / "runs").exists(), argv


def _issue_53_cases(t, tmp_path):
    import shutil
    from pathlib import Path

    from wildmerge.run import MergeInfo, write_merge_info

    """(argv, substrings of the one error line) for the pre-checks (claims, devices, damaged runs) that need a pool."""
    sample = ["sample", "--base", t["pool"], "--out", t["run"], "--sizes", "2", "--k", "1", "--methods", "ta"]
    damaged = tmp_path / "damaged_run"
    (damaged / "models" / "ta__n02_s00").mkdir(parents=True)
    (damaged / "models" / "ta__n02_s00" / "config.json").write_text("{not json")
    empty = tmp_path / "empty_run"
    empty.mkdir()
    timed = tmp_path / "timed_run" / "models" / "ta__n02_s00"  # one timed merge: a run to calibrate from
    timed.mkdir(parents=True)
    shutil.copy(Path(t["family"]["base"]) / "config.json", timed / "config.json")
    write_merge_info(timed, MergeInfo(model_id=timed.name, method="ta", experts=["x0", "x1"], seconds=1.0,
                                      device="cpu"))
    no_config = tmp_path / "no_config"  # 9: an expert folder without config.json
    shutil.copytree(t["family"]["experts"][1], no_config)
    (no_config / "config.json").unlink()
    no_config_pool = tmp_path / "no_config.yml"
    no_config_pool.write_text(yaml.safe_dump({"name": "nc", "base": {"model": t["family"]["base"]}, "experts": [
        {"model": t["family"]["experts"][0], "name": "x0"}, {"model": str(no_config), "name": "x1"}]}))
    inf_recipe = tmp_path / "inf_ta.yml"
    inf_recipe.write_text(yaml.safe_dump({"name": "inf_ta", "label": "TA", "model_parameters": {"weight": 1.0},
                                          "recipe": {"merge_method": "task_arithmetic",
                                                     "parameters": {"lambda": math.inf}}}))
    nan_grid = t["grid"]({"nan_lambda": {"method": "ta", "grid": {"lambda": [0.5, math.nan]}}})
    return [
        # 9: the dry run refuses what the real run refuses: a local expert without config.json, a NaN in a grid
        ([*sample, "--no-evaluate", "--dry-run"], None),
        (["sample", "--base", no_config_pool, "--out", t["run"], "--sizes", "2", "--k", "1", "--methods", "ta",
          "--no-evaluate", "--dry-run"], [f"{no_config}: no config.json"]),
        ([*sample, "--no-evaluate", "--grid", nan_grid, "--dry-run"],
         ["sweep 'nan_lambda': ta: parameter 'lambda' = nan is not a finite number"]),
        ([*sample, "--no-evaluate", "--grid", nan_grid],
         ["sweep 'nan_lambda': ta: parameter 'lambda' = nan is not a finite number"]),
        (["tune", "--pool", t["pool"], "--grid", nan_grid, "--out", t["run"]], ["'lambda' = nan is not a finite"]),
        (["sample", "--base", t["pool"], "--out", t["run"], "--sizes", "2", "--k", "1", "--methods", inf_recipe,
          "--no-evaluate", "--dry-run"], [f"method recipe {inf_recipe}", "'lambda' = inf is not a finite number"]),
        # 10: every data source the pool names checked when it is loaded, whatever the methods read
        (["sample", "--base", t["pool_with"](data={"lm_eval_task": "demo_addd"}), "--out", t["run"], "--sizes", "2",
          "--k", "1", "--methods", "regmean", "--no-evaluate", "--dry-run"],
         ["expert 'x0'", "'demo_addd' (did you mean 'demo_add'?)", "add `tasks: demo:tasks`"]),
        (["sample", "--base", t["pool_with"](data={"lm_eval_task": "demo_addd", "tasks": "demo:tasks"}), "--out",
          t["run"], "--sizes", "2", "--k", "1", "--methods", "regmean", "--no-evaluate"],
         ["expert 'x0'", "demo:tasks has no task 'demo_addd' (did you mean 'demo_add'?)"]),
        (["sample", "--base", t["pool_with"](data={"text": "demo:unlabelled/expert_99"}), "--out", t["run"],
          "--sizes", "2", "--k", "1", "--methods", "regmean", "--no-evaluate"],
         ["text data of expert 'x0'", "unknown demo data 'demo:unlabelled/expert_99'", "valid: demo:unlabelled/"]),
        ([*sample, "--base", t["pool_with"](data={"text": "demo:unlabelled/expert_99"}), "--no-evaluate",
          "--dry-run"], ["unknown demo data 'demo:unlabelled/expert_99'"]),
        ([*sample, "--no-evaluate", "--base", t["pool_with"](data={
            "text": "demo:unlabelled/expert_01", "labelled": {"lm_eval_task": "demo_addd", "tasks": "demo:tasks"}})],
         ["labelled data of expert 'x0'", "demo:tasks has no task 'demo_addd'"]),  # ta reads no data at all
        # 5: --workers checked with the other pre-checks (dry run included), as --merge-workers is
        ([*sample, "--evaluate", "--suite", t["suite"], "--workers", "1000", "--dry-run"],
         ["--workers 1000", "use --workers"]),
        ([*sample, "--evaluate", "--suite", t["suite"], "--workers", "1000"], ["--workers 1000", "use --workers"]),
        # 6: --wandb-args on a run that is not evaluated
        ([*sample, "--no-evaluate", "--wandb-args", "project=x"], ["--wandb-args", "not evaluated"]),
        # 7: --calibrate-from checked whenever it is given; it prices dry runs only
        ([*sample, "--no-evaluate", "--calibrate-from", damaged], ["--calibrate-from", "config.json is damaged"]),
        ([*sample, "--no-evaluate", "--calibrate-from", damaged, "--dry-run"], ["config.json is damaged"]),
        ([*sample, "--no-evaluate", "--calibrate-from", empty, "--dry-run"], ["no merged model"]),
        ([*sample, "--no-evaluate", "--calibrate-from", tmp_path / "timed_run"],
         ["add --dry-run, or drop --calibrate-from"]),
        # 8: a device name that is none, wherever it is given
        ([*sample, "--no-evaluate", "--merge-device", "gpu", "--dry-run"], ["'gpu' is not a device"]),
        ([*sample, "--no-evaluate", "--merge-device", ""], ["'' is not a device"]),
        ([*sample, "--no-evaluate", "--device", "CPU"], ["'CPU' is not a device"]),
        # 12: an empty `protocol: methods` is the pool's, not --methods'; one flag "applies"
        (["sample", "--base", t["pool_with"](protocol={"methods": []}), "--out", t["run"], "--no-evaluate"],
         ["`protocol: methods` is empty", "or give --methods"]),
        (["tune", "--pool", t["pool"], "--sweep", "ta_lambda", "--suite", t["suite"], "--out", t["run"]],
         ["--suite only applies to the --check evaluations", "leave it out"]),
    ]


def test_issue_53_cases_are_one_line_before_any_heavy_work(tiny, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv, expected in _issue_53_cases(tiny, tmp_path):
        status, err = _run(argv, capsys)
        if expected is None:  # the same pool passes: the rows after it fail for their own reason
            assert status == 0, (argv, err)
            continue
        assert status == 2, (argv, err)
        line = one_error_line(err)
        assert all(e in line for e in expected), (argv, line)
        assert not tiny["run"].exists() and not (tmp_path / "runs").exists(), argv


def test_protocol_sizes_beyond_the_pool_are_said(tiny, capsys):
    pool = tiny["pool_with"](protocol={"sizes": [1, 5]})
    status, err = _run(["sample", "--base", pool, "--out", tiny["run"], "--methods", "ta", "--no-evaluate",
                        "--dry-run"], capsys)
    assert status == 0, err
    assert "protocol sizes 5 are left out" in err and "2 experts" in err


def _copy_without_tokenizer(src, dst):
    import shutil

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("tokenizer*", "vocab*", "merges.txt", "special_tokens*",
                                                            "added_tokens*", "chat_template*"))
    return str(dst)


def _more_cases(t, tmp_path):
    """(argv, expected substrings, substrings the line must not hold) for cases 8-10 and 12."""
    fam = t["family"]
    sample = ["sample", "--out", t["run"], "--sizes", "2", "--k", "1", "--methods", "ta"]
    # 8: a base folder without tokenizer files
    bare = {"name": "bare", "base": {"model": _copy_without_tokenizer(fam["base"], tmp_path / "bare_base")},
            "experts": [{"model": _copy_without_tokenizer(e, tmp_path / f"bare{i}"), "name": f"x{i}"}
                        for i, e in enumerate(fam["experts"])]}
    bare_pool = tmp_path / "bare.yml"
    bare_pool.write_text(yaml.safe_dump(bare))
    # 9: family references in a mergekit recipe
    recipe = tmp_path / "family_recipe.yml"
    recipe.write_text(yaml.safe_dump({"merge_method": "task_arithmetic", "base_model": fam["base"],
                                      "models": [{"model": "smollm2:arithmetic", "parameters": {"weight": 1.0}},
                                                 {"model": fam["experts"][0], "parameters": {"weight": 1.0}}]}))
    # 10: an unknown lm-eval task and a bad family data reference in `data:`
    task_pool = t["pool_with"](data={"labelled": {"lm_eval_task": "gsm8kk", "split": "train"}})
    demo_pool = t["pool_with"](data={"text": "demo:unlabeled/{name}"})
    # 12: a damaged plan; a recipe's relative calibration file outside any pool; text-only data for mergeability
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    (damaged / "plan.json").write_text("{not json")
    layerwise = tmp_path / "regmean.yml"
    layerwise.write_text(yaml.safe_dump({"merge_method": "regmean", "base_model": fam["base"],
                                         "models": [{"model": e, "calibration": "nowhere/data.jsonl"}
                                                    for e in fam["experts"]]}))
    texts = tmp_path / "texts.jsonl"
    texts.write_text("".join(f'{{"text": "item {i} of some text"}}\n' for i in range(12)))
    text_pool = t["pool_with"](data=str(texts))
    return [
        ([*sample, "--base", bare_pool, "--evaluate", "--suite", t["suite"], "--dry-run"],
         ["has no tokenizer", str(tmp_path / "bare_base"), "tokenizer.json", "the evaluation"], ["sentencepiece"]),
        ([*sample, "--base", bare_pool, "--evaluate", "--suite", t["suite"]], ["has no tokenizer"], []),
        (["tune", "--pool", bare_pool, "--sweep", "ta_lambda", "--out", t["run"]],
         ["has no tokenizer", "task alignment score"], ["sentencepiece"]),
        (["merge", recipe, t["run"]], ["'smollm2:arithmetic' is a wildmerge family reference",
                                       "wildmerge demo build --family smollm2"], ["OSError"]),
        ([*sample, "--base", task_pool, "--dry-run"], ["gsm8kk", "did you mean 'gsm8k'"], ["KeyError"]),
        ([*sample, "--base", demo_pool, "--dry-run"], ["demo:unlabeled/", "demo:unlabelled/<expert>"], []),
        (["eval", damaged, "--suite", t["suite"]], [str(damaged / "plan.json"), "delete it"],
         ["rerun `wildmerge sample` with the run's settings to rewrite"]),
        (["report", damaged], [str(damaged / "plan.json"), "delete it"], []),
        (["merge", layerwise, t["run"]], ["nowhere/data.jsonl", "current folder"], ["pool file"]),
        (["analyze", "mergeability", "--pool", text_pool, "--out", t["run"]], ["--groups weights,activations"],
         ["--exclude"]),
    ]


def test_cases_8_to_12_are_one_line_before_any_heavy_work(tiny, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for argv, expected, absent in _more_cases(tiny, tmp_path):
        status, err = _run(argv, capsys)
        assert status == 2, (argv, err)
        one_error_line(err)  # one error, no traceback (a pool's error lists its findings on the lines below)
        assert all(e in err for e in expected) and not any(a in err for a in absent), (argv, err)
        assert not tiny["run"].exists() and not (tmp_path / "runs").exists(), argv


def test_a_first_family_build_says_what_it_does_its_cost_and_where(tmp_path, capsys):
    import json

    from wildmerge.families import cache as C

    family = C.CachedFamily(label="fam", title="Fam", env="WILDMERGE_TEST_FAM", build_cost="about 1 minute")

    def build(tmp, seed, quick):
        (tmp / C.MANIFEST).write_text(json.dumps({"seed": seed}))

    def ensure():
        return C.ensure(family, tmp_path / "cache", 0, False, family_key=lambda s, q: f"seed{s}",
                        check=lambda root: None if (root / C.MANIFEST).is_file() else "absent", build=build,
                        describe=lambda root, m: {"root": root}, write_derived=lambda root, info: None)

    ensure()
    out = capsys.readouterr().out
    assert f"building the Fam family into {tmp_path / 'cache' / 'seed0'}" in out and "about 1 minute" in out
    ensure()  # cached: nothing said
    assert "building" not in capsys.readouterr().out


def test_sample_and_merge_py_refuses_a_bad_number_as_sample_does(tmp_path):
    import os
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[2]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(repo), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.run([sys.executable, str(repo / "sample_and_merge.py"), "--k", "nan", "--out",
                           str(tmp_path / "run")], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)
    assert proc.returncode == 2 and "argument --k: expected a whole number >= 1, got nan" in proc.stderr
    assert not any(tmp_path.iterdir())
