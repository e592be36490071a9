"""Keep the activation profiles the suite measured as ``tests/profiles`` (``conftest.py`` seeds a
fresh clone's cache with them): ``python -m tests.seed_profiles`` after a full run copies every
profile in the cache that the package does not ship, and drops the kept ones no longer in it."""

from __future__ import annotations

import shutil
from pathlib import Path

from placement_edu.profile_store import SHIPPED, cache_dir

KEPT = Path(__file__).parent / "profiles"


def main() -> None:
    KEPT.mkdir(exist_ok=True)
    measured = {p.name: p for p in cache_dir().glob("*.json") if not (SHIPPED / p.name).exists()}
    for old in KEPT.glob("*.json"):
        if old.name not in measured:
            old.unlink()
    for name, path in measured.items():
        shutil.copyfile(path, KEPT / name)
    print(f"{len(measured)} profiles kept in {KEPT}")


if __name__ == "__main__":
    main()
