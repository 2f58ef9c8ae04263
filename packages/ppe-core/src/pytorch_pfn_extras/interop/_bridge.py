"""Plugin hook through which other distributions handle non-NumPy arrays and devices.

ppe-core converts NumPy arrays and CPU tensors itself. Anything else (CuPy
arrays, CUDA tensors) is handed to an *array bridge*. Bridges come from two
places, both consulted only when such an object is met:

* `register_bridge` (explicit, tried first, in registration order);
* the entry point group `BRIDGE_ENTRY_POINT_GROUP`, read once, on the
  first lookup (sorted by entry point name). ``ppe-runtime-cuda`` declares its
  CuPy bridge there, so ppe-core never imports it by name.
"""

from __future__ import annotations

import threading
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

import torch

BRIDGE_ENTRY_POINT_GROUP = "pytorch_pfn_extras.interop_bridges"
"""Entry point group where distributions declare array bridges (zero-argument factories)."""

INSTALL_HINT = 'pip install "ppe-runtime-cuda[cupy]"'


@runtime_checkable
class ArrayBridge(Protocol):
    """Converts between ``torch.Tensor`` and one ndarray library other than NumPy.

    An entry point in `BRIDGE_ENTRY_POINT_GROUP` names a zero-argument
    callable (typically the bridge class) that returns an ``ArrayBridge``.
    """

    def accepts_array(self, obj: object) -> bool:
        """Return whether ``obj`` is an array of this bridge's library."""
        ...

    def accepts_device(self, device: torch.device) -> bool:
        """Return whether tensors on ``device`` convert to this bridge's arrays."""
        ...

    def from_ndarray(self, ndarray: Any) -> torch.Tensor:
        """Return a tensor sharing memory with ``ndarray`` (an accepted array)."""
        ...

    def as_ndarray(self, tensor: torch.Tensor) -> Any:
        """Return an array sharing memory with ``tensor`` (on an accepted device)."""
        ...

    def get_xp(self, obj: Any) -> ModuleType:
        """Return the array module for ``obj`` (an accepted array or ``torch.device``)."""
        ...


_lock = threading.RLock()  # re-entrant: a plugin may use interop while it loads
_registered: list[ArrayBridge] = []
_discovered: tuple[ArrayBridge, ...] | None = None
_active: tuple[ArrayBridge, ...] | None = None


def _load_entry_points() -> tuple[ArrayBridge, ...]:
    from importlib import metadata

    loaded: list[ArrayBridge] = []
    entry_points = sorted(
        metadata.entry_points(group=BRIDGE_ENTRY_POINT_GROUP), key=lambda ep: ep.name
    )
    for entry_point in entry_points:
        try:
            factory = entry_point.load()
            bridge = factory()
        except Exception as exc:
            message = (
                f"interop bridge {entry_point.name!r} = {entry_point.value!r} "
                f"(entry point group {BRIDGE_ENTRY_POINT_GROUP!r}) failed to load: {exc}"
            )
            raise ImportError(message) from exc
        if not isinstance(bridge, ArrayBridge):
            message = (
                f"interop bridge {entry_point.name!r} = {entry_point.value!r} returned "
                f"{type(bridge).__name__}, which does not implement ArrayBridge"
            )
            raise TypeError(message)
        loaded.append(bridge)
    return tuple(loaded)


def active_bridges() -> tuple[ArrayBridge, ...]:
    """Registered bridges, then those from entry points (loaded on first call)."""
    global _discovered, _active
    active = _active
    if active is not None:
        return active
    with _lock:
        if _discovered is None:
            _discovered = _load_entry_points()
        _active = (*_registered, *(b for b in _discovered if b not in _registered))
        return _active


def bridges() -> tuple[ArrayBridge, ...]:
    """Return the array bridges in the order they are tried.

    Explicitly registered bridges come first, then those declared in the
    `BRIDGE_ENTRY_POINT_GROUP` entry point group (loaded by this call if
    no conversion needed them yet).

    Example:
        >>> [type(b).__name__ for b in bridges()]  # with ppe-runtime-cuda installed
        ['CupyBridge']
    """
    return active_bridges()


def register_bridge(bridge: ArrayBridge) -> None:
    """Add a bridge, tried before those found through entry points.

    Useful where package metadata is unavailable (frozen applications) or to
    support another array library in-process.

    Args:
        bridge: An object implementing `ArrayBridge`.

    Raises:
        TypeError: ``bridge`` does not implement `ArrayBridge`.
    """
    global _active
    if not isinstance(bridge, ArrayBridge):
        message = (
            f"register_bridge() expects an ArrayBridge (accepts_array, accepts_device, "
            f"from_ndarray, as_ndarray, get_xp), got {type(bridge).__name__}"
        )
        raise TypeError(message)
    with _lock:
        if bridge not in _registered:
            _registered.append(bridge)
        _active = None


def unregister_bridge(bridge: ArrayBridge) -> None:
    """Remove a bridge added with `register_bridge`.

    Raises:
        ValueError: ``bridge`` was not registered.
    """
    global _active
    with _lock:
        if bridge not in _registered:
            message = f"unregister_bridge(): {bridge!r} is not a registered bridge"
            raise ValueError(message)
        _registered.remove(bridge)
        _active = None


def reload_bridges() -> None:
    """Forget the bridges loaded from entry points; the next lookup reads them again.

    Call it after installing ``ppe-runtime-cuda`` into a running interpreter.
    Bridges added with `register_bridge` stay.
    """
    global _discovered, _active
    with _lock:
        _discovered = None
        _active = None
