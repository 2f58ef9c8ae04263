"""CodeBlocks: device-agnostic descriptions of a step that a runtime executes."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

import torch

from pytorch_pfn_extras.runtime._base import BaseRuntime, type_name
from pytorch_pfn_extras.runtime._tags import get_runtime


@dataclasses.dataclass(eq=False)
class CodeBlock:
    """A step to run on a module's device: a forward pass, maybe with an update.

    Build CodeBlocks with ``forward`` and ``update_parameters``; calling one runs
    it through ``runtime.execute``, so the same code works on every device.

    Attributes:
        func: The function run on the batch (usually the module).
        optimizers: The optimizers stepped after the backward pass.
        backprop: Whether to backpropagate from the outputs.
        backprop_from: The output key(s) to backpropagate from; ``None`` picks the
            ``"loss"`` output, or the only output.
        backprop_to: The batch key(s) where backpropagation stops; ``None``
            backpropagates all the way.
        state: Free-form state for the runtime (compiled graphs, caches...).
        runtime: The runtime that executes the block.

    Example:
        >>> ppe.to(model, "cpu")
        >>> step = update_parameters(model, optimizer)
        >>> outs = step({"x": x, "t": t})  # forward, backward, optimizer step
    """

    func: Callable[..., Any]
    optimizers: list[torch.optim.Optimizer]
    backprop: bool
    backprop_from: str | tuple[str, ...] | None
    backprop_to: str | tuple[str, ...] | None
    state: dict[str, Any]
    runtime: BaseRuntime

    def __call__(self, inputs: Any) -> Any:
        """Execute the block on ``inputs`` (a batch) with its runtime.

        Args:
            inputs: The input: a dict is passed as keyword arguments, a tuple or
                list as positional arguments, anything else as the only argument.

        Returns:
            The outputs of ``func``.
        """
        return self.runtime.execute(self, inputs)

    def state_dict(self) -> dict[str, Any]:
        """Return the block's :attr:`state` (a shallow copy: what the runtime keeps there)."""
        return dict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Replace the block's :attr:`state` by ``state`` (from :meth:`state_dict`).

        Raises:
            TypeError: ``state`` is not a dict.
        """
        if not isinstance(state, dict):
            message = f"CodeBlock.load_state_dict expects a dict, got {type(state).__name__}"
            raise TypeError(message)
        self.state.clear()
        self.state.update(state)


def _as_code_block(block: Any, caller: str) -> CodeBlock:
    if isinstance(block, CodeBlock):
        return block
    if isinstance(block, torch.nn.Module):
        runtime = get_runtime(block)
        if runtime is None:
            message = (
                f"{caller}() needs a module moved with ppe.to(module, device) first; this "
                f"{type_name(block)} has no runtime"
            )
            raise ValueError(message)
        return CodeBlock(block, [], False, None, None, {}, runtime)
    message = f"{caller}() expects a torch.nn.Module or a CodeBlock, got {type_name(block)}"
    raise TypeError(message)


def _as_names(value: str | Sequence[str] | None, argument: str) -> str | tuple[str, ...] | None:
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Sequence) and value and all(isinstance(name, str) for name in value):
        return tuple(value)
    message = f"{argument} must be a key, a non-empty sequence of keys, or None; got {value!r}"
    raise TypeError(message)


def forward(block: torch.nn.Module | CodeBlock) -> CodeBlock:
    """Return a CodeBlock that only runs the forward pass of ``block``.

    Args:
        block: A module moved with ``ppe.to``, or a CodeBlock.

    Returns:
        A CodeBlock without backward pass or optimizers.

    Raises:
        ValueError: ``block`` is a module that was not moved with ``ppe.to``.
        TypeError: ``block`` is neither a module nor a CodeBlock.

    Example:
        >>> outs = forward(model)({"x": x})
    """
    base = _as_code_block(block, "forward")
    return CodeBlock(base.func, [], False, None, None, dict(base.state), base.runtime)


def update_parameters(
    block: torch.nn.Module | CodeBlock,
    optimizers: torch.optim.Optimizer | Sequence[torch.optim.Optimizer],
    backprop_from: str | Sequence[str] | None = None,
    backprop_to: str | Sequence[str] | None = None,
) -> CodeBlock:
    """Return a CodeBlock that runs forward, backward and the optimizer steps.

    Args:
        block: A module moved with ``ppe.to``, or a CodeBlock (its optimizers are
            kept, and ``optimizers`` added).
        optimizers: One optimizer or a sequence of them.
        backprop_from: The output key(s) to backpropagate from (their sum). By
            default the ``"loss"`` output, or the only output (or the output
            itself when it is a tensor).
        backprop_to: Key(s) of a dict batch where backpropagation stops: the
            block sees these tensors detached, so nothing upstream of them (such
            as the model that produced them) is traversed, and their gradients
            are accumulated into the given tensors' ``.grad``. Continue upstream
            later with ``tensor.backward(tensor.grad)``.

    Returns:
        The CodeBlock.

    Raises:
        ValueError: ``block`` is a module that was not moved with ``ppe.to``, or
            no optimizer was given.
        TypeError: ``block``, an optimizer or a key of the wrong type.

    Example:
        >>> ppe.to(model, "cpu")
        >>> step = update_parameters(model, optimizer)
        >>> for batch in loader:
        ...     outs = step(batch)
    """
    base = _as_code_block(block, "update_parameters")
    if isinstance(optimizers, torch.optim.Optimizer):
        new_optimizers = [optimizers]
    elif isinstance(optimizers, Sequence):
        new_optimizers = list(optimizers)
    else:
        message = f"optimizers must be an optimizer or a sequence of optimizers, got {type_name(optimizers)}"
        raise TypeError(message)
    if not new_optimizers:
        message = "update_parameters() needs at least one optimizer, got an empty sequence"
        raise ValueError(message)
    bad = [type_name(opt) for opt in new_optimizers if not isinstance(opt, torch.optim.Optimizer)]
    if bad:
        message = f"optimizers must be torch.optim.Optimizer instances, got {bad}"
        raise TypeError(message)
    from_names = _as_names(backprop_from, "backprop_from")
    to_names = _as_names(backprop_to, "backprop_to")
    return CodeBlock(
        func=base.func,
        optimizers=[*base.optimizers, *new_optimizers],
        backprop=True,
        backprop_from=base.backprop_from if from_names is None else from_names,
        backprop_to=base.backprop_to if to_names is None else to_names,
        state=dict(base.state),
        runtime=base.runtime,
    )
