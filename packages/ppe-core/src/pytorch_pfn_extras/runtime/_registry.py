"""The registry that maps device types to runtime classes."""

from __future__ import annotations

import torch

from pytorch_pfn_extras.runtime._base import BaseRuntime, type_name
from pytorch_pfn_extras.runtime._pytorch import PyTorchRuntime


def device_type_of(device: str | torch.device) -> str:
    """Return the device type of a device spec: the part before ``':'``."""
    if isinstance(device, torch.device):
        return device.type
    if isinstance(device, str):
        return device.partition(":")[0]
    message = f"device must be a str or torch.device, got {type_name(device)}"
    raise TypeError(message)


class _RuntimeRegistry:
    """Maps device types (``"cuda"``, ``"my_device"``) to runtime classes.

    Users only call ``runtime_registry.register``; ``ppe.to`` does the lookup.
    Device types without a registered class use ``fallback_class``.
    """

    def __init__(self, fallback_class: type[BaseRuntime]) -> None:
        self._runtimes: dict[str, type[BaseRuntime]] = {}
        self._fallback_class = fallback_class

    def register(self, device_type: str, runtime_class: type[BaseRuntime]) -> None:
        """Register ``runtime_class`` for every device of type ``device_type``.

        Registering a device type again replaces its class.

        Args:
            device_type: The device type, without an index (``"my_device"``,
                which then serves ``"my_device:0"``, ``"my_device:1"``...).
            runtime_class: A subclass of ``ppe.runtime.BaseRuntime``.

        Raises:
            TypeError: ``runtime_class`` is not a ``BaseRuntime`` subclass.
            ValueError: ``device_type`` is empty or contains ``':'``.

        Example:
            >>> ppe.runtime.runtime_registry.register("my_device", MyRuntime)
        """
        if not isinstance(device_type, str) or not device_type or ":" in device_type:
            message = f"device_type must be a non-empty device type without ':' (like 'cuda'), got {device_type!r}"
            raise ValueError(message)
        if not (isinstance(runtime_class, type) and issubclass(runtime_class, BaseRuntime)):
            message = f"runtime_class must be a subclass of BaseRuntime, got {runtime_class!r}"
            raise TypeError(message)
        self._runtimes[device_type] = runtime_class

    def get_runtime_class_for_device_spec(self, device: str | torch.device) -> type[BaseRuntime]:
        """Return the runtime class for ``device`` (looked up by its device type).

        Args:
            device: A device spec such as ``"cuda:0"`` or ``torch.device("cpu")``.

        Returns:
            The registered class, or ``PyTorchRuntime`` for unregistered types.
        """
        return self._runtimes.get(device_type_of(device), self._fallback_class)


runtime_registry = _RuntimeRegistry(PyTorchRuntime)
"""The global registry that ``ppe.to`` uses to choose a runtime class."""
