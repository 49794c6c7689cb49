"""`attnmt export MODEL --to ctranslate2 DIR`: a Transformer model as a CTranslate2 model.

CTranslate2 (OpenNMT's inference engine) decodes Transformers fast on CPUs and GPUs, in int8 too.
The model is described through CTranslate2's own specification API (`TransformerSpec`), which the
family fills from its network (its layout "ctranslate2": each weight in the variable that plays its
part), and CTranslate2 checks and saves it. CTranslate2 has no RNN encoder-decoder: only the families
with that layout (the Transformer) export. Whether the optional `ctranslate2` package is there,
ctranslate2_engine.py's `ctranslate2_package` says.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from ..choices import CTRANSLATE2_QUANTIZATIONS
from ..config import Config
from ..errors import AttnmtError
from ..families import with_layout
from ..modelfile import CTRANSLATE2_ENGINE_FILE
from ..translate import Translator
from .base import FolderWriter, write_folder, write_json
from .ctranslate2_engine import ctranslate2_package

FORMAT = "ctranslate2"


class CTranslate2Writer(FolderWriter):
    """A CTranslate2 model directory, its weights stored as `quantization` says (None: float32), with
    `max_positions` sinusoidal positions (CTranslate2 reads no further)."""

    format = FORMAT

    def __init__(self, quantization: Optional[str], max_positions: int) -> None:
        self.quantization, self.max_positions = quantization, max_positions

    def cannot_hold(self, path: str | Path, arch: str) -> str:
        return (f"{path}: CTranslate2 cannot hold a model of model.arch {arch} (it has no RNN encoder-decoder); only "
                f"model.arch {' or '.join(with_layout(FORMAT))} models export to it")

    def check(self, path: str | Path, config: Config, layout: Any) -> None:
        ctranslate2_package()
        if self.quantization is not None and self.quantization not in CTRANSLATE2_QUANTIZATIONS:
            raise AttnmtError(f"quantization {self.quantization!r}: expected one of {', '.join(CTRANSLATE2_QUANTIZATIONS)}")

    def write(self, translator: Translator, layout: Any, folder: Path, meta: dict[str, Any]) -> list[str]:
        spec = layout.spec(translator.model, self.max_positions)
        target = translator.tokenization.tgt_vocab
        spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (
            target.itos[target.unk_id], target.itos[target.sos_id], target.eos)
        spec.config.decoder_start_token = target.itos[target.sos_id]
        spec.register_source_vocabulary(translator.tokenization.src_vocab.to_list())
        spec.register_target_vocabulary(target.to_list())
        spec.validate()
        spec.optimize(quantization=self.quantization)
        spec.save(str(folder))
        write_engine_file(folder, translator)
        assert ctranslate2_package().contains_model(str(folder))
        return []


def export_ctranslate2(model_path: str | Path, out_dir: str | Path, quantization: Optional[str] = None,
                       overwrite: bool = False, max_positions: int = 1024) -> Path:
    """Write the Transformer at `model_path` as a CTranslate2 model directory. Its alignment (the
    attention CTranslate2 returns) is the mean of the last layer's heads, as attnmt's heatmaps show;
    `max_positions` sinusoidal positions are written (CTranslate2 reads no further)."""
    return write_folder(CTranslate2Writer(quantization, max_positions), model_path, out_dir, overwrite)[0]


def write_engine_file(out_dir: Path, translator: Translator) -> None:
    """What attnmt needs besides CTranslate2's model to translate text with it (`ctranslate2_engine.py`): the
    config (decoding settings, languages), both tokenizers, and what a server reports of the model."""
    description = translator.description.metadata()
    info = translator.engine_info()
    engine = {"kind": "attnmt-ctranslate2", "config": description["config"],
              "src_tokenizer": description["src_tokenizer"], "tgt_tokenizer": description["tgt_tokenizer"],
              "architecture": info.architecture, "src_vocab_size": info.src_vocab_size,
              "tgt_vocab_size": info.tgt_vocab_size, "source_end": translator.source_end,
              "start_token": translator.start_token}
    write_json(out_dir / CTRANSLATE2_ENGINE_FILE, engine)

