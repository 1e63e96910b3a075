"""The evaluation options are one typed value from the command line to the executors: a bad value is
refused once, when the options are made, in one line that names its flag, and ``wildmerge eval`` and
``wildmerge sample`` say exactly that; the suite overrides follow the suite file's own rules."""

import pytest

from helpers import write_pool
from wildmerge.cli import main
from wildmerge.errors import ConfigError
from wildmerge.eval.options import EXECUTOR_OPTIONS, NUMBERS, EvalOptions
from wildmerge.eval.suites import SuiteSettings

BAD = [  # (values, flags of `wildmerge eval`, the message)
    ({"limit": "1.5"}, ["--limit", "1.5"], "--limit 1.5 must be a whole number of documents per task"),
    ({"limit": "0"}, ["--limit", "0"], "--limit 0 must be a whole number of documents per task"),
    ({"batch_size": "many"}, ["--batch-size", "many"], "--batch-size must be a whole number >= 1 or auto, got 'many'"),
    ({"device": "gpu"}, ["--device", "gpu"], "the evaluation device 'gpu' is not one of auto, cpu, cuda, cuda:N"),
    ({"screen": 1.5}, ["--screen", "1.5"], "--screen: expected a number strictly between 0 and 1, got 1.5"),
    ({"workers": 0}, ["--workers", "0"], "--workers: expected a whole number >= 1, got 0"),
    ({"job_timeout": -1}, ["--job-timeout", "-1"], "--job-timeout: expected a number > 0, got -1"),
    ({"job_timeout": float("inf")}, ["--job-timeout", "inf"], "--job-timeout: expected a number > 0, got inf"),
    ({"screen": float("nan")}, ["--screen", "nan"], "--screen: expected a number strictly between 0 and 1, got nan"),
    ({"ray_address": "auto"}, ["--ray-address", "auto"],
     "--ray-address does not apply to the local executor (its options: --workers, --job-timeout)"),
    ({"executor": "ray", "workers": 2}, ["--executor", "ray", "--workers", "2"],
     "--workers does not apply to the ray executor"),
    ({"executor": "serial", "slurm_time": 5}, ["--executor", "serial", "--slurm-time", "5"],
     "--slurm-time does not apply to the serial executor (its options: none)"),
]


@pytest.mark.parametrize("values,argv,message", BAD, ids=[" ".join(a) for _, a, _ in BAD])
def test_a_bad_value_is_one_message_naming_its_flag(values, argv, message, tmp_path, capsys):
    with pytest.raises(ConfigError) as err:
        EvalOptions(**values)
    assert str(err.value).startswith(message)
    # the command refuses it with the same line before it reads anything (the run folder does not even exist);
    # a number out of its range already when the arguments are parsed, by the same rule (argparse names it
    # "argument --flag", after its usage lines)
    try:
        status = main(["eval", str(tmp_path / "no-run"), "--suite", "demo", *argv])
    except SystemExit as exc:
        status = exc.code
    assert status == 2
    lines = capsys.readouterr().err.splitlines()
    if str(err.value).startswith(tuple(f"--{n.replace('_', '-')}: expected" for n in NUMBERS)):
        assert lines[-1] == f"wildmerge eval: error: argument {err.value}"
    else:
        assert lines == [f"wildmerge eval: error: {err.value}"]


def test_sample_refuses_a_bad_evaluation_value_with_the_same_line_before_any_merge(tiny_family, tmp_path, capsys):
    pool = write_pool(tmp_path, tiny_family)
    run = tmp_path / "run"
    assert main(["sample", "--base", pool, "--out", str(run), "--evaluate", "--suite", "demo",
                 "--eval-device", "gpu"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "wildmerge sample: error: the evaluation device 'gpu' is not one of auto, cpu, cuda, cuda:N, mps"]
    assert not run.exists()


def test_good_values_are_typed_once_and_are_the_suite_overrides():
    options = EvalOptions(limit="3", batch_size="8", device="cuda:1", dtype="bfloat16", executor="ray",
                          cpus_per_job=2)
    assert options.suite_overrides() == {"limit": 3, "dtype": "bfloat16", "batch_size": 8, "device": "cuda:1"}
    assert EvalOptions(limit="0.1").limit == 0.1 and EvalOptions(batch_size="auto").batch_size == "auto"
    # the overrides are valid suite settings as they are: the suite's own rules accepted them
    assert SuiteSettings.model_validate(options.suite_overrides()).limit == 3
    assert EvalOptions().suite_overrides() == {} and EvalOptions().job_timeout == 3600
    with pytest.raises(ConfigError, match=r"unknown evaluation option 'worker' \(did you mean 'workers'\?\)"):
        EvalOptions(worker=2)
    with pytest.raises(Exception):  # frozen: what was checked is what the executors get
        options.limit = 0


def test_every_executor_option_belongs_to_an_executor():
    owned = {name for names in EXECUTOR_OPTIONS.values() for name in names}
    assert owned <= set(EvalOptions.model_fields)
    assert set(EXECUTOR_OPTIONS) == set(EvalOptions.model_fields["executor"].annotation.__args__)
