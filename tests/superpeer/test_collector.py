"""What a super-peer process freezes out of the cyclic collector's passes
(``superpeer.collector``). Each check runs in a Python process of its own: a freeze is for the
whole process, and the test worker's own objects must stay collected as usual."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from superpeer import collector
from superpeer.collector import CollectorSettings, FullPassFreezer, keep_frozen_after_full_passes
from superpeer.config import ConfigError, config_from_mapping

ROOT = Path(__file__).resolve().parents[2]

WAVES = 12
CYCLES_PER_WAVE = 20_000


def _alone(function: str, *arguments: str) -> Any:
    """``function`` of this module, called in a fresh Python process; what it returned."""
    code = (
        "import json, sys\n"
        "from tests.superpeer import test_collector\n"
        f"print(json.dumps(test_collector.{function}(*sys.argv[1:])))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        cwd=ROOT, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return json.loads(done.stdout.splitlines()[-1])


def grow_in_waves(mode: str) -> dict[str, list[int]]:
    """Objects that live (pairs in a cycle, as a poset's nodes and their children are), made in
    waves as inputs come; between waves, what the daemon's task does: ``freeze_if_due``. For
    every full pass Python starts by itself: the objects it walks (the tracked objects not
    frozen, ``gc.get_objects``) and how many are kept then; the freeze count after each wave."""
    walked: list[int] = []
    kept_at_pass: list[int] = []
    frozen: list[int] = []
    kept: list[list[Any]] = []

    def on_collection(phase: str, info: dict[str, Any]) -> None:
        if phase == "start" and info["generation"] == 2:
            walked.append(len(gc.get_objects()))
            kept_at_pass.append(2 * sum(map(len, kept)))

    long_pass_seconds = {"freezing": 0.0, "long passes only": 1e9}[mode]
    gc.callbacks.append(on_collection)
    with FullPassFreezer(long_pass_seconds=long_pass_seconds) as freezer:
        for wave in range(WAVES):
            cycles = []
            for n in range(CYCLES_PER_WAVE):
                node: list[Any] = [wave, n]
                node.append({"parent": node})
                cycles.append(node)
            kept.append(cycles)
            freezer.freeze_if_due()
            frozen.append(gc.get_freeze_count())
    return {"walked": walked, "kept": kept_at_pass, "frozen": frozen, "freezes": [freezer.freezes]}


def test_what_survived_a_full_pass_is_not_walked_again():
    """With every full pass counted as long, each is followed by a freeze, and no later full
    pass walks more than about two waves' objects, however many are kept. With none counted as
    long (a pass shorter than ``long_full_pass_seconds``), nothing is frozen, and the last full
    pass walks all that is kept."""
    wave = 2 * CYCLES_PER_WAVE
    freezing = _alone("grow_in_waves", "freezing")
    assert freezing["freezes"][0] >= 2
    frozen = freezing["frozen"]
    assert frozen == sorted(frozen) and frozen[-1] >= (WAVES - 2) * wave
    # the first pass walks everything (nothing is frozen before it): the imports' objects, and
    # as many waves as Python's own counters let go by, which shifts with what the imports
    # allocated (two waves once protocol 10's heartbeat field was added: 194,644 walked)
    walked = freezing["walked"]
    assert len(walked) >= 3 and max(walked[1:]) < 3 * wave, freezing

    plain = _alone("grow_in_waves", "long passes only")
    assert plain["freezes"] == [0] and plain["frozen"][-1] == 0
    assert plain["walked"][-1] >= plain["kept"][-1] >= 6 * wave, plain


def freeze_from_the_trio_loop() -> list[int]:
    """The daemon's task: a full pass, then the freeze count as the task sees it in time."""

    async def main() -> list[int]:
        async with trio.open_nursery() as nursery:
            await nursery.start(
                partial(keep_frozen_after_full_passes, check_seconds=0.01, long_pass_seconds=0)
            )
            before = gc.get_freeze_count()
            gc.collect()
            with trio.fail_after(10):
                while gc.get_freeze_count() == before:
                    await trio.sleep(0.01)
            nursery.cancel_scope.cancel()
        return [before, gc.get_freeze_count(), len(gc.callbacks)]

    return trio.run(main)


def test_the_trio_task_freezes_soon_after_a_full_pass_and_unhooks_when_cancelled():
    before, after, hooks = _alone("freeze_from_the_trio_loop")
    assert before == 0 and after > 1_000
    assert hooks == 0


def run_with_settings(young_objects: str, long_full_pass_seconds: str) -> list[int]:
    """``collector.run`` as the process entry point starts it; then a full pass over 10,000 new
    objects kept alive, and a second of (mock) time for the task to look 100 times. The youngest
    pass's threshold once started, the freeze count then, and at the end (a frozen object freed
    since no longer counts)."""
    settings = CollectorSettings(
        young_objects=int(young_objects), long_full_pass_seconds=float(long_full_pass_seconds)
    )

    async def main() -> list[int]:
        async with trio.open_nursery() as nursery:
            await nursery.start(partial(collector.run, settings, check_seconds=0.01))
            threshold, at_start = gc.get_threshold()[0], gc.get_freeze_count()
            kept = [[n] for n in range(10_000)]
            gc.collect()
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        assert len(kept) == 10_000
        return [threshold, at_start, gc.get_freeze_count()]

    return trio.run(main, clock=trio.testing.MockClock(autojump_threshold=0))


def test_run_takes_both_thresholds_from_its_settings():
    """The start-up freeze with the youngest pass at ``young_objects``; a later full pass counts
    as long, and freezes what survived it, by ``long_full_pass_seconds``."""
    threshold, at_start, after = _alone("run_with_settings", "1234", "1e-9")
    assert threshold == 1234 and at_start > 1_000
    assert after > at_start + 9_000, "the full pass counted as long: what it kept is frozen"
    threshold, at_start, after = _alone("run_with_settings", "4321", "1e9")
    assert threshold == 4321 and at_start > 1_000
    assert after <= at_start, "no pass is that long: nothing more frozen"


def test_the_collector_section_of_the_configuration():
    assert config_from_mapping({}).collector == CollectorSettings()
    config = config_from_mapping(
        {"collector": {"young_objects": 2000, "long_full_pass_seconds": 1}}
    )
    assert config.collector == CollectorSettings(young_objects=2000, long_full_pass_seconds=1.0)


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ({"young_objects": 0}, "collector.young_objects must be positive"),
        ({"young_objects": 1.5}, "collector.young_objects must be a int"),
        ({"long_full_pass_seconds": -0.1}, "collector.long_full_pass_seconds must be positive"),
        ({"long_full_pass_seconds": "0.05"}, "collector.long_full_pass_seconds must be a float"),
        ({"long_full_pass_seconds": 10}, "must be less than limits.failure_seconds (10.0)"),
        ({"young": 700}, "unknown key(s) ['young']"),
    ],
)
def test_a_bad_collector_setting_is_refused_with_the_key_at_fault(section, message):
    with pytest.raises(ConfigError) as refused:
        config_from_mapping({"collector": section}, source="sp.toml")
    assert message in str(refused.value) and str(refused.value).startswith("sp.toml")
