"""Triton kernels for lab 07 exercise 5's mutation suite: one kernel, each planted mistake a constexpr switch.
Imported only by GPU tests (Triton comes with CUDA builds of PyTorch, not with the CPU tier's)."""

import torch
import triton
import triton.language as tl


@triton.jit
def _kernel(q_ptr, k_ptr, v_ptr, pos_ptr, out_ptr, scale, stride_qb, stride_qh, stride_kb, stride_kh, stride_kt,
            stride_ob, stride_oh, GROUP: tl.constexpr, KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr,
            BLOCK_T: tl.constexpr, INCLUDE_POS: tl.constexpr, MODULO: tl.constexpr, FIRST_POS: tl.constexpr,
            WINDOW: tl.constexpr):
    b, h = tl.program_id(0), tl.program_id(1)
    if MODULO:
        kv = h % KV_HEADS
    else:
        kv = h // GROUP
    d = tl.arange(0, HEAD_DIM)
    q = (tl.load(q_ptr + b * stride_qb + h * stride_qh + d).to(tl.float32) * scale).to(tl.float32)
    if FIRST_POS:
        filled = tl.load(pos_ptr).to(tl.int32) + INCLUDE_POS
    else:
        filled = tl.load(pos_ptr + b).to(tl.int32) + INCLUDE_POS
    if WINDOW > 0:
        filled = tl.minimum(filled, WINDOW)
    m = tl.full([1], float("-inf"), tl.float32)
    total = tl.zeros([1], tl.float32)
    acc = tl.zeros([HEAD_DIM], tl.float32)
    for start in range(0, filled, BLOCK_T):
        t = start + tl.arange(0, BLOCK_T)
        inside = t < filled
        offs = b * stride_kb + kv * stride_kh + t[:, None] * stride_kt + d[None, :]
        k = tl.load(k_ptr + offs, mask=inside[:, None], other=0.0).to(tl.float32)
        s = tl.where(inside, tl.sum(k * q[None, :], axis=1), float("-inf"))
        m_new = tl.maximum(m, tl.max(s, axis=0))
        p = tl.exp(s - m_new)
        alpha = tl.exp(m - m_new)
        v = tl.load(v_ptr + offs, mask=inside[:, None], other=0.0).to(tl.float32)
        acc = acc * alpha + tl.sum(p[:, None] * v, axis=0)
        total = total * alpha + tl.sum(p, axis=0)
        m = m_new
    tl.store(out_ptr + b * stride_ob + h * stride_oh + d, (acc / total).to(out_ptr.dtype.element_ty))


def filled(q, k, v, pos, block_t=64, include_pos=True, modulo=False, first_pos=False, scaled=True, window=0):
    """Attention over each sequence's slots 0..pos[b], with one planted mistake switched on by a keyword."""
    batch, heads, dim = q.shape
    kv_heads = k.shape[1]
    out = torch.empty_like(q)
    _kernel[(batch, heads)](q, k, v, pos, out, dim ** -0.5 if scaled else 1.0, q.stride(0), q.stride(1), k.stride(0),
                            k.stride(1), k.stride(2), out.stride(0), out.stride(1), GROUP=heads // kv_heads,
                            KV_HEADS=kv_heads, HEAD_DIM=dim, BLOCK_T=block_t, INCLUDE_POS=int(include_pos),
                            MODULO=modulo, FIRST_POS=first_pos, WINDOW=window)
    return out
