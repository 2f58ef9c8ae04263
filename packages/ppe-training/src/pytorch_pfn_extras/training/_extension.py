"""The extension API: :class:`Extension`, :func:`make_extension`, :class:`ExtensionEntry`."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeAlias

from pytorch_pfn_extras.interop import is_int
from pytorch_pfn_extras.training._trigger_util import Trigger, TriggerLike, get_trigger

if TYPE_CHECKING:
    from pytorch_pfn_extras.training._manager_protocol import ExtensionsManagerProtocol

PRIORITY_WRITER = 300
"""Priority of extensions that write records to the observation (evaluators...)."""
PRIORITY_EDITOR = 200
"""Priority of extensions that edit the observation."""
PRIORITY_READER = 100
"""Priority of extensions that only read the observation (logs, reports); the default."""
PRIORITY_SNAPSHOT = -100
"""Priority of snapshots: they run after every other extension of the iteration."""

ExtensionLike: TypeAlias = Callable[["ExtensionsManagerProtocol"], Any]
ErrorHandler: TypeAlias = Callable[
    ["ExtensionsManagerProtocol", BaseException, "types.TracebackType | None"], None
]


class Extension:
    """Base class of extensions.

    An extension is a callable taking the manager; it runs when its trigger fires. Subclass
    this class, decorate a function with :func:`make_extension`, or pass any callable to
    :meth:`~pytorch_pfn_extras.training.ExtensionsManager.extend`.

    Attributes:
        trigger: Default trigger, ``(1, 'iteration')``.
        priority: Default priority, :data:`PRIORITY_READER`. Extensions of higher priority
            run first within an iteration; equal priorities run in registration order.
        name: The name given by the manager at registration (``None`` before).
        needs_model_state: Whether the extension reads the model parameters (the manager
            tells runtimes through ``needs_model_state()``).
        loads_state: Whether :meth:`initialize` loads the training state (a snapshot with
            ``autoload``): the manager initializes such extensions before the others, so
            that those (and their triggers) start from the loaded state.
        is_async: Whether the extension works in the background.

    Example:
        >>> class PrintIteration(Extension):
        ...     trigger = (10, "iteration")
        ...
        ...     def __call__(self, manager):
        ...         print(manager.iteration)
    """

    trigger: TriggerLike = (1, "iteration")
    priority: int = PRIORITY_READER
    name: str | None = None
    needs_model_state: bool = False
    loads_state: bool = False
    is_async: bool = False

    @property
    def default_name(self) -> str:
        """Default name of the extension: its class name."""
        return type(self).__name__

    def __call__(self, manager: ExtensionsManagerProtocol) -> Any:
        """Run the extension (called when its trigger fires)."""
        message = f"{type(self).__name__} must implement __call__(manager)"
        raise NotImplementedError(message)

    def initialize(self, manager: ExtensionsManagerProtocol) -> object:
        """Set up before the first iteration (after a snapshot was loaded, if any).

        What it returns is ignored by the manager (a snapshot returns the file it loaded).
        """
        return None

    def on_stop(self, manager: ExtensionsManagerProtocol) -> None:
        """Act once when training ends without an error (the stop trigger fired, a stop
        was requested, or ``manager.finalize()`` was called), before any extension's
        :meth:`finalize`: the extensions are still usable (a snapshot may still be saved).
        """

    def finalize(self, manager: ExtensionsManagerProtocol) -> None:
        """Release resources at the end of training (also after an error)."""

    def on_error(
        self,
        manager: ExtensionsManagerProtocol,
        exc: BaseException,
        tb: types.TracebackType | None,
    ) -> None:
        """Handle an error raised during an iteration, before the finalizers run."""

    def state_dict(self) -> dict[str, Any]:
        """Serialize the extension's state (tensors, numbers, strings, lists and dicts)."""
        return {}

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""


def _accepts_positional(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` takes at least one positional argument (the manager)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return True
    for parameter in signature.parameters.values():
        if parameter.kind in (
            parameter.POSITIONAL_ONLY,
            parameter.POSITIONAL_OR_KEYWORD,
            parameter.VAR_POSITIONAL,
        ):
            return True
    return False


def _manager_hook(
    fn: Callable[..., Any] | None, what: str
) -> Callable[[ExtensionsManagerProtocol], None] | None:
    if fn is None:
        return None
    if not callable(fn):
        message = f"make_extension: {what} must be callable or None, got {fn!r}"
        raise TypeError(message)
    if _accepts_positional(fn):
        return fn
    # ``finalizer=lambda: print("done")``: called without the manager.
    return lambda manager: fn()


_EXTRA_ATTRIBUTES = ("needs_model_state", "loads_state", "is_async")


def check_keywords(owner: str, kwargs: Mapping[str, Any], accepted: Sequence[str]) -> None:
    """Reject the keyword arguments of ``kwargs`` that are not in ``accepted``.

    For the functions that take PPE's ``**kwargs`` but know which keywords are meaningful:
    anything else is a typo, named in the error.

    Raises:
        TypeError: An unknown keyword; the message names it and the accepted ones.
    """
    unknown = sorted(set(kwargs) - set(accepted))
    if unknown:
        message = f"{owner} got unexpected keyword arguments {unknown}; accepted: {list(accepted)}"
        raise TypeError(message)


def _no_op_hook(manager: ExtensionsManagerProtocol) -> None:
    """The ``initialize``/``finalize`` of an extension made without one: does nothing."""


def _no_op_on_error(
    manager: ExtensionsManagerProtocol, exc: BaseException, tb: types.TracebackType | None
) -> None:
    """The ``on_error`` of an extension made without one: does nothing."""


def make_extension(
    trigger: TriggerLike = (1, "iteration"),
    default_name: str | None = None,
    priority: int = PRIORITY_READER,
    finalizer: Callable[..., Any] | None = _no_op_hook,
    initializer: Callable[..., Any] | None = _no_op_hook,
    on_error: ErrorHandler | None = _no_op_on_error,
    **kwargs: Any,
) -> Callable[[ExtensionLike], ExtensionLike]:
    """Decorator that turns a function ``fn(manager)`` into an extension.

    It only sets attributes on the function; they are the defaults the manager uses.

    Args:
        trigger: Default trigger of the extension.
        default_name: Default name; the function's ``__name__`` when ``None``.
        priority: Default priority.
        finalizer: Called with the manager at the end of training (a function taking no
            argument is called without it); does nothing by default (``None`` too).
        initializer: Called with the manager before the first iteration (likewise).
        on_error: ``on_error(manager, exc, tb)``, called when an iteration raises; does
            nothing by default (``None`` too).
        **kwargs: ``needs_model_state``, ``loads_state`` and ``is_async`` (booleans; see
            :class:`Extension`).

    Returns:
        The decorator.

    Raises:
        TypeError: An unknown keyword argument, or a hook that is not callable.

    Example:
        >>> @make_extension(trigger=(1, "epoch"), finalizer=lambda: print("done"))
        ... def show_epoch(manager):
        ...     print(manager.epoch)
    """
    check_keywords("make_extension", kwargs, _EXTRA_ATTRIBUTES)
    finalize = _manager_hook(finalizer, "finalizer")
    initialize = _manager_hook(initializer, "initializer")
    if on_error is not None and not callable(on_error):
        message = f"make_extension: on_error must be callable or None, got {on_error!r}"
        raise TypeError(message)

    def decorator(ext: ExtensionLike) -> ExtensionLike:
        # Hooks not given are callable no-ops, as in PPE (code calls ext.finalize(manager)).
        attributes: dict[str, Any] = {
            "trigger": trigger,
            "default_name": default_name or getattr(ext, "__name__", type(ext).__name__),
            "priority": priority,
            "finalize": _no_op_hook if finalize is None else finalize,
            "initialize": _no_op_hook if initialize is None else initialize,
            "on_error": _no_op_on_error if on_error is None else on_error,
            **kwargs,
        }
        for key, value in attributes.items():
            setattr(ext, key, value)
        return ext

    return decorator


class ExtensionEntry:
    """An extension with the options it was registered with.

    Options not given are taken from the extension's attributes (``name``/``default_name``,
    ``priority``, ``trigger``), then from :class:`Extension`'s defaults.

    Args:
        extension: The extension.
        name: Name of the extension.
        priority: Invocation priority.
        trigger: When to invoke it; converted with
            :func:`~pytorch_pfn_extras.training.trigger.get_trigger`.
        call_before_training: Also call the extension once before the first iteration of a
            fresh run.

    Raises:
        ValueError: No name can be found, or the name is empty.
    """

    def __init__(
        self,
        extension: ExtensionLike,
        *,
        name: str | None = None,
        priority: int | None = None,
        trigger: TriggerLike = None,
        call_before_training: bool = False,
    ) -> None:
        if not callable(extension):
            message = f"an extension must be callable, got {extension!r}"
            raise TypeError(message)
        if name is None:
            name = (
                getattr(extension, "name", None)
                or getattr(extension, "default_name", None)
                or getattr(extension, "__name__", None)
                or type(extension).__name__
            )
        if not isinstance(name, str) or not name:
            message = (
                f"an extension name must be a non-empty string, got {name!r} for {extension!r}"
            )
            raise ValueError(message)
        if priority is None:
            priority = getattr(extension, "priority", PRIORITY_READER)
        if not is_int(priority):
            message = f"extension {name!r}: priority must be an integer, got {priority!r}"
            raise TypeError(message)
        if trigger is None:
            trigger = getattr(extension, "trigger", (1, "iteration"))
        self.extension = extension
        self.name = name
        self.priority = priority
        self.trigger: Trigger = get_trigger(trigger)
        self.call_before_training = call_before_training

    @property
    def needs_model_state(self) -> bool:
        """Whether the extension reads the model state."""
        return bool(getattr(self.extension, "needs_model_state", False))

    @property
    def loads_state(self) -> bool:
        """Whether the extension's ``initialize`` loads the training state (it runs first).

        ``_loads_state``, the name of earlier versions, is read too.
        """
        extension = self.extension
        return bool(
            getattr(extension, "loads_state", False) or getattr(extension, "_loads_state", False)
        )

    def state_dict(self) -> dict[str, Any]:
        """Return ``{'extension': ..., 'trigger': ...}`` (the states of both)."""
        state: dict[str, Any] = {"trigger": self.trigger.state_dict()}
        extension_state_dict = getattr(self.extension, "state_dict", None)
        if callable(extension_state_dict):
            state["extension"] = extension_state_dict()
        return state

    def load_state_dict(self, to_load: Mapping[str, Any]) -> None:
        """Restore a state returned by :meth:`state_dict`."""
        if "trigger" in to_load:
            self.trigger.load_state_dict(to_load["trigger"])
        load = getattr(self.extension, "load_state_dict", None)
        if "extension" in to_load and callable(load):
            load(to_load["extension"])

    def __repr__(self) -> str:
        return (
            f"ExtensionEntry({self.extension!r}, name={self.name!r}, "
            f"priority={self.priority!r}, trigger={self.trigger!r})"
        )
