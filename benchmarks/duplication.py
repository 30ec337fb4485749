"""Count code lines that rayd.torch and rayd.drjit both hold, word for word.

The metric of issue 13 ("torch <-> drjit duplication"): a code line of
``src/rayd/torch`` counts when the same line (after normalisation) also stands
in ``src/rayd/drjit``; each distinct line counts as often as it stands in *both*
trees (the smaller of the two counts), so the figure is symmetric.

Normalisation and what is passed over:

* the array-module names ``torch``, ``drjit``, ``dr``, ``rt`` (whole words),
  ``Torch``/``Drjit`` in names (``TorchRecord`` / ``DrjitRecord``) become one
  placeholder; surrounding white space is stripped;
* docstrings (any string literal standing alone as a statement, the
  docstrings handed to ``rayd.core.edges.document(cls, {name: doc})``, and the
  values of a frontend module's ``DOCS`` / ``ANNOTATIONS`` dicts, which
  ``rayd.core.docs.FrontendDocs`` hands to ``document``), comments,
  ``import`` / ``from ... import`` statements and lines shorter than 12
  characters (after stripping) are not counted.

Usage::

    python3 benchmarks/duplication.py            # the figure and the top files
    python3 benchmarks/duplication.py --lines    # also every shared line
    python3 benchmarks/duplication.py --root DIR # another checkout (e.g. a `git archive` export)
    python3 benchmarks/duplication.py --kinds    # also the figure split by kind of line (no effect on it)

Writes nothing; ``benchmarks/results/duplication.txt`` holds its output.
"""

from __future__ import annotations

import argparse
import ast
import collections
import io
import pathlib
import re
import tokenize

ROOT = pathlib.Path(__file__).resolve().parents[1]
MIN_CHARS = 12
_NAMES = re.compile(r"\b(torch|drjit|dr|rt)\b")
_CAMEL = re.compile(r"(Torch|Drjit)")


def _skipped_lines(source: str) -> set[int]:
    """Line numbers (1-based) of docstrings and import statements."""
    skip: set[int] = set()
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", getattr(node.func, "id", "")) == "document":
            # rayd.core.edges.document(cls, {name: docstring}): the values are docstrings
            for arg in node.args:
                if isinstance(arg, ast.Dict):
                    for value in arg.values:
                        skip.update(range(value.lineno, value.end_lineno + 1))
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict)
                and any(isinstance(t, ast.Name) and t.id in ("DOCS", "ANNOTATIONS") for t in node.targets)):
            # rayd.core.docs: a frontend's docstrings (and shown annotations) of core methods
            for value in node.value.values:
                skip.update(range(value.lineno, value.end_lineno + 1))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            skip.update(range(node.lineno, node.end_lineno + 1))
        elif (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
              and isinstance(node.value.value, str)):
            skip.update(range(node.lineno, node.end_lineno + 1))
    return skip


def _strip_comments(source: str) -> list[str]:
    """The source's lines with comments removed (strings left as they are)."""
    lines = source.splitlines()
    cuts: dict[int, int] = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT:
            cuts[tok.start[0]] = tok.start[1]
    return [line[:cuts[i + 1]] if (i + 1) in cuts else line for i, line in enumerate(lines)]


def code_lines(path: pathlib.Path) -> list[tuple[int, str]]:
    """(line number, normalised text) of every counted line of one file."""
    source = path.read_text()
    skip = _skipped_lines(source)
    out = []
    for i, line in enumerate(_strip_comments(source), start=1):
        if i in skip:
            continue
        text = _CAMEL.sub("FRONTEND", _NAMES.sub("FRONTEND", line.strip()))
        if len(text) < MIN_CHARS:
            continue
        out.append((i, text))
    return out


def tree_lines(tree: pathlib.Path) -> dict[str, list[str]]:
    """normalised text -> the places ('file:line') it stands in."""
    places: dict[str, list[str]] = collections.defaultdict(list)
    for path in sorted(tree.rglob("*.py")):
        for lineno, text in code_lines(path):
            places[text].append(f"{path.relative_to(tree.parents[1])}:{lineno}")
    return places


def measure(root: pathlib.Path = ROOT):
    """(total shared lines, per-file counts in rayd.torch, shared line -> places)."""
    torch_lines = tree_lines(root / "src" / "rayd" / "torch")
    drjit_lines = tree_lines(root / "src" / "rayd" / "drjit")
    shared = {}
    per_file: collections.Counter = collections.Counter()
    total = 0
    for text, tplaces in torch_lines.items():
        dplaces = drjit_lines.get(text)
        if not dplaces:
            continue
        n = min(len(tplaces), len(dplaces))
        total += n
        shared[text] = (tplaces, dplaces)
        for place in tplaces[:n]:
            per_file[place.rsplit(":", 1)[0]] += 1
    return total, per_file, shared


_HEADER = re.compile(r"^(class |def |@|(_core_edges\.)?document\(|\) ->|[a-z_]+: .*=.*,$|[a-z_]+: [A-Za-z]+,$)")


def kinds(shared: dict) -> collections.Counter:
    """The shared lines split by kind (a reading aid; the figure itself counts every line alike).

    - ``header``: class statements, ``def`` lines and parameter lines of signatures, decorators,
      ``document(`` calls: the parallel public types and hooks both frontends implement;
    - ``idiom``: a line standing in other files on the two sides, or in four or more places
      (``return value``, ``if active is not None:``): words in common, not one piece of logic;
    - ``body``: the rest: the same statement in the two versions of one file.
    """
    out: collections.Counter = collections.Counter()
    for text, (tplaces, dplaces) in shared.items():
        n = min(len(tplaces), len(dplaces))
        tfiles = {p.rsplit(":", 1)[0].rsplit("/", 1)[-1] for p in tplaces}
        dfiles = {p.rsplit(":", 1)[0].rsplit("/", 1)[-1] for p in dplaces}
        if _HEADER.match(text):
            out["header"] += n
        elif not (tfiles & dfiles) or len(tplaces) + len(dplaces) > 3:
            out["idiom"] += n
        else:
            out["body"] += n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lines", action="store_true", help="list every shared line")
    parser.add_argument("--kinds", action="store_true", help="also split the figure by kind of line")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT, help="checkout to measure (default: this one)")
    args = parser.parse_args()
    total, per_file, shared = measure(args.root.resolve())
    print(f"identical code lines rayd.torch <-> rayd.drjit: {total}")
    print("by rayd.torch file:")
    for name, n in per_file.most_common():
        print(f"  {n:4d}  {name}")
    if args.kinds:
        print("by kind (header: class/def/signature/decorator/document lines; idiom: in other files or 4+ places;"
              " body: the rest):")
        for kind, n in kinds(shared).most_common():
            print(f"  {n:4d}  {kind}")
    if args.lines:
        print("shared lines:")
        for text, (tplaces, dplaces) in sorted(shared.items(), key=lambda kv: kv[1][0][0]):
            print(f"  {tplaces[0]} ~ {dplaces[0]}: {text}")


if __name__ == "__main__":
    main()
