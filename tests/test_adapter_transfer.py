"""No shared filesystem: adapters reach the inference actors as bytes, through the adapter store, and are
served from a cache on their own node.

- the cache (`inference/adapter_cache.py`) on its own: one fetch for many concurrent requests, atomic
  folders, least recently used evicted but never one in use, a problem passed on as one line, its folder
  removed on close and the folders of dead actors at the next start;
- on a two-node Ray cluster on this machine (`ray.cluster_utils.Cluster`), inference actors asked onto the
  second node (UNSTABLE_INFERENCE_RESOURCES): the store, on the driver's node, sends only the adapter's
  files; a real `unstable run` completes, and the inference actors opened nothing under the run directory
  (every file opened through Python is recorded, UNSTABLE_TEST_RECORD_OPENS): their adapters came from
  their own cache.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from unstable_core.inference.adapter_cache import (
    RECORD_OPENS_ENV,
    AdapterCache,
    AdapterUnavailable,
    default_root,
    local_name,
)
from unstable_core.inference.adapters import ADAPTER_CONFIG, ADAPTER_WEIGHTS
from unstable_core.runtime.actors.inference import RESOURCES_ENV
from unstable_core.runtime.launch.cluster import AUTH_MODE
from unstable_core.testing import TINY_RUN_ARGS

FILES = {ADAPTER_CONFIG: b'{"r": 4}', ADAPTER_WEIGHTS: b"weights"}


class Store:
    """A fake adapter store: counts fetches, answers after a pause, knows only paths starting 'ok'."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    async def fetch(self, path: str) -> dict[str, bytes] | str:
        self.calls.append(path)
        await asyncio.sleep(0.01)
        return dict(FILES) if Path(path).name.startswith("ok") else f"LoRA adapter folder {path!r} is gone"


# ---- the cache on its own


def test_concurrent_requests_for_one_adapter_fetch_it_once(tmp_path):
    store = Store()
    cache = AdapterCache(store.fetch, capacity=4, root=tmp_path)
    seen: list[str] = []

    async def request(path: str) -> None:
        async with cache.use(path) as local:
            seen.append(local)
            assert Path(local, ADAPTER_WEIGHTS).read_bytes() == b"weights"
            await asyncio.sleep(0.01)

    async def main() -> None:
        await asyncio.gather(*(request("/run/checkpoints/ok-step-3") for _ in range(20)))

    asyncio.run(main())
    assert store.calls == ["/run/checkpoints/ok-step-3"] and cache.fetches == 1
    assert set(seen) == {str(cache.dir / local_name("/run/checkpoints/ok-step-3"))}
    assert cache.dir.parent == tmp_path and sorted(p.name for p in Path(seen[0]).iterdir()) == sorted(FILES)
    assert [p.name for p in cache.dir.iterdir()] == [Path(seen[0]).name]  # no temporary folder left
    cache.close()
    assert not cache.dir.exists()


def test_least_recently_used_evicted_never_one_in_use(tmp_path):
    store = Store()
    cache = AdapterCache(store.fetch, capacity=2, root=tmp_path)

    async def main() -> None:
        async with cache.use("/r/ok-1") as held:  # in use all along
            for name in ("ok-2", "ok-3", "ok-4"):
                async with cache.use(f"/r/{name}"):
                    pass
            assert Path(held).is_dir()
            assert cache.local_paths() == [held, str(cache.dir / local_name("/r/ok-4"))]
        async with cache.use("/r/ok-5"):
            pass
        names = [Path(p).name for p in cache.local_paths()]
        assert names == [local_name("/r/ok-4"), local_name("/r/ok-5")]  # ok-1 went once released
        assert sorted(p.name for p in cache.dir.iterdir()) == sorted(names)
        async with cache.use("/r/ok-2"):  # evicted earlier: fetched again
            pass

    asyncio.run(main())
    assert store.calls == ["/r/ok-1", "/r/ok-2", "/r/ok-3", "/r/ok-4", "/r/ok-5", "/r/ok-2"]
    cache.close()


def test_a_missing_adapter_fails_with_the_stores_line_and_is_not_cached(tmp_path):
    store = Store()
    cache = AdapterCache(store.fetch, capacity=2, root=tmp_path)

    async def main() -> list[str]:
        async def one() -> str:
            with pytest.raises(AdapterUnavailable) as err:
                async with cache.use("/r/step-9"):
                    pass
            return str(err.value)

        return list(await asyncio.gather(one(), one()))

    assert asyncio.run(main()) == ["LoRA adapter folder '/r/step-9' is gone"] * 2
    assert store.calls == ["/r/step-9"] and cache.local_paths() == []
    asyncio.run(main())
    assert store.calls == ["/r/step-9"] * 2  # a failure is asked again
    cache.close()


def test_a_store_error_is_one_line_and_none_needs_no_store(tmp_path):
    async def broken(path: str) -> dict[str, bytes]:
        raise RuntimeError("actor died\nsecond line")

    cache = AdapterCache(broken, capacity=2, root=tmp_path)

    async def main() -> None:
        async with cache.use(None) as local:
            assert local is None
        with pytest.raises(AdapterUnavailable, match=r"from the adapter store: RuntimeError: actor died$"):
            async with cache.use("/r/ok-1"):
                pass

    asyncio.run(main())
    cache.close()


def test_a_dead_actors_cache_is_removed_at_the_next_start(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True)
    old = tmp_path / f"{int(dead.stdout)}-abc"
    (old / "step-1-0123456789").mkdir(parents=True)
    alive = tmp_path / f"{os.getppid()}-def"  # a live process's: kept
    alive.mkdir()
    cache = AdapterCache(Store().fetch, capacity=2, root=tmp_path)
    assert not old.exists() and alive.is_dir() and cache.dir.is_dir()
    cache.close()


# ---- two nodes


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """A head node (the driver's) and a second node offering the resource `inference_node`, whose processes
    record the files they open through Python (only the inference actors read the variable)."""
    from ray.cluster_utils import Cluster

    opens = tmp_path_factory.mktemp("opens")
    saved = os.environ.get(RECORD_OPENS_ENV)
    os.environ[RECORD_OPENS_ENV] = str(opens)  # the cluster's processes inherit it
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "include_dashboard": False})
        second = cluster.add_node(num_cpus=2, resources={"inference_node": 1})
        cluster.wait_for_nodes()
    finally:
        if saved is None:
            os.environ.pop(RECORD_OPENS_ENV)
        else:
            os.environ[RECORD_OPENS_ENV] = saved
    # Ray's authentication mode, as the cluster's processes inherited it: a local `ray.init()` of an earlier
    # test in this process turns token authentication on for good (and writes ~/.ray/auth_token)
    yield cluster, second.node_id, opens, os.environ.get(AUTH_MODE, "disabled")
    cluster.shutdown()


def test_the_store_sends_only_the_adapter_files_from_the_drivers_node(two_nodes, tmp_path):
    import ray

    from unstable_core.runtime.actors.adapter_store import AdapterStore
    from unstable_core.runtime.launch.build import start_adapter_store

    cluster, second, _, _ = two_nodes
    folder = tmp_path / "step-1"
    folder.mkdir()
    for name, data in {**FILES, "optimizer.safetensors": b"o", "learner_state.json": b"{}"}.items():
        (folder / name).write_bytes(data)
    ray.init(address=cluster.address)
    try:
        store, name = start_adapter_store()
        assert ray.get_actor(name)._actor_id == store._actor_id  # how the inference actors find it
        ref = ray.get(store.adapter.remote(str(folder)))
        assert ray.get(ref) == FILES
        ray.get(store.adapter.remote(str(folder)))
        assert ray.get(store.stats.remote()) == {"held": 1, "reads": 1}
        assert "does not exist" in ray.get(store.adapter.remote(str(tmp_path / "nope")))
        small = AdapterStore(keep=1)  # holds one version: the other is read again
        other = tmp_path / "step-2"
        other.mkdir()
        for name, data in FILES.items():
            (other / name).write_bytes(data)
        for f in (folder, other, folder):
            assert ray.get(small.adapter(str(f))) == FILES
        assert small.stats() == {"held": 1, "reads": 3}
        where = ray.get(store.__ray_call__.remote(lambda _: ray.get_runtime_context().get_node_id()))
        assert where == cluster.head_node.node_id != second
    finally:
        ray.shutdown()


def test_a_run_on_two_nodes_never_opens_the_run_directory_from_inference(two_nodes, tiny_model, tmp_path):
    cluster, second, opens, auth_mode = two_nodes
    cmd = [sys.executable, "-m", "unstable_core", "run", "--model", tiny_model, "--runs-dir", str(tmp_path)]
    # each checkpoint's scheduled evaluation (after the last update too) plays it: its adapter is served
    cmd += [*TINY_RUN_ARGS, "--eval-every", "1", "--eval-games", "2", "--run-name", "two-nodes"]
    cmd += ["--ray-address", cluster.address]
    env = {k: v for k, v in os.environ.items() if k != RECORD_OPENS_ENV}
    env.update({RESOURCES_ENV: json.dumps({"inference_node": 1}), "TOKENIZERS_PARALLELISM": "false"})
    env[AUTH_MODE] = auth_mode  # the cluster's: left unset, a driver holding a token would present it
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=420)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = (tmp_path / "two-nodes").resolve()
    assert (run_dir / "checkpoints" / "step-2" / ADAPTER_WEIGHTS).is_file()

    logs = {}  # pid -> (node, [(path, mode or flags)])
    for log in opens.glob("opens-*.txt"):
        head, *lines = log.read_text().splitlines()
        logs[int(log.stem.split("-")[1])] = (
            head.removeprefix("node "),
            [tuple(x.split("\t")) for x in lines],
        )
    assert logs, "no inference actor recorded its opens"
    assert {node for node, _ in logs.values()} == {second}  # every inference actor ran on the second node
    opened = [(pid, path, mode) for pid, (_, lines) in logs.items() for path, mode in lines]
    under_run_dir = [p for _, p, _ in opened if Path(p).resolve().is_relative_to(run_dir)]
    loaded = sorted({(pid, p) for pid, p, mode in opened if p.endswith(ADAPTER_CONFIG) and mode == "r"})
    print(
        f"inference actors: {len(logs)}, files opened: {len(opened)}, under the run directory: {len(under_run_dir)}"
    )
    print("adapter configs the backend read:", *(p for _, p in loaded), sep="\n  ")
    assert any(p == str(Path(tiny_model, "config.json")) for _, p, _ in opened)  # the record sees opens
    assert under_run_dir == []
    for pid, p in loaded:  # <temp dir>/unstable-adapters/<pid>-<random>/step-<n>-<hash>/adapter_config.json
        cache = Path(p).parent.parent
        assert cache.parent == default_root() and cache.name.startswith(f"{pid}-"), p
        assert not cache.exists(), f"{cache} was not removed at the end of the run"
    assert sorted(Path(p).parent.name.split("-")[1] for _, p in loaded) == ["1", "2"]
