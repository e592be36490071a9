"""One error type for bad input, so the CLI and notebooks can show a one-line, teaching message."""

from __future__ import annotations


class PlacementError(ValueError):
    """Bad input to placement_edu: the message names the bad value and what is accepted."""


def expect(condition: bool, message: str) -> None:
    """Raise PlacementError(message) unless condition holds."""
    if not condition:
        raise PlacementError(message)


def positive_int(name: str, value: object) -> int:
    """Return value as an int if it is a whole number >= 1, else raise a PlacementError naming it."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise PlacementError(f"{name} must be a whole number >= 1, got {value!r}")
    if value != int(value) or value < 1:
        raise PlacementError(f"{name} must be a whole number >= 1, got {value!r}")
    return int(value)


class context:
    """Add the outer context -- what was being derived -- to a PlacementError, once, at the API
    boundary: ``with context(f"deriving {name} ({placement}) on {mesh}"): ...``."""

    def __init__(self, what: str) -> None:
        self.what = what

    def __enter__(self) -> "context":
        return self

    def __exit__(self, kind, error, traceback) -> bool:
        if isinstance(error, PlacementError) and not getattr(error, "in_context", False):
            wrapped = PlacementError(f"{self.what}: {error}")
            wrapped.in_context = True  # type: ignore[attr-defined]
            raise wrapped from None
        return False
