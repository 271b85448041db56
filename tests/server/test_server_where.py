"""Where midword completes, without a model (server/where.py, options, context files):
the glob matching against a brute-force matcher, the cases the extension shares, the
options' parsing, and the context block that never quotes an excluded file."""

from __future__ import annotations

import json
import random
from functools import cache
from pathlib import Path

import pytest
from midword.server.context_files import ContextFiles
from midword.server.document import Document
from midword.server.options import ServerOptions, parse_options
from midword.server.where import (
    DEFAULT_EXCLUDE_FILES,
    DEFAULT_LANGUAGES,
    blocked_reason,
    excluded_by,
    language_enabled,
)

from ..editors.test_server_vscode_options import extension_defaults

ROOT = Path(__file__).resolve().parents[2]
SHARED_CASES = ROOT / "extension-vscode" / "src" / "test" / "fixtures" / "where-cases.json"


# ---------------------------------------------------------------- a brute-force matcher
def tokens(pattern: str) -> list[str]:
    """The glob's tokens: "**/", "**", "*", "?" or one literal character."""
    out, i = [], 0
    while i < len(pattern):
        for token in ("**/", "**", "*", "?"):
            if pattern.startswith(token, i):
                out.append(token)
                i += len(token)
                break
        else:
            out.append(pattern[i])
            i += 1
    return out


def brute_match(pattern: str, text: str) -> bool:
    """Does the whole of ``text`` match ``pattern`` (no character classes), trying every
    split of the text: each token takes every length it may take."""
    toks, text = tokens(pattern.lower()), text.lower()

    @cache
    def at(t: int, i: int) -> bool:
        if t == len(toks):
            return i == len(text)
        token = toks[t]
        if token == "?":
            return i < len(text) and text[i] != "/" and at(t + 1, i + 1)
        if token in ("*", "**", "**/"):
            for j in range(i, len(text) + 1):
                taken = text[i:j]
                ok = (
                    "/" not in taken
                    if token == "*"
                    else (taken == "" or taken.endswith("/"))
                    if token == "**/"
                    else True
                )
                if ok and at(t + 1, j):
                    return True
            return False
        return text.startswith(token, i) and at(t + 1, i + len(token))

    return at(0, 0)


def brute_excluded(path: str, pattern: str) -> bool:
    """The documented rule, spelled out: a name pattern against the file name, a path
    pattern against every tail of the path that starts a segment (or the whole path)."""
    if "/" not in pattern:
        return brute_match(pattern, path.rsplit("/", 1)[-1])
    if pattern.startswith("/"):
        return brute_match(pattern, path)
    starts = [0] + [i + 1 for i, ch in enumerate(path) if ch == "/"]
    return any(brute_match(pattern, path[start:]) for start in starts)


def test_globs_agree_with_a_brute_force_matcher() -> None:
    rng = random.Random(7)
    pattern_parts = ["a", "b", ".", "/", "*", "?", "**/", "**"]
    path_parts = ["a", "b", ".", "/", "A", "ab"]
    checked = matched = 0
    for _ in range(3000):
        pattern = "".join(rng.choice(pattern_parts) for _ in range(rng.randint(1, 5)))
        path = "/" + "".join(rng.choice(path_parts) for _ in range(rng.randint(1, 7)))
        expected = brute_excluded(path, pattern)
        got = excluded_by(f"file://{path}", (pattern,)) is not None
        assert got == expected, (pattern, path)
        checked += 1
        matched += expected
    assert 0.1 < matched / checked < 0.9  # the draw exercises both answers


def shared_cases() -> dict:
    return json.loads(SHARED_CASES.read_text())


@pytest.mark.parametrize("case", shared_cases()["excluded"], ids=lambda c: c["uri"][-30:])
def test_shared_exclusion_cases(case: dict) -> None:
    assert excluded_by(case["uri"], tuple(case["patterns"])) == case["expect"]


@pytest.mark.parametrize("case", shared_cases()["languages"], ids=lambda c: c["languageId"])
def test_shared_language_cases(case: dict) -> None:
    switches = tuple(case["languages"].items())
    assert language_enabled(case["languageId"], switches) is case["expect"]


@pytest.mark.parametrize(
    "name",
    [".env", ".env.production", "prod.env", "server.pem", "tls.key", "id_rsa", "id_ed25519.pub",
     ".npmrc", ".pypirc", ".netrc", "cert.p12", "credentials.json", "secrets.yaml"],
)  # fmt: skip
def test_the_default_list_keeps_secret_files_out(name: str) -> None:
    assert excluded_by(f"file:///home/me/project/{name}", DEFAULT_EXCLUDE_FILES) is not None


@pytest.mark.parametrize(
    "name", ["main.py", "env.py", "environment.ts", "keys.py", "README.md", "package.json"]
)
def test_the_default_list_leaves_code_files_alone(name: str) -> None:
    assert excluded_by(f"file:///home/me/project/{name}", DEFAULT_EXCLUDE_FILES) is None


def test_blocked_reason_names_the_cause() -> None:
    o = ServerOptions()
    md = blocked_reason("file:///w/a.md", "markdown", o.languages, o.exclude_files)
    assert md is not None and "markdown" in md and "midword.languages" in md
    env = blocked_reason("file:///w/.env", "python", o.languages, o.exclude_files)
    assert env is not None and '".env"' in env and "midword.excludeFiles" in env
    assert blocked_reason("file:///w/a.py", "python", o.languages, o.exclude_files) is None


# ---------------------------------------------------------------- options
def test_default_options() -> None:
    o = ServerOptions()
    assert dict(o.languages) == DEFAULT_LANGUAGES
    assert dict(o.languages) == {
        "*": True,
        "plaintext": False,
        "markdown": False,
        "scminput": False,
    }
    assert ".env" in o.exclude_files and "*.pem" in o.exclude_files


@pytest.mark.extension_build
def test_the_extension_declares_the_server_defaults() -> None:
    """package.json's defaults as the extension sends them (before any merging): the
    same lists as the server's, so the status bar and the server agree out of the box."""
    raw = extension_defaults()
    assert raw["languages"] == dict(ServerOptions().languages)
    assert tuple(raw["excludeFiles"]) == ServerOptions().exclude_files


def test_languages_are_laid_over_the_default() -> None:
    opts, problems = parse_options({"languages": {"markdown": True, "rust": False}})
    assert problems == []
    assert dict(opts.languages) == {**DEFAULT_LANGUAGES, "markdown": True, "rust": False}
    # every message is the whole setting: a later one does not keep the earlier entries
    later, _ = parse_options({"languages": {"go": False}}, opts)
    assert dict(later.languages) == {**DEFAULT_LANGUAGES, "go": False}
    kept, _ = parse_options({"temperature": 0.5}, opts)  # a message without the key keeps it
    assert kept.languages == opts.languages


def test_a_user_exclude_list_replaces_the_default() -> None:
    opts, problems = parse_options({"excludeFiles": ["*.secret"]})
    assert problems == [] and opts.exclude_files == ("*.secret",)
    off, _ = parse_options({"excludeFiles": []})
    assert off.exclude_files == ()


def test_an_empty_lua_table_is_an_empty_list() -> None:
    """Neovim sends `excludeFiles = {}` as the JSON object {}: an empty list, not an
    error; an empty `languages` object is still an object (the defaults stand)."""
    opts, problems = parse_options({"excludeFiles": {}, "ensemble": {}, "languages": {}})
    assert problems == []
    assert opts.exclude_files == () and opts.ensemble == ()
    assert opts.languages == ServerOptions().languages


@pytest.mark.parametrize(
    ("raw", "key"),
    [
        ({"languages": ["markdown"]}, "languages"),
        ({"languages": {"markdown": "no"}}, "languages"),
        ({"languages": True}, "languages"),
        ({"excludeFiles": ".env"}, "excludeFiles"),
        ({"excludeFiles": [".env", 3]}, "excludeFiles"),
        ({"excludeFiles": [""]}, "excludeFiles"),
    ],
)
def test_bad_types_give_the_usual_problem_and_the_default(raw: dict, key: str) -> None:
    opts, problems = parse_options(raw)
    [problem] = problems
    assert problem.startswith(f"midword.{key} = {json.dumps(raw[key])} is invalid (expected ")
    assert opts == ServerOptions()
    if key == "languages":  # the default is shown as the user writes it
        assert json.loads(problem.split("; using ", 1)[1]) == DEFAULT_LANGUAGES


# ---------------------------------------------------------------- context files
def test_an_excluded_file_is_never_quoted_whatever_its_language() -> None:
    context = ContextFiles()
    docs = {
        "file:///w/.env": Document("file:///w/.env", "API_KEY = 'sk-live-123'\n", 1, "python"),
        "file:///w/lib.py": Document("file:///w/lib.py", "def helper():\n    pass\n", 1, "python"),
        "file:///w/main.py": Document("file:///w/main.py", "x = ", 1, "python"),
    }
    for uri in docs:
        context.touched(uri)
    main = docs["file:///w/main.py"]
    main.prefix_window(main.cursor(0, 4, "utf-16"), 4096)
    block = context.block(main, docs, 1024, DEFAULT_EXCLUDE_FILES).decode()
    assert "helper" in block and "sk-live" not in block and ".env" not in block
    # without the patterns the same call quotes it: the exclusion is what keeps it out
    unguarded = context.block(main, docs, 1024, ()).decode()
    assert "sk-live" in unguarded
    # and a kept block is chosen again when the patterns change
    assert "sk-live" not in context.block(main, docs, 1024, (".env",)).decode()
