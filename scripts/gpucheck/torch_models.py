"""The PyTorch modules the bench graphs were exported from, without the
exporters' imports.

testdata/generate.py and bench/models/build.py define the models (GPT-2
small is generate.GPTTiny at build.GPT2_SMALL's size; ResNet-50 is
build.ResNet50), but import onnx and ONNX Runtime training at the top, only
to export, and a GPU machine need not have them. So the definitions named
in DEFINITIONS are taken out of the two files' source (top-level classes,
functions and assignments, by the names they bind) and executed alone, in a
namespace holding only torch, torch.nn as nn, torch.nn.functional as F and
math: the same code, no stand-ins for missing modules.
free_globals() lists the names such code uses beyond that namespace (empty
when the extraction is complete; the unit tests check it, without torch).
"""
import ast
import builtins
import os
import symtable
from typing import Dict, Iterable, List, Set

# file (relative to the checkout) -> the top-level names taken from it, in
# an order in which each only uses earlier ones.
DEFINITIONS = {
    os.path.join("testdata", "generate.py"): [
        "GPT_VOCAB", "GPT_D", "GPT_HEADS", "GPT_SEQ", "GPT_LAYERS", "GPT_FF", "GPT_SIZE",
        "CausalSelfAttention", "GPTBlock", "GPTTiny"],
    os.path.join("bench", "models", "build.py"): ["GPT2_SMALL", "Bottleneck", "ResNet50"],
}
# What the extracted code may use besides its own definitions and builtins.
PROVIDED = ("torch", "nn", "F", "math")


class ExtractionError(Exception):
    """A named definition is not in its file."""


def bound_names(statement: ast.stmt) -> Set[str]:
    """The top-level names `statement` binds."""
    if isinstance(statement, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        return {statement.name}
    targets = []
    if isinstance(statement, ast.Assign):
        targets = statement.targets
    elif isinstance(statement, ast.AnnAssign):
        targets = [statement.target]
    names = set()
    for target in targets:
        for node in ast.walk(target):
            if isinstance(node, ast.Name):
                names.add(node.id)
    return names


def extract(source: str, names: Iterable[str], filename: str) -> str:
    """The source of the top-level statements of `source` that bind `names`,
    in file order. Decorators stay with their class or function."""
    wanted = set(names)
    tree = ast.parse(source, filename)
    found: Set[str] = set()
    chunks = []
    lines = source.splitlines(keepends=True)
    for statement in tree.body:
        bound = bound_names(statement)
        if not bound & wanted:
            continue
        found |= bound & wanted
        first = min([statement.lineno] + [d.lineno for d in getattr(statement, "decorator_list", [])])
        chunks.append("".join(lines[first - 1:statement.end_lineno]))
    missing = sorted(wanted - found)
    if missing:
        raise ExtractionError(f"{filename}: no top-level definition of {', '.join(missing)}")
    return "\n".join(chunks)


def extracted_sources(root: str) -> Dict[str, str]:
    """file -> the extracted source of its DEFINITIONS."""
    sources = {}
    for relative, names in DEFINITIONS.items():
        path = os.path.join(root, relative)
        with open(path) as f:
            sources[relative] = extract(f.read(), names, path)
    return sources


def free_globals(source: str, filename: str = "<extracted>") -> Set[str]:
    """The global names `source`'s code reads but neither defines at top
    level nor gets from builtins."""
    table = symtable.symtable(source, filename, "exec")
    defined = {s.get_name() for s in table.get_symbols() if s.is_assigned() or s.is_imported()}
    used: Set[str] = set()

    def visit(scope):
        for symbol in scope.get_symbols():
            if scope is table:
                if symbol.is_referenced():
                    used.add(symbol.get_name())
            elif symbol.is_global() and symbol.is_referenced():
                used.add(symbol.get_name())
        for child in scope.get_children():
            visit(child)
    visit(table)
    return {name for name in used - defined if not hasattr(builtins, name)}


def unresolved_names(root: str) -> List[str]:
    """Names the extracted code of every file would need and not find (empty
    when the extraction is complete)."""
    combined = "\n".join(extracted_sources(root).values())
    return sorted(free_globals(combined) - set(PROVIDED))


def load(root: str) -> dict:
    """The namespace of the executed definitions (needs torch)."""
    import math

    import torch
    import torch.nn as nn
    import torch.nn.functional as F
    namespace = {"torch": torch, "nn": nn, "F": F, "math": math, "__name__": "gpucheck_torch_models"}
    for relative, source in extracted_sources(root).items():
        exec(compile(source, os.path.join(root, relative), "exec"), namespace)
    return namespace
