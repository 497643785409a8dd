"""probe_letters_verifier.py reads a real verifier checkpoint's transcripts: every probed
solution is counted once under its kind, with the verdict parsed from what the model wrote."""

from __future__ import annotations

import re
from pathlib import Path

from scripts_loader import load_script

import tango_jax

SHIPPED = Path(tango_jax.__file__).parent / "assets" / "tiny_letters_sft" / "verifier"


def test_probe_counts_every_solution_once(capsys):
    probe = load_script("study", "probe_letters_verifier")
    argv = [str(SHIPPED), "--words", "1", "2", "--n", "4", "--max-tokens", "96", "--show", "1"]
    assert probe.main(argv) == 0
    out = capsys.readouterr().out
    assert out.startswith("== Last letters of: ") and "(right, first error -1)" in out
    for k in (1, 2):
        (line,) = [x for x in out.splitlines() if x.startswith(f"{k} words: ")]
        counts = [int(c) for c in re.findall(r"'(?:right|wrong) -> \w+': (\d+)", line)]
        assert sum(counts) == 4  # 2 right and 2 wrong solutions, each verdict counted once
        assert re.search(rf"step judgments right \d+/{4 * k} ", line)
