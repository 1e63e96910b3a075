"""The one exception type users see: a message that says what is wrong and how to fix it.

The CLI prints a ``WildmergeError`` without a traceback and exits with status 2; anything else is a bug and
keeps its traceback.
"""


class WildmergeError(Exception):
    """Bad input or an environment problem, explained for the user."""


class ConfigError(WildmergeError, ValueError):
    """A recipe, pool, suite or hyperparameter that does not validate."""


def did_you_mean(name: str, valid) -> str:
    """' (did you mean 'x'?)' when a close valid name exists, else ''."""
    import difflib

    close = difflib.get_close_matches(str(name), [str(v) for v in valid], n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""
