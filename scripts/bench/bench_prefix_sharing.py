"""The JAX sampler with prefix sharing against the plain one, on the real prompts of one Tango
step of configs/smollm2_addition.py:tango, in one process.

    python scripts/bench/bench_prefix_sharing.py                        # shared vs plain
    python scripts/bench/bench_prefix_sharing.py --baseline-rev a8a4820 # + that commit's sampler
    python scripts/bench/bench_prefix_sharing.py --preset tiny-qwen2 --rounds 1  # smoke check

Phases, with the config's sampler settings (SmolLM2-135M-Instruct, float32, one CPU device;
--verifier-model: the judging phase's weights, e.g. a run's SFT verifier, whose verifications
stop where a run's do, where the instruct model's often run on to the token limit):
  judging     the verifier's 64 judging prompts of a logged step (scripts/bench/
              smollm2_prompts.py), 1 verification each, T = 1, up to 128 tokens,
              prompt_bucket 32, max_rows 64;
  generation  the step's 8 generator prompts x 8 samples, T = 1, up to 64 tokens,
              prompt_bucket 16, max_rows 64.
Arms: `shared` (JaxSampler, share_prefix on: the default), `plain` (share_prefix off) and, with
--baseline-rev, `rev` (the jax_sampler.py and transformer.py of that git revision, loaded into
this process from `git show` and run on the same weights). Every arm is called once to compile
(its first-call time minus its median is printed as compile_s), then the arms take turns
(shared, plain, rev, shared, ...) for --rounds rounds, so that background load hits them alike.
--split also times each arm with max_tokens = 1 (the prefill and one sampled token).

Prints one JSON object per phase: per arm the median seconds, compile seconds, generated
tokens, and the work counted from the prompts and the sampled lengths (prefill token
positions incl. padding; decode row-steps incl. finished and padding rows); the ratios
plain / shared and rev / shared; and whether shared and plain sampled the same tokens (they
share the random streams; log-probs agree to float rounding).

--preset NAME: a smoke check of the script (seconds, not a measurement): a random-weight model
of that preset, its vocabulary widened to the tokenizer's, stands in for --model's weights; the
prompts and the tokenizer are still those of configs/smollm2_addition.py (models/ must hold the
SmolLM2 tokenizer).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import subprocess
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import jax
import numpy as np
from flax import nnx
from smollm2_prompts import tango_step_prompts

from tango_jax.models import Transformer, from_pretrained, presets
from tango_jax.models.tokenizer import load_tokenizer
from tango_jax.parallel.buckets import round_up
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import init_sharded
from tango_jax.rollout.base import SamplingParams
from tango_jax.rollout.decode_loop import SegmentedDecode, segments
from tango_jax.rollout.jax_sampler import DECODE_SEGMENT, JaxSampler
from tango_jax.rollout.shared_prefill import plan_prefill


def revision_sampler_class(rev: str, model):
    """(JaxSampler class, model) of git revision `rev`: its transformer.py and jax_sampler.py as
    modules of their own, the model rebuilt from that transformer around the same arrays."""

    def load(path: str, name: str, replace: dict[str, str]) -> types.ModuleType:
        src = subprocess.run(
            ["git", "show", f"{rev}:{path}"], capture_output=True, text=True, check=True
        ).stdout
        for a, b in replace.items():
            src = src.replace(a, b)
        module = types.ModuleType(name)
        sys.modules[name] = module
        exec(compile(src, f"{rev}:{path}", "exec"), module.__dict__)
        return module

    transformer = load("tango_jax/models/transformer.py", "_rev_transformer", {})
    sampler = load(
        "tango_jax/rollout/jax_sampler.py",
        "_rev_jax_sampler",
        {"from tango_jax.models.transformer import": "from _rev_transformer import"},
    )
    abstract = nnx.eval_shape(lambda: transformer.Transformer(model.config, rngs=nnx.Rngs(0)))
    return sampler.JaxSampler, nnx.merge(nnx.graphdef(abstract), nnx.state(model))


def work(sampler: JaxSampler, prompts, params: SamplingParams, lengths, share: bool) -> dict:
    """Prefill token positions and decode row-steps of one call (the padding rows included)."""
    rows = [p.token_ids for p in prompts for _ in range(params.n)]
    out = {"prefill_tokens": 0, "decode_row_steps": 0, "real_prompt_tokens": 0}
    for start in range(0, len(rows), sampler.max_rows):
        chunk, lens = (
            rows[start : start + sampler.max_rows],
            lengths[start : start + sampler.max_rows],
        )
        b = round_up(len(chunk), sampler.row_bucket)
        out["real_prompt_tokens"] += sum(len(r) for r in chunk)
        if not share:
            out["prefill_tokens"] += b * round_up(max(map(len, chunk)), sampler.prompt_bucket)
            out["decode_row_steps"] += b * max(lens)
            continue
        distinct = list(dict.fromkeys(chunk))
        plan = plan_prefill(
            distinct, group_rows=sampler.row_bucket, bucket=sampler.prompt_bucket, pad_id=0
        )
        out["prefill_tokens"] += plan.prefill_tokens
        # the segmented decode's batch sizes, replayed from the sampled lengths
        ends = np.array(list(lens) + [0] * (b - len(chunk)))  # a row runs while step < length
        decode = SegmentedDecode(
            None, segment=DECODE_SEGMENT, block=0, row_bucket=sampler.row_bucket
        )
        live = np.arange(b)
        for s, e, _ in segments(
            plan.prompt_slots, params.max_tokens, segment=DECODE_SEGMENT, block=0
        ):
            if (ends[live] <= s).all():
                break
            ran = min(e, int(ends[live].max())) - s
            out["decode_row_steps"] += len(live) * ran
            keep = decode._smaller_batch(ends[live] <= s + ran)
            if keep is not None:
                live = live[keep]
    return out


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--model", default="models/SmolLM2-135M-Instruct")
    p.add_argument(
        "--verifier-model",
        help="the judging phase's weights (default --model), e.g. a run's SFT verifier "
        "(RUN_DIR/sft/verifier), which writes verifications of the length a run's do",
    )
    p.add_argument("--record", default="docs/compare_trl/runs/tango_s1")
    p.add_argument("--step", type=int, default=5, help="a generator step of the record")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--phases", default="judging,generation")
    p.add_argument("--baseline-rev", help="also time this git revision's sampler")
    p.add_argument("--split", action="store_true", help="also time max_tokens = 1 (prefill)")
    p.add_argument("--preset", help="smoke check: a random-weight model of this preset")
    args = p.parse_args(argv)

    gen, ver = tango_step_prompts(args.record, args.step)
    tokenizer = load_tokenizer(args.model)
    mesh = make_mesh(MeshConfig(1, 1, 1), devices=jax.devices()[:1])
    if args.preset:
        cfg = presets.get(args.preset, vocab_size=len(tokenizer))
        model = init_sharded(lambda: Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
        verifier = model
    else:
        model = from_pretrained(args.model)
        verifier = from_pretrained(args.verifier_model) if args.verifier_model else model
    phases = {
        "judging": (ver, SamplingParams(n=1, temperature=1.0, max_tokens=128, seed=1), 32),
        "generation": (gen, SamplingParams(n=8, temperature=1.0, max_tokens=64, seed=1), 16),
    }
    for phase in args.phases.split(","):
        prompts, params, bucket = phases[phase]
        weights = verifier if phase == "judging" else model
        rev_cls, rev_model = None, None
        if args.baseline_rev:
            rev_cls, rev_model = revision_sampler_class(args.baseline_rev, weights)
        kw = dict(mesh=mesh, max_rows=64, prompt_bucket=bucket)
        arms = {
            "shared": JaxSampler(weights, tokenizer, share_prefix=True, **kw),
            "plain": JaxSampler(weights, tokenizer, share_prefix=False, **kw),
        }
        if rev_cls is not None:
            arms["rev"] = rev_cls(rev_model, tokenizer, **kw)
        calls = [("", params)]
        if args.split:
            calls.append(("prefill_", dataclasses.replace(params, max_tokens=1)))
        source = args.verifier_model if phase == "judging" and args.verifier_model else args.model
        result, outputs = {"phase": phase, "step": args.step, "model": args.preset or source}, {}
        for prefix, call_params in calls:
            first, times = {}, {name: [] for name in arms}
            for name, s in arms.items():
                t0 = time.perf_counter()
                outputs[prefix + name] = s.generate(prompts, call_params)
                first[name] = time.perf_counter() - t0
            for _ in range(args.rounds):
                for name, s in arms.items():
                    t0 = time.perf_counter()
                    s.generate(prompts, call_params)
                    times[name].append(time.perf_counter() - t0)
            for name in arms:
                med = statistics.median(times[name])
                arm = result.setdefault(name, {})
                arm[prefix + "seconds"] = round(med, 2)
                arm[prefix + "seconds_all"] = [round(t, 2) for t in times[name]]
                arm[prefix + "compile_s"] = round(first[name] - med, 2)
            for name in arms:
                if name != "shared":
                    ratio = result[name][prefix + "seconds"] / result["shared"][prefix + "seconds"]
                    result[f"{prefix}{name}_over_shared"] = round(ratio, 2)
        for name in arms:
            flat = [c for cs in outputs[name] for c in cs]
            lengths = [len(c.token_ids) for c in flat]
            result[name]["generated_tokens"] = sum(lengths)
            result[name]["stopped"] = sum(c.finish_reason.value == "stop" for c in flat)
            if name in ("shared", "plain"):
                result[name].update(work(arms[name], prompts, params, lengths, name == "shared"))
        a = [c for cs in outputs["shared"] for c in cs]
        b = [c for cs in outputs["plain"] for c in cs]
        result["shared_equals_plain_tokens"] = sum(x.token_ids == y.token_ids for x, y in zip(a, b))
        result["rows"] = len(a)
        result["max_logprob_gap"] = max(
            float(np.max(np.abs(np.subtract(x.logprobs, y.logprobs)), initial=0.0))
            for x, y in zip(a, b)
            if x.token_ids == y.token_ids
        )
        print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
