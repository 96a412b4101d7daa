"""The session record: atomic write that never overwrites, and a read that names bad files."""

import json

import pytest

from decodegap.core import paths
from decodegap.core.errors import ConfigError, RawFileError, SessionExists
from decodegap.core.record import read_session, write_session


@pytest.fixture
def record(tmp_path, measure_main):
    _, rec, path = measure_main(tmp_path)
    return rec, path


def test_write_is_atomic_and_leaves_no_temporary(tmp_path, record):
    rec, _ = record
    out = tmp_path / "a" / "s00.json"
    assert write_session(rec, out) == "written"
    assert json.loads(out.read_text()) == rec
    assert [p.name for p in out.parent.iterdir()] == ["s00.json"]


def test_identical_rewrite_is_a_no_op_and_different_is_refused(tmp_path, record):
    rec, _ = record
    out = tmp_path / "s00.json"
    write_session(rec, out)
    assert write_session(rec, out) == "unchanged"
    before = out.read_bytes()
    with pytest.raises(SessionExists, match="never overwritten"):
        write_session({**rec, "seed": 123}, out)
    assert out.read_bytes() == before


def test_read_names_truncated_foreign_and_malformed_files(tmp_path, record):
    rec, path = record
    text = path.read_text()
    cases = {
        "truncated.json": (text[: len(text) // 2], "not valid JSON"),
        "foreign.json": (json.dumps({"schema": "someone-else/3"}), "foreign schema 'someone-else/3'"),
        "list.json": ("[1, 2]", "foreign schema 'list'"),
        "binary.json": (None, "not valid JSON|not text"),
        "malformed.json": (json.dumps({**rec, "status": "maybe"}), "status"),
    }
    for name, (content, message) in cases.items():
        p = tmp_path / name
        if content is None:
            p.write_bytes(b"\xff\xfe\x00garbage")
        else:
            p.write_text(content)
        with pytest.raises(RawFileError, match=message) as err:
            read_session(p)
        assert str(p) in str(err.value)


def test_path_grammar_round_trip():
    p = paths.session_path("h200", "qwen2.5-7b", 2048, "sdpa-flash", "bf16", "ab-eager-graphed", 3)
    assert p.as_posix() == "results/raw/h200/qwen2.5-7b/ctx2048/sdpa-flash_bf16_ab-eager-graphed/s03.json"
    assert paths.parse_session_path(p) == {
        "gpu": "h200", "model": "qwen2.5-7b", "ctx": 2048, "attn": "sdpa-flash", "quant": "bf16", "mode": "ab-eager-graphed", "session": 3,
    }
    assert paths.parse_session_path("results/raw/h200/x/ctx1/a_b/s00.json") is None
    with pytest.raises(ConfigError, match="no '_'"):
        paths.session_path("h_200", "m", 1, "sdpa", "bf16", "eager", 0)


def test_no_two_bundled_sessions_share_samples_and_a_partial_copy_would():
    """The copy guard's margin on real data: no bundled session shares half an arm's step times with
    another (the largest natural overlap is a few per cent), while a copy that keeps half of a real
    session's steps, reordered, is found."""
    from pathlib import Path

    from decodegap.core.record import SampleIndex

    index, files = SampleIndex(), sorted((Path(__file__).resolve().parents[1] / "results/raw").rglob("s*.json"))
    for path in files:
        record = json.loads(path.read_bytes())
        assert index.twin(record, path.as_posix()) is None, path
        index.add(record, path.as_posix())
    record = json.loads(files[-1].read_bytes())
    arm = next(a for a in record["arms"] if len(a["timed"]["host_ms"]) >= 64)
    host = arm["timed"]["host_ms"]
    arm["timed"]["host_ms"] = host[len(host) // 2:][::-1] + [x * 1.5 for x in host[: len(host) // 2]]
    assert index.twin(record, "results/raw/elsewhere/s99.json") == files[-1].as_posix()
