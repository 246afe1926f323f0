import sys


def fail(message: str, rc: int) -> int:
    """A command's error: `message` (its "rldbg CMD: " prefix included) on stderr; returns `rc`."""
    print(message, file=sys.stderr)
    return rc
