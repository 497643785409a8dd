"""make_letters_sft.py chains its four SFT phases: each starts from the one before, and the
first (random init) passes the train command's pre-run checks as written."""

from __future__ import annotations

import subprocess
from pathlib import Path

from scripts_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _module():
    return load_script("assets", "make_letters_sft")


def _flag(cmd: list[str], name: str) -> str:
    (value,) = [a.split("=", 1)[1] for a in cmd if a.startswith(f"--config.{name}=")]
    return value


def test_phases_start_from_each_other(tmp_path):
    phase1, phase2, phase3, phase4 = _module().phase_commands(
        tmp_path, 3, 40, ["eval.sampled_n=2"], 70, 20
    )
    assert phase1[phase1.index("--config") + 1].endswith("tiny_letters.py:grpo,scratch")
    assert _flag(phase1, "data.letters.sft_max_words") == "3"
    assert _flag(phase2, "generator.model.path") == str(tmp_path / "phase1/sft/generator")
    assert _flag(phase2, "sft.generator.steps") == "70"
    assert _flag(phase2, "sft.generator.num_examples") == str(70 * 32)
    assert _flag(phase3, "generator.model.path") == str(tmp_path / "phase2/sft/generator")
    assert _flag(phase3, "sft.generator.enable") == "False"
    assert _flag(phase3, "sft.verifier.steps") == "20"
    assert _flag(phase3, "data.letters.verifier_one_word") == "1.0"
    assert _flag(phase4, "verifier.model.path") == str(tmp_path / "phase3/sft/verifier")
    assert _flag(phase4, "sft.verifier.start_from_generator") == "False"
    assert _flag(phase4, "sft.verifier.steps") == "40"
    assert _flag(phase4, "sft.verifier.num_examples") == str(40 * 32)
    for cmd in (phase1, phase2, phase3, phase4):
        assert _flag(cmd, "seed") == "3" and _flag(cmd, "eval.sampled_n") == "2"
        assert _flag(cmd, "schedule.total_steps") == "0"
        # the SFT covers 2-6 words whatever the config's RL range (4-6 since setting 3)
        assert _flag(cmd, "data.letters.min_words") == "2"
    proc = subprocess.run(
        [*phase1, "--dry_run"], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not (tmp_path / "phase1").exists()  # a dry run writes nothing
