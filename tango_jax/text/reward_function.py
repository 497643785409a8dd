r"""A task's own outcome reward, named by config `data.reward = "module:function"`.

    # my_rewards.py, in the directory the run starts from (or on PYTHONPATH)
    def exact_match(completion: str, answer: str, question: str) -> float:
        return float(completion.rstrip().endswith(answer))

    python -m tango_jax.train --config configs/x.py --config.data.reward=my_rewards:exact_match

The function scores one generator completion instead of Math-Verify (the default, `data.reward
= ""`): `completion` is the generated text as sampled (the whole response, its `<think>` and
`<answer>` parts included), `answer` the problem's gold answer as the data file gives it (any
string: a number, a label, JSON of test cases), `question` the clean question (no template).
It returns a number in [0, 1] (a bool counts as 0 or 1). Tango reads a reward above 0.5 as a
correct solution: that label is what the verifier learns to predict.

It runs where the built-in checks run, in the scoring pool's worker processes
(`scoring_pool.OutcomeScorer`), each call under `scorer_timeout_s`. A call that raises, returns
a number outside [0, 1] (or NaN), returns something else than a number, or runs out of time
scores 0 and is counted by kind: `generator/reward/errors`, `.../out_of_range`,
`.../not_a_number`, `.../timeouts`; the first case of each kind (of each exception type, for
raises) is logged with the exception or the value returned. Each worker imports the module
once, by name, from the folder where the trainer found it; importing it should be cheap and do
nothing else.

`load` is the pre-run check (config/preflight.py): a name that does not import, a missing
attribute, something that is not callable or cannot be called as (completion, answer, question)
fails before anything is written, in one line naming the field and the fix.
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
import inspect
import numbers
import os
from collections.abc import Callable
from pathlib import Path

from tango_jax.schema import ConfigError
from tango_jax.text.answer_check import ScoreNotANumber, ScoreOutOfRange

RewardFunction = Callable[[str, str, str], float]
FIELD = "data.reward"
_EXAMPLE = "e.g. 'my_rewards:exact_match' for exact_match() in my_rewards.py"


def _fail(spec: str, rule: str, flag: str = f"config.{FIELD}") -> ConfigError:
    return ConfigError(f"{flag} ({spec!r}) {rule}")


def parse(spec: str, *, flag: str = f"config.{FIELD}") -> tuple[str, str]:
    """ "package.module:function" -> ("package.module", "function")."""
    module, sep, name = spec.partition(":")
    parts = module.split(".") + name.split(".")
    if not sep or not all(p.isidentifier() for p in parts):
        raise _fail(spec, f"must be 'module:function', {_EXAMPLE}.", flag)
    return module, name


def load(spec: str, *, flag: str = f"config.{FIELD}") -> RewardFunction:
    """The function `spec` names, imported; ConfigError (one line, naming `flag`: the config
    field, or a command's flag such as evaluate's --reward) if it cannot be used."""
    fail = functools.partial(_fail, flag=flag)
    module_name, name = parse(spec, flag=flag)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name is not None and (module_name + ".").startswith(e.name + "."):
            where = module_name.replace(".", os.sep) + ".py"
            raise fail(
                spec,
                f"names module {module_name!r}, which is not found: put {where} in the directory "
                "the run starts from, or its folder on PYTHONPATH.",
            ) from None
        raise fail(spec, f"imports {module_name!r}, which raised {_error(e)}; fix it.") from None
    except Exception as e:
        raise fail(spec, f"imports {module_name!r}, which raised {_error(e)}; fix it.") from None
    fn = module
    for attr in name.split("."):
        if not hasattr(fn, attr):
            raise fail(
                spec,
                f"names {name!r}, which module {module_name!r} ({module.__file__}) does not "
                f"define; {_own_functions(module, module_name, name)}.",
            )
        fn = getattr(fn, attr)
    if not callable(fn):
        raise fail(
            spec,
            f"names a {type(fn).__name__}, not a function; name a function "
            "(completion, answer, question) -> float in [0, 1].",
        )
    try:
        inspect.signature(fn).bind("completion", "answer", "question")
    except TypeError as e:
        raise fail(
            spec,
            f"cannot be called as {name}(completion, answer, question) ({e}); give it those "
            "three parameters.",
        ) from None
    except ValueError:  # a builtin without a signature: it will be tried as it is
        pass
    return fn


def _own_functions(module, module_name: str, name: str) -> str:
    """What the module does define, for the fix: the closest of its own functions by name,
    or all of them, or how to write one."""
    own = sorted(
        n
        for n, f in vars(module).items()
        if inspect.isfunction(f) and f.__module__ == module.__name__ and not n.startswith("_")
    )
    if not own:
        return "it defines no function; write one (completion, answer, question) -> [0, 1]"
    close = difflib.get_close_matches(name, own, n=1)
    if close:
        return f"did you mean '{module_name}:{close[0]}'?"
    return f"its functions: {', '.join(own)}"


def module_root(spec: str) -> str:
    """The sys.path folder `spec`'s module was found in (for worker processes, whose path
    is not the trainer's); "" for a module without a file."""
    module_name, _ = parse(spec)
    found = importlib.util.find_spec(module_name)
    if found is None or not found.origin or not os.path.isfile(found.origin):
        return ""
    origin = Path(found.origin)
    depth = module_name.count(".") + (1 if origin.name == "__init__.py" else 0)
    return str(origin.parents[depth])


def checked(value: object) -> float:
    """A reward function's return value as a float in [0, 1]; otherwise ScoreNotANumber (not
    a real number or a bool) or ScoreOutOfRange (outside [0, 1], NaN too), both ValueErrors."""
    rule = f"returned {value!r}; a reward is a number in [0, 1]"
    if not isinstance(value, numbers.Real):
        raise ScoreNotANumber(rule)
    if not 0.0 <= float(value) <= 1.0:
        raise ScoreOutOfRange(rule)
    return float(value)


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}".splitlines()[0][:300]
