"""Small benchmark files in each source's published schema (the hub repository's layout and
column names), written by the tests under a data directory as `huggingface-cli download
--local-dir DATA_DIR/<name>` would leave them."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq


def _jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _parquet(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows), path)


# name -> rows as published; the expected (question start, answer) of row 0 is in the tests.
MATH500 = [
    {
        "problem": "Compute $1+1$.",
        "solution": "It is $2$.",
        "answer": "2",
        "subject": "Algebra",
        "level": 1,
        "unique_id": "test/algebra/1.json",
    },
    {
        "problem": "What is $\\frac{1}{2}+\\frac{1}{2}$?",
        "solution": "$1$",
        "answer": "1",
        "subject": "Prealgebra",
        "level": 1,
        "unique_id": "test/prealgebra/2.json",
    },
]
AIME2024 = [  # Maxwell-Jia/AIME_2024: integer answers
    {"ID": "2024-I-1", "Problem": "Find $n$ if $n = 204$.", "Solution": "...", "Answer": 204},
    {"ID": "2024-I-2", "Problem": "Find $m$ if $m = 25$.", "Solution": "...", "Answer": 25},
]
AIME2025 = [
    {"id": 0, "problem": "Find the sum $70 + 0$.", "answer": "70", "url": "u", "year": 2025},
]
AMC2023 = [  # math-ai/amc23: float answers
    {"id": 0, "question": "How many? The answer is $27$.", "answer": 27.0, "url": "u"},
    {"id": 1, "question": "What is $\\frac{3}{2}$?", "answer": 1.5, "url": "u"},
]
OLYMPIADBENCH = [
    {"id": 1606, "question": "Find $x$ with $x=\\sqrt{2}$.", "answer": "\\sqrt{2}"},
]
BGQA = [  # tasksource/Boardgame-QA
    {"example": "A set of players are playing. Does the cat win?", "label": "proved", "proof": ""},
    {"example": "Does the dog lose?", "label": "disproved", "proof": ""},
    {"example": "Does the bird sing?", "label": "unknown", "proof": ""},
]
CRUXEVAL = [  # cruxeval-org/cruxeval
    {
        "code": "def f(x):\n    return x * 2",
        "input": "3",
        "output": "6",
        "id": "sample_0",
    },
    {"code": "def f(s):\n    return s[::-1]", "input": "'ab'", "output": "'ba'", "id": "sample_1"},
]
STRATEGYQA = [  # voidful/StrategyQA strategyqa_train.json: facts as a list, answer a bool
    {
        "qid": "a1",
        "term": "Hydrogen",
        "description": "element",
        "question": "Is hydrogen's atomic number below 2?",
        "answer": True,
        "facts": ["Hydrogen has atomic number 1.", "1 is less than 2."],
        "decomposition": ["What is the atomic number?", "Is it below 2?"],
    },
    {
        "qid": "a2",
        "term": "Sun",
        "description": "star",
        "question": "Is the sun cold?",
        "answer": False,
        "facts": ["The sun is hot."],
        "decomposition": ["Is the sun cold?"],
    },
]
TABLEBENCH = [  # Multilingual-Multimodal-NLP/TableBench TableBench.jsonl: the table as JSON text
    {
        "id": "t0",
        "qtype": "NumericalReasoning",
        "qsubtype": "Counting",
        "instruction": "...",
        "instruction_type": "DP",
        "table": json.dumps({"columns": ["name", "n"], "data": [["a", 1], ["b", 2]]}),
        "question": "What is the total of n?",
        "answer": "3",
        "answer_formatter": "...",
    },
    {
        "id": "t1",
        "qtype": "Visualization",  # not evaluated (official filter)
        "qsubtype": "ChartGeneration",
        "instruction": "...",
        "instruction_type": "PoT",
        "table": json.dumps({"columns": ["x"], "data": [[1]]}),
        "question": "Draw it.",
        "answer": "y_references = [[1]]",
        "answer_formatter": "...",
    },
    {
        "id": "t2",
        "qtype": "FactChecking",
        "qsubtype": "MatchBased",
        "instruction": "...",
        "instruction_type": "DP",
        "table": json.dumps({"columns": ["name"], "data": [["a"]]}),
        "question": "Is a in the table?",
        "answer": "Yes",
        "answer_formatter": "...",
    },
]
PROCESS_BENCH = {  # Qwen/ProcessBench: <split>.json arrays
    "gsm8k": [
        {
            "id": "gsm8k-0",
            "generator": "Qwen2-7B-Instruct",
            "problem": "Tom has 2 apples and buys 3. How many?",
            "steps": ["He starts with 2.", "2 + 3 = 6.", "So the answer is \\boxed{6}."],
            "final_answer_correct": False,
            "label": 1,
        },
        {
            "id": "gsm8k-1",
            "generator": "Llama-3.1-8B-Instruct",
            "problem": "What is 4 * 5?",
            "steps": ["4 * 5 = 20.", "The answer is \\boxed{20}."],
            "final_answer_correct": True,
            "label": -1,
        },
    ],
    "math": [
        {
            "id": "math-0",
            "generator": "Qwen2-7B-Instruct",
            "problem": "Solve $x + 1 = 3$.",
            "steps": ["Subtract 1: $x = 3$.", "So $x = \\boxed{3}$."],
            "final_answer_correct": False,
            "label": 0,
        }
    ],
    "olympiadbench": [
        {
            "id": "olympiadbench-0",
            "generator": "Qwen2-7B-Instruct",
            "problem": "Find the smallest prime.",
            "steps": ["The smallest prime is 2.", "Answer: \\boxed{2}"],
            "final_answer_correct": True,
            "label": -1,
        }
    ],
    "omnimath": [
        {
            "id": "omnimath-0",
            "generator": "Qwen2-7B-Instruct",
            "problem": "Compute $2^3$.",
            "steps": ["$2^3 = 6$.", "Answer $\\boxed{6}$."],
            "final_answer_correct": False,
            "label": 0,
        }
    ],
}


def write_all(data_dir: Path) -> Path:
    """Every benchmark under `data_dir` in its hub layout; returns data_dir."""
    _jsonl(data_dir / "MATH500" / "test.jsonl", MATH500)
    _parquet(data_dir / "AIME2024" / "aime_2024_problems.parquet", AIME2024)
    _jsonl(data_dir / "AIME2025" / "aime2025.jsonl", AIME2025)
    _parquet(data_dir / "AMC2023" / "data" / "test-00000-of-00001.parquet", AMC2023)
    _parquet(data_dir / "OlympiadBench" / "data" / "train-00000-of-00001.parquet", OLYMPIADBENCH)
    bgqa = data_dir / "BGQA" / "data"
    _parquet(bgqa / "test-00000-of-00001.parquet", BGQA)
    _parquet(bgqa / "train-00000-of-00001.parquet", [dict(BGQA[0], example="TRAIN ROW")])
    _jsonl(data_dir / "CRUXEval" / "test.jsonl", CRUXEVAL)
    sqa = data_dir / "StrategyQA"
    sqa.mkdir(parents=True, exist_ok=True)
    (sqa / "strategyqa_train.json").write_text(json.dumps(STRATEGYQA))
    (sqa / "strategyqa_test.json").write_text(json.dumps([dict(STRATEGYQA[0], qid="test")]))
    _jsonl(data_dir / "TableBench" / "TableBench.jsonl", TABLEBENCH)
    _jsonl(data_dir / "TableBench" / "TableBench_PoT.jsonl", TABLEBENCH[:1])  # another variant
    (data_dir / "TableBench" / ".cache").mkdir()  # what the download tool leaves: ignored
    _jsonl(data_dir / "TableBench" / ".cache" / "TableBench.jsonl", TABLEBENCH)
    for split, rows in PROCESS_BENCH.items():
        path = data_dir / "ProcessBench" / f"{split}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows))
    return data_dir
