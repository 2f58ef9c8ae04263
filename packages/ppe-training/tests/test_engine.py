"""The trainer and evaluator engines, used as PPE users use them."""

from __future__ import annotations

import copy
import io
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.reporting
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training
import pytorch_pfn_extras.training.metrics
from pytorch_pfn_extras.training import extensions
from pytorch_pfn_extras.training.triggers import ManualScheduleTrigger


class Classifier(torch.nn.Module):
    """A model in the engine's style: keyword inputs, a dict of outputs with the loss."""

    def __init__(self, dropout: float = 0.0) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Dropout(dropout), torch.nn.Linear(8, 3)
        )
        self.grad_enabled: list[bool] = []

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        self.grad_enabled.append(torch.is_grad_enabled())
        y = self.net(x)
        loss = F.cross_entropy(y, t)
        prefix = "train" if self.training else "val"
        ppe.reporting.report({f"{prefix}/loss": loss})
        return {"loss": loss, "y": y}


def make_data(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    t = (x[:, 0] > 0).long() + (x[:, 1] > 0.5).long()
    return [{"x": x[i], "t": t[i]} for i in range(n)]


def loader(
    data: list[Any], batch_size: int = 4, shuffle: bool = False
) -> torch.utils.data.DataLoader[Any]:
    return torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=shuffle)


def make_trainer(
    model: torch.nn.Module,
    tmp_path: Any,
    *,
    max_epochs: int = 2,
    evaluator: Any = None,
    lr: float = 0.1,
    **kwargs: Any,
) -> ppe.training.Trainer:
    optimizer = torch.optim.SGD(model.parameters(), lr=lr)
    trainer = ppe.engine.create_trainer(
        model, optimizer, max_epochs, evaluator=evaluator, out_dir=str(tmp_path), **kwargs
    )
    ppe.runtime.to(model, "cpu")
    return trainer


def test_trainer_at_a_glance_runs_as_written(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The reference docs' first example, verbatim but for the device (CPU here).
    monkeypatch.chdir(tmp_path)
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 8 workers, 2 cores

    class MyModel(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.LazyLinear(1)

        def forward(self, *, x: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
            y = self.w(x)
            loss = F.nll_loss(y, target)
            prefix = "train" if self.training else "val"
            ppe.reporting.report({f"{prefix}/loss": loss.item()})
            return {"loss": loss}

    model = MyModel()
    optim = torch.optim.SGD(model.parameters(), lr=0.01)

    exts = [
        ppe.training.extensions.LogReport(),
        ppe.training.extensions.ProgressBar(),
        ppe.training.extensions.PrintReport(["epoch", "iteration", "train/loss", "val/loss"]),
    ]

    device = "cpu"
    epochs = 10
    trainer = ppe.engine.create_trainer(
        model,
        optim,
        epochs,
        evaluator=ppe.engine.create_evaluator(
            model,
            device=device,
            progress_bar=True,
        ),
        device=device,
        extensions=exts,
    )
    ppe.runtime.to(model, device)
    train_loader = torch.utils.data.DataLoader(
        [{"x": torch.rand(10, 64), "target": torch.tensor([1])} for _ in range(1)], num_workers=8
    )
    val_loader = torch.utils.data.DataLoader(
        [{"x": torch.rand(10, 64), "target": torch.tensor([1])} for _ in range(1)], num_workers=8
    )
    trainer.run(train_loader, val_loader)

    log = trainer.manager.get_extension("LogReport").log
    assert [entry["epoch"] for entry in log] == list(range(1, 11))
    train_losses = [entry["train/loss"] for entry in log]
    assert train_losses == sorted(train_losses, reverse=True)  # it learns
    assert all("val/loss" in entry for entry in log)
    assert (tmp_path / "result" / "log").exists()


def hand_written(
    model: Classifier, data: list[Any], val: list[Any] | None, epochs: int, batch_size: int
) -> tuple[list[float], list[float]]:
    """The loop the trainer must reproduce exactly."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train_loader = loader(data, batch_size, shuffle=True)
    losses, val_losses = [], []
    for _ in range(epochs):
        model.train()
        for batch in train_loader:
            optimizer.zero_grad()
            out = model(**batch)
            out["loss"].backward()
            optimizer.step()
            losses.append(out["loss"].item())
        if val is None:
            continue
        # Iterating a DataLoader draws its base seed from the global RNG, shuffled or not:
        # the trainer's evaluator does the same.
        model.eval()
        total, count = 0.0, 0
        with torch.no_grad():
            for batch in loader(val, batch_size):
                total += model(**batch)["loss"].item() * len(batch["t"])
                count += len(batch["t"])
        val_losses.append(total / count)
        model.train()
    return losses, val_losses


class LossRecorder(torch.nn.Module):
    """Wraps a model to record the training losses of each step."""

    def __init__(self, inner: Classifier) -> None:
        super().__init__()
        self.inner = inner
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        out = self.inner(x, t)
        if self.training:
            self.losses.append(out["loss"].item())
        return out


@pytest.mark.parametrize("with_evaluator", [False, True])
def test_trainer_equals_hand_written_loop_bit_for_bit(tmp_path: Any, with_evaluator: bool) -> None:
    data, val = make_data(26), make_data(10, seed=1)
    torch.manual_seed(0)
    reference = Classifier(dropout=0.3)
    model = LossRecorder(copy.deepcopy(reference))

    torch.manual_seed(1)
    losses, val_losses = hand_written(
        reference, data, val if with_evaluator else None, epochs=3, batch_size=4
    )

    torch.manual_seed(1)
    evaluator = ppe.engine.create_evaluator(model) if with_evaluator else None
    log_report = extensions.LogReport()
    trainer = make_trainer(
        model, tmp_path, max_epochs=3, evaluator=evaluator, extensions=[log_report]
    )
    trainer.run(loader(data, 4, shuffle=True), loader(val, 4) if with_evaluator else None)

    assert model.losses == losses
    for name, value in reference.state_dict().items():
        assert torch.equal(value, model.inner.state_dict()[name]), name
    assert trainer.iteration == 21 and trainer.epoch == 3
    if with_evaluator:
        logged = [entry["val/loss"] for entry in log_report.log]
        assert logged == pytest.approx(val_losses, rel=1e-6)


def test_evaluation_is_in_eval_mode_without_grad_and_averaged_over_samples(tmp_path: Any) -> None:
    model = Classifier(dropout=0.5)
    val = make_data(10, seed=1)  # batches of 4, 4 and 2
    evaluator = ppe.engine.create_evaluator(
        model,
        metrics=[ppe.training.metrics.AccuracyMetric("t", "y")],
        options={"eval_report_keys": ["accuracy"]},
    )
    log_report = extensions.LogReport()
    trainer = make_trainer(
        model, tmp_path, max_epochs=1, evaluator=evaluator, extensions=[log_report]
    )
    modes: list[bool] = []
    model.register_forward_pre_hook(lambda module, args: modes.append(module.training))
    trainer.run(loader(make_data(8)), loader(val))

    assert model.training  # back in train mode
    assert modes == [True, True, False, False, False]
    assert model.grad_enabled == [True, True, False, False, False]
    model.eval()
    with torch.no_grad():
        x = torch.stack([b["x"] for b in val])
        t = torch.stack([b["t"] for b in val])
        y = model.net(x)
    entry = log_report.log[-1]
    assert entry["val/loss"] == pytest.approx(F.cross_entropy(y, t).item(), rel=1e-5)
    assert entry["val/accuracy"] == pytest.approx((y.argmax(1) == t).float().mean().item())


def test_evaluator_runs_alone_and_restores_the_mode(tmp_path: Any) -> None:
    model = Classifier()
    ppe.runtime.to(model, "cpu")
    evaluator = ppe.engine.create_evaluator(
        model,
        metrics=[ppe.training.AccuracyMetric("t", "y")],
        options={"eval_report_keys": ["accuracy"]},
    )
    model.train()
    means = evaluator.run(loader(make_data(10)))  # no reporter is needed
    observation: dict[str, Any] = {}
    with ppe.reporting.Reporter().scope(observation):
        assert evaluator.run(loader(make_data(10))) == means
    assert model.training
    assert set(means) == {"val/loss", "val/accuracy"}
    assert observation["val/loss"] == means["val/loss"]
    model.eval()
    assert evaluator.run(loader(make_data(10)), eval_len=1)
    assert not model.training


def test_evaluator_forms_and_triggers(tmp_path: Any) -> None:
    model = Classifier()
    calls: list[tuple[str, int]] = []

    def counting(name: str) -> Any:
        def metric(batch: Any, out: Any) -> None:
            calls.append((name, trainer.iteration))

        return metric

    evaluators = {
        "every_epoch": ppe.engine.create_evaluator(model, metrics=[counting("every_epoch")]),
        "every_3_iters": (
            ppe.engine.create_evaluator(model, metrics=[counting("every_3_iters")]),
            (3, "iteration"),
        ),
    }
    trainer = make_trainer(model, tmp_path, max_epochs=2, evaluator=evaluators)
    trainer.run(loader(make_data(8)), loader(make_data(4)))  # 2 iterations per epoch
    assert sorted(set(calls)) == [("every_3_iters", 3), ("every_epoch", 2), ("every_epoch", 4)]
    assert set(trainer.evaluators) == {"every_epoch", "every_3_iters"}

    single = make_trainer(
        Classifier(), tmp_path, evaluator=(ppe.engine.create_evaluator(model), (1, "iteration"))
    )
    assert set(single.evaluators) == {"Evaluator"}


def test_report_keys_are_reported_with_prefixes(tmp_path: Any) -> None:
    model = Classifier()
    evaluator = ppe.engine.create_evaluator(model, options={"eval_report_keys": ["loss"]})
    log_report = extensions.LogReport(keys=["train/loss", "val/loss"])
    trainer = make_trainer(
        model,
        tmp_path,
        max_epochs=1,
        evaluator=evaluator,
        extensions=[log_report],
        options={"train_report_keys": ["loss"]},
    )
    observed: list[dict[str, Any]] = []
    trainer.extend(lambda manager: observed.append(dict(manager.observation)), name="spy")
    trainer.run(loader(make_data(8)), loader(make_data(4)))
    assert "train/loss" in observed[0]
    assert log_report.log[0]["train/loss"] == pytest.approx(
        sum(float(o["train/loss"]) for o in observed) / 2, rel=1e-6
    )


def test_profile_is_stepped_every_iteration(tmp_path: Any) -> None:
    model = Classifier()
    trainer_profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    eval_profile = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
    evaluator = ppe.engine.create_evaluator(model, profile=eval_profile)
    trainer = make_trainer(
        model, tmp_path, max_epochs=2, evaluator=evaluator, profile=trainer_profile
    )
    with eval_profile:  # the trainer enters its own profile, as in PPE
        trainer.run(loader(make_data(12)), loader(make_data(8)))
    assert trainer_profile.step_num == 6
    assert eval_profile.step_num == 4


class Stream(torch.utils.data.IterableDataset[dict[str, torch.Tensor]]):
    def __init__(self, n: int) -> None:
        self.data = make_data(n)

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        return iter(self.data)


def test_unsized_loaders_take_train_len_and_eval_len(tmp_path: Any) -> None:
    model = Classifier()
    metric_calls: list[int] = []
    evaluator = ppe.engine.create_evaluator(
        model, metrics=[lambda batch, out: metric_calls.append(len(batch["t"]))]
    )
    trainer = make_trainer(model, tmp_path, max_epochs=2, evaluator=evaluator)
    train = torch.utils.data.DataLoader(Stream(10), batch_size=4)  # 3 batches per pass
    with pytest.raises(ValueError, match=r"train_len"):
        trainer.run(train, torch.utils.data.DataLoader(Stream(6), batch_size=4))
    trainer.run(train, torch.utils.data.DataLoader(Stream(6), batch_size=4), train_len=5)
    assert trainer.iteration == 10  # the loader is iterated again when it runs out
    assert metric_calls == [4, 2, 4, 2]  # the whole unsized validation loader, twice


def test_mistakes_are_explained(tmp_path: Any) -> None:
    model = Classifier()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['bogus'\]"):
        ppe.engine.create_trainer(
            model, optimizer, 1, options={"bogus": 1, "backward_outputs": ["loss"]}
        )
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['train_report_key'\]"):
        ppe.engine.create_evaluator(model, options={"train_report_key": ["loss"]})
    with pytest.raises(ValueError, match=r"model 'main' but the models are \['gen'\]"):
        ppe.engine.create_trainer({"gen": model}, {"gen": optimizer}, 1)
    with pytest.raises(ValueError, match=r"optimizer 'main' but the optimizers are \['opt'\]"):
        ppe.engine.create_trainer(model, {"opt": optimizer}, 1)

    unmoved = ppe.engine.create_trainer(Classifier(), optimizer, 1, out_dir=str(tmp_path))
    with pytest.warns(
        UserWarning, match=r"model 'main' \(Classifier\) was not moved with ppe.to.*moving it"
    ):
        unmoved.run(loader(make_data(4)))

    evaluated = make_trainer(model, tmp_path, evaluator=ppe.engine.create_evaluator(model))
    with pytest.raises(ValueError, match=r"evaluator\(s\) \['Evaluator'\].*no val_loader"):
        evaluated.run(loader(make_data(4)))

    with pytest.warns(UserWarning, match="CUDA is not available"):
        cuda_scaler = torch.amp.GradScaler("cuda")
    with pytest.raises(
        ValueError, match=r"created for device type 'cuda' but the model is on 'cpu'"
    ):
        ppe.engine.create_trainer(model, optimizer, 1, options={"grad_scaler": cuda_scaler})

    two = make_trainer(
        model,
        tmp_path,
        evaluator={
            "a": ppe.engine.create_evaluator(model),
            "b": ppe.engine.create_evaluator(model),
        },
    )
    with pytest.raises(ValueError, match=r"missing \['b'\], unknown \['c'\]"):
        two.run(loader(make_data(4)), {"a": loader(make_data(4)), "c": loader(make_data(4))})
    with pytest.raises(
        TypeError, match=r"handler_class must be a subclass of ppe\.handler\.Handler"
    ):
        ppe.engine.create_trainer(model, optimizer, 1, handler_class=ppe.handler.BaseHandler)

    with pytest.raises(TypeError, match="must be an Evaluator"):
        ppe.engine.create_trainer(model, optimizer, 1, evaluator=object())
    with pytest.raises(ValueError, match="empty"):
        make_trainer(Classifier(), tmp_path).run([])


def test_val_loader_without_evaluator_warns(tmp_path: Any) -> None:
    trainer = make_trainer(Classifier(), tmp_path, max_epochs=1)
    with pytest.warns(UserWarning, match="no evaluator"):
        trainer.run(loader(make_data(4)), loader(make_data(4)))


def test_state_dict_round_trip_and_extend(tmp_path: Any) -> None:
    model = Classifier()
    trainer = make_trainer(model, tmp_path, max_epochs=1)
    seen: list[int] = []
    trainer.extend(lambda manager: seen.append(manager.iteration), trigger=(1, "iteration"))
    trainer.run(loader(make_data(8)))
    assert seen == [1, 2]
    state = trainer.state_dict()
    assert state["_start_iteration"] == 2 and "trainer" in state

    other_model = Classifier()
    other = make_trainer(other_model, tmp_path / "other", max_epochs=1)
    with pytest.warns(UserWarning, match=r"state for the extensions \['<lambda>'\]"):
        other.load_state_dict(state)
    assert other.iteration == 2
    for name, value in model.state_dict().items():
        assert torch.equal(value, other_model.state_dict()[name])
    other.run(loader(make_data(8)))  # a finished run does nothing
    assert other.iteration == 2
    with pytest.raises(TypeError, match="unexpected keyword"):
        trainer.extend(lambda manager: None, bogus=1)
    assert trainer.get_optimizer("main") is trainer.optimizers["main"]
    assert trainer.is_epoch_last_iter(1) and not trainer.is_epoch_last_iter(0)


def test_trainer_snapshots_autoload_retain_and_fall_back(tmp_path: Any) -> None:
    def build() -> tuple[Classifier, ppe.training.Trainer]:
        torch.manual_seed(0)
        model = Classifier()
        trainer = make_trainer(
            model,
            tmp_path,
            max_epochs=3,
            extensions=[extensions.snapshot(n_retains=2, autoload=True)],
            stop_trigger=None,
        )
        return model, trainer

    _, trainer = build()
    trainer.run(loader(make_data(8)))
    snapshots = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("snapshot"))
    assert snapshots == ["snapshot_iter_4", "snapshot_iter_6"]

    # A finished run resumes as finished: no further iteration.
    _, again = build()
    again.run(loader(make_data(8)))
    assert again.iteration == 6

    # A damaged newest snapshot: autoload falls back to the previous one.
    (tmp_path / "snapshot_iter_6").write_bytes(b"truncated")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        _, fallback = build()
        fallback.run(loader(make_data(8)))
    assert fallback.iteration == 6
    # The damaged file is kept aside, never replaced: the new snapshot took its name.
    assert (tmp_path / "snapshot_iter_6.damaged-1").read_bytes() == b"truncated"
    assert torch.load(tmp_path / "snapshot_iter_6", weights_only=True)["_start_iteration"] == 6


class ScalarReads(TorchDispatchMode):
    """Records device-to-host scalar reads (``.item()``, ``float(t)``: the CUDA sync points)."""

    def __init__(self) -> None:
        super().__init__()
        self.reads: list[str] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if "_local_scalar_dense" in str(func):
            self.reads.append(str(func))
        return func(*args, **(kwargs or {}))


def test_trainer_iterations_read_no_scalar_from_tensors(tmp_path: Any) -> None:
    # The CPU stand-in for the gpu-marked sync test: between the first and the last iteration
    # of the epoch (whose end runs LogReport's summary), nothing calls .item() or float().
    model = Classifier()
    recorder = ScalarReads()
    out = io.StringIO()
    trainer = make_trainer(
        model,
        tmp_path,
        max_epochs=1,
        options={"train_report_keys": ["loss"]},
        extensions=[
            extensions.LogReport(),
            extensions.ProgressBar(update_interval=1000, out=out),
            extensions.PrintReport(out=out),
        ],
        evaluator=ppe.engine.create_evaluator(
            model, metrics=[ppe.training.metrics.AccuracyMetric("t", "y")]
        ),
    )
    trainer.extend(
        lambda m: recorder.__enter__(),
        name="arm",
        trigger=ManualScheduleTrigger([1], "iteration"),
        priority=-10_000,
    )
    trainer.extend(
        lambda m: recorder.__exit__(None, None, None),
        name="disarm",
        trigger=(1, "epoch"),
        priority=10_000,
    )
    trainer.run(loader(make_data(40)), loader(make_data(8)))
    assert trainer.iteration == 10
    assert recorder.reads == []


def test_a_failing_loader_calls_on_error_and_finalizes_the_extensions(tmp_path: Any) -> None:
    events: list[str] = []

    class Watcher(ppe.training.Extension):
        def __call__(self, manager: Any) -> None:
            events.append(f"iteration {manager.iteration}")

        def on_error(self, manager: Any, exc: BaseException, tb: Any) -> None:
            events.append(f"on_error {exc}")

        def finalize(self, manager: Any) -> None:
            events.append("finalize")

    def batches() -> Iterator[dict[str, torch.Tensor]]:
        yield from loader(make_data(8))
        raise OSError("disk gone")

    trainer = make_trainer(Classifier(), tmp_path, max_epochs=1, extensions=[Watcher()])
    with pytest.raises(OSError, match="disk gone"):
        trainer.run(batches(), train_len=3)
    assert events == ["iteration 1", "iteration 2", "on_error disk gone", "finalize"]
