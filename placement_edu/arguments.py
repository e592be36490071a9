"""Command-line plumbing shared by ``placement-edu`` (placement_edu.cli) and the torchrun worker
(placement_edu.runtime.args): a parser whose errors are one line, and number flags read exactly.

Torch-free and presentation-free, so both the CLI and the runtime may import it.
"""

from __future__ import annotations

import argparse
import re
import sys
from typing import Any, Callable, Mapping, NoReturn, Sequence, TypeVar

from placement_edu.errors import PlacementError, read_seconds, shortened

T = TypeVar("T")

#: What argparse must take as a (negative) value rather than an option: "-5", "-1.5", "-1e400",
#: "-inf", "-nan". argparse's own pattern knows only "-5" and "-.5", so "--params -inf" would read
#: as a missing value instead of reaching the number reader and its teaching message.
NEGATIVE_NUMBER = re.compile(
    r"^-(?:\d[\d_]*\.?\d*|\.\d+)(?:e[-+]?\d+)?$|^-(?:inf|infinity|nan)$", re.IGNORECASE
)


def described(docstring: str) -> str:
    """A module docstring's first paragraph as ``--help`` prints it: one plain line without RST
    markup (``placement-edu run --help`` shows placement-edu run ..., not double backquotes)."""
    paragraph = docstring.strip().split("\n\n")[0]
    return " ".join(paragraph.replace("``", "").split())


def command(
    sub: argparse._SubParsersAction, name: str, help: str, docstring: str
) -> argparse.ArgumentParser:
    """Subcommand ``name``'s parser: ``help`` is its line in ``placement-edu --help``, and its own
    ``--help`` describes it by its module's docstring (``described``)."""
    return sub.add_parser(name, help=help, description=described(docstring))


def add_timeout_flag(p: argparse.ArgumentParser, ends: str) -> None:
    """--timeout S: how long a collective may wait for the other ranks before ``ends`` (``run``,
    ``torch-ref``, ``calibrate``); 60 s unless given."""
    p.add_argument(
        "--timeout",
        type=flag_type(read_seconds),
        default=60.0,
        help=f"seconds a collective may wait before {ends} (default 60)",
    )


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a usage error is one line on stderr and exit status 2 -- never a traceback."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = NEGATIVE_NUMBER

    def error(self, message: str) -> NoReturn:  # type: ignore[override]
        line = shortened(" ".join(message.split()))  # argparse echoes a bad choice whole
        print(f"{self.prog.split()[0]}: error: {line}", file=sys.stderr)
        raise SystemExit(2)


def flag_type(read: Callable[..., T], *args: object) -> Callable[[str], T]:
    """An argparse ``type=``: ``read(text, *args)``, its PlacementError shown as argparse's own
    one-line "argument --flag: ..." error (argparse hides any other message behind "invalid
    value")."""

    def parse(text: str) -> T:
        try:
            return read(text, *args)
        except PlacementError as error:
            raise argparse.ArgumentTypeError(str(error)) from None

    parse.__name__ = getattr(read, "__name__", "value")
    return parse


def named(
    accepted: Sequence[str], what: str, own: Mapping[str, str] | None = None
) -> Callable[[str], str]:
    """An argparse ``type=`` for a name of ``accepted``: one vocabulary across the commands
    (``setting.ALIASES``: fit's fsdp2 is time's zero3, sdpa is flash), a near miss named ("did you
    mean"), given as ``own`` maps it (the command's own word for the thing, if it has one)."""
    from placement_edu.setting import canonical

    def parse(text: str) -> str:
        try:
            name = canonical(text, accepted, what)
        except PlacementError as error:
            raise argparse.ArgumentTypeError(str(error)) from None
        return (own or {}).get(name, name)

    parse.__name__ = what
    return parse


def listed(accepted: Sequence[str]) -> str:
    """The canonical names as --help lists them, each with its aliases: "zero3 (alias fsdp2),
    fsdp_grad_op (alias fsdp2_no_reshard)"."""
    from placement_edu.setting import ALIASES

    def one(name: str) -> str:
        aliases = [a for a, c in ALIASES.items() if c == name]
        return f"{name} (alias {', '.join(aliases)})" if aliases else name

    return ", ".join(map(one, accepted))


def model_name(text: str) -> str:
    """--model's reader: a reference model's name or an HF config's path, as typed, once
    ``architectures.get_architecture`` has read it (a bad name, an unreadable config: one line)."""
    from placement_edu.architectures import get_architecture

    get_architecture(text)
    return text
