"""Character-level language modeling with a token-level model (paper tables 3-6).

Each sample is a random character position in a random file of the text folder
(chosen in proportion to length, so positions are uniform over the characters);
the prefix is the text before it (at most --max-context characters, then
starting at a line start), the target the character at it. Methods:

* token level (plain BPE): the prefix truncated to the token boundary before the
  target; loss of the next token; bits per character divides by the characters
  that token starts (averaged with weight 1/characters: a random character
  position picks a token in proportion to its length);
* naive: tokenize the prefix as it is; loss of the target character (the sum over
  token sequences that spell it, paper appendix B.1); greedy token(s) until the
  first character is determined give the prediction;
* token healing 1/2/4: back off 1, 2 or 4 tokens, regenerate greedily under the
  constraint of the removed bytes until the first new character is determined
  (no loss: backtracking has no next-character distribution);
* ByteSampler: the exact next-byte distribution (chained over the target's UTF-8
  bytes); prediction by greedy bytes.

Overhead vs BPE is the mean of (inference tokens the method needs from an empty
cache: BOS plus every distinct token sequence it asks the model about) - (1 +
tokens of the plain BPE encoding of the prefix). Backtracking evaluates fewer
prompt tokens, then the tokens it regenerates.
"""

from __future__ import annotations

import argparse
import math
import random
from typing import Any

import numpy as np

from midword.bench import common, data, plots
from midword.cli import CommandError

DEFAULT_OUT = "bench-results/charlm"
DEFAULT_LIMIT = 1000
HEALING = (1, 2, 4)
METHODS = ("token", "naive", "healing1", "healing2", "healing4", "bytesampler")
LABELS = {
    "token": "Token level (plain BPE, prefix cut to a token boundary)",
    "naive": "No mitigation (naive BPE)",
    "healing1": "1 token backtracking (token healing)",
    "healing2": "2 token backtracking",
    "healing4": "4 token backtracking",
    "bytesampler": "ByteSampler",
}
LN2 = math.log(2)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "character positions")
    data.add_text_arguments(parser)
    parser.add_argument(
        "--max-context", type=int, default=1000, help="prefix characters at most (default 1000)"
    )
    parser.add_argument(
        "--start-token",
        default="auto",
        metavar="auto|bos|eos|none|TEXT",
        help="what every sequence is conditioned on: auto (the engine's rule, default), bos "
        "or eos (the model's own), none (nothing: a sample whose first token would need a "
        "context is skipped), or the text of a special token such as '<|endoftext|>'",
    )


def resolve_start(choice: str, model: Any, engine: Any) -> int | None:
    """The start token id ``--start-token`` names (None for ``none``; ``auto`` is left to
    the engine's rule, in `Scorer`).

    >>> from types import SimpleNamespace as NS
    >>> tok = NS(added=[NS(content="<|endoftext|>", id=0)])
    >>> model, engine = NS(bos_token_id=1, eos_token_id=[2, 3]), NS(tok=tok)
    >>> [resolve_start(c, model, engine) for c in ("bos", "eos", "none", "<|endoftext|>")]
    [1, 2, None, 0]
    """
    if choice == "none":
        return None
    if choice in ("bos", "eos"):
        value = getattr(model, f"{choice}_token_id", None)
        if isinstance(value, (list, tuple)):
            value = value[0] if value else None
        if value is None:
            raise CommandError(f"the model has no {choice.upper()} token (--start-token)")
        return int(value)
    ids = {a.content: a.id for a in engine.tok.added}
    if choice not in ids:
        raise CommandError(f"--start-token {choice!r}: the vocabulary has no such added token")
    return int(ids[choice])


# ---------------------------------------------------------------------- samples
def make_sample(docs: list[data.TextFile], seed: int, index: int, max_context: int) -> dict:
    """Sample ``index`` of the run: depends only on (seed, index), so runs can be extended.

    >>> doc = data.TextFile("a.py", "def f():\\n    return 1\\n")
    >>> s = make_sample([doc], 0, 0, 1000)
    >>> doc.text[s["start"] : s["cut"]] == s["prefix"] and s["target"] == doc.text[s["cut"]]
    True
    """
    rng = random.Random(f"charlm-{seed}-{index}")
    weights = [len(d.text) - 1 for d in docs]
    doc = rng.choices(docs, weights=weights)[0]
    cut = rng.randrange(1, len(doc.text))
    start = 0
    if cut > max_context:
        line = doc.text.find("\n", cut - max_context, cut)
        start = line + 1 if line >= 0 else cut - max_context
    return {
        "key": str(index),
        "file": doc.name,
        "start": start,
        "cut": cut,
        "prefix": doc.text[start:cut],
        "target": doc.text[cut],
        "after": doc.text[cut : cut + 64],  # for the token-level target
    }


def _first_char(data_: bytes) -> str | None:
    """The first complete UTF-8 character of ``data_`` (None if not complete yet)."""
    for n in range(1, min(4, len(data_)) + 1):
        try:
            return data_[:n].decode("utf-8")
        except UnicodeDecodeError:
            continue
    return None


def is_mid_word(prefix: str, target: str) -> bool:
    """Both sides of the cut are ASCII letters or digits.

    >>> is_mid_word("retu", "r"), is_mid_word("x ", "y")
    (True, False)
    """
    return common.cut_kind(prefix, target) == "mid-word"


# ---------------------------------------------------------------------- methods
class CountingSession:
    """Wraps a scoring session and counts the inference tokens a method needs.

    The count is what the queries would cost from an empty KV cache: BOS plus every
    distinct token sequence (trunk prefixes, trunk + tree paths) the model is asked
    about. Counting this way lets all methods share one warm cache (a single prefill
    per sample) while comparing their costs as if each ran alone.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.seen: set[tuple[int, ...]] = set()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def start(self) -> None:
        self.seen = set()

    def count(self) -> int:
        return 1 + len(self.seen)

    def logprobs(self, trunk: Any, paths: Any) -> np.ndarray:
        return self.inner.logprobs(self._note(trunk, paths), paths)

    def logprob_rows(self, trunk: Any, paths: Any) -> list[np.ndarray]:
        # the sampler asks for rows one by one (no matrix copy): the same queries to count
        return self.inner.logprob_rows(self._note(trunk, paths), paths)

    def _note(self, trunk: Any, paths: Any) -> tuple[int, ...]:
        """Record the contexts a query asks about; returns the trunk as a tuple."""
        trunk = tuple(int(t) for t in trunk)
        if trunk not in self.seen:  # nested contexts: most of the prefixes are known
            self.seen.update(trunk[:i] for i in range(1, len(trunk) + 1))
        for path in paths:
            self.seen.update(trunk + tuple(path[:i]) for i in range(1, len(path) + 1))
        return trunk


class Scorer:
    """Runs every method on one sample. All share one session (through
    `CountingSession`), so the prefix is evaluated once per sample."""

    def __init__(self, model: Any, engine: Any, start: str = "auto") -> None:
        from midword.engine import Completer

        self.engine = engine
        self.tok = engine.tok
        if start == "auto":
            completer = Completer(model, engine)  # the engine's rule picks the start
            self.start_id: int | None = completer.start_id
        else:
            self.start_id = resolve_start(start, model, engine)
            completer = Completer(model, engine, self.start_id)  # None: swapped out below
        self.completer = completer
        self.sampler = completer.sampler  # a ByteSampler on the completer's session
        inner = self.sampler.session if self.start_id is not None else model.session(bos_id=None)
        self.session = CountingSession(inner)
        self.sampler.session = self.session
        self.special = set(self.tok.special_ids) | set(range(self.tok.size, model.vocab_size))

    def token_level(self, sample: dict) -> dict:
        prefix_b = sample["prefix"].encode("utf-8")
        ids = self.tok.encode(sample["prefix"] + sample["after"])
        ends = np.cumsum([len(self.tok.token_bytes[i] or b"") for i in ids])
        k = int(np.searchsorted(ends, len(prefix_b), side="right"))  # tokens ending <= cut
        if k >= len(ids):
            return {"skipped": True}
        target = int(ids[k])
        self.session.start()
        row = self.session.logprobs(ids[:k], [()])[0]
        tb = self.tok.token_bytes[target] or b""
        chars = sum(1 for b in tb if not 0x80 <= b < 0xC0)
        return {
            "logprob": float(row[target]),
            "chars": chars,
            "correct": int(np.argmax(row)) == target,
            "inference_tokens": self.session.count(),
        }

    def naive(self, sample: dict) -> dict:
        ids = self.tok.encode(sample["prefix"])
        self.session.start()
        predicted = self._greedy(list(ids), b"")
        used = self.session.count()
        lp = self._char_logprob(list(ids), sample["target"].encode("utf-8"))
        return {"logprob": lp, "predicted": predicted, "inference_tokens": used}

    def healing(self, sample: dict, k: int) -> dict:
        """Back off ``k`` tokens; the removed bytes constrain greedy decoding (the rule of
        engine/sample/generate.py), stopping as soon as the first new character is known."""
        prefix = sample["prefix"].encode("utf-8")
        ids = self.tok.encode(sample["prefix"])
        base = ids[: max(0, len(ids) - k)]
        self.session.start()
        predicted = self._greedy(list(base), prefix[len(self.tok.decode(base)) :])
        return {"predicted": predicted, "inference_tokens": self.session.count()}

    def _greedy(self, context: list[int], need: bytes) -> str | None:
        """Greedy tokens after ``context`` that must first spell ``need``; the first
        character after it (None: end of text, or nothing within the budget)."""
        made = b""
        for _ in range(len(need) + 4):  # a character has at most 4 bytes
            row = self.session.logprobs(context, [()])[0]
            if need:
                allowed = self.completer.compatible_tokens(need)  # the engine's healing rule
                t = int(allowed[np.argmax(row[allowed])])
            else:
                t = int(np.argmax(row))
            if t in self.special:
                return None
            tb = self.tok.token_bytes[t] or b""
            made += tb[len(need) :]
            need = need[len(tb) :]
            context.append(t)
            char = _first_char(made)
            if char is not None:
                return char
        return None

    def _char_logprob(self, context: list[int], want: bytes) -> float:
        """log of the total probability of token sequences that spell ``want`` first."""
        row = self.session.logprobs(context, [()])[0]
        lo, hi = self.engine.token_range(want)
        parts = [float(row[t]) for t in self.engine.sorted_ids[lo:hi].tolist()]
        for n in range(1, len(want)):  # tokens that are a proper prefix of the character
            t = self.tok.bytes_to_id.get(want[:n])
            if t is not None and t not in self.special:
                parts.append(float(row[t]) + self._char_logprob([*context, t], want[n:]))
        return _logsumexp(parts)

    def bytesampler(self, sample: dict) -> dict:
        prefix = sample["prefix"].encode("utf-8")
        self.session.start()
        self.sampler.reset(prefix)
        first = self.sampler.next_bytes()
        predicted = self._greedy_bytes(first)
        used = self.session.count()
        want = sample["target"].encode("utf-8")
        lp = float(first.next[want[0]])
        for i in range(1, len(want)):  # chain rule over the character's bytes
            self.sampler.reset(prefix + want[:i])
            lp += float(self.sampler.next_bytes().next[want[i]])
        return {"logprob": lp, "predicted": predicted, "inference_tokens": used}

    def _greedy_bytes(self, first: Any) -> str | None:
        made = b""
        dist = first
        while True:
            b = int(np.argmax(dist.normalized()))
            if b == 256:
                return None
            made += bytes([b])
            char = _first_char(made)
            if char is not None or len(made) >= 4:
                return char
            self.sampler.push(bytes([b]))
            dist = self.sampler.next_bytes()

    def score(self, sample: dict) -> dict:
        """Every method's result; with no start token, a sample whose first token would
        need a context (an empty trunk) is skipped by every method."""
        try:
            return self._score(sample)
        except ValueError:
            if self.start_id is not None:
                raise
            return {name: {"skipped": True} for name in METHODS}

    def _score(self, sample: dict) -> dict:
        out = {"token": self.token_level(sample), "naive": self.naive(sample)}
        for k in HEALING:
            out[f"healing{k}"] = self.healing(sample, k)
        out["bytesampler"] = self.bytesampler(sample)
        plain = 1 + len(self.tok.encode(sample["prefix"]))
        for result in out.values():
            if "predicted" in result:
                result["correct"] = result.pop("predicted") == sample["target"]
            if "inference_tokens" in result:
                result["overhead"] = result["inference_tokens"] - plain
        return out


def _logsumexp(values: list[float]) -> float:
    if not values:
        return float("-inf")
    top = max(values)
    if top == float("-inf"):
        return top
    return top + math.log(sum(math.exp(v - top) for v in values))


# ---------------------------------------------------------------------- run
def run(args: argparse.Namespace) -> int:
    docs = data.load_texts(args.text, args.glob)
    settings = {
        **common.model_settings(args),
        "benchmark": "charlm",
        **data.text_settings(args),
        "max_context": args.max_context,
        "start_token": args.start_token,
    }
    rundir = common.RunDir(args.out, settings)
    timer = common.Timer()
    todo = [i for i in range(args.limit) if not rundir.done(str(i))]
    if todo:
        scorer = Scorer(*common.load_model(args), start=args.start_token)
        bar = common.progress(len(todo), "charlm")
        for i in todo:
            sample = make_sample(docs, args.seed, i, args.max_context)
            record = {k: sample[k] for k in ("key", "file", "start", "cut", "target")}
            record["prefix_chars"] = len(sample["prefix"])
            record["mid_word"] = is_mid_word(sample["prefix"], sample["target"])
            record["cut_kind"] = common.cut_kind(sample["prefix"], sample["target"])
            record["methods"] = scorer.score(sample)
            rundir.add(record)
            bar.update(1)
        bar.close()
    wanted = {str(i) for i in range(args.limit)}
    records = [r for r in rundir.records() if r["key"] in wanted]
    markdown, summary = report(records)
    _plot(rundir, summary)
    common.finish(rundir, markdown, summary, timer.seconds())
    return 0


def record_cut(record: dict) -> str | None:
    """The record's cut kind (None for a record written before kinds were recorded that
    was not mid-word: it cannot be told apart from the others without its text)."""
    if "cut_kind" in record:
        return record["cut_kind"]
    return "mid-word" if record.get("mid_word") else None


def _method_stats(records: list[dict], name: str) -> dict[str, Any]:
    rows = [r["methods"][name] for r in records if not r["methods"][name].get("skipped")]
    stats: dict[str, Any] = {"n": len(rows)}
    if name == "token":
        return {**stats, **_token_stats(rows)}
    stats.update(_accuracy_stats(rows))
    stats["overhead"] = common.mean([x["overhead"] for x in rows])
    for cut in common.CUTS:
        part = [
            r["methods"][name]
            for r in records
            if record_cut(r) == cut and not r["methods"][name].get("skipped")
        ]
        stats[cut] = _accuracy_stats(part)
    # kept for readers of older results.json files
    stats["accuracy_mid_word"] = stats["mid-word"]["accuracy"]
    stats["n_mid_word"] = stats["mid-word"]["n"]
    return stats


def _accuracy_stats(rows: list[dict]) -> dict[str, Any]:
    """n, next-character accuracy with its standard error, and the loss where the method
    has one (naive and ByteSampler; backtracking has no next-character distribution)."""
    correct = [float(x["correct"]) for x in rows]
    stats: dict[str, Any] = {
        "n": len(rows),
        "accuracy": common.mean(correct),
        "accuracy_se": common.std(correct) / math.sqrt(len(correct)) if correct else math.nan,
    }
    if rows and "logprob" in rows[0]:
        stats["loss"] = common.mean([-x["logprob"] for x in rows])
        stats["bpc"] = stats["loss"] / LN2
    return stats


def _token_stats(rows: list[dict]) -> dict[str, float]:
    """Token-level numbers, each sample weighted by 1/characters of its target token (a
    random character position picks a token in proportion to its length)."""
    if not rows:
        return {"loss": math.nan, "bpc": math.nan, "accuracy": math.nan}
    weights = [1.0 / x["chars"] for x in rows]
    total = sum(weights)
    pairs = list(zip(rows, weights, strict=True))
    return {
        "loss": sum(-x["logprob"] * w for x, w in pairs) / total,
        "bpc": common.mean([-x["logprob"] / x["chars"] / LN2 for x in rows]),
        "accuracy": sum(float(x["correct"]) * w for x, w in pairs) / total,
    }


def ordering_holds(stats: dict[str, dict[str, Any]]) -> bool:
    """ByteSampler >= every token-healing variant >= naive, on next-character accuracy.

    >>> ordering_holds({"naive": {"accuracy": .2}, "healing1": {"accuracy": .5},
    ...                 "bytesampler": {"accuracy": .6}})
    True
    """
    healing = [stats[f"healing{k}"]["accuracy"] for k in HEALING if f"healing{k}" in stats]
    return (
        stats["bytesampler"]["accuracy"] >= max(healing)
        and min(healing) >= stats["naive"]["accuracy"]
    )


def report(records: list[dict]) -> tuple[str, dict[str, Any]]:
    """Markdown tables and JSON summary over the given samples."""
    stats = {name: _method_stats(records, name) for name in METHODS}
    head = [
        "Method",
        "n",
        "loss per unit (nats)",
        "bits per char",
        "next-char accuracy",
        "overhead vs BPE (tokens)",
    ]
    rows = []
    for name in METHODS:
        s = stats[name]
        acc = common.fmt(s["accuracy"])
        if "accuracy_se" in s:
            acc += f" ± {common.fmt(s['accuracy_se'])}"
        rows.append(
            [
                LABELS[name],
                s["n"],
                common.fmt(s.get("loss", math.nan)),
                common.fmt(s.get("bpc", math.nan)),
                acc if name != "token" else f"({acc} next token)",
                common.fmt(s.get("overhead", math.nan), 2),
            ]
        )
    holds = ordering_holds(stats)
    md = (
        "## Character-level modeling: loss, next-character accuracy, overhead "
        "(paper tables 3-6)\n\n"
        + common.markdown_table(head, rows)
        + "\nAccuracy ± one standard error. Ordering ByteSampler >= token healing (1, 2, 4) >= "
        f"naive on next-character accuracy: **{'holds' if holds else 'does not hold'}**.\n"
        + _cut_table(stats)
    )
    return md, {"methods": stats, "samples": len(records), "ordering_holds": holds}


def _cut_table(stats: dict[str, dict[str, Any]]) -> str:
    """Accuracy and bits per character by where the prompt was cut (the token-level row
    is left out: it moves the cut to a token boundary)."""
    names = [n for n in METHODS if n != "token"]
    counts = {cut: stats[names[0]][cut]["n"] for cut in common.CUTS}
    head = ["Method"]
    head += [f"{cut} (n={counts[cut]}): accuracy" for cut in common.CUTS]
    head += [f"{cut}: bits per char" for cut in common.CUTS]
    rows = []
    for name in names:
        cuts = [stats[name][cut] for cut in common.CUTS]
        accuracy = [f"{common.fmt(c['accuracy'])} ± {common.fmt(c['accuracy_se'])}" for c in cuts]
        bpc = [common.fmt(c.get("bpc", math.nan)) for c in cuts]
        rows.append([LABELS[name], *accuracy, *bpc])
    return (
        "\n## By where the prompt was cut\n\n"
        + common.markdown_table(head, rows)
        + "\nmid-word: the characters on both sides of the cut are ASCII letters or digits; "
        "after space: the prefix ends with a space; other: the rest.\n"
    )


def _plot(rundir: common.RunDir, summary: dict[str, Any]) -> None:
    names = [n for n in METHODS if n != "token"]
    stats = summary["methods"]
    plots.grouped_bars(
        rundir.path / "accuracy.png",
        names,
        {
            "all": [stats[n]["accuracy"] for n in names],
            **{cut: [stats[n][cut]["accuracy"] for n in names] for cut in common.CUTS},
        },
        "Next-character accuracy, by where the prompt was cut",
        "accuracy",
    )
    plots.grouped_bars(
        rundir.path / "overhead.png",
        names,
        {"overhead": [stats[n]["overhead"] for n in names]},
        "Inference-token overhead vs plain BPE",
        "tokens",
    )
