"""The family cache writes a family's derived files once per process (every reference of a pool resolves through
``families.cache.ensure``: 13 times for the demo pool), and again whenever they are gone or the family was rebuilt."""

import json

from wildmerge.families import cache as C


def _family_and_ensure(tmp_path):
    family = C.CachedFamily(label="fam", title="Fam", env="WILDMERGE_TEST_FAM")
    written = []

    def build(tmp, seed, quick):
        (tmp / C.MANIFEST).write_text(json.dumps({"seed": seed}))
        (tmp / "weights.bin").write_bytes(b"w")

    def write_derived(root, info):
        written.append(root)
        (root / "pool.yml").write_text("name: fam\n")

    def ensure(rebuild=False):
        return C.ensure(family, tmp_path / "cache", 0, False, family_key=lambda s, q: f"seed{s}",
                        check=lambda root: None if (root / C.MANIFEST).is_file() else "absent", build=build,
                        describe=lambda root, m: {"root": root, "pool_file": str(root / "pool.yml")},
                        write_derived=write_derived, rebuild=rebuild)

    return family, ensure, written


def test_derived_files_are_written_once_per_process(tmp_path):
    family, ensure, written = _family_and_ensure(tmp_path)
    info = ensure()
    for _ in range(12):
        assert ensure() == info
    assert len(written) == 1
    (tmp_path / "cache" / "seed0" / "pool.yml").unlink()  # the derived files gone: written again
    ensure()
    assert len(written) == 2 and (tmp_path / "cache" / "seed0" / "pool.yml").is_file()
    ensure(rebuild=True)  # a rebuilt family gets its derived files again
    assert len(written) == 3
    family.derived.clear()  # another process (a fresh set) writes them once too
    ensure()
    ensure()
    assert len(written) == 4


def test_a_family_whose_description_names_no_pool_file_always_writes(tmp_path):
    family = C.CachedFamily(label="fam", title="Fam", env="WILDMERGE_TEST_FAM")
    calls = []

    def build(tmp, seed, quick):
        (tmp / C.MANIFEST).write_text(json.dumps({"seed": seed}))

    for _ in range(3):
        C.ensure(family, tmp_path / "cache", 0, False, family_key=lambda s, q: f"seed{s}",
                 check=lambda root: None if (root / C.MANIFEST).is_file() else "absent", build=build,
                 describe=lambda root, m: {"root": root},
                 write_derived=lambda root, info: calls.append(root))
    assert len(calls) == 3
