"""Joining a Ray cluster by address: a separate local cluster (`ray start --head`, its own ports and temp
dir, token authentication on) runs a tiny job by explicit address and is still up afterwards; a wrong
token fails with one line and leaves no run folder."""

import contextlib
import importlib.util
import os
import secrets
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from unstable_core.testing import TINY_RUN_ARGS as SMALL

RAY = str(Path(sys.executable).parent / "ray")


def free_ports(n: int) -> list[int]:
    """`n` distinct ports free now (all held open together while chosen, so none is picked twice)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(n)]
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]


def client_env(token: str) -> dict[str, str]:
    """A driver that has the cluster's token but has not set RAY_AUTH_MODE (Ray 2.60 then fails by address)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    return {**env, "RAY_AUTH_TOKEN": token, "TOKENIZERS_PARALLELISM": "false"}


def client_server_installed() -> bool:
    """Whether `ray start` runs a Ray Client server (it needs `ray[client]`, and refuses its port without)."""
    try:
        from ray._private.utils import get_ray_client_dependency_error  # Ray's own check (2.60)
    except ImportError:
        return importlib.util.find_spec("grpc") is not None
    return get_ray_client_dependency_error() is None


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A head node of our own, torn down by killing the processes of its temp dir (never `ray stop`, which
    would stop every Ray on the machine)."""
    temp = tmp_path_factory.mktemp("ray")  # short: Ray's socket paths must stay under 108 characters
    port, client, agent_http, agent_grpc, runtime_env, metrics = free_ports(6)
    token = secrets.token_hex(16)
    env = {**client_env(token), "RAY_AUTH_MODE": "token"}
    cmd = [RAY, "start", "--head", f"--port={port}", f"--temp-dir={temp}", "--num-cpus=2", "--num-gpus=0"]
    cmd += ["--include-dashboard=false", "--disable-usage-stats"]
    # every port of its own: Ray's fixed defaults (client server 10001, dashboard agent 52365) would
    # collide with another Ray on this machine (the client server runs only with ray[client] installed)
    if client_server_installed():
        cmd += [f"--ray-client-server-port={client}"]
    cmd += [f"--dashboard-agent-listen-port={agent_http}"]
    cmd += [f"--dashboard-agent-grpc-port={agent_grpc}", f"--runtime-env-agent-port={runtime_env}"]
    cmd += [f"--metrics-export-port={metrics}"]
    start = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180)
    assert start.returncode == 0, start.stdout[-2000:] + start.stderr[-2000:]
    yield f"127.0.0.1:{port}", token
    for proc in psutil.process_iter(["cmdline"]):
        if any(str(temp) in part for part in proc.info["cmdline"] or []):
            proc.kill()


def cluster_is_up(address: str, token: str) -> bool:
    probe = (
        f"import ray; ray.init(address={address!r}); print(ray.cluster_resources()['CPU']); ray.shutdown()"
    )
    env = {**client_env(token), "RAY_AUTH_MODE": "token"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    return out.returncode == 0 and out.stdout.strip().endswith("2.0")


def unstable_run(tiny_model, runs_dir, address, env):
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(runs_dir)]
    cmd += [*SMALL, "--learning-steps", "1", "--num-eval-workers", "0", "--run-name", "joined"]
    return subprocess.run(
        [*cmd, "--ray-address", address], env=env, capture_output=True, text=True, timeout=420
    )


def test_a_run_joins_a_token_cluster_by_address_and_leaves_it_up(cluster, tiny_model, tmp_path):
    address, token = cluster
    proc = unstable_run(tiny_model, tmp_path, address, client_env(token))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "joined" / "checkpoints" / "step-1" / "adapter_model.safetensors").is_file()
    time.sleep(1)
    assert cluster_is_up(address, token)


def test_a_local_run_starts_its_own_cluster_beside_one_that_another_process_runs(tmp_path):
    """A head node started by `ray start` or `ray.cluster_utils.Cluster` records its address for every later
    `ray.init()` on the machine to join; a run without --ray-address starts its own all the same (joining
    would refuse its CPU count, or share a stranger's cluster)."""
    mine = (
        "import ray; from unstable_core.runtime.launch.cluster import start_ray, stop_ray, LOCAL_CPUS;"
        "start_ray(None); print(ray.cluster_resources()['CPU'] == LOCAL_CPUS); stop_ray()"
    )
    other = (
        "import subprocess, sys, ray; from ray.cluster_utils import Cluster;"
        "c = Cluster(initialize_head=True, head_node_args={'num_cpus': 1});"
        f"r = subprocess.run([sys.executable, '-c', {mine!r}], capture_output=True, text=True, timeout=180);"
        "c.shutdown(); print(r.stdout); print(r.stderr[-2000:], file=sys.stderr); sys.exit(r.returncode)"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("RAY_")}
    result = subprocess.run(
        [sys.executable, "-c", other], capture_output=True, text=True, env=env, timeout=300
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip().splitlines()[-1] == "True"


def test_a_wrong_token_fails_in_one_line_and_leaves_no_run_folder(cluster, tiny_model, tmp_path):
    address, _ = cluster
    proc = unstable_run(tiny_model, tmp_path, address, client_env("0" * 32))
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert f"could not join the Ray cluster at {address}" in proc.stderr
    assert "RAY_AUTH_TOKEN" in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "joined").exists()
