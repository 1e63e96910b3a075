"""Record the published families: build (or reuse) the default families and write the SHA-256 of every file to
``wildmerge/families/<family>/published.json``, the record every later build is compared with.

Run it with the locked versions (``make setup``) and the default kernels, after a builder change:

    python scripts/record_published_families.py --family demo --sizes quick full
"""

import argparse
import json
from pathlib import Path

from wildmerge.atomic import write_text
from wildmerge.families import kernels, published


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--family", choices=("demo", "smollm2"), required=True)
    ap.add_argument("--sizes", nargs="+", choices=("quick", "full"), default=["quick", "full"])
    args = ap.parse_args()
    if args.family == "demo":
        from wildmerge.families.demo.family import FAMILY, ensure_family
    else:
        from wildmerge.families.smollm2.family import FAMILY, ensure_family
    if kernels.level(FAMILY.env) != kernels.PUBLISHED:
        raise SystemExit(f"record the published family with the {kernels.PUBLISHED} kernels (unset {FAMILY.env}_KERNELS)")
    path = published.HERE / args.family / "published.json"
    records = published.records(args.family)
    for size in args.sizes:
        info = ensure_family(quick=size == "quick")
        manifest = json.loads(Path(info["manifest"]).read_text())
        records[Path(info["root"]).name] = published.record_of(manifest)
        print(f"{Path(info['root']).name}: {len(manifest['files'])} files")
    write_text(path, json.dumps(dict(sorted(records.items())), indent=1, sort_keys=True) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
