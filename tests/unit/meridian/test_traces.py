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
    ("2023-11-16 18:15:46.6805900,-3,44\n", 2, "ContextTokens must be >= 0"),
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
    with pytest.raises(traces.TraceError, match=r":1: .*expected Azure: TIMESTAMP,ContextTokens,GeneratedTokens; "
                                                r"BurstGPT: Timestamp,Model,Request tokens"):
        list(traces.read(path))


GOOD_ROW = '{"timestamp": 0, "input_length": 10, "output_length": 1, "hash_ids": [1]}\n'


@pytest.mark.parametrize("second_row, words", [
    ('{"timestamp": 5,', "not JSON"),
    ("[1, 2]", "JSON object"),
    ('{"timestamp": 1, "input_length": 10, "hash_ids": [1]}', "missing 'output_length'"),
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


def test_mooncake_rows_without_hash_ids_read_as_arrivals_and_lengths(tmp_path):
    """A JSON-lines trace in Mooncake's fields but without ``hash_ids`` (arrivals and lengths only,
    as other tools write them) reads, with no block hashes: the simulator replays it."""
    path = _write(tmp_path, "t.jsonl", '{"timestamp": 0, "input_length": 700, "output_length": 3}\n'
                                       '{"timestamp": 250, "input_length": 20, "output_length": 9, "hash_ids": [4]}\n')
    assert list(traces.read(path)) == [traces.Request(0.0, 700, 3, ()), traces.Request(0.25, 20, 9, (4,))]


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


def test_azure_2024_rows_with_utc_offsets_read_like_2023_rows(tmp_path):
    """The 2024 Azure traces stamp rows with a UTC offset (``+00:00``); offsets (and ``Z``, and a
    ``T`` separator) are read into UTC, so arrivals are exact across rows written either way."""
    path = _write(tmp_path, "week.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2024-05-10 00:00:00.009930+00:00,2048,28\n"
                  "2024-05-10 00:00:01.509930+00:00,13,0\n"
                  "2024-05-10T02:00:02.009930+02:00,700,120\n"
                  "2024-05-10 00:00:03Z,5,6\n")
    rows = list(traces.read(path))
    assert [r.arrival_s for r in rows] == pytest.approx([0.0, 1.5, 2.0, 2.99007], abs=1e-9)
    assert [(r.input_tokens, r.output_tokens) for r in rows] == [(2048, 28), (13, 0), (700, 120), (5, 6)]


def test_rows_without_a_prompt_are_skipped_counted_and_logged(tmp_path, caplog):
    """A row with no prompt tokens cannot be replayed: it is left out, and the file's such rows are
    reported once, with their count and the first line, so a mostly-empty trace is noticed."""
    path = _write(tmp_path, "t.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                  "2023-11-16 18:15:46.0000000,10,1\n"
                  "2023-11-16 18:15:47.0000000,0,5\n"
                  "2023-11-16 18:15:48.0000000,0,0\n"
                  "2023-11-16 18:15:49.0000000,20,2\n")
    with caplog.at_level("WARNING", logger="meridian.traces"):
        rows = list(traces.read(path))
    assert [(r.arrival_s, r.input_tokens) for r in rows] == [(0.0, 10), (3.0, 20)]
    [record] = [r for r in caplog.records if "trace_rows_skipped" in r.getMessage()]
    assert "rows=2 first_line=3" in record.getMessage() and str(path) in record.getMessage()


def test_a_csv_saved_with_a_byte_order_mark_reads(tmp_path):
    """Spreadsheet exports start a UTF-8 CSV with a byte order mark; the header still matches."""
    path = tmp_path / "excel.csv"
    path.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:15:46.6805900,374,44\n")
    assert list(traces.read(path)) == [traces.Request(0.0, 374, 44)]


BURST_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def test_burstgpt_rows_and_totals(tmp_path):
    """A BurstGPT file (told from Azure's by its header, both being .csv) reads with arrivals from
    its first row, failed requests (0 response tokens) kept and prompt-less rows left out."""
    path = _write(tmp_path, "BurstGPT_1.csv", BURST_HEADER +
                  "5,ChatGPT,472,18,490,Conversation log\n"
                  "5,GPT-4,1021,0,1021,API log\n"
                  "7.5,ChatGPT,0,44,44,Conversation log\n"
                  "12,ChatGPT,30,300,330,API log\n")
    assert traces.resolve(path) == (path, "burstgpt")
    rows = list(traces.read(path))
    assert rows == [traces.Request(0.0, 472, 18), traces.Request(0.0, 1021, 0), traces.Request(7.0, 30, 300)]
    s = traces.summarize(traces.read(path))
    assert (s.rows, s.input_tokens, s.output_tokens, s.last_arrival_s) == (3, 1523, 318, 7.0)


def test_burstgpt_columns_are_found_by_name(tmp_path):
    """Columns are read by name: another order, or extra columns, read the same."""
    path = _write(tmp_path, "b.csv", "Log Type,Response tokens,Model,Request tokens,Timestamp\n"
                  "API log,18,ChatGPT,472,100.25\nAPI log,2,GPT-4,9.0,101\n")
    assert list(traces.read(path)) == [traces.Request(0.0, 472, 18), traces.Request(0.75, 9, 2)]


@pytest.mark.parametrize("body, line, words", [
    ("5,ChatGPT,472\n", 2, "3 fields; expected 6"),
    ("soon,ChatGPT,472,18,490,API log\n", 2, "Timestamp 'soon' must be seconds >= 0"),
    ("5,ChatGPT,4.5,18,22.5,API log\n", 2, "Request tokens must be an integer"),
    ("5,ChatGPT,4,-1,3,API log\n", 2, "Response tokens must be >= 0"),
    ("5,ChatGPT,4,1,5,API log\n4,ChatGPT,4,1,5,API log\n", 3, "arrival order"),
])
def test_bad_burstgpt_row_names_file_and_line(tmp_path, body, line, words):
    """A bad BurstGPT row raises TraceError naming the file, the line and what is wrong."""
    path = _write(tmp_path, "b.csv", BURST_HEADER + body)
    with pytest.raises(traces.TraceError) as err:
        list(traces.read(path))
    assert str(err.value).startswith(f"{path}:{line}: ") and words in str(err.value)
