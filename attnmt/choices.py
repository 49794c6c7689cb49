"""The named choices of the flags whose code needs torch: which attention map (translate.py), how
attention becomes word alignments (analysis/align.py) and the aligner's epochs and jump weight (analysis/aligner.py,
analysis/align.py), the attribution methods (analysis/attribution.py), what `attnmt export` writes and CTranslate2's
quantizations (formats/ctranslate2.py, formats/marian.py). They live here, beside no tensor, so that the `attnmt` command
builds its flags, and answers `--help` or a wrong choice, without loading torch; those modules check
against the same names."""

# How attention becomes links, or the aligner's posteriors do, and how the links of two directions combine
# (analysis/align.py's docstring).
ATTENTION_METHODS = ("argmax", "threshold")
ALIGNER = "aligner"
ALIGN_METHODS = (*ATTENTION_METHODS, ALIGNER)
LINK_THRESHOLD = 0.3                                                          # the attention method threshold asks
SYMMETRIZATIONS = ("intersect", "union", "grow-diag", "grow-diag-final")      # of the two directions' links
AVERAGE = "average"                                                             # of their weights (averaged)
# Which decoding step's attention aligns a target token: the step that writes it, or the next one,
# which reads it.
ALIGN_STEPS = ("output", "input")
# The aligner's epochs at most (aligner.train_aligner): three keep 200,000 short pairs within 10 CPU-minutes on two
# cores (docs/recipes.md); the held-out pairs' perplexity may stop it sooner.
ALIGNER_MAX_EPOCHS = 3
# The most a reading of the aligner's links may weigh its learned jumps (align.AlignerLinks.jump_weight; 1 reads
# them as trained, 0 leaves where the last word went out of it).
MAX_JUMP_WEIGHT = 2.0

# The attention maps a translation can show (TextTranslator.attention_maps), each with what its keys
# (across) and queries (down) are, as its heatmap names its axes.
MAP_AXES = {"cross": ("source", "output"), "encoder": ("source", "source"),
            "decoder": ("output so far (<sos> first)", "output")}

# analysis/attribution.py's methods beside attention, and integrated gradients' steps by default.
METHODS = ("grad", "ig", "occlusion")
IG_STEPS = 50

# What `attnmt export --to` writes: a CTranslate2 model (formats/ctranslate2.py) or a Hugging Face Marian folder
# (formats/marian.py).
EXPORT_FORMATS = ("ctranslate2", "marian")
# How an exported CTranslate2 model's weights may be stored (CTranslate2's quantization names; None: float32).
CTRANSLATE2_QUANTIZATIONS = ("int8", "int8_float32", "int16", "float16", "bfloat16")
