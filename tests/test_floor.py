"""The floor arithmetic against values worked out by hand."""

import pytest

from decodegap.core.config import load_gpus, load_models
from decodegap.core.floor import MemoryFloor, kv_bytes, r_floor, t_floor_s

MODELS, GPUS = load_models(), load_gpus()


def test_qwen_ctx2048_on_h100_by_hand():
    card, gpu = MODELS["qwen2.5-7b"], GPUS["h100-sxm5"]
    w = card.param_count() * 2
    assert w == 15_231_233_024
    k = kv_bytes(card.kv_bytes_per_token(), 2048)
    assert k == 117_440_512
    floor = MemoryFloor(weight_bytes=w, weight_bytes_no_embedding=w - 152064 * 3584 * 2, kv_bytes=k, b_peak_Bps=gpu.b_peak_Bps)
    assert floor.t_floor_s == pytest.approx(15_348_673_536 / 3.35e12, rel=1e-12)  # 4.5817 ms
    assert floor.t_floor_s * 1e3 == pytest.approx(4.58169, abs=1e-5)
    assert floor.t_floor_no_embedding_s == pytest.approx((14_141_238_272 + 117_440_512) / 3.35e12)
    assert floor.t_ceiling_s is None


def test_llama_ctx16384_on_l4_by_hand():
    card, gpu = MODELS["llama-3.1-8b"], GPUS["l4"]
    w, k = card.param_count() * 2, kv_bytes(card.kv_bytes_per_token(), 16384)
    assert (w, k) == (16_060_522_496, 2_147_483_648)
    assert t_floor_s(w, k, gpu.b_peak_Bps) == pytest.approx(18_208_006_144 / 3.0e11)  # 60.69 ms


def test_r_floor_and_ceiling():
    floor = MemoryFloor(weight_bytes=8e9, weight_bytes_no_embedding=7e9, kv_bytes=2e9, b_peak_Bps=4e12, copy_bandwidth_Bps=3.2e12)
    assert floor.t_floor_s == pytest.approx(2.5e-3)
    assert floor.t_ceiling_s == pytest.approx(10e9 / 3.2e12)
    assert r_floor(floor.t_floor_s, 5e-3) == pytest.approx(0.5)
    rec = floor.as_record()
    assert rec["t_floor_s"] == pytest.approx(2.5e-3) and rec["copy_bandwidth_Bps"] == 3.2e12


def test_floor_rejects_nonsense():
    with pytest.raises(ValueError):
        t_floor_s(1, 1, 0)
    with pytest.raises(ValueError):
        r_floor(1e-3, 0)
