"""attnmt: attention-based sequence-to-sequence neural machine translation (Bahdanau, Luong)."""

from __future__ import annotations

import typing

from .config import Config
from .errors import AttnmtError

if typing.TYPE_CHECKING:
    from .configfile import load_config
    from .translate import Translation, Translator

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Config", "Translation", "Translator", "load_config", "__version__"]


def __getattr__(name: str) -> object:
    """Translation and Translator, imported with translate.py (and torch) when first asked for, so that
    `attnmt --help`, `--version` and a config's errors answer without loading torch; load_config with
    configfile.py (and the families' configs), so that importing attnmt.config loads no family."""
    if name in ("Translation", "Translator"):
        from . import translate

        return getattr(translate, name)
    if name == "load_config":
        from . import configfile

        return configfile.load_config
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
