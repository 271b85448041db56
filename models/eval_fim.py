"""Next-character accuracy of a FIM-trained model with and without the suffix.

On the held-out standard-library files (``heldout_files.json``: never trained on), a cut
point is drawn strictly inside an identifier; the removed middle runs from the cut to the
end of its line plus 0-2 more lines (drawn), and the suffix is the text after it. Each
method predicts the character after the cut greedily from midword's exact next-byte
distribution (the argmax byte, then the next until a character is complete):

* prefix only: the prefix alone (the suffix unseen), as in prefix-only completion;
* FIM SPM (``qwen-spm``): ``<|fim_prefix|><|fim_suffix|>`` suffix ``<|fim_middle|>`` then
  the prefix, whose bytes the covering tree covers (prefix and middle are one segment);
* FIM PSM (``qwen``): the prefix as its own segment, then the middle from a fresh one;
* FIM SPM naive: the SPM prompt with the prefix tokenized as it is (greedy token, its
  first character), the boundary problem the covering tree removes.

Run: python models/eval_fim.py [--model models/default] [--cuts 300] [--seed 0]
     [--write-card]   (writes the table into the model card's FIM accuracy section)
"""

from __future__ import annotations

import argparse
import json
import math
import random
import re
import sys
import sysconfig
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from midword.testing.cuts import accuracy_table, identifier_cuts

CARD_HEADING = "## Next-character accuracy with and without the suffix"
METHODS = ("prefix", "spm", "psm", "spm-naive")
BITS_METHODS = ("prefix", "spm", "psm")
LABELS = {
    "prefix": "prefix only (ByteSampler, suffix unseen)",
    "spm": "FIM SPM, exact (covering tree over the prefix)",
    "psm": "FIM PSM (prefix its own segment)",
    "spm-naive": "FIM SPM naive (prefix tokenized as is)",
}


@dataclass(frozen=True)
class Sample:
    """One cut: the text before it, the removed middle and the suffix after it."""

    file: str
    prefix: str
    middle: str
    suffix: str

    @property
    def target(self) -> str:
        return self.middle[0]


def make_sample(
    name: str, text: str, cut: int, rng: random.Random, max_prefix: int, max_suffix: int
) -> Sample:
    """The sample at ``cut``: prefix from a line start at most ``max_prefix`` characters
    back; middle to the end of the cut's line plus 0-2 lines; suffix to a line end within
    ``max_suffix`` characters (the whole rest when it is shorter).

    >>> s = make_sample("f", "a = 1\\nbcd = 2\\ne = 3\\n", 7, random.Random(0), 100, 100)
    >>> s.prefix + s.middle + s.suffix == "a = 1\\nbcd = 2\\ne = 3\\n", s.target
    (True, 'c')
    """
    start = 0
    if cut > max_prefix:
        line = text.find("\n", cut - max_prefix, cut)
        start = line + 1 if line >= 0 else cut - max_prefix
    end = cut
    for _ in range(1 + rng.randint(0, 2)):
        newline = text.find("\n", end)
        end = len(text) if newline < 0 else newline + 1
    stop = len(text)
    if stop - end > max_suffix:
        newline = text.rfind("\n", end, end + max_suffix)
        stop = newline + 1 if newline >= end else end + max_suffix
    return Sample(name, text[start:cut], text[cut:end], text[end:stop])


def any_cuts(text: str) -> list[int]:
    """Every offset with text on both sides.

    >>> any_cuts("abc")
    [1, 2]
    """
    return list(range(1, len(text)))


WHERE = {"identifier": identifier_cuts, "any": any_cuts}
WHERE_TEXT = {
    "identifier": "strictly inside an identifier (NAME tokens of `tokenize`)",
    "any": "anywhere (every character offset)",
}


def pick_samples(
    files: list[tuple[str, str]],
    n: int,
    seed: int,
    max_prefix: int,
    max_suffix: int,
    where: str = "identifier",
) -> list[Sample]:
    """``n`` cuts drawn uniformly from all cuts of kind ``where`` in ``files``."""
    pool = [(name, text, c) for name, text in files for c in WHERE[where](text)]
    if len(pool) < n:
        raise SystemExit(f"only {len(pool)} {where} cuts in the held-out files")
    rng = random.Random(f"fim-eval-{where}-{seed}")
    return [
        make_sample(name, text, cut, rng, max_prefix, max_suffix)
        for name, text, cut in rng.sample(pool, n)
    ]


def heldout_files(model_dir: Path) -> list[tuple[str, str]]:
    """(relpath, text) of the model's held-out files, read from this interpreter's stdlib
    (whose Python version must be the one the list was made for)."""
    info = json.loads((model_dir / "heldout_files.json").read_text(encoding="utf-8"))
    version = f"{sys.version_info[0]}.{sys.version_info[1]}"
    if info["python_version"] != version:
        raise SystemExit(f"held-out files are Python {info['python_version']}'s; this is {version}")
    root = Path(sysconfig.get_paths()["stdlib"])
    return [(rel, (root / rel).read_text(encoding="utf-8")) for rel in info["files"]]


def first_char(made: bytes) -> str | None:
    """The first character of ``made`` once its UTF-8 bytes are complete."""
    try:
        return made.decode("utf-8")[:1] or None
    except UnicodeDecodeError:
        return None


def greedy_char(sampler) -> str | None:  # sampler: midword.engine.sample.sampling.ByteSampler
    """Argmax bytes of the exact next-byte distribution until a character is complete
    (None: end of text first). Leaves bytes pushed on ``sampler``."""
    made = b""
    while len(made) < 4:
        b = int(np.argmax(sampler.next_bytes().normalized()))
        if b == 256:
            return None
        made += bytes([b])
        char = first_char(made)
        if char is not None:
            return char
        sampler.push(bytes([b]))
    return None


class Predictors:
    """One sampler per method over one loaded model (each keeps its own KV session)."""

    def __init__(self, model_dir: Path, device: str) -> None:
        from midword.engine import TEMPLATES, ByteSampler, PromptedModel, load_engine, load_hf_model

        self.model = load_hf_model(model_dir, device=device, dtype="float32")
        self.engine = load_engine(str(model_dir))
        self.templates = {"spm": TEMPLATES["qwen-spm"], "psm": TEMPLATES["qwen"]}
        self.samplers = {
            "prefix": ByteSampler(self.model, self.engine),
            "spm": ByteSampler(PromptedModel(self.model), self.engine),
            "psm": ByteSampler(PromptedModel(self.model), self.engine),
        }

    def predict(self, method: str, sample: Sample) -> str | None:
        from midword.engine import move_sampler

        prefix, suffix = sample.prefix.encode("utf-8"), sample.suffix.encode("utf-8")
        if method == "spm-naive":
            return self._naive_spm(prefix, suffix)
        sampler = self.samplers[method]
        if method == "prefix":
            sampler.reset(prefix)
        else:
            move_sampler(sampler, self.templates[method], prefix, suffix)
        return greedy_char(sampler)

    def middle_nats(self, method: str, sample: Sample) -> float:
        """-log P(the middle's bytes | what the method sees), exactly (the covering tree's
        prefix probability after the middle minus the one before it)."""
        from midword.engine import move_sampler

        prefix, suffix = sample.prefix.encode("utf-8"), sample.suffix.encode("utf-8")
        middle = sample.middle.encode("utf-8")
        sampler = self.samplers[method]
        if method == "prefix":
            sampler.reset(prefix)
            before = sampler.prefix_logprob()
            sampler.reset(prefix + middle)
            return before - sampler.prefix_logprob()
        move_sampler(sampler, self.templates[method], prefix, suffix)
        covered = self.templates[method].prompt(self.engine.tok, prefix, suffix).covered
        before = sampler.prefix_logprob()
        sampler.reset(covered + middle)
        return before - sampler.prefix_logprob()

    def _naive_spm(self, prefix: bytes, suffix: bytes) -> str | None:
        """Greedy tokens after the SPM context and the prefix's own tokens: the first
        character they start (None: a special token first)."""
        tok = self.engine.tok
        prompt = self.templates["spm"].prompt(tok, prefix, suffix)
        session = self.samplers["spm"].session  # a PromptedSession: set its context
        session.context = [*prompt.context, *tok.encode(prompt.covered.decode("utf-8"))]
        self.samplers["spm"].forget_scores()
        trunk: list[int] = []
        made = b""
        special = set(tok.special_ids)
        for _ in range(4):
            t = int(np.argmax(session.logprobs(trunk, [()])[0]))
            if t in special or t >= tok.size:
                return None
            made += tok.token_bytes[t] or b""
            char = first_char(made)
            if char is not None:
                return char
            trunk.append(t)
        return None


def bits_table(nats: dict[str, list[float]], n_bytes: int) -> str:
    rows = ["| method | middle bits per byte |", "| --- | --- |"]
    for name in BITS_METHODS:
        rows.append(f"| {LABELS[name]} | {sum(nats[name]) / math.log(2) / n_bytes:.4f} |")
    return "\n".join(rows) + "\n"


def write_card(card: Path, section: str) -> None:
    """Put ``section`` in the card: replace its FIM accuracy section or append one."""
    text = card.read_text(encoding="utf-8")
    if CARD_HEADING in text:
        head, rest = text.split(CARD_HEADING, 1)
        tail = re.search(r"^## ", rest, flags=re.M)
        text = head + section + ("\n" + rest[tail.start() :] if tail else "")
    else:
        text = text.rstrip("\n") + "\n\n" + section
    card.write_text(text, encoding="utf-8")


def middle_bits_text(predictors: Predictors, samples: list[Sample]) -> str:
    """How well each method predicts the whole removed middle (its bytes, without the end)."""
    nats: dict[str, list[float]] = {m: [] for m in BITS_METHODS}
    for sample in samples:
        for method in BITS_METHODS:
            nats[method].append(predictors.middle_nats(method, sample))
    n_bytes = sum(len(s.middle.encode("utf-8")) for s in samples)
    return (
        f"The whole middle, on the first {len(samples)} of those cuts ({n_bytes:,} bytes): "
        "-log2 P(middle | what the method sees) / bytes, exact.\n\n" + bits_table(nats, n_bytes)
    )


# Middles whose name is defined only in the suffix: a model that reads the suffix copies it.
COPY_EXAMPLES = (
    Sample(
        "example",
        "import os\n\n\ndef ",
        "read_settings_file",
        "(path):\n    with open(path) as f:\n        return f.read()\n\n\n"
        "settings = read_settings_file('a.cfg')\nprint(settings)\n",
    ),
    Sample(
        "example",
        "class Parser:\n    def __init__(self, text):\n        self.",
        "source_text",
        " = text\n\n    def parse(self):\n        return self.source_text.split()\n",
    ),
)


def copy_examples_text(predictors: Predictors) -> str:
    """Bits of two middles that only the suffix names (hand-written, not stdlib)."""
    rows = ["| middle | " + " | ".join(LABELS[m] for m in BITS_METHODS) + " |"]
    rows.append("| --- |" + " --- |" * len(BITS_METHODS))
    for sample in COPY_EXAMPLES:
        bits = [predictors.middle_nats(m, sample) / math.log(2) for m in BITS_METHODS]
        rows.append(f"| `{sample.middle}` | " + " | ".join(f"{b:.1f}" for b in bits) + " |")
    return (
        "A name defined only in the suffix (`COPY_EXAMPLES`): bits of the whole middle.\n\n"
        + "\n".join(rows)
        + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=Path("models/default"))
    parser.add_argument("--cuts", type=int, default=300, help="cut points per kind (default 300)")
    parser.add_argument("--seed", type=int, default=0, help="which cut points (default 0)")
    parser.add_argument(
        "--where",
        default="identifier,any",
        help="cut kinds: identifier (inside a name), any (every offset); default both",
    )
    parser.add_argument("--max-prefix", type=int, default=800, help="prefix characters at most")
    parser.add_argument("--max-suffix", type=int, default=400, help="suffix characters at most")
    parser.add_argument("--device", default="cpu", help="torch device (default cpu)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1)")
    parser.add_argument(
        "--bits",
        type=int,
        default=100,
        help="also the middle's bits per byte on the first N 'any' cuts (0: off; default 100)",
    )
    parser.add_argument("--write-card", action="store_true", help="write the table into the card")
    args = parser.parse_args(argv)
    import torch

    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    files = heldout_files(args.model)
    predictors = Predictors(args.model, args.device)
    tables = []
    for where in [w.strip() for w in args.where.split(",") if w.strip()]:
        samples = pick_samples(files, args.cuts, args.seed, args.max_prefix, args.max_suffix, where)
        hits: dict[str, list[bool]] = {m: [] for m in METHODS}
        for sample in samples:
            for method in METHODS:
                hits[method].append(predictors.predict(method, sample) == sample.target)
        tables.append(
            f"Cuts {WHERE_TEXT[where]}:\n\n{accuracy_table(hits, {name: LABELS[name] for name in METHODS})}"
        )
        if args.bits and where == "any":
            tables.append(middle_bits_text(predictors, samples[: args.bits]))
    if args.bits:
        tables.append(copy_examples_text(predictors))
    seconds = time.perf_counter() - started
    section = (
        f"{CARD_HEADING}\n\n`python models/eval_fim.py --cuts {args.cuts} --seed {args.seed} "
        f"--where {args.where}`: {args.cuts} cut points of each kind drawn uniformly from the "
        f"{len(files)} held-out files; the removed middle runs to the end of the cut's line "
        f"plus 0-2 lines, the suffix is the next {args.max_suffix} characters at most (to a "
        f"line end), the prefix the previous {args.max_prefix} at most (from a line start). "
        "Greedy prediction of the character after the cut from the exact next-byte "
        "distribution.\n\n"
        + "\n".join(tables)
        + f"\n({seconds:.0f} s on this machine's {args.device}, {args.threads} thread(s).)\n"
    )
    print(section)
    if args.write_card:
        write_card(args.model / "README.md", section)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
