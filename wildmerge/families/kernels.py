"""The float rounding an embedded family is trained with: the same on every x86-64 machine with AVX2 by default.

Training amplifies every last-bit difference, so a family is only reproducible where every kernel it runs rounds
alike. Two things decide that on a CPU: ATen's vectorised kernels (torch picks AVX-512, AVX2 or scalar code for the
CPU it finds) and MKL's GEMM (it picks its own code path by CPU model and vendor). Measured on the quick demo family:
ATen AVX2 with MKL's AVX2 path built other weights on an AMD EPYC than on an Intel Xeon (base SHA-256 2724dd... here,
76a7e3... there), so MKL's AVX2 branch is vendor-specific; MKL's ``COMPATIBLE`` branch (SSE2 code that Intel
documents as giving the same results on Intel and compatible processors) gave the same bytes with 1 or 2 threads and
with MKL capped to SSE4.2 or AVX2. The default level ``avx2`` therefore pins ATen to AVX2 and MKL to ``COMPATIBLE``.

Levels (``$<FAMILY>_KERNELS``, e.g. ``WILDMERGE_DEMO_KERNELS``): ``avx2`` (the default, the published families),
``default`` (ATen's scalar kernels, for x86-64 CPUs without AVX2: another family), ``native`` (this machine's own
kernels: fastest, reproducible on this machine only). ATen reads its level once, at start-up, so a pinned build runs
in a child process (``build``).
"""

import os
import platform
import sys

from wildmerge.errors import ConfigError, WildmergeError, did_you_mean

LEVELS = ("avx2", "default", "native")
PUBLISHED = "avx2"  # the level of the families whose checksums ship with wildmerge (families/published.py)
PINS = {"avx2": {"ATEN_CPU_CAPABILITY": "avx2", "MKL_CBWR": "COMPATIBLE"},
        "default": {"ATEN_CPU_CAPABILITY": "default", "MKL_CBWR": "COMPATIBLE"}}


def _x86() -> bool:
    return platform.machine().lower() in ("x86_64", "amd64")


def _has_avx2() -> bool:
    """The CPU's own AVX2 flag: torch's capability follows the calling process's ``ATEN_CPU_CAPABILITY``, not the CPU."""
    try:
        with open("/proc/cpuinfo") as f:
            return any(line.startswith("flags") and "avx2" in line.split() for line in f)
    except OSError:  # not Linux: what torch found
        import torch

        return torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")


def level(env: str) -> str:
    """The level asked in ``$<env>_KERNELS``, else the published one where this CPU runs it: ``default`` on x86-64
    CPUs without AVX2, ``native`` elsewhere (ARM: other kernels altogether, nothing to pin)."""
    variable = f"{env}_KERNELS"
    asked = os.environ.get(variable, "").strip().lower()
    if asked:
        if asked not in LEVELS:
            raise ConfigError(f"{variable}={asked!r}{did_you_mean(asked, LEVELS)}; use one of {', '.join(LEVELS)} "
                              f"(unset: {PUBLISHED}, the published family)")
        if asked != "native" and not _x86():
            raise ConfigError(f"{variable}={asked} pins x86-64 kernels, but this machine is {platform.machine()}; "
                              "unset it (this machine builds with its native kernels)")
        if asked == "avx2" and not _has_avx2():
            raise ConfigError(f"{variable}=avx2, but this CPU has no AVX2; use default (ATen's scalar kernels)")
        return asked
    if not _x86():
        return "native"
    return PUBLISHED if _has_avx2() else "default"


def key_suffix(chosen: str) -> str:
    """The cache key's suffix: none for the published level, ``-default`` / ``-native`` for the others."""
    return "" if chosen == PUBLISHED else f"-{chosen}"


def other_family_note(label: str, chosen: str) -> str | None:
    """One line for a build that cannot be the published family, or None."""
    if chosen == PUBLISHED:
        return None
    why = {"native": "with this machine's native kernels",
           "default": "with ATen's scalar kernels (this CPU has no AVX2)" if _x86() and not _has_avx2()
           else "with ATen's scalar kernels"}[chosen]
    machine = "" if _x86() else f" on {platform.machine()}"
    return (f"wildmerge {label}: building{machine} {why}: another family than the published one (whose checksums and "
            f"numbers come from ATen AVX2 + MKL COMPATIBLE kernels on x86-64), so its weights and scores differ from "
            f"the docs'")


def build(label: str, env: str, module: str, args: list, in_process) -> None:
    """Build a family at the level ``$<env>_KERNELS`` asks for: pinned, as ``python -m module *args`` in a child
    process that dies with this one (its ``__main__`` reads the level from ``$<env>_KERNELS``); native, here, by
    ``in_process(level)``. A build that cannot be the published family says so first."""
    from wildmerge import lifeline

    chosen, variable = level(env), f"{env}_KERNELS"
    note = other_family_note(label, chosen)
    if note:
        print(note, flush=True)
    if chosen == "native":
        in_process(chosen)
        return
    child_env = {**os.environ, **PINS[chosen], variable: chosen}
    if lifeline.run([sys.executable, "-m", module, *map(str, args)], env=child_env) != 0:
        raise WildmergeError(f"building with {variable}={chosen} failed (see above)")


def record(chosen: str) -> dict:
    """What a build ran with, for ``family.json``; in a pinned child, checks that the pins took effect."""
    import torch

    aten = torch.backends.cpu.get_cpu_capability()
    if chosen in PINS:
        want = PINS[chosen]["ATEN_CPU_CAPABILITY"].upper()
        if aten.upper() != want or os.environ.get("MKL_CBWR") != PINS[chosen]["MKL_CBWR"]:
            raise WildmergeError(f"kernels {chosen} asked, but torch runs {aten} with MKL_CBWR="
                                 f"{os.environ.get('MKL_CBWR')}: start the build through the family's cache")
    return {"level": chosen, "aten": aten, "mkl_cbwr": os.environ.get("MKL_CBWR")}
