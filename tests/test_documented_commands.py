"""Every command shown in README.md and docs/*.md runs as written.

The commands run in document order (README.md first, then docs/*.md by name), each in a fresh shell, all in one
temporary folder that mirrors a checkout (the repository's top-level files are linked into it), like a reader
following the pages. They run on the quick demo family (``WILDMERGE_DEMO_QUICK=1``, built once per session), offline.
The shipped ``demo`` pool names 12 experts and the quick family has 3, so ``--pool demo`` / ``--base demo`` (and the
main job's default pool) mean the shipped pool cut to the quick family's experts; nothing else is rewritten.

A block's opening fence says how its commands are checked (docs/README.md shows the table):

- ``bash`` / ``sh``: every line that is not blank or a comment is a command (``\\`` continues it); it must exit 0.
- ``console``: lines starting with ``$ `` are commands, the lines after them their output, which must appear in
  what the command prints (whitespace aside; ``...`` stands for anything); the command must fail iff it shows
  ``error:``.
- ``python``: the block is one script, run with ``python -c``; it must exit 0 (no marker).
- ``bash hub``: the models come from the hub. ``wildmerge sample`` / ``sample_and_merge.py`` run with ``--dry-run``;
  for other commands, ``--help`` must list every option the command uses.
- ``bash gpu``, ``bash cluster``, ``bash slow``: ``--help`` must list every option the command uses.
- ``bash setup``: ``make`` lines must pass ``make -n``; ``. VENV/bin/activate`` must name the venv ``make setup``
  creates.

A command that fails today because of a known bug is listed in ``KNOWN_FAILURES`` (strict xfail: it fails the test
once the bug is fixed, so the entry gets removed).
"""

import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
ALL_MARKDOWN = PAGES + [REPO / "benchmarks" / "README.md"]
MARKERS = {"", "hub", "gpu", "cluster", "slow", "setup"}
SAMPLE = re.compile(r"(python sample_and_merge\.py|wildmerge sample)(?=\s|$)")

KNOWN_FAILURES = {}


@dataclass
class Command:
    page: str
    line: int
    lang: str
    marker: str
    text: str
    output: list = field(default_factory=list)  # console blocks: the lines shown after the command

    @property
    def id(self) -> str:
        return f"{self.page}:{self.line}"


def fenced_blocks(path: Path):
    """(line of the opening fence, language, marker, body lines) of every fenced block."""
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = re.match(r"^```(\S*)\s*(.*)$", lines[i])
        if match:
            start, body = i + 1, []
            i += 1
            while i < len(lines) and not lines[i].startswith("```"):
                body.append(lines[i])
                i += 1
            yield start, match.group(1), match.group(2).strip(), body
        i += 1


def commands(path: Path) -> list:
    out = []
    page = str(path.relative_to(REPO))
    for start, lang, marker, body in fenced_blocks(path):
        if lang in ("bash", "sh"):
            pending, first = "", None
            for offset, raw in enumerate(body, start=start + 1):
                line = raw.strip()
                if not pending and (not line or line.startswith("#")):
                    continue
                first = first or offset
                if line.endswith("\\"):
                    pending += line[:-1] + " "
                    continue
                out.append(Command(page, first, lang, marker, pending + line))
                pending, first = "", None
        elif lang == "python":
            out.append(Command(page, start + 1, lang, marker, "\n".join(body)))
        elif lang == "console":
            for offset, raw in enumerate(body, start=start + 1):
                if raw.startswith("$ "):
                    out.append(Command(page, offset, lang, marker, raw[2:].strip()))
                elif out and out[-1].page == page and out[-1].lang == "console" and raw.strip():
                    out[-1].output.append(raw.strip())
    return out


DOCUMENTED = [c for page in PAGES for c in commands(page)]


def _params():
    for c in DOCUMENTED:
        reason = KNOWN_FAILURES.get(c.text)
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        yield pytest.param(c, id=c.id, marks=marks)


# --- the environment: a checkout-like folder, the quick demo family, offline ------------------------------------

@pytest.fixture(scope="session")
def quick_family(tmp_path_factory):
    from wildmerge.families.demo.family import ensure_family

    return ensure_family(tmp_path_factory.mktemp("demo_cache"), seed=0, quick=True, progress=False)


@pytest.fixture(scope="session")
def reader(tmp_path_factory, quick_family):
    """(folder, environment, quick demo pool) shared by every documented command, in order."""
    folder = tmp_path_factory.mktemp("reader")
    for entry in REPO.iterdir():
        if not entry.name.startswith(".") and entry.name not in ("runs", "out"):
            (folder / entry.name).symlink_to(entry)
    shipped = yaml.safe_load((REPO / "merge_recipes" / "pools" / "demo.yml").read_text())
    quick = {f"demo:{name}" for name in quick_family["experts"]}
    shipped["experts"] = [e for e in shipped["experts"] if e["model"] in quick]
    pool = folder.parent / "demo-pool-quick.yml"
    pool.write_text(yaml.safe_dump(shipped, sort_keys=False))
    env = dict(os.environ, WILDMERGE_DEMO_QUICK="1", WILDMERGE_DEMO_CACHE=str(Path(quick_family["root"]).parent),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_DISABLE="1",
               MPLBACKEND="Agg", PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
               PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    return folder, env, pool


def on_quick_family(text: str, pool: Path) -> str:
    """``demo`` as a pool means the shipped pool cut to the quick family's experts; the main job's default too."""
    text = re.sub(r"(--pool|--base)(\s+|=)demo(?=\s|$)", rf"\g<1>\g<2>{pool}", text)
    if not re.search(r"--(pool|base|run)\b", text):
        text = SAMPLE.sub(rf"\g<1> --base {pool}", text, count=1)
    return text


def shell(text: str, folder, env, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", text], cwd=folder, env=env, capture_output=True, text=True, timeout=timeout)


def _tail(result, lines=25) -> str:
    return "\n".join((result.stdout + result.stderr).splitlines()[-lines:])


def _words(text: str) -> list:
    words = shlex.split(text, comments=True)
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):  # VAR=value prefixes
        words.pop(0)
    return words


_HELP: dict = {}


def check_help(text: str, folder, env) -> None:
    """The command's program (and subcommand) answers --help and lists every option the command uses."""
    words = _words(text)
    if words[0] == "python":
        program = words[:2]
    elif words[0] == "wildmerge":
        program = words[:3] if words[1] in ("analyze", "demo") else words[:2]
    else:
        program = words[:1]
    key = tuple(program)
    if key not in _HELP:
        result = subprocess.run([*program, "--help"], cwd=folder, env=env, capture_output=True, text=True,
                                timeout=300)
        assert result.returncode == 0, f"{' '.join(program)} --help failed:\n{_tail(result)}"
        _HELP[key] = result.stdout
    options = {w.split("=")[0] for w in words if w.startswith("--")}
    missing = sorted(o for o in options if not re.search(rf"{re.escape(o)}(?![\w-])", _HELP[key]))
    assert not missing, f"{' '.join(program)} --help does not list {missing}"


def check_setup(text: str) -> None:
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    words = _words(text)
    if words[0] == "make":
        result = subprocess.run(["make", "-n", *words[1:]], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert result.returncode == 0, f"make -n {' '.join(words[1:])} failed:\n{_tail(result)}"
    elif words[0] in (".", "source"):
        venv = words[1].removesuffix("/bin/activate")
        plan = subprocess.run(["make", "-n", "-B", "setup"], cwd=REPO, capture_output=True, text=True, timeout=60)
        assert f"-m venv {venv}" in plan.stdout, f"`make setup` does not create {venv}:\n{plan.stdout}"
    else:
        raise AssertionError(f"a setup block holds make commands and the venv's activation, not {text!r}")


def check_console(command: Command, result) -> None:
    shown = " ".join(command.output)
    printed = " ".join((result.stdout + result.stderr).split())
    position = 0
    for fragment in (" ".join(f.split()) for f in shown.split("...")):
        found = printed.find(fragment, position)
        assert found >= 0, f"{fragment!r} is not in the output:\n{_tail(result)}"
        position = found + len(fragment)
    fails = "error:" in shown
    assert (result.returncode != 0) == fails, f"exit {result.returncode}, expected {'failure' if fails else 0}"


# --- the checks ------------------------------------------------------------------------------------------------

def test_every_block_has_a_known_marker():
    for page in PAGES:
        for line, lang, marker, _ in fenced_blocks(page):
            if lang in ("bash", "sh", "console"):
                assert marker in MARKERS, f"{page.name}:{line}: unknown marker {marker!r}; use one of {MARKERS}"
            if lang == "python":
                assert not marker, f"{page.name}:{line}: a python block runs as written; it takes no marker"


def test_known_failures_are_documented_commands():
    texts = {c.text for c in DOCUMENTED}
    assert not set(KNOWN_FAILURES) - texts, "KNOWN_FAILURES names commands the docs no longer show"


def _slug(heading: str) -> str:
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set:
    seen, out = {}, set()
    in_fence = False
    for line in path.read_text().splitlines():
        in_fence = in_fence != line.startswith("```")
        match = re.match(r"^#{1,6} (.+)$", line)
        if match and not in_fence:
            slug = _slug(match.group(1))
            out.add(slug if slug not in seen else f"{slug}-{seen[slug]}")
            seen[slug] = seen.get(slug, 0) + 1
    return out


def test_links_between_pages_resolve():
    broken = []
    for page in ALL_MARKDOWN:
        for target in re.findall(r"\]\(([^)\s]+)\)", page.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            file, _, anchor = target.partition("#")
            path = (page.parent / file).resolve() if file else page
            if not path.exists():
                broken.append(f"{page.name}: {target} (no such file)")
            elif anchor and path.suffix == ".md" and anchor not in _anchors(path):
                broken.append(f"{page.name}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_papers_are_named_not_numbered():
    for page in ALL_MARKDOWN:
        assert not re.search(r"seed 00\d", page.read_text()), f"{page.name} names a paper by an internal code name"


def test_readme_stays_short():
    lines = len((REPO / "README.md").read_text().splitlines())
    assert lines <= 350, f"README.md has {lines} lines; move details to a page of docs/"


def test_every_benchmark_and_script_is_listed():
    listed = (REPO / "benchmarks" / "README.md").read_text()
    scripts = [*(REPO / "benchmarks").glob("*.py"), *(REPO / "scripts").glob("*.py"), *(REPO / "scripts").glob("*.sh")]
    missing = [p.name for p in scripts if p.name not in listed]
    assert not missing, f"benchmarks/README.md does not list {missing}"


@pytest.mark.parametrize("command", list(_params()))
def test_documented_command(command, reader):
    folder, env, pool = reader
    if command.marker == "setup":
        return check_setup(command.text)
    if command.marker in ("gpu", "cluster", "slow"):
        return check_help(command.text, folder, env)
    if command.marker == "hub":
        if not SAMPLE.search(command.text):
            return check_help(command.text, folder, env)
        text = command.text if "--dry-run" in command.text else SAMPLE.sub(r"\g<1> --dry-run", command.text, count=1)
        result = shell(text, folder, env, timeout=300)
        assert result.returncode == 0 and "dry run:" in result.stdout, f"{text}\n{_tail(result)}"
        return
    if command.lang == "python":
        result = shell(f"python -c {shlex.quote(command.text)}", folder, env)
        assert result.returncode == 0, f"{command.id}: the python block (exit {result.returncode}):\n{_tail(result)}"
        return
    result = shell(on_quick_family(command.text, pool), folder, env)
    if command.lang == "console":
        return check_console(command, result)
    assert result.returncode == 0, f"{command.text} (exit {result.returncode}):\n{_tail(result)}"
