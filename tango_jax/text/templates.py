r"""The prompts of Tango's two models: templates and their rendering (TANGO_SPEC §4.1).

The prompts are plain text, as in the official code; a role with `chat_template` on (an
instruction-tuned model such as SmolLM2-Instruct) gets each one as the user turn of its
tokenizer's chat template instead (`chat_prompt`). The formats they ask for, and their parsers
and format scores, are in `formats.py`.

The prompts follow the structure of the official templates (`data_preprocess/system_prompt.py`)
in our own words. One difference: the official templates are Python strings with `\\\\boxed`,
so the prompt the model sees says `\\boxed{}` (two backslashes); ours say `\boxed{}`, the LaTeX
command that the answer parsers look for.

A user's own templates (the official ones verbatim, say) replace these per role and variant:
`template_files.py` reads them from the files that `data.template_files` names, into the
`PromptTemplates` that every render function takes as `style`.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import re
from typing import Any

from tango_jax.text.formats import split_steps

_GENERATOR_TEMPLATE = r"""You are a helpful Assistant who solves mathematical problems step by step.
Your job is to write out the whole solution process inside specific tags.

You MUST use exactly this format:
1. Begin with a <think> section that holds your step-by-step reasoning.
2. Inside <think>, put every separate logical step in its own <step> </step> tags.
3. After </think>, give the final answer inside <answer> </answer> tags, written with \boxed{}.

An example of the required format:

User: Calculate 15 - (3 * 2).
Assistant: <think>
<step>Start inside the parentheses: 3 is multiplied by 2.</step>
<step>3 * 2 gives 6.</step>
<step>Then take this result away from 15, that is 15 minus 6.</step>
<step>15 - 6 gives 9.</step>
</think>
<answer>\boxed{9}</answer>

Keep strictly to this format.
- Write ONLY content inside the <think>, <step> and <answer> tags.
- Write NOTHING before the opening <think> tag or after the closing </answer> tag.
- Every part of your step-by-step reasoning goes inside <step> </step> tags within <think> </think>.
- Put the final answer inside <answer>\boxed{}</answer>; it is read automatically from \boxed{}.

User: {question}
Assistant:"""

_VERIFIER_TEMPLATE = r"""You are a verification assistant who specializes in mathematical reasoning. Your job is to check the given solution carefully, one step at a time, for mathematical correctness and logical coherence. You will see the original problem and the Assistant's solution, which is split into a known number of steps inside <step> tags. You MUST check EVERY <step> block of the Assistant's solution and give your judgment in exactly the format described below. You MUST output ONLY the content inside the required verification tags, and nothing else.


Below are the problem to verify and the Assistant's solution:

Problem: {problem}
Assistant's Solution:
{solution}

The Assistant's solution has {num_steps} steps inside <step> tags.

Verify this solution step by step. For each of the {num_steps} <step> blocks of the Assistant's Solution, you MUST write ONE matching verification analysis inside a <step> tag in the <step_verification> section. Once every step is verified, give a final overall judgment inside the <final_verification> tag.

You MUST use exactly this format:

<step_verification>
<step>Step 1 Analysis: Your detailed verification reasoning for this step. End with exactly one judgement: \boxed{CORRECT} or \boxed{INCORRECT}</step>
<step>Step 2 Analysis: Your detailed verification reasoning for this step. End with exactly one judgement: \boxed{CORRECT} or \boxed{INCORRECT}</step>
... [CONTINUE for ALL {num_steps} <step> blocks of the Assistant's Solution] ...
</step_verification>

<final_verification>\boxed{CORRECT} or \boxed{INCORRECT}</final_verification>

An example:

Problem: What is 5 * 3 + 1?
Assistant's Solution:
<think>
<step>Multiply 5 by 3 first: 5 * 3 = 15.</step>
<step>Then add 1 to that result: 15 + 1 = 16.</step>
</think>
<answer>\boxed{16}</answer>

Your Verification:
<step_verification>
<step>Step 1 Analysis: 5 * 3 is computed correctly as 15, so this step is mathematically sound. \boxed{CORRECT}</step>
<step>Step 2 Analysis: Adding 1 to the previous result 15 gives 16, which is right; the step follows logically and is accurate. \boxed{CORRECT}</step>
</step_verification>
<final_verification>\boxed{CORRECT}</final_verification>

IMPORTANT INSTRUCTIONS (read them carefully):
1. The Assistant's solution has {num_steps} steps. You MUST analyze and verify EACH ONE of them. Your <step_verification> section MUST contain exactly {num_steps} <step> tags.
2. Analyze each step and give YOUR OWN verification reasoning; do NOT copy the text of the original solution.
3. Every verification <step> must end with EXACTLY ONE judgement: \boxed{CORRECT} or \boxed{INCORRECT}.
4. Your <final_verification> must judge whether the solution as a whole, and its final answer, are correct.
5. Output ONLY the content inside the <step_verification> and <final_verification> tags. Output nothing else.

Your Verification:
"""  # noqa: E501  (the template's lines are its prompt's lines)

# Compact variants for the tiny configs: the same structure (role line; problem and solution;
# the step count; the closing cue) without the format specification and worked example, which
# a model learns from its format SFT anyway. With the tiny 512-token vocabulary the full
# templates cost ~495 (generator) and ~1045 (verifier) prompt tokens on the synthetic task,
# several times a tiny model's whole response; the compact ones ~66 and ~133.
_GENERATOR_TEMPLATE_COMPACT = r"""Solve the problem step by step: <think><step>...</step>...</think><answer>\boxed{}</answer>

User: {question}
Assistant:"""  # noqa: E501

_VERIFIER_TEMPLATE_COMPACT = r"""Verify every step of the Assistant's solution to the problem.

Problem: {problem}
Assistant's Solution:
{solution}

The Assistant's solution has {num_steps} steps inside <step> tags.

Your Verification:
"""


class PromptStyle(enum.Enum):
    FULL = "full"  # the official templates' structure and content (the paper's runs)
    COMPACT = "compact"  # the same structure, a few dozen tokens (tiny configs)


class Variant(enum.Enum):
    """Where a prompt is used. The generator has all three; the verifier TRAIN and EVAL."""

    TRAIN = "train"  # RL rollouts and SFT prompts
    EVAL = "eval"  # held-out evaluation and the math benchmarks; the verifier: its evaluation
    OOD = "ood"  # the out-of-domain benchmarks (BGQA, CRUXEval, StrategyQA, TableBench)


class Syntax(enum.Enum):
    """How a template marks its placeholders."""

    TANGO = "tango"  # {name}; every other brace is literal (the built-in templates)
    FORMAT = "format"  # Python str.format: {name}, {{ and }} literal (the official verifier's)
    JINJA2 = "jinja2"  # {{ name }}, rendered by jinja2.Template (the official generator's)


# Placeholder -> the value it receives. `prompt` and `generator_step_count` are the official
# code's names (its generator template renders `prompt`, its verifier `generator_step_count`).
GENERATOR_PLACEHOLDERS = {"question": "question", "prompt": "question"}
VERIFIER_PLACEHOLDERS = {
    "problem": "problem",
    "solution": "solution",
    "num_steps": "num_steps",
    "generator_step_count": "num_steps",
}
_TANGO_PLACEHOLDER = re.compile(
    r"\{(" + "|".join(GENERATOR_PLACEHOLDERS | VERIFIER_PLACEHOLDERS) + r")\}"
)


@dataclasses.dataclass(frozen=True)
class Template:
    """One prompt template; `render(question=...)` or `render(problem=, solution=, num_steps=)`
    fills its placeholders (an alias receives the value of its canonical name)."""

    text: str
    syntax: Syntax = Syntax.TANGO

    @functools.cached_property
    def _jinja(self) -> Any:  # compiled once per template
        import jinja2

        return jinja2.Template(self.text, undefined=jinja2.StrictUndefined)

    def render(self, **values: str) -> str:
        named = {
            alias: values[name]
            for alias, name in (GENERATOR_PLACEHOLDERS | VERIFIER_PLACEHOLDERS).items()
            if name in values
        }
        if self.syntax is Syntax.FORMAT:
            return self.text.format(**named)
        if self.syntax is Syntax.JINJA2:
            return self._jinja.render(**named)
        return _fill(self.text, **named)


@dataclasses.dataclass(frozen=True)
class PromptTemplates:
    """The templates a run uses, one per role and variant (`PromptTemplates.builtin(style)`, or
    `template_files.load_templates` for a user's files)."""

    generator_train: Template
    generator_eval: Template
    generator_ood: Template
    verifier_train: Template
    verifier_eval: Template

    @classmethod
    def builtin(cls, style: PromptStyle) -> PromptTemplates:
        generator, verifier = (Template(t) for t in _TEMPLATES[PromptStyle(style)])
        evaluation = evaluation_variant(generator)
        return cls(generator, evaluation, evaluation, verifier, verifier)

    def generator(self, variant: Variant) -> Template:
        return getattr(self, f"generator_{Variant(variant).value}")

    def verifier(self, variant: Variant) -> Template:
        if variant is Variant.OOD:
            raise ValueError("the verifier has no out-of-domain template (variants train, eval).")
        return getattr(self, f"verifier_{Variant(variant).value}")


def evaluation_variant(template: Template) -> Template:
    """The generator's evaluation template: its training one with the word "mathematical "
    deleted, as the official evaluation sets do (TANGO_SPEC §4.1)."""
    return dataclasses.replace(template, text=template.text.replace("mathematical ", ""))


_TEMPLATES = {
    PromptStyle.FULL: (_GENERATOR_TEMPLATE, _VERIFIER_TEMPLATE),
    PromptStyle.COMPACT: (_GENERATOR_TEMPLATE_COMPACT, _VERIFIER_TEMPLATE_COMPACT),
}
_BUILTIN = {s: PromptTemplates.builtin(s) for s in PromptStyle}

# What every render function takes as `style`: a built-in style, or a run's templates.
Templates = PromptStyle | PromptTemplates


def resolve(style: Templates) -> PromptTemplates:
    return style if isinstance(style, PromptTemplates) else _BUILTIN[PromptStyle(style)]


def _fill(template: str, **values: str) -> str:
    """Substitutes `{name}` placeholders in one pass over the template.

    User text is inserted verbatim and never scanned again, so a question that itself contains
    `{solution}`, `{0}` or unbalanced braces comes through unchanged (str.format would choke on
    it, and chained str.replace calls would substitute inside it).
    """
    return _TANGO_PLACEHOLDER.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def render_generator_prompt(
    question: str, *, variant: Variant = Variant.TRAIN, style: Templates = PromptStyle.FULL
) -> str:
    """The generator prompt for `question`: instructions, a worked example, then
    `User: {question}` and `Assistant:` on the next line (no trailing space or newline).

    `variant=EVAL` (and `OOD`) gives the variant used for the benchmarks: built in, the same
    text with the word "mathematical " deleted (the official evaluation sets do this,
    TANGO_SPEC §4.1). `style=COMPACT`: the short variant of the tiny configs (see
    `PromptStyle`); a `PromptTemplates`: a run's templates (a user's files).
    """
    return resolve(style).generator(variant).render(question=question)


def render_verifier_prompt(
    problem: str,
    solution: str,
    *,
    variant: Variant = Variant.TRAIN,
    style: Templates = PromptStyle.FULL,
) -> str:
    """The verifier prompt for a generator `solution` (its decoded text, special tokens removed)
    to `problem` (the clean question, without the generator template).

    The prompt tells the verifier the step count K = len(split_steps(solution)); it ends with
    `Your Verification:` and a newline. Truncating it to the verifier's prompt budget is the
    caller's business (the official code right-truncates at 4096 tokens, TANGO_SPEC §10.10).
    `variant=EVAL`: the template of the verifier's evaluation (built in: the training one).
    """
    num_steps = str(len(split_steps(solution)))
    template = resolve(style).verifier(variant)
    return template.render(problem=problem, solution=solution, num_steps=num_steps)


def chat_prompt(text: str, tokenizer: Any) -> str:
    """`text` as the single user turn of `tokenizer`'s chat template, followed by the assistant
    cue (`add_generation_prompt`), as a string whose special tokens the tokenizer parses back
    (`tokenizer(chat_prompt(t, tok), add_special_tokens=False)` gives the ids of
    `apply_chat_template(..., tokenize=True)`). The template's default system turn, if it has
    one, stays: it is what the model was tuned with.
    """
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"chat_template=True, but the tokenizer of {tokenizer.name_or_path!r} has no chat "
            "template; set the role's chat_template to False (plain-text prompts)."
        )
    messages = [{"role": "user", "content": text}]
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
