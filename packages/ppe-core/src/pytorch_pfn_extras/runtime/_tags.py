"""The module -> runtime tag that ``ppe.to`` sets.

The tag is the ``_ppe_runtime`` attribute of every tagged module, as in the
published PPE: ``module._ppe_runtime`` is the runtime itself, and code that
assigns it directly is honoured. It lives in the module's ``__dict__`` (not in
its parameters, buffers or submodules), so ``state_dict()`` never contains it,
and a runtime pickles and copies to ``None`` (``BaseRuntime.__reduce_ex__``),
so a pickled, deep-copied or ``torch.save``-d module comes back untagged
(``_ppe_runtime`` is ``None``) until it goes through ``ppe.to`` itself.
Nothing outside the module refers to it: a tagged module is freed like any other.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from pytorch_pfn_extras.runtime._base import BaseRuntime

ATTRIBUTE = "_ppe_runtime"


def set_runtime(module: torch.nn.Module, runtime: BaseRuntime) -> None:
    """Tag ``module`` (not its submodules) with ``runtime``."""
    # Written to ``__dict__`` directly: a module class that overrides
    # ``__setattr__`` (ScriptModule, wrappers forwarding to an inner module)
    # must not redirect or reject the tag.
    module.__dict__[ATTRIBUTE] = runtime


def get_runtime(module: torch.nn.Module) -> BaseRuntime | None:
    """Return the runtime that ``module`` is tagged with, or ``None``.

    ``ppe.to`` tags a module and all its submodules; so does assigning
    ``module._ppe_runtime = runtime`` directly. A value that is not a
    ``BaseRuntime`` (such as ``None``) means untagged.

    Args:
        module: Any module.

    Returns:
        The runtime shared by every submodule moved by the same ``ppe.to``
        call, or ``None`` when ``module`` was not moved with ``ppe.to`` (copies
        and unpickled modules are untagged).

    Example:
        >>> ppe.to(model, "cpu")
        >>> get_runtime(model.layer) is model.layer._ppe_runtime
        True
    """
    # Hot path (every CodeBlock built from a module): one dict lookup, no
    # ``nn.Module.__getattr__`` fallback and no exception for untagged modules.
    runtime = module.__dict__.get(ATTRIBUTE)
    return runtime if isinstance(runtime, BaseRuntime) else None


def named_runtime_modules(module: torch.nn.Module) -> Iterator[tuple[str, torch.nn.Module]]:
    """Yield the modules whose runtime callbacks must run, with their names.

    A tagged module is yielded, outermost first, when no ancestor carries the
    same runtime: one ``ppe.to(model, ...)`` yields only ``model``, while a
    submodule later moved to another device by its own ``ppe.to`` call is
    yielded too. Each module appears once even if it is shared.

    Args:
        module: The root module.

    Yields:
        ``(qualified_name, submodule)`` pairs; the root's name is ``""``.
    """
    seen: set[int] = set()
    stack: list[tuple[str, torch.nn.Module, BaseRuntime | None]] = [("", module, None)]
    while stack:
        name, current, inherited = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        runtime = get_runtime(current)
        if runtime is not None and runtime is not inherited:
            yield name, current
        else:
            runtime = inherited
        children = [
            (f"{name}.{child_name}" if name else child_name, child, runtime)
            for child_name, child in current.named_children()
        ]
        stack.extend(reversed(children))
