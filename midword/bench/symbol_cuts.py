"""Where `midword bench symbols` cuts held-out Python code, and what jedi offers there.

Cut kinds (the cursor is where the user stopped typing):

* ``dot-inside``: strictly inside an identifier that follows ``.`` (``self.assertEq|ual``);
* ``dot-start``: at the start of an identifier that follows ``.`` (``self.|assertEqual``);
* ``bare-inside``: strictly inside an identifier that does not follow ``.`` (``isinst|ance``).

The identifiers are Python's NAME tokens (`tokenize`), so names in strings and comments
never count. Keywords are left out (they are not names), and so are the names a statement
defines right there (after ``def``, ``class`` and ``as``): no existing name completes them.
Files whose first lines say they are generated (``DO NOT EDIT``, ``@generated``) are left
out: pygls's LSP method tables are a third of its lines, repetitive and written by no one.

Cut ``i`` of a run depends only on (seed, i): its kind is ``KINDS[i % 3]`` (a partial run
stays balanced), then a site of that kind is drawn uniformly over all files, then the
cursor's offset inside the name. A larger ``--limit`` extends a run.

Candidates: `jedi_names` runs ``jedi.Script(code, path).complete(line, column)`` as a
language server would, on the document the editor holds while the line is being typed:
the file with the rest of the cut's line removed (``--jedi-code file``, the default), or
only the text before the cursor (``--jedi-code prefix``). The rest of the line is never
shown to jedi: it would give the name away (an attribute assigned on that very line).

>>> sites = find_sites("x = self.value\\nprint(x)\\n")
>>> [(s.kind_group, s.name) for s in sites]
[('bare', 'x'), ('bare', 'self'), ('dot', 'value'), ('bare', 'print'), ('bare', 'x')]
>>> cut = make_cut([SourceFile("a.py", "x = self.value\\n")], 0, 1)
>>> cut.kind, cut.prefix.endswith("self."), cut.name
('dot-start', True, 'value')
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import io
import keyword
import random
import re
import sys
import time
import tokenize
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from midword.cli import CommandError

KINDS = ("dot-inside", "dot-start", "bare-inside")
# Installed packages whose present code postdates SmolLM2's training data (The Stack,
# collected up to 2023): pygls 2.x (2.0 released in October 2025, much of it rewritten
# since 1.x) and pytest-lsp 1.x (written for pygls 2), the language-server packages
# midword's server and tests install, and typing-inspection (first released in 2025).
# Missing ones are skipped.
DEFAULT_PACKAGES = ("pygls", "pytest_lsp", "typing_inspection")
JEDI_CODES = ("file", "prefix")
# names that a statement defines where they stand: nothing existing completes them
_DEFINING = frozenset({"def", "class", "as"})
_WORD = re.compile(r"\w*")
MAX_FILE_CHARS = 200_000  # larger (generated) files are left out: jedi takes too long on them
# a file that says so in its first lines is generated code (pygls's LSP method tables):
# repetitive, and written by no one; left out
_GENERATED = re.compile(r"DO NOT EDIT|@generated")
_HEADER_LINES = 40


@dataclass(frozen=True)
class SourceFile:
    """One held-out Python file."""

    name: str
    text: str


@dataclass(frozen=True)
class Site:
    """A NAME token that may be cut: ``start`` is its offset in the file's text."""

    start: int
    name: str
    kind_group: str  # "dot" (follows ".") or "bare"


@dataclass
class Cut:
    """One cursor position: the model sees ``prefix``, jedi sees the document up to it."""

    index: int
    kind: str
    file: str
    offset: int  # of the cursor in the file
    name: str  # the true identifier at the cursor
    typed: str  # what was typed of it (name[:k])
    line_rest: str  # the true text from the cursor to the end of its line
    prefix: str  # what the model sees: up to --max-context characters before the cursor
    line: int  # jedi's 1-based line of the cursor
    column: int  # jedi's 0-based column of the cursor
    names: list[str] = field(default_factory=list)  # jedi's completion names
    jedi_seconds: float = 0.0
    jedi_error: str = ""

    def to_json(self) -> dict[str, Any]:
        """The record's cut fields (the prefix is left out: it can be rebuilt from the file)."""
        out = {k: v for k, v in self.__dict__.items() if k != "prefix"}
        out["prefix_chars"] = len(self.prefix)
        return out


# ---------------------------------------------------------------------- files
def package_files(packages: list[str]) -> tuple[list[Path], dict[str, str]]:
    """The .py files of installed packages (sorted), and {package: version}; a package
    that is not installed is skipped with a note on stderr.

    >>> files, versions = package_files(["midword_no_such_package"])  # doctest: +SKIP
    """
    paths: list[Path] = []
    versions: dict[str, str] = {}
    dists = importlib.metadata.packages_distributions()
    for package in packages:
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            print(
                f"midword bench symbols: package {package} not installed: skipped", file=sys.stderr
            )
            continue
        for folder in spec.submodule_search_locations:
            paths += sorted(Path(folder).rglob("*.py"))
        dist = (dists.get(package) or [package])[0]
        try:
            versions[package] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            versions[package] = "unknown"
    return paths, versions


def load_sources(paths: list[Path]) -> list[SourceFile]:
    """UTF-8 Python files that tokenize, ``\\r\\n`` -> ``\\n``, at most `MAX_FILE_CHARS`,
    not generated (`is_generated`)."""
    out = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8").replace("\r\n", "\n")
        except (OSError, UnicodeDecodeError):
            continue
        if 0 < len(text) <= MAX_FILE_CHARS and not is_generated(text) and find_sites(text):
            out.append(SourceFile(str(path), text))
    if not out:
        raise CommandError("no Python files to cut (see --packages, --text)")
    return out


def is_generated(text: str) -> bool:
    """Whether the file's first lines mark it as generated.

    >>> is_generated("# GENERATED FROM gen.py -- DO NOT EDIT\\nx = 1\\n"), is_generated("x = 1")
    (True, False)
    """
    head = "\n".join(text.split("\n", _HEADER_LINES)[:_HEADER_LINES])
    return _GENERATED.search(head) is not None


def text_files(folder: str) -> list[Path]:
    """The .py files under ``--text DIR``."""
    root = Path(folder).expanduser()
    if not root.is_dir():
        raise CommandError(f"--text {folder}: not a folder")
    return sorted(p for p in root.rglob("*.py") if p.is_file())


# ---------------------------------------------------------------------- sites
def find_sites(text: str) -> list[Site] | None:
    """Every non-keyword NAME token that is not being defined, with its group; None when
    the text does not tokenize.

    >>> [s.name for s in find_sites("def f(a):\\n    import os as o\\n    return a.b\\n")]
    ['a', 'os', 'a', 'b']
    """
    starts = _line_starts(text)
    sites: list[Site] = []
    previous = ""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in (tokenize.NL, tokenize.COMMENT, tokenize.INDENT, tokenize.DEDENT):
                continue
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string):
                start = starts[tok.start[0] - 1] + tok.start[1]
                if previous not in _DEFINING:
                    dot = start > 0 and text[start - 1] == "."
                    sites.append(Site(start, tok.string, "dot" if dot else "bare"))
            previous = tok.string
    except (tokenize.TokenError, SyntaxError, IndentationError):
        return None
    return sites


def _line_starts(text: str) -> list[int]:
    starts = [0]
    starts += [i + 1 for i, ch in enumerate(text) if ch == "\n"]
    return starts


def _eligible(site: Site, kind: str) -> bool:
    """Whether a cut of ``kind`` can sit in this site (inside needs two characters)."""
    group, place = kind.split("-")
    return site.kind_group == group and (place == "start" or len(site.name) >= 2)


class CutMaker:
    """Makes cut ``i`` of a run from the files' sites (tokenized once)."""

    def __init__(self, files: list[SourceFile], max_context: int = 2000) -> None:
        self.files = files
        self.max_context = max_context
        self.sites = [find_sites(f.text) or [] for f in files]
        self.by_kind: dict[str, list[tuple[int, int]]] = {}
        for kind in KINDS:
            self.by_kind[kind] = [
                (fi, si)
                for fi, sites in enumerate(self.sites)
                for si, site in enumerate(sites)
                if _eligible(site, kind)
            ]

    def cut(self, seed: int, index: int) -> Cut:
        """Cut ``index``: depends only on (seed, index) and the files."""
        kind = KINDS[index % len(KINDS)]
        pool = self.by_kind[kind]
        if not pool:
            raise CommandError(f"no {kind} cut in these files")
        rng = random.Random(f"symbols-{seed}-{index}")
        fi, si = pool[rng.randrange(len(pool))]
        site = self.sites[fi][si]
        k = 0 if kind.endswith("start") else rng.randrange(1, len(site.name))
        return self._cut_at(index, kind, self.files[fi], site, k)

    def _cut_at(self, index: int, kind: str, file: SourceFile, site: Site, k: int) -> Cut:
        text, offset = file.text, site.start + k
        line_start = text.rfind("\n", 0, offset) + 1
        line_end = text.find("\n", offset)
        line_end = len(text) if line_end < 0 else line_end
        start = 0
        if offset > self.max_context:
            at = text.find("\n", offset - self.max_context, offset)
            start = at + 1 if at >= 0 else offset - self.max_context
        return Cut(
            index=index,
            kind=kind,
            file=file.name,
            offset=offset,
            name=site.name,
            typed=site.name[:k],
            line_rest=text[offset:line_end],
            prefix=text[start:offset],
            line=text.count("\n", 0, offset) + 1,
            column=offset - line_start,
        )


def make_cut(files: list[SourceFile], seed: int, index: int, max_context: int = 2000) -> Cut:
    """Cut ``index`` of a run over ``files`` (see `CutMaker`)."""
    return CutMaker(files, max_context).cut(seed, index)


# ---------------------------------------------------------------------- jedi
def jedi_document(text: str, offset: int, mode: str = "file") -> str:
    """What jedi sees with the cursor at ``offset``: the text before it, and with
    ``mode="file"`` the file after the cursor's line (the rest of the line is being typed).

    >>> jedi_document("a = x.bc\\nb = 2\\n", 7)
    'a = x.b\\nb = 2\\n'
    >>> jedi_document("a = x.bc\\nb = 2\\n", 7, "prefix")
    'a = x.b'
    """
    if mode == "prefix":
        return text[:offset]
    end = text.find("\n", offset)
    return text[:offset] + (text[end:] if end >= 0 else "")


def jedi_names(cut: Cut, text: str, mode: str = "file") -> None:
    """Fill ``cut.names`` (sorted, distinct ``Completion.name``) from jedi at the cursor;
    an exception inside jedi leaves no names and says why in ``cut.jedi_error``."""
    import jedi

    started = time.perf_counter()
    try:
        script = jedi.Script(code=jedi_document(text, cut.offset, mode), path=cut.file)
        cut.names = sorted({c.name for c in script.complete(cut.line, cut.column)})
    except Exception as exc:  # noqa: BLE001 - jedi fails in many ways on odd code
        cut.names, cut.jedi_error = [], f"{type(exc).__name__}: {exc}"[:200]
    cut.jedi_seconds = round(time.perf_counter() - started, 4)


# ---------------------------------------------------------------------- identifiers
def completed_identifier(typed: str, completion: str) -> str:
    """The identifier at the cursor once ``completion`` is accepted: what was typed plus
    the completion's leading identifier characters.

    >>> completed_identifier("assertEq", "ual(a, b)"), completed_identifier("", "\\n")
    ('assertEqual', '')
    """
    match = _WORD.match(completion)
    return typed + (match.group() if match else "")


def identifiers(names: list[str]) -> list[str]:
    """jedi's names as the identifiers they insert: a keyword argument's completion is
    named ``default=``, and its identifier is ``default`` (what guidance chooses among, and
    what an identifier is checked against).

    >>> identifiers(["default=", "dict", "dict"])
    ['default', 'dict']
    """
    return sorted({n[:-1] if n.endswith("=") else n for n in names})


def offered(typed: str, names: list[str]) -> bool:
    """Whether jedi offers a candidate here: a name that extends what was typed (what
    guidance can choose from).

    >>> offered("ass", ["assertEqual", "x"]), offered("ass", ["x"])
    (True, False)
    """
    return any(n.startswith(typed) for n in names)
