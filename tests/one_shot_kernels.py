"""Triton kernels for lab 11 exercise 1's mutation suite: one kernel, each planted mistake a constexpr switch, and
one wrapper per answer (the checker runs each wrapper's source, with these kernels, in two ranks).
Imported only by GPU tests (Triton comes with CUDA builds of PyTorch, not with the CPU tier's)."""

import torch
import torch.distributed as dist
import triton
import triton.language as tl


@triton.jit
def _barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr, CONSUME: tl.constexpr):
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        if CONSUME:
            while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
                pass
        else:  # set the flag whatever it holds
            tl.atomic_xchg(slot, 1, sem="release", scope="sys")
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        if CONSUME:
            while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
        else:  # wait until it is set, and leave it set: the next call finds it set at once
            while tl.atomic_cas(mine + peer, 1, 1, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


@triton.jit
def _one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
              BLOCK: tl.constexpr, ENTRY: tl.constexpr, EXIT: tl.constexpr, CONSUME: tl.constexpr,
              OWN_ONLY: tl.constexpr, MEAN: tl.constexpr, LOOP: tl.constexpr, MASK: tl.constexpr):
    if ENTRY:
        _barrier(signal_pad_ptrs, rank, world, CONSUME)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    first = tl.program_id(0) * BLOCK
    end = numel
    if not LOOP:
        end = tl.minimum(numel, first + 1)
    for start in tl.range(first, end, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        if OWN_ONLY:
            src = tl.load(bufs + rank).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=inside, other=0.0).to(tl.float32) * world
        else:
            for peer in tl.static_range(world):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                if MASK:
                    acc += tl.load(src + offs, mask=inside, other=0.0).to(tl.float32)
                else:
                    acc += tl.load(src + offs).to(tl.float32)
        if MEAN:
            acc = acc / world
        if MASK:
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=inside)
        else:
            tl.store(out_ptr + offs, acc.to(tl.bfloat16))
    if EXIT:
        _barrier(signal_pad_ptrs, rank, world, CONSUME)


def barriers_in_and_out(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=True, MASK=True)


def a_program_per_block(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(triton.cdiv(numel, 8192),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=8192, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=False, MASK=True)


def read_without_waiting(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=False, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=True, MASK=True)


def return_without_waiting(buffer, handle, out):
    numel = buffer.numel()
    _entry_only_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


def signal_left_set(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=False, OWN_ONLY=False, MEAN=False, LOOP=True, MASK=True)


def own_times_world(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=True, MEAN=False, LOOP=True, MASK=True)


def the_mean(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=True, LOOP=True, MASK=True)


def one_block_each(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=False, MASK=True)


def no_tail_mask(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=True, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=True, MASK=False)


def the_library(buffer, handle, out):
    torch.ops.symm_mem.one_shot_all_reduce_out(buffer, "sum", dist.group.WORLD.group_name, out)


@triton.jit
def _sum_peers(buffer_ptrs, out_ptr, numel, world: tl.constexpr, BLOCK: tl.constexpr):
    """The sum of every rank's buffer into out, a loop over the grid, masked at the tail."""
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    for start in tl.range(tl.program_id(0) * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=inside)


@triton.jit
def _loose_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr, RELAXED: tl.constexpr):
    """The course's barrier with its atomics loosened: relaxed, or at the default (GPU) scope."""
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        if RELAXED:
            while tl.atomic_cas(slot, 0, 1, sem="relaxed", scope="sys") != 0:
                pass
        else:
            while tl.atomic_cas(slot, 0, 1, sem="release") != 0:
                pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        if RELAXED:
            while tl.atomic_cas(mine + peer, 1, 0, sem="relaxed", scope="sys") != 1:
                pass
        else:
            while tl.atomic_cas(mine + peer, 1, 0, sem="acquire") != 1:
                pass
    tl.debug_barrier()


@triton.jit
def _loose_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                    BLOCK: tl.constexpr, RELAXED: tl.constexpr):
    _loose_barrier(signal_pad_ptrs, rank, world, RELAXED)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _loose_barrier(signal_pad_ptrs, rank, world, RELAXED)


def relaxed_signals(buffer, handle, out):
    numel = buffer.numel()
    _loose_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, RELAXED=True)


def signals_at_gpu_scope(buffer, handle, out):
    numel = buffer.numel()
    _loose_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, RELAXED=False)


def library_while_capturing(buffer, handle, out):
    if torch.cuda.is_current_stream_capturing():
        torch.ops.symm_mem.one_shot_all_reduce_out(buffer, "sum", dist.group.WORLD.group_name, out)
        return
    barriers_in_and_out(buffer, handle, out)


@triton.jit
def _bare_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier without tl.debug_barrier(): one thread signals for a program whose others may lag."""
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass


@triton.jit
def _bare_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                   BLOCK: tl.constexpr):
    _bare_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _bare_barrier(signal_pad_ptrs, rank, world)


def no_thread_barrier(buffer, handle, out):
    numel = buffer.numel()
    _bare_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


@triton.jit
def _swapped_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier with the semantics swapped: announces with acquire, waits with release."""
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="acquire", scope="sys") != 0:
            pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="release", scope="sys") != 1:
            pass
    tl.debug_barrier()


@triton.jit
def _swapped_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                      BLOCK: tl.constexpr):
    _swapped_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _swapped_barrier(signal_pad_ptrs, rank, world)


def signals_swapped(buffer, handle, out):
    numel = buffer.numel()
    _swapped_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


@triton.jit
def _entry_only_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                         BLOCK: tl.constexpr):
    _barrier(signal_pad_ptrs, rank, world, True)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)


@triton.jit
def _program0_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier with its tl.debug_barrier() calls in program 0 only."""
    pid = tl.program_id(0)
    if pid == 0:
        tl.debug_barrier()
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass
    if pid == 0:
        tl.debug_barrier()


@triton.jit
def _program0_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                       BLOCK: tl.constexpr):
    _program0_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _program0_barrier(signal_pad_ptrs, rank, world)


def barrier_in_program0(buffer, handle, out):
    numel = buffer.numel()
    _program0_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


def zeroed_first(buffer, handle, out):
    out.zero_()  # a second launch each call, which the sum overwrites anyway
    barriers_in_and_out(buffer, handle, out)


@triton.jit
def _late_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier with its first tl.debug_barrier() moved after the announcements, before the waits."""
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
    tl.debug_barrier()
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass
    tl.debug_barrier()


@triton.jit
def _late_barrier_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                           BLOCK: tl.constexpr):
    _late_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _late_barrier(signal_pad_ptrs, rank, world)


def barrier_after_announcing(buffer, handle, out):
    numel = buffer.numel()
    _late_barrier_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


def exit_switched_off(buffer, handle, out):
    numel = buffer.numel()
    _one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096, ENTRY=True, EXIT=False, CONSUME=True, OWN_ONLY=False, MEAN=False, LOOP=True, MASK=True)


@triton.jit
def _rank0_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier with its tl.debug_barrier() calls on rank 0 only (a blind attack's answer): rank is a
    constexpr, so rank 1 compiles a kernel with no barrier at all."""
    pid = tl.program_id(0)
    if rank == 0:
        tl.debug_barrier()
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass
    if rank == 0:
        tl.debug_barrier()


@triton.jit
def _rank0_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                    BLOCK: tl.constexpr):
    _rank0_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _rank0_barrier(signal_pad_ptrs, rank, world)


def barrier_on_rank0_only(buffer, handle, out):
    numel = buffer.numel()
    _rank0_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


@triton.jit
def _bf16_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                   BLOCK: tl.constexpr):
    """The course's barriers, with the sum kept in bfloat16: the same bits as float32's on two ranks, not on four."""
    _barrier(signal_pad_ptrs, rank, world, True)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    for start in tl.range(tl.program_id(0) * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < numel
        acc = tl.zeros([BLOCK], dtype=tl.bfloat16)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc = (acc + tl.load(src + offs, mask=inside, other=0.0)).to(tl.bfloat16)
        tl.store(out_ptr + offs, acc, mask=inside)
    _barrier(signal_pad_ptrs, rank, world, True)


def sum_in_bfloat16(buffer, handle, out):
    numel = buffer.numel()
    _bf16_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)


@triton.jit
def _add_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    """The course's barrier announcing with an add, no spin until the slot is free: a second announcement before the
    peer consumes the first leaves 2, which the peer's cas 1 -> 0 never matches."""
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        tl.atomic_add(slot, 1, sem="release", scope="sys")
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
            pass
    tl.debug_barrier()


@triton.jit
def _add_one_shot(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                  BLOCK: tl.constexpr):
    _add_barrier(signal_pad_ptrs, rank, world)
    _sum_peers(buffer_ptrs, out_ptr, numel, world, BLOCK)
    _add_barrier(signal_pad_ptrs, rank, world)


def announce_with_an_add(buffer, handle, out):
    numel = buffer.numel()
    _add_one_shot[(min(32, triton.cdiv(numel, 4096)),)](
        handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank, world=handle.world_size,
        BLOCK=4096)
