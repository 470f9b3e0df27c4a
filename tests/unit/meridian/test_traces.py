"""The public trace readers: each shipped file's rows and totals, the packaging of the files, and
clear errors for bad rows.

The expected figures were computed once from the raw files, independently of the readers:
  Azure (rows, token sums, first/last TIMESTAMP):
    awk -F, 'NR>1{n++; i+=$2; o+=$3; if(n==1) f=$1; l=$1} END{print n, i, o, f, l}' FILE
    and the arrival span with `date -u -d TIMESTAMP +%s.%N` on the first and last rows;
  Mooncake: awk -F'[:,]' '{n++; i+=$4; o+=$6} END{print n, i, o}' FILE, the first and last lines'
    "timestamp" read by eye, and the block count with a json one-liner summing len(hash_ids)."""

from __future__ import annotations

import fnmatch
import pathlib
import tomllib

import pytest

from meridian import traces

# name: (rows, input tokens, output tokens, first arrival s, last arrival s)
EXPECTED = {
    "azure-conv": (19366, 22361870, 4088665, 0.0, 1700162048.402527 - 1700158546.680590),
    "azure-code": (8819, 18059974, 245896, 0.0, 1700162059.928016 - 1700158623.979960),
    "mooncake": (3993, 61194628, 595432, 0.0, 1022.025),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_shipped_trace_rows_and_totals(name):
    """Each shipped trace reads back with its recorded row count, token sums and arrival span."""
    rows, input_tokens, output_tokens, first_s, last_s = EXPECTED[name]
    s = traces.summarize(traces.read(name))
    assert (s.rows, s.input_tokens, s.output_tokens) == (rows, input_tokens, output_tokens)
    assert s.first_arrival_s == first_s
    assert s.last_arrival_s == pytest.approx(last_s, abs=1e-6)


def test_azure_first_rows_are_exact():
    """The first Azure rows: microsecond arrivals from the seven-digit timestamps, token counts as written."""
    it = traces.read("azure-conv")
    first, second = next(it), next(it)
    assert first == traces.Request(0.0, 374, 44)
    assert second.arrival_s == pytest.approx(50.9951690 - 46.6805900, abs=1e-6)
    assert (second.input_tokens, second.output_tokens, second.block_hashes) == (396, 109, ())


def test_mooncake_rows_carry_block_hashes():
    """Mooncake rows carry one block hash per 512 tokens; all blocks and the first row's are as recorded."""
    requests = list(traces.read("mooncake"))
    assert requests[0].block_hashes == tuple(range(79)) and requests[0].input_tokens == 40160
    assert sum(len(r.block_hashes) for r in requests) == 121877
    assert max(max(r.block_hashes) for r in requests) == 43923
    arrivals = [r.arrival_s for r in requests]
    assert arrivals == sorted(arrivals)


def test_trace_files_are_package_data(repo_root):
    """Every file of meridian/data/traces (traces, README, license) matches pyproject's package-data."""
    globs = tomllib.loads(pathlib.Path(repo_root, "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["meridian"]
    files = sorted(p.relative_to(pathlib.Path(repo_root, "meridian")).as_posix() for p in traces.DATA_DIR.iterdir())
    assert {"data/traces/README.md", "data/traces/LICENSE-Apache-2.0"} <= set(files)
    for name in (s.file for s in traces.SHIPPED.values()):
        assert f"data/traces/{name}" in files
    unshipped = [f for f in files if not any(fnmatch.fnmatch(f, g) for g in globs)]
    assert unshipped == []


def test_readme_cites_every_shipped_trace():
    """The traces' README names each shipped file, its license and the paper to cite."""
    text = (traces.DATA_DIR / "README.md").read_text()
    for s in traces.SHIPPED.values():
        assert s.file in text
    for needle in ("CC-BY 4.0", "Apache-2.0", "Splitwise", "ISCA 2024", "Mooncake: A KVCache-centric", "FAST 2025"):
        assert needle in text


def _write(tmp_path: pathlib.Path, name: str, text: str) -> pathlib.Path:
    path = tmp_path / name
    path.write_text(text)
    return path


@pytest.mark.parametrize("body, line, words", [
    ("2023-11-16 18:15:46.6805900,374\n", 2, "2 fields; expected 3"),
    ("2023-11-16 18:15:46.6805900,374,44\nyesterday,1,2\n", 3, "TIMESTAMP 'yesterday'"),
    ("2023-11-16 18:15:46.6805900,many,44\n", 2, "ContextTokens must be an integer"),
    ("2023-11-16 18:15:46.6805900,0,44\n", 2, "ContextTokens must be >= 1"),
    ("2023-11-16 18:15:46.6805900,3,-1\n", 2, "GeneratedTokens must be >= 0"),
    ("2023-11-16 18:15:46.6805900,3,1\n2023-11-16 18:15:45.0000000,3,1\n", 3, "arrival order"),
])
def test_bad_azure_row_names_file_and_line(tmp_path, body, line, words):
    """A bad Azure row raises TraceError naming the file, the line and what is wrong."""
    path = _write(tmp_path, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n" + body)
    with pytest.raises(traces.TraceError) as err:
        list(traces.read(path))
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)
    assert err.value.line == line


def test_bad_azure_header_is_refused(tmp_path):
    """A CSV without the Azure header is refused at line 1, saying which header is expected."""
    path = _write(tmp_path, "t.csv", "time,in,out\n1,2,3\n")
    with pytest.raises(traces.TraceError, match=r":1: .*expected TIMESTAMP,ContextTokens,GeneratedTokens"):
        list(traces.read(path))


GOOD_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'


@pytest.mark.parametrize("second_row, words", [
    ('{"timestamp": 5,', "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"timestamp": 1, "input_length": 10, "output_length": 1}', "missing 'hash_ids'"),
    ('{"timestamp": 1, "input_length": 600, "output_length": 1, "hash_ids": [1]}', "1 hash_ids for input_length 600; expected 2"),
    ('{"timestamp": 1, "input_length": "10", "output_length": 1, "hash_ids": [1]}', "'input_length' must be an integer"),
    ('{"timestamp": -1, "input_length": 10, "output_length": 1, "hash_ids": [1]}', "'timestamp' must be milliseconds"),
])
def test_bad_mooncake_row_names_file_and_line(tmp_path, second_row, words):
    """A bad Mooncake row raises TraceError naming the file, its line (2 here) and what is wrong."""
    path = _write(tmp_path, "t.jsonl", GOOD_ROW + second_row)
    with pytest.raises(traces.TraceError) as err:
        list(traces.read(path))
    assert str(err.value).startswith(f"{path}:2: ") and words in str(err.value)


def test_mooncake_rows_out_of_order_are_refused(tmp_path):
    """A Mooncake row earlier than the one before it is refused: a replay needs arrival order."""
    path = _write(tmp_path, "t.jsonl", GOOD_ROW.replace('"timestamp": 0', '"timestamp": 9') + GOOD_ROW)
    with pytest.raises(traces.TraceError, match=r":2: .*arrival order"):
        list(traces.read(path))


def test_rows_stream_before_a_late_bad_row(tmp_path):
    """Reading streams: rows before a bad one are delivered before the error is raised."""
    path = _write(tmp_path, "t.jsonl", '{"timestamp": 1500, "input_length": 10, "output_length": 1, "hash_ids": [7]}\n'
                                       '{"timestamp": 2000, "input_length": 10, "output_length": 1, "hash_ids": [7]}\n'
                                       "oops\n")
    it = traces.read(path)
    assert next(it) == traces.Request(0.0, 10, 1, (7,))
    assert next(it).arrival_s == 0.5
    with pytest.raises(traces.TraceError, match=":3: "):
        next(it)


def test_unknown_format_and_missing_file_are_named(tmp_path):
    """A file of unknown suffix or a missing file is refused with the valid choices named."""
    with pytest.raises(traces.TraceError, match=r"unknown trace format '\.txt'.*azure-conv"):
        traces.read(tmp_path / "t.txt")
    with pytest.raises(traces.TraceError, match="no such file"):
        traces.read(tmp_path / "absent.csv")
    with pytest.raises(KeyError, match="shipped traces: azure-conv, azure-code, mooncake"):
        traces.shipped("azure")
