"""What keeps memory flat under a busy editor (issue 27): a stopped job's frames are
released with it, not by a later full collection, and model work returns its freed heap
pages to the OS now and then, in a gap between requests (server/worker.py)."""

from __future__ import annotations

import gc
import time
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest
from midword.engine import load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Interrupted, Settings
from midword.server import worker
from midword.server.live import SingleModel
from midword.server.scheduler import Scheduler
from midword.server.scope import Scope
from midword.server.worker import TRIM_EVERY_S, TRIM_KEY, ModelHost, Request

ROOT = Path(__file__).resolve().parents[2]


class _Payload:
    """Stands for what a stopped request's frames hold (a tree, score rows, a document)."""


@pytest.fixture
def no_collection() -> Iterator[None]:
    """Only reference counting frees objects here: what a full collection would find later
    does not count as freed."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def test_a_failed_job_keeps_no_locals_of_its_frames(no_collection: None) -> None:
    freed: list[weakref.ref[_Payload]] = []

    def stopped_deep_inside() -> None:
        payload = _Payload()
        freed.append(weakref.ref(payload))
        raise Interrupted("stopped between decode steps")

    def job() -> None:
        stopped_deep_inside()

    scheduler = Scheduler()
    future = scheduler.submit(job)
    with pytest.raises(Interrupted):
        future.result(10)
    scheduler.shutdown()
    scheduler.join(5)
    assert freed and freed[0]() is None  # the exception is alive; the payload is not
    assert future.exception() is not None
    assert future.exception().__traceback__ is not None  # still says where it stopped


@pytest.fixture(scope="module")
def host() -> Iterator[ModelHost]:
    engine = load_engine(str(ROOT / "models" / "default"))
    model_host = ModelHost()
    model_host._worker.submit(
        model_host.use, SingleModel(FakeModel(engine.tok.size), engine), "fake"
    ).result(30)
    yield model_host
    model_host.shutdown()


def _request(uri: str, prefix: bytes) -> Request:
    return Request(
        uri=uri,
        prefix=prefix,
        scope=Scope(multiline=True),
        indent_unit="    ",
        settings=[Settings(max_tokens=4)],
        max_items=1,
        budget=60.0,
    )


def _counting_trims(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    trims: list[float] = []
    monkeypatch.setattr(worker, "release_memory", lambda: trims.append(time.monotonic()))
    return trims


def test_model_work_trims_the_heap_after_its_answer_at_most_every_interval(
    host: ModelHost, monkeypatch: pytest.MonkeyPatch
) -> None:
    trims = _counting_trims(monkeypatch)
    host._trimmed_at = time.monotonic()  # trimmed just now: the next requests do not trim
    for n in range(3):
        assert host.submit(_request("file:///a.py", b"x = %d" % n)).result(30).texts
    time.sleep(0.1)
    assert trims == []
    host._trimmed_at -= TRIM_EVERY_S  # the interval has passed
    answered: list[float] = []
    future = host.submit(_request("file:///a.py", b"y = 1"))
    future.add_done_callback(lambda f: answered.append(time.monotonic()))
    assert future.result(30).texts
    deadline = time.monotonic() + 10
    while not trims and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(trims) == 1 and trims[0] >= answered[0]  # after the answer, not before it
    assert TRIM_KEY not in host._worker.background_keys()
    assert host.submit(_request("file:///a.py", b"y = 12")).result(30).texts
    time.sleep(0.1)
    assert len(trims) == 1  # not again within the interval


def test_a_close_trims_at_once(host: ModelHost, monkeypatch: pytest.MonkeyPatch) -> None:
    trims = _counting_trims(monkeypatch)
    host._trimmed_at = time.monotonic()
    host.close("file:///a.py").result(10)
    assert len(trims) == 1
