"""Two measurements never share a GPU on a machine without a scheduler."""

import subprocess
import sys
import time



def test_second_measurement_waits_for_a_free_gpu(tmp_path, monkeypatch):
    monkeypatch.setenv("DECODEGAP_LOCK_DIR", str(tmp_path))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    from decodegap.measure import gpulock

    monkeypatch.setattr(gpulock, "LOCK_DIR", tmp_path)
    first = gpulock.acquire(log=lambda m: None)
    assert __import__("os").environ["CUDA_VISIBLE_DEVICES"] == "0"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    second = gpulock.acquire(log=lambda m: None)
    assert __import__("os").environ["CUDA_VISIBLE_DEVICES"] == "1"
    # a third process finds both GPUs busy and waits until one is released
    code = (f"import os; os.environ['CUDA_VISIBLE_DEVICES']='0,1';"
            f"from decodegap.measure import gpulock; from pathlib import Path; gpulock.LOCK_DIR = Path({str(tmp_path)!r});"
            "f = gpulock.acquire(log=print, poll_s=0.1, timeout_s=20); print('got', os.environ['CUDA_VISIBLE_DEVICES'])")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert proc.poll() is None  # still waiting
    second.close()  # the measurement on GPU 1 ends
    out, _ = proc.communicate(timeout=20)
    assert "busy" in out and out.strip().endswith("got 1")
    first.close()
