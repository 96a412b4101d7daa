"""Sessions from a lent GPU come back as an archive: ingest adds new ones with their manifest lines,
skips identical ones, and refuses changed, malformed or misfiled ones without touching the store."""

import json
import subprocess
import sys
import tarfile

import numpy as np
import pytest

from conftest import SMALL_CELLS
from decodegap.core import manifest, paths
from decodegap.analysis import synthetic
from decodegap.measure.ingest import ingest
from decodegap.core.record import encode


def archive(tmp_path, name, files: dict[str, bytes]):
    """A tar.gz as a device call returns it: paths under some folder, then results/raw/..."""
    src = tmp_path / f"{name}-src"
    for rel, data in files.items():
        (src / "out" / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / "out" / rel).write_bytes(data)
    path = tmp_path / f"{name}.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        tar.add(src / "out", arcname="out")
    return path


def session_bytes(cell, session, **kw) -> bytes:
    return encode(synthetic.record(cell, session, 48, np.random.default_rng(session), **kw))


def raw(cell, session) -> str:
    return paths.session_path(session=session, **cell).as_posix()


def test_new_sessions_are_added_once_with_their_manifest_lines(tmp_path):
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]
    files = {raw(cell, s): session_bytes(cell, s) for s in (0, 1)}
    first = ingest([archive(tmp_path, "a", files)], store, say=lambda _: None)
    assert sorted(first["added"]) == sorted(files) and not first["refused"]
    for rel, data in files.items():
        assert (store / rel).read_bytes() == data
        assert oct((store / rel).stat().st_mode & 0o777) == "0o444"
    assert manifest.read(store).keys() == set(files) and manifest.audit(store).ok
    again = ingest([archive(tmp_path, "b", files)], store, say=lambda _: None)
    assert sorted(again["already"]) == sorted(files) and not again["added"] and not again["refused"]
    assert len((store / paths.MANIFEST).read_text().splitlines()) == 2


def test_changed_malformed_and_misfiled_sessions_are_refused(tmp_path):
    store = tmp_path / "store"
    cell, other = SMALL_CELLS[1], SMALL_CELLS[2]
    kept = session_bytes(cell, 0)
    ingest([archive(tmp_path, "a", {raw(cell, 0): kept})], store, say=lambda _: None)
    nan = json.dumps(json.loads(session_bytes(cell, 2))).replace('"host_ms": [', '"host_ms": [NaN, ', 1).encode()
    result = ingest([archive(tmp_path, "b", {
        raw(cell, 0): session_bytes(cell, 0, base_ms=99.0),  # a different session 0
        raw(cell, 1): session_bytes(other, 1),  # another cell's record in this cell's folder
        raw(cell, 2): nan,
        raw(cell, 3).replace("s03", "s003"): session_bytes(cell, 3),
    })], store, say=lambda _: None)
    assert not result["added"]
    text = "\n".join(result["refused"])
    assert f"{raw(cell, 0)}: already recorded with other bytes" in text
    assert f"{raw(cell, 1)}: filed under another cell" in text
    assert f"{raw(cell, 2)}: holds NaN" in text
    assert "s003.json: not a session path" in text
    assert (store / raw(cell, 0)).read_bytes() == kept
    assert manifest.read(store).keys() == {raw(cell, 0)}


def test_command_line_exit_status_and_dry_run(tmp_path):
    store = tmp_path / "store"
    cell = SMALL_CELLS[0]
    tar = archive(tmp_path, "a", {raw(cell, 0): session_bytes(cell, 0)})
    cmd = [sys.executable, "-m", "decodegap.measure.ingest", str(tar), "--root", str(store)]
    env = {"PATH": "/usr/bin:/bin"}
    dry = subprocess.run(cmd + ["--dry-run"], capture_output=True, text=True, env=env)
    assert dry.returncode == 0 and "would add 1" in dry.stdout and not (store / "results").exists()
    real = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert real.returncode == 0 and "added 1, already recorded 0, refused 0" in real.stdout
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    bad = subprocess.run([sys.executable, "-m", "decodegap.measure.ingest", str(bogus), "--root", str(store)], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "neither a folder nor a tar archive" in bad.stderr


@pytest.mark.parametrize("flag,value", [("--max-rel-stdev", "-1"), ("--max-rel-stdev", "0"), ("--min-samples", "0"),
                                        ("--timed-steps", "0"), ("--min-duration-s", "-0.5")])
def test_measure_refuses_a_protocol_that_judges_nothing(flag, value, capsys):
    from decodegap.measure.session import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--gpu", "cpu", "--model", "tiny-llama", "--ctx", "8", "--mode", "eager", "--session", "0", flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err
