"""The type stubs of the compiled modules (journal_engine/_*.pyi) against the modules themselves.

A stub written by hand drifts when the .pyx changes; these tests catch the drift both ways:
every public name a compiled module exposes at run time is in its stub, and every name of a stub
exists at run time, with the same parameters where the runtime can tell them. "Public" is what a
user or the journal can call: no underscore, except the ``_core_*`` set-up methods the journal
calls on its core. Names a module merely imports (classes and functions defined elsewhere, modules,
constants of the leaves) belong to the stubs of their own homes.

With mypy installed (the ``test`` extra), the stubs also pass ``mypy --strict`` and mypy's stubtest,
which compares every signature and type of a stub with the imported module.
"""
from __future__ import annotations

import ast
import importlib
import inspect
import os
import subprocess
import sys
import types

import pytest

from journal_engine import errors, limits, record_format
from locations import ROOT

PACKAGE = ROOT / "journal_engine"
COMPILED = ("_broker_objects", "_codec", "_core", "_image", "_livemap", "_message_columns", "_message_recovery",
            "_record_writer", "_replay", "_scan", "_stomp_codec", "_store_body")
LEAVES = (errors, limits, record_format)
STUB_PATHS = [PACKAGE / f"{name}.pyi" for name in COMPILED]
# what Cython adds to every compiled module and class: pickling support, doctest table, C API capsule
CYTHON_INTERNALS = ("__reduce_cython__", "__setstate_cython__", "__test__", "__pyx_capi__")


def compiled(name: str) -> types.ModuleType:
    try:
        return importlib.import_module(f"journal_engine.{name}")
    except ImportError as exc:   # a checkout without the extension built: the twins have no stubs to check
        pytest.skip(f"the compiled core is not built: {exc}")


def is_public(name: str) -> bool:
    return not name.startswith("_") or name.startswith("_core_")


def imported_from_elsewhere(module: types.ModuleType, name: str) -> bool:
    """A module, a class or function defined in another module, or a constant of a leaf."""
    value = getattr(module, name)
    if isinstance(value, types.ModuleType):
        return True
    if (isinstance(value, type) or callable(value)) and getattr(value, "__module__", module.__name__) != module.__name__:
        return True
    return any(getattr(leaf, name, None) is value for leaf in LEAVES)


def runtime_names(module: types.ModuleType) -> dict[str, set[str]]:
    """{"": the module's public names, class name: its public members} as the stub must hold them."""
    names: dict[str, set[str]] = {"": set()}
    for name in dir(module):
        if not is_public(name) or imported_from_elsewhere(module, name):
            continue
        names[""].add(name)
        value = getattr(module, name)
        if isinstance(value, type):
            names[name] = {member for member in dir(value) if is_public(member) and member not in dir(object)}
    return names


def stub_tree(name: str) -> ast.Module:
    return ast.parse((PACKAGE / f"{name}.pyi").read_text(encoding="utf-8"), filename=f"{name}.pyi")


def defined_names(body: list[ast.stmt]) -> dict[str, ast.stmt]:
    """Names a stub body defines: functions, classes, annotated and assigned names."""
    found: dict[str, ast.stmt] = {}
    for node in body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            found.setdefault(node.name, node)      # a property's setter repeats its name
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            found[node.target.id] = node
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    found[target.id] = node
    return found


def stub_names(tree: ast.Module) -> dict[str, dict[str, ast.stmt]]:
    module_level = defined_names(tree.body)
    names = {"": module_level}
    for name, node in module_level.items():
        if isinstance(node, ast.ClassDef):
            names[name] = defined_names(node.body)
    return names


@pytest.mark.parametrize("name", COMPILED)
def test_every_public_runtime_name_is_in_the_stub(name):
    module = compiled(name)
    stub = stub_names(stub_tree(name))
    missing = []
    for owner, members in runtime_names(module).items():
        for member in sorted(members - set(stub.get(owner, {}))):
            missing.append(f"{owner}.{member}" if owner else member)
    assert not missing, f"journal_engine/{name}.pyi lacks {missing}"


@pytest.mark.parametrize("name", COMPILED)
def test_every_stub_name_exists_at_runtime(name):
    module = compiled(name)
    stub = stub_names(stub_tree(name))
    absent = []
    for member in stub[""]:
        # stub-only helpers (a TypeVar, a Protocol of what a method reads) are private by name
        if not member.startswith("_") and not hasattr(module, member):
            absent.append(member)
    for owner, members in stub.items():
        if not owner or owner.startswith("_"):
            continue
        cls = getattr(module, owner, None)
        absent += [f"{owner}.{member}" for member in members if cls is None or not hasattr(cls, member)]
    assert not absent, f"journal_engine/{name}.pyi names what the module does not have: {sorted(absent)}"


def stub_parameters(node: ast.FunctionDef) -> list[tuple[str, str, bool]]:
    """(name, kind, has a default) of each parameter; positional-only ones unnamed, as at run time."""
    args = node.args
    positional = args.posonlyargs + args.args
    defaults = [False] * (len(positional) - len(args.defaults)) + [True] * len(args.defaults)
    out = [("", "POSITIONAL_ONLY" if i < len(args.posonlyargs) else "POSITIONAL_OR_KEYWORD", default)
           if i < len(args.posonlyargs) else (arg.arg, "POSITIONAL_OR_KEYWORD", default)
           for i, (arg, default) in enumerate(zip(positional, defaults))]
    if args.vararg:
        out.append((args.vararg.arg, "VAR_POSITIONAL", False))
    out += [(arg.arg, "KEYWORD_ONLY", default is not None) for arg, default in zip(args.kwonlyargs, args.kw_defaults)]
    if args.kwarg:
        out.append((args.kwarg.arg, "VAR_KEYWORD", False))
    return out


def runtime_parameters(function) -> list[tuple[str, str, bool]] | None:
    try:
        signature = inspect.signature(function)
    except (TypeError, ValueError):
        return None
    kinds = [parameter.kind for parameter in signature.parameters.values()]
    if kinds[-2:] == [inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD]:
        return None      # a slot wrapper or __cinit__'s catch-all: says nothing
    return [("" if parameter.kind is inspect.Parameter.POSITIONAL_ONLY else parameter.name, parameter.kind.name,
             parameter.default is not inspect.Parameter.empty) for parameter in signature.parameters.values()]


@pytest.mark.parametrize("name", COMPILED)
def test_stub_parameters_match_the_runtime_signatures(name):
    """Names, kinds and defaults of parameters, wherever Cython's embedded signature tells them."""
    module = compiled(name)
    stub = stub_names(stub_tree(name))
    wrong = []
    for owner, members in stub.items():
        if owner.startswith("_") or (owner and not isinstance(getattr(module, owner, None), type)):
            continue
        holder = getattr(module, owner) if owner else module
        for member, node in members.items():
            if not isinstance(node, ast.FunctionDef) or node.decorator_list or not hasattr(holder, member):
                continue      # properties are checked by name only
            runtime = runtime_parameters(getattr(holder, member))
            if runtime is None:
                continue
            in_stub = stub_parameters(node)
            if owner:      # self: positional-only in a slot wrapper, named in a method; never passed
                runtime, in_stub = runtime[1:], in_stub[1:]
            if runtime != in_stub:
                wrong.append(f"{owner + '.' if owner else ''}{member}: stub {in_stub}, runtime {runtime}")
    assert not wrong, "\n".join(wrong)


def run_mypy_tool(args: list[str]) -> subprocess.CompletedProcess:
    pytest.importorskip("mypy", reason="mypy is in the test extra")
    # the stubs alone take a few seconds (follow_imports=silent keeps mypy off the package); the timeout
    # only ends a hung run, it asserts no speed
    return subprocess.run([sys.executable, "-m", *args], cwd=ROOT, capture_output=True, text=True, timeout=300,
                          env={**os.environ, "MYPY_FORCE_COLOR": "0"})


def test_stubs_pass_mypy_strict():
    # follow_imports=silent: the stubs are checked, not the .py modules their imports reach
    result = run_mypy_tool(["mypy", "--strict", "--follow-imports=silent", f"--cache-dir={os.devnull}",
                            *[str(path.relative_to(ROOT)) for path in STUB_PATHS]])
    assert result.returncode == 0, result.stdout + result.stderr


def test_stubs_agree_with_the_compiled_modules_by_stubtest(tmp_path):
    """mypy's stubtest imports each module and compares every stub signature and type with it."""
    allow = [rf"journal_engine\.{name}(\.\w+)?\.{internal}" for name in COMPILED for internal in CYTHON_INTERNALS]
    for name in COMPILED:
        module = compiled(name)
        allow += [rf"journal_engine\.{name}\.{member}" for member in dir(module)
                  if is_public(member) and imported_from_elsewhere(module, member)]
    (tmp_path / "allowlist.txt").write_text("\n".join(allow) + "\n", encoding="utf-8")
    (tmp_path / "mypy.ini").write_text(f"[mypy]\nfollow_imports = silent\ncache_dir = {tmp_path / 'mypy_cache'}\n",
                                       encoding="utf-8")
    result = run_mypy_tool(["mypy.stubtest", "--mypy-config-file", str(tmp_path / "mypy.ini"),
                            "--allowlist", str(tmp_path / "allowlist.txt"), "--ignore-unused-allowlist",
                            *[f"journal_engine.{name}" for name in COMPILED]])
    assert result.returncode == 0, result.stdout + result.stderr
