"""The progress bar of `journal-engine bench` (the stores' matrix and --served alike)."""
from __future__ import annotations


class Progress:
    """rich's progress bar on stderr, or nothing (tests, --no-progress)."""

    def __init__(self, enabled: bool, total: int, console) -> None:
        self._bar = None
        if enabled:
            from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeRemainingColumn
            from rich.progress import Progress as RichProgress
            self._bar = RichProgress(TextColumn("{task.description:<44}"), BarColumn(), MofNCompleteColumn(),
                                     TimeRemainingColumn(), console=console, transient=False)
            self._task = self._bar.add_task("bench", total=total)
            self._bar.start()

    def step(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, advance=1, description=description)

    def describe(self, description: str) -> None:
        if self._bar is not None:
            self._bar.update(self._task, description=description)

    def stop(self) -> None:
        if self._bar is not None:
            self._bar.stop()
