"""rldbg's optional parts and the library each needs. `pip install rldbg` brings the debugger and
the tracer alone; a feature whose library is missing says in one line which extra installs it
(pyproject.toml's [project.optional-dependencies]), instead of failing deep inside an import."""
from __future__ import annotations

import importlib
import importlib.util


class MissingExtra(ImportError):
    """One line: the feature, the missing library and the pip command that brings it."""


def _message(feature: str, module: str, extra: str) -> str:
    return f"{feature} needs {module}, which is not installed here: pip install 'rldbg[{extra}]'"


def need(module: str, feature: str, extra: str):
    """The module, imported; MissingExtra naming the extra when it is not installed."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        if e.name != module.split(".")[0]:
            raise   # the library is there but broken: its own error says more
        raise MissingExtra(_message(feature, module, extra)) from None


def check(modules: tuple, feature: str, extra: str) -> None:
    """MissingExtra for the first of `modules` that is not installed, without importing any."""
    for module in modules:
        if importlib.util.find_spec(module) is None:
            raise MissingExtra(_message(feature, module, extra))
