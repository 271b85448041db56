"""Next-character accuracy of the shipped model at random mid-identifier cuts (issue 6).

The cuts fall strictly inside a Python identifier (a NAME token of Python's own
tokenizer, so keywords count, names in comments and strings do not) of the held-out
standard-library files that training never saw. At each cut the prefix is the text
before it (at most ``--max-context`` characters, starting at a line start) and the
target is the next character. Greedy decoding predicts it with three methods:

* naive: tokenize the prefix as it is and take the first character of the greedy tokens;
* token healing, 1 token: back off one token and regenerate under the removed bytes;
* ByteSampler: the argmax of the exact next-byte distribution.

The methods are midword.bench.charlm's (shared scorer); this script only picks the
cut points. ``--write-card`` writes the table into models/default/README.md.

Run: python benchmarks/bench_default_model.py [--cuts 500] [--seed 0] [--write-card]
"""

from __future__ import annotations

import argparse
import random
import re
import sys
import time

from midword.models import shipped_test_model
from midword.testing.cuts import accuracy_table, identifier_cuts

CARD = shipped_test_model() / "README.md"
CARD_HEADING = "## Next-character accuracy at mid-identifier cuts"
METHODS = ("naive", "healing1", "bytesampler")
LABELS = {
    "naive": "naive (tokenize the prefix as it is)",
    "healing1": "token healing, 1 token",
    "bytesampler": "ByteSampler",
}


def pick_samples(docs: list, n: int, seed: int, max_context: int) -> list[dict]:
    """``n`` cuts drawn uniformly (without replacement) from all mid-identifier cuts."""
    pool = [(d, c) for d in docs for c in identifier_cuts(d.text)]
    if len(pool) < n:
        raise SystemExit(f"only {len(pool)} mid-identifier cuts in the held-out files")
    rng = random.Random(f"default-model-{seed}")
    samples = []
    for doc, cut in rng.sample(pool, n):
        start = 0
        if cut > max_context:
            line = doc.text.find("\n", cut - max_context, cut)
            start = line + 1 if line >= 0 else cut - max_context
        samples.append({"file": doc.name, "prefix": doc.text[start:cut], "target": doc.text[cut]})
    return samples


def ordering_holds(hits: dict[str, list[bool]]) -> bool:
    """ByteSampler > 1-token healing > naive (strictly), the issue's acceptance order."""
    n, h, b = (sum(hits[m]) for m in METHODS)
    return b > h > n


def write_card(section: str) -> None:
    """Replace the card's mid-identifier section (up to the next heading) with ``section``."""
    card = CARD.read_text(encoding="utf-8")
    if CARD_HEADING not in card:
        raise SystemExit(f"{CARD} has no '{CARD_HEADING}' section")
    head, rest = card.split(CARD_HEADING, 1)
    tail = re.search(r"^## ", rest, flags=re.M)
    after = rest[tail.start() :] if tail else ""
    CARD.write_text(head + section + ("\n" + after if after else ""), encoding="utf-8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cuts", type=int, default=500, help="cut points (default 500)")
    parser.add_argument("--seed", type=int, default=0, help="which cut points (default 0)")
    parser.add_argument("--max-context", type=int, default=1000, help="prefix characters at most")
    parser.add_argument("--write-card", action="store_true", help="write the table into the card")
    args = parser.parse_args()

    import torch
    from midword.engine import load_engine, load_hf_model

    from midword.bench.charlm import Scorer
    from midword.bench.data import load_texts

    torch.set_num_threads(1)
    model_dir = shipped_test_model()
    docs = load_texts(None)
    samples = pick_samples(docs, args.cuts, args.seed, args.max_context)
    scorer = Scorer(load_hf_model(str(model_dir), device="cpu"), load_engine(str(model_dir)))
    hits: dict[str, list[bool]] = {m: [] for m in METHODS}
    began = time.perf_counter()
    for i, sample in enumerate(samples, 1):
        predicted = {
            "naive": scorer.naive(sample)["predicted"],
            "healing1": scorer.healing(sample, 1)["predicted"],
            "bytesampler": scorer.bytesampler(sample)["predicted"],
        }
        for name in METHODS:
            hits[name].append(predicted[name] == sample["target"])
        if i % 50 == 0:
            print(f"  {i}/{len(samples)} cuts", file=sys.stderr)
    seconds = time.perf_counter() - began
    table = accuracy_table(hits, {name: LABELS[name] for name in METHODS})
    holds = ordering_holds(hits)
    command = "python benchmarks/bench_default_model.py"
    if (args.cuts, args.seed) != (500, 0):
        command += f" --cuts {args.cuts} --seed {args.seed}"
    section = (
        f"{CARD_HEADING}\n\n"
        f"`{command}`: {args.cuts} cut points drawn uniformly from every position strictly inside "
        f"a Python identifier (NAME tokens of `tokenize`, keywords included) of the {len(docs)} "
        "held-out files; greedy prediction of the next character.\n\n"
        f"{table}\n"
        f"ByteSampler > 1-token healing > naive: **{'holds' if holds else 'does not hold'}** "
        f"({seconds:.0f} s on this machine's CPU, 1 thread).\n"
    )
    print(section)
    if args.write_card:
        write_card(section)
        print(f"written to {CARD}", file=sys.stderr)


if __name__ == "__main__":
    main()
