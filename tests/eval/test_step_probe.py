"""step_probe runs its tiny model on one PyTorch thread and gives the caller's count back."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from tango_jax.eval import step_probe  # noqa: E402


def test_one_torch_thread_inside_and_the_callers_count_restored_even_on_error():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with step_probe._one_torch_thread():
            assert torch.get_num_threads() == 1
        assert torch.get_num_threads() == 2
        with pytest.raises(RuntimeError), step_probe._one_torch_thread():
            raise RuntimeError("a failing probe")
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)
