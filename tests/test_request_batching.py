"""ActorRequests: the requests games make in one event-loop pass reach the actor in one call."""

import asyncio

from unstable_core.inference.base import GenerationOutput, GenerationRequest
from unstable_core.runtime.actors.request_batching import ActorRequests


class FakeActor:
    """An actor handle whose `generate_many.remote` echoes each prompt's length, failing on demand."""

    def __init__(self, fail_call=False):
        self.calls = []
        self.fail_call = fail_call
        self.generate_many = self

    def remote(self, requests):
        self.calls.append(len(requests))

        async def answer():
            await asyncio.sleep(0)
            if self.fail_call:
                raise ConnectionError("actor died")
            return [
                ValueError("bad prompt")
                if r.prompt_ids == (0,)
                else GenerationOutput("x", [len(r.prompt_ids)], [0.0], "stop")
                for r in requests
            ]

        return answer()


def test_one_pass_of_requests_is_one_call_and_each_game_gets_its_own_answer():
    actor = FakeActor()
    client = ActorRequests(actor)

    async def games():
        first = await asyncio.gather(*(client.generate(GenerationRequest([1] * n)) for n in (1, 2, 3)))
        second = await asyncio.gather(
            client.generate(GenerationRequest([1] * 4)),
            client.generate(GenerationRequest([0])),
            return_exceptions=True,
        )
        return first, second

    first, second = asyncio.run(games())
    assert [o.token_ids for o in first] == [[1], [2], [3]]
    assert second[0].token_ids == [4] and isinstance(second[1], ValueError)
    assert actor.calls == [3, 2] and (client.calls, client.items) == (2, 5)


def test_a_failed_call_fails_every_request_in_it():
    client = ActorRequests(FakeActor(fail_call=True))

    async def games():
        return await asyncio.gather(
            *(client.generate(GenerationRequest([1])) for _ in range(3)), return_exceptions=True
        )

    assert all(isinstance(r, ConnectionError) for r in asyncio.run(games()))


def test_a_cancelled_game_does_not_break_the_others():
    actor = FakeActor()
    client = ActorRequests(actor)

    async def games():
        doomed = asyncio.ensure_future(client.generate(GenerationRequest([1, 1])))
        kept = asyncio.ensure_future(client.generate(GenerationRequest([1])))
        await asyncio.sleep(0)
        doomed.cancel()
        return await kept

    assert asyncio.run(games()).token_ids == [1]
    assert actor.calls == [1]  # cancelled before the pass ended: its request was never sent


def test_games_starting_together_share_one_league_snapshot():
    from unstable_core.inference.base import SamplingParams
    from unstable_core.runtime.actors.collector import Collector

    class FakeLeague:
        calls = 0

        def __init__(self):
            self.to_dict = self

        def remote(self):
            FakeLeague.calls += 1
            n = FakeLeague.calls

            async def state():
                await asyncio.sleep(0)
                return {"fetch": n}

            return state()

    collector = Collector(
        engines={},
        tokenizers={},
        buffer=None,
        league=FakeLeague(),
        recorder=None,
        scheduler=None,
        params=SamplingParams(),
    )

    async def starts():
        together = await asyncio.gather(*(collector._league_state() for _ in range(5)))
        later = await collector._league_state()  # the first fetch is done: a new one
        return together, later

    together, later = asyncio.run(starts())
    assert together == [{"fetch": 1}] * 5 and later == {"fetch": 2} and FakeLeague.calls == 2
