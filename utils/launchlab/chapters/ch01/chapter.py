"""Chapter 01: Launch cost with CuPy RawKernels. Its facts, declared once; every tool reads them from here."""

from launchlab.course import Chapter, Claim, Exercise, Figure, Mistake, Needs

CHAPTER = Chapter(
    number="01",
    stem="01_launch_cost_cupy",
    title='Launch cost with CuPy RawKernels',
    leaves_able_to='measure enqueue cost, launch throughput, launch+sync latency, JIT cost',
    measures='enqueue cost, launch throughput, launch + sync latency, first-call (JIT) cost, the size where launches stop dominating, a fused conv1d chain',
    needs=Needs(gpus=1, compute_capability=None, cuda_driver=None, text='one CUDA GPU; CuPy, cuda.core'),
    minutes=120,
    figures=(
        Figure('aot_first_call_ms', 'ms', "lower",
               "First call in a fresh process of an empty kernel loaded from a cubin compiled ahead of time "
               "(RawModule(path=...)): load, launch and synchronise, wall time, the CUDA context already made.",
               host_bound=True),
        Figure('axpy_launch_floor_us', 'us', "lower",
               "Launch floor of the axpy kernel: median time per launch in a stream of back-to-back launches "
               "(launch throughput) over the sizes up to 1,024 elements, where its GPU work is negligible.",
               host_bound=True),
        Figure('axpy_peak_fraction_of_copy', 'ratio', "higher",
               "Bandwidth axpy reaches at 2^28 elements (12 bytes per element over its time per launch) as a "
               "fraction of a large device-to-device copy's bandwidth."),
        Figure('cached_first_call_ms', 'ms', "lower",
               "First call in a fresh process of an empty RawKernel whose cubin is already in CuPy's on-disk cache "
               "(cache lookup with its NVRTC version probe, load, launch, synchronise), wall time.",
               host_bound=True),
        Figure('conv17_modulo_slowdown', 'ratio', "neither",
               "GPU time of the fused 17-tap conv1d kernel with a modulo on every tap over the same kernel with "
               "the modulo only at the ends, at 2^25 elements (CUDA events, queue full)."),
        Figure('conv1d_chain_eager_us', 'us', "lower",
               "Time per chain of four eager 5-tap conv1d kernel launches at 1,024 elements, in a stream of "
               "back-to-back chains (launch throughput).", host_bound=True),
        Figure('conv1d_chain_fused_us', 'us', "lower",
               "Time per launch of the one fused 17-tap conv1d kernel at 1,024 elements, in a stream of "
               "back-to-back launches (launch throughput).", host_bound=True),
        Figure('conv1d_chain_graph_us', 'us', "lower",
               "Time per launch of a CUDA graph holding the four-kernel conv1d chain at 1,024 elements, in a "
               "stream of back-to-back graph launches (launch throughput)."),
        Figure('conv1d_large_graph_over_fused', 'ratio', "neither",
               "Time per chain of the captured four-kernel conv1d graph over the fused 17-tap kernel's, at 2^25 "
               "elements, where the kernels' own work dominates."),
        Figure('copy_bandwidth_gbs', 'GB/s', "higher",
               "Bandwidth of a device-to-device copy of 2^28 float32 (bytes read plus bytes written over its "
               "CUDA-event time, median of 10)."),
        Figure('cuda_core_launch_enqueue_us', 'us', "lower",
               "Enqueue cost of an empty kernel through cuda.core's launch on one stream: wall time of "
               "back-to-back launches before any synchronisation, / launches (median).", host_bound=True),
        Figure('cupy_axpy_launch_enqueue_us', 'us', "lower",
               "Enqueue cost of CuPy RawKernel launches of axpy over 16 elements (two pointers, two NumPy "
               "scalars) on one stream, before any synchronisation, / launches (median).", host_bound=True),
        Figure('cupy_launch_enqueue_us', 'us', "lower",
               "Enqueue cost of an empty CuPy RawKernel: wall time of N back-to-back launches before any "
               "synchronisation, / N (median).", host_bound=True),
        Figure('cupy_launch_sync_latency_us', 'us', "lower",
               "Launch + sync latency of an empty CuPy RawKernel: wall time of one launch followed by a "
               "synchronisation, median of 1000.", host_bound=True),
        Figure('cupy_launch_throughput_us', 'us', "lower",
               "Launch throughput of an empty CuPy RawKernel: wall time of N back-to-back launches plus one "
               "final synchronisation, / N (median).", host_bound=True),
        Figure('cupy_ns_per_pointer_argument', 'ns', "lower",
               "What one pointer argument adds to a CuPy RawKernel launch: enqueue cost of an empty kernel taking "
               "32 pointers minus that of one taking none, / 32.", host_bound=True),
        Figure('driver_axpy_launch_enqueue_us', 'us', "lower",
               "Enqueue cost of axpy over 16 elements through the raw driver call cuLaunchKernel with its "
               "kernelParams array prepared once, on one stream, / launches (median).", host_bound=True),
        Figure('driver_launch_enqueue_us', 'us', "lower",
               "Enqueue cost of an empty kernel through the raw driver call cuLaunchKernel with kernelParams "
               "prepared once: the driver's floor seen from Python, / launches (median).", host_bound=True),
        Figure('empty_kernel_gpu_time_queued_us', 'us', "lower",
               "GPU time of an empty one-block kernel: CUDA events around 20 launches queued behind a spin kernel, "
               "so the GPU runs them back to back, / 20 (median)."),
        Figure('fresh_process_compile_ms', 'ms', "lower",
               "First call in a fresh process of an empty RawKernel with an empty CuPy cache (NVRTC compile, "
               "cache write, load, launch, synchronise), wall time.", host_bound=True),
        Figure('overhead_knee_elements', 'elements', "neither",
               "Measured knee of axpy: the size from which its GPU time (events, queue full) stays above the "
               "launch floor, interpolated on a sqrt(2) sweep from 16 to 2^28 elements.", host_bound=True),
        Figure('overhead_knee_model_elements', 'elements', "neither",
               "Modelled knee of axpy: where the launch floor meets 12 bytes per element over the copy "
               "bandwidth, floor x bandwidth / 12.", host_bound=True),
    ),
    claims=(
        Claim('a cubin compiled ahead makes the first call far cheaper than the cache does'),
        Claim("a graph still runs its four kernels one by one on the GPU: at small sizes its GPU time is well above the fused kernel's"),
        Claim("at small sizes the graph runs at the GPU's pace and the fused kernel at the host's"),
        Claim("for small inputs the eager chain's time is launches, not GPU work"),
        Claim('grid size costs the GPU far more than the host'),
        Claim('large kernels run near the copy bandwidth'),
        Claim('left of the knee, time per launch stays on the floor'),
        Claim("most of an empty launch lies below any binding's argument handling"),
        Claim('on an idle GPU, events around short kernels time the host, not the GPU'),
        Claim("once the kernels dominate, the graph's gain vanishes and the fused kernel wins"),
        Claim('pointer arguments cost the binding, not the driver'),
        Claim('right of the knee, the kernel sets the pace and the launch is hidden'),
        Claim('the captured chain beats the eager chain at small sizes'),
        Claim('the first call costs over a thousand steady launches'),
        Claim("the fused kernel's modulo, not its bytes, held it back"),
        Claim('the on-disk cache makes the first call cheaper'),
        Claim('the two-line model finds the knee within a factor of 2'),
    ),
    exercises=(
        Exercise(1, 'measure the three launch figures', 'check_launch_figures', 'measure_launch_figures(launch)',
                 runs_on="gpu", mistakes=(
            Mistake('throughput without the final synchronisation', 'classic',
                    'Stops the throughput clock after the last launch without the final synchronisation, so it '
                    'measures only the enqueue cost.'),
            Mistake('latency without the synchronisation', 'method',
                    'Times one launch for the latency but never synchronises after it.'),
            Mistake('latency as many launches and one sync', 'method',
                    'Reports many launches and one synchronisation (the throughput) as the latency.'),
            Mistake('enqueue cost with a synchronisation', 'method',
                    'Includes the final synchronisation in the enqueue cost, reporting the throughput for it.'),
            Mistake('the enqueue cost for all three', 'structure', 'Returns the enqueue cost for all three figures.'),
            Mistake('seconds', 'unit', 'Returns the three figures in seconds instead of microseconds.'),
            Mistake('nanoseconds', 'unit', 'Returns the three figures in nanoseconds instead of microseconds.'),
            Mistake("the reference run's figures typed in", 'hard-coded',
                    "Returns the reference run's three H100 figures typed in."),
            Mistake('throughput NaN', 'bad value', 'Returns NaN for the throughput.'),
            Mistake('keys without _us', 'structure', 'Names the keys enqueue, throughput and sync_latency, without _us.'),
            Mistake('a tuple, not a dict', 'bad value', 'Returns the three figures as a tuple instead of a dict.'),
        )),
        Exercise(2, 'find the crossover size', 'check_crossover', 'find_crossover(make_run)', runs_on="gpu", mistakes=(
            Mistake('the first size above twice the floor, later dips ignored', 'classic',
                    'Returns the first size above twice the floor even when a larger size falls back under it.'),
            Mistake('the last size under twice the floor', 'classic',
                    'Returns the size one step before the crossover, the last one still under twice the floor.'),
            Mistake('timed without synchronisation', 'method',
                    'Times each size by enqueue cost, without synchronising, so every size looks flat.'),
            Mistake('steps of 4', 'method', 'Sweeps the sizes in steps of 4 instead of 2, skipping the crossover.'),
            Mistake('four times the floor', 'method', 'Looks for four times the floor instead of twice.'),
            Mistake('in bytes', 'unit', 'Returns the crossover in bytes (4 per float32) instead of elements.'),
            Mistake("the reference run's 16,777,216 typed in", 'hard-coded',
                    "Returns the reference run's 16,777,216 typed in."),
            Mistake('the index of the size', 'structure', 'Returns the index of the crossover in the list of sizes.'),
            Mistake('NaN', 'bad value', 'Returns NaN.'),
            Mistake('forgot to return', 'bad value', 'Returns None.'),
        )),
        Exercise(3, 'take the compiler off the first launch', 'check_first_launch', 'prepare(source, name)',
                 runs_on="gpu", mistakes=(
            Mistake('nothing compiled in prepare', 'classic',
                    'Makes the RawKernel in prepare but leaves its compilation to the first launch.'),
            Mistake('compiled inside the launcher', 'method',
                    'Calls compile() inside the launcher, so the first launch still compiles.'),
            Mistake('another kernel launched to warm CUDA up', 'method',
                    'Warms CUDA up with a different kernel, leaving this one uncompiled.'),
            Mistake('compiled with other options than launched', 'method',
                    'Compiles a RawKernel with other compiler options than the one it launches, which still compiles.'),
            Mistake('a launcher that does not launch', 'structure',
                    'Returns a launcher that hands back the kernel without calling it.'),
            Mistake('the RawKernel itself returned', 'structure',
                    'Returns the compiled RawKernel instead of a launcher that takes args.'),
            Mistake('its own copy of a mark kernel', 'hard-coded',
                    'Compiles a mark kernel typed in from an earlier version instead of the source handed in.'),
            Mistake('returns None', 'bad value', 'Returns None instead of a launcher.'),
        )),
        Exercise(4, 'fuse the conv1d chain', 'check_fused_conv', 'fused_conv_source()', runs_on="gpu", mistakes=(
            Mistake('one 5-tap pass renamed', 'classic', 'Applies one binomial 5-tap pass instead of four.'),
            Mistake('three filters: C(12, k) / 4096', 'classic',
                    'Fuses three 5-tap passes (a 13-tap filter, C(12, k) / 4096) instead of four.'),
            Mistake('clamped at the ends, not periodic', 'method',
                    'Clamps the indices at the ends instead of wrapping them around.'),
            Mistake('four passes in place in one launch', 'structure',
                    'Runs the four 5-tap passes in one launch through x and y with __syncthreads(), overwriting x '
                    'and racing across blocks.'),
            Mistake('written into x, not y', 'structure', 'Writes the result into the input x instead of y.'),
            Mistake('no bounds check', 'structure', 'Leaves out the i >= n check, so threads past n write beyond y.'),
            Mistake('weights not divided by 65536', 'unit', 'Uses the binomial weights C(16, k) without dividing by 65536.'),
            Mistake('integer weights divided as integers', 'unit',
                    'Divides integer weights by 65536 in integer arithmetic, which gives zeros.'),
            Mistake('the size 4,096 typed in', 'hard-coded', 'Wraps the indices modulo 4096 instead of n.'),
            Mistake("the lecture's conv17, not renamed", 'bad value',
                    "Returns the lecture's conv17 kernel without renaming it conv_chain_fused."),
            Mistake('returns None', 'bad value', 'Returns None instead of CUDA source.'),
        )),
    ),
)
