"""A run's problems from its data config: file errors name the flag that fixes them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tango_jax.data.prompts import DataConfig, DataSource, read_problems
from tango_jax.schema import ConfigError


def _jsonl(path: Path, records: list[dict]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return str(path)


def _config(path: str, **fields) -> DataConfig:
    return DataConfig(source=DataSource.JSONL, train_path=path, eval_path=path, **fields)


def test_own_field_names_and_nested_paths_are_read(tmp_path):
    path = _jsonl(tmp_path / "a.jsonl", [{"problem": " 1+1? ", "meta": {"gold": 2}}])
    (problem,) = read_problems(
        _config(path, question_field="problem", answer_field="meta.gold"), "eval"
    )
    assert (problem.question, problem.answer, problem.id) == ("1+1?", "2", "a/0")


@pytest.mark.parametrize(
    "fields, records, message",
    [
        (
            {},
            [{"problem": "q", "answer": "1"}],
            r"config.data.question_field \('question'\): record 0 of .*a.jsonl has no such field "
            r"\(its fields: \['problem', 'answer'\]\); pass the file's own name, e.g. "
            r"--config.data.question_field=problem ",
        ),
        (
            {"question_field": "problem"},
            [{"problem": "q", "final_answer": "1"}, {"problem": "r"}],
            r"config.data.answer_field \('answer'\): record 0 .* "
            r"--config.data.answer_field=final_answer ",
        ),
        (
            {"question_field": "problem", "answer_field": "final_answer"},
            [{"problem": "q", "final_answer": "1"}, {"problem": "r"}],
            r"config.data.answer_field \('final_answer'\): record 1 .*its fields: \['problem'\]\); "
            r"pass the file's own name, e.g. --config.data.answer_field=NAME ",
        ),
    ],
)
def test_a_missing_field_names_the_flag_and_the_file_fields(tmp_path, fields, records, message):
    path = _jsonl(tmp_path / "a.jsonl", records)
    with pytest.raises(ConfigError, match=message):
        read_problems(_config(path, **fields), "train")


def test_a_file_that_is_not_eurus2_says_to_use_jsonl(tmp_path):
    path = _jsonl(tmp_path / "mine.jsonl", [{"question": "q", "answer": "1"}])
    cfg = DataConfig(source=DataSource.EURUS2, train_path=path, eval_path=path)
    with pytest.raises(
        ConfigError, match=r"not in the Eurus-2-RL-Data layout .* --config.data.source=jsonl"
    ):
        read_problems(cfg, "train")
    assert [p.question for p in read_problems(cfg, "eval")] == ["q"]  # held-out: plain fields


def test_a_task_of_ones_own_is_found_from_the_config_or_refused_in_one_line():
    """data.source=custom: data.task's factory makes the task (tests/helpers/toy_task.py); the
    task's problems carry their source, so step truth finds the task from a problem alone."""
    from tango_jax.data import step_truth
    from tango_jax.data.tasks import load_custom, task_of
    from tango_jax.schema import ConfigError

    task = task_of(DataConfig(source=DataSource.CUSTOM, task="toy_task:make"))
    stream, held_out = task.prompts(
        prompts_per_step=2, eval_size=3, seed=1, position=None, fit=None
    )
    problem = stream.next_batch()[0]
    assert problem.source == "toy-count" and len(held_out) == 3
    start, steps = int(problem.question.split()[2].rstrip(".")), problem.question.count("dd 1")
    right = [f"{start + k} + 1 = {start + k + 1}" for k in range(steps)]
    assert step_truth.first_error(problem, right) == -1
    assert step_truth.first_error(problem, ["1 + 1 = 3"]) == 0
    for spec, message in (
        ("toy_task", "must be 'module:factory'"),
        ("no_such_task_module:make", "module 'no_such_task_module' does not import"),
        ("toy_task:nothing", "module 'toy_task' defines no function 'nothing'"),
    ):
        with pytest.raises(ConfigError, match=f"^config.data.task \\({spec!r}\\).*{message}"):
            load_custom(spec)
