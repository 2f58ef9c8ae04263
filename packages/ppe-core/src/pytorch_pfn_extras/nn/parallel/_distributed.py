"""Data parallelism that averages gradients with plain collectives after backward."""

from __future__ import annotations

import contextlib
import inspect
import warnings
import weakref
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch.utils.hooks import RemovableHandle

from pytorch_pfn_extras.nn.parallel._collectives import broadcast_from_first
from pytorch_pfn_extras.nn.parallel._reducer import Reducer, missing_gradients_error, missing_names

if TYPE_CHECKING:
    from torch.distributed import ProcessGroup

CollectiveFunction = Callable[[Sequence[torch.Tensor], "ProcessGroup | None"], None]

# Keyword arguments of torch.nn.parallel.DistributedDataParallel that have no meaning
# here; accepted (with a warning) so that the two classes are interchangeable.
_TORCH_DDP_ARGUMENTS = frozenset(
    {
        "device_ids",
        "output_device",
        "dim",
        "init_sync",
        "bucket_cap_mb",
        "find_unused_parameters",
        "check_reduction",
        "gradient_as_bucket_view",
        "static_graph",
        "delay_all_reduce_named_params",
        "param_to_hook_all_reduce",
        "mixed_precision",
        "device_mesh",
        "skip_all_reduce_unused_params",
        "bucket_cap_mb_list",
        "batched_grad_copy",
        "forward_sync_buffers",
    }
)


def _torch_ddp_arguments() -> frozenset[str]:
    # Names added by newer torch releases are accepted too.
    signature = inspect.signature(torch.nn.parallel.DistributedDataParallel.__init__)
    return _TORCH_DDP_ARGUMENTS | frozenset(signature.parameters) - {"self", "module"}


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


def _unless_alone(collective: CollectiveFunction) -> CollectiveFunction:
    """``collective``, skipped without a process group: one process is a group of one."""

    def run(tensors: Sequence[torch.Tensor], group: ProcessGroup | None) -> None:
        if _distributed():
            collective(tensors, group)

    return run


def _queue_end_of_backward(callback: Callable[[], None]) -> None:
    # The autograd engine's callback queue: run ``callback`` once the current backward
    # pass has finished accumulating every gradient (torch's own DDP/FSDP use it too).
    engine: Any = torch.autograd.Variable._execution_engine
    engine.queue_callback(callback)


def _tensors_requiring_grad(outputs: Any) -> Iterator[torch.Tensor]:
    if isinstance(outputs, torch.Tensor):
        if outputs.requires_grad:
            yield outputs
    elif isinstance(outputs, (list, tuple)):
        for item in outputs:
            yield from _tensors_requiring_grad(item)
    elif isinstance(outputs, dict):
        for item in outputs.values():
            yield from _tensors_requiring_grad(item)


class DistributedDataParallel(torch.nn.Module):
    """Module for distributed data parallelism.

    Every process runs the same model on its own part of the batch. At construction
    the parameters (and buffers, with ``broadcast_buffers``) of the first rank are
    broadcast to all ranks; after every backward pass of an output of this module, the
    gradients are averaged over the ranks, so that each rank holds the gradient of the
    mean loss over the whole batch, and the buffers are broadcast again.

    The default reduction overlaps with backward: the gradients are packed into buckets
    (reverse parameter order, a 1 MiB first bucket then 25 MiB ones, per device and
    dtype), and a bucket whose gradients are all computed is all-reduced asynchronously
    while backward goes on; the end of backward waits for the last ones. Every rank issues
    the same collectives in the same order, whatever its graph.

    Unlike :class:`torch.nn.parallel.DistributedDataParallel`, the computation graph may
    differ between ranks and between iterations. With ``negotiate_grads`` (the default), a
    parameter that got no gradient on some ranks (an unused branch) counts as a zero
    gradient there, and every rank ends with the average; a parameter that no rank used
    keeps no gradient. With ``negotiate_grads=False`` a parameter that requires a gradient
    and got none is an error naming it (a ``RuntimeError`` raised by ``backward()``).

    Args:
        module: torch.nn.Module object to be trained.
        broadcast_buffers: Broadcast buffers from the first rank at construction and
            after backward computations. Broadcasting buffers may be helpful when the
            module includes BatchNormalization. However, it will degrade training
            throughput.
        negotiate_grads: Treat a missing gradient as zero (needed when the computation
            graph of the module is dynamic: a parameter gets no gradient on some ranks);
            with ``False``, a parameter without a gradient after backward is an error.
        process_group: Process group used for broadcasting and reducing
            (default: the world group).
        reduce_function: ``fn(grads, process_group)`` replacing the default all-reduce;
            it must reduce ``grads`` in place (the default averages them). It runs
            under ``torch.no_grad()`` at the end of backward (no overlap), after the ranks
            agreed on the parameters with a gradient (``negotiate_grads``).
        broadcast_function: ``fn(tensors, process_group)`` replacing the default
            broadcast from the group's first rank; it must update ``tensors`` (the
            parameters, then the buffers) in place, and runs under ``torch.no_grad()``.
        **kwargs: Arguments of :class:`torch.nn.parallel.DistributedDataParallel`
            (``device_ids``, ``find_unused_parameters``, ...), accepted for
            compatibility and ignored with a warning.

    Without an initialized default process group (single-process use) the default
    collectives do nothing, as in a group of one rank; custom ``reduce_function`` and
    ``broadcast_function`` are still called. :meth:`state_dict` and
    :meth:`load_state_dict` are those of the wrapped module (no ``module.`` prefix), so
    checkpoints load into the bare model.

    Raises:
        TypeError: A keyword argument that torch's DistributedDataParallel does not have.

    Example:
        >>> torch.distributed.init_process_group("gloo", ...)  # doctest: +SKIP
        >>> model = DistributedDataParallel(Net())  # doctest: +SKIP
        >>> loss = model(x_local).mean()  # doctest: +SKIP
        >>> loss.backward()  # grads are now averaged over the ranks  # doctest: +SKIP
    """

    def __init__(
        self,
        module: torch.nn.Module,
        broadcast_buffers: bool = True,
        negotiate_grads: bool = True,
        process_group: ProcessGroup | None = None,
        reduce_function: CollectiveFunction | None = None,
        broadcast_function: CollectiveFunction | None = None,
        **kwargs: Any,
    ) -> None:
        """This module receives keyword arguments for the compatibility with
        torch.nn.parallel.DistributedDataParallel. It shows a warning when setting the
        ignored arguments.
        """
        super().__init__()
        if kwargs:
            unknown = sorted(set(kwargs) - _TORCH_DDP_ARGUMENTS)
            if unknown:
                unknown = sorted(set(unknown) - _torch_ddp_arguments())
            if unknown:
                message = (
                    f"DistributedDataParallel got unexpected keyword arguments {unknown}; "
                    "it accepts module, broadcast_buffers, negotiate_grads, process_group, "
                    "reduce_function, broadcast_function and the keyword arguments of "
                    "torch.nn.parallel.DistributedDataParallel (which it ignores)"
                )
                raise TypeError(message)
            message = (
                "DistributedDataParallel ignores these arguments of "
                f"torch.nn.parallel.DistributedDataParallel: {', '.join(sorted(kwargs))}"
            )
            warnings.warn(message, UserWarning, stacklevel=2)
        self.module = module
        self._broadcast_buffers = broadcast_buffers
        self._negotiate_grads = negotiate_grads
        self._process_group = process_group
        self._reduce_function = reduce_function
        # The default reduction, overlapped with backward (None with a custom reduce_function).
        self._reducer = (
            Reducer(module, process_group, negotiate_grads) if reduce_function is None else None
        )
        if self._reducer is not None:
            weakref.finalize(self, self._reducer.remove)
        self._broadcast_function: CollectiveFunction = broadcast_function or _unless_alone(
            broadcast_from_first
        )
        self._require_sync = True
        self._sync_queued = False
        self._comm_hooks: OrderedDict[int, Callable[[DistributedDataParallel], None]] = (
            OrderedDict()
        )

        state: list[torch.Tensor] = [*module.parameters()]
        if broadcast_buffers:
            state.extend(module.buffers())
        if state:
            self._broadcast(state)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """Run the wrapped module; a backward through the outputs synchronizes gradients."""
        outputs = self.module(*args, **kwargs)
        if self._require_sync and torch.is_grad_enabled():
            self._sync_queued = False
            for tensor in _tensors_requiring_grad(outputs):
                tensor.register_hook(self._on_output_grad)  # type: ignore[no-untyped-call]
        return outputs

    def state_dict(self) -> dict[str, Any]:  # type: ignore[override]
        """Returns the wrapped module's state dict, whose keys have no ``module.`` prefix.

        Example:
            >>> torch.save(ddp.state_dict(), "model.pt")  # doctest: +SKIP
            >>> Net().load_state_dict(torch.load("model.pt"))  # the bare model  # doctest: +SKIP
        """
        return self.module.state_dict()

    def load_state_dict(
        self, state_dict: Mapping[str, Any], strict: bool = True, *args: Any
    ) -> Any:
        """Load a state dict of the wrapped module (keys without ``module.`` prefix).

        Args:
            state_dict: The state, as :meth:`state_dict` or the bare model returns it.
            strict: Require the keys to match exactly.
            *args: Further arguments of :meth:`torch.nn.Module.load_state_dict`
                (``assign``).

        Returns:
            The wrapped module's ``load_state_dict`` result (missing and unexpected keys).
        """
        return self.module.load_state_dict(state_dict, strict, *args)

    @contextlib.contextmanager
    def no_sync(self) -> Iterator[None]:
        """A context manager to disable synchronization after backward.

        Gradients of the forward passes run inside the context stay local to each rank
        and accumulate; the first backward of a forward run outside the context
        averages the accumulated gradients.

        Example:
            >>> with ddp.no_sync():  # doctest: +SKIP
            ...     ddp(x1).sum().backward()  # local only
            >>> ddp(x2).sum().backward()  # averages the sum of both  # doctest: +SKIP
        """
        previous = self._require_sync
        self._require_sync = False
        try:
            yield
        finally:
            self._require_sync = previous

    def register_comm_hook(
        self, hook: Callable[[DistributedDataParallel], None]
    ) -> RemovableHandle:
        """Registers a hook function, invoked with this module before each synchronization.

        The hook sees the local gradients and may modify them in place (e.g. scale or
        compress them): while a hook is registered, the default reduction starts at the
        end of backward, after the hooks, instead of overlapping with it.

        Args:
            hook: Callable invoked as ``hook(ddp_module)`` after backward, before the
                gradients are reduced.

        Returns:
            A handle whose ``remove()`` unregisters the hook.
        """
        handle = RemovableHandle(self._comm_hooks)
        self._comm_hooks[handle.id] = hook
        return handle

    # ------------------------------------------------------------------ synchronization
    def _on_output_grad(self, grad: torch.Tensor) -> None:
        if not self._sync_queued:
            self._sync_queued = True
            if self._reducer is not None and _distributed():
                # Comm hooks see the local gradients: then nothing is reduced before them.
                self._reducer.arm(overlap=not self._comm_hooks)
            _queue_end_of_backward(self._synchronize)

    def _synchronize(self) -> None:
        self._sync_queued = False
        for hook in list(self._comm_hooks.values()):
            hook(self)
        if self._reducer is not None:
            if _distributed():
                self._reducer.finish()
            elif not self._negotiate_grads:
                self._check_no_missing_gradients()
        else:
            self._reduce_with_custom_function()
        if self._broadcast_buffers:
            buffers = list(self.module.buffers())
            if buffers:
                self._broadcast(buffers)

    def _check_no_missing_gradients(self) -> None:
        missing = missing_names(self.module)
        if missing:
            raise missing_gradients_error(missing)

    def _reduce_with_custom_function(self) -> None:
        assert self._reduce_function is not None
        params = [param for param in self.module.parameters() if param.requires_grad]
        if not self._negotiate_grads:
            self._check_no_missing_gradients()
        elif params and _distributed():
            has_grad = torch.tensor(
                [param.grad is not None for param in params],
                dtype=torch.int32,
                device=params[0].device,
            )
            dist.all_reduce(has_grad, op=dist.ReduceOp.MAX, group=self._process_group)
            for param, flag in zip(params, has_grad.tolist()):
                if flag and param.grad is None:
                    param.grad = torch.zeros_like(param)
        grads = [param.grad for param in params if param.grad is not None]
        if grads:
            with torch.no_grad():
                self._reduce_function(grads, self._process_group)

    def _broadcast(self, tensors: list[torch.Tensor]) -> None:
        # Parameters are leaves that require grad: updating them in place needs no_grad.
        with torch.no_grad():
            self._broadcast_function(tensors, self._process_group)
