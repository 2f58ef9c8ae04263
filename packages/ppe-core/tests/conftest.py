"""Shared checks of the ppe-core tests: no test leaves a torch.distributed process group behind."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


def _group_initialized() -> bool:
    dist = sys.modules.get("torch.distributed")  # not imported here: no test used it yet
    return dist is not None and dist.is_available() and dist.is_initialized()


def _destroy_group() -> None:
    sys.modules["torch.distributed"].destroy_process_group()


@pytest.fixture(autouse=True)
def no_leaked_process_group(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test that leaves torch.distributed's default process group initialized.

    The group is destroyed then, so that the next tests start without one; a test that finds
    one already (left by code outside these tests) fails too.
    """
    if _group_initialized():
        _destroy_group()
        pytest.fail(
            f"torch.distributed's default process group was already initialized when "
            f"{request.node.nodeid} started (not by a test of this package: they are checked)"
        )
    yield
    if _group_initialized():
        _destroy_group()
        pytest.fail(
            f"{request.node.nodeid} left torch.distributed's default process group "
            "initialized: call torch.distributed.destroy_process_group() before it ends"
        )
