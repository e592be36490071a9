"""The memory ledger: bytes each rank holds, per training state, measured on the real tensors.

- Persistent bytes: at every phase boundary (end of forward, backward, optimizer step) the engine
  hands over the tensors that hold each state; the ledger sums the bytes of their distinct storages
  and keeps the maximum. Device and host pools are kept apart (offloaded state lives on the host;
  on a CPU-only machine both pools are CPU memory and the split is bookkeeping).
- Transient peaks, named as SPEC §3 names them: ``gather_window`` (a gathered SG buffer),
  ``reduce_bucket`` (a whole, unreduced gradient buffer before reduce-scatter), ``offload_staging``
  (a device buffer on its way to or from the host), and ``activations``.
- Activations through saved-tensor hooks: while a micro-batch's forward runs, every tensor autograd
  saves for backward is seen. Counted: tensors computed in forward (they have a ``grad_fn``), once
  per storage; not counted: parameters (their storages are registered) and inputs, targets and
  received boundary tensors (no ``grad_fn``). A micro-batch's bytes stay live until its backward
  ends, so the peak is the schedule's live set (GPipe: m micro-batches; 1F1B: at most p - stage).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterable, Iterator

import torch

from placement_edu.placement import MODEL_STATES, PHASES

STATES = tuple(s.value for s in MODEL_STATES)  # the model states by name, as the ledger keys them


def storage_bytes(tensors: Iterable[torch.Tensor | None]) -> int:
    """Bytes of the distinct storages behind ``tensors`` (views of one buffer count once)."""
    seen: dict[int, int] = {}
    for t in tensors:
        if t is not None:
            storage = t.untyped_storage()
            seen[storage.data_ptr()] = storage.nbytes()
    return sum(seen.values())


class MemoryLedger:
    def __init__(self) -> None:
        self.device = {s: 0 for s in STATES}
        self.host = {s: 0 for s in STATES}
        self.transient: dict[str, dict[str, int]] = {p: {} for p in PHASES}
        self.param_storages: set[int] = set()
        self._live: dict[int, int] = {}  # micro-batch -> activation bytes kept
        self.phase = "forward"

    def boundary(self, device: dict[str, list], host: dict[str, list] | None = None) -> None:
        """Record what each state holds now (call at the end of each phase)."""
        for state in STATES:
            self.device[state] = max(self.device[state], storage_bytes(device.get(state, [])))
            self.host[state] = max(self.host[state], storage_bytes((host or {}).get(state, [])))

    def peak(self, term: str, phase: str, nbytes: int) -> None:
        """A transient buffer of ``nbytes`` is live in ``phase``."""
        terms = self.transient[phase]
        terms[term] = max(terms.get(term, 0), nbytes)

    def parameters_live_in(self, *tensors: torch.Tensor) -> None:
        """Register storages that hold parameters, so saved views of them are not activations."""
        self.param_storages.update(t.untyped_storage().data_ptr() for t in tensors)

    @contextmanager
    def forward(self, micro_batch: int) -> Iterator[None]:
        """Count what autograd saves during this micro-batch's forward."""
        storages: dict[int, int] = {}

        def pack(t: torch.Tensor) -> torch.Tensor:
            ptr = t.untyped_storage().data_ptr()
            if t.grad_fn is not None and ptr not in self.param_storages:
                storages[ptr] = t.untyped_storage().nbytes()
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            yield
        self._live[micro_batch] = sum(storages.values())
        self._note_activations()

    def backward_done(self, micro_batch: int) -> None:
        """The micro-batch's backward has run: autograd has freed what it saved."""
        self._note_activations()
        self._live.pop(micro_batch, None)

    def _note_activations(self) -> None:
        live = sum(self._live.values())
        for phase in ("forward", "backward"):
            self.peak("activations", phase, live)

    def to_dict(self) -> dict:
        return {
            "device": dict(self.device),
            "host": dict(self.host),
            "transient": {p: dict(t) for p, t in self.transient.items()},
            "activations_peak": max(
                (t.get("activations", 0) for t in self.transient.values()), default=0
            ),
        }
