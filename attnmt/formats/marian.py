"""The Hugging Face Marian folder format (OPUS-MT models), read into an attnmt model file:
`attnmt import DIR --out FILE`.

Such a folder holds config.json (a MarianConfig: the network), generation_config.json (how
transformers' generate decodes; older folders keep those keys in config.json), tokenizer_config.json,
source.spm and target.spm (sentencepiece models), vocab.json (token -> id; target_vocab.json too with
separate vocabularies) and the weights: model.safetensors, or pytorch_model.bin read with torch's
weights-only loader (nothing here unpickles code). attnmt downloads nothing: the folder is given.

How a Marian model is attnmt's Transformer (transformers' modeling_marian.py):
- post-norm layers (model.norm post), no LayerNorm after either stack or on the embeddings; embeddings
  scaled by √d_model; sinusoidal positions from 0, all the sines then all the cosines
  (model.sinusoid_layout halves); the feed-forward's activation_function relu, gelu or swish (silu);
- every source ends with </s> (model.source_eos), as MarianTokenizer writes it;
- the output layer is the target embeddings (tied) with final_logits_bias as its bias;
  share_encoder_decoder_embeddings is model.share_embeddings with one vocabulary (vocab.joint);
- decoding starts from decoder_start_token_id (Marian's <pad>) and ends at eos_token_id; generate's
  settings become decode's: num_beams, length_penalty (alpha, with beam_scoring length_power, or
  length_power_early where early_stopping is true),
  bad_words_ids (never_generate), max_length (which counts the start token; forced_eos_token_id ends
  the longest outputs one token earlier with </s>).
Marian puts <pad> last, attnmt at id 0 in every vocabulary (each embedding's padding row): the
import swaps the two ids (`swap_pad`), in each vocabulary and every tensor indexed by it.

The reading functions come first (`read_marian`, `import_marian`), then the writing side:
`attnmt export MODEL --to marian DIR` writes an attnmt Transformer as such a folder (`export_marian`), for
imported models and for those trained here whose settings a Marian model expresses (`check_expressible`:
anything else is refused in one line naming the setting). The vocabularies are written in attnmt's order,
<pad> at id 0 (config.json's pad_token_id then says 0): nothing is swapped back.
"""

from __future__ import annotations

import hashlib
import json
import pickle
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Protocol, cast

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save_file as save_safetensors_file

from ..config import Config, ModelConfig
from ..configfile import config_from_dict
from ..errors import AttnmtError
from ..families import build_model, layout, with_layout
from ..files import check_parent_dir
from ..modelfile import ModelDescription, save_model
from ..tokenize import SentencePieceTokenizer, SubwordTokenizer, Tokenizer
from ..translate import Translator
from ..vocab import PAD_ID, Tokenization, Vocabulary
from .base import FolderWriter, read_json, write_folder, write_json

ORIGIN_FORMAT = "marian"   # a model file's origin, and the families' layouts' key
SAFETENSORS, PYTORCH = "model.safetensors", "pytorch_model.bin"

# Keys of config.json that describe something attnmt's Transformer does not have, with the one value it
# can read and what that value means (transformers' defaults where the key is absent).
REPRESENTABLE = {
    "normalize_before": (False, "attnmt's Marian layers normalize after each residual sum (post-norm)"),
    "add_final_layer_norm": (False, "a post-norm stack ends without another LayerNorm"),
    "normalize_embedding": (False, "the embeddings are not normalized"),
    "scale_embedding": (True, "the embeddings are scaled by √d_model"),
    "static_position_embeddings": (True, "positions are fixed sinusoids"),
    "is_encoder_decoder": (True, "attnmt reads encoder-decoder translation models"),
}
# Settings of generate that change which translation comes out, with the value attnmt's search matches.
GENERATION_DEFAULTS = {"do_sample": False, "num_beam_groups": 1, "diversity_penalty": 0.0,
                       "repetition_penalty": 1.0, "no_repeat_ngram_size": 0, "encoder_no_repeat_ngram_size": 0,
                       "min_length": 0, "min_new_tokens": None, "forced_bos_token_id": None}
# The beam scorings that are generate's, with its early_stopping of each.
GENERATE_EARLY_STOPPING = {"length_power": False, "length_power_early": True}
HF_MAX_LENGTH = 20   # generate's max_length where neither file gives one
# MarianConfig's defaults of the keys read here: what transformers takes where config.json is silent.
MARIAN_DEFAULTS = {"d_model": 1024, "encoder_layers": 12, "decoder_layers": 12, "encoder_attention_heads": 16,
                   "decoder_attention_heads": 16, "encoder_ffn_dim": 4096, "decoder_ffn_dim": 4096,
                   "activation_function": "gelu", "dropout": 0.1, "attention_dropout": 0.0, "activation_dropout": 0.0,
                   "max_position_embeddings": 1024, "scale_embedding": False, "pad_token_id": 58100,
                   "decoder_start_token_id": 58100, "eos_token_id": 0, "share_encoder_decoder_embeddings": True,
                   "tie_word_embeddings": True}


class MarianNames(Protocol):
    """What this format asks of a family's layout "marian" (families.layout): the family's names of
    Marian's tensors and MarianConfig's keys, both ways."""

    def ours(self, marian: str) -> Optional[str]:
        """The family's parameter name of Marian's tensor (model.encoder.embed_tokens.weight, lm_head.weight,
        final_logits_bias as a vector, or a layer's); None where the network has no place for it."""
        ...

    def marian(self, ours: str) -> Optional[str]:
        """Marian's name of one of the family's parameters; None where a Marian model has none."""
        ...

    def unreadable(self, config: dict[str, Any]) -> Optional[tuple[str, str]]:
        """A MarianConfig key the network cannot represent, and why."""
        ...

    def model_section(self, config: dict[str, Any]) -> dict[str, Any]:
        """The model section of a MarianConfig's network."""
        ...

    def inexpressible(self, model: ModelConfig) -> Any:
        """The first model key whose value a Marian model cannot have (key, value, needed, why), or None."""
        ...

    def marian_config(self, model: ModelConfig, positions: int) -> dict[str, Any]:
        """MarianConfig's keys of the network, with room for at least `positions` positions."""
        ...


def marian_names() -> tuple[str, MarianNames]:
    """The family a Marian model is read into (the Transformer: the one with a layout "marian") and its names."""
    arch = with_layout(ORIGIN_FORMAT)[0]
    return arch, cast(MarianNames, layout(arch, ORIGIN_FORMAT))


@dataclass
class MarianFolder:
    """What a Marian folder's JSON files say: the model's config (MarianConfig's defaults where it is
    silent), generate's settings (generation_config.json when there is one, else config.json's keys, as
    transformers reads them) and the tokenizer's."""

    path: Path
    config: dict[str, Any]
    generation: dict[str, Any]
    tokenizer: dict[str, Any]
    config_sha256: str

    def file(self, name: str) -> Path:
        return self.path / name

    def setting(self, key: str, default: Any = None) -> Any:
        """A key of generate's settings, else `default` (transformers' where the key is absent)."""
        return self.generation.get(key, default)


NOT_MARIAN = "not a Hugging Face Marian model folder"


def read_folder(path: str | Path) -> MarianFolder:
    """A Marian folder's JSON files, refused in one line if config.json is not a MarianMTModel's."""
    path = Path(path)
    if not path.is_dir():
        raise AttnmtError(f"{path}: not a folder; give the folder of a Hugging Face Marian model "
                          f"(config.json, source.spm, target.spm, vocab.json, the weights)")
    config = read_json(path / "config.json", NOT_MARIAN)
    architectures = config.get("architectures") or ["MarianMTModel"]
    if config.get("model_type") != "marian" or "MarianMTModel" not in architectures:
        raise AttnmtError(f"{path / 'config.json'}: model_type {config.get('model_type')!r}, architectures "
                          f"{architectures}: not a Marian translation model (MarianMTModel), which is what attnmt "
                          f"import reads")
    generation = read_json(path / "generation_config.json") or config
    digest = hashlib.sha256((path / "config.json").read_bytes()).hexdigest()
    return MarianFolder(path, {**MARIAN_DEFAULTS, **config}, generation,
                        read_json(path / "tokenizer_config.json"), digest)


def _refuse(folder: MarianFolder, key: str, value: Any, why: str, file: str = "config.json") -> AttnmtError:
    return AttnmtError(f"{folder.file(file)}: {key} {json.dumps(value)}: attnmt cannot represent it ({why})")


def _check_representable(folder: MarianFolder) -> None:
    """Refuse, naming the key and its value, what attnmt's Transformer or its search cannot do."""
    config = folder.config
    for key, (allowed, meaning) in REPRESENTABLE.items():
        if config.get(key, allowed) != allowed:
            raise _refuse(folder, key, config[key], meaning)
    unreadable = marian_names()[1].unreadable(config)
    if unreadable is not None:
        key, why = unreadable
        raise _refuse(folder, key, config[key], why)
    file = "generation_config.json" if folder.file("generation_config.json").is_file() else "config.json"
    for key, default in GENERATION_DEFAULTS.items():
        value = folder.generation.get(key)
        if value is not None and value != default:                       # None: unset, the default
            raise _refuse(folder, key, value, f"attnmt's search decodes as generate does with {key} "
                                              f"{json.dumps(default)}", file)
    early_stopping = folder.generation.get("early_stopping")
    if early_stopping not in (None, False, True):                        # "never": the exact, slowest rule
        raise _refuse(folder, "early_stopping", early_stopping, "attnmt's search stops as generate does with "
                                                                "early_stopping false or true", file)
    forced_eos = folder.setting("forced_eos_token_id")
    if forced_eos not in (None, config["eos_token_id"]):
        raise _refuse(folder, "forced_eos_token_id", forced_eos, "only the end token eos_token_id may be forced", file)
    for words in folder.setting("bad_words_ids") or []:
        if not isinstance(words, list) or len(words) != 1:
            raise _refuse(folder, "bad_words_ids", words, "attnmt bans single tokens (decode.never_generate)", file)


def _marian_order(path: Path) -> list[str]:
    """The tokens of a vocab.json by their ids, which must run from 0 without a gap."""
    values = read_json(path, NOT_MARIAN)
    by_id: dict[int, str] = {}
    for token, index in values.items():
        if not isinstance(index, int) or isinstance(index, bool) or index in by_id:
            raise AttnmtError(f"{path}: {token!r} has id {index!r}, not an id of its own")
        by_id[index] = token
    missing = next((i for i in range(len(by_id)) if i not in by_id), None)
    if missing is not None:
        raise AttnmtError(f"{path}: no token has id {missing}; the ids must run from 0 to {len(by_id) - 1}")
    return [by_id[i] for i in range(len(by_id))]


def swap_pad(order: list[str], pad_id: int) -> list[str]:
    """Marian's vocabulary with its <pad> (id `pad_id`) and the token at id 0 trading places: the
    vocabulary as attnmt keeps it. The same exchange is its own inverse."""
    swapped = list(order)
    swapped[0], swapped[pad_id] = swapped[pad_id], swapped[0]
    return swapped


def _attnmt_id(marian_id: int, pad_id: int) -> int:
    """A Marian token id as the swapped vocabulary numbers it."""
    return {pad_id: PAD_ID, PAD_ID: pad_id}.get(marian_id, marian_id)


@dataclass
class Vocabularies:
    """Both sides' vocabularies in Marian's order, and their special tokens."""

    source: list[str]
    target: list[str]   # the same list as `source` where the model has one vocabulary
    pad_id: int         # Marian's <pad> id in both
    specials: list[str]

    def attnmt(self, order: list[str], special_ids: dict[str, int]) -> Vocabulary:
        """A side's vocabulary as attnmt keeps it: <pad> at 0, the other special ids moved with it."""
        return Vocabulary.from_list(swap_pad(order, self.pad_id),
                                    {name: _attnmt_id(i, self.pad_id) for name, i in special_ids.items()})


def _require(folder: MarianFolder, order: list[str], token: str, file: str) -> None:
    if token not in order:
        raise AttnmtError(f"{folder.file(file)}: no {token} token, which MarianTokenizer needs")


def read_vocabularies(folder: MarianFolder) -> Vocabularies:
    """vocab.json (and target_vocab.json with separate vocabularies), checked against config.json's ids."""
    config, names = folder.config, folder.tokenizer
    separate = names.get("separate_vocabs", False)
    if config["share_encoder_decoder_embeddings"] and separate:
        raise _refuse(folder, "share_encoder_decoder_embeddings", True,
                      "tokenizer_config.json's separate_vocabs true gives each side a vocabulary of its own")
    source = _marian_order(folder.file("vocab.json"))
    target = _marian_order(folder.file("target_vocab.json")) if separate else source
    specials = [names.get("eos_token", "</s>"), names.get("unk_token", "<unk>"), names.get("pad_token", "<pad>")]
    specials += [t if isinstance(t, str) else t["content"] for t in names.get("additional_special_tokens") or []]
    # transformers pads both sides' embeddings at pad_token_id, which decoding starts from, whatever
    # token the target vocabulary has there.
    pad_id = config["pad_token_id"]
    for order, file in ((source, "vocab.json"), (target, "target_vocab.json" if separate else "vocab.json")):
        if not isinstance(pad_id, int) or not 0 <= pad_id < len(order):
            raise AttnmtError(f"{folder.file('config.json')}: pad_token_id {pad_id!r} is not an id of {file} "
                              f"({len(order)} tokens)")
        for token in specials[:2]:
            _require(folder, order, token, file)
    eos_id = config["eos_token_id"]
    if not isinstance(eos_id, int) or not 0 <= eos_id < len(target) or target[eos_id] != specials[0]:
        raise AttnmtError(f"{folder.file('config.json')}: eos_token_id {eos_id!r} is not the vocabulary's "
                          f"{specials[0]} (id {target.index(specials[0])})")
    return Vocabularies(source, target, pad_id, specials)


def read_tokenization(folder: MarianFolder, vocabularies: Vocabularies) -> Tokenization:
    """Both sides' tokenizers (source.spm, target.spm) and vocabularies, as MarianTokenizer reads text:
    a shared vocabulary detokenizes with source.spm on both sides, as transformers' decode does."""
    models = []
    for name in ("source.spm", "target.spm"):
        if not folder.file(name).is_file():
            raise AttnmtError(f"{folder.path}: no {name}; a Marian folder holds both sentencepiece models")
        models.append(folder.file(name).read_bytes())
    specials = vocabularies.specials
    try:
        source = SentencePieceTokenizer(models[0], specials)
        same = models[1] == models[0]
        target = source if same else SentencePieceTokenizer(models[1], specials,
                                                            None if vocabularies.target is not vocabularies.source
                                                            else models[0])
    except RuntimeError as err:
        raise AttnmtError(f"{folder.path}: a sentencepiece model cannot be read ({str(err).splitlines()[0]})") from None
    config = folder.config
    start, end = config["decoder_start_token_id"], config["eos_token_id"]
    if not isinstance(start, int) or not 0 <= start < len(vocabularies.target):
        raise _refuse(folder, "decoder_start_token_id", start, "not an id of the target vocabulary")
    target_ids = {"unk": vocabularies.target.index(specials[1]), "sos": start, "eos": end}
    tgt_vocab = vocabularies.attnmt(vocabularies.target, target_ids)
    src_vocab = tgt_vocab if vocabularies.target is vocabularies.source else vocabularies.attnmt(
        vocabularies.source, {"unk": vocabularies.source.index(specials[1]), "sos": vocabularies.pad_id,
                              "eos": vocabularies.source.index(specials[0])})
    return Tokenization(source, target, src_vocab, tgt_vocab)


def _languages(folder: MarianFolder) -> tuple[str, str]:
    """tokenizer_config.json's source_lang and target_lang, else the last two parts of the folder's name
    (opus-mt-en-mg: en, mg)."""
    names = folder.tokenizer
    if names.get("source_lang") and names.get("target_lang"):
        return str(names["source_lang"]), str(names["target_lang"])
    parts = folder.path.resolve().name.split("-")
    if len(parts) >= 2 and all(re.fullmatch(r"[a-z]{2,3}", part) for part in parts[-2:]):
        return parts[-2], parts[-1]
    raise AttnmtError(f"{folder.file('tokenizer_config.json')}: no source_lang and target_lang, and the folder's name "
                      f"does not end in them (opus-mt-en-mg); add both to tokenizer_config.json")


def _never_generate(folder: MarianFolder, vocab: Vocabulary) -> list[str]:
    """bad_words_ids (single tokens: _check_representable) as the target vocabulary's tokens."""
    tokens = []
    for (index,) in folder.setting("bad_words_ids") or []:
        if not isinstance(index, int) or not 0 <= index < len(vocab):
            raise _refuse(folder, "bad_words_ids", [[index]], "not an id of the target vocabulary")
        tokens.append(vocab.itos[_attnmt_id(index, folder.config["pad_token_id"])])
    return tokens


def marian_config(folder: MarianFolder, tokenization: Tokenization) -> Config:
    """The attnmt config of a Marian model: its Transformer, tokenizers, vocabularies and decoding."""
    _check_representable(folder)
    c = folder.config
    max_length = folder.setting("max_length", HF_MAX_LENGTH)
    if not isinstance(max_length, int) or max_length < 2:
        raise _refuse(folder, "max_length", max_length, "an output needs the start token and one more")
    forced_eos = folder.setting("forced_eos_token_id") is not None
    src_lang, tgt_lang = _languages(folder)
    vocab = tokenization.tgt_vocab
    values = {
        # No corpus: the folder stands where a model trained here names its data.
        "data": {"format": "parallel", "path": str(folder.path), "src_lang": src_lang, "tgt_lang": tgt_lang},
        "tokenizer": {"level": "sentencepiece", "joint": tokenization.src_tokenizer is tokenization.tgt_tokenizer},
        "vocab": {"joint": tokenization.src_vocab is vocab,
                  "max_size": max(len(tokenization.src_vocab), len(vocab))},
        "model": marian_names()[1].model_section(c),
        "decode": {"beam_size": folder.setting("num_beams", 1), "alpha": folder.setting("length_penalty", 1.0),
                   "beam_scoring": "length_power_early" if folder.generation.get("early_stopping") else "length_power",
                   "never_generate": _never_generate(folder, vocab),
                   # The source's </s> takes a position. max_length counts the start token: the
                   # output has max_length - 1 tokens at most, the last a forced </s> if forced_eos_token_id.
                   "max_src_len": c["max_position_embeddings"] - 1,
                   "max_len_ratio": 0, "max_len_extra": max_length - 1 - forced_eos},
    }
    try:
        return config_from_dict(values)
    except AttnmtError as err:
        raise AttnmtError(f"{folder.file('config.json')}: {err}") from None


POSITIONS = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


def read_weights(folder: MarianFolder) -> tuple[dict[str, torch.Tensor], Path]:
    """The folder's tensors by their Marian names, and the file they came from: model.safetensors, else
    pytorch_model.bin through torch's weights-only loader, which refuses a file that would run code."""
    path = folder.file(SAFETENSORS)
    if not path.is_file():
        return _read_pytorch(folder), folder.file(PYTORCH)
    data = path.read_bytes()
    if data.startswith(b"version https://git-lfs"):
        raise AttnmtError(f"{path}: a Git LFS pointer, not the weights; fetch them (git lfs pull, or huggingface-cli "
                          f"download)")
    try:
        return load_safetensors_bytes(data), path
    except (SafetensorError, ValueError, RuntimeError) as err:
        raise AttnmtError(f"{path}: damaged or truncated ({str(err).splitlines()[0]})") from None


def _read_pytorch(folder: MarianFolder) -> dict[str, torch.Tensor]:
    path = folder.file(PYTORCH)
    if not path.is_file():
        raise AttnmtError(f"{folder.path}: no {SAFETENSORS} or {PYTORCH}: the model's weights are missing (a folder of "
                          f"sharded weights is not read)")
    try:
        values = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        if "Weights only load failed" in str(err):
            raise AttnmtError(f"{path}: loading it would run code that it names, and attnmt reads plain tensors only "
                              f"(torch.load weights_only); save the model as {SAFETENSORS}") from None
        raise AttnmtError(f"{path}: damaged or truncated ({str(err).splitlines()[0]})") from None
    except (RuntimeError, EOFError, ValueError, zipfile.BadZipFile) as err:
        raise AttnmtError(f"{path}: damaged or truncated ({str(err).splitlines()[0]})") from None
    if not isinstance(values, dict) or not all(isinstance(k, str) and isinstance(v, torch.Tensor)
                                               for k, v in values.items()):
        raise AttnmtError(f"{path}: not a state dict (tensors by name)")
    return values


def halves_sinusoids(count: int, dim: int) -> torch.Tensor:
    """Marian's static positions [count, dim]: row p = [sin(p·w_i) | cos(p·w_i)], w_i = 10000^(-2i/dim)."""
    angles = torch.arange(count, dtype=torch.float64).unsqueeze(1) * 10000.0 ** (
        -2 * torch.arange(dim // 2, dtype=torch.float64) / dim)                         # [count, dim/2]
    return torch.cat([angles.sin(), angles.cos()], dim=1).float()


def _swap_rows(tensor: torch.Tensor, pad_id: int) -> torch.Tensor:
    """A vocabulary-indexed tensor (rows, or a bias's entries) with rows 0 and `pad_id` exchanged."""
    swapped = tensor.detach().float().clone()
    swapped[[PAD_ID, pad_id]] = swapped[[pad_id, PAD_ID]]
    return swapped


def _vocabulary_tensors(weights: dict[str, torch.Tensor], config: Config, vocabularies: Vocabularies, file: Path
                        ) -> dict[str, torch.Tensor]:
    """The embeddings and the output layer, each row of Marian's <pad> moved to id 0, by Marian's names of each
    side's embeddings and the output layer (the shared and tied ones are one tensor under each name; the
    bias a vector)."""
    shared = weights.pop("model.shared.weight", None)
    sides = {}
    for side, order, name in (("src", vocabularies.source, "encoder"), ("tgt", vocabularies.target, "decoder")):
        embedding = weights.pop(f"model.{name}.embed_tokens.weight", shared)
        if embedding is None:
            raise AttnmtError(f"{file}: no model.{name}.embed_tokens.weight or model.shared.weight")
        if embedding.shape[0] != len(order):
            vocab_file = "target_vocab.json" if side == "tgt" and order is not vocabularies.source else "vocab.json"
            raise AttnmtError(f"{file.parent / vocab_file} holds {len(order)} tokens, but the {name}'s embeddings in "
                              f"{file.name} have {embedding.shape[0]} rows: the vocabulary is not this model's")
        sides[side] = _swap_rows(embedding, vocabularies.pad_id)
    if config.model.share_embeddings:
        sides["src"] = sides["tgt"]
    head = weights.pop("lm_head.weight", None)   # a copy of the target embeddings where they are tied
    output = sides["tgt"]
    if not config.model.tie_embeddings:
        if head is None:
            raise AttnmtError(f"{file}: no lm_head.weight, which config.json's tie_word_embeddings false needs")
        output = _swap_rows(head, vocabularies.pad_id)
    bias = weights.pop("final_logits_bias", torch.zeros(1, len(vocabularies.target)))
    return {"model.encoder.embed_tokens.weight": sides["src"], "model.decoder.embed_tokens.weight": sides["tgt"],
            "lm_head.weight": output, "final_logits_bias": _swap_rows(bias.reshape(-1), vocabularies.pad_id)}


def attnmt_weights(weights: dict[str, torch.Tensor], config: Config, vocabularies: Vocabularies, file: Path
                   ) -> dict[str, torch.Tensor]:
    """Marian's tensors as the state dict of attnmt's Transformer, named by the family's layout (every name
    and shape checked against the network); tied matrices stay one tensor."""
    weights = dict(weights)
    vocabulary = _vocabulary_tensors(weights, config, vocabularies, file)
    for name in POSITIONS:
        positions = weights.pop(name, None)
        if positions is not None and not torch.allclose(positions.float(), halves_sinusoids(*positions.shape),
                                                        atol=2e-3):
            raise AttnmtError(f"{file}: {name} are not Marian's static sinusoids, which attnmt computes")
    names, state = marian_names()[1], {}
    for name, tensor in {**vocabulary, **{name: t.detach().float() for name, t in weights.items()}}.items():
        ours = names.ours(name)
        if ours is None:
            raise AttnmtError(f"{file}: weight {name} has no place in attnmt's Transformer")
        state[ours] = tensor
    with torch.device("meta"):   # names and shapes only: no memory, no random draws
        network = build_model(config.model, len(vocabularies.source), len(vocabularies.target), fast_paths=False)
    expected = {name: tuple(tensor.shape) for name, tensor in network.state_dict().items()}
    missing = sorted(set(expected) - set(state))
    if missing:
        raise AttnmtError(f"{file}: lacks the weights of attnmt's {', '.join(missing[:3])}"
                          f"{' ...' if len(missing) > 3 else ''} (config.json's layers: more than the file holds?)")
    for name, tensor in state.items():
        if name not in expected:
            raise AttnmtError(f"{file}: holds a layer config.json does not have (as attnmt's {name})")
        if tuple(tensor.shape) != expected[name]:
            raise AttnmtError(f"{file}: attnmt's {name} has shape {list(tensor.shape)} there, but config.json makes it "
                              f"{list(expected[name])}")
    return state


def read_marian(path: str | Path) -> tuple[ModelDescription, dict[str, torch.Tensor], dict[str, Any]]:
    """A Marian folder as attnmt reads it: the description (config, tokenizers, vocabularies), the
    Transformer's state dict, and where it came from (a model file's `origin`)."""
    folder = read_folder(path)
    vocabularies = read_vocabularies(folder)
    tokenization = read_tokenization(folder, vocabularies)
    config = marian_config(folder, tokenization)
    weights, file = read_weights(folder)
    state = attnmt_weights(weights, config, vocabularies, file)
    origin = {"format": ORIGIN_FORMAT, "folder": str(folder.path.resolve()), "name": folder.config.get("_name_or_path", ""),
              "config_sha256": folder.config_sha256, "weights": file.name,
              # whether generate forces </s> at its limit: the export writes the folder's choice back
              "forced_eos": folder.setting("forced_eos_token_id") is not None}
    return ModelDescription(config, tokenization), state, origin


def import_marian(path: str | Path, out: str | Path, overwrite: bool = False) -> Path:
    """Write the Marian model in the folder `path` as the attnmt model file `out` (atomically: nothing
    is written unless the whole folder reads)."""
    out = Path(out)
    if out.exists() and not overwrite:
        raise AttnmtError(f"{out} exists; use --overwrite to replace it")
    check_parent_dir(out)
    description, state, origin = read_marian(path)
    save_model(out, description, state, origin=origin)
    return out


# --------------------------------------------------------------------------- writing a Marian folder

# What a Marian model is beyond the family's keys (the layout's `inexpressible` says those): a model with
# another value cannot be written as one (check_expressible).
SENTENCEPIECE_LEVELS = ("bpe", "unigram", "sentencepiece")   # tokenizers a Marian folder's source.spm can be


def _shown(value: Any) -> str:
    """A setting's value as a config file writes it: pre, true."""
    return value if isinstance(value, str) else json.dumps(value)


def _inexpressible(path: str | Path, key: str, value: Any, needed: Any, why: str) -> AttnmtError:
    return AttnmtError(f"{path}: {key} {_shown(value)}: a Marian model cannot express it ({why}: {key} {_shown(needed)})")


def check_expressible(path: str | Path, config: Config, names: MarianNames) -> None:
    """Refuse, in one line naming the setting and its value, a model a Marian folder cannot express."""
    found = names.inexpressible(config.model)
    if found is not None:
        raise _inexpressible(path, f"model.{found.key}", found.value, found.needed, found.why)
    if config.tokenizer.lowercase:
        raise _inexpressible(path, "tokenizer.lowercase", True, False, "MarianTokenizer does not lowercase")
    if config.tokenizer.level not in SENTENCEPIECE_LEVELS:
        raise AttnmtError(f"{path}: tokenizer.level {config.tokenizer.level}: a Marian model cannot express it "
                          f"(MarianTokenizer splits text with sentencepiece models: tokenizer.level bpe or unigram, "
                          f"or an imported model's sentencepiece)")


def export_notes(config: Config, max_length: int) -> list[str]:
    """What transformers will do otherwise than attnmt with an exported model, one line each."""
    decode, level = config.decode, config.tokenizer.level
    notes = []
    if decode.beam_scoring not in GENERATE_EARLY_STOPPING:
        notes.append(f"decode.beam_scoring {decode.beam_scoring}: transformers' generate scores beams its own way "
                     f"(log P / |Y|^alpha, which decode.beam_scoring length_power matches), so its beam search may choose "
                     f"other translations than attnmt's; greedy decoding is the same")
    if decode.max_len_ratio:
        notes.append(f"decode.max_len_ratio {decode.max_len_ratio:g}: generate has one length limit for every sentence, "
                     f"max_length {max_length}, what the longest source (decode.max_src_len {decode.max_src_len}) may "
                     f"have here; attnmt's limit grows with each source")
    if level in ("bpe", "unigram"):
        notes.append(f"tokenizer.level {level}: attnmt normalizes text before sentencepiece (Unicode NFC, each run of "
                     f"white space one space, invisible characters such as zero-width spaces dropped) and MarianTokenizer "
                     f"does not: text with such characters, special tokens or a leading >>xx<< may tokenize otherwise")
    return notes


def marian_tensors(path: str | Path, state: dict[str, torch.Tensor], model: ModelConfig, names: MarianNames
                   ) -> dict[str, torch.Tensor]:
    """attnmt's Transformer weights under transformers' names (the family's layout gives each its name), as
    MarianMTModel.save_pretrained writes them: shared embeddings as model.shared, tied matrices once,
    final_logits_bias as [1, V], and no static positions (transformers computes them: _keys_to_ignore_on_save)."""
    tensors = {}
    for name, tensor in state.items():
        marian = names.marian(name)
        if marian is None:
            raise AttnmtError(f"{path}: attnmt's {name} has no place in a Marian model")
        tensors[marian] = tensor
    if model.share_embeddings:
        tensors["model.shared.weight"] = tensors["model.decoder.embed_tokens.weight"]
    if model.share_embeddings and model.tie_embeddings:
        # transformers 5 ties shared embeddings only under tie_word_embeddings: otherwise each is read on its own
        del tensors["model.encoder.embed_tokens.weight"], tensors["model.decoder.embed_tokens.weight"]
    if model.tie_embeddings:
        del tensors["lm_head.weight"]
    tensors["final_logits_bias"] = tensors["final_logits_bias"].reshape(1, -1)
    # Copies: safetensors refuses tensors that share memory, as tied ones do.
    return {name: tensor.detach().float().contiguous().clone() for name, tensor in tensors.items()}


def _token_ids(target: Vocabulary, forced_eos: bool) -> dict[str, Any]:
    """The special ids both config.json and generation_config.json say: attnmt's order, <pad> at 0;
    decoding starts from the vocabulary's start token (an imported model's <pad>, attnmt's own <sos>)."""
    return {"pad_token_id": PAD_ID, "eos_token_id": target.eos_id, "bos_token_id": target.sos_id,
            "decoder_start_token_id": target.sos_id, "forced_eos_token_id": target.eos_id if forced_eos else None}


def marian_config_json(config: Config, text: Tokenization, max_length: int, forced_eos: bool, names: MarianNames
                       ) -> dict[str, Any]:
    """config.json: the MarianConfig of the model (the family's layout gives its network's keys; REPRESENTABLE's
    keys with the values the import reads)."""
    # positions for the longest source with its </s>, and the longest output with its start token
    network = names.marian_config(config.model, max(config.decode.max_src_len + 1, max_length))
    return {"architectures": ["MarianMTModel"], "model_type": "marian", **network,
            "vocab_size": len(text.src_vocab), "decoder_vocab_size": len(text.tgt_vocab),
            **_token_ids(text.tgt_vocab, forced_eos), **{key: value for key, (value, _) in REPRESENTABLE.items()},
            "use_cache": True, "dtype": "float32"}


def generation_json(config: Config, target: Vocabulary, max_length: int, forced_eos: bool) -> dict[str, Any]:
    """generation_config.json: decode's settings as generate's (bad_words_ids from decode.never_generate)."""
    decode = config.decode
    never = [[target.stoi[token]] for token in decode.never_generate]
    return {**_token_ids(target, forced_eos), "max_length": max_length, "num_beams": decode.beam_size,
            "length_penalty": decode.alpha, **({"bad_words_ids": never} if never else {}),
            **({"early_stopping": True} if GENERATE_EARLY_STOPPING.get(decode.beam_scoring) else {})}


def _special_tokens(text: Tokenization) -> dict[str, Any]:
    """tokenizer_config.json's special tokens: the vocabularies' own strings (attnmt's <pad>, <unk>, <eos>,
    and <sos>, where decoding starts; an imported model's </s>, <unk>, <pad> and its others), so that
    MarianTokenizer appends the end token attnmt appends and leaves these out of the text it decodes."""
    vocab = text.src_vocab
    named = {"eos_token": vocab.eos, "unk_token": vocab.itos[vocab.unk_id], "pad_token": vocab.itos[PAD_ID]}
    others = [text.tgt_vocab.itos[text.tgt_vocab.sos_id]]
    if isinstance(text.src_tokenizer, SentencePieceTokenizer):
        others += text.src_tokenizer.specials
    return {**named, "additional_special_tokens": [t for t in dict.fromkeys(others) if t not in named.values()]}


def _sentencepiece_model(tokenizer: Tokenizer) -> bytes:
    """The sentencepiece model of a tokenizer check_expressible let through."""
    assert isinstance(tokenizer, (SubwordTokenizer, SentencePieceTokenizer)), tokenizer.level
    return tokenizer.model


def write_tokenizer_files(folder: Path, config: Config, text: Tokenization) -> None:
    """source.spm, target.spm, vocab.json (target_vocab.json for separate vocabularies) in attnmt's order,
    and tokenizer_config.json: what MarianTokenizer reads."""
    separate = text.src_vocab is not text.tgt_vocab
    vocabularies = [("vocab.json", text.src_vocab)] + ([("target_vocab.json", text.tgt_vocab)] if separate else [])
    for name, vocab in vocabularies:
        write_json(folder / name, {token: index for index, token in enumerate(vocab.itos)})
    (folder / "source.spm").write_bytes(_sentencepiece_model(text.src_tokenizer))
    (folder / "target.spm").write_bytes(_sentencepiece_model(text.tgt_tokenizer))
    write_json(folder / "tokenizer_config.json", {
        "source_lang": config.data.src_lang, "target_lang": config.data.tgt_lang, "separate_vocabs": separate,
        **_special_tokens(text), "model_max_length": config.decode.max_src_len + 1, "tokenizer_class": "MarianTokenizer"})


class MarianWriter(FolderWriter):
    """A Hugging Face Marian folder, which transformers' MarianMTModel and MarianTokenizer load."""

    format = ORIGIN_FORMAT

    def cannot_hold(self, path: str | Path, arch: str) -> str:
        held = with_layout(ORIGIN_FORMAT)
        return (f"{path}: model.arch {arch}: a Marian model cannot express it (a Marian model is a Transformer: "
                f"model.arch {' or '.join(held)})")

    def check(self, path: str | Path, config: Config, layout: Any) -> None:
        check_expressible(path, config, layout)

    def write(self, translator: Translator, layout: Any, folder: Path, meta: dict[str, Any]) -> list[str]:
        config, text = translator.config, translator.tokenization
        # attnmt ends an output cut at its limit with the end token, as forced_eos_token_id does; an imported
        # folder without it keeps its way. max_length counts the start token.
        forced_eos = (meta.get("origin") or {}).get("forced_eos", True)
        max_length = translator.max_output_tokens(config.decode.max_src_len) + 1 + forced_eos
        write_json(folder / "config.json", marian_config_json(config, text, max_length, forced_eos, layout))
        write_json(folder / "generation_config.json", generation_json(config, text.tgt_vocab, max_length, forced_eos))
        save_safetensors_file(marian_tensors(translator.path or folder, translator.model.state_dict(), config.model,
                                             layout), str(folder / SAFETENSORS), metadata={"format": "pt"})
        write_tokenizer_files(folder, config, text)
        return export_notes(config, max_length)


def export_marian(model_path: str | Path, out_dir: str | Path, overwrite: bool = False) -> tuple[Path, list[str]]:
    """Write the Transformer at `model_path` as the Hugging Face Marian folder `out_dir` (atomically), which
    transformers' MarianMTModel and MarianTokenizer load; refused in one line, nothing written, where a Marian
    model cannot express its settings. Returns the folder and what transformers will do otherwise (export_notes)."""
    return write_folder(MarianWriter(), model_path, out_dir, overwrite)
