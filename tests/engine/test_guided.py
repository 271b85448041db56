"""Guided completion (engine/sample/guided.py): the name is the candidate brute force
finds likeliest (greedy), the text after it is the unguided exact completion from the
prefix and the name, draws follow the renormalized scores, and the guidance stands aside
(with its reason) when no candidate fits or the candidates hold too little mass."""

from __future__ import annotations

import numpy as np
import pytest
from midword.engine.sample.candidates import score_continuations
from midword.engine.sample.generate import Completer, Settings
from midword.engine.sample.guided import (
    GUIDED_METHOD,
    _draw,
    _leaf_after,
    complete_guided,
    would_guide,
)
from midword.engine.sample.sampling import ByteSampler
from midword.engine.sample.transform import Transform

from .test_candidates import ENDING, _Setup

PREFIX = b"    self.assertEq"
NAMES = ["assertEqual", "assertEquals", "assertEqualsAny", "assertIn", "assertEqualx"]
GREEDY = Settings(max_tokens=4)
SETTINGS = [  # greedy, a temperature, top-p
    GREEDY,
    Settings(max_tokens=4, temperature=0.7, seed=2),
    Settings(max_tokens=4, temperature=0.7, top_p=0.9, seed=2),
]


@pytest.fixture(scope="module")
def setup() -> _Setup:
    return _Setup("default")


@pytest.fixture
def completer(setup: _Setup) -> Completer:
    return Completer(setup.sampler.model, setup.engine)


def _brute_best(setup: _Setup, prefix: bytes, names: list[str], end: str) -> str:
    typed = b"assertEq" if prefix.endswith(b"assertEq") else b""
    fits = [n for n in names if n.encode().startswith(typed)]
    scores = [setup.brute(prefix, n.encode()[len(typed) :], end) for n in fits]
    return fits[int(np.argmax(scores))]


@pytest.mark.parametrize("end", ["identifier", "none"])
def test_greedy_takes_the_brute_force_best(setup: _Setup, completer: Completer, end: str) -> None:
    for names in (NAMES, NAMES[::-1]):  # the order of the list decides nothing
        guided = complete_guided(completer, PREFIX, names, GREEDY, end=end)
        assert guided.guided and guided.method == GUIDED_METHOD, guided.reason
        assert guided.chosen == _brute_best(setup, PREFIX, names, end)
        assert guided.completion is not None
        assert guided.completion.text.startswith(guided.chosen[len("assertEq") :])


def test_greedy_after_a_dot_takes_the_brute_force_best(setup: _Setup, completer: Completer) -> None:
    names = ["path", "getcwd", "environ", "sep"]
    guided = complete_guided(completer, b"os.", names, GREEDY, min_mass=0)  # a fake model
    assert guided.chosen == _brute_best(setup, b"os.", names, "identifier")


def test_the_text_after_the_name_is_the_unguided_completion(completer: Completer) -> None:
    """end="none": the unguided greedy completion of prefix + name goes on; end
    "identifier": first the likeliest byte that ends the name (brute-force-checked
    distribution, ByteSampler), then the likeliest leaf at prefix + name that puts that
    byte next (here the unguided completion of prefix + name + byte's own leaf too)."""
    guided = complete_guided(completer, PREFIX, NAMES, GREEDY, end="none")
    rest = guided.chosen[len("assertEq") :]
    plain = completer.complete(PREFIX + rest.encode(), GREEDY)
    assert guided.completion.text == rest + plain.text
    assert guided.completion.tokens == plain.tokens

    guided = complete_guided(completer, PREFIX, NAMES, GREEDY, end="identifier")
    rest = guided.chosen[len("assertEq") :].encode()
    sampler = ByteSampler(completer.model, completer.engine, track_prefix=False)
    sampler.reset(PREFIX + rest)
    dist = sampler.next_bytes()
    options = [*dist.next[ENDING], dist.eos]
    best = int(np.argmax(options))
    assert best < len(ENDING), "the fake model ends the text here: pick another prefix"
    byte = bytes([ENDING[best]])
    plain = completer.complete(PREFIX + rest + byte, GREEDY)
    assert guided.completion.data == rest + byte + plain.data
    assert guided.completion.stop_reason == plain.stop_reason


def test_scores_in_the_result(setup: _Setup, completer: Completer) -> None:
    """The chosen name's exact score, and a lower bound on the candidates' mass (the
    choice scores only the names it needs), greedy and drawn."""
    fits = [n for n in NAMES if n.startswith("assertEq")]
    brute = {n: setup.brute(PREFIX, n.encode()[8:], "identifier") for n in fits}
    mass = sum(np.exp(v) for v in brute.values())
    for settings in SETTINGS:
        guided = complete_guided(completer, PREFIX, NAMES, settings, min_mass=0.05)
        assert abs(guided.logprob - brute[guided.chosen]) < 1e-9
        assert 0.05 <= guided.mass <= mass + 1e-9
        assert guided.to_json()["chosen"] == guided.chosen
        assert guided.to_json()["method"] == GUIDED_METHOD


def test_stop_strings_see_the_name(completer: Completer) -> None:
    """A stop string at the byte after the name ends the completion there."""
    guided = complete_guided(completer, PREFIX, NAMES, GREEDY)
    name_rest = guided.chosen[len("assertEq") :]
    after = guided.completion.text[len(name_rest)]
    stopped = complete_guided(completer, PREFIX, NAMES, Settings(max_tokens=4, stop=(after,)))
    assert stopped.chosen == guided.chosen
    assert stopped.completion.text == name_rest
    assert stopped.completion.stop_reason == "stop"
    cut = complete_guided(completer, PREFIX, NAMES, GREEDY, cut=lambda text: 1)
    assert cut.completion.text == name_rest[:1] and cut.completion.stop_reason == "cut"


def test_no_candidate_extends_what_was_typed(completer: Completer) -> None:
    guided = complete_guided(completer, PREFIX, ["assertIn", "assertTrue"], GREEDY)
    assert not guided.guided and guided.completion is None
    assert guided.reason == "no candidate extends 'assertEq'"
    fallback = complete_guided(completer, PREFIX, ["assertIn"], GREEDY, fallback=True)
    assert fallback.method == "bytesampler" and fallback.reason == guided.reason
    assert fallback.completion.text == completer.complete(PREFIX, GREEDY).text


@pytest.mark.parametrize("settings", SETTINGS)
def test_too_little_mass_falls_back(completer: Completer, settings: Settings) -> None:
    """Just over the candidates' mass: not guided (the lazy searches prove it without
    scoring every name); just under: guided."""
    rests = [n.encode()[8:] for n in NAMES if n.startswith("assertEq")]
    scores = score_continuations(completer.sampler, PREFIX, rests, "identifier")
    mass = sum(np.exp(s.logprob) for s in scores)
    weak = complete_guided(completer, PREFIX, NAMES, settings, min_mass=mass * 1.01, fallback=True)
    assert not weak.guided and "of the probability, under" in weak.reason
    assert weak.completion.text == completer.complete(PREFIX, settings).text
    kept = complete_guided(completer, PREFIX, NAMES, settings, min_mass=mass * 0.99)
    assert kept.guided and kept.mass >= mass * 0.99


def test_only_bytesampler_is_guided(completer: Completer) -> None:
    with pytest.raises(ValueError, match="exact only with bytesampler"):
        complete_guided(completer, PREFIX, NAMES, Settings(method="naive"))


def test_draws_follow_the_renormalized_scores() -> None:
    """The draw among candidates (the whole transform: temperature, top-p) matches its
    probabilities over many draws; greedy takes the first of ties."""
    rng = np.random.default_rng(3)
    logp = np.log(np.array([0.1, 0.6, 0.3]))
    for transform, want in [
        (Transform(), [0.1, 0.6, 0.3]),
        (Transform(temperature=0.5), np.array([1, 36, 9]) / 46),
        (Transform(top_p=0.65), [0.0, 2 / 3, 1 / 3]),
    ]:
        counts = np.bincount([_draw(logp, transform, rng) for _ in range(4000)], minlength=3)
        assert np.allclose(counts / 4000, want, atol=0.03), (transform, counts)
    assert _draw(np.log([0.5, 0.5]), Transform(temperature=0), rng) == 0


def test_sampled_guidance_is_seeded_and_picks_candidates(completer: Completer) -> None:
    settings = Settings(max_tokens=2, temperature=1.0, seed=11)
    first = complete_guided(completer, PREFIX, NAMES, settings)
    again = complete_guided(completer, PREFIX, NAMES, settings)
    assert first.chosen == again.chosen and first.completion.text == again.completion.text
    chosen = {
        complete_guided(
            completer, PREFIX, NAMES, Settings(max_tokens=1, temperature=1.0, seed=s)
        ).chosen
        for s in range(12)
    }
    assert chosen <= {n for n in NAMES if n.startswith("assertEq")}


def test_sentencepiece_greedy_takes_the_brute_force_best() -> None:
    """Mistral's SentencePiece vocabulary (dummy-prefix space, byte fallback)."""
    sp = _Setup("llama2")
    completer = Completer(sp.sampler.model, sp.engine)
    names = ["assertEqual", "assertEquals", "assertTrue"]
    guided = complete_guided(completer, b"self.assertEq", names, GREEDY, end="none", min_mass=0)
    assert guided.chosen == _brute_best(sp, b"self.assertEq", names, "none")
    rest = guided.chosen[len("assertEq") :]
    plain = completer.complete(b"self.assertEq" + rest.encode(), GREEDY)
    assert guided.completion.text == rest + plain.text


@pytest.mark.parametrize("template", ["qwen", "qwen-spm"])
def test_fill_in_the_middle_guides_at_the_cursor(setup: _Setup, template: str) -> None:
    """A FIM completer moved to the cursor: the likeliest name by the exact scores of the
    middle (the prefix covered with qwen-spm, in the context with qwen, so the typed part
    is passed), then the middle's own completion after the name and its ending byte."""
    from midword.engine.sample.candidates import typed_identifier
    from midword.engine.sample.fim import TEMPLATES, FimCompleter

    fim = FimCompleter(setup.sampler.model, setup.engine, TEMPLATES[template])
    covered = fim.move_to(PREFIX, b"\n\n    def test_b(self):\n")
    typed = typed_identifier(PREFIX)
    assert (covered == PREFIX) == (template == "qwen-spm")
    guided = complete_guided(fim.completer, covered, NAMES, GREEDY, typed=typed, min_mass=0)
    rests = [n.encode()[len(typed) :] for n in NAMES if n.encode().startswith(typed)]
    scores = score_continuations(fim.completer.sampler, covered, rests, "identifier")
    best = max(scores, key=lambda s: s.logprob)
    assert guided.chosen.encode() == typed + best.continuation
    head = guided.completion.data[: len(best.continuation) + 1]
    plain = fim.completer.complete(covered + head, GREEDY)
    assert guided.completion.data == head + plain.data


def test_leaf_next_bytes_reads_the_byte_after_the_prefix(completer: Completer) -> None:
    """`ByteSampler.leaf_next_bytes` against the leaves' own token bytes, one by one."""
    sampler = completer.sampler
    for prefix in (PREFIX + b"ual", b"os.", b"x"):
        sampler.reset(prefix)
        leaves = sampler.leaf_set()
        got = sampler.leaf_next_bytes(leaves)
        tree, tok = leaves.tree, completer.tok
        lengths = [len(tok.token_bytes[t] or b"") for t in range(tok.size)]
        for k in range(0, leaves.size, 97):  # a spread of them: the whole vocabulary is slow
            node, token = int(leaves.node[k]), int(leaves.token[k])
            at = tree.rest - sum(lengths[t] for t in tree.nodes[node].path)
            data = tok.token_bytes[token] or b""
            assert got[k] == (data[at] if len(data) > at else -1), (prefix, k)


def test_the_leaf_after_the_name_is_an_exact_draw(completer: Completer) -> None:
    """At temperature 1 the text after prefix + name + ending byte follows the model: the
    byte after it is drawn as ByteSampler's exact next-byte distribution at prefix + name
    + byte says (the leaf from the tree at prefix + name, then a token where the leaf ends
    at the byte; tolerance for 3,000 draws and the mass on token pairs no text encodes to)."""
    at, byte = PREFIX + b"ual", ord("(")
    settings = Settings(max_tokens=2, temperature=1.0)
    rng = np.random.default_rng(5)
    counts: dict[int, int] = {}
    draws = 3000
    for _ in range(draws):
        done = _leaf_after(completer, at, byte, settings, None, None, None, rng)
        assert done is not None and done.data[:1] == b"("
        nxt = done.data[1] if len(done.data) > 1 else 256  # 256: the text ended there
        counts[nxt] = counts.get(nxt, 0) + 1
    sampler = ByteSampler(completer.model, completer.engine, track_prefix=False)
    sampler.reset(at + bytes([byte]))
    exact = np.exp(sampler.next_bytes().normalized())
    for b in sorted(range(257), key=lambda b: -exact[b])[:4]:
        assert abs(counts.get(b, 0) / draws - exact[b]) < 0.03, (b, counts.get(b), exact[b])


def test_greedy_leaf_after_the_name_is_the_likeliest_that_agrees(completer: Completer) -> None:
    """Greedy: the leaf of largest probability among those that put the byte next."""
    at, byte = PREFIX + b"ual", ord("(")
    done = _leaf_after(completer, at, byte, Settings(max_tokens=1), None, None, None, None)
    sampler = completer.sampler
    sampler.reset(at)
    leaves = sampler.leaf_set()
    agree = sampler.leaf_next_bytes(leaves) == byte
    best = int(np.argmax(np.where(agree, leaves.weights, -np.inf)))
    data = completer.tok.decode(leaves.sequence(best))[leaves.tree.rest :]
    assert done is not None and done.data == data and done.tokens == 1


def test_would_guide_agrees_with_the_guidance(completer: Completer) -> None:
    """`would_guide` (the bench's threshold sweep) guides exactly where greedy guidance
    does: just under and just over the candidates' mass, and with no candidate."""
    rests = [n.encode()[8:] for n in NAMES if n.startswith("assertEq")]
    scores = score_continuations(completer.sampler, PREFIX, rests, "identifier")
    mass = sum(np.exp(s.logprob) for s in scores)
    for min_mass in (0.0, mass * 0.99, mass * 1.01):
        guided = complete_guided(completer, PREFIX, NAMES, GREEDY, min_mass=min_mass)
        assert would_guide(completer, PREFIX, NAMES, min_mass) == guided.guided
    assert not would_guide(completer, PREFIX, ["assertIn"], 0.0)
