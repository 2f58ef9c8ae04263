"""``BaseRuntime``: the device-specific callbacks that ``ppe.to`` and the handler invoke."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, SupportsIndex

import torch

from pytorch_pfn_extras.runtime._batch import select_outputs

if TYPE_CHECKING:
    from pytorch_pfn_extras.runtime._code_block import CodeBlock

# ``nullcontext`` keeps no state, so one instance serves every ``trace`` call.
_NO_TRACE: contextlib.AbstractContextManager[None] = contextlib.nullcontext()


def type_name(obj: object) -> str:
    """Return the qualified name of ``obj``'s type, without ``builtins.``."""
    cls = type(obj)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


class BaseRuntime:
    """A base class for collections of device-specific callback functions.

    ``ppe.to`` creates one runtime per call and tags the moved module (and every
    submodule) with it; the training handler and the CodeBlock API then call
    the runtime's callbacks. ``ppe.runtime.runtime_registry`` maps device types
    to runtime classes.

    Subclasses implement ``move_module``, ``move_tensor``, ``convert_batch``
    and ``execute`` for their device; every other callback is a no-op here.
    The tag is the module's ``_ppe_runtime`` attribute, so
    ``module._ppe_runtime.initialize_module(module, batch)`` works in a hook.

    A runtime belongs to the process and the device it was created for, and
    may hold handles that cannot be serialized: pickling or copying a runtime
    (``pickle``, ``torch.save``, ``copy.copy``, ``copy.deepcopy``) gives
    ``None``. That is what makes a pickled or deep-copied module come back
    untagged; a subclass that must be picklable on its own overrides
    ``__reduce_ex__``.

    Args:
        device_spec: The device that modules and tensors are transferred to,
            such as ``"cuda:0"`` or the name of a custom device.
        options: A configuration dictionary the runtime's methods can use.

    Raises:
        TypeError: ``device_spec`` is neither a string nor a ``torch.device``,
            or ``options`` is not a mapping.
    """

    def __init__(self, device_spec: str | torch.device, options: Mapping[str, Any] | None) -> None:
        if not isinstance(device_spec, (str, torch.device)):
            message = f"device_spec must be a str or torch.device, got {type_name(device_spec)}"
            raise TypeError(message)
        if options is not None and not isinstance(options, Mapping):
            message = f"runtime options must be a mapping, got {type_name(options)}"
            raise TypeError(message)
        self.device_spec = device_spec
        self.options: dict[str, Any] = {} if options is None else dict(options)

    def __reduce_ex__(self, protocol: SupportsIndex) -> tuple[Any, ...]:
        # ``NoneType()`` is ``None``: the pickle references builtins only, so a
        # module pickled while tagged loads even where PPE is not installed.
        return (type(None), ())

    def _not_implemented(self, method: str) -> NotImplementedError:
        message = f"{type(self).__qualname__} does not implement {method}()"
        return NotImplementedError(message)

    def convert_batch(self, args: Any) -> Any:
        """Transfer the given batch to the device.

        Args:
            args: A tensor or a (nested) dict, list or tuple of tensors.

        Returns:
            The batch, with the same structure, on the device.
        """
        raise self._not_implemented("convert_batch")

    def move_module(self, module: torch.nn.Module) -> torch.nn.Module | None:
        """Transfer the module to the device.

        Args:
            module: The module to move (``ppe.to`` has already tagged it).

        Returns:
            The moved module, or ``None`` when ``module`` was changed in place.
        """
        raise self._not_implemented("move_module")

    def move_tensor(self, tensor: torch.Tensor) -> torch.Tensor:
        """Transfer the tensor to the device.

        Args:
            tensor: The tensor to move.

        Returns:
            The tensor on the device.
        """
        raise self._not_implemented("move_tensor")

    def initialize_module(
        self,
        module: torch.nn.Module,
        loader_or_batch: Iterable[Any] | torch.Tensor | Any,
        optimizer: torch.optim.Optimizer | None = None,
    ) -> None:
        """Initialize the module at the beginning of training or inference.

        Args:
            module: The module to initialize.
            loader_or_batch: A data loader or one batch, to trace the module with.
            optimizer: The optimizer that trains the module, if any.
        """

    def train_epoch_begin(self, module: torch.nn.Module) -> None:
        """Preprocess of each epoch.

        Args:
            module: The module being trained.
        """

    def train_epoch_end(self, module: torch.nn.Module) -> None:
        """Completion of each epoch.

        Args:
            module: The module being trained.
        """

    def train_pre_step(
        self, trainer: Any, module: torch.nn.Module, batch_idx: int, batch: Any
    ) -> None:
        """Preprocess of each step.

        Args:
            trainer: The trainer running the step.
            module: The module being trained.
            batch_idx: Index of the batch within the epoch.
            batch: The batch of this step.
        """

    def train_post_step(
        self, trainer: Any, module: torch.nn.Module, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        """Postprocess of each step.

        Args:
            trainer: The trainer running the step.
            module: The module being trained.
            batch_idx: Index of the batch within the epoch.
            batch: The batch of this step, as the loader yielded it (before
                ``convert_batch``), the same object ``train_pre_step`` received.
            outs: The outputs of the step.
        """

    def train_validation_begin(self, module: torch.nn.Module) -> None:
        """The method called before each evaluation.

        Args:
            module: The module being evaluated.
        """

    def train_validation_end(self, module: torch.nn.Module) -> None:
        """The method called after each evaluation.

        Args:
            module: The module being evaluated.
        """

    def train_cleanup(self, module: torch.nn.Module) -> None:
        """A method called only once when completing a training run.

        Args:
            module: The module that was trained.
        """

    def eval_pre_step(
        self, evaluator: Any, module: torch.nn.Module, batch_idx: int, batch: Any
    ) -> None:
        """The method called at the beginning of each evaluation step.

        Args:
            evaluator: The evaluator running the step.
            module: The module being evaluated.
            batch_idx: Index of the batch.
            batch: The batch of this step.
        """

    def eval_post_step(
        self, evaluator: Any, module: torch.nn.Module, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        """The method called at the end of each evaluation step.

        Args:
            evaluator: The evaluator running the step.
            module: The module being evaluated.
            batch_idx: Index of the batch.
            batch: The batch of this step, as the loader yielded it (before
                ``convert_batch``), the same object ``eval_pre_step`` received.
            outs: The outputs of the step.
        """

    def execute(self, code_block: CodeBlock, batch: Any) -> Any:
        """Execute a CodeBlock on the device (called by ``CodeBlock.__call__``).

        Args:
            code_block: The block: the function to run and what to do after it
                (backward, optimizer steps).
            batch: The input of the block.

        Returns:
            The outputs of ``code_block.func``.
        """
        raise self._not_implemented("execute")

    def map(
        self,
        func: Callable[[Any], Any],
        iterable: Iterable[Any],
        out_keys: Iterable[str] | str | None = None,
        device: str | torch.device = "cpu",
    ) -> Iterator[Any]:
        """Apply ``func`` to every item of ``iterable``, lazily.

        Runtimes that execute asynchronously override this to keep several
        batches in flight. The default runs one item at a time.

        Args:
            func: The function (usually a CodeBlock) applied to each item.
            iterable: The inputs.
            out_keys: Keys of the outputs to return. ``None`` returns the whole
                output; otherwise each output must be a mapping, and only these
                entries are returned (as a dict).
            device: The device that the returned tensors are moved to.

        Returns:
            An iterator over the (selected, moved) outputs.

        Raises:
            KeyError: An output lacks one of ``out_keys`` (raised while iterating).
        """
        return map_outputs(func, iterable, out_keys, device)

    @classmethod
    def trace(cls, event_name: str | None, arg: Any) -> contextlib.AbstractContextManager[None]:
        """Context manager for tracing PPE events in the custom device tools.

        The default does nothing; device runtimes override it to annotate their
        profiler's timeline.

        Args:
            event_name: The name of the event being traced.
            arg: The object the event concerns (a batch, a module...).

        Returns:
            A context manager spanning the event.
        """
        return _NO_TRACE


def map_outputs(
    func: Callable[[Any], Any],
    iterable: Iterable[Any],
    out_keys: Iterable[str] | str | None,
    device: str | torch.device,
) -> Iterator[Any]:
    """Lazily yield ``func(item)`` for each item, keeping ``out_keys`` and moving to ``device``.

    The keys and the device are checked now, before the first item is drawn.
    """
    keys = None if out_keys is None else _key_tuple(out_keys)
    target = torch.device(device)
    return (select_outputs(func(item), keys, target) for item in iterable)


def _key_tuple(out_keys: Iterable[str] | str) -> tuple[str, ...]:
    if isinstance(out_keys, str):
        return (out_keys,)
    keys = tuple(out_keys)
    bad = [key for key in keys if not isinstance(key, str)]
    if bad:
        message = f"out_keys must be strings, got {bad!r}"
        raise TypeError(message)
    return keys
