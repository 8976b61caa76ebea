"""unstable-samplers: which environment the next game is played in, and who the learner plays against."""

__version__ = "0.1.0"
