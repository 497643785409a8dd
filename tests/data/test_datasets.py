"""tango_jax.data.datasets: loaders on small files written here, and the resumable stream."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tango_jax.data import datasets as D
from tango_jax.data.datasets import Problem, PromptStream, StreamPosition


def write_jsonl(path, records):
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def write_parquet(path, records):
    pq.write_table(pa.Table.from_pylist(records), path)
    return path


# ----------------------------------------------------------------------------------------------
# Loaders.


def test_jsonl_with_custom_and_nested_fields(tmp_path):
    path = write_jsonl(
        tmp_path / "set.jsonl",
        [{"q": " What is 1+1? ", "meta": {"gold": 2}}, {"q": "Name x.", "meta": {"gold": "x"}}],
    )
    problems = D.load_problems(path, D.Fields("q", "meta.gold"))
    assert problems == [
        Problem("What is 1+1?", "2", "set", "set/0"),
        Problem("Name x.", "x", "set", "set/1"),
    ]


def test_parquet_json_array_and_globs(tmp_path):
    rows = [{"question": f"q{i}", "answer": str(i)} for i in range(5)]
    write_parquet(tmp_path / "part-0.parquet", rows[:3])
    write_parquet(tmp_path / "part-1.parquet", rows[3:])
    problems = D.load_problems(tmp_path / "part-*.parquet", source="parts")
    assert [(p.question, p.answer, p.id) for p in problems] == [
        (f"q{i}", str(i), f"parts/{i}") for i in range(5)
    ]
    (tmp_path / "array.json").write_text(json.dumps(rows))
    assert [p.answer for p in D.load_problems(tmp_path / "array.json")] == list("01234")


def test_verl_preprocessed_parquet(tmp_path):
    """The official scripts' output layout: question in extra_info, answer in reward_model."""
    row = {
        "data_source": "MATH500",
        "prompt": [{"role": "user", "content": "<long template> ... User: Find y."}],
        "reward_model": {"style": "rule", "ground_truth": "\\frac{1}{2}"},
        "extra_info": {"index": 0, "question": "Find y."},
    }
    path = write_parquet(tmp_path / "test.parquet", [row])
    assert D.load_problems(path, D.VERL_FIELDS, source="MATH500") == [
        Problem("Find y.", "\\frac{1}{2}", "MATH500", "MATH500/0")
    ]


def eurus_row(ability, question, answer):
    return {
        "data_source": "numina_olympiads",
        "prompt": [
            {"role": "system", "content": "When tackling complex reasoning tasks, you ..."},
            {"role": "user", "content": question + D.EURUS2_SUFFIX},
        ],
        "ability": ability,
        "reward_model": {"style": "rule", "ground_truth": answer},
        "extra_info": {"split": "dummy", "index": 0},
    }


def test_eurus2_layout(tmp_path):
    rows = [
        eurus_row("math", "Compute $2+3$.", "5"),
        eurus_row("code", "Write a function.", "[]"),
        eurus_row("math", "  Solve $x^2=4$ for $x>0$.\n", "2"),
    ]
    path = write_parquet(tmp_path / "train.parquet", rows)
    assert D.load_eurus2(path) == [
        Problem("Compute $2+3$.", "5", "Eurus-2-RL-Data", "Eurus-2-RL-Data/0"),
        Problem("Solve $x^2=4$ for $x>0$.", "2", "Eurus-2-RL-Data", "Eurus-2-RL-Data/2"),
    ]


@pytest.mark.parametrize("name", sorted(D.BENCHMARKS))
def test_each_benchmark_reads_its_own_field_names(tmp_path, name):
    fields = D.BENCHMARKS[name].fields
    gold = 204 if name == "AIME2024" else "\\frac{3}{4}"  # AIME_2024 stores ints
    records = [{fields.question: "A problem.", fields.answer: gold, "solution": "..."}]
    path = write_parquet(tmp_path / "data.parquet", records)
    assert D.load_benchmark(name, path) == [Problem("A problem.", str(gold), name, f"{name}/0")]
    assert D.load_benchmark(name, write_jsonl(tmp_path / "data.jsonl", records))[0].answer == str(
        gold
    )


def test_answers_are_text():
    assert D._answer_text(7.0, "x") == "7" and D._answer_text(["1", 2], "x") == "1, 2"
    with pytest.raises(ValueError, match="answer"):
        D._answer_text(None, "x")


# ----------------------------------------------------------------------------------------------
# Errors name the path, the field and the fix.


def test_missing_file_names_the_path_and_how_to_get_it(tmp_path):
    missing = tmp_path / "nowhere" / "train.parquet"
    with pytest.raises(FileNotFoundError) as e:
        D.load_eurus2(missing)
    assert str(missing) in str(e.value) and "huggingface-cli download" in str(e.value)
    assert D.EURUS2_HUB_ID in str(e.value)
    with pytest.raises(FileNotFoundError, match="HuggingFaceH4/MATH-500"):
        D.load_benchmark("MATH500", tmp_path / "*.jsonl")  # a glob that matches nothing


def test_missing_field_names_the_file_and_the_field(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", [{"question": "q", "answer": "1"}, {"question": "r"}])
    with pytest.raises(ValueError, match=r"a\.jsonl.*'answer'.*Fields\("):
        D.load_problems(path)
    parquet = write_parquet(tmp_path / "b.parquet", [{"problem": "q", "answer": "1"}])
    with pytest.raises(ValueError, match=r"b\.parquet.*'question'"):
        D.load_problems(parquet)
    with pytest.raises(ValueError, match="prompt.5.content"):
        D.load_problems(
            write_parquet(tmp_path / "c.parquet", [eurus_row("math", "q", "1")]),
            D.Fields("prompt.5.content", "reward_model.ground_truth"),
        )


def test_bad_records_and_names(tmp_path):
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "answer": "1"}\nnot json\n')
    with pytest.raises(ValueError, match=r"bad\.jsonl:2"):
        D.load_problems(tmp_path / "bad.jsonl")
    empty = write_jsonl(tmp_path / "empty.jsonl", [{"question": " ", "answer": "1"}])
    with pytest.raises(ValueError, match="record 0: question"):
        D.load_problems(empty)
    (tmp_path / "x.csv").write_text("question,answer\n")
    with pytest.raises(ValueError, match="unknown data format"):
        D.load_problems(tmp_path / "x.csv")
    with pytest.raises(ValueError, match="known:"):
        D.load_benchmark("GSM8K", tmp_path / "x.csv")


# ----------------------------------------------------------------------------------------------
# PromptStream.


def problems(n):
    return [Problem(f"q{i}", str(i), "toy", f"toy/{i}") for i in range(n)]


def ids(batch):
    return [int(p.answer) for p in batch]


def test_epochs_are_shuffled_permutations_with_drop_last():
    stream = PromptStream(problems(10), 3, seed=1)
    epochs = [[i for _ in range(3) for i in ids(stream.next_batch())] for _ in range(3)]
    assert stream.position == StreamPosition(seed=1, epoch=3, index=0)
    for epoch in epochs:
        assert len(set(epoch)) == 9  # 3 full batches; one problem sits out each epoch
    assert epochs[0] != epochs[1] and epochs[0] != sorted(epochs[0])
    other = PromptStream(problems(10), 3, seed=2)
    assert [i for _ in range(3) for i in ids(other.next_batch())] != epochs[0]


def test_the_order_is_pinned():
    """The order depends only on (seed, epoch, N): NumPy's PCG64 raw stream is fixed."""
    order = PromptStream(problems(8), 2, seed=1).order(0)
    assert order.tolist() == PINNED_ORDER
    assert sorted(order.tolist()) == list(range(8))


PINNED_ORDER = [2, 4, 7, 5, 0, 6, 3, 1]


def test_resume_from_a_saved_position_reproduces_the_order():
    stream = PromptStream(problems(11), 4, seed=5)
    for _ in range(3):
        stream.next_batch()
    saved = dataclasses.asdict(stream.position)
    assert saved == {"seed": 5, "epoch": 1, "index": 1}
    expected = [ids(stream.next_batch()) for _ in range(5)]
    resumed = PromptStream(problems(11), 4, seed=5, position=StreamPosition(**saved))
    assert [ids(resumed.next_batch()) for _ in range(5)] == expected
    assert isinstance(stream.order(1), np.ndarray)


def test_stream_errors():
    with pytest.raises(ValueError, match="at most the number of problems"):
        PromptStream(problems(3), 4, seed=0)
    with pytest.raises(ValueError, match="seed 0"):
        PromptStream(problems(8), 2, seed=0, position=StreamPosition(seed=1))
    with pytest.raises(ValueError, match=r"position.index \(4\).*batch size change"):
        PromptStream(problems(8), 2, seed=0, position=StreamPosition(0, 0, 4))
