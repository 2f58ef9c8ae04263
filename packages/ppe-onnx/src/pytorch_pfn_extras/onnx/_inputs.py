"""The tensors that go into and come out of an exported model."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch


class ModelInputs(NamedTuple):
    """The positional and keyword tensors a model is called with, and their ONNX names."""

    args: tuple[torch.Tensor, ...]
    kwargs: dict[str, torch.Tensor]

    def names(self, given: Sequence[str] | None) -> list[str]:
        """The ONNX input names: ``given``, else ``input_i`` for positional ones and the
        keywords for keyword ones."""
        if given is not None:
            return list(given)
        return [f"input_{i}" for i in range(len(self.args))] + list(self.kwargs)

    def tensors(self) -> list[torch.Tensor]:
        return [*self.args, *self.kwargs.values()]


def _check_tensor(value: Any, where: str) -> torch.Tensor:
    if not isinstance(value, torch.Tensor):
        message = (
            f"ONNX export takes tensors as model inputs, got {type(value).__name__} for {where}; "
            "pass tensors only (or make the value a constant of the model)"
        )
        raise TypeError(message)
    return value


def model_inputs(args: Any, kwargs: Mapping[str, Any] | None) -> ModelInputs:
    """Split ``args`` (a tensor, or a tuple/list of tensors that may end with a dict of keyword
    inputs, as torch.onnx.export accepts) and ``kwargs`` into checked tensors."""
    if isinstance(args, torch.Tensor):
        positional: list[Any] = [args]
        keywords: dict[str, Any] = {}
    elif isinstance(args, (tuple, list)):
        positional = list(args)
        keywords = {}
        if positional and isinstance(positional[-1], Mapping):
            keywords = dict(positional.pop())
    else:
        positional, keywords = [args], {}
    keywords.update(kwargs or {})
    checked_args = tuple(_check_tensor(v, f"input {i}") for i, v in enumerate(positional))
    checked_kwargs = {k: _check_tensor(v, f"keyword input {k!r}") for k, v in keywords.items()}
    return ModelInputs(checked_args, checked_kwargs)


def flatten_outputs(output: Any) -> list[torch.Tensor]:
    """The tensors of a model's output, in the order the exporter gives them."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, (tuple, list)):
        return [t for item in output for t in flatten_outputs(item)]
    if isinstance(output, Mapping):
        return [t for item in output.values() for t in flatten_outputs(item)]
    if output is None:
        return []
    message = f"model outputs must be tensors (or tuples, lists, dicts of them), got {type(output)}"
    raise TypeError(message)
