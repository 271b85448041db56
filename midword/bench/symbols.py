"""Completions guided by the editor's symbols (issue 39): does the next identifier exist?

Held-out Python code is cut where an editor would ask for a completion (see
`midword.bench.symbol_cuts`): inside an identifier after ``.``, at the start of one after
``.``, and inside a bare name, the kinds in turn. At each cut jedi (the static analyser
behind jedi-language-server) lists the names it would complete there, on the document
the editor holds while the line is typed (the file without the rest of that line). Then
each method completes the text before the cursor (at most --max-context characters;
greedy; up to the end of the line):

* naive: tokenize the prefix, generate;
* healing1: token healing, one token backed off;
* bytesampler: ByteSampler, exact at the cursor;
* guided: ByteSampler with its next identifier chosen among jedi's names that extend
  what was typed (a keyword argument's ``default=`` counts as ``default``), by their exact
  probabilities (`complete_guided`, greedy), then the rest of the line; where the guidance
  stands aside (no name extends what was typed, or the names hold less than --min-mass of
  the probability) the unguided completion, counted. Where it stood aside for lack of
  mass, the name it would have chosen anyway is recorded too (untimed): the report's
  what-if row, guidance with no minimum mass. With --sweep, whether it would guide at
  each of those minimum masses is recorded too (untimed), and the report has a row each.

Reported per method and cut kind: next-identifier exact match, the hallucinated rate
(the identifier at the cursor is not one of jedi's names, over the cuts where jedi offers
one), first-line exact match, the median time per completion (CPU time of the process,
and wall time), and for guidance how often it stood aside and the latency it adds to
ByteSampler (median of the paired differences, as a share of ByteSampler's median
completion; judged on CPU time, which leaves out the waits of a shared machine). The
goals of issue 39 are printed with them: guided hallucinated below 2%, identifier exact
at least 1.3x ByteSampler's, added latency at most 20% of a completion.

The code: by default the installed packages pygls, pytest_lsp and typing_inspection
(their present code postdates the default model's training data; --packages names
others), or every .py file under --text DIR.

Timing (``--timing``) follows the language server. Before each method the prompt's settled
tokens are in the KV cache (untimed: the server prefills them while the user types).
``request`` (the default) then times what one request costs: for ByteSampler and guided
the server's ``prepare``, which scores the covering tree at the cursor once for every
item, guided or not, and then the completion; naive and token healing need no tree. The
prepare's share is recorded too (``prepare_cpu_seconds``), and each method's inference
tokens (``inference_tokens``: model work, whatever else the machine runs). ``item`` is
the timing of the first runs of this table: the prompt warmed once per cut by a one-token
completion, then the methods one after the other from whatever cache the last one left.

Examples:
  midword bench symbols --limit 60
  midword bench symbols --limit 60 --sweep 0,0.005,0.01,0.02,0.05
  midword bench symbols --model models/default --text ~/src/myproject --limit 30
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from typing import Any

from midword.bench import common, plots
from midword.bench.symbol_cuts import (
    DEFAULT_PACKAGES,
    JEDI_CODES,
    KINDS,
    Cut,
    CutMaker,
    identifiers,
    jedi_names,
    load_sources,
    package_files,
    text_files,
)
from midword.bench.symbols_report import LABELS, METHODS, markdown, summarize

DEFAULT_OUT = "bench-results/symbols"
DEFAULT_LIMIT = 60
STOP = ("\n",)  # every metric reads the first line
TIMINGS = ("request", "item")
# the methods whose requests score the covering tree first (the server's prepare)
PREPARED = ("bytesampler", "guided")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "cuts (the kinds in turn)")
    parser.add_argument(
        "--packages",
        default=",".join(DEFAULT_PACKAGES),
        help="installed packages whose .py files are cut (default: "
        + ",".join(DEFAULT_PACKAGES)
        + ": code newer than the default model's training data)",
    )
    parser.add_argument("--text", help="cut the .py files under this folder instead")
    parser.add_argument(
        "--jedi-code",
        choices=JEDI_CODES,
        default="file",
        help="what jedi sees: file (default: the file without the rest of the cut's line, "
        "as an editor holds it while the line is typed) or prefix (the text before the cursor)",
    )
    parser.add_argument(
        "--max-context", type=int, default=2000, help="prefix characters at most (default 2000)"
    )
    parser.add_argument(
        "--max-tokens", type=int, default=32, help="token budget per completion (default 32)"
    )
    parser.add_argument(
        "--min-mass",
        type=float,
        default=0.0,  # the server's symbolsMinMass (server/options.py; not imported)
        help="guide only when jedi's names hold this much probability (default 0, the "
        "server's symbolsMinMass: whenever a name extends what was typed)",
    )
    parser.add_argument(
        "--timing",
        choices=TIMINGS,
        default="request",
        help="request (default): each method timed as the server runs a request, tree "
        "scoring included; item: the prompt warmed once per cut, methods back to back",
    )
    parser.add_argument(
        "--sweep",
        default="",
        help="comma-separated minimum masses to weigh against each other (e.g. "
        "0,0.005,0.01,0.02,0.05): at each cut, whether guidance would stand aside at each "
        "(untimed); the report then has a row per value",
    )
    parser.add_argument(
        "--methods",
        default=",".join(METHODS),
        help="comma-separated methods (default: all of " + ",".join(METHODS) + ")",
    )


# ---------------------------------------------------------------------- the run
def _methods(text: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in METHODS]
    if unknown or not names:
        from midword.cli import CommandError

        raise CommandError(f"unknown --methods {', '.join(unknown)}; known: {', '.join(METHODS)}")
    return [m for m in METHODS if m in names]


def sweep_values(text: str) -> list[float]:
    """--sweep's minimum masses, ascending and distinct.

    >>> sweep_values("0.05, 0,0.01,0.05"), sweep_values("")
    ([0.0, 0.01, 0.05], [])
    """
    try:
        values = sorted({float(v) for v in text.split(",") if v.strip()})
    except ValueError:
        from midword.cli import CommandError

        raise CommandError(f"--sweep {text!r}: not a list of numbers") from None
    return values


def _sources(args: argparse.Namespace) -> tuple[list[Any], dict[str, Any]]:
    """The files to cut and the run.json fields that identify them."""
    if args.text:
        return load_sources(text_files(args.text)), {"text": args.text}
    packages = [p.strip() for p in args.packages.split(",") if p.strip()]
    paths, versions = package_files(packages)
    return load_sources(paths), {"packages": versions}


def settings_of(args: argparse.Namespace, source: dict[str, Any]) -> dict[str, Any]:
    """run.json: what determines the samples (a rerun with others is refused)."""
    import jedi

    return {
        **common.model_settings(args),
        "backend": getattr(args, "backend", "auto"),
        "benchmark": "symbols",
        **source,
        "jedi": jedi.__version__,
        "jedi_code": args.jedi_code,
        "max_context": args.max_context,
        "max_tokens": args.max_tokens,
        "min_mass": args.min_mass,
        "methods": _methods(args.methods),
        "timing": args.timing,
        **({"sweep": sweep_values(args.sweep)} if args.sweep else {}),  # older runs: none
    }


def run(args: argparse.Namespace) -> int:
    methods = _methods(args.methods)
    files, source = _sources(args)
    rundir = common.RunDir(args.out, settings_of(args, source))
    timer = common.Timer()
    todo = [i for i in range(args.limit) if not rundir.done(str(i))]
    if todo:
        _execute(args, rundir, files, todo, methods)
    wanted = {str(i) for i in range(args.limit)}
    records = [r for r in rundir.records() if r["key"] in wanted]
    summary = summarize(records, methods)
    _plot(rundir, summary)
    common.finish(rundir, markdown(summary), summary, timer.seconds())
    return 0


def _execute(
    args: argparse.Namespace, rundir: common.RunDir, files: list, todo: list[int], methods: list
) -> None:
    texts = {f.name: f.text for f in files}
    maker = CutMaker(files, args.max_context)
    runner = Runner(args, methods)
    bar = common.progress(len(todo), "symbols")
    try:
        for i in todo:
            cut = maker.cut(args.seed, i)
            jedi_names(cut, texts[cut.file], args.jedi_code)
            record = {"key": str(i), **cut.to_json(), "methods": runner.run(cut)}
            rundir.add(record)
            bar.update(1)
    finally:
        bar.close()


class Runner:
    """Completes one cut with each method on one model (one KV cache for all)."""

    def __init__(self, args: argparse.Namespace, methods: list[str]) -> None:
        from midword.engine import Completer, Settings

        model, engine = common.load_model(args)
        self.completer = Completer(model, engine)
        self.max_context = getattr(model, "context_length", None)
        self.methods = methods
        self.min_mass = args.min_mass
        self.sweep = sweep_values(getattr(args, "sweep", ""))
        self.timing = getattr(args, "timing", "request")
        self.settings = Settings(max_tokens=args.max_tokens, temperature=0.0, stop=STOP)

    def run(self, cut: Cut) -> dict[str, dict[str, Any]]:
        """{method: its outcome}: ByteSampler and guided in turns of order (even cuts one
        first, odd cuts the other), so neither always finds the other's cache."""
        prompt, room = self._fit(cut.prefix.encode("utf-8"))
        settings = dataclasses.replace(
            self.settings, max_tokens=min(self.settings.max_tokens, room)
        )
        if self.timing == "item":
            self._warm(prompt)
        order = list(self.methods)
        if cut.index % 2 and "bytesampler" in order and "guided" in order:
            a, b = order.index("bytesampler"), order.index("guided")
            order[a], order[b] = order[b], order[a]
        names = identifiers(cut.names)
        out = {}
        for m in order:
            if self.timing == "request":
                self._prefill(prompt)
            out[m] = self._one(m, prompt, names, settings)
        for m in out.values():
            m["prompt_bytes"] = len(prompt)
        guided = out.get("guided")
        if guided and guided["reason"] and not guided["reason"].startswith("no candidate"):
            guided["forced"] = self._forced(prompt, names, settings)  # after the timed runs
        if guided and self.sweep:
            guided["sweep"] = self._sweep(prompt, names, guided)
        return {m: out[m] for m in self.methods}

    def _sweep(self, prompt: bytes, names: list[str], guided: dict[str, Any]) -> dict[str, bool]:
        """{min mass: whether guidance would guide there} (untimed): the report reads the
        guided completion (or ``forced``) where it would, the unguided one where not."""
        from midword.engine.sample.guided import would_guide

        if guided["reason"].startswith("no candidate"):  # no threshold changes that
            return {f"{t:g}": False for t in self.sweep}
        return {f"{t:g}": would_guide(self.completer, prompt, names, t) for t in self.sweep}

    def _fit(self, prefix: bytes) -> tuple[bytes, int]:
        """The prompt cut to the model's positions (whole lines from its front), and the
        tokens left to generate."""
        from midword.engine import ContextFit, fitted

        def move(prompt: bytes) -> int:
            self.completer.sampler.reset(prompt)
            return self.completer.positions_used()

        fit = ContextFit(self.max_context)
        prompt = fitted(fit, prefix, move)
        return prompt, max(1, fit.new_tokens(move(prompt)))

    def _warm(self, prompt: bytes) -> None:
        """``--timing item``: score the prompt once, untimed, by a one-token completion."""
        self.completer.complete(prompt, dataclasses.replace(self.settings, max_tokens=1))

    def _prefill(self, prompt: bytes) -> None:
        """``--timing request``: the state a request finds, untimed: the prompt's trunk in
        the KV cache (server/live.py prefills it while the user types), nothing scored at
        the cursor (no tree nodes, no leaves kept from another method's run)."""
        self.completer.context_changed()  # forget the leaves another method scored
        self.completer.sampler.reset(prompt)
        self.completer.session.logprobs(self.completer.sampler.vct.tree().trunk, [()])

    def _prepare(self, method: str, prompt: bytes) -> None:
        """What the server does once per request before its items (server/live.py
        ``prepare``): for ByteSampler, guided or not, score the covering tree at the cursor."""
        if self.timing == "request" and method in PREPARED:
            self.completer.sampler.reset(prompt)
            self.completer.leaf_set()

    def _one(self, method: str, prompt: bytes, names: list[str], settings: Any) -> dict[str, Any]:
        from midword.engine import complete_guided

        started, cpu = time.perf_counter(), time.process_time()
        tokens = self.completer.session.inference_tokens
        self._prepare(method, prompt)
        prepared = time.process_time() - cpu
        if method == "guided":
            guided = complete_guided(
                self.completer, prompt, names, settings, min_mass=self.min_mass, fallback=True
            )
            result = guided.completion
            extra = {"guided": guided.guided, "reason": guided.reason, "chosen": guided.chosen}
            extra["mass"] = round(float(guided.mass), 6)
        else:
            result = self.completer.complete(prompt, dataclasses.replace(settings, method=method))
            extra = {}
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert result is not None  # fallback=True always completes
        return {
            "completion": result.text,
            "seconds": round(seconds, 6),
            "cpu_seconds": round(cpu, 6),
            "prepare_cpu_seconds": round(prepared, 6),
            "inference_tokens": self.completer.session.inference_tokens - tokens,
            "tokens": result.tokens,
            "stop_reason": result.stop_reason,
            **extra,
        }

    def _forced(self, prompt: bytes, names: list[str], settings: Any) -> dict[str, Any]:
        """Where guidance stood aside for lack of mass: what it writes with no minimum
        (the report's what-if row; untimed)."""
        from midword.engine import complete_guided

        forced = complete_guided(self.completer, prompt, names, settings, min_mass=0.0)
        if forced.completion is None:  # nothing reachable among the names
            return {"completion": "", "chosen": None, "reason": forced.reason}
        return {"completion": forced.completion.text, "chosen": forced.chosen}


def _plot(rundir: common.RunDir, summary: dict[str, Any]) -> None:
    """Bars per method by cut kind: identifier exact, and hallucinated where jedi offers."""
    stats, methods = summary["methods"], summary["rows"]
    groups = [LABELS[m] for m in methods]
    for metric, name, title in (
        ("ident_exact", "identifier_exact.png", "next identifier exact"),
        ("hallucinated", "hallucinated.png", "hallucinated (where jedi offers names)"),
    ):
        series = {"all": [stats[m]["all"][metric] for m in methods]}
        for kind in KINDS:
            series[kind] = [stats[m][kind][metric] for m in methods]
        try:
            plots.grouped_bars(rundir.path / name, groups, series, f"symbols: {title}", title)
        except ImportError:
            print("midword bench symbols: no matplotlib: plots left out", file=sys.stderr)
            return
