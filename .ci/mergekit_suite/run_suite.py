"""Run mergekit's own test suite against the installed mergekit, without and with wildmerge's start-up hook.

Installing wildmerge must not change what stock mergekit does: any test that passes without wildmerge and does
not pass with it fails this script. The suite comes from the sdist of the installed mergekit version, downloaded
from the package registry at run time (``pip download --no-binary :all: --no-deps``), never copied into this
repository. The sdist lacks ``tests/common.py``; ours (``tests/common.py`` next to this file, written for CI) is
joined to the sdist's ``tests/`` as one namespace package. Only the sdist's ``tests/`` folder is unpacked, so the
tests import the installed mergekit, not the sdist's sources.

Selection: every test except the LLaVA ones (``-k "not VLM"``: about 60 of the suite's 105 seconds here, all in
model construction and merging of a vision tower that wildmerge's hook treats like any other model).

Usage: python .ci/mergekit_suite/run_suite.py [--sdist FILE] [--keep DIR] [-- extra pytest args]
"""

import argparse
import os
import subprocess
import sys
import tarfile
import tempfile
import xml.etree.ElementTree as ET
from importlib.metadata import version
from pathlib import Path

HERE = Path(__file__).resolve().parent
SELECTION = ["-k", "not VLM"]


def download_sdist(dest: Path) -> Path:
    pinned = version("mergekit")
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-binary", ":all:", "--no-deps",
                    f"mergekit=={pinned}", "-d", str(dest)], check=True)
    return next(dest.glob(f"mergekit-{pinned}.tar.gz"))


def unpack_tests(sdist: Path, dest: Path) -> Path:
    """Extract ``mergekit-X/tests/*`` only, to ``dest/tests``."""
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.split("/")[1:2] == ["tests"]]
        for m in members:
            m.name = "/".join(m.name.split("/")[1:])
        tar.extractall(dest, members=members, filter="data")
    return dest / "tests"


def outcomes(junit: Path) -> dict:
    """{test id: passed | failed | error | skipped} from a pytest JUnit XML report."""
    result = {}
    for case in ET.parse(junit).iter("testcase"):
        tid = f"{case.get('classname')}::{case.get('name')}"
        kinds = {child.tag for child in case}
        result[tid] = ("failed" if "failure" in kinds else "error" if "error" in kinds
                       else "skipped" if "skipped" in kinds else "passed")
    return result


def shadow_wildmerge(folder: Path) -> Path:
    """A folder holding an empty ``wildmerge`` package: first on PYTHONPATH, it turns the start-up hook
    (``import wildmerge._autoload`` in a .pth file) into a no-op whatever the installed wildmerge does."""
    for name in ("__init__.py", "_autoload.py"):
        (folder / "wildmerge").mkdir(parents=True, exist_ok=True)
        (folder / "wildmerge" / name).write_text("")
    return folder


def run_suite(src: Path, junit: Path, hook: bool, extra) -> dict:
    env = dict(os.environ, WILDMERGE_AUTOLOAD="1" if hook else "0",
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    shadow = [] if hook else [str(shadow_wildmerge(junit.parent / "no-wildmerge"))]
    env["PYTHONPATH"] = os.pathsep.join(p for p in (*shadow, str(HERE), str(src), env.get("PYTHONPATH", "")) if p)
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-o", "addopts=", "-W", "ignore",
           *SELECTION, f"--junitxml={junit}", *extra, str(src / "tests")]
    label = "with wildmerge" if hook else "without wildmerge"
    print(f"--- mergekit {version('mergekit')} test suite {label}", flush=True)
    subprocess.run(cmd, cwd=src, env=env)  # failures are judged below, from the report
    return outcomes(junit)


def counts(result: dict) -> str:
    kinds = ("passed", "failed", "error", "skipped")
    return " / ".join(f"{sum(v == k for v in result.values())} {k}" for k in kinds)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sdist", help="a mergekit sdist already downloaded (default: download it)")
    parser.add_argument("--keep", help="work in this folder and keep it (default: a temporary folder)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="mergekit-suite-") as tmp:
        work = Path(args.keep or tmp)
        work.mkdir(parents=True, exist_ok=True)
        sdist = Path(args.sdist) if args.sdist else download_sdist(work)
        src = work / "src"
        unpack_tests(sdist, src)
        without = run_suite(src, work / "without.xml", hook=False, extra=args.pytest_args)
        with_ = run_suite(src, work / "with.xml", hook=True, extra=args.pytest_args)
    broken = sorted(t for t, v in without.items() if v == "passed" and with_.get(t) != "passed")
    ours = sorted(t for t in with_ if t not in without)
    ours_failed = [t for t in ours if with_[t] in ("failed", "error")]
    print(f"without wildmerge: {counts(without)}")
    print(f"with wildmerge:    {counts(with_)}  ({len(ours)} more tests: mergekit's tests run over registered "
          f"methods, ours included)")
    for t in broken:
        print(f"BROKEN BY WILDMERGE: {t} ({with_.get(t, 'not run')})")
    for t in ours_failed:
        print(f"FAILS FOR A WILDMERGE METHOD: {t}")
    if not ours:
        print("the hook did not load: no test ran over wildmerge's methods (is wildmerge installed?)")
    if broken or ours_failed or not without or not ours:
        return 1
    print("mergekit's suite: nothing that passes without wildmerge fails with it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
