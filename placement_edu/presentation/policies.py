"""Recomputation policies as trainers ship them, measured on one block of a real module (issue 39,
item 7): what each keeps for backward, beside Korthikanti's Table 2 where it names the policy.

``policy_table(models)`` profiles each model's block under every policy of ``peak.RECOMPUTE``
(``runtime.profiles``: under ``FakeTensorMode``, cached) and ``PolicyTable`` prints it. torchtitan's
``layer:K`` is not a block's policy but a pattern of blocks: every K-th block as ``full``, the
others as ``none``; its average per block is shown for K = 2.
"""

from __future__ import annotations

from dataclasses import dataclass
from fractions import Fraction

from placement_edu.architectures import REFERENCE_SEQ, get_architecture
from placement_edu.cli.one_peak import transformer_of
from placement_edu.peak import RECOMPUTE
from placement_edu.units import fmt_bytes
from placement_edu.shown import Shown

#: Who ships each policy (the first words of ``peak.RECOMPUTE``'s descriptions say what it keeps).
SHIPPED_BY = {
    "none": "no checkpointing",
    "selective": "every matmul saved (this package's)",
    "megatron-selective": "Megatron-LM --recompute-granularity selective",
    "torchtitan-op": "torchtitan selective_ac_option = 'op'",
    "full": "torchtitan, Megatron full; HF gradient checkpointing",
}
#: Table 2's name for the policy, where it has one.
TABLE_2 = {"none": "none", "megatron-selective": "selective", "full": "full"}


@dataclass(frozen=True)
class PolicyTable(Shown):
    """Bytes one block keeps under each policy, per model (measured, fp32, eager attention, b = 1,
    each model at its reference s), and Megatron's model's bytes a layer (Korthikanti et al. 2022,
    Table 2, in 16 bits; a Llama block for Llama) where it names the policy."""

    models: tuple[str, ...]
    kept: dict[str, dict[str, int]]  # policy -> model -> bytes
    formula: dict[str, dict[str, Fraction]]  # policy -> model -> Table 2's bytes (16-bit)
    units: dict[str, int]  # model -> bytes of one [b, s, h] fp32 tensor
    seq: dict[str, int]  # model -> s

    def layer_k(self, model: str, k: int = 2) -> Fraction:
        """torchtitan's layer:K, bytes a block on average: one block in K as ``full``."""
        none, full = self.kept["none"][model], self.kept["full"][model]
        return Fraction(none * (k - 1) + full, k)

    def __str__(self) -> str:
        lines = [f"  {p:20}{who}" for p, who in SHIPPED_BY.items()]
        lines.append(f"  {'layer:2':20}torchtitan selective_ac_option = '2': every 2nd block full")
        for m in self.models:
            lines += [
                "",
                f"{m}: what one block keeps (fp32, eager attention, b = 1, s = {self.seq[m]})",
            ]
            rows = [(p, Fraction(self.kept[p][m])) for p in RECOMPUTE]
            rows.append(("layer:2", self.layer_k(m)))  # (the average of its blocks)
            for policy, kept in rows:
                table_2 = (
                    f"   Table 2: {fmt_bytes(self.formula[policy][m])}" if policy in TABLE_2 else ""
                )
                units = float(kept / self.units[m])
                lines.append(
                    f"  {policy:20}{fmt_bytes(round(kept)):>24} {units:5.1f} × [b, s, h]{table_2}"
                )
        return "\n".join(lines)


def policy_table(models: tuple[str, ...] = ("gpt2", "llama-1b")) -> PolicyTable:
    """Profile one block of each model under every policy (measured once, then cached)."""
    from placement_edu.runtime.measurement.profiles import StepCase, get_profile

    kept: dict[str, dict[str, int]] = {p: {} for p in RECOMPUTE}
    formula: dict[str, dict[str, Fraction]] = {p: {} for p in TABLE_2}
    units, seqs = {}, {}
    for model in models:
        arch, seq = get_architecture(model), REFERENCE_SEQ[model]
        units[model], seqs[model] = seq * arch.hidden * 4, seq
        for policy in RECOMPUTE:
            kept[policy][model] = get_profile(StepCase.of(model, 1, seq, "fp32", "eager", policy))[
                0
            ].block
        for policy, name in TABLE_2.items():
            spec = transformer_of(arch, seq, recompute=name)
            formula[policy][model] = spec.activation_bytes_per_layer()
    return PolicyTable(models, kept, formula, units, seqs)
