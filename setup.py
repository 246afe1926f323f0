"""The one thing pyproject.toml cannot declare: rldbg's C hot path (the user API's recording).

optional=True: without a compiler the install still succeeds and rldbg runs its Python
implementation (rldbg.fastpath says which one runs; the test suite requires C where it builds).
"""
from setuptools import Extension, setup

_FLAGS = ["-O2", "-Wall", "-Wno-missing-field-initializers"]

setup(ext_modules=[Extension("rldbg._api_c", ["rldbg/_api_c.c"], optional=True, extra_compile_args=_FLAGS)])
