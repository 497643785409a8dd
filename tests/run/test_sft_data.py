"""tango_jax/generate_sft_data.py end to end with a tiny random teacher: it keeps exactly the
responses whose answer is correct, reports the yield, and writes what the SFT stage reads."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import math_verify
import pytest
from safetensors.numpy import load_file, save_file

from tango_jax.models.tiny import write_tiny_checkpoint
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.run.sft import SFTPair, sft_records
from tango_jax.tango.kind import Kind
from tango_jax.text import templates
from tango_jax.text.answer_check import outcome_reward

NUM = 8
UNREACHABLE = "-0.5"  # the digit-writing teacher never states it


def _script():
    return importlib.import_module("tango_jax.generate_sft_data")


def _digit_teacher(path: Path) -> Path:
    """The tiny random model, made to write mostly digits (which Math-Verify reads as an
    answer; a random model seldom writes a number): the rows of the digit tokens in its tied
    embedding / output layer are scaled up, so their logits dominate."""
    write_tiny_checkpoint(path, seed=0)
    tok = load_tokenizer(path)
    digits = [i for i in range(len(tok)) if tok.decode([i]).isdigit()]
    assert len(digits) == 10
    (file,) = path.glob("*.safetensors")
    tensors = load_file(str(file))
    tensors["model.embed_tokens.weight"][digits] *= 20.0
    save_file(tensors, str(file), metadata={"format": "pt"})
    return path


def _write(path: Path, golds: list[str]) -> Path:
    rows = [{"question": f"What is {i} + {i}?", "answer": g} for i, g in enumerate(golds)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _lines(path: Path) -> list[dict]:
    return [json.loads(x) for x in path.read_text().splitlines()]


def test_teacher_responses_filtered_by_correctness(tmp_path):
    script = _script()
    teacher = _digit_teacher(tmp_path / "teacher")
    common = [
        *("--teacher", str(teacher), "--backend", "jax", "--dtype", "float32"),
        *("--temperature", "1.0", "--top_p", "1.0", "--max_tokens", "32", "--seed", "3"),
        *("--prompt_style", "compact", "--batch_size", str(NUM), "--scorer_workers", "1"),
    ]
    # 1. Every response (the official pipeline keeps them all).
    first = tmp_path / "all.jsonl"
    stats = script.main(
        [*common, "--data", str(_write(tmp_path / "p0.jsonl", [UNREACHABLE] * NUM)),
         "--out", str(first), "--keep", "all"]
    )  # fmt: skip
    responses = [r["response"] for r in _lines(first)]
    assert len(responses) == NUM and stats.kept == NUM and stats.correct == 0
    # 2. Gold answers made from what some responses say: those, and only those, are correct.
    golds, expected = [], []
    for i, text in enumerate(responses):
        parsed = math_verify.parse(
            text, [math_verify.ExprExtractionConfig(), math_verify.LatexExtractionConfig()]
        )
        if i % 2 == 0 and len(parsed) == 2 and outcome_reward(text, parsed[1]) == 1.0:
            golds.append(parsed[1])
            expected.append(i)
        else:
            golds.append(UNREACHABLE)
    assert expected, f"no response states a parsable answer: {responses}"
    out = tmp_path / "sft.jsonl"
    stats = script.main(
        [*common, "--data", str(_write(tmp_path / "p1.jsonl", golds)), "--out", str(out)]
    )
    kept = _lines(out)
    assert [r["id"] for r in kept] == [f"p1/{i}" for i in expected]
    assert [r["response"] for r in kept] == [responses[i] for i in expected]  # same seed
    assert (stats.sampled, stats.correct, stats.kept) == (NUM, len(expected), len(expected))
    report = json.loads(out.with_name("sft.jsonl.yield.json").read_text())
    assert report["yield"] == pytest.approx(len(expected) / NUM)
    assert not out.with_name("sft.jsonl.partial").exists()
    # 3. What `sft.generator.data_path` makes of it: the generator prompt + the response.
    pairs = sft_records(str(out), Kind.GENERATOR, templates.PromptStyle.COMPACT)
    assert pairs[0] == SFTPair(
        templates.render_generator_prompt(kept[0]["question"], style=templates.PromptStyle.COMPACT),
        kept[0]["response"],
    )
    with pytest.raises(SystemExit, match="exists"):
        script.main([*common, "--data", str(tmp_path / "p1.jsonl"), "--out", str(out)])


def test_chat_template_wraps_the_prompt(tmp_path):
    from tango_jax.run.sft_data import teacher_text

    tok = load_tokenizer(write_tiny_checkpoint(tmp_path / "t", seed=0))
    assert teacher_text("P", tok, chat_template=False) == "P"
    with pytest.raises(ValueError, match="no chat template"):
        teacher_text("P", tok, chat_template=True)
    tok.chat_template = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}{% endfor %}<|a|>"
    assert teacher_text("P", tok, chat_template=True) == "<|user|>P<|a|>"
