"""Base of the library's lazy layers: one size (features/channels) inferred from the input."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch
from torch.utils.hooks import RemovableHandle

from pytorch_pfn_extras.nn._lazy import LazyInitializationMixin, UninitializedParameter


def _lazy_pre_forward(
    module: _LazySizeMixin, args: tuple[Any, ...], kwargs: dict[str, Any]
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


class _LazySizeMixin(LazyInitializationMixin):
    """A torch layer whose size argument may be ``None``: inferred at the first forward.

    A concrete class passes the size as the first argument of ``__init__`` and
    implements ``_lazy_infer_size``, ``_lazy_shapes``, ``_lazy_size_from_tensor`` and
    ``_lazy_set_size``. While the size is unknown the lazy tensors are empty
    placeholders that keep the known dimensions (``(out_features, 0)``), so the module
    can be moved, copied and saved. The first forward (or loading the state of a
    determined module) materializes them in place and initializes them with the base
    class's ``reset_parameters``, drawing what the eager module would draw.
    """

    if TYPE_CHECKING:  # not at runtime: TorchScript cannot read string annotations
        _lazy_pending: bool
        _lazy_hook: RemovableHandle | None

    def __init__(self, size: int | None, *args: Any, **kwargs: Any) -> None:
        # ``None`` or ``0`` (PPE passes ``size or 0`` to the base class) means "infer".
        # Set before the base ``__init__``, whose ``reset_parameters`` call must know.
        object.__setattr__(self, "_lazy_pending", not size)
        object.__setattr__(self, "_lazy_hook", None)
        super().__init__(size or 0, *args, **kwargs)
        if self._lazy_pending:
            with torch.no_grad():
                for name, param in self.named_parameters(recurse=False):
                    if name not in self.lazy_parameter_names:
                        param.zero_()  # e.g. a bias: deterministic until initialized
            self._lazy_defer()

    # ------------------------------------------------------------- subclass contract
    def _lazy_infer_size(self, input: torch.Tensor) -> int:
        raise NotImplementedError

    def _lazy_shapes(self, size: int) -> dict[str, tuple[int, ...]]:
        raise NotImplementedError

    def _lazy_size_from_tensor(self, name: str, tensor: torch.Tensor) -> int | None:
        raise NotImplementedError

    def _lazy_set_size(self, size: int | None) -> None:
        raise NotImplementedError

    # ------------------------------------------------------------- state changes
    @property
    def lazy_parmeters_determined(self) -> bool:
        """Returns if all lazy parameters are determined (spelling kept from PPE)."""
        return not self._lazy_pending

    def _lazy_defer(self) -> None:
        self._lazy_set_size(None)
        self._lazy_pending = True
        self._lazy_hook = self.register_forward_pre_hook(_lazy_pre_forward, with_kwargs=True)

    def _lazy_initialize(self, size: int) -> None:
        shapes = self._lazy_shapes(size)
        for name in self.lazy_parameter_names:
            param = self._parameters.get(name)
            if isinstance(param, UninitializedParameter):
                param.materialize(shapes[name])
        for name in self.lazy_buffer_names:
            buffer = self._buffers.get(name)
            if buffer is not None:
                buffer.data = torch.empty(shapes[name], dtype=buffer.dtype, device=buffer.device)
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

    # ------------------------------------------------------------- loading
    def _lazy_names(self) -> list[str]:
        return [
            name
            for name in (*self.lazy_parameter_names, *self.lazy_buffer_names)
            if getattr(self, name) is not None
        ]

    def _lazy_size_from_state(self, tensors: dict[str, torch.Tensor]) -> int | None:
        """The size determined tensors imply, or ``None`` if they are not determined.

        Returns ``None`` as well when the tensors do not have the shapes that size
        implies, so that ``load_state_dict`` reports the mismatch itself.
        """
        size = None
        for name, tensor in tensors.items():
            if tensor.numel() > 0:
                size = self._lazy_size_from_tensor(name, tensor)
                break
        if size is None:
            return None
        shapes = self._lazy_shapes(size)
        if any(tuple(tensor.shape) != shapes[name] for name, tensor in tensors.items()):
            return None
        return size

    def _lazy_undetermined(self) -> list[str]:
        return self._lazy_names() if self._lazy_pending else []

    def _lazy_prepare_load(
        self, state_dict: Mapping[str, Any], prefix: str, local_metadata: Mapping[str, Any]
    ) -> None:
        if not self._lazy_pending:
            self._lazy_check_load(state_dict, prefix, local_metadata)
            return
        tensors = {
            name: value
            for name in self._lazy_names()
            if isinstance(value := state_dict.get(prefix + name), torch.Tensor)
        }
        size = self._lazy_size_from_state(tensors)
        if size is not None:
            self._lazy_initialize(size)
