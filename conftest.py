"""Repository-wide pytest hooks: tests marked ``gpu`` skip cleanly without CUDA; ``s3_server``.

Kept free of torch imports so that ppe-config's torch-less environment can use it (moto,
pfio and s3fs are imported inside the fixture that needs them).
"""

from __future__ import annotations

import importlib.util
import itertools
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest


def _cuda_available() -> bool:
    if importlib.util.find_spec("torch") is None:
        return False
    import torch

    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu") is not None]
    if gpu_items and not _cuda_available():
        skip = pytest.mark.skip(reason="needs a CUDA device")
        for item in gpu_items:
            item.add_marker(skip)


def _register_hypothesis_profiles() -> None:
    # CI runs the property tests derandomized (the same examples every run, so a red CI is
    # reproducible); developers get fresh random examples by default.
    if importlib.util.find_spec("hypothesis") is None:
        return
    import os

    from hypothesis import settings

    settings.register_profile("ci", derandomize=True, print_blob=True)
    if os.environ.get("CI"):
        settings.load_profile("ci")


_register_hypothesis_profiles()


# flask comes with moto's "server" extra (moto.server needs it).
_S3_MODULES = ("moto", "flask", "boto3", "pfio", "s3fs")
_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}
# Settings of the developer's environment that would send the clients elsewhere.
_S3_UNSET = ("AWS_SESSION_TOKEN", "AWS_SECURITY_TOKEN", "AWS_PROFILE", "AWS_ENDPOINT_URL")


class S3Server:
    """A local S3 server (moto) and clients for it, as given by the ``s3_server`` fixture.

    Attributes:
        endpoint: The server's URL (``http://127.0.0.1:PORT``).
    """

    def __init__(self, endpoint: str) -> None:
        import boto3

        self.endpoint = endpoint
        self._client = boto3.client("s3", endpoint_url=endpoint)
        self._buckets = itertools.count(1)

    def new_bucket(self) -> str:
        """Create an empty bucket with a name no other test uses, and return the name."""
        name = f"ppe-test-{os.getpid()}-{next(self._buckets)}"
        self._client.create_bucket(Bucket=name)
        return name

    def pfio(self, url: str) -> Any:
        """``pfio.v2.from_url(url)`` for this server (``url`` like ``s3://bucket/prefix``)."""
        import pfio

        return pfio.v2.from_url(url, endpoint=self.endpoint)

    def s3fs(self) -> Any:
        """A new ``s3fs.S3FileSystem`` for this server (no instance or listing shared)."""
        import s3fs

        return s3fs.S3FileSystem(
            endpoint_url=self.endpoint,
            key=_S3_CREDENTIALS["AWS_ACCESS_KEY_ID"],
            secret=_S3_CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            skip_instance_cache=True,
        )

    def objects(self, bucket: str, prefix: str = "") -> list[str]:
        """The sorted keys of the objects in ``bucket`` starting with ``prefix``."""
        keys = []
        paginator = self._client.get_paginator("list_objects_v2")
        for page in paginator.paginate(Bucket=bucket, Prefix=prefix):
            keys.extend(item["Key"] for item in page.get("Contents", []))
        return sorted(keys)


@pytest.fixture(scope="session")
def s3_server() -> Iterator[S3Server]:
    """A moto S3 server on 127.0.0.1 for the session; skips without moto[server], pfio, s3fs.

    The AWS credentials of the environment are replaced by moto's test ones
    for the session (and restored afterwards).
    """
    missing = [name for name in _S3_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        pytest.skip(
            f"needs moto[server], pfio and s3fs ({', '.join(missing)} missing): "
            "pip install 'ppe-training[s3]' 'moto[server]'"
        )
    from moto.server import ThreadedMotoServer

    # werkzeug logs every request of the server to stderr.
    logging.getLogger("werkzeug").setLevel(logging.WARNING)
    with pytest.MonkeyPatch.context() as patch:
        for name in _S3_UNSET:
            patch.delenv(name, raising=False)
        for name, value in _S3_CREDENTIALS.items():
            patch.setenv(name, value)
        server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
        server.start()
        try:
            host, port = server.get_host_and_port()
            yield S3Server(f"http://{host}:{port}")
        finally:
            server.stop()
