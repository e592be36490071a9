"""The fit explorer: will one rank's step fit, as b, s, recomputation, N and precision move?

Issue 22 (notebooks 05 and 09). Every byte is ``fit_peak``'s (``placement_edu.peak.derive``, what
``placement-edu fit --json`` prints); ``fit_chart`` draws it. A profile not yet read is measured
once under ``FakeTensorMode`` (a few seconds; the status line says so) and kept.
"""

from __future__ import annotations

import html
import time
from typing import Any

from placement_edu.peak import PRECISIONS, StepPeak, breakdown, fsdp2_applies
from placement_edu.presentation.controls import choice_slider, toggles
from placement_edu.presentation.fit_answers import (
    SEQ_CHOICES,
    default_seq,
    fit_peak,
    is_known,
    was_cached,
)
from placement_edu.presentation.fit_chart import event_chart, readout_html
from placement_edu.presentation.explorer import Explorer

#: The widget's models: their profiles ship with the package (b = 1 at the default s) or are
#: measured in a few seconds (Llama-3-8B is left out: its tracker run is not for a 2 GiB notebook).
MODELS = ("gpt2", "llama-1b")
MICRO_BATCH_CHOICES = (1, 2, 4, 8)
DEVICE_CHOICES = (1, 2, 8, 64, 1024)
RECOMPUTE_CHOICES = ("none", "full")


class FitExplorer(Explorer):
    """Controls: model (gpt2, llama-1b), micro-batch b, sequence s, recomputation (none, full),
    devices N, precision. Shows rank 0's breakdown -- params, grads, optimizer, activations, each
    transient at the peak -- the peak and the event where it happens, and the live set at every
    event of the step."""

    def __init__(
        self,
        model: str = "gpt2",
        micro_batch: int = 1,
        seq: int | None = None,
        recompute: str = "none",
        devices: int = 8,
        precision: str = "fp32",
    ) -> None:
        import ipywidgets as w

        self.model = toggles(MODELS, model, "model")
        self.micro_batch = choice_slider(MICRO_BATCH_CHOICES, micro_batch, "b (micro-batch)")
        self.seq = choice_slider(SEQ_CHOICES[model], seq or default_seq(model), "s (sequence)")
        self.recompute = toggles(RECOMPUTE_CHOICES, recompute, "recompute")
        self.devices = choice_slider(DEVICE_CHOICES, devices, "N (devices)")
        self.precision = toggles(PRECISIONS, precision, "precision")
        self.status = w.HTML()
        self.peak: StepPeak | None = None
        self._quiet = False
        self.assemble(
            [self.model, self.recompute],
            [self.devices, self.micro_batch, self.seq],  # N first: cheap to move
            self.precision,
            below=[self.status],
            picture="live bytes at every event of the step",
        )

    def redraw(self, change: dict | None = None) -> None:
        """A new model starts at its checked sequence length (a shipped profile at b = 1)."""
        if change is not None and change["owner"] is self.model:
            self._quiet = True  # one update, after both changes: not one per intermediate value
            try:
                self.seq.options = SEQ_CHOICES[self.model.value]
                self.seq.value = default_seq(self.model.value)
            finally:
                self._quiet = False
        if not self._quiet:
            self.update()

    def case(self) -> dict[str, Any]:
        """What the controls mean, as ``fit_peak``'s arguments."""
        return dict(
            model=self.model.value,
            micro_batch=self.micro_batch.value,
            seq=self.seq.value,
            recompute=self.recompute.value,
            devices=self.devices.value,
            precision=self.precision.value,
        )

    def update(self) -> dict[str, Any]:
        """Read (or measure) the profile, derive the step, redraw; returns ``breakdown``'s dict."""
        case = self.case()
        profile = (
            case["model"],
            case["micro_batch"],
            case["seq"],
            PRECISIONS[case["precision"]].compute_name,
            case["recompute"],
        )
        known = is_known(*profile)
        if not known:
            self.status.value = (
                f"⏳ <b>measuring</b> the activation profile of {case['model']} at b = "
                f"{case['micro_batch']}, s = {case['seq']}, recompute {case['recompute']} "
                "under FakeTensorMode (no tensor memory; a few seconds, once)…"
            )
        self._busy(True)
        started = time.perf_counter()
        try:
            peak = fit_peak(**case)
        except Exception as error:  # shown in the widget, not raised
            self.status.value = f"<b>error</b>: {html.escape(str(error))}"
            return {}
        finally:
            self._busy(False)
        self.peak = peak
        seconds = time.perf_counter() - started
        self.status.value = (
            "profile: shipped with the package, or read before"
            if known
            else "profile read from the disk cache"
            if was_cached(*profile)
            else f"profile measured in {seconds:.1f} s (kept on disk and here)"
        )
        out = breakdown(peak)
        where = (
            f"FSDP2 on N = {case['devices']}, rank 0"
            if fsdp2_applies(case["devices"], case["precision"])
            else "one device"
        )
        title = (
            f"{case['model']}, b = {case['micro_batch']}, s = {case['seq']}, recompute "
            f"{case['recompute']}, {case['precision']}, {where}: the live set at each event"
        )
        self.image.value = event_chart(peak, title)
        self.readout.value = readout_html(out)
        return out

    def _busy(self, busy: bool) -> None:
        for control in self.controls:
            control.disabled = busy
