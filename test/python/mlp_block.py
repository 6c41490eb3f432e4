"""The pre-LayerNorm MLP block step that test_fusion.py and test_buffers.py compile."""

import xtpu


def block_step(x, w1, w2, all_reduce=False):
    """A pre-LayerNorm MLP block with GELU and softmax: its loss and
    SGD-updated weights (the gradients summed over the replicas with
    ``all_reduce``)."""
    with xtpu.GradientTape() as tape:
        tape.watch([w1, w2])
        mu = xtpu.reduce_mean(x, axis=-1, keepdims=True)
        var = xtpu.reduce_mean(xtpu.math.square(x - mu), axis=-1, keepdims=True)
        h = (x - mu) / xtpu.math.sqrt(var + 1e-5)
        a = xtpu.matmul(h, w1)
        g = 0.5 * a * (1.0 + xtpu.math.tanh(0.7978845608 * (a + 0.044715 * a * a * a)))
        y = xtpu.matmul(g, w2) + x
        s = xtpu.nn.softmax(y)
        loss = xtpu.reduce_sum(s * y)
    g1, g2 = tape.gradient(loss, [w1, w2])
    if all_reduce:
        g1, g2 = xtpu.cross_replica_sum(g1), xtpu.cross_replica_sum(g2)
    return loss, w1 - 0.1 * g1, w2 - 0.1 * g2
