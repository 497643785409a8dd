"""A run's task, looked up from its config (`task_of`), and the task a problem comes from
(`by_source`, for the step truth of rollouts).

    data.source = synthetic     the arithmetic chains  (synthetic_labels.ArithmeticTask)
                  last_letter   the last letters        (last_letter_labels.LetterTask)
                  line_chains   the chains, one line a step (line_chains.LineChainTask)
                  jsonl, eurus2 a file of your own      (file_task.FileTask)
                  custom        your own: data.task = "module:factory", factory(data) -> task

A task of your own is one file: a `task.GeneratedTask` subclass (a generated task with step
truth: SFT sets, ProcessBench items and the step probe come with it) or any object with the
`task.Task` protocol, made by `factory(data)` from the run's DataConfig. Its module must import
from the directory the run starts from (or PYTHONPATH).
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from tango_jax.data.file_task import FileTask
from tango_jax.data.last_letter_labels import LetterTask
from tango_jax.data.line_chains import LineChainTask
from tango_jax.data.synthetic_labels import ArithmeticTask
from tango_jax.data.task import DataSource, Task
from tango_jax.schema import ConfigError

BUILT_IN = {
    DataSource.SYNTHETIC: lambda data: ArithmeticTask(data.arith),
    DataSource.LAST_LETTER: lambda data: LetterTask(data.letters),
    DataSource.LINE_CHAINS: lambda data: LineChainTask(data.arith),
    DataSource.JSONL: FileTask,
    DataSource.EURUS2: FileTask,
}
# The tasks whose problems carry a known `Problem.source`: built in, and every custom task
# made so far in this process (`task_of` adds it).
_BY_SOURCE: dict[str, Task] = {
    t.source: t for t in (ArithmeticTask(), LetterTask(), LineChainTask())
}


@functools.cache
def task_of(data: Any) -> Task:
    """The task of a run's `DataConfig` (frozen, so made once per config: the loop, the SFT and
    every step's `reward_kind` ask for it)."""
    if data.source is DataSource.CUSTOM:
        task = load_custom(data.task)(data)
        if task.source:
            _BY_SOURCE[task.source] = task
        return task
    return BUILT_IN[data.source](data)


def by_source(source: str) -> Task | None:
    """The task whose problems have `Problem.source == source`, if known (generated tasks)."""
    return _BY_SOURCE.get(source)


def load_custom(spec: str):
    """The factory `spec` ("module:name") names; ConfigError (one line) if it cannot be used."""
    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ConfigError(
            f"config.data.task ({spec!r}) must be 'module:factory', a function of the run's "
            "DataConfig that returns the task (data/tasks.py)."
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(
            f"config.data.task ({spec!r}): module {module_name!r} does not import ({e}); put "
            "it in the directory the run starts from, or its folder on PYTHONPATH."
        ) from None
    factory = getattr(module, name, None)
    if not callable(factory):
        raise ConfigError(
            f"config.data.task ({spec!r}): module {module_name!r} defines no function {name!r}."
        )
    return factory
