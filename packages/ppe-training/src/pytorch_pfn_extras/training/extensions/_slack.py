"""Slack and SlackWebhook: post the progress of training to Slack; a failing post never stops it."""

from __future__ import annotations

import json
import os
import types
import urllib.request
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from pytorch_pfn_extras.training._extension import PRIORITY_READER, Extension
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

Message: TypeAlias = "str | Callable[[ExtensionsManagerProtocol, Any], str | None] | None"
ErrorMessage: TypeAlias = (
    "str | Callable[[ExtensionsManagerProtocol, Any, BaseException], str | None] | None"
)
Filenames: TypeAlias = "Sequence[str] | Callable[[ExtensionsManagerProtocol, Any], Sequence[str]]"

TOKEN_ENV = "SLACK_BOT_TOKEN"
"""Environment variable read for the bot token when ``Slack(token=None)``."""
API_URL_ENV = "SLACK_API_URL"
"""Environment variable overriding the Slack Web API base URL (``https://slack.com/api/``)."""
_DEFAULT = "{default}"


def _format(template: str, manager: ExtensionsManagerProtocol, **names: Any) -> str:
    # Reported values first, so that ``manager``, ``default``, ``context`` and ``error``
    # always mean what the documentation says even if a key of the same name was reported.
    return template.format(**{**manager.observation, "manager": manager, **names})


class _Messenger(Extension):
    """What Slack and SlackWebhook share: the messages, their formatting, warn-once failures.

    Subclasses implement :meth:`_post`, which raises on any failure.
    """

    trigger: TriggerLike = (1, "epoch")
    priority = PRIORITY_READER
    timeout: float = 5.0
    """Seconds to wait for Slack's answer before the post counts as failed."""

    def __init__(
        self,
        msg: Message,
        start_msg: Message,
        end_msg: Message,
        error_msg: ErrorMessage,
        context: Any,
    ) -> None:
        for what, value in (
            ("msg", msg),
            ("start_msg", start_msg),
            ("end_msg", end_msg),
            ("error_msg", error_msg),
        ):
            if value is not None and not isinstance(value, str) and not callable(value):
                message = (
                    f"{type(self).__name__}: {what} must be a format string, a callable or "
                    f"None, got {value!r}"
                )
                raise TypeError(message)
        self._msg = msg
        self._start_msg = start_msg
        self._end_msg = end_msg
        self._error_msg = error_msg
        self._context = context
        self._warned = False
        self._failed_training = False

    def _post(self, text: str | None) -> None:
        raise NotImplementedError

    def _failsafe(self, action: Callable[[], None], what: str) -> None:
        """Run ``action``; on any error warn once (the first time only) and go on."""
        try:
            action()
        except Exception as error:
            if self._warned:
                return
            self._warned = True
            message = (
                f"{type(self).__name__} could not {what}: {type(error).__name__}: {error}. "
                "Training goes on; further failures of this extension are not reported."
            )
            warnings.warn(message, RuntimeWarning, stacklevel=3)

    def _send(
        self,
        manager: ExtensionsManagerProtocol,
        template: Message,
        default: str,
        what: str,
    ) -> None:
        if template is None:
            return

        def action() -> None:
            if isinstance(template, str):
                text: str | None = _format(
                    template, manager, default=default, context=self._context
                )
            else:
                text = template(manager, self._context)
            self._post(text)

        self._failsafe(action, what)

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Post the start message (``{default}`` says "resumed" in a resumed run)."""
        if manager.iteration:
            default = (
                f"Training resumed at epoch {manager.epoch}, iteration {manager.iteration} "
                f"(output directory: {manager.out})"
            )
        else:
            default = f"Training started (output directory: {manager.out})"
        self._send(manager, self._start_msg, default, "post the start message")

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Post the message of the trigger."""
        default = f"Epoch {manager.epoch}, iteration {manager.iteration}"
        self._send(manager, self._msg, default, "post a message")

    def on_error(
        self,
        manager: ExtensionsManagerProtocol,
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        """Post the error message (the end message is then not posted)."""
        self._failed_training = True
        template = self._error_msg
        if template is None:
            return

        def action() -> None:
            default = (
                f"Training failed at iteration {manager.iteration}: {type(exc).__name__}: {exc}"
            )
            if isinstance(template, str):
                text: str | None = _format(
                    template, manager, default=default, context=self._context, error=exc
                )
            else:
                text = template(manager, self._context, exc)
            self._post(text)

        self._failsafe(action, "post the error message")

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Post the end message, unless training failed."""
        if self._failed_training:
            return
        default = (
            f"Training finished: epoch {manager.epoch}, iteration {manager.iteration}, "
            f"{manager.elapsed_time:.1f} s"
        )
        self._send(manager, self._end_msg, default, "post the end message")


def _import_web_client() -> Any:
    try:
        from slack_sdk import WebClient
    except ImportError as error:
        message = 'Slack needs slack_sdk: pip install "ppe-training[slack]"'
        raise ImportError(message) from error
    return WebClient


class Slack(_Messenger):
    """An extension to communicate with Slack.

    It posts ``start_msg`` when training starts, ``msg`` when triggered (every epoch by
    default), ``end_msg`` when training finishes and ``error_msg`` when an iteration raises
    (the end message is then not posted). Each message is a format string, a callable
    returning a string, or ``None`` (nothing is posted on that event). A format string can
    use ``{manager}``, ``{default}`` (the default message), ``{context}``, ``{error}``
    (``error_msg`` only) and every reported value (``{val/loss:.3f}``). A callable is called
    with ``(manager, context)``, or ``(manager, context, error)`` for ``error_msg``; when it
    returns ``None`` nothing is posted.

    A post or upload that fails (Slack unreachable, slower than :attr:`timeout`, answering
    an error, a missing file, a message that cannot be formatted) warns once with a
    :class:`RuntimeWarning`; training goes on and later failures are silent. Nothing is
    retried.

    It needs ``slack_sdk`` and a bot token (``token`` or the ``SLACK_BOT_TOKEN``
    environment variable). The environment variable ``SLACK_API_URL``, read at the first
    post, replaces the Web API base URL (``https://slack.com/api/``), e.g. for a proxy or
    a test server.

    Args:
        channel: Channel name or ID to post to.
        msg: Message posted when the extension is triggered.
        start_msg: Message posted at the start of training.
        end_msg: Message posted at the end of training.
        error_msg: Message posted when an iteration raises.
        thread: Post every message after the first one as a reply in its thread.
        filenames: Files uploaded (into the thread, with ``thread``) when the extension is
            triggered: format strings like ``msg``, or a callable ``(manager, context)``
            returning the names. A relative name is looked up in the manager's output
            directory first, then in the working directory.
        upload_trigger: When to upload, checked each time the extension is triggered;
            every time when ``None``.
        context: Any object, passed to the messages.
        token: Slack bot token; ``SLACK_BOT_TOKEN`` when ``None``.

    Raises:
        ImportError: slack_sdk is not installed.
        RuntimeError: No token was given and ``SLACK_BOT_TOKEN`` is not set (PPE's type).

    Example:
        >>> manager.extend(extensions.Slack(
        ...     channel="experiment-progress",
        ...     msg="Epoch #{manager.epoch}: loss = {val/loss}",
        ...     end_msg="{default} \\n <@username> Check out the result!",
        ...     filenames=["statistics.png"],
        ...     upload_trigger=(max_epoch, "epoch"),
        ... ))
    """

    def __init__(
        self,
        channel: str,
        msg: Message = None,
        *,
        start_msg: Message = _DEFAULT,
        end_msg: Message = _DEFAULT,
        error_msg: ErrorMessage = _DEFAULT,
        thread: bool = True,
        filenames: Filenames | None = None,
        upload_trigger: TriggerLike = None,
        context: Any = None,
        token: str | None = None,
    ) -> None:
        super().__init__(msg, start_msg, end_msg, error_msg, context)
        self._web_client_class = _import_web_client()
        if token is None:
            token = os.environ.get(TOKEN_ENV)
        if not token:
            message = (
                f"Slack needs a bot token: pass token=... or set the {TOKEN_ENV} "
                "environment variable"
            )
            raise RuntimeError(message)
        if filenames is not None and (
            isinstance(filenames, str)
            or not (callable(filenames) or isinstance(filenames, Sequence))
        ):
            message = (
                f"Slack: filenames must be a list of file names or a callable, got {filenames!r}"
            )
            raise TypeError(message)
        self._channel = channel
        self._channel_id: str | None = None
        self._thread = thread
        self._thread_ts: str | None = None
        self._resumed = False  # the thread was restored by load_state_dict
        self._filenames = filenames
        self._upload_trigger: Trigger | None = (
            None if upload_trigger is None else get_trigger(upload_trigger)
        )
        self._token = token
        self._client: Any = None

    def _web_client(self) -> Any:
        if self._client is None:
            kwargs: dict[str, Any] = {"token": self._token, "timeout": self.timeout}
            base_url = os.environ.get(API_URL_ENV)
            if base_url:
                kwargs["base_url"] = base_url if base_url.endswith("/") else base_url + "/"
            # No retries: a slow or absent Slack must not hold training up twice as long.
            self._client = self._web_client_class(retry_handlers=[], **kwargs)
        return self._client

    def _post(self, text: str | None) -> None:
        if text is None:
            return
        kwargs: dict[str, Any] = {"channel": self._channel, "text": text}
        if self._thread and self._thread_ts is not None:
            kwargs["thread_ts"] = self._thread_ts
        response = self._web_client().chat_postMessage(**kwargs)
        self._channel_id = response.get("channel") or self._channel_id
        if self._thread and self._thread_ts is None:
            self._thread_ts = response.get("ts")

    def initialize(self, manager: ExtensionsManagerProtocol) -> None:
        """Post the start message (the thread's first message with ``thread``; in a run
        resumed from a snapshot, a reply in the thread of the run it continues)."""
        if not self._resumed:
            self._thread_ts = None
        super().initialize(manager)

    def __call__(self, manager: ExtensionsManagerProtocol) -> None:
        """Post the message of the trigger, then upload the files if it is their time."""
        super().__call__(manager)
        if self._filenames is None:
            return
        upload_trigger = self._upload_trigger
        if upload_trigger is not None and not upload_trigger(manager):
            return
        self._failsafe(lambda: self._upload(manager), "upload files")

    def _paths(self, manager: ExtensionsManagerProtocol) -> list[str]:
        filenames = self._filenames
        if callable(filenames):
            names = list(filenames(manager, self._context))
        else:
            names = [_format(name, manager, context=self._context) for name in filenames or ()]
        paths = []
        for name in names:
            in_out = os.path.join(manager.out, name)
            paths.append(in_out if os.path.exists(in_out) else name)
        return paths

    def _upload(self, manager: ExtensionsManagerProtocol) -> None:
        paths = self._paths(manager)
        if not paths:
            return
        kwargs: dict[str, Any] = {
            "file_uploads": [{"file": path, "filename": os.path.basename(path)} for path in paths],
            "channel": self._channel_id or self._channel,
        }
        if self._thread and self._thread_ts is not None:
            kwargs["thread_ts"] = self._thread_ts
        self._web_client().files_upload_v2(**kwargs)

    def state_dict(self) -> dict[str, Any]:
        """Return the thread (its ``ts`` and channel ID) and the state of the upload trigger."""
        state: dict[str, Any] = {"thread_ts": self._thread_ts, "channel_id": self._channel_id}
        if self._upload_trigger is not None:
            state["upload_trigger"] = self._upload_trigger.state_dict()
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`: a resumed run posts in the thread
        of the run it continues."""
        if self._upload_trigger is not None and "upload_trigger" in to_load:
            self._upload_trigger.load_state_dict(to_load["upload_trigger"])
        thread_ts = to_load.get("thread_ts")
        if thread_ts is not None:
            self._thread_ts = str(thread_ts)
            self._resumed = True
        channel_id = to_load.get("channel_id")
        if channel_id is not None:
            self._channel_id = str(channel_id)


class SlackWebhook(_Messenger):
    """An extension to communicate with Slack using an Incoming Webhook.

    The messages are those of :class:`Slack` (``start_msg``, ``msg``, ``end_msg``,
    ``error_msg``, formatted the same way), each sent as a JSON ``{"text": ...}`` POST to
    ``url`` with the standard library. A post that fails (no answer, no answer within
    :attr:`timeout`, an HTTP error, a message that cannot be formatted) warns once with a :class:`RuntimeWarning`; training
    goes on and later failures are silent.

    Args:
        url: Incoming webhook URL.
        msg: Message posted when the extension is triggered (every epoch by default).
        start_msg: Message posted at the start of training.
        end_msg: Message posted at the end of training.
        error_msg: Message posted when an iteration raises.
        context: Any object, passed to the messages.

    Example:
        >>> manager.extend(extensions.SlackWebhook(
        ...     url="https://hooks.slack.com/services/Txxxxx.....",
        ...     msg="Epoch #{manager.epoch}: loss = {val/loss}",
        ... ))
    """

    def __init__(
        self,
        url: str,
        msg: Message = None,
        *,
        start_msg: Message = _DEFAULT,
        end_msg: Message = _DEFAULT,
        error_msg: ErrorMessage = _DEFAULT,
        context: Any = None,
    ) -> None:
        super().__init__(msg, start_msg, end_msg, error_msg, context)
        if not isinstance(url, str) or not url:
            message = f"SlackWebhook: url must be a non-empty string, got {url!r}"
            raise ValueError(message)
        self._url = url

    def _post(self, text: str | None) -> None:
        if text is None:
            return
        request = urllib.request.Request(
            self._url,
            data=json.dumps({"text": text}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=self.timeout) as response:
            response.read()
