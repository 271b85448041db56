"""`midword bench acceptance` without a model: the simulated user, the policy cuts, the
metrics, the tuning and the cuts (issue 38)."""

from __future__ import annotations

import math
import random

import pytest
from midword.engine import confidence_cut

from midword.bench import acceptance, acceptance_tuning, data
from midword.bench.acceptance_policies import (
    Case,
    Cursor,
    Generated,
    Policy,
    ScopedCache,
    accepted_chars,
    accepted_prefix,
    clip_spans,
    confident,
    confident_end,
    evaluate,
    first_steps,
    first_word_end,
    metrics,
    outcome,
    prefix_logprob,
    truncated,
    valid_utf8,
)

from ..synthetic_problems import PROBLEMS

LN = math.log


# ---------------------------------------------------------------------- the user
@pytest.mark.parametrize(
    ("shown", "truth", "kept"),
    [
        ("return x", "return x\n    y = 2", "return x"),  # exact match: all of it
        ("foo", "foobar()", "foo"),  # a prefix of the truth, even ending mid-word
        ("foobar = 1", "foobaz = 1", ""),  # rounded down: no whole word matches
        ("self.assertEqual(a, b)", "self.assertEqual(a, c)", "self.assertEqual(a, "),
        ("ual(x, 1)", "ual(y, 1)", "ual("),  # a mid-word cut: the word's rest is a word
        ("x = compute()", "x = computed", "x = compute"),  # a whole word of the suggestion
        ("x = computer()", "x = computed", "x = "),
        ("abc def", "abc", "abc"),  # the file ends: what matched, at a word's end
        ("café = 1", "cafè = 1", ""),  # non-ASCII letters are word characters
        ("y", "x", ""),
        ("", "x", ""),
    ],
)
def test_accepted_prefix(shown: str, truth: str, kept: str) -> None:
    assert accepted_prefix(shown, truth) == kept


def test_accepted_chars_count_only_a_non_blank_prefix() -> None:
    assert accepted_chars("\n    return x", "\n    pass") == 0  # only the indentation matched
    assert accepted_chars("\n    return x", "\n    return y") == len("\n    return ")
    assert accepted_chars("foo", "bar") == 0
    assert accepted_chars("a, b", "a, b)") == 4


def test_outcome_and_metrics_on_hand_built_cuts() -> None:
    outcomes = [
        outcome("foo(bar)", "foo(baz)"),  # shown, "foo(" accepted, 4 wasted
        outcome("x = 1", "x = 1\n"),  # shown, all accepted
        outcome("", "anything"),  # nothing shown
        outcome("zzz", "yyy"),  # shown, rejected: 3 wasted
    ]
    assert outcomes[0].accepted_chars == 4 and outcomes[0].wasted_chars == 4
    assert outcomes[1].accepted and outcomes[1].wasted_chars == 0
    assert not outcomes[2].shown and outcomes[2].wasted_chars == 0
    assert not outcomes[3].accepted and outcomes[3].wasted_chars == 3
    m = metrics(outcomes, waste_cost=0.5)
    assert m["n"] == 4
    assert m["shown_per_cut"] == 3 / 4
    assert m["acceptance_rate"] == 2 / 3
    assert m["accepted_chars_per_cut"] == 9 / 4
    assert m["accepted_chars_per_shown"] == 9 / 3
    assert m["wasted_chars_per_cut"] == 7 / 4
    assert m["objective"] == (9 - 0.5 * 7) / 4
    empty = metrics([])
    assert empty["n"] == 0 and math.isnan(empty["shown_per_cut"])
    assert math.isnan(metrics([outcome("", "x")])["acceptance_rate"])


# ---------------------------------------------------------------------- policy cuts
SPANS = ((3, -0.1), (4, -0.1), (7, -0.5), (8, -0.1), (13, -2.0))  # engine's doctest
FOO = Generated(b"foo(bar, baz)", SPANS)


def test_first_steps_is_max_tokens() -> None:
    assert first_steps(FOO, 1) == "foo"
    assert first_steps(FOO, 3) == "foo(bar"
    assert first_steps(FOO, 5) == first_steps(FOO, 48) == "foo(bar, baz)"


def test_scoped_policy_with_fewer_tokens() -> None:
    text = b"a = 1\nb = 2\nc = 3"
    gen = Generated(text, ((2, -0.1), (6, -0.1), (8, -0.1), (12, -0.1), (17, -0.1)))
    assert truncated(gen, 2) == Generated(b"a = 1\n", ((2, -0.1), (6, -0.1)))
    assert truncated(gen, 9) is gen
    auto16 = Policy("auto 4", "scoped", steps=4)
    assert auto16.shown(gen, Cursor("")) == "a = 1\nb = 2"
    assert Policy("auto", "scoped").shown(gen, Cursor("")) == "a = 1\nb = 2\nc = 3"
    with pytest.raises(ValueError, match="scope"):
        ScopedCache([]).evaluate(auto16)


def test_clip_and_valid_utf8() -> None:
    assert clip_spans(SPANS, 5) == ((3, -0.1), (4, -0.1), (5, -0.5))
    assert clip_spans(SPANS, 0) == ((0, -0.1),)
    assert valid_utf8("é".encode()[:1]) == b"" and valid_utf8(b"ab") == b"ab"


def test_first_word_and_its_logprob() -> None:
    assert first_word_end(b"foo(bar") == 3
    assert first_word_end(b"\n    return x") == len("\n    return")
    assert first_word_end(b"   ") == first_word_end(b"") == 0
    assert prefix_logprob(SPANS, 3) == pytest.approx(-0.1)
    assert prefix_logprob(SPANS, 5) == pytest.approx(-0.7)
    assert prefix_logprob(((3, None), (5, -1.0)), 4) is None


def test_confident_end_two_thresholds() -> None:
    # one threshold: the engine's rule (the doctest of engine/sample/confidence.py)
    assert confident_end(FOO.data, SPANS, 0.5, 0.5) == 4
    assert confident_end(FOO.data, SPANS, 0.3, 0.3) == 8
    assert confident_end(FOO.data, SPANS, 0.0, 0.0) == 13
    # "foo" has probability exp(-0.1) = 0.905: silent above it, kept below it
    assert confident_end(FOO.data, SPANS, 0.5, 0.95) == 0
    assert confident_end(FOO.data, SPANS, 0.95, 0.5) == 3  # cut at 0.95, first word kept
    assert confident_end(FOO.data, SPANS, 0.95, 0.95) == 0
    # unknown probabilities: nothing is cut, nobody is silenced
    assert confident_end(FOO.data, tuple((e, None) for e, _ in SPANS), 0.9, 0.9) == 13


def test_one_threshold_is_the_engines_rule_with_silence() -> None:
    """With silence == cut, the policy keeps what confidence_cut keeps, and is silent
    exactly where that leaves only whitespace (server/worker.py's rule)."""
    rng = random.Random(7)
    for _ in range(3000):
        text = "".join(rng.choice("ab_ (\n.") for _ in range(rng.randrange(0, 14)))
        data_ = text.encode()
        ends = sorted(rng.sample(range(1, len(data_) + 1), rng.randrange(0, len(data_) + 1)))
        spans = [(e, -rng.random() * 1.5) for e in ends]
        if spans and spans[-1][0] != len(data_):
            spans.append((len(data_), -0.2))
        t = rng.choice([0.0, 0.05, 0.2, 0.5, 0.8])
        end = confidence_cut(data_, spans, LN(t) if t else -math.inf)
        expected = end if data_[:end].strip() else 0
        assert confident_end(data_, spans, t, t) == expected, (text, spans, t)


def test_scoped_policies_follow_the_servers_scope() -> None:
    text = b"x = 1\ny = 2\n\n\nz = 3"
    spans = tuple((i + 1, -0.01) for i in range(len(text)))  # one byte per step
    gen = Generated(text, spans)
    one_line = Policy("one", "scoped", max_lines=1)
    auto = Policy("auto", "scoped")
    # mid-line: one line; on an empty line: a block, ended by the second blank line
    assert auto.shown(gen, Cursor("    foo(")) == "x = 1"
    assert auto.shown(gen, Cursor("")) == "x = 1\ny = 2"
    assert one_line.shown(gen, Cursor("")) == "x = 1"
    assert Policy("always", "scoped", multiline="always").shown(gen, Cursor("a ")) == (
        "x = 1\ny = 2"
    )
    # a completion that starts with a line break shows nothing in one-line mode
    nl = Generated(b"\n    return x", ((1, -0.1), (5, -0.1), (12, -0.1), (13, -0.1)))
    assert one_line.shown(nl, Cursor("def f():")) == ""
    assert auto.shown(nl, Cursor("def f():")) == "\n    return x"


def test_confident_policy_cuts_after_the_scope() -> None:
    text = b"alpha beta\ngamma"
    spans = ((5, -0.05), (10, -0.05), (16, -3.0))
    gen = Generated(text, spans)
    assert confident(0.5).shown(gen, Cursor("")) == "alpha beta"
    assert confident(0.96).shown(gen, Cursor("")) == ""  # "alpha" is at 0.951: silent
    assert confident(0.96, 0.5).shown(gen, Cursor("")) == "alpha"
    assert confident(0.0).shown(gen, Cursor("x = ")) == "alpha beta"  # the line's end
    assert "silence 0.5" in confident(0.96, 0.5).name and confident(0.2).silence == 0.2


# ---------------------------------------------------------------------- tuning
def _case(text: str, spans, truth: str, split: str = "dev", kind: str = "other") -> Case:
    return Case(Cursor("x = "), Generated(text.encode(), tuple(spans)), truth, kind, split, "s")


def test_tuning_cuts_the_unlikely_tail() -> None:
    """A sure, right first word and an unsure, wrong tail: the tuned cut keeps the
    former and drops the latter; a wrong, unsure suggestion is silenced."""
    good = _case("value + wrong_tail", [(5, -0.01), (18, -4.0)], "value + 1")
    bad = _case("nonsense", [(8, -3.0)], "other")
    cases = [good, bad] * 3
    tuned = acceptance_tuning.tune(cases)
    shown = confident(tuned["cut"], tuned["silence"])
    assert shown.shown(good.gen, good.cursor) == "value"
    assert shown.shown(bad.gen, bad.cursor) == ""
    m = evaluate(shown, cases)
    assert m["wasted_chars_per_cut"] == 0 and m["accepted_chars_per_cut"] == 2.5
    today = evaluate(Policy("auto", "scoped"), cases)
    assert today["objective"] < m["objective"] == tuned["dev"]["objective"]
    assert set(tuned["sensitivity"]) == {"0.25", "0.5", "1"}


def test_a_silence_threshold_of_its_own_only_when_it_earns_it() -> None:
    """A sure right word with a right tail, and a wrong word likelier than that tail: no single
    threshold keeps the tail and silences the wrong word, a pair does; with only the
    first kind of cut the single threshold wins (the pair gains nothing)."""
    sure = _case("good tail", [(4, LN(0.95)), (9, LN(0.28 / 0.95))], "good tail")
    unsure = _case("bad", [(3, LN(0.5))], "fine")  # likelier than the right tail
    tuned = acceptance_tuning.tune([sure, unsure] * 12)
    assert tuned["cut"] <= 0.25 and 0.5 < tuned["silence"] <= 0.9
    assert tuned["pair_gain"] == pytest.approx(0.75) and tuned["pair_gain_se"] < 0.75
    assert tuned["dev"]["accepted_chars_per_cut"] == 4.5
    assert tuned["dev"]["wasted_chars_per_cut"] == 0
    single = acceptance_tuning.tune([sure] * 12)
    assert single["cut"] == single["silence"] == single["best_single"]
    assert single["pair_gain"] == 0


def test_goal_pairs_against_today() -> None:
    """Today shows both cuts whole; a threshold that silences the wrong one and keeps the
    right one meets the goal (accepted equal, shown -50%, wasted -100%)."""
    right = _case("value", [(5, LN(0.9))], "value")
    wrong = _case("junk junk", [(4, LN(0.1)), (9, LN(0.5))], "other")
    found = acceptance_tuning.goal_pairs([right, wrong], "auto")
    assert found["count"] > 0 and 0.1 < found["best"]["silence"] <= 0.9
    assert acceptance_tuning.goal_pairs([right], "auto")["count"] == 0  # nothing to gain


def test_best_breaks_ties_towards_fewer_suggestions() -> None:
    points = [
        {
            "cut": 0.1,
            "silence": 0.1,
            "shown_per_cut": 0.9,
            "accepted_chars_per_cut": 2.0,
            "wasted_chars_per_cut": 2.0,
        },
        {
            "cut": 0.2,
            "silence": 0.2,
            "shown_per_cut": 0.5,
            "accepted_chars_per_cut": 2.0,
            "wasted_chars_per_cut": 2.0,
        },
        {
            "cut": 0.3,
            "silence": 0.3,
            "shown_per_cut": 0.4,
            "accepted_chars_per_cut": 0.9,
            "wasted_chars_per_cut": 0.0,
        },
    ]
    assert acceptance_tuning.best(points, 0.5)["cut"] == 0.2
    assert acceptance_tuning.best(points, 1.0)["cut"] == 0.3


def test_scoped_cache_equals_policy_evaluation() -> None:
    rng = random.Random(3)
    cases = []
    for _ in range(40):
        words = [rng.choice(["a", "bb", "c_d", "(", ")", " ", "\n", "    "]) for _ in range(9)]
        text = "".join(words)
        ends = [len("".join(words[: i + 1]).encode()) for i in range(len(words))]
        spans = [(e, -rng.random()) for e in ends]
        truth = text[: rng.randrange(0, len(text) + 1)] + "zz"
        prefix = rng.choice(["", "    ", "x = f(", "if x:"])
        cases.append(
            Case(Cursor(prefix), Generated(text.encode(), tuple(spans)), truth, "o", "dev", "s")
        )
    cache = ScopedCache(cases)
    for cut, silence in [(0.0, 0.0), (0.3, 0.1), (0.1, 0.5), (0.6, 0.6)]:
        p = confident(cut, silence)
        assert cache.evaluate(p) == evaluate(p, cases)


# ---------------------------------------------------------------------- cuts
def test_cut_kinds() -> None:
    assert acceptance.cut_kind("    ret", "urn") == "mid-word"
    assert acceptance.cut_kind("x\n    ", "return") == "line start"
    assert acceptance.cut_kind("x\n", "y") == "line start"
    assert acceptance.cut_kind("x\n\t", "y") == "line start"
    assert acceptance.cut_kind("return ", "x") == "after space"
    assert acceptance.cut_kind("f(", "x") == "other"
    assert acceptance.cut_kind("x ", "") == "after space"


def test_splits_are_deterministic_and_balanced() -> None:
    files = [data.TextFile(f"f{i}.py", f"text {i}\n" * (i + 1)) for i in range(9)]
    one = acceptance.assign_splits("stdlib", files)
    two = acceptance.assign_splits("stdlib", list(reversed(files)))
    assert {d.name: d.split for d in one} == {d.name: d.split for d in two}
    assert sorted(d.split for d in one).count("dev") == 5


def test_make_cut_is_a_function_of_seed_and_index() -> None:
    docs = {
        "stdlib": acceptance.assign_splits(
            "stdlib",
            [data.TextFile(f"{c}.py", f"def {c}(x):\n    return x\n" * 50) for c in "abcd"],
        ),
        "humaneval": acceptance.assign_splits(
            "humaneval", [data.TextFile(p["task_id"], p["prompt"]) for p in PROBLEMS]
        ),
    }
    cuts = [acceptance.make_cut(docs, 0, i, 100) for i in range(8)]
    assert cuts == [acceptance.make_cut(docs, 0, i, 100) for i in range(8)]
    assert cuts != [acceptance.make_cut(docs, 1, i, 100) for i in range(8)]
    assert [c["source"] for c in cuts[:4]] == ["stdlib", "humaneval"] * 2
    assert [c["split"] for c in cuts[:4:2]] == ["dev", "held-out"]
    by_name = {d.name: d for ds in docs.values() for d in ds}
    for c in cuts:
        text = by_name[c["file"]].text
        assert c["prefix"] == text[c["start"] : c["cut"]] and len(c["prefix"]) <= 100
        assert c["rest"] == text[c["cut"] :] and text[: c["cut"]].endswith(c["line_prefix"])
        assert "\n" not in c["line_prefix"] and c["split"] == by_name[c["file"]].split


def test_humaneval_problems_are_whole_and_once(tmp_path) -> None:
    import gzip
    import json

    path = tmp_path / data.RANDOM_SPAN
    records = [*PROBLEMS, PROBLEMS[0]]  # a second span of the same problem
    with gzip.open(path, "wt", encoding="utf-8") as f:
        f.writelines(json.dumps(p) + "\n" for p in records)
    files = acceptance.humaneval_files(path)
    assert len(files) == len(PROBLEMS)
    assert files[0].text == PROBLEMS[0]["prompt"] + "urn 2 * x\n"
