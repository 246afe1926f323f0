"""The one thing pyproject.toml cannot declare: rldbg's C hot paths (the user API's recording, the
exporter's formatting, the report's reading of a trace's lines).

optional=True: without a compiler the install still succeeds and rldbg runs its Python
implementation (rldbg.fastpath says which one runs; the test suite requires C where it builds).
"""
from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wno-missing-field-initializers"]

setup(ext_modules=[Extension("rldbg._api_c", ["rldbg/_api_c.c"], optional=True, extra_compile_args=_FLAGS),
                   Extension("rldbg.trace._chrome_c", ["rldbg/trace/_chrome_c.c"], optional=True,
                             extra_compile_args=_FLAGS),
                   Extension("rldbg.trace._lines_c", ["rldbg/trace/_lines_c.c"], optional=True,
                             extra_compile_args=_FLAGS)])
