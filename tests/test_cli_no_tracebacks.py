"""No traceback reaches a user: bad paths, encodings and ragged CSVs through every file verb.

Each bad input goes through Typer's runner: the exit code is not 0, the output has
no "Traceback", it names the file or the flag to fix, and the ledger is unchanged
(not even created).
"""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from dpkit.cli import app

# Wide enough that Rich never wraps a long temporary path inside its error box.
runner = CliRunner(env={"COLUMNS": "500", "TERMINAL_WIDTH": "500"})

FILES = {
    "latin1.csv": "age,city\n30,Montr\xe9al\n40,Z\xfcrich\n".encode("latin-1"),
    "ragged_long.csv": b"age,city\n30,a\n40,b,extra\n",
    "ragged_all.csv": b"age,city\n30,a,x\n40,b,y\n",  # 2bf6f1e: headers column0..2
    "ragged_short.csv": b"age,city\n30,a\n40\n",
    "empty.csv": b"",
}
QUERY = ["count", "--epsilon", "1", "--budget", "5", "--type", "age=DOUBLE,city=VARCHAR"]


def _write(tmp_path: Path) -> None:
    for name, content in FILES.items():
        (tmp_path / name).write_bytes(content)
    (tmp_path / "folder.csv").mkdir()


def _check(result, tmp_path: Path, *names: str) -> None:
    output = " ".join(result.output.split())
    assert result.exit_code != 0, output
    assert "Traceback" not in output
    assert result.exception is None or isinstance(result.exception, SystemExit), output
    assert any(name in output for name in names), output
    assert not (tmp_path / "ledger.db").exists()


@pytest.mark.parametrize(
    ("file", "names"),
    [
        ("latin1.csv", ("--encoding",)),
        ("ragged_long.csv", ("ragged_long.csv",)),
        ("ragged_all.csv", ("ragged_all.csv",)),
        ("ragged_short.csv", ("ragged_short.csv",)),
        ("empty.csv", ("empty.csv",)),
        ("missing.csv", ("missing.csv",)),
        ("folder.csv", ("folder.csv",)),
    ],
)
def test_query_refuses_bad_files_clearly(tmp_path: Path, file: str, names: tuple[str, ...]) -> None:
    _write(tmp_path)
    ledger = str(tmp_path / "ledger.db")
    result = runner.invoke(app, ["query", str(tmp_path / file), *QUERY, "--ledger", ledger])
    _check(result, tmp_path, *names)


def test_query_reads_latin1_with_encoding(tmp_path: Path) -> None:
    _write(tmp_path)
    result = runner.invoke(app, ["query", str(tmp_path / "latin1.csv"), *QUERY, "--encoding",
                                 "latin-1", "--ledger", str(tmp_path / "ledger.db")])  # fmt: skip
    assert result.exit_code == 0, result.output
    unknown = runner.invoke(app, ["query", str(tmp_path / "latin1.csv"), *QUERY, "--encoding",
                                  "klingon", "--ledger", str(tmp_path / "l2.db")])  # fmt: skip
    assert unknown.exit_code != 0 and "unknown encoding" in unknown.output
    assert not (tmp_path / "l2.db").exists()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["survey", "estimate", "{d}/empty.csv", "{d}/s.json"], ("empty.csv",)),
        (["survey", "estimate", "{d}/ragged_long.csv", "{d}/s.json"], ("ragged_long.csv",)),
        (["survey", "estimate", "{d}/latin1.csv", "{d}/s.json"], ("latin1.csv",)),
        (["survey", "estimate", "{d}/missing.csv", "{d}/s.json"], ("missing.csv",)),
        (["survey", "estimate", "{d}/folder.csv", "{d}/s.json"], ("folder.csv",)),
        (["survey", "simulate", "{d}/latin1.csv", "--out", "{d}/r.csv"], ("latin1.csv",)),
        (["survey", "simulate", "{d}/missing.json", "--out", "{d}/r.csv"], ("missing.json",)),
        (["walkthrough", "titanic", "--public-data", "--data", "{d}/missing.csv"],
         ("missing.csv",)),
        (["walkthrough", "titanic", "--public-data", "--data", "{d}/folder.csv"],
         ("folder.csv",)),
        (["walkthrough", "titanic", "--public-data", "--data", "{d}/latin1.csv"],
         ("latin1.csv",)),
        (["walkthrough", "titanic", "--public-data", "--data", "{d}/ragged_long.csv"],
         ("ragged_long.csv",)),
        (["walkthrough", "titanic", "--public-data", "--data", "{d}/empty.csv"],
         ("empty.csv",)),
        (["location", "obfuscate", "{d}/latin1.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("latin1.csv",)),
        (["location", "obfuscate", "{d}/ragged_long.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("ragged_long.csv",)),
        (["location", "obfuscate", "{d}/ragged_all.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("ragged_all.csv",)),
        (["location", "obfuscate", "{d}/empty.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("empty.csv",)),
        (["location", "obfuscate", "{d}/missing.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("missing.csv",)),
        (["location", "obfuscate", "{d}/folder.csv", "--out", "{d}/o.csv", "--epsilon", "1",
          "--area", "0", "0", "1", "1", "--lat", "age", "--lon", "city"], ("folder.csv",)),
    ],
)  # fmt: skip
def test_file_verbs_refuse_bad_files_clearly(
    tmp_path: Path, args: list[str], names: tuple[str, ...]
) -> None:
    _write(tmp_path)
    (tmp_path / "s.json").write_text('{"questions": [{"name": "age", "kind": "number", '
                                     '"epsilon": 1.0, "bounds": [0, 100]}]}')  # fmt: skip
    result = runner.invoke(app, [a.format(d=tmp_path) for a in args])
    _check(result, tmp_path, *names)
