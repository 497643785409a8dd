"""The training command as a user meets it (`python -m tango_jax.train`, run as a process, for
its exit status, its output and the files it leaves): --help, --list_fields, --dry_run, list
overrides, own data, and refused runs that leave the run directory exactly as it was.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tango_jax.models.tiny import write_tiny_checkpoint

REPO = Path(__file__).resolve().parents[1]
TINY = f"{REPO / 'configs' / 'tiny_arith.py'}"


def _train(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "tango_jax.train", *args],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=REPO,
    )


def _listing(root: Path) -> dict[str, tuple[bytes, int]]:
    """Every entry under `root` (directories included): its bytes and modification time."""
    return {
        str(p.relative_to(root)): (p.read_bytes() if p.is_file() else b"", p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
    }


def _jsonl(path: Path, records: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def test_help_exits_0_and_says_how_to_list_fields():
    run = _train("--help")
    assert run.returncode == 0, run.stderr
    assert "--list_fields" in run.stdout and "--dry_run" in run.stdout
    assert "configs/tiny_arith.py" in run.stdout and run.stderr == ""


def test_list_fields_gives_types_values_and_defaults():
    run = _train("--config", TINY, "--config.data.prompts_per_step=7", "--list_fields")
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert "data.prompts_per_step: int = 7  (default 256)  # fresh prompts per global step" in lines
    assert any(line.startswith("wandb.tags: list[str] = []") for line in lines)
    bare = _train("--list_fields")  # without a config: the schema's defaults
    assert bare.returncode == 0, bare.stderr
    assert "data.prompts_per_step: int = 256  # fresh prompts per global step" in bare.stdout


def test_dry_run_prints_the_resolved_config_and_writes_nothing(tmp_path):
    run_dir = tmp_path / "run"
    run = _train(
        "--config",
        f"{TINY}:grpo",
        f"--config.run_dir={run_dir}",
        "--config.wandb.tags=a,b",
        "--config.resume_may_change=[schedule, eval]",
        "--dry_run",
    )
    assert run.returncode == 0, run.stderr
    resolved = json.loads(run.stdout)  # stdout is the JSON alone
    assert resolved["wandb"]["tags"] == ["a", "b"]
    assert resolved["resume_may_change"] == ["schedule", "eval"]
    assert resolved["verifier"]["enable"] is False and resolved["run_dir"] == str(run_dir)
    assert "dry run: every pre-run check passed" in run.stderr
    assert not run_dir.exists()


@pytest.mark.parametrize(
    "args, message",
    [
        (
            [f"{TINY}:gpro"],
            f"config error: --config={TINY}:gpro: unknown variant 'gpro' in config string "
            "'gpro'; choose one of ('tango', 'grpo', 'fixed_verifier', 'lora').",
        ),
        (
            [str(REPO / "configs" / "tiny.py")],
            f"config error: --config={REPO / 'configs' / 'tiny.py'}: no such config file",
        ),
        (
            [TINY, "--config.wandb.tags=[a,,b]"],
            "config error: --config.wandb.tags: empty item in '[a,,b]'; write a list as a,b",
        ),
        (
            [TINY, "--config.data.train_path=my/train.jsonl"],
            "config error: config.data.train_path ('my/train.jsonl') is set, but data.source is "
            "'synthetic' (generated problems, no files), which would ignore it: pass "
            "--config.data.source=jsonl to train on your file (docs/data.md).",
        ),
        (
            [TINY, "--config.data.source=jsonl"],
            "config error: config.data.train_path ('') is required with data.source='jsonl': "
            "pass --config.data.train_path=FILE",
        ),
        (
            [TINY, "--config.schedule.total_steps=2"],  # issue 67: the 40 warm-up steps
            "config error: config.schedule: schedule.total_steps (2) must exceed the warm-ups: "
            "steps 1-40 are verifier warm-up (schedule.verifier_warmup_steps), so the generator "
            "is not trained in this run; for a short run lower the warm-up too "
            "(--config.schedule.verifier_warmup_steps=1), give more than 40 steps, or 0 for an "
            "SFT-only run.",
        ),
    ],
    ids=["variant", "config-file", "list", "data-source", "no-train-path", "short-warm-up"],
)
def test_command_line_mistakes_are_one_line_naming_the_fix(tmp_path, args, message):
    run = _train("--config", *args, f"--config.run_dir={tmp_path / 'run'}")
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()  # one line, no traceback
    assert line.startswith(message), line
    assert not (tmp_path / "run").exists()


@pytest.fixture
def started_run(tmp_path) -> Path:
    """A run directory as a run that stopped after its first steps leaves it."""
    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / "2").mkdir(parents=True)
    (run_dir / "checkpoints" / "2" / "state").write_bytes(b"\x00\x01")
    (run_dir / "metrics.jsonl").write_text('{"step": 1, "time": 0, "phase": "verifier"}\n')
    (run_dir / "config.json").write_text('{"name": "earlier"}')
    return run_dir


def _own_data(tmp_path: Path, question_field: str) -> list[str]:
    records = [{"problem": "Start with 3. Add 4.", "answer": 7}] * 4
    train = _jsonl(tmp_path / "train.jsonl", records)
    held_out = _jsonl(tmp_path / "test.jsonl", records)
    return [
        "--config.data.source=jsonl",
        f"--config.data.train_path={train}",
        f"--config.data.eval_path={held_out}",
        f"--config.data.question_field={question_field}",
    ]


def test_a_wrong_data_field_is_refused_with_its_flag_leaving_the_run_untouched(
    tmp_path, started_run
):
    """The issue's case: the field error came after config.json was written, locking the
    directory, and named a Python API instead of the flag."""
    data = _own_data(tmp_path, "question")
    before = _listing(tmp_path)
    run = _train("--config", TINY, f"--config.run_dir={started_run}", *data)
    assert run.returncode == 1
    assert run.stderr.strip().splitlines() == [
        "config error: config.data.question_field ('question'): record 0 of "
        f"{tmp_path / 'train.jsonl'} has no such field (its fields: ['problem', 'answer']); "
        "pass the file's own name, e.g. --config.data.question_field=problem (a dotted path "
        "for nested fields: 'a.b', 'a.0.b')."
    ]
    assert _listing(tmp_path) == before
    fresh = tmp_path / "fresh"
    run = _train("--config", TINY, f"--config.run_dir={fresh}", *_own_data(tmp_path, "q"))
    assert run.returncode == 1 and "--config.data.question_field=problem" in run.stderr
    assert not fresh.exists()
    ok = _train(
        "--config", TINY, f"--config.run_dir={fresh}", *_own_data(tmp_path, "problem"),
        *_four_prompts(), "--dry_run",
    )  # fmt: skip
    assert ok.returncode == 0, ok.stderr
    assert not fresh.exists()


def test_too_few_records_for_a_batch_are_refused_by_the_dry_run(tmp_path):
    """Four training records and the tiny config's 32 prompts per step: refused by the pre-run
    checks (so by --dry_run, in one line naming the flag), not by a traceback after the run
    has started. When enough records remain only before the prompt-length filter, the run is
    refused in one line too, before anything is written."""
    fresh = tmp_path / "fresh"
    data = _own_data(tmp_path, "problem")
    dry = _train("--config", TINY, f"--config.run_dir={fresh}", *data, "--dry_run")
    assert dry.returncode == 1
    assert dry.stderr.strip().splitlines()[-1] == (
        "config error: config.data.prompts_per_step (32) is more than the 4 records of "
        f"data.train_path ({tmp_path / 'train.jsonl'}); lower it "
        "(--config.data.prompts_per_step=4) or add records."
    )
    long = {"problem": "Add " + " and ".join(["7"] * 300) + ".", "answer": "2100"}
    short = {"problem": "Start with 3. Add 4.", "answer": 7}
    _jsonl(tmp_path / "train.jsonl", [short, long, short, long])
    run = _train("--config", TINY, f"--config.run_dir={fresh}", *data, *_four_prompts())
    assert run.returncode == 1
    assert run.stderr.strip().splitlines()[-1] == (
        "config error: config.data.prompts_per_step (4) is more than the 2 training problems "
        "whose prompt fits config.generator.max_prompt_len (256; 2 of 4 are longer); lower "
        "it (--config.data.prompts_per_step=2), raise generator.max_prompt_len or add records."
    ), run.stderr[-3000:]
    assert not fresh.exists()


def test_a_malformed_sft_record_is_refused_by_the_dry_run(tmp_path):
    """An SFT file of one's own whose third record has no response: the pre-run checks read
    every record, so --dry_run refuses it in one line naming the field and the line."""
    sft = [{"question": "Start with 3. Add 4.", "response": "<step>3 + 4 = 7</step>"}] * 2
    data = _jsonl(tmp_path / "sft.jsonl", [*sft, {"question": "Start with 1."}])
    flags = ["--config.sft.generator.enable=True", f"--config.sft.generator.data_path={data}"]
    fresh = tmp_path / "fresh"
    dry = _train("--config", TINY, f"--config.run_dir={fresh}", *flags, "--dry_run")
    assert dry.returncode == 1
    assert dry.stderr.strip().splitlines()[-1] == (
        f"config error: config.sft.generator.data_path ({str(data)!r}) cannot be used: "
        f"{data}: line 3 has no 'response' text."
    ), dry.stderr[-3000:]
    assert not fresh.exists()


def _four_prompts() -> list[str]:
    """The tiny config at 4 prompts a step (and micro-batches that divide its rollouts)."""
    return ["--config.data.prompts_per_step=4"]


def test_an_unsupported_model_is_refused_before_anything_is_written(tmp_path, started_run):
    model = write_tiny_checkpoint(tmp_path / "gemma3", "tiny-qwen2", seed=0)
    config = json.loads((model / "config.json").read_text())
    (model / "config.json").write_text(json.dumps(config | {"model_type": "gemma3"}))
    before = _listing(tmp_path)
    run = _train(
        "--config",
        TINY,
        f"--config.run_dir={started_run}",
        f"--config.generator.model.path={model}",
    )
    assert run.returncode == 1
    (line,) = run.stderr.strip().splitlines()
    assert line.startswith(
        f"config error: config.generator.model.path ('{model}') is a model tango_jax cannot "
        "load: its config.json: model_type 'gemma3'"
    ), line
    assert all(f"{family} (" in line for family in ("qwen2", "qwen3", "llama")), line
    assert _listing(tmp_path) == before


def test_prompts_all_too_long_are_refused_before_anything_is_written(tmp_path, started_run):
    """Found only once the data is tokenized (in the loop, after the pre-run checks), and still
    before the first write."""
    long = {"question": "Add " + " and ".join(["7"] * 300) + ".", "answer": "2100"}
    data = _jsonl(tmp_path / "long.jsonl", [long] * 4)
    before = _listing(tmp_path)
    run = _train(
        "--config",
        TINY,
        f"--config.run_dir={started_run}",
        "--config.resume=False",  # refused as an existing run, unless refused first
        "--config.data.source=jsonl",
        f"--config.data.train_path={data}",
        f"--config.data.eval_path={data}",
        *_four_prompts(),
    )
    assert run.returncode == 1
    assert "already holds a run" in run.stderr  # the pre-run checks come first
    fresh = tmp_path / "fresh"
    run = _train(
        "--config",
        TINY,
        f"--config.run_dir={fresh}",
        "--config.data.source=jsonl",
        f"--config.data.train_path={data}",
        f"--config.data.eval_path={data}",
        *_four_prompts(),
    )
    assert run.returncode == 1
    assert (
        run.stderr.strip()
        .splitlines()[-1]
        .startswith(
            "config error: config.generator.max_prompt_len (256): every train problem's prompt is "
            "longer (tokens, template included); raise it (--config.generator.max_prompt_len="
        )
    ), run.stderr
    assert "Traceback" not in run.stderr
    assert not fresh.exists()
    assert _listing(tmp_path) == before


def test_a_note_about_the_data_is_said_once_per_command(tmp_path):
    """Issue 67: data.eval_size above the held-out file's records is a note, not a refusal; it
    was printed twice by a run (the command's pre-run checks, then the loop's own). Said once
    by the dry run and once by the run (refused here after the loop's checks, as its prompts
    are all too long: the same lines a run that trains prints first)."""
    long = {"question": "Add " + " and ".join(["7"] * 300) + ".", "answer": "2100"}
    data = _jsonl(tmp_path / "long.jsonl", [long] * 4)
    flags = [
        "--config.data.source=jsonl",
        f"--config.data.train_path={data}",
        f"--config.data.eval_path={data}",
        *_four_prompts(),
    ]
    note = f"data.eval_size (128) is more than the 4 records of data.eval_path ({data})"
    dry = _train("--config", TINY, f"--config.run_dir={tmp_path / 'run'}", *flags, "--dry_run")
    assert dry.returncode == 0, dry.stderr[-3000:]
    assert dry.stderr.count(note) == 1, dry.stderr
    run = _train("--config", TINY, f"--config.run_dir={tmp_path / 'run'}", *flags)
    assert run.returncode == 1 and "every train problem's prompt is longer" in run.stderr
    assert (run.stdout + run.stderr).count(note) == 1, run.stdout
