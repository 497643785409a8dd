"""scripts/slurm_tango_4x8.sh under stand-ins for SLURM's commands: the orchestration that
no CPU machine can otherwise run.

SLURM is the external system here: `srun` runs its command on this machine (a vLLM server
becomes a sleeping process), `scontrol` lists four nodes and records a requeue, `curl` finds
every server healthy. The trainer is a small Python program that waits with the real
`StopSignals` and exits with `ExitStatus.STOPPED`, as `tango_jax.train` does after saving (that
part is tested on the real command in tests/e2e/test_loop.py). The script must pass SLURM's
SIGUSR1 to the trainer, stop the servers, requeue its own job on status 75, give the trainer
a run directory that a requeued job finds again, and never put the vLLM key on a command line.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

_SRUN = """#!/bin/bash
# srun [options] COMMAND...: runs COMMAND here (a vLLM server sleeps; the trainer: STANDIN_TRAINER)
while [ $# -gt 0 ] && [ "${1:0:1}" = "-" ]; do
  case "$1" in -w) shift 2 ;; *) shift ;; esac
done
case "$*" in
  *tango_jax.launch_vllm*) exec sleep 600 ;;
  *tango_jax.train*) shift 2; exec "$PYTHON" "$STANDIN_TRAINER" "$@" ;;
esac
exit 99
"""

_SCONTROL = """#!/bin/bash
case "$1" in
  show) printf 'n0\\nn1\\nn2\\nn3\\n' ;;
  requeue) echo "requeue $2" >> "$OUT/scontrol.log" ;;
esac
"""

_TRAINER = """
import json, os, sys, time
from tango_jax.run.signals import ExitStatus, StopSignals
with StopSignals() as stop:
    out = os.environ["OUT"]
    with open(os.path.join(out, "trainer.json"), "w") as f:
        json.dump({"argv": sys.argv[1:], "key_set": bool(os.environ.get("TANGO_VLLM_KEY"))}, f)
    while not stop.requested:
        time.sleep(0.05)
    with open(os.path.join(out, "trainer.json"), "a") as f:
        f.write("\\n" + stop.signal_name)
sys.exit(ExitStatus.STOPPED)
"""


def _stand_ins(tmp: Path) -> Path:
    bin_dir = tmp / "bin"
    bin_dir.mkdir()
    for name, text in (("srun", _SRUN), ("scontrol", _SCONTROL), ("curl", "#!/bin/bash\n")):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)
    (tmp / "trainer.py").write_text(_TRAINER)
    return bin_dir


def test_usr1_before_the_time_limit_saves_through_the_trainer_and_requeues(tmp_path):
    bin_dir = _stand_ins(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "TANGO_VLLM_KEY"}
    env |= {
        "PATH": f"{bin_dir}{os.pathsep}{env['PATH']}",
        "PYTHON": sys.executable,
        "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), env.get("PYTHONPATH")) if p),
        "STANDIN_TRAINER": str(tmp_path / "trainer.py"),
        "OUT": str(tmp_path),
        "SLURM_JOB_ID": "4242",
        "SLURM_JOB_NODELIST": "n[0-3]",
        "LOGS": str(tmp_path / "logs"),
    }
    script = subprocess.Popen(
        ["bash", str(ROOT / "scripts" / "slurm_tango_4x8.sh"), "--config.seed=3"],
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    record = tmp_path / "trainer.json"
    deadline = time.monotonic() + 120
    while not record.exists():
        assert script.poll() is None, script.stderr.read()
        assert time.monotonic() < deadline
        time.sleep(0.1)
    time.sleep(0.5)  # the trainer is waiting; the script is in `wait`
    script.send_signal(signal.SIGUSR1)  # what --signal=B:USR1@600 sends the batch shell
    _, err = script.communicate(timeout=120)
    assert script.returncode == 0, err
    assert "requeueing job 4242" in err
    assert (tmp_path / "scontrol.log").read_text() == "requeue 4242\n"
    started, got = record.read_text().split("\n")
    assert got == "SIGUSR1"  # the trainer got the signal and stopped (its exit status: 75)
    started = json.loads(started)
    argv = started["argv"]
    assert "--config.run_dir=runs/tango-4242" in argv  # the requeued job (same id) resumes it
    assert "--config.resume=True" in argv and argv[-1] == "--config.seed=3"
    for role in ("generator", "verifier"):
        assert f"--config.{role}.sampler.vllm.api_key_env=TANGO_VLLM_KEY" in argv
    assert started["key_set"]  # the key reached the trainer through its environment only
    assert not any("api_key=" in a for a in argv)
