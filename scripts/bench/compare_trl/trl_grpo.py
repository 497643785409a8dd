"""The GRPO run of a tango_jax config, under TRL's GRPOTrainer: the peer's side of the comparison.

    python scripts/bench/compare_trl/trl_grpo.py              # smollm2_addition:grpo, seed 0
    python scripts/bench/compare_trl/trl_grpo.py --seed 1 --run_dir runs/trl_addition_s1
    python scripts/bench/compare_trl/trl_grpo.py --steps 3 --no_eval          # a timing run

Needs `trl` (pinned in the `dev` and `compare` extras: pip install -e ".[compare]").

Everything comes from the tango_jax config (`--config`, default configs/smollm2_addition.py:grpo),
so the two runs cannot drift apart: the checkpoint (generator.model.path), the problems in the
order tango_jax deals them (its `PromptStream`, one batch of data.prompts_per_step per step), the
prompt (the generator template inside the chat template: TRL applies the same template to a
conversational prompt), the reward function (data.reward, imported from the package) and every
matched hyperparameter (`grpo_config`; docs/real_model.md lists each one). TRL generates with
`transformers.generate` and trains in PyTorch, in float32 on the CPU.

One deliberate change to stock TRL: `transformers` builds the input embedding with
`padding_idx = pad_token_id`, and PyTorch then never updates that row from the input side.
SmolLM2's pad token is `<|im_end|>`, which every prompt contains, so stock TRL and tango_jax
would take different updates of that (tied) row. It is switched off here, so both trainers
take the same update; `--torch_padding_idx` keeps stock behaviour.

Writes RUN_DIR/metrics.jsonl in tango_jax's shape (one JSON line per step, `eval` at step 0;
`generator/reward/mean`, `generator/accuracy`, `generator/train/{loss,grad_norm,lr}`,
`generator/response_len/{mean,max}`, `generator/clip_frac`, `eval/generator/{accuracy,
sampled_accuracy,response_len}`, `perf/{generate,reward,train,step,eval}_s`; every TRL log value
also as `trl/<name>`) and RUN_DIR/config.json (the TRL arguments and the tango_jax config).
The held-out evaluation (greedy, and `eval.sampled_n` samples per problem at the training
temperature) runs before training, every `eval.every_generator_steps` steps and at the end,
outside the timed steps, with its own seeded RNG (the training samples do not depend on it).
"""

import argparse
import dataclasses
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CONFIG = "configs/smollm2_addition.py:grpo"
# Our loss aggregation -> TRL's loss_type with the same mean (tests/compare/ checks each pair).
LOSS_TYPES = {
    "token-mean": "dapo",  # every token of the batch: sum / #tokens
    "seq-mean-token-mean": "grpo",  # mean over sequences of their token means
    "microbatch-token-mean": "bnpo",  # token mean per micro-batch, averaged
}


def load_config(spec: str, seed: int, steps: int | None):
    """The tango_jax RunConfig of `path[:variant]`, with the seed (and step count) set."""
    from tango_jax.config.files import config_from_spec
    from tango_jax.config.run import load_run_config

    c = config_from_spec(str(ROOT / spec))
    c.seed = seed
    if steps is not None:
        c.schedule.total_steps = steps
    cfg = load_run_config(c)
    if cfg.verifier.enable:
        raise SystemExit(f"{spec}: has a verifier; TRL runs the GRPO variant only (':grpo').")
    return cfg


def grpo_config(cfg, run_dir: Path, batch_rows: int):
    """TRL's GRPOConfig with every setting that matters matched to the tango_jax config."""
    from trl import GRPOConfig

    g = cfg.generator
    opt, loss = g.trainer.optimizer, g.trainer.loss
    if opt.schedule.value != "constant" or loss.kl_coef or loss.use_sampler_logprobs:
        raise SystemExit("matched only for a constant learning rate, no KL, ratio 1 (one update).")
    micro = g.trainer.micro_batch_size
    return GRPOConfig(
        output_dir=str(run_dir / "trl"),
        use_cpu=True,
        bf16=False,  # GRPOConfig's default is bf16; tango_jax's config is float32
        gradient_checkpointing=False,  # the config's remat=False (memory only)
        seed=cfg.seed,
        max_steps=cfg.schedule.total_steps,
        shuffle_dataset=False,  # the dataset is already in tango_jax's order
        per_device_train_batch_size=micro,
        gradient_accumulation_steps=batch_rows // micro,  # one generation batch per update
        num_generations=g.rollout.n,
        max_completion_length=g.rollout.max_tokens,
        temperature=g.rollout.temperature,
        top_p=g.rollout.top_p,
        top_k=0 if g.rollout.top_k == -1 else g.rollout.top_k,
        learning_rate=opt.learning_rate,
        lr_scheduler_type="constant",  # HF's default is linear decay to 0
        warmup_steps=0,
        adam_beta1=opt.b1,
        adam_beta2=opt.b2,
        adam_epsilon=opt.eps,
        weight_decay=opt.weight_decay,
        max_grad_norm=opt.grad_clip,
        beta=0.0,
        num_iterations=1,
        epsilon=loss.clip_low,
        epsilon_high=loss.clip_high,
        loss_type=LOSS_TYPES[loss.agg_mode.value],
        scale_rewards="group",
        mask_truncated_completions=False,
        entropy_coef=loss.entropy_coef,
        logging_steps=1,
        save_strategy="no",
        report_to=[],
        disable_tqdm=True,
    )


def ordered_prompts(cfg, tokenizer):
    """(training rows in tango_jax's order, held-out problems, rendered prompt of a question)."""
    from tango_jax.data.prompts import load_prompts
    from tango_jax.text.templates import Variant, render_generator_prompt

    g = cfg.generator
    stream, held_out = load_prompts(
        cfg.data,
        max_prompt_len=g.max_prompt_len,
        position=None,
        tokenizer=lambda: tokenizer,
        chat_template=g.chat_template,
    )

    def render(question: str, variant=Variant.TRAIN) -> list[dict]:
        text = render_generator_prompt(question, style=cfg.data.templates, variant=variant)
        return [{"role": "user", "content": text}]

    rows = [
        {"prompt": render(p.question), "question": p.question, "answer": p.answer, "id": p.id}
        for _ in range(cfg.schedule.total_steps)
        for p in stream.next_batch()
    ]
    return rows, held_out, render


def trl_reward(fn):
    """A tango_jax reward f(completion, answer, question) as a TRL reward function."""

    def reward(prompts, completions, answer, question, **_):
        return [fn(c[0]["content"], a, q) for c, a, q in zip(completions, answer, question)]

    reward.__name__ = getattr(fn, "__name__", "reward")
    return reward


@dataclasses.dataclass
class Evaluator:
    """Held-out accuracy, greedy and sampled, with `transformers.generate` (as TRL samples)."""

    model: object
    tokenizer: object
    problems: list
    render: object
    reward: object
    temperature: float
    max_tokens: int
    sampled_n: int
    seed: int
    rows_per_call: int = 96

    def _generate(self, problems, sample: bool) -> list[tuple[str, int]]:
        import torch

        from tango_jax.text.templates import Variant

        out = []
        for start in range(0, len(problems), self.rows_per_call):
            chunk = problems[start : start + self.rows_per_call]
            enc = self.tokenizer.apply_chat_template(
                [self.render(p.question, Variant.EVAL) for p in chunk],
                add_generation_prompt=True,
                tokenize=True,
                padding=True,
                return_dict=True,
                return_tensors="pt",
            )
            kw = dict(do_sample=True, temperature=self.temperature, top_p=1.0, top_k=0)
            with torch.no_grad():
                ids = self.model.generate(
                    **enc,
                    **(kw if sample else dict(do_sample=False)),
                    max_new_tokens=self.max_tokens,
                    pad_token_id=self.tokenizer.pad_token_id,
                    eos_token_id=self.tokenizer.eos_token_id,
                )
            for row in ids[:, enc["input_ids"].shape[1] :].tolist():
                eos = self.tokenizer.eos_token_id
                n = row.index(eos) + 1 if eos in row else len(row)
                out.append((self.tokenizer.decode(row[:n], skip_special_tokens=True), n))
        return out

    def __call__(self, step: int) -> dict[str, float]:
        import numpy as np
        import torch

        t0 = time.perf_counter()
        was_training = self.model.training
        self.model.eval()
        state = torch.random.get_rng_state()
        torch.manual_seed(self.seed * 100_003 + step)
        greedy = self._generate(self.problems, sample=False)
        sampled_problems = [p for p in self.problems for _ in range(self.sampled_n)]
        sampled = self._generate(sampled_problems, sample=True)
        torch.random.set_rng_state(state)
        self.model.train(was_training)

        def acc(outs, problems):
            return float(np.mean([self.reward(t, p.answer, p.question) > 0.5
                                  for (t, _), p in zip(outs, problems)]))  # fmt: skip

        return {
            "eval/generator/accuracy": acc(greedy, self.problems),
            "eval/generator/sampled_accuracy": acc(sampled, sampled_problems),
            "eval/generator/response_len": float(np.mean([n for _, n in greedy])),
            "perf/eval_s": time.perf_counter() - t0,
        }


@dataclasses.dataclass
class StepRecord:
    """What one training step spent generating and scoring, and the rewards it gave."""

    seconds: dict[str, float] = dataclasses.field(default_factory=dict)
    rewards: list[float] = dataclasses.field(default_factory=list)

    def add(self, phase: str, seconds: float) -> None:
        self.seconds[phase] = self.seconds.get(phase, 0.0) + seconds

    def clear(self) -> None:
        self.seconds, self.rewards = {}, []


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", default=DEFAULT_CONFIG, help="tango_jax config[:variant]")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=None, help="default: the config's")
    parser.add_argument("--eval_every", type=int, default=None, help="default: the config's")
    parser.add_argument(
        "--run_dir", type=Path, default=None, help="default runs/trl_<name>_s<seed>"
    )
    parser.add_argument("--no_eval", action="store_true", help="no held-out evaluation at all")
    parser.add_argument("--torch_padding_idx", action="store_true", help="stock TRL (see above)")
    args = parser.parse_args(argv)
    os.chdir(ROOT)  # the config's paths are relative to the repository root
    os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")  # TRL pings the hub at start-up

    import torch
    import transformers
    from datasets import Dataset
    from trl import GRPOTrainer

    from tango_jax.text import reward_function

    cfg = load_config(args.config, args.seed, args.steps)
    g = cfg.generator
    run_dir = args.run_dir or Path("runs") / f"trl_{cfg.name}_s{args.seed}"
    run_dir.mkdir(parents=True, exist_ok=True)
    tokenizer = transformers.AutoTokenizer.from_pretrained(g.model.path, padding_side="left")
    model = transformers.AutoModelForCausalLM.from_pretrained(g.model.path, dtype=torch.float32)
    if not args.torch_padding_idx:
        model.get_input_embeddings().padding_idx = None
    rows, held_out, render = ordered_prompts(cfg, tokenizer)
    reward_fn = reward_function.load(cfg.data.reward)
    batch_rows = cfg.data.prompts_per_step * g.rollout.n
    trl_args = grpo_config(cfg, run_dir, batch_rows)
    every = cfg.eval.every_generator_steps if args.eval_every is None else args.eval_every
    evaluate = Evaluator(
        model,
        tokenizer,
        held_out,
        render,
        reward_fn,
        g.rollout.temperature,
        g.eval_max_tokens or g.rollout.max_tokens,
        cfg.eval.sampled_n,
        cfg.seed,
    )
    (run_dir / "config.json").write_text(
        json.dumps(
            {
                "tango_jax_config": args.config,
                "seed": args.seed,
                "torch_padding_idx": args.torch_padding_idx,
                "trl": __import__("trl").__version__,
                "grpo_config": trl_args.to_dict(),
            },
            indent=2,
            default=str,
        )
    )
    metrics = open(run_dir / "metrics.jsonl", "w")  # noqa: SIM115 (open for the whole run)

    def write(step: int, values: dict, phase: str) -> None:
        line = {"step": step, "time": time.time(), "phase": phase, **values}
        metrics.write(json.dumps(line) + "\n")
        metrics.flush()

    seen = StepRecord()

    class TimedTrainer(GRPOTrainer):
        """Stock GRPOTrainer; generation and reward calls are timed, rewards kept per step."""

        def _generate(self, prompts):
            t0 = time.perf_counter()
            out = super()._generate(prompts)
            seen.add("generate", time.perf_counter() - t0)
            return out

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            t0 = time.perf_counter()
            out = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            seen.add("reward", time.perf_counter() - t0)
            seen.rewards.extend(out.sum(dim=1).tolist())
            return out

    class Recorder(transformers.TrainerCallback):
        """Step timing, TRL's logs and the held-out evaluation, as tango_jax's metrics lines."""

        def __init__(self):
            self.t0, self.pending = 0.0, {}

        def on_train_begin(self, a, state, control, **kw):
            if args.no_eval:
                return
            before = evaluate(0)
            write(0, before, "eval")
            print(_summary(0, before), flush=True)

        def on_step_begin(self, a, state, control, **kw):
            seen.clear()
            self.t0 = time.perf_counter()

        def on_step_end(self, a, state, control, **kw):
            step_s = time.perf_counter() - self.t0
            ph, r = seen.seconds, seen.rewards
            self.pending = {
                "generator/accuracy": sum(x > 0.5 for x in r) / max(len(r), 1),
                "perf/generate_s": ph.get("generate", 0.0),
                "perf/reward_s": ph.get("reward", 0.0),
                "perf/train_s": step_s - ph.get("generate", 0.0) - ph.get("reward", 0.0),
                "perf/step_s": step_s,
            }
            step = state.global_step
            if not args.no_eval and ((every and step % every == 0) or step == state.max_steps):
                self.pending.update(evaluate(step))

        def on_log(self, a, state, control, logs=None, **kw):
            if not self.pending or "loss" not in (logs or {}):
                return
            logs = logs or {}
            names = {
                "reward": "generator/reward/mean",
                "loss": "generator/train/loss",
                "grad_norm": "generator/train/grad_norm",
                "learning_rate": "generator/train/lr",
                "completions/mean_length": "generator/response_len/mean",
                "completions/max_length": "generator/response_len/max",
                "completions/clipped_ratio": "generator/clip_frac",
            }
            values = {ours: float(logs[theirs]) for theirs, ours in names.items() if theirs in logs}
            values.update(self.pending)
            values.update({f"trl/{k}": v for k, v in logs.items() if isinstance(v, int | float)})
            write(state.global_step, values, "generator")
            print(_summary(state.global_step, values), flush=True)
            self.pending = {}

    trainer = TimedTrainer(
        model=model,
        reward_funcs=trl_reward(reward_fn),
        args=trl_args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        callbacks=[Recorder()],
    )
    t0 = time.perf_counter()
    trainer.train()
    metrics.close()
    print(f"{run_dir}: {cfg.schedule.total_steps} steps in {time.perf_counter() - t0:.0f} s")
    return 0


def _summary(step: int, v: dict) -> str:
    parts = [f"step {step:3d}"]
    for name, short in (
        ("generator/reward/mean", "reward"),
        ("generator/train/loss", "loss"),
        ("generator/train/grad_norm", "gnorm"),
        ("perf/generate_s", "gen_s"),
        ("perf/train_s", "train_s"),
        ("eval/generator/accuracy", "eval_greedy"),
        ("eval/generator/sampled_accuracy", "eval_sampled"),
    ):
        if name in v:
            parts.append(f"{short} {v[name]:.3f}")
    return "  ".join(parts)


if __name__ == "__main__":
    sys.exit(main())
