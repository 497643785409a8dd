"""Entry point: `python -m tango_jax.train --config configs/NAME.py [--config.a.b=value ...]`.

Parses the ml_collections config, converts it once into the typed `RunConfig` (a wrong field
name or value fails here, before any model loads), and runs the Tango loop.
"""

from __future__ import annotations

import logging
import re
import sys

from absl import app, flags
from ml_collections import config_flags

from tango_jax.config import load_run_config
from tango_jax.config_types import ConfigError

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Path to a config file in configs/ (e.g. configs/tiny_arith.py).",
    lock_config=True,
)
flags.mark_flags_as_required(["config"])


def main(argv: list[str]) -> None:
    if len(argv) > 1:
        raise app.UsageError(
            f"unexpected arguments {argv[1:]}; use --config.a.b=value to override."
        )
    logging.basicConfig(
        level=logging.WARNING,
        format="%(asctime)s %(levelname)s %(message)s",
        stream=sys.stdout,
        force=True,
    )
    # Our progress at INFO (tango_jax.* loggers); libraries (orbax, jax, absl) only warnings.
    logging.getLogger("tango_jax").setLevel(logging.INFO)
    logging.getLogger("absl").setLevel(logging.WARNING)
    try:
        cfg = load_run_config(_CONFIG.value)
    except ConfigError as e:
        sys.exit(f"config error: {e}")
    from tango_jax.tango.loop import TangoLoop  # heavy imports only after the config is valid

    final = TangoLoop(cfg).run()
    logging.getLogger("tango_jax").info(
        "finished %s: %s",
        cfg.name,
        " ".join(f"{k}={v:.4f}" for k, v in sorted(final.items()) if k.startswith("eval/")),
    )


def _parse_flags(argv: list[str]) -> list[str]:
    """absl flag parsing, with ml_collections' errors for overrides of unknown fields (raised
    as AttributeError / KeyError from deep inside) turned into a one-line config error."""
    try:
        return flags.FLAGS(argv)
    except (AttributeError, KeyError) as e:
        text = str(e).replace("\\n", " ").replace("\\'", "'").replace("\n", " ")
        unknown = re.search(r"'(\w+)'", text)
        name = unknown.group(1) if unknown else "?"
        hint = re.search(r"Did you mean \"(\w+)\"", text)
        flags_given = [a.split("=", 1)[0] for a in argv[1:] if a.startswith("--config.")]
        bad = next(
            (f for f in flags_given if f.endswith(f".{name}") or f".{name}." in f),
            f"--config ({name})",
        )
        sys.exit(
            f"config error: {bad}: unknown field"
            + (f"; did you mean '{hint.group(1)}'?" if hint else ".")
            + " Every field is documented in tango_jax/config_builders.py."
        )


if __name__ == "__main__":
    app.run(main, flags_parser=_parse_flags)
