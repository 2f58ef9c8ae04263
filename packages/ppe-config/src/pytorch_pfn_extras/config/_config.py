"""The lazily evaluated config tree."""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any

from pytorch_pfn_extras.config._customize import default_kwargs_of
from pytorch_pfn_extras.config._cycles import find_cycle
from pytorch_pfn_extras.config._errors import (
    CircularReferenceError,
    ConfigError,
    ConfigKeyError,
    ConfigTypeError,
    ConfigValueError,
    error_like,
)
from pytorch_pfn_extras.config._load import load_tree
from pytorch_pfn_extras.config._path import (
    MISSING,
    ChildNotFound,
    KeyPath,
    attribute_or_item,
    child_key,
    format_chain,
    format_path,
    parse_path,
)
from pytorch_pfn_extras.config._update import update_tree

if TYPE_CHECKING:
    from typing import Self

# The nodes being evaluated, outermost first (an ordered set): detects cycles, names the chain.
_Stack = dict[KeyPath, None]


@dataclasses.dataclass(slots=True)
class _Lookup:
    """What a path lookup reports its errors with: who asked, and what was being evaluated.

    A lookup is a reference ``text`` held by the node ``at``, or, with ``at`` ``None``, the path
    ``text`` given to ``config[text]``; ``stack`` holds the nodes being evaluated (the chain
    that led to the lookup).
    """

    stack: _Stack
    at: KeyPath | None
    text: str

    def error(
        self, kind: type[ConfigError], problem: str, *, path: str | None = None
    ) -> ConfigError:
        """A ``kind`` error saying the lookup, then ``problem`` (which starts with its own
        separator), then the evaluation chain. Its ``path`` is the node holding the reference
        (the accessed path for ``config[text]``) unless ``path`` is given."""
        if self.at is None:
            where = self.text
            asked = f"config path {where!r}"
        else:
            where = format_path(self.at)
            asked = f"{where}: reference {self.text!r}"
        message = f"{asked}{problem}{_chain_note(self.stack)}"
        return kind(message, path=where if path is None else path, trace=_trace(self.stack))

    def not_found(self, detail: str, kind: type[ConfigError] = ConfigKeyError) -> ConfigError:
        """The error of a path that leads nowhere; ``detail`` says why."""
        return self.error(kind, f" not found: {detail}")


class Config:
    """A config tree whose values are computed lazily, on first access, and then cached.

    ``config`` is a tree of dicts, lists and scalars (what ``json.load`` or ``yaml.safe_load``
    return). Reading a path evaluates the node there:

    - a dict with a ``type`` key is replaced by ``types[type](**other_keys)``, its arguments
      evaluated first (nested typed dicts, classes and lambdas all work); a ``type`` that is
      itself a reference or a typed dict must evaluate to a name of ``types``;
    - a string ``'@/absolute/path'`` or ``'@relative/../path'`` is replaced by the value at
      that path (relative paths start at the dict or list holding the string);
      ``'@/path.attr'`` takes an attribute of that value (or, if it has none of that name,
      its item: a dict key, a list index such as ``'@/layers.0'``), ``'@!/path'`` its raw
      tree;
    - dicts and lists are evaluated element by element; other values are returned as they are.

    Every node is evaluated at most once: a callable runs only if something needs its value,
    and a node referenced from several places is computed once and shared (the same object).
    ``config['!/path']`` returns the raw tree under ``/path``, without evaluating anything.
    Treat returned values as read-only: they are the cached values.

    Args:
        config: The raw tree.
        types: Names usable as ``type``, mapped to callables (functions, classes, lambdas).

    Raises:
        ConfigKeyError: (on access; a ``KeyError``) a missing key, an unknown type, a
            reference to a path that does not exist, an attribute step (``'/a.name'``) on a
            dict that has neither that attribute nor that key.
        ConfigIndexError: (on access; an ``IndexError`` and a `ConfigKeyError`) a list index
            out of range, in a path step or an attribute step.
        ConfigTypeError: (on access; a ``TypeError``) a path or attribute step through a value
            without items (a scalar, an object without that attribute), a list index that is
            not an integer, a ``type`` that does not evaluate to a name.
        CircularReferenceError: (on access; a ``RuntimeError``) references that form a cycle;
            the message shows it, e.g. ``/a -> /b -> /a``.
        ConfigValueError: (on access; a ``ValueError``) an evaluation that enters a dict or
            list containing itself (``d["a"] = d``); the message names the key path where the
            cycle closes.
        ConfigError: (on access) a callable that raised: the error is also an instance of the
            exception's class (``except ValueError:`` catches it) and chains it as
            ``__cause__``.

    Example:
        >>> config = Config(
        ...     {"name": {"type": "concat", "x0": "First", "x1": "@/last"}, "last": "Last"},
        ...     {"concat": lambda x0, x1: x0 + " " + x1},
        ... )
        >>> config["/name"]
        'First Last'
        >>> config["!/name"]
        {'type': 'concat', 'x0': 'First', 'x1': '@/last'}
    """

    def __init__(self, config: Any, types: Mapping[str, Callable[..., Any]] | None = None) -> None:
        self._config = config
        self._types: dict[str, Callable[..., Any]] = dict(types) if types is not None else {}
        self._cache: dict[KeyPath, Any] = {}

    @classmethod
    def load_path(
        cls,
        path: str | os.PathLike[str],
        *,
        loader: Callable[[str], Any] | None = None,
        types: Mapping[str, Callable[..., Any]] | None = None,
    ) -> Self:
        """Read a config file, resolving its ``import`` keys, and wrap it in a `Config`.

        An ``import: other.json`` key (or a list of files), at the top of the file or in any
        dict below it, merges those files first, in order, then the keys beside ``import`` on
        top: dicts merge key by key, other values replace, and a dict whose ``type`` differs
        from the imported one replaces it whole. An ``import`` alone in its dict puts the
        file's content there as it is (a list too). A key beside ``import`` that is a path
        (``model/lr: 0.01``) merges its value at that path of the imported content; beside the
        import of a file that holds a list, every key is such a path, starting with a list index
        (``{"import": "layers.json", "0/units": 10}``). Imported paths are relative to the file
        holding the key; imports may nest.

        Args:
            path: The file to read.
            loader: Called with a file's path, returns its raw tree. ``None`` reads JSON, or
                YAML (``yaml.safe_load``) for ``.yaml``/``.yml`` files. The stream parsers
                ``json.load``, ``yaml.safe_load``, ``yaml.full_load`` and ``yaml.unsafe_load``
                may be passed directly: they get the opened file.
            types: As for `Config`.

        Returns:
            The config (nothing is evaluated yet).

        Raises:
            FileNotFoundError: The file, or a file it imports, does not exist.
            ConfigValueError: A file is not valid JSON, or its tree contains itself (a YAML
                alias inside its own anchor, ``a: &x {b: *x}``): the message names the file
                and the key path where the cycle closes (a ``ValueError``).
            ConfigTypeError: An ``import`` value is not a file name or a list of them, an
                imported file that must be merged does not hold a mapping, or a key beside the
                import of a list is not a path that starts with a list index (a ``TypeError``).
            ConfigIndexError: A key beside the import of a list names an index out of range
                (an ``IndexError``).
            CircularReferenceError: Files import each other in a cycle (a ``RuntimeError``;
                the message shows the files).
            ImportError: A YAML file without PyYAML: ``pip install "ppe-config[yaml]"``.

        Example:
            >>> config = Config.load_path("train.yaml", types={"MLP": MLP})
        """
        return cls(load_tree(os.fspath(path), loader), types)

    def update_via_args(self, args: Iterable[tuple[str, Any]]) -> None:
        """Override raw values, e.g. from the command line, and forget cached values.

        A string value is cast to the type of the value it replaces: ``int`` and ``float``
        by their constructors, ``bool`` from ``"true"``/``"false"`` (any case), ``None``,
        lists and dicts from JSON (``'[64, 32]'``); other values are stored as given. The
        updates apply together: if one fails, none does.

        Args:
            args: ``(path, value)`` pairs such as ``("/optimizer/lr", "0.01")``; each path
                must exist in the raw tree and may not pass through a reference.

        Raises:
            ConfigKeyError: A path that does not exist (a `ConfigIndexError` for a list index
                out of range).
            ConfigTypeError: A path through a scalar or a reference, a list index that is not
                an integer, or a string for a value that no string can be cast to.
            ConfigValueError: A string that cannot be cast to the existing type.

        Example:
            >>> config.update_via_args([("/optimizer/lr", "0.01"), ("/debug", "true")])
        """
        tree = self._config
        for path, value in args:
            tree = update_tree(tree, path, value)
        self._config = tree
        self._cache.clear()

    def __getitem__(self, path: str) -> Any:
        """Evaluate the value at ``path`` (``'/a/b/0'``, ``'/a.attr'``, ``'!/a'`` for raw)."""
        if not isinstance(path, str):
            message = f"config paths are strings such as '/model/lr', got {path!r}"
            raise ConfigTypeError(message, path=str(path))
        try:
            parsed = parse_path(path, ())
        except ValueError as exc:
            message = f"invalid config path {path!r}: {exc}"
            raise ConfigKeyError(message, path=path) from None
        stack: _Stack = {}
        lookup = _Lookup(stack, None, path)
        try:
            key, node = self._locate(parsed.keys, lookup, ())
            value = node if parsed.raw else self._eval(key, node, stack)
            if parsed.attrs:
                value = self._getattrs(value, parsed.attrs, key, lookup)
        except RecursionError as exc:
            # Looked for only now: a tree that contains itself away from the accessed paths
            # works, as it did, and the check costs nothing when the recursion is not hit.
            cycle = find_cycle(self._config)
            deeper = (
                f"evaluating config path {path!r} nests deeper than Python's recursion limit "
                f"({sys.getrecursionlimit()})"
            )
            if cycle is not None:
                message = f"{deeper}: {cycle.describe()}"
                raise ConfigValueError(message, path=format_path(cycle.at)) from None
            message = (
                f"{deeper}: the config has a very long chain of references or very deep nesting"
            )
            raise error_like(exc, message, path=path) from exc
        return value

    # ------------------------------------------------------------------ evaluation

    def _eval(self, key: KeyPath, node: Any, stack: _Stack) -> Any:
        if isinstance(node, str):
            if not node.startswith("@"):
                return node
        elif not isinstance(node, (dict, list, tuple, Mapping)):
            return node
        value = self._cache.get(key, MISSING)
        if value is not MISSING:
            return value
        if key in stack:
            keys = list(stack)
            start = keys.index(key)
            note = _chain_note([*keys, key]) if start else ""
            message = f"circular reference: {format_chain([*keys[start:], key])}{note}"
            raise CircularReferenceError(
                message, path=format_path(key), trace=tuple(map(format_path, keys))
            )
        stack[key] = None
        try:
            if isinstance(node, str):
                value = self._eval_reference(key, node, stack)
            elif isinstance(node, (dict, Mapping)):
                if "type" in node:
                    value = self._call(key, node, stack)
                else:
                    value = {k: self._eval((*key, k), v, stack) for k, v in node.items()}
            else:
                items = [self._eval((*key, i), v, stack) for i, v in enumerate(node)]
                value = items if isinstance(node, list) else tuple(items)
        finally:
            del stack[key]
        self._cache[key] = value
        return value

    def _eval_reference(self, key: KeyPath, text: str, stack: _Stack) -> Any:
        try:
            parsed = parse_path(text[1:], key[:-1])
        except ValueError as exc:
            message = f"{format_path(key)}: invalid reference {text!r}: {exc}{_chain_note(stack)}"
            raise ConfigKeyError(message, path=format_path(key), trace=_trace(stack)) from None
        lookup = _Lookup(stack, key, text)
        target, node = self._locate(parsed.keys, lookup, ())
        value = node if parsed.raw else self._eval(target, node, stack)
        if parsed.attrs:
            value = self._getattrs(value, parsed.attrs, target, lookup)
        return value

    def _call(self, key: KeyPath, node: Mapping[Any, Any], stack: _Stack) -> Any:
        name = node["type"]
        if not isinstance(name, str) or name.startswith("@"):
            name = self._eval((*key, "type"), name, stack)
            if not isinstance(name, str):
                message = (
                    f"{format_path(key)}: 'type' must evaluate to the name of a type (a "
                    f"string), got {name!r}{_chain_note(stack)}"
                )
                raise ConfigTypeError(message, path=format_path(key), trace=_trace(stack))
        fn = self._types.get(name)
        if fn is None:
            raise self._unknown_type(key, name, stack)
        kwargs = {k: self._eval((*key, k), v, stack) for k, v in node.items() if k != "type"}
        defaults = default_kwargs_of(fn)
        if defaults:
            for arg, ref in defaults.items():
                if arg not in node:
                    kwargs[arg] = self._eval((*key, arg), "@" + ref, stack)
        try:
            return fn(**kwargs)
        except Exception as exc:
            message = (
                f"{format_path(key)}: type {name!r} ({_describe(fn)}) called with arguments "
                f"({', '.join(map(str, kwargs))}) raised {type(exc).__name__}: {exc}"
                f"{_chain_note(stack)}"
            )
            raise error_like(exc, message, path=format_path(key), trace=_trace(stack)) from exc

    def _unknown_type(self, key: KeyPath, name: str, stack: _Stack) -> ConfigKeyError:
        import difflib

        known = sorted(self._types)
        close = difflib.get_close_matches(name, known, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        listed = ", ".join(map(repr, known)) if known else "none (no types were given)"
        message = (
            f"{format_path(key)}: unknown type {name!r}{hint}; known types: {listed}"
            f"{_chain_note(stack)}"
        )
        return ConfigKeyError(message, path=format_path(key), trace=_trace(stack))

    def _getattrs(
        self, value: Any, attrs: tuple[str, ...], target: KeyPath, lookup: _Lookup
    ) -> Any:
        for i, attr in enumerate(attrs):
            try:
                value = attribute_or_item(value, attr)
            except ChildNotFound as missing:
                owner = format_path(target) + "".join("." + a for a in attrs[:i])
                problem = (
                    f": the {type(value).__name__} object at {owner} has no attribute "
                    f"{attr!r}{missing.detail}"
                )
                raise lookup.error(missing.kind, problem) from None
        return value

    # ------------------------------------------------------------------ path lookup

    def _locate(
        self, keys: tuple[Any, ...], lookup: _Lookup, following: tuple[KeyPath, ...]
    ) -> tuple[KeyPath, Any]:
        """Find the raw node at ``keys``: its canonical key (real dict keys, list indices as
        ints) and the node. A reference met on the way is followed, so ``/a/x`` works when
        ``/a`` is ``'@/b'``. ``lookup`` names the reference (or access) for messages."""
        node = self._config
        canon: KeyPath = ()
        for comp in keys:
            followed = following
            while isinstance(node, str) and node.startswith("@"):
                previous = canon
                canon, node = self._follow(canon, node, lookup, followed)
                followed = (*followed, previous)
            try:
                k = child_key(node, comp, canon)
            except ChildNotFound as missing:
                raise lookup.not_found(missing.detail, missing.kind) from None
            canon = (*canon, k)
            node = node[k]
        return canon, node

    def _follow(
        self, canon: KeyPath, node: str, lookup: _Lookup, following: tuple[KeyPath, ...]
    ) -> tuple[KeyPath, Any]:
        """Follow the reference ``node`` met at ``canon`` on the way of ``lookup``."""
        if canon in following:
            cycle = format_chain([*following[following.index(canon) :], canon])
            problem = f": circular reference: {cycle}"
            raise lookup.error(CircularReferenceError, problem, path=format_path(canon))
        try:
            parsed = parse_path(node[1:], canon[:-1])
        except ValueError as exc:
            detail = f"{format_path(canon)} holds an invalid reference {node!r}: {exc}"
            raise lookup.not_found(detail) from None
        if parsed.raw or parsed.attrs:
            detail = (
                f"{format_path(canon)} is {node!r}, whose value is not part of the config tree "
                "('!' or attribute access), so a path cannot continue below it"
            )
            raise lookup.not_found(detail)
        followed = _Lookup(lookup.stack, canon, node)
        return self._locate(parsed.keys, followed, (*following, canon))


def _chain_note(keys: Iterable[KeyPath]) -> str:
    keys = list(keys)
    if len(keys) < 2:
        return ""
    return f" (evaluation chain: {format_chain(keys)})"


def _trace(stack: _Stack) -> tuple[str, ...]:
    return tuple(map(format_path, stack))


def _describe(fn: Callable[..., Any]) -> str:
    module = getattr(fn, "__module__", None)
    name = getattr(fn, "__qualname__", None) or type(fn).__name__
    return f"{module}.{name}" if module else name
