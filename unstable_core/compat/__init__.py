"""Compatibility with the names of other code: `unstable_baselines` (UnstableBaselines v0.2's `build()`
names and values, its vllm_config, and the settings that older run directories still hold), which
`unstable_core.config` reads."""
