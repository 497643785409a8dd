"""tango_jax.data.benchmarks: every evaluation set from fixture files in its published schema."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import datasets
import pytest
from benchmark_fixtures import PROCESS_BENCH, write_all

from tango_jax.data import benchmarks as B
from tango_jax.text import formats, templates
from tango_jax.text.answer_check import RewardKind


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return write_all(tmp_path_factory.mktemp("bench"))


def _load(name, data_dir):
    return [(p.question, p.answer, p.id) for p in B.load_benchmark_dir(name, data_dir).items]


def test_math_benchmarks_read_their_published_columns(data_dir):
    assert _load("MATH500", data_dir) == [
        ("Compute $1+1$.", "2", "MATH500/0"),
        ("What is $\\frac{1}{2}+\\frac{1}{2}$?", "1", "MATH500/1"),
    ]
    assert [a for _, a, _ in _load("AIME2024", data_dir)] == ["204", "25"]  # ints as written
    assert _load("AIME2025", data_dir) == [("Find the sum $70 + 0$.", "70", "AIME2025/0")]
    assert [a for _, a, _ in _load("AMC2023", data_dir)] == ["27", "1.5"]  # floats
    assert _load("OlympiadBench", data_dir)[0][1] == "\\sqrt{2}"
    for name in B.MATH_BENCHMARKS:
        assert B.BENCHMARKS[name].kind is RewardKind.MATH


def test_bgqa_suffix_and_labels_test_split_only(data_dir):
    rows = _load("BGQA", data_dir)
    assert [a for _, a, _ in rows] == ["True", "False", "Uncertain"]
    assert rows[0][0] == (
        "A set of players are playing. Does the cat win? Answer with True, False, or Uncertain."
    )
    assert not any("TRAIN ROW" in q for q, _, _ in rows)  # the train split is not read
    assert B.BENCHMARKS["BGQA"].kind is RewardKind.BOXED


def test_cruxeval_prompt_holds_code_and_input(data_dir):
    (q, a, _), (_, a2, _) = _load("CRUXEval", data_dir)
    assert q.startswith("Given the following code:\ndef f(x):\n    return x * 2\n\nand the")
    assert "\n3\n\nPlease analyze the code carefully" in q
    assert q.endswith("determine the final output.")
    assert (a, a2) == ("6", "'ba'")
    assert B.BENCHMARKS["CRUXEval"].kind is RewardKind.CRUXEVAL


def test_strategyqa_facts_then_instruction_then_question(data_dir):
    rows = _load("StrategyQA", data_dir)
    assert [a for _, a, _ in rows] == ["True", "False"]  # train file only, bools as True/False
    assert rows[0][0] == (
        "Hydrogen has atomic number 1.\n1 is less than 2.\n"
        "Based on the facts above, answer the following question. Your final answer should be "
        "either True or False.\nIs hydrogen's atomic number below 2?"
    )


def test_strategyqa_string_facts_as_official_jsonl(tmp_path):
    row = {"question": "Q?", "answer": False, "facts": "Fact one. "}
    (tmp_path / "StrategyQA").mkdir()
    (tmp_path / "StrategyQA" / "strategyqa_train.jsonl").write_text(json.dumps(row) + "\n")
    (problem,) = B.load_benchmark_dir("StrategyQA", tmp_path).items
    assert problem.question == "Fact one. " + B.STRATEGYQA_INSTRUCTION + "Q?"
    assert problem.answer == "False"


def test_tablebench_filters_qtypes_and_reads_only_the_main_file(data_dir):
    rows = _load("TableBench", data_dir)
    assert [(a, i) for _, a, i in rows] == [("3", "TableBench/0"), ("Yes", "TableBench/2")]
    q = rows[0][0]
    assert q.startswith('Read the table below in JSON format:\n{"columns": ["name", "n"]')
    assert q.endswith("corresponding content in the table.\nWhat is the total of n?")


def test_process_bench_items(data_dir):
    loaded = B.load_process_bench(data_dir, "gsm8k")
    first, second = loaded.items
    assert (first.id, second.id) == ("ProcessBench/gsm8k/0", "ProcessBench/gsm8k/1")
    assert (first.item.label, first.item.num_steps) == (1, 3)
    assert second.item.label == -1
    assert first.item.question == PROCESS_BENCH["gsm8k"][0]["problem"]
    steps = formats.split_steps(first.item.solution)
    assert [s.text for s in steps] == PROCESS_BENCH["gsm8k"][0]["steps"]
    assert first.item.solution.endswith("<answer>\\boxed{6}</answer>")
    # the verifier prompt states K = 3
    prompt = templates.render_verifier_prompt(first.item.question, first.item.solution)
    assert "has 3 steps inside <step> tags" in prompt
    for split in B.PROCESS_BENCH_SPLITS:  # "math" does not pick up omnimath.json
        assert len(B.load_process_bench(data_dir, split).items) == len(PROCESS_BENCH[split])


def test_process_bench_parquet_shards(tmp_path):
    """The hub's parquet conversion: data/<split>-*.parquet."""
    root = tmp_path / "ProcessBench" / "data"
    root.mkdir(parents=True)
    for split in ("math", "omnimath"):
        datasets.Dataset.from_list(PROCESS_BENCH[split]).to_parquet(
            str(root / f"{split}-00000-of-00001.parquet")
        )
    (item,) = B.load_process_bench(tmp_path, "math").items
    assert item.item.label == 0 and item.id == "ProcessBench/math/0"


def test_save_to_disk_and_arrow_files(tmp_path):
    rows = [{"problem": "P?", "answer": "7"}]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "MATH500"))
    assert _load("MATH500", tmp_path) == [("P?", "7", "MATH500/0")]
    arrow_dir = tmp_path / "arrow"
    datasets.Dataset.from_list(rows).save_to_disk(str(arrow_dir))
    (tmp_path / "AIME2025").mkdir()
    (arrow_dir / "data-00000-of-00001.arrow").rename(tmp_path / "AIME2025" / "test.arrow")
    assert _load("AIME2025", tmp_path) == [("P?", "7", "AIME2025/0")]


def test_missing_dataset_names_the_path_and_the_download(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        B.load_benchmark_dir("CRUXEval", tmp_path)
    msg = str(e.value)
    assert str(tmp_path / "CRUXEval") in msg
    assert "huggingface-cli download --repo-type dataset cruxeval-org/cruxeval" in msg
    (tmp_path / "ProcessBench").mkdir()
    (tmp_path / "ProcessBench" / "README.md").write_text("no data")
    with pytest.raises(FileNotFoundError, match="Qwen/ProcessBench"):
        B.load_process_bench(tmp_path, "math")


def test_malformed_rows_reported_with_file_and_index_skipped_or_fatal(tmp_path):
    path = tmp_path / "MATH500" / "test.jsonl"
    path.parent.mkdir()
    rows = [
        {"problem": "ok?", "answer": "1"},
        {"problem": "", "answer": "2"},
        {"problem": "no answer", "answer": None},
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(B.RowError, match=rf"{path} row 1: field 'problem'.*--on_bad_row=skip"):
        B.load_benchmark_dir("MATH500", tmp_path)
    loaded = B.load_benchmark_dir("MATH500", tmp_path, on_bad_row=B.BadRows.SKIP)
    assert [p.id for p in loaded.items] == ["MATH500/0"]
    assert [s.split(":")[0] for s in loaded.skipped] == [f"{path} row 1", f"{path} row 2"]

    pb = tmp_path / "ProcessBench" / "gsm8k.json"
    pb.parent.mkdir()
    good = PROCESS_BENCH["gsm8k"][0]
    pb.write_text(json.dumps([good, dict(good, label=3), dict(good, steps=[])]))
    loaded = B.load_process_bench(tmp_path, "gsm8k", on_bad_row=B.BadRows.SKIP)
    assert len(loaded.items) == 1
    assert "row 1: field 'label' must be -1 or a step index below 3, got 3" in loaded.skipped[0]
    assert "row 2: field 'steps'" in loaded.skipped[1]


def test_unreadable_file_is_an_error_naming_it(tmp_path):
    path = tmp_path / "AIME2025" / "x.parquet"
    path.parent.mkdir()
    path.write_text("not parquet")
    with pytest.raises(ValueError, match=f"{path}: cannot be read as parquet"):
        B.load_benchmark_dir("AIME2025", tmp_path)


def test_selections():
    assert B.benchmark_names("all") == list(B.BENCHMARKS)
    assert B.benchmark_names("math,BGQA") == [*B.MATH_BENCHMARKS, "BGQA"]
    assert B.benchmark_names("none") == []
    with pytest.raises(ValueError, match="unknown benchmark 'MATH'"):
        B.benchmark_names("MATH")
    assert B.process_bench_splits("all") == list(B.PROCESS_BENCH_SPLITS)
    assert B.process_bench_splits("math,gsm8k") == ["math", "gsm8k"]
    with pytest.raises(ValueError, match="unknown ProcessBench split 'omni'"):
        B.process_bench_splits("omni")


def _cache_entry(hub: Path, hub_id: str, revision: str, files: dict[str, str]) -> Path:
    """A dataset in a Hugging Face hub cache, as huggingface_hub lays it out: the contents in
    blobs/<hash>, snapshots/<revision>/<path> symlinks to them."""
    repo = hub / ("datasets--" + hub_id.replace("/", "--"))
    for rel, text in files.items():
        blob = repo / "blobs" / hashlib.sha256(text.encode()).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_text(text)
        link = repo / "snapshots" / revision / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(os.path.relpath(blob, link.parent))
    return repo


def test_a_hugging_face_hub_cache_as_data_dir(tmp_path, data_dir):
    """`--data_dir ~/.cache/huggingface/hub` (or its parent, HF_HOME): the snapshot that
    refs/main names is read, an older one is not; ProcessBench too."""
    hub = tmp_path / "hf_home" / "hub"
    rows = [{"problem": "Compute $2+2$.", "answer": "4"}]
    old = [{"problem": "OLD REVISION", "answer": "0"}]
    as_jsonl = lambda rs: "".join(json.dumps(r) + "\n" for r in rs)
    repo = _cache_entry(hub, "HuggingFaceH4/MATH-500", "aaa", {"test.jsonl": as_jsonl(rows)})
    _cache_entry(hub, "HuggingFaceH4/MATH-500", "bbb", {"test.jsonl": as_jsonl(old)})
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("aaa")
    split = json.dumps(PROCESS_BENCH["gsm8k"])
    _cache_entry(hub, "Qwen/ProcessBench", "ccc", {"gsm8k.json": split})
    for data_dir_ in (hub, hub.parent):
        assert _load("MATH500", data_dir_) == [("Compute $2+2$.", "4", "MATH500/0")]
        items = B.load_process_bench(data_dir_, "gsm8k").items
        assert [r.item.label for r in items] == [r["label"] for r in PROCESS_BENCH["gsm8k"]]
    with pytest.raises(FileNotFoundError, match="or point --data_dir at a Hugging Face hub cache"):
        B.load_benchmark_dir("AIME2024", hub)
