"""Plausible learner answers to lab 11, exercise 3 (tp_mlp_graph), by someone who had not read its checker.

Each answer is a self-contained top-level function using only the names torch, dist (torch.distributed), funcol
(torch.distributed._functional_collectives) and F (torch.nn.functional): no helper at module level, no module
constant, no import inside. ANSWERS = [(name, "right" | "wrong", fn), ...], with the reason in a comment.

Shapes (exercise text): x [1, D] bfloat16, the same token on every rank, refilled by the caller between replays;
w_gate, w_up [M / world, D]; w_down [D, M / world]. Return (graph, out): a torch.cuda.CUDAGraph whose every replay
writes x + down(silu(gate(x)) * up(x)) of the whole MLP into out ([1, D] bfloat16), the same on every rank, with
one NCCL kernel in it and nothing launched outside it; also run on one rank alone (world size 1).
"""

try:  # the names every answer uses; the file stays importable (ast.parse, import) where torch is absent
    import torch
    import torch.distributed as dist
    import torch.distributed._functional_collectives as funcol
    import torch.nn.functional as F
except ImportError:  # pragma: no cover
    torch = dist = funcol = F = None


# ----------------------------------------------------------------------------------------------------------------
# RIGHT answers
# ----------------------------------------------------------------------------------------------------------------


def right_plain(x, w_gate, w_up, w_down):
    # RIGHT: the textbook answer: warm-up on a side stream with both waits, every tensor made inside the capture.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        out = x + part
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        out = x + part
    return g, out


def right_buffers_outside_kept_on_graph(x, w_gate, w_up, w_down):
    # RIGHT: every buffer preallocated outside the capture (static buffers), kept alive as attributes of the
    # returned graph; out is one of them and is returned.
    m, d = w_gate.shape
    h_gate = torch.empty(1, m, dtype=torch.bfloat16, device=x.device)
    h_up = torch.empty(1, m, dtype=torch.bfloat16, device=x.device)
    out = torch.empty(1, d, dtype=torch.bfloat16, device=x.device)

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            torch.matmul(x, w_gate.t(), out=h_gate)
            torch.matmul(x, w_up.t(), out=h_up)
            h_gate.copy_(F.silu(h_gate) * h_up)
            torch.matmul(h_gate, w_down.t(), out=out)
            dist.all_reduce(out)
            out.add_(x)
    torch.cuda.current_stream().wait_stream(s)

    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.matmul(x, w_gate.t(), out=h_gate)
        torch.matmul(x, w_up.t(), out=h_up)
        h_gate.copy_(F.silu(h_gate) * h_up)
        torch.matmul(h_gate, w_down.t(), out=out)
        dist.all_reduce(out)
        out.add_(x)
    g.static_buffers = (h_gate, h_up)  # the graph writes these on every replay: they must outlive it
    return g, out


def right_closure_keeps_buffers(x, w_gate, w_up, w_down):
    # RIGHT: scratch buffers made outside the capture, referenced by a closure that is attached to the returned
    # graph, so they stay allocated for as long as the graph does.
    rows = w_gate.shape[0]
    gate_buf = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    up_buf = torch.empty((1, rows), dtype=x.dtype, device=x.device)
    part_buf = torch.empty_like(x)
    out = torch.empty_like(x)

    def step():
        torch.mm(x, w_gate.T, out=gate_buf)
        torch.mm(x, w_up.T, out=up_buf)
        torch.mul(F.silu(gate_buf), up_buf, out=up_buf)
        torch.mm(up_buf, w_down.T, out=part_buf)
        dist.all_reduce(part_buf)
        torch.add(x, part_buf, out=out)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    graph.step = step  # step's closure holds gate_buf, up_buf, part_buf
    return graph, out


def right_funcol(x, w_gate, w_up, w_down):
    # RIGHT: the functional collective (a new output tensor, made inside the capture), waited with wait_tensor;
    # one NCCL all-reduce, as dist.all_reduce.
    group = dist.group.WORLD

    def mlp():
        part = torch.matmul(F.silu(torch.matmul(x, w_gate.T)) * torch.matmul(x, w_up.T), w_down.T)
        summed = funcol.wait_tensor(funcol.all_reduce(part, "sum", group))
        return x + summed

    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        mlp()
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = mlp()
    return graph, out


def right_graph_pool(x, w_gate, w_up, w_down):
    # RIGHT: capture into an explicit memory pool (graph_pool_handle), the way several graphs share one; the
    # graph keeps its pool's blocks, so out and the intermediates stay valid.
    pool = torch.cuda.graph_pool_handle()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = F.silu(x @ w_gate.T) * (x @ w_up.T)
        y = y @ w_down.T
        dist.all_reduce(y)
        _ = x + y
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g, pool=pool):
        y = F.silu(x @ w_gate.T) * (x @ w_up.T)
        y = y @ w_down.T
        dist.all_reduce(y)
        out = x + y
    return g, out


def right_three_warmups(x, w_gate, w_up, w_down):
    # RIGHT: three warm-up iterations on the side stream, as PyTorch's CUDA-graph docs do; every rank runs the
    # same three all-reduces, so they pair up.
    def forward():
        gate = F.silu(x @ w_gate.T)
        up = x @ w_up.T
        partial = (gate * up) @ w_down.T
        dist.all_reduce(partial)
        return partial + x

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            forward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = forward()
    return g, out


def right_fp32_then_cast(x, w_gate, w_up, w_down):
    # RIGHT: everything in float32 inside the capture (weights upcast per replay, into graph-owned memory), the
    # all-reduce in float32, and the result cast into a bfloat16 out made inside the capture.
    def forward():
        xf = x.float()
        h = F.silu(xf @ w_gate.float().T) * (xf @ w_up.float().T)
        part = h @ w_down.float().T
        dist.all_reduce(part)
        result = torch.empty(x.shape, dtype=torch.bfloat16, device=x.device)
        result.copy_(xf + part)
        return result

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        forward()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = forward()
    return g, out


def right_clone_x_inside_linear(x, w_gate, w_up, w_down):
    # RIGHT: F.linear, and a copy of x made INSIDE the capture: the copy is a graph node, so every replay reads
    # whatever x holds then. The down projection is written as (w_down @ h.T).T.
    def run():
        xi = x.clone()
        h = F.silu(F.linear(xi, w_gate)) * F.linear(xi, w_up)
        part = torch.matmul(w_down, h.T).T.contiguous()
        dist.all_reduce(part)
        return xi + part

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        run()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = run()
    return g, out


def right_transposed_weights_kept(x, w_gate, w_up, w_down):
    # RIGHT: transposed, contiguous weight copies made outside the capture (so the GEMMs read [D, m] row-major),
    # kept alive as an attribute of the returned out tensor.
    wg_t = w_gate.t().contiguous()
    wu_t = w_up.t().contiguous()
    wd_t = w_down.t().contiguous()

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        p = (F.silu(x @ wg_t) * (x @ wu_t)) @ wd_t
        dist.all_reduce(p)
        _ = x + p
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p = (F.silu(x @ wg_t) * (x @ wu_t)) @ wd_t
        dist.all_reduce(p)
        out = x + p
    out.weights_t = (wg_t, wu_t, wd_t)  # the graph reads these: they live as long as out does
    return g, out


def right_residual_on_rank0_only(x, w_gate, w_up, w_down):
    # RIGHT: Megatron's bias trick: only rank 0 adds the residual before the all-reduce, so the sum holds x once
    # (one rank alone: rank 0 adds it). One extra bfloat16 rounding, far inside the tolerance.
    rank = dist.get_rank()

    def fwd():
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        if rank == 0:
            part = part + x
        dist.all_reduce(part)
        return part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def right_addmm_residual_split(x, w_gate, w_up, w_down):
    # RIGHT: addmm adds x / world on every rank before the all-reduce, so the sum holds x once; world comes from
    # dist.get_world_size() (dividing by 2 is exact in bfloat16; any world stays within a few roundings).
    world = dist.get_world_size()

    def fwd():
        h = F.silu(torch.mm(x, w_gate.t())) * torch.mm(x, w_up.t())
        part = torch.addmm(x / world, h, w_down.t())
        dist.all_reduce(part)
        return part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def right_warmup_without_waits(x, w_gate, w_up, w_down):
    # RIGHT (though it looks racy): the warm-up on the side stream neither waits for the caller's stream nor is
    # waited for. Its results are thrown away, every rank still runs its all-reduce, and torch.cuda.graph's
    # __enter__ synchronizes the whole device before capturing, so nothing of the warm-up can overlap the capture
    # or any replay.
    s = torch.cuda.Stream()
    with torch.cuda.stream(s):
        t = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(t)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        t = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(t)
        out = x + t
    return g, out


def right_fork_join_inside_capture(x, w_gate, w_up, w_down):
    # RIGHT: the up projection forked onto a second stream inside the capture and joined back (wait_stream)
    # before the multiply: a legal fork/join, the two GEMMs become parallel graph branches.
    branch = torch.cuda.Stream()

    def fwd():
        main = torch.cuda.current_stream()
        branch.wait_stream(main)
        with torch.cuda.stream(branch):
            up = x @ w_up.T
        gate = F.silu(x @ w_gate.T)
        main.wait_stream(branch)
        part = (gate * up) @ w_down.T
        dist.all_reduce(part)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


# ----------------------------------------------------------------------------------------------------------------
# WRONG answers: memory lifetime
# ----------------------------------------------------------------------------------------------------------------


def wrong_scratch_dropped(x, w_gate, w_up, w_down):
    # WRONG: the activation scratch `act` ([1, M/world]) is made outside the capture and dropped on return; every
    # replay still writes it (silu(gate) * up) and reads it back for the down projection, in bytes the allocator
    # has handed to someone else: out may look right while another tensor is silently overwritten (and a write
    # by that tensor's owner between the two would corrupt out).
    act = torch.empty(1, w_gate.shape[0], dtype=x.dtype, device=x.device)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        torch.mul(F.silu(x @ w_gate.T), x @ w_up.T, out=act)
        part = act @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        torch.mul(F.silu(x @ w_gate.T), x @ w_up.T, out=act)
        part = act @ w_down.T
        dist.all_reduce(part)
        out = x + part
    return g, out


def wrong_transposed_weights_dropped(x, w_gate, w_up, w_down):
    # WRONG: contiguous transposed weight copies made outside the capture and let go on return: the graph keeps
    # reading their freed blocks, which hold whatever is allocated there next.
    wg_t = w_gate.t().contiguous()
    wu_t = w_up.t().contiguous()
    wd_t = w_down.t().contiguous()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        p = (F.silu(x @ wg_t) * (x @ wu_t)) @ wd_t
        dist.all_reduce(p)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        p = (F.silu(x @ wg_t) * (x @ wu_t)) @ wd_t
        dist.all_reduce(p)
        out = x + p
    return g, out


def wrong_returns_clone_of_out(x, w_gate, w_up, w_down):
    # WRONG: out is allocated outside and written by the graph, but a clone is returned "to be safe": the clone
    # never changes on replay, and the real out is dropped, so the graph writes freed memory.
    out = torch.empty_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        torch.add(x, part, out=out)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        torch.add(x, part, out=out)
    return g, out.clone()


def wrong_x_copied_outside(x, w_gate, w_up, w_down):
    # WRONG: a "static input" copy of x made outside the capture (and kept alive): the graph reads the copy, which
    # holds the token of setup time, so replays ignore whatever the caller writes into x.
    static_x = x.clone()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(static_x @ w_gate.T) * (static_x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(static_x @ w_gate.T) * (static_x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        out = static_x + part
    g.static_x = static_x
    return g, out


# ----------------------------------------------------------------------------------------------------------------
# WRONG answers: streams and races
# ----------------------------------------------------------------------------------------------------------------


def wrong_fork_without_join_before_use(x, w_gate, w_up, w_down):
    # WRONG (a race): gate and up are computed on a forked stream to "overlap" them, but the main stream joins it
    # only at the end: in the graph the multiply and down projection do not depend on the two GEMMs, so they may
    # read the activations before this replay wrote them (the previous token's). Right or wrong by timing.
    branch = torch.cuda.Stream()

    def fwd():
        main = torch.cuda.current_stream()
        act = torch.empty(1, w_gate.shape[0], dtype=x.dtype, device=x.device)
        branch.wait_stream(main)
        with torch.cuda.stream(branch):
            torch.mul(F.silu(x @ w_gate.T), x @ w_up.T, out=act)
        part = act @ w_down.T
        dist.all_reduce(part)
        result = x + part
        main.wait_stream(branch)  # joined too late: only so that the capture ends cleanly
        return result

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_allreduce_on_outside_stream(x, w_gate, w_up, w_down):
    # WRONG: inside the capture the all-reduce is issued on a separate "communication" stream that never joined
    # the capture (no wait on the capturing stream): it is not part of the graph (it ran, or failed, once at
    # capture time), so replays add no partial sums.
    comm = torch.cuda.Stream()
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        with torch.cuda.stream(comm):
            dist.all_reduce(part)
        out = x + part
    return g, out


def wrong_async_allreduce_never_waited(x, w_gate, w_up, w_down):
    # WRONG: dist.all_reduce(..., async_op=True) and no work.wait(): nothing orders the residual add after the
    # all-reduce (and NCCL's stream is never joined back into the capture).
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part, async_op=True).wait()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part, async_op=True)
        out = x + part
    return g, out


# ----------------------------------------------------------------------------------------------------------------
# WRONG answers: the math
# ----------------------------------------------------------------------------------------------------------------


def wrong_residual_on_every_rank(x, w_gate, w_up, w_down):
    # WRONG: each rank adds x before the all-reduce, so the sum holds world * x (right only on one rank alone).
    def fwd():
        part = x + (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        return part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_average_not_sum(x, w_gate, w_up, w_down):
    # WRONG: ReduceOp.AVG divides the sum of the parts by world: the MLP comes out at 1/world of its size.
    def fwd():
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part, op=dist.ReduceOp.AVG)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_reduce_before_down(x, w_gate, w_up, w_down):
    # WRONG: all-reduces the [1, M/world] activation before the down projection: the ranks hold different slices
    # of the hidden layer, so adding them elementwise mixes unrelated units (right only on one rank alone).
    def fwd():
        h = F.silu(x @ w_gate.T) * (x @ w_up.T)
        dist.all_reduce(h)
        return x + h @ w_down.T

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_gelu(x, w_gate, w_up, w_down):
    # WRONG: GELU instead of SiLU on the gate (GeGLU, not SwiGLU): a different function of the token.
    def fwd():
        part = (F.gelu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_gate_up_swapped(x, w_gate, w_up, w_down):
    # WRONG: silu applied to the up projection and the gate left linear: silu(x @ w_up.T) * (x @ w_gate.T).
    def fwd():
        part = (F.silu(x @ w_up.T) * (x @ w_gate.T)) @ w_down.T
        dist.all_reduce(part)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_view_instead_of_transpose(x, w_gate, w_up, w_down):
    # WRONG: .view(D, -1) / .view(-1, D) used as if it transposed: the shapes fit ([1, D] @ [D, m], [1, m] @
    # [m, D]) but the elements are the weights' memory reread row-major, not their transpose.
    d = x.shape[-1]

    def fwd():
        h = F.silu(x @ w_gate.view(d, -1)) * (x @ w_up.view(d, -1))
        part = h @ w_down.view(-1, d)
        dist.all_reduce(part)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_world_size_typed_as_2(x, w_gate, w_up, w_down):
    # WRONG: the residual split as x * 0.5 per rank, with the world size typed in as 2: right on two ranks, but on
    # one rank alone out = x / 2 + MLP.
    def fwd():
        h = F.silu(torch.mm(x, w_gate.t())) * torch.mm(x, w_up.t())
        part = torch.addmm(x * 0.5, h, w_down.t())
        dist.all_reduce(part)
        return part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


# ----------------------------------------------------------------------------------------------------------------
# WRONG answers: what is returned
# ----------------------------------------------------------------------------------------------------------------


def wrong_graph_only(x, w_gate, w_up, w_down):
    # WRONG: returns the graph alone; the caller has no handle on the output (out is dropped, and the graph
    # writes it as freed memory).
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        out = x + part  # noqa: F841 (the learner forgets to return it)
    return g


def wrong_eager_replay_object(x, w_gate, w_up, w_down):
    # WRONG: no CUDA graph at all: an object whose replay() runs the MLP eagerly into out. The values are right,
    # but each "replay" launches every kernel from the host (not one graph launch) and it is no CUDAGraph.
    out = torch.empty_like(x)

    class Eager:
        def __init__(self, fn):
            self.fn = fn

        def replay(self):
            self.fn()

    def step():
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        torch.add(x, part, out=out)

    step()
    return Eager(step), out


def wrong_residual_outside_graph(x, w_gate, w_up, w_down):
    # WRONG: the graph holds the MLP and the all-reduce, but out = x + part is computed once, eagerly, after the
    # capture (from a part the graph has not even written yet): replays never update out.
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    out = x + part
    g.part = part
    return g, out


# ----------------------------------------------------------------------------------------------------------------
# WRONG answers: NaN / inf traps, accumulation, dtypes
# ----------------------------------------------------------------------------------------------------------------


def wrong_sigmoid_by_exp(x, w_gate, w_up, w_down):
    # WRONG (NaN trap): silu written as z * exp(z) / (1 + exp(z)): exp overflows to inf for z above ~88 (bfloat16
    # has float32's range), giving inf / inf = NaN for large gate activations where silu(z) = z.
    def fwd():
        z = x @ w_gate.T
        e = torch.exp(z)
        part = ((z * e / (1 + e)) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        return x + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_accumulator_zeroed_once(x, w_gate, w_up, w_down):
    # WRONG: out = zeros made outside (and returned), and the graph accumulates out += x + part: zeroed once at
    # setup, never in the graph, so each replay adds onto the last one's result (first replay right, then drift).
    out = torch.zeros_like(x)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        part = (F.silu(x @ w_gate.T) * (x @ w_up.T)) @ w_down.T
        dist.all_reduce(part)
        out += x + part
    return g, out


def wrong_float32_out(x, w_gate, w_up, w_down):
    # WRONG (dtype): computes in float32 and returns a float32 out; the exercise's out is [1, D] bfloat16.
    def fwd():
        xf = x.float()
        part = (F.silu(xf @ w_gate.float().T) * (xf @ w_up.float().T)) @ w_down.float().T
        dist.all_reduce(part)
        return xf + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


def wrong_float16(x, w_gate, w_up, w_down):
    # WRONG (dtype): casts everything to float16 (the "half" habit): out is float16, not bfloat16, and anything
    # past 65504 becomes inf.
    def fwd():
        xh = x.half()
        part = (F.silu(xh @ w_gate.half().T) * (xh @ w_up.half().T)) @ w_down.half().T
        dist.all_reduce(part)
        return xh + part

    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fwd()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = fwd()
    return g, out


ANSWERS = [
    # right
    ("right_plain", "right", right_plain),  # textbook: side-stream warm-up, all tensors made in the capture
    ("right_buffers_outside_kept_on_graph", "right", right_buffers_outside_kept_on_graph),  # static bufs on g attrs
    ("right_closure_keeps_buffers", "right", right_closure_keeps_buffers),  # buffers alive via closure on graph
    ("right_funcol", "right", right_funcol),  # funcol.all_reduce + wait_tensor, one NCCL kernel
    ("right_graph_pool", "right", right_graph_pool),  # capture into graph_pool_handle(): graph keeps its blocks
    ("right_three_warmups", "right", right_three_warmups),  # 3 warm-up iterations, same on every rank
    ("right_fp32_then_cast", "right", right_fp32_then_cast),  # float32 math + AR, cast into bf16 out in capture
    ("right_clone_x_inside_linear", "right", right_clone_x_inside_linear),  # x cloned inside capture: a graph node
    ("right_transposed_weights_kept", "right", right_transposed_weights_kept),  # W^T copies kept alive on out
    ("right_residual_on_rank0_only", "right", right_residual_on_rank0_only),  # x added on rank 0 only: sum has x once
    ("right_addmm_residual_split", "right", right_addmm_residual_split),  # addmm(x / world): sum has x once
    ("right_warmup_without_waits", "right", right_warmup_without_waits),  # graph.__enter__ syncs; warm-up discarded
    ("right_fork_join_inside_capture", "right", right_fork_join_inside_capture),  # fork/join joined before use
    # wrong: memory lifetime
    ("wrong_scratch_dropped", "wrong", wrong_scratch_dropped),  # graph writes a freed activation block
    ("wrong_transposed_weights_dropped", "wrong", wrong_transposed_weights_dropped),  # graph reads freed W^T
    ("wrong_returns_clone_of_out", "wrong", wrong_returns_clone_of_out),  # clone never updates; real out freed
    ("wrong_x_copied_outside", "wrong", wrong_x_copied_outside),  # graph reads a stale copy of x
    # wrong: streams / races
    ("wrong_fork_without_join_before_use", "wrong", wrong_fork_without_join_before_use),  # down proj races GEMMs
    ("wrong_allreduce_on_outside_stream", "wrong", wrong_allreduce_on_outside_stream),  # AR not in the graph
    ("wrong_async_allreduce_never_waited", "wrong", wrong_async_allreduce_never_waited),  # add not after AR
    # wrong: math
    ("wrong_residual_on_every_rank", "wrong", wrong_residual_on_every_rank),  # sum holds world * x
    ("wrong_average_not_sum", "wrong", wrong_average_not_sum),  # AVG: MLP / world
    ("wrong_reduce_before_down", "wrong", wrong_reduce_before_down),  # sums unrelated hidden slices
    ("wrong_gelu", "wrong", wrong_gelu),  # GELU gate, not SiLU
    ("wrong_gate_up_swapped", "wrong", wrong_gate_up_swapped),  # silu(up) * gate
    ("wrong_view_instead_of_transpose", "wrong", wrong_view_instead_of_transpose),  # view(D, -1) is no transpose
    ("wrong_world_size_typed_as_2", "wrong", wrong_world_size_typed_as_2),  # x * 0.5: wrong on one rank alone
    # wrong: what is returned
    ("wrong_graph_only", "wrong", wrong_graph_only),  # returns g, not (g, out)
    ("wrong_eager_replay_object", "wrong", wrong_eager_replay_object),  # no CUDA graph: eager replay() object
    ("wrong_residual_outside_graph", "wrong", wrong_residual_outside_graph),  # out computed once outside graph
    # wrong: NaN traps, accumulation, dtype
    ("wrong_sigmoid_by_exp", "wrong", wrong_sigmoid_by_exp),  # exp overflow -> inf/inf = NaN for z > ~88
    ("wrong_accumulator_zeroed_once", "wrong", wrong_accumulator_zeroed_once),  # out += ... across replays
    ("wrong_float32_out", "wrong", wrong_float32_out),  # out is float32
    ("wrong_float16", "wrong", wrong_float16),  # out is float16
]
