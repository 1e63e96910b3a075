"""Numbers people give (options, settings): one rule and one message per kind of number.

The command line's argparse types (``commands/options.py``) and the library's own checks use the same ``Range``,
so a bad value reads the same wherever it is caught: ``--budget: expected a number >= 2, got nan`` (argparse
prefixes its ``argument``). NaN and the
infinities are refused by every range.
"""

import math
from dataclasses import dataclass
from typing import Optional, Union

from wildmerge.errors import ConfigError

Number = Union[int, float]


@dataclass(frozen=True)
class Range:
    """The accepted numbers: whole or not, between optional bounds (open or closed), always finite."""

    integer: bool = False
    low: Optional[float] = None
    high: Optional[float] = None
    low_open: bool = False  # low itself refused
    high_open: bool = False

    def describe(self) -> str:
        kind = "a whole number" if self.integer else "a number"
        lo, hi = _g(self.low), _g(self.high)
        if self.low is not None and self.high is not None:
            if self.low_open and self.high_open:
                return f"{kind} strictly between {lo} and {hi}"
            if not self.low_open and not self.high_open:
                return f"{kind} from {lo} to {hi}"
            return f"{kind} {'>' if self.low_open else '>='} {lo} and {'<' if self.high_open else '<='} {hi}"
        if self.low is not None:
            return f"{kind} {'>' if self.low_open else '>='} {lo}"
        if self.high is not None:
            return f"{kind} {'<' if self.high_open else '<='} {hi}"
        return f"a finite {kind.split()[-1]}" if not self.integer else kind

    def problem(self, value) -> Optional[str]:
        """Why ``value`` (a number or its text) is refused, or None when it is accepted."""
        try:
            number = self._number(value)
        except (TypeError, ValueError):
            return f"expected {self.describe()}, got {_text(value)}"
        if not self._inside(number):
            return f"expected {self.describe()}, got {_text(value)}"
        return None

    def parse(self, text) -> Number:
        """The number in ``text``; a ``ValueError`` with the one message when it is refused."""
        problem = self.problem(text)
        if problem:
            raise ValueError(problem)
        return self._number(text)

    def check(self, name: str, value) -> Number:
        """``value`` as given to the library: a ``ConfigError`` naming ``name`` (a flag, a setting) when refused."""
        problem = self.problem(value)
        if problem:
            raise ConfigError(f"{name}: {problem}")
        return value

    def _number(self, value) -> Number:
        if isinstance(value, bool):
            raise TypeError(value)
        if self.integer:
            if isinstance(value, float):
                if not value.is_integer():
                    raise ValueError(value)
                return int(value)
            return int(value)  # text or int: '1.5' and 'nan' raise ValueError
        return float(value)

    def _inside(self, number: Number) -> bool:
        if isinstance(number, float) and not math.isfinite(number):
            return False
        if self.low is not None and (number < self.low or (self.low_open and number == self.low)):
            return False
        if self.high is not None and (number > self.high or (self.high_open and number == self.high)):
            return False
        return True


def _g(bound) -> str:
    return f"{bound:g}" if isinstance(bound, float) else str(bound)


def _text(value) -> str:
    """The value as given, the same for its text and its number: ``got nan`` on the command line and in the library."""
    return str(value).strip() if isinstance(value, str) else f"{value!r}"


POSITIVE_INT = Range(integer=True, low=1)
NONNEGATIVE_INT = Range(integer=True, low=0)
ANY_INT = Range(integer=True)
POSITIVE_FLOAT = Range(low=0, low_open=True)
NONNEGATIVE_FLOAT = Range(low=0)
FINITE_FLOAT = Range()
FRACTION = Range(low=0, high=1)  # 0..1, both ends allowed
OPEN_FRACTION = Range(low=0, high=1, low_open=True, high_open=True)  # strictly between 0 and 1


def int_at_least(n: int) -> Range:
    return Range(integer=True, low=n)


def float_at_least(n: float) -> Range:
    return Range(low=n)


def float_above(n: float) -> Range:
    return Range(low=n, low_open=True)
