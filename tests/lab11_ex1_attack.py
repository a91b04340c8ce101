"""Lab 11, exercise 1: a blind attack's learner answers (right and wrong) for one_shot_all_reduce(buffer, handle,
out), written by someone who had not read the checker or its suite. One label is the course's, not the attacker's:
w16 (one slot per peer shared by all programs) is a counting barrier, right on any number of ranks (each rank's
announcements are consumed in the order made, one per program and barrier), so it must pass.

Each answer is a top-level function (buffer, handle, out) that launches its own Triton kernel(s), as a learner
would write it in the notebook cell. ANSWERS lists (name, intended, fn, why), intended one of
"right" (must pass), "wrong" (must fail), "hangs" (wrong and may deadlock: the checker's watchdog has to stop it).
"[subtle]" in `why` marks a wrong answer whose output is right unless the timing is adversarial (or that only
a reading of the kernel's source can catch).

Signal-pad protocol the right answers follow (lab text): program `pid` of rank `r` announces in slot
`pid * world + r` of every peer's pad with CAS(0 -> 1, release, sys), spinning while the slot is still 1, then
waits on its own pad's slot `pid * world + peer` with CAS(1 -> 0, acquire, sys), spinning until it returns 1;
tl.debug_barrier() before announcing and after waiting; the same barrier again before returning. Every flag
is consumed by its owner, so the pads are back to zero after every call (the library's one-shot uses the same
slots and protocol, so ours and its can share a pad in one graph).
"""
import torch

try:
    import triton
    import triton.language as tl
except ImportError:  # a machine without Triton: the module still imports, the kernels are not defined
    triton = None
    tl = None


if triton is not None:

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 1: a helper barrier (announce on every peer, then wait on own pad), rank and world constexpr,
    # static_range over peers, a tl.range loop of 1024-element tiles, num_warps=4.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r1_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def r1_one_shot_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                           RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        r1_barrier(pads, pid, RANK, WORLD)  # every peer's input is in
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        r1_barrier(pads, pid, RANK, WORLD)  # every peer has read my buffer

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 2: everything inline, rank a runtime argument, peers visited in rotated order, the spins written
    # as `old = cas(); while old != x: old = cas()`, 4096-element tiles, num_warps=8.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r2_all_reduce_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank,
                             WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        step = tl.num_programs(0) * BLOCK
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        my_pad = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
        base = pid * WORLD

        # barrier in
        tl.debug_barrier()
        for i in range(1, WORLD):
            peer = (rank + i) % WORLD
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            old = tl.atomic_cas(peer_pad + base + rank, 0, 1, sem="release", scope="sys")
            while old != 0:
                old = tl.atomic_cas(peer_pad + base + rank, 0, 1, sem="release", scope="sys")
        for i in range(1, WORLD):
            peer = (rank + i) % WORLD
            got = tl.atomic_cas(my_pad + base + peer, 1, 0, sem="acquire", scope="sys")
            while got != 1:
                got = tl.atomic_cas(my_pad + base + peer, 1, 0, sem="acquire", scope="sys")
        tl.debug_barrier()

        for start in tl.range(pid * BLOCK, numel, step):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for p in tl.static_range(WORLD):
                src = tl.load(bufs + p).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)

        # barrier out
        tl.debug_barrier()
        for i in range(1, WORLD):
            peer = (rank + i) % WORLD
            peer_pad = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
            old = tl.atomic_cas(peer_pad + base + rank, 0, 1, sem="release", scope="sys")
            while old != 0:
                old = tl.atomic_cas(peer_pad + base + rank, 0, 1, sem="release", scope="sys")
        for i in range(1, WORLD):
            peer = (rank + i) % WORLD
            got = tl.atomic_cas(my_pad + base + peer, 1, 0, sem="acquire", scope="sys")
            while got != 1:
                got = tl.atomic_cas(my_pad + base + peer, 1, 0, sem="acquire", scope="sys")
        tl.debug_barrier()

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 3: one tile per program, no loop: the grid covers numel (at most 32 programs: the tile grows
    # with numel); separate signal and wait helpers; num_warps=8.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r3_signal_peers(pads, slot, RANK: tl.constexpr, WORLD: tl.constexpr):
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                flag = tl.load(pads + peer).to(tl.pointer_type(tl.uint32)) + slot
                while tl.atomic_cas(flag, 0, 1, sem="release", scope="sys") == 1:
                    pass

    @triton.jit
    def r3_wait_peers(pads, first, RANK: tl.constexpr, WORLD: tl.constexpr):
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + first + peer, 1, 0, sem="acquire", scope="sys") == 0:
                    pass

    @triton.jit
    def r3_tile_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                       RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        tl.debug_barrier()
        r3_signal_peers(pads, pid * WORLD + RANK, RANK, WORLD)
        r3_wait_peers(pads, pid * WORLD, RANK, WORLD)
        tl.debug_barrier()
        offs = pid * BLOCK + tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for peer in tl.static_range(WORLD):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        tl.debug_barrier()
        r3_signal_peers(pads, pid * WORLD + RANK, RANK, WORLD)
        r3_wait_peers(pads, pid * WORLD, RANK, WORLD)
        tl.debug_barrier()

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 4: world-size generic with nothing constexpr but the tile: rank and world runtime, dynamic loops
    # over ranks (a runtime `if peer != rank`), 2048-element tiles, num_warps=4.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r4_barrier(pads, pid, rank, world):
        tl.debug_barrier()
        for peer in range(world):
            if peer != rank:
                theirs = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(theirs + pid * world + rank, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + rank).to(tl.pointer_type(tl.uint32))
        for peer in range(world):
            if peer != rank:
                while tl.atomic_cas(mine + pid * world + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def r4_generic_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, rank, world, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        r4_barrier(pads, pid, rank, world)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for r in range(world):
                src = tl.load(bufs + r).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        r4_barrier(pads, pid, rank, world)

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 5: pairwise handshakes, peer by peer in increasing rank order (announce to p, then wait for p):
    # deadlock-free for any world since every rank walks the pairs in one global order; 512-element tiles,
    # num_warps=2; own input read from `buffer` directly.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r5_handshake(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32)) + pid * WORLD
        for p in tl.static_range(WORLD):
            if p != RANK:
                theirs = tl.load(pads + p).to(tl.pointer_type(tl.uint32)) + pid * WORLD
                while tl.atomic_cas(theirs + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
                while tl.atomic_cas(mine + p, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def r5_pairwise_kernel(own_ptr, buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                           RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        r5_handshake(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.load(own_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            for p in tl.static_range(WORLD):
                if p != RANK:
                    src = tl.load(bufs + p).to(tl.pointer_type(tl.bfloat16))
                    acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        r5_handshake(pads, pid, RANK, WORLD)

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 6: acq_rel on both atomics (stronger than needed), inline, 2048-element tiles.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r6_acq_rel_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                          RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        tl.debug_barrier()
        for p in tl.static_range(WORLD):
            if p != RANK:
                there = tl.load(pads + p).to(tl.pointer_type(tl.uint32)) + pid * WORLD + RANK
                while tl.atomic_cas(there, 0, 1, sem="acq_rel", scope="sys") != 0:
                    pass
        for p in tl.static_range(WORLD):
            if p != RANK:
                while tl.atomic_cas(mine + pid * WORLD + p, 1, 0, sem="acq_rel", scope="sys") != 1:
                    pass
        tl.debug_barrier()
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for p in tl.static_range(WORLD):
                src = tl.load(bufs + p).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        tl.debug_barrier()
        for p in tl.static_range(WORLD):
            if p != RANK:
                there = tl.load(pads + p).to(tl.pointer_type(tl.uint32)) + pid * WORLD + RANK
                while tl.atomic_cas(there, 0, 1, sem="acq_rel", scope="sys") != 0:
                    pass
        for p in tl.static_range(WORLD):
            if p != RANK:
                while tl.atomic_cas(mine + pid * WORLD + p, 1, 0, sem="acq_rel", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    # ------------------------------------------------------------------------------------------------------
    # RIGHT 7 (on two GPUs): world hard-coded to 2, the peer is 1 - rank.
    # ------------------------------------------------------------------------------------------------------
    @triton.jit
    def r7_two_rank_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, RANK: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        PEER: tl.constexpr = 1 - RANK
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        send = tl.load(pads + PEER).to(tl.pointer_type(tl.uint32)) + pid * 2 + RANK
        recv = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32)) + pid * 2 + PEER
        tl.debug_barrier()
        while tl.atomic_cas(send, 0, 1, sem="release", scope="sys") != 0:
            pass
        while tl.atomic_cas(recv, 1, 0, sem="acquire", scope="sys") != 1:
            pass
        tl.debug_barrier()
        a = tl.load(bufs + 0).to(tl.pointer_type(tl.bfloat16))
        b = tl.load(bufs + 1).to(tl.pointer_type(tl.bfloat16))
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            x = tl.load(a + offs, mask=mask, other=0.0).to(tl.float32)
            y = tl.load(b + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, (x + y).to(tl.bfloat16), mask=mask)
        tl.debug_barrier()
        while tl.atomic_cas(send, 0, 1, sem="release", scope="sys") != 0:
            pass
        while tl.atomic_cas(recv, 1, 0, sem="acquire", scope="sys") != 1:
            pass
        tl.debug_barrier()

    # ======================================================================================================
    # WRONG: races (most of them right in an ordinary run).
    # ======================================================================================================

    # W1: no barrier before returning.
    @triton.jit
    def w1_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w1_no_exit_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                          RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w1_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        # the sum is written: done

    # W2: the barrier before returning only in program 0 ("one program is enough to say we're done").
    @triton.jit
    def w2_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w2_exit_pid0_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                            RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w2_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        if pid == 0:
            w2_barrier(pads, pid, RANK, WORLD)

    # W3: announce with xchg, wait by looking (CAS 1 -> 1), and reset my own flags afterwards: a peer's next
    # announcement (its exit) that lands between my look and my reset is wiped out.
    @triton.jit
    def w3_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                tl.atomic_xchg(remote + pid * WORLD + RANK, 1, sem="release", scope="sys")
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 1, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):  # everyone is here: clear my flags for the next barrier
            if peer != RANK:
                tl.atomic_xchg(mine + pid * WORLD + peer, 0, sem="release", scope="sys")

    @triton.jit
    def w3_reset_after_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                              RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w3_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w3_barrier(pads, pid, RANK, WORLD)

    # W4: the spin reads the flag with a plain (non-volatile) tl.load, then clears it with tl.store.
    @triton.jit
    def w4_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.load(mine + pid * WORLD + peer) != 1:
                    pass
                tl.store(mine + pid * WORLD + peer, 0)
        tl.debug_barrier()

    @triton.jit
    def w4_plain_load_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                             RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w4_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w4_barrier(pads, pid, RANK, WORLD)

    # W5: the spin reads the flag with tl.load(volatile=True) (no atomic, no acquire), then clears it with a
    # plain store.
    @triton.jit
    def w5_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.load(mine + pid * WORLD + peer, volatile=True) == 0:
                    pass
                tl.store(mine + pid * WORLD + peer, 0)
        tl.debug_barrier()

    @triton.jit
    def w5_volatile_load_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w5_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w5_barrier(pads, pid, RANK, WORLD)

    # W6: relaxed atomics at system scope ("the CAS is atomic, that is enough").
    @triton.jit
    def w6_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="relaxed", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="relaxed", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w6_relaxed_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                          RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w6_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w6_barrier(pads, pid, RANK, WORLD)

    # W7: right semantics, GPU scope written out (the other side is another GPU).
    @triton.jit
    def w7_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="gpu") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="gpu") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w7_gpu_scope_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                            RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w7_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w7_barrier(pads, pid, RANK, WORLD)

    # W8: the atomics without sem/scope, as in Triton's layer-norm lock (defaults: acq_rel at GPU scope).
    @triton.jit
    def w8_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1) == 1:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0) == 0:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w8_default_atomics_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                  RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w8_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w8_barrier(pads, pid, RANK, WORLD)

    # W9: acquire and release swapped (announce with acquire, consume with release).
    @triton.jit
    def w9_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="acquire", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="release", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w9_swapped_sem_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                              RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w9_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w9_barrier(pads, pid, RANK, WORLD)

    # W10: no tl.debug_barrier() anywhere.
    @triton.jit
    def w10_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass

    @triton.jit
    def w10_no_debug_barrier_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                    RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w10_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w10_barrier(pads, pid, RANK, WORLD)

    # W11: tl.debug_barrier() placed after the announcement instead of before it.
    @triton.jit
    def w11_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        tl.debug_barrier()
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w11_late_debug_barrier_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                      RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w11_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w11_barrier(pads, pid, RANK, WORLD)

    # W12: announce with atomic_xchg(…, 1): no wait for the peer to have consumed the previous flag.
    @triton.jit
    def w12_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                tl.atomic_xchg(remote + pid * WORLD + RANK, 1, sem="release", scope="sys")
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w12_xchg_announce_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                 RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w12_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w12_barrier(pads, pid, RANK, WORLD)

    # W13: announce with atomic_add(…, 1): a flag not yet consumed becomes 2, and CAS(1 -> 0) never matches.
    @triton.jit
    def w13_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                tl.atomic_add(remote + pid * WORLD + RANK, 1, sem="release", scope="sys")
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w13_add_announce_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w13_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w13_barrier(pads, pid, RANK, WORLD)

    # W14: waits on its own pad, in its own slot (pid * world + rank) instead of the peer's: nobody writes it.
    @triton.jit
    def w14_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + RANK, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w14_own_slot_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                            RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w14_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w14_barrier(pads, pid, RANK, WORLD)

    # W15: waits on the peer's pad, in the slot it has just announced in: it consumes its own announcement,
    # so the barrier never waits for anyone.
    @triton.jit
    def w15_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w15_peer_pad_wait_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                 RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w15_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w15_barrier(pads, pid, RANK, WORLD)

    # W16: one set of slots for all programs (slot = rank, pid left out of the index).
    @triton.jit
    def w16_barrier(pads, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w16_shared_slots_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w16_barrier(pads, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w16_barrier(pads, RANK, WORLD)

    # W17: program 0 alone runs both barriers; the other programs neither wait nor are waited for.
    @triton.jit
    def w17_barrier(pads, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w17_pid0_only_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                             RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        if pid == 0:
            w17_barrier(pads, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        if pid == 0:
            w17_barrier(pads, RANK, WORLD)

    # W18: an epoch barrier: the host passes a call counter, each rank writes 2*epoch (+1 on the way out) in
    # its slot on the peers' pads and waits until its own slots reach it. Right eagerly; inside a graph the
    # epoch is frozen at capture, so from the second replay on the slots already hold it and nobody waits
    # (and the pads are left non-zero, which the library's CAS(0 -> 1) barrier then waits on forever).
    @triton.jit
    def w18_epoch_barrier(pads, pid, target, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                tl.atomic_xchg(remote + pid * WORLD + RANK, target, sem="release", scope="sys")
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                seen = tl.atomic_add(mine + pid * WORLD + peer, 0, sem="acquire", scope="sys").to(tl.int32)
                while seen < target:
                    seen = tl.atomic_add(mine + pid * WORLD + peer, 0, sem="acquire", scope="sys").to(tl.int32)
        tl.debug_barrier()

    @triton.jit
    def w18_epoch_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel, epoch,
                         RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w18_epoch_barrier(pads, pid, 2 * epoch, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w18_epoch_barrier(pads, pid, 2 * epoch + 1, RANK, WORLD)

    # W19: both barriers at the start ("in and out") and none after the reads.
    @triton.jit
    def w19_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w19_both_barriers_first_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                                       RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        w19_barrier(pads, pid, RANK, WORLD)
        w19_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)

    # W20: only the barrier before returning (no wait before reading).
    @triton.jit
    def w20_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    @triton.jit
    def w20_exit_only_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                             RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        w20_barrier(pads, pid, RANK, WORLD)

    # ======================================================================================================
    # WRONG: not races (the barriers are right; the sum, the coverage or the launch is not).
    # A shared, correct barrier for these (the mistake is elsewhere).
    # ======================================================================================================
    @triton.jit
    def nr_barrier(pads, pid, RANK: tl.constexpr, WORLD: tl.constexpr):
        tl.debug_barrier()
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                remote = tl.load(pads + peer).to(tl.pointer_type(tl.uint32))
                while tl.atomic_cas(remote + pid * WORLD + RANK, 0, 1, sem="release", scope="sys") != 0:
                    pass
        mine = tl.load(pads + RANK).to(tl.pointer_type(tl.uint32))
        for peer in tl.static_range(WORLD):
            if peer != RANK:
                while tl.atomic_cas(mine + pid * WORLD + peer, 1, 0, sem="acquire", scope="sys") != 1:
                    pass
        tl.debug_barrier()

    # W21: the mean, not the sum.
    @triton.jit
    def w21_mean_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                        RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, (acc / WORLD).to(tl.bfloat16), mask=mask)
        nr_barrier(pads, pid, RANK, WORLD)

    # W22: accumulates in bfloat16, rounding after every add.
    @triton.jit
    def w22_bf16_acc_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                            RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.bfloat16)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc = (acc + tl.load(src + offs, mask=mask, other=0.0)).to(tl.bfloat16)
            tl.store(out_ptr + offs, acc, mask=mask)
        nr_barrier(pads, pid, RANK, WORLD)

    # W23: own buffer times the world size ("every rank holds the same thing").
    @triton.jit
    def w23_times_world_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                               RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        own = tl.load(bufs + RANK).to(tl.pointer_type(tl.bfloat16))
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.load(own + offs, mask=mask, other=0.0).to(tl.float32) * WORLD
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        nr_barrier(pads, pid, RANK, WORLD)

    # W24: no mask at the tail (loads and stores run a whole tile past numel).
    @triton.jit
    def w24_no_mask_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                           RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16))
        nr_barrier(pads, pid, RANK, WORLD)

    # W25: one program, one tile, no loop: everything past the first 4096 elements is never written.
    @triton.jit
    def w25_one_block_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                             RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, 0, RANK, WORLD)
        offs = tl.arange(0, BLOCK)
        mask = offs < numel
        acc = tl.zeros([BLOCK], dtype=tl.float32)
        for peer in tl.static_range(WORLD):
            src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
            acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
        tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        nr_barrier(pads, 0, RANK, WORLD)

    # W26: numel typed in (2048, the lecture's 4 KB) instead of passed.
    @triton.jit
    def w26_const_numel_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr,
                               RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, 2048, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < 2048
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        nr_barrier(pads, pid, RANK, WORLD)

    # W27: starts the sum from what `out` holds (never initialised: garbage, NaN, or the last call's sum).
    @triton.jit
    def w27_reads_out_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                             RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.load(out_ptr + offs, mask=mask, other=0.0).to(tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)
        nr_barrier(pads, pid, RANK, WORLD)

    # W28 (two kernels): barrier in + sum in one kernel, the barrier out in a second kernel.
    @triton.jit
    def w28_sum_kernel(buffer_ptrs, signal_pad_ptrs, out_ptr, numel,
                       RANK: tl.constexpr, WORLD: tl.constexpr, BLOCK: tl.constexpr):
        pid = tl.program_id(0)
        bufs = buffer_ptrs.to(tl.pointer_type(tl.uint64))
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, pid, RANK, WORLD)
        for start in tl.range(pid * BLOCK, numel, tl.num_programs(0) * BLOCK):
            offs = start + tl.arange(0, BLOCK)
            mask = offs < numel
            acc = tl.zeros([BLOCK], dtype=tl.float32)
            for peer in tl.static_range(WORLD):
                src = tl.load(bufs + peer).to(tl.pointer_type(tl.bfloat16))
                acc += tl.load(src + offs, mask=mask, other=0.0).to(tl.float32)
            tl.store(out_ptr + offs, acc.to(tl.bfloat16), mask=mask)

    @triton.jit
    def w28_exit_barrier_kernel(signal_pad_ptrs, RANK: tl.constexpr, WORLD: tl.constexpr):
        pads = signal_pad_ptrs.to(tl.pointer_type(tl.uint64))
        nr_barrier(pads, tl.program_id(0), RANK, WORLD)


# ==========================================================================================================
# The answers: what the learner writes in the notebook cell.
# ==========================================================================================================

def one_shot_r1_helper(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r1_one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024, num_warps=4)


def one_shot_r2_inline_runtime_rank(buffer, handle, out):
    n = buffer.numel()
    programs = min(32, (n + 4095) // 4096)
    r2_all_reduce_kernel[(programs,)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, n, handle.rank,
                                      WORLD=handle.world_size, BLOCK=4096, num_warps=8)


def one_shot_r3_tile_per_program(buffer, handle, out):
    numel = out.numel()
    block = max(4096, triton.next_power_of_2(triton.cdiv(numel, 32)))  # at most 32 programs
    grid = (triton.cdiv(numel, block),)
    r3_tile_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                         RANK=handle.rank, WORLD=handle.world_size, BLOCK=block, num_warps=8)


def one_shot_r4_generic(buffer, handle, out):
    numel = out.numel()
    grid = (max(1, min(32, triton.cdiv(numel, 4096))),)
    r4_generic_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                            handle.rank, handle.world_size, BLOCK=2048, num_warps=4)


def one_shot_r5_pairwise(buffer, handle, out):
    numel = buffer.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r5_pairwise_kernel[grid](buffer, handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, WORLD=handle.world_size, BLOCK=512, num_warps=2)


def one_shot_r6_acq_rel(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r6_acq_rel_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                            RANK=handle.rank, WORLD=handle.world_size, BLOCK=2048)


def one_shot_r7_two_ranks(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r7_two_rank_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, BLOCK=1024)


def one_shot_w1_no_exit_barrier(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w1_no_exit_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                            RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w2_exit_pid0(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w2_exit_pid0_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                              RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w3_reset_after(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w3_reset_after_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w4_plain_load_spin(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w4_plain_load_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                               RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w5_volatile_load_spin(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w5_volatile_load_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                  RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w6_relaxed(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w6_relaxed_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                            RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w7_gpu_scope(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w7_gpu_scope_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                              RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w8_default_atomics(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w8_default_atomics_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                    RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w9_swapped_sem(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w9_swapped_sem_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w10_no_debug_barrier(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w10_no_debug_barrier_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                      RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w11_debug_barrier_after_announce(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w11_late_debug_barrier_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                        RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w12_xchg_announce(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w12_xchg_announce_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                   RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w13_add_announce(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w13_add_announce_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                  RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w14_wait_own_slot(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w14_own_slot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                              RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w15_wait_on_peer_pad(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w15_peer_pad_wait_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                   RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w16_shared_slots(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w16_shared_slots_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                  RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w17_pid0_barriers(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w17_pid0_only_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                               RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w18_host_epoch(buffer, handle, out):
    # a call counter kept on the function: each call waits for the peers to reach the same call
    one_shot_w18_host_epoch.calls = getattr(one_shot_w18_host_epoch, "calls", 0) + 1
    epoch = one_shot_w18_host_epoch.calls
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w18_epoch_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel, epoch,
                           RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w19_both_barriers_first(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w19_both_barriers_first_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                         RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w20_exit_barrier_only(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w20_exit_only_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                               RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w21_mean(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w21_mean_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                          RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w22_bf16_accumulate(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w22_bf16_acc_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                              RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w23_own_times_world(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w23_times_world_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                                 RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w24_no_tail_mask(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w24_no_mask_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, WORLD=handle.world_size, BLOCK=4096)


def one_shot_w25_one_block(buffer, handle, out):
    numel = out.numel()
    w25_one_block_kernel[(1,)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                               RANK=handle.rank, WORLD=handle.world_size, BLOCK=4096)


def one_shot_w26_typed_in_numel(buffer, handle, out):
    w26_const_numel_kernel[(1,)](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out,
                                 RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w27_reads_uninitialised_out(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w27_reads_out_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                               RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)


def one_shot_w28_two_kernels(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    w28_sum_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                         RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024)
    w28_exit_barrier_kernel[grid](handle.signal_pad_ptrs_dev, RANK=handle.rank, WORLD=handle.world_size)


def one_shot_w29_host_zero(buffer, handle, out):
    out.zero_()  # start from a clean output
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r1_one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024, num_warps=4)


def one_shot_w30_host_sync(buffer, handle, out):
    numel = out.numel()
    grid = (min(32, triton.cdiv(numel, 4096)),)
    r1_one_shot_kernel[grid](handle.buffer_ptrs_dev, handle.signal_pad_ptrs_dev, out, numel,
                             RANK=handle.rank, WORLD=handle.world_size, BLOCK=1024, num_warps=4)
    torch.cuda.synchronize()  # make sure the sum is there before returning


def one_shot_w31_library(buffer, handle, out):
    import torch.distributed as dist

    torch.ops.symm_mem.one_shot_all_reduce_out(buffer, "sum", dist.group.WORLD.group_name, out)


def one_shot_w32_dist_all_reduce(buffer, handle, out):
    import torch.distributed as dist

    out.copy_(buffer)
    dist.all_reduce(out)


ANSWERS = [
    # ---------------------------------------------------------------- right
    ("r1_helper_barrier", "right", one_shot_r1_helper,
     "helper barrier (CAS 0->1 release/sys spin, CAS 1->0 acquire/sys spin, debug_barrier around), in and out; "
     "rank/world constexpr; tl.range loop of 1024 tiles, masked"),
    ("r2_inline_runtime_rank", "right", one_shot_r2_inline_runtime_rank,
     "same protocol written inline twice, rank a runtime argument, peers in rotated order, "
     "`old = cas(); while old != 0` spins, 4096 tiles, num_warps=8"),
    ("r3_tile_per_program", "right", one_shot_r3_tile_per_program,
     "no loop: one tile per program, the grid covers numel (tile grows so that grid <= 32; 256K-element tiles "
     "at 16 MB, ~20 s to compile); separate signal/wait helpers, spins written `== 1` / `== 0`, num_warps=8"),
    ("r4_world_generic_runtime", "right", one_shot_r4_generic,
     "rank and world both runtime ints, dynamic `range(world)` loops with a runtime `if peer != rank`, "
     "2048 tiles"),
    ("r5_pairwise_handshake", "right", one_shot_r5_pairwise,
     "per peer in increasing rank order: announce to it, then wait for it (one global order: no deadlock at "
     "any world); own input read from `buffer`; 512 tiles, num_warps=2"),
    ("r6_acq_rel_both", "right", one_shot_r6_acq_rel,
     "acq_rel (stronger than release/acquire) at sys scope on both CASes; inline; 2048 tiles"),
    ("r7_hardcoded_two_ranks", "right", one_shot_r7_two_ranks,
     "world hard-coded to 2 (peer = 1 - rank, slots pid*2+r, buffers 0 and 1): right on the checker's two "
     "GPUs, would be wrong on four"),
    # ---------------------------------------------------------------- wrong: races
    ("w1_no_exit_barrier", "wrong", one_shot_w1_no_exit_barrier,
     "[subtle] barrier in only: returns while the peer may still be reading its buffer (a slow reader shows it)"),
    ("w2_exit_barrier_pid0_only", "wrong", one_shot_w2_exit_pid0,
     "[subtle] barrier out run by program 0 only: programs 1.. return unsynchronised (only with >4096 "
     "elements and a slow reader; at 4 KB there is one program)"),
    ("w3_reset_after_release", "hangs", one_shot_w3_reset_after,
     "[subtle] xchg announce, look with CAS(1,1), then clear own flags: a peer's exit flag landing between "
     "the look and the clear is wiped, and the exit wait never ends (narrow window)"),
    ("w4_plain_load_spin", "hangs", one_shot_w4_plain_load_spin,
     "spin on a plain non-volatile tl.load then tl.store(0): Triton 3.6 for sm_90 drops the side-effect-free "
     "spin from the PTX altogether, so nobody waits, and flags stored 0 too early stay set later (may deadlock)"),
    ("w5_volatile_load_spin", "wrong", one_shot_w5_volatile_load_spin,
     "[subtle] spin on tl.load(volatile=True) and clear with a plain store: no atomic, no acquire ordering "
     "for the reads that follow"),
    ("w6_relaxed_atomics", "wrong", one_shot_w6_relaxed,
     "[subtle] sem='relaxed' (scope sys) on both CASes: no release of the input, no acquire before reading"),
    ("w7_gpu_scope", "wrong", one_shot_w7_gpu_scope,
     "[subtle] release/acquire but scope='gpu': the peer is another GPU"),
    ("w8_default_sem_scope", "wrong", one_shot_w8_default_atomics,
     "[subtle] tl.atomic_cas(p, 0, 1) with no sem/scope (layer-norm lock style): acq_rel at GPU scope"),
    ("w9_acquire_release_swapped", "wrong", one_shot_w9_swapped_sem,
     "[subtle] announce with sem='acquire', consume with sem='release': neither orders what it must"),
    ("w10_no_debug_barrier", "wrong", one_shot_w10_no_debug_barrier,
     "[subtle] no tl.debug_barrier(): other threads of the program may still read (exit) or start reading "
     "(entry) outside the handshake"),
    ("w11_debug_barrier_after_announce", "wrong", one_shot_w11_debug_barrier_after_announce,
     "[subtle] tl.debug_barrier() after the announce instead of before it: the exit announce can go out "
     "while other warps still read the peer's buffer"),
    ("w12_xchg_announce_no_wait", "hangs", one_shot_w12_xchg_announce,
     "atomic_xchg(slot, 1) announce without waiting for the slot to be free: a flag not yet consumed "
     "absorbs the next one, barriers pair up wrongly, the last wait never ends"),
    ("w13_add_announce_no_wait", "hangs", one_shot_w13_add_announce,
     "atomic_add(slot, 1) announce: an unconsumed flag becomes 2 and CAS(1 -> 0) never matches it again"),
    ("w14_wait_own_slot", "hangs", one_shot_w14_wait_own_slot,
     "waits on own pad at slot pid*world+rank (its own index, not the peer's): nobody ever sets it"),
    ("w15_wait_on_peer_pad", "wrong", one_shot_w15_wait_on_peer_pad,
     "[subtle] waits on the peer's pad in its own slot: consumes its own announcement, so no barrier at all "
     "(eager calls look right)"),
    ("w16_slots_shared_by_programs", "right", one_shot_w16_shared_slots,
     "slot index without pid: all programs of a rank share one slot per peer, a counting barrier: a rank's kernel "
     "ends only once it has consumed every announcement of the peer's call, entry and exit alike (relabelled by "
     "the course; the attacker marked it wrong)"),
    ("w17_program0_alone_barriers", "wrong", one_shot_w17_pid0_barriers,
     "[subtle] `if pid == 0:` around both barriers: programs 1.. read without waiting and return without "
     "being waited for; right at 4 KB (one program)"),
    ("w18_host_epoch_in_graph", "hangs", one_shot_w18_host_epoch,
     "[subtle] epoch barrier fed by a host call counter: right eagerly, but the epoch is frozen in a captured "
     "graph, so from the 2nd replay nobody waits; leaves pads non-zero (library CAS(0->1) then spins)"),
    ("w19_both_barriers_before_reading", "wrong", one_shot_w19_both_barriers_first,
     "[subtle] two barriers back to back at the start, none after the reads: same race as no exit barrier"),
    ("w20_exit_barrier_only", "wrong", one_shot_w20_exit_barrier_only,
     "no barrier before reading: a late-writing rank's old input is read (the lecture's race, half-fixed)"),
    # ---------------------------------------------------------------- wrong: not races
    ("w21_mean_not_sum", "wrong", one_shot_w21_mean,
     "divides the sum by world (the mean)"),
    ("w22_bf16_accumulate", "wrong", one_shot_w22_bf16_accumulate,
     "[subtle] accumulates in bfloat16, rounding after each add: NOT distinguishable by output on two ranks "
     "(0+a exact, a+b rounded once), only by reading the kernel; wrong from three ranks on"),
    ("w23_own_times_world", "wrong", one_shot_w23_own_times_world,
     "writes own buffer times world instead of reading the peers"),
    ("w24_no_tail_mask", "wrong", one_shot_w24_no_tail_mask,
     "no mask: 4096-element tiles read and write past numel (out-of-bounds stores past `out`)"),
    ("w25_one_block_only", "wrong", one_shot_w25_one_block,
     "grid (1,), one 4096 tile, no loop: elements past 4096 never written (right at 4 KB)"),
    ("w26_typed_in_numel", "wrong", one_shot_w26_typed_in_numel,
     "numel typed in as 2048 (the lecture's 4 KB): right at 4 KB only"),
    ("w27_reads_uninitialised_out", "wrong", one_shot_w27_reads_uninitialised_out,
     "starts the sum from `out` (torch.empty garbage/NaN, or the previous call's sum)"),
    ("w28_two_kernels", "wrong", one_shot_w28_two_kernels,
     "right sum and barriers, but the exit barrier is a second kernel: two launches per call"),
    ("w29_host_zero", "wrong", one_shot_w29_host_zero,
     "out.zero_() in the wrapper before the (right) kernel: an extra fill kernel per call"),
    ("w30_host_sync", "wrong", one_shot_w30_host_sync,
     "torch.cuda.synchronize() after the launch: fine eagerly, fails during CUDA-graph capture"),
    ("w31_library_one_shot", "wrong", one_shot_w31_library,
     "calls torch.ops.symm_mem.one_shot_all_reduce_out: right numbers, not your own Triton kernel"),
    ("w32_dist_all_reduce", "wrong", one_shot_w32_dist_all_reduce,
     "out.copy_(buffer); dist.all_reduce(out): NCCL plus a copy, no Triton kernel"),
]

# Wrong answers whose output is right in an ordinary run (or, for w22, on two ranks at all): only adversarial
# timing, more programs than one, graph replays, or a reading of the source can catch them.
SUBTLE = [name for name, _, _, why in ANSWERS if why.startswith("[subtle]")]
