"""The module -> runtime tag that ``ppe.to`` sets.

The tag lives outside the module, keyed by the module's identity and dropped
when the module is garbage collected. So it is never part of a pickle, a
``copy.deepcopy``, a ``state_dict`` or a TorchScript/compiled module's
attributes: a copy of a tagged module is untagged until it goes through
``ppe.to`` itself. Keying by identity (not ``hash``/``==``) also works for
modules that override ``__eq__``.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from pytorch_pfn_extras.runtime._base import BaseRuntime

_Entry = tuple["weakref.ReferenceType[torch.nn.Module]", "BaseRuntime"]
_entries: dict[int, _Entry] = {}


def set_runtime(module: torch.nn.Module, runtime: BaseRuntime) -> None:
    """Tag ``module`` (not its submodules) with ``runtime``."""
    key = id(module)

    def forget(ref: weakref.ReferenceType[torch.nn.Module]) -> None:
        # Runs while the module is being freed: drop the entry unless a newer
        # module with the same id has already replaced it.
        entry = _entries.get(key)
        if entry is not None and entry[0] is ref:
            _entries.pop(key, None)

    _entries[key] = (weakref.ref(module, forget), runtime)


def get_runtime(module: torch.nn.Module) -> BaseRuntime | None:
    """Return the runtime that ``ppe.to`` tagged ``module`` with, or ``None``.

    Args:
        module: Any module.

    Returns:
        The runtime shared by every submodule moved by the same ``ppe.to``
        call, or ``None`` when ``module`` was not moved with ``ppe.to`` (copies
        and unpickled modules are untagged).

    Example:
        >>> ppe.to(model, "cpu")
        >>> get_runtime(model.layer)
        <pytorch_pfn_extras.runtime.PyTorchRuntime object at ...>
    """
    entry = _entries.get(id(module))
    if entry is None or entry[0]() is not module:
        return None
    return entry[1]


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
