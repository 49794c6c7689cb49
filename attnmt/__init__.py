"""attnmt: attention-based sequence-to-sequence neural machine translation (Bahdanau, Luong)."""

from __future__ import annotations

import typing

from .config import Config, load_config
from .errors import AttnmtError

if typing.TYPE_CHECKING:
    from .translate import Translation, Translator

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Config", "Translation", "Translator", "load_config", "__version__"]


def __getattr__(name: str) -> object:
    """Translation and Translator, imported with translate.py (and torch) when first asked for, so that
    `attnmt --help`, `--version` and a config's errors answer without loading torch."""
    if name in ("Translation", "Translator"):
        from . import translate

        return getattr(translate, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
