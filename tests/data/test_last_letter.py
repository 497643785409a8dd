"""The last-letter task: problems, reference solutions, step truth, splits, SFT sets, the exact
answer check and the tiny tokenizer, on hand-worked examples."""

from __future__ import annotations

import dataclasses

import pytest

from tango_jax.data import last_letter as ll
from tango_jax.data import last_letter_labels as lll
from tango_jax.data import step_truth
from tango_jax.data.datasets import StreamPosition
from tango_jax.models.tokenizer import tiny_tokenizer
from tango_jax.run.feedback import task_reward_kind
from tango_jax.text import answer_check, formats

PROBLEM = ll.LetterProblem(("kaz", "qup", "hjr"))


def test_problem_and_reference_solution_by_hand():
    assert PROBLEM.question == "Last letters of: kaz qup hjr"
    assert PROBLEM.answer == "zpr"
    sol = ll.reference_solution(PROBLEM)
    assert sol.steps == ["kaz: z, z", "qup: p, zp", "hjr: r, zpr"]
    assert sol.text == (
        "<think>\n<step>kaz: z, z</step>\n<step>qup: p, zp</step>\n<step>hjr: r, zpr</step>\n"
        "</think>\n<answer>\\boxed{zpr}</answer>"
    )
    assert sol.correct and ll.parse_question(PROBLEM.question) == PROBLEM
    assert [s.text for s in formats.split_steps(sol.text)] == sol.steps


@pytest.mark.parametrize(
    "steps, want",
    [
        (["kaz: z, z", "qup: p, zp", "hjr: r, zpr"], -1),
        (["kaz: a, a", "qup: p, ap", "hjr: r, apr"], 0),  # wrong letter, carried on right
        (["kaz: z, z", "qup: u, zu", "hjr: r, zur"], 1),  # the first error only
        (["kaz: z, z", "qup: p, pz", "hjr: r, pzr"], 1),  # right letter, wrong concatenation
        (["kaz: z, z", "qup: p, zp", "hjr: r, zp"], 2),  # letter dropped from the string
        (["kaz: z, z", "qup: p, zp"], 2),  # missing step
        (["kaz: z, z", "qup: p, zp", "hjr: r, zpr", "hjr: r, zprr"], 3),  # extra step
        (["kaz: z, z", "hjr: r, zr", "qup: p, zrp"], 1),  # words out of order
        (["kaz z z", "qup: p, zp", "hjr: r, zpr"], 0),  # unreadable step
        ([], 0),
    ],
)
def test_first_error_by_hand(steps, want):
    assert ll.first_error(PROBLEM, steps) == want
    assert step_truth.first_error(PROBLEM.to_problem(), steps) == want


def test_step_truth_dispatch_other_sources():
    arith = "Start with 7. Add 5, then multiply by 3. What is the result?"
    p = dataclasses.replace(PROBLEM.to_problem(), question=arith, source="synthetic-arith")
    assert step_truth.first_error(p, ["7 + 5 = 12", "12 * 3 = 36"]) == -1
    assert step_truth.first_error(p, ["7 + 5 = 13", "13 * 3 = 39"]) == 0
    assert step_truth.first_error(dataclasses.replace(p, source="jsonl"), ["x"]) is None


def test_slipped_solutions_have_their_first_error():
    cfg = ll.LetterConfig()
    for i in range(200):
        problem = ll.problem_at(cfg, i, seed=3)
        sol = ll.slipped_solution(problem, seed=3, alphabet=cfg.alphabet)
        assert not sol.correct
        assert ll.first_error(problem, sol.steps) == sol.first_error
        k = sol.first_error
        assert sol.letters[k] != problem.letters[k]
        assert (
            sol.letters[:k] == problem.letters[:k]
            and sol.letters[k + 1 :] == problem.letters[k + 1 :]
        )


def test_the_natural_slip_is_the_second_to_last_letter():
    problem = ll.LetterProblem(("qa",))  # one word: the slip is at step 0, 'q' for 'a'
    assert ll.slipped_solution(problem, seed=0, alphabet="aq").letters == "q"
    problem = ll.LetterProblem(("aa",))  # same letters: another letter of the alphabet
    assert ll.slipped_solution(problem, seed=0, alphabet="aq").letters == "q"


def test_problems_are_deterministic_in_range_and_split_by_hash():
    cfg = ll.LetterConfig()
    a = [ll.problem_at(cfg, i, seed=1) for i in range(300)]
    assert a == [ll.problem_at(cfg, i, seed=1) for i in range(300)]
    assert a != [ll.problem_at(cfg, i, seed=2) for i in range(300)]
    for p in a:
        assert cfg.min_words <= len(p.words) <= cfg.max_words
        assert all(cfg.min_word_len <= len(w) <= cfg.max_word_len for w in p.words)
        assert set("".join(p.words)) <= set(cfg.alphabet)
        assert not ll.is_held_out(p.question, cfg)
    held = ll.held_out_problems(cfg, 400, seed=0)
    assert len({p.question for p in held}) == 400
    assert all(ll.is_held_out(p.question, cfg) for p in held)
    counts = {len(p.words) for p in held}
    assert counts == set(range(cfg.min_words, cfg.unseen_max_words + 1))
    buckets = [cfg.bucket(len(p.words)) for p in held]
    assert 0.1 < buckets.count("unseen") / len(held) < 0.5  # 2 of 7 word counts


def test_length_buckets():
    cfg = ll.LetterConfig(min_words=2, max_words=10, unseen_max_words=12, sft_max_words=4)
    assert [cfg.bucket(n) for n in (2, 10, 11, 12)] == ["in", "in", "unseen", "unseen"]


def test_stream_batches_and_resume():
    cfg = ll.LetterConfig()
    stream = ll.LetterStream(cfg, 4, seed=5)
    first, second = stream.next_batch(), stream.next_batch()
    assert [p.question for p in first] == [ll.problem_at(cfg, i, seed=5).question for i in range(4)]
    resumed = ll.LetterStream(cfg, 4, seed=5, position=StreamPosition(5, 0, 1))
    assert resumed.next_batch() == second
    assert (
        first[0].source == ll.SOURCE
        and first[0].answer == ll.parse_question(first[0].question).answer
    )


@pytest.mark.parametrize(
    "field, value",
    [
        ("max_words", 1),
        ("unseen_max_words", 3),
        ("min_word_len", 1),
        ("alphabet", "aA"),
        ("alphabet", "aa"),
        ("eval_fraction", 0.0),
        ("sft_max_words", 1),
    ],
)
def test_bad_config_names_the_rule(field, value):
    with pytest.raises(ValueError, match="LetterConfig needs"):
        dataclasses.replace(ll.LetterConfig(), **{field: value})


def test_exact_answer_check():
    text = ll.reference_solution(PROBLEM).text
    score = lambda r, g: answer_check.score_item(answer_check.RewardKind.EXACT, r, g, None)[0]
    assert score(text, "zpr") == 1.0
    assert score(text.replace("{zpr}", "{rpz}"), "zpr") == 0.0  # a permutation is wrong
    assert score(text.replace("{zpr}", "{ zpr }"), "zpr") == 1.0
    assert score("<answer>zpr</answer>", "zpr") == 0.0  # no boxed answer
    assert task_reward_kind([PROBLEM.to_problem()]) is answer_check.RewardKind.EXACT
    arith = dataclasses.replace(PROBLEM.to_problem(), source="synthetic-arith")
    assert task_reward_kind([arith]) is answer_check.RewardKind.MATH


def test_tiny_tokenizer_keeps_every_letter_after_the_first_its_own_token():
    """With the default alphabet no two letters merge: a word's last letter is one token."""
    tok = tiny_tokenizer()
    cfg = ll.LetterConfig()
    for i in range(100):
        problem = ll.problem_at(cfg, i, seed=0)
        text = ll.reference_solution(problem).text
        pieces = [tok.decode([t]) for t in tok(problem.question + "\n" + text)["input_ids"]]
        assert "".join(pieces) == problem.question + "\n" + text  # round trip
        for word in problem.words:
            assert " " + word[0] in pieces or word[0] in pieces
            for c in word[1:]:
                assert c in pieces
        # a piece made of alphabet letters only (a space before allowed) is one letter
        letter_pieces = [
            p.strip() for p in pieces if p.strip() and set(p.strip()) <= set(cfg.alphabet)
        ]
        assert letter_pieces and all(len(p) == 1 for p in letter_pieces)


def test_generator_sft_examples():
    cfg = ll.LetterConfig(slip_fraction=0.25)
    ex = lll.generator_sft_examples(cfg, 400, seed=0)
    assert ex == lll.generator_sft_examples(cfg, 400, seed=0)
    wrong = 0
    for e in ex:
        question = e.prompt.split("User: ")[-1].split("\n")[0]
        problem = ll.parse_question(question)
        assert cfg.min_words <= len(problem.words) <= cfg.sft_max_words
        steps = [s.text for s in formats.split_steps(e.response)]
        assert (ll.first_error(problem, steps) == -1) == e.correct
        assert (formats.last_boxed(e.response) == problem.answer) == e.correct
        wrong += not e.correct
    assert 0.18 < wrong / len(ex) < 0.32


def test_verifier_sft_examples_carry_outcome_labels_only():
    cfg = ll.LetterConfig()
    ex = lll.verifier_sft_examples(cfg, 300, seed=0)
    singles = 0
    for e in ex:
        v = formats.parse_verification(e.response)
        assert v.verdict == (formats.CORRECT if e.correct else formats.INCORRECT)
        k = len(v.step_judgments)
        if k == 1:
            singles += 1
            assert e.no_loss == () and v.step_judgments == ((1,) if e.correct else (-1,))
        else:  # the K > 1 judgments are exempt from the loss
            assert len(e.no_loss) == k
            assert [e.response[a:b] for a, b in e.no_loss] == [
                "CORRECT" if j == 1 else "INCORRECT" for j in v.step_judgments
            ]
        assert "Step 1 Analysis: " in e.response and e.response.count(", ") >= k
    assert 100 < singles < 200
    only = lll.verifier_sft_examples(dataclasses.replace(cfg, verifier_one_word=1.0), 20, seed=0)
    assert all(len(formats.parse_verification(e.response).step_judgments) == 1 for e in only)
    with pytest.raises(ValueError, match="verifier_one_word"):
        dataclasses.replace(cfg, verifier_one_word=1.5)


def test_verification_transcript_by_hand():
    sol = ll.reference_solution(PROBLEM)
    assert lll.verification_transcript(sol, seed=0) == formats.render_verification(
        [1, 1, 1],
        formats.CORRECT,
        [
            "Step 1 Analysis: kaz: z, z z",
            "Step 2 Analysis: qup: p, p p",
            "Step 3 Analysis: hjr: r, r r",
        ],
    )
    slip = ll.LetterSolution(PROBLEM, "zur", first_error=1)  # "qup: u", the natural slip
    text = lll.verification_transcript(slip, seed=0)
    assert "Step 2 Analysis: qup: u, p u" in text
    assert formats.parse_verification(text).verdict == formats.INCORRECT


def test_process_bench_items():
    cfg = ll.LetterConfig()
    items = lll.process_items(cfg, 40, seed=0)
    assert [it.label == -1 for it in items] == [i % 2 == 0 for i in range(40)]
    for it in items:
        problem = ll.parse_question(it.question)
        assert ll.is_held_out(it.question, cfg)
        assert it.num_steps == len(problem.words) <= cfg.max_words
        assert (
            ll.first_error(problem, [s.text for s in formats.split_steps(it.solution)]) == it.label
        )
