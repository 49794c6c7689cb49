"""`attnmt demo`: train on generated dates, show translations, accuracy and an attention heatmap."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import yaml

from ..config import Config
from ..configfile import config_from_dict
from ..errors import AttnmtError
from ..plot import plot_attention
from ..translate import Translator
from .resume import holds_model
from .train import train

# The demo's recipe (demo.yaml beside this file: one epoch, no time budget, the same updates on every machine).
DEMO_SETTINGS: dict[str, dict[str, str | int | float | bool]] = yaml.safe_load(
    (Path(__file__).parent / "demo.yaml").read_text(encoding="utf-8"))
EXAMPLES = ["Saturday, March 14, 2026", "3. Oktober 1990", "the 21st of June 1975", "12/25/2031", "Fr., 09.11.1989"]


def demo_config(out_dir: str) -> Config:
    settings = {**DEMO_SETTINGS, "train": {**DEMO_SETTINGS["train"], "out_dir": out_dir}}
    return config_from_dict(settings)


def run_demo(out_dir: str = "attnmt-demo", overwrite: bool = False, log: Callable[[str], None] = print) -> dict:
    """Train the demo model into `out_dir`; return its test scores and the files written."""
    # Refused here rather than by train, whose message names its own flags and train.out_dir.
    if not overwrite and holds_model(Path(out_dir)):
        raise AttnmtError(f"{out_dir} already holds a model; use --overwrite to replace it, or another --out")
    log("attnmt demo: dates written in English and German -> ISO 8601, character level, Bahdanau attention")
    result = train(demo_config(out_dir), overwrite=overwrite, log=log)
    translator = Translator.load(result.model_path)
    log("\nsample translations:")
    translations = translator.translate(EXAMPLES)
    for source, translation in zip(EXAMPLES, translations):
        log(f"  {source:28s} -> {translation.text}")
    heatmap = Path(out_dir) / "attention.png"
    first = translations[0]
    assert first.attention is not None, "the demo's model has Bahdanau attention"
    plot_attention(first.attention, first.source_tokens, first.tokens, heatmap,
                   title=f"{EXAMPLES[0]} -> {first.text}")
    log(f"\ntest exact match: {result.test_scores['exact']:.1f}% of {DEMO_SETTINGS['data']['test_size']} "
        f"held-out dates, after {result.minutes:.1f} minutes of training")
    log(f"model: {result.model_path}\nattention heatmap: {heatmap}")
    return {"exact": result.test_scores["exact"], "minutes": result.minutes, "model": result.model_path,
            "heatmap": heatmap}
