"""ALBERT's LAMB and BERT's AdamW in PyTorch, for the benches that train Hugging Face's
`AlbertForPreTraining` beside our loop (`bench.pretraining_judge`, `bench.small_training`).

Per parameter w with gradient g, as the official `lamb_optimizer.py` (and
`albert_tf/training/optimization.py`): m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
u = m / (sqrt(v) + eps) (no bias correction); u += wd w unless excluded; r = ||w|| / ||u|| (LAMB,
unless excluded; 1 if either is 0); w -= lr r u. Excluded by name: LayerNorm, layer_norm, bias.
The trust ratio stays a tensor (no host sync per parameter).
"""

from __future__ import annotations

import torch

EXCLUDE = ("LayerNorm", "layer_norm", "bias")  # official: no decay, no trust ratio
BETA_1, BETA_2, EPSILON, WEIGHT_DECAY = 0.9, 0.999, 1e-6, 0.01


class TorchAlbertOptimizer:
    """LAMB (`layer_adaptation=True`) or AdamW over `named_parameters`; `step(lr)` after the
    gradients are clipped."""

    def __init__(self, named_parameters, layer_adaptation: bool = True):
        self.params = [(n, p) for n, p in named_parameters if p.requires_grad]
        self.excluded = {n: any(x in n for x in EXCLUDE) for n, _ in self.params}
        self.state = {n: (torch.zeros_like(p), torch.zeros_like(p)) for n, p in self.params}
        self.layer_adaptation = layer_adaptation

    def zero_grad(self):
        for _, p in self.params:
            p.grad = None

    @torch.no_grad()
    def step(self, lr: float):
        for name, p in self.params:
            if p.grad is None:
                continue
            m, v = self.state[name]
            g = p.grad
            m.mul_(BETA_1).add_(g, alpha=1 - BETA_1)
            v.mul_(BETA_2).addcmul_(g, g, value=1 - BETA_2)
            update = m / (v.sqrt() + EPSILON)
            if not self.excluded[name]:
                update = update + WEIGHT_DECAY * p
            if self.layer_adaptation and not self.excluded[name]:
                w_norm, u_norm = p.norm(), update.norm()
                ratio = torch.where((w_norm > 0) & (u_norm > 0),
                                    w_norm / torch.where(u_norm > 0, u_norm, 1.0), 1.0)
                update = update * ratio
            p.sub_(lr * update)
