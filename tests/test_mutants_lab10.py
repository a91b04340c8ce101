"""Lab 10's mutation suite: plausible answers a learner writes, each judged by its checker.

Every exercise needs a CUDA GPU, so the suites run in the GPU tier; what runs here on a CPU is what the checkers
decide before they touch a GPU: the draws they make, the reference they compare with, and the clear failure
they give on a machine without a GPU.
"""

import random

import pytest

from launchlab.chapters.ch10 import checkers as ch10
from launchlab.checking import NEEDS_GPU
from mutants import Answer, judge, suite

# ---- exercise 1: a whole training step in one graph ------------------------------------------------------------


def _warm(model, opt, batches, zero_after: bool = True):
    import torch
    import torch.nn.functional as F

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for x, y in batches:
            F.mse_loss(model(x), y).backward()
            opt.step()
            if zero_after:
                opt.zero_grad(set_to_none=True)
    torch.cuda.current_stream().wait_stream(side)


def step_answer(warm: bool = True, zero_after: bool = True, zero_inside: bool = False, copy_in: bool = True,
                optimizer_inside: bool = True, reduction: str = "mean", previous: bool = False, eager: bool = False,
                nan: bool = False, clone_out: bool = False, zero_in_step: bool = False, recapture: bool = False):
    """A capture_train_step with one thing changed from the right answer (or none)."""

    def capture_train_step(model, opt, warmup_batches):
        import torch
        import torch.nn.functional as F

        static_x, static_y = (t.clone() for t in warmup_batches[0])
        if warm:
            _warm(model, opt, warmup_batches, zero_after)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            if zero_inside:
                opt.zero_grad(set_to_none=False)
            loss = F.mse_loss(model(static_x), static_y, reduction=reduction)
            loss.backward()
            if optimizer_inside:
                opt.step()

        def step(x, y):
            if zero_in_step:
                opt.zero_grad(set_to_none=True)       # harmless: the graph writes the gradients in its pool
            if recapture:                              # a fresh capture each step: eager work in disguise
                fresh = torch.cuda.CUDAGraph()
                with torch.cuda.graph(fresh):
                    opt.zero_grad(set_to_none=True)
                    out = F.mse_loss(model(x), y)
                    out.backward()
                    opt.step()
                fresh.replay()
                return out
            if eager:
                opt.zero_grad(set_to_none=True)
                out = F.mse_loss(model(x), y)
                out.backward()
                opt.step()
                return out
            if copy_in:
                static_x[...] = x
                static_y[...] = y
            before = loss.clone()
            graph.replay()
            if not optimizer_inside:
                opt.step()
            if nan:
                return torch.tensor(float("nan"))
            if previous:
                return before
            return loss.clone() if clone_out else loss
        return step
    return capture_train_step


STEP_ANSWERS = [
    Answer("warm-up on a side stream, grads None, one graph (the solution's way)", "right", step_answer()),
    Answer("grads kept and zeroed inside the graph, the loss cloned out", "right",
           step_answer(zero_after=False, zero_inside=True, clone_out=True)),
    Answer("no warm-up: the optimizer's state is created inside the capture", "classic", step_answer(warm=False)),
    Answer("grads kept from the warm-up and never zeroed: every replay adds to them", "classic",
           step_answer(zero_after=False)),
    Answer("the batch never copied in: every replay trains on the capture's batch", "classic",
           step_answer(copy_in=False)),
    Answer("the optimizer stepped eagerly after the replay", "method", step_answer(optimizer_inside=False)),
    Answer("returns the loss read before the replay", "method", step_answer(previous=True)),
    Answer("sum of squares instead of the mean", "unit", step_answer(reduction="sum")),
    Answer("eager steps, the graph captured and never replayed", "structure", step_answer(eager=True)),
    Answer("returns NaN", "bad value", step_answer(nan=True)),
    Answer("returns None", "hard-coded", lambda model, opt, batches: (lambda x, y: None)),
    Answer("a new capture in every step", "structure", step_answer(recapture=True)),
    Answer("zero_grad(set_to_none=True) in every step (after the mutants)", "right",
           step_answer(zero_in_step=True)),
]
SUITE_STEP = suite("10", 1, ch10.check_train_step, STEP_ANSWERS)


@pytest.mark.exercise("10", 1)
@pytest.mark.gpu
def test_lab10_exercise1_train_step(lenient_checkers):
    wrong = judge(SUITE_STEP.lab, SUITE_STEP.number, SUITE_STEP.checker, SUITE_STEP.answers)
    assert not wrong, "\n".join(wrong)


# ---- exercise 2: dropout in a graph, from its own generator -----------------------------------------------------


def dropout_answer(register: bool = True, draw: str = "rand", keep_below_p: bool = False, scale: bool = True,
                   mask_outside: bool = False, copy_x: bool = False, as_list: bool = False):
    def capture_dropout(x, p, generator):
        import numpy as np
        import torch
        import torch.nn.functional as F

        graph = torch.cuda.CUDAGraph()
        if register:
            graph.register_generator_state(generator)
        source = x.clone() if copy_x else x
        if mask_outside:
            fixed = torch.rand(x.shape, device=x.device, generator=generator) >= p
        with torch.cuda.graph(graph):
            if draw == "F.dropout":
                return graph, F.dropout(source, p)
            if draw == "bernoulli":
                keep = torch.bernoulli(torch.full_like(source, 1 - p), generator=generator)
            elif draw == "numpy":
                keep = torch.from_numpy(np.random.rand(*x.shape) >= p).to(x.device, non_blocking=False)
            elif mask_outside:
                keep = fixed
            elif draw == "one row":
                keep = torch.rand(x.shape[-1], device=x.device, generator=generator) >= p
            else:
                u = torch.rand(x.shape, device=x.device, generator=generator)
                keep = u < p if keep_below_p else u >= p
            out = source * keep / (1 - p) if scale else source * keep
        return [graph, out] if as_list else (graph, out)
    return capture_dropout


DROPOUT_ANSWERS = [
    Answer("torch.rand from the generator, registered (the solution's way)", "right", dropout_answer()),
    Answer("torch.bernoulli from the generator, registered", "right", dropout_answer(draw="bernoulli")),
    Answer("the generator never registered with the graph", "classic", dropout_answer(register=False)),
    Answer("F.dropout: PyTorch's default generator, not the one given", "classic", dropout_answer(draw="F.dropout")),
    Answer("the mask drawn once, before the capture", "method", dropout_answer(mask_outside=True)),
    Answer("keeps with probability p", "unit", dropout_answer(keep_below_p=True)),
    Answer("no 1 / (1 - p) scale", "unit", dropout_answer(scale=False)),
    Answer("a NumPy mask", "hard-coded", dropout_answer(draw="numpy")),
    Answer("reads a copy of x made before the capture", "structure", dropout_answer(copy_x=True)),
    Answer("returns the input, no graph", "bad value", lambda x, p, g: x),
    Answer("one mask row, broadcast over x", "structure", dropout_answer(draw="one row")),
    Answer("torch.rand from the generator, returned as a list (after the mutants)", "right",
           dropout_answer(as_list=True)),
]


def dropout_into_a_freed_buffer(x, p, generator):
    """Found by a blind learner attack: the mask drawn in place into a buffer made before the capture and dropped
    when the function returns, so other tensors come to share the memory each replay writes."""
    import torch

    keep, out = torch.empty_like(x), torch.empty_like(x)
    graph = torch.cuda.CUDAGraph()
    graph.register_generator_state(generator)
    with torch.cuda.graph(graph):
        keep.bernoulli_(1 - p, generator=generator)
        torch.mul(x, keep, out=out)
        out.mul_(1.0 / (1.0 - p))
    return graph, out


DROPOUT_ANSWERS.insert(-1, Answer("the mask drawn into a buffer freed when the function returns", "structure",
                                  dropout_into_a_freed_buffer))
SUITE_DROPOUT = suite("10", 2, ch10.check_dropout_graph, DROPOUT_ANSWERS)


@pytest.mark.exercise("10", 2)
@pytest.mark.gpu
def test_lab10_exercise2_dropout(lenient_checkers):
    wrong = judge(SUITE_DROPOUT.lab, SUITE_DROPOUT.number, SUITE_DROPOUT.checker, SUITE_DROPOUT.answers)
    assert not wrong, "\n".join(wrong)
    for _ in range(3):  # whatever the allocator did before, the freed buffer is found
        verdict = ch10.check_dropout_graph(dropout_into_a_freed_buffer)
        assert not verdict and "memory it no longer owns" in verdict.detail, verdict


# ---- exercise 3: piecewise graphs per bucket --------------------------------------------------------------------


def piecewise_answer(bucket_rule: str = "smallest", clone: bool = True, capture_attention: bool = False,
                     eager: bool = False, span_pieces: bool = False, copy_attention: bool = True,
                     fixed_buckets: tuple | None = None, capture_in_run: bool = False, pad: int = 1,
                     submodules_after: bool = False, cpu: bool = False, side_copy: str = "",
                     side_attention: str = "", side_clone: str = ""):
    """side_copy: x copied into the static input on a stream of the answer's own, "waited" after a wait_stream
    on the current stream, "racy" without one; side_attention: attention on a stream of its own (after waiting for
    before()), the after() replay "waited" for it or "racy"; side_clone: the output cloned on a stream of its own,
    "waited" for the replay or "racy"."""
    def build_piecewise(model, buckets):
        import torch

        buckets = tuple(fixed_buckets or buckets)
        sizes = tuple(range(1, buckets[-1] + 1)) if bucket_rule == "exact" else buckets
        sets = {}

        def capture(bucket):
            x = torch.zeros(bucket, model.width, device="cuda")
            attended = torch.zeros(bucket, model.width, device="cuda")
            lengths = [model.max_ctx] * bucket
            pool, pieces, h = torch.cuda.graph_pool_handle(), [], x
            for i in range(model.layers):
                model.before(i, h), model.after(i, h, attended)
                torch.cuda.synchronize()
                if capture_attention:
                    g = torch.cuda.CUDAGraph()
                    with torch.cuda.graph(g, pool=pool):
                        out = model.after(i, h, model.attention(i, model.before(i, h), lengths))
                    pieces.append((None, None, g, out))
                else:
                    before, after = torch.cuda.CUDAGraph(), torch.cuda.CUDAGraph()
                    with torch.cuda.graph(before, pool=pool):
                        q = model.before(i, h)
                    with torch.cuda.graph(after, pool=pool):
                        out = model.after(i, h, attended)
                    pieces.append((before, q, after, out))
                h = out
            return x, attended, pieces

        def capture_spanning(bucket):
            # graphs from one attention to the next: before(0); after(i) + before(i + 1); after(last)
            x = torch.zeros(bucket, model.width, device="cuda")
            attended = [torch.zeros(bucket, model.width, device="cuda") for _ in range(model.layers)]
            pool, graphs, queries, h = torch.cuda.graph_pool_handle(), [], [], x
            for i in range(model.layers):
                model.before(i, h), model.after(i, h, attended[i])
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g, pool=pool):
                queries.append(model.before(0, h))
            graphs.append(g)
            for i in range(model.layers):
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g, pool=pool):
                    h = model.after(i, h, attended[i])
                    if i + 1 < model.layers:
                        queries.append(model.before(i + 1, h))
                graphs.append(g)
            return x, attended, graphs, queries, h

        if not capture_in_run:
            for b in sizes:
                sets[b] = capture_spanning(b) if span_pieces else capture(b)

        def run(x, lengths):
            batch = x.shape[0]
            if eager:
                return model.forward(x, lengths).clone()
            if bucket_rule == "largest":
                bucket = sizes[-1]
            elif bucket_rule == "exact":
                bucket = batch
            else:
                bucket = next(b for b in sizes if b >= batch)
            if bucket not in sets:
                sets[bucket] = capture(bucket)
            padded = list(lengths) + [pad] * (bucket - batch)
            if span_pieces:
                static_x, attended, graphs, queries, out = sets[bucket]
                static_x[:batch].copy_(x)
                graphs[0].replay()
                for i in range(model.layers):
                    attended[i].copy_(model.attention(i, queries[i], padded))
                    graphs[i + 1].replay()
                return out[:batch].clone()
            static_x, attended, pieces = sets[bucket]
            if side_copy:
                side = torch.cuda.Stream()
                if side_copy == "waited":
                    side.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(side):
                    static_x[:batch].copy_(x, non_blocking=True)
                torch.cuda.current_stream().wait_stream(side)
            else:
                static_x[:batch].copy_(x)
            if submodules_after:                       # replays before(), then computes after() by hand, eagerly
                h = static_x
                for i, (before, q, _, _) in enumerate(pieces):
                    before.replay()
                    a = model.attention(i, q, padded)
                    h = h + model.proj[i](a)
                    h = h + model.mlp[i](model.norm2[i](h))
                return h[:batch].clone()
            for i, (before, q, after, _) in enumerate(pieces):
                if before is not None:
                    before.replay()
                    if side_attention:
                        helper = torch.cuda.Stream()
                        helper.wait_stream(torch.cuda.current_stream())
                        with torch.cuda.stream(helper):
                            attended.copy_(model.attention(i, q, padded))
                        if side_attention == "waited":
                            torch.cuda.current_stream().wait_stream(helper)
                    elif copy_attention:
                        attended.copy_(model.attention(i, q, padded))
                after.replay()
            out = pieces[-1][3][:batch]
            if cpu:
                return out.cpu()
            if side_clone:
                helper = torch.cuda.Stream()
                if side_clone == "waited":
                    helper.wait_stream(torch.cuda.current_stream())
                with torch.cuda.stream(helper):
                    kept = out.clone()
                torch.cuda.current_stream().wait_stream(helper)
                return kept
            return out.clone() if clone else out
        return run
    return build_piecewise


PIECEWISE_ANSWERS = [
    Answer("before and after graphs per layer, one pool per bucket (the solution's way)", "right", piecewise_answer()),
    Answer("graphs from one attention to the next (layers + 1 per bucket)", "right", piecewise_answer(span_pieces=True)),
    Answer("the static output returned without a clone", "classic", piecewise_answer(clone=False)),
    Answer("attention captured too, at the longest context", "classic", piecewise_answer(capture_attention=True)),
    Answer("every batch padded to the largest bucket", "method", piecewise_answer(bucket_rule="largest")),
    Answer("a graph set for every batch size, no buckets", "method", piecewise_answer(bucket_rule="exact")),
    Answer("the lecture's buckets typed in", "hard-coded", piecewise_answer(fixed_buckets=(1, 2, 4, 8, 16))),
    Answer("attention's result never copied into the graph's input", "bad value",
           piecewise_answer(copy_attention=False)),
    Answer("the model run eagerly", "structure", piecewise_answer(eager=True)),
    Answer("graphs captured on first use, inside run", "structure", piecewise_answer(capture_in_run=True)),
    Answer("lengths padded with 0", "bad value", piecewise_answer(pad=0)),
    Answer("after() computed from the submodules, eagerly", "structure", piecewise_answer(submodules_after=True)),
    Answer("the rows returned on the CPU", "unit", piecewise_answer(cpu=True)),
    Answer("x copied on a stream of its own that does not wait for the current one", "method",
           piecewise_answer(side_copy="racy")),
    Answer("x copied on a stream of its own after a wait_stream", "right", piecewise_answer(side_copy="waited")),
    Answer("attention on a stream of its own that after()'s replay does not wait for", "method",
           piecewise_answer(side_attention="racy")),
    Answer("attention on a stream of its own, waited for before after()'s replay", "right",
           piecewise_answer(side_attention="waited")),
    Answer("the output cloned on a stream of its own that does not wait for the replay", "method",
           piecewise_answer(side_clone="racy")),
    Answer("the output cloned on a stream of its own after a wait_stream", "right",
           piecewise_answer(side_clone="waited")),
    Answer("before and after graphs per layer (after the mutants)", "right", piecewise_answer()),
]
SUITE_PIECEWISE = suite("10", 3, ch10.check_piecewise, PIECEWISE_ANSWERS)


@pytest.mark.exercise("10", 3)
@pytest.mark.gpu
def test_lab10_exercise3_piecewise(lenient_checkers):
    wrong = judge(SUITE_PIECEWISE.lab, SUITE_PIECEWISE.number, SUITE_PIECEWISE.checker, SUITE_PIECEWISE.answers)
    assert not wrong, "\n".join(wrong)


# ---- exercise 4: make reduce-overhead graph it -------------------------------------------------------------------


def fixed_functional(x, state):
    new_state = 0.9 * state + 0.1 * x.mean()
    return x * new_state, new_state


def fixed_on_a_clone(x, state):
    s = state.clone()
    s.mul_(0.9).add_(0.1 * x.mean())
    return x * s, s


def still_mutates(x, state):
    return ch10.ema_scale(x, state), state


def copies_back(x, state):
    new_state = 0.9 * state + 0.1 * x.mean()
    state.copy_(new_state)
    return x * new_state, new_state


def scales_by_the_old_state(x, state):
    return x * state, 0.9 * state + 0.1 * x.mean()


def reads_the_state_on_the_host(x, state):
    new_state = 0.9 * state.item() + 0.1 * x.mean()
    return x * new_state, new_state


def decay_swapped(x, state):
    new_state = 0.1 * state + 0.9 * x.mean()
    return x * new_state, new_state


def half(x, state):
    return x * 0.5, state


def as_a_list(x, state):
    new_state = torch_lerp(state, x)
    return [x * new_state, new_state]


def torch_lerp(state, x):
    return state.lerp(x.mean(), 0.1)                  # 0.9 * state + 0.1 * mean, written another way


def not_compiled(x, state):
    import torch

    return torch.compiler.disable(fixed_functional)(x, state)


COMPILE_ANSWERS = [
    Answer("returns the new state (the solution's way)", "right", fixed_functional),
    Answer("updates a clone in place and returns it", "right", fixed_on_a_clone),
    Answer("the original, wrapped", "classic", still_mutates),
    Answer("copies the new state back into the argument", "classic", copies_back),
    Answer("y scaled by the old state", "method", scales_by_the_old_state),
    Answer("the state read with .item()", "bad value", reads_the_state_on_the_host),
    Answer("0.9 and 0.1 swapped", "unit", decay_swapped),
    Answer("a constant scale", "hard-coded", half),
    Answer("compilation turned off inside", "structure", not_compiled),
    Answer("lerp, returned as a list (after the mutants)", "right", as_a_list),
]
SUITE_COMPILE = suite("10", 4, ch10.check_compile_fix, COMPILE_ANSWERS)


@pytest.mark.exercise("10", 4)
@pytest.mark.gpu
def test_lab10_exercise4_compile_fix(lenient_checkers):
    wrong = judge(SUITE_COMPILE.lab, SUITE_COMPILE.number, SUITE_COMPILE.checker, SUITE_COMPILE.answers)
    assert not wrong, "\n".join(wrong)


# ---- what runs on a CPU ------------------------------------------------------------------------------------------


def test_every_suite_has_the_classic_mistake_six_wrong_answers_and_a_right_one():
    for answers in (STEP_ANSWERS, DROPOUT_ANSWERS, PIECEWISE_ANSWERS, COMPILE_ANSWERS):
        assert {"classic", "method", "structure", "right"} <= {a.kind for a in answers}
        assert sum(not a.right for a in answers) >= 6 and sum(a.right for a in answers) >= 1


def test_the_buckets_increase_and_are_never_the_lectures_powers_of_two():
    for seed in range(300):
        buckets = ch10._bucket_draw(random.Random(seed))
        assert list(buckets) == sorted(set(buckets)) and 8 <= buckets[-1] <= 16 and buckets[0] >= 1
        assert any(b & (b - 1) for b in buckets)


def test_the_reference_is_ema_scale_call_after_call():
    import torch

    xs = [torch.full((4,), v) for v in (1.0, 2.0, 3.0)]
    ys, state = ch10._reference(xs, torch.zeros(()))
    expected, s = [], 0.0
    for v in (1.0, 2.0, 3.0):
        s = 0.9 * s + 0.1 * v
        expected.append(v * s)
    assert [float(y[0]) for y in ys] == pytest.approx(expected) and float(state) == pytest.approx(s)


@pytest.mark.parametrize("checker, answer", [
    (ch10.check_train_step, STEP_ANSWERS[0].fn), (ch10.check_dropout_graph, DROPOUT_ANSWERS[0].fn),
    (ch10.check_piecewise, PIECEWISE_ANSWERS[0].fn), (ch10.check_compile_fix, fixed_functional),
])
def test_without_a_gpu_every_checker_fails_with_a_clear_message(checker, answer, lenient_checkers, monkeypatch):
    import torch

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    verdict = checker(answer)
    assert not verdict and NEEDS_GPU in verdict.detail
