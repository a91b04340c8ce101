"""Lab 03's mutation suite: plausible answers to every exercise, each judged by its checker.

Exercises 1, 2 and 4 run on a CPU; exercise 3 (did reduce-overhead really graph?) needs a GPU, apart from its
check without one and the trace reading its checker relies on.
"""

import pytest
import torch

from launchlab import trace
from launchlab.chapters.ch03 import checkers as ch03
from launchlab.checking import NEEDS_GPU, warm_up_then_capture
from mutants import Answer, judge, suite


def _block(forward):
    """A block with lab 03's two layers and the given forward(self, x)."""

    class Block(torch.nn.Module):
        def __init__(self, width: int = 64):
            super().__init__()
            self.fc1 = torch.nn.Linear(width, width)
            self.fc2 = torch.nn.Linear(width, width)

    Block.forward = forward
    return lambda: Block()


def _rms(h):
    return h / h.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()


def fixed(self, x):
    h = self.fc1(x)
    h = h / h.abs().amax()
    h = torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))
    return self.fc2(_rms(h))


def fixed_with_cond(self, x):
    """Right, written differently: torch.cond for the branch, the print kept for eager runs only."""
    h = self.fc1(x)
    if not torch.compiler.is_compiling():
        print(f"block input {tuple(x.shape)}")
    h = h / h.abs().max()
    h = torch.cond(h.mean() > 0, lambda t: torch.relu(t), lambda t: torch.tanh(t), (h,))
    return self.fc2(_rms(h))


def print_kept(self, x):
    print(f"block input {tuple(x.shape)}")
    return fixed(self, x)


def item_kept(self, x):
    h = self.fc1(x)
    h = h / h.abs().max().item()
    h = torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))
    return self.fc2(_rms(h))


def branches_swapped(self, x):
    h = self.fc1(x)
    h = h / h.abs().amax()
    h = torch.where(h.mean() > 0, torch.tanh(h), torch.relu(h))
    return self.fc2(_rms(h))


def scale_without_abs(self, x):
    h = self.fc1(x)
    h = h / h.amax()
    h = torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))
    return self.fc2(_rms(h))


def helper_still_disabled(self, x):
    h = self.fc1(x)
    h = h / h.abs().amax()
    h = torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))
    return self.fc2(ch03.rms_normalise(h))


def norm_without_epsilon_and_mean(self, x):
    h = self.fc1(x)
    h = h / h.abs().amax()
    h = torch.where(h.mean() > 0, torch.relu(h), torch.tanh(h))
    return self.fc2(h / h.norm(dim=-1, keepdim=True))  # the L2 norm: off by sqrt(width)


class NewLayers(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.first = torch.nn.Linear(64, 64)
        self.second = torch.nn.Linear(64, 64)

    def forward(self, x):
        return self.second(torch.relu(self.first(x)))


BUG_HUNT_ANSWERS = [
    Answer("the solution's fixes", "right", _block(fixed)),
    Answer("torch.cond, print kept for eager runs", "right", _block(fixed_with_cond)),
    Answer("the print left in", "classic", _block(print_kept)),
    Answer(".item() left in", "classic", _block(item_kept)),
    Answer("the helper still under torch._dynamo.disable", "structure", _block(helper_still_disabled)),
    Answer("the original block returned", "structure", lambda: ch03.BuggyBlock()),
    Answer("torch.where with its branches swapped", "method", _block(branches_swapped)),
    Answer("the scale without abs()", "method", _block(scale_without_abs)),
    Answer("an L2 norm for the RMS norm", "unit", _block(norm_without_epsilon_and_mean)),
    Answer("layers renamed, so the weights do not load", "structure", NewLayers),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_BUG_HUNT = suite("03", 1, ch03.check_bug_hunt, BUG_HUNT_ANSWERS)


def compiled_dynamic(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    return [compiled(x) for x in inputs]


def marked_dynamic(fn, inputs, backend):
    """Right, written differently: the first input's rows marked dynamic."""
    compiled = torch.compile(fn, backend=backend)
    torch._dynamo.mark_dynamic(inputs[0], 0)
    return [compiled(x) for x in inputs]


def default_compile(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend)
    return [compiled(x) for x in inputs]


def static_shapes(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend, dynamic=False)
    return [compiled(x) for x in inputs]


def reset_per_input(fn, inputs, backend):
    outputs = []
    for x in inputs:
        torch._dynamo.reset()  # "a clean compile for each shape": every input compiles afresh
        outputs.append(torch.compile(fn, backend=backend, dynamic=True)(x))
    return outputs


def first_input_only(fn, inputs, backend):
    compiled = torch.compile(fn, backend=backend, dynamic=True)
    return [compiled(inputs[0])] + [fn(x) for x in inputs[1:]]


def padded_to_one_shape(fn, inputs, backend):
    # pads every input to the largest row count: one compile, but the row count the function scales by changes
    compiled = torch.compile(fn, backend=backend)
    rows = max(x.shape[0] for x in inputs)
    return [compiled(torch.nn.functional.pad(x, (0, 0, 0, rows - x.shape[0])))[: x.shape[0]] for x in inputs]


def sorted_by_rows(fn, inputs, backend):
    """Found by a blind attack: the inputs run smallest first, so the 1-row input's recompile comes first, then
    the outputs put back in order."""
    compiled = torch.compile(fn, backend=backend)
    order = sorted(range(len(inputs)), key=lambda i: inputs[i].shape[0])
    outputs = [None] * len(inputs)
    for i in order:
        outputs[i] = compiled(inputs[i])
    return outputs


def limit_raised(fn, inputs, backend):
    torch._dynamo.config.recompile_limit = 64  # every shape gets its own graph instead of falling back
    try:
        return static_shapes(fn, inputs, backend)
    finally:
        torch._dynamo.config.recompile_limit = 8


RECOMPILE_ANSWERS = [
    Answer("dynamic=True", "right", compiled_dynamic),
    Answer("mark_dynamic on the first input", "right", marked_dynamic),
    Answer("the default compile", "classic", default_compile),
    Answer("dynamic=False", "classic", static_shapes),
    Answer("the compile cache reset for every input", "method", reset_per_input),
    Answer("the recompile limit raised instead", "method", limit_raised),
    Answer("compiled for the first input, eager for the rest", "structure", first_input_only),
    Answer("inputs padded to one shape", "structure", padded_to_one_shape),
    Answer("the inputs run in another order (found by a blind attack)", "structure", sorted_by_rows),
    Answer("the outputs in reverse order", "bad value", lambda fn, inputs, backend: compiled_dynamic(fn, inputs, backend)[::-1]),
    Answer("returns None", "bad value", lambda fn, inputs, backend: None),
]
SUITE_RECOMPILES = suite("03", 2, ch03.check_recompiles, RECOMPILE_ANSWERS)


def isolated(w, audit, backend):
    @torch.compile(backend=backend, fullgraph=True)
    def hot(x, w):
        h = torch.tanh(x @ w)
        return torch.tanh(h @ w) + h, h.norm(dim=-1)

    def step(x):
        out, norms = hot(x, w)
        audit(norms.tolist())
        return out

    return step


def isolated_returning_h(w, audit, backend):
    """Right, written differently: the compiled part returns h, and the norms are taken outside it."""
    compiled = torch.compile(lambda x, w: (lambda h: (torch.tanh(h @ w) + h, h))(torch.tanh(x @ w)), backend=backend)

    def step(x):
        out, h = compiled(x, w)
        audit(h.norm(dim=-1).tolist())
        return out

    return step


def whole_step(w, audit, backend):
    compiled = torch.compile(ch03.audited_step, backend=backend)
    return lambda x: compiled(x, w, audit)


def audit_dropped(w, audit, backend):
    compiled = torch.compile(lambda x: torch.tanh(torch.tanh(x @ w) @ w) + torch.tanh(x @ w), backend=backend)
    return compiled


def audit_of_the_output(w, audit, backend):
    @torch.compile(backend=backend)
    def hot(x):
        h = torch.tanh(x @ w)
        return torch.tanh(h @ w) + h

    def step(x):
        out = hot(x)
        audit(out.norm(dim=-1).tolist())
        return out

    return step


def audit_fed_a_tensor(w, audit, backend):
    """Found by a blind attack: the audit gets the norms as a tensor, not host values."""
    return isolated(w, lambda norms: audit(torch.tensor(norms)), backend)


def squared_norms(w, audit, backend):
    inner = isolated(w, lambda norms: audit([n * n for n in norms]), backend)
    return inner


def eager_step(w, audit, backend):
    return lambda x: ch03.audited_step(x, w, audit)


def audit_once_at_the_end(w, audit, backend):
    records = []
    inner = isolated(w, records.append, backend)

    def step(x):
        out = inner(x)
        if len(records) == 3:
            audit([v for r in records for v in r])
        return out

    return step


ISOLATED_ANSWERS = [
    Answer("norms returned as a tensor (the solution)", "right", isolated),
    Answer("h returned, norms taken outside", "right", isolated_returning_h),
    Answer("the whole step compiled, break and all", "classic", whole_step),
    Answer("the audit dropped", "structure", audit_dropped),
    Answer("run eagerly", "structure", eager_step),
    Answer("the audit fed the output's norms", "method", audit_of_the_output),
    Answer("the audit called once, after the last step", "method", audit_once_at_the_end),
    Answer("squared norms", "unit", squared_norms),
    Answer("the audit fed a tensor, not host values (found by a blind attack)", "bad value", audit_fed_a_tensor),
    Answer("returns None", "bad value", lambda w, audit, backend: None),
]
SUITE_ISOLATED = suite("03", 4, ch03.check_isolated_break, ISOLATED_ANSWERS)


# ---- exercise 3: did it really graph? (GPU) -------------------------------------------------------------------
# fn(x, running_mean) is the checker's launch-bound MLP that also updates running_mean in place.

def graphed(fn):
    """The solution: the update returned from the compiled function, copied into the caller's tensor outside it."""

    def pure(x, running_mean):
        new_mean = running_mean.clone()
        out = fn(x, new_mean)
        return out, new_mean

    compiled = torch.compile(pure, mode="reduce-overhead")

    def run(x, running_mean):
        out, new_mean = compiled(x, running_mean)
        running_mean.copy_(new_mean)
        return out

    return run


def graphed_update_outside(fn):
    """Right, written differently: the compiled part works on a throwaway clone; the update runs eagerly after it."""
    compiled = torch.compile(lambda x, running_mean: fn(x, running_mean.clone()), mode="reduce-overhead")

    def run(x, running_mean):
        out = compiled(x, running_mean)
        running_mean.mul_(0.9).add_(x.mean(0), alpha=0.1)  # the original's update, outside the graph
        return out

    return run


def graphed_decorated_fullgraph(fn):
    """Right, written differently: the decorator with fullgraph=True, and a new CUDA-graph step marked each call."""

    @torch.compile(mode="reduce-overhead", fullgraph=True)
    def pure(x, running_mean):
        new_mean = running_mean.clone()
        return fn(x, new_mean), new_mean

    def run(x, running_mean):
        torch.compiler.cudagraph_mark_step_begin()
        out, new_mean = pure(x, running_mean)
        running_mean.copy_(new_mean)
        return out

    return run


def graphed_by_option_update_spelled_out(fn):
    """Right, written differently: CUDA graphs asked for by Inductor's option instead of the mode, and the update
    written out eagerly in more kernels (a mean, two products, a sum) than the original's."""
    compiled = torch.compile(lambda x, running_mean: fn(x, running_mean.clone()), options={"triton.cudagraphs": True})

    def run(x, running_mean):
        out = compiled(x, running_mean)
        running_mean.copy_(0.9 * running_mean + 0.1 * x.mean(0))
        return out

    return run


def graph_then_eager_update(fn):
    def pure(x, running_mean):
        new_mean = running_mean.clone()
        return fn(x, new_mean), new_mean

    compiled = torch.compile(pure, mode="reduce-overhead")

    def run(x, running_mean):
        out, _ = compiled(x, running_mean)  # the graph gives the output...
        fn(x, running_mean)                 # ...and the whole fn runs again, eagerly, for its in-place update
        return out

    return run


def eager_with_graphed_clone(fn):
    tail = torch.compile(lambda t: t.clone(), mode="reduce-overhead")  # a graph launch, of a copy only
    return lambda x, running_mean: tail(fn(x, running_mean))


def captured_by_hand(fn):
    """fn captured into a torch.cuda.CUDAGraph of its own at the first call, on static copies of the inputs."""
    state = {}

    def run(x, running_mean):
        if not state:
            state["x"], state["mean"] = x.clone(), running_mean.clone()
            state["graph"], state["out"] = warm_up_then_capture(lambda: fn(state["x"], state["mean"]))
        state["x"].copy_(x)
        state["mean"].copy_(running_mean)
        state["graph"].replay()
        running_mean.copy_(state["mean"])
        return state["out"].clone()

    return run


def hand_graph_beside_compiled_clone(fn):
    by_hand = captured_by_hand(fn)
    tail = torch.compile(lambda t: t.clone(), mode="reduce-overhead")  # torch.compile's graph launch, of a copy
    return lambda x, running_mean: tail(by_hand(x, running_mean))


def default_mode(fn):
    return torch.compile(fn)  # fused, but no CUDA graph


def reduce_overhead_as_given(fn):
    return torch.compile(fn, mode="reduce-overhead")  # the input it mutates makes Inductor skip the graph


def copied_back_inside(fn):
    def pure(x, running_mean):
        new_mean = running_mean.clone()
        out = fn(x, new_mean)
        running_mean.copy_(new_mean)  # still an input mutated inside the compiled function
        return out

    return torch.compile(pure, mode="reduce-overhead")


def rebound_not_copied(fn):
    compiled = torch.compile(lambda x, running_mean: (lambda m: (fn(x, m), m))(running_mean.clone()),
                             mode="reduce-overhead")

    def run(x, running_mean):
        out, running_mean = compiled(x, running_mean)  # rebinds the local name: the caller's tensor is unchanged
        return out

    return run


def _graphed_via(fn, new_mean_from):
    """The solution's shape, the new mean made by `new_mean_from(running_mean)` instead of a clone."""

    def pure(x, running_mean):
        new_mean = new_mean_from(running_mean)
        return fn(x, new_mean), new_mean

    compiled = torch.compile(pure, mode="reduce-overhead")

    def run(x, running_mean):
        out, new_mean = compiled(x, running_mean)
        running_mean.copy_(new_mean)
        return out

    return run


def new_mean_returned_too(fn):
    def pure(x, running_mean):
        new_mean = running_mean.clone()
        return fn(x, new_mean), new_mean

    compiled = torch.compile(pure, mode="reduce-overhead")

    def run(x, running_mean):
        out, new_mean = compiled(x, running_mean)
        running_mean.copy_(new_mean)
        return out, new_mean  # the caller expects the output alone

    return run


GRAPHED_ANSWERS = [
    Answer("the update returned, copied outside (the solution)", "right", graphed),
    Answer("compiled on a clone, the update run eagerly after", "right", graphed_update_outside),
    Answer("decorator, fullgraph=True, a step marked each call", "right", graphed_decorated_fullgraph),
    Answer("CUDA graphs by Inductor's option, the update spelled out", "right", graphed_by_option_update_spelled_out),
    Answer("the default compile mode", "classic", default_mode),
    Answer("reduce-overhead on fn as given: the mutated input skips the graph", "classic", reduce_overhead_as_given),
    Answer("the update copied back inside the compiled function", "method", copied_back_inside),
    Answer("the eager fn returned", "structure", lambda fn: fn),
    Answer("the graph for the output, then fn run eagerly for the update", "method", graph_then_eager_update),
    Answer("the MLP eager, only a clone of its output graphed", "structure", eager_with_graphed_clone),
    Answer("a CUDA graph captured by hand, no torch.compile", "method", captured_by_hand),
    Answer("a hand-captured graph beside a compiled clone", "structure", hand_graph_beside_compiled_clone),
    Answer("the new mean rebound, not copied into the caller's tensor", "structure", rebound_not_copied),
    Answer("the running mean kept in half precision", "unit",
           lambda fn: _graphed_via(fn, lambda running_mean: running_mean.half())),
    Answer("the width typed in: a fresh zero mean each call", "hard-coded",
           lambda fn: _graphed_via(fn, lambda running_mean: torch.zeros(256, device=running_mean.device))),
    Answer("the new mean returned with the output", "bad value", new_mean_returned_too),
    Answer("returns None", "bad value", lambda fn: None),
]


def _fresh_compile(checker, make_graphed):
    """Each answer judged from a clean slate: dynamo's caches and the CUDA-graph trees reset first."""
    torch._dynamo.reset()
    return checker(make_graphed)


SUITE_GRAPHED = suite("03", 3, ch03.check_really_graphed, GRAPHED_ANSWERS, call=_fresh_compile)


@pytest.fixture(autouse=True)
def _not_strict(monkeypatch, capsys):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    yield
    capsys.readouterr()


@pytest.mark.exercise("03", 1)
def test_lab03_exercise1_bug_hunt():
    wrong = judge(SUITE_BUG_HUNT.lab, SUITE_BUG_HUNT.number, SUITE_BUG_HUNT.checker, SUITE_BUG_HUNT.answers)
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("03", 2)
def test_lab03_exercise2_recompiles():
    wrong = judge(SUITE_RECOMPILES.lab, SUITE_RECOMPILES.number, SUITE_RECOMPILES.checker, SUITE_RECOMPILES.answers)
    assert not wrong, "\n".join(wrong)


@pytest.mark.exercise("03", 3)
@pytest.mark.gpu
def test_lab03_exercise3_really_graphed():
    wrong = judge(SUITE_GRAPHED.lab, SUITE_GRAPHED.number, SUITE_GRAPHED.checker, SUITE_GRAPHED.answers,
                  call=SUITE_GRAPHED.call)
    assert not wrong, "\n".join(wrong)
    verdict = _fresh_compile(ch03.check_really_graphed, reduce_overhead_as_given)
    assert "it did not graph" in verdict.detail and "cudaGraphLaunch" in verdict.hint
    verdict = _fresh_compile(ch03.check_really_graphed, graph_then_eager_update)
    assert f"at most {ch03.LAUNCHES_BESIDE_GRAPH} allowed" in verdict.detail and verdict.hint == ch03.OUTSIDE_HINT
    verdict = _fresh_compile(ch03.check_really_graphed, captured_by_hand)
    assert "0 from torch.compile's compiled code" in verdict.detail and verdict.hint == ch03.NOT_COMPILED_HINT
    verdict = _fresh_compile(ch03.check_really_graphed, graphed)
    assert verdict and "every graph launch from torch.compile's compiled code" in verdict.detail


def test_lab03_exercise3_without_a_gpu_says_it_needs_one(monkeypatch):
    """On a machine without CUDA (or with it hidden) the check names the missing GPU, not the error it would raise."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    verdict = ch03.check_really_graphed(graphed)
    assert not verdict and NEEDS_GPU in verdict.detail


def _launch(name: str, ts: float, cat: str = "cuda_runtime") -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": 2.0}


def test_lab03_exercise3_launches_are_told_apart_by_inductors_range():
    """A launch made while Inductor's compiled code ran (inside its range on the host) is the compiled code's; any
    other launch, and the range's copy on the GPU's row, is not."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": f"{ch03.INDUCTOR_CALL} abc ##", "ts": 100.0, "dur": 50.0},
        {"ph": "X", "cat": "gpu_user_annotation", "name": f"{ch03.INDUCTOR_CALL} abc ##", "ts": 0.0, "dur": 400.0},
        _launch("cudaLaunchKernel", 110.0),           # the inputs' copy into the static buffers
        _launch("cudaGraphLaunch_v10000", 130.0),     # the replay
        _launch("cudaLaunchKernel", 20.0),            # eager work before the compiled call
        _launch("cuLaunchKernel", 160.0, "cuda_driver"),
        _launch("cudaGraphLaunch", 200.0),            # a graph of the answer's own
        _launch("cudaMemcpyAsync", 210.0),            # a copy is no launch
    ]
    assert ch03._launch_origins(events) == {"graphs_compiled": 1, "graphs_other": 1,
                                            "kernels_compiled": 1, "kernels_other": 2}
    assert ch03._launch_origins([e for e in events if e["cat"] != "cpu_op"])["graphs_compiled"] == 0


def test_lab03_exercise3_inductor_still_marks_its_compiled_calls():
    """The checker tells torch.compile's graph launches from others by the range Inductor puts around every call of
    its compiled code: the installed torch must still emit it (Inductor compiling for the CPU here)."""
    compiled = torch.compile(lambda x: torch.sin(x) + 1)
    x = torch.randn(16)
    compiled(x)
    events = trace.record(lambda: compiled(x), calls=1)
    marked = [e for e in events if str(e.get("name", "")).startswith(ch03.INDUCTOR_CALL)]
    assert marked, f"no profiler range named {ch03.INDUCTOR_CALL!r} around a call of Inductor's compiled code"


@pytest.mark.exercise("03", 4)
def test_lab03_exercise4_isolated_break():
    wrong = judge(SUITE_ISOLATED.lab, SUITE_ISOLATED.number, SUITE_ISOLATED.checker, SUITE_ISOLATED.answers)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("rows, ok", [
    (ch03.SHAPES, True),
    ([ch03.SHAPES[0]] + ch03.SHAPES, True),                 # a warm-up on the first input
    ([n for n in ch03.SHAPES for _ in range(2)], True),     # a function that runs as two graphs
    ([1] + ch03.SHAPES, False),                             # a warm-up on a 1-row tensor: its recompile put off
    (sorted(ch03.SHAPES), False),                           # the inputs run smallest first
    (ch03.SHAPES[:-1], False),                              # one input never ran compiled
])
def test_exercise2_reads_the_order_of_the_compiled_calls(rows, ok):
    assert ch03._in_order(rows, ch03.SHAPES) is ok

