"""Which work the model worker runs when, and what it drops (server/scheduler.py,
server/worker.py), and answers that stay in the document version they were asked
about (server/controller.py). The model is the fake one on the shipped tokenizer."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import pytest
from midword.engine import build_tree, load_engine
from midword.engine.model.fake import FakeModel
from midword.engine.sample.generate import Interrupted, Settings
from midword.server.controller import Controller, EditItem, InlineItem
from midword.server.document import Range
from midword.server.live import PREFILL_CHUNK, SingleModel
from midword.server.scheduler import Scheduler, Superseded
from midword.server.scope import Scope
from midword.server.worker import SYNC_DELAY_S, Answer, ModelHost, Request, Status

ROOT = Path(__file__).resolve().parents[2]
LONG = (ROOT / "server" / "worker.py").read_bytes()[:6000]  # a cold prefill of many chunks


@pytest.fixture(scope="module")
def engine():
    return load_engine(str(ROOT / "models" / "default"))


@pytest.fixture(scope="module")
def fake(engine):
    return FakeModel(engine.tok.size, seed=3, scale=1.0)


# ---------------------------------------------------------------------------- the scheduler
def _blocked(scheduler: Scheduler) -> threading.Event:
    """Hold the worker until the returned event is set."""
    gate, started = threading.Event(), threading.Event()
    scheduler.submit(lambda: (started.set(), gate.wait()))
    started.wait(5)
    return gate


def test_calls_then_the_newest_request_then_background() -> None:
    scheduler, ran = Scheduler(), []
    gate = _blocked(scheduler)
    scheduler.background("x", ran.append, "background x")
    futures = [scheduler.request(key, ran.append, f"request {key}") for key in "abc"]
    scheduler.submit(ran.append, "call 1")
    scheduler.submit(ran.append, "call 2")
    assert scheduler.busy()
    gate.set()
    for future in futures:
        future.result(5)
    deadline = time.monotonic() + 5
    while len(ran) < 6 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == [
        "call 1",
        "call 2",
        "request c",
        "request b",
        "request a",
        "background x",
    ]
    scheduler.shutdown()


def test_a_newer_request_for_the_same_key_supersedes_the_waiting_one() -> None:
    scheduler, ran = Scheduler(), []
    gate = _blocked(scheduler)
    old = scheduler.request("a", ran.append, "old")
    other = scheduler.request("b", ran.append, "other")
    new = scheduler.request("a", ran.append, "new")
    with pytest.raises(Superseded):
        old.result(0)  # answered at once, before the worker is free
    assert scheduler.has_request("a")
    gate.set()
    new.result(5), other.result(5)
    assert ran == ["new", "other"]  # "new" was posted last
    scheduler.shutdown()


def test_background_work_is_coalesced_debounced_and_waits_for_idle() -> None:
    scheduler, ran = Scheduler(), []
    scheduler.background("a", ran.append, "first", delay=0.2)
    time.sleep(0.1)
    scheduler.background("a", ran.append, "second", delay=0.2)  # replaces it, restarts delay
    time.sleep(0.15)
    assert ran == []  # 0.25 s after the first post, 0.15 after the second
    deadline = time.monotonic() + 5
    while not ran and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ran == ["second"]
    assert scheduler.take_background("a") is None
    scheduler.background("b", ran.append, "never", delay=10)
    assert scheduler.take_background("b") == (ran.append, ("never",))
    scheduler.shutdown()


def test_shutdown_cancels_waiting_work() -> None:
    scheduler = Scheduler()
    gate = _blocked(scheduler)
    waiting = scheduler.request("a", time.sleep, 0)
    scheduler.shutdown()
    gate.set()
    assert waiting.cancelled()
    with pytest.raises(RuntimeError):
        scheduler.submit(time.sleep, 0)


def test_a_running_job_is_stopped_at_interpreter_exit(tmp_path: Path) -> None:
    """The worker is a daemon thread; at exit it is shut down and its job, which checks
    `closed`, ends before the interpreter finalizes (else it could abort the process)."""
    code = (
        "import sys, time\n"
        "from midword.server.scheduler import Scheduler\n"
        "scheduler = Scheduler()\n"
        "def job():\n"
        "    while not scheduler.closed:\n"
        "        time.sleep(0.01)\n"
        "    open(sys.argv[1], 'w').write('stopped')\n"
        "scheduler.submit(job)\n"
        "time.sleep(0.2)\n"
    )
    out = tmp_path / "out"
    subprocess.run([sys.executable, "-c", code, str(out)], timeout=60, check=True)
    assert out.read_text() == "stopped"


# ---------------------------------------------------------------------------- the model host
class Recorder:
    """What a host's live documents did: prepared and synced prefixes, trunk lengths of
    every model call, and a hook run on each model call (to change things mid-way)."""

    def __init__(self) -> None:
        self.prepared: list[bytes] = []
        self.synced: list[bytes] = []
        self.calls: list[int] = []  # trunk length of each model call
        self.on_call: Any = None


def _host(engine, fake) -> tuple[ModelHost, Recorder]:  # noqa: ANN001
    host, seen = ModelHost(), Recorder()
    backend = SingleModel(fake, engine)
    make = backend.document

    def document():  # noqa: ANN202
        doc = make()
        prepare, sync, session = doc.prepare, doc.sync, doc.completer.session
        logprobs = session.logprobs

        def counted(trunk, paths):  # noqa: ANN001, ANN202
            seen.calls.append(len(trunk))
            if seen.on_call is not None:
                seen.on_call()
            return logprobs(trunk, paths)

        session.logprobs = counted
        doc.prepare = lambda p, *a: (seen.prepared.append(p), prepare(p, *a))[1]
        doc.sync = lambda p, *a: (seen.synced.append(p), sync(p, *a))[1]
        return doc

    backend.document = document
    host._worker.submit(host.use, backend, "fake").result()
    return host, seen


def _request(uri: str, prefix: bytes, is_current=lambda: True, version=None) -> Request:  # noqa: ANN001
    return Request(
        uri=uri,
        prefix=prefix,
        scope=Scope(multiline=True),
        indent_unit="    ",
        settings=[Settings(max_tokens=4)],
        max_items=1,
        budget=60.0,
        is_current=is_current,
        version=version,
    )


def test_the_newest_request_runs_first_and_a_superseded_one_never_runs(engine, fake) -> None:
    host, seen = _host(engine, fake)
    gate = _blocked(host._worker)
    a_old = host.submit(_request("a", b"x = 1"))
    b = host.submit(_request("b", b"y = 2"))
    a_new = host.submit(_request("a", b"x = 12"))
    gate.set()
    with pytest.raises(Superseded):
        a_old.result(10)
    assert a_new.result(10).texts and b.result(10).texts
    assert seen.prepared == [b"x = 12", b"y = 2"]
    host.shutdown()


def test_a_prefix_the_engine_refuses_while_sampling_is_an_answer_not_an_error(engine, fake) -> None:
    from midword.engine import PrefixError
    from midword.server.live import SingleDocument

    host, _ = _host(engine, fake)
    original = SingleDocument.complete

    def refuse(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise PrefixError("prefix is not valid UTF-8 at byte 0")

    SingleDocument.complete = refuse  # type: ignore[method-assign]
    try:
        answer = host.submit(_request("a", b"x = 1")).result(10)
    finally:
        SingleDocument.complete = original  # type: ignore[method-assign]
    assert answer.texts == [] and answer.reason.startswith("cannot complete here")
    host.shutdown()


def test_a_stale_request_never_reaches_the_model(engine, fake) -> None:
    host, seen = _host(engine, fake)
    with pytest.raises(Interrupted):
        host.submit(_request("a", b"x = 1", is_current=lambda: False)).result(10)
    assert seen.prepared == [] and seen.calls == []
    host.shutdown()


def test_a_cold_prefill_stops_between_chunks_when_the_document_changes(engine, fake) -> None:
    host, seen = _host(engine, fake)
    current = threading.Event()
    current.set()
    seen.on_call = current.clear  # the document changes during the first chunk
    with pytest.raises(Interrupted):
        host.submit(_request("a", LONG, is_current=current.is_set)).result(10)
    assert seen.calls == [PREFILL_CHUNK]  # one chunk, then it stopped
    assert len(build_tree(engine, LONG).trunk) > 3 * PREFILL_CHUNK
    # the next request keeps the chunk and evaluates only the rest
    seen.on_call = None
    answer = host.submit(_request("a", LONG)).result(30)
    assert answer.texts and seen.calls[1] == 2 * PREFILL_CHUNK
    host.shutdown()


def test_a_prefill_stops_inside_a_chunk_and_keeps_the_chunks_before(engine) -> None:
    """With a real model, a newer request stops a prefill between two layers of a
    chunk's pass (not only between chunks); the chunks before stay cached and the next
    request completes as a document that was never stopped does."""
    pytest.importorskip("transformers")
    from midword.engine.model.hf_backend import HFModel

    from midword.testing.tiny_models import build_tiny_llama

    model = HFModel(build_tiny_llama(engine.tok.size, seed=3, layers=4, dtype="float64"))
    layers = len(model.layers)
    stopped, fresh = SingleModel(model, engine).document(), SingleModel(model, engine).document()
    asked: list[int] = []

    def newer_request_during_the_second_chunk() -> bool:
        asked.append(1)  # once between chunks, then before each layer of a pass
        return len(asked) > (1 + layers) + 1 + 2

    with pytest.raises(Interrupted, match="inside a prefill chunk"):
        stopped.prepare(LONG, "bytesampler", newer_request_during_the_second_chunk)
    session = stopped.completer.session
    trunk = stopped.completer.sampler.vct.tree().trunk
    assert session.cached_trunk_len(trunk) == PREFILL_CHUNK  # the first chunk, kept
    assert session.cache_len() == session.expected_cache_len()
    settings = Settings(max_tokens=6)
    answers = []
    for doc in (stopped, fresh):
        doc.prepare(LONG, "bytesampler", lambda: False)
        answers.append(doc.complete(LONG, settings, None, None, time.monotonic() + 60).text)
    assert answers[0] == answers[1] and answers[0]


def test_a_running_request_stops_for_a_newer_one_for_its_document(engine, fake) -> None:
    host, seen = _host(engine, fake)
    newer: list[Future[Answer]] = []
    seen.on_call = lambda: newer or newer.append(host.submit(_request("a", b"x = 2")))
    with pytest.raises(Interrupted):
        host.submit(_request("a", LONG)).result(10)
    seen.on_call = None
    assert newer[0].result(10).texts
    assert seen.prepared == [LONG, b"x = 2"] and seen.calls[0] == PREFILL_CHUNK
    host.shutdown()


def test_background_sync_only_for_live_documents_and_gives_way(engine, fake) -> None:
    host, seen = _host(engine, fake)
    host.sync("never-asked", b"z = 3")  # no request asked about it: skipped
    host.submit(_request("a", b"x = 1")).result(10)
    host.sync("a", LONG)  # a paste in a live document: prefilled in the background
    calls_before = len(seen.calls)
    answered: list[Future[Answer]] = []
    # a request for another document comes during the sync's first chunk
    seen.on_call = lambda: answered or answered.append(host.submit(_request("b", b"y = 2")))
    deadline = time.monotonic() + 10
    while not answered and time.monotonic() < deadline:
        time.sleep(SYNC_DELAY_S)
    assert answered[0].result(10).texts
    assert seen.synced == [LONG]
    assert seen.calls[calls_before] == PREFILL_CHUNK  # the sync's first chunk ...
    assert seen.prepared[-1] == b"y = 2"  # ... then the request, the sync stopped
    assert host.live_documents().result(5) == 2
    host.shutdown()


def test_a_sync_is_left_to_a_request_for_its_document(engine, fake) -> None:
    host, seen = _host(engine, fake)
    host.submit(_request("a", b"x = 1")).result(10)
    gate = _blocked(host._worker)
    host.sync("a", b"x = 12")
    answer = host.submit(_request("a", b"x = 12"))
    gate.set()
    assert answer.result(10).texts
    time.sleep(3 * SYNC_DELAY_S)
    assert seen.synced == []  # the request moved the VCT itself
    host.shutdown()


def test_live_state_is_brought_to_the_latest_text(engine, fake) -> None:
    host, seen = _host(engine, fake)
    assert host.live_state("a", (b"x", 1, b"")).result(5) is None  # not live: not made live
    host.submit(_request("a", b"x = 1", version=2)).result(10)
    host.sync("a", b"x = 1 + y", 3)
    state = host.live_state("a", (b"x = 1 + y", 3, b"")).result(5)
    assert state["prefix"] == b"x = 1 + y".hex() and state["version"] == 3
    host.shutdown()


# ---------------------------------------------------------------------------- stale positions
class _StubHost:
    """A host whose answers the test hands over when it wants."""

    def __init__(self) -> None:
        self.ready = True
        self.status = Status("ready", "stub", "ready")
        self.futures: list[Future[Answer]] = []
        self.requests: list[Request] = []

    def on_status(self, status: Status) -> None:
        pass

    def special_texts(self) -> tuple[str, ...]:
        return ()

    def is_live(self, uri: str) -> bool:
        return False

    def submit(self, request: Request) -> Future[Answer]:
        self.requests.append(request)
        self.futures.append(Future())
        return self.futures[-1]

    def close(self, uri: str) -> None:
        pass

    def shutdown(self) -> None:
        pass


def _placed(items: list[InlineItem]) -> list[tuple[str, int, int]]:
    """Text and position of inline items (what this file checks of them)."""
    return [(item.text, item.line, item.character) for item in items]


def _controller() -> tuple[Controller, _StubHost]:
    controller = Controller()
    controller.host.shutdown()
    stub = controller.host = _StubHost()  # type: ignore[assignment]
    controller.configure({"debounceMs": 0})  # these tests step the requests themselves
    controller.open("file:///a.py", "import os\nx = 1\nvalue = 'é😀' + na", 1)
    return controller, stub


async def _answer_after(controller: Controller, stub: _StubHost, call: Any, edit: Any) -> Any:
    task = asyncio.ensure_future(call)
    await asyncio.sleep(0)  # the request is submitted
    edit()
    stub.futures[-1].set_result(Answer(texts=["me"]))
    return await task


@pytest.mark.parametrize("kind", ["inline", "list"])
def test_an_answer_for_a_document_that_shrank_is_dropped(kind: str) -> None:
    """The old controller converted the cursor against the newer, shorter text: IndexError."""
    controller, stub = _controller()
    uri = "file:///a.py"
    ask = controller.inline(uri, 2, 18, False) if kind == "inline" else None
    ask = ask or controller.completion_list(uri, 2, 18)
    shrink = lambda: controller.change(uri, 2, [(Range(0, 0, 2, 99), "")])  # noqa: E731
    got = asyncio.run(_answer_after(controller, stub, ask, shrink))
    assert got == [] and stub.requests[0].prefix.endswith("'é😀' + na".encode())


def test_an_answer_after_a_close_and_reopen_is_dropped() -> None:
    controller, stub = _controller()

    def reopen() -> None:
        controller.close("file:///a.py")
        controller.open("file:///a.py", "import os\nx = 1\nvalue = 'é😀' + na", 1)

    got = asyncio.run(
        _answer_after(controller, stub, controller.inline("file:///a.py", 2, 18, False), reopen)
    )
    assert got == []


def test_an_answer_for_an_unchanged_document_is_placed_in_its_version() -> None:
    controller, stub = _controller()
    edit_elsewhere = lambda: controller.change("file:///b.py", 2, [])  # noqa: E731
    got = asyncio.run(
        _answer_after(
            controller, stub, controller.inline("file:///a.py", 2, 18, False), edit_elsewhere
        )
    )
    assert _placed(got) == [("me", 2, 18)]  # UTF-16: é is one unit, 😀 two
    controller, stub = _controller()
    got = asyncio.run(
        _answer_after(
            controller, stub, controller.completion_list("file:///a.py", 2, 18), edit_elsewhere
        )
    )
    assert got == [
        EditItem(
            "name", "name", 2, 16, 18, "midword: identifier", "bytesampler", "inside_word", "na"
        )
    ]
    assert got[0].added() == ("me", 18)  # what the acceptance log follows: the item's own


def test_the_worker_sees_a_request_go_stale() -> None:
    controller, stub = _controller()

    async def run() -> None:
        task = asyncio.ensure_future(controller.inline("file:///a.py", 1, 5, False))
        await asyncio.sleep(0)
        request = stub.requests[0]
        assert request.is_current()
        controller.change("file:///a.py", 2, [(Range(1, 5, 1, 5), "0")])
        assert not request.is_current()
        stub.futures[0].set_result(Answer(texts=["me"]))
        assert await task == []

    asyncio.run(run())


def test_the_same_question_again_joins_the_request_on_the_worker() -> None:
    """An editor asking again at the same cursor of the same version (a timer, a second
    trigger) waits for the running request instead of superseding it; a cancel by one
    asker leaves it running for the other; once answered, the answer is given again."""
    controller, stub = _controller()
    uri = "file:///a.py"

    async def run() -> None:
        first = asyncio.ensure_future(controller.inline(uri, 2, 18, False))
        second = asyncio.ensure_future(controller.inline(uri, 2, 18, False))
        other = asyncio.ensure_future(controller.inline(uri, 2, 17, False))  # another cursor
        await asyncio.sleep(0)
        assert len(stub.requests) == 2
        first.cancel()
        await asyncio.sleep(0)
        assert not stub.futures[0].cancelled() and stub.requests[0].is_current()
        stub.futures[0].set_result(Answer(texts=["me"]))
        stub.futures[1].set_result(Answer(texts=["ame"]))
        assert _placed(await second) == [("me", 2, 18)]
        assert _placed(await other) == [("ame", 2, 17)]
        again = await controller.inline(uri, 2, 17, False)  # the latest, answered: kept
        assert _placed(again) == [("ame", 2, 17)] and len(stub.requests) == 2
        lone = asyncio.ensure_future(controller.inline(uri, 0, 0, False))
        await asyncio.sleep(0)
        lone.cancel()
        await asyncio.sleep(0)
        assert stub.futures[2].cancelled() and not stub.requests[2].is_current()

    asyncio.run(run())


def test_a_request_waits_for_edits_already_received_and_is_dropped_by_them() -> None:
    """Edits the transport has received but not applied yet make a request stale before
    it goes to the worker: it never reaches the model."""
    controller, stub = _controller()
    uri = "file:///a.py"

    async def apply_the_backlog() -> None:
        controller.change(uri, 2, [(Range(2, 18, 2, 18), "m")])

    controller.settle = apply_the_backlog
    assert asyncio.run(controller.inline(uri, 2, 18, False)) == []
    assert stub.requests == []
    controller.settle = _nothing_pending

    async def current() -> None:
        task = asyncio.ensure_future(controller.inline(uri, 2, 19, False))
        await asyncio.sleep(0)
        assert len(stub.requests) == 1  # nothing changed it: it went to the worker
        stub.futures[0].set_result(Answer(texts=["e"]))
        assert _placed(await task) == [("e", 2, 19)]

    asyncio.run(current())


async def _nothing_pending() -> None:
    pass


def test_the_pipe_reader_counts_what_waits_and_settles() -> None:
    from midword.server.server import PipeReader

    read_fd, write_fd = os.pipe()
    body = b'{"jsonrpc": "2.0", "method": "x"}'
    message = b"Content-Length: %d\r\n\r\n%s" % (len(body), body)

    async def run() -> None:
        reader = PipeReader(os.fdopen(read_fd, "rb", buffering=0))
        os.write(write_fd, message + message[:10])  # one message and a part of the next
        assert await reader.readline() == message.split(b"\r\n")[0] + b"\r\n"
        assert reader.pending()
        assert await reader.readline() == b"\r\n"
        assert await reader.readexactly(len(body)) == body
        assert reader.pending()  # the start of the next message
        started = time.monotonic()
        await reader.settle(limit=0.2)  # it cannot come: gives up after the limit
        assert 0.2 <= time.monotonic() - started < 2
        os.write(write_fd, message[10:])
        settled = asyncio.ensure_future(reader.settle())
        await reader.readline(), await reader.readline(), await reader.readexactly(len(body))
        await asyncio.wait_for(settled, 1)
        assert not reader.pending()
        os.close(write_fd)
        assert await reader.readline() == b""

    asyncio.run(run())
