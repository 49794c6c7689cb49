"""attnmt: attention-based sequence-to-sequence neural machine translation (Bahdanau, Luong)."""

import os

# bfloat16 matrix products on CPUs run through oneDNN, which keeps a compiled kernel and buffers
# (about half a MB) for each new matrix shape, up to 1,024 shapes. Batches of sentences come in
# many shapes, so bf16 training and serving grew by hundreds of MB; 64 holds one training step's
# shapes at the same speed. Set before torch first multiplies in bfloat16; a user's settings win.
for _cache in ("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "LRU_CACHE_CAPACITY"):
    os.environ.setdefault(_cache, "64")

from .config import Config, load_config  # noqa: E402
from .errors import AttnmtError  # noqa: E402
from .translate import Translation, Translator  # noqa: E402

__version__ = "0.1.0"
__all__ = ["AttnmtError", "Config", "Translation", "Translator", "load_config", "__version__"]
