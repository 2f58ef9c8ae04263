"""PPE 0.9 user code against the engine: handlers, logics, state names, profile, versions.

Each test is written as code for PPE 0.9 would be (public API only), and checks what 0.9 did.
``ppe.to`` is ``ppe.runtime.to`` here: ppe-training's tests run without the meta-package, which
re-exports it. PPE's trainer examples themselves run in ``tests/test_ppe09_trainer_examples.py``.
"""

from __future__ import annotations

import copy
import types
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training

# ``ppe.__version__`` (the meta-package's); ppe-training's own where it is installed alone
PPE_VERSION = getattr(ppe, "__version__", ppe.training.__version__)


# ---------------------------------------------------------------------- handler hooks


class Recorder(ppe.runtime.PyTorchRuntime):
    """A CPU runtime recording its callbacks, with their arguments."""

    events: list[tuple[Any, ...]] = []

    def initialize_module(self, module: Any, loader_or_batch: Any, optimizer: Any = None) -> None:
        self.events.append(("initialize_module", module, loader_or_batch, optimizer))

    def convert_batch(self, args: Any) -> Any:
        self.events.append(("convert_batch",))
        return args

    def train_epoch_begin(self, module: torch.nn.Module) -> None:
        self.events.append(("train_epoch_begin", module))

    def train_epoch_end(self, module: torch.nn.Module) -> None:
        self.events.append(("train_epoch_end", module))

    def train_pre_step(self, trainer: Any, module: Any, batch_idx: int, batch: Any) -> None:
        self.events.append(("train_pre_step", module))

    def train_post_step(
        self, trainer: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        self.events.append(("train_post_step", module))

    def train_validation_begin(self, module: torch.nn.Module) -> None:
        self.events.append(("train_validation_begin", module))

    def train_validation_end(self, module: torch.nn.Module) -> None:
        self.events.append(("train_validation_end", module))

    def eval_pre_step(self, evaluator: Any, module: Any, batch_idx: int, batch: Any) -> None:
        self.events.append(("eval_pre_step", module))

    def eval_post_step(
        self, evaluator: Any, module: Any, batch_idx: int, batch: Any, outs: Any
    ) -> None:
        self.events.append(("eval_post_step", module))

    def train_cleanup(self, module: torch.nn.Module) -> None:
        self.events.append(("train_cleanup", module))


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = torch.nn.Linear(2, 2)
        self.head = torch.nn.Linear(2, 1)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        return {"loss": F.mse_loss(self.head(self.body(x)), t)}


def regression_batch() -> dict[str, torch.Tensor]:
    return {"x": torch.ones(4, 2), "t": torch.zeros(4, 1)}


class RecordingLogic(ppe.handler.Logic):
    def __init__(self, events: list[tuple[Any, ...]]) -> None:
        super().__init__()
        self.events = events

    def train_step(self, models: Any, optimizers: Any, batch_idx: int, batch: Any) -> Any:
        self.events.append(("logic.train_step",))
        return super().train_step(models, optimizers, batch_idx, batch)

    def train_step_optimizers(self, models: Any, optimizers: Any, batch_idx: int) -> None:
        self.events.append(("logic.train_step_optimizers",))
        super().train_step_optimizers(models, optimizers, batch_idx)


def test_every_handler_hook_finds_the_runtimes_without_a_setup_call() -> None:
    model = Regressor()
    ppe.runtime.to(model, "cpu", runtime_class=Recorder)
    ppe.runtime.to(model.head, "cpu", runtime_class=Recorder)  # a second runtime, below the first
    events = Recorder.events = []
    handler = ppe.handler.Handler(ppe.handler.Logic(), Recorder("cpu", None), {})
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = types.SimpleNamespace(
        models={"main": model}, optimizers={"main": optimizer}, epoch=0, train_len=1
    )
    evaluator = types.SimpleNamespace(models={"main": model})

    handler.train_epoch_begin(trainer, [regression_batch()])
    handler.train_step(trainer, 0, regression_batch(), lambda i, outs: None)
    handler.train_post_step(trainer, 0, regression_batch(), {"loss": torch.zeros(())})
    handler.train_validation_begin(trainer, evaluator)
    handler.eval_step(evaluator, 0, regression_batch(), lambda i, outs: None)
    handler.eval_post_step(evaluator, 0, regression_batch(), {"loss": torch.zeros(())})
    handler.train_validation_end(trainer, evaluator)
    handler.train_epoch_end(trainer)
    handler.train_cleanup(trainer)

    called = [(event[0], event[1]) for event in events if event[0] != "convert_batch"]
    hooks = [
        "train_epoch_begin",
        "train_pre_step",
        "train_post_step",
        "train_validation_begin",
        "eval_pre_step",
        "eval_post_step",
        "train_validation_end",
        "train_epoch_end",
        "train_cleanup",
    ]
    # each hook on both tagged modules (the order within a hook is the discovery's)
    assert [name for name, _ in called] == [hook for hook in hooks for _ in range(2)]
    for hook in hooks:
        assert {id(m) for name, m in called if name == hook} == {id(model), id(model.head)}


def test_handler_train_step_runs_the_optimizer_step_before_complete_fn() -> None:
    model = Regressor()
    ppe.runtime.to(model, "cpu", runtime_class=Recorder)
    events = Recorder.events = []
    handler = ppe.handler.Handler(RecordingLogic(events), Recorder("cpu", None), {})
    trainer = types.SimpleNamespace(
        models={"main": model}, optimizers={"main": torch.optim.SGD(model.parameters(), lr=0.1)}
    )
    handler.train_step(
        trainer, 0, regression_batch(), lambda i, outs: events.append(("complete_fn",))
    )
    assert [event[0] for event in events] == [
        "train_pre_step",
        "convert_batch",
        "logic.train_step",
        "logic.train_step_optimizers",
        "complete_fn",
    ]


@pytest.mark.parametrize(
    ("optimizer_names", "expected"),
    [(["main"], "main"), (["other"], "other"), (["a", "main"], "main"), (["a", "b"], None)],
)
def test_setup_initializes_each_module_with_its_optimizer_positionally(
    tmp_path: Path, optimizer_names: list[str], expected: str | None
) -> None:
    model = Regressor()
    ppe.runtime.to(model, "cpu", runtime_class=Recorder)
    events = Recorder.events = []
    optimizers = {name: torch.optim.SGD(model.parameters(), lr=0.1) for name in optimizer_names}
    handler = ppe.handler.Handler(ppe.handler.Logic(), Recorder("cpu", None), {})
    loader = [regression_batch()]
    handler.train_setup(
        types.SimpleNamespace(models={"main": model}, optimizers=optimizers), loader
    )
    handler.eval_setup(types.SimpleNamespace(models={"main": model}), loader)
    assert events == [
        ("initialize_module", model, loader, optimizers.get(expected or "")),
        ("initialize_module", model, loader, None),  # always None for evaluation
    ]


# ---------------------------------------------------------------------- logic backward


class ManyOutputs(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(3))
        self.extra = torch.nn.Parameter(torch.ones(()))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.weight * x
        return {
            "loss": y.sum(),  # backpropagated
            "vector": y * 2,  # several elements: not
            "count": (y > 0).sum(),  # an integer: not
            "leaf": self.extra,  # requires grad but has no grad_fn: not
            "detached": y.sum().detach() * 3,  # no grad_fn: not
        }


def test_logic_backpropagates_only_one_element_float_outputs_with_a_grad_fn(
    tmp_path: Path,
) -> None:
    model = ManyOutputs()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    trainer = ppe.engine.create_trainer(model, optimizer, 1, out_dir=str(tmp_path))
    ppe.runtime.to(model, "cpu")
    trainer.run([torch.tensor([1.0, 2.0, 3.0])])
    assert model.weight.grad is not None and model.weight.grad.tolist() == [1.0, 2.0, 3.0]
    assert model.extra.grad is None


def test_a_missing_backward_output_warns_and_training_goes_on(tmp_path: Path) -> None:
    model = ManyOutputs()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    trainer = ppe.engine.create_trainer(
        model, optimizer, 1, out_dir=str(tmp_path), options={"backward_outputs": ["nope", "loss"]}
    )
    ppe.runtime.to(model, "cpu")
    with pytest.warns(
        UserWarning, match=r"Couldn't find requested backward value: nope in dict_keys\(\['loss'"
    ):
        trainer.run([torch.tensor([1.0, 2.0, 3.0])] * 2)
    assert trainer.iteration == 2
    assert model.weight.tolist() == pytest.approx([1 - 0.2, 1 - 0.4, 1 - 0.6])


def test_codeblock_logic_steps_every_optimizer_it_is_given(tmp_path: Path) -> None:
    model = Regressor()
    body, head = copy.deepcopy(model.body), copy.deepcopy(model.head)
    optimizers = {
        "main": torch.optim.SGD(model.body.parameters(), lr=0.1),
        "head": torch.optim.SGD(model.head.parameters(), lr=0.1),
    }
    trainer = ppe.engine.create_trainer(
        model, optimizers, 1, logic=ppe.handler.CodeBlockLogic(), out_dir=str(tmp_path)
    )
    ppe.runtime.to(model, "cpu")
    trainer.run([regression_batch()])
    assert not torch.equal(model.body.weight, body.weight)
    assert not torch.equal(model.head.weight, head.weight)


# ---------------------------------------------------------------------- state objects


class Stateful:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    def state_dict(self) -> dict[str, int]:
        return {"value": self.value}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.value = state["value"]


def test_filter_state_objects_names_as_ppe_does() -> None:
    a, b, c, d = Stateful(1), Stateful(2), Stateful(3), Stateful(4)
    found = ppe.engine.filter_state_objects(
        {"z": a, "a": [b, 3, {"k": c}], "n": "text", "m": (d,)}, "option"
    )
    assert found == [
        ("option__::__a.__0__", b),
        ("option__::__a.__2____::__k", c),
        ("option__::__m.__0__", d),
        ("option__::__z", a),
    ]
    assert ppe.engine.filter_state_objects(a) == [("", a)]
    assert ppe.engine.filter_state_objects(5) == []
    assert ppe.engine.filter_state_objects_dict({"s": a}) == {"option__::__s": a}


def amp_trainer(tmp_path: Path) -> tuple[Any, torch.amp.GradScaler]:
    torch.manual_seed(0)
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scaler = torch.amp.GradScaler("cpu", init_scale=256.0, growth_interval=1)
    trainer = ppe.engine.create_trainer(
        model, optimizer, 2, out_dir=str(tmp_path), options={"grad_scaler": scaler}
    )
    ppe.runtime.to(model, "cpu")
    return trainer, scaler


def test_a_ppe09_trainer_snapshot_with_a_grad_scaler_resumes_with_its_scaler(
    tmp_path: Path,
) -> None:
    trainer, scaler = amp_trainer(tmp_path / "first")
    trainer.run([regression_batch()] * 2, train_len=2)
    saved = trainer.state_dict()
    assert list(saved["state_objects"]) == ["option__::__grad_scaler"]
    # what a PPE 0.9 trainer saved: its manager's keys, the scaler under PPE's name
    ppe09 = {
        key: saved[key]
        for key in (
            "_start_iteration",
            "_start_execution",
            "models",
            "optimizers",
            "extensions",
            "state_objects",
        )
    }
    ppe09["ppe_version"] = "0.9.0"
    scale = scaler.get_scale()
    assert scale != 256.0  # it moved while training

    resumed, fresh_scaler = amp_trainer(tmp_path / "second")
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        resumed.load_state_dict(ppe09)
    assert [str(w.message) for w in record] == [
        f"loading a snapshot written by version 0.9.0 into version {PPE_VERSION} of "
        "pytorch-pfn-extras"
    ]  # the version only: no state object missing or unknown
    assert fresh_scaler.get_scale() == scale
    assert resumed.iteration == 4


def test_a_snapshot_naming_the_scaler_as_ppe_training_0_1_did_still_restores_it(
    tmp_path: Path,
) -> None:
    trainer, scaler = amp_trainer(tmp_path / "first")
    trainer.run([regression_batch()] * 2, train_len=2)
    saved = trainer.state_dict()
    saved["state_objects"] = {
        "option/grad_scaler": saved["state_objects"].pop("option__::__grad_scaler")
    }
    resumed, fresh_scaler = amp_trainer(tmp_path / "second")
    resumed.load_state_dict(saved)  # no warning (pytest turns them into errors)
    assert fresh_scaler.get_scale() == scaler.get_scale()


# ---------------------------------------------------------------------- profile, versions


class CountingProfile:
    def __init__(self) -> None:
        self.events: list[str] = []

    def __enter__(self) -> CountingProfile:
        self.events.append("enter")
        return self

    def __exit__(self, *args: Any) -> None:
        self.events.append("exit")

    def step(self) -> None:
        self.events.append("step")


def test_the_trainer_runs_inside_its_profile_and_steps_it_every_iteration(
    tmp_path: Path,
) -> None:
    model = Regressor()
    profile = CountingProfile()
    seen: list[list[str]] = []
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        2,
        out_dir=str(tmp_path),
        profile=profile,
        extensions=[lambda manager: seen.append(list(profile.events))],
    )
    ppe.runtime.to(model, "cpu")
    trainer.run([regression_batch()] * 3)
    assert profile.events == ["enter"] + ["step"] * 6 + ["exit"]
    assert seen[0] == ["enter"]  # the iteration runs inside the profile, stepped after it


def test_a_torch_profiler_given_to_the_trainer_records_the_run(tmp_path: Path) -> None:
    model = Regressor()
    profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        1,
        out_dir=str(tmp_path),
        profile=profile,
    )
    ppe.runtime.to(model, "cpu")
    trainer.run([regression_batch()] * 2)
    assert profile.step_num == 2
    names = {event.name for event in profile.events()}
    assert "aten::mse_loss" in names


def test_snapshots_record_ppe_version_and_a_state_without_it_warns(tmp_path: Path) -> None:
    model = Regressor()
    manager = ppe.training.ExtensionsManager(
        model,
        torch.optim.SGD(model.parameters(), lr=0.1),
        1,
        iters_per_epoch=1,
        out_dir=str(tmp_path),
    )
    state = manager.state_dict()
    assert state["ppe_version"] == PPE_VERSION
    del state["ppe_version"]
    with pytest.warns(UserWarning, match=r"written by an unknown version .*into version"):
        manager.load_state_dict(state)


@pytest.mark.parametrize("models", [[torch.nn.Linear(1, 1)], "model", {"a": 3}, None])
def test_bad_models_raise_value_error(tmp_path: Path, models: Any) -> None:
    with pytest.raises(ValueError, match="models"):
        ppe.training.ExtensionsManager(models, {}, 1, iters_per_epoch=1, out_dir=str(tmp_path))
    with pytest.raises(ValueError, match="models"):
        ppe.engine.create_trainer(models, {}, 1)
    with pytest.raises(ValueError, match="models"):
        ppe.engine.create_evaluator(models)


def test_a_handler_driven_with_new_models_at_every_call_does_not_keep_them() -> None:
    import gc
    import weakref

    handler = ppe.handler.Handler(ppe.handler.Logic(), Recorder("cpu", None), {})
    Recorder.events = []
    first: list[weakref.ref[torch.nn.Module]] = []
    for _ in range(200):
        model = Regressor()
        ppe.runtime.to(model, "cpu", runtime_class=Recorder)
        first.append(weakref.ref(model))
        trainer = types.SimpleNamespace(models={"main": model}, epoch=0)
        handler.train_epoch_end(trainer)  # found and called, then cached
    del model, trainer
    assert len(Recorder.events) == 200
    Recorder.events = []  # they name the modules
    gc.collect()
    assert sum(ref() is not None for ref in first) <= 64 + 1  # the cache is bounded
