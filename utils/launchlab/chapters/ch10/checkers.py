"""Checkers for lab 10, "Graphs in real code: training steps, serving engines and failed captures".

Exercise 1 hands your capture a fresh model and optimizer of sizes it draws, then sets an eager twin beside
the state your capture left (whatever your warm-up did) and runs both on the same new batches: every loss and,
at the end, every parameter must agree, while each of your steps replays a graph and runs no model or optimizer
operator eagerly. Exercise 2 replays your dropout graph itself: new masks on every replay, the kept share and
the scale right, the masks following the generator it handed you (reseeded, they repeat; another seed, they
change) and the input you were given. Exercise 3 feeds your piecewise runner every batch size from 1 to the
largest of buckets it draws, with new context lengths each call, and compares each answer, kept until the end,
with the eager model; its model reports whether its pieces ran from graphs and at which batch size attention
ran. Exercise 4 compiles your fixed function with `mode="reduce-overhead"` and counts what happened: cudagraph
skips, graph breaks and graph launches on the profiler, with the arguments checked unchanged and every result
compared with the original function's.
"""

from __future__ import annotations

import copy
import math
import random
from collections.abc import Callable

from ... import checking, kernels
from ...checking import (
    CheckFailed,
    counting_graph_calls,
    counting_ops,
    exercise,
    graph_and_output,
    require_cuda,
)

# What a lab sees through launchlab.checkers.for_lab: the checkers and the material its exercises use.
__all__ = [
    "PiecewiseModel",
    "TrainNet",
    "check_compile_fix",
    "check_dropout_graph",
    "check_piecewise",
    "check_train_step",
    "ema_scale",
    "make_training",
]


def _torch():
    import torch

    return torch


def _torch_on_gpu(what: str):
    """torch, once a CUDA GPU is known to be there for `what`."""
    require_cuda(what)
    return _torch()


# ---- exercise 1: a whole training step in one graph ----------------------------------------------------------


def TrainNet(width: int = 64):  # noqa: N802 - a class factory, named as the class it returns
    """A small MLP regressor (LayerNorm, Linear, GELU, Linear, residual, scalar head) of the given width."""
    from torch import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(width)
            self.up, self.down = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)
            self.head = nn.Linear(width, 1)

        def forward(self, x):
            x = x + self.down(nn.functional.gelu(self.up(self.norm(x))))
            return self.head(x).squeeze(-1)

    return Net()


def make_training(width: int = 64, lr: float = 1e-2, seed: int = 0):
    """A fresh TrainNet on the GPU and its AdamW (capturable, foreach), from a seed."""
    torch = _torch()
    torch.manual_seed(seed)
    model = TrainNet(width).cuda()
    return model, torch.optim.AdamW(model.parameters(), lr=lr, capturable=True, foreach=True)


def _batches(torch, n: int, batch: int, width: int, generator) -> list:
    """n (x, y) pairs on the GPU: y a fixed smooth function of x, so the loss falls."""
    w = torch.randn(width, generator=generator)
    xs = [torch.randn(batch, width, generator=generator) for _ in range(n)]
    return [(x.cuda(), (x @ w / width ** 0.5).sin().cuda()) for x in xs]


# Operators a graphed step may still run eagerly: moving the batch in and reading the loss out.
STEP_PLUMBING = {"copy", "slice", "select", "alias", "view", "detach", "clone", "_to_copy", "expand", "as_strided",
                 "lift_fresh", "_local_scalar_dense", "t", "unsqueeze", "squeeze", "empty_like", "empty",
                 "_record_function_enter_new", "_record_function_exit"}   # profiler ranges (opt.zero_grad has one)
STEP_HINT = ("warm up on a side stream (three steps, each with zero_grad(set_to_none=True)) before capturing, so "
             "the optimizer's state exists; set the grads to None right before the capture; capture forward, "
             "backward and opt.step() in one torch.cuda.graph; step(x, y) copies x and y into the static inputs, "
             "replays, and returns the static loss")


def _loss_value(out: object, step: int) -> float:
    """The float a learner's step returned (a 0-d tensor or a number), or CheckFailed."""
    if out is None:
        raise CheckFailed(f"step {step} returned None: return the loss (the static loss tensor the graph writes)")
    try:
        value = float(out)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise CheckFailed(f"step {step} returned {type(out).__name__}, not a loss: {exc}") from None
    if not math.isfinite(value):
        raise CheckFailed(f"step {step} returned a loss of {value}")
    return value


@exercise(1, STEP_HINT)
def check_train_step(capture_train_step: Callable) -> str:
    """Graphed steps against an eager twin started from the state your capture left."""
    torch = _torch_on_gpu("capturing a training step")
    import torch.nn.functional as F

    rng = checking.rng()
    width, batch, lr, steps = rng.choice((48, 64, 96)), rng.choice((24, 40, 56)), rng.choice((3e-3, 1e-2)), 12
    data_rng = torch.Generator().manual_seed(rng.randrange(1 << 30))
    with checking.no_tf32():
        model, opt = make_training(width, lr, seed=rng.randrange(1 << 30))
        warmup = _batches(torch, 3, batch, width, data_rng)
        with counting_graph_calls() as built:
            step = capture_train_step(model, opt, warmup)
        if not callable(step):
            raise CheckFailed(f"capture_train_step returned {type(step).__name__}; return the function step(x, y)")
        if built["captures"] == 0:
            raise CheckFailed("capture_train_step captured no graph: nothing ran inside torch.cuda.graph(...)")
        twin = copy.deepcopy(model)
        twin_opt = torch.optim.AdamW(twin.parameters(), lr=lr, capturable=True, foreach=True)
        twin_opt.load_state_dict(copy.deepcopy(opt.state_dict()))
        batches = _batches(torch, steps, batch, width, data_rng)
        graphed, eager_ops = [], {}
        for k, (x, y) in enumerate(batches, 1):
            with counting_graph_calls() as calls, counting_ops() as ops:
                out = step(x.clone(), y.clone())       # fresh tensors: a step that rebinds instead of copying fails
            graphed.append(_loss_value(out, k))
            if calls["captures"]:
                raise CheckFailed(f"step {k} captured a graph: capture once, in capture_train_step, and only replay "
                                  "in step", hint=STEP_HINT)
            if calls["replays"] == 0:
                raise CheckFailed(f"step {k} replayed no graph", hint="step(x, y) must copy the batch into the static "
                                  "inputs and call graph.replay(); the graph does the work")
            for name, n in ops.eager.items():
                if name not in STEP_PLUMBING:
                    eager_ops[name] = eager_ops.get(name, 0) + n
        if eager_ops:
            ran = ", ".join(f"{name} x{n}" for name, n in sorted(eager_ops.items())[:6])
            optimizer = any(name.startswith("_foreach") for name in eager_ops)
            raise CheckFailed(f"your steps replayed a graph but also ran operators eagerly ({ran})",
                              hint="opt.step() belongs inside the capture too: with capturable=True it runs on the "
                              "GPU" if optimizer else "everything of the step (forward, loss, backward, optimizer) "
                              "belongs inside the capture")
        eager = []
        for x, y in batches:
            twin_opt.zero_grad(set_to_none=True)
            loss = F.mse_loss(twin(x), y)
            loss.backward()
            twin_opt.step()
            eager.append(loss.item())
    gaps = [abs(a - b) / max(abs(b), 1e-12) for a, b in zip(graphed, eager, strict=True)]
    first = next((k for k, g in enumerate(gaps) if g > 1e-5), None)
    if first is not None:
        hint = STEP_HINT
        if first == 0:
            hint = ("the first graphed step already differs: step(x, y) must copy x and y into the tensors the graph "
                    "captured (static_x.copy_(x)), replay, then return the loss the replay just wrote")
        raise CheckFailed(f"step {first + 1} of {steps}: graphed loss {graphed[first]:.6g}, eager {eager[first]:.6g}; "
                          f"losses {', '.join(f'{a:.4g}/{b:.4g}' for a, b in zip(graphed[:4], eager[:4], strict=True))}"
                          " (graphed/eager) ...", hint=hint)
    drift = max((p - q).abs().max().item() for p, q in zip(model.parameters(), twin.parameters(), strict=True))
    if not drift <= 1e-5:
        raise CheckFailed(f"the losses agree but the parameters end {drift:.3g} apart from eager's",
                          hint="every replay must update the model's own parameters in place (the optimizer step "
                          "inside the capture)")
    return (f"width {width}, batch {batch}: {steps} graphed steps match an eager twin (largest relative loss "
            f"difference {max(gaps):.1e}, parameters {drift:.1e} apart); each step replayed a graph and ran no model "
            "or optimizer operator eagerly")


# ---- exercise 2: dropout that draws new masks on every replay -------------------------------------------------

DROPOUT_HINT = ("draw the mask from the generator you were given (torch.rand(..., generator=generator) or "
                "torch.bernoulli(..., generator=generator)) inside the capture, register it first with "
                "graph.register_generator_state(generator), keep each element with probability 1 - p and scale "
                "what you keep by 1 / (1 - p)")
REGISTER_HINT = ("a generator of your own must be registered with the graph before capture: "
                 "graph.register_generator_state(generator); then each replay advances it")


def _masks(torch, graph, out, replays: int) -> list:
    """The kept-element masks (out != 0) of `replays` replays."""
    found = []
    for _ in range(replays):
        graph.replay()
        found.append((out != 0).clone())
    torch.cuda.synchronize()
    return found


FREED_LIMIT = 64 << 20  # the largest free block the freed-memory check fills (a scratch buffer is far smaller)
FREED_TOTAL = 256 << 20  # and at most this much in all, read back through pinned host memory
CANARY = 0xA5


class _RawBytes:
    """A CUDA array interface over `size` bytes at `address`: a torch view of memory without allocating any."""

    def __init__(self, address: int, size: int):
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (address, False), "version": 3}


def _free_blocks(torch) -> list[tuple[int, int]]:
    """(address, size) of each free block the caching allocator holds outside graph pools, up to FREED_LIMIT."""
    found = []
    for segment in torch.cuda.memory_snapshot():
        if tuple(segment.get("segment_pool_id", (0, 0))) != (0, 0):  # a graph's private pool: its own memory
            continue
        address = segment["address"]
        for block in segment["blocks"]:
            address = block.get("address", address)
            if block["state"] == "inactive" and block["size"] <= FREED_LIMIT:
                found.append((address, block["size"]))
            address += block["size"]
    return found


def _freed_memory_written(torch, graph, replays: int = 2) -> int:
    """Bytes of the allocator's free blocks that `replays` replays of `graph` changed: each free block is filled
    with a canary first (through views that allocate nothing), and read back into pinned host memory after."""
    import gc

    gc.collect()  # what your function dropped is freed now, not at some later collection
    torch.cuda.synchronize()
    blocks, total = [], 0
    for address, size in sorted(_free_blocks(torch), key=lambda block: block[1]):  # smallest first, up to a cap
        if total + size > FREED_TOTAL:
            break
        blocks.append((address, size))
        total += size
    views = [torch.as_tensor(_RawBytes(address, size), device="cuda") for address, size in blocks]
    backs = [torch.empty(size, dtype=torch.uint8, pin_memory=True) for _, size in blocks]
    for view in views:
        view.fill_(CANARY)
    torch.cuda.synchronize()
    for _ in range(replays):
        graph.replay()
    torch.cuda.synchronize()
    changed = 0
    for view, back in zip(views, backs, strict=True):
        back.copy_(view)
        changed += int((back != CANARY).sum())
    return changed


@exercise(2, DROPOUT_HINT)
def check_dropout_graph(capture_dropout: Callable) -> str:
    """Replays of your graph: new masks, the right share and scale, driven by the given generator and input."""
    torch = _torch_on_gpu("dropout in a CUDA graph")
    rng = checking.rng()
    p = rng.choice((0.2, 0.3, 0.35, 0.65, 0.7, 0.8))            # never 0.5: keeping p instead of 1 - p must show
    rows = rng.choice((3, 4, 6))
    n = rows << 14
    data = checking.torch_generator("cuda")                       # the checker's own draws, apart from yours
    x = torch.rand(rows, n // rows, device="cuda", generator=data) + 0.5  # positive: out == 0 exactly where dropped
    generator = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    try:
        graph, out = graph_and_output(capture_dropout(x, p, generator))
    except RuntimeError as exc:
        if "generator not in capture mode" in str(exc) or "register_generator_state" in str(exc):
            raise CheckFailed(f"the capture failed: {str(exc).splitlines()[0]}", hint=REGISTER_HINT) from None
        raise
    if not isinstance(out, torch.Tensor) or out.shape != x.shape or not out.is_cuda:
        raise CheckFailed(f"out should be a CUDA tensor shaped like x {tuple(x.shape)}, not "
                          f"{type(out).__name__} {tuple(getattr(out, 'shape', ()))}")
    written = _freed_memory_written(torch, graph)
    if written:
        raise CheckFailed(f"your graph wrote {written:,} bytes into memory it no longer owns: a tensor it writes was made "
                          "outside the capture and freed when your function returned, so the allocator hands that memory "
                          "to other tensors, which every replay then overwrites",
                          hint="make every tensor the graph writes inside the capture (the graph's pool keeps it), or "
                               "keep a reference to it for as long as the graph lives")
    seed_a, seed_b = rng.randrange(1 << 30), rng.randrange(1 << 30)
    generator.manual_seed(seed_a)
    first = _masks(torch, graph, out, 4)
    if torch.equal(first[0][0], first[0][1]):
        raise CheckFailed(f"rows 0 and 1 of x ({rows} rows) got the same mask: the mask must cover every element",
                          hint="draw the mask with x's whole shape: torch.rand(x.shape, ...)")
    repeats = sum(bool(torch.equal(first[i], first[i + 1])) for i in range(3))
    if repeats:
        raise CheckFailed(f"{repeats} of 3 consecutive replays drew the same mask: the mask is frozen into the graph",
                          hint="a mask drawn outside the capture, or with Python's random, is a constant of the graph; "
                          + DROPOUT_HINT)
    kept = [m.float().mean().item() for m in first]
    spread = 6 * math.sqrt(p * (1 - p) / n)
    if any(abs(k - (1 - p)) > spread for k in kept):
        right = [abs(k - (1 - p)) <= spread for k in kept]
        if all(abs(k - p) <= spread for k in kept):
            hint = "you keep each element with probability p; dropout drops with probability p and keeps 1 - p"
        elif any(right):  # right in some replays only: the graph wrote into memory that is no longer its own
            hint = ("the share was right in some replays and not in others: most often a tensor your graph writes "
                    "(a mask, a scratch buffer) was made outside the capture and freed when your function returned, "
                    "so other tensors now share its memory; make it inside the capture, or keep a reference to it")
        else:
            hint = DROPOUT_HINT
        raise CheckFailed(f"p = {p}: the replays kept {', '.join(f'{k:.3f}' for k in kept)} of the elements; "
                          f"dropout keeps about {1 - p:.3f}", hint=hint)
    graph.replay()
    torch.cuda.synchronize()
    scale = (out[out != 0] / x[out != 0])
    if not torch.allclose(scale, torch.full_like(scale, 1 / (1 - p)), rtol=1e-5):
        found = scale.median().item()
        raise CheckFailed(f"kept elements are x times {found:.4g}; dropout scales them by 1 / (1 - p) = {1 / (1 - p):.4g}",
                          hint="scale what you keep by 1 / (1 - p), so the expected output equals x"
                          if abs(found - 1) < 1e-3 else DROPOUT_HINT)
    generator.manual_seed(seed_a)
    again = _masks(torch, graph, out, 4)
    if not all(torch.equal(a, b) for a, b in zip(first, again, strict=True)):
        raise CheckFailed("reseeding the generator you were given did not repeat the masks: they come from another "
                          "generator", hint="pass generator=generator to the draw (F.dropout and torch.rand without it "
                          "use the default CUDA generator), and register it with the graph")
    generator.manual_seed(seed_b)
    other = _masks(torch, graph, out, 1)[0]
    if torch.equal(other, first[0]):
        raise CheckFailed("another seed gave the same mask", hint=DROPOUT_HINT)
    x.copy_(torch.rand(x.shape, device=x.device, generator=data) + 2.0)  # the graph must read x itself, every replay
    graph.replay()
    torch.cuda.synchronize()
    kept_now = out != 0
    if not torch.allclose(out[kept_now], x[kept_now] / (1 - p), rtol=1e-5):
        raise CheckFailed("after x changed, the replay still used the old values: the graph read a copy of x made "
                          "at capture", hint="compute from x itself inside the capture; a graph replays reads of the "
                          "addresses it captured")
    return (f"p = {p}, {n:,} elements: 4 replays drew 4 different masks, kept {min(kept):.3f} to {max(kept):.3f} "
            f"(expected {1 - p:.2f}) scaled by 1/(1-p); reseeding the generator repeats them, another seed changes "
            "them, and the graph reads x")


# ---- exercise 3: piecewise graphs around attention, one set per bucket ----------------------------------------


class PiecewiseModel:
    """A small decoder: per layer before() (capturable), attention() (its shape follows the lengths: not
    capturable) and after() (capturable). It notes how each piece ran, for the checker."""

    def __init__(self, layers: int = 2, width: int = 64, heads: int = 2, max_ctx: int = 96, max_batch: int = 16,
                 seed: int = 0):
        torch = _torch()
        from torch import nn

        torch.manual_seed(seed)
        self.layers, self.width, self.heads, self.max_ctx = layers, width, heads, max_ctx
        self.norm1 = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers)).cuda()
        self.norm2 = nn.ModuleList(nn.LayerNorm(width) for _ in range(layers)).cuda()
        self.qkv = nn.ModuleList(nn.Linear(width, width) for _ in range(layers)).cuda()
        self.proj = nn.ModuleList(nn.Linear(width, width) for _ in range(layers)).cuda()
        self.mlp = nn.ModuleList(nn.Sequential(nn.Linear(width, 2 * width), nn.GELU(), nn.Linear(2 * width, width))
                                 for _ in range(layers)).cuda()
        self.k = torch.randn(layers, max_batch, max_ctx, width, device="cuda") / 4
        self.v = torch.randn(layers, max_batch, max_ctx, width, device="cuda") / 4
        self.notes: dict[str, list] = {"eager pieces": [], "captured attention": 0, "attention batch": [],
                                       "shortest length": [], "attention streams": set()}
        # Set by the checker: a spin captured at the start of every after() graph, so its output is written late,
        # and one queued before each eager attention while serving, so attention's output is written late. An
        # answer whose other stream reads either without waiting for it then reads the previous batch's values.
        self.after_spin, self.attention_spin = 0, 0
        for name in ("norm1", "norm2", "qkv", "proj", "mlp"):          # the pieces' parts, called directly too
            for module in getattr(self, name):
                module.register_forward_pre_hook(lambda module, args, name=name: self._note(name))

    def _note(self, piece: str) -> None:
        if not _torch().cuda.is_current_stream_capturing():
            self.notes["eager pieces"].append(piece)

    def before(self, i: int, x):
        """Layer i's part before attention: the query, from x [batch, width]."""
        self._note("before")
        return self.qkv[i](self.norm1[i](x))

    def attention(self, i: int, q, lengths: list[int]):
        """Layer i's attention: request r's query over its first lengths[r] cached positions (at most max_ctx).
        `lengths` is a list of ints, one per row of q; the positions read span max(lengths)."""
        torch = _torch()
        import torch.nn.functional as F

        if torch.cuda.is_current_stream_capturing():
            self.notes["captured attention"] += 1
        else:
            self.notes["attention batch"].append(q.shape[0])
            self.notes["shortest length"].append(min(lengths))
            self.notes["attention streams"].add(torch.cuda.current_stream().cuda_stream)
        b, span, h = q.shape[0], max(lengths), self.heads
        if len(lengths) != b:
            raise ValueError(f"attention got {len(lengths)} lengths for {b} rows: give one length per row (pad)")
        query = q.view(b, h, 1, -1)
        k = self.k[i, :b, :span].reshape(b, span, h, -1).transpose(1, 2)
        v = self.v[i, :b, :span].reshape(b, span, h, -1).transpose(1, 2)
        mask = torch.arange(span, device=q.device)[None, :] < torch.tensor(lengths, device=q.device)[:, None]
        if self.attention_spin and not torch.cuda.is_current_stream_capturing():
            torch.cuda._sleep(self.attention_spin)  # after the lengths' copy, which waits for the host: output late
        return F.scaled_dot_product_attention(query, k, v, attn_mask=mask[:, None, None, :]).reshape(b, self.width)

    def after(self, i: int, x, attended):
        """Layer i's part after attention: the projection and the MLP, with their residuals."""
        self._note("after")
        x = x + self.proj[i](attended)
        if self.after_spin and _torch().cuda.is_current_stream_capturing():  # attended read first, output late
            _torch().cuda._sleep(self.after_spin)
        return x + self.mlp[i](self.norm2[i](x))

    def forward(self, x, lengths: list[int]):
        """The whole model, eagerly."""
        for i in range(self.layers):
            x = self.after(i, x, self.attention(i, self.before(i, x), lengths))
        return x


PIECEWISE_HINT = ("in build_piecewise, for every bucket: static input, warm-up, then per layer one graph around "
                  "before() and one around after(), attention left out; run(x, lengths) picks the smallest bucket "
                  ">= len(x), copies x into the static input's first rows, pads lengths to the bucket with 1s, "
                  "replays the pieces with attention eager between them, and returns a clone of the output rows")


def _bucket_draw(rng: random.Random) -> tuple[int, ...]:
    """Buckets to capture: increasing, the largest 8 to 16, never the lecture's powers of two alone."""
    while True:
        top = rng.randint(8, 16)
        inner = sorted(rng.sample(range(1, top), rng.randint(2, 3)))
        buckets = tuple(inner + [top])
        if any(b & (b - 1) for b in buckets):
            return buckets


def _same_kind(torch, out: object, expected) -> bool:
    """Whether a learner's answer is a tensor of the expected shape on the expected device."""
    return (isinstance(out, torch.Tensor) and tuple(out.shape) == tuple(expected.shape)
            and out.device == expected.device)


X_LATE_MS = 2.0  # how long each x handed to run() is still being written on the current stream
PIECE_LATE_MS = 0.5  # how late each after() replay and each eager attention write their outputs


@exercise(3, PIECEWISE_HINT)
def check_piecewise(build_piecewise: Callable) -> str:
    """Every batch size up to the largest bucket against the eager model, kept until the end; how pieces ran."""
    torch = _torch_on_gpu("piecewise CUDA graphs")
    rng = checking.rng()
    buckets = _bucket_draw(rng)
    layers, heads = rng.choice((2, 3)), rng.choice((2, 4))
    width = heads * rng.choice((16, 24))
    with checking.no_tf32(), torch.no_grad():
        model = PiecewiseModel(layers, width, heads, max_ctx=96, max_batch=buckets[-1], seed=rng.randrange(1 << 30))
        spin = kernels.torch_sleep_cycles(X_LATE_MS)
        model.after_spin = int(spin * PIECE_LATE_MS / X_LATE_MS)
        with counting_graph_calls() as built:
            run = build_piecewise(model, buckets)
        if not callable(run):
            raise CheckFailed(f"build_piecewise returned {type(run).__name__}; return the function run(x, lengths)")
        if built["captures"] < len(buckets):
            raise CheckFailed(f"build_piecewise captured {built['captures']} graphs for {len(buckets)} buckets "
                              f"{buckets}: at least one set per bucket, captured up front")
        captured_attention = model.notes["captured attention"]
        if captured_attention:
            raise CheckFailed(f"attention ran inside a capture {captured_attention} times: its span follows the "
                              "lengths of the batch, so a graph would replay the lengths it saw at capture",
                              hint="leave model.attention out of every graph; run it eagerly between the pieces")
        model.notes["eager pieces"].clear()
        model.notes["attention streams"].clear()  # warm-ups on a stream of your own are right
        kept, order = [], list(range(1, buckets[-1] + 1))
        rng.shuffle(order)
        data = checking.torch_generator("cuda")
        # Each x reaches run() still being written: NaN first, then its values copied in behind a spin on the
        # current stream. A copy of x on a stream of your own that does not wait for the current one reads NaN.
        caller = torch.cuda.current_stream().cuda_stream
        with counting_graph_calls() as calls:
            for batch in order:
                source = torch.randn(batch, width, device="cuda", generator=data)
                lengths = [rng.randint(1, model.max_ctx) for _ in range(batch)]
                expected = model.forward(source, lengths).clone()
                x = torch.full_like(source, float("nan"))
                torch.cuda.synchronize()  # the NaN is in place before the spin starts
                torch.cuda._sleep(spin)
                x.copy_(source)
                model.notes["eager pieces"].clear()
                model.notes["attention batch"].clear()
                model.notes["shortest length"].clear()
                replays_before = calls["replays"]
                model.attention_spin = model.after_spin
                try:
                    out = run(x, lengths)
                finally:
                    model.attention_spin = 0
                if model.notes["eager pieces"]:
                    raise CheckFailed(f"batch {batch}: before()/after() ran eagerly "
                                      f"{len(model.notes['eager pieces'])} times: run() must replay them",
                                      hint=PIECEWISE_HINT)
                if calls["replays"] - replays_before < model.layers + 1:
                    raise CheckFailed(f"batch {batch}: {calls['replays'] - replays_before} graph replays for "
                                      f"{model.layers} layers; the pieces around {model.layers} attentions are at "
                                      f"least {model.layers + 1} graphs", hint=PIECEWISE_HINT)
                if min(model.notes["shortest length"], default=1) < 1:
                    raise CheckFailed(f"batch {batch}: attention got a length of 0: a padding row with nothing to "
                                      "attend to gives NaN", hint="pad the lengths with 1 up to the bucket size")
                bucket = next(b for b in buckets if b >= batch)
                seen = set(model.notes["attention batch"])
                if seen != {bucket}:
                    raise CheckFailed(f"batch {batch} belongs in bucket {bucket} of {buckets}, but attention ran on "
                                      f"{sorted(seen) or 'nothing'} rows", hint="pick the smallest bucket that holds "
                                      "the batch (not the largest, not the exact size) and run everything at its shape")
                at_once = (out - expected).abs().max().item() if _same_kind(torch, out, expected) else None
                kept.append((batch, out, expected, at_once))
        if calls["captures"]:
            raise CheckFailed(f"run() captured {calls['captures']} graphs: capture every bucket in build_piecewise, "
                              "before serving")
    for batch, out, expected, at_once in kept:
        if not _same_kind(torch, out, expected):
            raise CheckFailed(f"batch {batch}: run returned {type(out).__name__} "
                              f"{tuple(getattr(out, 'shape', ()))} on {getattr(out, 'device', None)}; return the "
                              f"output rows on the GPU, shaped {tuple(expected.shape)}")
        error = (out - expected).abs().max().item()
        if not error <= 1e-4:
            hint = PIECEWISE_HINT
            if at_once is not None and at_once <= 1e-4:
                hint = ("the answer was right when run returned it and changed after later calls: return a clone "
                        "of the static output; the next replay overwrites it")
            elif error != error:  # NaN: x's rows read before the current stream had written them
                hint = ("NaN in the output: most often x was read before the current stream had written it (each x "
                        "reaches run() still being written): copy it into the static input on the current stream, or "
                        "make your stream wait for it (wait_stream) first")
            elif model.notes["attention streams"] - {caller}:
                hint = ("attention ran on a stream of your own: most often after()'s replay read its output before "
                        "that stream had written it; make the current stream wait for yours (wait_stream) before "
                        "the replay")
            else:
                hint = (PIECEWISE_HINT + "; if part of run() is on a stream of your own, each stream must wait "
                        "(wait_stream) for the other's writes before it reads them, the returned clone included")
            raise CheckFailed(f"batch {batch}: differs from the eager model by {error:.3g} (compared after every batch "
                              "size had run)", hint=hint)
        if at_once is not None and not at_once <= 1e-4:  # right in the end, wrong when run returned it
            raise CheckFailed(f"batch {batch}: right once everything had run, but off by {at_once:.3g} when read on the "
                              "current stream as run returned: your output was still being written",
                              hint="if you clone or compute the output on a stream of your own, make the current "
                                   "stream wait for it (torch.cuda.current_stream().wait_stream(yours)) before "
                                   "returning")
    return (f"buckets {buckets}, {layers} layers: batch sizes 1 to {buckets[-1]} match the eager model; pieces "
            f"replayed from graphs ({calls['replays']} replays), attention eager at each batch's bucket size")


# ---- exercise 4: the function that makes reduce-overhead skip its graphs --------------------------------------


def ema_scale(x, state):
    """The running mean of x's mean in `state` (a 0-d tensor, updated in place), and x scaled by it."""
    state.mul_(0.9).add_(0.1 * x.mean())
    return x * state


COMPILE_HINT = ("reduce-overhead skips CUDA graphs for a function that changes its inputs in place; return the new "
                "state (y, new_state) instead of updating `state`, compute y from the new state, and keep the "
                "function free of .item() and other host reads")


def _reference(xs, state):
    """What ema_scale gives, call after call, on a copy of `state`."""
    state = state.clone()
    ys = [ema_scale(x, state).clone() for x in xs]
    return ys, state


@exercise(4, COMPILE_HINT)
def check_compile_fix(ema_scale_fixed: Callable) -> str:
    """Your function compiled with reduce-overhead: no skips, no breaks, graph launches; ema_scale's results."""
    require_cuda("torch.compile(mode='reduce-overhead')")
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    from ... import trace

    rng = checking.rng()
    n, calls = rng.choice((1000, 3000, 5000)), 8
    gen = torch.Generator(device="cuda").manual_seed(rng.randrange(1 << 30))
    xs = [torch.randn(n, device="cuda", generator=gen) + rng.uniform(0.5, 2.0) for _ in range(calls)]
    state0 = torch.full((), rng.uniform(-1, 1), device="cuda")
    expected, final = _reference(xs, state0)
    torch._dynamo.reset()
    counters.clear()
    compiled = torch.compile(ema_scale_fixed, mode="reduce-overhead")
    state, ys, mutated = state0.clone(), [], []

    def one_call(k: int) -> None:
        nonlocal state
        torch.compiler.cudagraph_mark_step_begin()        # a new step: earlier outputs are ours to keep
        before, x_before = state.clone(), xs[k].clone()
        result = compiled(xs[k], state)
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise CheckFailed(f"ema_scale_fixed returned {type(result).__name__}; return (y, new_state)")
        y, new_state = result
        if not torch.equal(before, state) or not torch.equal(x_before, xs[k]):
            mutated.append(k)
        ys.append(y.clone())
        state = new_state.clone()

    for k in range(calls):
        one_call(k)
    scratch = state.clone()

    def profiled() -> None:
        torch.compiler.cudagraph_mark_step_begin()
        compiled(xs[0], scratch)

    # the profiler calls it a few times more than it records (its own warm-up), so these calls are not compared
    launches = trace.launch_counts(trace.record(profiled, calls=3)).graphs   # runtime or driver graph launches
    skips = counters["inductor"]["cudagraph_skips"]
    breaks = sum(counters["graph_break"].values())
    if mutated:
        raise CheckFailed(f"call {mutated[0] + 1} changed its arguments in place (x or state)", hint=COMPILE_HINT)
    if skips:
        raise CheckFailed(f"Inductor skipped CUDA graphs {skips} time(s) (counters['inductor']['cudagraph_skips']); "
                          "its log says why: 'skipping cudagraphs due to ...'", hint=COMPILE_HINT)
    if breaks:
        reasons = "; ".join(str(r)[:80] for r in list(counters["graph_break"])[:2])
        raise CheckFailed(f"{breaks} graph break(s): {reasons}", hint="a host read such as .item() or float(t) splits "
                          "the function; keep the state a tensor on the GPU and compute with it")
    if launches < 3:
        raise CheckFailed(f"{launches} CUDA graph launches in 3 profiled calls: the compiled function did not run "
                          "from a graph", hint=COMPILE_HINT)
    for k, (y, want) in enumerate(zip(ys, expected, strict=True)):
        if not torch.allclose(y, want, rtol=1e-5, atol=1e-6):
            raise CheckFailed(f"call {k + 1}: y differs from ema_scale's by {(y - want).abs().max().item():.3g}",
                              hint="y = x * the new state, where new state = 0.9 * state + 0.1 * mean(x)")
    if not torch.allclose(state, final, rtol=1e-5, atol=1e-7):
        raise CheckFailed(f"after {calls} calls the state is {state.item():.6g}, ema_scale's {final.item():.6g}",
                          hint="return the new state, and compute it from the state you were passed")
    return (f"{calls} calls, {n:,} elements: no cudagraph skip, no graph break, {launches} graph launches in 3 "
            "profiled calls, arguments unchanged, results equal to ema_scale's")
