"""Attention heatmaps: source tokens across, output tokens down, weights shaded."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # files only; never needs a screen
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib import font_manager  # noqa: E402

from .files import atomic_write  # noqa: E402

# Tried in order for each glyph, so Latin, Cyrillic, Greek, Devanagari, CJK all get a face
# where the machine has one (matplotlib falls back per glyph since 3.6).
FONT_PREFERENCE = ["DejaVu Sans", "Noto Sans", "Noto Sans Devanagari", "Lohit Devanagari", "Noto Sans CJK JP",
                   "Noto Sans Arabic", "FreeSans"]


def available_fonts() -> list[str]:
    """The preferred faces this machine has (asking for missing ones floods the log)."""
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return [name for name in FONT_PREFERENCE if name in installed] or ["sans-serif"]


def plot_attention(weights: np.ndarray, source_tokens: list[str], output_tokens: list[str],
                   path: str | Path, title: str = "") -> None:
    """Write a PNG heatmap of `weights` [len(output_tokens), len(source_tokens)] to `path`."""
    weights = np.asarray(weights, dtype=np.float32)
    if weights.shape != (len(output_tokens), len(source_tokens)):
        raise ValueError(f"weights {weights.shape} do not match {len(output_tokens)} x {len(source_tokens)} tokens")
    width = min(2.0 + 0.35 * len(source_tokens), 40)
    height = min(1.5 + 0.35 * len(output_tokens), 40)
    with plt.rc_context({"font.family": available_fonts()}), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Glyph missing from font" where no face has a character
        fig, ax = plt.subplots(figsize=(width, height), dpi=110)
        image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        long_labels = any(len(t) > 2 for t in source_tokens)
        ax.set_xticks(range(len(source_tokens)), labels=source_tokens, rotation=90 if long_labels else 0)
        ax.set_yticks(range(len(output_tokens)), labels=output_tokens)
        ax.set_xlabel("source")
        ax.set_ylabel("output")
        ax.xaxis.set_ticks_position("top")
        ax.xaxis.set_label_position("top")
        if title:
            ax.set_title(title, fontsize=9, pad=12)
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
        fig.tight_layout()
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png")
        plt.close(fig)
    atomic_write(path, buffer.getvalue())
