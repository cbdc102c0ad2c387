"""A run's time budget (`--minutes`, as cramming's budget): the run times its own steps, then sets its length so
that its learning-rate schedule ends with the time (`Budget`); the loop (`loop.train`) asks it after every step."""
from __future__ import annotations

import time

PACE_STEPS = (10, 60)  # a run on a time budget times its steps between these two of its own, then sets its length
# (after the first PACE_STEPS[0] it sets a first length from them, so that its default warm-up, a tenth of its steps,
# ramps up from the start and not over a tenth of the largest run allowed)
RESERVE = 0.1  # the share of a time budget's rest kept for validations, the final save and a slower stretch


class Budget:
    """A run's time budget (`--minutes`): after PACE_STEPS[1] steps of its own, the last step that the time left
    holds at the pace since step PACE_STEPS[0] (validations included), less RESERVE of it; asked again every tenth of
    the steps left (at least every PACE_STEPS[0]), so that a pace that changes (a busier machine, slower validations)
    moves the end of the schedule with it. At step PACE_STEPS[0] a first, rougher length comes from the steps since
    the first (which compiles and warms caches): `pace` stays None until the measured one."""

    def __init__(self, deadline: float, first_step: int):
        self.deadline, self.first_step = deadline, first_step
        self.pace: float | None = None
        self._first: tuple[float, int] | None = None  # (time, step) after the run's first step
        self._mark: tuple[float, int] | None = None  # and after its PACE_STEPS[0]-th
        self._next = first_step + PACE_STEPS[1]
        self._told = False

    def after(self, step: int) -> int | None:
        """Called after each step; the run's last step when it is time to set it again, else None."""
        own = step - self.first_step
        if own == 1:
            self._first = (time.perf_counter(), step)
        if own == PACE_STEPS[0]:
            self._mark = (time.perf_counter(), step)  # a rough length, never before the measured one is due
            return max(self.first_step + PACE_STEPS[1], self._last(*self._mark, since=self._first))
        if step < self._next or self._mark is None:
            return None
        now = time.perf_counter()
        self.pace = (now - self._mark[0]) / (step - self._mark[1])
        last = self._last(now, step, since=self._mark)
        self._next = step + max(PACE_STEPS[0], (last - step) // 10)
        return last

    def _last(self, now: float, step: int, since: tuple[float, int]) -> int:
        """The last step that the time left holds, less RESERVE of it, at the pace since `since` (a time, a step)."""
        pace = (now - since[0]) / (step - since[1])
        return step + max(1, int((self.deadline - now) * (1 - RESERVE) / pace))

    def worth_telling(self, before: int, after: int) -> bool:
        """Whether a new length is news: the first measured one, or one that moved by more than 2%."""
        if self.pace is None or (self._told and abs(after - before) <= before // 50):
            return False
        self._told = True
        return True

    def spent(self) -> bool:
        return time.perf_counter() >= self.deadline
