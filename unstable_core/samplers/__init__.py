"""The samplers a game scheduler asks: which environment, and which opponent. Their base classes are
`base`'s, which plugins such as `unstable-samplers` subclass."""

from unstable_core.samplers.base import CURRENT, BaseEnvSampler, BaseModelSampler, check_kind

__all__ = ["CURRENT", "BaseEnvSampler", "BaseModelSampler", "check_kind"]
