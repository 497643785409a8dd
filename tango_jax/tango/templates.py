r"""The prompts of Tango's two models: templates and their rendering (TANGO_SPEC §4.1).

The prompts are plain text, as in the official code; a role with `chat_template` on (an
instruction-tuned model such as SmolLM2-Instruct) gets each one as the user turn of its
tokenizer's chat template instead (`chat_prompt`). The formats they ask for, and their parsers
and format scores, are in `formats.py`.

The prompts follow the structure of the official templates (`data_preprocess/system_prompt.py`)
in our own words. One difference: the official templates are Python strings with `\\\\boxed`,
so the prompt the model sees says `\\boxed{}` (two backslashes); ours say `\boxed{}`, the LaTeX
command that the answer parsers look for.
"""

from __future__ import annotations

import enum
import re
from typing import Any

from tango_jax.tango.formats import split_steps

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


_TEMPLATES = {
    PromptStyle.FULL: (_GENERATOR_TEMPLATE, _VERIFIER_TEMPLATE),
    PromptStyle.COMPACT: (_GENERATOR_TEMPLATE_COMPACT, _VERIFIER_TEMPLATE_COMPACT),
}

_PLACEHOLDER = re.compile(r"\{(question|problem|solution|num_steps)\}")


def _fill(template: str, **values: str) -> str:
    """Substitutes `{name}` placeholders in one pass over the template.

    User text is inserted verbatim and never scanned again, so a question that itself contains
    `{solution}`, `{0}` or unbalanced braces comes through unchanged (str.format would choke on
    it, and chained str.replace calls would substitute inside it).
    """
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def render_generator_prompt(
    question: str, *, evaluation: bool = False, style: PromptStyle = PromptStyle.FULL
) -> str:
    """The generator prompt for `question`: instructions, a worked example, then
    `User: {question}` and `Assistant:` on the next line (no trailing space or newline).

    `evaluation=True` gives the variant used for the benchmarks: the same text with the word
    "mathematical " deleted (the official evaluation sets do this, TANGO_SPEC §4.1).
    `style=COMPACT`: the short variant of the tiny configs (see `PromptStyle`).
    """
    template = _TEMPLATES[PromptStyle(style)][0]
    if evaluation:
        template = template.replace("mathematical ", "")
    return _fill(template, question=question)


def render_verifier_prompt(
    problem: str, solution: str, *, style: PromptStyle = PromptStyle.FULL
) -> str:
    """The verifier prompt for a generator `solution` (its decoded text, special tokens removed)
    to `problem` (the clean question, without the generator template).

    The prompt tells the verifier the step count K = len(split_steps(solution)); it ends with
    `Your Verification:` and a newline. Truncating it to the verifier's prompt budget is the
    caller's business (the official code right-truncates at 4096 tokens, TANGO_SPEC §10.10).
    """
    num_steps = str(len(split_steps(solution)))
    template = _TEMPLATES[PromptStyle(style)][1]
    return _fill(template, problem=problem, solution=solution, num_steps=num_steps)


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
