"""The text readers: a malformed file is one ValueError naming the file, line and column."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from ncf.core import textfile

ROOT = Path(__file__).resolve().parents[2]
PRODUCTION = ("ncf", "workflows", "models", "serving", "sources", "bench")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b'{"a": 1}', None),
        (
            b'{\n  "a": [1,\n  2,,\n]}',
            "line 3 column 5: not valid JSON (Expecting value at char 17)",
        ),
        (
            b'{"a": "\xe9"}',
            "line 1 column 8: not UTF-8 text (invalid continuation byte, byte 0xe9)",
        ),
        (b"", "line 1 column 1: not valid JSON (Expecting value at char 0)"),
        (b'{"a": 1}\n{"b": 2}', "line 2 column 1: not valid JSON (Extra data at char 9)"),
    ],
)
def test_parse_names_the_file_line_and_column(data: bytes, message: str | None) -> None:
    if message is None:
        assert textfile.parse_json(data, "x.json") == {"a": 1}
        return
    with pytest.raises(ValueError) as info:
        textfile.parse_json(data, "dir/x.json")
    assert str(info.value) == f"dir/x.json: {message}; {textfile.FIX}"


def test_read_raises_oserror_for_a_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        textfile.read_json(tmp_path / "absent.json")


def test_read_text_names_the_line_of_a_byte_that_is_not_utf8(tmp_path: Path) -> None:
    path = tmp_path / "r.inter"
    path.write_bytes(b"user_id:token\titem_id:token\n1\t2\n3\t\x9c4\n")
    with pytest.raises(
        ValueError, match=r"r.inter: line 3 column 3: not UTF-8 text \(invalid start"
    ):
        textfile.read_text(path)


def _reads_a_file_with_json(node: ast.AST) -> bool:
    """``json.loads(x.read_text(...))``, ``json.loads(x.read_bytes())`` or ``json.load(f)``."""
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
        return False
    if not (isinstance(node.func.value, ast.Name) and node.func.value.id == "json"):
        return False
    if node.func.attr == "load":
        return True
    arg = node.args[0] if node.args else None
    return (
        node.func.attr == "loads"
        and isinstance(arg, ast.Call)
        and isinstance(arg.func, ast.Attribute)
        and arg.func.attr in ("read_text", "read_bytes")
    )


def test_every_json_file_is_read_by_the_one_reader() -> None:
    """A reader of its own would report a malformed file without naming it. Recognisers that
    only ask "is this my output?" (and treat anything malformed as "no") are exempt."""
    exempt = {
        ("ncf/core/atomic.py", "owner_of"),
        ("ncf/core/atomic.py", "written_by"),
        ("workflows/metadata.py", "read_metadata"),
        ("serving/repository.py", "is_export"),
        ("models/evaluate.py", "load_json_or_none"),
        # run by the peers' interpreter, which has RecBole and not this project
        ("bench/peers_recbole.py", "main"),
    }
    found = []
    for folder in PRODUCTION:
        for path in (ROOT / folder).rglob("*.py"):
            rel = path.relative_to(ROOT).as_posix()
            tree = ast.parse(path.read_text(encoding="utf-8"))
            for fn in ast.walk(tree):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                if (rel, fn.name) in exempt:
                    continue
                for node in ast.walk(fn):
                    if _reads_a_file_with_json(node):
                        found.append(f"{rel}:{node.lineno} ({fn.name})")
    assert not found, f"read these with ncf.core.textfile.read_json: {sorted(set(found))}"
