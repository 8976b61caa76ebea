"""A Ray cluster of the test's own on this machine, whatever other Ray runs beside it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any


@contextlib.contextmanager
def local_ray(**init_kwargs: Any) -> Iterator[None]:
    """`ray.init` of a new local cluster (never one that `ray start` or another test recorded on the
    machine: `address="local"`), no dashboard, workers' logs kept off the driver; shut down on exit."""
    import ray

    ray.init(address="local", include_dashboard=False, log_to_driver=False, **init_kwargs)
    try:
        yield
    finally:
        ray.shutdown()
