"""Context from other files, end to end (server/context_files.py; issue 25 §5): a name
that appears only in another open file gets completed, and the prompt's beginning (the
other files' block) stays the same while the user types in one place.

The shipped model is too small to copy a name it has never seen from its prompt, so
this module trains one that can: a tiny Llama on the shipped tokenizer, a few hundred
steps on a synthetic corpus where a buffer calls a function defined in another file,
quoted before it the way the server quotes other files. With the quote the model has
learned to copy; without it (``contextFiles: off``) no model could know the name.
"""

from __future__ import annotations

import contextlib
import hashlib
import random
import shutil
import tempfile
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import LanguageClient

from ..lsp_support import CONFIG, Buffer, Session, start

pytestmark = pytest.mark.asyncio(loop_scope="module")
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "models" / "default"
SYLLABLES = [
    "zor",
    "blax",
    "quim",
    "vet",
    "dran",
    "plo",
    "ksi",
    "mur",
    "tev",
    "gal",
    "fin",
    "wox",
    "yup",
    "ral",
    "nex",
    "sob",
]
TRAIN_STEPS = 800
NAMES = ["galwox_tevnex", "dranksi_yupmur", "sobral_quimvet"]  # never in the training corpus
BUFFER = "import lib\n\nresult = "


def random_name(rng: random.Random) -> str:
    parts = ("".join(rng.sample(SYLLABLES, 2)) for _ in range(2))
    return "_".join(parts)


def training_name(rng: random.Random) -> str:
    """A random name that is none of the test's `NAMES` (the model must copy those)."""
    while (name := random_name(rng)) in NAMES:
        pass
    return name


def library(name: str) -> str:
    """The other file: it alone defines ``name``."""
    return f"def {name}(value):\n    return value\n"


def training_text(name: str) -> str:
    """The prompt the server builds for BUFFER with `library` open, and the call."""
    quoted = "".join(
        f"# {line}\n" if line.strip() else "#\n" for line in library(name).split("\n")[:-1]
    )
    return f"# Path: lib.py\n{quoted}{BUFFER}{name}(value)\n"


def train_copying_model(folder: Path, steps: int = TRAIN_STEPS) -> Path:
    """A tiny Llama on the shipped tokenizer that learned to call the quoted function."""
    import torch
    from tokenizers import Tokenizer
    from transformers import AutoModelForCausalLM

    from midword.testing.tiny_models import tiny_config

    tokenizer = Tokenizer.from_file(str(SHIPPED / "tokenizer.json"))
    config = tiny_config(
        "llama", 4096, hidden=64, layers=2, heads=2, kv_heads=2,
        bos_token_id=0, eos_token_id=0, initializer_range=0.02,
    )  # fmt: skip
    rng = random.Random(0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small matrices: more threads only wait for each other
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(config)
        optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
        for _ in range(steps):
            batch = [
                [0, *tokenizer.encode(training_text(training_name(rng))).ids] for _ in range(16)
            ]
            width = max(map(len, batch))
            ids = torch.tensor([row + [0] * (width - len(row)) for row in batch])
            labels = torch.tensor([row + [-100] * (width - len(row)) for row in batch])
            loss = model(input_ids=ids, labels=labels).loss
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
    torch.set_num_threads(threads)
    model.eval()
    model.save_pretrained(str(folder))
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(SHIPPED / name, folder / name)
    return folder


@pytest.fixture(scope="module")
def copying_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The trained model, kept in midword's cache folder under a key of everything the
    training depends on (this module, the tiny models' module, the shipped tokenizer,
    torch's and transformers' versions): the training is seeded, so a kept copy is the
    model this run would train (training takes about 100 s)."""
    import torch
    import transformers
    from midword.engine import cache_root

    from midword.testing import tiny_models

    key = hashlib.sha256(
        "\0".join(
            [
                Path(__file__).read_text(),
                Path(tiny_models.__file__).read_text(),
                (SHIPPED / "tokenizer.json").read_text(),
                torch.__version__,
                transformers.__version__,
            ]
        ).encode()
    ).hexdigest()[:16]
    kept = cache_root() / "test-models" / f"copying-{key}"
    if (kept / "config.json").is_file():
        return kept
    trained = train_copying_model(tmp_path_factory.mktemp("copying-model"))
    kept.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(dir=kept.parent))
    shutil.copytree(trained, partial, dirs_exist_ok=True)
    with contextlib.suppress(OSError):  # another worker kept it first: theirs is the same
        partial.rename(kept)
    shutil.rmtree(partial, ignore_errors=True)
    return kept


@pytest_lsp.fixture(config=CONFIG, scope="module")
async def client(lsp_client: LanguageClient, copying_model: Path):
    # fim off: the prompt is the one trained on (the shipped tokenizer may carry FIM tokens)
    options = {"model": str(copying_model), "debounceMs": 0, "maxTokens": 16, "fim": "off"}
    session = await start(lsp_client, "visual-studio-code", options)
    await session.wait_state("ready")
    yield
    await lsp_client.shutdown_session()


async def live_prefix(session: Session, uri: str) -> bytes:
    state = await session.client.protocol.send_request_async(
        "midword/inspect", {"textDocument": {"uri": uri}}
    )
    return bytes.fromhex(state["prefix"] if isinstance(state, dict) else state.prefix)


@pytest.mark.parametrize("name", NAMES)
async def test_a_name_from_another_open_file_is_completed(session: Session, name: str) -> None:
    lib = Buffer(session.client, "file:///w/lib.py", library(name))
    main = Buffer(session.client, "file:///w/main.py", "")
    main.type(BUFFER + name[:5])
    try:
        session.configure({"contextFiles": "auto"})
        [with_context] = await main.inline()
        assert (name[:5] + with_context).startswith(name), with_context
        session.configure({"contextFiles": "off"})
        without = await main.inline()
        assert not any((name[:5] + text).startswith(name) for text in without), without
    finally:
        session.configure({"contextFiles": "auto"})
        main.close()
        lib.close()


async def test_the_prompt_start_stays_while_typing_in_one_place(session: Session) -> None:
    lib = Buffer(session.client, "file:///w/lib.py", library(NAMES[0]))
    main = Buffer(session.client, "file:///w/main.py", "")
    main.type(BUFFER)
    await main.inline()  # makes the buffer's live state; the block is chosen here
    blocks = set()
    for ch in "res = 1\nval":
        main.type(ch)
        await main.inline()
        prefix = await live_prefix(session, main.uri)
        text = main.text[: main.cursor].encode()
        assert prefix.endswith(text)  # the live state is at the buffer's text
        blocks.add(prefix[: len(prefix) - len(text)])
    [block] = blocks  # one and the same block before the window, keystroke after keystroke
    assert block.startswith(b"# Path: lib.py\n") and NAMES[0].encode() in block
    lib.replace(0, 0, "# edited\n")  # another file changed: the block is chosen again
    main.type("u")
    await main.inline()
    assert b"# # edited" in await live_prefix(session, main.uri)
    main.close()
    lib.close()
