"""python research/fp32_logits.py <nexus-agent args>: the CLI with every loaded model's output layer in fp32.

The model's weights and activations stay in their dtype; only the final projection to the vocabulary takes the
(bf16) final hidden state in fp32 against an fp32 copy of the output weights, so the logits are not rounded to bf16.
An experiment (research/memory-notebook.md, "Out of sample, and the logits' own rounding"): how much of bench
replay's top-1 gap is the rounding of the logits.
"""

import sys

import torch
import torch.nn.functional as F

import kvstore.models.registry as models


class F32Head(torch.nn.Module):
    def __init__(self, head: torch.nn.Linear):
        super().__init__()
        self.weight32 = head.weight.detach().float()
        self.bias32 = None if head.bias is None else head.bias.detach().float()

    def forward(self, h):
        return F.linear(h.float(), self.weight32, self.bias32)


_load = models.load_model


def load_model(*a, **k):
    model, tok, info = _load(*a, **k)
    model.lm_head = F32Head(model.lm_head)
    return model, tok, info


models.load_model = load_model
import cli.app  # noqa: E402  (every caller imports load_model from kvstore.models.registry when it runs)

sys.argv = ["nexus-agent"] + sys.argv[1:]
cli.app.main()
