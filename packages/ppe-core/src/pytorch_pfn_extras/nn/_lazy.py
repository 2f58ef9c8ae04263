"""The lazy-module contract: ``UninitializedParameter`` and ``LazyInitializationMixin``.

``nn.modules.lazy`` exports both under PPE's module path; the library's own lazy layers
build on them in ``_lazy_sized``.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, NoReturn

import torch

_OPTIMIZER_WARNING = (
    "Use of uninitialized lazy parameter in Optimizer has been detected. "
    "Maybe you forgot to run forward before passing `module.parameters()` to the optimizer?"
)


def _warn_if_read_by_optimizer() -> None:
    # Frame 0 is this function, 1 the ``is_leaf`` getter, 2 whoever read ``is_leaf``.
    # Optimizers read ``param.is_leaf`` of every parameter they are given (in
    # ``add_param_group``), so that is where an uninitialized parameter is detected.
    reader = sys._getframe(2)
    if not isinstance(reader.f_locals.get("self"), torch.optim.Optimizer):
        return
    # Point the warning at the first frame outside torch (optimizer constructors are
    # wrapped by torch._dynamo): the user's call.
    level, frame = 3, reader
    while frame.f_back is not None and frame.f_globals.get("__name__", "").startswith("torch."):
        level, frame = level + 1, frame.f_back
    warnings.warn(_OPTIMIZER_WARNING, UserWarning, stacklevel=level)


class UninitializedParameter(torch.nn.Parameter):
    """A lazy module's parameter whose shape is not known yet.

    ``UninitializedParameter()`` holds an empty placeholder tensor (the library's lazy
    layers keep the known dimensions in it, e.g. ``(out_features, 0)``).
    :meth:`materialize` gives it its real shape in place, after which it is an
    ordinary :class:`torch.nn.Parameter` (same object). Handing it to an optimizer
    before that warns; sharing its memory raises.

    Example:
        >>> param = UninitializedParameter()
        >>> param.materialize((2, 3))
        >>> type(param).__name__, tuple(param.shape)
        ('Parameter', (2, 3))
    """

    @property
    def is_leaf(self) -> bool:  # type: ignore[override]
        _warn_if_read_by_optimizer()
        return True

    def materialize(
        self,
        shape: tuple[int, ...] | torch.Size,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """Give the parameter its real shape, in place; its values are uninitialized.

        Args:
            shape: The parameter's shape.
            device: Device of the data (default: the placeholder's).
            dtype: Type of the data (default: the placeholder's).
        """
        data = torch.empty(
            shape,
            device=self.data.device if device is None else device,
            dtype=self.data.dtype if dtype is None else dtype,
        )
        if data.device.type == self.data.device.type:
            self.data = data
            self.__class__ = torch.nn.Parameter  # type: ignore[assignment]
            return
        # ``.data`` cannot change the device type: swap the whole tensor (and class)
        # with a new parameter instead, keeping this object's identity.
        new = torch.nn.Parameter(data, self.requires_grad)
        torch.utils.swap_tensors(self, new)  # type: ignore[no-untyped-call]

    def share_memory_(self) -> NoReturn:
        """Raise: an uninitialized parameter has no memory to share yet.

        Raises:
            RuntimeError: Always.
        """
        message = (
            "cannot share the memory of an uninitialized lazy parameter: run a forward "
            "pass to initialize the module before calling `module.share_memory()`"
        )
        raise RuntimeError(message)

    def __reduce_ex__(self, proto: Any) -> tuple[Any, ...]:
        return (UninitializedParameter, (self.data, self.requires_grad))

    def __repr__(self) -> str:  # type: ignore[override]
        return f"UninitializedParameter(placeholder shape={tuple(self.data.shape)})"


# Key of a lazy module's entry in a state dict's ``_metadata`` that lists the lazy
# tensors not determined when it was saved: loading that state undetermines them again.
_UNDETERMINED = "lazy_undetermined"


_UNINITIALIZED_PARAMETERS = "Can't load uninitialized parameters in already initialized modules"
_UNINITIALIZED_BUFFERS = "Can't load uninitialized buffers in already initialized modules"


def _refuse_uninitialized_state(
    summary: str, module: torch.nn.Module, key: str, shape: torch.Size
) -> NoReturn:
    message = (
        f"{summary}: {type(module).__name__}'s {key!r} has shape {tuple(shape)}, but the "
        "state being loaded was saved before the module's first forward, when it was not "
        "initialized; load a state saved after the first forward, or into a new module"
    )
    raise RuntimeError(message)


class LazyInitializationMixin(torch.nn.Module):
    """A mixin for modules that create some parameters and buffers at their first forward.

    List the lazy ones in :attr:`lazy_parameter_names` and :attr:`lazy_buffer_names`.
    After the base class's ``__init__``, each lazy parameter that does not exist yet
    (or is empty, e.g. created with a size of ``0``) becomes an
    :class:`UninitializedParameter`, and each lazy buffer that does not exist yet an
    empty tensor. The subclass then creates them when it sees its first input,
    typically by assigning a new :class:`torch.nn.Parameter` or calling
    :meth:`UninitializedParameter.materialize`, and defers ``reset_parameters``
    until :attr:`lazy_parmeters_determined`.

    State dicts leave out the lazy parameters that are not determined yet (and list
    them in the state dict's ``_metadata``). Loading a state that has them determines
    them (materialized with the state's shape), and empty lazy buffers take the
    state's shape. Loading a state saved before they were determined into a module
    whose lazy tensors are determined raises :class:`RuntimeError` ("Can't load
    uninitialized parameters in already initialized modules", or the same for
    buffers), as PPE does, rather than discarding them.

    Example:
        >>> class LazyScale(LazyInitializationMixin, torch.nn.Module):
        ...     lazy_parameter_names = ("scale",)
        ...
        ...     def forward(self, x):
        ...         if isinstance(self.scale, UninitializedParameter):
        ...             self.scale.materialize(x.shape[-1:])
        ...             torch.nn.init.ones_(self.scale)
        ...         return x * self.scale
        >>> LazyScale()(torch.ones(2, 3)).shape
        torch.Size([2, 3])
    """

    # TorchScript compiles a module's properties unless listed here; this one reads
    # Python-only state.
    __jit_unused_properties__ = ["lazy_parmeters_determined"]

    # Annotations only for type checkers: TorchScript reads the class annotations of a
    # module at runtime and cannot evaluate them as strings.
    if TYPE_CHECKING:
        lazy_parameter_names: tuple[str, ...]
        lazy_buffer_names: tuple[str, ...]
        _lazy_ready: bool

    #: Parameters that are created lazily.
    lazy_parameter_names = ()
    #: Buffers that are created lazily.
    lazy_buffer_names = ()

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # While False, an empty lazy parameter counts as not determined: the base
        # ``__init__`` may call ``reset_parameters`` before the placeholders exist.
        object.__setattr__(self, "_lazy_ready", False)
        super().__init__(*args, **kwargs)
        self._lazy_add_placeholders()
        self._lazy_ready = True

    def _lazy_add_placeholders(self) -> None:
        for name in self.lazy_parameter_names:
            if name not in self._parameters:
                self.register_parameter(name, UninitializedParameter())
                continue
            param = self._parameters[name]
            if (
                param is not None
                and param.numel() == 0
                and not isinstance(param, UninitializedParameter)
            ):
                self._parameters[name] = UninitializedParameter(param.data, param.requires_grad)
        for name in self.lazy_buffer_names:
            if name not in self._buffers:
                self.register_buffer(name, torch.empty(0))

    @property
    def lazy_parmeters_determined(self) -> bool:
        """Returns if all lazy parameters are determined (spelling kept from PPE).

        It may be read during ``__init__`` (in ``reset_parameters``): lazy parameters
        that do not exist yet, or are still empty, are not determined then.
        """
        params = self.__dict__.get("_parameters")
        if params is None:
            return False
        ready = self.__dict__.get("_lazy_ready", True)
        for name in self.lazy_parameter_names:
            if name not in params:
                return False
            param = params[name]
            if isinstance(param, UninitializedParameter):
                return False
            if not ready and param is not None and param.numel() == 0:
                return False
        return True

    def state_dict(self, *args: Any, **kwargs: Any) -> Any:
        """Returns a dictionary containing a whole state of the module.

        Lazy parameters that are not determined yet are left out, so that loading the
        state tells them apart from determined ones (see the class description).
        Arguments are those of :meth:`torch.nn.Module.state_dict`.
        """
        # The work is done in ``_save_to_state_dict``, which also runs when a parent
        # module saves this one.
        return super().state_dict(*args, **kwargs)

    # ------------------------------------------------------------- torch.nn.Module hooks
    def _lazy_undetermined(self) -> list[str]:
        """Names of the lazy tensors that are not determined."""
        return [
            name
            for name in self.lazy_parameter_names
            if isinstance(self._parameters.get(name), UninitializedParameter)
        ]

    def _save_to_state_dict(
        self, destination: dict[str, Any], prefix: str, keep_vars: bool
    ) -> None:
        super()._save_to_state_dict(destination, prefix, keep_vars)
        for name in self.lazy_parameter_names:
            if isinstance(self._parameters.get(name), UninitializedParameter):
                destination.pop(prefix + name, None)
        undetermined = self._lazy_undetermined()
        metadata = getattr(destination, "_metadata", None)
        if undetermined and metadata is not None:
            metadata.setdefault(prefix[:-1], {})[_UNDETERMINED] = undetermined

    def _lazy_check_load(
        self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Mapping[str, Any]
    ) -> None:
        """Refuse a state saved before its lazy tensors were initialized, as PPE does.

        Loading it would turn this module's initialized (maybe trained) lazy tensors
        back into uninitialized ones. Buffers are checked first, as in PPE.
        """
        for name in self.lazy_buffer_names:
            buffer = self._buffers.get(name)
            value = state_dict.get(prefix + name)
            if (
                buffer is not None
                and buffer.numel() > 0
                and isinstance(value, torch.Tensor)
                and value.numel() == 0
            ):
                _refuse_uninitialized_state(
                    _UNINITIALIZED_BUFFERS, self, prefix + name, buffer.shape
                )
        undetermined = local_metadata.get(_UNDETERMINED, ())
        for name in self.lazy_parameter_names:
            param = self._parameters.get(name)
            if (
                param is not None
                and not isinstance(param, UninitializedParameter)
                and name in undetermined
            ):
                _refuse_uninitialized_state(
                    _UNINITIALIZED_PARAMETERS, self, prefix + name, param.shape
                )

    def _lazy_prepare_load(
        self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Mapping[str, Any]
    ) -> None:
        """Give the lazy tensors the shapes of the state about to be loaded."""
        self._lazy_check_load(state_dict, prefix, local_metadata)
        for name in self.lazy_parameter_names:
            param = self._parameters.get(name)
            value = state_dict.get(prefix + name)
            if (
                isinstance(param, UninitializedParameter)
                and isinstance(value, torch.Tensor)
                and value.numel() > 0
            ):
                param.materialize(value.shape)
        for name in self.lazy_buffer_names:
            buffer = self._buffers.get(name)
            value = state_dict.get(prefix + name)
            if (
                buffer is not None
                and buffer.numel() == 0
                and isinstance(value, torch.Tensor)
                and value.shape != buffer.shape
            ):
                self._buffers[name] = torch.empty(
                    value.shape, dtype=buffer.dtype, device=buffer.device
                )

    def _load_from_state_dict(
        self,
        state_dict: Mapping[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        self._lazy_prepare_load(state_dict, prefix, local_metadata)
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )
        for name in self.lazy_parameter_names:
            key = prefix + name
            if (
                key in missing_keys
                and key not in state_dict
                and isinstance(self._parameters.get(name), UninitializedParameter)
            ):
                missing_keys.remove(key)  # left out of the state on purpose

    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        pending = [
            name
            for name in self.lazy_parameter_names
            if isinstance(self._parameters.get(name), UninitializedParameter)
        ]
        result = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        # A conversion that cannot reuse the storage (e.g. to another device) replaces
        # parameters with plain ones; keep them marked as uninitialized.
        for name in pending:
            param = self._parameters.get(name)
            if param is not None and not isinstance(param, UninitializedParameter):
                self._parameters[name] = UninitializedParameter(param.data, param.requires_grad)
        return result
