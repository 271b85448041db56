"""Where midword completes: the per-language switch and the files it never reads.

Two options decide it (server/options.py):

* ``languages``: language id -> bool, ``"*"`` for every language not named. Ids are
  compared without case. Prose and commit messages are off by default: a code model
  has little to offer there, and a completion popping up mid-sentence is noise.
* ``excludeFiles``: glob patterns on the document's path. An excluded file gets no
  completions and is never quoted into another buffer's prompt (context_files.py):
  its text stays on this machine, even with a team server (``engine: vllm``).

The globs: ``*`` is any run of characters but ``/``, ``?`` one such character,
``**`` any run including ``/``, ``[abc]``/``[!abc]`` a character class; a ``\\``
is a path separator, as on Windows. A pattern without a ``/`` is matched against
the file name; one with a ``/`` against the path's last segments (``.aws/credentials``
matches ``/home/me/.aws/credentials``), or the whole path when it starts with ``/``.
Matching ignores case: Windows and macOS file systems do, and a secret named
``.ENV`` is still a secret.

>>> blocked_reason("file:///w/notes.md", "markdown", (("*", True), ("markdown", False)), ())
'completions are off for markdown (midword.languages)'
>>> blocked_reason("file:///w/.env.local", "dotenv", (("*", True),), (".env.*",))
'the file matches midword.excludeFiles pattern ".env.*"'
>>> excluded_by("file:///c%3A/Users/me/Keys/ID_RSA.pub", ("id_rsa*",))
'id_rsa*'
>>> excluded_by("file:///home/me/.aws/credentials", (".aws/credentials",))
'.aws/credentials'
>>> print(excluded_by("file:///home/me/app.py", (".env", "*.pem")))
None
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from functools import lru_cache
from urllib.parse import unquote, urlparse

__all__ = [
    "DEFAULT_EXCLUDE_FILES",
    "DEFAULT_LANGUAGES",
    "blocked_reason",
    "excluded_by",
    "glob_regex",
    "language_enabled",
    "uri_path",
]

# language id -> completions on; "*" is every language not named
DEFAULT_LANGUAGES: dict[str, bool] = {
    "*": True,
    "plaintext": False,  # prose
    "markdown": False,  # prose
    "scminput": False,  # commit messages (VS Code's source control input box)
}
# files that hold secrets by convention: environment files, private keys and
# certificates, package-registry and netrc credentials, cloud credential files
DEFAULT_EXCLUDE_FILES: tuple[str, ...] = (
    ".env",
    ".env.*",
    "*.env",
    ".envrc",
    "*.pem",
    "*.key",
    "*.p12",
    "*.pfx",
    "id_rsa*",
    "id_dsa*",
    "id_ecdsa*",
    "id_ed25519*",
    ".npmrc",
    ".pypirc",
    ".netrc",
    "_netrc",
    ".git-credentials",
    ".aws/credentials",
    "credentials*.json",
    "secrets.*",
)

Languages = tuple[tuple[str, bool], ...]
_FLAGS = re.IGNORECASE | re.DOTALL  # DOTALL: "**" spans any character, as in the extension


def language_enabled(language_id: str, languages: Languages) -> bool:
    """Completions on for ``language_id``: its own entry, else ``"*"``, else on.

    >>> language_enabled("Markdown", (("*", True), ("markdown", False)))
    False
    >>> language_enabled("", (("*", False), ("python", True)))
    False
    """
    table = _language_table(languages)
    return table.get(language_id.lower(), table.get("*", True))


@lru_cache(maxsize=64)
def _language_table(languages: Languages) -> dict[str, bool]:
    return {key.lower(): value for key, value in languages}


def uri_path(uri: str) -> str:
    """The path of a document URI, decoded, with ``/`` separators (a URI without a path,
    such as ``untitled:Untitled-1``, gives what follows the scheme).

    >>> uri_path("file:///c%3A/work/My%20App/.env")
    '/c:/work/My App/.env'
    >>> uri_path("untitled:Untitled-1")
    'Untitled-1'
    """
    return unquote(urlparse(uri).path).replace("\\", "/")


def glob_regex(pattern: str) -> str:
    """The regular expression (without anchors) of one glob pattern.

    >>> glob_regex("*.pem")
    '[^/]*\\\\.pem'
    >>> glob_regex("**/secrets/*")
    '(?:.*/)?secrets/[^/]*'
    """
    pattern = pattern.replace("\\", "/")
    out: list[str] = []
    i = 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (end := _class_end(pattern, i)) > 0:
            out.append(_char_class(pattern[i + 1 : end]))
            i = end + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return "".join(out)


def _class_end(pattern: str, start: int) -> int:
    """Index of the ``]`` closing the class opened at ``start`` (-1: none, a plain ``[``)."""
    first = start + 2 if pattern.startswith("[!", start) else start + 1
    end = pattern.find("]", first + 1)  # a "]" right after "[" or "[!" is a member
    return end


def _char_class(body: str) -> str:
    negated = body.startswith("!")
    members = body[1:] if negated else body
    escaped = members.replace("\\", "\\\\").replace("^", "\\^").replace("[", "\\[")
    escaped = escaped.replace("]", "\\]")
    return f"[^/{escaped}]" if negated else f"[{escaped}]"


@lru_cache(maxsize=32)
def _compiled(patterns: tuple[str, ...]) -> tuple[tuple[str, re.Pattern[str], bool], ...]:
    """(pattern, regex, matched against the name only) for each non-empty pattern."""
    compiled = []
    for pattern in patterns:
        if not pattern.strip():
            continue
        body = glob_regex(pattern.strip())
        if "/" not in pattern.replace("\\", "/"):
            compiled.append((pattern, re.compile(body, _FLAGS), True))
        elif pattern.replace("\\", "/").startswith("/"):
            compiled.append((pattern, re.compile(body, _FLAGS), False))
        else:  # the path's last segments
            compiled.append((pattern, re.compile(f"(?:.*/)?{body}", _FLAGS), False))
    return tuple(compiled)


def excluded_by(uri: str, patterns: Sequence[str]) -> str | None:
    """The first of ``patterns`` that the document's path matches; None when none does."""
    path = uri_path(uri)
    name = path.rsplit("/", 1)[-1]
    for pattern, regex, name_only in _compiled(tuple(patterns)):
        if regex.fullmatch(name if name_only else path):
            return pattern
    return None


@lru_cache(maxsize=1024)
def blocked_reason(
    uri: str, language_id: str, languages: Languages, exclude_files: tuple[str, ...]
) -> str | None:
    """Why a document gets no completions (None: it gets them). Cached: asked on every
    request and keystroke, with the same arguments while the options stay."""
    pattern = excluded_by(uri, exclude_files)
    if pattern is not None:
        return f'the file matches midword.excludeFiles pattern "{pattern}"'
    if not language_enabled(language_id, languages):
        return f"completions are off for {language_id or 'files without a language'} " + (
            "(midword.languages)"
        )
    return None
