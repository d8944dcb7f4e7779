"""How the scripts tell the user of a problem that does not stop the run (`warn`); one that does
stops it through `options.fail`. Both name the file, field or argument and what to do."""

import sys


def warn(message):
    """Print `warning: message` to stderr."""
    print(f"warning: {message}", file=sys.stderr, flush=True)


def first_line(error):
    """The first line of an exception's message, or its type's name when it has none."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
