"""Where the benchmarks find their data. Nothing is downloaded at run time.

HumanEval infilling (``midword bench humaneval``): the first of

1. ``--data PATH`` (a folder holding the files, or the .jsonl.gz file itself);
2. ``$MIDWORD_DATA/humaneval-infilling`` or ``$MIDWORD_DATA`` itself;
3. ``<repository>/../shared/data/humaneval-infilling`` (a checkout next to shared data);
4. ``~/.cache/midword/data/humaneval-infilling``;

that holds ``HumanEval-RandomSpanInfilling.jsonl.gz``. The files come from
https://github.com/openai/human-eval-infilling (folder ``data/``, MIT license).

Text for ``charlm`` and ``overhead``: ``--text DIR`` (every file under it that
matches ``--glob`` and is UTF-8), by default the standard-library files held out
from the shipped model's training (``models/default/heldout_files.json``).

>>> ranked = humaneval_search_path(None, {"MIDWORD_DATA": "/data"})
>>> [str(p) for p in ranked[:2]]
['/data/humaneval-infilling', '/data']
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import sysconfig
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from midword.cli import CommandError
from midword.models import CHECKOUT_TEST_MODEL, find_shipped_test_model

REPO = Path(__file__).resolve().parent.parent.parent
DATA_URL = "https://github.com/openai/human-eval-infilling/tree/master/data"
RANDOM_SPAN = "HumanEval-RandomSpanInfilling.jsonl.gz"
# Older copies of the repository name the file without "Infilling".
RANDOM_SPAN_NAMES = (RANDOM_SPAN, "HumanEval-RandomSpan.jsonl.gz")
HELDOUT_LIST = (find_shipped_test_model() or CHECKOUT_TEST_MODEL) / "heldout_files.json"


def humaneval_search_path(data: str | None, env: Mapping[str, str] = os.environ) -> list[Path]:
    """Candidate folders (or files) for the HumanEval data, in the documented order."""
    out: list[Path] = []
    if data:
        out.append(Path(data).expanduser())
    if env.get("MIDWORD_DATA"):
        root = Path(env["MIDWORD_DATA"]).expanduser()
        out += [root / "humaneval-infilling", root]
    out.append(REPO.parent / "shared" / "data" / "humaneval-infilling")
    out.append(Path.home() / ".cache" / "midword" / "data" / "humaneval-infilling")
    return out


def find_random_span(data: str | None, env: Mapping[str, str] = os.environ) -> Path:
    """The random-span file; CommandError (with the download URL) when there is none."""
    candidates = humaneval_search_path(data, env)
    if data:  # an explicit --data must be right; do not fall back silently
        candidates = candidates[:1]
    for place in candidates:
        if place.is_file():
            return place
        for name in RANDOM_SPAN_NAMES:
            if (place / name).is_file():
                return place / name
    tried = ", ".join(str(p) for p in candidates)
    raise CommandError(
        f"HumanEval random-span data not found (looked in: {tried}). Download "
        f"{RANDOM_SPAN} from {DATA_URL} into one of these folders, or pass --data PATH "
        "or set MIDWORD_DATA"
    )


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Records of a .jsonl or .jsonl.gz file (blank lines skipped)."""
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


@dataclass
class TextFile:
    """One document for the character-level benchmarks."""

    name: str
    text: str


def default_text_files() -> list[Path]:
    """The held-out stdlib files of the shipped model that exist on this machine."""
    if not HELDOUT_LIST.is_file():
        raise CommandError(f"{HELDOUT_LIST} is missing; pass --text DIR")
    listing = json.loads(HELDOUT_LIST.read_text(encoding="utf-8"))
    root = Path(sysconfig.get_paths()["stdlib"])
    return [root / rel for rel in listing["files"] if (root / rel).is_file()]


def load_texts(text_dir: str | None, glob: str = "*", min_chars: int = 2) -> list[TextFile]:
    """UTF-8 documents (``\\r\\n`` -> ``\\n``) from ``--text`` or the default held-out set."""
    if text_dir:
        root = Path(text_dir).expanduser()
        if not root.is_dir():
            raise CommandError(f"--text {text_dir}: not a folder")
        paths = sorted(p for p in root.rglob(glob) if p.is_file())
    else:
        paths = default_text_files()
    docs = []
    for path in paths:
        try:
            text = path.read_bytes().decode("utf-8").replace("\r\n", "\n")
        except (OSError, UnicodeDecodeError):
            continue  # binary or unreadable: not text
        if len(text) >= min_chars:
            docs.append(TextFile(str(path), text))
    if not docs:
        raise CommandError("no UTF-8 text files found for this benchmark (see --text, --glob)")
    return docs


def add_text_arguments(parser: argparse.ArgumentParser) -> None:
    """--text and --glob (the folder for charlm and overhead)."""
    parser.add_argument(
        "--text",
        help="folder of text or code (default: the shipped model's held-out stdlib files)",
    )
    parser.add_argument("--glob", default="*", help="file pattern under --text (default *)")


def text_settings(args: argparse.Namespace) -> dict[str, Any]:
    """The part of run.json that identifies the text."""
    return {"text": args.text or "default held-out stdlib files", "glob": args.glob}
