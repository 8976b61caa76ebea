"""LoRA adapters hot-loaded into one transformers model with peft, by folder path, LRU-evicted.

The base model is wrapped once in a `PeftModel` (on the first adapter); each adapter is then a named
adapter of it, so rows of one batch can use different adapters (peft's `adapter_names`, "__base__"
for the base model).
"""

from __future__ import annotations

import warnings
from collections.abc import Collection, Sequence
from typing import Any

from unstable_core.inference.adapters import AdapterLRU, AdapterSlot, adapter_problem, adapter_version

BASE = "__base__"


class PeftAdapterPool:
    """At most `capacity` adapters loaded at once; the least recently used is deleted first."""

    def __init__(self, base_model: Any, capacity: int) -> None:
        self.base_model = base_model
        self.peft_model: Any = None
        self.lru = AdapterLRU(capacity)
        self._next_id = 0

    @property
    def model(self) -> Any:
        """The model to call: the PeftModel while it holds an adapter, else the base model (after a failed
        reload of the only adapter, its LoRA layers are empty and it is the base model again)."""
        return self.peft_model if self._holds_adapters() else self.base_model

    def forward_kwargs(self, adapters: Sequence[str]) -> dict[str, Any]:
        """The keyword arguments that give each row of a `model` forward its adapter (`BASE`: none)."""
        return {"adapter_names": list(adapters)} if self._holds_adapters() else {}

    def _holds_adapters(self) -> bool:
        return self.peft_model is not None and bool(self.peft_model.peft_config)

    def prepare(self, paths: Collection[str]) -> tuple[dict[str, str], dict[str, str]]:
        """Load the adapters of `paths` (at most `capacity`). -> (adapter name by path, error by path)."""
        names: dict[str, str] = {}
        errors: dict[str, str] = {}
        for path in paths:
            problem = adapter_problem(path)
            if problem is not None:
                errors[path] = problem
                continue
            try:
                names[path] = self._load(path)
            except Exception as exc:  # a broken adapter fails its own requests only
                errors[path] = f"could not load LoRA adapter {path!r}: {type(exc).__name__}: {exc}"
        for _, slot in self.lru.overflow(keep=names):
            self._unload(str(slot.handle))
        return names, errors

    def _load(self, path: str) -> str:
        version = adapter_version(path)
        slot = self.lru.touch(path)
        if slot is not None and slot.version == version:
            return str(slot.handle)
        if slot is not None:  # the folder was rewritten: reload it
            self.lru.remove(path)
            self._unload(str(slot.handle))
        name = f"adapter_{self._next_id}"
        self._next_id += 1
        try:
            if self.peft_model is None:
                from peft import PeftModel

                self.peft_model = PeftModel.from_pretrained(
                    self.base_model, path, adapter_name=name, is_trainable=False
                )
                self.peft_model.eval()
            else:
                self.peft_model.load_adapter(path, adapter_name=name, is_trainable=False)
                if self.peft_model.active_adapter not in self.peft_model.peft_config:
                    # the only adapter was deleted (a reload), and peft still names it active: its next
                    # forward would raise KeyError, whatever adapter_names says
                    self.peft_model.set_adapter(name, inference_mode=True)
        except Exception:
            if self.peft_model is not None and name in self.peft_model.peft_config:
                self._unload(name)
            raise
        self.lru.insert(path, AdapterSlot(handle=name, version=version))
        return name

    def _unload(self, name: str) -> None:
        with (
            warnings.catch_warnings()
        ):  # peft warns when the deleted adapter was the active one; harmless here
            warnings.simplefilter("ignore", UserWarning)
            self.peft_model.delete_adapter(name)
