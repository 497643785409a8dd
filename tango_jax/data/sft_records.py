"""A role's SFT data of one's own (`sft.<role>.data_path`): JSONL records read into (prompt,
response) text pairs. Read by the SFT stage and, before anything is written, by the pre-run
checks (config/preflight.py), so a malformed record stops the run in its first second.

Each record is {"prompt", "response"}, or {"question", "response"} for the generator (the
prompt is its template around the question) / {"question", "solution", "response"} for the
verifier (its template around both).
"""

from __future__ import annotations

import json
from pathlib import Path

from tango_jax.text import templates


def read_sft_records(
    path: str | Path, *, verifier: bool, style: templates.Templates
) -> list[tuple[str, str]]:
    """(prompt, response) of every record in `path`, in order (blank lines skipped);
    FileNotFoundError, or ValueError naming the line and what it lacks."""
    file, role = Path(path), "verifier" if verifier else "generator"
    if not file.is_file():
        raise FileNotFoundError(f"{file} does not exist.")
    out = []
    for i, line in enumerate(file.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        try:
            rec = json.loads(line)
        except json.JSONDecodeError as e:
            raise ValueError(f"{file}: line {i} is not JSON ({e.msg}).") from None
        if not isinstance(rec, dict):
            raise ValueError(f"{file}: line {i} is not a JSON object.")
        if not isinstance(rec.get("response"), str):
            raise ValueError(f"{file}: line {i} has no 'response' text.")
        if "prompt" in rec:
            prompt = rec["prompt"]
        elif not verifier and "question" in rec:
            prompt = templates.render_generator_prompt(rec["question"], style=style)
        elif verifier and {"question", "solution"} <= rec.keys():
            prompt = templates.render_verifier_prompt(rec["question"], rec["solution"], style=style)
        else:
            need = "'question' and 'solution'" if verifier else "'question'"
            raise ValueError(f"{file}: line {i} needs 'prompt' or {need} for the {role}.")
        out.append((prompt, rec["response"]))
    if not out:
        raise ValueError(f"{file} holds no records.")
    return out
