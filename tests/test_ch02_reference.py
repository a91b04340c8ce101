"""The references that lab 02's checkers compare against: the flat-range rule and the classifier."""

from launchlab.chapters.ch02 import checkers as ch02


def test_flat_until_ignores_a_lone_spike_and_ends_where_the_final_rise_begins():
    batches = [1, 2, 4, 8, 16, 32, 64, 128]
    assert ch02.flat_until_batch(batches, [100, 100, 100, 170, 100, 100, 300, 600]) == 32
    assert ch02.flat_until_batch(batches, [100] * 8) == 128
    assert ch02.flat_until_batch(batches, [100, 100, 100, 200, 300, 400, 500, 600]) == 4


def test_reference_classify_follows_the_roofline():
    flat = {"sizes": [1, 64], "seconds": [1e-5, 1.2e-5], "flops": [10, 640], "bytes": [80, 5120]}
    heavy_math = {"sizes": [1, 64], "seconds": [1e-3, 5e-2], "flops": [1e9, 6.4e10], "bytes": [1e6, 6.4e7]}
    streaming = {"sizes": [1, 64], "seconds": [1e-3, 5e-2], "flops": [1e6, 6.4e7], "bytes": [1e7, 6.4e8]}
    assert ch02._reference_classify(flat, machine_balance=10) == "overhead"
    assert ch02._reference_classify(heavy_math, machine_balance=10) == "compute"
    assert ch02._reference_classify(streaming, machine_balance=10) == "bandwidth"
    short = {**flat, "sizes": [1, 4]}  # flat, but over too small a range to say
    assert ch02._reference_classify(short, machine_balance=10) == "bandwidth"
