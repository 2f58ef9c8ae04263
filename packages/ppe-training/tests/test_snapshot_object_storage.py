"""Snapshots on object storage: every mode through the writer's file system, on a local S3
server (moto, on 127.0.0.1), reached through pfio and through s3fs (fsspec), on 2 ranks
under torchrun (sharded_train.py) and in one process."""

from __future__ import annotations

import json
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


def _manager(
    writer: Any, out: str, snapshot: Any, epochs: int = 2
) -> tuple[ExtensionsManager, torch.nn.Module]:
    torch.manual_seed(0)
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    manager = ExtensionsManager(
        model, optimizer, epochs, iters_per_epoch=3, out_dir=out, writer=writer
    )
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


# ---------------------------------------------------------------- a writer of the snapshot's own


def _client(s3_server: Any) -> Any:
    """A boto3 client of the local S3 server."""
    import boto3  # type: ignore[import-untyped]

    return boto3.client("s3", endpoint_url=s3_server.endpoint)


def _buckets(s3_server: Any) -> list[str]:
    return [bucket["Name"] for bucket in _client(s3_server).list_buckets()["Buckets"]]


def _delete_bucket(s3_server: Any, bucket: str) -> None:
    _client(s3_server).delete_bucket(Bucket=bucket)


@pytest.mark.parametrize("mode", ["DEFAULT", "DISTRIBUTED", "SHARDED"])
def test_a_snapshot_writer_on_object_storage_writes_under_its_prefix_not_the_managers_out_dir(
    s3_server: Any, tmp_path: Path, mode: str
) -> None:
    # PPE code that keeps its logs local and its snapshots remote: as in PPE 0.9, they go under
    # the writer's own out_dir ("", the root of its file system: the URL's prefix).
    bucket = s3_server.new_bucket()
    logs = tmp_path / "logs"

    def snapshot() -> Any:
        writer = writing.SimpleWriter(fs=s3_server.pfio(f"s3://{bucket}/prefix"))
        return ext_module.snapshot(
            writer=writer,
            snapshot_mode=ext_module.SnapshotMode[mode],
            n_retains=2,
            autoload=True,
        )

    manager, model = _manager(writer=None, out=str(logs), snapshot=snapshot(), epochs=1)
    _train(manager, model)
    keys = s3_server.objects(bucket)
    assert {key.split("/")[1] for key in keys} == {"snapshot_iter_2", "snapshot_iter_3"}, keys
    assert all(key.startswith("prefix/snapshot_iter_") for key in keys), keys
    assert not [path for path in tmp_path.rglob("*") if "snapshot" in path.name]
    resumed, resumed_model = _manager(writer=None, out=str(logs), snapshot=snapshot(), epochs=1)
    resumed.start_extensions()
    assert resumed.get_extension("_Snapshot").resumed_from == "snapshot_iter_3"
    assert resumed.iteration == 3
    torch.testing.assert_close(resumed_model.weight, model.weight, rtol=0, atol=0)


def test_a_snapshot_writer_on_the_local_disk_without_out_dir_writes_into_the_managers(
    tmp_path: Path,
) -> None:
    snapshot = ext_module.snapshot(writer=writing.SimpleWriter(), n_retains=1)
    manager, model = _manager(writer=None, out=str(tmp_path / "out"), snapshot=snapshot, epochs=1)
    _train(manager, model)
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["snapshot_iter_3"]


@pytest.mark.parametrize(
    ("mode", "async_save"),
    [("DEFAULT", False), ("DISTRIBUTED", False), ("SHARDED", False), ("SHARDED", True)],
)
@pytest.mark.parametrize("client", ["pfio", "s3fs"])
def test_a_missing_bucket_is_an_error_naming_it_before_anything_is_written(
    s3_server: Any, tmp_path: Path, mode: str, async_save: bool, client: str
) -> None:
    bucket = s3_server.new_bucket()
    if client == "pfio":
        fs = s3_server.pfio(f"s3://{bucket}/prefix")
        _delete_bucket(s3_server, bucket)  # pfio checks it when made: it went missing since
        url = f"s3://{bucket}/prefix/run"
    else:
        bucket += "-mistyped"
        fs, url = s3_server.s3fs(), f"s3://{bucket}/run"
    out = "run" if client == "pfio" else f"{bucket}/run"
    snapshot = ext_module.snapshot(
        writer=writing.SimpleWriter(fs=fs, out_dir=out),
        snapshot_mode=ext_module.SnapshotMode[mode],
        async_save=async_save,
        autoload=True,
    )
    manager, _ = _manager(writer=None, out=str(tmp_path / "logs"), snapshot=snapshot)
    with pytest.raises(FileNotFoundError, match=f"the bucket '{bucket}' of '{url}' does not"):
        manager.start_extensions()
    assert bucket not in _buckets(s3_server)
    assert not [path for path in tmp_path.rglob("*") if "snapshot" in path.name]


@pytest.mark.parametrize("async_save", [False, True])
def test_a_sharded_snapshot_never_creates_a_bucket_that_went_missing(
    s3_server: Any, tmp_path: Path, async_save: bool
) -> None:
    bucket = s3_server.new_bucket()
    snapshot = ext_module.snapshot(
        snapshot_mode=ext_module.SnapshotMode.SHARDED, async_save=async_save
    )
    manager, model = _manager(
        writer=writing.SimpleWriter(fs=s3_server.s3fs()), out=f"{bucket}/run", snapshot=snapshot
    )
    manager.start_extensions()
    _delete_bucket(s3_server, bucket)
    with pytest.raises(FileNotFoundError, match=f"the bucket '{bucket}' of 's3://{bucket}/run/"):
        _train(manager, model)
    assert bucket not in _buckets(s3_server)


def test_a_snapshot_writer_of_s3fs_without_out_dir_is_an_error_naming_the_root(
    s3_server: Any, tmp_path: Path
) -> None:
    # An s3fs path starts with the bucket: out_dir "" would make each snapshot a bucket.
    snapshot = ext_module.snapshot(writer=writing.SimpleWriter(fs=s3_server.s3fs()))
    manager, _ = _manager(writer=None, out=str(tmp_path / "logs"), snapshot=snapshot)
    with pytest.raises(FileNotFoundError, match=r"at the root of .*'bucket/prefix'"):
        manager.start_extensions()


# ---------------------------------------------------------------- pfio's options reach s3fs


def test_a_pfio_file_systems_client_options_reach_the_s3fs_of_sharded_snapshots(
    s3_server: Any,
) -> None:
    import pfio  # type: ignore[import-untyped]
    import s3fs  # type: ignore[import-untyped]

    from pytorch_pfn_extras.training._snapshots._storage import Storage

    bucket = s3_server.new_bucket()
    fs = pfio.v2.from_url(
        f"s3://{bucket}/prefix",
        endpoint=s3_server.endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        connect_timeout=7,
        read_timeout=11,
        mpu_chunksize=8 << 20,
    )
    remote = Storage(writing.SimpleWriter(fs=fs).fs).fsspec("run")
    assert remote is not None
    url, options = remote
    assert url == f"s3://{bucket}/prefix/run"
    client = s3fs.S3FileSystem(**options, skip_instance_cache=True)
    client.pipe(f"{url}/probe", b"through s3fs")
    with fs.open("run/probe", "rb") as f:  # the same object, through pfio
        assert f.read() == b"through s3fs"
    config = client.s3.meta.config
    assert (config.connect_timeout, config.read_timeout) == (7, 11)
    assert client.default_block_size == 8 << 20  # the part size of its uploads, as pfio's


_PROFILE = "ppe-test-profile"


def _recorded(s3_server: Any, action: str) -> str:
    """Call the request recorder of the local S3 server (moto's): ``action`` is
    ``reset-recording``, ``start-recording``, ``stop-recording`` or ``download-recording``
    (the requests received, one JSON object a line, their headers included)."""
    import urllib.request

    url = f"{s3_server.endpoint}/moto-api/recorder/{action}"
    method = "GET" if action == "download-recording" else "POST"
    with urllib.request.urlopen(urllib.request.Request(url, method=method)) as response:
        return str(response.read().decode())


def test_the_region_session_token_and_profile_of_pfio_reach_the_s3fs_of_sharded_snapshots(
    s3_server: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # pfio's S3 takes them from boto3's environment (it has no argument for them): the s3fs
    # that writes a sharded snapshot reaches the bucket as that profile, with its token and
    # region, as pfio does. The local S3 server records each request's signature.
    import boto3
    import s3fs

    config, credentials = tmp_path / "aws_config", tmp_path / "aws_credentials"
    config.write_text(f"[profile {_PROFILE}]\nregion = eu-west-3\n")
    credentials.write_text(
        f"[{_PROFILE}]\naws_access_key_id = PPEPROFILEKEY\naws_secret_access_key = secret\n"
        "aws_session_token = ppe-session-token\n"
    )
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_DEFAULT_REGION"):
        monkeypatch.delenv(name)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(credentials))
    monkeypatch.setenv("AWS_PROFILE", _PROFILE)
    monkeypatch.chdir(tmp_path)  # where the server's recorder keeps its file
    # boto3's default session (pfio's) read the configuration before this environment: a new
    # one reads it (the old one is put back after the test), as fsspec's s3fs instances are.
    monkeypatch.setattr(boto3, "DEFAULT_SESSION", None)
    s3fs.S3FileSystem.clear_instance_cache()
    bucket = s3_server.new_bucket()
    fs = s3_server.pfio(f"s3://{bucket}/prefix")

    def manager() -> tuple[ExtensionsManager, torch.nn.Module]:
        snapshot = ext_module.snapshot(snapshot_mode=ext_module.SnapshotMode.SHARDED, autoload=True)
        return _manager(writer=writing.SimpleWriter(fs=fs), out="run", snapshot=snapshot, epochs=1)

    _recorded(s3_server, "reset-recording")
    _recorded(s3_server, "start-recording")
    try:
        trained, model = manager()
        _train(trained, model)
        resumed, _ = manager()
        resumed.start_extensions()
        recording = _recorded(s3_server, "download-recording")
    finally:
        _recorded(s3_server, "stop-recording")
        _recorded(s3_server, "reset-recording")
        s3fs.S3FileSystem.clear_instance_cache()
    requests = [json.loads(line) for line in recording.splitlines()]
    assert resumed.iteration == 3
    by_s3fs = [r["headers"] for r in requests if "aiobotocore" in r["headers"]["User-Agent"]]
    assert len(by_s3fs) > 3  # the shards and metadata written, then read
    for headers in by_s3fs:
        assert "Credential=PPEPROFILEKEY/" in headers["Authorization"]
        assert "/eu-west-3/s3/aws4_request" in headers["Authorization"]
        assert headers["X-Amz-Security-Token"] == "ppe-session-token"
