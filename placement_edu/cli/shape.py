"""The flags that describe a transformer and the hardware it is priced on, written once for the
commands that take them (``table``, ``plan``, ``time``): its shape (SPEC §3) or a real model's,
grouped-query attention, the attention implementation, the micro-batch, the devices, and the
hardware, overlap and precision of a step's time (SPEC §9)."""

from __future__ import annotations

import argparse

from typing import Callable, Iterable, TypeVar

from placement_edu.architectures import PRESETS as MODELS
from placement_edu.arguments import flag_type, listed, model_name, named
from placement_edu.errors import (
    MAX_COUNT,
    MAX_DEVICES,
    MAX_MICRO_BATCHES,
    MAX_PARAMS,
    PlacementError,
    read_int,
    show_limit,
    shown,
)
from placement_edu.models import Model, TransformerSpec
from placement_edu.precision import PRESETS, TRIPLE_FORM
from placement_edu.setting import ATTENTIONS
from placement_edu.timing import HARDWARE, OVERLAPS


#: The flags that shape a transformer, and the symbol each one sets (SPEC §3).
SHAPE = (("layers", "L"), ("hidden", "h"), ("heads", "a"), ("seq", "s"), ("vocab", "V"))


def count_flag(what: str, most: int = MAX_COUNT) -> Callable[[str], int]:
    """An argparse type for a whole count of ``what`` (layers, widths, sequences, devices): exact,
    1 to ``most`` (``errors.read_int``)."""
    return flag_type(read_int, what, most)


def add_choice_flag(
    p: argparse.ArgumentParser | argparse._ArgumentGroup,
    flag: str,
    choices: Iterable[str],
    default: str,
    what: str,
) -> None:
    """``flag``: one of ``choices``, ``default`` when left out; its help says ``what`` it is and
    the default, written once ("a hardware preset (default h100-nvlink-ib)")."""
    p.add_argument(flag, choices=list(choices), default=default, help=f"{what} (default {default})")


def add_devices_flag(p: argparse.ArgumentParser) -> None:
    """--devices N, required: the number of devices (``table``, ``plan``)."""
    p.add_argument(
        "--devices",
        type=count_flag("devices", MAX_DEVICES),
        required=True,
        help=f"N, the number of devices (at most {show_limit(MAX_DEVICES)})",
    )


def add_micro_batches_flag(p: argparse._ActionsContainer, help: str) -> None:
    """--micro-batches M: m, micro-batches per step (``table``, ``estimate``)."""
    p.add_argument(
        "--micro-batches",
        type=count_flag("micro-batches", MAX_MICRO_BATCHES),
        default=None,
        help=help,
    )


def add_global_batch_flag(p: argparse.ArgumentParser, note: str, required: bool = False) -> None:
    """--global-batch B: sequences per optimizer step (``plan``: a default; ``time``: required);
    ``note`` closes its help line."""
    p.add_argument(
        "--global-batch",
        type=count_flag("sequences"),
        required=required,
        help=f"sequences per optimizer step ({note})",
    )


def add_model_flag(group: argparse._ActionsContainer, instead: str, gives: str) -> None:
    """--model: a reference model's name (``architectures.PRESETS``) or an HF config's path, typed
    ``instead`` of the shape flags; ``gives`` says what the command takes from it (``table``,
    ``plan``, ``time``)."""
    group.add_argument(
        "--model",
        type=flag_type(model_name),
        default=None,
        help=f"a real model ({', '.join(MODELS)}, or PATH/config.json) instead of {instead}: "
        + gives,
    )


def read_number(
    text: str, low: float, high: float, accepted: str, high_included: bool = True
) -> float:
    """A flag's number from ``low`` to ``high`` (``high`` itself only if ``high_included``), or one
    line naming the value and ``accepted`` (what the flag takes)."""
    try:
        value = float(text)
    except ValueError:
        raise PlacementError(f"{shown(text)} is not a number; {accepted}") from None
    if not (low <= value <= high and (high_included or value < high)):  # nan fails too
        raise PlacementError(f"{shown(text)} is out of range; {accepted}")
    return value


def add_transformer_flags(
    group: argparse._ArgumentGroup, required: bool, shape_note: str = "", defaults: bool = True
) -> None:
    """--layers --hidden --heads --seq --vocab (``SHAPE``; ``required`` or not), --ffn, --kv-heads,
    --attention, --block and --micro-batch. ``shape_note`` is added to each shape flag's help.
    With ``defaults=False`` a flag left out is None, so that the command can tell it from one given
    (``table`` refuses the transformer flags beside --params)."""
    attention, block, micro_batch = ("eager", "gpt", 1) if defaults else (None, None, None)
    for flag, what in SHAPE:
        group.add_argument(
            f"--{flag}", type=count_flag(flag), required=required, help=what + shape_note
        )
    group.add_argument(
        "--ffn", type=count_flag("ffn units"), default=None, help="f, MLP width (default 4h)"
    )
    group.add_argument(
        "--kv-heads",
        type=count_flag("key-value heads"),
        default=None,
        help="K, key-value heads (grouped-query attention: K divides --heads; default --heads)",
    )
    group.add_argument(
        "--attention",
        type=named(ATTENTIONS, "attention"),
        default=attention,
        help=f"{listed(ATTENTIONS)}: eager keeps the 5as²b softmax and dropout bytes, flash "
        "only the logsumexp; default eager",
    )
    group.add_argument(
        "--block",
        choices=TransformerSpec.BLOCKS,
        default=block,
        help="gpt (learned positions, tied embeddings, biases, a 2-matrix MLP) or llama (RoPE, "
        "untied embeddings, no biases, RMSNorm, SwiGLU: --ffn is its width); default gpt",
    )
    group.add_argument(
        "--micro-batch",
        type=count_flag("sequences"),
        default=micro_batch,
        help="b, sequences per micro-batch per device (default 1)",
    )


def add_recompute_flags(group: argparse._ArgumentGroup) -> None:
    """--recompute (None when left out: none) and --sequence-parallel, as Korthikanti et al.'s
    activation formula takes them (``table``, ``estimate``)."""
    group.add_argument(
        "--recompute",
        choices=TransformerSpec.RECOMPUTE,
        default=None,
        help="activation recomputation (Korthikanti et al. 2022; default none)",
    )
    group.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="Megatron sequence parallelism on the tensor axis (model and strategies)",
    )


def add_step_flags(p: argparse.ArgumentParser) -> None:
    """--hardware, --overlap and --precision: what a step's time is priced with."""
    add_choice_flag(p, "--hardware", HARDWARE, "h100-nvlink-ib", "a hardware preset")
    add_choice_flag(p, "--overlap", OVERLAPS, "per_pass", "how communication hides under compute")
    add_precision_flag(p)


def add_precision_flag(p: argparse.ArgumentParser) -> None:
    """--precision: a preset's name or a custom triple (``table``, ``check``, and a step's
    time)."""
    p.add_argument(
        "--precision",
        default="mixed_adam",
        help=f"a preset: {', '.join(PRESETS)}; or a custom {TRIPLE_FORM}",
    )


def require_shape(args: argparse.Namespace, params_example: str) -> None:
    """Every shape flag (``SHAPE``) given, or one line: with none, give --params (e.g.
    ``params_example``) or a transformer; with some, the ones missing (``table``, ``plan``)."""
    missing = [f"--{k}" for k, _ in SHAPE if getattr(args, k) is None]
    if len(missing) == len(SHAPE):
        flags = " ".join(f"--{k}" for k, _ in SHAPE)
        raise PlacementError(f"give --params (e.g. {params_example}) or a transformer ({flags})")
    if missing:
        raise PlacementError(f"a transformer needs {', '.join(missing)} too")


def transformer_from_flags(args: argparse.Namespace) -> TransformerSpec:
    """The transformer ``add_transformer_flags``'s flags describe (every shape flag given), refused
    in one line above ``MAX_PARAMS`` parameters or where --kv-heads does not divide --heads."""
    kv_heads = args.heads if args.kv_heads is None else args.kv_heads
    if args.heads % kv_heads:
        raise PlacementError(
            f"--kv-heads {kv_heads} does not divide --heads {args.heads}; expected a divisor of "
            f"{args.heads}, because each key-value head serves --heads ÷ --kv-heads query heads"
        )
    model = TransformerSpec(
        micro_batch=args.micro_batch,
        ffn=args.ffn or 0,
        kv_heads=kv_heads,
        attention=args.attention,
        block=args.block,
        **{k: getattr(args, k) for k, _ in SHAPE},
    )
    return within_max_params(model, "transformer", "--layers, --hidden, --ffn or --vocab")


M = TypeVar("M", bound=Model)


def within_max_params(model: M, what: str, smaller: str) -> M:
    """``model``, or one line refusing it above ``MAX_PARAMS`` parameters and naming the flags
    (``smaller``) that would shrink it."""
    if model.psi > MAX_PARAMS:
        raise PlacementError(
            f"this {what} has {model.psi:,} parameters, more than {show_limit(MAX_PARAMS)}; "
            f"give smaller {smaller}"
        )
    return model
