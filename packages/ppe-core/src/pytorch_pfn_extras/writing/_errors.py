"""Failures of background writes: kept until the writer is synchronised, and
carried across process boundaries with their type, message and traceback."""

from __future__ import annotations

import importlib
import pickle
import threading
import traceback
from typing import Any

__all__ = ["EncodedError", "Failures", "RemoteTraceback", "decode_exception", "encode_exception"]

# (pickled exception or None, module, qualname, str(exc), formatted traceback)
EncodedError = tuple[bytes | None, str, str, str, str]


class RemoteTraceback(Exception):
    """The traceback of an exception raised in a writer's worker process.

    Set as the ``__cause__`` of the re-raised exception, so that the report
    shows where the worker failed.
    """

    def __init__(self, text: str) -> None:
        super().__init__(text)
        self.text = text

    def __str__(self) -> str:
        return f"\n\nTraceback in the writer process:\n{self.text}"


def encode_exception(exc: BaseException) -> EncodedError:
    """Describe ``exc`` in a form that always pickles."""
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    payload: bytes | None
    try:
        payload = pickle.dumps(exc)
        pickle.loads(payload)
    except Exception:
        payload = None
    cls = type(exc)
    return (payload, cls.__module__, cls.__qualname__, str(exc), text)


def _rebuild(module: str, qualname: str, message: str) -> BaseException:
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:
        obj = None
    if isinstance(obj, type) and issubclass(obj, BaseException):
        exc = obj.__new__(obj)
        exc.args = (message,)
        return exc
    return RuntimeError(f"{module}.{qualname}: {message}")


def decode_exception(encoded: EncodedError) -> BaseException:
    """Rebuild the exception described by :func:`encode_exception`."""
    payload, module, qualname, message, text = encoded
    exc: BaseException | None = None
    if payload is not None:
        try:
            exc = pickle.loads(payload)
        except Exception:
            exc = None
    if not isinstance(exc, BaseException):
        exc = _rebuild(module, qualname, message)
    exc.__cause__ = RemoteTraceback(text)
    return exc


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)`` where available (Python 3.11+)."""
    adder = getattr(exc, "add_note", None)
    if adder is not None:
        adder(note)


class Failures:
    """The first failure of background writes, raised at the next sync point."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._first: BaseException | None = None
        self._more = 0

    def add(self, exc: BaseException) -> None:
        with self._lock:
            if self._first is None:
                self._first = exc
            else:
                self._more += 1

    def raise_pending(self) -> None:
        """Raise the first recorded failure (once), noting how many followed."""
        if self._first is None:
            return
        with self._lock:
            exc, more = self._first, self._more
            self._first, self._more = None, 0
        if exc is None:
            return
        if more:
            add_note(exc, f"{more} later write(s) of the same writer failed too")
        raise exc
