"""Every public function, class and method of PPE 0.9 keeps its signature here.

``data/ppe09_signatures.txt`` is a verbatim copy of the spec's ``ppe09_signatures.txt``, generated
from PPE 0.9.0's installed package: ``def path(params)`` for a function, ``class path(params)`` for
a class (the parameters of its ``__init__``, ``self`` included) and, indented below a class, its own
methods (``self`` first for an instance method; a static or class method has no ``self``).

Rules of the comparison, for each item that exists in our implementation:

- PPE's parameters appear in ours with the same names, in the same order, of the same kinds
  (positional-only, positional-or-keyword, ``*args``, keyword-only, ``**kwargs``) and with the same
  defaults: users pass them by position and by keyword, and override the methods in subclasses.
- We may ADD parameters, but only where no PPE call can reach them by position: keyword-only
  parameters with a default, or a ``**kwargs`` where PPE has none.  Nothing is inserted between
  PPE's parameters, and no PPE parameter loses its default or gains one.
- ``self`` is checked like any parameter: an instance method in PPE is an instance method here,
  a static or class method (no ``self`` in the spec) is a static or class method here, looked up
  on the class without binding (``inspect.getattr_static`` along the MRO).
- A default that PPE's listing can only show as an object repr (``<function <lambda>>``,
  ``<class '...InfiniteCache'>``, ``<_io.TextIOWrapper name='<stdout>' ...>``,
  ``<SnapshotMode.DEFAULT: 1>``) is compared loosely: a callable for a callable, a class of the
  same name for a class, a writable text stream for ``sys.stdout``, the enum member of the same
  class and member name for an enum member.  Every other default is a Python literal and must be
  equal, with the same type.
- A class whose ``__init__`` PPE lists as ``(self, /, *args, **kwargs)`` (or ``(self, *args,
  **kwds)``) has no ``__init__`` of its own there; ours must then be constructible without
  arguments (every parameter has a default or is variadic).
- PPE lists a class's own methods only; a method it inherits has the base's signature there.
  Where ours overrides such a method, the override keeps the signature of the nearest class of
  our MRO that PPE lists with it (``EarlyStoppingTrigger.load_state_dict(self, state)``, as
  ``Trigger``'s).
- ``dataloaders.DataLoader`` is torch's class in PPE 0.9 (so the listing has no entry): what our
  subclass overrides keeps torch's signatures, by the same rules.

What is missing fails, except what components not built yet own (``_NOT_BUILT``, skipped). Known
differences are strict xfails (``_PENDING``) naming who fixes them: when one is fixed the test
turns XPASS, and the entry must go.
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import io
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch.utils.data

import pytorch_pfn_extras  # noqa: F401  (the meta-package installs every component)
from pytorch_pfn_extras.dataloaders import DataLoader

_SPEC_FILE = Path(__file__).parent / "data" / "ppe09_signatures.txt"
_ROOT = "pytorch_pfn_extras"


# Components not built yet: what they own is skipped while it does not exist, and compared as soon
# as it does.
_NOT_BUILT: dict[str, str] = {}

# Known differences in code the signature change could not touch: strict xfails naming who
# fixes them. An entry that turns XPASS has been fixed: remove it.
_PENDING: dict[str, str] = {}
# The same for test_overrides_keep_the_signature_ppe_inherits, by class: deliberate extensions.
_COMPARER = (
    "kept different: compare(self, *loaders, **run_kwargs) extends PPE's compare(self): called "
    "without arguments it is PPE's; code written for older PPE versions passes the loaders"
)
_PENDING_INHERITED: dict[str, str] = {
    # compare(self, *loaders, **run_kwargs) overrides PPE's inherited Comparer.compare(self)
    f"{_ROOT}.utils.comparer.ModelComparer": _COMPARER,
    f"{_ROOT}.utils.comparer.OutputsComparer": _COMPARER,
}


# ------------------------------------------------------------------------------ the spec's items


@dataclass(frozen=True)
class _Param:
    name: str
    kind: inspect._ParameterKind
    default: str | None  # the spec's text of the default; None when there is none


@dataclass(frozen=True)
class _Item:
    kind: str  # "def", "class" or "method"
    path: str  # the public path; for a method, the class's path + "." + the method's name
    params: tuple[_Param, ...]
    line: str

    @property
    def owner(self) -> str:
        return self.path.rpartition(".")[0]


def _split_top_level(text: str) -> list[str]:
    """Split a parameter list at the commas outside brackets, quotes and ``<...>`` reprs."""
    parts: list[str] = []
    depth = 0
    quote = ""
    current = ""
    for char in text:
        if quote:
            if char == quote:
                quote = ""
        elif char in "'\"":
            quote = char
        elif char in "([{<":
            depth += 1
        elif char in ")]}>":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(current.strip())
            current = ""
            continue
        current += char
    if current.strip():
        parts.append(current.strip())
    return parts


def _parse_params(text: str) -> tuple[_Param, ...]:
    params: list[_Param] = []
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    for part in _split_top_level(text):
        if part == "/":
            params = [_Param(p.name, inspect.Parameter.POSITIONAL_ONLY, p.default) for p in params]
        elif part == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
        elif part.startswith("**"):
            params.append(_Param(part[2:], inspect.Parameter.VAR_KEYWORD, None))
        elif part.startswith("*"):
            params.append(_Param(part[1:], inspect.Parameter.VAR_POSITIONAL, None))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            name, _, default = part.partition("=")
            params.append(_Param(name, kind, default if default else None))
    return tuple(params)


_LINE = re.compile(r"^(?P<indent>\s*)(?:(?P<kind>def|class) )?(?P<path>[\w.]+)\((?P<params>.*)\)$")


def _read_spec() -> list[_Item]:
    items = []
    for line in _SPEC_FILE.read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        match = _LINE.match(line)
        assert match is not None, f"cannot parse {line!r}"
        kind = match["kind"] or "method"
        assert (kind == "method") == bool(match["indent"]), line
        items.append(_Item(kind, match["path"], _parse_params(match["params"]), line.strip()))
    return items


_ITEMS = _read_spec()


# ---------------------------------------------------------------------------- our implementation


class _Missing(Exception):
    pass


def _resolve(path: str) -> Any:
    """Import ``path`` as a user would: the longest importable module, then attributes."""
    parts = path.split(".")
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            obj: Any = importlib.import_module(module_name)
        except ModuleNotFoundError as error:
            if error.name is not None and module_name.startswith(error.name):
                continue
            raise
        for attribute in parts[split:]:
            try:
                obj = getattr(obj, attribute)
            except AttributeError:
                message = f"{'.'.join(parts[:split])} has no {'.'.join(parts[split:])}"
                raise _Missing(message) from None
        return obj
    raise _Missing(f"cannot import {path}")


def _our_params(item: _Item, obj: Any) -> list[inspect.Parameter]:
    """Our parameters for ``item``: ``obj`` is our function, our class, or the method's class."""
    if item.kind == "def":
        return list(inspect.signature(obj).parameters.values())
    assert inspect.isclass(obj), f"{obj!r} is not a class"
    if item.kind == "class":
        return list(inspect.signature(obj.__init__).parameters.values())
    cls = obj
    name = item.path.rpartition(".")[2]
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        raise _Missing(f"{cls.__qualname__} has no method {name}") from None
    spec_is_instance_method = bool(item.params) and item.params[0].name == "self"
    if isinstance(raw, (staticmethod, classmethod)):
        assert not spec_is_instance_method, f"{item.path} must be an instance method, as in PPE"
        return list(inspect.signature(getattr(cls, name)).parameters.values())
    assert spec_is_instance_method, f"{item.path} must be a static or class method, as in PPE"
    if isinstance(raw, property):
        raise AssertionError(f"{item.path} is a property here, a method in PPE")
    return list(inspect.signature(raw).parameters.values())


# ----------------------------------------------------------------------------------- comparison

_GENERIC_INIT = (
    ("self", "args", "kwargs"),  # object.__init__, Exception.__init__, Protocol's
    ("self", "args", "kwds"),  # Enum's
)


def _default_matches(spec_text: str, ours: Any) -> bool:
    if spec_text.startswith("<"):
        if spec_text.startswith("<function"):
            return callable(ours) and not inspect.isclass(ours)
        if spec_text.startswith("<class "):
            name = spec_text.split("'")[1].rpartition(".")[2]
            return inspect.isclass(ours) and ours.__name__ == name
        if spec_text.startswith("<_io.TextIOWrapper"):
            return isinstance(ours, io.TextIOBase) or callable(getattr(ours, "write", None))
        member = re.match(r"<(\w+)\.(\w+): .*>$", spec_text)
        if member is not None:
            return (
                isinstance(ours, enum.Enum)
                and type(ours).__name__ == member[1]
                and ours.name == member[2]
            )
        raise AssertionError(f"no rule to compare the default {spec_text}")
    expected = ast.literal_eval(spec_text)
    return type(ours) is type(expected) and ours == expected


def _describe(param: inspect.Parameter) -> str:
    return f"`{param}` ({param.kind.description})"


def _differences(spec: Sequence[_Param], ours: Sequence[inspect.Parameter]) -> list[str]:
    """What in ``ours`` breaks a call or an override written for ``spec`` (see the rules)."""
    problems = []
    spec_names = [p.name for p in spec]
    our_names = [p.name for p in ours]
    missing = [name for name in spec_names if name not in our_names]
    added = [p for p in ours if p.name not in spec_names]
    has_var_keyword = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in spec)
    for param in added:
        if param.kind is inspect.Parameter.VAR_KEYWORD and not has_var_keyword:
            continue
        if param.kind is inspect.Parameter.KEYWORD_ONLY and param.default is not param.empty:
            continue
        problems.append(f"added {_describe(param)}: only keyword-only with a default or **kwargs")
    if missing:
        problems.append(f"missing {missing}")
        if added:
            problems.append(f"renamed? PPE {missing}, ours {[p.name for p in added]}")
    kept = [name for name in our_names if name in spec_names]
    if kept != [name for name in spec_names if name not in missing]:
        problems.append(f"order {kept}, PPE {spec_names}")
    by_name = {p.name: p for p in ours}
    for expected in spec:
        param = by_name.get(expected.name)
        if param is None:
            continue
        if param.kind is not expected.kind:
            problems.append(
                f"{expected.name}: {param.kind.description}, PPE {expected.kind.description}"
            )
        if expected.default is None:
            if param.default is not param.empty:
                problems.append(f"{expected.name}: default {param.default!r}, PPE has none")
        elif param.default is param.empty:
            problems.append(f"{expected.name}: no default, PPE {expected.default}")
        elif not _default_matches(expected.default, param.default):
            problems.append(f"{expected.name}: default {param.default!r}, PPE {expected.default}")
    return problems


def _init_differences(spec: Sequence[_Param], ours: Sequence[inspect.Parameter]) -> list[str]:
    if tuple(p.name for p in spec) not in _GENERIC_INIT:
        return _differences(spec, ours)
    # PPE's class has no __init__ of its own: it is constructed without arguments.
    required = [
        str(p)
        for p in ours[1:]
        if p.default is p.empty and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    return [f"PPE constructs it without arguments; ours requires {required}"] if required else []


def _check(
    line: str, spec: Sequence[_Param], ours: Sequence[inspect.Parameter], init: bool
) -> None:
    problems = (_init_differences if init else _differences)(spec, ours)
    if problems:
        signature = inspect.Signature(list(ours), __validate_parameters__=False)
        raise AssertionError("\n  ".join([line, f"ours: {signature}", *problems]))


# ----------------------------------------------------------------------------------------- tests


def _marks(path: str) -> list[pytest.MarkDecorator]:
    if path in _PENDING:
        return [pytest.mark.xfail(reason=_PENDING[path], strict=True)]
    return []


def _resolve_or_skip(path: str) -> Any:
    """Our object at ``path``; skipped if a component not built yet owns it, else a failure."""
    try:
        return _resolve(path)
    except _Missing as missing:
        for prefix, reason in _NOT_BUILT.items():
            if path == prefix or path.startswith(prefix + "."):
                pytest.skip(f"{missing}: {reason}")
        raise AssertionError(f"{path} is missing: {missing}") from None


@pytest.mark.parametrize(
    "item",
    [pytest.param(item, marks=_marks(item.path), id=item.path) for item in _ITEMS],
)
def test_signature_matches_ppe09(item: _Item) -> None:
    owner = _resolve_or_skip(item.path if item.kind != "method" else item.owner)
    try:
        ours = _our_params(item, owner)
    except _Missing as missing:
        raise AssertionError(f"{item.path} is missing: {missing}") from None
    _check(item.line, item.params, ours, init=item.kind == "class")


_CLASSES = [item.path for item in _ITEMS if item.kind == "class"]
_METHODS: dict[str, dict[str, _Item]] = {path: {} for path in _CLASSES}
for _method in _ITEMS:
    if _method.kind == "method":
        _METHODS[_method.owner][_method.path.rpartition(".")[2]] = _method


@pytest.mark.parametrize(
    "path",
    [
        pytest.param(
            path,
            marks=[pytest.mark.xfail(reason=_PENDING_INHERITED[path], strict=True)]
            if path in _PENDING_INHERITED
            else [],
            id=path,
        )
        for path in _CLASSES
    ],
)
def test_overrides_keep_the_signature_ppe_inherits(path: str) -> None:
    """A method PPE's class inherits keeps the base's signature where ours overrides it.

    PPE lists only a class's own methods: ``EarlyStoppingTrigger.load_state_dict`` is
    ``Trigger.load_state_dict(self, state)`` there, so an override here takes ``state`` too.
    The base is the nearest class of our MRO that PPE lists with the method.
    """
    try:
        cls = _resolve(path)
    except _Missing:
        pytest.skip(f"{path} is missing: test_signature_matches_ppe09 reports it")
    spec_bases = {}
    for base_path in _CLASSES:
        if base_path != path:
            try:
                spec_bases[base_path] = _resolve(base_path)
            except _Missing:
                continue
    for name in sorted({m for methods in _METHODS.values() for m in methods} - set(_METHODS[path])):
        owner = next((c for c in cls.__mro__ if name in vars(c)), None)  # defines ours
        base = next(
            (
                (base_path, base)
                for base in cls.__mro__[1:]
                for base_path, spec_base in spec_bases.items()
                if spec_base is base and name in _METHODS[base_path]
            ),
            None,
        )
        if owner is None or base is None:
            continue
        base_path, base_cls = base
        if owner is base_cls or not issubclass(owner, base_cls):
            continue  # ours is the base's own method (checked there) or comes from elsewhere
        method = _METHODS[base_path][name]
        ours = _our_params(method, cls)
        _check(f"{path}.{name} inherits {method.line}", method.params, ours, init=False)


_TORCH_LOADER = torch.utils.data.DataLoader


@pytest.mark.parametrize(
    "name",
    [
        name
        for name, value in vars(DataLoader).items()
        if callable(value)
        and (name == "__init__" or not name.startswith("_"))
        and hasattr(_TORCH_LOADER, name)
    ],
)
def test_dataloader_overrides_keep_torch_signatures(name: str) -> None:
    theirs = inspect.signature(getattr(_TORCH_LOADER, name))
    spec = tuple(
        _Param(p.name, p.kind, None if p.default is p.empty else repr(p.default))
        for p in theirs.parameters.values()
    )
    ours = list(inspect.signature(getattr(DataLoader, name)).parameters.values())
    _check(f"torch.utils.data.DataLoader.{name}{theirs}", spec, ours, init=False)
