"""`unstable eval`: models against fixed opponents (random, base, checkpoints, other models, API models),
with win rates and their 95% intervals; the games are played by the runtime a run uses."""
