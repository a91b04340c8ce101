"""Lab 09's mutation suite: plausible answers a learner writes, each judged by its checker.

Exercises 1 and 2 need a GPU of compute capability 9.0, exercise 3 a CUDA GPU; exercise 4 runs here entirely.
What else runs on a CPU runs here too: every CUDA answer compiled for sm_90 (so a wrong one fails for what it
does, not for a typo), the draws the checkers make, and the verdicts (and their hints) the checkers give on what
their child process reports or what the driver says of a graph.
"""

import json
import random
import statistics

import numpy as np
import pytest

from launchlab import checking, child, graphs
from launchlab.chapters.ch09 import checkers as ch09
from mutants import Answer, judge, suite


def compiles_for_hopper(source: str) -> None:
    from cuda.core import Program, ProgramOptions

    Program(source, "c++", ProgramOptions(arch="sm_90")).compile("cubin")


def _reported(monkeypatch, **values):
    """Make the checkers' child process report `values`, and let them run without a GPU."""
    ran = child.ChildRun(0, 1.0, False, ["RESULT " + json.dumps(values)])
    monkeypatch.setattr(child, "run_python", lambda script, **kwargs: ran)
    monkeypatch.setattr(ch09, "require_cuda", lambda what: None)
    monkeypatch.setattr(ch09, "_require_pdl", lambda: None)
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")


# ---- exercise 1: the wait and the trigger in a producer/consumer pair --------------------------------------

PRODUCER = 'extern "C" __global__ void producer(const float* source, float* x, int n, unsigned long long* stamps) {\n'
CONSUMER = 'extern "C" __global__ void consumer(const float* x, float* y, int n, unsigned long long* stamps) {\n'
TRIGGER_FIRST = "pdl_trigger();\nlaunchlab_produce(source, x, n, stamps);"
NO_TRIGGER = "launchlab_produce(source, x, n, stamps);"
STRIDE = "for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)"
RIGHT_CONSUMER = f"launchlab_prologue(stamps);\npdl_wait();\n{STRIDE}\n    y[i] = 2.0f * x[i] + 1.0f;"


def pair(producer_body: str, consumer_body: str):
    return lambda: PRODUCER + producer_body + "\n}\n" + CONSUMER + consumer_body + "\n}\n"


PAIR_ANSWERS = [
    Answer("trigger first; prologue, wait, grid-stride loop (the solution)", "right", pair(TRIGGER_FIRST, RIGHT_CONSUMER)),
    Answer("one element a thread, x + x + 1", "right", pair("""
    int first = blockIdx.x * blockDim.x;   // nothing here depends on the consumer
    (void)first;
    pdl_trigger();
    launchlab_produce(source, x, n, stamps);""", """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    launchlab_prologue(stamps);
    pdl_wait();
    if (i < n) y[i] = x[i] + x[i] + 1.0f;""")),
    Answer("the CUDA C++ names of the wait and the trigger", "right", pair(
        "cudaTriggerProgrammaticLaunchCompletion();\nlaunchlab_produce(source, x, n, stamps);",
        RIGHT_CONSUMER.replace("pdl_wait();", "cudaGridDependencySynchronize();"))),
    Answer("the consumer never waits", "classic", pair(TRIGGER_FIRST, f"""
    launchlab_prologue(stamps);
    {STRIDE}
        y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("the producer triggers once x is written", "classic", pair("""
    launchlab_produce(source, x, n, stamps);
    pdl_trigger();   // x is ready: let the consumer go""", RIGHT_CONSUMER)),
    Answer("x loaded before the wait, to hide its latency", "method", pair(TRIGGER_FIRST, """
    launchlab_prologue(stamps);
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    float v = i < n ? x[i] : 0.0f;
    pdl_wait();
    if (i < n) y[i] = 2.0f * v + 1.0f;""")),
    Answer("the consumer waits before its prologue", "method", pair(TRIGGER_FIRST, f"""
    pdl_wait();
    launchlab_prologue(stamps);
    {STRIDE}
        y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("only thread 0 of each block waits", "structure", pair(TRIGGER_FIRST, """
    launchlab_prologue(stamps);
    if (threadIdx.x == 0) pdl_wait();
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("no trigger anywhere", "structure", pair(NO_TRIGGER, RIGHT_CONSUMER)),
    Answer("the consumer spins on the producer's end stamp instead of the wait", "method", pair(TRIGGER_FIRST, f"""
    launchlab_prologue(stamps);
    while (((volatile unsigned long long*)stamps)[0] == 0) {{ }}   // pdl_wait(); a flag is enough
    __threadfence();
    {STRIDE}
        y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("the trigger in the consumer instead of the producer", "structure", pair(NO_TRIGGER, f"""
    pdl_trigger();
    {RIGHT_CONSUMER}""")),
    Answer("no bound on i", "classic", pair(TRIGGER_FIRST, """
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    launchlab_prologue(stamps);
    pdl_wait();
    y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("blocks of 256 typed in", "unit", pair(TRIGGER_FIRST, """
    int i = blockIdx.x * 256 + threadIdx.x;
    launchlab_prologue(stamps);
    pdl_wait();
    if (i < n) y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("n typed in as 1000", "hard-coded", pair(TRIGGER_FIRST, """
    launchlab_prologue(stamps);
    pdl_wait();
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < 1000; i += gridDim.x * blockDim.x)
        y[i] = 2.0f * x[i] + 1.0f;""")),
    Answer("y = 2 (x + 1)", "classic", pair(TRIGGER_FIRST, f"""
    launchlab_prologue(stamps);
    pdl_wait();
    {STRIDE}
        y[i] = 2.0f * (x[i] + 1.0f);""")),
    Answer("the kernels misnamed", "bad value",
           lambda: pair(TRIGGER_FIRST, RIGHT_CONSUMER)().replace("producer(", "produce(").replace("consumer(", "consume(")),
    Answer("not CUDA", "bad value", lambda: "def consumer(x, y): y[:] = 2 * x + 1"),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_PAIR = suite("09", 1, ch09.check_pdl_pair, PAIR_ANSWERS)


@pytest.mark.exercise("09", 1)
@pytest.mark.gpu
def test_lab09_exercise1_pdl_pair(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(ch09, "GPU_TIMEOUT_S", 3)
    monkeypatch.setattr(ch09, "CHILD_EXIT_S", 2)
    wrong = judge(SUITE_PAIR.lab, SUITE_PAIR.number, SUITE_PAIR.checker, SUITE_PAIR.answers)
    assert not wrong, "\n".join(wrong)
    names = {a.name: a.fn for a in PAIR_ANSWERS}
    late = ch09.check_pdl_pair(names["the producer triggers once x is written"])
    assert "pdl_trigger() at the start" in late.hint, late
    unwaited = ch09.check_pdl_pair(names["only thread 0 of each block waits"])
    assert "every thread" in unwaited.hint, unwaited


def test_every_pair_answer_compiles_after_the_prelude():
    for answer in PAIR_ANSWERS:
        source = answer.fn()
        if answer.kind != "bad value":
            compiles_for_hopper(ch09.PDL_PRELUDE + source)
    compiles_for_hopper(ch09.PDL_PRELUDE + ch09.CHECKER_PAIR_SOURCE)


@pytest.mark.parametrize("answer, detail", [
    (lambda: None, "returned None"),
    (lambda: float("nan"), "returned float nan"),
    (lambda: 42, "returned int"),
    (lambda: "y = 2 * x + 1", "holds no CUDA function"),
])
def test_pair_answers_that_are_no_source_fail_on_a_cpu_too(answer, detail, lenient_checkers):
    verdict = ch09.check_pdl_pair(answer)
    assert not verdict and detail in verdict.detail, verdict
    verdict = ch09.check_grid_barrier(answer)
    assert not verdict and detail in verdict.detail, verdict


def test_the_pair_cases_vary_the_block_and_never_fill_the_last_block():
    for seed in range(50):
        cases = ch09._pair_cases(seed)
        assert sorted(c["block"] for c in cases) == [128, 256, 384]
        assert all(c["n"] % c["block"] and c["n"] > 1000 for c in cases)
    assert ch09._pair_cases(1) != ch09._pair_cases(2)


WAITING_SOURCE = "__global__ void consumer() { pdl_wait(); }"  # what the faked child runs is in its report


def _run(n=5000, block=256, wrong=0, nan=0, untouched=0, past_end=0, lead_ns=30_000, produced=True, prologue=True):
    return {"n": n, "block": block, "wrong": wrong, "nan": nan, "untouched": untouched, "first": 7 if wrong else -1,
            "got": float("nan") if nan else 0.0, "want": 3.0, "past_end": past_end, "produced": produced,
            "prologue": prologue, "lead_ns": lead_ns}


def _pairings(yours=None, your_consumer=None, your_producer=None):
    def runs(changed):
        return [_run(), _run(block=128), _run(block=384)] if changed is None else changed
    return {"pairings": {"yours": runs(yours), "your consumer": runs(your_consumer),
                         "your producer": runs(your_producer)}}


@pytest.mark.parametrize("report, detail, hint", [
    (_pairings(your_consumer=[_run(wrong=4000, nan=4000)]), "read x before the producer had written it",
     "every thread of the consumer must call pdl_wait()"),
    (_pairings(your_producer=[_run(wrong=5000, nan=5000)]), "your producer before the checker's consumer",
     "launchlab_produce"),
    (_pairings(your_consumer=[_run(past_end=100)]), "cells after y[n - 1] were written", "i < n"),
    (_pairings(your_consumer=[_run(wrong=2000, untouched=2000)]), "2,000 never written", "whatever the block size"),
    (_pairings(yours=[_run(wrong=5000)]), "values of y are wrong", "y[i] = 2 * x[i] + 1"),
    (_pairings(your_consumer=[_run(lead_ns=-1500)] * 3), "1.5 us after the producer ended",
     "before pdl_wait()"),
    (_pairings(your_producer=[_run(lead_ns=-800)] * 3), "your producer let it come in 0.8 us after",
     "pdl_trigger() at the start"),
    (_pairings(yours=[_run(produced=False, lead_ns=None)]), "never called launchlab_produce", "in every thread"),
    (_pairings(yours=[_run(prologue=False, lead_ns=None)]), "never called launchlab_prologue", "before its wait"),
], ids=["no-wait", "producer-writes-nothing", "past-the-end", "not-covered", "wrong-formula", "prologue-after-wait",
        "late-trigger", "no-produce", "no-prologue"])
def test_pair_verdicts_name_the_mistake(monkeypatch, report, detail, hint):
    _reported(monkeypatch, **report)
    verdict = ch09.check_pdl_pair(lambda: WAITING_SOURCE, seed=1)
    assert not verdict and detail in verdict.detail and hint in verdict.hint, verdict


def test_a_consumer_that_read_xs_old_values_is_told_to_wait(monkeypatch):
    """The stale run: a consumer that waits only on NaN, or spins until x is not NaN, read x's old values."""
    run = {"n": 5000, "block": 256, "wrong": 5000, "nan": 0, "stale": 5000, "untouched": 0, "first": 0, "got": -9.0,
           "want": 3.0, "past_end": 0, "produced": True, "prologue": True, "lead_ns": 30_000}
    verdict = ch09._data_problem([run], "your pair")
    assert "5,000 from x's old values" in str(verdict) and verdict.hint == ch09.WAIT_HINT, verdict


def test_one_pair_run_in_three_starts_from_xs_old_values():
    for seed in range(50):
        assert sum(case["stale"] for case in ch09._pair_cases(seed)) == 1, seed


def test_a_consumer_without_pdls_wait_fails_before_anything_runs(lenient_checkers):
    """Read from the source, comments left out: a spin on a flag of its own may pass an idle GPU's data check, so
    the source must call PDL's wait somewhere (pdl_wait(), griddepcontrol.wait or cudaGridDependencySynchronize())."""
    flag = {a.name: a.fn for a in PAIR_ANSWERS}["the consumer spins on the producer's end stamp instead of the wait"]
    verdict = ch09.check_pdl_pair(flag)
    assert not verdict and "never calls pdl_wait()" in verdict.detail and "every thread" in verdict.hint, verdict
    # right ways to wait, each found: in a helper, with a space, through asm, after braces in literals
    for waits in ("__device__ void wait_for_x() { pdl_wait (); }",
                  'asm volatile("griddepcontrol.wait;" ::: "memory");',
                  "const char* s = \"}\"; char c = '}'; pdl_wait();"):
        assert ch09._waits_for_the_producer(waits), waits
    for silent in ("// pdl_wait();", "/* pdl_wait(); */", "int my_pdl_wait_flag;"):
        assert not ch09._waits_for_the_producer(silent), silent
    assert ch09._without_comments('s = "// kept"; // gone') == 's = "// kept";  '


@pytest.mark.parametrize("consumer_body, waits", [
    ("W(); y[0] = x[0];", True),                                          # a macro alias: #define W pdl_wait
    ('asm volatile("griddepcontrol" ".wait;" ::: "memory"); y[0] = x[0];', True),
    ("helper(); y[0] = x[0];", True),                                     # through a function that is called
    ("if (false) pdl_wait(); y[0] = x[0];", False),                       # dead code
    ('const char* s = "pdl_wait();"; y[0] = x[0] + s[0];', False),        # a string is not a call
    ("y[0] = x[0];", False),                                              # the wait only in the producer
    ('asm volatile("// griddepcontrol.wait;"); y[0] = x[0];', False),     # a PTX comment is not an instruction
    ("void (*volatile f)() = helper; f(); y[0] = x[0];", None),           # through a pointer: the source decides
])
def test_the_wait_is_read_from_what_nvrtc_builds(consumer_body, waits):
    source = ("#define W pdl_wait\n__device__ __noinline__ void helper() { pdl_wait(); }\n"
              "__device__ void unused() { pdl_wait(); }\n"
              'extern "C" __global__ void producer(float* x) { pdl_wait(); x[0] = 1.0f; }\n'
              f'extern "C" __global__ void consumer(const float* x, float* y) {{ {consumer_body} }}\n')
    assert ch09._consumer_waits_in_ptx(source) is waits, consumer_body


def test_every_spelling_of_an_atomic_compiles_with_the_jitter():
    """The jitter forwards each atomic through a template: whatever compiles without it compiles with it."""
    spellings = """
    unsigned int a = ::atomicAdd(count, 1u);
    unsigned int (*add)(unsigned int*, unsigned int) = atomicAdd;
    a += add(count, 0u) + (atomicAdd)(count, 0u) + atomicCAS(count, 0u, 0u) + atomicInc(count, 4u);
    a += atomicExch((unsigned int*)generation, *generation) + atomicSub(count, 0u);
    if (a == 12345u) __syncthreads();"""
    compiles_for_hopper(ch09.barrier_program(barrier(spellings + BARRIER_SOLUTION)()))


def test_the_producers_blocks_end_in_a_drawn_order_apart():
    """The checker's producer staggers its blocks' ends, so a consumer let go by the first block's end reads NaN."""
    assert "stamps[3]" in ch09.PDL_PRELUDE and "stamps[4]" in ch09.PDL_PRELUDE
    assert ch09.STAGGER_NS * (ch09.PRODUCER_BLOCKS - 1) >= ch09.PRODUCE_NS / 2


def test_pair_passes_on_its_best_run_and_reports_a_childs_error(monkeypatch):
    _reported(monkeypatch, **_pairings(yours=[_run(lead_ns=-500), _run(lead_ns=31_000), _run(lead_ns=2_000)]))
    assert ch09.check_pdl_pair(lambda: WAITING_SOURCE, seed=1)
    _reported(monkeypatch, error="your source did not compile", hint="define both kernels")
    verdict = ch09.check_pdl_pair(lambda: WAITING_SOURCE, seed=1)
    assert not verdict and "did not compile" in verdict.detail and verdict.hint == "define both kernels"


# ---- exercise 2: a PDL chain in a captured graph ------------------------------------------------------------


def pdl_chain(builder, kernel, stages, buffers, n):
    from cuda.core import LaunchConfig, launch

    config = LaunchConfig(grid=(n + 255) // 256, block=256, programmatic_stream_serialization=True)
    for k in range(stages):
        launch(builder, config, kernel, buffers[k % 2].data.ptr, buffers[(k + 1) % 2].data.ptr, np.int32(n))


def chain_with(stages_of=lambda stages: stages, grid_of=lambda n: (n + 255) // 256, with_pdl=lambda k: True,
               swap=True, attribute="pdl", n_of=lambda n, buffers: n, on_builder=True):
    """A learner's capture_pdl_chain, with one thing changed."""

    def capture(builder, kernel, stages, buffers, n):
        from cuda.core import Device, LaunchConfig, launch

        target = builder if on_builder else Device().create_stream()
        for k in range(stages_of(stages)):
            src, dst = (buffers[k % 2], buffers[(k + 1) % 2]) if swap else buffers
            extra = ({"programmatic_stream_serialization": with_pdl(k)} if attribute == "pdl"
                     else {"is_cooperative": True})
            config = LaunchConfig(grid=grid_of(n), block=256, **extra)
            launch(target, config, kernel, src.data.ptr, dst.data.ptr, np.int32(n_of(n, buffers)))
        if not on_builder:
            target.sync()

    return capture


def pdl_after_the_first(builder, kernel, stages, buffers, n):
    """Right, written differently: blocks of 128, the attribute only where there is a stage before."""
    from cuda.core import LaunchConfig, launch

    src, dst = buffers
    for k in range(stages):
        config = LaunchConfig(grid=-(-n // 128), block=128, programmatic_stream_serialization=k > 0)
        launch(builder, config, kernel, src.data.ptr, dst.data.ptr, np.int32(n))
        src, dst = dst, src


CHAIN_ANSWERS = [
    Answer("PDL on every stage (the solution)", "right", pdl_chain),
    Answer("blocks of 128, PDL on every stage but the first", "right", pdl_after_the_first),
    Answer("no launch attribute", "classic", chain_with(with_pdl=lambda k: False)),
    Answer("the attribute on the first stage only", "classic", chain_with(with_pdl=lambda k: k == 0)),
    Answer("one stage short", "classic", chain_with(stages_of=lambda stages: stages - 1)),
    Answer("a cooperative launch instead of PDL", "method", chain_with(attribute="cooperative")),
    Answer("launched on a stream of its own", "method", chain_with(on_builder=False)),
    Answer("the buffers never swapped", "structure", chain_with(swap=False)),
    Answer("grid = n // 256", "unit", chain_with(grid_of=lambda n: n // 256)),
    Answer("the lab's 8 stages typed in", "hard-coded", chain_with(stages_of=lambda stages: ch09.LAB_STAGES)),
    Answer("4 blocks typed in (the lab's n = 1000)", "hard-coded", chain_with(grid_of=lambda n: 4)),
    Answer("n taken from the buffers' length", "bad value", chain_with(n_of=lambda n, buffers: buffers[0].size)),
    Answer("does nothing", "bad value", lambda builder, kernel, stages, buffers, n: None),
]
SUITE_CHAIN = suite("09", 2, ch09.check_pdl_chain, CHAIN_ANSWERS)


@pytest.mark.exercise("09", 2)
@pytest.mark.gpu
def test_lab09_exercise2_pdl_chain(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    wrong = judge(SUITE_CHAIN.lab, SUITE_CHAIN.number, SUITE_CHAIN.checker, SUITE_CHAIN.answers)
    assert not wrong, "\n".join(wrong)
    plain = ch09.check_pdl_chain(chain_with(with_pdl=lambda k: False))
    assert "programmatic_stream_serialization=True" in plain.hint, plain
    first_only = ch09.check_pdl_chain(chain_with(with_pdl=lambda k: k == 0))
    assert "full dependencies" in first_only.detail, first_only


def _chain(stages: int, kinds=("default",), extra_node=None):
    names, node_kinds = [ch09.STAGE_KERNEL] * stages, ["KERNEL"] * stages
    if extra_node:
        names.append(extra_node.lower())
        node_kinds.append(extra_node)
    edges = tuple((k, k + 1) for k in range(stages - 1))
    types = [(a, b, kinds[min(a, len(kinds) - 1)]) for a, b in edges]
    return graphs.Topology(tuple(node_kinds), edges, tuple(names)), types


@pytest.mark.parametrize("shape, stages, detail, hint", [
    (_chain(0), 5, "your graph is empty", "launch(builder, config, kernel"),
    (_chain(5, extra_node="MEMSET"), 5, "memset memset", None),
    (_chain(4, ("programmatic",)), 5, "4 stage kernels; the chain has 5", "range(stages)"),
    (_chain(ch09.LAB_STAGES, ("programmatic",)), 5, "8 stage kernels", "not the lab's example"),
    (_chain(5, ("default",)), 5, "all 4 edges are full dependencies", "programmatic_stream_serialization=True"),
    (_chain(5, ("default", "programmatic")), 5, "1 of 4 edges are full dependencies: the edges into stage 1",
     "every stage after the first"),
], ids=["empty", "other-node", "one-short", "lab-count", "no-attribute", "one-without"])
def test_chain_verdicts_name_the_mistake(shape, stages, detail, hint):
    problem = ch09._chain_problem(*shape, stages)
    assert problem is not None and detail in str(problem), problem
    assert hint is None or hint in problem.hint, problem.hint


def test_a_chain_of_programmatic_edges_passes_and_a_fork_does_not():
    assert ch09._chain_problem(*_chain(6, ("programmatic",)), 6) is None
    fork = graphs.Topology(("KERNEL",) * 3, ((0, 1), (0, 2)), (ch09.STAGE_KERNEL,) * 3)
    problem = ch09._chain_problem(fork, [(0, 1, "programmatic"), (0, 2, "programmatic")], 3)
    assert "each stage must depend on the one before" in str(problem)


@pytest.mark.parametrize("out_of, guards, detail, hint", [
    (lambda x, s: x + s, 0, None, None),
    (lambda x, s: np.concatenate([x[:3000] + s, x[3000:]]), 0, "were never computed", "grid = (n + block - 1)"),
    (lambda x, s: np.concatenate([x[:3840] + s, np.full(160, np.nan)]), 0, "were never computed", "grid = (n"),
    (lambda x, s: np.full_like(x, np.nan), 0, "NaN", "buffers[k % 2]"),
    (lambda x, s: x + (s - 1), 0, f"(x + {5 - 1} instead)", "for k in range(stages)"),
    (lambda x, s: x + s, 12, "cells after the first n", "not the buffers' length"),
], ids=["right", "tail-missing", "tail-missing-nan", "nan", "one-short", "guards"])
def test_chain_data_verdicts_name_the_mistake(out_of, guards, detail, hint):
    x = np.random.default_rng(3).uniform(-100, 100, 4000).astype(np.float32)
    expected = x + np.float32(5)
    problem = ch09._chain_data_problem(out_of(x, np.float32(5)).astype(np.float32), expected, guards, 5, x.size)
    if detail is None:
        assert problem is None
    else:
        assert detail in str(problem) and hint in problem.hint, problem


def test_the_chain_cases_avoid_the_labs_example():
    for seed in range(100):
        (odd, n1), (even, n2) = ch09._chain_cases(seed)
        assert odd % 2 == 1 and even % 2 == 0 and ch09.LAB_STAGES not in (odd, even)
        assert min(n1, n2) > 4 * 256 and n1 % 128 and n2 % 128


# ---- exercise 3: the grid barrier of a persistent kernel ----------------------------------------------------

SIGNATURE = "__device__ void grid_barrier(unsigned int* count, volatile unsigned int* generation) {\n"


def barrier(body: str):
    return lambda: SIGNATURE + body + "\n}\n"


BARRIER_SOLUTION = """
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int seen = *generation;
        __threadfence();
        if (atomicAdd(count, 1u) == gridDim.x - 1) {
            atomicExch(count, 0u);
            __threadfence();
            atomicAdd((unsigned int*)generation, 1u);
        } else {
            while (*generation == seen) { }
        }
        __threadfence();
    }
    __syncthreads();
"""


def changed(old: str, new: str):
    assert old in BARRIER_SOLUTION, old
    return barrier(BARRIER_SOLUTION.replace(old, new, 1))


BARRIER_ANSWERS = [
    Answer("count and generation (the solution)", "right", barrier(BARRIER_SOLUTION)),
    Answer("atomicInc wraps the count, atomic reads, a nap in the spin", "right", barrier("""
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned int seen = atomicAdd((unsigned int*)generation, 0u);
        __threadfence();
        if (atomicInc(count, gridDim.x - 1) == gridDim.x - 1) {   // the last arrival; count is back to 0
            __threadfence();
            atomicExch((unsigned int*)generation, seen + 1u);
        } else {
            while (atomicAdd((unsigned int*)generation, 0u) == seen) __nanosleep(32);
        }
        __threadfence();
    }
    __syncthreads();""")),
    Answer("__syncthreads() only", "classic", barrier("__syncthreads();")),
    Answer("count never reset", "classic", changed("atomicExch(count, 0u);", "")),
    Answer("compared with gridDim.x (one arrival too many)", "classic",
           changed("== gridDim.x - 1", "== gridDim.x")),
    Answer("every thread arrives", "structure", barrier(BARRIER_SOLUTION.replace(
        "if (threadIdx.x == 0) {", "{"))),
    Answer("no __syncthreads() before arriving", "method", changed("__syncthreads();\n    if", "if")),
    Answer("no __syncthreads() after the release", "method",
           barrier(BARRIER_SOLUTION.rsplit("__syncthreads();", 1)[0])),
    Answer("the spin reads generation through a plain pointer", "method", changed(
        "while (*generation == seen) { }",
        "unsigned int* plain = (unsigned int*)generation;\n            while (*plain == seen) { }")),
    Answer("threads per block where blocks were meant", "unit", changed("gridDim.x - 1", "blockDim.x - 1")),
    Answer("the H100's 132 SMs typed in", "hard-coded", changed("gridDim.x - 1", "132u - 1")),
    Answer("misnamed", "bad value", lambda: barrier(BARRIER_SOLUTION)().replace("grid_barrier", "grid_sync")),
    Answer("not CUDA", "bad value", lambda: "def grid_barrier(count, generation): pass"),
    Answer("returns None", "bad value", lambda: None),
]
SUITE_BARRIER = suite("09", 3, ch09.check_grid_barrier, BARRIER_ANSWERS)
# Missing fences let a block read cells another block's writes have not reached, or its own stale cached copy:
# a race that shows on the GPU in practice, but is not sure to in every launch, so it is judged on its own.
RACY_BARRIER_ANSWERS = [
    Answer("no __threadfence() anywhere", "method", barrier(BARRIER_SOLUTION.replace("__threadfence();", ""))),
    # The two below pass an idle GPU: the window each leaves open is a few instructions wide, unless the
    # checker's jitter (BARRIER_JITTER) holds it open.
    Answer("generation read after arriving", "method", changed(
        """unsigned int seen = *generation;
        __threadfence();
        if (atomicAdd(count, 1u) == gridDim.x - 1) {""",
        """__threadfence();
        unsigned int last = atomicAdd(count, 1u) == gridDim.x - 1;
        unsigned int seen = *generation;   // too late: the last block may have bumped it already
        if (last) {""")),
    Answer("count reset after the release", "method", changed(
        """atomicExch(count, 0u);
            __threadfence();
            atomicAdd((unsigned int*)generation, 1u);""",
        """__threadfence();
            atomicAdd((unsigned int*)generation, 1u);
            atomicExch(count, 0u);   // too late: released blocks may have arrived at the next barrier""")),
]
SUITE_RACY_BARRIER = suite("09", 3, ch09.check_grid_barrier, RACY_BARRIER_ANSWERS, part="racy: no fences")


@pytest.mark.exercise("09", 3)
@pytest.mark.gpu
def test_lab09_exercise3_grid_barrier(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    # A barrier that never releases is stopped after 3 s here (10 s in the lab), so the suite stays short.
    monkeypatch.setattr(ch09, "GPU_TIMEOUT_S", 3)
    monkeypatch.setattr(ch09, "CHILD_EXIT_S", 2)
    wrong = judge(SUITE_BARRIER.lab, SUITE_BARRIER.number, SUITE_BARRIER.checker, SUITE_BARRIER.answers)
    assert not wrong, "\n".join(wrong)
    never_reset = ch09.check_grid_barrier(BARRIER_ANSWERS[3].fn)
    assert "stopped after 3 s" in never_reset.detail and "reset count to 0" in never_reset.hint, never_reset


@pytest.mark.exercise("09", 3)
@pytest.mark.gpu
def test_lab09_exercise3_a_barrier_without_fences_fails(monkeypatch):
    monkeypatch.setenv("LAUNCHLAB_STRICT", "0")
    monkeypatch.setattr(ch09, "GPU_TIMEOUT_S", 3)
    monkeypatch.setattr(ch09, "CHILD_EXIT_S", 2)
    wrong = judge(SUITE_RACY_BARRIER.lab, SUITE_RACY_BARRIER.number, SUITE_RACY_BARRIER.checker,
                  SUITE_RACY_BARRIER.answers, part=SUITE_RACY_BARRIER.part)
    assert not wrong, "\n".join(wrong)


def test_every_barrier_answer_compiles_with_the_checkers_kernel():
    for answer in BARRIER_ANSWERS + RACY_BARRIER_ANSWERS:
        if answer.kind != "bad value":
            compiles_for_hopper(ch09.barrier_program(answer.fn()))
    with pytest.raises(Exception, match="(?i)grid_barrier"):
        compiles_for_hopper(ch09.barrier_program(BARRIER_ANSWERS[-3].fn()))  # misnamed: the kernel finds no barrier


def test_the_host_reference_is_the_kernels_arithmetic():
    rng = np.random.default_rng(5)
    chunk, blocks, stages = 4, 3, 7
    a = rng.integers(0, 1 << 32, chunk * blocks, dtype=np.uint32)
    src = [int(v) for v in a]
    n = len(src)
    for s in range(stages):
        src = [(src[i] * 3 + src[(i + chunk) % n] + s) % (1 << 32) for i in range(n)]
    assert ch09.stages_reference(a, chunk, stages).tolist() == src


def test_the_barrier_launches_avoid_the_numbers_a_learner_might_type_in():
    for seed in range(200):
        cases = ch09._barrier_cases(seed)
        assert any(c["stages"] % 2 for c in cases) and all(150 <= c["stages"] < 300 for c in cases)
        for sms in (132, 114, 108, 78, 16):
            grids = [ch09._grid_for(c, sms) for c in cases]
            assert all(2 <= g < sms and g != c["block"] for g, c in zip(grids, cases, strict=True))
            assert min(grids) <= 8  # a handful of blocks in one launch
    assert ch09._barrier_cases(1) != ch09._barrier_cases(2)


@pytest.mark.parametrize("case, detail, hint", [
    ({"wrong": 512, "first": 1000, "count": 0}, "512 of 50,688 cells differ", "__syncthreads() before thread 0"),
    ({"wrong": 0, "first": -1, "count": 37}, "count is 37 after it", "resets count to 0"),
], ids=["went-on-early", "count-left"])
def test_barrier_verdicts_name_the_mistake(monkeypatch, case, detail, hint):
    report = {"grid": 66, "block": 256, "stages": 201, "cells": 66 * 768, "chunk": 768, **case}
    _reported(monkeypatch, cases=[report])
    verdict = ch09.check_grid_barrier(lambda: "__device__ source", seed=1)
    assert not verdict and detail in verdict.detail and hint in verdict.hint, verdict


def test_a_barrier_that_hangs_is_reported_with_its_hint(monkeypatch):
    _reported(monkeypatch, error="on 66 blocks of 256 threads, 201 stages, your barrier never let the kernel finish",
              hint=ch09.HANG_HINT)
    verdict = ch09.check_grid_barrier(lambda: "__device__ source", seed=1)
    assert not verdict and "never let the kernel finish" in verdict.detail and "gridDim.x - 1" in verdict.hint
    _reported(monkeypatch, cases=[{"grid": 66, "block": 256, "stages": 201, "cells": 1, "chunk": 1, "wrong": 0,
                                   "first": -1, "count": 0}])
    assert not ch09.check_grid_barrier(lambda: "__device__ source", seed=1)  # one launch of three is not enough


# ---- exercise 4: the right rung for each workload (on a CPU) -------------------------------------------------


def choose_rung(workload):
    allowed = {"graph": True, "graph + PDL": True, "persistent": workload["own_kernels"],
               "fused": workload["own_kernels"] and workload["fusable"]}
    per_stage = {rung: statistics.median(m["samples_us"]) / m["stages"]
                 for rung, m in workload["measurements"].items() if allowed[rung]}
    fastest = min(per_stage.values())
    return next(rung for rung in ch09.RUNGS if rung in per_stage and per_stage[rung] <= (1 + ch09.TIE) * fastest)


def choose_with_numpy(workload):
    """Right, written differently: NumPy medians, the tie as the fastest's 1.05x, a loop from the simple end."""
    usable = [r for r in ch09.RUNGS if r in ("graph", "graph + PDL") or workload["own_kernels"]]
    if not workload["fusable"] and "fused" in usable:
        usable.remove("fused")
    time = {r: float(np.median(workload["measurements"][r]["samples_us"])) / workload["measurements"][r]["stages"]
            for r in usable}
    fastest = min(time.values())
    for rung in usable:
        if time[rung] / fastest <= 1 + ch09.TIE:
            return rung
    raise AssertionError("unreachable")


def tie_from_the_slower_side(workload):
    """5% read as a fraction of the slower rung's time: fastest >= 0.95 x lets a gap of up to 5.26% tie."""
    allowed = {"graph": True, "graph + PDL": True, "persistent": workload["own_kernels"],
               "fused": workload["own_kernels"] and workload["fusable"]}
    per_stage = {rung: statistics.median(m["samples_us"]) / m["stages"]
                 for rung, m in workload["measurements"].items() if allowed[rung]}
    fastest = min(per_stage.values())
    return next(rung for rung in ch09.RUNGS if rung in per_stage and fastest >= (1 - ch09.TIE) * per_stage[rung])


def rule(summary=statistics.median, per_stage=True, respect=("own_kernels", "fusable"), tie=ch09.TIE,
         prefer="simple", absolute=None):
    """A learner's choose_rung with one thing changed: `prefer="table"` breaks a tie in the table's order, `absolute`
    is a tie of that many microseconds."""

    def choose(workload):
        ok = {"graph": True, "graph + PDL": True,
              "persistent": "own_kernels" not in respect or workload["own_kernels"],
              "fused": ("own_kernels" not in respect or workload["own_kernels"])
              and ("fusable" not in respect or workload["fusable"])}
        times = {r: summary(m["samples_us"]) / (m["stages"] if per_stage else 1)
                 for r, m in workload["measurements"].items() if ok[r]}
        best = min(times.values())
        limit = best + absolute if absolute is not None else (1 + tie) * best
        order = {"simple": ch09.RUNGS, "complex": ch09.RUNGS[::-1], "table": list(workload["measurements"]),
                 "table, last first": list(workload["measurements"])[::-1]}[prefer]
        return next(r for r in order if r in times and times[r] <= limit)

    return choose


LAB_ANSWERS = {w["name"]: ch09.rung_by(w) for w in ch09.WORKLOADS}


def tie_step_by_step(workload):
    """From the fastest allowed rung toward simpler ones while each is within 5% of the rung picked so far."""
    per = {r: statistics.median(m["samples_us"]) / m["stages"] for r, m in workload["measurements"].items()
           if ch09.allowed(workload, r)}
    pick = min(per, key=per.get)
    for rung in reversed(ch09.RUNGS[:ch09.RUNGS.index(pick)]):
        if rung in per and per[rung] <= (1 + ch09.TIE) * per[pick]:
            pick = rung
        else:
            break
    return pick

RUNG_ANSWERS = [
    Answer("median per stage, allowed rungs, simplest within 5% (the solution)", "right", choose_rung),
    Answer("NumPy medians, the tie as a ratio to the fastest", "right", choose_with_numpy),
    Answer("the tie read from the slower side", "unit", tie_from_the_slower_side),
    Answer("the fastest figure, allowed or not", "classic", rule(respect=())),
    Answer("fusable ignored", "classic", rule(respect=("own_kernels",))),
    Answer("no tie rule: the strictly fastest allowed rung", "classic", rule(tie=0.0)),
    Answer("the mean of the samples", "method", rule(summary=statistics.fmean)),
    Answer("the fastest sample", "method", rule(summary=min)),
    Answer("the first sample", "method", rule(summary=lambda samples: samples[0])),
    Answer("the last sample", "method", rule(summary=lambda samples: samples[-1])),
    Answer("the middle sample, unsorted", "method", rule(summary=lambda samples: samples[len(samples) // 2])),
    Answer("the slowest sample", "method", rule(summary=max)),
    Answer("totals compared, not per stage", "unit", rule(per_stage=False)),
    Answer("a tie goes to the more complex rung", "structure", rule(prefer="complex")),
    Answer("a tie goes to the rung listed first", "structure", rule(prefer="table")),
    Answer("a tie of 0.05 us, not 5%", "unit", rule(absolute=ch09.TIE)),
    Answer("a tie of 10% typed in", "hard-coded", rule(tie=0.10)),
    Answer("always graph + PDL", "hard-coded", lambda workload: "graph + PDL"),
    Answer("a tie taken step by step from the fastest (found by a blind attack)", "method", tie_step_by_step),
    Answer("persistent only where fusable (found by a blind attack)", "structure",
           lambda workload: ch09.rung_by(workload, allow=ch09.persistent_needs_fusable)),
    Answer("a time divided by stages - 1 (found by a blind attack)", "unit", lambda workload: ch09.rung_by(
        {**workload, "measurements": {r: {**m, "stages": m["stages"] - 1} for r, m in workload["measurements"].items()}})),
    Answer("the lab's answers looked up by name", "hard-coded",
           lambda workload: LAB_ANSWERS.get(workload["name"], "graph + PDL")),
    Answer("misspelled", "bad value", lambda workload: choose_rung(workload).replace(" + ", "+")),
    Answer("the rung's index", "bad value", lambda workload: ch09.RUNGS.index(choose_rung(workload))),
    Answer("NaN", "bad value", lambda workload: float("nan")),
    Answer("returns None", "bad value", lambda workload: None),
]
SUITE_RUNG = suite("09", 4, ch09.check_rung, RUNG_ANSWERS)


@pytest.mark.exercise("09", 4)
def test_lab09_exercise4_rung(lenient_checkers):
    # every mutant must fail, and every right answer pass, on 30 draws of the made-up workloads
    wrong = judge(SUITE_RUNG.lab, SUITE_RUNG.number, SUITE_RUNG.checker, SUITE_RUNG.answers, trials=30)
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("answer, hint", [
    (rule(respect=()), "is not allowed here"),
    (rule(summary=statistics.fmean), "compare medians, not means"),
    (rule(summary=min), "not the fastest sample"),
    (rule(per_stage=False), "divide each median by the stages"),
    (rule(tie=0.0), f"within {ch09.TIE:.0%} of the fastest"),
    (rule(summary=max), "not the slowest sample"),
    (rule(summary=lambda samples: samples[0]), "not one run"),
    (rule(summary=lambda samples: samples[-1]), "not one run"),
    (rule(summary=lambda samples: samples[len(samples) // 2]), "not one run"),
    (rule(prefer="table"), "the order of workload['measurements'] says nothing"),
    (rule(absolute=ch09.TIE), "not 0.05 us"),
    (tie_from_the_slower_side, "not of the slower one's"),
    (lambda workload: ch09.rung_by(workload, allow=ch09.persistent_needs_fusable), "persistent needs own_kernels"),
], ids=["not-allowed", "mean", "min", "totals", "no-tie", "max", "first", "last", "middle", "table", "absolute",
        "slower-side", "persistent-fusable"])
def test_rung_hints_name_the_mistake(answer, hint, lenient_checkers):
    for _ in range(10):
        verdict = ch09.check_rung(answer)
        assert not verdict and hint in verdict.hint, verdict


@pytest.mark.parametrize("answer", [lambda workload: "graph + PDL", lambda workload: "graph",
                                    lambda workload: "persistent" if workload["own_kernels"] else "graph + PDL"],
                         ids=["always-graph-pdl", "always-graph", "flags-only"])
def test_an_answer_blind_to_the_measurements_gets_one_hint_on_every_draw(answer, lenient_checkers):
    """Whichever workload a draw puts first, an answer that never reads the samples is told so."""
    hints = {ch09.check_rung(answer).hint for _ in range(20)}
    assert hints == {ch09.FLAGS_ONLY_HINT}, hints


def test_rung_validation_says_what_was_returned(lenient_checkers):
    assert "not a rung" in ch09.check_rung(RUNG_ANSWERS[-4].fn).detail
    assert "returned int" in ch09.check_rung(RUNG_ANSWERS[-3].fn).detail
    assert "returned float nan" in ch09.check_rung(RUNG_ANSWERS[-2].fn).detail
    assert "forget to `return`" in ch09.check_rung(RUNG_ANSWERS[-1].fn).detail


def test_the_made_up_workloads_hold_their_traps():
    """Each trap is there on every draw: a rule that falls for it gives another rung than the reference."""
    first, last = (lambda samples: samples[0]), (lambda samples: samples[-1])
    falls_for = {"fused is fastest but not allowed, and one run of the right rung is slow": [{"respect": False},
                                                                                           {"summary": max}],
                 "a library kernel between stages": [{"respect": False}],
                 "persistent ties graph + PDL": [{"tie": 0.0}], "graph + PDL ties graph": [{"tie": 0.0}],
                 "persistent just past the tie": [{"tie": 0.10}, {"from_simpler": True}],
                 "slow runs in the fastest rung": [{"summary": statistics.fmean}, {"summary": max},
                                                   {"summary": min}],
                 "lucky runs in a slower rung": [{"summary": min}, {"summary": max}],
                 "chains of different lengths": [{"per_stage": False}],
                 "ties chained": [{"tie": 0.0}]}
    for seed in range(300):
        planted = ch09.planted_workloads(random.Random(seed))
        assert len(planted) == 10 and all(w["name"].startswith("made-up workload") for _, w in planted)
        traps = dict((trap, w) for trap, w in planted)
        chain = traps["ties chained"]
        assert tie_step_by_step(chain) != ch09.rung_by(chain), seed
        stages_less_one = {**chain, "measurements": {r: {**m, "stages": m["stages"] - 1}
                                                      for r, m in chain["measurements"].items()}}
        assert ch09.rung_by(stages_less_one) != ch09.rung_by(chain), seed   # a time divided by stages - 1
        for trap, changes in falls_for.items():
            for change in changes:
                assert ch09.rung_by(traps[trap], **change) != ch09.rung_by(traps[trap]), (seed, trap, change)
        # reading any one run goes wrong on the slow or the lucky runs
        for k in range(ch09.SAMPLES):
            one = {"summary": lambda samples, k=k: samples[k]}
            assert any(ch09.rung_by(w, **one) != ch09.rung_by(w) for w in traps.values()), (seed, k)
        for summary in (first, last):
            assert any(ch09.rung_by(w, summary=summary) != ch09.rung_by(w) for w in traps.values()), seed
    answers = [ch09.rung_by(w) for w in ch09.WORKLOADS]
    assert answers == ["fused", "persistent", "graph"]
    assert ch09.rung_by(ch09.WORKLOADS[1], summary=statistics.fmean) != "persistent"  # the lab's outlier trap
    assert ch09.rung_by(ch09.WORKLOADS[2], tie=0.0) == "graph + PDL"  # and its tie


def _per_stage(workload, rung):
    m = workload["measurements"][rung]
    return statistics.median(m["samples_us"]) / m["stages"]


def test_the_ties_and_the_near_miss_hold_with_the_jitters_worst_case():
    """Ties stay inside 5% however it is read (x <= 1.05 fastest, or fastest >= 0.95 x), the near miss between the
    two readings (past 1.05 fastest, inside fastest / 0.95),
    with the jitter's worst case; the table lists one tie's faster rung first and the other's simpler rung first;
    and every tie of a fixed number of microseconds meets a tie larger than it or a near miss smaller than it."""
    pairs = {"persistent ties graph + PDL": ("graph + PDL", "persistent"),
             "graph + PDL ties graph": ("graph", "graph + PDL"),
             "persistent just past the tie": ("graph + PDL", "persistent")}
    for seed in range(300):
        traps = dict(ch09.planted_workloads(random.Random(seed)))
        gaps, absolute, listed_first = {}, {}, set()
        for trap, (simpler, faster) in pairs.items():
            w = traps[trap]
            gaps[trap] = _per_stage(w, simpler) / _per_stage(w, faster) - 1
            absolute[trap] = _per_stage(w, simpler) - _per_stage(w, faster)
            order = list(w["measurements"])
            listed_first.add(order.index(simpler) < order.index(faster))
        ties = [gaps[t] for t in pairs if "ties" in t]
        assert all(0.02 < g < ch09.TIE - 0.002 for g in ties), (seed, gaps)
        assert ch09.TIE + 0.0005 < gaps["persistent just past the tie"] < 1 / (1 - ch09.TIE) - 1 - 0.0005, (seed, gaps)
        assert listed_first == {True, False} or None, seed  # only the ties' order is planted
        tie_order = {list(traps[t]["measurements"]).index(pairs[t][0]) < list(traps[t]["measurements"]).index(pairs[t][1])
                     for t in pairs if "ties" in t}
        assert tie_order == {True, False}, seed
        largest_tie = max(absolute[t] for t in pairs if "ties" in t)
        assert absolute["persistent just past the tie"] * 4 < largest_tie, (seed, absolute)


# Every plausible wrong rule over the made-up workloads, each caught on every one of 300 draws, and the right ones
# passing all 300: no rule gets through by the order of the samples or of the table.
WRONG_RULES = {
    "the first sample": rule(summary=lambda samples: samples[0]),
    "the last sample": rule(summary=lambda samples: samples[-1]),
    "the middle sample, unsorted": rule(summary=lambda samples: samples[len(samples) // 2]),
    **{f"sample {k}": rule(summary=lambda samples, k=k: samples[k]) for k in range(1, ch09.SAMPLES - 1)},
    "the mean": rule(summary=statistics.fmean),
    "the fastest sample": rule(summary=min),
    "the slowest sample": rule(summary=max),
    "sorted[2], a median off by one": rule(summary=lambda samples: sorted(samples)[2]),
    "sorted[4], a median off by one": rule(summary=lambda samples: sorted(samples)[4]),
    "a tie broken in the table's order": rule(prefer="table"),
    "a tie broken in the table's order, last first": rule(prefer="table, last first"),
    "a tie goes to the more complex rung": rule(prefer="complex"),
    "the fastest rung regardless of ties": rule(tie=0.0),
    "a tie of 10%": rule(tie=0.10),
    "a tie of 1%": rule(tie=0.01),
    "a tie read from the slower side": tie_from_the_slower_side,
    **{f"a tie of {us:g} us": rule(absolute=us) for us in (0.001, 0.01, 0.02, 0.05, 0.1, 0.2, 0.3, 0.5, 1.0, 5.0)},
    "totals compared, not per stage": rule(per_stage=False),
    "the fastest figure, allowed or not": rule(respect=()),
    "fusable ignored": rule(respect=("own_kernels",)),
    "own_kernels ignored": rule(respect=("fusable",)),
    "a tie taken step by step from the fastest": tie_step_by_step,
    "persistent only where fusable": lambda workload: ch09.rung_by(workload, allow=ch09.persistent_needs_fusable),
    "a time divided by stages - 1": lambda workload: ch09.rung_by(
        {**workload, "measurements": {r: {**m, "stages": m["stages"] - 1} for r, m in workload["measurements"].items()}}),
}


@pytest.fixture
def unrecorded(monkeypatch, lenient_checkers):
    """Verdicts judged 300 times are not stored in the run (the store is what would take the time)."""
    monkeypatch.setattr(checking, "_record", lambda declared, verdict: None)


@pytest.mark.exercise("09", 4)
@pytest.mark.parametrize("name", list(WRONG_RULES))
def test_a_wrong_rule_fails_every_one_of_300_draws(name, unrecorded):
    passed = [seed for seed in range(300) if ch09.check_rung(WRONG_RULES[name], seed=seed)]
    assert not passed, f"{name} passed {len(passed)} of 300 draws, first on seed {passed[0]}"


@pytest.mark.exercise("09", 4)
@pytest.mark.parametrize("answer", [choose_rung, choose_with_numpy, rule(tie=ch09.TIE * (1 - 1e-9))],
                         ids=["solution", "numpy", "strictly-within-5-percent"])
def test_a_right_rule_passes_all_300_draws(answer, unrecorded):
    failed = [seed for seed in range(300) if not ch09.check_rung(answer, seed=seed)]
    assert not failed, f"failed {len(failed)} of 300 draws, first on seed {failed[0]}"


def test_the_checker_does_not_let_an_answer_change_the_workloads(lenient_checkers):
    def vandal(workload):
        workload["own_kernels"] = True
        workload["measurements"].clear()
        return "fused"

    before = json.dumps(ch09.WORKLOADS)
    ch09.check_rung(vandal)
    assert json.dumps(ch09.WORKLOADS) == before


def test_an_nvrtc_that_cannot_load_leaves_the_wait_to_the_source(monkeypatch):
    from cuda.bindings import nvrtc

    def broken(*args):
        raise RuntimeError("libnvrtc.so.13 not found")

    monkeypatch.setattr(nvrtc, "nvrtcCreateProgram", broken)
    assert ch09._consumer_waits_in_ptx('extern "C" __global__ void consumer() { pdl_wait(); }') is None
    assert ch09._waits_for_the_producer('extern "C" __global__ void consumer() { pdl_wait(); }')


def test_a_barrier_on_cudas_own_atomics_compiles_with_the_checkers_headers():
    """<cuda/atomic> lives in include/cccl from CUDA 13: the checker's include folders must hold it."""
    from cuda.core import Program, ProgramOptions

    from launchlab import devicegraphs

    if not devicegraphs.cuda_include_dirs():
        pytest.skip("no CUDA toolkit headers on this machine")
    source = """#include <cuda/atomic>
__device__ void grid_barrier(unsigned int* count, volatile unsigned int* generation) {
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> gen(*(unsigned int*)generation);
        cuda::atomic_ref<unsigned int, cuda::thread_scope_device> arrived(*count);
        unsigned int seen = gen.load(cuda::memory_order_acquire);
        if (arrived.fetch_add(1u, cuda::memory_order_acq_rel) == gridDim.x - 1) {
            arrived.store(0u, cuda::memory_order_relaxed);
            gen.fetch_add(1u, cuda::memory_order_release);
        } else {
            while (gen.load(cuda::memory_order_acquire) == seen) { }
        }
    }
    __syncthreads();
}
"""
    options = ProgramOptions(arch="sm_90", include_path=devicegraphs.cuda_include_dirs())
    Program(ch09.barrier_program(source), "c++", options).compile("cubin")


def test_a_compile_error_names_the_line_of_yours_it_is_on():
    from cuda.core import Program, ProgramOptions

    broken = "__device__ void grid_barrier(unsigned int* count, volatile unsigned int* generation) {\n    int x = 1\n}\n"
    with pytest.raises(Exception) as raised:
        Program(ch09.barrier_program(broken), "c++", ProgramOptions(arch="sm_90")).compile("cubin")
    assert ch09._first_line(raised.value).startswith("your_barrier.cu(3): error"), ch09._first_line(raised.value)
    wrong_signature = "__device__ void grid_barrier(int* count, volatile unsigned int* generation) { }\n"
    with pytest.raises(Exception) as raised:
        Program(ch09.barrier_program(wrong_signature), "c++", ProgramOptions(arch="sm_90")).compile("cubin")
    assert ch09._first_line(raised.value).startswith("checker_stages.cu("), ch09._first_line(raised.value)
