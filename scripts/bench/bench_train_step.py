"""Throughput and MFU of the jitted train step (policy-gradient loss, AdamW, remat optional),
and the same step in PyTorch / `transformers` side by side (`--against-torch`).

    python scripts/bench/bench_train_step.py --preset tiny-qwen2 --batch 64 --prompt-len 96 \
        --response-len 96                                                   # CPU
    python scripts/bench/bench_train_step.py --preset tiny-qwen2 --batch 32 --prompt-len 32 \
        --response-len 128 --no-kl --against-torch                          # vs PyTorch
    python scripts/bench/bench_train_step.py --preset tiny-qwen2 --embed-dim 512 --layers 8 \
        --heads 8 --kv-heads 2 --mlp-dim 1408 --batch 8 --prompt-len 128 \
        --response-len 128 --no-kl --against-torch                          # 22.8M Qwen2 shape
    python scripts/bench/bench_train_step.py --preset qwen2.5-0.5b --dtype bfloat16 --remat \
        --batch 64 --micro-batch 16 --prompt-len 512 --response-len 1024 \
        --peak-tflops 989                                                   # one H100 (bf16)
    python scripts/bench/bench_train_step.py --preset smollm2-135m --no-kl --batch 8 \
        --prompt-len 64 --response-len 64 --lora-rank 8                     # LoRA on CPU

Random weights and tokens (the step's cost does not depend on them). Prints one JSON object:
compile_s, step_s (median of --steps timed steps after one warm-up), tokens_per_s, the model
FLOPs per step (6 · params · tokens for matmuls + 12 · L · D · T² · B / 2 for causal
attention, plus one extra forward for the reference model's KL term), achieved TFLOP/s and,
with --peak-tflops, MFU; trainable parameters and optimizer-state bytes; peak_rss_gb, the
process's peak resident memory (Linux: ru_maxrss; on a CPU that is the step's memory, so
compare two settings in two processes).

--lora-rank R: rank-R adapters on every projection (alpha 2R), the base frozen: only the
adapters train and the optimizer holds their state alone (`LoraConfig`). tflops_per_step stays
full fine-tuning's count; --xla-flops adds XLA's count of the compiled step
(xla_tflops_per_step), which has no gradients of the frozen weights.

--against-torch (needs --no-kl; entropy coefficient 0): the same step in PyTorch with
`transformers`' model of the same config and the same initial weights (copied from the JAX
model), with the same micro-batching (gradients accumulated over --micro-batch rows at a
time): the hidden states of the response positions, log-softmax, the PPO surrogate at ρ ≡ 1
(`-A · exp(logp - logp.detach())`, token mean), backward, global-norm clip, AdamW with the
same hyper-parameters. Steps of the two alternate in one process (so a loaded machine slows
both alike); the output adds torch_step_s, torch_tokens_per_s, ratio = JAX tokens/s / PyTorch
tokens/s, and the first step's loss and gradient norm from both (which must agree: the same
computation is being timed).
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import sys
import time

import jax
import numpy as np
from flax import nnx

from tango_jax.models import Transformer, presets
from tango_jax.models.config import ATTENTION_KERNELS, dtype_from_name
from tango_jax.models.lora import LoraConfig
from tango_jax.parallel.mesh import MeshConfig, make_mesh
from tango_jax.parallel.partition import shard_model
from tango_jax.rl.batch import TrainBatch
from tango_jax.rl.train_step import LossConfig, OptimizerConfig, TrainerConfig
from tango_jax.rl.trainer import Trainer

# Explicit sizes that override the preset's (flag -> ModelConfig field).
SIZE_FLAGS = {
    "embed_dim": "embed_dim",
    "layers": "num_layers",
    "heads": "num_heads",
    "kv_heads": "num_kv_heads",
    "head_dim": "head_dim",
    "mlp_dim": "mlp_dim",
    "vocab": "vocab_size",
}


def step_flops(cfg, batch: int, length: int, with_ref: bool) -> float:
    """Forward + backward FLOPs of one step (the reference model adds one forward)."""
    params = cfg.num_params() - cfg.vocab_size * cfg.embed_dim * (
        0 if cfg.tie_word_embeddings else 1
    )
    tokens = batch * length
    matmul = 2 * params * tokens  # forward
    attention = 2 * 2 * cfg.num_layers * cfg.num_heads * cfg.head_dim * length * length * batch / 2
    forward = matmul + attention
    return 3 * forward + (forward if with_ref else 0)


def model_config(args):
    sizes = {f: getattr(args, a) for a, f in SIZE_FLAGS.items() if getattr(args, a)}
    if "embed_dim" in sizes and "num_heads" in sizes and "head_dim" not in sizes:
        sizes["head_dim"] = sizes["embed_dim"] // sizes["num_heads"]
    return presets.get(
        args.preset,
        dtype=dtype_from_name(args.dtype),
        remat=args.remat,
        attention=args.attention,
        lora=LoraConfig(rank=args.lora_rank, alpha=2.0 * args.lora_rank)
        if args.lora_rank
        else LoraConfig(),
        **sizes,
    )


def random_batch(cfg, b: int, pl: int, rl: int, seed: int = 0) -> TrainBatch:
    rng = np.random.default_rng(seed)
    return TrainBatch(
        input_ids=rng.integers(2, cfg.vocab_size, size=(b, pl + rl)).astype(np.int32),
        attention_mask=np.ones((b, pl + rl), bool),
        response_mask=np.ones((b, rl), np.float32),
        advantages=rng.normal(size=(b, rl)).astype(np.float32),
        sample_weights=np.ones((b,), np.float32),
        sampler_logprobs=np.zeros((b, rl), np.float32),
        truncated=np.zeros((b,), np.float32),
    )


class TorchStep:
    """The PyTorch / transformers twin of the tango_jax step (float32 or bf16 autocast)."""

    def __init__(
        self, model: Transformer, opt: OptimizerConfig, loss: LossConfig, batch, micro_batch: int
    ):
        import torch
        import transformers

        from tango_jax.models.hf import iter_hf_tensors, to_host

        self.torch = torch
        # the GPU when JAX has one (one process, one card: the two alternate on it)
        self.device = (
            "cuda" if jax.default_backend() == "gpu" and torch.cuda.is_available() else "cpu"
        )
        cfg = model.config
        hf_cfg = transformers.AutoConfig.for_model(**cfg.to_hf_dict())
        self.model = transformers.AutoModelForCausalLM.from_config(hf_cfg, dtype=torch.float32)
        state = {name: torch.from_numpy(np.array(to_host(x))) for name, x in iter_hf_tensors(model)}
        missing, unexpected = self.model.load_state_dict(state, strict=False)
        missing = [m for m in missing if not (cfg.tie_word_embeddings and m == "lm_head.weight")]
        if missing or unexpected:
            raise RuntimeError(f"weight copy: missing {missing}, unexpected {unexpected}")
        self.model.to(self.device).train()
        if cfg.remat:  # the same recomputation as the JAX step's jax.checkpoint per layer
            self.model.gradient_checkpointing_enable()
        self.opt = torch.optim.AdamW(
            self.model.parameters(),
            lr=opt.learning_rate,
            betas=(opt.b1, opt.b2),
            eps=opt.eps,
            weight_decay=opt.weight_decay,
        )
        self.clip, self.temperature = opt.grad_clip, loss.temperature
        self.autocast = cfg.dtype != np.float32
        self.batch = {
            k: torch.from_numpy(np.asarray(v)).to(self.device) for k, v in batch.arrays().items()
        }
        self.micro_batch = micro_batch

    def _micro_loss(self, bt, count):
        """Loss of rows `bt` divided by the whole batch's token count (exact accumulation)."""
        torch = self.torch
        r = bt["response_mask"].shape[1]
        p = bt["input_ids"].shape[1] - r
        with torch.autocast(self.device, dtype=torch.bfloat16, enabled=self.autocast):
            h = self.model.model(
                input_ids=bt["input_ids"].long(), attention_mask=bt["attention_mask"].long()
            ).last_hidden_state[:, p - 1 : p - 1 + r]
            logits = self.model.lm_head(h).float() / self.temperature
        logp = torch.log_softmax(logits, -1).gather(-1, bt["input_ids"][:, p:, None].long())[..., 0]
        ratio = torch.exp(logp - logp.detach())
        return (-bt["advantages"] * ratio * bt["response_mask"]).sum() / count

    def step(self) -> tuple[float, float]:
        """Backward per micro-batch (gradients add up), then clip and AdamW once."""
        torch, bt = self.torch, self.batch
        count = bt["response_mask"].sum().clamp(min=1)
        self.opt.zero_grad(set_to_none=True)
        loss = 0.0
        for start in range(0, bt["input_ids"].shape[0], self.micro_batch):
            micro = {k: v[start : start + self.micro_batch] for k, v in bt.items()}
            micro_loss = self._micro_loss(micro, count)
            micro_loss.backward()
            loss += float(micro_loss.detach())
        norm = torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.clip)
        self.opt.step()
        if self.device == "cuda":
            torch.cuda.synchronize()  # the update has finished, as the JAX step's metrics fetch
        return loss, float(norm)


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--preset", default="tiny-qwen2")
    for flag in SIZE_FLAGS:
        p.add_argument(f"--{flag.replace('_', '-')}", dest=flag, type=int, default=0,
                       help="override the preset's size (0: keep)")  # fmt: skip
    p.add_argument("--dtype", default="float32", help="compute dtype (params stay float32)")
    p.add_argument("--remat", action="store_true")
    p.add_argument(
        "--attention",
        default="auto",
        choices=ATTENTION_KERNELS,
        help="full-sequence attention kernel (ModelConfig.attention)",
    )
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--micro-batch", type=int, default=0, help="0: the whole batch at once")
    p.add_argument("--prompt-len", type=int, default=96)
    p.add_argument("--response-len", type=int, default=96)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--no-kl", action="store_true", help="no reference model / KL term")
    p.add_argument("--entropy-coef", type=float, default=None,
                   help="default: LossConfig's (0.001), 0 with --against-torch")  # fmt: skip
    p.add_argument("--against-torch", action="store_true",
                   help="also time the same step in PyTorch/transformers, alternating")  # fmt: skip
    p.add_argument(
        "--profile",
        metavar="DIR",
        help="trace one extra step with jax.profiler into DIR (a Perfetto trace too; "
        "summarise it with scripts/bench/trace_summary.py)",
    )
    p.add_argument("--peak-tflops", type=float, help="device peak, for MFU (H100 bf16: 989)")
    p.add_argument(
        "--vocab-block",
        type=int,
        default=0,
        help="LossConfig.logprob_vocab_block: the log-prob head over vocabulary blocks of this "
        "many columns (0: the whole vocabulary at once)",
    )
    p.add_argument("--lora-rank", type=int, default=0, help="LoRA adapters of this rank (0: off)")
    p.add_argument(
        "--xla-flops",
        action="store_true",
        help="also report XLA's FLOP count of the compiled step (compiles it once more)",
    )
    args = p.parse_args(argv)
    if args.against_torch and args.lora_rank:
        p.error("--against-torch times full fine-tuning: drop --lora-rank.")
    if args.against_torch and not args.no_kl:
        p.error("--against-torch compares the step without the KL term: add --no-kl.")
    entropy = args.entropy_coef
    if entropy is None:
        entropy = 0.0 if args.against_torch else LossConfig().entropy_coef
    if args.against_torch and entropy:
        p.error("--against-torch compares the step without the entropy bonus: --entropy-coef 0.")

    cfg = model_config(args)
    mesh = make_mesh(MeshConfig())
    # Eager initialisation, then sharding: on an H100 (2026-11-25) XLA spent over 200 s
    # compiling init_sharded's jitted initialiser of Qwen2.5-0.5B ("Very slow compile"), and
    # the benchmark times the step, not the start-up.
    model = shard_model(Transformer(cfg, rngs=nnx.Rngs(0)), mesh)
    ref = None if args.no_kl else shard_model(Transformer(cfg, rngs=nnx.Rngs(1)), mesh)
    loss = LossConfig(
        kl_coef=0.0 if args.no_kl else 0.001,
        entropy_coef=entropy,
        logprob_vocab_block=args.vocab_block,
    )
    tcfg = TrainerConfig(loss=loss, micro_batch_size=args.micro_batch or args.batch)
    b, pl, rl = args.batch, args.prompt_len, args.response_len
    batch = random_batch(cfg, b, pl, rl)
    twin = (
        TorchStep(model, tcfg.optimizer, loss, batch, tcfg.micro_batch_size)
        if args.against_torch
        else None
    )
    trainer = Trainer(model, tcfg, mesh=mesh, ref_model=ref)

    t0 = time.perf_counter()
    metrics, _ = trainer.step(batch)  # compile + first step
    compile_s = time.perf_counter() - t0
    check = None
    if twin is not None:
        torch_loss, torch_norm = twin.step()  # warm-up; same weights, so same loss and norm
        check = {
            "loss": [metrics["loss"], torch_loss],
            "grad_norm": [metrics["grad_norm"], torch_norm],
        }
    times, torch_times = [], []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        trainer.step(batch)  # returns host metrics: the step has finished
        times.append(time.perf_counter() - t0)
        if twin is not None:
            t0 = time.perf_counter()
            twin.step()
            torch_times.append(time.perf_counter() - t0)
    step_s = statistics.median(times)
    peak_rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB, before any extra compile
    if args.profile:  # one more step under the profiler (not timed)
        with jax.profiler.trace(args.profile, create_perfetto_trace=True):
            trainer.step(batch)
    flops = step_flops(cfg, b, pl + rl, with_ref=not args.no_kl)
    out = {
        "preset": args.preset,
        "params": cfg.num_params(),
        "device": str(jax.devices()[0].device_kind),
        "devices": jax.device_count(),
        "dtype": args.dtype,
        "attention": args.attention,
        "vocab_block": args.vocab_block,
        "batch": b,
        "length": pl + rl,
        "compile_s": round(compile_s, 2),
        "step_s": round(step_s, 4),
        "tokens_per_s": round(b * (pl + rl) / step_s, 1),
        "tflops_per_step": round(flops / 1e12, 4),
        "achieved_tflops": round(flops / step_s / 1e12, 4),
        "lora_rank": args.lora_rank,
        "trained_params": sum(x.size for x in jax.tree.leaves(trainer.params)),
        "opt_state_bytes": sum(x.nbytes for x in jax.tree.leaves(trainer.opt_state)),
        "peak_rss_gb": round(peak_rss / 2**20, 3),
    }
    if args.xla_flops:  # what the compiled program computes (e.g. no frozen-weight gradients)
        with jax.set_mesh(mesh):
            lowered = trainer._jitted.lower(
                trainer.params,
                trainer.opt_state,
                trainer.ref_params,
                trainer._device_batch(batch),
                trainer.frozen,
            )
        cost = lowered.compile().cost_analysis()
        cost = cost[0] if isinstance(cost, list) else cost
        out["xla_tflops_per_step"] = round(cost["flops"] / 1e12, 4)
    if args.peak_tflops:
        out["mfu"] = round(flops / step_s / 1e12 / (args.peak_tflops * jax.device_count()), 4)
    if twin is not None:
        torch_s = statistics.median(torch_times)
        out |= {
            "torch_device": twin.device,
            "torch_threads": twin.torch.get_num_threads(),
            "torch_step_s": round(torch_s, 4),
            "torch_tokens_per_s": round(b * (pl + rl) / torch_s, 1),
            "ratio": round(torch_s / step_s, 3),
            "first_step": check,
        }
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
