"""Activation profiles kept: shipped with the package for the checked shapes
(``placement_edu/data/profiles``), and cached in ``$XDG_CACHE_HOME/placement_edu/profiles`` (default
``~/.cache/...``) once measured, each under a key naming the model's shape less its depth (a
profile is per block, measured on a two-block copy: any depth shares it), an HF config's contents
(wherever the file lies), b, s, the compute dtype, attention, recomputation, torch's version and the
source of the measuring code. Reading and writing them imports no torch: measuring one is the
runtime's (``placement_edu.runtime.measurement.profiles.get_profile``).
``PLACEMENT_EDU_NO_CACHE=1`` reads none (every profile is measured).
"""

from __future__ import annotations

import ast
import hashlib
from functools import lru_cache
import json
import os
from dataclasses import asdict, replace
from importlib.metadata import version
from pathlib import Path
from typing import Iterable

from placement_edu.architectures import REFERENCE_SEQ
from placement_edu.peak import ActivationProfile
from placement_edu.step_case import StepCase


#: Profiles of the reference models at the shapes issue 22 checks, measured and shipped with the
#: package (``python -m placement_edu.runtime.measurement.profiles`` writes them; a test checks
#: they equal a fresh measurement).
SHIPPED = Path(__file__).resolve().parent / "data" / "profiles"
#: (model, seq, compute, attention) of the shipped profiles, b = 1, no recomputation: fp32 and bf16
#: with eager attention (the trackers' tests), and bf16 with SDPA (``fit``'s defaults).
SHIPPED_CASES = tuple(
    (m, s, c, a)
    for m, s in REFERENCE_SEQ.items()
    for c, a in (("fp32", "eager"), ("bf16", "eager"), ("bf16", "sdpa"))
)


def cache_dir() -> Path:
    return (
        Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        / "placement_edu"
        / "profiles"
    )


#: The code a profile comes from (read as text, never imported: the runtime measures): a change to
#: what it does (not to its comments, docstrings or layout: the key reads its syntax tree without
#: docstrings) measures again.
MEASURING_DIR = Path(__file__).resolve().parent / "runtime" / "measurement"
MEASURING = ("activation_profile.py", "reference_models.py", "hf_models.py")
_DOCUMENTED = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def code_key(texts: Iterable[str]) -> list[str]:
    """Each source text's syntax tree, dumped, less every module's, class's and function's
    docstring (its leading string constant): what the code does, not how it is explained."""
    trees = [ast.parse(text) for text in texts]
    for node in (n for tree in trees for n in ast.walk(tree)):
        if isinstance(node, _DOCUMENTED) and ast.get_docstring(node, clean=False) is not None:
            node.body = node.body[1:]
    return [ast.dump(tree) for tree in trees]


@lru_cache(maxsize=1)
def _torch_version() -> str:
    return version("torch")


@lru_cache(maxsize=4)
def _cached_code_key(texts: tuple[str, ...]) -> list[str]:
    """``code_key`` once per text (its syntax trees take ~80 ms: a planner asks for hundreds)."""
    return code_key(texts)


def profile_key(case: StepCase) -> str:
    """The name a profile is kept under (shipped or cached: ``{key}.json``): a hash of the model's
    two-block shape, an HF config's contents, b, s, the dtypes, attention, recomputation, torch's
    version and the measuring code (``code_key``). (Not the optimizer: it holds no activations.)"""
    arch = case.model
    source = Path(arch.config).read_text() if arch.config else ""  # an HF config: its contents too
    # ... and not where it lies (its path is its name): a copy elsewhere is the same model. The
    # shape is the two-block copy the profile measures: a model of any depth shares its profile.
    shape = arch.with_(layers=2, name="", config="") if arch.config else arch.with_(layers=2)
    code = _cached_code_key(tuple((MEASURING_DIR / n).read_text() for n in MEASURING))
    text = json.dumps(
        [
            asdict(shape),
            source,
            code,
            case.micro_batch,
            case.seq,
            case.compute,
            case.attention,
            case.recompute,
            _torch_version(),
        ],
        sort_keys=True,
    )
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def use_cache() -> bool:
    return os.environ.get("PLACEMENT_EDU_NO_CACHE") != "1"


def stored(case: StepCase) -> ActivationProfile | None:
    """The profile kept for that case (shipped, else cached), or None: none kept, or a damaged
    entry (measured again)."""
    name, arch = f"{profile_key(case)}.json", case.model
    for known in (SHIPPED / name, cache_dir() / name) if use_cache() else ():
        if known.is_file():
            try:
                kept = ActivationProfile.from_dict(json.loads(known.read_text()))
                # (named by this model: an HF config's may be a copy's, measured at another path)
                return replace(kept, model=arch.name or arch.kind)
            except (ValueError, TypeError, KeyError):
                pass
    return None


def keep(profile: ActivationProfile, case: StepCase) -> None:
    """Write a measured profile to the cache (nothing where the cache is off or read-only)."""
    if not use_cache():
        return
    path = cache_dir() / f"{profile_key(case)}.json"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps(profile.to_dict()))
        tmp.replace(path)
    except OSError:
        pass  # a read-only home still answers
