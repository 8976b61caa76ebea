"""LeagueActor: models are saved at once, rating updates at most every save_every_s, all on flush()."""

import json

from unstable_core.runtime.actors.league import LeagueActor


def games_in(path) -> int:
    return sum(m["games"] for m in json.loads(path.read_text())["models"])


def test_rating_updates_are_saved_throttled_and_flushed(tmp_path):
    path = tmp_path / "league.json"
    host = LeagueActor(path, save_every_s=3600)
    host.add_checkpoint("ckpt-0", None, 0, inherit=False)
    host.add_fixed("base")
    assert {m["uid"] for m in json.loads(path.read_text())["models"]} == {"ckpt-0", "base"}
    host.update_ratings(["ckpt-0", "base"], [1.0, -1.0], "E")
    assert games_in(path) == 0  # within the hour: not yet written
    host.flush()
    assert games_in(path) == 2
    assert LeagueActor(path).to_dict() == host.to_dict()  # a restarted host reads the same league


def test_every_update_is_saved_when_the_interval_is_zero(tmp_path):
    path = tmp_path / "league.json"
    host = LeagueActor(path, save_every_s=0)
    host.add_checkpoint("ckpt-0", None, 0, inherit=False)
    host.add_fixed("base")
    host.update_ratings(["ckpt-0", "base"], [0.0, 0.0], "E")
    assert games_in(path) == 2
