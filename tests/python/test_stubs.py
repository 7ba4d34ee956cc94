"""The type stubs (python/trickle/__init__.pyi) against the runtime package (one process, no
process group needed).

    build/pyenv/bin/python tests/python/test_stubs.py

The stubs are what an editor shows; this test keeps them from drifting: the keyword
arguments of SPARTA, DiLoCo and SPARTADiLoCo (names, order, defaults, every one typed) are
those of the runtime signatures (_algorithms._signature), every public name, method and
property of the package is in the stubs and the stubs invent none, the class docstrings are
the runtime ones, the Literal name types are the C++ registries, and Stats' and
Aggregation's fields are their FIELDS. The installed package carries the same stubs and
its py.typed marker. Exits non-zero when a test fails.
"""

from __future__ import annotations

import ast
import inspect
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

import trickle  # noqa: E402
from trickle import _algorithms  # noqa: E402

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
STUB = os.path.join(ROOT, "python", "trickle", "__init__.pyi")
ALGORITHMS = ("SPARTA", "DiLoCo", "SPARTADiLoCo")


def stub_tree() -> ast.Module:
    with open(STUB, encoding="utf-8") as f:
        return ast.parse(f.read(), STUB)


def stub_classes() -> dict:
    return {n.name: n for n in stub_tree().body if isinstance(n, ast.ClassDef)}


def members(cls: ast.ClassDef) -> dict:
    """name -> the function node, for the methods and properties the stub class defines."""
    return {n.name: n for n in cls.body if isinstance(n, ast.FunctionDef)}


def class_members(c: ast.ClassDef, classes: dict) -> dict:
    out = {}
    for base in c.bases:  # stub-side inheritance (e.g. _Algorithm)
        if isinstance(base, ast.Name) and base.id in classes:
            out.update(class_members(classes[base.id], classes))
    out.update(members(c))
    return out


def test_keyword_arguments_match_the_runtime_signatures():
    classes = stub_classes()
    for name in ALGORITHMS:
        init = members(classes[name])["__init__"]
        a = init.args
        assert [x.arg for x in a.args] == ["self", "model"], (name, [x.arg for x in a.args])
        assert a.vararg is None and a.kwarg is None, name
        runtime = _algorithms._signature(getattr(trickle, name)._kind)
        expected = [(p.name, p.default) for p in runtime.parameters.values() if p.kind == p.KEYWORD_ONLY]
        stubbed = [(x.arg, ast.literal_eval(d)) for x, d in zip(a.kwonlyargs, a.kw_defaults)]
        assert [k for k, _ in stubbed] == [k for k, _ in expected], (
            name, sorted(set(k for k, _ in stubbed) ^ set(k for k, _ in expected)))
        for (k, v), (k2, v2) in zip(stubbed, expected):
            assert v == v2 and type(v) is type(v2), (name, k, v, v2)
        missing = [x.arg for x in a.kwonlyargs if x.annotation is None]
        assert not missing, (name, "untyped", missing)
        # And the runtime signature is what inspect shows.
        shown = inspect.signature(getattr(trickle, name))
        assert list(shown.parameters)[1:] == [k for k, _ in expected], name


def test_every_public_name_is_stubbed():
    tree = stub_tree()
    defined = set()
    for n in tree.body:
        if isinstance(n, (ast.ClassDef, ast.FunctionDef)):
            defined.add(n.name)
        elif isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name):
            defined.add(n.target.id)
        elif isinstance(n, ast.Assign):
            defined.update(t.id for t in n.targets if isinstance(t, ast.Name))
        elif isinstance(n, ast.ImportFrom):
            defined.update(a.asname or a.name for a in n.names)
    missing = [n for n in trickle.__all__ + ["__version__"] if n not in defined]
    assert not missing, f"in trickle.__all__ but not in the stubs: {missing}"
    stub_all = next(n for n in tree.body if isinstance(n, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "__all__" for t in n.targets))
    assert ast.literal_eval(stub_all.value) == trickle.__all__, "the stubs' __all__ differs"


def stub_attributes(c: ast.ClassDef) -> list:
    """The annotated attributes a stub class declares (Stats' fields, Elastic's, ...)."""
    return [n.target.id for n in c.body if isinstance(n, ast.AnnAssign) and isinstance(n.target, ast.Name)]


def test_methods_and_properties_match():
    classes = stub_classes()
    for name in list(ALGORITHMS) + ["Stats", "Aggregation", "HookHandle", "Elastic"]:
        runtime = getattr(trickle, name)
        stubbed = class_members(classes[name], classes)
        attrs = set(stub_attributes(classes[name])) - {"FIELDS"}
        have = {n for n in stubbed if not n.startswith("_")} | attrs
        want = {n for n in dir(runtime) if not n.startswith("_")} - {"FIELDS"}
        if name == "Elastic":  # attributes set by __init__, one per argument
            want |= set(inspect.signature(runtime).parameters)
        assert have == want, (name, "only at runtime:", sorted(want - have), "only in the stubs:", sorted(have - want))
        if name in ("Stats", "Aggregation"):
            assert stub_attributes(classes[name])[1:] == list(runtime.FIELDS), stub_attributes(classes[name])
        for m, node in stubbed.items():
            if m.startswith("_") and m != "__init__":
                continue
            assert ast.get_docstring(node), (name, m, "no docstring in the stubs")
            obj = inspect.getattr_static(runtime, m)
            decorated = any(isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list)
            assert isinstance(obj, property) == decorated, (name, m, "property at runtime" if decorated else "method")
            assert (getattr(runtime, m).__doc__ or "").strip(), (name, m, "no docstring at runtime")
            if not decorated and m != "__init__":
                stub_args = [x.arg for x in node.args.posonlyargs + node.args.args + node.args.kwonlyargs]
                assert stub_args == list(inspect.signature(getattr(runtime, m)).parameters), (name, m, stub_args)


def test_docstrings_are_the_runtime_ones():
    classes = stub_classes()
    for name in list(ALGORITHMS) + ["Stats", "Aggregation", "HookHandle"]:
        stub_doc = ast.get_docstring(classes[name])
        runtime_doc = inspect.cleandoc(getattr(trickle, name).__doc__)
        assert stub_doc == runtime_doc, f"{name}: the stub's docstring differs from the runtime's:\n" + "\n".join(
            f"  stub:    {a}\n  runtime: {b}" for a, b in zip(stub_doc.splitlines(), runtime_doc.splitlines()) if a != b
        )
    # Every option is listed in its class's docstring.
    for name in ALGORITHMS:
        doc = getattr(trickle, name).__doc__
        for k in _algorithms._DEFAULTS[getattr(trickle, name)._kind]:
            assert f"{k}=" in doc, (name, k)


def test_demo_matches_its_stub():
    """trickle.DeMo (a torch.optim.Optimizer): the members it defines itself, its docstring and
    its constructor's arguments and defaults are the stub's."""
    node = stub_classes()["DeMo"]
    runtime = trickle.DeMo
    stubbed = members(node)
    own = {n for n in vars(runtime) if not n.startswith("_")}
    assert {n for n in stubbed if not n.startswith("_")} == own, ("DeMo", sorted(own))
    assert ast.get_docstring(node) == inspect.cleandoc(runtime.__doc__), "DeMo: the stub's docstring differs"
    init = stubbed["__init__"].args
    stub_args = [(x.arg, ast.literal_eval(d)) for x, d in zip(init.args[-len(init.defaults):], init.defaults)]
    stub_args += [(x.arg, ast.literal_eval(d)) for x, d in zip(init.kwonlyargs, init.kw_defaults)]
    shown = [(p.name, p.default) for p in inspect.signature(runtime).parameters.values()
             if p.default is not inspect.Parameter.empty]
    assert stub_args == shown, (stub_args, shown)
    for m in own:
        assert ast.get_docstring(stubbed[m]), ("DeMo", m, "no docstring in the stubs")
        decorated = any(isinstance(d, ast.Name) and d.id == "property" for d in stubbed[m].decorator_list)
        assert isinstance(inspect.getattr_static(runtime, m), property) == decorated, ("DeMo", m)
    stub_sel = next(n for n in stub_tree().body if isinstance(n, ast.Assign) and n.targets[0].id == "SelectionName")
    elts = stub_sel.value.slice.elts
    assert tuple(ast.literal_eval(e) for e in elts) == trickle._demo.SELECTIONS


def test_literal_names_are_the_registries():
    tree = stub_tree()
    aliases = {}
    for n in tree.body:
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Subscript):
            sub = n.value
            if isinstance(sub.value, ast.Name) and sub.value.id == "Literal":
                elts = sub.slice.elts if isinstance(sub.slice, ast.Tuple) else [sub.slice]
                aliases[n.targets[0].id] = tuple(ast.literal_eval(e) for e in elts)
    expected = {
        "SamplerName": trickle.SAMPLERS,
        "ScheduleName": trickle.SCHEDULES,
        "TopologyName": trickle.TOPOLOGIES,
        "CodecName": trickle.CODECS + ("native",),
        "OuterName": trickle.OUTER_OPTIMIZERS,
        "SparsifierName": trickle.SPARSIFIERS,
        "LayerwiseMode": _algorithms.LAYERWISE_MODES,
    }
    for alias, names in expected.items():
        assert aliases.get(alias) == names, (alias, aliases.get(alias), names)


def test_installed_package_carries_the_stubs():
    here = os.path.dirname(trickle.__file__)
    installed = os.path.join(here, "__init__.pyi")
    if os.path.realpath(installed) == os.path.realpath(STUB):
        return  # running from the source tree
    assert os.path.isfile(installed), f"{installed} is missing: the package data lacks the stubs"
    assert os.path.isfile(os.path.join(here, "py.typed")), "the installed package lacks py.typed"
    with open(installed, encoding="utf-8") as a, open(STUB, encoding="utf-8") as b:
        assert a.read() == b.read(), "the installed stubs differ from python/trickle/__init__.pyi (reinstall)"


TESTS = [
    test_keyword_arguments_match_the_runtime_signatures,
    test_every_public_name_is_stubbed,
    test_methods_and_properties_match,
    test_docstrings_are_the_runtime_ones,
    test_demo_matches_its_stub,
    test_literal_names_are_the_registries,
    test_installed_package_carries_the_stubs,
]


def main() -> int:
    return harness.run(TESTS, "test_stubs")


if __name__ == "__main__":
    sys.exit(main())
