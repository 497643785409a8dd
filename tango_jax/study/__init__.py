"""The seed studies: runs of the tiny configs over seeds, paired by seed, and their summaries
(tables with 95% intervals, plots, the threshold-free step ranking).

    python -m tango_jax.study                                       # arithmetic, seeds 1 2 3
    python -m tango_jax.study --task last_letter --seeds 1 2 3 --root runs/letters
    python -m tango_jax.study --task last_letter --summary-only ...  # tables from the records

`arith.py`: Tango against GRPO and the fixed verifier on configs/tiny_arith.py (claim 1);
`letters.py`: the arms of configs/tiny_letters.py and the claim-2 summary (docs/last_letter.md);
`arms.py`: the claim-2 arms as config transforms, which the letters and chains configs apply.
"""
