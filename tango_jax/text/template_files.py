"""A user's prompt templates, read from files and checked (config `data.template_files`).

    c.data.template_files.generator_train = "prompts/official_generator.json"
    c.data.template_files.verifier_train = "prompts/official_verifier.json"
    templates = load_templates(PromptStyle.FULL, cfg.data.template_files)  # -> PromptTemplates

A file is either plain text (any suffix but .json), the template itself in the built-in syntax
(`{question}`; `{problem}`, `{solution}`, `{num_steps}`; every other brace is literal), or a
JSON object `{"template": "...", "syntax": "tango" | "format" | "jinja2"}`: `format` is Python
`str.format` (the official verifier template's syntax: `{{`/`}}` are literal braces), `jinja2`
renders `{{ name }}` with jinja2 (the official generator template's). The official placeholder
names `prompt` (= question) and `generator_step_count` (= num_steps) are accepted, so the
official templates run verbatim.

A generator template must use the question; a verifier template the problem and the solution
(the step count is optional). A placeholder of the other role, a name no role has (syntaxes
format and jinja2, where every field is a placeholder), a missing file or one that does not
parse is a `ConfigError` naming the field, the file and the fix, raised by preflight before
anything loads.

Unset variants fall back: generator_eval to generator_train with "mathematical " deleted (what
the official evaluation sets do, so one official file gives both), generator_ood to
generator_eval, verifier_eval to verifier_train; with neither set, the built-in templates of
`data.prompt_style`.
"""

from __future__ import annotations

import dataclasses
import json
import string
from pathlib import Path

from tango_jax.schema import ConfigError
from tango_jax.text.templates import (
    GENERATOR_PLACEHOLDERS,
    VERIFIER_PLACEHOLDERS,
    PromptStyle,
    PromptTemplates,
    Syntax,
    Template,
    evaluation_variant,
)

FIELD_PREFIX = "data.template_files"


@dataclasses.dataclass(frozen=True)
class TemplateFiles:
    """Files that replace the built-in prompt templates, per role and variant; "" = the
    fallback (module docstring). Paths are relative to the working directory."""

    generator_train: str = ""  # RL rollouts and SFT prompts
    generator_eval: str = ""  # held-out evaluation, math benchmarks
    generator_ood: str = ""  # out-of-domain benchmarks (their suffix is in the question)
    verifier_train: str = ""  # the verifier's prompts in training
    verifier_eval: str = ""  # held-out verdicts and ProcessBench

    def given(self) -> dict[str, str]:
        """{field: path} of the templates set."""
        return {
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if getattr(self, f.name)
        }


def _fail(field: str, path: str, says: str) -> None:
    raise ConfigError(f"config.{FIELD_PREFIX}.{field} ({path!r}) {says}")


def read_template(field: str, path: str) -> Template:
    """The template in file `path` (plain text, or JSON with "template" and "syntax")."""
    file = Path(path)
    if not file.is_file():
        _fail(field, path, "does not exist; give a template file (plain text or JSON).")
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        _fail(field, path, f"is not UTF-8 text ({e}).")
    if file.suffix.lower() != ".json":
        return Template(text)
    try:
        data = json.loads(text)
    except json.JSONDecodeError as e:
        _fail(field, path, f"is not JSON ({e}); fix it, or use a .txt file for plain text.")
    syntaxes = [s.value for s in Syntax]
    if not isinstance(data, dict) or not isinstance(data.get("template"), str):
        _fail(field, path, 'must hold a JSON object {"template": "...", "syntax": "tango"}.')
    extra = sorted(set(data) - {"template", "syntax"})
    if extra:
        _fail(field, path, f"has unknown keys {extra}; the keys are 'template' and 'syntax'.")
    syntax = data.get("syntax", Syntax.TANGO.value)
    if syntax not in syntaxes:
        _fail(field, path, f'has "syntax": {syntax!r}; use one of {syntaxes}.')
    return Template(data["template"], Syntax(syntax))


def placeholders(template: Template) -> set[str]:
    """The placeholder names `template` uses. Tango syntax: only the known names count (any
    other `{word}` is literal text, e.g. `\\boxed{CORRECT}`); format and jinja2: every field."""
    if template.syntax is Syntax.FORMAT:
        return {
            name for _, name, _, _ in string.Formatter().parse(template.text) if name is not None
        }
    if template.syntax is Syntax.JINJA2:
        import jinja2
        from jinja2 import meta

        return set(meta.find_undeclared_variables(jinja2.Environment().parse(template.text)))
    known = GENERATOR_PLACEHOLDERS | VERIFIER_PLACEHOLDERS
    return {name for name in known if "{" + name + "}" in template.text}


def _spelled(names, syntax: Syntax) -> str:
    left, right = ("{{ ", " }}") if syntax is Syntax.JINJA2 else ("{", "}")
    return ", ".join(f"{left}{n}{right}" for n in sorted(names))


def check_template(field: str, path: str, template: Template) -> None:
    """Raises ConfigError unless `template` has exactly its role's placeholders (see module)."""
    role = field.split("_")[0]
    own = GENERATOR_PLACEHOLDERS if role == "generator" else VERIFIER_PLACEHOLDERS
    required = [["question", "prompt"]] if role == "generator" else [["problem"], ["solution"]]
    try:
        used = placeholders(template)
        if template.syntax is Syntax.FORMAT:  # a field such as {0}, {x.y} or {q!r:>9}
            for _, name, spec, conv in string.Formatter().parse(template.text):
                if name is not None and (spec or conv):
                    _fail(field, path, f"has {{{name}!{conv}:{spec}}}; placeholders take no "
                          "conversion or format spec.")  # fmt: skip
    except ValueError as e:  # str.format's own syntax errors (a single "}"), jinja2's
        if isinstance(e, ConfigError):
            raise
        _fail(field, path, f"does not parse as a {template.syntax.value} template ({e}).")
    except Exception as e:  # jinja2.TemplateSyntaxError
        _fail(field, path, f"does not parse as a {template.syntax.value} template ({e}).")
    unknown = used - set(own)
    if unknown:
        _fail(
            field,
            path,
            f"uses the unknown placeholder(s) {_spelled(unknown, template.syntax)}; a {role} "
            f"template may use {_spelled(own, template.syntax)}"
            + ("" if template.syntax is Syntax.TANGO else " (write other braces as literals)")
            + ".",
        )
    for names in required:
        if not used & set(names):
            _fail(
                field,
                path,
                f"has no {_spelled(names[:1], template.syntax)} placeholder; a {role} template "
                f"needs {_spelled([n[0] for n in required], template.syntax)}"
                + (" (the step count is optional)." if role == "verifier" else "."),
            )


def load_templates(style: PromptStyle, files: TemplateFiles) -> PromptTemplates:
    """The run's templates: the files given, checked; the rest as the module docstring says."""
    builtin = PromptTemplates.builtin(style)
    given = {}
    for field, path in files.given().items():
        template = read_template(field, path)
        check_template(field, path, template)
        given[field] = template
    gen_train = given.get("generator_train", builtin.generator_train)
    gen_eval = given.get(
        "generator_eval",
        evaluation_variant(gen_train) if "generator_train" in given else builtin.generator_eval,
    )
    ver_train = given.get("verifier_train", builtin.verifier_train)
    return PromptTemplates(
        generator_train=gen_train,
        generator_eval=gen_eval,
        generator_ood=given.get("generator_ood", gen_eval),
        verifier_train=ver_train,
        verifier_eval=given.get("verifier_eval", ver_train),
    )
