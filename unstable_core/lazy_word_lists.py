"""TextArena's word lists, executed when a word game first reads them rather than at `import textarena`.

`import textarena` runs `textarena.envs.utils.word_lists`, which imports nltk (and with it scipy.stats):
1.5 of textarena's 1.7 CPU-seconds, paid by every driver and collector, although only the word games
(Hangman, Wordle, SpellingBee, ...) use the lists. `install()` hands that one module to Python's
`importlib.util.LazyLoader`: the module is created at once and executed on its first attribute access, so
a word game behaves as before and nothing else pays for nltk.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec, PathFinder
from types import ModuleType

WORD_LISTS = "textarena.envs.utils.word_lists"


class _LazyWordLists(importlib.abc.MetaPathFinder):
    """Finds `WORD_LISTS` as the path finder does, with its loader made lazy; no other module."""

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if fullname != WORD_LISTS:
            return None
        spec = PathFinder.find_spec(fullname, path)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


def install() -> None:
    """Make the word lists lazy for this process (once; a no-op once they are imported)."""
    if WORD_LISTS in sys.modules or any(isinstance(f, _LazyWordLists) for f in sys.meta_path):
        return
    sys.meta_path.insert(0, _LazyWordLists())
