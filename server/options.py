"""The server's options: ``initializationOptions`` and ``workspace/didChangeConfiguration``.

The JSON keys are the VS Code setting names without the ``midword.`` prefix
(extension-vscode/src/options.ts builds exactly this object). A missing key
takes its default; an invalid value takes its default and produces a problem
line that the server shows to the user.

>>> opts, problems = parse_options({"temperature": 0.5, "topP": 2})
>>> opts.temperature, opts.top_p
(0.5, 1.0)
>>> problems
['midword.topP = 2 is invalid (expected a number with 0 < topP <= 1); using 1.0']
>>> needs_reload(opts, parse_options({"model": "/m"})[0])
True
>>> parse_options({"ensemble": ["/a", "/b"], "ensembleWeights": [1, -1]})[0].ensemble_weights
(1.0, -1.0)
>>> dict(parse_options({"languages": {"markdown": True}})[0].languages)["markdown"]
True
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields, replace
from typing import Any

# the engine's choices, where it defines them (this imports numpy, not torch)
from midword.engine import BACKENDS, COMBINES, DTYPES, FIM_CHOICES, METHODS, MODES

from .where import DEFAULT_EXCLUDE_FILES, DEFAULT_LANGUAGES

__all__ = ["RELOAD_FIELDS", "ServerOptions", "needs_reload", "parse_options"]

# BACKENDS, METHODS, MODES, DTYPES and COMBINES are the engine's own (imported above).
# The server's own: the engine takes any torch device name, the extension offers these.
DEVICES = ("auto", "cpu", "cuda", "mps")
MULTILINE = ("auto", "always", "never")
LOG_LEVELS = ("error", "warning", "info", "debug")
CONTEXT_FILES = ("auto", "off")
ENGINES = ("local", "vllm")  # local: the model in process; vllm: a vLLM server at engineUrl
# a change to these reloads the model(s)
RELOAD_FIELDS = (
    "model",
    "backend",
    "device",
    "device_fallback",
    "dtype",
    "ensemble",
    "ensemble_weights",
    "ensemble_combine",
    "engine",
    "engine_url",
    "engine_model",
    "fim",  # the template is chosen when the model loads (its tokens, its config)
)


@dataclass(frozen=True)
class ServerOptions:
    """Typed options with their defaults (the same as the extension's package.json)."""

    model: str = ""  # "" = the default model shipped with midword
    # what computes the model: auto = llama.cpp for a GGUF file (when installed), else torch
    backend: str = "auto"
    device: str = "auto"
    # the device asked for is missing: serve on the best one there is (said in the status)
    device_fallback: bool = True
    dtype: str = "auto"
    # a byte-level ensemble of these model folders instead of ``model`` (engine/sample/ensemble.py)
    ensemble: tuple[str, ...] = ()
    ensemble_weights: tuple[float, ...] = ()  # () = equal weights
    ensemble_combine: str = "mix"
    method: str = "bytesampler"
    mode: str = "pbp"
    temperature: float = 0.0
    top_p: float = 1.0
    max_tokens: int = 48
    time_budget_ms: int = 1500
    multiline: str = "auto"
    # cut a completion where the model's exact probability of it falls below this
    # (engine/sample/confidence.py); "auto" = AUTO_MIN_CONFIDENCE, 0 = off; a first word
    # already below it leaves nothing: the server stays silent
    min_confidence: float | str = 0.0
    max_lines: int = 0  # lines a completion may span; 0 = no limit (1: single-line mode)
    # names the editor sends with a request (midwordCandidates) guide the completion only
    # when the model gives them this much of the probability together (issue 39). 0: always,
    # once a name extends the typed word: on `midword bench symbols` every name guidance
    # left to the model below 5% was one no analyser knew, and forced ones were right as
    # often (docs/benchmarks.md)
    symbols_min_mass: float = 0.0
    window_bytes: int = 4096
    log_level: str = "info"
    max_items: int = 3
    acceptance_log: bool = True  # append shown/accepted events to a local file (acceptance.py)
    # automatic requests wait this long for typing to pause: "auto" follows the typing
    # speed (server/debounce.py), an int is fixed milliseconds, 0 is off
    debounce_ms: str | int = "auto"
    # snippets of other open files of the same language go before the window (context_files.py)
    context_files: str = "auto"
    context_bytes: int = 1024  # their budget in the prompt
    # where the model runs: in process, or a vLLM server (server/engine_remote.py); the
    # tokenizer still comes from ``model`` (a local folder), the API key from the environment
    engine: str = "local"
    engine_url: str = ""
    engine_model: str = ""  # the served model's name ("" = the one the server serves)
    # fill-in-the-middle (docs/fim.md): auto = the model's own template if it has one, off,
    # or a template name; the text after the cursor, up to suffixBytes, ends on a line
    fim: str = "auto"
    suffix_bytes: int = 1024
    # where midword completes (server/where.py): language id -> on, "*" the rest; a
    # client's object is laid over the default (as VS Code merges object settings)
    languages: tuple[tuple[str, bool], ...] = tuple(sorted(DEFAULT_LANGUAGES.items()))
    # glob patterns of files never completed nor quoted to other buffers; a list replaces
    # the default ([] turns it off)
    exclude_files: tuple[str, ...] = DEFAULT_EXCLUDE_FILES


Check = Callable[[Any], bool]


def _one_of(choices: tuple[str, ...]) -> tuple[Check, str]:
    return (lambda v: isinstance(v, str) and v in choices), " | ".join(choices)


def _number(low: float, *, exclusive: bool = False, high: float = math.inf) -> Check:
    def check(v: Any) -> bool:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            return False
        return (v > low if exclusive else v >= low) and v <= high

    return check


def _integer(low: int) -> Check:
    return lambda v: _number(low)(v) and float(v).is_integer()


def _list_of(item: Check) -> Check:
    return lambda v: isinstance(v, list) and all(item(x) for x in v)


def _finite(v: Any) -> bool:
    return _number(-math.inf)(v)


def _language_switches(v: Any) -> bool:
    return isinstance(v, Mapping) and all(
        isinstance(key, str) and isinstance(on, bool) for key, on in v.items()
    )


def _convert(default: Any, value: Any) -> Any:
    """A checked JSON value in the field's Python type (lists become tuples)."""
    if isinstance(value, Mapping):  # languages: the client's entries over the default's
        return tuple(sorted({**DEFAULT_LANGUAGES, **value}.items()))
    if isinstance(default, tuple):  # lists of strings or of numbers (weights are floats)
        return tuple(x if isinstance(x, str) else float(x) for x in value)
    if isinstance(default, str) and not isinstance(value, str):  # "auto" | N: N stays a number
        return int(value)
    if isinstance(value, str) and isinstance(default, float):  # N | "auto": "auto" stays
        return value
    return type(default)(value)


# field -> (JSON key, check, what is expected)
_SPEC: dict[str, tuple[str, Check, str]] = {
    "model": ("model", lambda v: isinstance(v, str), "a string"),
    "backend": ("backend", *_one_of(BACKENDS)),
    "device": ("device", *_one_of(DEVICES)),
    "dtype": ("dtype", *_one_of(DTYPES)),
    "ensemble": (
        "ensemble",
        _list_of(lambda v: isinstance(v, str) and bool(v)),
        "a list of model folders",
    ),
    "ensemble_weights": ("ensembleWeights", _list_of(_finite), "a list of finite numbers"),
    "ensemble_combine": ("ensembleCombine", *_one_of(COMBINES)),
    "method": ("method", *_one_of(METHODS)),
    "mode": ("mode", *_one_of(MODES)),
    "temperature": ("temperature", _number(0), "a number >= 0"),
    "top_p": ("topP", _number(0, exclusive=True, high=1), "a number with 0 < topP <= 1"),
    "max_tokens": ("maxTokens", _integer(1), "an integer >= 1"),
    "time_budget_ms": ("timeBudgetMs", _integer(1), "an integer >= 1"),
    "multiline": ("multiline", *_one_of(MULTILINE)),
    "min_confidence": (
        "minConfidence",
        lambda v: v == "auto" or (_number(0)(v) and v < 1),
        '"auto" or a number with 0 <= minConfidence < 1 (0 = off)',
    ),
    "max_lines": ("maxLines", _integer(0), "an integer >= 0 (0 = no limit)"),
    "symbols_min_mass": (
        "symbolsMinMass",
        _number(0, high=1),
        "a number with 0 <= symbolsMinMass <= 1",
    ),
    "window_bytes": ("windowBytes", _integer(64), "an integer >= 64"),
    "log_level": ("logLevel", *_one_of(LOG_LEVELS)),
    "max_items": ("maxItems", _integer(1), "an integer >= 1"),
    "acceptance_log": ("acceptanceLog", lambda v: isinstance(v, bool), "true or false"),
    "device_fallback": ("deviceFallback", lambda v: isinstance(v, bool), "true or false"),
    "debounce_ms": (
        "debounceMs",
        lambda v: v == "auto" or _integer(0)(v),
        '"auto" or an integer >= 0 (milliseconds; 0 = off)',
    ),
    "context_files": ("contextFiles", *_one_of(CONTEXT_FILES)),
    "context_bytes": ("contextBytes", _integer(0), "an integer >= 0"),
    "engine": ("engine", *_one_of(ENGINES)),
    "engine_url": (
        "engineUrl",
        lambda v: isinstance(v, str) and (v == "" or v.startswith(("http://", "https://"))),
        "an http:// or https:// URL",
    ),
    "engine_model": ("engineModel", lambda v: isinstance(v, str), "a string"),
    "fim": ("fim", *_one_of(FIM_CHOICES)),
    "suffix_bytes": ("suffixBytes", _integer(0), "an integer >= 0"),
    "languages": (
        "languages",
        _language_switches,
        'an object of language ids to true or false, "*" for the rest',
    ),
    "exclude_files": (
        "excludeFiles",
        _list_of(lambda v: isinstance(v, str) and bool(v.strip())),
        "a list of glob patterns",
    ),
}


_LISTS = frozenset(
    name for name, (_, _, expected) in _SPEC.items() if expected.startswith("a list")
)


def _unwrap(raw: Any) -> Mapping[str, Any]:
    """The options object; also accepts ``{"midword": {...}}`` (settings sent by section)."""
    if isinstance(raw, Mapping) and isinstance(raw.get("midword"), Mapping):
        return raw["midword"]
    return raw if isinstance(raw, Mapping) else {}


def parse_options(raw: Any, base: ServerOptions | None = None) -> tuple[ServerOptions, list[str]]:
    """Options from a JSON object; keys it lacks keep ``base`` (default: the defaults)."""
    base = base or _defaults
    data = _unwrap(raw)
    problems: list[str] = []
    if raw is not None and not isinstance(raw, Mapping):
        problems.append(f"midword options must be a JSON object, got {json.dumps(raw)[:80]}")
    values: dict[str, Any] = {}
    for f in fields(ServerOptions):
        key, check, expected = _SPEC[f.name]
        value = data.get(key)
        if value == {} and f.name in _LISTS:
            value = []  # Neovim's Lua sends an empty table, `excludeFiles = {}`, as {}
        if value is None:
            values[f.name] = getattr(base, f.name)
        elif check(value):
            values[f.name] = _convert(getattr(ServerOptions(), f.name), value)
        else:
            default = getattr(ServerOptions(), f.name)
            shown = dict(default) if f.name == "languages" else default  # as the client wrote it
            problems.append(
                f"midword.{key} = {json.dumps(value)} is invalid "
                f"(expected {expected}); using {json.dumps(shown)}"
            )
            values[f.name] = default
    return ServerOptions(**values), problems


_defaults = ServerOptions()  # what a missing key takes at start (set_defaults)


def set_defaults(**changes: Any) -> None:
    """Start-up defaults from the command line (``midword serve --engine vllm --url U``);
    the client's settings still override them."""
    global _defaults
    _defaults = replace(_defaults, **changes)


def needs_reload(old: ServerOptions, new: ServerOptions) -> bool:
    """True when the change needs the model to be loaded again."""
    return any(getattr(old, name) != getattr(new, name) for name in RELOAD_FIELDS)
