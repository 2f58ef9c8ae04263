"""``ppe.to`` and ``ppe.map``: the user-facing entry points of the runtime system."""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, TypeVar, overload

import torch

from pytorch_pfn_extras.runtime._base import BaseRuntime, map_outputs, type_name
from pytorch_pfn_extras.runtime._batch import call_with_batch
from pytorch_pfn_extras.runtime._code_block import CodeBlock, forward
from pytorch_pfn_extras.runtime._registry import runtime_registry
from pytorch_pfn_extras.runtime._tags import get_runtime, set_runtime

_ModuleT = TypeVar("_ModuleT", bound=torch.nn.Module)


@overload
def to(
    module_or_tensor: _ModuleT,
    device: str | torch.device,
    *,
    options: Mapping[str, Any] | None = None,
    runtime_class: type[BaseRuntime] | None = None,
    config: Mapping[str, Any] | None = None,
) -> _ModuleT: ...


@overload
def to(
    module_or_tensor: torch.Tensor,
    device: str | torch.device,
    *,
    options: Mapping[str, Any] | None = None,
    runtime_class: type[BaseRuntime] | None = None,
    config: Mapping[str, Any] | None = None,
) -> torch.Tensor: ...


def to(
    module_or_tensor: torch.nn.Module | torch.Tensor,
    device: str | torch.device,
    *,
    options: Mapping[str, Any] | None = None,
    runtime_class: type[BaseRuntime] | None = None,
    config: Mapping[str, Any] | None = None,
) -> torch.nn.Module | torch.Tensor:
    """Move a module or a tensor to a device, through the device's runtime.

    The runtime class is looked up in ``ppe.runtime.runtime_registry`` by the
    device type (``"cuda:0"`` -> ``"cuda"``; unregistered types use
    ``PyTorchRuntime``) unless ``runtime_class`` is given. For a module, one
    runtime is created and every submodule is tagged with it: its
    ``_ppe_runtime`` attribute is the runtime (``ppe.runtime.get_runtime`` reads
    it). The tag is not part of the module's state: state dicts do not contain
    it, and pickled or deep-copied modules come back untagged.

    Args:
        module_or_tensor: The module or tensor to move.
        device: The destination: a ``torch.device``, or a string such as
            ``"cuda:0"`` or a registered custom device name.
        options: Options for the runtime (see ``PyTorchRuntime``).
        runtime_class: The runtime class to use instead of the registered one.
        config: Deprecated alias of ``options``, kept for code written for PPE;
            using it emits a ``DeprecationWarning``.

    Returns:
        The moved module (the same object for PyTorch devices) or tensor.

    Raises:
        ValueError: ``module_or_tensor`` is neither a module nor a tensor, or
            the runtime rejects the device or the options.
        TypeError: ``runtime_class`` is not a ``BaseRuntime`` subclass, or both
            ``options`` and ``config`` are given.

    Example:
        >>> model = ppe.to(model, "cuda:0", options={"autocast": True})
        >>> x = ppe.to(x, "cuda:0")
    """
    if config is not None:
        if options is not None:
            message = (
                "ppe.to() got both options and config; config is the deprecated alias of "
                "options: pass only options"
            )
            raise TypeError(message)
        warnings.warn(
            "ppe.to(config=...) is deprecated; use ppe.to(options=...)",
            DeprecationWarning,
            stacklevel=2,
        )
        options = config
    if not isinstance(module_or_tensor, (torch.nn.Module, torch.Tensor)):
        message = f"ppe.to() expects a torch.nn.Module or a torch.Tensor, got {type_name(module_or_tensor)}"
        raise ValueError(message)
    if runtime_class is None:
        runtime_class = runtime_registry.get_runtime_class_for_device_spec(device)
    elif not (isinstance(runtime_class, type) and issubclass(runtime_class, BaseRuntime)):
        message = f"runtime_class must be a subclass of BaseRuntime, got {runtime_class!r}"
        raise TypeError(message)
    runtime = runtime_class(device, {} if options is None else options)
    if isinstance(module_or_tensor, torch.Tensor):
        return runtime.move_tensor(module_or_tensor)
    _tag_all(module_or_tensor, runtime)
    moved = runtime.move_module(module_or_tensor)
    if moved is None:
        return module_or_tensor
    if moved is not module_or_tensor:
        _tag_all(moved, runtime)
    return moved


def _tag_all(module: torch.nn.Module, runtime: BaseRuntime) -> None:
    for submodule in module.modules():
        set_runtime(submodule, runtime)


def map(
    func: Callable[..., Any],
    iterable: Iterable[Any],
    out_keys: Iterable[str] | str | None = None,
    device: str | torch.device = "cpu",
) -> Iterator[Any]:
    """Apply ``func`` to every item of ``iterable``, through its module's runtime.

    ``func`` is a module moved with ``ppe.to`` (run as ``forward(func)``), a
    CodeBlock, a bound method of such a module (``model.predict``) or any other
    callable. Modules, CodeBlocks and methods of tagged modules run through the
    module's runtime (``runtime.map``): it moves each batch to the module's
    device, and a runtime for an asynchronous device can keep several batches
    in flight. Other callables run one item at a time, with the batches as
    given. Each item is passed the way a CodeBlock passes its batch: a dict as
    keyword arguments, a tuple or list as positional arguments, anything else
    as the only argument.

    Args:
        func: The module, CodeBlock, method or callable to apply.
        iterable: The batches.
        out_keys: Keys of the outputs to return; ``None`` returns whole outputs.
        device: The device the returned tensors are moved to.

    Returns:
        A lazy iterator over the outputs.

    Raises:
        ValueError: ``func`` is a module, or a method of a module, that was not
            moved with ``ppe.to``.
        TypeError: ``func`` is not callable.

    Example:
        >>> for out in ppe.map(model, loader, out_keys=["y"]):
        ...     predictions.append(out["y"])
        >>> embeddings = list(ppe.map(model.embed, loader))
    """
    if isinstance(func, CodeBlock):
        block = func
    elif isinstance(func, torch.nn.Module):
        block = forward(func)
    elif inspect.ismethod(func) and isinstance(func.__self__, torch.nn.Module):
        owner = func.__self__
        runtime = get_runtime(owner)
        if runtime is None:
            message = (
                f"ppe.map() needs the module of {func.__qualname__}() moved with "
                f"ppe.to(module, device) first; this {type_name(owner)} has no runtime"
            )
            raise ValueError(message)
        block = CodeBlock(func, [], False, None, None, {}, runtime)
    elif callable(func):
        return map_outputs(functools.partial(call_with_batch, func), iterable, out_keys, device)
    else:
        message = (
            f"ppe.map() expects a callable, a torch.nn.Module or a CodeBlock, got {type_name(func)}"
        )
        raise TypeError(message)
    return block.runtime.map(block, iterable, out_keys, device)
