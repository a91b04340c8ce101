"""Chapter 03: torch.compile and graph breaks. Its facts, declared once; every tool reads them from here."""

from launchlab.course import Chapter, Claim, Exercise, Figure, Mistake, Needs

CHAPTER = Chapter(
    number="03",
    stem="03_torch_compile_graph_breaks",
    title='torch.compile and graph breaks',
    leaves_able_to='count, attribute and remove graph breaks, guards and recompiles',
    measures='kernels fused, breaks counted and fixed, fragmentation, recompiles over ten shapes, whether reduce-overhead really graphed',
    needs=Needs(gpus=1, compute_capability=None, cuda_driver=None,
                text='all but section 6 and lab 3 run on a CPU; one CUDA GPU for CUDA graphs'),
    minutes=120,
    figures=(
        Figure('break_slowdown_8_breaks', 'x', "lower",
               "Time per call of a 32-step pointwise chain compiled with 8 forced graph breaks over the same chain "
               "compiled with none (launch throughput, warm).", host_bound=True),
        Figure('compile_seconds_gelu_chain', 's', "lower",
               "Wall time of the first call of torch.compile on four rounds of gelu(x) * 0.5 + x over 4,096 "
               "elements: dynamo and Inductor compiling, then one run.", host_bound=True),
        Figure('compile_speedup', 'x', "higher",
               "Eager time per call of four rounds of gelu(x) * 0.5 + x on 4,096 elements over the compiled "
               "version's (launch throughput: back-to-back calls, one synchronisation, / calls).", host_bound=True),
        Figure('compiled_kernels_per_call', 'kernels', "lower",
               "Kernels launched per call by the compiled gelu residual chain, counted in a profiler trace of "
               "10 calls."),
        Figure('eager_kernels_per_call', 'kernels', "lower",
               "Kernels launched per call by the eager gelu residual chain (twelve pointwise operators), counted "
               "in a profiler trace of 10 calls."),
        Figure('recompiles_dynamic_shapes', 'recompiles', "lower",
               "Recompiles of one function called with ten different row counts when compiled with "
               "dynamic=True (compiles counted by dynamo's CompileCounter, minus the first)."),
        Figure('recompiles_static_shapes', 'recompiles', "lower",
               "Recompiles of one function called with ten different row counts when compiled with "
               "dynamic=False (compiles counted by dynamo's CompileCounter, minus the first)."),
        Figure('reduce_overhead_speedup', 'x', "higher",
               "Time per call of a batch-8, 16-layer MLP compiled with the default mode over the same MLP compiled "
               "with mode=\"reduce-overhead\" (CUDA graphs), launch throughput.", host_bound=True),
    ),
    claims=(
        Claim('compiled code launches fewer kernels'),
        Claim('dynamic shapes cut the recompiles'),
        Claim('each fix compiles as one graph'),
        Claim('mutating an input silently stops reduce-overhead from graphing'),
        Claim('reduce-overhead beats default compile for a launch-bound function'),
        Claim('reduce-overhead really graphed'),
        Claim('returning the update instead lets it graph'),
        Claim('time per call grows with the number of breaks'),
    ),
    exercises=(
        Exercise(1, 'the graph-break bug hunt', 'check_bug_hunt', 'make_fixed_block()', runs_on="cpu", mistakes=(
            Mistake('the print left in', 'classic', 'Keeps the print in forward, a graph break.'),
            Mistake('.item() left in', 'classic', 'Keeps the scale as a Python number read with .item(), a graph break.'),
            Mistake('the helper still under torch._dynamo.disable', 'structure',
                    'Still calls the rms_normalise helper that torch._dynamo.disable keeps out of the graph.'),
            Mistake('the original block returned', 'structure', 'Returns the buggy block unchanged.'),
            Mistake('torch.where with its branches swapped', 'method',
                    'Replaces the if with torch.where but puts tanh where relu belongs.'),
            Mistake('the scale without abs()', 'method', 'Scales by h.amax() instead of h.abs().amax().'),
            Mistake('an L2 norm for the RMS norm', 'unit',
                    'Divides by the L2 norm of each row instead of its root mean square.'),
            Mistake('layers renamed, so the weights do not load', 'structure',
                    "Names the layers differently from fc1 and fc2, so the original's weights do not load."),
            Mistake('returns None', 'bad value', 'Returns None instead of a module.'),
        )),
        Exercise(2, 'the recompile hunt', 'check_recompiles', 'run_all(fn, inputs, backend)', runs_on="cpu", mistakes=(
            Mistake('the default compile', 'classic',
                    'Compiles with the default settings, so the shape guards recompile more than once.'),
            Mistake('dynamic=False', 'classic',
                    'Compiles with static shapes: one compile per row count until the recompile limit.'),
            Mistake('the compile cache reset for every input', 'method',
                    'Calls torch._dynamo.reset() before every input, so each one compiles afresh.'),
            Mistake('the recompile limit raised instead', 'method',
                    'Raises the recompile limit and keeps static shapes, so every row count gets its own compile.'),
            Mistake('compiled for the first input, eager for the rest', 'structure',
                    'Runs only the first input through the compiled function and the rest eagerly.'),
            Mistake('inputs padded to one shape', 'structure',
                    'Pads every input to the largest row count, which changes the row count the function scales by.'),
            Mistake('the outputs in reverse order', 'bad value', 'Returns the outputs in reverse order.'),
            Mistake('returns None', 'bad value', 'Returns None instead of the outputs.'),
        )),
        Exercise(3, 'did it really graph?', 'check_really_graphed', 'make_graphed(fn)', runs_on="gpu", mistakes=(
            Mistake('the default compile mode', 'classic',
                    'Compiles fn with the default mode, which fuses kernels but never replays a CUDA graph.'),
            Mistake('reduce-overhead on fn as given: the mutated input skips the graph', 'classic',
                    'Compiles fn as given with mode="reduce-overhead", so its in-place update of an input silently '
                    'skips CUDA graphs.'),
            Mistake('the update copied back inside the compiled function', 'method',
                    'Updates a clone but copies it into running_mean inside the compiled function, still mutating an '
                    'input.'),
            Mistake('the eager fn returned', 'structure', 'Returns fn itself, uncompiled.'),
            Mistake("the new mean rebound, not copied into the caller's tensor", 'structure',
                    "Rebinds the local name running_mean to the new mean instead of copying into the caller's tensor."),
            Mistake('the running mean kept in half precision', 'unit',
                    'Updates a half-precision copy of the running mean, so the mean copied back is rounded.'),
            Mistake('the width typed in: a fresh zero mean each call', 'hard-coded',
                    'Starts every call from torch.zeros(256) instead of the running mean passed in.'),
            Mistake('the new mean returned with the output', 'bad value',
                    'Returns (output, new mean) instead of the output alone.'),
            Mistake('returns None', 'bad value', 'Returns None instead of a function.'),
        )),
        Exercise(4, 'a break that must stay', 'check_isolated_break', 'make_step(w, audit, backend)', runs_on="cpu",
                 mistakes=(
            Mistake('the whole step compiled, break and all', 'classic',
                    "Compiles the audited step as it is, so the audit's .tolist() still splits the hot path."),
            Mistake('the audit dropped', 'structure', 'Compiles the hot path and never calls the audit.'),
            Mistake('run eagerly', 'structure', 'Runs the audited step without compiling anything.'),
            Mistake("the audit fed the output's norms", 'method',
                    'Hands the audit the row norms of the output instead of those of h.'),
            Mistake('the audit called once, after the last step', 'method',
                    "Collects every step's norms and calls the audit once, after the last step."),
            Mistake('squared norms', 'unit', 'Hands the audit squared row norms.'),
            Mistake('returns None', 'bad value', 'Returns None instead of a step function.'),
        )),
    ),
)
