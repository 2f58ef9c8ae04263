"""ExtensionsManager: construction, the extension API, iterations, state."""

from __future__ import annotations

import inspect
import io
import math
from typing import Any

import pytest
import torch

import pytorch_pfn_extras.training as training
from pytorch_pfn_extras import reporting
from pytorch_pfn_extras.profiler import (
    ChromeTracer,
    clear_tracer,
    get_time_summary,
    get_tracer,
)
from pytorch_pfn_extras.training import (
    PRIORITY_EDITOR,
    PRIORITY_READER,
    PRIORITY_WRITER,
    Extension,
    ExtensionEntry,
    ExtensionsManager,
    make_extension,
)
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.training.extension import PRIORITY_SNAPSHOT
from pytorch_pfn_extras.training.triggers import IntervalTrigger


def _model_and_optimizer() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    return model, torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)


def _run(manager: ExtensionsManager, n: int | None = None) -> int:
    done = 0
    while not manager.stop_trigger and (n is None or done < n):
        with manager.run_iteration():
            pass
        done += 1
    return done


def test_import_paths_of_the_reference_docs() -> None:
    assert training.extension.Extension is Extension
    assert training.extension.make_extension is make_extension
    assert training.trigger.get_trigger is training.get_trigger
    assert training.triggers.IntervalTrigger is IntervalTrigger
    assert (PRIORITY_WRITER, PRIORITY_EDITOR, PRIORITY_READER) == (300, 200, 100)
    assert PRIORITY_SNAPSHOT < PRIORITY_READER
    assert ext_module.snapshot().priority == PRIORITY_SNAPSHOT


def test_reference_docs_manual_loop_runs_and_logs(tmp_path: Any) -> None:
    max_epoch, iters_per_epoch = 3, 8
    models: dict[str, torch.nn.Module] = {}
    optimizers: list[torch.optim.Optimizer] = []
    manager = training.ExtensionsManager(
        models,
        optimizers,  # type: ignore[arg-type]
        max_epoch,
        extensions=[ext_module.LogReport()],
        iters_per_epoch=iters_per_epoch,
        out_dir=tmp_path,
    )
    for _epoch in range(max_epoch):
        for i in range(iters_per_epoch):
            with manager.run_iteration():
                reporting.report(
                    {
                        "sin": math.sin(i * 2 * math.pi / iters_per_epoch),
                        "cos": math.cos(i * 2 * math.pi / iters_per_epoch),
                    }
                )
    log = manager.get_extension("LogReport").log
    assert [entry["epoch"] for entry in log] == [1, 2, 3]
    assert log[0]["sin"] == pytest.approx(0.0, abs=1e-12)
    assert manager.stop_trigger


def test_single_model_and_optimizer_are_named_main(tmp_path: Any) -> None:
    model, optimizer = _model_and_optimizer()
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=2, out_dir=tmp_path)
    assert manager.models == {"main": model}
    assert manager.raw_models == {"main": model}
    assert manager.optimizers == {"main": optimizer}
    assert manager.out == str(tmp_path)


@pytest.mark.parametrize(
    ("models", "match"),
    [
        ("model", "models must be a Module or a mapping.*got str"),
        ({"a": 3}, r"models\['a'\] must be a Module, got int"),
        ({1: torch.nn.Linear(1, 1)}, r"models must be keyed by strings, got the key 1"),
    ],
)
def test_bad_models_raise_value_error(models: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):  # PPE 0.9's type
        ExtensionsManager(models, {}, 1, iters_per_epoch=1)


def test_bad_optimizers_raise_type_error() -> None:
    match = "optimizers must be an optimizer .* or a mapping.*got list"
    with pytest.raises(TypeError, match=match):
        ExtensionsManager({}, [1], 1, iters_per_epoch=1)


@pytest.mark.parametrize("iters_per_epoch", [0, -3, 1.5, True, None])
def test_bad_iters_per_epoch_raises_value_error_naming_it(iters_per_epoch: Any) -> None:
    with pytest.raises(
        ValueError, match=f"iters_per_epoch must be a positive integer, got {iters_per_epoch!r}"
    ):
        ExtensionsManager({}, {}, 1, iters_per_epoch=iters_per_epoch)


def test_bad_max_epochs_raises_unless_a_stop_trigger_is_given(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="max_epochs must be positive, got 0"):
        ExtensionsManager({}, {}, 0, iters_per_epoch=1)
    manager = ExtensionsManager(
        {}, {}, 0, iters_per_epoch=2, stop_trigger=(3, "iteration"), out_dir=tmp_path
    )
    assert _run(manager) == 3


def test_bad_state_objects_raise_type_error() -> None:
    with pytest.raises(TypeError, match=r"state_objects\['x'\] \(int\) must have state_dict"):
        ExtensionsManager({}, {}, 1, iters_per_epoch=1, state_objects={"x": 1})


def test_progress_properties(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=4, out_dir=tmp_path)
    assert manager.is_before_training
    with pytest.raises(RuntimeError, match="before training starts"):
        _ = manager.elapsed_time
    _run(manager, 6)
    assert (manager.iteration, manager.epoch, manager.epoch_detail) == (6, 1, 1.5)
    assert not manager.is_before_training
    assert manager.iters_per_epoch == 4
    assert manager.elapsed_time > 0
    assert manager.updater is manager
    assert _run(manager) == 2
    assert manager.iteration == 8


def test_stop_trigger_ends_training_and_finalizes_once(tmp_path: Any) -> None:
    finalized: list[int] = []
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=3, out_dir=tmp_path)
    manager.extend(
        make_extension(finalizer=lambda m: finalized.append(m.iteration))(lambda m: None)
    )
    assert _run(manager) == 3
    assert manager.stop_trigger and manager.stop_trigger
    assert finalized == [3]
    with pytest.raises(RuntimeError, match="stop trigger fired at iteration 3"):
        manager.run_iteration().__enter__()


def test_for_loop_without_stop_trigger_check_finalizes_at_the_end(tmp_path: Any) -> None:
    finalized: list[int] = []
    manager = ExtensionsManager({}, {}, 2, iters_per_epoch=2, out_dir=tmp_path)
    manager.extend(make_extension(finalizer=lambda: finalized.append(1))(lambda m: None))
    for _ in range(2):
        for _ in range(2):
            with manager.run_iteration():
                pass
    assert finalized == [1]


def test_run_iteration_cannot_be_nested(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=3, out_dir=tmp_path)
    with pytest.raises(RuntimeError, match="cannot be nested"), manager.run_iteration():
        manager.run_iteration().__enter__()


def test_extension_names_default_and_duplicates_get_suffixes(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1, out_dir=tmp_path)

    def my_function(m: Any) -> None:
        pass

    class MyExtension(Extension):
        def __call__(self, manager: Any) -> None:
            pass

    decorated = make_extension(default_name="custom")(lambda m: None)
    first, second, third = MyExtension(), MyExtension(), MyExtension()
    for extension in (my_function, first, second, decorated, third):
        manager.extend(extension)
    manager.extend(lambda m: None, name="explicit")
    names = [name for name, _ in manager.extensions]
    assert names == [
        "my_function",
        "MyExtension",
        "MyExtension_1",
        "custom",
        "MyExtension_2",
        "explicit",
    ]
    assert (first.name, second.name, third.name) == (
        "MyExtension",
        "MyExtension_1",
        "MyExtension_2",
    )
    assert manager.get_extension("MyExtension_2") is third
    with pytest.raises(ValueError, match="no extension named 'nope'"):
        manager.get_extension("nope")


@pytest.mark.parametrize(
    ("name", "match"), [("training", "'training' is reserved"), ("", "non-empty")]
)
def test_reserved_or_empty_extension_names_raise(tmp_path: Any, name: str, match: str) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1, out_dir=tmp_path)
    with pytest.raises(ValueError, match=match):
        manager.extend(lambda m: None, name=name)


def test_extending_after_start_raises_naming_the_extension(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    _run(manager, 1)

    def late(m: Any) -> None:
        pass

    with pytest.raises(RuntimeError, match=r"cannot extend with <function .*late"):
        manager.extend(late)


def test_extensions_run_by_priority_then_registration_order(tmp_path: Any) -> None:
    calls: list[str] = []
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1, out_dir=tmp_path)

    def make(tag: str, priority: int | None = None) -> Any:
        @make_extension(priority=priority if priority is not None else PRIORITY_READER)
        def ext(m: Any) -> None:
            calls.append(tag)

        return ext

    manager.extend(make("reader1"))
    manager.extend(make("snapshot-level", PRIORITY_SNAPSHOT))
    manager.extend(make("writer", PRIORITY_WRITER))
    manager.extend(make("reader2"))
    manager.extend(make("editor"), priority=PRIORITY_EDITOR)
    _run(manager)
    assert calls == ["writer", "editor", "reader1", "reader2", "snapshot-level"]


def test_make_extension_sets_defaults_and_hooks(tmp_path: Any) -> None:
    events: list[str] = []

    @make_extension(
        trigger=(2, "iteration"),
        priority=PRIORITY_WRITER,
        initializer=lambda m: events.append(f"init@{m.iteration}"),
        finalizer=lambda: events.append("final"),
        needs_model_state=True,
    )
    def ext(manager: Any) -> None:
        events.append(f"call@{manager.iteration}")

    assert ext.default_name == "ext"  # type: ignore[attr-defined]
    assert ext.priority == PRIORITY_WRITER  # type: ignore[attr-defined]
    assert ext.needs_model_state is True  # type: ignore[attr-defined]
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=5, out_dir=tmp_path)
    manager.extend(ext)
    _run(manager)
    assert events == ["init@0", "call@2", "call@4", "final"]


def test_make_extension_hooks_default_to_callable_no_ops_as_in_ppe(tmp_path: Any) -> None:
    # PPE's defaults are no-op lambdas: code that forwards them (or calls them) keeps working.
    defaults = inspect.signature(make_extension).parameters
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    assert defaults["finalizer"].default(manager) is None
    assert defaults["initializer"].default(manager) is None
    assert defaults["on_error"].default(manager, ValueError(), None) is None
    calls: list[int] = []
    forwarded = make_extension(
        finalizer=defaults["finalizer"].default,
        initializer=defaults["initializer"].default,
        on_error=defaults["on_error"].default,
    )(lambda m: calls.append(m.iteration))
    manager.extend(forwarded)
    _run(manager)
    assert calls == [1, 2]


def test_make_extension_rejects_unknown_options() -> None:
    with pytest.raises(
        TypeError, match=r"unexpected keyword arguments \['invoke_before_training'\]"
    ):
        make_extension(invoke_before_training=True)
    with pytest.raises(TypeError, match="finalizer must be callable"):
        make_extension(finalizer=3)  # type: ignore[arg-type]


def test_extension_entry_takes_options_from_the_extension() -> None:
    class Ext(Extension):
        trigger = (3, "epoch")
        priority = PRIORITY_EDITOR

        def __call__(self, manager: Any) -> None:
            pass

    entry = ExtensionEntry(Ext())
    assert (entry.name, entry.priority) == ("Ext", PRIORITY_EDITOR)
    assert isinstance(entry.trigger, IntervalTrigger)
    assert entry.trigger.get_training_length() == (3, "epoch")
    entry = ExtensionEntry(Ext(), name="x", priority=1, trigger=(1, "iteration"))
    assert (entry.name, entry.priority, entry.trigger.get_training_length()) == (
        "x",
        1,
        (1, "iteration"),
    )
    with pytest.raises(TypeError, match="must be callable"):
        ExtensionEntry(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="priority must be an integer, got 'high'"):
        ExtensionEntry(Ext(), priority="high")  # type: ignore[arg-type]


def test_extension_base_class_defaults() -> None:
    extension = Extension()
    assert extension.default_name == "Extension"
    assert extension.trigger == (1, "iteration")
    assert extension.priority == PRIORITY_READER
    assert extension.state_dict() == {}
    with pytest.raises(NotImplementedError, match="Extension must implement __call__"):
        extension(None)  # type: ignore[arg-type]


def test_call_before_training_runs_at_a_fresh_start_only(tmp_path: Any) -> None:
    calls: list[tuple[int, bool]] = []

    def record(manager: Any) -> None:
        calls.append((manager.iteration, manager.is_before_training))

    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    manager.extend(record, trigger=(1, "epoch"), call_before_training=True)
    _run(manager, 1)
    state = manager.state_dict()
    assert calls == [(0, True)]
    resumed = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    resumed.extend(record, trigger=(1, "epoch"), call_before_training=True)
    resumed.load_state_dict(state)
    _run(resumed)
    assert calls == [(0, True), (2, False)]


def test_step_optimizers_zero_grad_and_step(tmp_path: Any) -> None:
    model, optimizer = _model_and_optimizer()
    manager = ExtensionsManager(model, optimizer, 1, iters_per_epoch=2, out_dir=tmp_path)
    before = [p.detach().clone() for p in model.parameters()]
    for p in model.parameters():
        p.grad = torch.full_like(p, 100.0)  # stale gradients must be cleared on entry
    with manager.run_iteration(step_optimizers=["main"]):
        model(torch.ones(1, 3)).sum().backward()
    expected = torch.nn.Sequential(torch.nn.Linear(3, 2), torch.nn.ReLU(), torch.nn.Linear(2, 1))
    expected.load_state_dict(dict(zip(model.state_dict(), before)))
    torch.optim.SGD(expected.parameters(), lr=0.1, momentum=0.9).zero_grad()
    expected(torch.ones(1, 3)).sum().backward()
    with torch.no_grad():
        for p, e in zip(model.parameters(), expected.parameters()):
            torch.testing.assert_close(p, e - 0.1 * e.grad)
    with pytest.raises(ValueError, match="unknown optimizer 'adam'; the manager has \\['main'\\]"):
        manager.run_iteration(step_optimizers=["adam"])


def test_reports_reach_the_observation_with_model_observer_prefixes(tmp_path: Any) -> None:
    model, optimizer = _model_and_optimizer()
    manager = ExtensionsManager(
        {"net": model}, {"sgd": optimizer}, 1, iters_per_epoch=2, out_dir=tmp_path
    )
    seen: list[dict[str, Any]] = []
    manager.extend(lambda m: seen.append(dict(m.observation)), name="probe")
    with manager.run_iteration():
        assert reporting.get_current_reporter() is manager.reporter
        reporting.report({"loss": 1.5})
        reporting.report({"x": 2.0}, model)
        reporting.report({"y": 3.0}, model[2])
    assert seen == [{"loss": 1.5, "net/x": 2.0, "net/2/y": 3.0}]
    assert manager.observation == seen[0]
    reporting.report({"outside": 1.0})  # no current reporter: ignored
    assert "outside" not in manager.observation


def test_transform_model_applies_to_models_and_snapshots(tmp_path: Any) -> None:
    inner = torch.nn.Linear(2, 2)
    wrapper = torch.nn.Sequential(inner)
    manager = ExtensionsManager(
        {"main": wrapper},
        {},
        1,
        iters_per_epoch=1,
        out_dir=tmp_path,
        transform_model=lambda name, m: m[0],
    )
    assert manager.models["main"] is inner
    assert manager.raw_models["main"] is wrapper
    assert set(manager.state_dict()["models"]["main"]) == {"weight", "bias"}
    with manager.run_iteration():
        reporting.report({"v": 1.0}, wrapper)
        reporting.report({"w": 1.0}, inner)
    assert set(manager.observation) == {"main/v", "main/w"}


def test_state_dict_round_trip_restores_everything(tmp_path: Any) -> None:
    def build() -> tuple[ExtensionsManager, torch.nn.Module, Any]:
        model, optimizer = _model_and_optimizer()
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        manager = ExtensionsManager(
            model,
            optimizer,
            3,
            iters_per_epoch=2,
            out_dir=tmp_path,
            state_objects={"scheduler": scheduler},
        )
        manager.extend(ext_module.LogReport())
        return manager, model, scheduler

    manager, model, scheduler = build()
    for _ in range(3):
        with manager.run_iteration(step_optimizers=["main"]):
            model(torch.ones(2, 3)).sum().backward()
            reporting.report({"loss": 1.0})
        scheduler.step()
    buffer = io.BytesIO()
    torch.save(manager.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=True)
    restored, restored_model, restored_scheduler = build()
    restored.load_state_dict(state)
    assert restored.iteration == 3
    assert restored_scheduler.last_epoch == 3
    for a, b in zip(model.parameters(), restored_model.parameters()):
        torch.testing.assert_close(a, b)
    assert restored.get_extension("LogReport").log == manager.get_extension("LogReport").log
    assert (
        restored.state_dict()["optimizers"]["main"]["state"].keys()
        == state["optimizers"]["main"]["state"].keys()
    )


def test_load_state_dict_with_other_models_raises_naming_them(tmp_path: Any) -> None:
    model, optimizer = _model_and_optimizer()
    state = ExtensionsManager(model, optimizer, 1, iters_per_epoch=1).state_dict()
    other = ExtensionsManager({"gen": model}, optimizer, 1, iters_per_epoch=1)
    with pytest.raises(
        ValueError, match=r"snapshot has models \['main'\] but the manager has \['gen'\]"
    ):
        other.load_state_dict(state)
    with pytest.raises(
        ValueError, match=r"not a manager state_dict: it lacks \['_start_iteration', 'models'"
    ):
        other.load_state_dict(model.state_dict())


def test_load_state_dict_warns_about_added_and_removed_extensions(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    manager.extend(ext_module.LogReport(), name="old_log")
    _run(manager, 1)
    state = manager.state_dict()
    resumed = ExtensionsManager({}, {}, 1, iters_per_epoch=2, out_dir=tmp_path)
    resumed.extend(ext_module.LogReport(), name="new_log")
    with pytest.warns(UserWarning) as records:
        resumed.load_state_dict(state)
    messages = [str(r.message) for r in records]
    assert any("no state for the extensions ['new_log']" in m for m in messages)
    assert any(
        "state for the extensions ['old_log'], which are not registered" in m for m in messages
    )
    assert resumed.iteration == 1
    assert _run(resumed) == 1


def test_needs_model_state_follows_triggers_of_extensions_that_need_it(tmp_path: Any) -> None:
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=4, out_dir=tmp_path)
    manager.extend(ext_module.snapshot(), trigger=(2, "iteration"))
    manager.extend(lambda m: None, name="no_state", trigger=(1, "iteration"))
    assert [manager.needs_model_state(i) for i in range(5)] == [False, False, True, False, True]
    assert not manager.needs_model_state()
    assert not manager.needs_state_this_iteration()
    with manager.run_iteration():
        assert not manager.needs_state_this_iteration()  # iteration 1
    with manager.run_iteration():
        assert manager.needs_state_this_iteration()  # iteration 2: the snapshot will run


def test_enable_profile_records_each_extension_in_the_time_summary(tmp_path: Any) -> None:
    get_time_summary().summary(clear=True)
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=3, out_dir=tmp_path, enable_profile=True)
    manager.extend(lambda m: None, name="probe")
    _run(manager)
    summary, extrema = get_time_summary().summary(clear=True)
    assert "extension:probe" in summary.compute_mean()
    assert "extension:probe.max" in extrema


def test_enable_trace_records_each_extension_in_the_tracer(tmp_path: Any) -> None:
    clear_tracer()
    try:
        tracer = get_tracer(ChromeTracer)
        manager = ExtensionsManager(
            {}, {}, 1, iters_per_epoch=2, out_dir=tmp_path, enable_trace=True
        )
        manager.extend(lambda m: None, name="traced")
        _run(manager)
        events = tracer.get_events()  # type: ignore[attr-defined]
        assert [e["name"] for e in events].count("extension:traced") == 2
        assert all(e["ph"] == "X" for e in events)
    finally:
        clear_tracer()


def _initialization_order(tmp_path: Any, loader: Any) -> list[str]:
    events: list[str] = []

    class Reader(Extension):
        priority = PRIORITY_WRITER

        def __call__(self, manager: Any) -> None:
            pass

        def initialize(self, manager: Any) -> None:
            events.append("reader")

    loader.initialize = lambda manager: events.append("loader")
    manager = ExtensionsManager({}, {}, 1, iters_per_epoch=1, out_dir=tmp_path)
    manager.extend(Reader())
    manager.extend(loader, name="loader", priority=PRIORITY_SNAPSHOT)
    manager.start_extensions()
    return events


def test_an_extension_that_loads_state_is_initialized_first(tmp_path: Any) -> None:
    class Loader(Extension):
        loads_state = True

        def __call__(self, manager: Any) -> None:
            pass

    assert Extension.loads_state is False
    assert ExtensionEntry(Loader()).loads_state is True
    assert _initialization_order(tmp_path / "class", Loader()) == ["loader", "reader"]

    @make_extension(loads_state=True)
    def made(manager: Any) -> None:
        pass

    assert ExtensionEntry(made).loads_state is True
    assert _initialization_order(tmp_path / "made", made) == ["loader", "reader"]


def test_the_private_loads_state_name_of_earlier_versions_still_counts(tmp_path: Any) -> None:
    class Legacy(Extension):
        def __call__(self, manager: Any) -> None:
            pass

    legacy = Legacy()
    assert _initialization_order(tmp_path / "plain", legacy) == ["reader", "loader"]
    legacy = Legacy()
    legacy._loads_state = True  # type: ignore[attr-defined]
    assert ExtensionEntry(legacy).loads_state is True
    assert _initialization_order(tmp_path / "legacy", legacy) == ["loader", "reader"]


def test_autoloading_snapshot_declares_loads_state() -> None:
    assert ExtensionEntry(ext_module.snapshot(autoload=True)).loads_state is True
    assert ExtensionEntry(ext_module.snapshot()).loads_state is False


@pytest.mark.parametrize(
    "options",
    [{}, {"enable_profile": True}, {"enable_trace": True}],
    ids=["plain", "profile", "trace"],
)
def test_profiled_and_plain_managers_run_the_same_extensions_in_the_same_order(
    tmp_path: Any, options: dict[str, bool]
) -> None:
    calls: list[tuple[str, int, bool]] = []

    def recorder(name: str) -> Any:
        def extension(manager: Any) -> str:
            calls.append((name, manager.iteration, manager._stop_iteration == manager.iteration))
            return name

        return extension

    clear_tracer()
    try:
        manager = ExtensionsManager({}, {}, 1, iters_per_epoch=4, out_dir=tmp_path, **options)
        manager.extend(recorder("every"), name="every", priority=PRIORITY_READER)
        manager.extend(recorder("even"), name="even", trigger=(2, "iteration"), priority=1)
        manager.extend(recorder("editor"), name="editor", priority=PRIORITY_EDITOR)
        manager.extend(recorder("last"), name="last", priority=PRIORITY_SNAPSHOT)
        _run(manager)
    finally:
        clear_tracer()
    expected: list[tuple[str, int, bool]] = []
    for iteration in range(1, 5):
        expected += [("editor", iteration, False), ("every", iteration, False)]
        if iteration % 2 == 0:
            expected.append(("even", iteration, False))
        expected.append(("last", iteration, True))  # the stop trigger ran before it
    assert calls == expected
