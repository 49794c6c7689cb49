"""All settings in one typed place: each section's dataclass, every number with its allowed range, and
the checks of their combinations (`validate`). Reading them from YAML, key=value overrides or a model
file's dict is configfile.py's, which chooses the model section's class from the families' registry."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from .errors import AttnmtError
from .threads import parse_setting

# auto: bf16 where the device computes it natively, fp32 elsewhere (precision.py).
TrainPrecision = Literal["fp32", "bf16", "auto"]
DecodePrecision = Literal["fp32", "bf16", "int8", "auto"]
PRECISIONS: tuple[DecodePrecision, ...] = typing.get_args(DecodePrecision)
# What decodes (--engine): auto picks CTranslate2 for a directory `attnmt export --to ctranslate2` wrote.
ENGINES = ("auto", "attnmt", "ctranslate2")


@dataclass(frozen=True)
class Range:
    """The values a number may take, written as an interval: "[0, 1)", "(0, inf)", "[1, 64]"."""

    text: str

    @functools.cached_property
    def bounds(self) -> tuple[float, float, bool, bool]:
        """(low, high, low included, high included), parsed once."""
        match = re.fullmatch(r"([\[(])\s*(-?[\w.]+)\s*,\s*(-?[\w.]+)\s*([\])])", self.text)
        if not match:
            raise ValueError(f"not an interval: {self.text!r}")
        return float(match[2]), float(match[3]), match[1] == "[", match[4] == "]"

    def __contains__(self, value: float) -> bool:
        low, high, low_in, high_in = self.bounds
        return (math.isfinite(value) and (low < value or (low_in and value == low))
                and (value < high or (high_in and value == high)))

    def refusal(self, value: float) -> Optional[str]:
        """Why `value` is not allowed, or None if it is."""
        return None if value in self else f"{value!r} is out of range; allowed: {self.text}"

    def __str__(self) -> str:
        return self.text


def ranged(default: float, interval: str, help: str = "") -> Any:
    """A numeric dataclass field whose values must lie in `interval` (checked when loaded)."""
    assert default in Range(interval), (default, interval)
    return field(default=default, metadata={"range": Range(interval), "help": help})


def field_range(cls: type, name: str) -> Range:
    """The range of the field `cls.name`, made by `ranged`."""
    return next(f.metadata["range"] for f in dataclasses.fields(cls) if f.name == name)


MAX_SEED = 2**32 - 1


@dataclass
class DataConfig:
    """Where the sentence pairs come from and how they are split."""

    # tsv: a manythings/Tatoeba file; parallel: line-aligned files; dates: the built-in demo corpus.
    format: Literal["tsv", "parallel", "dates"] = "tsv"
    # tsv: the manythings file; parallel: the directory holding <prefix>.<lang>[.gz] files.
    path: str = ""
    # Language codes: the file suffixes of the parallel format; in a tsv file, English is column 1.
    src_lang: str = "de"
    tgt_lang: str = "en"
    # The languages the model reads, as codes separated by spaces ("en de"); "" = src_lang alone.
    # What the server says it translates from (/languages, /model, LibreTranslate's source and
    # detection); it changes nothing that is read or prepared.
    source_languages: str = ""
    # parallel format: file prefixes of the three splits (Multi30k names by default). Several
    # training corpora: their prefixes separated by spaces, each with an optional whole weight, how
    # many times its pairs are seen per epoch ("europarl commoncrawl news:4"; default 1).
    train_prefix: str = "train"
    # parallel format: "" cuts that split from the training pairs instead of reading files
    # (valid_size / test_size pairs, seeded by seed, as tsv does; from all training corpora together).
    valid_prefix: str = "val"
    test_prefix: str = "test_2016_flickr"
    # Held-out sizes of the seeded split: tsv and dates formats, and parallel with an empty prefix.
    valid_size: int = ranged(1000, "[1, 10000000]")
    test_size: int = ranged(1000, "[0, 10000000]")
    # Read only the first N pairs of the file (0 = all); manythings files are sorted by length.
    max_pairs: int = ranged(0, "[0, inf)")
    # dates format: how many pairs to generate in all (0 = 24,000).
    num_pairs: int = ranged(0, "[0, 10000000]")
    # Training pairs with more tokens than this on either side are left out.
    max_len: int = ranged(100, "[1, 100000]")
    # Training pairs whose one side has more than this many times the tokens of the other are left
    # out (0 = keep all; 9 is the Moses clean-corpus default).
    max_ratio: float = ranged(9.0, "[0, inf)")
    # Leave out training pairs that repeat an earlier pair exactly (costs ~100 bytes of memory a
    # pair while preparing).
    dedup: bool = False
    # Processes that tokenize the training data while preparing it (0 = one per CPU this process may use:
    # its affinity, capped by a cgroup CPU quota).
    workers: int = ranged(0, "[0, 1024]")
    # Where prepared corpora are kept, each in a folder named by its raw data and settings
    # ("" = $ATTNMT_CACHE/prepared, default ~/.cache/attnmt/prepared); attnmt prepare writes it.
    prepared_dir: str = ""
    # Seed of the split into train, valid and test (tsv, dates, parallel with an empty prefix) and of
    # the generated dates.
    seed: int = ranged(1, f"[0, {MAX_SEED}]")


@dataclass
class TokenizerConfig:
    # word, char, or sentencepiece subwords (bpe, unigram) trained on the training data; sentencepiece:
    # a pretrained model's own, used as given (an imported model's: attnmt import; to train from it,
    # set train.init_from to that model file).
    level: Literal["word", "char", "bpe", "unigram", "sentencepiece"] = "word"
    # Lowercase both sides before tokenizing.
    lowercase: bool = False
    # Subwords only: pieces to learn, and one model for both languages (joint) or one each.
    vocab_size: int = ranged(8000, "[8, 1000000]")
    joint: bool = True
    # Subwords only: the training pairs the model learns its pieces from, drawn at random (seeded by
    # data.seed) from a larger corpus, as Marian and OpenNMT-py do (0 = all pairs).
    sample_pairs: int = ranged(1000000, "[0, inf)")


@dataclass
class VocabConfig:
    # Tokens seen fewer times in the training data become <unk>.
    min_freq: int = ranged(1, "[1, inf)")
    # The largest vocabulary, the four special tokens included (the most frequent tokens are kept).
    max_size: int = ranged(50000, "[5, 10000000]")
    # One vocabulary of both languages' tokens for both sides (with a joint subword model), so
    # that model.share_embeddings can tie the source and target embeddings.
    joint: bool = False


def moved_key(values: dict, key: str, old: str, new: str, dropped: object = None) -> dict:
    """`values` (sections of keys) with section `old`'s `key` moved into section `new` (given last, an override:
    it wins there), or dropped where its value is `dropped`."""
    section, into = values.get(old), values.get(new) or {}
    if not isinstance(section, dict) or key not in section or not isinstance(into, dict):
        return values
    value = section[key]
    moved = {**values, old: {k: v for k, v in section.items() if k != key}}
    return moved if value == dropped else {**moved, new: {**into, key: value}}


@dataclass
class ModelConfig:
    """The model section: the keys every family has. Each family's config subclasses this with its
    own keys and checks (attnmt/families/<family>/config.py); model.arch picks which."""

    # The model family (attnmt/families): rnn (encoder-decoder RNN with attention, Bahdanau or
    # Luong) or transformer (Vaswani et al. 2017); files written before families existed are rnn.
    arch: str = "rnn"
    # Embedding width (the Transformer's model width d), layer counts, dropout (the Transformer's
    # on embeddings and residuals).
    emb_dim: int = ranged(256, "[1, 65536]")
    enc_layers: int = ranged(1, "[1, 64]")
    dec_layers: int = ranged(1, "[1, 64]")
    dropout: float = ranged(0.2, "[0, 1)")
    # Share the target embedding matrix with the output layer (Press & Wolf 2017); the RNN
    # decoder's output vector then has emb_dim units.
    tie_embeddings: bool = False
    # The source embeddings are the target embeddings too (needs vocab.joint); with
    # tie_embeddings, all three matrices are one.
    share_embeddings: bool = False
    # Initialize every weight uniformly in [-x, x] (0.1 in Luong et al. 2015 and OpenNMT);
    # 0 keeps the family's default (RNN: PyTorch's per-layer; Transformer: Xavier, N(0, d^-1/2) embeddings).
    init_uniform: float = ranged(0.0, "[0, 10]")
    # End every source with the vocabulary's end-of-sentence token, as Marian and fairseq models read
    # their input (an imported OPUS-MT model needs it); attnmt's own recipes do not.
    source_eos: bool = False

    @classmethod
    def moved_keys(cls, values: dict) -> dict:
        """A config's `values` (sections of keys) with the keys earlier versions of this family kept in
        another section in their place now (moved_key), so that old configs and model files read alike."""
        return values

    def without_attention(self) -> str:
        """The setting that leaves a model of these settings without attention, as a message names it."""
        return f"model.arch {self.arch}"

    def check(self, config: "Config") -> None:
        """Refuse combinations the family cannot build (its subclass adds its own), naming the keys."""
        if self.share_embeddings and not config.vocab.joint:
            raise AttnmtError("model.share_embeddings needs vocab.joint: true (one vocabulary for both sides)")


@dataclass
class TrainConfig:
    # Where model.safetensors and checkpoint.safetensors are written.
    out_dir: str = "runs/model"
    # Passes over the training data at most.
    epochs: int = ranged(10, "[1, 1000000]")
    # A wall-clock budget (0 = no limit): training stops after the update during which this many
    # minutes have passed, mid-epoch if need be, then validates once more, keeps the best model and
    # translates the test split (those last two on top of the budget). It counts the whole run: a
    # run resumed with --resume has the minutes its earlier sessions left (raise it to train on).
    # How many updates fit depends on the machine's speed and load, so a time-limited run does not
    # reproduce; a fixed number of epochs without a budget is what reproduces a run exactly.
    max_minutes: float = ranged(0.0, "[0, inf)")
    # A batch holds batch_size sentences, or sentences of about batch_size target tokens in all.
    batch_size: int = ranged(64, "[1, 10000000]")
    batch_type: Literal["sentences", "tokens"] = "sentences"
    # Cut each batch into this many parts, run one after the other before the update (gradient
    # accumulation), so that a large batch fits in a small device's memory. Under torchrun a batch
    # is cut into ranks x accumulate parts: the same product cuts it the same way.
    accumulate: int = ranged(1, "[1, 1024]")
    # Fine-tuning: start from this model file's weights, tokenizers and vocabularies instead of
    # random weights and new ones. The run's model, tokenizer and vocab sections are the file's (a
    # key this config sets to another value is refused; the dropouts are the run's choice), and so
    # are the file's decode keys of the model (beam, length penalty, lengths, tokens never
    # generated) that this config leaves out. Empty: from scratch. A resumed run continues its
    # checkpoint, which started from it.
    init_from: str = ""
    # Adam's learning rate (the peak, with the warmup and linear schedulers).
    lr: float = ranged(1e-3, "(0, 10]")
    # Adam's decay of its running mean of squared gradients: 0.999 is torch's default; 0.98, the
    # Transformer paper's and fairseq's recipes', forgets a large early gradient sooner.
    adam_beta2: float = ranged(0.999, "(0, 1)")
    # The gradients' norm is clipped to this.
    clip: float = ranged(1.0, "(0, inf)")
    # The share of the target probability spread over the whole vocabulary.
    label_smoothing: float = ranged(0.0, "[0, 1)")
    # Learning rate: constant; halved (plateau_factor) when validation stops improving for
    # plateau_patience epochs; warmup: linear warmup over warmup_steps, then inverse square root
    # decay; or linear: the same warmup, then a straight line down to min_lr at update decay_steps
    # (set it to the updates your time budget makes: a run that ends as the rate reaches its
    # floor has spent its last updates at small steps, which averaging and selection reward).
    scheduler: Literal["none", "plateau", "warmup", "linear"] = "none"
    plateau_factor: float = ranged(0.5, "(0, 1)")
    plateau_patience: int = ranged(1, "[1, inf)")
    warmup_steps: int = ranged(1000, "[1, inf)")
    # scheduler linear: the update at which the rate reaches min_lr (and stays); above warmup_steps.
    decay_steps: int = ranged(10000, "[2, inf)")
    # No scheduler takes the learning rate below this.
    min_lr: float = ranged(1e-5, "[0, 10]")
    # Which validation figure picks the best model and drives plateau and early stopping.
    select_by: Literal["loss", "bleu"] = "loss"
    # Stop after this many validations without a better model (0 = never stop early).
    patience: int = ranged(0, "[0, inf)")
    # At the end, average the weights of the last N epochs (kept as average_keep says).
    average_last: int = ranged(0, "[0, 1000]")
    # better: keep that average only if it validates better than every epoch; always: keep it (a
    # greedy validation BLEU that moves by half a point from epoch to epoch can pass over an average
    # that beam search translates better: docs/recipes.md).
    average_keep: Literal["better", "always"] = "better"
    # The same seed, config and data give the same weights on a CPU.
    seed: int = ranged(1, f"[0, {MAX_SEED}]")
    # auto (a GPU when there is one), cpu, cuda, cuda:1, ...
    device: str = "auto"
    # The threads torch computes with: a number, or auto, the cores that other programs leave free
    # when training starts (one thread on a GPU). The count stays fixed for the run, since another
    # count rounds sums differently: the log and metrics.jsonl record it, --resume takes it over.
    threads: str = "auto"
    # fp32; bf16 mixed precision (matrix products in bfloat16; weights and loss in fp32), fast on
    # CPUs with AVX512-BF16 or AMX and on recent GPUs, slower than fp32 elsewhere; or auto: fp32
    # where the device has no native bf16, bf16 on a GPU that has it, and on a CPU that has it
    # whichever trains the first batch faster (timed in both; bf16 when at least 10 % faster).
    # The run keeps its format to the end: the log and the model file record it, --resume keeps it.
    precision: TrainPrecision = "fp32"
    # Train with the fast paths (attnmt/fast: the fused loops with hand-written backwards, the
    # sigmoid form of additive attention, ...); false runs the plain reference modules (slower, the same model).
    fast_paths: bool = True
    # Without a terminal for the progress bar, log a line every this many updates (0 = never).
    log_every: int = ranged(200, "[0, inf)")
    # Also save checkpoint.safetensors every this many updates (0 = only at the end of each epoch).
    checkpoint_every: int = ranged(500, "[0, inf)")
    # Also log every validation's figures for TensorBoard into out_dir/tensorboard (needs the
    # tensorboard package: pip install tensorboard). metrics.jsonl and curves.png are always written.
    tensorboard: bool = False
    # torchrun: how long a rank waits for the others (rank 0 validating included) before the job
    # ends with an error naming the rank that failed; a rank that dies ends it at once.
    rank_timeout_min: float = ranged(30.0, "(0, 10080]")
    # Attention as it forms: the first this many validation sentences (0 = none), translated with
    # their cross-attention at updates 1, 2, 4, 8, ... of the first epoch and at every validation,
    # into out_dir/timeline.jsonl (attnmt plot RUN --timeline draws it).
    watch: int = ranged(3, "[0, 100]")
    # Instead: the sentences of this file, one per line; a line `sentence<TAB>reference<TAB>gold links`
    # (i-j sure, ipj possible, words numbered from watch_gold_base) also records, at each point, the
    # alignment error (AER) of the attention's links (argmax) on the reference against the gold ones.
    watch_file: str = ""
    watch_gold_base: int = ranged(0, "[0, 1]")
    # Stop early once validation exact match reaches this fraction (0 = never).
    target_exact_match: float = ranged(0.0, "[0, 1]")
    # Unused; kept so that model files that carry it still load.
    samples: int = ranged(3, "[0, inf)")


@dataclass
class DecodeConfig:
    # Longer inputs are cut to this many tokens (a documented limit instead of running out of memory).
    max_src_len: int = ranged(250, "[1, 100000]")
    # Outputs stop after max_len_ratio x source tokens + max_len_extra tokens at the latest.
    max_len_ratio: float = ranged(2.0, "[0, 1000]")
    max_len_extra: int = ranged(10, "[0, 100000]")
    # Sentences decoded at once (flag --batch-size).
    batch_size: int = ranged(64, "[1, 100000]")
    # 1 = greedy decoding; more = beam search with that many hypotheses per sentence.
    beam_size: int = ranged(1, "[1, 1000]")
    # The length penalty's exponent for beam search (0 = rank by plain log-probability).
    alpha: float = ranged(0.0, "[0, 10]")
    # How beam search scores and finishes hypotheses: gnmt divides the log-probability by GNMT's
    # ((5 + |Y|) / 6)^alpha, keeps the first beam_size finished and stops once no live hypothesis
    # can still enter the n-best; length_power divides it by |Y|^alpha (|Y| with the end token),
    # keeps the best beam_size finished and stops once the best live hypothesis, scored at its length
    # so far, is no better than the worst kept (transformers' generate: an imported model's default,
    # so that it translates as transformers does); length_power_early scores alike but stops once
    # beam_size hypotheses have finished (generate's early_stopping true; fewer steps; CTranslate2 stops
    # so too). Greedy decoding is the same. Earlier names: huggingface, huggingface_early.
    beam_scoring: Literal["gnmt", "length_power", "length_power_early"] = "gnmt"
    # Tokens never written: their log-probability is -inf at every step (Hugging Face's bad_words_ids
    # of single tokens; an imported Marian model bans its <pad>, e.g. never_generate: ["<pad>"]).
    never_generate: list[str] = field(default_factory=list)
    # fp32; bf16 matrix products (faster on CPUs with AVX512-BF16/AMX and recent GPUs); int8,
    # bf16 with the decoder's per-step products in int8 (RNN: its RNN, query, combine, output layer;
    # Transformer: each decoder layer's but the source's keys and values, output layer) (CPUs only;
    # fastest on CPUs with AVX512-VNNI/AMX); or auto: bf16 where the device computes
    # it natively, fp32 elsewhere.
    precision: DecodePrecision = "fp32"
    # Decode with the fast paths (attnmt/fast); false runs the plain reference modules (slower,
    # the same translations up to rounding); it rules out int8 and --compile. Flag: --reference.
    fast_paths: bool = True


# Values earlier versions named otherwise: (section, key) -> {old value: today's}. Their configs and model
# files read as they did.
RENAMED_VALUES = {("decode", "beam_scoring"): {"huggingface": "length_power", "huggingface_early": "length_power_early"}}

# The decode keys that belong to a model (how it is read out), not to the machine that decodes it: a
# fine-tuning run (train.init_from) takes them from its model file where its config leaves them out.
MODEL_DECODE_KEYS = ("max_src_len", "max_len_ratio", "max_len_extra", "beam_size", "alpha", "beam_scoring",
                     "never_generate")


@dataclass
class ServeConfig:
    """Limits of `attnmt serve`; not stored in model files. Each field is a CLI flag (--max-chars ...)."""

    max_chars: int = ranged(1000, "[1, 1000000]", help="characters per sentence")
    max_tokens: int = ranged(250, "[1, 100000]", help="source tokens per sentence")
    max_sentences: int = ranged(32, "[1, 100000]", help="sentences per request")
    max_beam: int = ranged(10, "[1, 1000]", help="largest beam a request may ask for")
    # An attribution on /explain runs forced passes over the sentence pair, forward and backward;
    # their count times the source's length bounds its time.
    max_ig_steps: int = ranged(200, "[1, 10000]", help="most ig_steps an attribution on /explain may ask for")
    max_attribution_work: int = ranged(50000, "[1, 100000000]", help=(
        "most work an attribution on /explain may ask for: its steps × passes per step (grad 1, ig ig_steps + 2, "
        "occlusion 1 + the words) × source tokens"))
    timeout_s: float = ranged(30.0, "(0, 86400]", help="seconds a request may wait and run before a 504")
    # A client that stops half-way through its body would otherwise hold its request, and a graceful
    # shutdown, forever.
    body_timeout_s: float = ranged(10.0, "(0, 86400]", help="seconds a request's body may take to arrive "
                                                            "before a 408")
    queue_size: int = ranged(256, "[1, 1000000]", help="requests waiting for the model before a 503")
    # Requests arriving within this window with the same options share one model call.
    batch_window_ms: float = ranged(5.0, "[0, 10000]", help="milliseconds to gather requests into a batch")
    max_batch: int = ranged(64, "[1, 100000]", help="sentences per model call")
    # Per API key, or per client address without keys (serve/access.py); 0 = no limit, as a server for
    # one user on 127.0.0.1 needs none.
    requests_per_minute: int = ranged(0, "[0, 1000000]", help="translating requests per minute per key or "
                                                              "client address (0 = no limit)")
    sentences_per_minute: int = ranged(0, "[0, 100000000]", help="sentences per minute per key or client address "
                                                                 "(0 = no limit)")
    rate_window_s: int = ranged(60, "[1, 86400]", help="the moving window the per-minute limits are counted over, "
                                                       "in seconds: a window of 10 allows a sixth of each per 10 s")
    # Every model stays loaded for the server's life; GET /models says what each took.
    max_models: int = ranged(8, "[1, 1000]", help="models one server may load")

    def max_body_bytes(self) -> int:
        # A JSON-escaped character takes at most 6 bytes (\uXXXX); the rest is room for the keys.
        return self.max_sentences * self.max_chars * 6 + 4096


def override_decode_precision(config: "Config", precision: Optional[str]) -> None:
    """A decoding engine's `precision` argument (fp32, bf16, int8, auto; None keeps the file's) over
    the decode.precision a model was saved with."""
    if precision is None:
        return
    if precision not in PRECISIONS:
        raise AttnmtError(f"precision {precision!r}: choose {', '.join(PRECISIONS)}")
    config.decode.precision = precision


def validate_serve(config: ServeConfig) -> None:
    for f in dataclasses.fields(config):
        check_range(getattr(config, f.name), f.metadata["range"], f"serve {f.name}")
    for name in "requests_per_minute", "sentences_per_minute":
        rate = getattr(config, name)
        if rate * config.rate_window_s % 60:
            raise AttnmtError(f"serve {name}: {rate} per minute is {rate * config.rate_window_s / 60:g} per "
                              f"rate_window_s of {config.rate_window_s} s; choose values that make it a whole number")
    sentences = config.sentences_per_minute * config.rate_window_s // 60
    if 0 < sentences < config.max_sentences:
        raise AttnmtError(f"serve sentences_per_minute: {config.sentences_per_minute} allows {sentences} sentences per "
                          f"{config.rate_window_s} s, fewer than a request may hold (max_sentences "
                          f"{config.max_sentences}): such a request could never pass")


LANGUAGE_CODE = re.compile(r"[A-Za-z]{2,3}(-[A-Za-z0-9]{1,8})*")


def source_languages(data: DataConfig) -> list[str]:
    """The languages a model reads: data.source_languages, or data.src_lang when it is empty."""
    codes = data.source_languages.split()
    for code in codes:
        if not LANGUAGE_CODE.fullmatch(code):
            raise AttnmtError(f"data.source_languages: {code!r} is not a language code (2 or 3 letters, e.g. de, "
                              f"or with a subtag, e.g. pt-BR)")
        if codes.count(code) > 1:
            raise AttnmtError(f"data.source_languages: {code!r} is named twice")
    return codes or [data.src_lang]


MAX_CORPUS_WEIGHT = 1000


def training_corpora(data: DataConfig) -> list[tuple[str, int]]:
    """The training corpora data.train_prefix names (parallel format), each with its weight."""
    corpora: list[tuple[str, int]] = []
    for item in data.train_prefix.split():
        prefix, colon, weight = item.partition(":")
        if not prefix or (colon and not (weight.isdigit() and 1 <= int(weight) <= MAX_CORPUS_WEIGHT)):
            raise AttnmtError(f"data.train_prefix: {item!r} is not PREFIX or PREFIX:WEIGHT with a whole weight in "
                              f"[1, {MAX_CORPUS_WEIGHT}]")
        if prefix in (p for p, _ in corpora):
            raise AttnmtError(f"data.train_prefix: {prefix!r} is named twice; give it one weight")
        corpora.append((prefix, int(weight or 1)))
    if not corpora:
        raise AttnmtError("data.train_prefix is empty; name the training files' prefix, e.g. train")
    return corpora


def check_range(value: float, allowed: Range, where: str) -> None:
    refusal = allowed.refusal(value)
    if refusal:
        raise AttnmtError(f"{where}: {refusal}")


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    tokenizer: TokenizerConfig = field(default_factory=TokenizerConfig)
    vocab: VocabConfig = field(default_factory=VocabConfig)
    # The family's own config class (a ModelConfig subclass), chosen by model.arch where a config is
    # read (configfile.py): required, as no family is the default below the registry.
    model: ModelConfig = field(kw_only=True)
    train: TrainConfig = field(default_factory=TrainConfig)
    decode: DecodeConfig = field(default_factory=DecodeConfig)
    # Not a section: the keys (section.key) the YAML file and its key=value overrides set, which
    # configfile records; None: a config built in Python, which sets every key. A fine-tuning run
    # (train.init_from) takes the rest of its model, tokenizer, vocab and decode keys from the model
    # file. Neither saved nor compared.
    given: Optional[frozenset[str]] = field(default=None, compare=False, repr=False, kw_only=True)

    def to_dict(self) -> dict:
        return {name: dataclasses.asdict(getattr(self, name)) for name in SECTIONS}


SECTIONS = tuple(f.name for f in dataclasses.fields(Config) if f.name != "given")


def validate(config: Config) -> None:
    """Refuse values out of their range and combinations that cannot be built, naming the keys."""
    for section in SECTIONS:
        values = getattr(config, section)
        for f in dataclasses.fields(values):
            if "range" in f.metadata:
                check_range(getattr(values, f.name), f.metadata["range"], f"{section}.{f.name}")
    config.model.check(config)
    t = config.train
    parse_setting(t.threads, "train.threads")
    if t.scheduler == "linear" and t.decay_steps <= t.warmup_steps:
        raise AttnmtError(f"train.decay_steps={t.decay_steps}: the linear scheduler decays after its warmup, so it "
                          f"must be above train.warmup_steps={t.warmup_steps}")
    d = config.data
    if d.format != "dates" and not d.path:
        raise AttnmtError("data.path is required: the TSV file or the directory of parallel files")
    if d.format == "parallel":
        training_corpora(d)
    source_languages(d)
    if d.format == "tsv" and "en" not in (d.src_lang, d.tgt_lang):
        cased = " (language codes are lower case: 'EN' is not 'en')" if "en" in (d.src_lang.lower(), d.tgt_lang.lower()) else ""
        raise AttnmtError(f"data.format=tsv: manythings files hold English in column 1, so src_lang or tgt_lang must be "
                          f"'en'{cased}")
