r"""Prompt templates from a user's files (`data.template_files`, tango/template_files.py): the
official code's own syntaxes render exactly as the official calls do (jinja2's
`Template(t).render(prompt=q)`, `t.format(problem=, solution=, generator_step_count=)`); the
fallbacks between variants; every bad file fails in preflight naming the field, the file and
the fix; and the run actually prompts with them: SFT, the generator's and verifier's rollout
steps, the held-out evaluation and the benchmark evaluation (OOD variant).

The models are replaced by a sampler that records its prompts and answers with one fixed
solution: what is tested is which text reaches the model, not what the model does with it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jinja2
import pytest

from tango_jax.config import preflight
from tango_jax.config.roles import RoleConfig
from tango_jax.config.run import base_config, load_run_config
from tango_jax.data.datasets import Problem
from tango_jax.eval import benchmarks as benchmark_eval
from tango_jax.metrics.writer import PhaseTimer
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.rollout.base import Completion, FinishReason
from tango_jax.run import evaluation, sft, steps
from tango_jax.run.roles import Role
from tango_jax.run.steps import Purpose
from tango_jax.schema import ConfigError
from tango_jax.tango.kind import Kind
from tango_jax.text import templates as T
from tango_jax.text.answer_check import RewardKind
from tango_jax.text.scoring_pool import OutcomeScorer
from tango_jax.text.template_files import TemplateFiles, load_templates

# The official templates' shapes: a jinja2 generator template and a str.format verifier
# template, whose literal braces are doubled.
OFFICIAL_GENERATOR = "You are a helpful Assistant that solves mathematical problems.\n\nUser: {{prompt}}\nAssistant:\n"  # noqa: E501
OFFICIAL_VERIFIER = (
    "Problem: {problem}\nAssistant's Solution:\n{solution}\n\nThe solution contains "
    "{generator_step_count} steps. End each with \\boxed{{CORRECT}} or \\boxed{{INCORRECT}}.\n"
    "Your Verification:\n"
)
SOLUTION = r"<think><step>1 + 1 = 2</step><step>so 2</step></think><answer>\boxed{2}</answer>"
QUESTION = "What is {x} + 1 when x = 1? }{"  # braces in user text come through unchanged


def _write(path: Path, template: str, syntax: str | None = None) -> str:
    if syntax is None:
        path.write_text(template, encoding="utf-8")
    else:
        path.write_text(json.dumps({"template": template, "syntax": syntax}), encoding="utf-8")
    return str(path)


def test_the_official_syntaxes_render_as_the_official_code_does(tmp_path):
    files = TemplateFiles(
        generator_train=_write(tmp_path / "g.json", OFFICIAL_GENERATOR, "jinja2"),
        verifier_train=_write(tmp_path / "v.json", OFFICIAL_VERIFIER, "format"),
    )
    t = load_templates(T.PromptStyle.FULL, files)
    prompt = T.render_generator_prompt(QUESTION, style=t)
    assert prompt == jinja2.Template(OFFICIAL_GENERATOR).render(prompt=QUESTION)
    assert prompt.endswith(f"User: {QUESTION}\nAssistant:")  # jinja2 drops the last newline
    verifier = T.render_verifier_prompt(QUESTION, SOLUTION, style=t)
    assert verifier == OFFICIAL_VERIFIER.format(
        problem=QUESTION, solution=SOLUTION, generator_step_count=2
    )
    assert "\\boxed{CORRECT}" in verifier and "{{" not in verifier
    # Unset variants: eval = train with "mathematical " deleted (the official evaluation sets),
    # ood = eval, the verifier's eval = its train.
    evaluation = T.render_generator_prompt(QUESTION, variant=T.Variant.EVAL, style=t)
    assert evaluation == prompt.replace("mathematical ", "") != prompt
    assert T.render_generator_prompt(QUESTION, variant=T.Variant.OOD, style=t) == evaluation
    assert T.render_verifier_prompt(QUESTION, SOLUTION, variant=T.Variant.EVAL, style=t) == (
        verifier
    )


def test_plain_text_files_and_the_builtin_fallbacks(tmp_path):
    ood = "Answer the question.\n\\boxed{} {question}\nAssistant:"
    files = TemplateFiles(generator_ood=_write(tmp_path / "ood.txt", ood))
    t = load_templates(T.PromptStyle.COMPACT, files)
    assert T.render_generator_prompt(QUESTION, variant=T.Variant.OOD, style=t) == (
        ood.replace("{question}", QUESTION)
    )
    for variant in (T.Variant.TRAIN, T.Variant.EVAL):  # the others stay compact's built-ins
        assert T.render_generator_prompt(QUESTION, variant=variant, style=t) == (
            T.render_generator_prompt(QUESTION, variant=variant, style=T.PromptStyle.COMPACT)
        )
    assert load_templates(T.PromptStyle.FULL, TemplateFiles()) == T.PromptTemplates.builtin(
        T.PromptStyle.FULL
    )


def _config(**files: str):
    c = base_config()
    c.generator.model.preset = c.verifier.model.preset = "tiny-qwen2"
    c.sft.generator.num_examples = 8
    for field, path in files.items():
        setattr(c.data.template_files, field, path)
    return load_run_config(c)


@pytest.mark.parametrize(
    "field, name, content, says",
    [
        ("generator_train", "missing.txt", None, "does not exist"),
        (
            "generator_eval",
            "g.txt",
            "Solve: {problem}\nAssistant:",
            "unknown placeholder(s) {problem}",
        ),
        ("generator_ood", "g.txt", "no placeholder at all", "has no {question} placeholder"),
        ("verifier_train", "v.txt", "{problem} only", "has no {solution} placeholder"),
        (
            "verifier_eval",
            "v.json",
            '{"template": "{problem} {solution} {steps}", "syntax": "format"}',
            "unknown placeholder(s) {steps}",
        ),
        (
            "generator_train",
            "g.json",
            '{"template": "{{ questoin }}", "syntax": "jinja2"}',
            "unknown placeholder(s) {{ questoin }}",
        ),
        (
            "generator_train",
            "g.json",
            '{"template": "{question} }", "syntax": "format"}',
            "does not parse as a format template",
        ),
        (
            "generator_train",
            "g.json",
            '{"template": "{question}", "syntax": "mustache"}',
            "use one of",
        ),
        ("generator_train", "g.json", '{"text": "{question}"}', "must hold a JSON object"),
        ("generator_train", "g.json", "{question}", "is not JSON"),
    ],
)
def test_bad_template_files_fail_in_preflight_naming_field_file_and_fix(
    tmp_path, field, name, content, says
):
    path = tmp_path / name
    if content is not None:
        path.write_text(content, encoding="utf-8")
    cfg = _config(**{field: str(path)})  # building the config reads no file
    with pytest.raises(ConfigError) as e:
        preflight.check_paths(cfg)
    message = str(e.value)
    assert message.startswith(f"config.data.template_files.{field} ({str(path)!r})")
    assert says in message and "\n" not in message


# --- the run prompts with them ------------------------------------------------------------------


class RecordingSampler:
    """Answers every prompt with SOLUTION and keeps the prompts' texts."""

    weight_version = 0

    def __init__(self, tokenizer):
        self.ids = tuple(tokenizer(SOLUTION, add_special_tokens=False)["input_ids"])
        self.prompts: list[str] = []

    def generate(self, prompts, params):
        self.prompts += [p.text for p in prompts]
        done = Completion(self.ids, SOLUTION, (0.0,) * len(self.ids), FinishReason.STOP, 0)
        return [[done] * params.n for _ in prompts]

    def close(self):
        pass


def _role(kind: Kind) -> tuple[Role, RecordingSampler]:
    tok = tiny_tokenizer()
    sampler = RecordingSampler(tok)
    cfg = dataclasses.replace(RoleConfig(), max_prompt_len=4096)
    return Role(kind, cfg, Path("."), None, tok, None, sampler), sampler


@pytest.fixture(scope="module")
def user_templates(tmp_path_factory):
    d = tmp_path_factory.mktemp("templates")
    files = {
        f"{role}_{variant}": _write(d / f"{role}_{variant}.txt", text)
        for role, placeholders in (
            ("generator", "{question}"),
            ("verifier", "{problem} {solution} {num_steps}"),
        )
        for variant in (("train", "eval", "ood") if role == "generator" else ("train", "eval"))
        for text in [f"USER {role} {variant}: {placeholders}"]
    }
    return _config(**files)


@pytest.fixture(scope="module")
def scorer():
    with OutcomeScorer(num_workers=1, timeout_s=10.0) as s:
        yield s


PROBLEMS = [
    Problem("What is 1 + 1?", "\\boxed{2}", "test", "p0"),
    Problem("What is 3 - 1?", "\\boxed{2}", "test", "p1"),
]


def test_training_steps_and_sft_prompt_with_the_users_templates(user_templates, scorer):
    cfg = user_templates
    (gen, gen_rec), (ver, ver_rec) = _role(Kind.GENERATOR), _role(Kind.VERIFIER)
    ctx = steps.StepContext(cfg, gen, ver, scorer)
    timer = PhaseTimer()
    _, solutions, _ = steps._sample_and_score(
        ctx, PROBLEMS, 2, Purpose.GENERATOR_ROLLOUTS, global_step=0, timer=timer
    )
    assert gen_rec.prompts == [f"USER generator train: {p.question}" for p in PROBLEMS]
    assert [s.correct for s in solutions] == [True] * 4
    steps._judge(ctx, solutions[:1], 1, Purpose.FEEDBACK, global_step=0, timer=timer)
    assert ver_rec.prompts == [f"USER verifier train: {PROBLEMS[0].question} {SOLUTION} 2"]
    generator_sft = sft.sft_examples(cfg, Kind.GENERATOR)  # the synthetic task's SFT set
    assert generator_sft and all(p.startswith("USER generator train: ") for p, *_ in generator_sft)


def test_evaluation_prompts_with_the_users_eval_and_ood_templates(user_templates, scorer, tmp_path):
    cfg = user_templates
    (gen, gen_rec), (ver, ver_rec) = _role(Kind.GENERATOR), _role(Kind.VERIFIER)
    settings = dataclasses.replace(
        evaluation.EvalSettings.from_config(cfg), timeout_s=10.0, sampled_seed=None
    )
    assert (settings.kind, settings.style) == (RewardKind.MATH, cfg.data.templates)
    metrics = evaluation.evaluate(gen, ver, PROBLEMS, scorer, settings, timer=PhaseTimer())
    assert metrics["eval/generator/accuracy"] == 1.0
    assert gen_rec.prompts == [f"USER generator eval: {p.question}" for p in PROBLEMS]
    assert ver_rec.prompts == [f"USER verifier eval: {p.question} {SOLUTION} 2" for p in PROBLEMS]
    gen_rec.prompts.clear()
    kept, dropped = benchmark_eval.fits_prompt(gen, PROBLEMS, cfg.data.templates, T.Variant.OOD)
    assert (kept, dropped) == (PROBLEMS, [])
    benchmark_eval.run_generator_benchmark(
        gen,
        "BGQA",
        PROBLEMS,
        benchmark_eval.ResultLog(tmp_path / "BGQA.jsonl"),
        scorer=scorer,
        settings=benchmark_eval.BenchmarkSettings.of(
            "BGQA", style=cfg.data.templates, timeout_s=10.0, batch_size=2
        ),
    )
    assert gen_rec.prompts == [f"USER generator ood: {p.question}" for p in PROBLEMS]
