"""The model registry as the run's single source of truth: every change is saved to `registry.json`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unstable_core.model_registry import ModelRegistry


class RegistryHost:
    """Wraps a `ModelRegistry` (hosted in a Ray actor) and writes it atomically after each change."""

    def __init__(self, path: str | Path, **registry_kwargs: Any) -> None:
        self.path = Path(path)
        self.registry = (
            ModelRegistry.load(self.path) if self.path.exists() else ModelRegistry(**registry_kwargs)
        )

    def _save(self) -> None:
        self.registry.save(self.path)

    def add_checkpoint(self, uid: str, path: str | None, iteration: int, inherit: bool = True) -> None:
        self.registry.add_checkpoint(uid, path, iteration, inherit=inherit)
        self._save()

    def add_fixed(self, name: str, prior_mu: float = 25.0) -> None:
        self.registry.add_fixed(name, prior_mu=prior_mu)
        self._save()

    def update_ratings(self, uids: list[str], scores: list[float], env_id: str) -> None:
        self.registry.update_ratings(uids, scores, env_id)
        self._save()

    def get_current_ckpt(self) -> str | None:
        return self.registry.get_current_ckpt()

    def to_dict(self) -> dict[str, Any]:
        return self.registry.to_dict()
