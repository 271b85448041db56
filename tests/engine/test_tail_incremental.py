"""The tail builder's take-over from the previous key (engine/tree/tail.py ``_TailBuilder``
with ``prev``): typed key by key with random appends and deletes, the tail built from the
previous key's builder equals a fresh build of the same region at every step, on
ByteLevel tokenizers with different pre-tokenizers (llama3, qwen3 with NFC, gpt4o,
deepseek_v3's chain of splits, the shipped model's). Fresh builds are the plain
computation the oracle tests check (tests/engine/test_vct.py, tests/oracle.py).

Also: :class:`ConfigScan` (one character at a time, resumed from a shared head) equals
``scan_configs`` run on every prefix.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

import numpy as np
import pytest
from midword.engine import VCT, Engine, PrefixError, load_engine
from midword.engine.tree.config_scan import ConfigScan
from midword.engine.tree.leaf_tables import scan_configs
from midword.engine.tree.tail import _TailBuilder, build_tail

from midword.models import shipped_test_model
from midword.testing import tokenizer_path

TOKENIZERS = ["llama3", "qwen3", "gpt4o", "deepseek_v3", "default"]
STEPS = {"qwen3": 120}  # NFC: every node's tokens are left to encoding, slow
DEFAULT_STEPS = 260
MAX_PREFIX = 300  # bytes: then the prefix is cut back (regions stay short-ish)
# long open pre-tokens (identifier, whitespace runs), splits, non-ASCII cut inside
# characters (deletes cut bytes), digits, contractions, combining marks, a ligature
PIECES = [
    " " * 30,
    "    ",
    "\n",
    "\t",
    "self",
    "assertEqual",
    "abcdefghijklmnopqrstuvwxyz",
    "_x",
    "x = ",
    "12345",
    "'s",
    "(",
    ".",
    "\u00e9",
    "e\u0301",
    "\u4e2d\u6587",
    "\U0001f600",
    "\ufb01",
]


def _path(name: str) -> str:
    if name == "default":
        return str(shipped_test_model())  # its tokenizer.json
    return str(tokenizer_path(name))


@pytest.fixture(scope="module", params=TOKENIZERS)
def engine(request: pytest.FixtureRequest) -> Engine:
    eng = load_engine(_path(request.param))
    eng.steps = STEPS.get(request.param, DEFAULT_STEPS)  # type: ignore[attr-defined]
    return eng


def _content(tail: tuple[tuple[int, ...], list]) -> tuple:
    trunk, nodes = tail
    return trunk, [
        (n.path, n.ends_at_prefix_end, n.leaves.astype(np.int64).tolist()) for n in nodes
    ]


def _keys(seed: int, steps: int) -> list[tuple[str, int]]:
    """Random edits, one key at a time: ("push", byte) or ("delete", bytes to drop)."""
    rng = random.Random(seed)
    out: list[tuple[str, int]] = []
    while len(out) < steps:
        if rng.random() < 0.15:
            out.append(("delete", rng.randint(1, 6)))
        else:
            out += [("push", b) for b in rng.choice(PIECES).encode()]
    return out[:steps]


def _typed(engine: Engine, keys: list[tuple[str, int]], cap: int | None = None) -> Iterator[VCT]:
    """The VCT after each key it takes (a byte it refuses is skipped), cut back to a third
    of ``cap`` when the prefix grows past it."""
    vct = VCT(engine)
    for kind, arg in keys:
        if kind == "delete":
            vct.truncate(max(0, len(vct.prefix) - arg))
        else:
            try:
                vct.push(arg)
            except PrefixError:
                continue
        if cap is not None and len(vct.prefix) > cap:
            vct.truncate(cap // 3)
        yield vct


def _regions(engine: Engine, keys: list[tuple[str, int]]) -> list[bytes]:
    """The region (bytes after the settled trunk) after each key."""
    return [bytes(vct.buf[vct.settled :]) for vct in _typed(engine, keys, MAX_PREFIX)]


@pytest.mark.parametrize("seed", [0, 1])
def test_tail_from_the_previous_key_equals_a_fresh_build(engine: Engine, seed: int) -> None:
    regions = _regions(engine, _keys(seed, engine.steps))  # type: ignore[attr-defined]
    prev, grew, longest = None, 0, 0
    for step, region in enumerate(regions):
        builder = _TailBuilder(engine, region, prev)
        got = _content(builder.run())
        want = _content(_TailBuilder(engine, region).run())
        assert got == want, (step, region[-40:])
        grew += prev is not None and region.startswith(prev.region)
        longest = max(longest, len(region))
        prev = builder
    assert grew > len(regions) // 2  # mostly typing: the take-over was exercised
    assert longest >= 30  # and over long open pre-tokens (the whitespace run)


def test_build_tail_hands_its_builder_to_the_next_key(engine: Engine) -> None:
    engine.tail_cache.clear()
    vct, built = VCT(engine), 0
    for b in b"def f():\n    total_count = value" + b" " * 20:
        vct.push(b)
        region = bytes(vct.buf[vct.settled :])
        cached = engine.tail_cache.get(region) is not None
        tree = vct.tree()
        last = engine.tail_cache.last_build
        if not cached:  # built: its builder waits for the next key
            assert last is not None and last.region == region
            built += 1
        fresh = _TailBuilder(engine, region).run()
        assert _content((tuple(tree.trunk[len(vct.settled_trunk) :]), tree.nodes)) == _content(
            fresh
        )
    assert built > 20
    engine.tail_cache.clear()
    assert engine.tail_cache.last_build is None
    assert _content(build_tail(engine, region)) == _content(fresh)


def test_config_scan_equals_scan_configs_on_every_prefix(engine: Engine) -> None:
    machine = engine.machine
    if machine is None:
        pytest.skip("no class machine")
    rng = random.Random(7)
    for _ in range(40):
        text = "".join(rng.choice(PIECES) for _ in range(rng.randint(1, 6)))
        classes = machine.classes(text)
        scan = ConfigScan(machine)
        order = list(range(len(classes) + 1))
        rng.shuffle(order)  # asked in any order, as the tail's nodes ask
        for k in order:
            assert scan.at(k, classes) == scan_configs(machine, classes[:k]), (text, k)
        # another text that shares a head goes on from the shared states
        cut = rng.randint(0, len(text))
        other = text[:cut] + "".join(rng.choice(PIECES) for _ in range(2))
        other_classes = machine.classes(other)
        head = scan.head(cut)
        for k in range(len(other_classes) + 1):
            assert head.at(k, other_classes) == scan_configs(machine, other_classes[:k])


def test_complete_path_equals_the_encoding(engine: Engine) -> None:
    """Typed key by key (tails taken over from the previous key), the tree's trunk is a
    prefix of the encoder's encoding of the region and ``Tree.complete`` is the rest."""
    checked = 0
    for vct in _typed(engine, _keys(5, engine.steps)):  # type: ignore[attr-defined]
        region = bytes(vct.buf[vct.settled :])
        tree = vct.tree()
        try:
            text = region.decode("utf-8")
        except UnicodeDecodeError:
            assert tree.complete is None  # the prefix ends inside a character
            continue
        ids = tuple(engine.tok.encode(text))
        below = tuple(tree.trunk[len(vct.settled_trunk) :])
        want = ids[len(below) :] if ids[: len(below)] == below else None
        assert tree.complete == want, region[-40:]
        checked += want is not None
    assert checked > 50
