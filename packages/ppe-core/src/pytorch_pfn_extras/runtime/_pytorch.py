"""``PyTorchRuntime``: the runtime of every device PyTorch supports natively."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch

from pytorch_pfn_extras.runtime._base import BaseRuntime, type_name
from pytorch_pfn_extras.runtime._batch import call_with_batch, move_to

if TYPE_CHECKING:
    from pytorch_pfn_extras.runtime._code_block import CodeBlock

_OPTIONS = ("autocast", "grad_scaler")
_NO_AUTOCAST: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


class PyTorchRuntime(BaseRuntime):
    """A collection of callback functions for the devices PyTorch supports.

    Options are validated when the runtime is created (by ``ppe.to``), so an
    AMP request the device cannot honour fails there, not in the middle of a
    training run.

    Args:
        device_spec: The device, such as ``"cpu"``, ``"cuda:0"`` or a
            ``torch.device``.
        options: The configuration options:

            * ``"autocast"`` (bool or dict): ``True`` runs CodeBlocks under
              ``torch.autocast`` for the runtime's device type with its default
              dtype (``float16`` on CUDA, ``bfloat16`` on CPU). A dict is passed
              to ``torch.autocast``; its ``device_type`` defaults to the
              runtime's. Default ``False``.
            * ``"grad_scaler"`` (``torch.amp.GradScaler``): scales the losses
              CodeBlocks backpropagate from, and steps the optimizers through it.

    Raises:
        ValueError: An unknown option; ``device_spec`` is not a PyTorch device;
            autocast or the grad scaler cannot work on this device (for example
            CUDA autocast without CUDA, or a dtype the device's autocast does not
            support).
        TypeError: An option of the wrong type.

    Example:
        >>> scaler = torch.amp.GradScaler("cuda")
        >>> ppe.to(model, "cuda:0", options={"autocast": True, "grad_scaler": scaler})
    """

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any] | None) -> None:
        super().__init__(device_spec, options)
        unknown = sorted(set(self.options) - set(_OPTIONS))
        if unknown:
            message = f"unknown PyTorchRuntime option(s) {unknown!r}; supported options: {list(_OPTIONS)!r}"
            raise ValueError(message)
        self.device = _parse_device(device_spec)
        self._non_blocking = self.device.type != "cpu"
        self._autocast_kwargs = _autocast_kwargs(self.options.get("autocast", False), self.device)
        self._grad_scaler = _checked_grad_scaler(self.options.get("grad_scaler"), self.device)

    @property
    def grad_scaler(self) -> Any:
        """The ``"grad_scaler"`` option: a ``torch.amp.GradScaler``, or ``None``."""
        return self._grad_scaler

    def move_module(self, module: torch.nn.Module) -> torch.nn.Module:
        """Transfer the module to the device (``module.to(device)``)."""
        return module.to(self.device)

    def move_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Transfer the tensor to the device."""
        return tensor.to(self.device)

    def convert_batch(self, args: Any) -> Any:
        """Transfer every tensor of a (nested) dict, list or tuple to the device.

        Copies to an accelerator are non-blocking (they overlap with compute when
        the source is pinned memory); copies to the CPU are synchronous.
        """
        return move_to(args, self.device, self._non_blocking)

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """Return the context manager CodeBlocks run their forward pass under.

        Returns:
            A fresh ``torch.autocast`` built from the ``"autocast"`` option, or a
            no-op context when autocast is off.
        """
        if self._autocast_kwargs is None:
            return _NO_AUTOCAST
        return torch.autocast(**self._autocast_kwargs)

    def execute(self, code_block: CodeBlock, batch: Any) -> Any:
        """Run a CodeBlock: forward, and for update blocks backward and step.

        The batch is moved to the device, every optimizer's gradients are
        cleared, ``code_block.func`` runs under autocast (when enabled) with the
        batch (a dict as keyword arguments, a tuple/list as positional ones).
        If ``code_block.backprop``, the outputs named by ``backprop_from`` (by
        default the ``"loss"`` output, or the only output) are backpropagated,
        scaled by the grad scaler if one is set, and every optimizer steps
        (through the grad scaler, which is then updated).

        ``backprop_to`` names entries of a dict batch where backpropagation
        stops: the block sees them as detached leaf tensors, so nothing upstream
        (such as the model that produced them) is traversed or freed, and their
        gradients are accumulated into the given tensors' ``.grad`` (scaled like
        every gradient when a grad scaler is set). ``entry.backward(entry.grad)``
        then continues the backward pass upstream.

        Args:
            code_block: The block to run.
            batch: Its input.

        Returns:
            The outputs of ``code_block.func``.

        Raises:
            ValueError: Nothing to backpropagate from can be chosen, a named
                output or batch entry is missing, a loss is not a scalar tensor
                that requires grad, or a ``backprop_to`` entry is not a
                floating-point tensor.
        """
        stops: list[tuple[torch.Tensor, torch.Tensor]] = []
        if code_block.backprop and code_block.backprop_to is not None:
            batch, stops = _detach_entries(batch, code_block.backprop_to)
        batch = self.convert_batch(batch)
        optimizers = code_block.optimizers
        for optimizer in optimizers:
            optimizer.zero_grad()
        with self.autocast():
            outs = call_with_batch(code_block.func, batch)
        scaler = self._grad_scaler
        if code_block.backprop:
            losses = _losses(outs, code_block.backprop_from)
            if scaler is not None:
                losses = [scaler.scale(loss) for loss in losses]
            torch.autograd.backward(losses)
            for original, leaf in stops:
                _accumulate_grad(original, leaf.grad)
        if scaler is not None and code_block.backprop and optimizers:
            for optimizer in optimizers:
                scaler.step(optimizer)
            scaler.update()
        else:
            for optimizer in optimizers:
                optimizer.step()
        return outs


def _parse_device(device_spec: str | torch.device) -> torch.device:
    if isinstance(device_spec, torch.device):
        return device_spec
    try:
        return torch.device(device_spec)
    except RuntimeError as exc:
        message = (
            f"{device_spec!r} is not a PyTorch device and no runtime is registered for "
            f"device type {device_spec.partition(':')[0]!r}; register one with "
            f"ppe.runtime.runtime_registry.register(device_type, runtime_class) ({exc})"
        )
        raise ValueError(message) from exc


def _autocast_kwargs(value: Any, device: torch.device) -> dict[str, Any] | None:
    if value is None or value is False:
        return None
    if value is True:
        kwargs: dict[str, Any] = {"device_type": device.type}
    elif isinstance(value, Mapping):
        kwargs = {"device_type": device.type, **value}
    else:
        message = f"the 'autocast' option must be a bool or a dict of torch.autocast arguments, got {type_name(value)}"
        raise TypeError(message)
    if not kwargs.get("enabled", True):
        return None
    if kwargs["device_type"] != device.type:
        message = (
            f"autocast device_type {kwargs['device_type']!r} does not match the runtime's "
            f"device {str(device)!r}; autocast would have no effect on this module"
        )
        raise ValueError(message)
    # torch.autocast only warns and disables itself on an impossible request
    # (CUDA autocast without CUDA, float64 on CPU...); make that an error now.
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            torch.autocast(**kwargs)
        except (TypeError, RuntimeError, ValueError) as exc:
            message = f"invalid 'autocast' option {kwargs!r} for device {str(device)!r}: {exc}"
            raise ValueError(message) from exc
    if caught:
        # torch says it is disabling autocast; we refuse instead, so drop that part.
        reasons = " ".join(
            " ".join(str(warning.message).replace("Disabling autocast.", "").split())
            for warning in caught
        )
        message = f"autocast {kwargs!r} cannot be used on device {str(device)!r}: {reasons}"
        raise ValueError(message)
    return kwargs


def _checked_grad_scaler(scaler: Any, device: torch.device) -> Any:
    if scaler is None:
        return None
    missing = [
        name for name in ("scale", "step", "update") if not callable(getattr(scaler, name, None))
    ]
    if missing:
        message = (
            f"the 'grad_scaler' option must be a torch.amp.GradScaler, got {type_name(scaler)}"
        )
        raise TypeError(message)
    scaler_device = getattr(scaler, "_device", None)  # set by torch.amp.GradScaler
    if isinstance(scaler_device, str) and scaler_device != device.type:
        message = (
            f"grad_scaler was created for device type {scaler_device!r} but the runtime's device "
            f"is {str(device)!r}; create it with torch.amp.GradScaler({device.type!r})"
        )
        raise ValueError(message)
    return scaler


def _names(value: str | Sequence[str]) -> tuple[str, ...]:
    return (value,) if isinstance(value, str) else tuple(value)


def _losses(outs: Any, backprop_from: str | Sequence[str] | None) -> list[torch.Tensor]:
    if backprop_from is None:
        if isinstance(outs, torch.Tensor):
            return [_checked_loss("output", outs)]
        if isinstance(outs, Mapping):
            if "loss" in outs:
                return [_checked_loss("loss", outs["loss"])]
            if len(outs) == 1:
                ((name, value),) = outs.items()
                return [_checked_loss(name, value)]
            message = (
                f"cannot choose the output to backpropagate from: outputs {list(outs)!r} have no "
                f"'loss' entry; pass backprop_from=<key> to update_parameters()"
            )
            raise ValueError(message)
        if isinstance(outs, (tuple, list)) and len(outs) == 1:
            return [_checked_loss("output[0]", outs[0])]
        message = (
            f"cannot choose the output to backpropagate from in a {type_name(outs)}; return a "
            f"tensor or a dict with a 'loss' entry, or pass backprop_from=<key>"
        )
        raise ValueError(message)
    names = _names(backprop_from)
    if not isinstance(outs, Mapping):
        message = f"backprop_from={backprop_from!r} needs the block to return a dict, got {type_name(outs)}"
        raise ValueError(message)
    missing = [name for name in names if name not in outs]
    if missing:
        message = f"backprop_from names output(s) {missing!r} that the block did not return; outputs: {list(outs)!r}"
        raise ValueError(message)
    return [_checked_loss(name, outs[name]) for name in names]


def _checked_loss(name: str, value: Any) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        message = (
            f"cannot backpropagate from output {name!r}: expected a tensor, got {type_name(value)}"
        )
        raise ValueError(message)
    if value.numel() != 1:
        message = f"cannot backpropagate from output {name!r}: expected a scalar, got shape {tuple(value.shape)}"
        raise ValueError(message)
    if not value.requires_grad:
        message = (
            f"cannot backpropagate from output {name!r}: it does not require grad "
            f"(did the block run under torch.no_grad()?)"
        )
        raise ValueError(message)
    return value


def _detach_entries(
    batch: Any, backprop_to: str | Sequence[str]
) -> tuple[dict[str, Any], list[tuple[torch.Tensor, torch.Tensor]]]:
    if not isinstance(batch, Mapping):
        message = f"backprop_to={backprop_to!r} needs a dict batch, got {type_name(batch)}"
        raise ValueError(message)
    detached = dict(batch)
    stops: list[tuple[torch.Tensor, torch.Tensor]] = []
    for name in _names(backprop_to):
        if name not in batch:
            message = f"backprop_to={backprop_to!r}: the batch has no entry {name!r}; batch keys: {list(batch)!r}"
            raise ValueError(message)
        value = batch[name]
        if not isinstance(value, torch.Tensor) or not (
            value.is_floating_point() or value.is_complex()
        ):
            got = f"{value.dtype} tensor" if isinstance(value, torch.Tensor) else type_name(value)
            message = f"backprop_to={backprop_to!r}: batch entry {name!r} must be a floating-point tensor, got {got}"
            raise ValueError(message)
        leaf = value.detach().requires_grad_()
        detached[name] = leaf
        stops.append((value, leaf))
    return detached, stops


def _accumulate_grad(tensor: torch.Tensor, grad: torch.Tensor | None) -> None:
    if grad is None:  # the block did not use this entry
        return
    if tensor.is_leaf or tensor.retains_grad:
        current = tensor.grad
    else:
        # Reading .grad of a non-leaf warns (it is usually a mistake); here it is
        # where this function itself stores gradients.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            current = tensor.grad
    tensor.grad = grad if current is None else current + grad
