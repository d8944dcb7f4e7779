"""How the scripts tell the user of a problem: `fail` stops the script, `warn` lets the run go on.
Both messages name the file, field or argument and what to do; `first_line` shortens a library's
error to what such a message quotes of it."""

import sys


def fail(message):
    """Stop the script with `error: message` (exit status 1, no traceback)."""
    raise SystemExit(f"error: {message}")


def warn(message):
    """Print `warning: message` to stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def first_line(error):
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
