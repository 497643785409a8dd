"""The studies: runs of the tiny configs over seeds, paired by seed, their summaries (tables
with 95% intervals, plots, the threshold-free step ranking), and the measurement a study's
start is chosen by (`chain_room`).

    python -m tango_jax.study                                       # arithmetic, seeds 1 2 3
    python -m tango_jax.study --task last_letter --seeds 1 2 3 --root runs/letters
    python -m tango_jax.study --task last_letter --summary-only ...  # tables from the records

    python -m tango_jax.study.dynamic_sampling --seeds 1 2 3        # DAPO's dynamic sampling
    python -m tango_jax.study.chain_room --config configs/tiny_chains.py:grpo --generator DIR

`arith.py`: Tango against GRPO and the fixed verifier on configs/tiny_arith.py (claim 1), and
the run, collect and interval helpers the other studies share;
`letters.py`: the arms of configs/tiny_letters.py and the claim-2 summary (docs/last_letter.md);
`arms.py`: the claim-2 arms as config transforms, which the letters and chains configs apply;
`dynamic_sampling.py`: tiny_arith with and without DAPO's dynamic sampling, paired by seed
(docs/dynamic_sampling.md);
`chain_room.py`: how much room a generator checkpoint leaves RL on an arithmetic config
(docs/chains.md).
"""
