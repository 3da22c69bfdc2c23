"""The run record's writer and the collector's shortcuts: the bytes and numbers of the plain path."""
from __future__ import annotations

import numpy as np
import pytest

from dspark_sim.metrics.collector import Collector, one_value
from dspark_sim.metrics.columns import Growing
from dspark_sim.metrics.record import REQUEST_COLUMNS, REQUEST_LINE, STEP_COLUMNS, RecordWriter


def _steps_csv(tmp_path, name: str, *columns) -> bytes:
    writer = RecordWriter(tmp_path / name)
    writer.steps(**dict(zip(STEP_COLUMNS, columns)))
    writer.close()
    return (tmp_path / name / "steps.csv").read_bytes()


def test_constant_step_columns_write_the_rows_full_columns_write(tmp_path):
    rows = 5
    full = [list(range(rows)), [0.5 * i for i in range(rows)], [1e-3] * rows]
    constants = {3: 7, 5: 0, 9: -0.0, 14: 2.5, 15: 1}  # column index -> the value of every row
    columns, given = [], []
    for i in range(len(STEP_COLUMNS)):
        values = full[i] if i < len(full) else [constants.get(i, i)] * rows
        columns.append(values)
        given.append(constants[i] if i in constants else values)
    assert _steps_csv(tmp_path, "given", *given) == _steps_csv(tmp_path, "full", *columns)
    assert b",-0.000000000," in _steps_csv(tmp_path, "given", *given)


def test_the_writer_puts_named_columns_in_the_files_order(tmp_path):
    """Columns go in by name, in any order; the file's order is the writer's, and every
    column must be named once."""
    row = {c: i for i, c in enumerate(REQUEST_COLUMNS)}
    writer = RecordWriter(tmp_path / "named")
    writer.request(**dict(reversed(row.items())))
    writer.requests(**{c: [v, v] for c, v in row.items()})
    writer.step(**{c: 1 for c in reversed(STEP_COLUMNS)})
    with pytest.raises(ValueError, match=r"missing \['status'\]"):
        writer.request(**{k: v for k, v in row.items() if k != "status"})
    with pytest.raises(ValueError, match=r"unknown \['window'\]"):
        writer.request(**row, window=8)
    writer.close()
    lines = (tmp_path / "named" / "requests.csv").read_text().splitlines()
    assert lines[0] == ",".join(REQUEST_COLUMNS)
    assert lines[1] == lines[2] == lines[3] == REQUEST_LINE % tuple(range(len(REQUEST_COLUMNS)))
    assert (tmp_path / "named" / "steps.csv").read_text().splitlines()[1].startswith("1,1.000000,")


def test_a_column_is_one_value_only_where_every_value_writes_alike():
    assert one_value(np.array([0.0, 0.0]), [0.0, 0.0]) == 0.0
    assert one_value(np.array([-0.0, -0.0]), [-0.0, -0.0]) == 0.0  # -0.0, written "-0..."
    assert one_value(np.array([0.0, -0.0]), [0.0, -0.0]) == [0.0, -0.0]
    assert one_value(np.array([3, 4]), [3, 4]) == [3, 4]
    assert one_value(np.array([], dtype=np.int64), []) == []


def test_gaps_are_counted_as_unique_counts_them():
    collector = Collector(None)
    gaps = np.array([0.5, 0.25, 0.5, 0.75, 0.25, 0.5])  # binary fractions: 1 - (1 - gap) is gap
    collector.on_gaps(1.0 - gaps, 0, 1.0)  # the tokens before these came at 1 - gap
    values, counts = np.unique(gaps, return_counts=True)
    assert collector.gaps.gap_s.tolist() == values.tolist()
    assert collector.gaps.count.tolist() == counts.tolist()


def test_growing_columns_keep_their_rows_past_their_capacity():
    grow = Growing({"x": np.int64})
    for start in range(0, 3000, 700):
        grow.extend(x=np.arange(start, start + 700))
    assert grow["x"].tolist() == list(range(3500))


def _finished(n: int):
    """``n`` finished requests as the running table gives them (:meth:`Table.take`)."""
    from dspark_sim.serving.batch import Table
    from dspark_sim.serving.request import Request

    rng = np.random.default_rng(1)
    arrival = rng.random(n).tolist()
    table = Table()
    table.append([Request(i, a, 10, i + 1, 0, 0.0, 10, first_scheduled_s=a + 0.1, first_token_s=a + 0.2, num_steps=3)
                  for i, a in enumerate(arrival)])
    return table.take(np.ones(n, dtype=bool))


def test_requests_finishing_at_several_times_are_recorded_as_one_call_per_time(tmp_path):
    rows, times = _finished(5), np.array([2.0, 2.0, 2.5, 3.0, 3.0])
    for replicas in (1, 2):
        one, each = (Collector(tmp_path / f"{name}-{replicas}", replicas, clock=lambda: 0.0)
                     for name in ("one", "each"))
        one.on_finish(rows, times)
        for t in np.unique(times).tolist():
            each.on_finish(rows.part(*(times == t).nonzero()[0][[0, -1]] + [0, 1]), t)
        for c in (one, each):
            c.close()
        for column in ("finish_s", "e2el_ms", "tpot_ms", "arrival_s"):
            np.testing.assert_array_equal(getattr(one.requests, column), getattr(each.requests, column))  # nan == nan
        assert (tmp_path / f"one-{replicas}" / "requests.csv").read_bytes() == \
            (tmp_path / f"each-{replicas}" / "requests.csv").read_bytes()


def test_a_record_written_before_the_newer_step_columns_reads_them_as_their_defaults(tmp_path):
    from dspark_sim.errors import InputError
    from dspark_sim.metrics.record import STEP_DEFAULTS, read_steps

    (tmp_path / "steps.csv").write_text("step,start_s,step_s\n0,0.0,0.01\n1,0.01,0.02\n")
    got = read_steps(tmp_path / "steps.csv", ("step_s", "prefill_longest", "read_s"))
    assert got.step_s.tolist() == [0.01, 0.02]
    assert got.prefill_longest.tolist() == [STEP_DEFAULTS["prefill_longest"]] * 2 == [0.0, 0.0]
    assert got.read_s.tolist() == [0.0, 0.0]
    with pytest.raises(InputError, match="kv_tokens"):  # an older column is still needed
        read_steps(tmp_path / "steps.csv", ("kv_tokens",))
