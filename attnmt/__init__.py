"""attnmt: attention-based sequence-to-sequence neural machine translation (Bahdanau, Luong)."""

from .config import Config, load_config
from .errors import AttnmtError
from .translate import Translation, Translator

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Config", "Translation", "Translator", "load_config", "__version__"]
