"""Trace readers: Azure, BurstGPT and Mooncake files written to tmp_path, good and bad."""
from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import pytest

from dspark_sim.errors import InputError
from dspark_sim.workload import RequestChunk, TraceWarning, arriving_by, count_requests, detect_format, read_trace

SHIPPED = Path(__file__).resolve().parents[1] / "examples" / "traces" / "azure_llm_2023_code.csv"

AZURE = """TIMESTAMP,ContextTokens,GeneratedTokens
2023-11-16 18:17:03.9799600,4808,10
2023-11-16 18:17:04.0319600,3180,8
2023-11-16 18:17:04.0781490,110,27
2023-11-16 18:17:05.0000001,7433,14
"""

BURSTGPT = """Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type
5,s1,1.0,ChatGPT,472,18,490,Conversation log
45,s2,2.0,ChatGPT,1087,0,1087,Conversation log
46,s3,2.0,GPT-4,20,30,50,Conversation log (failed)
110.5,s4,3.0,GPT-4,417,505,922,API log
"""

MOONCAKE = [
    {"timestamp": 1000, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]},
    {"timestamp": 1500, "input_length": 512, "output_length": 10, "hash_ids": [46]},
    {"timestamp": 4000, "input_length": 20, "output_length": 3, "hash_ids": []},
]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def jsonl(rows) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def read_all(path, **kw) -> RequestChunk:
    return RequestChunk.concat(read_trace(path, **kw))


# -- Azure ------------------------------------------------------------------------
def test_azure_parses_wallclock_exactly(tmp_path):
    path = write(tmp_path, "azure.csv", AZURE)
    assert detect_format(path) == "azure"
    c = read_all(path)
    ns = np.array([0, 52_000_000, 98_189_000, 1_020_040_100])
    np.testing.assert_array_equal(c.arrival_s, ns / 1e9)
    np.testing.assert_array_equal(c.prompt_tokens, [4808, 3180, 110, 7433])
    np.testing.assert_array_equal(c.output_tokens, [10, 8, 27, 14])
    assert c.arrival_s.dtype == np.float64 and c.prompt_tokens.dtype == np.int64
    assert c.hash_ids is None


def test_azure_2024_utc_offsets(tmp_path):
    path = write(tmp_path, "azure24.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                 "2024-05-10 00:00:00.009930+00:00,10,2\n"
                 "2024-05-10 02:00:01.009930+02:00,11,3\n"
                 "2024-05-10 00:00:02Z,12,4\n")
    np.testing.assert_array_equal(read_all(path).arrival_s, [0.0, 1.0, 1.99007])


def test_time_scale_max_requests_and_chunking(tmp_path):
    path = write(tmp_path, "azure.csv", AZURE)
    full = read_all(path)
    np.testing.assert_array_equal(read_all(path, time_scale=2.0).arrival_s, full.arrival_s / 2)
    chunks = list(read_trace(path, chunk_rows=3))
    assert [len(c) for c in chunks] == [3, 1]
    np.testing.assert_array_equal(RequestChunk.concat(chunks).arrival_s, full.arrival_s)
    head = read_all(path, max_requests=3, chunk_rows=2)
    np.testing.assert_array_equal(head.prompt_tokens, full.prompt_tokens[:3])


def test_shipped_azure_trace_reads_whole_and_sane():
    """Every request of the shipped trace, in order, the same in any chunking (how long it takes
    is bench_sim.py's, not a test's)."""
    c = read_all(SHIPPED)
    assert len(c) == count_requests(SHIPPED) == 8819
    assert c.arrival_s[0] == 0.0 and np.all(np.diff(c.arrival_s) >= 0)
    assert c.arrival_s[-1] == pytest.approx(3435.948056, abs=1e-9)  # 19:14:19.5275060 - 18:17:03.9799600
    assert c.prompt_tokens.min() >= 1 and c.output_tokens.min() >= 1
    small = RequestChunk.concat(read_trace(SHIPPED, chunk_rows=1000))
    np.testing.assert_array_equal(small.arrival_s, c.arrival_s)


@pytest.mark.parametrize("until_s", [0.0, 600.0, 3435.948056, 1e6])
def test_until_s_keeps_the_requests_arriving_by_then(until_s):
    """A slice of the trace from its start: exactly the requests arriving at or before until_s,
    whatever the chunks (the tuner's pruning scores trials on such slices)."""
    from dspark_sim.scenario import Workload

    full = read_all(SHIPPED)
    keep = int((full.arrival_s <= until_s).sum())
    for rows in (1000, 65536):
        head = RequestChunk.concat(arriving_by(read_trace(SHIPPED, chunk_rows=rows), until_s))
        np.testing.assert_array_equal(head.arrival_s, full.arrival_s[:keep])
        np.testing.assert_array_equal(head.output_tokens, full.output_tokens[:keep])
    sliced = RequestChunk.concat(Workload(trace=SHIPPED, until_s=until_s).requests(0))
    np.testing.assert_array_equal(sliced.prompt_tokens, full.prompt_tokens[:keep])


# -- BurstGPT ---------------------------------------------------------------------
def test_burstgpt_drops_failures_with_counted_warning(tmp_path):
    path = write(tmp_path, "burst.csv", BURSTGPT)
    assert detect_format(path) == "burstgpt"
    with pytest.warns(TraceWarning, match="dropped 2 failed"):
        c = read_all(path)
    np.testing.assert_array_equal(c.arrival_s, [0.0, 105.5])
    np.testing.assert_array_equal(c.prompt_tokens, [472, 417])
    np.testing.assert_array_equal(c.output_tokens, [18, 505])
    assert count_requests(path) == 4


def test_burstgpt_old_layout_by_column_name(tmp_path):
    path = write(tmp_path, "burst_old.csv", "Model,Response tokens,Timestamp,Request tokens\n"
                 "ChatGPT,7,10,100\nGPT-4,9,12.25,200\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = read_all(path)
    np.testing.assert_array_equal(c.arrival_s, [0.0, 2.25])
    np.testing.assert_array_equal(c.output_tokens, [7, 9])


def test_burstgpt_all_failed_is_empty(tmp_path):
    path = write(tmp_path, "burst.csv", "Timestamp,Request tokens,Response tokens\n1,10,0\n")
    with pytest.warns(TraceWarning), pytest.raises(InputError, match="empty trace"):
        read_all(path)


# -- Mooncake ---------------------------------------------------------------------
def test_mooncake_keeps_hash_ids(tmp_path):
    path = write(tmp_path, "mc.jsonl", jsonl(MOONCAKE[:2]) + "\n" + jsonl(MOONCAKE[2:]))
    assert detect_format(path) == "mooncake" and count_requests(path) == 3
    chunks = list(read_trace(path, chunk_rows=2))
    c = RequestChunk.concat(chunks)
    np.testing.assert_array_equal(c.arrival_s, [0.0, 0.5, 3.0])
    np.testing.assert_array_equal(c.prompt_tokens, [6955, 512, 20])
    assert c.hash_ids == [[46, 47, 48], [46], []]
    assert read_all(path, max_requests=1).hash_ids == [[46, 47, 48]]


# -- bad input ---------------------------------------------------------------------
def expect_error(path, key=None, match=None, **kw) -> InputError:
    with pytest.raises(InputError) as err:
        read_all(path, **kw)
    assert err.value.file == str(path)
    if key is not None:
        assert err.value.key == key
    if match is not None:
        assert match in str(err.value)
    return err.value


def test_missing_file_and_directory(tmp_path):
    expect_error(tmp_path / "nope.csv", match="not found")
    expect_error(tmp_path, match="directory")


def test_unknown_format(tmp_path):
    path = write(tmp_path, "x.csv", "a,b,c\n1,2,3\n")
    expect_error(path, key="header", match="unknown trace format")
    expect_error(write(tmp_path, "a.csv", AZURE), key="format", fmt="parquet")


@pytest.mark.parametrize("header, column", [
    ("TIMESTAMP,ContextTokens", "GeneratedTokens"),
    ("Timestamp,Request tokens,Total tokens", "Response tokens"),
])
def test_missing_column_is_named(tmp_path, header, column):
    path = write(tmp_path, "t.csv", header + "\n1,2,3\n")
    err = expect_error(path, key=column, match="missing column")
    assert err.value is None


def test_mooncake_format_forced_on_csv_is_bad_json(tmp_path):
    expect_error(write(tmp_path, "a.csv", AZURE), key="line 1", match="not valid JSON", fmt="mooncake")


@pytest.mark.parametrize("row, key, value, match", [
    ("2023-11-16 18:17:05,-3,10", "line 3: ContextTokens", "-3", "in [1, "),
    ("2023-11-16 18:17:05,12,0", "line 3: GeneratedTokens", "0", "in [1, "),
    ("2023-11-16 18:17:05,12,ten", "line 3: GeneratedTokens", "ten", "not a finite number"),
    ("2023-11-16 18:17:05,12.5,3", "line 3: ContextTokens", "12.5", "whole number"),
    ("2023-11-16 18:17:05,,3", "line 3: ContextTokens", "", "not a finite number"),
    ("yesterday,12,3", "line 3: TIMESTAMP", "yesterday", "not a timestamp"),
    ("2023-11-16 18:17:05", "line 3: ContextTokens", None, "too few"),
    ("2023-11-16 18:17:01,12,3", "line 3: TIMESTAMP", None, "not sorted"),
])
def test_azure_bad_rows_name_line_and_column(tmp_path, row, key, value, match):
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,4808,10\n" + row + "\n"
    err = expect_error(write(tmp_path, "bad.csv", text), key=key, match=match)
    if value is not None:
        assert err.value == value


def test_unsorted_across_chunks_names_line(tmp_path):
    path = write(tmp_path, "b.csv", "Timestamp,Request tokens,Response tokens\n1,5,5\n2,5,5\n1.5,5,5\n")
    expect_error(path, key="line 4: Timestamp", match="not sorted", chunk_rows=2)


def test_empty_traces(tmp_path):
    expect_error(write(tmp_path, "e.csv", ""), match="empty trace")
    expect_error(write(tmp_path, "h.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n\n"), match="empty trace")
    expect_error(write(tmp_path, "e.jsonl", "\n\n"), match="empty trace", fmt="mooncake")


@pytest.mark.parametrize("line, key, match", [
    ('{"timestamp": 5, "input_length": 3', "line 2", "not valid JSON"),
    ('{"timestamp": 5, "input_length": 3}', "line 2: output_length", "missing key"),
    ('[1, 2, 3]', "line 2", "JSON object"),
    ('{"timestamp": 5, "input_length": -1, "output_length": 2}', "line 2: input_length", "in [1, "),
    ('{"timestamp": "soon", "input_length": 1, "output_length": 2}', "line 2: timestamp", "finite"),
    ('{"timestamp": 5, "input_length": 1, "output_length": 2, "hash_ids": [1, "x"]}',
     "line 2: hash_ids", "list of integers"),
    ('{"timestamp": 0, "input_length": 1, "output_length": 2}', "line 2: timestamp", "not sorted"),
])
def test_mooncake_bad_lines(tmp_path, line, key, match):
    path = write(tmp_path, "m.jsonl", jsonl(MOONCAKE[:1]) + line + "\n")
    expect_error(path, key=key, match=match)


@pytest.mark.parametrize("kw, key", [
    ({"time_scale": 0}, "time_scale"), ({"time_scale": float("nan")}, "time_scale"),
    ({"max_requests": 0}, "max_requests"), ({"chunk_rows": 2.5}, "chunk_rows"),
])
def test_bad_arguments(tmp_path, kw, key):
    expect_error(write(tmp_path, "a.csv", AZURE), key=key, **kw)


def test_errors_are_eager_for_header_problems(tmp_path):
    with pytest.raises(InputError):
        read_trace(tmp_path / "missing.csv")  # no iteration needed
