"""`python -m tango_jax.study`: the command line of both studies (tango_jax/study/)."""

from __future__ import annotations

import argparse
import sys

from tango_jax.study import arith, letters


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(
        prog="python -m tango_jax.study",
        description=__doc__ + arith.__doc__,
        formatter_class=argparse.RawTextHelpFormatter,
    )
    p.add_argument(
        "--task",
        default="arith",
        choices=("arith", "last_letter"),
        help="arith: configs/tiny_arith.py (this module); last_letter: configs/tiny_letters.py "
        "with its arms and the claim-2 summary (tango_jax/study/letters.py)",
    )
    p.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    p.add_argument("--variants", nargs="+", default=None, help="arms (default: every one)")
    p.add_argument("--root", default="runs/study")
    p.add_argument("--jobs", type=int, default=1, help="runs at the same time")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="a --config.FIELD=VALUE override for every run (repeatable)",
    )
    p.add_argument(
        "--sft-from",
        default="",
        help="a directory with generator/ and verifier/ SFT checkpoints every run starts from "
        "(default: the shipped tango_jax/assets/tiny_arith_sft/)",
    )
    p.add_argument(
        "--sft-per-seed",
        action="store_true",
        help="each seed first makes its own SFT (scripts/assets/make_tiny_sft.py --seed S)",
    )
    p.add_argument(
        "--length",
        default="study",
        choices=("study", "fast"),
        help="last_letter: the runs' length (configs/tiny_letters.py): study, 36 generator "
        "updates (docs/last_letter.md's results, ~6 h for the primary arms over 10 seeds); fast, "
        "12 updates, ~3 h, where the oracle's gain and so the gate are lost (docs/last_letter.md, "
        "'The short study')",
    )
    p.add_argument("--summary-only", action="store_true")
    p.add_argument(
        "--summary-dir",
        default="",
        help="last_letter: where results.json, table.md and fig4.png go (default --root)",
    )
    args = p.parse_args(argv)
    if args.task != "last_letter" and args.length != "study":
        p.error(f"--length {args.length}: only --task last_letter has lengths; leave it out.")
    if args.task == "last_letter":
        return letters.main(args)
    return arith.main(args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
