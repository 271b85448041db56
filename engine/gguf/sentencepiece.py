"""SentencePiece (``tokenizer.ggml.model = 'llama'``) GGUF vocabularies rebuilt as
tokenizer.json: BPE with byte fallback whose merges follow llama.cpp's score-driven
merging (Llama 2, CodeLlama, Mistral v0.1), or refused by name.

>>> spm_segment(list("ab"), {"ab": -1.0})
(['ab'], ('a', 'b'))
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass

from ..errors import GGUFError
from .added import (
    BYTE,
    CONTROL,
    NORMAL,
    TYPE_NAMES,
    UNKNOWN,
    USER_DEFINED,
    added_token,
    as_llama_cpp_reads,
    named_roles,
    place_added_tokens,
)
from .reader import GGUFFile

SPACE_PIECE = "\u2581"  # how SentencePiece writes a space
SP_DEFAULT_IDS = {"bos": 1, "eos": 2, "unknown": 0}


@dataclass(frozen=True)
class SentencePieceVocab:
    """A ``'llama'`` vocabulary as llama.cpp reads it: tokens by id, their types and scores."""

    tokens: list[str]
    types: list[int]
    scores: list[float]
    where: str  # names the file in messages

    def refuse(self, why: str) -> GGUFError:
        return GGUFError(f"{self.where}: {why}")

    def entries(self) -> Iterator[tuple[int, str, int]]:
        """(id, text, type) of every token."""
        for i, (text, kind) in enumerate(zip(self.tokens, self.types, strict=True)):
            yield i, text, kind


def read_sentencepiece_vocab(gf: GGUFFile) -> SentencePieceVocab:
    """Tokens, types (NORMAL when the file has none, as llama.cpp reads it) and scores."""
    where = f"{gf.path.name} (tokenizer.ggml.model = 'llama')"
    tokens = [str(t) for t in gf.get("tokenizer.ggml.tokens")]
    types = [int(k) for k in gf.get("tokenizer.ggml.token_type", [NORMAL] * len(tokens))]
    scores = gf.get("tokenizer.ggml.scores", None)
    if scores is None:
        raise GGUFError(
            f"{where}: no tokenizer.ggml.scores; llama.cpp then merges with every score 0 "
            "(leftmost pair first), which midword does not model"
        )
    if len(scores) < len(tokens) or len(types) < len(tokens):
        raise GGUFError(f"{where}: fewer scores or token types than the {len(tokens)} tokens")
    n = len(tokens)
    types = as_llama_cpp_reads(tokens, types[:n], named_roles(gf.get))
    vocab = SentencePieceVocab(tokens, types, [float(x) for x in scores[:n]], where)
    for i, text, kind in vocab.entries():
        if kind not in TYPE_NAMES:
            raise vocab.refuse(f"token {i} ({text!r}) has an unknown token type {kind}")
        if not text or math.isnan(vocab.scores[i]):
            raise vocab.refuse(f"token {i} ({text!r}) is empty or has no score (NaN)")
    if len(set(tokens)) < len(tokens):
        raise vocab.refuse("a token appears twice in tokenizer.ggml.tokens")
    return vocab


def spm_segment(
    chars: Sequence[str], score: Mapping[str, float]
) -> tuple[list[str], tuple[str, str] | None]:
    """llama.cpp's SentencePiece merging of ``chars``: join the adjacent pair whose
    concatenation is a token of the highest score, the leftmost on ties, until none is
    left. Returns the symbols and the last pair joined (None when none was).

    >>> spm_segment(list("abc"), {"ab": -2.0, "bc": -1.0})
    (['a', 'bc'], ('b', 'c'))
    >>> spm_segment(list("abc"), {"ab": -1.0, "bc": -1.0, "abc": -3.0})  # a tie: leftmost
    (['abc'], ('ab', 'c'))
    """
    symbols = list(chars)
    last = None
    while len(symbols) > 1:
        best, best_score = -1, 0.0
        for i in range(len(symbols) - 1):
            s = score.get(symbols[i] + symbols[i + 1])
            if s is not None and (best < 0 or s > best_score):
                best, best_score = i, s
        if best < 0:
            break
        last = (symbols[best], symbols[best + 1])
        symbols[best : best + 2] = [last[0] + last[1]]
    return symbols, last


def sentencepiece_merges(vocab: SentencePieceVocab) -> list[list[str]]:
    """BPE merges, by rank, that encode as llama.cpp's score-driven merging does.

    Within the text a token covers, merging goes as it goes on the token's characters
    alone (a merge across the token's edges would have stopped it forming), so each token
    the encoder can produce is formed from one pair: the last one :func:`spm_segment`
    joins on its characters. One merge per such token, ranked by its score, then picks
    what llama.cpp picks, provided no two scores tie (llama.cpp would take the leftmost
    pair, a rank list the first listed): ties, tokens of other types that merging forms,
    and characters outside the vocabulary that a merge needs are refused by name.
    """
    score = dict(zip(vocab.tokens, vocab.scores, strict=True))
    kind = dict(zip(vocab.tokens, vocab.types, strict=True))
    for i, text, k in vocab.entries():
        if len(text) == 1 and k not in (NORMAL, USER_DEFINED):
            raise vocab.refuse(
                f"the character {text!r} is a {TYPE_NAMES[k]} token (id {i}): llama.cpp emits "
                "it for that character in text"
            )
    ranked: list[tuple[float, int, str, str]] = []
    for i, text, k in vocab.entries():
        pair = _formed_from(text, k, score, kind, vocab, i)
        if pair is not None:
            ranked.append((-vocab.scores[i], i, *pair))
    ranked.sort()
    ranked, runs = _split_off_tied_runs(vocab, ranked)
    for (s1, i1, *_), (s2, i2, *_) in itertools.pairwise(ranked):
        if s1 == s2:
            raise vocab.refuse(
                f"tokens {vocab.tokens[i1]!r} and {vocab.tokens[i2]!r} have the same score "
                f"{-s1}: llama.cpp joins whichever pair comes first in the text, which a BPE "
                "merge list cannot express"
            )
    _refuse_tokens_above_halves(vocab, ranked, score)
    return [[left, right] for _, _, left, right in ranked] + runs


# ------------------------------------------------------------------ tied runs (Llama 2's spaces)
def _split_off_tied_runs(
    vocab: SentencePieceVocab, ranked: list[tuple[float, int, str, str]]
) -> tuple[list[tuple[float, int, str, str]], list[list[str]]]:
    """``ranked`` without the tokens of tied runs, and the merges that stand for them.

    Llama 2's vocabulary (CodeLlama's, Phi-3's) holds the runs '▁▁' to sixteen '▁', all
    scored -1e9, below every other token. llama.cpp breaks ties by position (the leftmost
    pair first: llama-vocab.cpp's ``llm_bigram_spm`` comparator), so they merge last, and a
    run of single '▁' left then becomes runs of 16 from the left and the rest. A rank list
    reaches the same with merges that double ('▁' '▁', '▁▁' '▁▁', ...) and then join the
    rest from the left (:func:`_run_merges`); that is checked here on runs up to four times
    the longest token, against llama.cpp's rule (:func:`spm_segment`). Any other tie is left
    in ``ranked`` (and refused there).
    """
    lowest = ranked[-1][0] if ranked else None
    group = [r for r in ranked if r[0] == lowest]
    texts = [vocab.tokens[i] for _, i, _, _ in group]
    if len(group) < 2 or not _runs_of_one_char(texts, vocab):
        return ranked, []
    char = texts[0][0]
    longest = max(map(len, texts))
    merges = _run_merges(char, longest)
    score = {char * n: -1.0 for n in range(2, longest + 1)}  # (ties: the leftmost pair)
    for n in range(1, 4 * longest + 2):
        want = spm_segment([char] * n, score)[0]
        if _rank_bpe([char] * n, merges) != want:
            return ranked, []  # (not expressible: the tie stays, and is refused)
    return [r for r in ranked if r[0] != lowest], merges


def _runs_of_one_char(texts: list[str], vocab: SentencePieceVocab) -> bool:
    """Runs '▁▁' ... of one character, every length from 2 to the longest, the character
    a token, and no other token holding two of it side by side (nothing a run forms can
    then merge with anything else)."""
    char = texts[0][0]
    lengths = sorted(len(t) for t in texts)
    if any(set(t) != {char} for t in texts) or lengths != list(range(2, len(texts) + 2)):
        return False
    doubled = char * 2
    others = [t for t in vocab.tokens if doubled in t and set(t) != {char}]
    return char in vocab.tokens and not others


def _run_merges(char: str, longest: int) -> list[list[str]]:
    """Merges for the runs of ``char`` up to ``longest``: the doublings first, then every
    other length n as (n - its lowest bit, its lowest bit), those whose left part has the
    higher top bit first (leftmost pieces join first), shorter results first within.

    >>> _run_merges("a", 5)
    [['a', 'a'], ['aa', 'aa'], ['aaaa', 'a'], ['aa', 'a']]
    """
    doublings = [[char * (n // 2), char * (n // 2)] for n in _powers_of_two(longest)]
    others = [n for n in range(3, longest + 1) if n & (n - 1)]
    others.sort(key=lambda n: (-_top_bit(n - (n & -n)), n))
    return doublings + [[char * (n - (n & -n)), char * (n & -n)] for n in others]


def _powers_of_two(longest: int) -> list[int]:
    return [1 << k for k in range(1, longest.bit_length()) if 1 << k <= longest]


def _top_bit(n: int) -> int:
    return 1 << (n.bit_length() - 1)


def _rank_bpe(symbols: list[str], merges: list[list[str]]) -> list[str]:
    """Rank-list BPE as tokenizers runs it: the best-ranked pair, leftmost first."""
    rank = {(a, b): r for r, (a, b) in enumerate(merges)}
    symbols = list(symbols)
    while True:
        found = [
            (rank[pair], i) for i, pair in enumerate(itertools.pairwise(symbols)) if pair in rank
        ]
        if not found:
            return symbols
        _, i = min(found)
        symbols[i : i + 2] = [symbols[i] + symbols[i + 1]]


def _refuse_tokens_above_halves(
    vocab: SentencePieceVocab, ranked: list[tuple[float, int, str, str]], score: Mapping[str, float]
) -> None:
    """midword's covering trees take a merge list in which every merge comes after the
    merges forming its halves, as trained vocabularies have it (a token scores below the
    tokens it joins); a file whose scores put a token above one of its halves would be
    encoded differently by the trees, so it is refused."""
    for minus_score, i, left, right in ranked:
        for half in (left, right):
            if len(half) > 1 and score[half] <= -minus_score:
                raise vocab.refuse(
                    f"token {vocab.tokens[i]!r} scores {-minus_score}, above its half "
                    f"{half!r} ({score[half]}): midword needs every token to score below "
                    "the tokens it is merged from, as trained vocabularies do"
                )


def _formed_from(
    text: str,
    k: int,
    score: Mapping[str, float],
    kind: Mapping[str, int],
    vocab: SentencePieceVocab,
    i: int,
) -> tuple[str, str] | None:
    """The pair merging joins last to form token ``text`` (None: it never forms from text)."""
    if len(text) < 2:
        return None
    symbols, last = spm_segment(list(text), score)
    if symbols != [text] or last is None:
        return None
    if k == USER_DEFINED and SPACE_PIECE not in text:
        return None  # split out of the text before merging: it never reaches the merges
    if k != NORMAL:
        raise vocab.refuse(
            f"the {TYPE_NAMES[k]} token {text!r} (id {i}) is formed by merging "
            f"{last[0]!r} and {last[1]!r}, so llama.cpp emits it for that text"
        )
    for part in last:
        if part not in kind:
            raise vocab.refuse(
                f"token {text!r} (id {i}) is merged from the character {part!r}, which is "
                "not in the vocabulary (tokenizers would spell it as bytes first)"
            )
    if USER_DEFINED in (kind[last[0]], kind[last[1]]):
        return None  # one half never reaches the merges
    return last


def _sp_vocab_and_added(vocab: SentencePieceVocab, lead: bool) -> tuple[dict[str, int], list[dict]]:
    """The BPE vocabulary (NORMAL, UNKNOWN and BYTE tokens) and the added tokens: CONTROL
    and UNKNOWN special, USER_DEFINED matched in the raw text first, as llama.cpp does."""
    plain: dict[str, int] = {}
    added: list[dict] = []
    users: list[str] = []
    for i, text, k in vocab.entries():
        if k in (NORMAL, UNKNOWN, BYTE):
            plain[text] = i
        if k in (CONTROL, UNKNOWN):
            added.append(added_token(i, text, special=True))
        elif k == USER_DEFINED:
            if SPACE_PIECE in text:
                raise vocab.refuse(
                    f"USER_DEFINED token {text!r} (id {i}) holds '▁': llama.cpp looks for it "
                    "in the text before spaces become '▁'"
                )
            added.append(added_token(i, text, special=False))
            users.append(text)
    lacking = [f"<0x{b:02X}>" for b in range(256) if f"<0x{b:02X}>" not in plain]
    if lacking:
        raise vocab.refuse(
            f"no byte token {lacking[0]} ({len(lacking)} of the 256 missing): a character "
            "outside the vocabulary could not be spelled"
        )
    if users and lead:
        raise vocab.refuse(
            "USER_DEFINED tokens with the dummy prefix (add_space_prefix): llama.cpp gives "
            "the text after such a token no prefix, tokenizers gives every piece one"
        )
    _refuse_overlapping(users, vocab)
    return plain, added


def _refuse_overlapping(texts: list[str], vocab: SentencePieceVocab) -> None:
    """llama.cpp splits USER_DEFINED texts out longest first, tokenizers leftmost-longest:
    the same splits unless two different texts can overlap (an end of one starting the
    other); runs of one character (Gemma's spaces and newlines) agree either way."""
    starts: dict[str, str] = {}
    for text in texts:
        for n in range(1, len(text)):
            starts.setdefault(text[:n], text)
    for text in texts:
        for n in range(1, len(text)):
            other = starts.get(text[n:])
            if other is not None and other != text and not _same_run(text, other):
                raise vocab.refuse(
                    f"USER_DEFINED tokens {text!r} and {other!r} overlap: llama.cpp and "
                    "tokenizers would split such text differently"
                )


def _same_run(a: str, b: str) -> bool:
    return len(set(a + b)) == 1


def sentencepiece_tokenizer_json(gf: GGUFFile) -> dict:
    """tokenizer.json of a ``'llama'`` (SentencePiece) vocabulary: BPE with byte fallback
    whose merges follow the scores (:func:`sentencepiece_merges`), spaces written '▁', and
    a dummy '▁' in front when ``tokenizer.ggml.add_space_prefix`` (default on) says so."""
    vocab = read_sentencepiece_vocab(gf)
    lead = bool(gf.get("tokenizer.ggml.add_space_prefix", True))
    plain, added = _sp_vocab_and_added(vocab, lead)
    merges = sentencepiece_merges(vocab)
    unknown = [text for _, text, k in vocab.entries() if k == UNKNOWN]
    space = {"type": "Replace", "pattern": {"String": " "}, "content": SPACE_PIECE}
    prepend = [{"type": "Prepend", "prepend": SPACE_PIECE}] if lead else []
    strip = [{"type": "Strip", "content": " ", "start": 1, "stop": 0}] if lead else []
    unspace = {"type": "Replace", "pattern": {"String": SPACE_PIECE}, "content": " "}
    spec = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": {"type": "Sequence", "normalizers": [*prepend, space]},
        "pre_tokenizer": None,
        "post_processor": None,
        "decoder": {
            "type": "Sequence",
            "decoders": [unspace, {"type": "ByteFallback"}, {"type": "Fuse"}, *strip],
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": unknown[0] if unknown else None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": True,
            "byte_fallback": True,
            "ignore_merges": False,
            "vocab": plain,
            "merges": merges,
        },
    }
    place_added_tokens(spec)
    return spec
