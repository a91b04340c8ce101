"""Chapter 08: Graphs across GPUs. Its facts, declared once; every tool reads them from here."""

from launchlab.course import Chapter, Claim, Exercise, Figure, Mistake, Needs

CHAPTER = Chapter(
    number="08",
    stem="08_graphs_across_gpus",
    title='Graphs across GPUs',
    leaves_able_to='collectives in graphs and compiled regions; why every rank takes the same path',
    measures='collectives in compiled regions and CUDA graphs; symmetric ranks',
    needs=Needs(gpus=2, text='two CUDA GPUs (the gloo parts run on a CPU)'),
    minutes=0,
    figures=(
        Figure('collective_breaks_disabled', 'breaks', "TODO", "TODO"),
        Figure('collective_breaks_functional', 'breaks', "TODO", "TODO"),
        Figure('functional_collectives_speedup', 'x', "TODO", "TODO"),
        Figure('graphed_allreduce_speedup', 'x', "TODO", "TODO"),
        Figure('asymmetry_detected_s', 's', "TODO", "TODO"),
    ),
    claims=(
        Claim('two gloo ranks all-reduce to the same sum'),
        Claim('functional collectives compile with no breaks where disabled ones break at every collective'),
        Claim('on NCCL too, functional collectives compile with no breaks where disabled ones break at every collective'),
        Claim('the disabled version falls further behind as collectives are added'),
        Claim('the captured all-reduce matches eager'),
        Claim('a replay of the captured all-reduces costs less per all-reduce than launching them eagerly'),
        Claim('the asymmetric gloo program is detected, not left hanging'),
        Claim('the asymmetric NCCL program is detected, not left hanging'),
    ),
    exercises=(
        Exercise(1, 'replace the disabled all-reduce with a functional one', 'check_functional_all_reduce', 'all_reduce_functional(x)', runs_on="gpu", mistakes=(
        )),
        Exercise(2, 'capture an all-reduce in a CUDA graph', 'check_graphed_mean', 'capture_mean(x, steps)', runs_on="gpu", mistakes=(
        )),
        Exercise(3, 'make the clipping symmetric', 'check_symmetric_clip', 'clip_by_global_norm(grad, max_norm, all_reduce)', runs_on="gpu", mistakes=(
        )),
    ),
)
