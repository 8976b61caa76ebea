"""The end of a run: flush the recorder's and the league's files, record the `stopped` event, then write
the summary (pictures, the learning verdict, summary.json). Each part goes on when another fails: the
stop of a broken run must still save what it can and say why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unstable_core.errors import describe
from unstable_core.io import atomic_write_json
from unstable_core.runtime.graph import ActorGraph
from unstable_core.runtime.recovery.resume import record_event
from unstable_core.runtime.run_dir import CHECKPOINTS, SUMMARY


def close_files(
    graph: ActorGraph, run_dir: Path, index_base: int, restarts: int, timeout_s: float = 30.0
) -> dict[str, Any]:
    """Flush the recorder's and the league's files, each on its own with a time limit (a dead or hung
    actor must not keep the other's data from the disk); then their last numbers, as far as they
    answer (`stop_errors` says which did not), and the `stopped` event in metrics.jsonl."""
    import ray

    errors: list[str] = []

    def ask(name: str, actor: Any, method: str) -> Any:
        try:
            return ray.get(getattr(actor, method).remote(), timeout=timeout_s)
        except Exception as exc:  # keep going: shutting down matters more than the last numbers
            errors.append(f"{name}.{method}: {describe(exc)}")
            return None

    recorder, league = graph.recorder, graph.league
    ask("recorder", recorder, "close")
    ask("league", league, "flush")
    snap = ask("recorder", recorder, "snapshot") or {}
    models = ask("league", league, "to_dict")
    if models is not None:
        snap["league"] = models
    collected = [ask(f"collector-{i}", c, "stats") for i, c in enumerate(graph.collectors)]
    try:
        record_stop(run_dir, index_base, restarts, snap.get("counts"), collected)
    except OSError as exc:  # a run folder that cannot be written: the stop goes on, the cause is shown
        errors.append(f"metrics.jsonl: {describe(exc)}")
    if errors:
        snap["stop_errors"] = errors
    return snap


def record_stop(
    run_dir: Path,
    index_base: int,
    restarts: int,
    counts: dict[str, int] | None,
    collected: list[dict[str, int] | None],
) -> None:
    """This process's games and restarts, as a `stopped` event of metrics.jsonl: games each collector
    had the recorder record (None: it did not answer), games the recorder recorded, games replayed and
    inference actor restarts seen. Games numbered from `index_base` on are this process's, so a
    check can compare what was played with what games.jsonl holds (benchmarks/faults.py)."""
    record_event(
        run_dir,
        "stopped",
        index_base=index_base,
        games_sent=[None if c is None else c["recorded"] for c in collected],
        games_recorded=None if counts is None else counts.get("train_games", 0) + counts.get("eval_games", 0),
        inference_retries=None if counts is None else counts.get("inference_retries", 0),
        inference_restarts=restarts,
    )


def write_summary(run_dir: Path, summary: dict[str, Any], learn: bool) -> dict[str, Any]:
    """Add the pictures, the probes (base vs last), (a training run) the learning verdict and report.html to
    `summary`, and save it as summary.json; a part that fails is named in the summary instead of losing it."""
    from unstable_core.report.plots import plot_run

    try:
        summary["plots"] = [str(p) for p in plot_run(run_dir)]
    except Exception as exc:  # a picture is not worth losing the summary
        summary["plots_error"] = str(exc)
    from unstable_core.report.run_probes import probe_changes, probe_records

    try:
        if probes := probe_records(
            run_dir
        ):  # --eval-probe: each figure, the base model vs the last checkpoint
            summary["probes"] = probe_changes(probes)
    except Exception as exc:  # as the pictures: not worth losing the summary
        summary["probes_error"] = describe(exc)
    if learn:  # what was learned, and its test: the sentence the summary opens with
        from unstable_core.report.learning_verdict import run_verdict

        try:
            summary["learning"] = run_verdict(run_dir).to_dict()
        except Exception as exc:  # as the pictures: not worth losing the summary
            summary["learning_error"] = describe(exc)
    try:
        from unstable_core.learners.checkpoint import disk_bytes

        summary["disk"] = {
            "bytes": disk_bytes(run_dir),
            "checkpoints_bytes": disk_bytes(run_dir / CHECKPOINTS),
        }
    except OSError as exc:  # as the pictures: not worth losing the summary
        summary["disk_error"] = str(exc)
    try:  # report.html, from the summary as it stands (the run's lock is still held)
        from unstable_core.report.html.page import write_report

        summary["report"] = str(write_report(run_dir, summary=summary))
    except Exception as exc:  # as the pictures: not worth losing the summary
        summary["report_error"] = describe(exc)
    try:
        atomic_write_json(run_dir / SUMMARY, summary)
    except OSError as exc:  # the summary is still returned (and printed)
        summary["summary_error"] = f"summary.json not written: {exc}"
    return summary
