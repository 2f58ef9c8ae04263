"""The asynchronous save's copy of the state: a CPU mirror kept between saves."""

from __future__ import annotations

from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import Any

import torch
from torch.distributed.checkpoint.staging import AsyncStager

from pytorch_pfn_extras.training._snapshots import _torch_api
from pytorch_pfn_extras.training._snapshots._tree import Flat, fill, flatten


def _local(tensor: torch.Tensor) -> torch.Tensor:
    to_local = getattr(tensor, "to_local", None)  # a DTensor's shard on this rank
    return to_local() if callable(to_local) else tensor


def _layout(tensor: torch.Tensor) -> tuple[Any, ...]:
    # What a mirror tensor must match to receive ``tensor``'s data.
    local = _local(tensor)
    spec = (getattr(tensor, "device_mesh", None), tuple(getattr(tensor, "placements", ())))
    return (type(tensor), tensor.shape, local.shape, local.dtype, spec)


class MirrorStager(AsyncStager):
    """An ``AsyncStager`` of DCP that keeps a CPU mirror of the state between saves.

    The first save allocates the mirror (DCP's ``DefaultStager`` copies the state, in pinned
    memory when CUDA is there); the next ones copy the tensors into it with one fused copy
    and rebuild only the containers around them. (DCP's stager reuses its memory too but
    deep-copies the whole state dict, DTensor specs and device meshes included, on every
    save: a third of the wait.) A state whose tensors changed in type, shape, dtype or
    sharding is copied afresh by the ``DefaultStager`` and becomes the new mirror.

    Args:
        deferred: A path in the state dict (``"*"`` matches any key) whose CPU tensors are
            copied in a background thread after :meth:`stage` returns, instead of before.
            The caller must call :meth:`wait_copy` before anything may change them (the
            snapshot extension defers :data:`OPTIMIZER_STATE` and waits in a step pre-hook
            of every optimizer). Their version counters are compared after the copy: a
            change that torch records makes the write fail (see :func:`staged_writer`)
            rather than save a torn state.

    The mirror is reused, so a save may start only once the previous one finished writing
    (the snapshot extension never has two in flight). :meth:`prepare` allocates it in the
    background before the first save (the snapshot extension does after the first optimizer
    step), so that the first save copies into it too. Call :meth:`close` after the last save.
    """

    # DCP's protocol: the staged dict is returned, DCP has nothing to wait for (the deferred
    # copy is awaited by the staged writer before it reads any data).
    _synchronize_after_execute = False

    def __init__(self, deferred: tuple[str, ...] | None = None) -> None:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions

        options = StagingOptions(
            use_pinned_memory=torch.cuda.is_available(),
            use_shared_memory=False,
            use_async_staging=False,
            use_non_blocking_copy=False,
        )
        self._default = DefaultStager(options)
        self._deferred = deferred
        self._layout: list[tuple[Any, ...]] | None = None
        self._targets: list[torch.Tensor] = []  # the mirror's local data, copied into
        self._mirror: list[torch.Tensor] = []  # the staged tensors
        self._copier: ThreadPoolExecutor | None = None
        self._copy: Future[None] | None = None  # the deferred copy of the last stage()
        self._prepared: Future[tuple[list[tuple[Any, ...]], list[torch.Tensor]]] | None = None

    def _thread(self) -> ThreadPoolExecutor:
        if self._copier is None:
            self._copier = ThreadPoolExecutor(1, thread_name_prefix="ppe-snapshot-copy")
        return self._copier

    def prepare(self, state_dict: dict[str, Any]) -> None:
        """Allocate the mirror of ``state_dict``'s tensors in the background thread.

        The values it copies do not matter (training may change them meanwhile): the next
        :meth:`stage` of a state of the same layout copies every tensor into the mirror, as
        every later save does, instead of allocating it while the training loop waits.
        """
        self._prepared = self._thread().submit(self._allocate, state_dict)

    @torch.no_grad()
    def _allocate(
        self, state_dict: dict[str, Any]
    ) -> tuple[list[tuple[Any, ...]], list[torch.Tensor]]:
        layout = [_layout(tensor) for tensor in flatten(state_dict).tensors]
        staged = self._default.stage(state_dict)
        assert isinstance(staged, dict)
        return layout, flatten(staged).tensors

    def _adopt_prepared(self) -> None:
        prepared, self._prepared = self._prepared, None
        if prepared is None:
            return
        try:
            layout, mirror = prepared.result()
        except Exception:  # the first save allocates it, as without prepare()
            return
        self._layout, self._mirror = layout, mirror
        self._targets = [_local(tensor) for tensor in mirror]

    @torch.no_grad()
    def stage(self, state_dict: dict[str, Any]) -> dict[str, Any]:
        """A CPU copy of ``state_dict`` that later changes of its tensors do not reach.

        Tensors under the ``deferred`` path are still being copied when this returns.
        """
        self._adopt_prepared()
        flat = flatten(state_dict)
        layout = [_layout(tensor) for tensor in flat.tensors]
        self._copy = None
        if layout != self._layout:
            staged = self._default.stage(state_dict)  # synchronous staging: not a Future
            assert isinstance(staged, dict)
            self._mirror = flatten(staged).tensors
            self._targets = [_local(tensor) for tensor in self._mirror]
            self._layout = layout
            return staged
        locals_ = [_local(tensor) for tensor in flat.tensors]
        marks = flat.under(self._deferred)
        later = [i for i, local in enumerate(locals_) if marks[i] and local.device.type == "cpu"]
        deferred = set(later)
        now = [i for i in range(len(locals_)) if i not in deferred]
        _copy_all([self._targets[i] for i in now], [locals_[i] for i in now])
        if later:
            self._copy = self._thread().submit(
                _copy_checked, _Deferred(self._targets, flat, locals_, later)
            )
        return fill(flat.skeleton, self._mirror)  # type: ignore[no-any-return]

    def wait_copy(self) -> None:
        """Wait until the deferred copy of the last :meth:`stage` finished (errors aside)."""
        copy = self._copy
        if copy is not None:
            wait([copy])

    def check_copy(self) -> None:
        """Wait for the deferred copy and raise its error (a torn or failed copy)."""
        copy = self._copy
        if copy is not None:
            copy.result()

    def synchronize_staging(self) -> None:
        """Nothing for DCP to wait for (see :meth:`wait_copy`)."""

    def close(self) -> None:
        """Release the mirror and the copying thread (once its copy finished)."""
        self._prepared = None
        if self._copier is not None:
            self._copier.shutdown(wait=True)
            self._copier = None
        self._default.close()
        self._layout = None
        self._mirror = []
        self._targets = []
        self._copy = None


def staged_writer(base: type, stager: MirrorStager, *args: Any, **kwargs: Any) -> Any:
    """A DCP storage writer of class ``base`` that waits for ``stager``'s deferred copy.

    DCP plans a save from the tensors' metadata and reads their data only in
    ``write_data``: waiting there lets the plan's collectives run during the copy, and a
    failed copy fails this rank's write, which DCP reports on every rank (no rank waits
    for it, none commits the snapshot).
    """

    class Staged(base):  # type: ignore[misc]
        def write_data(self, plan: Any, planner: Any) -> Any:
            stager.check_copy()
            return super().write_data(plan, planner)

    Staged.__name__ = Staged.__qualname__ = f"Staged{base.__name__}"
    return Staged(*args, **kwargs)


def _copy_all(targets: list[torch.Tensor], sources: list[torch.Tensor]) -> None:
    if not targets:
        return
    devices = {source.device for source in sources if source.device.type != "cpu"}
    _torch_api.copy_all(targets, sources, non_blocking=bool(devices))
    for device in devices:  # device-to-host copies into pinned memory: wait for them
        synchronize = getattr(getattr(torch, device.type, None), "synchronize", None)
        if callable(synchronize):
            synchronize(device)


class _Deferred:
    """The tensors :meth:`MirrorStager.stage` left to its thread: their positions in the
    state, and their version counters (the wrapper's and the local shard's) at the save."""

    def __init__(
        self, targets: list[torch.Tensor], flat: Flat, locals_: list[torch.Tensor], later: list[int]
    ) -> None:
        self.flat = flat
        self.positions = later
        self.targets = [targets[i] for i in later]
        self.sources = [flat.tensors[i] for i in later]
        self.locals = [locals_[i] for i in later]
        self.versions = self._versions()

    def _versions(self) -> list[tuple[int, int]]:
        pairs = zip(self.sources, self.locals, strict=True)
        return [(_torch_api.version(source), _torch_api.version(local)) for source, local in pairs]

    def changed(self) -> list[int]:
        """The positions of the tensors changed in place since the save."""
        now = self._versions()
        return [p for p, a, b in zip(self.positions, self.versions, now, strict=True) if a != b]


@torch.no_grad()
def _copy_checked(deferred: _Deferred) -> None:
    # The deferred copy, in the stager's thread: torch ops release the GIL while copying.
    _copy_all(deferred.targets, deferred.locals)
    changed = deferred.changed()
    if changed:
        listed = deferred.flat.names(changed)
        shown = ", ".join(listed[:4]) + (f" and {len(listed) - 4} more" if len(listed) > 4 else "")
        message = (
            f"the optimizer state {shown} changed while the asynchronous snapshot copied it "
            "(after snapshot() returned, before the optimizer's next step(), which waits for "
            "the copy); the snapshot is not committed. Change an optimizer's state only by "
            "its step(), or save with async_save=False"
        )
        raise RuntimeError(message)
