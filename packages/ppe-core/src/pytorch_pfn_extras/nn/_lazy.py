"""Machinery shared by the lazy modules: the mixin and the uninitialized parameter."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

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

    It holds an empty placeholder tensor. The first forward of the owning module
    materializes it in place (same object, real shape), after which it is an ordinary
    :class:`torch.nn.Parameter`. Handing it to an optimizer before that warns.
    """

    @property
    def is_leaf(self) -> bool:  # type: ignore[override]
        _warn_if_read_by_optimizer()
        return True

    def __reduce_ex__(self, proto: Any) -> tuple[Any, ...]:
        return (UninitializedParameter, (self.data, self.requires_grad))

    def __repr__(self) -> str:  # type: ignore[override]
        return f"UninitializedParameter(placeholder shape={tuple(self.data.shape)})"


def _lazy_pre_forward(
    module: LazyInitializationMixin, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    if args:
        input = args[0]
    elif "input" in kwargs:
        input = kwargs["input"]
    else:
        message = (
            f"{type(module).__name__} must see its input tensor on the first forward "
            f"to infer its size, got args={args!r} kwargs={sorted(kwargs)!r}"
        )
        raise TypeError(message)
    if not isinstance(input, torch.Tensor):
        message = (
            f"{type(module).__name__} infers its size from a torch.Tensor input, "
            f"got {type(input).__name__}"
        )
        raise TypeError(message)
    module._lazy_initialize(module._lazy_infer_size(input))
    module.reset_parameters()


class LazyInitializationMixin(torch.nn.Module):
    """Mixin that lets a module infer one size (input features/channels) lazily.

    A concrete class lists the parameters and buffers whose shape depends on the lazy
    size in :attr:`lazy_parameter_names` / :attr:`lazy_buffer_names`, calls
    :meth:`_lazy_begin` before and :meth:`_lazy_end` after the base ``__init__`` (which
    it calls with a size of ``0``), and implements ``_lazy_infer_size``,
    ``_lazy_shapes``, ``_lazy_size_from_tensor`` and ``_lazy_set_size``.

    While the size is unknown the lazy tensors are empty placeholders, so the module
    can be moved, copied, and saved/loaded with ``state_dict``. The first forward (or
    loading a state dict of an initialized module) materializes them in place and
    initializes them with the base class's ``reset_parameters``.
    """

    # Annotations only for type checkers: TorchScript reads the class annotations of a
    # module at runtime and cannot evaluate them as strings.
    if TYPE_CHECKING:
        lazy_parameter_names: tuple[str, ...]
        lazy_buffer_names: tuple[str, ...]
        _lazy_pending: bool
        _lazy_hook: RemovableHandle | None

    #: Parameters whose shape depends on the lazy size.
    lazy_parameter_names = ()
    #: Buffers whose shape depends on the lazy size.
    lazy_buffer_names = ()

    @property
    def lazy_parmeters_determined(self) -> bool:
        """Whether all lazy parameters have their final shape (spelling kept from PPE)."""
        return not self._lazy_pending

    # ------------------------------------------------------------- subclass contract
    def _lazy_infer_size(self, input: torch.Tensor) -> int:
        raise NotImplementedError

    def _lazy_shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _lazy_size_from_tensor(self, name: str, tensor: torch.Tensor) -> int | None:
        raise NotImplementedError

    def _lazy_set_size(self, size: int | None) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------- construction
    def _lazy_begin(self, pending: bool) -> None:
        # Runs before ``Module.__init__``: ``reset_parameters`` (called by the base
        # ``__init__``) must already know that the shapes are placeholders.
        object.__setattr__(self, "_lazy_pending", pending)
        object.__setattr__(self, "_lazy_hook", None)

    def _lazy_end(self) -> None:
        if not self._lazy_pending:
            return
        with torch.no_grad():
            for name, param in self.named_parameters(recurse=False):
                if name not in self.lazy_parameter_names:
                    param.zero_()  # e.g. a bias: deterministic until initialized
        for name in self.lazy_parameter_names:
            placeholder = self._parameters.get(name)
            if placeholder is not None:
                self._parameters[name] = UninitializedParameter(
                    placeholder.data, placeholder.requires_grad
                )
        self._lazy_set_size(None)
        self._lazy_hook = self.register_forward_pre_hook(_lazy_pre_forward, with_kwargs=True)

    # ------------------------------------------------------------- initialization
    def _lazy_initialize(self, size: int) -> None:
        shapes = self._lazy_shapes(size)
        with torch.no_grad():
            for name in self.lazy_parameter_names:
                param = self._parameters.get(name)
                if param is None:
                    continue
                param.data = torch.empty(shapes[name], dtype=param.dtype, device=param.device)
                if isinstance(param, UninitializedParameter):
                    param.__class__ = torch.nn.Parameter  # type: ignore[assignment]
            for name in self.lazy_buffer_names:
                buffer = self._buffers.get(name)
                if buffer is not None:
                    buffer.data = torch.empty(
                        shapes[name], dtype=buffer.dtype, device=buffer.device
                    )
        self._lazy_set_size(size)
        self._lazy_pending = False
        if self._lazy_hook is not None:
            self._lazy_hook.remove()
            self._lazy_hook = None

    def reset_parameters(self) -> None:
        """Initialize parameters as the base module does; a no-op while the size is unknown."""
        if self._lazy_pending:
            return
        super().reset_parameters()  # type: ignore[misc]

    # ------------------------------------------------------------- torch.nn.Module hooks
    def _apply(self, fn: Any, recurse: bool = True) -> Any:
        result = super()._apply(fn, recurse)  # type: ignore[no-untyped-call]
        if self._lazy_pending:
            # A conversion that cannot reuse the storage (e.g. to another device)
            # replaces parameters with plain ones; keep them marked as uninitialized.
            for name in self.lazy_parameter_names:
                param = self._parameters.get(name)
                if param is not None and not isinstance(param, UninitializedParameter):
                    self._parameters[name] = UninitializedParameter(param.data, param.requires_grad)
        return result

    def _lazy_size_from_state(self, state_dict: Mapping[str, Any], prefix: str) -> int | None:
        """The size an initialized module's state implies, or ``None`` if it has none.

        Returns ``None`` as well when the state's lazy tensors do not have the shapes
        that size implies, so that ``load_state_dict`` reports the mismatch itself.
        """
        names = [
            name
            for name in (*self.lazy_parameter_names, *self.lazy_buffer_names)
            if getattr(self, name) is not None
            and isinstance(state_dict.get(prefix + name), torch.Tensor)
        ]
        size = None
        for name in names:
            tensor = state_dict[prefix + name]
            if tensor.numel() > 0:
                size = self._lazy_size_from_tensor(name, tensor)
                break
        if size is None:
            return None
        shapes = self._lazy_shapes(size)
        for name in names:
            if tuple(state_dict[prefix + name].shape) != shapes[name]:
                return None
        return size

    def _load_from_state_dict(
        self, state_dict: Mapping[str, Any], prefix: str, *args: Any, **kwargs: Any
    ) -> None:
        if self._lazy_pending:
            size = self._lazy_size_from_state(state_dict, prefix)
            if size is not None:
                self._lazy_initialize(size)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)
