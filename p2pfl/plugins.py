"""User code named in YAML by import path: ``package.module:name`` (protocols, models, datasets).

A leaf module (standard library only), so any package may use it.
"""

from __future__ import annotations

import importlib

__all__ = ["import_object"]


def import_object(target: str) -> object:
    """The object that ``package.module:name`` names.

    Raises ValueError with a one-line reason and fix (the caller adds the file and field).
    """
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"{target!r} is not an import path; write 'package.module:name'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        raise ValueError(f"cannot import {module_name!r} ({err}); check the module path and PYTHONPATH") from None
    if not hasattr(module, attr):
        raise ValueError(f"module {module_name!r} has no {attr!r}; check the name after the colon")
    return getattr(module, attr)
