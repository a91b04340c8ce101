"""Chapter 03: torch.compile and graph breaks. Its facts, declared once; every tool reads them from here."""

from launchlab.course import Chapter, Claim, Exercise, Figure, Mistake, Needs

CHAPTER = Chapter(
    number="03",
    stem="03_torch_compile_graph_breaks",
    title='torch.compile and graph breaks',
    leaves_able_to='count, attribute and remove graph breaks, guards and recompiles',
    measures='kernels fused, breaks counted and fixed, fragmentation, recompiles over ten shapes, whether reduce-overhead really graphed',
    needs=Needs(gpus=1, text='all but section 6 and lab 3 run on a CPU; one CUDA GPU for CUDA graphs'),
    minutes=0,
    figures=(
        Figure('break_slowdown_8_breaks', 'x', "TODO", "TODO"),
        Figure('compile_seconds_gelu_chain', 's', "TODO", "TODO"),
        Figure('compile_speedup', 'x', "TODO", "TODO"),
        Figure('compiled_kernels_per_call', 'kernels', "TODO", "TODO"),
        Figure('eager_kernels_per_call', 'kernels', "TODO", "TODO"),
        Figure('recompiles_dynamic_shapes', 'recompiles', "TODO", "TODO"),
        Figure('recompiles_static_shapes', 'recompiles', "TODO", "TODO"),
        Figure('reduce_overhead_speedup', 'x', "TODO", "TODO"),
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
        Exercise(1, 'the graph-break bug hunt', 'check_bug_hunt', 'make_fixed_block()', runs_on="gpu", mistakes=(
            Mistake('the print left in', 'classic', 'TODO '),
            Mistake('.item() left in', 'classic', 'TODO '),
            Mistake('the helper still under torch._dynamo.disable', 'structure', 'TODO '),
            Mistake('the original block returned', 'structure', 'TODO '),
            Mistake('torch.where with its branches swapped', 'method', 'TODO '),
            Mistake('the scale without abs()', 'method', 'TODO '),
            Mistake('an L2 norm for the RMS norm', 'unit', 'TODO '),
            Mistake('layers renamed, so the weights do not load', 'structure', 'TODO '),
            Mistake('returns None', 'bad value', 'TODO '),
        )),
        Exercise(2, 'the recompile hunt', 'check_recompiles', 'run_all(fn, inputs, backend)', runs_on="gpu", mistakes=(
            Mistake('the default compile', 'classic', 'TODO '),
            Mistake('dynamic=False', 'classic', 'TODO '),
            Mistake('the compile cache reset for every input', 'method', 'TODO '),
            Mistake('the recompile limit raised instead', 'method', 'TODO '),
            Mistake('compiled for the first input, eager for the rest', 'structure', 'TODO '),
            Mistake('inputs padded to one shape', 'structure', 'TODO '),
            Mistake('the outputs in reverse order', 'bad value', 'TODO '),
            Mistake('returns None', 'bad value', 'TODO '),
        )),
        Exercise(3, 'did it really graph?', 'check_really_graphed', 'make_graphed(fn)', runs_on="gpu", mistakes=(
        )),
        Exercise(4, 'a break that must stay', 'check_isolated_break', 'make_step(w, audit, backend)', runs_on="gpu", mistakes=(
            Mistake('the whole step compiled, break and all', 'classic', 'TODO '),
            Mistake('the audit dropped', 'structure', 'TODO '),
            Mistake('run eagerly', 'structure', 'TODO '),
            Mistake("the audit fed the output's norms", 'method', 'TODO '),
            Mistake('the audit called once, after the last step', 'method', 'TODO '),
            Mistake('squared norms', 'unit', 'TODO '),
            Mistake('returns None', 'bad value', 'TODO '),
        )),
    ),
)
