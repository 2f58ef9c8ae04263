"""Slack and SlackWebhook against a local HTTP server that plays the Slack Web API."""

from __future__ import annotations

import inspect
import io
import json
import socket
import sys
import threading
import urllib.parse
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.training  # noqa: F401 -- the subpackage, without the meta-package
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training.extensions.slack import Slack, SlackWebhook

TOKEN = "xoxb-test-token"
CHANNEL_ID = "C0123"
SLOW_SECONDS = 3.0  # what a "slow" server takes to answer, well past the test timeouts


@dataclass
class Request:
    path: str
    headers: dict[str, str]
    body: bytes
    params: dict[str, Any]
    answered_ok: bool = False


@dataclass
class FakeSlack:
    """What the server received, and how it answers (``mode``)."""

    url: str
    requests: list[Request] = field(default_factory=list)
    mode: str = "ok"  # "ok", "slack_error", "http_500", "slow"
    fail_first: int = 0  # answer the first n requests with ``mode``, then "ok"
    release: threading.Event = field(default_factory=threading.Event)

    @property
    def api_url(self) -> str:
        return self.url + "/api/"

    @property
    def webhook_url(self) -> str:
        return self.url + "/hooks/T000/B000/xyz"

    def posts(self) -> list[dict[str, Any]]:
        """The messages posted successfully."""
        return [
            r.params for r in self.requests if r.path == "/api/chat.postMessage" and r.answered_ok
        ]

    def texts(self) -> list[str]:
        return [p["text"] for p in self.posts()]

    def webhook_texts(self) -> list[str]:
        return [
            r.params["text"]
            for r in self.requests
            if r.path.startswith("/hooks/") and r.answered_ok
        ]


def _parse(path: str, headers: dict[str, str], body: bytes) -> dict[str, Any]:
    if path.startswith("/upload/"):
        return {}  # raw file content (urllib labels it as a form nonetheless)
    content_type = headers.get("content-type", "")
    if content_type.startswith("application/json"):
        loaded = json.loads(body)
        assert isinstance(loaded, dict)
        return loaded
    if content_type.startswith("application/x-www-form-urlencoded"):
        return dict(urllib.parse.parse_qsl(body.decode()))
    return {}


def _make_handler(state: FakeSlack) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, payload: Any) -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json; charset=utf-8")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length", "0"))
            body = self.rfile.read(length)
            headers = {key.lower(): value for key, value in self.headers.items()}
            path = urllib.parse.urlsplit(self.path).path
            request = Request(path, headers, body, _parse(path, headers, body))
            state.requests.append(request)
            mode = state.mode if len(state.requests) <= state.fail_first else "ok"
            if mode == "slow":
                state.release.wait(SLOW_SECONDS)
                mode = "ok"
            if mode == "http_500":
                self._answer(500, b"internal error")
            elif mode == "slack_error":
                self._answer(200, {"ok": False, "error": "channel_not_found"})
            else:
                request.answered_ok = True
                self._answer(200, self._ok(request))

        def _ok(self, request: Request) -> Any:
            n = len(state.requests)
            method = request.path.removeprefix("/api/")
            if method == "chat.postMessage":
                return {"ok": True, "channel": CHANNEL_ID, "ts": f"1000.{n:04d}"}
            if method == "files.getUploadURLExternal":
                return {
                    "ok": True,
                    "file_id": f"F{n}",
                    "upload_url": f"{state.url}/upload/F{n}",
                }
            if method == "files.completeUploadExternal":
                files = json.loads(request.params["files"])
                return {"ok": True, "files": [{"id": f["id"]} for f in files]}
            if request.path.startswith("/upload/"):
                return b"OK - uploaded"
            if request.path.startswith("/hooks/"):
                return b"ok"
            return {"ok": False, "error": "unknown_method"}

    return Handler


@pytest.fixture
def slack_server(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeSlack]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), BaseHTTPRequestHandler)
    host, port = server.server_address[:2]
    state = FakeSlack(url=f"http://{host!s}:{port}")
    server.RequestHandlerClass = _make_handler(state)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    monkeypatch.setenv("SLACK_API_URL", state.api_url)
    monkeypatch.delenv("SLACK_BOT_TOKEN", raising=False)
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(5)


def _closed_port_url() -> str:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def _train(
    tmp_path: Path,
    extension: Any,
    *,
    epochs: int = 3,
    iters_per_epoch: int = 2,
    fail_at: int | None = None,
) -> ExtensionsManager:
    """Train with the extension; reports ``loss = 0.5 * iteration`` (counted from 1).

    ``loss_tensor`` is the same value as a 0-d tensor.
    """
    manager = ExtensionsManager({}, {}, epochs, iters_per_epoch=iters_per_epoch, out_dir=tmp_path)
    manager.extend(extension)
    done = 0
    while not manager.stop_trigger:
        with manager.run_iteration():
            done += 1
            if done == fail_at:
                message = "boom"
                raise RuntimeError(message)
            reporting.report({"loss": 0.5 * done, "loss_tensor": torch.tensor(0.5 * done)})
    return manager


# -- Slack: messages, thread and uploads -------------------------------------------------


def test_posts_start_trigger_and_end_messages_in_a_thread(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    slack = Slack(
        "experiments",
        msg="Epoch {manager.epoch}: loss={loss_tensor:.2f} ({context})",
        start_msg="start: {default}",
        end_msg="{default}!",
        context="run-7",
        token=TOKEN,
    )
    _train(tmp_path, slack)
    posts = slack_server.posts()
    assert [p["text"] for p in posts[1:4]] == [
        "Epoch 1: loss=1.00 (run-7)",
        "Epoch 2: loss=2.00 (run-7)",
        "Epoch 3: loss=3.00 (run-7)",
    ]
    assert posts[0]["text"] == f"start: Training started (output directory: {tmp_path})"
    assert posts[4]["text"].startswith("Training finished: epoch 3, iteration 6")
    assert posts[4]["text"].endswith("!")
    assert len(posts) == 5
    assert all(p["channel"] == "experiments" for p in posts)
    assert "thread_ts" not in posts[0]
    root_ts = "1000.0001"  # the ts the server gave the first message
    assert [p["thread_ts"] for p in posts[1:]] == [root_ts] * 4
    assert all(r.headers["authorization"] == f"Bearer {TOKEN}" for r in slack_server.requests)


def test_a_resumed_run_posts_in_the_thread_of_the_run_it_continues(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    def run(state: dict[str, Any] | None, iterations: int) -> dict[str, Any]:
        manager = ExtensionsManager({}, {}, 3, iters_per_epoch=2, out_dir=tmp_path)
        manager.extend(Slack("experiments", msg="{default}", token=TOKEN))
        if state is not None:
            manager.load_state_dict(state)
        for _ in range(iterations):
            with manager.run_iteration():
                reporting.report({"loss": 1.0})
        return manager.state_dict()

    first = run(None, 2)  # one epoch, then the process is gone (no end message)
    buffer = io.BytesIO()
    torch.save(first, buffer)
    buffer.seek(0)
    run(torch.load(buffer, weights_only=True), 4)
    posts = slack_server.posts()
    root_ts = "1000.0001"
    assert [p["text"] for p in posts[:2]] == [
        f"Training started (output directory: {tmp_path})",
        "Epoch 1, iteration 2",
    ]
    assert posts[2]["text"] == (
        f"Training resumed at epoch 1, iteration 2 (output directory: {tmp_path})"
    )
    assert [p["text"] for p in posts[3:5]] == ["Epoch 2, iteration 4", "Epoch 3, iteration 6"]
    assert posts[5]["text"].startswith("Training finished: epoch 3, iteration 6")
    assert "thread_ts" not in posts[0]
    assert [p["thread_ts"] for p in posts[1:]] == [root_ts] * 5


def test_thread_false_posts_every_message_to_the_channel(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    _train(tmp_path, Slack("experiments", msg="{default}", thread=False, token=TOKEN))
    posts = slack_server.posts()
    assert len(posts) == 5
    assert not [p for p in posts if "thread_ts" in p]
    assert posts[1]["text"] == "Epoch 1, iteration 2"


def test_first_posted_message_roots_the_thread_without_start_message(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    slack = Slack("c", msg="e{manager.epoch}", start_msg=None, end_msg=None, token=TOKEN)
    _train(tmp_path, slack)
    posts = slack_server.posts()
    assert [p["text"] for p in posts] == ["e1", "e2", "e3"]
    assert "thread_ts" not in posts[0]
    assert [p["thread_ts"] for p in posts[1:]] == ["1000.0001", "1000.0001"]


def test_callable_messages_get_manager_context_and_error(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    def msg(manager: Any, context: Any) -> str | None:
        return None if manager.epoch == 1 else f"{context['name']} epoch {manager.epoch}"

    def error_msg(manager: Any, context: Any, error: BaseException) -> str:
        return f"{context['name']} failed: {error!r}"

    slack = Slack(
        "c",
        msg,
        start_msg=lambda manager, context: f"hello {context['name']}",
        error_msg=error_msg,
        context={"name": "exp"},
        token=TOKEN,
    )
    with pytest.raises(RuntimeError, match="boom"):
        _train(tmp_path, slack, fail_at=5)
    # Epoch 1's message is skipped (None); the failure comes in epoch 3; no end message.
    assert slack_server.texts() == [
        "hello exp",
        "exp epoch 2",
        "exp failed: RuntimeError('boom')",
    ]


def test_error_message_replaces_the_end_message(slack_server: FakeSlack, tmp_path: Path) -> None:
    slack = Slack("c", error_msg="{default} | {error} | {context}", context=7, token=TOKEN)
    with pytest.raises(RuntimeError, match="boom"):
        _train(tmp_path, slack, fail_at=3)
    posts = slack_server.posts()
    assert len(posts) == 2
    assert posts[1]["text"] == "Training failed at iteration 2: RuntimeError: boom | boom | 7"
    assert posts[1]["thread_ts"] == "1000.0001"


def test_uploads_formatted_files_from_out_dir_into_the_thread(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    (tmp_path / "stats_2.txt").write_bytes(b"epoch two statistics\n")
    (tmp_path / "plot.bin").write_bytes(bytes(range(256)))
    slack = Slack(
        "experiments",
        msg="{default}",
        filenames=["stats_{manager.epoch}.txt", "plot.bin"],
        upload_trigger=(2, "epoch"),
        token=TOKEN,
    )
    _train(tmp_path, slack)
    paths = [r.path for r in slack_server.requests]
    get_urls = [r for r in slack_server.requests if r.path == "/api/files.getUploadURLExternal"]
    assert [(r.params["filename"], r.params["length"]) for r in get_urls] == [
        ("stats_2.txt", "21"),
        ("plot.bin", "256"),
    ]
    uploads = [r for r in slack_server.requests if r.path.startswith("/upload/")]
    assert [r.body for r in uploads] == [b"epoch two statistics\n", bytes(range(256))]
    (complete,) = [
        r for r in slack_server.requests if r.path == "/api/files.completeUploadExternal"
    ]
    assert complete.params["channel_id"] == CHANNEL_ID  # the ID Slack answered with
    assert complete.params["thread_ts"] == "1000.0001"
    assert [f["id"] for f in json.loads(complete.params["files"])] == [
        uploads[0].path.removeprefix("/upload/"),
        uploads[1].path.removeprefix("/upload/"),
    ]
    # Uploaded once, right after epoch 2's message.
    epoch2 = paths.index("/api/chat.postMessage", paths.index("/api/chat.postMessage") + 2)
    assert paths[epoch2 + 1] == "/api/files.getUploadURLExternal"
    assert slack_server.texts()[2] == "Epoch 2, iteration 4"


def test_filenames_callable_and_missing_file_warns_once(
    slack_server: FakeSlack, tmp_path: Path
) -> None:
    calls: list[int] = []

    def filenames(manager: Any, context: Any) -> list[str]:
        calls.append(manager.epoch)
        return [str(tmp_path / "missing.txt")]

    slack = Slack("c", filenames=filenames, token=TOKEN)
    with pytest.warns(RuntimeWarning, match="could not upload files") as record:
        manager = _train(tmp_path, slack)
    assert len(record) == 1
    assert calls == [1, 2, 3]
    assert manager.stop_trigger
    assert len(slack_server.posts()) == 2  # start and end still posted


def test_relative_filename_missing_from_out_dir_is_read_from_working_directory(
    slack_server: FakeSlack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    out, cwd = tmp_path / "out", tmp_path / "cwd"
    out.mkdir()
    cwd.mkdir()
    (out / "both.txt").write_bytes(b"from out")
    (cwd / "both.txt").write_bytes(b"from cwd")
    (cwd / "only_cwd.txt").write_bytes(b"cwd only")
    monkeypatch.chdir(cwd)
    slack = Slack("c", filenames=["both.txt", "only_cwd.txt"], thread=False, token=TOKEN)
    _train(out, slack, epochs=1)
    uploads = [r.body for r in slack_server.requests if r.path.startswith("/upload/")]
    assert uploads == [b"from out", b"cwd only"]
    (complete,) = [
        r for r in slack_server.requests if r.path == "/api/files.completeUploadExternal"
    ]
    assert "thread_ts" not in complete.params


# -- SlackWebhook ---------------------------------------------------------------------------


def test_webhook_posts_json_text(slack_server: FakeSlack, tmp_path: Path) -> None:
    hook = SlackWebhook(slack_server.webhook_url, msg="loss {loss}", end_msg=None, context=None)
    _train(tmp_path, hook, epochs=2)
    requests = [r for r in slack_server.requests if r.path.startswith("/hooks/")]
    assert [r.headers["content-type"] for r in requests] == ["application/json"] * 3
    assert [json.loads(r.body) for r in requests] == [
        {"text": f"Training started (output directory: {tmp_path})"},
        {"text": "loss 1.0"},
        {"text": "loss 2.0"},
    ]


def test_webhook_error_message(slack_server: FakeSlack, tmp_path: Path) -> None:
    hook = SlackWebhook(slack_server.webhook_url, start_msg=None, error_msg="x {error}")
    with pytest.raises(RuntimeError):
        _train(tmp_path, hook, fail_at=1)
    assert slack_server.webhook_texts() == ["x boom"]


# -- Failures warn once and never stop training ------------------------------------------------


def _slack(server: FakeSlack, monkeypatch: pytest.MonkeyPatch, url: str | None) -> Slack:
    if url is not None:
        monkeypatch.setenv("SLACK_API_URL", url + "/api/")
    return Slack("c", msg="{default}", token=TOKEN)


def _webhook(server: FakeSlack, monkeypatch: pytest.MonkeyPatch, url: str | None) -> SlackWebhook:
    return SlackWebhook((url or server.url) + "/hooks/x", msg="{default}")


FACTORIES: dict[str, Callable[[FakeSlack, pytest.MonkeyPatch, str | None], Any]] = {
    "slack": _slack,
    "webhook": _webhook,
}


FAILURES = {
    "down": "could not post the start message: .*(refused|URLError|Connection)",
    "slow": "could not post the start message: .*(timed out|Timeout)",
    "http_500": "could not post the start message: .*(500|non-JSON)",
    "slack_error": "could not post the start message: .*channel_not_found",
}


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        ("slack", "down"),
        ("slack", "slow"),
        ("slack", "http_500"),
        ("slack", "slack_error"),  # HTTP 200 with {"ok": false}
        ("webhook", "down"),
        ("webhook", "slow"),
        ("webhook", "http_500"),
    ],
)
def test_failing_server_warns_once_and_training_completes(
    slack_server: FakeSlack,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    kind: str,
    failure: str,
) -> None:
    match = "(?s)" + FAILURES[failure]
    url = _closed_port_url() if failure == "down" else None
    slack_server.mode = failure
    slack_server.fail_first = 10**6
    extension = FACTORIES[kind](slack_server, monkeypatch, url)
    extension.timeout = 0.2
    with pytest.warns(RuntimeWarning, match=match) as record:
        manager = _train(tmp_path, extension)
    assert len(record) == 1, [str(w.message) for w in record]
    assert manager.stop_trigger and manager.iteration == 6
    expected_requests = 0 if failure == "down" else 5  # start, 3 epochs, end: all tried
    assert len(slack_server.requests) == expected_requests


@pytest.mark.parametrize("kind", sorted(FACTORIES))
def test_posts_resume_after_the_server_recovers(
    slack_server: FakeSlack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kind: str
) -> None:
    slack_server.mode = "http_500"
    slack_server.fail_first = 2
    extension = FACTORIES[kind](slack_server, monkeypatch, None)
    with pytest.warns(RuntimeWarning, match="could not post the start message") as record:
        _train(tmp_path, extension)
    assert len(record) == 1
    texts = slack_server.texts() if kind == "slack" else slack_server.webhook_texts()
    assert texts[0] == "Epoch 2, iteration 4"
    assert len(texts) == 3


# -- Construction ---------------------------------------------------------------------------------


def test_token_from_environment(
    slack_server: FakeSlack, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-from-env")
    _train(tmp_path, Slack("c", end_msg=None), epochs=1)
    (request,) = slack_server.requests
    assert request.headers["authorization"] == "Bearer xoxb-from-env"


def test_missing_token_names_the_environment_variable(slack_server: FakeSlack) -> None:
    with pytest.raises(RuntimeError, match="SLACK_BOT_TOKEN"):
        Slack("c")


def test_missing_slack_sdk_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "slack_sdk", None)
    with pytest.raises(ImportError, match=r'pip install "ppe-training\[slack\]"'):
        Slack("c", token=TOKEN)


@pytest.mark.parametrize("bad", [42, ["not a message"]])
def test_rejects_a_message_that_is_not_a_string_or_callable(bad: Any) -> None:
    with pytest.raises(TypeError, match="msg must be a format string"):
        SlackWebhook("http://127.0.0.1:9/hook", bad)


def test_signatures_match_ppe() -> None:
    parameters = inspect.signature(Slack).parameters.values()
    assert [(p.name, p.default) for p in parameters] == [
        ("channel", inspect.Parameter.empty),
        ("msg", None),
        ("start_msg", "{default}"),
        ("end_msg", "{default}"),
        ("error_msg", "{default}"),
        ("thread", True),
        ("filenames", None),
        ("upload_trigger", None),
        ("context", None),
        ("token", None),
    ]
    assert next(p.name for p in parameters if p.kind is p.KEYWORD_ONLY) == "start_msg"
    assert [(p.name, p.default) for p in inspect.signature(SlackWebhook).parameters.values()] == [
        ("url", inspect.Parameter.empty),
        ("msg", None),
        ("start_msg", "{default}"),
        ("end_msg", "{default}"),
        ("error_msg", "{default}"),
        ("context", None),
    ]
