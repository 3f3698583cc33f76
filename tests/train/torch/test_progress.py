"""The torch backend's step clock (crosstune.train.torch.progress.StepClock) on a hand-driven clock: what it keeps out
of the step times, and what it records as compile_time_s."""

from __future__ import annotations

from crosstune.train.torch.progress import StepClock


def drive(steps: list[tuple[float, float, bool]], warm_up: bool = True) -> tuple[list[tuple[int, float]], StepClock]:
    """(seconds, checkpoint-save seconds inside it, logged) per step, in order; returns the rows written (step,
    step time) and the clock."""
    now, saved = [0.0], [0.0]
    clock = StepClock(lambda: saved[0], warm_up, now=lambda: now[0])
    rows: list[tuple[int, float]] = []
    for step, (seconds, save, logged) in enumerate(steps, 1):
        now[0] += seconds
        saved[0] += save
        clock.tick()
        if logged:
            rows += clock.measure(step)
        elif clock.times_first_step:
            clock.measure(None)
    return rows + clock.finish(), clock


def test_a_first_step_logged_alone_waits_for_the_next_one():
    """A 5 s first step, then 1 s steps (step 2 holds a 2 s checkpoint save): its 4 s over the next step are its
    warm-up, kept out of its row; the save is kept out of step 2's."""
    rows, clock = drive([(5.0, 0.0, True), (3.0, 2.0, True), (1.0, 0.0, True)])
    assert rows == [(1, 1.0), (2, 1.0), (3, 1.0)] and clock.warmup_s == 4.0


def test_a_first_step_inside_a_row_is_timed_alone():
    """log_every 3: the first row covers steps 1-3; step 1 (5 s) is timed alone, steps 2-3 take 1 s each, so its
    warm-up is 4 s and the row's mean over its 3 steps is 1 s; the next row is plain."""
    rows, clock = drive(
        [(5.0, 0, False), (1.0, 0, False), (1.0, 0, True), (2.0, 0, False), (2.0, 0, False), (2.0, 0, True)]
    )
    assert rows == [(3, 1.0), (6, 2.0)] and clock.warmup_s == 4.0


def test_a_first_step_faster_than_the_next_has_no_warm_up():
    rows, clock = drive([(1.0, 0.0, True), (1.5, 0.0, True)])
    assert rows == [(1, 1.0), (2, 1.5)] and clock.warmup_s == 0.0


def test_a_one_step_run_keeps_its_time_and_measures_no_warm_up():
    rows, clock = drive([(5.0, 0.0, True)])
    assert rows == [(1, 5.0)] and clock.warmup_s is None


def test_compiled_layers_time_every_step_alike():
    """warm_up off (torch.compile's own seconds are the compile time, kept out through `excluded`): no step alone."""
    rows, clock = drive([(5.0, 4.0, True), (1.0, 0.0, True)], warm_up=False)
    assert rows == [(1, 1.0), (2, 1.0)] and clock.warmup_s is None
