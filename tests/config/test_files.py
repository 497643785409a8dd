"""The one loader of a config file by its path (config/files.py): what it returns, and the one
line it refuses a missing file or a file without get_config with."""

from __future__ import annotations

from pathlib import Path

import pytest

from tango_jax.config import files
from tango_jax.config.run import load_run_config, sibling_config
from tango_jax.schema import ConfigError

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_config_spec_splits_at_the_file():
    assert files.split_config_spec("configs/a.py:b,c") == ("configs/a.py", "b,c")
    assert files.split_config_spec("configs/a.py") == ("configs/a.py", None)


def test_a_config_file_loads_as_a_module_and_a_spec_gives_its_variant():
    module = files.load_config_file(CONFIGS / "tiny_arith.py")
    assert "grpo" in module.VARIANTS
    grpo = load_run_config(files.config_from_spec(f"{CONFIGS / 'tiny_arith.py'}:grpo"))
    assert not grpo.verifier.enable
    tango = load_run_config(files.config_from_spec(str(CONFIGS / "tiny_arith.py")))
    assert tango.verifier.enable  # no variant: get_config()'s default
    # a config that builds on another finds it beside itself, through the same loader
    assert sibling_config(CONFIGS / "any.py", "tiny_arith").VARIANTS == module.VARIANTS


def test_a_missing_file_names_the_config_files_beside_it_and_no_get_config_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        files.load_config_file(CONFIGS / "tiny_arth.py")
    (line,) = str(e.value).splitlines()
    assert line.startswith(f"no such config file {str(CONFIGS / 'tiny_arth.py')!r}; config ")
    assert str(CONFIGS / "tiny_arith.py") in line
    with pytest.raises(FileNotFoundError, match=r"no such config file '.*nowhere/x.py'\.$"):
        files.load_config_file(tmp_path / "nowhere" / "x.py")
    (tmp_path / "empty.py").write_text("X = 1\n")
    with pytest.raises(ConfigError, match=r"empty.py defines no get_config\(\); see configs/"):
        files.config_from_spec(str(tmp_path / "empty.py"))
