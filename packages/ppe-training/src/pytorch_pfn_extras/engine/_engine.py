"""``create_trainer`` and ``create_evaluator``: engines from a model, a logic and a device."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import torch

from pytorch_pfn_extras.handler import BaseLogic, Handler, Logic
from pytorch_pfn_extras.handler._logic import check_grad_scaler
from pytorch_pfn_extras.runtime import runtime_registry
from pytorch_pfn_extras.training._engine._evaluator import DistributedEvaluator, Evaluator, MetricFn
from pytorch_pfn_extras.training._engine._trainer import EvaluatorsLike, Trainer
from pytorch_pfn_extras.training._extension import ExtensionEntry, ExtensionLike
from pytorch_pfn_extras.training._manager_protocol import StateObjectProtocol
from pytorch_pfn_extras.training._manager_util import (
    ModelsLike,
    OptimizersLike,
    as_dict,
    as_optimizers,
)
from pytorch_pfn_extras.training._trigger_util import TriggerLike
from pytorch_pfn_extras.writing import Writer


def default_transform_model(name: str, model: torch.nn.Module) -> torch.nn.Module:
    """Return ``model`` unchanged (the default ``transform_model``)."""
    return model


def filter_state_objects(args: Any, key_name: str = "") -> list[tuple[str, Any]]:
    """Find the objects with ``state_dict``/``load_state_dict`` in ``args``, named as PPE does.

    ``args`` may be such an object (a leaf: it is not searched further), or a (nested)
    dict, list or tuple holding some; anything else is dropped. Each found object is named
    by its path below ``key_name``: ``"<prefix>__::__<key>"`` for a dict entry (the keys
    in sorted order), ``"<prefix>.__<i>__"`` for a list or tuple item. The trainer saves
    what it finds in its options (a grad scaler...) as manager state objects under these
    names, so that snapshots of PPE 0.9 trainers resume with them.

    Args:
        args: The object or container to search.
        key_name: The name of ``args`` itself.

    Returns:
        ``(name, object)`` pairs, in the order of the traversal.

    Example:
        >>> filter_state_objects({"grad_scaler": scaler, "n": 1}, "option")
        [('option__::__grad_scaler', scaler)]
    """
    if isinstance(args, StateObjectProtocol):
        return [(key_name, args)]
    if isinstance(args, Mapping):
        return [
            found
            for key in sorted(args, key=str)
            for found in filter_state_objects(args[key], f"{key_name}__::__{key}")
        ]
    if isinstance(args, (list, tuple)):
        return [
            found
            for index, value in enumerate(args)
            for found in filter_state_objects(value, f"{key_name}.__{index}__")
        ]
    return []


def filter_state_objects_dict(
    args: Mapping[str, Any] | None, key_name: str = "option"
) -> dict[str, Any]:
    """Find the state objects among the values of a dict of options, by name (see
    :func:`filter_state_objects`: ``"<key_name>__::__<key>"``).

    Args:
        args: The options (``None`` finds nothing).
        key_name: The prefix of the names.

    Returns:
        The state objects found, by name.

    Raises:
        TypeError: ``args`` is not a dict.
    """
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        message = f"filter_state_objects_dict() expects a dict, got {type(args).__name__}"
        raise TypeError(message)
    return dict(filter_state_objects(args, key_name))


def _engine_parts(
    models: dict[str, torch.nn.Module],
    optimizers: dict[str, torch.optim.Optimizer] | None,
    device: str | torch.device,
    logic: BaseLogic | None,
    handler_class: type[Handler] | None,
    options: Mapping[str, Any] | None,
    runtime_options: Mapping[str, Any] | None,
) -> Handler:
    if options is not None and not isinstance(options, Mapping):
        message = f"options must be a dict, got {type(options).__name__}"
        raise TypeError(message)
    remaining = dict(options or {})
    runtime_options = dict(runtime_options if runtime_options else remaining.pop("runtime", {}))
    if logic is None:
        logic = Logic()
    elif not isinstance(logic, BaseLogic):
        message = f"logic must be a ppe.handler.BaseLogic, got {type(logic).__name__}"
        raise TypeError(message)
    model_name = getattr(logic, "model_name", None)
    if isinstance(model_name, str):
        if model_name not in models:
            message = (
                f"the logic trains the model {model_name!r} but the models are {sorted(models)}; "
                f"name the model {model_name!r} or pass logic=Logic(model_name=...)"
            )
            raise ValueError(message)
        if optimizers is not None and model_name not in optimizers:
            message = (
                f"the logic steps the optimizer {model_name!r} but the optimizers are "
                f"{sorted(optimizers)}; name the optimizer like its model"
            )
            raise ValueError(message)
    if handler_class is None:
        handler_class = Handler
    elif not (isinstance(handler_class, type) and issubclass(handler_class, Handler)):
        message = (
            "handler_class must be a subclass of ppe.handler.Handler (the engine creates it as "
            f"handler_class(logic, entry_runtime, options)), got {handler_class!r}"
        )
        raise TypeError(message)
    runtime_class = runtime_registry.get_runtime_class_for_device_spec(device)
    entry_runtime = runtime_class(device, runtime_options)
    handler = handler_class(logic, entry_runtime, {})
    handler.consume_options(remaining)
    logic.consume_options(remaining)
    scaler = getattr(logic, "grad_scaler", None)
    if scaler is not None:
        try:
            device_type = torch.device(device).type
        except (RuntimeError, TypeError):  # a custom device: its runtime decides
            device_type = None
        if device_type is not None:
            check_grad_scaler(scaler, device_type)
    if remaining:
        message = (
            f"unknown option(s) {sorted(remaining)}; the handler and the logic "
            f"({type(logic).__name__}) did not use them"
        )
        raise ValueError(message)
    return handler


def create_trainer(
    models: ModelsLike,
    optimizers: OptimizersLike,
    max_epochs: int,
    *,
    extensions: Sequence[ExtensionLike | ExtensionEntry] | None = None,
    out_dir: str = "result",
    stop_trigger: TriggerLike = None,
    writer: Writer | None = None,
    evaluator: EvaluatorsLike = None,
    device: str | torch.device = "cpu",
    logic: BaseLogic | None = None,
    transform_model: Callable[[str, torch.nn.Module], torch.nn.Module] = default_transform_model,
    handler_class: type[Handler] | None = None,
    options: dict[str, Any] | None = None,
    runtime_options: Mapping[str, Any] | None = None,
    profile: Any = None,
    **kwargs: Any,
) -> Trainer:
    """Create a trainer: the training loop of a logic, on an extensions manager.

    Args:
        models: A module, or a mapping of names to modules (a single one is ``'main'``).
        optimizers: An optimizer, or a mapping of names to optimizers.
        max_epochs: Number of epochs; ignored when ``stop_trigger`` is given.
        extensions: Extensions to register.
        out_dir: Output directory of logs and snapshots.
        stop_trigger: Trigger that ends training; ``(max_epochs, 'epoch')`` by default.
        writer: Writer the extensions write with.
        evaluator: An evaluator (:func:`create_evaluator`), an ``(evaluator, trigger)`` pair,
            or a dict of them by name; ``None`` skips evaluation.
        device: The device whose runtime converts the batches (a PyTorch device, or a name
            registered with ``ppe.runtime.runtime_registry``). A model not moved with
            ``ppe.to`` when the run starts is moved there, with a warning.
        logic: The logic; a :class:`~pytorch_pfn_extras.handler.Logic` by default.
        transform_model: ``fn(name, model) -> model`` for what the manager saves (e.g. to
            unwrap DDP).
        handler_class: The handler class; :class:`~pytorch_pfn_extras.handler.Handler` by
            default.
        options: Options of the handler and the logic (``train_report_keys``,
            ``backward_outputs``, ``autocast``, ``grad_scaler``, ``grad_accumulation_steps``,
            ``grad_clip``, ``compile``...). State objects among them (a grad scaler) are
            saved in snapshots.
        runtime_options: Options of the entry runtime.
        profile: A ``torch.profiler.profile``: the run happens inside ``with profile:``,
            which is stepped after every iteration.
        **kwargs: Other arguments of the manager (``state_objects``, ``enable_profile``...).

    Returns:
        The trainer; call ``trainer.run(train_loader, val_loader)``.

    Raises:
        ValueError: Unknown options, or the logic's model is not among ``models``.

    Example:
        >>> trainer = ppe.engine.create_trainer(
        ...     model, optimizer, 10, evaluator=ppe.engine.create_evaluator(model),
        ...     extensions=[ppe.training.extensions.LogReport()])
        >>> ppe.to(model, "cpu")
        >>> trainer.run(train_loader, val_loader)
    """
    model_dict = as_dict(models, "models", torch.nn.Module)
    optimizer_dict = as_optimizers(optimizers)
    handler = _engine_parts(
        model_dict, optimizer_dict, device, logic, handler_class, options, runtime_options
    )
    state_objects = {
        **filter_state_objects_dict(options, "option"),
        **filter_state_objects_dict(runtime_options, "runtime_option"),
        **dict(kwargs.pop("state_objects", None) or {}),
    }
    return Trainer(
        handler,
        evaluator=evaluator,
        models=model_dict,
        profile=profile,
        optimizers=optimizer_dict,
        max_epochs=max_epochs,
        extensions=_extension_list(extensions),
        out_dir=out_dir,
        stop_trigger=stop_trigger,
        writer=writer,
        transform_model=transform_model,
        state_objects=state_objects,
        **kwargs,
    )


def _extension_list(
    extensions: Iterable[ExtensionLike | ExtensionEntry] | None,
) -> list[ExtensionLike] | None:
    if extensions is None:
        return None
    return list(extensions)  # type: ignore[arg-type]


def create_evaluator(
    models: ModelsLike,
    *,
    progress_bar: bool = False,
    device: str | torch.device = "cpu",
    metrics: Iterable[MetricFn] | None = None,
    logic: BaseLogic | None = None,
    handler_class: type[Handler] | None = None,
    options: dict[str, Any] | None = None,
    runtime_options: Mapping[str, Any] | None = None,
    profile: Any = None,
    distributed: bool = False,
) -> Evaluator:
    """Create an evaluator, to pass to :func:`create_trainer` or to run on its own.

    Args:
        models: A module, or a mapping of names to modules (usually the trainer's).
        progress_bar: Show the progress of each evaluation.
        device: The device whose runtime converts the batches. A model not moved with
            ``ppe.to`` when the evaluation starts is moved there, with a warning.
        metrics: Callables ``metric(batch, outputs)`` whose returned dicts are added to
            each step's outputs, as in PPE: name them in the ``eval_report_keys`` option to
            report them (e.g. :class:`~pytorch_pfn_extras.training.metrics.AccuracyMetric`
            and ``options={"eval_report_keys": ["accuracy"]}``).
        logic: The logic; a :class:`~pytorch_pfn_extras.handler.Logic` by default.
        handler_class: The handler class; :class:`~pytorch_pfn_extras.handler.Handler` by
            default.
        options: Options of the handler and the logic (``eval_report_keys``...).
        runtime_options: Options of the entry runtime.
        profile: A ``torch.profiler.profile`` stepped after every evaluation step.
        distributed: Return a :class:`~pytorch_pfn_extras.training.DistributedEvaluator`,
            whose means are over the samples of every process of ``torch.distributed``
            (each rank evaluating its share, e.g. through a
            :class:`~pytorch_pfn_extras.distributed.DistributedValidationSampler`).

    Returns:
        The evaluator.

    Raises:
        ValueError: Unknown options, or the logic's model is not among ``models``.
    """
    model_dict = as_dict(models, "models", torch.nn.Module)
    handler = _engine_parts(
        model_dict, None, device, logic, handler_class, options, runtime_options
    )
    evaluator_class = DistributedEvaluator if distributed else Evaluator
    return evaluator_class(
        handler, model_dict, progress_bar=progress_bar, metrics=metrics, profile=profile
    )
