"""Logic options and logics of the trainer engine, checked against hand-written loops."""

from __future__ import annotations

import copy
from typing import Any

import pytest
import torch
import torch.nn.functional as F

import pytorch_pfn_extras as ppe
import pytorch_pfn_extras.engine
import pytorch_pfn_extras.handler
import pytorch_pfn_extras.reporting
import pytorch_pfn_extras.runtime
import pytorch_pfn_extras.training


class Regressor(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Sequential(
            torch.nn.Linear(3, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
        y = self.net(x)
        return {"loss": F.mse_loss(y, t), "y": y}


def batches(
    n_batches: int, batch_size: int = 4, seed: int = 0
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(n_batches):
        x = torch.randn(batch_size, 3, generator=g)
        out.append((x, x.sum(1, keepdim=True) ** 2 / 3))
    return out


def train(
    model: torch.nn.Module,
    data: list[Any],
    epochs: int,
    tmp_path: Any,
    *,
    optimizer: torch.optim.Optimizer | None = None,
    **kwargs: Any,
) -> ppe.training.Trainer:
    optimizer = optimizer or torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    trainer = ppe.engine.create_trainer(model, optimizer, epochs, out_dir=str(tmp_path), **kwargs)
    ppe.runtime.to(model, "cpu")
    trainer.run(data)
    return trainer


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module, **tolerance: float) -> None:
    for (name, x), y in zip(a.state_dict().items(), b.state_dict().values(), strict=True):
        if tolerance:
            torch.testing.assert_close(x, y, **tolerance, msg=name)
        else:
            assert torch.equal(x, y), name


@pytest.mark.parametrize("n_batches", [6, 7])  # 7: a last window of one batch
def test_grad_accumulation_steps_every_n_batches_and_flushes_the_epoch(
    tmp_path: Any, n_batches: int
) -> None:
    data = batches(n_batches)
    torch.manual_seed(0)
    model = Regressor()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    steps = 0
    for _ in range(2):
        for start in range(0, n_batches, 3):
            window = data[start : start + 3]
            optimizer.zero_grad()
            for x, t in window:
                (reference(x, t)["loss"] / len(window)).backward()
            optimizer.step()
            steps += 1

    trainer = train(model, data, 2, tmp_path, options={"grad_accumulation_steps": 3})
    assert_same_weights(model, reference, rtol=1e-6, atol=1e-7)
    assert trainer.optimizers["main"].state_dict()["state"][0]["momentum_buffer"] is not None
    assert steps == (2 if n_batches == 6 else 3) * 2


@pytest.mark.parametrize(
    ("option", "clip"),
    [
        (0.5, lambda p: torch.nn.utils.clip_grad_norm_(p, 0.5)),
        (
            {"max_norm": 0.5, "norm_type": 1.0},
            lambda p: torch.nn.utils.clip_grad_norm_(p, 0.5, 1.0),
        ),
        ({"clip_value": 0.01}, lambda p: torch.nn.utils.clip_grad_value_(p, 0.01)),
    ],
)
def test_grad_clip_matches_torch_clipping(tmp_path: Any, option: Any, clip: Any) -> None:
    data = batches(5)
    torch.manual_seed(0)
    model = Regressor()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05, momentum=0.9)
    for x, t in data:
        optimizer.zero_grad()
        reference(x, t)["loss"].backward()
        clip(list(reference.parameters()))
        optimizer.step()
    train(model, data, 1, tmp_path, options={"grad_clip": option})
    assert_same_weights(model, reference)


def test_grad_scaler_unscales_before_clipping_and_is_saved_in_snapshots(tmp_path: Any) -> None:
    data = batches(4)
    torch.manual_seed(0)
    model = Regressor()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
    for x, t in data:
        optimizer.zero_grad()
        scaler.scale(reference(x, t)["loss"]).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 0.1)
        scaler.step(optimizer)
        scaler.update()

    ours = torch.amp.GradScaler("cpu", init_scale=1024.0)
    trainer = train(
        model,
        data,
        1,
        tmp_path,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        options={"grad_scaler": ours, "grad_clip": 0.1},
    )
    assert_same_weights(model, reference)
    state = trainer.state_dict()
    assert state["state_objects"]["option__::__grad_scaler"] == ours.state_dict()


def test_backward_outputs_and_backward_function(tmp_path: Any) -> None:
    class TwoLosses(Regressor):
        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            out = super().forward(x, t)
            return {**out, "aux": out["y"].abs().mean()}

    data = batches(3)
    torch.manual_seed(0)
    model = TwoLosses()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for x, t in data:
        optimizer.zero_grad()
        (2 * reference(x, t)["loss"]).backward()
        optimizer.step()
    called: list[torch.Tensor] = []

    def backward(loss: torch.Tensor) -> None:
        called.append(loss)
        (2 * loss).backward()

    train(
        model,
        data,
        1,
        tmp_path,
        optimizer=torch.optim.SGD(model.parameters(), lr=0.05),
        options={"backward_outputs": ["loss"], "backward_function": backward},
    )
    assert len(called) == 3
    assert_same_weights(model, reference)

    # By default every scalar output that requires grad is backpropagated from, in one pass.
    torch.manual_seed(0)
    both = TwoLosses()
    reference = copy.deepcopy(both)
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    for x, t in data:
        optimizer.zero_grad()
        out = reference(x, t)
        (out["loss"] + out["aux"]).backward()
        optimizer.step()
    train(both, data, 1, tmp_path, optimizer=torch.optim.SGD(both.parameters(), lr=0.05))
    assert_same_weights(both, reference, rtol=1e-6, atol=1e-7)


def test_logic_option_errors(tmp_path: Any) -> None:
    model = Regressor()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for options, error, match in [
        ({"grad_accumulation_steps": 0}, ValueError, "positive integer, got 0"),
        ({"grad_clip": {"max_norm": 1.0, "clip_value": 1.0}}, ValueError, "either 'max_norm'"),
        ({"grad_clip": -1.0}, ValueError, "positive number"),
        ({"autocast": "yes"}, TypeError, "'autocast' option must be a bool or a dict"),
        ({"backward_function": 3}, TypeError, "must be callable"),
        ({"grad_scaler": object()}, TypeError, "must be a torch.amp.GradScaler"),
        ({"compile": "max"}, TypeError, "'compile' option"),
    ]:
        with pytest.raises(error, match=match):
            ppe.engine.create_trainer(model, optimizer, 1, options=options)

    class NoLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Linear(3, 1)

        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            return {"y": self.w(x)}

    with pytest.raises(ValueError, match="nothing to backpropagate from"):
        train(NoLoss(), batches(1), 1, tmp_path)


def test_autocast_option_runs_the_forward_in_bfloat16_on_cpu(tmp_path: Any) -> None:
    dtypes: list[torch.dtype] = []

    class Probe(Regressor):
        def forward(self, x: torch.Tensor, t: torch.Tensor) -> dict[str, torch.Tensor]:
            out = super().forward(x, t)
            dtypes.append(out["y"].dtype)
            return out

    model = Probe()
    evaluator = ppe.engine.create_evaluator(model, options={"autocast": True})
    trainer = ppe.engine.create_trainer(
        model,
        torch.optim.SGD(model.parameters(), lr=0.01),
        1,
        out_dir=str(tmp_path),
        evaluator=evaluator,
        options={"autocast": {"dtype": torch.bfloat16}},
    )
    ppe.runtime.to(model, "cpu")
    trainer.run(batches(2), batches(1))
    assert dtypes == [torch.bfloat16] * 3


def test_closure_logic_trains_with_lbfgs_as_by_hand(tmp_path: Any) -> None:
    data = batches(3, batch_size=16)
    torch.manual_seed(0)
    model = Regressor()
    reference = copy.deepcopy(model)
    optimizer = torch.optim.LBFGS(reference.parameters(), lr=0.5, max_iter=5)
    for x, t in data * 3:

        def closure(x: torch.Tensor = x, t: torch.Tensor = t) -> torch.Tensor:
            optimizer.zero_grad()
            loss = reference(x, t)["loss"]
            loss.backward()
            return loss

        optimizer.step(closure)  # type: ignore[arg-type]

    ours = torch.optim.LBFGS(model.parameters(), lr=0.5, max_iter=5)
    trainer = ppe.engine.create_trainer(
        model, ours, 3, out_dir=str(tmp_path), logic=ppe.handler.ClousureLogic()
    )
    ppe.runtime.to(model, "cpu")
    trainer.run(data)
    assert_same_weights(model, reference)
    with pytest.raises(ValueError, match="cannot use a 'grad_scaler'"):
        ppe.handler.ClousureLogic(options={"grad_scaler": torch.amp.GradScaler("cpu")})


def test_codeblock_logic_equals_the_default_logic(tmp_path: Any) -> None:
    data = batches(4)
    torch.manual_seed(0)
    model = Regressor()
    other = copy.deepcopy(model)
    train(model, data, 2, tmp_path / "a")
    train(other, data, 2, tmp_path / "b", logic=ppe.handler.CodeBlockLogic())
    assert_same_weights(model, other)


@pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
def test_compile_option_gives_the_same_losses(tmp_path: Any) -> None:
    data = batches(3)
    torch.manual_seed(0)
    model = Regressor()
    compiled = copy.deepcopy(model)

    def losses_of(trainer_model: Regressor, options: dict[str, Any], out: str) -> list[float]:
        seen: list[float] = []
        trainer = ppe.engine.create_trainer(
            trainer_model,
            torch.optim.SGD(trainer_model.parameters(), lr=0.05),
            2,
            out_dir=str(tmp_path / out),
            options=options,
            evaluator=ppe.engine.create_evaluator(
                trainer_model, options={"eval_report_keys": ["loss"]}
            ),
        )
        trainer.extend(
            lambda manager: seen.append(float(manager.observation["train/loss"])),
            name="spy",
        )
        ppe.runtime.to(trainer_model, "cpu")
        trainer.run(data, data)
        return seen

    eager = losses_of(model, {"train_report_keys": ["loss"]}, "eager")
    ours = losses_of(compiled, {"train_report_keys": ["loss"], "compile": True}, "compiled")
    assert ours == pytest.approx(eager, rel=1e-4, abs=1e-6)
    assert_same_weights(model, compiled, rtol=1e-4, atol=1e-6)


def test_custom_gan_logic_with_two_optimizers_learns(tmp_path: Any) -> None:
    class GANLogic(ppe.handler.BaseLogic):
        def train_step(self, models: Any, optimizers: Any, batch_idx: int, batch: Any) -> Any:
            gen, dis = models["gen"], models["dis"]
            real = batch
            noise = torch.randn(real.shape[0], 2)
            fake = gen(noise)
            optimizers["dis"].zero_grad()
            d_loss = F.binary_cross_entropy_with_logits(
                dis(real), torch.ones(len(real), 1)
            ) + F.binary_cross_entropy_with_logits(dis(fake.detach()), torch.zeros(len(real), 1))
            d_loss.backward()
            optimizers["gen"].zero_grad()
            g_loss = F.binary_cross_entropy_with_logits(dis(fake), torch.ones(len(real), 1))
            g_loss.backward()
            ppe.reporting.report({"train/d_loss": d_loss, "train/g_loss": g_loss})
            return {"d_loss": d_loss, "g_loss": g_loss}

        def train_step_optimizers(self, models: Any, optimizers: Any, batch_idx: int) -> None:
            optimizers["dis"].step()
            optimizers["gen"].step()

        def train_validation_begin(self, models: Any) -> None:
            models["gen"].eval()

        def train_validation_end(self, models: Any) -> None:
            models["gen"].train()

        def eval_step(self, models: Any, batch_idx: int, batch: Any) -> Any:
            fake = models["gen"](torch.randn(batch.shape[0], 2))
            ppe.reporting.report({"val/fake_mean": fake.mean()})
            return {"fake": fake}

    torch.manual_seed(0)
    gen = torch.nn.Sequential(torch.nn.Linear(2, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    dis = torch.nn.Sequential(torch.nn.Linear(1, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    models = {"gen": gen, "dis": dis}
    optimizers = {
        "gen": torch.optim.Adam(gen.parameters(), lr=2e-3, betas=(0.5, 0.999)),
        "dis": torch.optim.Adam(dis.parameters(), lr=2e-3, betas=(0.5, 0.999)),
    }
    real = [torch.randn(32, 1) * 0.5 + 4.0 for _ in range(20)]
    log = ppe.training.extensions.LogReport()
    trainer = ppe.engine.create_trainer(
        models,
        optimizers,
        20,
        logic=GANLogic(),
        out_dir=str(tmp_path),
        extensions=[log],
        evaluator=ppe.engine.create_evaluator(models, logic=GANLogic()),
    )
    for model in models.values():
        ppe.runtime.to(model, "cpu")
    with torch.no_grad():
        before = gen(torch.randn(256, 2)).mean().item()
    trainer.run(real, real[:2])
    after = sum(entry["val/fake_mean"] for entry in log.log[-4:]) / 4
    assert abs(after - 4.0) < 0.75 < 3.0 < abs(before - 4.0)
    assert {"train/d_loss", "train/g_loss"} <= set(log.log[-1])
