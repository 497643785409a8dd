"""SFT records of one's own (data/sft_records.py): what each role reads, and every malformed
record named by its line."""

from __future__ import annotations

import json

import pytest

from tango_jax.data.sft_records import read_sft_records
from tango_jax.text import templates

STYLE = templates.PromptStyle.COMPACT


def _file(tmp_path, *lines: str):
    path = tmp_path / "sft.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def test_prompts_from_templates_and_as_given(tmp_path):
    q, sol = "Start with 3. Add 4.", "<step>3 + 4 = 7</step>"
    path = _file(
        tmp_path,
        json.dumps({"question": q, "solution": sol, "response": "r1"}),
        "",  # blank lines are skipped
        json.dumps({"prompt": "as given", "response": "r2"}),
    )
    assert read_sft_records(path, verifier=False, style=STYLE) == [
        (templates.render_generator_prompt(q, style=STYLE), "r1"),
        ("as given", "r2"),
    ]
    assert read_sft_records(path, verifier=True, style=STYLE)[0] == (
        templates.render_verifier_prompt(q, sol, style=STYLE),
        "r1",
    )


@pytest.mark.parametrize(
    "line, verifier, message",
    [
        ("{not json", False, "line 2 is not JSON"),
        ("[1, 2]", False, "line 2 is not a JSON object"),
        ('{"question": "q"}', False, "line 2 has no 'response' text"),
        ('{"question": "q", "response": 3}', False, "line 2 has no 'response' text"),
        ('{"response": "r"}', False, "line 2 needs 'prompt' or 'question' for the generator"),
        (
            '{"question": "q", "response": "r"}',
            True,
            "line 2 needs 'prompt' or 'question' and 'solution' for the verifier",
        ),
    ],
)
def test_a_malformed_record_is_named_by_its_line(tmp_path, line, verifier, message):
    path = _file(tmp_path, json.dumps({"prompt": "p", "response": "r"}), line)
    with pytest.raises(ValueError, match=f"^{path}: {message}"):
        read_sft_records(path, verifier=verifier, style=STYLE)


def test_no_records_and_no_file(tmp_path):
    with pytest.raises(ValueError, match="holds no records"):
        read_sft_records(_file(tmp_path, "", "  "), verifier=False, style=STYLE)
    with pytest.raises(FileNotFoundError, match="does not exist"):
        read_sft_records(tmp_path / "missing.jsonl", verifier=False, style=STYLE)
