"""Qwen3's covering tree at a word followed by a character's lead byte (``caf\\xc3``)
holds the sequence ('caf', '\\xc3'). No probed text encodes to a start of it, which once
read as an exactness gap under NFC; but it starts the encoding of "cafÈ다": BPE joins
È's last byte to 다 (the token '\\x88다') before it joins È's two bytes, so the lead byte
stays a token of its own. The tree is exact there: its leaves at that node are those the
brute force finds over every token that starts with a continuation byte, each starts
an encoding, and the node is confirmed through them (`confirmed_through_leaves`)."""

from __future__ import annotations

from functools import cache

import pytest
from midword.engine import build_tree, load_engine

from midword.testing import real_encoder, tokenizer_path

from ..oracle import canonical_prefixes, confirmed_through_leaves, tree_sequences


@cache
def qwen3() -> tuple:
    path = tokenizer_path("qwen3")
    return load_engine(str(path)), real_encoder(path)


def every_sequence(prefix: bytes) -> set[tuple[int, ...]]:
    """Every sequence of Qwen3's tree at ``prefix``, every leaf of the nodes at its end
    included."""
    eng, _ = qwen3()
    tree = build_tree(eng, prefix)
    trunk = tuple(int(t) for t in tree.trunk)
    ends = [int(t) for n in tree.nodes if n.ends_at_prefix_end for t in n.leaves]
    return {trunk + s for s in tree_sequences(tree, ends)}


def unsound(seqs: set[tuple[int, ...]]) -> set[tuple[int, ...]]:
    """The sequences of ``seqs`` that start the encoding of no probed text, less those
    that stop inside a character and are confirmed through an extension in ``seqs``."""
    eng, hf = qwen3()
    memo: dict[tuple[int, ...], bool] = {}
    bad = seqs - canonical_prefixes(hf, eng.tok, sorted(seqs), memo)
    return bad - confirmed_through_leaves(hf, eng.tok, bad, seqs, memo)


def ids(*pieces: bytes) -> tuple[int, ...]:
    return tuple(qwen3()[0].tok.bytes_to_id[p] for p in pieces)


def test_every_sequence_of_the_tree_starts_some_encoding() -> None:
    assert unsound(every_sequence(b"caf\xc3")) == set()


def test_the_lead_byte_alone_starts_the_encoding_of_a_word() -> None:
    """The witness, from the real encoder: no probe supplies it."""
    _, hf = qwen3()
    got = tuple(hf.encode("cafÈ다", add_special_tokens=False).ids)
    assert got == ids(b"caf", b"\xc3", "È다".encode()[1:])
    assert ids(b"caf", b"\xc3") in every_sequence(b"caf\xc3")


@pytest.mark.parametrize("prefix", [b"caf\xc3", b"x\xc3"])
def test_the_leaves_after_the_lead_byte_are_the_brute_forces(prefix: bytes) -> None:
    """Leaves of the node ('caf', '\\xc3'): exactly the tokens that start with a
    continuation byte and extend it canonically (all of them tried, not a sample)."""
    eng, hf = qwen3()
    tree = build_tree(eng, prefix)
    trunk = tuple(int(t) for t in tree.trunk)
    node = next(n for n in tree.nodes if trunk + n.path == ids(prefix[:-1], b"\xc3"))
    tail = [i for i, b in enumerate(eng.tok.token_bytes) if b and 0x80 <= b[0] < 0xC0]
    truth = canonical_prefixes(hf, eng.tok, [trunk + node.path + (t,) for t in tail], {})
    assert {int(t) for t in node.leaves} == {s[-1] for s in truth}
    assert len(truth) > 10


def test_the_check_can_fail() -> None:
    """A sequence that starts no encoding is caught, with or without leaves beside it, and
    ('caf', '\\xc3') is caught without its leaves (the probes alone do not confirm it)."""
    seqs = every_sequence(b"caf\xc3")
    planted = ids(b"ca", b"f", b"\xc3")
    assert unsound(seqs | {planted, (*planted, ids(b"\x88")[0])}) == {
        planted,
        (*planted, ids(b"\x88")[0]),
    }
    alone = ids(b"caf", b"\xc3")
    assert unsound({alone}) == {alone}


def test_the_same_tree_after_a_space_is_sound() -> None:
    assert unsound(every_sequence(b"caf \xc3")) == set()
