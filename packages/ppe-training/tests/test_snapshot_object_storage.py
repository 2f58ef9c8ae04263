"""Snapshots on object storage: every mode through the writer's file system, on a local S3
server (moto, on 127.0.0.1), reached through pfio and through s3fs (fsspec), on 2 ranks
under torchrun (sharded_train.py) and in one process."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from pytorch_pfn_extras import writing
from pytorch_pfn_extras.training import ExtensionsManager
from pytorch_pfn_extras.training import extensions as ext_module
from pytorch_pfn_extras.writing import temporary_name

SCRIPT = Path(__file__).with_name("sharded_train.py")
TIMEOUT = 240

Run = Callable[..., "subprocess.CompletedProcess[str]"]


@pytest.fixture
def run(
    s3_server: Any,
    free_port: Callable[[], int],
    torchrun: Callable[..., subprocess.CompletedProcess[str]],
) -> Run:
    """``run(bucket, out, client, *args, expect_failure=False)``: sharded_train.py on 2 ranks
    writing to ``out`` on the S3 server through ``client`` (pfio or s3fs)."""

    def run_script(
        bucket: str, out: str, client: str, *args: str, expect_failure: bool = False
    ) -> subprocess.CompletedProcess[str]:
        process = torchrun(
            2,
            SCRIPT,
            out,
            "--s3",
            f"{client}:{s3_server.endpoint}",
            *args,
            launcher=["--master-addr", "127.0.0.1", "--master-port", str(free_port())],
            env={"PPE_TEST_BUCKET": bucket, "PYTHONWARNINGS": "default"},
            timeout=TIMEOUT,
        )
        if expect_failure:
            assert process.returncode != 0, process.stdout[-3000:]
        else:
            assert process.returncode == 0, process.stderr[-6000:]
        return process

    return run_script


# The snapshot of each mode: what lands in the bucket for snapshot_iter_<n>.
_LAYOUT = {
    "DEFAULT": lambda n: [f"snapshot_iter_{n}"],
    "DISTRIBUTED": lambda n: [f"snapshot_iter_{n}"],
    "SHARDED": lambda n: [
        f"snapshot_iter_{n}/.metadata",
        f"snapshot_iter_{n}/__0_0.distcp",
        f"snapshot_iter_{n}/__1_0.distcp",
        f"snapshot_iter_{n}/ppe_snapshot.json",
    ],
}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("mode", "client"),
    [("DEFAULT", "pfio"), ("DISTRIBUTED", "pfio"), ("SHARDED", "pfio"), ("SHARDED", "s3fs")],
)
def test_snapshots_of_2_ranks_land_in_the_bucket_are_retained_there_and_resume(
    s3_server: Any,
    run: Run,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    mode: str,
    client: str,
) -> None:
    monkeypatch.chdir(tmp_path)  # a relative out_dir must not appear on the local disk
    bucket = s3_server.new_bucket()
    out = "run" if client == "pfio" else f"{bucket}/run"
    run(bucket, out, client, "--mode", mode, "--n-retains", "2", "--stop-at", "7")
    snapshots = [k for k in s3_server.objects(bucket, "run/") if "snapshot" in k]
    expected = sorted(f"run/{key}" for n in (4, 6) for key in _LAYOUT[mode](n))
    assert snapshots == expected  # 2 and older deleted there; no temporary left
    assert list(tmp_path.iterdir()) == []
    run(bucket, out, client, "--mode", mode, "--n-retains", "2", "--result", "result.pt")
    # rank 0 wrote the result on the local disk (the test's file, not the snapshot's)
    local = torch.load(tmp_path / "result.pt", weights_only=True)
    assert local["resumed_from"] == f"{out}/snapshot_iter_6"
    assert_same_training(local, sharded_reference)
    assert [k for k in s3_server.objects(bucket, "run/") if "snapshot" in k] == sorted(
        f"run/{key}" for n in (10, 12) for key in _LAYOUT[mode](n)
    )


@pytest.mark.slow
def test_a_rank_killed_during_the_upload_leaves_the_previous_snapshot_loadable(
    s3_server: Any,
    run: Run,
    sharded_reference: dict[str, Any],
    assert_same_training: Callable[[dict[str, Any], dict[str, Any]], None],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = s3_server.new_bucket()
    killed = run(bucket, "run", "pfio", "--kill-rank", "0", "--kill-at", "6", expect_failure=True)
    assert "RANK 0 DONE" not in killed.stdout
    keys = s3_server.objects(bucket, "run/")
    assert "run/snapshot_iter_4/ppe_snapshot.json" in keys
    # On object storage a sharded snapshot is written in place and committed by its
    # manifest: the killed one has its ranks' files, never the manifest.
    partial = [k for k in keys if k.startswith("run/snapshot_iter_6/")]
    assert partial and "run/snapshot_iter_6/ppe_snapshot.json" not in partial
    resumed = run(bucket, "run", "pfio", "--result", "result.pt")
    assert "snapshot_iter_6' is a sharded snapshot without its ppe_snapshot.json" in resumed.stderr
    result = torch.load(tmp_path / "result.pt", weights_only=True)
    assert result["resumed_from"] == "run/snapshot_iter_4"
    assert_same_training(result, sharded_reference)
    # Written again by the resumed job, complete this time; no temporary anywhere.
    keys = s3_server.objects(bucket, "run/")
    assert "run/snapshot_iter_6/ppe_snapshot.json" in keys
    assert not [k for k in keys if ".tmp-" in k]


def _manager(writer: Any, out: str, snapshot: Any) -> tuple[ExtensionsManager, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = ExtensionsManager(model, optimizer, 2, iters_per_epoch=3, out_dir=out, writer=writer)
    manager.extend(snapshot, trigger=(1, "iteration"))
    return manager, model


def _train(manager: ExtensionsManager, model: torch.nn.Module) -> None:
    optimizer = manager.optimizers["main"]
    while not manager.stop_trigger:
        with manager.run_iteration():
            x = torch.full((2, 3), float(manager.iteration))
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()


@pytest.mark.parametrize("mode", ["DEFAULT", "SHARDED"])
@pytest.mark.parametrize("client", ["pfio", "s3fs"])
def test_one_process_writes_retains_and_autoloads_in_the_bucket(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mode: str, client: str
) -> None:
    monkeypatch.chdir(tmp_path)
    bucket = s3_server.new_bucket()
    if client == "pfio":
        fs, out = s3_server.pfio(f"s3://{bucket}"), "out"
    else:
        fs, out = s3_server.s3fs(), f"{bucket}/out"

    def snapshot() -> Any:
        return ext_module.snapshot(
            snapshot_mode=ext_module.SnapshotMode[mode], n_retains=2, autoload=True
        )

    manager, model = _manager(writer=writing.SimpleWriter(fs=fs), out=out, snapshot=snapshot())
    _train(manager, model)
    names = {k.split("/")[1] for k in s3_server.objects(bucket, "out/")}
    assert names == {"snapshot_iter_5", "snapshot_iter_6"}
    assert list(tmp_path.iterdir()) == []
    resumed, resumed_model = _manager(
        writer=writing.SimpleWriter(fs=fs), out=out, snapshot=snapshot()
    )
    resumed.start_extensions()
    assert resumed.iteration == 6
    torch.testing.assert_close(resumed_model.weight, model.weight, rtol=0, atol=0)
    saved = manager.optimizers["main"].state_dict()["state"]
    loaded = resumed.optimizers["main"].state_dict()["state"]
    assert sorted(loaded) == sorted(saved) == [0, 1]
    for key, value in saved.items():
        torch.testing.assert_close(loaded[key]["momentum_buffer"], value["momentum_buffer"])


def test_a_stale_temporary_directory_in_the_bucket_is_removed_and_a_live_one_kept(
    s3_server: Any, tmp_path: Path
) -> None:
    bucket = s3_server.new_bucket()
    fs = s3_server.pfio(f"s3://{bucket}")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    prefix, _pid, random_part = temporary_name("snapshot_iter_2").rsplit("-", 2)
    stale = f"out/{prefix}-{gone.pid}-{random_part}"
    live = f"out/{temporary_name('snapshot_iter_4')}"
    for directory in (stale, live):
        with fs.open(f"{directory}/__0_0.distcp", "wb") as f:
            f.write(b"partial")
    manager, _ = _manager(
        writer=writing.SimpleWriter(fs=fs),
        out="out",
        snapshot=ext_module.snapshot(snapshot_mode=ext_module.SnapshotMode.SHARDED),
    )
    manager.start_extensions()
    assert s3_server.objects(bucket, "out/") == [f"{live}/__0_0.distcp"]
