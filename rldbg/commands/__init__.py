import contextlib
import os
import sys


def fail(message: str, rc: int) -> int:
    """A command's error: `message` (its "rldbg CMD: " prefix included) on stderr; returns `rc`."""
    print(message, file=sys.stderr)
    return rc


def make_folder(path: str) -> tuple[str | None, list]:
    """Make the folder `path` and its parents: (None, the folders made, outermost first), or (why not,
    in a few words, []): makedirs says "File exists" of a file where a folder would go."""
    made, up = [], os.path.abspath(path)
    while not os.path.exists(up) and os.path.dirname(up) != up:
        made.insert(0, up)
        up = os.path.dirname(up)
    try:
        os.makedirs(path, exist_ok=True)
    except OSError as e:
        return ("a file is where a folder would be" if isinstance(e, (FileExistsError, NotADirectoryError))
                else e.strerror), []
    return None, made


def unmake(made: list) -> None:
    """Remove the folders make_folder made, innermost first, as long as they stay empty."""
    with contextlib.suppress(OSError):
        for path in reversed(made):
            os.rmdir(path)
