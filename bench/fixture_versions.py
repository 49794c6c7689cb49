"""Every model file of tests/fixtures/models translated by two checkouts of attnmt: the texts and the
log-probabilities of each, compared.

    git worktree add /tmp/attnmt-old HEAD~1
    python bench/fixture_versions.py --old /tmp/attnmt-old --new . [--sentences 30]

Each checkout, in a process of its own (in its folder, so that its attnmt is the one imported, with 2
threads), loads each fixture in fp32 with its fast paths and with its reference modules, and translates
the fixtures' sentences and `--sentences` more dates (seeded) greedily and with beam 5. Prints, per
model, search and path, whether the texts are identical and the largest difference of log-probabilities;
exits 1 if a text differs or a log-probability moved by more than 1e-4. tests/test_modelfile_compat.py
checks the fixtures against what the commit that wrote them translated; this checks a change against
its parent on more sentences.
"""

from __future__ import annotations

import argparse
import sys

from decode_versions import run_in_checkout

CHILD = """
import json, random, sys
from pathlib import Path
import torch
torch.set_num_threads(2)
from attnmt.translate import Translator
fixtures, extra = Path(sys.argv[1]), int(sys.argv[2])
expected = json.loads((fixtures / "expected.json").read_text(encoding="utf-8"))
draws = random.Random(0)
months = ["January", "March", "June", "October", "December"]
sentences = expected["sentences"] + [f"{draws.randint(1, 28)} {draws.choice(months)} {draws.randint(1900, 2099)}"
                                     for _ in range(extra)]
results = {}
for path in sorted(fixtures.glob("*.safetensors")):
    for fast in (True, False):
        translator = Translator.load(path, "cpu", "fp32", fast_paths=fast)
        for beam in (1, 5):
            key = f"{path.stem} beam {beam} {'fast paths' if fast else 'reference'}"
            results[key] = [(t.text, t.log_prob) for t in translator.translate(sentences, beam_size=beam)]
print(json.dumps(results))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--old", required=True, help="the checkout to compare against")
    parser.add_argument("--new", required=True, help="the checkout under test")
    parser.add_argument("--sentences", type=int, default=30, help="dates beside the fixtures' own sentences")
    args = parser.parse_args()

    old, new = (run_in_checkout(checkout, CHILD, ["tests/fixtures/models", str(args.sentences)])
                for checkout in (args.old, args.new))
    failed = set(old) != set(new)
    print("| model, search, path | sentences | texts | largest log-probability difference |")
    print("|---|---:|---|---:|")
    for key in sorted(old.keys() & new.keys()):
        same = all(a[0] == b[0] for a, b in zip(old[key], new[key], strict=True))
        moved = max(abs(a[1] - b[1]) for a, b in zip(old[key], new[key], strict=True))
        failed |= not same or moved > 1e-4
        print(f"| {key} | {len(old[key])} | {'identical' if same else 'DIFFER'} | {moved:.2e} |")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
