"""Lab 11, exercise 1: a fourth blind attack, on announcements made with an add (17 answers, written by someone who
had not read the checker, with their verdicts written before it was run): right and wrong counting protocols, read
by the checker's static rules (tests/test_mutants_lab11.py: test_exercise1_reads_a_fourth_blind_attacks_adds).
VERDICTS gives each answer's intended verdict and why.

Every kernel: program pid of rank r announces in slot pid*world + r of each peer's pad, waits on its own pad's
slots pid*world + peer, twice per call (before reading peers, before returning)."""
import torch
import triton
import triton.language as tl

ANNOUNCE = 1  # module constant used as the add value in v07


def _grid(numel):
    return (min(32, triton.cdiv(numel, 4096)),)


# ----------------------------------------------------------------------------------------------------------- v01
@triton.jit
def k01_spec_cas(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_cas(peer_pad + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
                pass
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_cas(peer_pad + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
                pass
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v01_spec_cas(buffer, handle, out):
    numel = buffer.numel()
    k01_spec_cas[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                               world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v02
@triton.jit
def k02_add_cas(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v02_add_cas(buffer, handle, out):
    numel = buffer.numel()
    k02_add_cas[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                              world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v03
@triton.jit
def k03_add_xchg(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()


def v03_add_xchg(buffer, handle, out):
    numel = buffer.numel()
    k03_add_xchg[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                               world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v04
@triton.jit
def k04_add_countdown(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_add(my_pad + pid * world + peer, -1, sem="acquire", scope="sys")
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_add(my_pad + pid * world + peer, -1, sem="acquire", scope="sys")
    tl.debug_barrier()


def v04_add_countdown(buffer, handle, out):
    numel = buffer.numel()
    k04_add_countdown[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                    world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v05
@triton.jit
def k05_guarded_add(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 0, sem="relaxed", scope="sys") != 0:
                pass  # my last announcement is not consumed yet
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 0, sem="relaxed", scope="sys") != 0:
                pass
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v05_guarded_add(buffer, handle, out):
    numel = buffer.numel()
    k05_guarded_add[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                  world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v06
@triton.jit
def _announce(pad, slot):
    tl.atomic_add(pad + slot, 1, sem="release", scope="sys")


@triton.jit
def _consume(pad, slot):
    while tl.atomic_cas(pad + slot, 1, 0, sem="acquire", scope="sys") != 1:
        pass


@triton.jit
def _barrier(pads, my_pad, pid, rank, world: tl.constexpr):
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            _announce(tl.load(pads + peer).to(tl.pointer_type(tl.uint32)), pid * world + rank)
    for peer in tl.static_range(world):
        if peer != rank:
            _consume(my_pad, pid * world + peer)
    tl.debug_barrier()


@triton.jit
def k06_helpers(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    _barrier(pads, my_pad, pid, rank, world)
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    _barrier(pads, my_pad, pid, rank, world)


def v06_helpers(buffer, handle, out):
    numel = buffer.numel()
    k06_helpers[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                              world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v07
@triton.jit
def k07_global_const_and(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, ANNOUNCE, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_or(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_and(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, ANNOUNCE, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_or(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_and(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()


def v07_global_const_and(buffer, handle, out):
    numel = buffer.numel()
    k07_global_const_and[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                       world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v08
@triton.jit
def k08_constexpr_inc(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr,
                      INC: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, INC, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, INC, 0, sem="acquire", scope="sys") != INC:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, INC, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, INC, 0, sem="acquire", scope="sys") != INC:
                pass
    tl.debug_barrier()


def v08_constexpr_inc(buffer, handle, out):
    numel = buffer.numel()
    k08_constexpr_inc[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                    world=handle.world_size, BLOCK=4096, INC=1)


# ----------------------------------------------------------------------------------------------------------- v09
@triton.jit
def k09_add0_poll(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_cas(peer_pad + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
                pass
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") != 1:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_cas(peer_pad + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
                pass
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") != 1:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()


def v09_add0_poll(buffer, handle, out):
    numel = buffer.numel()
    k09_add0_poll[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v10
@triton.jit
def k10_epoch_host(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, epoch, world: tl.constexpr,
                   BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < epoch + 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < epoch + 2:
                pass
    tl.debug_barrier()


_calls = {"n": 0}


def v10_epoch_host(buffer, handle, out):
    numel = buffer.numel()
    epoch = 2 * _calls["n"]
    _calls["n"] += 1
    k10_epoch_host[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                 epoch, world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v11
@triton.jit
def k11_epoch_reset_xchg(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr,
                         BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < 2:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys")  # reset for next call
    tl.debug_barrier()


def v11_epoch_reset_xchg(buffer, handle, out):
    numel = buffer.numel()
    k11_epoch_reset_xchg[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                       handle.rank, world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v12
@triton.jit
def k12_epoch_sub2(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < 2:
                pass
            tl.atomic_add(my_pad + pid * world + peer, -2, sem="relaxed", scope="sys")  # keep any early ones
    tl.debug_barrier()


def v12_epoch_sub2(buffer, handle, out):
    numel = buffer.numel()
    k12_epoch_sub2[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                 world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v13
@triton.jit
def k13_add_retry_cas(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys") != 0:
                tl.atomic_add(peer_pad + pid * world + rank, -1, sem="relaxed", scope="sys")  # undo, retry
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys") != 0:
                tl.atomic_add(peer_pad + pid * world + rank, -1, sem="relaxed", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v13_add_retry_cas(buffer, handle, out):
    numel = buffer.numel()
    k13_add_retry_cas[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                    world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v14
@triton.jit
def k14_add_retry_xchg(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys") != 0:
                tl.atomic_add(peer_pad + pid * world + rank, -1, sem="relaxed", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys") != 0:
                tl.atomic_add(peer_pad + pid * world + rank, -1, sem="relaxed", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="relaxed", scope="sys") == 0:
                pass
            tl.atomic_xchg(my_pad + pid * world + peer, 0, sem="acquire", scope="sys")
    tl.debug_barrier()


def v14_add_retry_xchg(buffer, handle, out):
    numel = buffer.numel()
    k14_add_retry_xchg[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                     world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v15
@triton.jit
def k15_max_announce(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_max(peer_pad + pid * world + rank, 1, sem="release", scope="sys")  # "inc, saturating at 1"
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_max(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v15_max_announce(buffer, handle, out):
    numel = buffer.numel()
    k15_max_announce[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                   world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v16
@triton.jit
def k16_guard_wrong_slot(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, world: tl.constexpr,
                         BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + peer, 0, sem="relaxed", scope="sys") != 0:
                pass  # guard on the wrong slot (peer's own index, never written)
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            while tl.atomic_add(peer_pad + pid * world + peer, 0, sem="relaxed", scope="sys") != 0:
                pass
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(my_pad + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()


def v16_guard_wrong_slot(buffer, handle, out):
    numel = buffer.numel()
    k16_guard_wrong_slot[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                       world=handle.world_size, BLOCK=4096)


# ----------------------------------------------------------------------------------------------------------- v17
@triton.jit
def k17_epoch_device(buffer_ptrs, signal_ptrs, out_ptr, numel, rank, epochs_ptr, world: tl.constexpr,
                     BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    pads = signal_ptrs.to(tl.pointer_type(tl.uint64))
    my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    epoch = tl.load(epochs_ptr + pid)  # how many times this program announced so far (device state: graph-safe)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < epoch + 1:
                pass
    tl.debug_barrier()
    for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
    tl.debug_barrier()
    for peer in tl.static_range(world):
        if peer != rank:
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            tl.atomic_add(peer_pad + pid * world + rank, 1, sem="release", scope="sys")
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_add(my_pad + pid * world + peer, 0, sem="acquire", scope="sys") < epoch + 2:
                pass
    tl.debug_barrier()
    tl.store(epochs_ptr + pid, epoch + 2)


_epochs = {}


def v17_epoch_device(buffer, handle, out):
    numel = buffer.numel()
    if buffer.device not in _epochs:
        _epochs[buffer.device] = torch.zeros(32, dtype=torch.uint32, device=buffer.device)
    k17_epoch_device[_grid(numel)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                                   _epochs[buffer.device], world=handle.world_size, BLOCK=4096)


VARIANTS = [v01_spec_cas, v02_add_cas, v03_add_xchg, v04_add_countdown, v05_guarded_add, v06_helpers,
            v07_global_const_and, v08_constexpr_inc, v09_add0_poll, v10_epoch_host, v11_epoch_reset_xchg,
            v12_epoch_sub2, v13_add_retry_cas, v14_add_retry_xchg, v15_max_announce, v16_guard_wrong_slot,
            v17_epoch_device]


VERDICTS = {  # the attacker's, written before the checker read them
    "v01_spec_cas": ("right", "the spec's protocol"),
    "v02_add_cas": ("wrong", "a second add before the peer consumes makes 2, which cas 1 -> 0 never matches"),
    "v03_add_xchg": ("wrong", "xchg 0 takes 2 as one announcement; the next wait hangs"),
    "v04_add_countdown": ("right", "a counting semaphore: each wait takes one off, the pads at 0 at rest"),
    "v05_guarded_add": ("right", "a spin until the slot reads 0 before the add: the slot never holds more than 1"),
    "v06_helpers": ("wrong", "v02 inside helpers"),
    "v07_global_const_and": ("wrong", "an add of a module constant, consumed by an and with 0"),
    "v08_constexpr_inc": ("wrong", "v02 with the increment a constexpr the launch sets to 1"),
    "v09_add0_poll": ("right", "a guarded cas announce, a poll until set, then an acquiring exchange with 0"),
    "v10_epoch_host": ("wrong", "waits for a count the host fixed at capture: replays do not wait; pads never reset"),
    "v11_epoch_reset_xchg": ("wrong", "the exchange with 0 can erase the peer's announcement for the next call"),
    "v12_epoch_sub2": ("right", "counts up to 2 in a call, then takes 2 off: early announcements survive"),
    "v13_add_retry_cas": ("right", "a tentative add undone unless the slot read 0; cas 1 -> 0 retries past it"),
    "v14_add_retry_xchg": ("wrong", "an exchange with 0 can take the tentative add, and the undo wraps below 0"),
    "v15_max_announce": ("wrong", "max 1 over an unconsumed 1 loses an announcement"),
    "v16_guard_wrong_slot": ("wrong", "the spin until 0 watches a slot nobody writes, so it guards nothing: v02"),
    "v17_epoch_device": ("wrong", "the counts only grow: the pads are never back at 0, as the spec requires"),
}
