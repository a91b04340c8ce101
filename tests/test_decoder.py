"""The chapter 07 workload on a CPU: the static cache is exact and in place, the step has no graph breaks,
and the idle split of a trace adds up and attributes each gap to the host or the GPU."""

import random

import pytest
import torch

from launchlab import decoder, trace
from launchlab.chapters.ch07 import checkers as ch07
from launchlab.compat import explain


def test_static_cache_decodes_what_a_cache_free_loop_decodes():
    model = decoder.make_decoder(decoder.TINY, "cpu")
    first = decoder.first_tokens(decoder.TINY, "cpu")
    cached = decoder.decode(decoder.greedy_step(model), first, 20)
    # Without a cache: feed the whole sequence so far, one token at a time, into a fresh model each step.
    tokens, sequence = [], [first]
    for _ in range(20):
        fresh = decoder.make_decoder(decoder.TINY, "cpu")
        pos = torch.zeros(1, dtype=torch.long)
        for token in sequence:
            logits = fresh(token, pos)
            pos += 1
        sequence.append(logits.argmax(-1))
        tokens.append(sequence[-1])
    assert torch.equal(cached, torch.stack(tokens, dim=1))
    assert len(set(cached[0].tolist())) > 5, "greedy decoding should wander, not repeat one token"


def test_the_default_writer_writes_one_slot_in_place():
    cache, new = torch.zeros(2, 3, 8, 4), torch.ones(2, 3, 1, 4)
    address = cache.data_ptr()
    decoder._index_copy_write(cache, new, torch.tensor([5]))
    assert cache.data_ptr() == address
    assert cache[:, :, 5].eq(1).all() and cache.sum() == new.sum()


def test_a_decode_step_has_no_graph_breaks():
    model = decoder.make_decoder(decoder.TINY, "cpu")
    report = explain(decoder.greedy_step(model), decoder.first_tokens(decoder.TINY, "cpu"),
                     torch.zeros(1, dtype=torch.long))
    assert (report.graph_count, report.break_count) == (1, 0), report.break_reasons


def _filled_attend(q, k_cache, v_cache, mask, pos):
    """Attention over slots 0..pos only, sliced on the host: another attention, eager only."""
    filled = int(pos) + 1
    return torch.nn.functional.scaled_dot_product_attention(q, k_cache[:, :, :filled], v_cache[:, :, :filled])


def test_a_twin_with_another_attention_shares_weights_and_caches_and_leaves_the_model_alone():
    model = decoder.make_decoder(decoder.TINY, "cpu")
    twin = decoder.with_attention(model, _filled_attend)
    assert twin is not model and twin.blocks is not model.blocks
    assert all(a is b for a, b in zip(twin.parameters(), model.parameters(), strict=True))
    assert all(a is b for a, b in zip(twin.buffers(), model.buffers(), strict=True))
    assert all(b.attn.attend is decoder.masked_attend for b in model.blocks)
    assert all(b.attn.attend is _filled_attend for b in twin.blocks)
    first = decoder.first_tokens(decoder.TINY, "cpu")
    masked = decoder.decode(decoder.greedy_step(model), first, 20)
    model.blocks[0].attn.k_cache.fill_(float("nan"))  # the twin writes every slot it reads, into the same cache
    filled = decoder.decode(decoder.greedy_step(twin), first, 20)
    assert torch.equal(masked, filled)
    assert not model.blocks[0].attn.k_cache[:, :, :20].isnan().any()
    assert model.blocks[0].attn.k_cache[:, :, 20:].isnan().all()


def test_a_twin_whose_attention_traces_still_compiles_to_one_graph():
    def also_masked(q, k_cache, v_cache, mask, pos):
        return torch.nn.functional.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask) * 1.0

    twin = decoder.with_attention(decoder.make_decoder(decoder.TINY, "cpu"), also_masked)
    report = explain(decoder.greedy_step(twin), decoder.first_tokens(decoder.TINY, "cpu"),
                     torch.zeros(1, dtype=torch.long))
    assert (report.graph_count, report.break_count) == (1, 0), report.break_reasons


@pytest.mark.parametrize(("kernels", "window", "expected"), [
    ([(1.0, 2.0, 5.0)], (0.0, 6.0), (3.0, 2.0, 1.0)),                    # waits for the launch, then a GPU gap
    ([(-3.0, 1.0, 2.0), (0.5, 4.0, 5.0)], (0.0, 5.0), (2.0, 0.0, 3.0)),  # work queued ahead: GPU gaps only
    ([(0.0, 0.0, 4.0), (1.0, 2.0, 3.0)], (0.0, 4.0), (4.0, 0.0, 0.0)),   # overlapping kernels count once
    ([(4.0, 5.0, 6.0), (0.0, 1.0, 2.0)], (0.0, 8.0), (2.0, 4.0, 2.0)),   # unsorted; launched late; tail is host
    ([(3.0, 2.0, 6.0), (1.0, 2.0, 3.0)], (0.0, 6.0), (4.0, 1.0, 1.0)),   # start together: the first launch counts
])
def test_attribute_idle_splits_each_gap(kernels, window, expected):
    split = trace._attribute_idle(kernels, window)
    assert (split.busy_us, split.host_wait_us, split.gpu_gap_us) == pytest.approx(expected)
    assert split.busy_us + split.host_wait_us + split.gpu_gap_us == pytest.approx(window[1] - window[0])
    assert ch07._split_by_slices(kernels, window) == pytest.approx(expected)


def test_lab07_checker_splits_idle_time_as_the_library_does():
    """The checker's brute-force split and trace's private cursor walk are written apart; on many random cases
    (ties, kernels sticking out of the window or left out of it, empty kernels, launches never seen) they agree."""
    rng = random.Random(20260507)

    def at() -> float:
        return rng.choice((rng.randint(-4, 20), round(rng.uniform(-4, 20), 2)))  # whole numbers: many ties

    for _ in range(20_000):
        kernels = []
        for _ in range(rng.randint(0, 10)):
            start = at()
            end = start + rng.choice((0, -1, rng.randint(0, 6), round(rng.uniform(0, 6), 2)))
            kernels.append((rng.choice((at(), start, start - rng.randint(0, 5), float("-inf"))), start, end))
        lo = rng.choice((0, -5, at()))
        window = (lo, lo + rng.choice((0, rng.randint(0, 25), round(rng.uniform(0, 25), 2))))
        split = trace._attribute_idle(kernels, window)
        assert ch07._split_by_slices(kernels, window) == pytest.approx(
            (split.busy_us, split.host_wait_us, split.gpu_gap_us), abs=1e-9), (kernels, window)


def test_idle_split_matches_kernels_to_their_launch_calls():
    def event(cat, name, ts, dur, correlation=None):
        return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur,
                **({"args": {"correlation": correlation}} if correlation is not None else {})}

    events = [event("user_annotation", "calls", 0, 20),
              event("cuda_runtime", "cudaLaunchKernel", 1, 2, correlation=7),    # returns at 3
              event("kernel", "a", 4, 5, correlation=7),                        # idle 0-3 host, 3-4 GPU
              event("cuda_runtime", "cudaGraphLaunch", 5, 10, correlation=8),   # returns at 15
              event("kernel", "b", 12, 2, correlation=8),                       # idle 9-12: host (launch running)
              event("kernel", "c", 15, 3, correlation=8)]                       # idle 14-15: host; tail 18-20 host
    # idle_split's per-kernel rule; inside one replay, 14-15 is the GPU's own gap (trace.launch_split says so)
    split = trace.idle_split(events, "calls")
    assert split.kernel_count == 3
    assert (split.busy_us, split.host_wait_us, split.gpu_gap_us) == pytest.approx((10.0, 9.0, 1.0))
