"""The pre-run checks (config/preflight.py) on data files of one's own: what they refuse, and
what they only say."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

from tango_jax.config import preflight
from tango_jax.config.files import load_config_file
from tango_jax.config.run import load_run_config
from tango_jax.data.prompts import DataSource

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_an_eval_file_smaller_than_eval_size_is_said_once_and_not_refused(tmp_path, caplog):
    """data.eval_size is a cap: a held-out file of 3 records under the tiny config's size is
    evaluated whole, and the pre-run checks give one line with the flag to say."""
    records = [{"question": "Start with 3. Add 4. What is the result?", "answer": "7"}] * 40
    train, held_out = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train.write_text("".join(json.dumps(r) + "\n" for r in records))
    held_out.write_text("".join(json.dumps(r) + "\n" for r in records[:3]))
    cfg = load_run_config(load_config_file(CONFIGS / "tiny_arith.py").get_config())
    data = dataclasses.replace(
        cfg.data, source=DataSource.JSONL, train_path=str(train), eval_path=str(held_out)
    )
    caplog.set_level(logging.INFO, logger="tango_jax")
    notes = preflight.check_paths(dataclasses.replace(cfg, data=data))
    # A note, said by the caller that goes on (once per command: tests/test_train.py)
    assert not [r for r in caplog.records if "eval_size" in r.getMessage()]
    assert notes == [
        f"data.eval_size ({data.eval_size}) is more than the 3 records of data.eval_path "
        f"({held_out}): each held-out evaluation uses all 3 (pass --config.data.eval_size=3 to "
        "say so)"
    ]
