"""Lab 07's mutation suite: exercises 1 and 4 on a CPU (exercise 1 captures on a GPU too), exercises 2 and 3 in
the GPU tier."""

import pytest
import torch

from launchlab import trace
from launchlab.chapters.ch07 import checkers as ch07
from mutants import Answer, judge, suite

# ---- exercise 1: write the static KV cache --------------------------------------------------------------------


def index_copy(cache, new, pos):
    cache.index_copy_(2, pos, new)


def indexed_assignment(cache, new, pos):
    """Right, written differently: advanced indexing with the position tensor (an index_put_, no host read)."""
    cache[:, :, pos] = new


def scatter(cache, new, pos):
    """Right, written differently: scatter along the slot dimension, the index broadcast over the rest."""
    cache.scatter_(2, pos.view(1, 1, 1, 1).expand_as(new), new)


def where_then_copy(cache, new, pos):
    """Right, written differently: a mask over the slots, then one in-place copy."""
    slots = torch.arange(cache.shape[2], device=cache.device).view(1, 1, -1, 1)
    cache.copy_(torch.where(slots == pos, new, cache))


def index_copy_returned(cache, new, pos):
    """Right: index_copy_ returns the cache it wrote, and returning it changes nothing."""
    return cache.index_copy_(2, pos, new)


def via_item(cache, new, pos):
    cache[:, :, pos.item()] = new[:, :, 0]


def via_tolist(cache, new, pos):
    cache[:, :, pos.tolist()[0]] = new[:, :, 0]


def via_narrow(cache, new, pos):  # narrow takes a tensor start, and reads it on the host
    cache.narrow(2, pos[0], 1).copy_(new)


def grown_with_cat(cache, new, pos):  # the growing cache of the lecture's first rung
    return torch.cat([cache, new], dim=2)


def out_of_place(cache, new, pos):  # index_copy without the underscore: a new tensor, the cache untouched
    return cache.index_copy(2, pos, new)


def into_a_clone(cache, new, pos):
    cache = cache.clone()
    cache.index_copy_(2, pos, new)
    return cache


def rebinds_data(cache, new, pos):
    cache.data = cache.index_copy(2, pos, new)


def along_heads(cache, new, pos):
    cache.index_copy_(1, pos, new)


def one_slot_late(cache, new, pos):
    cache.index_copy_(2, pos + 1, new)


def slot_zero(cache, new, pos):
    cache[:, :, 0] = new[:, :, 0]


def added(cache, new, pos):  # index_add_: right on a zeroed cache, wrong on one that held anything
    cache.index_add_(2, pos, new)


def advances_pos(cache, new, pos):  # the write moves the position on: every layer's write moves it again
    cache.index_copy_(2, pos, new)
    pos.add_(1)


def every_slot(cache, new, pos):
    cache.copy_(new.expand_as(cache))


def via_cpu_copy(cache, new, pos):  # a no-op on a CPU, which the checker still sees; on a GPU a copy to the host
    cache[:, :, pos.cpu()] = new


CACHE_ANSWERS = [
    Answer("index_copy_ (the course's)", "right", index_copy),
    Answer("indexed assignment with the position tensor", "right", indexed_assignment),
    Answer("scatter_ along the slots", "right", scatter),
    Answer("a mask and one copy_", "right", where_then_copy),
    Answer("index_copy_ returned", "right", index_copy_returned),
    Answer("slot read with .item()", "classic", via_item),
    Answer("the growing cache (torch.cat)", "classic", grown_with_cat),
    Answer("slot read with .tolist()", "method", via_tolist),
    Answer("narrow with a tensor start", "method", via_narrow),
    Answer("index_copy without the underscore", "structure", out_of_place),
    Answer("written into a clone", "structure", into_a_clone),
    Answer("cache.data rebound", "structure", rebinds_data),
    Answer("dimension 1 (heads) instead of 2", "unit", along_heads),
    Answer("slot pos + 1", "unit", one_slot_late),
    Answer("slot 0 typed in", "hard-coded", slot_zero),
    Answer("index_add_ instead of a write", "method", added),
    Answer("the write advances pos", "method", advances_pos),
    Answer("new broadcast over every slot", "bad value", every_slot),
    Answer("slot through .cpu()", "method", via_cpu_copy),
]
SUITE_CACHE = suite("07", 1, ch07.check_static_cache, CACHE_ANSWERS)


@pytest.mark.exercise("07", 1)
def test_lab07_exercise1_static_cache(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    trials = 1 if torch.cuda.is_available() else 2  # on a GPU each answer is captured too, so one trial
    wrong = judge(SUITE_CACHE.lab, SUITE_CACHE.number, SUITE_CACHE.checker, SUITE_CACHE.answers, trials=trials)
    verdicts = {f.__name__: ch07.check_static_cache(f) for f in (via_tolist, grown_with_cat, one_slot_late,
                                                                advances_pos, via_cpu_copy)}
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert ".tolist()" in verdicts["via_tolist"].detail and "as a tensor" in verdicts["via_tolist"].hint
    if not torch.cuda.is_available():  # the CPU path sees the .cpu() that the capture refuses on a GPU
        assert ".cpu()" in verdicts["via_cpu_copy"].detail, verdicts["via_cpu_copy"]
    assert "in place" in verdicts["grown_with_cat"].hint
    assert "slot pos itself" in verdicts["one_slot_late"].hint
    assert "advances pos once per step" in verdicts["advances_pos"].hint


# ---- exercises 2 and 3: capture one decode step, then the whole loop (GPU) ------------------------------------


def _warm_up_then_capture(work, warm_ups=1):
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(warm_ups):
            work()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    return graph


def _one_step(step, token, pos, out):
    def work():
        nxt = step(token, pos)
        out.index_copy_(1, pos, nxt[:, None])
        token.copy_(nxt)
        pos.add_(1)
    return work


def capture_step(step, token, pos, out):
    return _warm_up_then_capture(_one_step(step, token, pos, out))


def capture_step_indexed(step, token, pos, out):
    """Right, written differently: three warm-ups as the PyTorch docs do, indexed writes, in-place operators."""
    def work():
        nxt = step(token, pos)
        out[:, pos] = nxt[:, None]
        token[:] = nxt
        pos[0] += 1
    return _warm_up_then_capture(work, warm_ups=3)


def capture_step_default_stream(step, token, pos, out):
    """Right, written differently: the warm-up on the default stream, then a synchronisation before capturing."""
    work = _one_step(step, token, pos, out)
    work()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    return graph


def step_without_advance(step, token, pos, out):  # every replay decodes at position 0
    def work():
        nxt = step(token, pos)
        out.index_copy_(1, pos, nxt[:, None])
        token.copy_(nxt)
    return _warm_up_then_capture(work)


def step_with_rebound_pos(step, token, pos, out):  # a new position tensor: the buffer the replays read stays put
    def work():
        nonlocal pos
        nxt = step(token, pos)
        out.index_copy_(1, pos, nxt[:, None])
        token.copy_(nxt)
        pos = pos + 1
    return _warm_up_then_capture(work)


def step_without_feedback(step, token, pos, out):  # token rebound, not copied: every replay reads the start
    def work():
        nxt = step(token, pos)
        out.index_copy_(1, pos, nxt[:, None])
        pos.add_(1)
        return nxt
    return _warm_up_then_capture(work)


def step_without_warm_up(step, token, pos, out):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        _one_step(step, token, pos, out)()
    return graph


def step_out_of_place(step, token, pos, out):  # index_copy without the underscore: out is never written
    def work():
        nxt = step(token, pos)
        out.index_copy(1, pos, nxt[:, None])
        token.copy_(nxt)
        pos.add_(1)
    return _warm_up_then_capture(work)


def step_into_column_zero(step, token, pos, out):
    def work():
        nxt = step(token, pos)
        out[:, 0] = nxt
        token.copy_(nxt)
        pos.add_(1)
    return _warm_up_then_capture(work)


def step_computed_before_capture(step, token, pos, out):  # the model runs once, eagerly; the graph only copies
    nxt = step(token, pos)

    def work():
        out.index_copy_(1, pos, nxt[:, None])
        token.copy_(nxt)
        pos.add_(1)
    return _warm_up_then_capture(work)


def step_replayed_eagerly(step, token, pos, out):  # a "graph" whose replay is the eager step
    work = _one_step(step, token, pos, out)

    class EagerGraph(torch.cuda.CUDAGraph):
        def replay(self):
            work()

    return EagerGraph()


def step_graph_not_returned(step, token, pos, out):
    capture_step(step, token, pos, out)


def step_graph_and_out(step, token, pos, out):
    return capture_step(step, token, pos, out), out


STEP_ANSWERS = [
    Answer("the course's capture", "right", capture_step),
    Answer("three warm-ups, indexed writes", "right", capture_step_indexed),
    Answer("warm-up on the default stream", "right", capture_step_default_stream),
    Answer("pos never advanced", "classic", step_without_advance),
    Answer("pos + 1 as a new tensor", "classic", step_with_rebound_pos),
    Answer("the new token not fed back", "classic", step_without_feedback),
    Answer("no warm-up", "method", step_without_warm_up),
    Answer("index_copy without the underscore", "structure", step_out_of_place),
    Answer("the model run once before capturing", "structure", step_computed_before_capture),
    Answer("a replay that runs the step eagerly", "structure", step_replayed_eagerly),
    Answer("column 0 typed in", "hard-coded", step_into_column_zero),
    Answer("the graph not returned", "bad value", step_graph_not_returned),
    Answer("(graph, out) returned", "bad value", step_graph_and_out),
]
SUITE_STEP = suite("07", 2, ch07.check_capture_step, STEP_ANSWERS)


@pytest.mark.exercise("07", 2)
@pytest.mark.gpu
def test_lab07_exercise2_capture_step(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_STEP.lab, SUITE_STEP.number, SUITE_STEP.checker, SUITE_STEP.answers)
    stuck, cold, eager, column = (ch07.check_capture_step(f) for f in (
        step_without_advance, step_without_warm_up, step_replayed_eagerly, step_into_column_zero))
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "pos.add_(1)" in stuck.hint
    assert "column pos" in column.hint
    assert "before capturing" in cold.hint
    assert "never your Python" in eager.hint


def capture_loop(step, token, pos, out, steps):
    def work():
        for _ in range(steps):
            _one_step(step, token, pos, out)()

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _one_step(step, token, pos, out)()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        work()
    return graph


def loop_functional(step, token, pos, out, steps):
    """Right, written differently: token and position flow through new tensors inside the graph, the buffers
    are only read; the whole loop warmed up once, as the statement allows."""
    def work():
        tok, p = token, pos
        for _ in range(steps):
            tok = step(tok, p)
            out.index_copy_(1, p, tok[:, None])
            p = p + 1
    return _warm_up_then_capture(work)


def loop_of_one_step(step, token, pos, out, steps):  # one step per replay: the loop is still on the host
    return _warm_up_then_capture(_one_step(step, token, pos, out))


def loop_without_feedback(step, token, pos, out, steps):  # every step decodes from the start token
    def work():
        for _ in range(steps):
            nxt = step(token, pos)
            out.index_copy_(1, pos, nxt[:, None])
            pos.add_(1)
    return _warm_up_then_capture(work)


def loop_without_advance(step, token, pos, out, steps):
    def work():
        for _ in range(steps):
            nxt = step(token, pos)
            out.index_copy_(1, pos, nxt[:, None])
            token.copy_(nxt)
    return _warm_up_then_capture(work)


def loop_replaying_a_step(step, token, pos, out, steps):  # one graph object, but the loop is on the host
    single = _warm_up_then_capture(_one_step(step, token, pos, out))

    class Loop(torch.cuda.CUDAGraph):
        def replay(self):
            for _ in range(steps):
                single.replay()

    return Loop()


def loop_run_eagerly(step, token, pos, out, steps):  # a "graph" whose replay is the eager loop
    work = _one_step(step, token, pos, out)

    class EagerLoop(torch.cuda.CUDAGraph):
        def replay(self):
            for _ in range(steps):
                work()

    return EagerLoop()


def loop_without_warm_up(step, token, pos, out, steps):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(steps):
            _one_step(step, token, pos, out)()
    return graph


def loop_one_short(step, token, pos, out, steps):
    def work():
        for _ in range(steps - 1):
            _one_step(step, token, pos, out)()
    return _warm_up_then_capture(work)


def loop_out_of_place(step, token, pos, out, steps):
    def work():
        for _ in range(steps):
            nxt = step(token, pos)
            out.index_copy(1, pos, nxt[:, None])
            token.copy_(nxt)
            pos.add_(1)
    return _warm_up_then_capture(work)


def loop_of_thirty_two(step, token, pos, out, steps):  # exercise 2's 32 typed in: out's width, not `steps`
    def work():
        for _ in range(32):
            _one_step(step, token, pos, out)()
    return _warm_up_then_capture(work)


def loop_graph_not_returned(step, token, pos, out, steps):
    capture_loop(step, token, pos, out, steps)


LOOP_ANSWERS = [
    Answer("the course's capture", "right", capture_loop),
    Answer("token and position as new tensors in the graph", "right", loop_functional),
    Answer("a one-step graph", "classic", loop_of_one_step),
    Answer("the new token not fed back", "classic", loop_without_feedback),
    Answer("pos never advanced", "classic", loop_without_advance),
    Answer("a one-step graph replayed in a host loop", "structure", loop_replaying_a_step),
    Answer("a replay that runs the loop eagerly", "structure", loop_run_eagerly),
    Answer("index_copy without the underscore", "structure", loop_out_of_place),
    Answer("no warm-up", "method", loop_without_warm_up),
    Answer("steps - 1 steps", "unit", loop_one_short),
    Answer("32 steps typed in", "hard-coded", loop_of_thirty_two),
    Answer("the graph not returned", "bad value", loop_graph_not_returned),
]
SUITE_LOOP = suite("07", 3, ch07.check_capture_loop, LOOP_ANSWERS)


@pytest.mark.exercise("07", 3)
@pytest.mark.gpu
def test_lab07_exercise3_capture_loop(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_LOOP.lab, SUITE_LOOP.number, SUITE_LOOP.checker, SUITE_LOOP.answers)
    host_loop, short = (ch07.check_capture_loop(f) for f in (loop_replaying_a_step, loop_of_one_step))
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "graph replays" in host_loop.detail and "one torch.cuda.graph" in host_loop.hint
    assert "one token only" in short.hint


# ---- exercise 4: split the idle time ----------------------------------------------------------------------------


def reference(kernels, window):
    split = trace._attribute_idle(kernels, window)
    return split.busy_us, split.host_wait_us, split.gpu_gap_us


def split_by_events(kernels, window):
    """Right, written differently: merge the kernels into busy intervals first, then classify each gap."""
    lo, hi = window
    merged = []
    for launched, start, end in sorted(kernels, key=lambda k: (k[1], k[0])):   # ties: the first launched first
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        if merged and start <= merged[-1][2]:
            merged[-1][2] = max(merged[-1][2], end)
        else:
            merged.append([launched, start, end])
    busy = sum(end - start for _, start, end in merged)
    host = gpu = 0.0
    previous_end = lo
    for launched, start, end in merged:
        gap = start - previous_end
        waited = min(max(launched - previous_end, 0.0), gap)
        host, gpu = host + waited, gpu + gap - waited
        previous_end = end
    return busy, host + (hi - previous_end), gpu


def all_host(kernels, window):
    busy, host, gpu = reference(kernels, window)
    return busy, host + gpu, 0.0


def overlaps_twice(kernels, window):
    _, host, gpu = reference(kernels, window)
    return sum(end - start for _, start, end in kernels), host, gpu


def assumes_sorted(kernels, window):
    lo, hi = window
    busy = host = gpu = 0.0
    cursor = lo
    for launched, start, end in kernels:  # in the order given
        start, end = max(start, lo), min(end, hi)
        if start > cursor:
            waiting = min(max(launched - cursor, 0.0), start - cursor)
            host, gpu = host + waiting, gpu + start - cursor - waiting
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    return busy, host + max(hi - cursor, 0.0), gpu


def tail_as_gpu_gap(kernels, window):
    busy, host, gpu = reference(kernels, window)
    tail = window[1] - max(min(end, window[1]) for _, _, end in kernels)
    return busy, host - tail, gpu + tail


def waits_measured_from_launch_to_start(kernels, window):
    busy, host, gpu = reference(kernels, window)
    waited = sum(start - launched for launched, start, _ in kernels)  # negative for work queued ahead
    return busy, waited, window[1] - window[0] - busy - waited


def walked_whole(kernels, window):
    """The course's walk without clipping each kernel to the window."""
    lo, hi = window
    busy = host = gpu = 0.0
    cursor = lo
    for launched, start, end in sorted(kernels, key=lambda k: (k[1], k[0], k[2])):
        if start > cursor:
            waiting = min(max(launched - cursor, 0.0), start - cursor)
            host, gpu = host + waiting, gpu + start - cursor - waiting
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    return busy, host + max(hi - cursor, 0.0), gpu


def ties_to_the_last_launched(kernels, window):
    """The course's walk, but of kernels starting together the last launched goes first."""
    lo, hi = window
    busy = host = gpu = 0.0
    cursor = lo
    for launched, start, end in sorted(kernels, key=lambda k: (k[1], -k[0], k[2])):
        start, end = max(start, lo), min(end, hi)
        if end <= start:
            continue
        if start > cursor:
            waiting = min(max(launched - cursor, 0.0), start - cursor)
            host, gpu = host + waiting, gpu + start - cursor - waiting
        if end > cursor:
            busy += end - max(start, cursor)
            cursor = end
    return busy, host + max(hi - cursor, 0.0), gpu


def empty_window_as_gpu_gap(kernels, window):
    """The course's walk, but a window no kernel runs in is all GPU gap."""
    lo, hi = window
    if not any(min(end, hi) > max(start, lo) for _, start, end in kernels):
        return 0.0, 0.0, hi - lo
    return reference(kernels, window)


def zeros_without_kernels(kernels, window):
    """Found by a blind attack: no kernel at all gives (0, 0, 0), which does not add up to the window."""
    return reference(kernels, window) if kernels else (0.0, 0.0, 0.0)


def kept_at_hi(kernels, window):
    """The course's walk, but a kernel starting exactly at hi still splits the tail at its launch."""
    lo, hi = window
    busy, host, gpu = reference(kernels, window)
    at_hi = [launched for launched, start, _ in kernels if start == hi]
    ends = [min(end, hi) for _, start, end in kernels if min(end, hi) > max(start, lo)]
    if at_hi and ends:
        launched, last = min(at_hi), max(ends)
        moved = min(max(hi - max(launched, last), 0.0), hi - last)
        return busy, host - moved, gpu + moved
    return busy, host, gpu


def lectures_launch_split(kernels, window):
    """The lecture's split by launch call, every kernel its own call: it must not be public."""
    split = trace.split_by_launch([(None, *k) for k in kernels], window)
    return split.busy_us, split.host_wait_us, split.queued_gap_us + split.replay_gap_us


ATTRIBUTE_ANSWERS = [
    Answer("the course's walk", "right", reference),
    Answer("busy intervals merged first", "right", split_by_events),
    Answer("every idle stretch blamed on the host", "classic", all_host),
    Answer("overlapping kernels counted twice", "classic", overlaps_twice),
    Answer("kernels taken in the order given", "method", assumes_sorted),
    Answer("the stretch after the last kernel called a GPU gap", "method", tail_as_gpu_gap),
    Answer("host wait as launch-to-start time", "method", waits_measured_from_launch_to_start),
    Answer("milliseconds", "unit", lambda k, w: tuple(v / 1000 for v in reference(k, w))),
    Answer("the first hand-made case typed in", "hard-coded", lambda k, w: (3.0, 2.0, 1.0)),
    Answer("NaN for the GPU gap", "bad value", lambda k, w: (*reference(k, w)[:2], float("nan"))),
    Answer("a list of the three", "right", lambda k, w: list(reference(k, w))),
    Answer("two of the three", "structure", lambda k, w: reference(k, w)[:2]),
    Answer("kernels not clipped to the window", "method", walked_whole),
    Answer("of kernels starting together, the last launched decides", "method", ties_to_the_last_launched),
    Answer("the lecture's launch split with no call ids", "structure", lectures_launch_split),
    Answer("a window with no kernel in it called a GPU gap", "method", empty_window_as_gpu_gap),
    Answer("a kernel starting at hi kept", "method", kept_at_hi),
    Answer("no kernel at all, all zeros", "structure", zeros_without_kernels),
]
SUITE_ATTRIBUTE = suite("07", 4, ch07.check_attribute_idle, ATTRIBUTE_ANSWERS)


@pytest.mark.exercise("07", 4)
def test_lab07_exercise4_attribute_idle(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_ATTRIBUTE.lab, SUITE_ATTRIBUTE.number, SUITE_ATTRIBUTE.checker, SUITE_ATTRIBUTE.answers,
                  trials=2)
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)


# ---- exercise 5: attention over the filled cache only ---------------------------------------------------------


def filled_answer(**mistake):
    """The Triton kernel of tests/filled_kernels.py with one planted mistake (or none)."""

    def filled_attention(q, k_cache, v_cache, pos):
        from filled_kernels import filled

        return filled(q, k_cache, v_cache, pos, **mistake)

    return filled_attention


def masked_whole_cache(q, k_cache, v_cache, pos):
    import torch.nn.functional as F

    mask = torch.arange(k_cache.shape[2], device=q.device)[None, :] <= pos[:, None]
    return F.scaled_dot_product_attention(q[:, :, None], k_cache, v_cache, attn_mask=mask[:, None, None],
                                          enable_gqa=True)[:, :, 0]


def zeroed_then_masked(q, k_cache, v_cache, pos):
    """The values are right; every slot is still read."""
    past = (torch.arange(k_cache.shape[2], device=q.device)[None, :] > pos[:, None])[:, None, :, None]
    return masked_whole_cache(q, torch.where(past, 0.0, k_cache), torch.where(past, 0.0, v_cache), pos)


def sliced_on_host(q, k_cache, v_cache, pos):
    import torch.nn.functional as F

    rows = []
    for b in range(q.shape[0]):
        n = int(pos[b]) + 1
        rows.append(F.scaled_dot_product_attention(q[b, :, None], k_cache[b, :, :n], v_cache[b, :, :n],
                                                   enable_gqa=True)[:, 0])
    return torch.stack(rows)


def float32_out(q, k_cache, v_cache, pos):
    """Right values, returned in float32 whatever q's dtype."""
    return filled_answer()(q.float(), k_cache, v_cache, pos)


FILLED_ANSWERS = [
    Answer("masked attention over the whole cache", "classic", masked_whole_cache),
    Answer("the whole cache read, the slots past pos zeroed first", "method", zeroed_then_masked),
    Answer("the cache sliced to pos on the host", "classic", sliced_on_host),
    Answer("slots 0..pos-1, pos left out", "bad value", filled_answer(include_pos=False)),
    Answer("KV head h % Hkv", "bad value", filled_answer(modulo=True)),
    Answer("one position for the whole batch", "method", filled_answer(first_pos=True)),
    Answer("no 1/sqrt(D) scale", "bad value", filled_answer(scaled=False)),
    Answer("a window of the last 4,096 slots at most", "bad value", filled_answer(window=4096)),
    Answer("y returned in float32", "unit", float32_out),
    Answer("the kernel, blocks of 16", "right", filled_answer(block_t=16)),
    Answer("one program per (sequence, query head), blocks of 64", "right", filled_answer()),
]
SUITE_FILLED = suite("07", 5, ch07.check_filled_attention, FILLED_ANSWERS)


@pytest.mark.exercise("07", 5)
@pytest.mark.gpu
def test_lab07_exercise5_filled_attention(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_FILLED.lab, SUITE_FILLED.number, SUITE_FILLED.checker, SUITE_FILLED.answers)
    masked, zeroed, host, short = (ch07.check_filled_attention(f) for f in (
        masked_whole_cache, zeroed_then_masked, sliced_on_host, filled_answer(include_pos=False)))
    capsys.readouterr()
    assert not wrong, "\n".join(wrong)
    assert "past its pos" in masked.detail and "0 * NaN" in masked.hint
    assert "whatever the position" in zeroed.detail and "still reads them" in zeroed.hint
    assert "back to the host" in host.detail and "keep pos on the GPU" in host.hint
    assert "pos included" in short.hint
