"""Where an actor runs, asked from inside it: its GPUs, devices and threads (a check of the placement)."""

from __future__ import annotations

from typing import Any


def placed_on(device: Any) -> dict[str, Any]:
    """Where the calling Ray actor runs: the GPU ids and resources Ray assigned it, the CUDA_VISIBLE_DEVICES
    Ray set from them, the torch `device` it computes on and its torch CPU threads (a check of the placement
    from inside)."""
    import os

    import ray
    import torch

    return {
        "gpu_ids": [int(g) for g in ray.get_gpu_ids()],
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "resources": dict(ray.get_runtime_context().get_assigned_resources()),
        "device": str(device),
        "torch_threads": torch.get_num_threads(),
    }
