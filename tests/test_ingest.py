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
    assert real.returncode == 0 and "added 1, already recorded 0, ignored 0 (not data), refused 0" in real.stdout
    bogus = tmp_path / "notes.txt"
    bogus.write_text("hello")
    bad = subprocess.run([sys.executable, "-m", "decodegap.measure.ingest", str(bogus), "--root", str(store)], capture_output=True, text=True, env=env)
    assert bad.returncode == 1 and "neither a folder, a data file nor a tar archive" in bad.stderr


def test_without_root_it_writes_into_the_checkout_that_holds_the_current_folder(tmp_path):
    """Run from a subfolder (scripts/), ingest adds to the checkout's results/, not to a second tree
    beside the code; outside any checkout it refuses and asks for --root, writing nothing."""
    repo = tmp_path / "repo"
    (repo / "config").mkdir(parents=True)
    (repo / "Snakefile").write_text("")
    (repo / "scripts").mkdir()
    cell = SMALL_CELLS[0]
    tar = archive(tmp_path, "a", {raw(cell, 0): session_bytes(cell, 0)})
    env = {"PATH": "/usr/bin:/bin"}
    cmd = [sys.executable, "-m", "decodegap.measure.ingest", str(tar)]
    inside = subprocess.run(cmd, cwd=repo / "scripts", capture_output=True, text=True, env=env)
    assert inside.returncode == 0, inside.stderr
    assert f"into {repo}" in inside.stdout and (repo / raw(cell, 0)).is_file()
    assert not (repo / "scripts" / "results").exists()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    outside = subprocess.run(cmd, cwd=elsewhere, capture_output=True, text=True, env=env)
    assert outside.returncode == 2 and "not inside a decodegap checkout" in outside.stderr and "--root" in outside.stderr
    assert not (elsewhere / "results").exists()


@pytest.mark.parametrize("flag,value", [("--max-rel-stdev", "-1"), ("--max-rel-stdev", "0"), ("--min-samples", "0"),
                                        ("--timed-steps", "0"), ("--min-duration-s", "-0.5")])
def test_measure_refuses_a_protocol_that_judges_nothing(flag, value, capsys):
    from decodegap.measure.session import parse_args

    with pytest.raises(SystemExit) as exc:
        parse_args(["--gpu", "cpu", "--model", "tiny-llama", "--ctx", "8", "--mode", "eager", "--session", "0", flag, value])
    assert exc.value.code == 2
    assert flag in capsys.readouterr().err


def _tar_with(tmp_path, name, add, mode="w:gz"):
    """An archive whose members `add(tar)` puts in by hand (links, FIFOs, odd names)."""
    path = tmp_path / name
    with tarfile.open(path, mode) as tar:
        add(tar)
    return path


def _member(tar, name: str, data: bytes) -> None:
    import io

    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_each_odd_member_is_one_refused_line_and_the_rest_of_the_archive_is_read(tmp_path):
    """Links, FIFOs, devices, '..' and absolute names are refused one line each, naming the
    member; the good sessions after them are still added; nothing lands outside the tree."""
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]

    def add(tar):
        _member(tar, "out/../../escape/" + raw(cell, 0), session_bytes(cell, 0))
        _member(tar, "/abs/" + raw(cell, 1), session_bytes(cell, 1))
        for kind, name in ((tarfile.SYMTYPE, raw(cell, 2)), (tarfile.LNKTYPE, raw(cell, 3)), (tarfile.FIFOTYPE, raw(cell, 4)),
                           (tarfile.CHRTYPE, raw(cell, 5))):
            info = tarfile.TarInfo("out/" + name)
            info.type, info.linkname = kind, "/etc/passwd"
            tar.addfile(info)
        _member(tar, "out/" + raw(cell, 6), session_bytes(cell, 6))
        _member(tar, "out/logs/run.log", b"not data")

    result = ingest([_tar_with(tmp_path, "odd.tar.gz", add)], store, say=lambda _: None)
    text = "\n".join(result["refused"])
    assert "a path with '..'" in text and "an absolute path" in text
    assert f"out/{raw(cell, 2)}: a symbolic link" in text and f"out/{raw(cell, 3)}: a hard link" in text
    assert f"out/{raw(cell, 4)}: a FIFO" in text and f"out/{raw(cell, 5)}: a device" in text
    assert len(result["refused"]) == 6 and result["added"] == [raw(cell, 6)] and len(result["ignored"]) == 1
    assert not (tmp_path / "escape").exists() and sorted(p.name for p in (store / raw(cell, 6)).parent.iterdir()) == ["s06.json"]


def test_a_compression_bomb_costs_its_limit_and_no_more(tmp_path):
    """A small gzip that expands to gigabytes: the member's stated size is refused before it is
    read, and the archive stops at the decompressed limit; no temporary copy is written."""
    import gzip
    import io

    store = tmp_path / "store"
    bomb = tmp_path / "bomb.tar.gz"
    zeros = b"\0" * (1 << 20)
    with gzip.open(bomb, "wb", compresslevel=9) as gz:
        info = tarfile.TarInfo("out/" + raw(SMALL_CELLS[1], 0))
        info.size = 300 * len(zeros)  # 300 MB of zeros behind a session's name
        header = info.tobuf(format=tarfile.GNU_FORMAT)
        gz.write(header)
        for _ in range(300):
            gz.write(zeros)
        gz.write(b"\0" * 1024)
    assert bomb.stat().st_size < 2_000_000
    result = ingest([bomb], store, say=lambda _: None, max_archive_bytes=64 << 20)
    text = "\n".join(result["refused"])
    assert "over the 16777216 a data file may have" in text
    assert "the archive expands past 67108864 bytes" in text
    assert not result["added"] and not (store / "results").exists()
    del io


def test_a_listed_session_whose_file_is_gone_is_never_refilled_with_other_bytes(tmp_path):
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]
    kept = session_bytes(cell, 0)
    ingest([archive(tmp_path, "a", {raw(cell, 0): kept})], store, say=lambda _: None)
    (store / raw(cell, 0)).chmod(0o644)
    (store / raw(cell, 0)).unlink()
    other = session_bytes(cell, 0, base_ms=42.0)
    result = ingest([archive(tmp_path, "b", {raw(cell, 0): other, raw(cell, 1): session_bytes(cell, 1)})], store, say=lambda _: None)
    assert any(f"{raw(cell, 0)}: already recorded with other bytes" in r and "git checkout --" in r for r in result["refused"])
    assert not (store / raw(cell, 0)).exists() and result["added"] == [raw(cell, 1)]
    back = ingest([archive(tmp_path, "c", {raw(cell, 0): kept})], store, say=lambda _: None)  # the same bytes restore it
    assert back["added"] == [raw(cell, 0)] and (store / raw(cell, 0)).read_bytes() == kept


def test_a_copy_of_a_session_under_another_number_is_refused(tmp_path):
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]
    ingest([archive(tmp_path, "a", {raw(cell, 0): session_bytes(cell, 0)})], store, say=lambda _: None)
    copy = json.loads(session_bytes(cell, 0))
    copy.update(session=5, seed=5)
    result = ingest([archive(tmp_path, "b", {raw(cell, 5): encode(copy)})], store, say=lambda _: None)
    assert any(f"{raw(cell, 5)}: its samples are those of {raw(cell, 0)}" in r for r in result["refused"])


def test_a_shuffled_or_merged_copy_is_refused_and_a_new_session_is_not(tmp_path):
    """A copy whose steps were reordered, or half of it merged with another session's, is still a
    copy; a fresh session of the same cell is not (its step times are its own)."""
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]
    ingest([archive(tmp_path, "a", {raw(cell, 0): session_bytes(cell, 0), raw(cell, 1): session_bytes(cell, 1)})], store,
           say=lambda _: None)
    first, second = json.loads(session_bytes(cell, 0)), json.loads(session_bytes(cell, 1))
    shuffled = json.loads(session_bytes(cell, 0)) | {"session": 6, "seed": 6}
    merged = json.loads(session_bytes(cell, 1)) | {"session": 7, "seed": 7}
    for arm, a in zip(shuffled["arms"], first["arms"]):
        arm["timed"] = {k: (v[::-1] if isinstance(v, list) else v) for k, v in a["timed"].items()}
    for arm, a, b in zip(merged["arms"], first["arms"], second["arms"]):
        half = len(a["timed"]["host_ms"]) // 2
        arm["timed"]["host_ms"] = a["timed"]["host_ms"][:half] + b["timed"]["host_ms"][half:]
    result = ingest([archive(tmp_path, "b", {raw(cell, 6): encode(shuffled), raw(cell, 7): encode(merged),
                                              raw(cell, 2): session_bytes(cell, 2)})], store, say=lambda _: None)
    assert any(f"{raw(cell, 6)}: its samples are those of {raw(cell, 0)}" in r for r in result["refused"]), result["refused"]
    assert any(f"{raw(cell, 7)}: its samples are those of" in r for r in result["refused"]), result["refused"]
    assert result["added"] == [raw(cell, 2)]


def test_records_the_analysis_would_refuse_never_enter(tmp_path):
    """No GPU UUID on an H200 session, a CPU run filed under an H200 key, a 1e300 step, a lone
    surrogate, nesting past the limit, a file over the size limit: each refused, naming it."""
    store = tmp_path / "store"
    cell = SMALL_CELLS[1]
    rec = lambda s: json.loads(session_bytes(cell, s))  # noqa: E731
    no_uuid = rec(0)
    no_uuid["environment"]["gpu"]["uuid"] = None
    on_cpu = rec(1)
    on_cpu["environment"]["device_type"] = "cpu"
    huge = rec(2)
    huge["arms"][0]["timed"]["host_ms"] = [1e300] * len(huge["arms"][0]["timed"]["host_ms"])
    hours = rec(7)
    hours["arms"][0]["timed"]["host_ms"] = [4e6] * len(hours["arms"][0]["timed"]["host_ms"])  # 67 minutes a step
    surrogate = encode(rec(3)).replace(b'"synthetic"', b'"\\ud800"', 1)
    deep = encode(rec(4)).replace(b'"warnings": []', b'"warnings": [' + b"[" * 100 + b"]" * 100 + b"]", 1)
    big = encode(rec(6)).replace(b'"warnings": []', b'"warnings": ["' + b"x" * 200_000 + b'"]', 1)
    files = {raw(cell, 0): encode(no_uuid), raw(cell, 1): encode(on_cpu), raw(cell, 2): encode(huge), raw(cell, 3): surrogate,
             raw(cell, 4): deep, raw(cell, 6): big, raw(cell, 7): encode(hours)}
    result = ingest([archive(tmp_path, "a", files)], store, say=lambda _: None, max_session_bytes=100_000)
    text = "\n".join(result["refused"])
    assert f"{raw(cell, 0)}: no GPU UUID" in text
    assert f"{raw(cell, 1)}: timed on device 'cpu'" in text
    assert f"{raw(cell, 2)}: holds the absurd number 1e+300" in text
    assert f"{raw(cell, 7)}: does not match decodegap.session/1" in text and "3600000" in text
    assert f"{raw(cell, 3)}: holds a key that is not valid Unicode" in text
    assert f"{raw(cell, 4)}: nests deeper than" in text
    assert f"{raw(cell, 6)}: " in text and "over the 100000" in text
    assert len(result["refused"]) == 7 and not result["added"] and not (store / "results").exists()


def test_an_environment_record_enters_as_data_and_is_never_replaced(tmp_path):
    store = tmp_path / "store"
    record = {"schema": "decodegap.environment/1", "gpu": "h200", "attention": {}, "weights": {}, "libraries": {},
              "definition_sha256": "0" * 64, "created_utc": "2026-12-01T00:00:00+00:00"}
    rel = "results/environment/h200@20261201T000000Z.json"
    first = ingest([archive(tmp_path, "a", {rel: json.dumps(record).encode()})], store, say=lambda _: None)
    assert first["added"] == [rel] and rel in manifest.read(store)
    changed = ingest([archive(tmp_path, "b", {rel: json.dumps({**record, "libraries": {"torch": "x"}}).encode()})], store, say=lambda _: None)
    assert any("already recorded with other bytes" in r for r in changed["refused"])
    wrong = ingest([archive(tmp_path, "c", {"results/environment/h100-sxm5@x.json": json.dumps(record).encode()})], store, say=lambda _: None)
    assert any("the record of gpu 'h200' under the name of 'h100-sxm5'" in r for r in wrong["refused"])


def test_an_engine_record_must_trace_its_bytes_to_its_own_file_and_be_a_cell_we_measure(tmp_path):
    """A llama.cpp session takes its floor's bytes from its GGUF file: a record whose floor says
    otherwise, whose file is another format than its cell's, that names no file, or whose cell pairs
    a mode with a weight path no session runs (generate on a GGUF format, llama.cpp on bf16) was not
    written by the session command, and never enters; the real record does."""
    from conftest import REPO

    real = REPO / "results/raw/h200/qwen2.5-7b/ctx2048/sdpa_gguf-q8-0_llamacpp/s00.json"
    rec = lambda: json.loads(real.read_bytes())  # noqa: E731
    edited_floor = rec()
    edited_floor["floor"]["weight_bytes"] //= 2
    other_format = rec()
    other_format["arms"][0]["engine"]["gguf"]["format"] = "q4_k_m"
    no_file = rec()
    del no_file["arms"][0]["engine"]["gguf"]
    on_bf16 = rec()
    on_bf16["cell"]["quant"] = "bf16"
    generate_gguf = rec()
    generate_gguf["cell"]["mode"] = "generate"
    cells = {"floor": edited_floor, "format": other_format, "file": no_file, "bf16": on_bf16, "generate": generate_gguf}
    files = {paths.session_path(session=0, **{**r["cell"], "ctx": 2048 + i}).as_posix(): encode({**r, "cell": {**r["cell"], "ctx": 2048 + i}})
             for i, r in enumerate(cells.values())}
    result = ingest([archive(tmp_path, "a", files)], tmp_path / "store", say=lambda _: None)
    text = "\n".join(result["refused"])
    assert "its floor's weight bytes" in text and "are not its file's" in text
    assert "its file's format is 'q4_k_m', not the cell's 'q8_0'" in text
    assert "no model file recorded (engine.gguf)" in text
    assert "mode 'llamacpp' runs its own model from a file in one of its formats" in text
    assert "weight path 'gguf-q8-0' is a file format of the engine 'llamacpp': only mode 'llamacpp' runs it, not 'generate'" in text
    assert len(result["refused"]) == 5 and not result["added"], result["refused"]
    good = ingest([archive(tmp_path, "b", {paths.session_path(session=0, **rec()["cell"]).as_posix(): real.read_bytes()})],
                  tmp_path / "store", say=lambda _: None)
    assert len(good["added"]) == 1 and not good["refused"]
