"""docs/python-api.md against the package itself: the reference's option tables and its
full signatures are written by hand (they explain), but every name and default in them is
checked here against the classes' own signatures (built from _algorithms._DEFAULTS, the
package's one list of options), and every option of every class must be documented. A
default changed in the library or the package without the reference fails here.

Run: build/pyenv/bin/python tests/python/test_docs.py (tests/python/run.sh runs it).
"""

import ast
import inspect
import re
import sys
from pathlib import Path

import harness
import trickle

DOC = Path(__file__).resolve().parents[2] / "docs" / "python-api.md"
CLASSES = ("SPARTA", "DiLoCo", "SPARTADiLoCo", "DDP")


def _signature_defaults(cls):
    """{name: default} of a class's constructor (inspect.Parameter.empty: no default)."""
    return {n: p.default for n, p in inspect.signature(cls).parameters.items() if p.kind != p.VAR_KEYWORD}


def _option_tables(text):
    """(heading, line number, names, defaults) of every row of every `| option | default |` table."""
    rows, heading, in_table = [], "", False
    for number, line in enumerate(text.splitlines(), 1):
        if line.startswith("#"):
            heading = line
        if line.startswith("| option | default |"):
            in_table = True
            continue
        if in_table and not line.startswith("|"):
            in_table = False
        if not in_table or line.startswith("|---"):
            continue
        cells = line.split("|")
        names = re.findall(r"`([a-z_]+)`", cells[1])
        defaults = re.findall(r"`([^`]+)`", cells[2])
        rows.append((heading, number, names, defaults))
    return rows


def _section_classes(heading):
    """The classes a `### ...` heading is about: those it names, or all but DDP ("Every class but `DDP`")."""
    named = [c for c in re.findall(r"`(\w+)`", heading) if c in CLASSES]
    if "but `DDP`" in heading:
        return [c for c in CLASSES if c != "DDP"]
    return named


def test_every_option_table_row_names_real_options_with_their_defaults():
    rows = _option_tables(DOC.read_text())
    assert len(rows) >= 30, f"found only {len(rows)} option rows in {DOC}: has the table format changed?"
    for heading, number, names, defaults in rows:
        classes = _section_classes(heading)
        where = f"{DOC.name}:{number}"
        assert classes, f"{where}: the heading {heading!r} names no class"
        assert names, f"{where}: a row without an option name"
        assert len(defaults) in (1, len(names)), f"{where}: {len(names)} options but {len(defaults)} defaults"
        actual = {c: _signature_defaults(getattr(trickle, c)) for c in classes}
        for i, name in enumerate(names):
            text = defaults[i] if len(defaults) == len(names) else defaults[0]
            documented = ast.literal_eval(text)
            having = {c: a[name] for c, a in actual.items() if name in a}
            assert having, f"{where}: `{name}` is no option of {', '.join(classes)}"
            # The same name may differ between classes (SPARTA's interval is 1, DiLoCo's 500):
            # the row is right when one of its section's classes has that default, of the
            # same type (a float default may be written as an integer).
            assert any(
                v == documented and (type(v) is type(documented) or isinstance(v, float)) for v in having.values()
            ), f"{where}: `{name}` documented as {text}, but the default is " + ", ".join(
                f"{c}: {v!r}" for c, v in having.items()
            )


def _full_signatures(text):
    """(class name, parameter names, {name: default node}) of every `trickle.X(...)` that
    spells a class's whole signature (not one with "...")."""
    out = []
    for cls_name, args in re.findall(r"`[\w=]*trickle\.(\w+)\(([^`]*?)\)`", text, flags=re.S):
        if "..." in args or not inspect.isclass(getattr(trickle, cls_name, None)):
            continue
        fn = ast.parse(f"def f({' '.join(args.split())}): pass").body[0].args
        positional = fn.posonlyargs + fn.args
        defaults = dict(zip([a.arg for a in positional[len(positional) - len(fn.defaults):]], fn.defaults))
        defaults.update({a.arg: d for a, d in zip(fn.kwonlyargs, fn.kw_defaults) if d is not None})
        out.append((cls_name, [a.arg for a in positional + fn.kwonlyargs], defaults))
    return out


def test_every_option_of_every_class_is_in_the_reference():
    text = DOC.read_text()
    documented = set(re.findall(r"`([a-z_]+)`", text)) | set(re.findall(r"`([a-z_]+)=", text))
    for _, names, _ in _full_signatures(text):
        documented |= set(names)
    for c in CLASSES + ("DeMo", "Elastic"):
        missing = sorted(set(_signature_defaults(getattr(trickle, c))) - documented - {"model", "params"})
        assert not missing, f"trickle.{c} takes {missing}, which {DOC.name} never names"


def test_full_signatures_in_the_reference_are_the_classes_own():
    signatures = _full_signatures(DOC.read_text())
    for cls_name, names, defaults in signatures:
        actual = _signature_defaults(getattr(trickle, cls_name))
        assert names == list(actual), f"trickle.{cls_name}: {DOC.name} lists {names}, the class takes {list(actual)}"
        for name, node in defaults.items():
            assert ast.literal_eval(node) == actual[name], (
                f"trickle.{cls_name}: {DOC.name} gives {name}={ast.unparse(node)}, the default is {actual[name]!r}"
            )
    spelled = sorted({c for c, _, _ in signatures})
    assert {"DDP", "DeMo", "Elastic"} <= set(spelled), f"{DOC.name} spells the signatures of {spelled} only"


TESTS = [
    test_every_option_table_row_names_real_options_with_their_defaults,
    test_every_option_of_every_class_is_in_the_reference,
    test_full_signatures_in_the_reference_are_the_classes_own,
]


def main() -> int:
    return harness.run(TESTS, "test_docs")


if __name__ == "__main__":
    sys.exit(main())
