"""The command line's pieces (config/cli.py): list overrides as users write them, the field
listing with types, defaults and comments, the config file check, the help text."""

from __future__ import annotations

import dataclasses
import enum
from pathlib import Path

import pytest

from tango_jax.config import cli
from tango_jax.config.files import load_config_file
from tango_jax.config.run import RunConfig, base_config
from tango_jax.schema import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
SYNTAX = "write a list as a,b"


@pytest.mark.parametrize(
    "value, element, expected",
    [
        ("a,b", str, ("a", "b")),
        ("a, b", str, ("a", "b")),
        ("[a,b]", str, ("a", "b")),
        ("['a', 'b']", str, ("a", "b")),
        ('("a","b")', str, ("a", "b")),
        ('("4,5", "6,7")', str, ("4,5", "6,7")),  # items with commas: the quoted form
        ("a", str, ("a",)),
        ("a,", str, ("a",)),
        ("", str, ()),
        ("()", str, ()),
        ("[]", str, ()),
        ("0,1", int, (0, 1)),
        ("[0, 1]", int, (0, 1)),
        ("(0,)", int, (0,)),
        ("0.5,2", float, (0.5, 2.0)),
    ],
)
def test_lists_parse_as_users_write_them(value, element, expected):
    assert cli.parse_sequence(value, element, "--config.x") == expected


@pytest.mark.parametrize("value, element", [("a,,b", str), ("1,x", int), ("[1, x]", int)])
def test_an_unreadable_list_names_the_accepted_syntax(value, element):
    with pytest.raises(ConfigError, match=f"--config.x: .*{SYNTAX}"):
        cli.parse_sequence(value, element, "--config.x")


def test_list_overrides_are_rewritten_for_ml_collections_and_nothing_else():
    argv = [
        "prog",
        "--config=configs/tiny_arith.py",
        "--config.wandb.tags=a,b",
        "--config.distributed.local_device_ids",
        "[0, 1]",
        "--config.resume_may_change=schedule.total_steps",
        "--config.generator.sampler.vllm.urls=http://a:8100,http://b:8100",
        "--config.wandb.project=a,b",  # a string field: left as written
        "--config.no_such_field=a,b",  # unknown: left for train.py's message
    ]
    assert cli.normalise_sequences(argv, RunConfig) == [
        "prog",
        "--config=configs/tiny_arith.py",
        "--config.wandb.tags=('a', 'b')",
        "--config.distributed.local_device_ids",
        "(0, 1)",
        "--config.resume_may_change=('schedule.total_steps',)",
        "--config.generator.sampler.vllm.urls=('http://a:8100', 'http://b:8100')",
        "--config.wandb.project=a,b",
        "--config.no_such_field=a,b",
    ]


class _Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass(frozen=True)
class _Inner:
    # The comment above a field,
    # on two lines.
    size: int = 3  # and the one at its end
    colour: _Colour = _Colour.RED


@dataclasses.dataclass(frozen=True)
class _Outer:
    name: str = "x"  # a name
    tags: tuple[str, ...] = ()
    limit: float | None = None
    inner: _Inner = _Inner()


def test_field_docs_are_the_comments_above_and_beside_each_field():
    assert cli.field_docs(_Inner) == {
        "size": "The comment above a field, on two lines. and the one at its end",
        "colour": "",
    }


def test_field_lines_give_path_type_value_default_and_meaning():
    defaults = {"name": "x", "tags": (), "limit": None, "inner": {"size": 3, "colour": "red"}}
    values = {"name": "y", "tags": ("a",), "limit": None, "inner": {"size": 3, "colour": "blue"}}
    assert cli.field_lines(_Outer, values, defaults) == [
        "name: str = 'y'  (default 'x')  # a name",
        "tags: list[str] = ['a']  (default [])",
        "limit: float | None = None",
        "inner.size: int = 3  # The comment above a field, on two lines. and the one at its end",
        "inner.colour: 'red' | 'blue' = 'blue'  (default 'red')",
    ]


def test_the_listing_covers_every_field_of_the_run_config():
    c = load_config_file(CONFIGS / "tiny_arith.py").get_config("tango")
    lines = cli.field_lines(RunConfig, c.to_dict(), base_config().to_dict())
    paths = [line.split(":", 1)[0] for line in lines]
    assert len(paths) == len(set(paths)) > 200
    by_path = dict(zip(paths, lines))
    assert by_path["data.source"].startswith(
        "data.source: 'synthetic' | 'last_letter' | 'line_chains' | 'jsonl' | 'eurus2' | 'custom' "
        "= 'synthetic'  "
        "# synthetic"
    )
    assert "(default 256)" in by_path["data.prompts_per_step"]  # the tiny config's 32
    assert by_path["wandb.tags"].startswith("wandb.tags: list[str] = []")
    assert "schedule.verifier_trainable" not in by_path  # derived: set by the run, not a field
    undocumented = [p for p, line in by_path.items() if "  # " not in line]
    assert len(undocumented) < len(paths) / 2  # most fields carry their comment


def test_a_missing_config_file_or_a_bad_variant_is_one_line_naming_the_fix(tmp_path):
    with pytest.raises(ConfigError, match=r"no such config file .*config files there: .*tiny"):
        cli.check_config_file(str(CONFIGS / "tiny_arth.py"))
    with pytest.raises(ConfigError, match=r"tiny_arith.py:gpro: unknown variant 'gpro'.*'grpo'"):
        cli.check_config_file(f"{CONFIGS / 'tiny_arith.py'}:gpro")
    cli.check_config_file(f"{CONFIGS / 'tiny_arith.py'}:grpo,scratch")
    (tmp_path / "empty.py").write_text("X = 1\n")
    with pytest.raises(ConfigError, match="defines no get_config"):
        cli.check_config_file(str(tmp_path / "empty.py"))


def test_usage_names_the_flags_and_lists_the_config_files():
    text = cli.usage(CONFIGS)
    for flag in ("--config FILE[:VARIANT]", "--list_fields", "--dry_run", "docs/config.md"):
        assert flag in text
    assert f"{CONFIGS / 'tiny_arith.py'}" in text and "Tiny Tango on synthetic" in text
