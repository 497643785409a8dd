"""Generate the generator's SFT data with a teacher model (TANGO_SPEC §5).

    python -m tango_jax.generate_sft_data --teacher /ckpt/Llama-3.1-70B-Instruct \
        --data data/Eurus-2-RL-Data/data/train-*.parquet --eurus2 --out data/sft.jsonl \
        --backend vllm --limit 20000
    python -m tango_jax.generate_sft_data --teacher HF_DIR --data problems.jsonl \
        --question_field question --answer_field answer --out sft.jsonl --backend jax

The teacher (any local HF checkpoint, sampled by the embedded JAX sampler or a vLLM server)
answers each problem's generator prompt, through its chat template when it has one (the official
pipeline: T = 0.1, top-p 0.5, one sample, prompts up to 1024 tokens, responses up to 3072).
Responses whose final answer is correct (Math-Verify against the gold) are written to --out as
`{"id", "question", "answer", "response"}` lines: set `sft.generator.data_path` to that file.
`--keep all` writes every response, as the official pipeline does. The yield is printed at the
end and written to OUT.yield.json.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
from pathlib import Path

from tango_jax.config.roles import RoleConfig, RolloutSettings, SamplerBackend, SamplerSettings
from tango_jax.data import datasets
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.rollout.base import SamplingParams
from tango_jax.run.roles import build_role
from tango_jax.run.sft_data import TeacherSettings, generate_sft_records
from tango_jax.tango.kind import Kind
from tango_jax.text.scoring_pool import OutcomeScorer
from tango_jax.text.templates import PromptStyle


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--teacher", required=True, help="HF checkpoint directory of the teacher")
    p.add_argument("--data", required=True, help="training problems: a file or glob")
    p.add_argument("--eurus2", action="store_true", help="--data is Eurus-2-RL-Data (math rows)")
    p.add_argument("--question_field", default="question", help="dotted path (not --eurus2)")
    p.add_argument("--answer_field", default="answer", help="dotted path (not --eurus2)")
    p.add_argument("--out", required=True, help="the SFT JSONL to write")
    p.add_argument("--limit", type=int, default=0, help="first N problems (0: all)")
    p.add_argument("--backend", default="jax", choices=[b.value for b in SamplerBackend])
    p.add_argument("--temperature", type=float, default=0.1)
    p.add_argument("--top_p", type=float, default=0.5)
    p.add_argument("--n", type=int, default=1, help="samples per problem")
    p.add_argument("--max_tokens", type=int, default=3072)
    p.add_argument("--max_prompt_len", type=int, default=1024, help="longer prompts: left out")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--chat_template",
        default="auto",
        choices=["auto", "on", "off"],
        help="wrap the prompt in the teacher's chat template (auto: if it has one)",
    )
    p.add_argument("--prompt_style", default="full", choices=[s.value for s in PromptStyle])
    p.add_argument("--keep", default="correct", choices=["correct", "all"])
    p.add_argument("--batch_size", type=int, default=256, help="problems per generate call")
    p.add_argument("--dtype", default="bfloat16", help="compute dtype (float32 on CPUs)")
    p.add_argument("--scorer_workers", type=int, default=0, help="default: the CPU count, <= 8")
    return p.parse_args(argv)


def main(argv: list[str] | None = None):
    args = parse_args(argv)
    out = Path(args.out)
    if out.exists():
        sys.exit(f"{out} exists; choose another --out or delete it.")
    if args.eurus2:
        problems = datasets.load_eurus2(args.data)
    else:
        fields = datasets.Fields(args.question_field, args.answer_field)
        problems = datasets.load_problems(args.data, fields)
    problems = problems[: args.limit] if args.limit else problems
    role_cfg = RoleConfig(
        dtype=args.dtype,
        max_prompt_len=args.max_prompt_len,
        sampler=SamplerSettings(backend=SamplerBackend(args.backend)),
        rollout=RolloutSettings(n=args.n, max_tokens=args.max_tokens),
    )
    mesh = make_mesh(MeshConfig())
    teacher = build_role(Kind.GENERATOR, role_cfg, Path(args.teacher), mesh, with_trainer=False)
    chat = args.chat_template == "on" or (
        args.chat_template == "auto" and bool(getattr(teacher.tokenizer, "chat_template", None))
    )
    params = SamplingParams(
        n=args.n,
        temperature=args.temperature,
        top_p=args.top_p,
        max_tokens=args.max_tokens,
        seed=args.seed,
    )
    scorer = OutcomeScorer(num_workers=args.scorer_workers or min(8, os.cpu_count() or 1))
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(out.name + ".partial")
    try:
        with partial.open("w", encoding="utf-8") as f:

            def write(records):
                f.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in records)
                f.flush()

            settings = TeacherSettings(
                params,
                chat_template=chat,
                style=PromptStyle(args.prompt_style),
                batch_size=args.batch_size,
                timeout_s=scorer.timeout_s,
                keep_all=args.keep == "all",
            )
            _, stats = generate_sft_records(teacher, problems, scorer, settings, on_records=write)
    finally:
        scorer.close()
        teacher.sampler.close()
    partial.rename(out)  # a complete file or none: a killed run leaves only OUT.partial
    report = dataclasses.asdict(stats) | {"yield": stats.rate, "chat_template": chat}
    out.with_name(out.name + ".yield.json").write_text(json.dumps(report, indent=2))
    print(f"{out}: {stats.line()}")
    return stats


if __name__ == "__main__":
    main()
