"""Two machines simulated on one: two network namespaces joined by a veth pair.

Each namespace runs one torchrun agent (``--nnodes 2``, one process per node); they meet at
the first namespace's address over the veth pair, and gloo talks over it
(``GLOO_SOCKET_IFNAME``). The workers are those of ``test_distributed_training.py``: the
training through the manager must end with the weights of one process trained on the
concatenated batches. Creating namespaces needs root (CAP_NET_ADMIN) and iproute2; without
them the test skips, saying so.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

WORKER = Path(__file__).with_name("test_distributed_training.py")
SUBNET = "10.231.7"
PORT = "29517"


def _load_worker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ppe_training_tests_multinode_worker", WORKER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ip(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=False)


@pytest.fixture
def namespaces() -> Iterator[list[tuple[str, str, str]]]:
    """Two namespaces joined by a veth pair: ``[(namespace, interface, address), ...]``."""
    if shutil.which("ip") is None:
        pytest.skip("needs iproute2's ip command to create network namespaces")
    tag = str(os.getpid())
    nodes = [(f"ppe{tag}n{i}", f"ppe{tag}v{i}", f"{SUBNET}.{i + 1}") for i in range(2)]
    (ns0, if0, _), (ns1, if1, _) = nodes
    created: list[str] = []
    try:
        for namespace, _, _ in nodes:
            result = _ip("netns", "add", namespace)
            if result.returncode != 0:
                pytest.skip(f"cannot create network namespaces here: {result.stderr.strip()}")
            created.append(namespace)
        steps = [
            ("link", "add", if0, "type", "veth", "peer", "name", if1),
            ("link", "set", if0, "netns", ns0),
            ("link", "set", if1, "netns", ns1),
        ]
        for namespace, interface, address in nodes:
            steps += [
                ("-n", namespace, "addr", "add", f"{address}/24", "dev", interface),
                ("-n", namespace, "link", "set", interface, "up"),
                ("-n", namespace, "link", "set", "lo", "up"),
            ]
        for step in steps:
            result = _ip(*step)
            if result.returncode != 0:
                pytest.skip(f"cannot set up the veth pair: ip {' '.join(step)}: {result.stderr}")
        yield nodes
    finally:
        for namespace in created:
            _ip("netns", "delete", namespace)  # removes the veth pair with it


@pytest.mark.slow
def test_two_nodes_over_a_veth_pair_train_like_one_process(
    namespaces: list[tuple[str, str, str]], tmp_path: Path
) -> None:
    master = namespaces[0][2]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONWARNINGS": "ignore"}
    agents = [
        subprocess.Popen(
            [
                "ip", "netns", "exec", namespace,
                "env", f"GLOO_SOCKET_IFNAME={interface}",
                sys.executable, "-m", "torch.distributed.run",
                "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node", "1",
                "--master-addr", master, "--master-port", PORT,
                str(WORKER), str(tmp_path),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for node, (namespace, interface, _) in enumerate(namespaces)
    ]  # fmt: skip
    outputs = []
    try:
        for agent in agents:
            outputs.append(agent.communicate(timeout=300)[0])
    finally:
        for agent in agents:
            if agent.poll() is None:
                agent.kill()
                agent.wait()
    for node, (agent, output) in enumerate(zip(agents, outputs)):
        assert agent.returncode == 0, f"node {node}:\n{output}"

    # The same checks as test_distributed_training.py's, on the results of both nodes.
    worker = _load_worker()
    net = worker.make_net()
    reference = worker._Reference(net, net, lambda x, y: torch.nn.functional.mse_loss(net(x), y))
    stop_iteration = 2 * worker._early_stopping_epoch(worker.GLOBAL_VALUES, patience=1)
    for rank in range(2):
        result: dict[str, Any] = torch.load(tmp_path / f"rank{rank}.pt", weights_only=False)
        for actual, expected in zip(result["manager"]["params"], reference.final):
            torch.testing.assert_close(actual, expected, rtol=1e-5, atol=1e-6)
        assert result["stop"]["stop_iteration"] == stop_iteration
        val_loss = reference.evaluate(reference.after_epoch[-1])
        assert result["trainer"]["log"][-1]["val/loss"] == pytest.approx(val_loss, rel=1e-5)
