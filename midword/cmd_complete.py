"""Complete a byte prefix with a local model (only the text after the prefix is printed).

The prefix is the PREFIX argument, the raw bytes of --prefix-file F, or standard
input when PREFIX is '-'. It is UTF-8 text that may stop inside a character (an
argument's bytes are taken as the shell passes them).

--json prints one object per prefix on one line (a public contract, kept stable):

  {"completion": str, "completion_hex": str, "leaf_logprob": float or null,
   "tokens": int, "seconds": float}

"completion" is the text after the prefix; "completion_hex" its exact bytes in
hexadecimal, which may start with the rest of a character the prefix ends inside
("completion" leaves out such pieces of characters, at either end). "leaf_logprob"
is the natural log of the sampled leaf's probability given the prefix (<= 0; null
for the baselines, byte mode and PBP mode's lazy solve). "tokens" counts the
generated tokens (the leaf is one), "seconds" the time the completion took.

--method bytesampler (default) conditions exactly on the bytes; healing1/2/4
(token healing) and naive are the baselines. --mode pbp samples one leaf of the
Valid Covering Tree and then ordinary tokens; --mode bytes samples byte by byte.
In PBP mode --solve lazy (default) scores a node of the tree only when the leaf
search enters it (fewest inference tokens; leaf_logprob is then null), --solve
tree scores the whole tree first and reports leaf_logprob. Both are exact.

--ensemble DIR ... [--weights W ...] [--combine mix|product] samples byte by byte
from models whose tokenizers may differ (mix: weighted average of their
next-byte probabilities; product: weighted sum of log-probabilities,
renormalized). --proxy-tune BASE EXPERT ANTI_EXPERT is the product with weights
1 1 -1. Transforms then apply to the combined next-byte distribution. Put the
prefix before these options, or after '--' (they take several values).

--suffix TEXT or --suffix-file PATH give the text after the cursor: with a model
trained for fill-in-the-middle (--fim auto finds its template from its special
tokens; --fim NAME names one) the completion is the middle, conditioned on both
sides and exact at the cursor (docs/fim.md). A model without FIM tokens ignores
the suffix (said on stderr); --fim off always does.

--candidates FILE (one name a line) or --candidate NAME (repeatable) guide the
completion (issue 39): the next name is one of the candidates that extend the name
typed at the end of the prefix, drawn from their exact probabilities with the name
ending there (greedy: the likeliest), and the completion goes on exactly after it.
When no candidate extends what was typed, or the candidates hold less than
--min-mass of the probability (default 0: never), the completion is the unguided one.
--json then adds "method" ("bytesampler+symbols" when guided), "guided" (bool),
"reason" (why not guided, else ""), "chosen" (the name or null), "logprob" (its exact
log-probability, or null) and "mass" (a lower bound on the candidates' total
probability: the choice scores only the names it needs). Guidance needs one local
model, --method bytesampler and no --suffix.

--max-lines N keeps at most N lines of the completion (1: the rest of the prefix's
line only; 0, the default: no limit). --min-confidence P cuts it where the model's
exact probability of it falls below P, at a word or line boundary (whole words whose end
is still at least P are kept; a first word below P leaves nothing), as the language
server's minConfidence does (docs/editors.md, "Suggestion length"); "auto" is 0.2. It
makes PBP mode solve the whole tree (the leaf's probability is needed), and generation
stops once the probability is below P. The cut is applied to "completion" and
"completion_hex"; "tokens" counts what was generated.

Several prefixes (PREFIX ... and --prefix-file F ..., in that order) need --json
and print one object per line (JSON Lines), in order. The model loads once and
keeps its cache from one prefix to the next; each completion is the one a run of
its own gives (with --seed, each prefix's draws start from that seed).
Errors print one line on stderr and exit with status 2.

Examples:
  midword complete '    self.assertEq'
  midword complete --json --solve tree --max-tokens 8 'def pri' 'x = 12'
  midword complete --temperature 0.8 --top-p 0.95 --seed 1 'import nump'
  midword complete --suffix $'\n    return total\n' $'def add(a, b):\n    tot'
  midword complete --candidate assertEqual --candidate assertIn '    self.assertEq'
  midword complete --max-lines 1 --min-confidence 0.2 'def main(argv):'
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

from midword.cli import CommandError, print_json
from midword.cmd_score import add_candidate_arguments, read_candidates
from midword.cmd_tree import add_prefix_arguments, read_prefixes
from midword.modelargs import (
    add_engine_arguments,
    add_fim_arguments,
    add_model_arguments,
    default_model_arg,
    fim_template,
    load_model_and_engine,
    read_suffix,
)

COMBINES = (
    "mix",
    "product",
)  # engine/sample/ensemble.py COMBINES (not imported: --help stays light)
PROXY_WEIGHTS = (1.0, 1.0, -1.0)  # base + expert - anti-expert
# what --json adds for --candidates (engine/sample/guided.py Guided.to_json)
GUIDED_FIELDS = ("method", "guided", "reason", "chosen", "logprob", "mass")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from midword.engine import METHODS, MIN_MASS, MODES, SOLVES

    add_prefix_arguments(parser)
    add_model_arguments(parser)
    add_engine_arguments(parser)
    add_fim_arguments(parser)
    parser.add_argument(
        "--method",
        choices=METHODS,
        default="bytesampler",
        help="bytesampler (default, exact) or a baseline: healing1/2/4 (token healing), naive",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="pbp (default: one covering-tree leaf, then ordinary tokens) or bytes (byte by "
        "byte, as ensembles do)",
    )
    parser.add_argument(
        "--solve",
        choices=SOLVES,
        default="lazy",
        help="PBP leaf search: lazy (default, fewest model tokens) or tree (whole tree, "
        "reports leaf_logprob)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=48, metavar="N", help="token budget (default 48)"
    )
    parser.add_argument(
        "--max-bytes",
        type=int,
        default=0,
        metavar="N",
        help="byte budget in byte mode (default 0: 4 bytes per allowed token)",
    )
    parser.add_argument(
        "--temperature",
        type=float,
        default=0.0,
        metavar="T",
        help="sampling temperature (default 0: greedy)",
    )
    parser.add_argument(
        "--top-p",
        type=float,
        default=1.0,
        metavar="P",
        help="keep the likeliest choices that hold this much probability (default 1: all)",
    )
    parser.add_argument(
        "--top-k",
        type=int,
        default=0,
        metavar="K",
        help="keep the K likeliest choices (default 0: all)",
    )
    parser.add_argument(
        "--level",
        choices=("token", "byte"),
        help="where transforms apply in byte mode (default token: on leaf log-probs)",
    )
    parser.add_argument("--seed", type=int, metavar="N", help="random seed (reproducible sampling)")
    parser.add_argument(
        "--stop",
        action="append",
        default=[],
        metavar="TEXT",
        help="stop before this text (repeatable)",
    )
    parser.add_argument(
        "--max-lines",
        type=int,
        default=0,
        metavar="N",
        help="keep at most N lines of the completion (default 0: no limit; 1: one line)",
    )
    parser.add_argument(
        "--min-confidence",
        type=_confidence,
        default=0.0,
        metavar="P",
        help="cut where the completion's exact probability falls below P, at a word "
        'boundary (0 <= P < 1, or "auto" = 0.2; default 0: off)',
    )
    parser.add_argument(
        "--json", action="store_true", help="print one JSON object per prefix (see above)"
    )
    add_ensemble_arguments(parser)
    add_candidate_arguments(parser)
    parser.add_argument(
        "--min-mass",
        type=float,
        default=MIN_MASS,
        metavar="P",
        help=f"guide only when the candidates hold this much probability (default {MIN_MASS})",
    )


def add_ensemble_arguments(parser: argparse.ArgumentParser) -> None:
    group = parser.add_mutually_exclusive_group()
    group.add_argument(
        "--ensemble",
        nargs="+",
        metavar="MODEL_DIR",
        help="byte-level ensemble of these models (each with its own tokenizer)",
    )
    group.add_argument(
        "--proxy-tune",
        nargs=3,
        metavar=("BASE", "EXPERT", "ANTI_EXPERT"),
        help="proxy tuning: product ensemble with weights 1 1 -1",
    )
    parser.add_argument(
        "--weights", nargs="+", type=float, metavar="W", help="one weight per ensemble model"
    )
    parser.add_argument(
        "--combine", choices=COMBINES, help="mix (default for --ensemble) or product"
    )


def run(args: argparse.Namespace) -> int:
    from midword.engine import BackendError, PrefixError

    prefixes = read_prefixes(args)
    spec = ensemble_spec(args)
    settings = make_settings(args, ensemble=spec is not None)
    names = read_candidates(args)
    if names:
        return run_guided(args, prefixes, names, settings, spec)
    completer = load_ensemble(args, *spec) if spec is not None else load_single(args)
    for prefix in prefixes:
        try:
            result = completer.complete(prefix, settings)
        except (PrefixError, BackendError) as exc:
            raise CommandError(str(exc)) from exc
        _print_result(args, result)
    return 0


def _confidence(value: str) -> float | str:
    """``--min-confidence``: "auto" or a number in [0, 1)."""
    if value == "auto":
        return value
    try:
        number = float(value)
    except ValueError:
        number = -1.0
    if not 0.0 <= number < 1.0:
        raise argparse.ArgumentTypeError(f'expected "auto" or a number in [0, 1), got {value!r}')
    return number


def shaped(result: Any, max_lines: int, threshold: float) -> Any:
    """The completion cut by ``--min-confidence`` (its log-probability ``threshold``, by
    engine/sample/confidence.py) and then to ``max_lines`` lines (0: no limit).

    >>> from midword.engine import Completion
    >>> done = Completion("a = 1\\nb = 2", b"a = 1\\nb = 2", None, 4, 0.0, "eos")
    >>> shaped(done, 1, float("-inf")).text
    'a = 1'
    """
    from dataclasses import replace

    from midword.engine import confidence_cut

    end = confidence_cut(result.data, result.spans, threshold)
    if max_lines:
        breaks = [i for i, b in enumerate(result.data[:end]) if b == 0x0A]
        end = breaks[max_lines - 1] if len(breaks) >= max_lines else end
    if end >= len(result.data):
        return result
    data = result.data[:end]
    return replace(result, data=data, text=data.decode("utf-8", errors="ignore"))


def _print_result(args: argparse.Namespace, result: Any, extra: dict | None = None) -> None:
    from midword.engine import min_logprob

    result = shaped(result, args.max_lines, min_logprob(args.min_confidence))
    if args.json:
        print_json({**result.to_json(), "completion_hex": result.data.hex(), **(extra or {})})
    else:
        sys.stdout.write(result.text + "\n")


def run_guided(
    args: argparse.Namespace, prefixes: list[bytes], names: list[str], settings: Any, spec: Any
) -> int:
    """Completions guided by the candidate names (engine/sample/guided.py), or the
    unguided ones where the guidance stands aside (the reason on stderr without --json)."""
    from midword.engine import BackendError, PrefixError

    if spec is not None or read_suffix(args) is not None or settings.method != "bytesampler":
        raise CommandError("--candidates needs one model, --method bytesampler and no --suffix")
    completer = load_single(args)
    if not isinstance(completer, _Fitted) or isinstance(completer, _Middle):
        raise CommandError("--candidates needs a local model")
    for prefix in prefixes:
        try:
            guided = completer.complete_guided(prefix, names, settings, args.min_mass)
        except (PrefixError, BackendError) as exc:
            raise CommandError(str(exc)) from exc
        if guided.reason and not args.json:
            print(f"midword: not guided: {guided.reason}", file=sys.stderr)
        described = guided.to_json()
        extra = {key: described[key] for key in GUIDED_FIELDS}
        _print_result(args, guided.completion, extra)
    return 0


def make_settings(args: argparse.Namespace, ensemble: bool) -> Any:
    """Settings from the options; an ensemble samples bytes, transforms at byte level."""
    from midword.engine import Settings, min_logprob

    if ensemble:
        for name, value, allowed in (
            ("--method", args.method, "bytesampler"),
            ("--mode", args.mode, "bytes"),
            ("--level", args.level, "byte"),
        ):
            if value not in (None, allowed):
                raise CommandError(f"ensembles need {name} {allowed} (they sample byte by byte)")
    if args.max_lines < 0:
        raise CommandError("--max-lines must be >= 0")
    threshold = min_logprob(args.min_confidence)
    try:
        return Settings(
            method=args.method,
            mode=args.mode or ("bytes" if ensemble else "pbp"),
            max_tokens=args.max_tokens,
            max_bytes=args.max_bytes,
            temperature=args.temperature,
            top_k=args.top_k,
            top_p=args.top_p,
            level=args.level or ("byte" if ensemble else "token"),
            # a confidence needs the leaf's probability, which the lazy solve leaves out
            solve="tree" if threshold > -math.inf else args.solve,
            seed=args.seed,
            stop=tuple(args.stop) + (("\n",) if args.max_lines == 1 else ()),
            min_logprob=threshold,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def ensemble_spec(args: argparse.Namespace) -> tuple[list[str], list[float], str] | None:
    """(model dirs, weights, combine) for --ensemble/--proxy-tune, else None."""
    dirs = args.ensemble or args.proxy_tune
    if dirs is None:
        if args.weights is not None or args.combine is not None:
            raise CommandError("--weights and --combine need --ensemble or --proxy-tune")
        return None
    if args.tokenizer or args.model != default_model_arg():
        raise CommandError("with an ensemble, name the models after --ensemble, not --model")
    if read_suffix(args) is not None or args.fim not in ("auto", "off"):
        raise CommandError("fill-in-the-middle (--suffix, --fim) needs one model, not an ensemble")
    if args.proxy_tune and args.combine not in (None, "product"):
        raise CommandError("--proxy-tune is a product of the models (no --combine mix)")
    default = PROXY_WEIGHTS if args.proxy_tune else [1.0] * len(dirs)
    return (
        list(dirs),
        list(args.weights or default),
        args.combine or ("product" if args.proxy_tune else "mix"),
    )


def load_ensemble(args: argparse.Namespace, dirs: list[str], weights: list, combine: str) -> Any:
    """The Ensemble (weights checked before any model loads); CommandError on failure."""
    from midword.engine import BackendError, Ensemble, TokenizerError

    try:
        ensemble = Ensemble.from_dirs(dirs, weights, combine, device=args.device, dtype=args.dtype)
        return _FittedEnsemble(ensemble)
    except TokenizerError as exc:
        raise CommandError(f"cannot load the tokenizer: {exc}") from exc
    except (BackendError, ValueError, OSError) as exc:
        raise CommandError(str(exc)) from exc


def load_single(args: argparse.Namespace) -> Any:
    from midword.engine import Completer

    model, engine = load_model_and_engine(args)
    template = fim_template(args, model, engine)
    if template is not None:
        return _Middle(model, engine, template, read_suffix(args) or b"")
    remote = getattr(model, "completer", None)  # a remote engine streams its generation
    if remote is not None:  # it keeps its prompts within its own context
        return remote(engine)
    return _Fitted(Completer(model, engine), getattr(model, "context_length", None))


class _Fitted:
    """``complete(prefix, settings)`` with the prompt cut to the positions the model takes
    (engine/model/context_fit.py: whole lines dropped from its front; stderr says so)."""

    def __init__(self, completer: Any, max_context: int | None) -> None:
        self.completer, self.max_context = completer, max_context

    def _move(self, prompt: bytes) -> int:
        self.completer.sampler.reset(prompt)
        return self.completer.positions_used()

    def complete(self, prefix: bytes, settings: Any) -> Any:
        prompt, room = _fit(prefix, self.max_context, self._move)
        return self.completer.complete(prompt, _capped(settings, room))

    def complete_guided(self, prefix: bytes, names: list[str], settings: Any, mass: float) -> Any:
        """`complete_guided` on the fitted prompt, falling back to the plain completion."""
        from midword.engine import complete_guided

        prompt, room = _fit(prefix, self.max_context, self._move)
        capped = _capped(settings, room)
        return complete_guided(self.completer, prompt, names, capped, min_mass=mass, fallback=True)


class _FittedEnsemble:
    """``complete(prefix, settings)`` of a byte-level ensemble with the prompt cut to its
    shortest member context; a generated byte is at most one more token for any member,
    so the byte budget is capped at the positions left."""

    def __init__(self, ensemble: Any) -> None:
        self.ensemble = ensemble

    def _move(self, prompt: bytes) -> int:
        self.ensemble.reset(prompt)
        return self.ensemble.positions_used()

    def complete(self, prefix: bytes, settings: Any) -> Any:
        from dataclasses import replace

        prompt, room = _fit(prefix, self.ensemble.context_length, self._move)
        budget = min(settings.byte_budget, room)
        return self.ensemble.complete(prompt, replace(settings, max_bytes=budget))


class _Middle(_Fitted):
    """``complete(prefix, settings)``: the middle between the prefix and the command's
    suffix, by a `FimCompleter` (one KV session for all the prefixes)."""

    def __init__(self, model: Any, engine: Any, template: Any, suffix: bytes) -> None:
        from midword.engine import ContextFit, FimCompleter, suffix_lines

        fim = FimCompleter(model, engine, template)
        super().__init__(fim, getattr(model, "context_length", None))
        # the suffix's first lines, at most a third of the room (as the server keeps it)
        self.suffix = suffix_lines(ContextFit(self.max_context), suffix, fim.token_count)

    def _move(self, prompt: bytes) -> int:
        fim = self.completer
        fim.completer.sampler.reset(fim.move_to(prompt, self.suffix))
        return fim.positions_used()

    def complete(self, prefix: bytes, settings: Any) -> Any:
        prompt, room = _fit(prefix, self.max_context, self._move)
        return self.completer.complete(prompt, self.suffix, _capped(settings, room))


def _fit(prefix: bytes, max_context: int | None, move: Any) -> tuple[bytes, int]:
    """The prompt cut to fit ``max_context`` positions, and the tokens left to generate."""
    from midword.engine import ContextFit, fitted

    fit = ContextFit(max_context)
    prompt = fitted(fit, prefix, move)
    if fit.dropped:
        print(
            f"midword: the prompt's first {len(fit.dropped)} bytes were left out: the model "
            f"takes {max_context} positions",
            file=sys.stderr,
        )
    return prompt, fit.new_tokens(move(prompt))


def _capped(settings: Any, room: int) -> Any:
    from dataclasses import replace

    return replace(settings, max_tokens=min(settings.max_tokens, room))
