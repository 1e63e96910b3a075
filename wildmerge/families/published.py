"""The published families: the SHA-256 of every file of the default builds, shipped with wildmerge.

The README's and the docs' numbers come from these files. After every build the family is compared with its
published record (``<family>/published.json``, keyed by cache key); a build that differs says so in one line, naming
the component that differs (kernels, library versions) and what to do. ``scripts/record_published_families.py``
writes the records.
"""

import json
from pathlib import Path

HERE = Path(__file__).parent
# the versions that decide a family's bytes, besides the kernels (families/cache.build_record records them)
DECISIVE = ("torch", "transformers", "tokenizers", "safetensors", "numpy", "wildmerge")


def records(label: str) -> dict:
    path = HERE / label / "published.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def record_of(manifest: dict) -> dict:
    """What a published record holds of a ``family.json``."""
    return {"kernels": manifest.get("kernels"), "versions": manifest.get("versions"), "files": manifest["files"]}


def compare(label: str, key: str, manifest: dict) -> str | None:
    """One line on a fresh build (``manifest``: its ``family.json``) against its published record: that it is the
    published family, or how many files differ, which components differ and what to do; None without a record."""
    published = records(label).get(key)
    if published is None:
        return None
    want, have = published["files"], manifest["files"]
    differ = sorted(rel for rel in set(want) | set(have) if want.get(rel) != have.get(rel))
    if not differ:
        return f"wildmerge {label}: {key} is the published family (all {len(want)} files match their SHA-256)"
    causes = []
    kernels, want_kernels = manifest.get("kernels") or {}, published.get("kernels") or {}
    if (kernels.get("aten"), kernels.get("mkl_cbwr")) != (want_kernels.get("aten"), want_kernels.get("mkl_cbwr")):
        causes.append(f"kernels ATen {kernels.get('aten')} / MKL_CBWR {kernels.get('mkl_cbwr')} here, "
                      f"{want_kernels.get('aten')} / {want_kernels.get('mkl_cbwr')} published")
    versions, want_versions = manifest.get("versions") or {}, published.get("versions") or {}
    causes += [f"{name} {versions.get(name)} here, {want_versions.get(name)} published" for name in DECISIVE
               if versions.get(name) != want_versions.get(name)]
    if causes:
        todo = "set up with the locked versions (make setup) and the default kernels to build the published family"
    else:
        causes = ["the same versions and kernels: a host difference not known yet"]
        todo = f"please report it with {key}/family.json"
    shown = ", ".join(differ[:3]) + (", ..." if len(differ) > 3 else "")
    return (f"wildmerge {label}: this build is not the published family {key}: {len(differ)} of {len(want)} files "
            f"differ ({shown}); {'; '.join(causes)}; {todo}")
