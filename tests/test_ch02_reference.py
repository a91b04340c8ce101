"""The references that lab 02's checkers compare against: the flat-range rule and the classifier."""

import random

from launchlab.chapters.ch02 import checkers as ch02


def test_flat_until_ignores_a_lone_spike_and_ends_where_the_final_rise_begins():
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    assert ch02.flat_until_batch(batches, [100, 100, 100, 170, 100, 100, 300, 600]) == 32
    assert ch02.flat_until_batch(batches, [100] * 8) == 128
    assert ch02.flat_until_batch(batches, [100, 100, 100, 200, 300, 400, 500, 600]) == 4


def test_reference_classify_follows_the_roofline():
    peak_flops, peak_bytes = 1e12, 1e11  # a machine balance of 10 FLOP/byte
    tiny = {"sizes": [1, 64], "seconds": [1e-5, 1.2e-5], "flops": [10, 640], "bytes": [80, 5120]}
    heavy_math = {"sizes": [1, 64], "seconds": [1e-3, 7e-2], "flops": [1e9, 6.4e10], "bytes": [1e6, 6.4e7]}
    streaming = {"sizes": [1, 64], "seconds": [1e-4, 7e-3], "flops": [1e6, 6.4e7], "bytes": [1e7, 6.4e8]}
    # flat in its batch and yet bandwidth-bound: the same 1 GB of weights streamed at every size
    decode = {"sizes": [1, 16], "seconds": [1.1e-2, 1.1e-2], "flops": [5e8, 8e9], "bytes": [1e9, 1.0001e9]}
    assert ch02._reference_classify(tiny, peak_flops, peak_bytes) == "overhead"
    assert ch02._reference_classify(heavy_math, peak_flops, peak_bytes) == "compute"
    assert ch02._reference_classify(streaming, peak_flops, peak_bytes) == "bandwidth"
    assert ch02._reference_classify(decode, peak_flops, peak_bytes) == "bandwidth"
    slow = {**streaming, "seconds": [1e-4, 6.4e-3 * (ch02.FAR_ABOVE + 0.5)]}  # past FAR_ABOVE x its roofline
    assert ch02._reference_classify(slow, peak_flops, peak_bytes) == "overhead"


def test_every_planted_sweep_is_physical_and_the_old_flat_rule_fails_one():
    """No planted time beats its own roofline, and "flat means overhead" gets at least one planted sweep wrong."""
    def old_rule(sweep, peak_flops, peak_bytes):
        if sweep["seconds"][-1] / sweep["seconds"][0] < 2 and sweep["sizes"][-1] / sweep["sizes"][0] >= 16:
            return "overhead"
        return "compute" if sweep["flops"][-1] / sweep["bytes"][-1] > peak_flops / peak_bytes else "bandwidth"

    for seed in range(50):
        cases = ch02._planted_sweeps(random.Random(seed))
        for name, sweep, peak_flops, peak_bytes in cases:
            for s, f, b in zip(sweep["seconds"], sweep["flops"], sweep["bytes"], strict=True):
                assert s >= max(f / peak_flops, b / peak_bytes), (seed, name)
        assert any(old_rule(sw, pf, pb) != ch02._reference_classify(sw, pf, pb) for _, sw, pf, pb in cases), seed
        labels = {ch02._reference_classify(sw, pf, pb) for _, sw, pf, pb in cases}
        assert labels == {"overhead", "bandwidth", "compute"}, (seed, labels)
