"""The tensors that go into and come out of an exported model."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

import torch


def _flat_tensors(value: Any) -> list[torch.Tensor]:
    """The tensors of a model input (a tensor, or tuples/lists of them), depth first."""
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for item in value for t in _flat_tensors(item)]


class ModelInputs(NamedTuple):
    """The positional and keyword inputs a model is called with, and their ONNX names.

    An input is a tensor or a tuple/list of inputs (a model taking a pair as one argument); the
    exporter makes one graph input per tensor, depth first.
    """

    args: tuple[Any, ...]
    kwargs: dict[str, Any]

    def names(self, given: Sequence[str] | None) -> list[str]:
        """The ONNX input names: ``given``, else ``input_i`` for the positional tensors and
        the keyword for a keyword tensor (``keyword_j`` for the tensors of a keyword tuple)."""
        if given is not None:
            return list(given)
        names = [f"input_{i}" for i in range(len(_flat_tensors(self.args)))]
        for key, value in self.kwargs.items():
            if isinstance(value, torch.Tensor):
                names.append(key)
            else:
                names += [f"{key}_{j}" for j in range(len(_flat_tensors(value)))]
        return names

    def tensors(self) -> list[torch.Tensor]:
        """The input tensors in the order of the graph inputs."""
        return _flat_tensors(self.args) + _flat_tensors(list(self.kwargs.values()))


def _checked(value: Any, where: str) -> Any:
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and not hasattr(value, "_fields"):
        return type(value)(_checked(v, f"{where}[{i}]") for i, v in enumerate(value))
    message = (
        f"ONNX export takes tensors (or tuples/lists of them) as model inputs, got "
        f"{type(value).__name__} for {where}; pass tensors only (or make the value a constant "
        "of the model)"
    )
    raise TypeError(message)


def _signature_order(model: Any, keywords: dict[str, Any]) -> dict[str, Any]:
    """``keywords`` in the order of ``model.forward``'s parameters, as the exporter passes them
    (the keywords that it does not name last)."""
    try:
        parameters = list(inspect.signature(model.forward).parameters)
    except (AttributeError, TypeError, ValueError):
        return keywords
    ordered = {k: keywords[k] for k in parameters if k in keywords}
    ordered.update((k, v) for k, v in keywords.items() if k not in ordered)
    return ordered


def model_inputs(args: Any, kwargs: Mapping[str, Any] | None, model: Any = None) -> ModelInputs:
    """Split ``args`` (a tensor, or a tuple/list of inputs that may end with a dict of keyword
    inputs, as torch.onnx.export accepts) and ``kwargs`` into checked inputs; the keyword inputs
    in the order of ``model.forward``'s parameters."""
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
    if model is not None:
        keywords = _signature_order(model, keywords)
    checked_args = tuple(_checked(v, f"input {i}") for i, v in enumerate(positional))
    checked_kwargs = {k: _checked(v, f"keyword input {k!r}") for k, v in keywords.items()}
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


def returned_output(output: Any) -> Any:
    """What ``return_output=True`` returns: a tensor output as it is, any other output as the
    flat list of its tensors (PPE 0.9's)."""
    return output if isinstance(output, torch.Tensor) else flatten_outputs(output)


def detached(value: Any) -> Any:
    """``value`` with every tensor detached, in tuples, lists, named tuples and dict values
    (nested), each container of the same type."""
    if isinstance(value, torch.Tensor):
        return value.detach()
    if isinstance(value, tuple):
        items = [detached(v) for v in value]
        return type(value)(*items) if hasattr(value, "_fields") else type(value)(items)
    if isinstance(value, list):
        return type(value)(detached(v) for v in value)
    if isinstance(value, dict):
        result = copy.copy(value)  # keeps the type and state of dict subclasses (defaultdict)
        for key, item in value.items():
            result[key] = detached(item)
        return result
    return value
