"""Gemma 2's final-logit soft-capping: the output head's logits become cap x tanh(logits / cap).

Hugging Face transformers Gemma2ForCausalLM.forward (src/transformers/models/gemma2/modeling_gemma2.py
@006e8693) runs it as three eager tensor ops on the tokens x vocabulary logits, before the loss:

    logits = logits / self.config.final_logit_softcapping
    logits = torch.tanh(logits)
    logits = logits * self.config.final_logit_softcapping

with final_logit_softcapping 30.0 (google/gemma-2-9b and -27b config.json); Megatron Bridge's
Gemma2OutputLayer runs the same `scale * torch.tanh(logits / scale)` on its vocabulary-parallel logits
(src/megatron/bridge/models/gemma/gemma2_provider.py, logit_softcapping). Forward: three element-wise
kernels, each reading and writing the logits. Backward, in reverse: the multiplication's (grad x cap:
read one, write one), tanh's (tanh_backward(grad, result): read two, write one; PyTorch
tools/autograd/derivatives.yaml) and the division's (grad / cap). Of the three only tanh keeps a tensor
for backward, its output (`result`); dividing and multiplying by a Python number keep none that needs a
gradient. So each micro-batch holds one more logit-sized tensor, at the logits' 16 bits, until its
backward.
"""

from __future__ import annotations

from scalesim.models.spec import OpSpec

# (kernel, elements its backward reads and writes per logit)
SOFTCAP_KERNELS = (("final_softcap_div", 2), ("final_softcap_tanh", 3), ("final_softcap_mul", 2))
FINAL_SOFTCAP_OPS = tuple(name for name, _ in SOFTCAP_KERNELS)
SOFTCAP_SAVED_BYTES = 2.0           # tanh's 16-bit output, per logit


def final_softcap_ops(tokens: int, vocab: int) -> tuple[OpSpec, ...]:
    """The three eager kernels of final-logit soft-capping over `tokens` x `vocab` logits.

    >>> [(op.name, op.elements_moved, op.backward_elements) for op in final_softcap_ops(2, 10)]
    [('final_softcap_div', 40.0, 40.0), ('final_softcap_tanh', 40.0, 60.0), ('final_softcap_mul', 40.0, 40.0)]
    """
    n = tokens * vocab
    return tuple(OpSpec(name, "elementwise", float(n), 2.0 * n, backward_elements=float(back * n))
                 for name, back in SOFTCAP_KERNELS)
