"""Prompts inside a chat template (`RoleConfig.chat_template`, templates.chat_prompt): the ids a
role samples from and its SFT trains on equal `transformers`' `apply_chat_template` on the real
SmolLM2-135M-Instruct tokenizer; without a chat template it is a named error.

The loop smoke test runs configs/smollm2_arith.py for one SFT step per role and one RL step of
each kind, with tiny budgets, on the real model.
"""

import pytest

from tango_jax.config.roles import RoleConfig
from tango_jax.data import synthetic_labels
from tango_jax.data.datasets import Problem
from tango_jax.data.prompts import drop_overlong
from tango_jax.data.synthetic import ArithConfig
from tango_jax.models.tokenizer import TINY_TOKENIZER_DIR, load_tokenizer
from tango_jax.run.roles import Role
from tango_jax.run.sft import encode_examples
from tango_jax.tango.kind import Kind
from tango_jax.text import templates

STYLES = list(templates.PromptStyle)


def hf_chat_ids(tokenizer, text: str) -> list[int]:
    """The reference: transformers renders and tokenizes the user turn itself."""
    out = tokenizer.apply_chat_template(
        [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
    )
    return list(out["input_ids"] if hasattr(out, "keys") else out)


def role(kind: Kind, tokenizer, *, chat_template: bool, max_prompt_len: int = 2048) -> Role:
    """A Role for prompt encoding only: encode() touches the config and tokenizer, nothing else
    (no model, trainer or sampler is built)."""
    cfg = RoleConfig(chat_template=chat_template, max_prompt_len=max_prompt_len)
    return Role(kind, cfg, None, None, tokenizer, None, None)


def prompt_texts(style: templates.PromptStyle) -> list[tuple[Kind, str]]:
    """Generator and verifier prompts of the synthetic task, a wrong solution among them."""
    arith = ArithConfig()
    gens = synthetic_labels.generator_sft_examples(arith, 2, seed=3, style=style)
    vers = synthetic_labels.verifier_sft_examples(arith, 2, seed=3, style=style)
    return [(Kind.GENERATOR, e.prompt) for e in gens] + [(Kind.VERIFIER, e.prompt) for e in vers]


def test_without_a_chat_template_the_error_names_the_field():
    tiny = load_tokenizer(TINY_TOKENIZER_DIR)
    gen = role(Kind.GENERATOR, tiny, chat_template=True)
    with pytest.raises(ValueError, match="has no chat template; set the role's chat_template"):
        gen.encode("What is 1 + 1?")
    plain = role(Kind.GENERATOR, tiny, chat_template=False).encode("What is 1 + 1?")
    assert list(plain.token_ids) == tiny("What is 1 + 1?", add_special_tokens=False)["input_ids"]


@pytest.fixture(scope="module")
def smol_tokenizer(smollm2_dir):
    return load_tokenizer(smollm2_dir)


@pytest.mark.real_model
@pytest.mark.parametrize("style", STYLES, ids=[s.value for s in STYLES])
def test_role_prompts_equal_transformers_apply_chat_template(smol_tokenizer, style):
    """Role.encode (RL rollouts, evaluation, the verifier's feedback) gives the ids of
    `apply_chat_template(tokenize=True)` for generator and verifier prompts of both styles,
    with the system turn, the user turn and the assistant cue around the Tango prompt."""
    for kind, text in prompt_texts(style):
        got = role(kind, smol_tokenizer, chat_template=True).encode(text)
        ref = hf_chat_ids(smol_tokenizer, text)
        assert list(got.token_ids) == ref, (kind, text[:60])
        assert got.text.endswith("<|im_end|>\n<|im_start|>assistant\n")
        assert text in got.text and got.text.startswith("<|im_start|>system\n")
        plain = role(kind, smol_tokenizer, chat_template=False).encode(text)
        assert plain.text == text and len(plain.token_ids) < len(ref)


@pytest.mark.real_model
def test_overlong_filter_counts_the_template(smol_tokenizer):
    """A generator prompt that fits plain but not inside the chat template is dropped when the
    data loads (with chat_template), so Role.encode never meets an overlong one."""
    style = templates.PromptStyle.COMPACT
    problems = [Problem(f"What is {i} + {i}?", str(2 * i), "test", str(i)) for i in (1, 2)]
    plain_len = len(
        smol_tokenizer(
            templates.render_generator_prompt(problems[0].question, style=style),
            add_special_tokens=False,
        )["input_ids"]
    )
    chat_len = len(
        hf_chat_ids(
            smol_tokenizer, templates.render_generator_prompt(problems[0].question, style=style)
        )
    )
    assert plain_len < chat_len
    assert drop_overlong(problems, "train", smol_tokenizer, plain_len, style) == problems
    with pytest.raises(ValueError, match="every train problem's prompt is longer"):
        drop_overlong(problems, "train", smol_tokenizer, plain_len, style, chat_template=True)
    kept = drop_overlong(problems, "train", smol_tokenizer, chat_len, style, chat_template=True)
    assert kept == problems
    gen = role(Kind.GENERATOR, smol_tokenizer, chat_template=True, max_prompt_len=chat_len)
    gen.encode(templates.render_generator_prompt(problems[0].question, style=style))


@pytest.mark.real_model
def test_sft_pairs_are_encoded_as_rl_sees_the_prompt(smol_tokenizer):
    """The format SFT trains on the chat-template prompt (the ids RL samples from) and on the
    response ended by <|im_end|>, the end of the assistant turn in the template."""
    examples = [
        (t, "<think>\n<step>1 + 1 = 2</step>\n</think>") for _, t in prompt_texts(STYLES[1])
    ]
    encoded = encode_examples(examples, smol_tokenizer, chat_template=True)
    for (prompt, response), (p_ids, r_ids, loss_mask) in zip(examples, encoded):
        assert loss_mask is None  # no no_loss spans: every response token is learned
        assert p_ids == hf_chat_ids(smol_tokenizer, prompt)
        full = smol_tokenizer.apply_chat_template(
            [{"role": "user", "content": prompt}, {"role": "assistant", "content": response}],
            tokenize=True,
        )
        full = list(full["input_ids"] if hasattr(full, "keys") else full)
        # the template's assistant turn is the response, <|im_end|>, then a newline
        assert p_ids + r_ids == full[: len(p_ids) + len(r_ids)]
        assert r_ids[-1] == smol_tokenizer.convert_tokens_to_ids("<|im_end|>")
    plain = encode_examples(examples[:1], smol_tokenizer, chat_template=False)
    assert plain[0][0] == smol_tokenizer(examples[0][0], add_special_tokens=False)["input_ids"]
