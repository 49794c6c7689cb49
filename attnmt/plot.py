"""Attention heatmaps: source tokens across, output tokens down, weights shaded. Each drawing is a
matplotlib Figure made without pyplot (no backend chosen, no window, nothing of the caller's
matplotlib changed): `attention_figure` and `attention_grid_figure` return it, for a notebook to show
or a caller to save; the plot_* functions write it to a PNG file."""

from __future__ import annotations

import functools
import io
import itertools
import math
import textwrap
import unicodedata
import warnings
from pathlib import Path
from typing import Optional, Protocol

import matplotlib
import numpy as np
from matplotlib import font_manager, ft2font
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .files import atomic_write
from .tokenize import SPACE_SYMBOL


class LinkSets(Protocol):
    """Gold word links, (source, output) pairs from 0 (align.GoldLinks)."""

    sure: set[tuple[int, int]]
    possible: set[tuple[int, int]]

# Tried in order for each glyph, so Latin, Cyrillic, Greek, Devanagari, CJK all get a face
# where the machine has one (matplotlib falls back per glyph since 3.6).
FONT_PREFERENCE = ["DejaVu Sans", "Noto Sans", "Noto Sans Devanagari", "Lohit Devanagari", "Noto Sans CJK JP",
                   "Noto Sans Arabic", "FreeSans"]


def available_fonts() -> list[str]:
    """The preferred faces this machine has (asking for missing ones floods the log)."""
    installed = {font.name for font in font_manager.fontManager.ttflist}
    return [name for name in FONT_PREFERENCE if name in installed] or ["sans-serif"]


@functools.lru_cache(maxsize=1)
def _covered_codepoints() -> frozenset[int]:
    preferred = set(available_fonts())
    covered: set[int] = set()
    for font in font_manager.fontManager.ttflist:
        if font.name in preferred:
            covered.update(ft2font.FT2Font(font.fname).get_charmap())
    return frozenset(covered)


def missing_glyphs(labels: list[str]) -> list[str]:
    """The characters of `labels` that no installed preferred face can draw (they would show as boxes)."""
    covered = _covered_codepoints()
    # Joiners and other format characters (ZWJ in Devanagari) shape text but are never drawn.
    return sorted({c for label in labels for c in label
                   if ord(c) not in covered and not c.isspace() and unicodedata.category(c) != "Cf"})


class ShownFigure(Figure):
    """A Figure that a notebook shows as its picture, whether or not pyplot set up inline plots."""

    def _repr_png_(self) -> bytes:
        return png_bytes(self)


def png_bytes(fig: Figure) -> bytes:
    """The figure as a PNG file's bytes."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png")
    return buffer.getvalue()


def write_png(fig: Figure, path: str | Path) -> None:
    atomic_write(path, png_bytes(fig))


MAX_INCHES = 40  # a heatmap's largest side; past it, long sentences label every k-th token
TITLE_LINES = 3  # a title wraps onto this many lines before it is cut


def _wrapped(title: str, inches: float) -> str:
    """`title` on lines that fit a figure `inches` wide (about 12 characters an inch at 9 points),
    cut with " ..." only past TITLE_LINES lines."""
    return "\n".join(textwrap.wrap(title, max(int(inches * 12), 20), max_lines=TITLE_LINES, placeholder=" ..."))


# SentencePiece's and the char tokenizer's space, "▁", is drawn as a bold "_" at a label's size: the
# labels show the visible-space sign instead, which no tokenizer makes, and the figure says so.
SPACE_SHOWN = "\u2423"  # "␣"
SPACE_KEY = f"{SPACE_SHOWN}: a space ({SPACE_SYMBOL} in the text views)"


def _labels(tokens: list[str]) -> list[str]:
    """Tokens as tick labels: the space symbol drawn as SPACE_SHOWN."""
    return [token.replace(SPACE_SYMBOL, SPACE_SHOWN) for token in tokens]


def _has_spaces(*sides: list[str]) -> bool:
    return any(SPACE_SYMBOL in token for tokens in sides for token in tokens)


def _every_kth(tokens: list[str], inches: float) -> tuple[list[int], list[str]]:
    """Tick positions and labels that fit `inches`: every token, or every k-th of a long sentence."""
    step = max(1, math.ceil(len(tokens) * 0.16 / inches))  # a 9-point label needs about 0.16 inch
    positions = list(range(0, len(tokens), step))
    labels = _labels(tokens)
    return positions, [labels[i] if step == 1 else f"{labels[i]} ({i + 1})" for i in positions]


def plot_attention(weights: np.ndarray, source_tokens: list[str], output_tokens: list[str],
                   path: str | Path, title: str = "", axes: tuple[str, str] = ("source", "output"),
                   links: Optional[list[tuple[int, int]]] = None, gold: Optional[LinkSets] = None) -> None:
    """Write attention_figure's heatmap to the PNG file `path`."""
    write_png(attention_figure(weights, source_tokens, output_tokens, title, axes, links, gold), path)


def attention_figure(weights: np.ndarray, source_tokens: list[str], output_tokens: list[str], title: str = "",
                     axes: tuple[str, str] = ("source", "output"), links: Optional[list[tuple[int, int]]] = None,
                     gold: Optional[LinkSets] = None) -> Figure:
    """A heatmap of `weights` [len(output_tokens), len(source_tokens)]; `axes` names the keys
    (across) and the queries (down). Word alignments, (source, output) pairs from 0, are drawn over
    it: `links` as dots, `gold` as squares (sure) and dashed squares (possible only)."""
    weights = np.asarray(weights, dtype=np.float32)
    if weights.shape != (len(output_tokens), len(source_tokens)):
        raise ValueError(f"weights {weights.shape} do not match {len(output_tokens)} x {len(source_tokens)} tokens")
    width = min(2.0 + 0.35 * len(source_tokens), MAX_INCHES)
    height = min(1.5 + 0.35 * len(output_tokens), MAX_INCHES)
    with matplotlib.rc_context({"font.family": available_fonts()}), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "Glyph missing from font" where no face has a character
        fig = ShownFigure(figsize=(width, height), dpi=110)
        ax = fig.subplots()
        image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
        long_labels = any(len(t) > 2 for t in source_tokens)
        ax.set_xticks(*_every_kth(source_tokens, width), rotation=90 if long_labels else 0)
        ax.set_yticks(*_every_kth(output_tokens, height))
        ax.set_xlabel(axes[0])
        ax.set_ylabel(axes[1])
        ax.xaxis.set_ticks_position("top")
        ax.xaxis.set_label_position("top")
        if title:
            ax.set_title(_wrapped(title, width), fontsize=9, pad=12)
        if gold is not None:
            for column, row in gold.possible:                               # sure links are possible too
                sure = (column, row) in gold.sure
                ax.add_patch(Rectangle((column - 0.45, row - 0.45), 0.9, 0.9, fill=False, edgecolor="tab:red",
                                           linewidth=1.5 if sure else 1.0, linestyle="-" if sure else "--"))
        if links:
            ax.scatter([s for s, _ in links], [t for _, t in links], s=12, color="tab:orange", zorder=3)
        key = "; ".join(filter(None, ["orange dots: the model's links" if links else "",
                                      "red squares: gold links (dashed: possible only)" if gold is not None else "",
                                      SPACE_KEY if _has_spaces(source_tokens, output_tokens) else ""]))
        if key:
            fig.text(0.01, 0.005, key, fontsize=7, va="bottom")
        fig.colorbar(image, ax=ax, fraction=0.04, pad=0.02)
        fig.tight_layout()
    return fig


def plot_attention_grid(maps: np.ndarray, key_tokens: list[str], query_tokens: list[str], path: str | Path,
                        title: str = "", axes: tuple[str, str] = ("source", "output")) -> None:
    """Write attention_grid_figure's maps to the PNG file `path`."""
    write_png(attention_grid_figure(maps, key_tokens, query_tokens, title, axes), path)


def attention_grid_figure(maps: np.ndarray, key_tokens: list[str], query_tokens: list[str], title: str = "",
                          axes: tuple[str, str] = ("source", "output")) -> Figure:
    """Every layer's and head's map, maps [layers, heads, len(query_tokens), len(key_tokens)]: one
    row of heatmaps per layer, one column per head."""
    maps = np.asarray(maps, dtype=np.float32)
    layers, heads = maps.shape[:2]
    cell = min(0.6 + 0.2 * max(len(key_tokens), len(query_tokens)), MAX_INCHES / max(layers, heads))
    with matplotlib.rc_context({"font.family": available_fonts(), "font.size": 7}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = ShownFigure(figsize=(1.0 + cell * heads, 1.0 + cell * layers), dpi=110)
        grid = fig.subplots(layers, heads, squeeze=False)
        for (layer, head), ax in np.ndenumerate(grid):
            ax.imshow(maps[layer, head], cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
            ax.set_xticks(*_every_kth(key_tokens, cell) if layer == 0 else ([], []), rotation=90)
            ax.set_yticks(*_every_kth(query_tokens, cell) if head == 0 else ([], []))
            ax.xaxis.set_ticks_position("top")
            ax.set_xlabel(f"layer {layer + 1}, head {head + 1}", fontsize=7)
        spaces = f"; {SPACE_KEY}" if _has_spaces(key_tokens, query_tokens) else ""
        fig.supxlabel(f"{axes[0]} (across) by {axes[1]} (down){spaces}", fontsize=8)
        if title:
            fig.suptitle(_wrapped(title, 1.0 + cell * heads), fontsize=9)
        fig.tight_layout()
    return fig


def write_animation(frames: list[Figure], path: str | Path, frame_ms: int = 900) -> None:
    """Write the figures as an animated GIF (Pillow, which matplotlib brings), each frame padded
    with white to the largest; the last frame stays three times as long."""
    from PIL import Image

    images = [Image.open(io.BytesIO(png_bytes(fig))).convert("RGB") for fig in frames]
    width, height = max(i.width for i in images), max(i.height for i in images)
    padded = []
    for image in images:
        canvas = Image.new("RGB", (width, height), "white")
        canvas.paste(image, (0, 0))
        padded.append(canvas.quantize(colors=256))
    buffer = io.BytesIO()
    padded[0].save(buffer, format="GIF", save_all=True, append_images=padded[1:], loop=0,
                   duration=[frame_ms] * (len(padded) - 1) + [3 * frame_ms])
    atomic_write(path, buffer.getvalue())


def contact_sheet(maps: list[np.ndarray], titles: list[str], title: str = "", columns: int = 4) -> Figure:
    """Small heatmaps side by side, `columns` a row, each map [queries, keys] with its title (a
    timeline's points: the keys, the source, are the same in all)."""
    rows = math.ceil(len(maps) / columns)
    with matplotlib.rc_context({"font.family": available_fonts(), "font.size": 7}), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fig = ShownFigure(figsize=(2.4 * min(columns, len(maps)), 0.6 + 2.2 * rows), dpi=110)
        grid = fig.subplots(rows, min(columns, len(maps)), squeeze=False)
        for ax in grid.flat:
            ax.set_axis_off()
        for ax, weights, label in zip(grid.flat, maps, titles):
            ax.set_axis_on()
            ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto", interpolation="nearest")
            ax.set_xticks([])
            ax.set_yticks([])
            ax.set_title(_wrapped(label, 2.4), fontsize=7)
        if title:
            fig.suptitle(_wrapped(title, 2.4 * min(columns, len(maps))), fontsize=9)
        fig.tight_layout()
    return fig


def plot_bleu_by_length(buckets: list[str], bleu: dict[str, list[Optional[float]]], sentences: list[int],
                        path: str | Path, title: str = "") -> None:
    """Write a PNG line chart of BLEU per source-length bucket, one line per model in `bleu`.

    `sentences` gives each bucket's size, shown under its label; empty buckets leave gaps.
    """
    with matplotlib.rc_context({"font.family": available_fonts()}):
        fig = Figure(figsize=(6.4, 4.2), dpi=110)
        ax = fig.subplots()
        positions = np.arange(len(buckets))
        for (name, scores), marker in zip(bleu.items(), itertools.cycle("osD^v<>")):
            values = np.array([np.nan if s is None else s for s in scores], dtype=np.float64)
            ax.plot(positions, values, marker=marker, label=name)
        ax.set_xticks(positions, labels=[f"{b}\n({n})" for b, n in zip(buckets, sentences)])
        ax.set_xlabel("source length in word tokens (sentences in the bucket)")
        ax.set_ylabel("BLEU")
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
        ax.legend()
        if title:
            ax.set_title(title, fontsize=10)
        fig.tight_layout()
        write_png(fig, path)


def plot_curves(runs: dict[str, list[dict]], path: str | Path) -> None:
    """Write a PNG of training curves against the update step, one colour per run: training
    (dashed; its label gives the label smoothing a run's records name) and validation loss on the
    left, validation BLEU (perplexity if no run has BLEU) on the right."""
    right = "valid_bleu" if any("valid_bleu" in r for records in runs.values() for r in records) else "valid_ppl"
    with matplotlib.rc_context({"font.family": available_fonts()}):
        fig = Figure(figsize=(9.6, 3.8), dpi=110)
        loss_ax, score_ax = fig.subplots(1, 2)
        colours = matplotlib.rcParams["axes.prop_cycle"].by_key()["color"]
        for (name, records), colour in zip(runs.items(), itertools.cycle(colours)):
            def series(key: str) -> tuple[list[int], list[float]]:
                points = [(r["step"], r[key]) for r in records if isinstance(r.get(key), (int, float))]
                return [s for s, _ in points], [v for _, v in points]
            # Label smoothing adds to the training loss, never to the validation loss beside it: say so.
            smoothing = max((r.get("label_smoothing") or 0 for r in records), default=0)
            training = f"training (label smoothing {smoothing:g})" if smoothing else "training"
            loss_ax.plot(*series("train_loss"), linestyle="--", color=colour, label=f"{name}: {training}")
            loss_ax.plot(*series("valid_loss"), marker=".", color=colour, label=f"{name}: validation")
            score_ax.plot(*series(right), marker=".", color=colour, label=name)
        loss_ax.set_ylabel("loss per target token")
        score_ax.set_ylabel({"valid_bleu": "validation BLEU", "valid_ppl": "validation perplexity"}[right])
        if right == "valid_bleu":  # matplotlib's margin would run BLEU's axis past 100 and below 0
            low, high = score_ax.get_ylim()
            score_ax.set_ylim(max(low, 0), min(high, 100))
        for ax in (loss_ax, score_ax):
            ax.set_xlabel("update step")
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        fig.tight_layout()
        write_png(fig, path)
