"""Simulated acceptance (issue 38): what a user would keep of each suggestion-length
policy, on held-out code.

**Cuts.** Random cursor positions (uniform over the characters) in files the model did
not train on: the held-out standard-library split that ``bench charlm`` uses, and the
HumanEval problems (prompt and canonical solution, from the random-span file that
``bench humaneval`` reads). Sources alternate by sample index. Each file belongs to the
development or the held-out split (deterministic: files ordered by the SHA-1 of their
name, every other one), and samples alternate between the splits. Cut kinds: mid-word
(ASCII letters or digits on both sides), line start (nothing but indentation before the
cursor on its line), after space, other. The prefix is the text before the cut (at most
--max-context characters, starting at a line); the document is written top to bottom, so
nothing follows the cursor.

**Generation.** Per cut and method (``bytesampler``: exact at the cursor; ``naive``:
tokenize the prefix, generate) one greedy completion of --max-tokens tokens, with the
whole covering tree solved so the leaf's exact share is known, and its per-step spans
(end byte, log-probability) stored. Every policy is a cut of that text
(midword/bench/acceptance_policies.py): fixed length (maxTokens 16, 48), one line,
``multiline: auto`` (today's server rule, server/scope.py), the confidence policy at the
engine's ``auto`` and at thresholds tuned on the development split, and a sweep of
thresholds (the curves in ``tradeoff.png`` and ``wasted.png``).

**Simulated user.** Accepts the longest prefix of the suggestion that matches the true
continuation, rounded down to a whole word (accept-next-word); characters count only
when that prefix is not blank.

**Reported per policy:** suggestions shown per cut, acceptance rate (accepted / shown),
accepted characters per cut and per shown suggestion, wasted characters per cut (shown,
not accepted), and the tuning objective (accepted - 0.5 x wasted characters per cut).
"""

from __future__ import annotations

import argparse
import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from midword.bench import common, data
from midword.bench.acceptance_policies import SPLITS, clip_spans, valid_utf8
from midword.cli import CommandError

DEFAULT_OUT = "bench-results/acceptance"
DEFAULT_LIMIT = 200
METHODS = ("bytesampler", "naive")
SOURCES = ("stdlib", "humaneval")
TRUTH_MARGIN = 16  # characters of the true continuation stored beyond the longest completion


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "cuts")
    data.add_text_arguments(parser)
    parser.add_argument(
        "--data",
        help="HumanEval random-span file or its folder (default: as `bench humaneval`)",
    )
    parser.add_argument(
        "--sources",
        default=",".join(SOURCES),
        help="comma-separated: stdlib (--text's files), humaneval (default: both)",
    )
    parser.add_argument(
        "--methods", default=",".join(METHODS), help="comma-separated (default: both)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=48, help="tokens generated per cut (default 48)"
    )
    parser.add_argument(
        "--max-context", type=int, default=1000, help="prefix characters at most (default 1000)"
    )


# ---------------------------------------------------------------------- documents
@dataclass(frozen=True)
class Doc:
    """One held-out document."""

    source: str
    name: str
    text: str
    split: str


def assign_splits(source: str, files: Sequence[data.TextFile]) -> list[Doc]:
    """Documents of one source, every other one (ordered by the SHA-1 of the text, the
    same on every machine) in the development split, the rest held out.

    >>> docs = assign_splits("x", [data.TextFile(n, n) for n in "abcd"])
    >>> sorted(d.split for d in docs)
    ['dev', 'dev', 'held-out', 'held-out']
    """
    order = sorted(files, key=lambda f: hashlib.sha1(f.text.encode("utf-8")).hexdigest())
    return [Doc(source, f.name, f.text, SPLITS[i % 2]) for i, f in enumerate(order)]


def humaneval_files(path: Path) -> list[data.TextFile]:
    """Each HumanEval problem once: prompt, canonical solution and suffix of its
    random-span records joined (the whole problem)."""
    seen: dict[str, data.TextFile] = {}
    for record in data.read_jsonl(path):
        text = record["prompt"] + record["canonical_solution"] + record["suffix"]
        parts = record["task_id"].split("/")
        name = "/".join(parts[1:3]) if parts[0].startswith("RandomSpan") else record["task_id"]
        seen.setdefault(text, data.TextFile(name, text))
    return list(seen.values())


def load_docs(args: argparse.Namespace, sources: Sequence[str]) -> dict[str, list[Doc]]:
    """Documents by source."""
    out: dict[str, list[Doc]] = {}
    for source in sources:
        if source == "stdlib":
            files = data.load_texts(args.text, args.glob)
        else:
            files = humaneval_files(data.find_random_span(args.data))
        out[source] = assign_splits(source, files)
    return out


# ---------------------------------------------------------------------- cuts
def cut_kind(before: str, after: str) -> str:
    """The four cut kinds: `common.cut_kind`, with "line start" split off (only spaces or
    tabs before the cursor on its line, including an empty line).

    >>> cut_kind("x = ret", "urn"), cut_kind("def f():\\n    ", "return")
    ('mid-word', 'line start')
    >>> cut_kind("x = ", "y"), cut_kind("f(", "x"), cut_kind("", "x")
    ('after space', 'other', 'line start')
    """
    kind = common.cut_kind(before, after)
    if kind != "mid-word" and not before[before.rfind("\n") + 1 :].strip(" \t"):
        return "line start"
    return kind


def _split_of(index: int, sources: Sequence[str]) -> str:
    return SPLITS[(index // len(sources)) % len(SPLITS)]


def make_cut(docs: dict[str, list[Doc]], seed: int, index: int, max_context: int) -> dict:
    """Cut ``index`` of the run: depends only on (seed, index), so runs can be extended.
    Sources alternate with the index, then splits; a split with no document of that
    source (a one-file source) takes the other's."""
    from midword.server.scope import indent_unit

    sources = list(docs)
    source = sources[index % len(sources)]
    split = _split_of(index, sources)
    pool = [d for d in docs[source] if d.split == split] or docs[source]
    rng = random.Random(f"acceptance-{seed}-{index}")
    doc = rng.choices(pool, weights=[max(1, len(d.text) - 1) for d in pool])[0]
    cut = rng.randrange(1, len(doc.text)) if len(doc.text) > 1 else len(doc.text)
    start = 0
    if cut > max_context:
        line = doc.text.find("\n", cut - max_context, cut)
        start = line + 1 if line >= 0 else cut - max_context
    prefix = doc.text[start:cut]
    return {
        "key": str(index),
        "source": source,
        "split": doc.split,
        "file": doc.name,
        "start": start,
        "cut": cut,
        "cut_kind": cut_kind(prefix, doc.text[cut : cut + 1]),
        "line_prefix": doc.text[doc.text.rfind("\n", 0, cut) + 1 : cut],
        "indent_unit": indent_unit(prefix.split("\n")[-200:]),
        "prefix": prefix,
        "rest": doc.text[cut:],
    }


# ---------------------------------------------------------------------- generation
def generate(completer: Any, prefix: bytes, method: str, max_tokens: int) -> dict[str, Any]:
    """One greedy completion with its spans (the whole tree solved: the leaf's share)."""
    from midword.engine import BackendError, PrefixError, Settings

    settings = Settings(method=method, max_tokens=max_tokens, solve="tree")
    try:
        result = completer.complete(prefix, settings)
    except (PrefixError, BackendError) as exc:
        return {"text": "", "spans": [], "error": str(exc)}
    kept = valid_utf8(result.data)
    return {
        "text": kept.decode("utf-8"),
        "spans": [[end, logprob] for end, logprob in clip_spans(result.spans, len(kept))],
        "stop": result.stop_reason,
        "tokens": result.tokens,
        "seconds": round(result.seconds, 3),
    }


def sample_record(cut: dict, completer: Any, methods: Sequence[str], max_tokens: int) -> dict:
    """The samples.jsonl line of one cut: its place, and each method's completion with
    as much of the true continuation as any of them could match."""
    prefix = cut["prefix"].encode("utf-8")
    out = {k: v for k, v in cut.items() if k not in ("prefix", "rest")}
    out["methods"] = {m: generate(completer, prefix, m, max_tokens) for m in methods}
    longest = max((len(m["text"]) for m in out["methods"].values()), default=0)
    out["truth"] = cut["rest"][: longest + TRUTH_MARGIN]
    return out


# ---------------------------------------------------------------------- run
def _listed(value: str, allowed: Sequence[str], what: str) -> list[str]:
    items = [x.strip() for x in value.split(",") if x.strip()]
    bad = [x for x in items if x not in allowed]
    if bad or not items:
        raise CommandError(f"--{what}: expected some of {', '.join(allowed)}")
    return items


def settings_of(args: argparse.Namespace, sources: list[str], methods: list[str]) -> dict:
    """The run.json of this run (what the samples depend on)."""
    return {
        **common.model_settings(args),
        "backend": getattr(args, "backend", "auto"),
        "benchmark": "acceptance",
        **data.text_settings(args),
        "data": args.data,
        "sources": sources,
        "methods": methods,
        "max_tokens": args.max_tokens,
        "max_context": args.max_context,
    }


def run(args: argparse.Namespace) -> int:
    from midword.bench import acceptance_report

    sources = _listed(args.sources, SOURCES, "sources")
    methods = _listed(args.methods, METHODS, "methods")
    if args.max_tokens < 1 or args.limit < 1:
        raise CommandError("--max-tokens and --limit must be at least 1")
    rundir = common.RunDir(args.out, settings_of(args, sources, methods))
    timer = common.Timer()
    todo = [i for i in range(args.limit) if not rundir.done(str(i))]
    if todo:
        docs = load_docs(args, sources)
        from midword.engine import Completer

        completer = Completer(*common.load_model(args))
        bar = common.progress(len(todo), "acceptance")
        for i in todo:
            cut = make_cut(docs, args.seed, i, args.max_context)
            rundir.add(sample_record(cut, completer, methods, args.max_tokens))
            bar.update(1)
        bar.close()
    wanted = {str(i) for i in range(args.limit)}
    records = sorted(
        (r for r in rundir.records() if r["key"] in wanted), key=lambda r: int(r["key"])
    )
    markdown, summary = acceptance_report.report(records, methods)
    acceptance_report.plot(rundir.path, summary)
    common.finish(rundir, markdown, summary, timer.seconds())
    return 0
