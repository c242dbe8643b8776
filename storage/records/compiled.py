"""The compiled extension's functions (``_cwalk.c``, built by ``pip install -e``), when in use.

Optional everywhere: where it is not built (no C compiler, another interpreter's venv), where
the build does not load, or where the environment asks for pure Python
(``KAFKASIM_PURE_PYTHON`` set to anything but ``0`` or empty: the fallbacks' tests), each
caller runs its Python path, which gives the same answers.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any


def compiled(name: str) -> Callable[..., Any] | None:
    """The extension's function ``name``, or None when the extension is not in use."""
    if os.environ.get("KAFKASIM_PURE_PYTHON", "") not in ("", "0"):
        return None
    try:
        # The full name, as a failing import names it (tests/unit/storage/records/test_cwalk.py).
        import kafkasim.storage.records._cwalk as _cwalk  # noqa: PLC0415, PLR0402
    except ImportError:
        return None
    function: Callable[..., Any] | None = getattr(_cwalk, name, None)
    return function
