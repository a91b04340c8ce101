# ruff: noqa  (learner answers as a blind attacker wrote them: their style is the learner's, names resolve only in a lab)
"""Lab 11 exercise 1: learner answers from a blind attack on the per-rank reading (a helper who had not read the
checker wrote them), read by the checker's static rules on a CPU: each wrapper's launch and its kernels' sources.
The wrappers are never called, only read; the kernels are source strings. Each is marked right or wrong as the
attacker intended it, checked against Triton's own compiled code per rank when it was written."""

import os  # noqa: F401  (read by the wrappers' source only)
import types  # noqa: F401


BARRIER = '''
@triton.jit
def signal_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for peer in tl.static_range(world):
        if peer != rank:
            slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
            while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
                pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for peer in tl.static_range(world):
        if peer != rank:
            while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
    tl.debug_barrier()
'''

KERNEL = '''
@triton.jit
def one_shot_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank: tl.constexpr, world: tl.constexpr,
                    BLOCK: tl.constexpr):
    signal_barrier(signal_pad_ptrs, rank, world)
    bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
    for start in tl.range(tl.program_id(0) * BLOCK, numel, tl.num_programs(0) * BLOCK):
        offs = start + tl.arange(0, BLOCK)
        inside = offs < numel
        acc = tl.zeros([BLOCK], tl.float32)
        for peer in tl.static_range(world):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=inside, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=inside)
    signal_barrier(signal_pad_ptrs, rank, world)
'''

def sol_wrapper(buffer, handle, out):
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank,
                          world=handle.world_size, BLOCK=2048, num_warps=8)

ANSWERS = []


def add(name, intended, wrapper, sources, names=None, tt=None):
    """tt(r): the kernel and constexprs rank r really launches, which the attacker compiled to TTIR to check each
    intended verdict (that oracle is not part of the course)."""
    tt = tt or (lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048}))
    ANSWERS.append(dict(name=name, intended=intended, wrapper=wrapper, sources=sources, names=names or {}, tt=tt))


def swap(src, old, new, count=1):
    assert src.count(old) >= count, (old, src)
    return src.replace(old, new, count)


B_DB1 = "    tl.debug_barrier()\n    pid"              # first debug_barrier (before announcing)
B_DB2 = "                pass\n    tl.debug_barrier()\n"  # last debug_barrier (after waiting)
WAIT = ("    for peer in tl.static_range(world):\n        if peer != rank:\n"
        "            while tl.atomic_cas(mine + peer, 1, 0, sem=\"acquire\", scope=\"sys\") != 1:\n                pass\n")


def W(buffer, handle, out):  # the course's wrapper, used by kernel-side attacks
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank,
                          world=handle.world_size, BLOCK=2048, num_warps=8)


# ---------------------------------------------------------------- WRONG: kernel-side conditions
add("W01_if_rank_eq0_db1", "wrong", W, [swap(BARRIER, B_DB1, "    if rank == 0:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W02_if_rank_ne1_db2", "wrong", W, [swap(BARRIER, B_DB2, "                pass\n    if rank != 1:\n        tl.debug_barrier()\n"), KERNEL])
add("W03_if_rank_lt1_wait", "wrong", W, [swap(BARRIER, WAIT, "    if rank < 1:\n" + "\n".join("    " + l if l else l for l in WAIT.split("\n"))), KERNEL])
add("W04_if_1_minus_rank", "wrong", W, [swap(BARRIER, B_DB1, "    if 1 - rank:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W05_ternary_expr_stmt", "wrong", W, [swap(BARRIER, B_DB1, "    tl.debug_barrier() if rank == 0 else None\n    pid"), KERNEL])
add("W06_if_not_rank", "wrong", W, [swap(BARRIER, B_DB1, "    if not rank:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W07_static_range_rank", "wrong", W, [swap(BARRIER, B_DB1, "    for _ in tl.static_range(rank):\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W08_static_range_1_minus_rank", "wrong", W, [swap(BARRIER, B_DB2, "                pass\n    for _ in tl.static_range(1 - rank):\n        tl.debug_barrier()\n"), KERNEL])
add("W09_early_return_rank1", "wrong", W, [swap(BARRIER, B_DB2, "                pass\n    if rank == 1:\n        return\n    tl.debug_barrier()\n"), KERNEL])

HELPER_MAYBE = '''
@triton.jit
def maybe_sync(who: tl.constexpr):
    if who == 0:
        tl.debug_barrier()
'''
add("W10_helper_receives_rank", "wrong", W, [HELPER_MAYBE, swap(BARRIER, B_DB1, "    maybe_sync(rank)\n    pid"), KERNEL])

# exit handshake only: separate helper with EXIT flag
BARRIER_EXIT = swap(swap(BARRIER, "world: tl.constexpr):", "world: tl.constexpr, EXIT: tl.constexpr):"),
                    B_DB2, "                pass\n    if not (EXIT and rank == 1):\n        tl.debug_barrier()\n")
KERNEL_EXIT = swap(swap(KERNEL, "    signal_barrier(signal_pad_ptrs, rank, world)\n    bufs",
                        "    signal_barrier(signal_pad_ptrs, rank, world, False)\n    bufs"),
                   "    signal_barrier(signal_pad_ptrs, rank, world)\n'''"[:-4], "    signal_barrier(signal_pad_ptrs, rank, world, True)\n")
add("W11_exit_only_skip_db_rank1", "wrong", W, [BARRIER_EXIT, KERNEL_EXIT])
BARRIER_EXITW = swap(swap(BARRIER, "world: tl.constexpr):", "world: tl.constexpr, EXIT: tl.constexpr):"),
                     "        if peer != rank:\n            while tl.atomic_cas(mine",
                     "        if peer != rank and not (EXIT and rank == 0):\n            while tl.atomic_cas(mine")
add("W12_exit_wait_skipped_rank0", "wrong", W, [BARRIER_EXITW, KERNEL_EXIT])

# ---------------------------------------------------------------- WRONG: rank reaching the launch in disguise
K_EQ0 = [swap(BARRIER, B_DB1, "    if rank == 0:\n        tl.debug_barrier()\n    pid"), KERNEL]


def w_positional(buffer, handle, out):
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, handle.rank,
                          handle.world_size, 2048, num_warps=8)
add("W13_positional_rank", "wrong", w_positional, K_EQ0)


def w_dist(buffer, handle, out):
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=dist.get_rank(),
                          world=2, BLOCK=2048, num_warps=8)
add("W14_dist_get_rank", "wrong", w_dist, K_EQ0)


def w_var(buffer, handle, out):
    r = handle.rank
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=r, world=2, BLOCK=2048, num_warps=8)
add("W15_var_r", "wrong", w_var, K_EQ0)


def w_alias(buffer, handle, out):
    r = handle.rank
    me = r
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=me, world=2, BLOCK=2048, num_warps=8)
add("W16_alias_me", "wrong", w_alias, K_EQ0)


def w_tuple(buffer, handle, out):
    r, w = handle.rank, handle.world_size
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=r, world=w, BLOCK=2048, num_warps=8)
add("W17_tuple_unpack", "wrong", w_tuple, K_EQ0)


def w_dict(buffer, handle, out):
    cfg = {"rank": handle.rank, "world": handle.world_size}
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=cfg["rank"], world=cfg["world"], BLOCK=2048)
add("W18_dict_cfg", "wrong", w_dict, K_EQ0)


def w_attr(buffer, handle, out):
    cfg = types.SimpleNamespace(rank=handle.rank)
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=cfg.rank, world=2, BLOCK=2048)
add("W19_attr_cfg", "wrong", w_attr, K_EQ0)


def w_splat(buffer, handle, out):
    cfg = {"rank": handle.rank, "world": 2, "BLOCK": 2048}
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, **cfg)
add("W20_kwargs_splat", "wrong", w_splat, K_EQ0)


def w_env(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=int(os.environ["RANK"]), world=2, BLOCK=2048)
add("W21_env_RANK", "wrong", w_env, K_EQ0)


def w_device(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=buffer.device.index, world=2, BLOCK=2048)
add("W22_device_index", "wrong", w_device, K_EQ0)


def w_cur_dev(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=torch.cuda.current_device(), world=2, BLOCK=2048)
add("W23_cuda_current_device", "wrong", w_cur_dev, K_EQ0)


def _my_rank(h):
    return h.rank


def w_fn(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=_my_rank(handle), world=2, BLOCK=2048)
add("W24_helper_fn_rank", "wrong", w_fn, K_EQ0)


def w_isroot(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=handle.rank, world=2, BLOCK=2048,
                                                          IS_ROOT=handle.rank == 0)
K_ISROOT = [swap(BARRIER, B_DB1, "    if IS_ROOT:\n        tl.debug_barrier()\n    pid").replace(
    "world: tl.constexpr):", "world: tl.constexpr, IS_ROOT: tl.constexpr):"),
    KERNEL.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, IS_ROOT: tl.constexpr):").replace(
        "signal_barrier(signal_pad_ptrs, rank, world)", "signal_barrier(signal_pad_ptrs, rank, world, IS_ROOT)")]
add("W25_is_root_constexpr", "wrong", w_isroot, K_ISROOT, tt=lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048, "IS_ROOT": r == 0}))


def w_parity(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=handle.rank, world=2, BLOCK=2048,
                                                          PARITY=handle.rank % 2)
K_PAR = [swap(BARRIER, WAIT, "    if PARITY == 0:\n" + "\n".join("    " + l if l else l for l in WAIT.split("\n"))).replace(
    "world: tl.constexpr):", "world: tl.constexpr, PARITY: tl.constexpr):"),
    KERNEL.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, PARITY: tl.constexpr):").replace(
        "signal_barrier(signal_pad_ptrs, rank, world)", "signal_barrier(signal_pad_ptrs, rank, world, PARITY)")]
add("W26_parity_constexpr_wait", "wrong", w_parity, K_PAR, tt=lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048, "PARITY": r % 2}))


K_SKIP = [swap(BARRIER, B_DB2, "                pass\n    if not SKIP:\n        tl.debug_barrier()\n").replace(
    "world: tl.constexpr):", "world: tl.constexpr, SKIP: tl.constexpr):"),
    KERNEL.replace("BLOCK: tl.constexpr):", "BLOCK: tl.constexpr, SKIP: tl.constexpr):").replace(
        "signal_barrier(signal_pad_ptrs, rank, world)", "signal_barrier(signal_pad_ptrs, rank, world, SKIP)")]


def w_branch_launch(buffer, handle, out):
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    if handle.rank == 0:
        one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank,
                              world=2, BLOCK=2048, SKIP=False)
    else:
        one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, rank=handle.rank,
                              world=2, BLOCK=2048, SKIP=True)
TT_SKIP = lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048, "SKIP": r == 1})
add("W27_wrapper_branch_literals", "wrong", w_branch_launch, K_SKIP, tt=TT_SKIP)


def w_branch_var(buffer, handle, out):
    numel = buffer.numel()
    skip = False
    if handle.rank == 1:
        skip = True
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, rank=handle.rank, world=2, BLOCK=2048, SKIP=skip)
add("W28_wrapper_var_set_in_if", "wrong", w_branch_var, K_SKIP, tt=TT_SKIP)


def w_runtime_rank(buffer, handle, out):
    numel = buffer.numel()
    one_shot_kernel[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                                          numel, handle.rank, world=2, BLOCK=2048)
K_RT = [swap(BARRIER, B_DB1, "    if me == 0:\n        tl.debug_barrier()\n    pid").replace(
    "rank: tl.constexpr, world: tl.constexpr):", "me, rank: tl.constexpr, world: tl.constexpr):"),
    KERNEL.replace("rank: tl.constexpr, world", "me, world").replace(
        "signal_barrier(signal_pad_ptrs, rank, world)", "signal_barrier(signal_pad_ptrs, me, me, world)")]
# note: rank is a runtime int here; the barrier helper takes it twice (runtime `me`, and as 'rank')
TT_RT = lambda r: ("one_shot_kernel", {"world": 2, "BLOCK": 2048}, {"me": r})
add("W29_runtime_rank_arg", "wrong", w_runtime_rank, K_RT, tt=TT_RT)

# rank-dependent kernel choice in the wrapper
K_B = KERNEL.replace("def one_shot_kernel", "def kernel_b").replace(
    "    signal_barrier(signal_pad_ptrs, rank, world)\n    bufs", "    bufs")


def w_pick_kernel(buffer, handle, out):
    numel = buffer.numel()
    k = one_shot_kernel if handle.rank == 0 else kernel_b
    k[(min(32, triton.cdiv(numel, 4096)),)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                           rank=handle.rank, world=2, BLOCK=2048)
add("W30_pick_kernel_by_rank", "wrong", w_pick_kernel, [BARRIER, KERNEL, K_B], tt=lambda r: ("one_shot_kernel" if r == 0 else "kernel_b", {"rank": r, "world": 2, "BLOCK": 2048}))


# ---------------------------------------------------------------- RIGHT
add("R01_course_solution", "right", W, [BARRIER, KERNEL])
add("R02_positional_rank", "right", w_positional, [BARRIER, KERNEL])
add("R03_world_literal_2_dist", "right", w_dist, [BARRIER, KERNEL])
add("R04_alias_me", "right", w_alias, [BARRIER, KERNEL])

BARRIER_BRANCHES = '''
@triton.jit
def signal_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    if rank == 0:
        tl.debug_barrier()
        slot = tl.load(pads + 1).to(tl.pointer_type(tl.uint32)) + pid * 2 + 0
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
        mine = tl.load(pads + 0).to(tl.pointer_type(tl.uint32)) + pid * 2
        while tl.atomic_cas(mine + 1, 1, 0, sem="acquire", scope="sys") != 1:
            pass
        tl.debug_barrier()
    else:
        tl.debug_barrier()
        other = tl.load(pads).to(tl.pointer_type(tl.uint32))
        while tl.atomic_cas(other + pid * 2 + 1, 0, 1, sem="release", scope="sys") != 0:
            pass
        own = tl.load(pads + 1).to(tl.pointer_type(tl.uint32))
        while tl.atomic_cas(own + pid * 2 + 0, 1, 0, sem="acquire", scope="sys") != 1:
            pass
        tl.debug_barrier()
'''
add("R05_both_branches_own_barriers", "right", w_var, [BARRIER_BRANCHES, KERNEL])

BARRIER_PEER = '''
@triton.jit
def signal_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    tl.debug_barrier()
    pid = tl.program_id(0)
    peer: tl.constexpr = 1 - rank
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    theirs = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
    while tl.atomic_cas(theirs + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
        pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
    while tl.atomic_cas(mine + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
        pass
    tl.debug_barrier()
'''
add("R06_rank_only_pointer_arith", "right", w_dist, [BARRIER_PEER, KERNEL])

BARRIER_EXTRA = swap(BARRIER, B_DB1, "    tl.debug_barrier()\n    if rank == 0:\n        tl.debug_barrier()\n    pid")
add("R07_extra_barrier_on_rank0", "right", W, [BARRIER_EXTRA, KERNEL])

BARRIER_BOTH_DB = swap(BARRIER, B_DB2, "                pass\n    if rank == 0:\n        tl.debug_barrier()\n    else:\n        tl.debug_barrier()\n")
add("R08_db_in_both_branches", "right", w_tuple, [BARRIER_BOTH_DB, KERNEL])

BARRIER_ORDER = '''
@triton.jit
def signal_barrier(signal_pad_ptrs, rank: tl.constexpr, world: tl.constexpr):
    tl.debug_barrier()
    pid = tl.program_id(0)
    pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
    for i in tl.static_range(1, world):
        peer: tl.constexpr = (rank + i) % world
        slot = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + pid * world + rank
        while tl.atomic_cas(slot, 0, 1, sem="release", scope="sys") != 0:
            pass
    mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32)) + pid * world
    for i in tl.static_range(1, world):
        src: tl.constexpr = (rank + world - i) % world
        while tl.atomic_cas(mine + src, 1, 0, sem="acquire", scope="sys") != 1:
            pass
    tl.debug_barrier()
'''
add("R09_ring_order_peers", "right", w_positional, [BARRIER_ORDER, KERNEL])

HELPER_WAIT = '''
@triton.jit
def wait_all(mine, me: tl.constexpr, world: tl.constexpr):
    for peer in tl.static_range(world):
        if me != peer:
            while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
                pass
'''
add("R10_helper_wait_receives_rank", "right", W, [HELPER_WAIT, swap(BARRIER, WAIT, "    wait_all(mine, rank, world)\n"), KERNEL])

add("R11_is_root_only_order", "right", w_isroot, tt=lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048, "IS_ROOT": r == 0}), sources=[
    swap(BARRIER_BRANCHES, "    if rank == 0:", "    if IS_ROOT:").replace(
        "world: tl.constexpr):", "world: tl.constexpr, IS_ROOT: tl.constexpr):"), K_ISROOT[1]])

BARRIER_SELF = swap(swap(BARRIER, "        if peer != rank:\n            slot", "        if True:\n            slot"),
                    "        if peer != rank:\n            while", "        if True:\n            while")
add("R12_announce_to_self_too", "right", w_splat, [BARRIER_SELF, KERNEL])

# static_range(rank) used only for harmless arithmetic
BARRIER_SR = swap(BARRIER, "    pid = tl.program_id(0)\n", "    pid = tl.program_id(0)\n    base = 0\n    for _ in tl.static_range(rank):\n        base += world\n", 1)
add("R13_static_range_rank_harmless", "right", W, [BARRIER_SR, KERNEL])

add("R14_wrapper_branch_literals_both_complete", "right", w_branch_launch, [
    swap(BARRIER_BOTH_DB, "    if rank == 0:\n        tl.debug_barrier()\n    else:", "    if SKIP:\n        tl.debug_barrier()\n    else:").replace(
        "world: tl.constexpr):", "world: tl.constexpr, SKIP: tl.constexpr):"), K_SKIP[1]], tt=TT_SKIP)

# rank as a runtime (not constexpr) int: runtime `if peer != me` around each spin, barriers unconditional
K_RT_OK = [BARRIER.replace("rank: tl.constexpr, world: tl.constexpr):", "rank, world: tl.constexpr):"),
           KERNEL.replace("rank: tl.constexpr, world", "rank, world")]
add("R15_runtime_rank_peer_ne", "right", w_runtime_rank, K_RT_OK, tt=lambda r: ("one_shot_kernel", {"world": 2, "BLOCK": 2048}, {"rank": r}))


# ---------------------------------------------------------------- more probes (added after the first run)
K_WAIT_EQ0 = [swap(BARRIER, WAIT, "    if rank == 0:\n" + "\n".join("    " + l if l else l for l in WAIT.split("\n"))), KERNEL]
add("W31_unbound_rank_tuple_wait_skip", "wrong", w_tuple, K_WAIT_EQ0)
add("W32_alias_in_kernel_constexpr", "wrong", W, [swap(BARRIER, B_DB1, "    ME: tl.constexpr = rank\n    if ME == 0:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W33_rank_eq_global_ROOT", "wrong", W, [swap(BARRIER, B_DB1, "    if rank == ROOT:\n        tl.debug_barrier()\n    pid"), KERNEL],
    names={"ROOT": 0}, tt=lambda r: ("one_shot_kernel", {"rank": r, "world": 2, "BLOCK": 2048}))
add("W34_elif_chain", "wrong", W, [swap(BARRIER, B_DB2, "                pass\n    if rank == 1:\n        pass\n    elif world == 2:\n        tl.debug_barrier()\n"), KERNEL])
add("W35_wait_static_range_world_minus_1_minus_rank", "wrong", W, [swap(BARRIER, WAIT,
    "    for _ in tl.static_range(world - 1 - rank):\n        while tl.atomic_cas(mine + (1 - rank), 1, 0, sem=\"acquire\", scope=\"sys\") != 1:\n            pass\n"), KERNEL])
add("W36_and_combined_wait_skip_entry", "wrong", W, [swap(BARRIER, "        if peer != rank:\n            while tl.atomic_cas(mine",
    "        if peer != rank and rank == 1:\n            while tl.atomic_cas(mine"), KERNEL])
add("W37_nested_if_exit_wait_skip", "wrong", W, [swap(BARRIER_EXITW, "        if peer != rank and not (EXIT and rank == 0):\n            while",
    "        if peer != rank:\n          if not (EXIT and rank == 0):\n            while"), KERNEL_EXIT])
add("W38_exit_db_skip_and", "wrong", W, [swap(swap(BARRIER, "world: tl.constexpr):", "world: tl.constexpr, EXIT: tl.constexpr):"),
    B_DB2, "                pass\n    if EXIT and rank == 1:\n        pass\n    else:\n        tl.debug_barrier()\n"), KERNEL_EXIT])
add("W39_early_return_in_kernel", "wrong", W, [BARRIER, swap(KERNEL, "    signal_barrier(signal_pad_ptrs, rank, world)\n'''"[:-4],
    "    if rank == 1:\n        return\n    signal_barrier(signal_pad_ptrs, rank, world)\n")])
add("R16_world_literal_positional_peer", "right", w_positional, [BARRIER_PEER, KERNEL])
add("R17_unbound_rank_splat_solution", "right", w_splat, [BARRIER, KERNEL])
add("W40_wait_in_static_range_1_minus_rank", "wrong", W, [swap(BARRIER, WAIT,
    "    for _ in tl.static_range(1 - rank):\n" + "\n".join("    " + l if l else l for l in WAIT.split("\n"))), KERNEL])
add("W41_and_rank_on_barrier", "wrong", W, [swap(BARRIER, B_DB1, "    if world == 2 and rank == 0:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W42_and_rank_on_barrier_world_literal", "wrong", w_dist, [swap(BARRIER, B_DB1, "    if world == 2 and rank == 0:\n        tl.debug_barrier()\n    pid"), KERNEL])
add("W43_wait_static_range_world_minus_1_minus_rank_world_literal", "wrong", w_dist, [swap(BARRIER, WAIT,
    "    for _ in tl.static_range(world - 1 - rank):\n        while tl.atomic_cas(mine + (1 - rank), 1, 0, sem=\"acquire\", scope=\"sys\") != 1:\n            pass\n"), KERNEL])
add("W44_and_wait_skip_world_literal", "wrong", w_dist, [swap(BARRIER, "        if peer != rank:\n            while tl.atomic_cas(mine",
    "        if peer != rank and rank == 1:\n            while tl.atomic_cas(mine"), KERNEL])
